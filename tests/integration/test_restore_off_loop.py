"""A restore does not stall the daemon (issue 24, "offloop2"): the snapshot's files are copied
into the new sandbox's workspace on a worker thread, and its kernel starts only once they are all
there.

Ordering, not timing: while the large file is still being copied into the new sandbox's
workspace (it is there, shorter than it will be), another sandbox's cell is answered, and the file
is still short when that answer arrives. A daemon that copied on its loop could not answer the
cell before the copy had ended. The restored kernel then sees the whole file: it never started
on a half-copied workspace."""
import glob
import os
import threading

import pytest

from helpers.daemon import Daemon
from helpers.v1 import V1
from helpers.wait import wait_until

pytestmark = pytest.mark.cellbox_only

LARGE_MIB = 768
LARGE_BYTES = LARGE_MIB << 20
WRITE_LARGE = (
    "chunk = bytes(range(256)) * 4096\n"
    f"with open('big.bin', 'wb') as f:\n"
    f"    for _ in range({LARGE_MIB}):\n"
    "        f.write(chunk)\n"
    "marker = 'kept'"
)


@pytest.fixture(scope="module")
def daemon():
    d = Daemon().start()
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


def file_being_copied(daemon, known):
    """(path, size) of big.bin in a workspace that is none of `known`'s while it is still
    shorter than the original: the restore's copy under way."""
    for path in glob.glob(os.path.join(daemon.data_dir, "workspaces", "*", "big.bin")):
        if os.path.basename(os.path.dirname(path)) in known:
            continue
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            continue
        if 0 < size < LARGE_BYTES:
            return path, size
    return None


def test_another_sandboxs_cell_finishes_while_a_restores_files_are_copied(v1, daemon):
    source = v1.create(timeout_s=0, limits={"disk": "2G"})["id"]
    other = v1.create(timeout_s=0)["id"]
    assert not v1.execute(source, WRITE_LARGE, timeout=300).errors
    r = v1.post(f"v1/sandboxes/{source}/snapshots", json={}, timeout=300)
    assert r.status_code == 201, r.text[:500]
    snapshot_id = r.json()["snapshot_id"]
    assert v1.value(other, "21 * 2").strip() == "42"

    answer = {}
    restoring = V1(daemon)  # a connection of its own: the request waits for its answer

    def restore():
        r = restoring.post(f"v1/snapshots/{snapshot_id}/restore", json={}, timeout=300)
        answer["status"], answer["body"] = r.status_code, r.json()

    thread = threading.Thread(target=restore)
    thread.start()
    try:
        path, _ = wait_until(lambda: file_being_copied(daemon, {source, other}), timeout=120,
                             interval=0.002, message="the restore's copy of big.bin to begin")
        assert v1.value(other, "6 * 7").strip() == "42"
        # Served while the copy was still under way: the file is still short, the restore
        # unanswered.
        assert os.stat(path).st_size < LARGE_BYTES, "the other cell waited for the copy"
        assert "status" not in answer, "the other cell waited for the whole restore"
    finally:
        thread.join(timeout=300)
    assert not thread.is_alive()
    assert answer["status"] == 201, answer
    restored = answer["body"]["id"]
    v1.created.append(restored)
    # Its kernel started on the whole workspace, with its state.
    assert v1.value(restored, "import os; os.path.getsize('big.bin')").strip() == str(LARGE_BYTES)
    assert v1.value(restored, "marker").strip() == "'kept'"
    assert v1.value(other, "1 + 1").strip() == "2"


