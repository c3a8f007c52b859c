"""Class 4, the sandboxes' resolver: a networked sandbox asks cellboxd's dnsmasq on its gateway
(sandbox/network_dns.c), which forwards to the test internet's DNS server. A name whose answer
points at the host or its networks (host.test -> 127.0.0.1, private.test -> 10.1.2.3,
metadata.test -> 169.254.169.254: the upstream really answers them so, checked from the host) is
answered with nothing inside, while --network-dns-rebind-ok lets only the names that must pass
(web.test, pkg.test) point at documentation space; and the gateway answers DNS and nothing else
(cellboxd's port, other TCP and UDP ports closed). Each attack ends with a second networked
sandbox still resolving and the host unchanged.

Addresses: the test internet's (helpers/test_internet.py: 198.51.100.0/24, 203.0.113.0/24), the
sandboxes' own range and gateway; the host's addresses only as destinations that must fail."""
import subprocess

import pytest

from helpers.dns_query import SOURCE as DNS_QUERY_SOURCE, dns_query
from helpers.network_ranges import gateway_of_range, sandbox_range
from helpers.test_internet import DNS_ADDRESS, WEB_ADDRESS, small_internet

pytestmark = pytest.mark.cellbox_only

RANGE = sandbox_range(3)
GATEWAY = gateway_of_range(RANGE)
DAEMON_ARGS = ["--allow-network", "--network-range", RANGE, "--network-dns-upstream", DNS_ADDRESS,
               "--network-dns-rebind-ok", "web.test,pkg.test"]
POINTING_AT_THE_HOST = {"host.test": "127.0.0.1", "private.test": "10.1.2.3",
                        "metadata.test": "169.254.169.254"}



@pytest.fixture(scope="module")
def internet():
    with small_internet(big_file_bytes=1024 * 1024) as world:
        yield world


@pytest.fixture(scope="module")
def networked(box):
    return box.kernel(network=True)


def resolve_inside(kernel, names):
    """{name: [addresses]} by the sandbox's own resolver library (its resolv.conf)."""
    return kernel.json(f"""
import socket
_result = {{}}
for name in {list(names)!r}:
    try:
        _result[name] = sorted(socket.gethostbyname_ex(name)[2])
    except OSError as e:
        _result[name] = []
""", timeout=60)


def query_inside(kernel, name, port=53):
    return kernel.json(DNS_QUERY_SOURCE + f"\n_result = dns_query({name!r}, {GATEWAY!r}, {port})\n", timeout=60)


def query_from_host(name):
    return dns_query(name, DNS_ADDRESS)


def assert_a_neighbour_still_resolves(box):
    other = box.kernel(network=True)
    try:
        assert resolve_inside(other, ["web.test"]) == {"web.test": [WEB_ADDRESS]}
    finally:
        other.delete()
        box.kernels.remove(other)


def test_answers_pointing_at_the_host_are_refused(box, internet, networked):
    # The attack is real: the upstream does answer these names with the host's addresses.
    for name, address in POINTING_AT_THE_HOST.items():
        assert query_from_host(name) == f"RCODE=0 {address}", name
    got = resolve_inside(networked, ["web.test", *POINTING_AT_THE_HOST])
    assert got["web.test"] == [WEB_ADDRESS], got
    for name in POINTING_AT_THE_HOST:
        assert got[name] == [], f"{name} resolved inside the sandbox to {got[name]}"
        answer = query_inside(networked, name)
        assert not any(a in answer for a in POINTING_AT_THE_HOST.values()), f"{name}: {answer}"
    assert_a_neighbour_still_resolves(box)
    box.assert_contained()


def test_the_gateway_answers_dns_and_nothing_else(box, internet, networked):
    assert query_inside(networked, "web.test") == f"RCODE=0 {WEB_ADDRESS}"
    port = box.daemon.port
    got = networked.json(f"""
import socket
_result = {{}}
for p in ({port}, 22, 80, 443, 853, 8080):
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect(({GATEWAY!r}, p)); _result['tcp/%d' % p] = 'connected'
    except socket.timeout:
        _result['tcp/%d' % p] = 'timeout'
    except OSError as e:
        _result['tcp/%d' % p] = e.errno
    finally:
        s.close()
""", timeout=120)
    for target, outcome in got.items():
        assert outcome != "connected", f"{GATEWAY} {target}: {outcome}"
    for udp_port in (67, 123, 5353):
        assert query_inside(networked, "web.test", port=udp_port) == "NOANSWER", udp_port
    # cellboxd's API with a valid token, at the gateway: never reached.
    answer = networked.json(f"""
import urllib.request
try:
    r = urllib.request.Request('http://{GATEWAY}:{port}/api', headers={{'Authorization': 'token {box.daemon.token}'}})
    _result = urllib.request.urlopen(r, timeout=3).status
except Exception as e:
    _result = 'failed: ' + type(e).__name__
""")
    assert str(answer).startswith("failed:"), answer
    # Nothing listens on the gateway of the host's but the resolver (and it only on port 53).
    listening = subprocess.run(["ss", "-Hlntu", "src", GATEWAY], capture_output=True, text=True,
                               timeout=20).stdout.split()
    ports = {word.rsplit(":", 1)[1] for word in listening if word.startswith(GATEWAY + ":")}
    assert ports == {"53"}, listening
    assert_a_neighbour_still_resolves(box)
    box.assert_contained()
