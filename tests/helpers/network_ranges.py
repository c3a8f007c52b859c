"""Ranges for the sandboxes of a test's cellboxd (--network-range): one of this run's own.

Two daemons on one range would both claim its gateway, so cellboxd refuses the second; tests of
other runs on the same machine (other work shares it) then never collide with ours. The range
lies in 10.70.0.0/12-ish space (10.70-10.79), the third octet from the pytest process's pid;
`index` (0-9) tells apart daemons of one run that live at the same time."""
import contextlib
import ipaddress
import os
import random
import subprocess


def sandbox_range(index=0):
    assert 0 <= index < 10
    return f"10.{70 + index}.{os.getpid() % 250}.0/24"


def gateway_of_range(network_range):
    return network_range.rsplit(".", 1)[0] + ".1"


def unrouted_range():
    """A /24 of 10.64.0.0/10 that no route on this host touches (any table): other daemons on the
    machine (other tests, other checkouts, a benchmark) route their own sandbox ranges, and a
    start refuses a range a route lies in. Bounded: 200 random candidates."""
    out = subprocess.run(["ip", "-o", "-4", "route", "show", "table", "all"], capture_output=True,
                         text=True, timeout=20).stdout
    routed = []
    for line in out.splitlines():
        words = line.split()
        with contextlib.suppress(ValueError, IndexError):
            routed.append(ipaddress.ip_network(
                words[1] if words[0] in ("local", "broadcast", "unicast") else words[0], strict=False))
    for _ in range(200):
        candidate = ipaddress.ip_network(f"10.{random.randint(64, 127)}.{random.randint(0, 255)}.0/24")
        if not any(candidate.overlaps(net) and net.prefixlen > 0 for net in routed):
            return candidate
    raise RuntimeError("no free /24 in 10.64.0.0/10 for the sandboxes")
