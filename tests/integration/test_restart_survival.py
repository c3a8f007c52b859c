"""One daemon per data directory, sandbox uids unique on the host, and nothing of a daemon's
left on the host after it dies (issue 18, "Nothing lost").

Every daemon is stopped by pid (tests/helpers/daemon.py); a daemon killed with SIGKILL is
followed by a new one on the same data directory, which must clean up after it.
"""
import os

import pytest

from helpers.daemon import free_port, run_daemon_to_exit

pytestmark = pytest.mark.cellbox_only

UID_BLOCK_BASE = 200000
UID_BLOCK_SIZE = 65536


def sandbox_uid(d):
    """The uid a new kernel of daemon `d` runs as (the kernel is deleted again)."""
    cb = d.client()
    with cb.kernel() as model:
        with cb.ready_ws(model["id"]) as ws:
            return int(ws.execute("import os; print(os.getuid())").stdout)


def block_of(uid):
    return (uid - UID_BLOCK_BASE) // UID_BLOCK_SIZE


def recorded_block(d):
    with open(os.path.join(d.data_dir, "uid-block")) as f:
        return int(f.read())


def test_second_daemon_on_the_same_data_dir_is_refused_naming_the_holder(make_daemon):
    first = make_daemon()
    second = run_daemon_to_exit(["--ip", "127.0.0.1", "--port", str(free_port()), "--token", "t",
                                 "--data-dir", first.data_dir])
    assert second.returncode != 0
    assert f"pid {first.pid}" in second.stderr and "in use by another cellboxd" in second.stderr
    # the first is untouched: still serving, its lock file still naming it
    assert first.alive()
    assert first.client().get("api/kernels").status_code == 200
    with open(os.path.join(first.data_dir, "lock")) as f:
        assert int(f.read()) == first.pid


def test_daemons_on_different_data_dirs_never_share_a_uid(make_daemon):
    a, b = make_daemon(), make_daemon()
    uid_a, uid_b = sandbox_uid(a), sandbox_uid(b)
    assert block_of(uid_a) == recorded_block(a) and block_of(uid_b) == recorded_block(b)
    assert block_of(uid_a) != block_of(uid_b)
    # the lock files name their holders
    for d in (a, b):
        with open(f"/run/cellbox/uids/{recorded_block(d)}.lock") as f:
            pid, data_dir = f.read().split(maxsplit=1)
        assert int(pid) == d.pid and data_dir.strip() == d.data_dir
