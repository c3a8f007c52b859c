"""The sandboxes' resolver (sandbox/network_dns.c) in a small world of its own.

Four network namespaces the test makes and removes, addresses from the documentation ranges only:
  upstream  198.51.100.53  a dnsmasq standing in for the internet's DNS, answering
                           allowed.test 203.0.113.10, other.test 203.0.113.11,
                           host.test 127.0.0.1, private.test 10.1.2.3,
                           metadata.test 169.254.169.254
  bridge    198.51.100.1 (to upstream), 203.0.113.65 (gateway: the resolver listens here),
            203.0.113.129 (second sandbox's side); runs network-dns-driver, which runs the module
  sandbox   203.0.113.66   asks the resolver
  neighbour 203.0.113.130  a second sandbox, asking while the first one's lists change
Every namespace, process and set is removed at the end, by the names and pids made here. No
192.0.2.0/24 address is used: the host's own uplink may live there.
"""
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import pytest

from helpers.daemon import built
from helpers.dns_query import SOURCE as DNS_QUERY_SOURCE

DRIVER = built("tests", "network-dns-driver")
DNSMASQ = "/usr/sbin/dnsmasq"
TABLE = "cellbox_dnstest"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists(DNSMASQ) or not shutil.which("ip"),
    reason="needs root, Debian's dnsmasq-base and iproute2 (network namespaces)")

# One query from a namespace: "RCODE=<n> <address>..." or "NOANSWER" (helpers/dns_query.py).
QUERY_HELPER = DNS_QUERY_SOURCE + "import sys\nprint(dns_query(sys.argv[1], sys.argv[2]))\n"


def netns_run(namespace, *command, check=True, timeout=20):
    return subprocess.run(["ip", "netns", "exec", namespace, *command], check=check, timeout=timeout,
                          capture_output=True, text=True)


class World:
    def __init__(self):
        tag = "%d%04d" % (os.getpid() % 100000, random.randrange(10000))
        self.upstream, self.bridge = "cbxdu" + tag, "cbxdb" + tag
        self.sandbox, self.neighbour = "cbxds" + tag, "cbxdn" + tag
        self.namespaces = []
        self.processes = []
        self.state_dir = tempfile.mkdtemp(prefix="cellbox-dns-")
        self.driver = None
        self.driver_exit = 0

    def make(self):
        for name in (self.upstream, self.bridge, self.sandbox, self.neighbour):
            subprocess.run(["ip", "netns", "add", name], check=True)
            self.namespaces.append(name)
            netns_run(name, "ip", "link", "set", "lo", "up")
        self.link(self.upstream, "198.51.100.53/24", self.bridge, "198.51.100.1/24")
        self.link(self.sandbox, "203.0.113.66/26", self.bridge, "203.0.113.65/26")
        self.link(self.neighbour, "203.0.113.130/26", self.bridge, "203.0.113.129/26")
        netns_run(self.neighbour, "ip", "route", "add", "default", "via", "203.0.113.129")
        upstream = subprocess.Popen(
            ["ip", "netns", "exec", self.upstream, DNSMASQ, "--keep-in-foreground", "--no-resolv", "--no-hosts",
             "--listen-address=198.51.100.53", "--bind-interfaces", "--pid-file=", "--conf-file=/dev/null",
             "--address=/allowed.test/203.0.113.10", "--address=/other.test/203.0.113.11",
             "--address=/host.test/127.0.0.1", "--address=/private.test/10.1.2.3",
             "--address=/metadata.test/169.254.169.254"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.processes.append(upstream)
        self.driver = subprocess.Popen(["ip", "netns", "exec", self.bridge, DRIVER], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=None, text=True, bufsize=1)
        self.processes.append(self.driver)
        # The upstream answers before the resolver forwards to it (bounded: 100 tries, ~5 s).
        for _ in range(100):
            if "203.0.113.10" in self.query_from(self.bridge, "allowed.test", "198.51.100.53"):
                break
            time.sleep(0.05)

    def link(self, left, left_address, right, right_address):
        left_end, right_end = "v" + left[4:], "w" + left[4:]
        subprocess.run(["ip", "link", "add", left_end, "netns", left, "type", "veth", "peer", "name", right_end,
                        "netns", right], check=True)
        netns_run(left, "ip", "address", "add", left_address, "dev", left_end)
        netns_run(left, "ip", "link", "set", left_end, "up")
        netns_run(right, "ip", "address", "add", right_address, "dev", right_end)
        netns_run(right, "ip", "link", "set", right_end, "up")

    def command(self, line):
        self.driver.stdin.write(line + "\n")
        self.driver.stdin.flush()
        answer = self.driver.stdout.readline().strip()
        assert answer, "the driver ended without answering %r" % line
        return answer

    def ok(self, line):
        answer = self.command(line)
        assert answer.startswith("ok"), "%s -> %s" % (line, answer)
        return answer[3:]

    def query_from(self, namespace, name, server="203.0.113.65"):
        return netns_run(namespace, "/usr/bin/python3", "-c", QUERY_HELPER, name, server).stdout.strip()

    def resolve(self, name, namespace=None):
        """The addresses the resolver gives the sandbox for `name`; None if it refused."""
        answer = self.query_from(namespace or self.sandbox, name)
        if not answer.startswith("RCODE=0"):
            return None
        return answer.split()[1:]

    def set_elements(self, domain):
        """The addresses in `domain`'s set, or None when the set does not exist."""
        name = self.ok("set-name " + domain)
        listing = self.command("list " + TABLE)
        if not listing.startswith("ok"):
            return None
        for entry in json.loads(listing[3:])["nftables"]:
            found = entry.get("set")
            if found and found["name"] == name:
                return sorted(e["elem"]["val"] if isinstance(e, dict) else e for e in found.get("elem", []))
        return None

    def remove(self):
        for process in reversed(self.processes):
            with contextlib.suppress(Exception):
                if process is self.driver and process.poll() is None:
                    process.stdin.close()
                    # A clean exit: under ASan/UBSan (CELLBOX_BUILD=build-asan) a finding or a
                    # leak makes it non-zero.
                    self.driver_exit = process.wait(timeout=10)
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=10)
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
        for name in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "delete", name], check=False)
        shutil.rmtree(self.state_dir, ignore_errors=True)


