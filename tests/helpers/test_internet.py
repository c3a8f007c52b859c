"""A small internet of the tests' own: outside hosts in a network namespace on this machine.

Network tests must never reach a real address, yet a sandbox with network needs somewhere to go:
a web server, a DNS server, a package index. `small_internet()` builds them in one network
namespace joined to the host by a veth, with addresses from the documentation ranges only:

    host  198.51.100.1/30  ==veth==  198.51.100.2/30  "internet" namespace, which holds
                                     203.0.113.10   web server (HTTP; /big.bin for throughput)
                                     203.0.113.20   PEP 503 simple index (/simple/<project>/)
                                     198.51.100.53  DNS server (dnsmasq, names below only)

The host gets two routes through the veth (203.0.113.0/24 and 198.51.100.0/24; its own /30s are
more specific) and nothing else: no default route, no address in 192.0.2.0/24 (this machine's own
uplink lives there), no global sysctl. Forwarding is switched on per interface, on the host-side
veths this module made, so it goes away with them.

`stand_in_sandbox(internet)` is a plain network namespace standing in for a networked sandbox:
a veth to the host (198.51.100.5/30 host side, .6 inside), routes to the two test ranges only
(no default route: the host forwards what arrives on its veths, and nothing may leave), and
/etc/netns/<name>/resolv.conf pointing at the test DNS server (the internet namespace has one too) (`ip netns exec` mounts it over
/etc/resolv.conf for what runs there).

Names: everything made starts with `cbti<pid>` (the pytest process's pid), so parallel runs and
other work on the machine never collide by name. Routes cannot be doubled, so one internet exists
per machine at a time: a lock (flock on LOCK_PATH) held while it lives makes a second run wait
(bounded by LOCK_WAIT_SECONDS). A run killed with SIGKILL leaves its names behind; the next
`small_internet()` removes those whose pid is dead (only `cbti<pid>` names, never other ones).

Teardown, also when the test fails: the servers are killed by pid, the namespaces and veths made
are deleted (the routes go with the veth), /etc/netns/<name> removed, and `leftovers(prefix)` must
be empty or teardown raises.
"""
import contextlib
import fcntl
import hashlib
import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from helpers.processes import start_time
from helpers.wait import wait_until
from helpers.wheels import build_wheel, wheel_name

WEB_ADDRESS = "203.0.113.10"
INDEX_ADDRESS = "203.0.113.20"
DNS_ADDRESS = "198.51.100.53"
HOST_SIDE_ADDRESS = "198.51.100.1"
INTERNET_SIDE_ADDRESS = "198.51.100.2"
SANDBOX_HOST_SIDE_ADDRESS = "198.51.100.5"
SANDBOX_ADDRESS = "198.51.100.6"
ROUTED_RANGES = ("203.0.113.0/24", "198.51.100.0/24")

# What the test DNS server answers; any other name is refused (--no-resolv, no upstream).
DNS_NAMES = {"web.test": WEB_ADDRESS, "pkg.test": INDEX_ADDRESS,
             "host.test": "127.0.0.1", "private.test": "10.1.2.3",
             "metadata.test": "169.254.169.254"}

WHEEL_PROJECT = "cellbox-nettest"
WHEEL_PACKAGE = "cellbox_nettest"
WHEEL_VERSION = "1.0"
WHEEL_GREETING = "hello from the test internet"
BIG_FILE_BYTES = 64 * 1024 * 1024

LOCK_PATH = "/run/cellbox-test-internet.lock"
LOCK_WAIT_SECONDS = 600
NAME_PATTERN = re.compile(r"^cbti(\d+)")


def ip(*args, check=True):
    """Run `ip ARGS...`; its stdout. A failure raises with ip's own words."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def namespaces():
    return [line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()]


def host_links():
    return [line.split(":")[1].strip().split("@")[0] for line in ip("-o", "link", "show").splitlines()]


def routes_into(ranges=ROUTED_RANGES):
    """The host's routes (main table) whose destination lies in the test ranges."""
    networks = [ipaddress.ip_network(r) for r in ranges]
    found = []
    for line in ip("route", "show", "table", "main").splitlines():
        destination = line.split()[0]
        if destination != "default" and any(ipaddress.ip_network(destination, strict=False).subnet_of(n)
                                             for n in networks):
            found.append(line)
    return found


