"""A networked sandbox's interface and firewall over its life (sandbox/network.c): made when it
starts, gone when it is deleted or its kernel is killed, swept by the next start after cellboxd
was killed with SIGKILL, removed at a stop. The daemon's table is inet cellbox_<block> and its
links cbx<block>-<slot> (and the gateway's bridge cbx<block>-gw, from start to stop), the block
read from the data directory (uid-block); nothing else on the host is looked at. A few slots' chains are made ahead (sandbox/network.c, PREPARED_SLOTS): they
have no link and nothing is routed through them. The outside host is a network namespace the test
makes (helpers/outside_host.py)."""
import os
import signal
import subprocess

import pytest

from helpers.daemon import Daemon, finish_or_fail
from helpers.network_ranges import unrouted_range
from helpers.outside_host import outside_host
from helpers.v1 import V1
from helpers.wait import wait_until

pytestmark = pytest.mark.cellbox_only

FETCH = """
import urllib.request
urllib.request.urlopen({url!r}, timeout=10).read().decode()
"""


def block_of(daemon):
    with open(os.path.join(daemon.data_dir, "uid-block")) as f:
        return int(f.read().split()[0])


def all_our_links(block):
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True,
                         timeout=20).stdout
    return sorted(line.split(":")[1].strip().split("@")[0] for line in out.splitlines()
                  if line.split(":")[1].strip().startswith(f"cbx{block}-"))


def is_sandbox_link(name, block):
    """A host end of a sandbox's veth: cbx<block>-<slot>, not the gateway's cbx<block>-gw."""
    return name.startswith(f"cbx{block}-") and name != f"cbx{block}-gw"


def our_links(block):
    """The host ends of sandboxes' veths."""
    return [name for name in all_our_links(block) if is_sandbox_link(name, block)]


def our_table(block):
    """The table's text, or None when it does not exist."""
    out = subprocess.run(["nft", "list", "table", "inet", f"cellbox_{block}"], capture_output=True,
                         text=True, timeout=20)
    return out.stdout if out.returncode == 0 else None


def sandbox_chains(block):
    table = our_table(block) or ""
    return [line.split()[1] for line in table.splitlines() if line.strip().startswith("chain sandbox_")]


PREPARED_SLOTS = 2  # sandbox/network.c: slots whose chain is made ahead, with no link


def network_args(network_range):
    return ["--allow-network", "--network-range", str(network_range)]


# Each daemon of this module has a range of its own (a start refuses a range another daemon's
# routes lie in); a daemon that takes over a data directory keeps its predecessor's.


def link_indexes(block):
    """Our links by name -> ifindex (a new link of the same name has a new index)."""
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True,
                         timeout=20).stdout
    found = {}
    for line in out.splitlines():
        index, name = line.split(":")[0], line.split(":")[1].strip().split("@")[0]
        if is_sandbox_link(name, block):
            found[name] = int(index)
    return found


def routes_through_our_links(block):
    out = subprocess.run(["ip", "-o", "-4", "route", "show"], capture_output=True, text=True,
                         timeout=20).stdout
    return [line for line in out.splitlines() if f" dev cbx{block}-" in line + " "]


def namespace_mounts_of(daemon):
    """nsfs mounts (ip netns and the like) that name the daemon's data directory or links."""
    with open("/proc/self/mountinfo") as f:
        return [line for line in f if " nsfs " in line and
                (daemon.data_dir in line or f"cbx{block_of(daemon)}-" in line)]


def assert_nothing_of_the_daemon_left(block):
    assert our_table(block) is None and all_our_links(block) == [] and not routes_through_our_links(block)


def forwarding():
    with open("/proc/sys/net/ipv4/ip_forward") as f:
        return f.read().strip()


def cellbox_tables():
    out = subprocess.run(["nft", "list", "tables", "inet"], capture_output=True, text=True,
                         timeout=20).stdout
    return [line.split()[2] for line in out.splitlines() if line.split()[2:3] and
            line.split()[2].startswith("cellbox_")]


def slot_of(link):
    return int(link.rsplit("-", 1)[1])


def networked_kernel(daemon):
    client = daemon.client()
    model = client.create_kernel(network=True)
    return client, model["id"]


def fetch(client, kernel_id, url):
    with client.ready_ws(kernel_id) as ws:
        return ws.execute(FETCH.format(url=url), timeout=60).result_data()["text/plain"]


@pytest.fixture(scope="module")
def outside():
    with outside_host({"hello.txt": b"hello\n"}) as host:
        yield host


