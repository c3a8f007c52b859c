"""Domain names in a networked sandbox's egress lists, end to end (sandbox/network.c with
sandbox/network_dns.c): the daemon's resolver (dnsmasq on the sandboxes' gateway, forwarding to
the test internet's DNS server) answers a sandbox, fills the set of each listed domain with what
it answered, and the sandbox's chain admits or refuses those addresses; the operator's
--network-deny-out holds over a request's allowOut; a delete forgets the sandbox's sets; a stop
ends the resolver and removes its files; a start after SIGKILL stops the resolver the dead
daemon left.

The outside hosts are the tests' own small internet (helpers/test_internet.py): web.test is
203.0.113.10, pkg.test the index at 203.0.113.20, the DNS server 198.51.100.53; nothing else is
ever addressed but the sandboxes' own range."""
import hashlib
import os
import signal
import subprocess
import tempfile

import pytest

from helpers.daemon import Daemon, finish_or_fail, run_daemon_to_exit
from helpers.network_ranges import gateway_of_range, sandbox_range
from helpers.test_internet import DNS_ADDRESS, INDEX_ADDRESS, WEB_ADDRESS, small_internet
from helpers.v1 import V1
from helpers.wait import wait_until

pytestmark = pytest.mark.cellbox_only

# The module's daemon takes one range of this run's, the daemons of single tests another.
RANGE = sandbox_range(1)
OTHER_RANGE = sandbox_range(2)


def resolver_args(network_range):
    return ["--allow-network", "--network-range", network_range, "--network-dns-upstream",
            DNS_ADDRESS, "--network-dns-rebind-ok", "test"]


RESOLVER_ARGS = resolver_args(RANGE)

REACH = """
import socket, urllib.request
def _reach(url):
    try:
        return urllib.request.urlopen(url, timeout=3).status
    except Exception as e:
        return 'failed: ' + type(e).__name__
_resolved = {}
for _name in ('web.test', 'pkg.test'):
    try:
        _resolved[_name] = socket.gethostbyname(_name)
    except OSError as e:
        _resolved[_name] = 'failed: ' + type(e).__name__
{'resolved': _resolved,
 'web.test': _reach('http://web.test/'), 'pkg.test': _reach('http://pkg.test/simple/'),
 'web': _reach('http://%s/'), 'index': _reach('http://%s/simple/')}
""" % (WEB_ADDRESS, INDEX_ADDRESS)


def block_of(daemon):
    with open(os.path.join(daemon.data_dir, "uid-block")) as f:
        return int(f.read().split()[0])


def our_links(block):
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True,
                         timeout=20).stdout
    return sorted(line.split(":")[1].strip().split("@")[0] for line in out.splitlines()
                  if line.split(":")[1].strip().startswith(f"cbx{block}-"))


def our_table(block):
    """The table's text, or None when it does not exist."""
    out = subprocess.run(["nft", "list", "table", "inet", f"cellbox_{block}"], capture_output=True,
                         text=True, timeout=20)
    return out.stdout if out.returncode == 0 else None


def reach(v1, sid):
    """What the sandbox reaches: each name resolved, each server by name and by address (after
    the names were resolved, so a listed domain's set holds its address)."""
    return eval(v1.value(sid, REACH))  # the repr of a dict of str and int


def set_name(domain):
    return "dns_" + hashlib.sha256(domain.encode()).hexdigest()[:16]


def resolver_files(daemon):
    return sorted(n for n in os.listdir(daemon.data_dir) if n.startswith("resolver-"))


def resolver_pid(daemon):
    with open(os.path.join(daemon.data_dir, f"resolver-cellbox_{block_of(daemon)}.pid")) as f:
        return int(f.read())


def is_our_dnsmasq(pid, daemon):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return argv[0] == b"dnsmasq" and any(daemon.data_dir.encode() in a for a in argv)


@pytest.fixture(scope="module")
def internet():
    with small_internet(big_file_bytes=1024 * 1024) as world:
        yield world


@pytest.fixture(scope="module")
def v1_domains(internet):
    d = Daemon(args=RESOLVER_ARGS)
    d.start()
    client = V1(d)
    try:
        yield client
    finally:
        client.cleanup()
        finish_or_fail(d)


