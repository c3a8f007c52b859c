"""A snapshot does not stall the daemon (issue 24, "offloop"): the kernel's pages are copied
into the snapshot's image, the workspace copied and the snapshot sealed on a worker thread, so
another sandbox is served while that runs.

Ordering, not timing: the kernel's image is written first, and only once it is whole does the
loop open the next file of the snapshot (context-0.namespace). A daemon that copied the pages on
its loop could not answer another sandbox's cell until that copy had ended and the namespace file
was there; here the other sandbox's cell is answered while the image is still being written."""
import glob
import os
import threading

import pytest

from helpers.daemon import Daemon
from helpers.v1 import V1
from helpers.wait import wait_until

pytestmark = pytest.mark.cellbox_only

LARGE_MIB = 512


@pytest.fixture(scope="module")
def daemon():
    d = Daemon().start()
    # The kernel is imaged only as a zygote's clone: the sandboxes here start once it is ready.
    wait_until(lambda: d.client().get("api").json()["zygote_ready"], timeout=120,
               message="the zygote")
    yield d
    problem = d.finish()
    if problem:
        pytest.fail(problem, pytrace=False)


@pytest.fixture
def v1(daemon):
    client = V1(daemon)
    yield client
    client.cleanup()
    for snapshot in client.get("v1/snapshots").json():
        client.delete(f"v1/snapshots/{snapshot['snapshot_id']}")


def image_being_written(daemon):
    """The partial snapshot's image path, once pages have reached it."""
    for path in glob.glob(os.path.join(daemon.data_dir, "snapshots", "*.partial", "context-0.image")):
        try:
            if os.stat(path).st_blocks > 0:
                return path
        except FileNotFoundError:
            pass
    return None


def test_another_sandboxs_cell_finishes_while_a_large_kernel_is_snapshotted(v1, daemon):
    large = v1.create(timeout_s=0, limits={"memory": "1536M"})["id"]
    other = v1.create(timeout_s=0)["id"]
    v1.execute(large, f"import numpy as np\nheld = np.ones({LARGE_MIB} << 17)\n"
                      "marker = float(held.sum())")
    assert v1.value(other, "21 * 2").strip() == "42"

    answer = {}
    snapshotting = V1(daemon)  # a connection of its own: the request waits for its answer

    def take_snapshot():
        r = snapshotting.post(f"v1/sandboxes/{large}/snapshots", json={})
        answer["status"], answer["body"] = r.status_code, r.json()

    thread = threading.Thread(target=take_snapshot)
    thread.start()
    try:
        image = wait_until(lambda: image_being_written(daemon), timeout=60, interval=0.002,
                           message="the snapshot's image to be written")
        namespace = os.path.join(os.path.dirname(image), "context-0.namespace")
        assert v1.value(other, "6 * 7").strip() == "42"
        # The other sandbox was served while the large kernel's pages were still being copied:
        # the snapshot had not reached its next step, nor answered.
        assert not os.path.exists(namespace), "the other cell waited for the page copy"
        assert "status" not in answer, "the other cell waited for the whole snapshot"
    finally:
        thread.join(timeout=300)
    assert not thread.is_alive()
    assert answer["status"] == 201, answer
    assert answer["body"]["contexts"][0]["carried"] == "process"
    assert answer["body"]["bytes"]["memory"] >= LARGE_MIB << 20
    # Both sandboxes go on: the imaged kernel kept its state, the other serves.
    assert v1.value(large, "marker == float(held.sum())").strip() == "True"
    assert v1.value(other, "1 + 1").strip() == "2"


def test_a_sandbox_deleted_while_its_pages_are_copied_fails_its_snapshot(v1, daemon):
    """The loop serves a DELETE during the copy: the snapshot is answered (409, naming why),
    nothing of it is kept, and another sandbox goes on."""
    large = v1.create(timeout_s=0, limits={"memory": "1536M"})["id"]
    other = v1.create(timeout_s=0)["id"]
    v1.execute(large, f"import numpy as np\nheld = np.ones({LARGE_MIB} << 17)")
    answer = {}
    snapshotting = V1(daemon)

    def take_snapshot():
        r = snapshotting.post(f"v1/sandboxes/{large}/snapshots", json={})
        answer["status"], answer["body"] = r.status_code, r.json()

    thread = threading.Thread(target=take_snapshot)
    thread.start()
    try:
        wait_until(lambda: image_being_written(daemon), timeout=60, interval=0.002,
                   message="the snapshot's image to be written")
        assert v1.delete(f"v1/sandboxes/{large}").status_code in (200, 204)
    finally:
        thread.join(timeout=300)
    assert not thread.is_alive()
    assert answer["status"] == 409, answer
    assert "deleted" in answer["body"]["message"], answer
    v1.created.remove(large)
    assert v1.get("v1/snapshots", params={"sandbox_id": large}).json() == []
    wait_until(lambda: not glob.glob(os.path.join(daemon.data_dir, "snapshots", "*.partial")),
               timeout=60, message="the partial snapshot to be removed")
    assert v1.value(other, "1 + 1").strip() == "2"


def test_a_daemon_stopped_during_a_snapshot_exits_cleanly():
    """SIGTERM while a worker thread copies a large kernel's pages: the daemon waits for the
    copy (worker_stop) and exits 0, with nothing for the sanitizers to report; the snapshot is
    not kept whole (it never was sealed)."""
    d = Daemon().start()
    try:
        client = V1(d)
        wait_until(lambda: client.get("api").json()["zygote_ready"], timeout=120,
                   message="the zygote")
        large = client.create(timeout_s=0, limits={"memory": "1536M"})["id"]
        client.execute(large, f"import numpy as np\nheld = np.ones({LARGE_MIB} << 17)")
        answer = {}

        def take_snapshot():
            try:
                answer["status"] = V1(d).post(f"v1/sandboxes/{large}/snapshots", json={}).status_code
            except Exception as error:  # the daemon went away mid-request
                answer["error"] = repr(error)

        thread = threading.Thread(target=take_snapshot)
        thread.start()
        try:
            wait_until(lambda: image_being_written(d), timeout=60, interval=0.002,
                       message="the snapshot's image to be written")
            assert d.stop() == 0, d.log_tail()
        finally:
            thread.join(timeout=120)
        assert not thread.is_alive()
        assert "stopped" in d.log_text()
        sealed = [name for name in os.listdir(os.path.join(d.data_dir, "snapshots"))
                  if not name.endswith(".partial") and os.path.exists(
                      os.path.join(d.data_dir, "snapshots", name, "seal"))]
        assert answer.get("status") != 201 and sealed == [], (answer, sealed)
    finally:
        problem = d.finish()
    assert problem is None, problem