def test_a_daemon_stopped_during_a_restores_copy_exits_cleanly_and_leaves_nothing():
    """SIGTERM while a worker copies a restore's files: the daemon waits for the copy, starts
    no kernel on it, and exits 0; no workspace, volume image or mount of the restore is left."""
    d = Daemon().start()
    try:
        client = V1(d)
        wait_until(lambda: client.get("api").json()["zygote_ready"], timeout=120,
                   message="the zygote")
        source = client.create(timeout_s=0, limits={"disk": "2G"})["id"]
        assert not client.execute(source, WRITE_LARGE, timeout=300).errors
        r = client.post(f"v1/sandboxes/{source}/snapshots", json={}, timeout=300)
        assert r.status_code == 201, r.text[:500]
        snapshot_id = r.json()["snapshot_id"]
        answer = {}

        def restore():
            try:
                answer["status"] = V1(d).post(f"v1/snapshots/{snapshot_id}/restore", json={},
                                              timeout=300).status_code
            except Exception as error:  # the daemon went away mid-request
                answer["error"] = repr(error)

        thread = threading.Thread(target=restore)
        thread.start()
        try:
            path, _ = wait_until(lambda: file_being_copied(d, {source}), timeout=120,
                                 interval=0.002, message="the restore's copy of big.bin to begin")
            restored = os.path.basename(os.path.dirname(path))
            assert d.stop() == 0, d.log_tail()
        finally:
            thread.join(timeout=120)
        assert not thread.is_alive()
        assert answer.get("status") != 201, answer
        assert not os.path.exists(d.workspace(restored))
        assert not glob.glob(os.path.join(d.data_dir, "volumes", restored + "*"))
        with open("/proc/self/mountinfo") as f:
            assert restored not in f.read()
    finally:
        problem = d.finish()
    assert problem is None, problem


def loop_devices_backed_by(name):
    """Loop devices whose backing file's path holds `name`."""
    found = []
    for backing in glob.glob("/sys/block/loop*/loop/backing_file"):
        try:
            with open(backing) as f:
                if name in f.read():
                    found.append(backing.split("/")[3])
        except OSError:
            continue
    return found


def cgroups_named_for(sid):
    found = []
    for root, dirs, _ in os.walk("/sys/fs/cgroup"):
        if root.count("/") > 10:
            dirs[:] = []
            continue
        found += [os.path.join(root, d) for d in dirs if sid in d]
    return found


def test_a_sandbox_deleted_while_its_rewinds_files_are_copied_leaves_nothing(v1, daemon):
    """A rewind in place copies the snapshot's files on a worker too: another sandbox's cell is
    answered meanwhile, and a DELETE during the copy is served at once; the rewind answers 409
    naming why, and no workspace, volume, loop device, mount or cgroup of the sandbox is left."""
    source = v1.create(timeout_s=0, limits={"disk": "2G"})["id"]
    other = v1.create(timeout_s=0)["id"]
    assert not v1.execute(source, WRITE_LARGE, timeout=300).errors
    r = v1.post(f"v1/sandboxes/{source}/snapshots", json={}, timeout=300)
    assert r.status_code == 201, r.text[:500]
    snapshot_id = r.json()["snapshot_id"]
    big = os.path.join(daemon.workspace(source), "big.bin")
    answer = {}
    rewinding = V1(daemon)

    def rewind():
        r = rewinding.post(f"v1/snapshots/{snapshot_id}/restore", json={"sandbox_id": source},
                           timeout=300)
        answer["status"], answer["body"] = r.status_code, r.json()

    def being_copied():
        try:
            return 0 < os.stat(big).st_size < LARGE_BYTES
        except FileNotFoundError:
            return False

    thread = threading.Thread(target=rewind)
    thread.start()
    try:
        wait_until(being_copied, timeout=120, interval=0.002,
                   message="the rewind's copy of big.bin to begin")
        assert v1.value(other, "6 * 7").strip() == "42"
        assert os.stat(big).st_size < LARGE_BYTES, "the other cell waited for the copy"
        assert v1.delete(f"v1/sandboxes/{source}").status_code in (200, 204)
    finally:
        thread.join(timeout=300)
    assert not thread.is_alive()
    v1.created.remove(source)
    assert answer["status"] == 409, answer
    assert "deleted" in answer["body"]["message"], answer
    # Nothing of the sandbox is left once the copy let go of its volume.
    wait_until(lambda: not loop_devices_backed_by(source) and not cgroups_named_for(source),
               timeout=60, message="the deleted sandbox's loop device and cgroup to go")
    assert not os.path.exists(daemon.workspace(source))
    assert not glob.glob(os.path.join(daemon.data_dir, "volumes", source + "*"))
    with open("/proc/self/mountinfo") as f:
        assert source not in f.read()
    assert v1.value(other, "1 + 1").strip() == "2"