def forwarding_sysctls():
    """The host-wide forwarding switches this module must leave as they were."""
    values = {}
    for name in ("ipv4/ip_forward", "ipv4/conf/all/forwarding", "ipv4/conf/default/forwarding",
                 "ipv6/conf/all/forwarding"):
        with open(f"/proc/sys/net/{name}") as f:
            values[name] = f.read().strip()
    return values


def leftovers(prefix):
    """What is left on the host of the internet named `prefix`: namespaces, links, routes through
    its veth, /etc/netns entries. Empty once it is gone."""
    left = [f"namespace {n}" for n in namespaces() if n.startswith(prefix)]
    left += [f"link {n}" for n in host_links() if n.startswith(prefix)]
    left += [f"route {r}" for r in ip("route", "show", "table", "main").splitlines() if f"dev {prefix}" in r]
    left += [f"/etc/netns/{n}" for n in (os.listdir("/etc/netns") if os.path.isdir("/etc/netns") else [])
             if n.startswith(prefix)]
    return left


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def remove_namespace(name):
    """Kill what runs in namespace `name` (by the pids `ip netns pids` names), then delete it."""
    for pid in ip("netns", "pids", name, check=False).split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    ip("netns", "delete", name, check=False)
    shutil.rmtree(f"/etc/netns/{name}", ignore_errors=True)


def sweep_dead_runs():
    """Remove the names a killed run (its pid in the name, now dead) left: only cbti<pid> ones."""
    for name in namespaces():
        match = NAME_PATTERN.match(name)
        if match and not pid_alive(int(match.group(1))):
            remove_namespace(name)
    for link in host_links():
        match = NAME_PATTERN.match(link)
        if match and not pid_alive(int(match.group(1))):
            ip("link", "delete", link, check=False)


def set_interface_forwarding(link):
    """Forward packets that arrive on `link` (one of ours): IPv4 forwarding is decided by the
    incoming interface's own switch, so the host-wide ip_forward stays as it is."""
    with open(f"/proc/sys/net/ipv4/conf/{link}/forwarding", "w") as f:
        f.write("1")


def join_to_host(namespace, host_link, inner_link, host_address, inner_address, routes):
    """A veth between the host and `namespace`, a /30 on each end, both ends up, and in the
    namespace a route to each of `routes` through the host. Never a default route: the host
    forwards what arrives on this veth, and nothing may leave for a real address."""
    ip("link", "add", host_link, "type", "veth", "peer", "name", inner_link, "netns", namespace)
    ip("addr", "add", f"{host_address}/30", "dev", host_link)
    ip("-n", namespace, "addr", "add", f"{inner_address}/30", "dev", inner_link)
    ip("link", "set", host_link, "up")
    ip("-n", namespace, "link", "set", inner_link, "up")
    ip("-n", namespace, "link", "set", "lo", "up")
    set_interface_forwarding(host_link)
    for destination in routes:
        ip("-n", namespace, "route", "add", destination, "via", host_address)
    # Until the pair has carrier, ARP fails and the neighbour entry stays failed for seconds
    # after: traffic waits for the link instead.
    wait_until(lambda: link_is_up(host_link), timeout=30, message=f"carrier on {host_link}")


def link_is_up(link):
    with open(f"/sys/class/net/{link}/operstate") as f:
        return f.read().strip() == "up"


def write_resolv_conf(namespace):
    """/etc/netns/<namespace>/resolv.conf, which `ip netns exec` mounts over /etc/resolv.conf:
    names (and http.server's reverse lookup of its own address) go to the test DNS server,
    never to the host's resolver."""
    os.makedirs(f"/etc/netns/{namespace}")
    with open(f"/etc/netns/{namespace}/resolv.conf", "w") as f:
        f.write(f"nameserver {DNS_ADDRESS}\n")