@pytest.fixture
def world():
    made = World()
    try:
        made.make()
        yield made
    finally:
        made.remove()
    assert made.driver_exit == 0, "network-dns-driver exited with %d (see its stderr)" % made.driver_exit
    leftover = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(name in leftover for name in made.namespaces), "a test namespace is left: " + leftover


def alive(pid):
    """True if `pid` runs (a zombie that init has not reaped yet counts as gone)."""
    try:
        with open("/proc/%d/stat" % pid) as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def started(world, upstream="198.51.100.53"):
    # dnsmasq counts the documentation ranges as private space: the outside names of this world
    # are exempt from the rebind check, as a real domain's public addresses would be; host.test
    # and private.test are not.
    pid = int(world.ok("start %s 203.0.113.65 %s %s allowed.test,other.test" % (TABLE, upstream, world.state_dir)))
    assert pid > 0
    return pid


def test_allowed_names_resolve_and_land_in_their_set(world):
    started(world)
    world.ok("domains sandbox-a allowed.test *.other.test")
    assert world.resolve("allowed.test") == ["203.0.113.10"]
    assert world.set_elements("allowed.test") == ["203.0.113.10"]
    assert world.set_elements("*.other.test") == []
    assert world.resolve("api.other.test") == ["203.0.113.11"]
    assert world.set_elements("*.other.test") == ["203.0.113.11"]
    # A name outside every listed domain fills no set.
    world.ok("domains sandbox-b unlisted.test")
    assert world.set_elements("allowed.test") == ["203.0.113.10"]
    assert world.set_elements("unlisted.test") == []


def test_answers_pointing_at_loopback_or_private_space_are_refused(world):
    started(world)
    world.ok("domains sandbox-a host.test private.test metadata.test")
    for name in ("host.test", "private.test", "metadata.test"):
        assert world.resolve(name) in (None, []), name
        assert world.set_elements(name) == [], name
    # The resolver itself stays healthy for names that are fine.
    assert world.resolve("allowed.test") == ["203.0.113.10"]


def test_a_domain_added_takes_effect_and_a_removed_one_stops_filling(world):
    started(world)
    world.ok("domains sandbox-a allowed.test")
    assert world.set_elements("other.test") is None
    world.ok("domains sandbox-a allowed.test other.test")
    assert world.resolve("other.test") == ["203.0.113.11"]
    assert world.set_elements("other.test") == ["203.0.113.11"]
    world.ok("domains sandbox-a other.test")
    assert world.set_elements("allowed.test") is None
    assert world.resolve("allowed.test") == ["203.0.113.10"]
    assert world.set_elements("allowed.test") is None


def test_a_set_shared_by_two_sandboxes_lives_while_one_lists_it(world):
    started(world)
    world.ok("domains sandbox-a allowed.test")
    world.ok("domains sandbox-b allowed.test")
    world.ok("domains sandbox-a")
    assert world.set_elements("allowed.test") == []
    world.ok("domains sandbox-b")
    assert world.set_elements("allowed.test") is None


