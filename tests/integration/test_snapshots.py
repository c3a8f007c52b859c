"""/v1 snapshots (issue 24): a running sandbox's snapshot on the daemon's disk, sealed; a restore
into a new sandbox (its own id, its own user, the snapshot's files) or the same sandbox rewound in
place; a tampered snapshot refused whole; a full disk while snapshotting loses nothing of the
running sandbox and leaves nothing half-written.

The process-image and namespace levels are the core and python parts' (kernel/checkpoint.h,
kernel/namespace_transfer.h); these tests check what holds at every level: the files, the
settings, the per-context report, the seal and the store."""
import contextlib
import os
import subprocess
import threading
import uuid

import pytest

from helpers.daemon import Daemon
from helpers.snippets import release, wait_for_file
from helpers.v1 import V1
from helpers.wait import wait_until

pytestmark = pytest.mark.cellbox_only


@pytest.fixture(scope="module")
def daemon():
    d = Daemon().start()
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


def snapshot(v1, sid, **body):
    r = v1.post(f"v1/sandboxes/{sid}/snapshots", json=body)
    assert r.status_code == 201, f"snapshot -> {r.status_code} {r.text[:500]}"
    return r.json()


def restore(v1, snapshot_id, expect=201, **body):
    r = v1.post(f"v1/snapshots/{snapshot_id}/restore", json=body)
    assert r.status_code == expect, f"restore -> {r.status_code} {r.text[:500]}"
    model = r.json()
    if expect == 201:
        v1.created.append(model["id"])
    return model


def uid_of(v1, sid):
    return int(v1.value(sid, "import os; os.getuid()"))


def snapshot_dir(daemon, snapshot_id):
    return os.path.join(daemon.data_dir, "snapshots", snapshot_id)


def test_a_snapshot_is_listed_with_its_contexts_and_settings(v1, daemon):
    sandbox = v1.create(timeout_s=0, metadata={"owner": "ana"}, env={"GREETING": "hi"})
    sid = sandbox["id"]
    v1.write(sid, "notes.txt", "kept")
    model = snapshot(v1, sid, name="before-risk", metadata={"step": "3"})
    assert model["sandbox_id"] == sid and model["name"] == "before-risk"
    assert model["metadata"] == {"step": "3"} and model["template"] == sandbox["template"]
    assert model["bytes"]["files"] > 0
    [context] = model["contexts"]
    assert context["context_id"] == sid and context["language"] == "python"
    assert context["carried"] in ("process", "python", "restarted")
    assert v1.get(f"v1/snapshots/{model['snapshot_id']}").json() == model
    mine = v1.get("v1/snapshots", params={"sandbox_id": sid}).json()
    assert [s["snapshot_id"] for s in mine] == [model["snapshot_id"]]
    assert v1.get("v1/snapshots", params={"sandbox_id": str(uuid.uuid4())}).json() == []
    # the store is the daemon's alone: its folder and key are 0700 / 0600
    assert os.stat(snapshot_dir(daemon, model["snapshot_id"])).st_mode & 0o077 == 0
    assert os.stat(os.path.join(daemon.data_dir, "snapshot.key")).st_mode & 0o777 == 0o600
    # the sandbox went on running, unchanged
    assert v1.model(sid)["state"] == "running"
    assert v1.read(sid, "notes.txt") == b"kept"


def test_a_restore_is_a_new_sandbox_with_the_snapshots_files_and_its_own_user(v1):
    source = v1.create(timeout_s=0, metadata={"owner": "ana"}, env={"GREETING": "hi"})
    sid = source["id"]
    v1.write(sid, "data/table.csv", "a,b\n1,2\n")
    v1.command(sid, "ln -s /etc/shadow /workspace/data/link && mkfifo /workspace/data/pipe")
    taken = snapshot(v1, sid)
    v1.write(sid, "data/table.csv", "changed after the snapshot")

    restored = restore(v1, taken["snapshot_id"], metadata={"copy": "1"})
    nid = restored["id"]
    assert nid != sid and restored["state"] == "running"
    assert restored["metadata"] == {"owner": "ana", "copy": "1"}
    assert restored["limits"] == source["limits"]
    [outcome] = restored["restore"]["contexts"]
    assert outcome["from_context_id"] == sid and outcome["context_id"] == nid
    assert outcome["carried"] in ("process", "python", "restarted")
    assert v1.read(nid, "data/table.csv") == b"a,b\n1,2\n"
    assert v1.value(nid, "import os; os.environ['GREETING']") == "'hi'"
    # its files are its own user's, a user other than the source's
    assert uid_of(v1, nid) != uid_of(v1, sid)
    owners = v1.command(nid, "stat -c %u /workspace/data/table.csv /workspace/data").stdout
    assert set(owners.split()) == {str(uid_of(v1, nid))}
    # the planted link is a link again, never the host's file; the FIFO is not carried
    listing = v1.command(nid, "readlink /workspace/data/link; test -e /workspace/data/pipe "
                              "&& echo pipe || echo no-pipe").stdout
    assert listing.split() == ["/etc/shadow", "no-pipe"]
    # the two sandboxes' files are independent from now on
    v1.write(nid, "data/table.csv", "the copy's")
    assert v1.read(sid, "data/table.csv") == b"changed after the snapshot"
    v1.write(sid, "only-in-source.txt", "x")
    assert v1.get(v1.files_url(nid), params={"path": "only-in-source.txt"}).status_code == 404