def write_simple_index(root, wheel_bytes):
    """A PEP 503 index under root/simple: one project, one wheel with its sha256 in the link."""
    filename = wheel_name(WHEEL_PACKAGE, WHEEL_VERSION)
    os.makedirs(os.path.join(root, "packages"))
    with open(os.path.join(root, "packages", filename), "wb") as f:
        f.write(wheel_bytes)
    digest = hashlib.sha256(wheel_bytes).hexdigest()
    project_dir = os.path.join(root, "simple", WHEEL_PROJECT)
    os.makedirs(project_dir)
    with open(os.path.join(root, "simple", "index.html"), "w") as f:
        f.write(f'<!DOCTYPE html><html><body><a href="{WHEEL_PROJECT}/">{WHEEL_PROJECT}</a></body></html>\n')
    with open(os.path.join(project_dir, "index.html"), "w") as f:
        f.write(f'<!DOCTYPE html><html><body><a href="../../packages/{filename}#sha256={digest}">'
                f'{filename}</a></body></html>\n')


def write_web_root(root, big_bytes):
    os.makedirs(root)
    with open(os.path.join(root, "index.html"), "w") as f:
        f.write("<html><body>web.test</body></html>\n")
    block = os.urandom(1024 * 1024)  # random, so no layer can compress the throughput figure away
    with open(os.path.join(root, "big.bin"), "wb") as f:
        for _ in range(big_bytes // len(block)):
            f.write(block)


def accepts(address, port):
    with contextlib.suppress(OSError), socket.create_connection((address, port), timeout=0.5):
        return True
    return False


class Internet:
    """A live test internet: its names, addresses, servers' pids and what they serve."""

    def __init__(self, prefix, workdir):
        self.prefix = prefix
        self.namespace = f"{prefix}-inet"
        self.host_link = f"{prefix}h"
        self.workdir = workdir
        self.server_pids = []  # (pid, start time) of every server started in the namespace
        self.processes = []  # their Popen objects, to kill and reap
        self.web_url = f"http://{WEB_ADDRESS}"
        self.index_url = f"http://{INDEX_ADDRESS}/simple"
        self.dns_address = DNS_ADDRESS
        self.dns_names = dict(DNS_NAMES)
        self.big_file_url = f"http://{WEB_ADDRESS}/big.bin"
        self.big_file_bytes = 0
        self.wheel_project = WHEEL_PROJECT
        self.wheel_package = WHEEL_PACKAGE
        self.wheel_greeting = WHEEL_GREETING
        self.wheel_filename = wheel_name(WHEEL_PACKAGE, WHEEL_VERSION)

    def start_in_namespace(self, argv, log_name):
        log = open(os.path.join(self.workdir, log_name), "wb")
        with log:
            process = subprocess.Popen(["ip", "netns", "exec", self.namespace, *argv], stdout=log,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True)
        # `ip netns exec` execs the program itself: this pid is the server's.
        self.server_pids.append((process.pid, start_time(process.pid)))
        self.processes.append(process)
        return process

    def stop_servers(self):
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)