def test_a_neighbours_lookups_carry_on_while_lists_change(world):
    """Each change restarts dnsmasq; a neighbour asking all the while (its client retries once a
    second, as glibc's does) gets every answer. What a change costs is printed, not asserted."""
    started(world)
    answers, stop = [], threading.Event()

    def neighbour_asks():
        for _ in range(60):  # bounded in count; ends early when the changes are done
            answers.append(world.resolve("allowed.test", namespace=world.neighbour))
            if stop.is_set():
                break

    asking = threading.Thread(target=neighbour_asks)
    asking.start()
    costs = []
    try:
        for round_number in range(10):
            # The next change waits for one more answer (bounded: ~30 s), so the neighbour's
            # lookups are spread over all ten restarts whatever the speed of either side.
            for _ in range(600):
                if len(answers) > round_number or not asking.is_alive():
                    break
                time.sleep(0.05)
            begun = time.monotonic()
            world.ok("domains sandbox-a other.test" + (" api.other.test" if round_number % 2 else ""))
            costs.append(time.monotonic() - begun)
    finally:
        stop.set()
        asking.join(timeout=120)
    print("a change of one sandbox's domains (restart included): median %.1f ms, max %.1f ms"
          % (sorted(costs)[len(costs) // 2] * 1000, max(costs) * 1000))
    assert len(answers) >= 10
    assert answers == [["203.0.113.10"]] * len(answers)


def test_lists_out_of_bounds_or_not_domains_are_refused_with_words(world):
    started(world)
    too_many = " ".join("d%d.allowed.test" % i for i in range(65))
    assert "at most 64" in world.command("domains sandbox-a " + too_many)
    for not_domain in ("203.0.113.10", "com", "a..test", "*.*.test", "-x.test"):
        assert world.command("domains sandbox-a " + not_domain).startswith("error"), not_domain
    world.ok("domains sandbox-a allowed.test")
    assert world.command("domains sandbox-a 203.0.113.0/24").startswith("error")
    assert world.set_elements("allowed.test") == []


def test_the_resolver_is_started_again_after_it_is_killed(world):
    started(world)
    world.ok("domains sandbox-a allowed.test")
    first = int(world.ok("pid"))  # the change restarted it
    os.kill(first, signal.SIGKILL)
    second = 0
    for _ in range(200):  # bounded: ~10 s
        second = int(world.ok("pid"))
        if second not in (0, first):
            break
        time.sleep(0.05)
    assert second not in (0, first)
    assert world.resolve("allowed.test") == ["203.0.113.10"]
    assert world.set_elements("allowed.test") == ["203.0.113.10"]


def test_a_stale_resolver_of_the_same_table_is_swept_and_only_it(world):
    first = started(world)
    # The driver dies without stopping it, as a daemon killed with SIGKILL would.
    # (`ip netns exec` execs the driver: its pid is the Popen's.)
    os.kill(world.driver.pid, signal.SIGKILL)
    world.driver.wait(timeout=10)
    world.driver = subprocess.Popen(["ip", "netns", "exec", world.bridge, DRIVER], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=None, text=True, bufsize=1)
    world.processes.append(world.driver)
    second = started(world)
    assert second != first
    assert not alive(first)
    assert world.resolve("allowed.test") == ["203.0.113.10"]
    # The upstream dnsmasq (not ours) was left alone.
    assert world.processes[0].poll() is None


def test_nothing_is_left_after_stop(world):
    first = started(world)
    world.ok("domains sandbox-a allowed.test other.test")
    world.ok("domains sandbox-b allowed.test")
    last = int(world.ok("pid"))
    world.ok("stop")
    assert not alive(first) and not alive(last)
    assert world.set_elements("allowed.test") is None
    assert world.set_elements("other.test") is None
    assert os.listdir(world.state_dir) == []
    assert world.resolve("allowed.test") is None


def test_a_pid_file_naming_another_process_kills_nothing(world):
    """The sweep kills only a dnsmasq running this table's configuration: a pid file naming
    anything else (here a process of the test's own) is removed and the process left alone."""
    bystander = subprocess.Popen(["sleep", "300"])
    world.processes.append(bystander)
    with open(os.path.join(world.state_dir, "resolver-%s.pid" % TABLE), "w") as pid_file:
        pid_file.write("%d\n" % bystander.pid)
    started(world)
    assert bystander.poll() is None
    assert world.resolve("allowed.test") == ["203.0.113.10"]
