"""Class 4: network — egress to the internet, the host's loopback services (the daemon's own
port), raw and packet sockets, AF_VSOCK / AF_ALG, binding ports (they exist only inside)."""
import errno
import socket

import pytest

from helpers.daemon import free_port

pytestmark = pytest.mark.cellbox_only

EPERM, ENETUNREACH, ECONNREFUSED, EAFNOSUPPORT = 1, errno.ENETUNREACH, errno.ECONNREFUSED, errno.EAFNOSUPPORT


def connect_results(kernel, targets, kind="tcp"):
    return kernel.json(f"""
import socket
_result = {{}}
for host, port in {list(targets)!r}:
    fam = socket.AF_INET6 if ':' in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM if {kind!r} == 'tcp' else socket.SOCK_DGRAM)
    s.settimeout(5)
    try:
        if {kind!r} == 'tcp':
            s.connect((host, port))
        else:
            s.sendto(b'\\x12\\x34\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x07example\\x03com\\x00\\x00\\x01\\x00\\x01', (host, port))
        _result[f'{{host}}:{{port}}'] = 'connected'
    except OSError as e:
        _result[f'{{host}}:{{port}}'] = e.errno if e.errno is not None else repr(e)
    finally:
        s.close()
""")


def test_tcp_egress_to_internet_fails(box, hostile):
    got = connect_results(hostile, [("1.1.1.1", 53), ("8.8.8.8", 53), ("8.8.8.8", 443),
                                    ("2606:4700:4700::1111", 53)])
    for target, outcome in got.items():
        assert outcome in (ENETUNREACH, errno.EHOSTUNREACH), f"{target}: {outcome}"
    assert got["1.1.1.1:53"] == ENETUNREACH
    box.assert_contained()


def test_udp_egress_and_dns_fail(box, hostile):
    got = connect_results(hostile, [("8.8.8.8", 53), ("1.1.1.1", 53)], kind="udp")
    for target, outcome in got.items():
        assert outcome == ENETUNREACH, f"{target}: {outcome}"
    got = hostile.json("""
import socket
try:
    _result = socket.getaddrinfo('example.com', 80)
except socket.gaierror as e:
    _result = ['gaierror', e.errno]
""")
    assert got[0] == "gaierror", f"name resolution worked in the sandbox: {got}"
    box.assert_contained()


def test_daemon_port_on_loopback_is_refused(box, hostile):
    """127.0.0.1 inside is the sandbox's own loopback: the daemon's port (and any other host
    loopback service) is not there."""
    got = connect_results(hostile, [("127.0.0.1", box.daemon.port), ("::1", box.daemon.port),
                                    ("127.0.0.53", 53), ("127.0.0.1", 22)])
    for target, outcome in got.items():
        assert outcome in (ECONNREFUSED, errno.EADDRNOTAVAIL, ENETUNREACH), f"{target}: {outcome}"
    assert got[f"127.0.0.1:{box.daemon.port}"] == ECONNREFUSED
    box.assert_contained()


def test_host_addresses_unreachable(box, hostile):
    """The host's own non-loopback addresses are not reachable either."""
    addrs = set()
    for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
        if not info[4][0].startswith("127."):
            addrs.add(info[4][0])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
            addrs.add(s.getsockname()[0])
        except OSError:
            pass
    addrs.discard("0.0.0.0")
    if not addrs:
        pytest.skip("this host has no non-loopback IPv4 address")
    got = connect_results(hostile, [(a, box.daemon.port) for a in sorted(addrs)])
    for target, outcome in got.items():
        assert outcome in (ENETUNREACH, errno.EHOSTUNREACH), f"{target}: {outcome}"
    box.assert_contained()


def test_only_loopback_interface(box, hostile):
    got = hostile.json("""
import socket
_result = {'ifaces': [n for _, n in socket.if_nameindex()],
           'route': open('/proc/net/route').read().splitlines()[1:]}
""")
    assert got["ifaces"] == ["lo"], got
    assert got["route"] == [], f"the sandbox has routes: {got['route']}"
    box.assert_contained()


