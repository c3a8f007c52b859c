"""A host "outside" the machine for network tests: a network namespace of the test's own, joined
to the host by a veth pair the test makes, with an address from a documentation range
(203.0.113.0/24) and, on request, a tiny HTTP server (python3 -m http.server under
`ip netns exec`).

Each host takes its own /29 of 203.0.113.0/24 that no route as specific covers yet (other tests
on this machine may hold another, or route the whole /24 elsewhere: the longer prefix wins), so
nothing but the test's own namespace is ever reached.
Everything is removed by the names and pid the helper made: the server by its pid, the veth by
its name (its peer goes with it), the namespace by its name. Every wait is bounded.
"""
import contextlib
import ipaddress
import os
import secrets
import subprocess
import tempfile
import time

DOCUMENTATION_RANGE = ipaddress.ip_network("203.0.113.0/24")


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20, check=check)


def _free_subnet():
    """A /29 of 203.0.113.0/24 that no route as specific as a /29 (or more) touches yet, searched
    from the top of the range down. A wider route (another test's whole /24) may cover it: the
    longest prefix wins, so the /29 reaches this test's namespace alone, and the other test's
    hosts low in the range keep theirs."""
    taken = []
    for line in _ip("-4", "route", "show", "table", "all").stdout.splitlines():
        words = line.split()
        destination = words[1] if words[0] in ("local", "broadcast", "unicast") else words[0]
        with contextlib.suppress(ValueError):
            net = ipaddress.ip_network(destination, strict=False)
            if net.overlaps(DOCUMENTATION_RANGE) and net.prefixlen >= 29:
                taken.append(net)
    for subnet in reversed(list(DOCUMENTATION_RANGE.subnets(new_prefix=29))):
        if not any(subnet.overlaps(t) for t in taken):
            return subnet
    raise RuntimeError("no /29 of 203.0.113.0/24 is free on this machine")


class OutsideHost:
    """`address` is the outside host's, `host_side` the machine's end of the link."""

    def __init__(self):
        tag = secrets.token_hex(3)
        self.namespace = f"cbtest-{tag}"
        self.host_link = f"cbth{tag}"     # the machine's end
        self.inner_link = f"cbtn{tag}"
        subnet = _free_subnet()
        hosts = list(subnet.hosts())
        self.subnet = subnet
        self.host_side = str(hosts[0])
        self.address = str(hosts[1])
        self.server = None
        self.directory = None
        self.made = []

    def start(self):
        _ip("netns", "add", self.namespace)
        self.made.append("netns")
        _ip("link", "add", self.host_link, "type", "veth", "peer", "name", self.inner_link)
        self.made.append("link")
        _ip("link", "set", self.inner_link, "netns", self.namespace)
        _ip("addr", "add", f"{self.host_side}/{self.subnet.prefixlen}", "dev", self.host_link)
        _ip("link", "set", self.host_link, "up")
        inside = ("netns", "exec", self.namespace, "ip")
        _ip(*inside, "addr", "add", f"{self.address}/{self.subnet.prefixlen}", "dev", self.inner_link)
        _ip(*inside, "link", "set", self.inner_link, "up")
        _ip(*inside, "link", "set", "lo", "up")
        return self

    def serve_http(self, files):
        """Serves `files` ({relative path: bytes}) on port 80; returns once it answers (20 s at most)."""
        self.directory = tempfile.mkdtemp(prefix="cellbox-outside-")
        for name, content in files.items():
            path = os.path.join(self.directory, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(content)
        self.server = subprocess.Popen(
            ["ip", "netns", "exec", self.namespace, "/usr/bin/python3", "-m", "http.server", "80",
             "--bind", self.address, "--directory", self.directory],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 20
        for _ in range(200):
            probe = _ip("netns", "exec", self.namespace, "/usr/bin/python3", "-c",
                        f"import socket; socket.create_connection(('{self.address}', 80), 1)",
                        check=False)
            if probe.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        return f"http://{self.address}/"

    def stop(self):
        if self.server:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.server.pid, 9)
            self.server.wait(timeout=20)
        if "link" in self.made:
            _ip("link", "del", self.host_link, check=False)
        if "netns" in self.made:
            _ip("netns", "del", self.namespace, check=False)
        if self.directory:
            subprocess.run(["rm", "-rf", "--", self.directory], check=False, timeout=20)


@contextlib.contextmanager
def outside_host(files=None):
    host = OutsideHost()
    try:
        host.start()
        if files is not None:
            host.url = host.serve_http(files)
        yield host
    finally:
        host.stop()
