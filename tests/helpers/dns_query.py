"""One DNS query (type A) over UDP, with no resolver library in the way: what a test sends to a
resolver and reads back, whether it runs on the host, in a test namespace or inside a sandbox.

`SOURCE` is the text of `dns_query` alone (standard library only), for code that runs elsewhere:
`python3 -c SOURCE + "print(dns_query(name, server))"` in a namespace, or a cell's code.
dns_query(name, server, port=53) answers "RCODE=<n> <address>..." or "NOANSWER" (3 tries, 1 s
each)."""

SOURCE = r"""
import random, socket, struct
def dns_query(name, server, port=53):
    question = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
    packet = struct.pack(">HHHHHH", random.randrange(65536), 0x0100, 1, 0, 0, 0) + question
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1.0)
    try:
        for attempt in range(3):
            try:
                s.sendto(packet, (server, port))
                reply = s.recv(4096)
                break
            except (socket.timeout, ConnectionRefusedError):
                continue
        else:
            return "NOANSWER"
    finally:
        s.close()
    flags, qd, an = struct.unpack(">HHH", reply[2:8])
    at, addresses = 12 + len(question), []
    for _ in range(an):
        while reply[at] != 0 and reply[at] < 0xC0:
            at += reply[at] + 1
        at += 2 if reply[at] >= 0xC0 else 1
        rtype, rclass, ttl, length = struct.unpack(">HHIH", reply[at:at + 10])
        at += 10
        if rtype == 1:
            addresses.append(socket.inet_ntoa(reply[at:at + 4]))
        at += length
    return ("RCODE=%d " % (flags & 0xF)) + " ".join(addresses)
"""

_namespace = {}
exec(SOURCE, _namespace)
dns_query = _namespace["dns_query"]