def test_a_networked_sandbox_resolves_through_its_gateway(v1_domains):
    box = v1_domains.create(timeout_s=0, network=True)
    ev = v1_domains.command(box["id"], "cat /etc/resolv.conf; getent hosts web.test")
    gateway = gateway_of_range(RANGE)
    assert f"nameserver {gateway}" in ev.stdout, ev.stdout
    assert f"{WEB_ADDRESS}" in ev.stdout and "web.test" in ev.stdout, (ev.stdout, ev.stderr)
    v1_domains.remove(box["id"])


def test_allow_out_by_domain_and_a_change_of_it(v1_domains):
    """allowOut ["web.test"] with denyOut everything: the web server by name and by address, not
    the index; PUT to ["pkg.test"]: the opposite."""
    box = v1_domains.create(timeout_s=0, network={"allowOut": ["web.test"], "denyOut": ["0.0.0.0/0"]})
    sid = box["id"]
    got = reach(v1_domains, sid)
    assert got["resolved"] == {"web.test": WEB_ADDRESS, "pkg.test": INDEX_ADDRESS}, got
    assert got["web.test"] == 200 and got["web"] == 200, got
    assert got["pkg.test"].startswith("failed") and got["index"].startswith("failed"), got
    r = v1_domains.put(f"v1/sandboxes/{sid}/network", json={"allowOut": ["pkg.test"], "denyOut": ["0.0.0.0/0"]})
    assert r.status_code == 200, r.text
    got = reach(v1_domains, sid)
    assert got["pkg.test"] == 200 and got["index"] == 200, got
    assert got["web.test"].startswith("failed") and got["web"].startswith("failed"), got
    table = our_table(block_of(v1_domains.daemon))
    assert set_name("pkg.test") in table and set_name("web.test") not in table, table
    v1_domains.remove(sid)


def test_deny_out_by_domain_blocks_it_alone(v1_domains):
    box = v1_domains.create(timeout_s=0, network={"denyOut": ["*.web.test", "web.test"]})
    got = reach(v1_domains, box["id"])
    assert got["web.test"].startswith("failed") and got["web"].startswith("failed"), got
    assert got["pkg.test"] == 200 and got["index"] == 200, got
    v1_domains.remove(box["id"])


def test_a_name_under_two_listed_domains_fills_both_sets(v1_domains):
    """dnsmasq fills only the sets of the most specific matching domain: www.web.test's answer
    must reach the set of the first sandbox's web.test too, although the second sandbox lists
    www.web.test (the test DNS answers every name under web.test with its address)."""
    first = v1_domains.create(timeout_s=0, network={"allowOut": ["web.test"], "denyOut": ["0.0.0.0/0"]})
    second = v1_domains.create(timeout_s=0, network={"allowOut": ["www.web.test"], "denyOut": ["0.0.0.0/0"]})
    got = eval(v1_domains.value(first["id"], """
import urllib.request
try:
    _r = urllib.request.urlopen('http://www.web.test/', timeout=3).status
except Exception as e:
    _r = 'failed: ' + type(e).__name__
_r"""))
    assert got == 200, got
    for box in (first, second):
        v1_domains.remove(box["id"])


def test_bad_domains_are_refused_by_name(v1_domains):
    r = v1_domains.post("v1/sandboxes", json={"network": {"allowOut": ["web..test"]}})
    assert r.status_code == 400, r.text
    message = r.json()["message"]
    assert "allowOut" in message and "web..test" in message and "example.com" in message, message
    box = v1_domains.create(timeout_s=0, network=True)
    r = v1_domains.put(f"v1/sandboxes/{box['id']}/network", json={"denyOut": ["*.com"]})
    assert r.status_code == 400 and "*.com" in r.json()["message"], r.text
    too_many = [f"d{i}.web.test" for i in range(65)]
    r = v1_domains.put(f"v1/sandboxes/{box['id']}/network", json={"allowOut": too_many})
    assert r.status_code == 400 and "at most 64" in r.json()["message"], r.text
    v1_domains.remove(box["id"])


def test_a_deleted_sandbox_leaves_no_set(v1_domains):
    block = block_of(v1_domains.daemon)
    box = v1_domains.create(timeout_s=0, network={"allowOut": ["web.test"], "denyOut": ["pkg.test"]})
    table = our_table(block)
    assert set_name("web.test") in table and set_name("pkg.test") in table, table
    v1_domains.remove(box["id"])
    wait_until(lambda: "dns_" not in (our_table(block) or ""), timeout=30,
               message="the deleted sandbox's domain sets to go")


