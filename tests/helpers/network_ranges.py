"""Ranges for the sandboxes of a test's cellboxd (--network-range): one of this run's own.

Two daemons on one range would both claim its gateway, so cellboxd refuses the second; tests of
other runs on the same machine (other work shares it) then never collide with ours. The range
lies in 10.70.0.0/12-ish space (10.70-10.79), the third octet from the pytest process's pid;
`index` (0-9) tells apart daemons of one run that live at the same time."""
import os


def sandbox_range(index=0):
    assert 0 <= index < 10
    return f"10.{70 + index}.{os.getpid() % 250}.0/24"


def gateway_of_range(network_range):
    return network_range.rsplit(".", 1)[0] + ".1"