def build(internet, big_file_bytes):
    """Make the namespace, the veth and routes, the served files and the three servers."""
    ip("netns", "add", internet.namespace)
    # Back to the stand-ins' (and sandboxes' NATed) addresses in 198.51.100.0/24 only.
    join_to_host(internet.namespace, internet.host_link, "eth0", HOST_SIDE_ADDRESS, INTERNET_SIDE_ADDRESS,
                 ["198.51.100.0/24"])
    write_resolv_conf(internet.namespace)
    for address in (WEB_ADDRESS, INDEX_ADDRESS, DNS_ADDRESS):
        ip("-n", internet.namespace, "addr", "add", f"{address}/32", "dev", "lo")
    for destination in ROUTED_RANGES:
        ip("route", "add", destination, "via", INTERNET_SIDE_ADDRESS, "dev", internet.host_link)

    web_root = os.path.join(internet.workdir, "web")
    write_web_root(web_root, big_file_bytes)
    internet.big_file_bytes = os.path.getsize(os.path.join(web_root, "big.bin"))
    index_root = os.path.join(internet.workdir, "index")
    write_simple_index(index_root, build_wheel(WHEEL_PACKAGE, WHEEL_VERSION, WHEEL_GREETING, "cellbox-nettest"))

    python = "/usr/bin/python3"
    dnsmasq = ["/usr/sbin/dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv",
               "--no-hosts", "--no-poll", f"--listen-address={DNS_ADDRESS}", "--bind-interfaces",
               f"--pid-file={os.path.join(internet.workdir, 'dnsmasq.pid')}",
               "--log-facility=-", "--user=root"]
    dnsmasq += [f"--address=/{name}/{address}" for name, address in DNS_NAMES.items()]
    internet.start_in_namespace(dnsmasq, "dns.log")
    internet.start_in_namespace([python, "-m", "http.server", "--bind", WEB_ADDRESS, "--directory", web_root,
                                 "80"], "web.log")
    internet.start_in_namespace([python, "-m", "http.server", "--bind", INDEX_ADDRESS, "--directory",
                                 index_root, "80"], "index.log")

    wait_until(lambda: accepts(WEB_ADDRESS, 80), timeout=30, message=f"the test web server on {WEB_ADDRESS}:80")
    wait_until(lambda: accepts(INDEX_ADDRESS, 80), timeout=30, message=f"the test index on {INDEX_ADDRESS}:80")
    wait_until(lambda: accepts(DNS_ADDRESS, 53), timeout=30, message=f"the test DNS server on {DNS_ADDRESS}:53")


def tear_down(internet):
    internet.stop_servers()
    ip("link", "delete", internet.host_link, check=False)  # its peer and the routes go with it
    remove_namespace(internet.namespace)
    left = leftovers(internet.prefix)
    still_running = [pid for pid, started in internet.server_pids
                     if started is not None and start_time(pid) == started]
    if left or still_running:
        raise AssertionError(f"the test internet {internet.prefix} left {left} and processes {still_running}")


_held_by_this_process = False


@contextlib.contextmanager
def machine_lock():
    """One test internet per machine at a time (its routes cannot exist twice). A second one in
    the same process would wait for itself: refused at once instead."""
    global _held_by_this_process
    if _held_by_this_process:
        raise RuntimeError("this process already has a test internet: use the one small_internet() "
                           "yielded (its routes cannot exist twice)")
    with open(LOCK_PATH, "a") as lock:
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"another test internet held {LOCK_PATH} for {LOCK_WAIT_SECONDS}s")
                time.sleep(0.2)
        _held_by_this_process = True
        try:
            yield
        finally:
            _held_by_this_process = False
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def small_internet(big_file_bytes=BIG_FILE_BYTES):
    """Build the internet for the block; yields an Internet; everything removed after (also on
    failure), and checked gone."""
    with machine_lock():
        sweep_dead_runs()
        prefix = f"cbti{os.getpid()}"
        internet = Internet(prefix, tempfile.mkdtemp(prefix=f"{prefix}-"))
        try:
            build(internet, big_file_bytes)
            yield internet
        finally:
            try:
                tear_down(internet)
            finally:
                shutil.rmtree(internet.workdir, ignore_errors=True)


class StandInSandbox:
    """A plain network namespace with a route to the test internet, in place of a sandbox."""

    def __init__(self, internet):
        self.namespace = f"{internet.prefix}-sbx"
        self.host_link = f"{internet.prefix}s"
        self.address = SANDBOX_ADDRESS

    def run(self, argv, timeout=120, **kw):
        """Run argv in the namespace (its /etc/resolv.conf names the test DNS server)."""
        return subprocess.run(["ip", "netns", "exec", self.namespace, *argv], capture_output=True,
                              text=True, timeout=timeout, **kw)


@contextlib.contextmanager
def stand_in_sandbox(internet):
    sandbox = StandInSandbox(internet)
    try:
        ip("netns", "add", sandbox.namespace)
        join_to_host(sandbox.namespace, sandbox.host_link, "eth0", SANDBOX_HOST_SIDE_ADDRESS, SANDBOX_ADDRESS,
                     ROUTED_RANGES)
        write_resolv_conf(sandbox.namespace)
        yield sandbox
    finally:
        ip("link", "delete", sandbox.host_link, check=False)
        remove_namespace(sandbox.namespace)
