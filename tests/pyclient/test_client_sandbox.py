"""Sandbox lifecycle through the client: create, connect, list, info, set_timeout, pause and
resume (auto_resume too), logs, kill, and the context manager."""
import time

import pytest

import cellbox
from cellbox import Sandbox


def test_create_with_everything_and_info(conn):
    sb = Sandbox.create(template="python3", timeout_s=120, env={"GREETING": "hello"},
                        metadata={"suite": "pyclient", "case": "create"}, limits={"memory": "512M"}, **conn)
    try:
        info = sb.info()
        assert isinstance(info, cellbox.SandboxInfo)
        assert info.id == sb.id == sb.sandbox_id
        assert info.state == "running" and info.template == "python3"
        assert info.timeout_s == 120 and info.ends_at
        assert info.metadata == {"suite": "pyclient", "case": "create"}
        assert info.limits["memory_bytes"] == 512 * 1024 * 1024
        assert [c.id for c in info.contexts] == [sb.id] and info.contexts[0].default
        assert sb.run_code("import os; os.environ['GREETING']").text == "'hello'"
        assert sb.commands.run("echo $GREETING").stdout == "hello\n"
        assert sb.is_running()
    finally:
        assert sb.kill() is True
    assert sb.kill() is False
    assert not sb.is_running()


def test_connect_and_list(conn, sandbox):
    again = Sandbox.connect(sandbox.id, **conn)
    assert again.id == sandbox.id
    sandbox.run_code("shared = 'from the first handle'")
    assert again.run_code("shared").text == "'from the first handle'"
    with pytest.raises(cellbox.NotFoundError) as e:
        Sandbox.connect("0000-no-such-sandbox", **conn)
    assert e.value.status == 404 and "does not exist" in e.value.message

    tagged = Sandbox.create(timeout_s=0, metadata={"suite": "pyclient", "case": "list"}, **conn)
    try:
        everything = Sandbox.list(**conn)
        assert {sandbox.id, tagged.id} <= {s.id for s in everything}
        assert all(isinstance(s, cellbox.SandboxInfo) for s in everything)
        assert [s.id for s in Sandbox.list(metadata={"case": "list"}, **conn)] == [tagged.id]
        assert Sandbox.list(metadata={"case": "list", "suite": "other"}, **conn) == []
        assert tagged.id in {s.id for s in Sandbox.list(state="running", **conn)}
        assert tagged.id not in {s.id for s in Sandbox.list(state="paused", **conn)}
        with pytest.raises(cellbox.BadRequestError):
            Sandbox.list(state="sleepy", **conn)
    finally:
        tagged.kill()


def test_set_timeout(sandbox):
    info = sandbox.set_timeout(600)
    assert info.timeout_s == 600 and info.ends_at
    assert sandbox.set_timeout(0).ends_at is None


def test_pause_resume_and_auto_resume(conn, fresh):
    fresh.run_code("kept = [1, 2, 3]")
    assert fresh.pause().state == "paused"
    assert fresh.pause().state == "paused"            # pausing twice is fine
    with pytest.raises(cellbox.SandboxPausedError) as e:
        fresh.run_code("kept")
    assert isinstance(e.value, cellbox.ConflictError) and e.value.status == 409
    assert "resume" in e.value.message
    with pytest.raises(cellbox.SandboxPausedError):
        fresh.files.read("anything")
    assert fresh.resume().state == "running"
    assert fresh.run_code("kept").text == "[1, 2, 3]"  # memory was kept

    fresh.pause()
    woken = Sandbox.connect(fresh.id, auto_resume=True, **conn)
    assert woken.run_code("sum(kept)").text == "6"
    assert fresh.info().state == "running"


def test_get_logs(fresh):
    fresh.run_code("print('logged line')")
    logs = fresh.get_logs(limit=50)
    assert any(e["source"] == "execute" and "logged line" in e["text"] for e in logs)


def test_context_manager_deletes_the_sandbox(conn):
    with Sandbox.create(**conn) as sb:
        sid = sb.id
        assert sb.run_code("1 + 1").text == "2"
    with pytest.raises(cellbox.NotFoundError):
        Sandbox.connect(sid, **conn)

    with pytest.raises(RuntimeError):
        with Sandbox.create(**conn) as sb:
            sid = sb.id
            raise RuntimeError("boom")
    assert sid not in {s.id for s in Sandbox.list(**conn)}


def test_default_ttl_is_five_minutes(conn):
    with Sandbox.create(**conn) as sb:
        assert sb.info().timeout_s == 300


def test_ttl_expiry(conn):
    sb = Sandbox.create(timeout_s=1, **conn)
    deadline = time.monotonic() + 15
    while sb.is_running() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not sb.is_running()
    sb.kill()