def test_create_with_snapshot_id_restores_too(v1):
    sid = v1.create(timeout_s=0)["id"]
    v1.write(sid, "a.txt", "from the snapshot")
    taken = snapshot(v1, sid)
    r = v1.post("v1/sandboxes", json={"snapshot_id": taken["snapshot_id"], "timeout_s": 60})
    assert r.status_code == 201, r.text
    model = r.json()
    v1.created.append(model["id"])
    assert model["timeout_s"] == 60 and model["restore"]["snapshot_id"] == taken["snapshot_id"]
    assert v1.read(model["id"], "a.txt") == b"from the snapshot"
    r = v1.post("v1/sandboxes", json={"snapshot_id": taken["snapshot_id"], "template": "python3"})
    assert r.status_code == 400 and "'template' cannot be given" in r.json()["message"]


def test_a_rewind_in_place_keeps_the_id_and_puts_the_files_back(v1):
    sid = v1.create(timeout_s=0)["id"]
    v1.write(sid, "a.txt", "version 1")
    taken = snapshot(v1, sid)
    v1.write(sid, "a.txt", "version 2")
    v1.write(sid, "b.txt", "made after")
    rewound = restore(v1, taken["snapshot_id"], expect=200, sandbox_id=sid)
    assert rewound["id"] == sid and rewound["state"] == "running"
    assert rewound["restore"]["contexts"][0]["from_context_id"] == sid
    assert v1.read(sid, "a.txt") == b"version 1"
    assert v1.get(v1.files_url(sid), params={"path": "b.txt"}).status_code == 404
    assert v1.value(sid, "1 + 1") == "2"


def test_a_rewind_names_only_the_snapshots_own_sandbox(v1):
    sid = v1.create(timeout_s=0)["id"]
    other = v1.create(timeout_s=0)["id"]
    taken = snapshot(v1, sid)
    r = v1.post(f"v1/snapshots/{taken['snapshot_id']}/restore", json={"sandbox_id": other})
    assert r.status_code == 400 and f"is of sandbox {sid}" in r.json()["message"]


def test_a_tampered_snapshot_is_refused_whole(v1, daemon):
    sid = v1.create(timeout_s=0)["id"]
    v1.write(sid, "a.txt", "sealed")
    taken = snapshot(v1, sid)
    folder = snapshot_dir(daemon, taken["snapshot_id"])
    image = [n for n in os.listdir(folder) if n.startswith("workspace")][0]
    path = os.path.join(folder, image)
    with open(path, "r+b") as f:  # one byte changed past the first data, outside cellbox
        f.seek(0x400 + 0x38)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    before = {s["id"] for s in v1.sandboxes()}
    r = v1.post(f"v1/snapshots/{taken['snapshot_id']}/restore", json={})
    assert r.status_code == 403, r.text
    assert "seal does not match" in r.json()["message"]
    assert {s["id"] for s in v1.sandboxes()} == before  # nothing was made of it
    r = v1.post(f"v1/snapshots/{taken['snapshot_id']}/restore", json={"sandbox_id": sid})
    assert r.status_code == 403
    assert v1.read(sid, "a.txt") == b"sealed"  # the rewind did not touch the sandbox


def test_a_changed_description_is_refused_too(v1, daemon):
    sid = v1.create(timeout_s=0)["id"]
    taken = snapshot(v1, sid)
    path = os.path.join(snapshot_dir(daemon, taken["snapshot_id"]), "snapshot.json")
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:  # a larger memory limit written in by hand
        f.write(text.replace('"memory_bytes": ', '"memory_bytes": 9'))
    r = v1.post(f"v1/snapshots/{taken['snapshot_id']}/restore", json={})
    assert r.status_code == 403 and "seal does not match" in r.json()["message"]