@pytest.mark.parametrize("family,kind,proto,name", [
    (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP, "raw-icmp"),
    (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW, "raw-ip"),
    (socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6, "raw-icmp6"),
    (17, socket.SOCK_RAW, 0x0300, "AF_PACKET"),
    (40, socket.SOCK_STREAM, 0, "AF_VSOCK"),
    (38, socket.SOCK_SEQPACKET, 0, "AF_ALG"),
    (4, socket.SOCK_DGRAM, 0, "AF_IPX"),
    (31, socket.SOCK_SEQPACKET, 1, "AF_BLUETOOTH"),
])
def test_dangerous_socket_families_refused(box, hostile, family, kind, proto, name):
    got = hostile.json(f"""
import socket
try:
    socket.socket({family}, {kind}, {proto}).close(); _result = 'created'
except OSError as e:
    _result = e.errno
""")
    assert got == EPERM, f"socket {name}: {got}"
    box.assert_contained()


def test_socket_family_with_high_bits_refused(box, hostile):
    """The family is an int: AF_VSOCK with high bits set in the 64-bit register must not slip
    past the filter (the kernel would truncate it to 40)."""
    got = hostile.json("""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
_result = {}
for fam in (40, 38, 17):
    fd = libc.syscall(41, ctypes.c_long((1 << 32) | fam), 1, 0)
    _result[fam] = [fd, ctypes.get_errno()]
""")
    for fam, (fd, err) in got.items():
        assert fd == -1 and err in (EPERM, EAFNOSUPPORT), f"family {fam} with high bits: fd={fd} errno={err}"
    box.assert_contained()


def test_bound_port_exists_only_inside(box, hostile):
    """A sandbox may listen (useful for local servers) but only its own loopback sees it."""
    port = free_port()
    got = hostile.json(f"""
import socket
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(('0.0.0.0', {port})); srv.listen(4)
c = socket.create_connection(('127.0.0.1', {port}), timeout=5)
peer, _ = srv.accept(); c.sendall(b'ping'); data = peer.recv(4)
_result = {{'inside': data.decode()}}
LISTENER = srv
""")
    assert got["inside"] == "ping"
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    hostile.ok("LISTENER.close(); c.close(); peer.close()")
    box.assert_contained()


def test_netlink_cannot_reconfigure_interfaces(box, hostile):
    """AF_NETLINK is allowed (for if_nameindex and friends) but changing links or addresses
    needs CAP_NET_ADMIN."""
    got = hostile.json("""
import fcntl, socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
SIOCGIFFLAGS, SIOCSIFFLAGS, SIOCSIFADDR = 0x8913, 0x8914, 0x8916
ifr = struct.pack('16sH14x', b'lo', 0)
flags = struct.unpack('16sH14x', fcntl.ioctl(s, SIOCGIFFLAGS, ifr))[1]
_result = {}
try:
    fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack('16sH14x', b'lo', flags & ~1)); _result['down'] = 'done'
except OSError as e:
    _result['down'] = e.errno
addr = struct.pack('16sH2s4s8x', b'lo', socket.AF_INET, b'\\0\\0', socket.inet_aton('10.9.8.7'))
try:
    fcntl.ioctl(s, SIOCSIFADDR, addr); _result['addr'] = 'done'
except OSError as e:
    _result['addr'] = e.errno
""")
    assert got == {"down": EPERM, "addr": EPERM}, got
    box.assert_contained()


def test_network_request_refused_without_allow_network(box):
    r = box.client.post("api/kernels", json={"network": True})
    assert r.status_code == 403, r.text
    assert "--allow-network" in r.json()["message"]
    r = box.client.post("api/kernels", json={"env": {"KERNEL_CELLBOX_NETWORK": "1"}})
    assert r.status_code == 403, r.text
    box.assert_contained()
