"""Class 4 with network on: a sandbox created with "network": true (cellboxd --allow-network) has
an interface of its own (sandbox/network.c) and reaches an outside host, and nothing else: not
the host (any of its addresses, its loopback, cellboxd's port with a valid token), not another
sandbox, not 169.254.169.254, not a private range; raw sockets and spoofed sources fail; a
sandbox without network still has none. The outside host is a network namespace this module
makes (helpers/outside_host.py, an address of 203.0.113.0/24); nothing else is ever addressed
but loopback, the sandboxes' own range and the documentation/private addresses that must fail."""
import errno
import json
import select
import subprocess

import pytest

from helpers.network_ranges import gateway_of_range, sandbox_range
from helpers.outside_host import outside_host

pytestmark = pytest.mark.cellbox_only

RANGE = sandbox_range(0)
DAEMON_ARGS = ["--allow-network", "--network-range", RANGE]
SPOOFED_NEIGHBOUR = RANGE.rsplit(".", 1)[0] + ".200"  # in the range, no sandbox's address
OUTSIDE_TEXT = b"hello from the outside host\n"
FAILED_TO_CONNECT = ("timeout", errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ECONNREFUSED,
                     errno.EPERM, errno.EACCES)


@pytest.fixture(scope="module")
def outside():
    with outside_host({"hello.txt": OUTSIDE_TEXT}) as host:
        yield host


@pytest.fixture(scope="module")
def networked(box):
    return box.kernel(network=True)


def connect_results(kernel, targets, timeout=3):
    """{"host:port": "connected" | errno | "timeout"} for TCP connects from inside."""
    return kernel.json(f"""
import socket
_result = {{}}
for host, port in {list(targets)!r}:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout({timeout})
    try:
        s.connect((host, port))
        _result[f'{{host}}:{{port}}'] = 'connected'
    except socket.timeout:
        _result[f'{{host}}:{{port}}'] = 'timeout'
    except OSError as e:
        _result[f'{{host}}:{{port}}'] = e.errno
    finally:
        s.close()
""", timeout=120)


def fetch(kernel, url):
    return kernel.json(f"""
import urllib.request
try:
    _result = urllib.request.urlopen({url!r}, timeout=10).read().decode()
except Exception as e:
    _result = 'failed: ' + repr(e)
""", timeout=60)


def interfaces(kernel):
    return kernel.json("""
import socket
_result = {'names': sorted(n for _, n in socket.if_nameindex()),
           'routes': open('/proc/net/route').read().splitlines()[1:],
           'ipv6': open('/proc/net/if_inet6').read().split() if __import__('os').path.exists('/proc/net/if_inet6') else [],
           'address': None}
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(('203.0.113.1', 9))
    _result['address'] = s.getsockname()[0]; s.close()
except OSError as e:
    _result['address'] = e.errno
""")


def gateway_of(kernel):
    return kernel.json("""
import socket, struct
gw = None
for line in open('/proc/net/route').read().splitlines()[1:]:
    f = line.split()
    if f[1] == '00000000':
        gw = socket.inet_ntoa(struct.pack('<I', int(f[2], 16)))
_result = gw
""")


def test_networked_sandbox_fetches_from_the_outside_host(box, networked, outside):
    got = interfaces(networked)
    assert got["names"] == ["eth0", "lo"], got
    assert str(got["address"]).startswith(RANGE.rsplit(".", 1)[0] + "."), got
    assert fetch(networked, outside.url + "hello.txt") == OUTSIDE_TEXT.decode()
    box.assert_contained()


def test_networked_sandbox_has_no_ipv6(box, networked):
    got = interfaces(networked)
    assert [a for a in got["ipv6"] if len(a) == 32] == [], got["ipv6"]
    box.assert_contained()


def test_sandbox_without_network_still_has_none(box, outside):
    plain = box.neighbour
    got = interfaces(plain)
    assert got["names"] == ["lo"] and got["routes"] == [], got
    assert fetch(plain, outside.url + "hello.txt").startswith("failed:")
    box.assert_contained()


