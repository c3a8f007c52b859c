"""cellbox.Snapshot (list, get, restore, delete) and Sandbox.snapshot / fork / hibernate (issue 24,
the Python client over /v1/snapshots, /fork and /hibernate): each verb's answer, and that the
state it names really came back (a variable set before the snapshot, changed after it)."""
import asyncio
import contextlib

import pytest

import cellbox
from cellbox import Sandbox, Snapshot
from cellbox.aio import AsyncSandbox, AsyncSnapshot
from helpers.wait import wait_until


@pytest.fixture(scope="module", autouse=True)
def zygote_ready(daemon):
    """A snapshot or a fork images a zygote's clone: the sandboxes here start once the daemon's
    zygote is ready (one made before is a plain process, which cannot be imaged)."""
    client = daemon.client()
    wait_until(lambda: client.get("api").json()["zygote_ready"], timeout=120, message="the zygote")


@contextlib.contextmanager
def killed_after(*sandboxes):
    try:
        yield
    finally:
        for sb in sandboxes:
            if isinstance(sb, Sandbox):
                with contextlib.suppress(cellbox.CellboxError):
                    sb.kill()


def test_snapshot_list_get_restore_delete(fresh, conn):
    fresh.run_code("kept = [41, 'a']")
    snap = fresh.snapshot(name="pyclient-snap", metadata={"why": "test"})
    assert snap.sandbox_id == fresh.id and snap.name == "pyclient-snap", snap
    assert snap.metadata == {"why": "test"}, snap
    assert snap.id in [s.id for s in Snapshot.list(sandbox_id=fresh.id, **conn)]
    assert Snapshot.get(snap.id, **conn).created_at == snap.created_at
    fresh.run_code("kept = 'changed'")

    restored = Snapshot.restore(snap.id, **conn)
    with killed_after(restored):
        assert restored.id != fresh.id
        assert restored.run_code("kept").text == "[41, 'a']"
        assert restored.restore_report is not None
        assert fresh.run_code("kept").text == "'changed'"  # the source is its own sandbox

    rewound = Snapshot.restore(snap.id, into=fresh.id, **conn)
    assert rewound.id == fresh.id
    assert fresh.run_code("kept").text == "[41, 'a']"

    assert Snapshot.delete(snap.id, **conn) is True
    assert Snapshot.delete(snap.id, **conn) is False
    with pytest.raises(cellbox.NotFoundError):
        Snapshot.get(snap.id, **conn)
    with pytest.raises(cellbox.NotFoundError):
        Snapshot.restore(snap.id, **conn)


def test_fork_gives_independent_copies(fresh):
    fresh.run_code("counter = 10")
    fresh.files.write("/workspace/note.txt", "source")
    forks = fresh.fork(count=2, timeout_s=120)
    with killed_after(*forks):
        assert len(forks) == 2 and all(isinstance(f, Sandbox) for f in forks), forks
        first, second = forks
        assert len({fresh.id, first.id, second.id}) == 3
        first.run_code("counter += 1")
        first.files.write("/workspace/note.txt", "first")
        assert first.run_code("counter").text == "11"
        assert second.run_code("counter").text == "10"
        assert fresh.run_code("counter").text == "10"
        assert second.files.read("/workspace/note.txt") == b"source"
        assert fresh.files.read("/workspace/note.txt") == b"source"


def test_fork_count_out_of_range_is_refused(fresh):
    with pytest.raises(cellbox.BadRequestError):
        fresh.fork(count=17)


def test_hibernate_then_resume_keeps_state(fresh, conn):
    fresh.run_code("asleep = 'still here'")
    model = fresh.hibernate()
    assert model.state == "hibernated" and model.snapshot_id, model
    assert Sandbox.connect(fresh.id, **conn).info().state == "hibernated"
    assert fresh.resume().state == "running"
    assert fresh.run_code("asleep").text == "'still here'"


def test_aio_snapshot_and_fork(conn):
    async def scenario():
        sb = await AsyncSandbox.create(timeout_s=0, **conn)
        try:
            await sb.run_code("seed = 7")
            snap = await sb.snapshot()
            listed = [s.id for s in await AsyncSnapshot.list(sandbox_id=sb.id, **conn)]
            restored = await AsyncSnapshot.restore(snap.id, **conn)
            (fork,) = await sb.fork()
            try:
                return (snap.id in listed, isinstance(restored, AsyncSandbox),
                        (await restored.run_code("seed")).text, isinstance(fork, AsyncSandbox),
                        (await fork.run_code("seed")).text, await AsyncSnapshot.delete(snap.id, **conn))
            finally:
                await restored.kill()
                await fork.kill()
        finally:
            await sb.kill()

    assert asyncio.run(scenario()) == (True, True, "7", True, "7", True)