def test_interface_and_rules_live_as_long_as_the_sandbox(outside):
    # Other daemons on this host (other tests, other checkouts) may need forwarding on: only
    # when none had a table before and none has one after ours stopped is "off again" asserted.
    forwarding_was_ours_to_restore = forwarding() == "0" and cellbox_tables() == []
    d = Daemon(args=network_args(unrouted_range()))
    d.start()
    try:
        block = block_of(d)
        assert our_table(block) is not None and forwarding() == "1"
        # Made ahead: chains, no link, no route into the sandbox range.
        assert 0 < len(sandbox_chains(block)) <= PREPARED_SLOTS
        assert our_links(block) == [] and routes_through_our_links(block) == []
        assert f"cbx{block}-gw" in all_our_links(block)  # the resolver's home
        client, kernel_id = networked_kernel(d)
        assert fetch(client, kernel_id, outside.url + "hello.txt") == repr("hello\n")
        [link] = our_links(block)
        assert f"sandbox_{slot_of(link)}" in sandbox_chains(block)
        assert len(routes_through_our_links(block)) == 1  # the host end's route to its address
        client.delete_kernel(kernel_id)
        wait_until(lambda: not our_links(block) and
                   f"sandbox_{slot_of(link)}" not in sandbox_chains(block), timeout=30,
                   message="the deleted sandbox's link and chain to go")
        assert len(sandbox_chains(block)) <= PREPARED_SLOTS and not routes_through_our_links(block)
        d.stop()
        assert_nothing_of_the_daemon_left(block)
        assert namespace_mounts_of(d) == []
        if forwarding_was_ours_to_restore and cellbox_tables() == []:
            assert forwarding() == "0", "the daemon left IPv4 forwarding on"
    finally:
        finish_or_fail(d)


def test_a_killed_kernel_leaves_no_link_or_chain(outside):
    d = Daemon(args=network_args(unrouted_range()))
    d.start()
    try:
        block = block_of(d)
        client, kernel_id = networked_kernel(d)
        assert fetch(client, kernel_id, outside.url + "hello.txt") == repr("hello\n")
        [(link, index)] = link_indexes(block).items()
        with client.ready_ws(kernel_id) as ws:
            ws.execute("import os\nos.kill(os.getpid(), 9)", timeout=60)
        # Whatever comes after (a restarted kernel gets an interface of its own), the killed
        # one's link (by its index) and its chain are gone.
        wait_until(lambda: index not in link_indexes(block).values() and
                   (link in link_indexes(block) or f"sandbox_{slot_of(link)}" not in
                    sandbox_chains(block)), timeout=30,
                   message="the killed kernel's link and chain to go")
        assert len(link_indexes(block)) <= 1
        client.delete_kernel(kernel_id)
        wait_until(lambda: not our_links(block), timeout=30, message="every link to go")
        d.stop()
        assert_nothing_of_the_daemon_left(block)
    finally:
        finish_or_fail(d)


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM with --keep-sandboxes"])
def test_a_start_after_sigkill_sweeps_what_the_dead_daemon_left(outside, how):
    """The previous daemon's links and chains are swept; the sandboxes it left are adopted, each
    with a new interface and the egress lists it had (kept in its record, also after a change)."""
    network_range = unrouted_range()
    d = Daemon(args=network_args(network_range) + (["--keep-sandboxes"] if "keep" in how else []))
    d.start()
    again = None
    url = outside.url + "hello.txt"
    try:
        block = block_of(d)
        v1 = V1(d)
        open_box = v1.create(timeout_s=0, network=True)["id"]
        listed = v1.create(timeout_s=0, network=True)["id"]
        r = v1.put(f"v1/sandboxes/{listed}/network", json={"denyOut": [str(outside.subnet)]})
        assert r.status_code == 200, r.text
        assert reaches(v1, open_box, url) and not reaches(v1, listed, url)
        old_links = link_indexes(block)
        assert len(old_links) == 2 and sandbox_chains(block)
        os.kill(d.proc.pid, signal.SIGKILL if how == "SIGKILL" else signal.SIGTERM)
        d.proc.wait(timeout=30)
        d.stopped_by_us = True
        again = Daemon(args=network_args(network_range))
        again.data_dir = d.data_dir
        again.start(timeout=60)
        assert block_of(again) == block
        v1 = V1(again)
        assert reaches(v1, open_box, url), "the adopted sandbox lost its network"
        assert not reaches(v1, listed, url), "the adopted sandbox lost its denyOut"
        new_links = link_indexes(block)
        assert len(new_links) == 2 and not set(new_links.values()) & set(old_links.values())
        assert len(sandbox_chains(block)) <= 2 + PREPARED_SLOTS
        r = v1.put(f"v1/sandboxes/{listed}/network", json={"denyOut": []})
        assert r.status_code == 200 and reaches(v1, listed, url), r.text
        again.stop()
        assert_nothing_of_the_daemon_left(block)
    finally:
        if again is not None:
            finish_or_fail(again)
        d.finish()


