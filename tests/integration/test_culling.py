"""Idle-kernel culling (--cull-idle-timeout, --cull-interval, --cull-connected, --cull-busy).

"Is not culled" cannot be observed by waiting a fixed time, so each test has a witness: an
idle, unconnected kernel created *after* the subject. When the witness is culled, the culler
has run past the timeout for a kernel that has been idle for less time than the subject, so
the subject would have been culled too if it were eligible.
"""
import pytest

from helpers.client import WSClosed
from helpers.snippets import release, wait_for_file
from helpers.wait import wait_until

pytestmark = pytest.mark.cellbox_only

CULL = ["--cull-idle-timeout", "2", "--cull-interval", "1"]
DEADLINE = 40  # seconds; culling should take ~timeout + interval


def gone(c, kid):
    return c.get(f"api/kernels/{kid}").status_code == 404


def make_witness(c):
    w = c.create_kernel()
    c.ready_ws(w["id"]).close()  # make sure it is up, then leave it unconnected
    return w


def test_idle_unconnected_kernel_is_culled(make_daemon):
    d = make_daemon(args=CULL)
    c = d.client()
    k = c.create_kernel()
    with c.ready_ws(k["id"]) as ws:
        ws.execute("1")
    wait_until(lambda: gone(c, k["id"]), timeout=DEADLINE, message="the idle kernel to be culled")
    assert k["id"] not in {m["id"] for m in c.get("api/kernels").json()}


def test_never_connected_kernel_is_culled(make_daemon):
    d = make_daemon(args=CULL)
    c = d.client()
    k = c.create_kernel()
    wait_until(lambda: gone(c, k["id"]), timeout=DEADLINE, message="the never-used kernel to be culled")


def test_culling_off_by_default(make_daemon):
    """Without --cull-idle-timeout nothing is culled: checked against a culling daemon's clock."""
    plain = make_daemon()
    culling = make_daemon(args=CULL)
    pc, cc = plain.client(), culling.client()
    subject = pc.create_kernel()
    pc.ready_ws(subject["id"]).close()
    witness = make_witness(cc)
    wait_until(lambda: gone(cc, witness["id"]), timeout=DEADLINE, message="the witness to be culled")
    assert pc.kernel_exists(subject["id"])


def test_connected_kernel_is_kept(make_daemon):
    d = make_daemon(args=CULL)
    c = d.client()
    subject = c.create_kernel()
    ws = c.ready_ws(subject["id"])
    try:
        witness = make_witness(c)
        wait_until(lambda: gone(c, witness["id"]), timeout=DEADLINE, message="the witness to be culled")
        assert c.kernel_exists(subject["id"])
        assert ws.execute("'still alive'").result_data()["text/plain"] == "'still alive'"
    finally:
        ws.close()
    # once disconnected it goes too
    wait_until(lambda: gone(c, subject["id"]), timeout=DEADLINE, message="the disconnected kernel to be culled")


def test_connected_kernel_is_culled_with_cull_connected(make_daemon):
    d = make_daemon(args=CULL + ["--cull-connected"])
    c = d.client()
    subject = c.create_kernel()
    ws = c.ready_ws(subject["id"])
    try:
        wait_until(lambda: gone(c, subject["id"]), timeout=DEADLINE,
                   message="the connected kernel to be culled")
        try:
            ws.wait_closed(timeout=30)
        except WSClosed:
            pass
    finally:
        ws.close()


def test_cull_connected_false_explicit(make_daemon):
    d = make_daemon(args=CULL + ["--cull-connected=false"])
    c = d.client()
    subject = c.create_kernel()
    ws = c.ready_ws(subject["id"])
    try:
        witness = make_witness(c)
        wait_until(lambda: gone(c, witness["id"]), timeout=DEADLINE, message="the witness to be culled")
        assert c.kernel_exists(subject["id"])
    finally:
        ws.close()


def test_busy_kernel_is_kept(make_daemon):
    d = make_daemon(args=CULL)
    c = d.client()
    subject = c.create_kernel()
    ws = c.ready_ws(subject["id"])
    req = ws.send_execute(wait_for_file("cull-go", limit=120))
    ws.wait_for(lambda m: m["msg_type"] == "execute_input", what="the long cell to start")
    ws.close()  # busy and unconnected
    try:
        wait_until(lambda: c.kernel_model(subject["id"])["connections"] == 0, timeout=10, message="disconnected")
        witness = make_witness(c)
        wait_until(lambda: gone(c, witness["id"]), timeout=DEADLINE, message="the witness to be culled")
        model = c.kernel_model(subject["id"])
        assert model["execution_state"] == "busy"
    finally:
        if c.kernel_exists(subject["id"]):
            release(d, subject["id"], "cull-go")
    del req


def test_busy_kernel_is_culled_with_cull_busy(make_daemon):
    d = make_daemon(args=CULL + ["--cull-busy"])
    c = d.client()
    subject = c.create_kernel()
    ws = c.ready_ws(subject["id"])
    ws.send_execute(wait_for_file("cull-go", limit=120))
    ws.wait_for(lambda m: m["msg_type"] == "execute_input", what="the long cell to start")
    ws.close()
    wait_until(lambda: gone(c, subject["id"]), timeout=DEADLINE, message="the busy kernel to be culled")


def test_dead_kernel_is_removed_by_culler(make_daemon):
    d = make_daemon(args=["--cull-idle-timeout", "600", "--cull-interval", "1"])
    c = d.client()
    k = c.create_kernel()
    with c.ready_ws(k["id"]) as ws:
        ws.send_execute("import os\nos._exit(1)")
    wait_until(lambda: gone(c, k["id"]), timeout=DEADLINE, message="the dead kernel to be removed")


def test_activity_postpones_culling(make_daemon):
    """A kernel that keeps executing is not culled while a less active one is."""
    d = make_daemon(args=CULL + ["--cull-connected"])
    c = d.client()
    active = c.create_kernel()
    ws = c.ready_ws(active["id"])
    try:
        witness = make_witness(c)
        # execute at least every half timeout until the witness is culled
        def witness_gone():
            ws.execute("1")
            return gone(c, witness["id"])
        wait_until(witness_gone, timeout=DEADLINE, interval=0.5, message="the witness to be culled")
        assert c.kernel_exists(active["id"])
    finally:
        ws.close()