def test_the_operators_deny_list_holds_over_allow_out(internet):
    d = Daemon(args=resolver_args(OTHER_RANGE) + ["--network-deny-out", f"web.test,{INDEX_ADDRESS}/32"])
    d.start()
    v1 = V1(d)
    try:
        box = v1.create(timeout_s=0, network={"allowOut": ["web.test", INDEX_ADDRESS, "0.0.0.0/0"]})
        got = reach(v1, box["id"])
        assert got["resolved"]["web.test"] == WEB_ADDRESS, got
        assert all(str(got[k]).startswith("failed") for k in ("web.test", "web", "pkg.test", "index")), got
        v1.remove(box["id"])
    finally:
        v1.cleanup()
        finish_or_fail(d)


def refused_start(args):
    """cellboxd run with `args` on a data directory of its own until it exits: (its stderr, its
    uid block, the resolver's files left in the data directory)."""
    with tempfile.TemporaryDirectory(prefix="cellbox-test-refused-") as data_dir:
        done = run_daemon_to_exit(["--ip", "127.0.0.1", "--port", "0", "--token", "t" * 32,
                                   "--data-dir", data_dir, *args], timeout=60)
        assert done.returncode != 0, done.stderr
        with open(os.path.join(data_dir, "uid-block")) as f:
            block = int(f.read().split()[0])
        return done.stderr, block, sorted(n for n in os.listdir(data_dir) if n.startswith("resolver-"))


def test_a_bad_operator_deny_list_stops_the_start_leaving_nothing(internet):
    stderr, block, files = refused_start(resolver_args(OTHER_RANGE) +
                                         ["--network-deny-out", "web.test,bad!name.test"])
    assert "--network-deny-out" in stderr and "'bad!name.test'" in stderr, stderr
    assert files == [] and our_table(block) is None and our_links(block) == []


def test_a_second_daemon_on_the_same_range_is_refused(v1_domains):
    stderr, block, files = refused_start(RESOLVER_ARGS)
    # The first daemon's gateway (on its cbx<block>-gw) is routed inside the range: the start
    # names the route (or, were it not routed, the address) and says what to do.
    assert ("is in use on this host" in stderr and "-gw" in stderr) or \
        "is already an address of this host" in stderr, stderr
    assert block != block_of(v1_domains.daemon)
    assert files == [] and our_table(block) is None and our_links(block) == []
    box = v1_domains.create(timeout_s=0, network={"allowOut": ["web.test"], "denyOut": ["0.0.0.0/0"]})
    assert reach(v1_domains, box["id"])["web.test"] == 200
    v1_domains.remove(box["id"])


def test_stop_ends_the_resolver_and_a_start_after_sigkill_sweeps_it(internet):
    d = Daemon(args=resolver_args(OTHER_RANGE))
    d.start()
    again = None
    orphan = None
    try:
        block = block_of(d)
        orphan = resolver_pid(d)
        assert is_our_dnsmasq(orphan, d)
        os.kill(d.proc.pid, signal.SIGKILL)
        d.proc.wait(timeout=30)
        assert is_our_dnsmasq(orphan, d), "the resolver died with the daemon: nothing to sweep"
        again = Daemon(args=resolver_args(OTHER_RANGE))
        again.data_dir = d.data_dir
        again.start(timeout=60)
        wait_until(lambda: not is_our_dnsmasq(orphan, d), timeout=10,
                   message="the dead daemon's resolver to be stopped")
        orphan = None
        current = resolver_pid(again)
        v1 = V1(again)
        box = v1.create(timeout_s=0, network={"allowOut": ["web.test"], "denyOut": ["0.0.0.0/0"]})
        assert reach(v1, box["id"])["web.test"] == 200
        v1.remove(box["id"])
        again.stop()
        assert not is_our_dnsmasq(current, again)
        assert resolver_files(again) == []
        assert our_table(block) is None and our_links(block) == []
    finally:
        if orphan is not None and is_our_dnsmasq(orphan, d):
            os.kill(orphan, signal.SIGKILL)
        if again is not None:
            finish_or_fail(again)
        d.finish()