def test_an_adopted_sandbox_without_a_network_on_the_new_daemon_is_ended_naming_why(outside):
    d = Daemon(args=network_args(unrouted_range()))
    d.start()
    again = None
    try:
        block = block_of(d)
        box = V1(d).create(timeout_s=0, network=True)["id"]
        os.kill(d.proc.pid, signal.SIGKILL)
        d.proc.wait(timeout=30)
        d.stopped_by_us = True
        again = Daemon()  # no --allow-network: no interface can be given to it
        again.data_dir = d.data_dir
        again.start(timeout=60)
        assert f"kernel {box}: the sandbox network is not set up" in again.log_text()
        model = V1(again).model(box)
        assert model["state"] == "dead", model
        assert "network could not be set up" in model["reason"], model
        assert all_our_links(block) == [] and our_table(block) is None
        again.stop()
        assert_nothing_of_the_daemon_left(block)
    finally:
        if again is not None:
            finish_or_fail(again)
        d.finish()


REACH = """
import urllib.request
try:
    _r = urllib.request.urlopen({url!r}, timeout=3).read().decode()
except Exception as e:
    _r = 'failed: ' + type(e).__name__
_r
"""


def reaches(v1, sandbox_id, url):
    return v1.value(sandbox_id, REACH.format(url=url)) == repr("hello\n")


@pytest.fixture(scope="module")
def v1_network():
    network_range = unrouted_range()
    d = Daemon(args=network_args(network_range))
    d.start()
    client = V1(d)
    client.gateway = network_range.network_address + 1
    try:
        yield client
    finally:
        client.cleanup()
        finish_or_fail(d)


def test_allow_out_wins_over_deny_out(v1_network, outside):
    """E2B's semantics: everything denied, the outside host allowed: it is reached."""
    url = outside.url + "hello.txt"
    box = v1_network.create(timeout_s=0, network={"denyOut": ["0.0.0.0/0"],
                                                  "allowOut": [f"{outside.address}/32"]})
    assert reaches(v1_network, box["id"], url)
    v1_network.remove(box["id"])


def test_deny_out_holds_and_changes_on_a_running_sandbox(v1_network, outside):
    url = outside.url + "hello.txt"
    box = v1_network.create(timeout_s=0, network={"denyOut": [str(outside.subnet)]})
    sid = box["id"]
    assert not reaches(v1_network, sid, url)
    r = v1_network.put(f"v1/sandboxes/{sid}/network", json={"allowOut": [], "denyOut": []})
    assert r.status_code == 200, r.text
    assert reaches(v1_network, sid, url)
    r = v1_network.put(f"v1/sandboxes/{sid}/network", json={"denyOut": ["0.0.0.0/0"]})
    assert r.status_code == 200 and r.json() == {"allowOut": [], "denyOut": ["0.0.0.0/0"]}, r.text
    assert not reaches(v1_network, sid, url)
    # allowOut cannot open what is always denied: the host (the gateway) stays out of reach.
    r = v1_network.put(f"v1/sandboxes/{sid}/network", json={"allowOut": ["0.0.0.0/0"]})
    assert r.status_code == 200, r.text
    assert reaches(v1_network, sid, url)
    assert not reaches(v1_network, sid, f"http://{v1_network.gateway}:{v1_network.client.port}/api")
    v1_network.remove(sid)


def test_bad_lists_and_sandboxes_without_network_are_refused(v1_network):
    box = v1_network.create(timeout_s=0, network=True)
    r = v1_network.put(f"v1/sandboxes/{box['id']}/network", json={"allowOut": ["exa mple.com"]})
    assert r.status_code == 400 and "allowOut" in r.json()["message"], r.text
    assert "exa mple.com" in r.json()["message"], r.text
    plain = v1_network.create(timeout_s=0)
    r = v1_network.put(f"v1/sandboxes/{plain['id']}/network", json={"denyOut": []})
    assert r.status_code == 409 and "has no network" in r.json()["message"], r.text
    r = v1_network.post("v1/sandboxes", json={"network": {"denyOut": ["10.0.0.0/33"]}})
    assert r.status_code == 400 and "denyOut" in r.json()["message"], r.text
    for sid in (box["id"], plain["id"]):
        v1_network.remove(sid)


# ---- the warm pool (model/manager.c): one pooled kernel serves creates with network and without

INTERFACES = "import socket\nsorted(name for _, name in socket.if_nameindex())"