def test_delete_and_not_found(v1, daemon):
    sid = v1.create(timeout_s=0)["id"]
    taken = snapshot(v1, sid)
    assert v1.delete(f"v1/snapshots/{taken['snapshot_id']}").status_code == 204
    assert not os.path.exists(snapshot_dir(daemon, taken["snapshot_id"]))
    for method, path in (("get", ""), ("delete", ""), ("post", "/restore")):
        r = getattr(v1, method)(f"v1/snapshots/{taken['snapshot_id']}{path}")
        assert r.status_code == 404, (method, path, r.status_code)
        assert "does not exist" in r.json()["message"]
    r = v1.get("v1/snapshots/../../etc")
    assert r.status_code == 404


def test_a_busy_or_paused_sandbox_is_not_snapshotted(v1):
    sid = v1.create(timeout_s=0)["id"]
    assert v1.post(f"v1/sandboxes/{sid}/pause").status_code == 200
    r = v1.post(f"v1/sandboxes/{sid}/snapshots", json={})
    assert r.status_code == 409 and "is paused" in r.json()["message"]
    assert v1.post(f"v1/sandboxes/{sid}/resume").status_code == 200
    r = v1.post(f"v1/sandboxes/{sid}/snapshots", json={"name": ""})
    assert r.status_code == 400


def test_a_sandbox_running_a_cell_is_not_snapshotted(v1, daemon):
    sid = v1.create(timeout_s=0)["id"]
    done = {}
    cell = wait_for_file("go", before="open('/workspace/running', 'w').close()")
    runner = threading.Thread(target=lambda: done.update(ev=v1.execute(sid, cell)))
    runner.start()
    try:
        wait_until(lambda: os.path.exists(os.path.join(daemon.workspace(sid), "running")),
                   timeout=30, message="the cell to start")
        r = v1.post(f"v1/sandboxes/{sid}/snapshots", json={})
        assert r.status_code == 409, r.text
        assert "is busy" in r.json()["message"] and "wait until it is idle" in r.json()["message"]
        assert v1.get("v1/snapshots", params={"sandbox_id": sid}).json() == []
    finally:
        release(daemon, sid, "go")
        runner.join(timeout=60)
    assert done["ev"].stdout == "go seen\n"  # the cell ran on, undisturbed


@contextlib.contextmanager
def small_filesystem_at(path, size):
    """A tmpfs of `size` mounted at `path` (made if needed); unmounted and removed after."""
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", path],
                   check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", path], check=False)
        with contextlib.suppress(OSError):
            os.rmdir(path)


def test_a_full_disk_fails_the_snapshot_and_loses_nothing(make_daemon):
    d = make_daemon(start=False)
    with small_filesystem_at(os.path.join(d.data_dir, "snapshots"), "2m"):
        d.start()
        v1 = V1(d)
        try:
            sid = v1.create(timeout_s=0)["id"]
            v1.command(sid, "head -c 8000000 /dev/urandom > /workspace/big.bin && "
                            "sha256sum /workspace/big.bin > /workspace/big.sum")
            r = v1.post(f"v1/sandboxes/{sid}/snapshots", json={})
            assert r.status_code == 507, r.text
            assert "no space" in r.json()["message"]
            # nothing half-written is left, and nothing is listed
            assert os.listdir(os.path.join(d.data_dir, "snapshots")) == []
            assert v1.get("v1/snapshots").json() == []
            # the sandbox runs on with its files whole
            assert v1.model(sid)["state"] == "running"
            check = v1.command(sid, "cd /workspace && sha256sum -c big.sum")
            assert check[-1]["exit_code"] == 0, check
            assert v1.value(sid, "2 * 21") == "42"
        finally:
            v1.cleanup()
            d.stop()  # before the small filesystem is unmounted; make_daemon checks the rest


def test_a_snapshot_survives_a_daemon_restart(make_daemon):
    first = make_daemon()
    v1 = V1(first)
    sid = v1.create(timeout_s=0)["id"]
    v1.write(sid, "a.txt", "across restarts")
    assert v1.value(sid, "kept = [7]; len(kept)") == "1"
    taken = snapshot(v1, sid)
    carried = taken["contexts"][0]["carried"]
    v1.cleanup()
    first.stop()
    second = make_daemon(start=False)
    second.data_dir = first.data_dir
    second.start()
    v1 = V1(second)
    try:
        assert [s["snapshot_id"] for s in v1.get("v1/snapshots").json()] == [taken["snapshot_id"]]
        restored = restore(v1, taken["snapshot_id"])
        assert v1.read(restored["id"], "a.txt") == b"across restarts"
        if carried != "restarted":  # its variables too, at the level it was taken
            assert restored["restore"]["contexts"][0]["carried"] in ("process", "python")
            assert v1.value(restored["id"], "kept[0] * 6") == "42"
    finally:
        v1.cleanup()
        assert second.finish() is None  # before the first's teardown removes the data dir