def test_host_does_not_answer(box, networked, outside):
    """Every address of the host, its gateway address included, with cellboxd's port and other
    ports; 127.0.0.1 inside is the sandbox's own loopback. (Port 53 of the gateway is the
    sandboxes' resolver: test_network_resolver.py shows it answers DNS and nothing else.)"""
    gateway = gateway_of(networked)
    assert gateway == gateway_of_range(RANGE)
    port = box.daemon.port
    host_addresses = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True,
                                    text=True, timeout=20).stdout.split()
    addresses = sorted({w.split("/")[0] for w in host_addresses if w.count(".") == 3 and "/" in w
                        and not w.startswith("127.")} | {outside.host_side, gateway})
    targets = [(a, port) for a in addresses] + [(gateway, 22), (gateway, 80), (outside.host_side, 22)]
    got = connect_results(networked, targets)
    for target, outcome in got.items():
        assert outcome in FAILED_TO_CONNECT, f"{target}: {outcome}"
    assert connect_results(networked, [("127.0.0.1", port)])[f"127.0.0.1:{port}"] == errno.ECONNREFUSED
    # cellboxd's API with a valid token, at the gateway: never reached.
    answer = networked.json(f"""
import urllib.request
try:
    r = urllib.request.Request('http://{gateway}:{port}/api', headers={{'Authorization': 'token {box.daemon.token}'}})
    _result = urllib.request.urlopen(r, timeout=3).status
except Exception as e:
    _result = 'failed: ' + type(e).__name__
""")
    assert str(answer).startswith("failed:"), answer
    box.assert_contained()


def test_metadata_and_private_ranges_unreachable(box, networked):
    got = connect_results(networked, [("169.254.169.254", 80), ("10.0.0.1", 80), ("172.16.0.1", 80),
                                      ("192.168.0.1", 80), ("100.64.0.1", 80)])
    for target, outcome in got.items():
        assert outcome in FAILED_TO_CONNECT, f"{target}: {outcome}"
    box.assert_contained()


def test_another_sandbox_unreachable(box, networked):
    """A second networked sandbox listens on its address; the first cannot connect to it (the
    listener answers its own sandbox, so the listener is real)."""
    other = box.kernel(network=True)
    try:
        address = interfaces(other)["address"]
        other.ok("import socket\nLISTENER = socket.socket()\nLISTENER.setsockopt(socket.SOL_SOCKET, "
                 "socket.SO_REUSEADDR, 1)\nLISTENER.bind(('0.0.0.0', 8000))\nLISTENER.listen(8)\n")
        assert connect_results(other, [(address, 8000)])[f"{address}:8000"] == "connected"
        got = connect_results(networked, [(address, 8000)])
        assert got[f"{address}:8000"] in FAILED_TO_CONNECT, got
    finally:
        other.delete()
        box.kernels.remove(other)
    box.assert_contained()


def test_raw_sockets_and_spoofed_sources_fail(box, networked, outside):
    """No raw socket; a UDP datagram sent from an address that is not the sandbox's (IP_FREEBIND
    needs no privilege) never reaches the outside host, while one from its own address does."""
    got = networked.json("""
import socket
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW).close(); _result = 'created'
except OSError as e:
    _result = e.errno
""")
    assert got == errno.EPERM
    listener = subprocess.Popen(
        ["ip", "netns", "exec", outside.namespace, "/usr/bin/python3", "-c",
         "import socket, json, sys\n"
         f"s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('{outside.address}', 5353))\n"
         "print('ready', flush=True); s.settimeout(8); seen = []\n"
         "try:\n"
         "    for _ in range(10):\n"
         "        data, (source, _) = s.recvfrom(100); seen.append([data.decode(), source])\n"
         "except socket.timeout: pass\n"
         "print(json.dumps(seen))\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        # The sandbox sends only once the listener is bound (bounded: 20 s), so a slow start
        # of the listener under load is never read as the sandbox's datagram being dropped.
        ready, _, _ = select.select([listener.stdout], [], [], 20)
        assert ready and listener.stdout.readline().strip() == "ready", "the outside listener did not start"
        sent = networked.json(f"""
import socket
IP_FREEBIND = 15
_result = {{}}
for name, source in (('spoofed-neighbour', {SPOOFED_NEIGHBOUR!r}), ('spoofed-outside', '203.0.113.250'), ('own', None)):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, IP_FREEBIND, 1)
    try:
        if source:
            s.bind((source, 0))
        s.sendto(name.encode(), ({outside.address!r}, 5353))
        _result[name] = 'sent'
    except OSError as e:
        _result[name] = e.errno
    s.close()
""")
        out, _ = listener.communicate(timeout=30)
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait(timeout=10)
    seen = json.loads(out)
    names = [name for name, _ in seen]
    assert "own" in names, f"the sandbox's own datagram did not arrive: {seen} ({sent})"
    assert "spoofed-neighbour" not in names and "spoofed-outside" not in names, seen
    box.assert_contained()