def create_from_the_pool(v1, **body):
    """Waits for a ready pooled kernel (the daemon's default --pool-size), creates, and asserts the
    daemon's log says the sandbox was taken from the warm pool."""
    wait_until(lambda: v1.get("api").json()["templates"]["python3"]["warm_pool_ready"] >= 1,
               timeout=90, message="a ready kernel in the warm pool")
    box = v1.create(timeout_s=0, **body)
    wait_until(lambda: f"kernel {box['id']} " in v1.daemon.log_text(), timeout=10,
               message="the create's log line")
    assert f"kernel {box['id']} taken from the warm pool" in v1.daemon.log_text(), \
        v1.daemon.log_text()[-3000:]
    return box


def test_a_networked_create_from_the_warm_pool_gets_its_interface(v1_network, outside):
    box = create_from_the_pool(v1_network, network=True)
    model = v1_network.model(box["id"])
    assert model["network"]["address"], model
    assert eval(v1_network.value(box["id"], INTERFACES)) != ["lo"]
    assert reaches(v1_network, box["id"], outside.url + "hello.txt")
    v1_network.remove(box["id"])


def test_a_create_without_network_from_the_same_pool_still_has_none(v1_network, outside):
    """Loopback only, the outside host out of reach, and pip's last line says why (the
    sitecustomize decides at run time, the root being the same for both kinds)."""
    box = create_from_the_pool(v1_network)
    sid = box["id"]
    assert v1_network.model(sid)["network"] is False
    assert eval(v1_network.value(sid, INTERFACES)) == ["lo"]
    assert not reaches(v1_network, sid, outside.url + "hello.txt")
    ev = v1_network.command(sid, f"pip install --index-url {outside.url}simple/ "
                                 f"--trusted-host {outside.address} cellbox-nothing", timeout=120)
    text = ev.stdout + ev.stderr
    last = [line for line in text.splitlines() if line.strip()][-1]
    assert last.startswith("cellbox: this sandbox has no network, so pip could not reach"), text
    assert ev[-1]["exit_code"] != 0, text
    v1_network.remove(sid)


def test_egress_lists_at_create_hold_on_a_sandbox_from_the_warm_pool(v1_network, outside):
    url = outside.url + "hello.txt"
    denied = create_from_the_pool(v1_network, network={"denyOut": [str(outside.subnet)]})
    assert not reaches(v1_network, denied["id"], url)
    allowed = create_from_the_pool(v1_network, network={"denyOut": ["0.0.0.0/0"],
                                                        "allowOut": [f"{outside.address}/32"]})
    assert reaches(v1_network, allowed["id"], url)
    for sid in (denied["id"], allowed["id"]):
        v1_network.remove(sid)


def test_a_pooled_kernel_whose_network_cannot_be_attached_is_discarded_not_handed_out():
    """A /29 has five sandbox addresses: with all five taken, a networked create from the pool is
    503 naming why, its pooled kernel is discarded (never handed out without the network it asked
    for), and the pool still serves a create without network."""
    network_range = next(unrouted_range().subnets(new_prefix=29))
    d = Daemon(args=network_args(network_range))
    d.start()
    v1 = V1(d)
    try:
        for _ in range(5):
            v1.create(timeout_s=0, network=True)
        before = len(v1.sandboxes())
        wait_until(lambda: v1.get("api").json()["templates"]["python3"]["warm_pool_ready"] >= 1,
                   timeout=90, message="a ready kernel in the warm pool")
        r = v1.post("v1/sandboxes", json={"network": True, "timeout_s": 0})
        assert r.status_code == 503, r.text
        assert "network could not be set up" in r.json()["message"], r.text
        assert "every address of the sandbox network (5) is taken" in r.json()["message"], r.text
        assert "from the warm pool discarded" in d.log_text()
        assert len(v1.sandboxes()) == before
        plain = create_from_the_pool(v1)
        assert eval(v1.value(plain["id"], INTERFACES)) == ["lo"]
    finally:
        v1.cleanup()
        finish_or_fail(d)


def test_a_second_daemon_on_a_range_in_use_is_refused_and_the_first_keeps_working(outside):
    network_range = unrouted_range()
    d = Daemon(args=network_args(network_range))
    d.start()
    second = Daemon(args=network_args(network_range))
    try:
        v1 = V1(d)
        box = v1.create(timeout_s=0, network=True)["id"]  # its address is routed now
        with pytest.raises(RuntimeError) as refused:
            second.start(timeout=60)
        assert f"--network-range {network_range} is in use on this host" in str(refused.value)
        assert f"cbx{block_of(d)}-" in str(refused.value)  # names the route it found
        assert reaches(v1, box, outside.url + "hello.txt")
        v1.remove(box)
        d.stop()
        assert_nothing_of_the_daemon_left(block_of(d))
    finally:
        finish_or_fail(d)
        second.finish()
