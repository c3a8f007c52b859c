"""/v1 pause and resume: a paused sandbox is frozen (no CPU), keeps its memory, stops its TTL,
refuses calls that need it live (409 naming the state) unless they carry ?auto_resume=true."""
import datetime
import time
import uuid

from helpers.wait import wait_until
from helpers.asserts import assert_v1_error, expect


def cpu(v1, sid):
    return v1.model(sid)["usage"]["cpu_seconds"]


def pause(v1, sid):
    r = expect(v1.post(f"v1/sandboxes/{sid}/pause"), 200)
    m = r.json()
    assert m["state"] == "paused" and m["ends_at"] is None, m
    return m


def resume(v1, sid, **params):
    r = expect(v1.post(f"v1/sandboxes/{sid}/resume", params=params), 200)
    m = r.json()
    assert m["state"] == "running", m
    return m


def test_paused_sandbox_uses_no_cpu(v1, fresh):
    sid = fresh["id"]
    cmd = v1.background(sid, "while :; do :; done")
    assert cmd["state"] == "running"
    start = cpu(v1, sid)
    wait_until(lambda: cpu(v1, sid) > start + 0.3, timeout=10, message="the busy loop to use CPU")
    pause(v1, sid)
    time.sleep(0.2)  # let the freezer settle
    a = cpu(v1, sid)
    time.sleep(1.0)
    b = cpu(v1, sid)
    assert b - a < 0.02, f"a paused sandbox used {b - a:.3f} s of CPU in 1 s"
    # the model and the list say so
    assert v1.model(sid)["state"] == "paused"
    assert sid in {s["id"] for s in v1.sandboxes(state="paused")}
    assert sid not in {s["id"] for s in v1.sandboxes(state="running")}
    # pausing a paused sandbox is a no-op
    pause(v1, sid)
    resume(v1, sid)
    c = cpu(v1, sid)
    # runs again: CPU time grows (how fast depends on the machine's load, so no rate is asserted)
    wait_until(lambda: cpu(v1, sid) > c + 0.3, timeout=10, message="the resumed busy loop to use CPU")
    r = v1.get(f"v1/sandboxes/{sid}/commands/{cmd['id']}")
    assert r.status_code == 200 and r.json()["state"] == "running", r.text


def test_paused_refuses_live_calls(v1, fresh):
    sid = fresh["id"]
    v1.execute(sid, "kept = 'memory survives'")
    pause(v1, sid)
    hint = f"sandbox {sid} is paused"
    assert_v1_error(v1.post(f"v1/sandboxes/{sid}/execute", json={"code": "1"}), 409, hint, "resume")
    assert_v1_error(v1.post(f"v1/sandboxes/{sid}/commands", json={"cmd": "true"}), 409, hint)
    assert_v1_error(v1.post(f"v1/sandboxes/{sid}/commands", json={"cmd": "true", "background": True}), 409, hint)
    assert_v1_error(v1.post(f"v1/sandboxes/{sid}/contexts", json={}), 409, hint)
    assert_v1_error(v1.get(f"v1/sandboxes/{sid}/files/tar", params={"path": "/workspace"}), 409, hint)
    assert_v1_error(v1.post(f"v1/sandboxes/{sid}/contexts/{sid}/restart"), 409, hint)
    # still there, still paused, readable
    assert v1.model(sid)["state"] == "paused"
    resume(v1, sid)
    assert v1.value(sid, "kept") == "'memory survives'"


def test_auto_resume(v1, fresh):
    sid = fresh["id"]
    v1.execute(sid, "n = 41")
    pause(v1, sid)
    ev = v1.execute(sid, "n + 1", params={"auto_resume": "true"})
    assert ev.main_result["text"] == "42", ev
    assert v1.model(sid)["state"] == "running"
    pause(v1, sid)
    ev = v1.command(sid, "echo resumed", params={"auto_resume": "true"})
    assert ev.stdout == "resumed\n", ev
    assert v1.model(sid)["state"] == "running"
    pause(v1, sid)
    r = v1.put(f"v1/sandboxes/{sid}/files", params={"path": "ar.txt", "auto_resume": "true"}, data=b"x")
    assert r.status_code in (200, 201), r.text
    assert v1.model(sid)["state"] == "running"
    # auto_resume=false is the default behaviour
    pause(v1, sid)
    assert_v1_error(v1.post(f"v1/sandboxes/{sid}/execute", params={"auto_resume": "false"}, json={"code": "1"}),
                 409, "paused")
    resume(v1, sid)


def test_ttl_stops_while_paused(v1):
    m = v1.create(timeout_s=2)
    sid = m["id"]
    pause(v1, sid)
    time.sleep(3.5)
    got = v1.model(sid)
    assert got["state"] == "paused" and got["ends_at"] is None, got
    resumed = resume(v1, sid)
    ends = datetime.datetime.fromisoformat(resumed["ends_at"].replace("Z", "+00:00"))
    left = (ends - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
    assert 0.5 <= left <= 3, f"after resume the TTL should start again from 2 s: {left:.2f} s left"
    # and then it expires
    wait_until(lambda: (lambda r: r.status_code == 404 or r.json()["state"] == "dead")(v1.get(f"v1/sandboxes/{sid}")),
               timeout=10, interval=0.2, message="the resumed sandbox to expire")
    v1.created[:] = [s for s in v1.created if s != sid]


def test_pause_resume_unknown(v1):
    bogus = str(uuid.uuid4())
    assert_v1_error(v1.post(f"v1/sandboxes/{bogus}/pause"), 404, bogus)
    assert_v1_error(v1.post(f"v1/sandboxes/{bogus}/resume"), 404, bogus)


def test_resume_running_is_harmless(v1, sandbox):
    sid = sandbox["id"]
    resume(v1, sid)
    assert v1.value(sid, "'ok'") == "'ok'"
