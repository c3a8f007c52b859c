"""/v1 sandboxes: templates, create/get/list/delete, filters, TTL, logs, the one model shared
with /api/kernels, dead sandboxes."""
import datetime
import threading
import time
import uuid


from helpers.wait import wait_until
from helpers.asserts import assert_v1_error, expect

GIB = 1 << 30
MIB = 1 << 20


def ts(text):
    """Parse the API's ISO 8601 UTC timestamps."""
    assert text.endswith("Z") or "+" in text[10:], text
    text = text.replace("Z", "+00:00")
    return datetime.datetime.fromisoformat(text)


def now():
    return datetime.datetime.now(datetime.timezone.utc)


def gone_or_dead(v1, sid):
    """An expired sandbox: removed (404), or at least no longer alive (state dead)."""
    r = v1.get(f"v1/sandboxes/{sid}")
    if r.status_code == 404:
        return "gone"
    if r.status_code == 200 and r.json()["state"] == "dead":
        return "dead"
    return None


def test_templates(v1):
    r = expect(v1.get("v1/templates"), 200)
    assert r.headers["Content-Type"].startswith("application/json")
    templates = r.json()
    assert isinstance(templates, list) and templates
    py = [t for t in templates if t["name"] == "python3"]
    assert py, templates
    assert py[0]["language"] == "python"
    assert py[0]["default"] is True
    assert isinstance(py[0]["display_name"], str) and py[0]["display_name"]
    assert sum(1 for t in templates if t["default"]) == 1, templates


def test_create_model(v1):
    before = now()
    r = v1.post("v1/sandboxes", json={"template": "python3", "timeout_s": 120,
                                      "metadata": {"user": "ann", "job": "7"}})
    assert r.status_code == 201, r.text
    m = r.json()
    v1.created.append(m["id"])
    assert r.headers.get("Location", "").endswith(f"/v1/sandboxes/{m['id']}"), r.headers
    assert m["template"] == "python3"
    assert m["state"] == "running"
    assert m["timeout_s"] == 120
    assert m["metadata"] == {"user": "ann", "job": "7"}
    started, ends = ts(m["started_at"]), ts(m["ends_at"])
    assert before - datetime.timedelta(seconds=5) <= started <= now() + datetime.timedelta(seconds=5)
    assert abs((ends - started).total_seconds() - 120) < 5, (m["started_at"], m["ends_at"])
    lim = m["limits"]
    for key in ("memory_bytes", "pids", "disk_bytes", "open_files", "timeout_s", "output_bytes"):
        assert type(lim[key]) is int, (key, lim)
    assert isinstance(lim["cpus"], (int, float)) and isinstance(lim["network"], bool)
    assert lim["memory_bytes"] == GIB and lim["disk_bytes"] == GIB and lim["network"] is False, lim
    assert m["contexts"] and len(m["contexts"]) == 1
    ctx = m["contexts"][0]
    assert ctx["id"] == m["id"] and ctx["default"] is True
    assert ctx["language"] == "python" and ctx["cwd"] == "/workspace"
    assert "reason" not in m or m["reason"] in (None, "")

    got = v1.model(m["id"])
    assert got["id"] == m["id"] and got["metadata"] == m["metadata"]
    usage = got["usage"]
    assert usage["memory_bytes"] > 0, usage
    assert usage["memory_peak_bytes"] >= usage["memory_bytes"] > 0, usage
    assert usage["cpu_seconds"] >= 0 and usage["disk_bytes"] >= 0, usage


def test_default_body_and_limits(v1):
    r = v1.post("v1/sandboxes")  # no body at all: every field is optional
    assert r.status_code == 201, r.text
    m = r.json()
    v1.created.append(m["id"])
    assert m["template"] == "python3" and m["state"] == "running"
    assert m["timeout_s"] == 300, m  # the documented default
    assert m["metadata"] == {}
    v1.remove(m["id"])

    m = v1.create(timeout_s=0, limits={"memory": "256M", "disk": "64M", "pids": 100})
    assert m["ends_at"] is None, m
    assert m["limits"]["memory_bytes"] == 256 * MIB, m["limits"]
    assert m["limits"]["disk_bytes"] == 64 * MIB, m["limits"]
    assert m["limits"]["pids"] == 100, m["limits"]
    v1.remove(m["id"])


def test_egress_lists_need_a_networked_sandbox(v1):
    """PUT .../network on a sandbox without network is a conflict that says how to get one (the
    lists themselves are tested with a network in tests/integration/test_network_core.py)."""
    m = v1.create(timeout_s=0)
    r = v1.put(f"v1/sandboxes/{m['id']}/network", json={"denyOut": ["0.0.0.0/0"]})
    assert r.status_code == 409, r.text
    assert "has no network" in r.json()["message"] and "--allow-network" in r.json()["message"]
    v1.remove(m["id"])


def test_env_reaches_contexts_and_commands(v1):
    m = v1.create(timeout_s=0, env={"MY_SETTING": "forty two", "lower_case_ok": "y"})
    try:
        assert v1.value(m["id"], "import os; os.environ.get('MY_SETTING'), os.environ.get('lower_case_ok')") \
            == "('forty two', 'y')"
        ev = v1.command(m["id"], 'printf "%s|%s" "$MY_SETTING" "$lower_case_ok"')
        assert ev.stdout == "forty two|y", ev
    finally:
        v1.remove(m["id"])


def test_list_and_filters(v1):
    tag = uuid.uuid4().hex
    a = v1.create(timeout_s=0, metadata={"suite": tag, "role": "a"})
    b = v1.create(timeout_s=0, metadata={"suite": tag, "role": "b"})
    try:
        everything = v1.sandboxes()
        ids = {s["id"] for s in everything}
        assert {a["id"], b["id"]} <= ids
        assert {s["id"] for s in v1.sandboxes(**{"metadata.suite": tag})} == {a["id"], b["id"]}
        assert [s["id"] for s in v1.sandboxes(**{"metadata.suite": tag, "metadata.role": "a"})] == [a["id"]]
        assert v1.sandboxes(**{"metadata.suite": tag, "metadata.role": "c"}) == []
        assert v1.sandboxes(**{"metadata.nope": "x"}) == []
        running = {s["id"] for s in v1.sandboxes(state="running")}
        assert {a["id"], b["id"]} <= running
        assert all(s["state"] == "running" for s in v1.sandboxes(state="running"))
        assert not {a["id"], b["id"]} & {s["id"] for s in v1.sandboxes(state="paused")}
        assert not {a["id"], b["id"]} & {s["id"] for s in v1.sandboxes(state="dead")}
        assert_v1_error(v1.get("v1/sandboxes", params={"state": "sleeping"}), 400, "state")
    finally:
        v1.remove(a["id"])
        v1.remove(b["id"])


def test_delete(v1):
    m = v1.create(timeout_s=0)
    sid = m["id"]
    r = v1.remove(sid)
    assert r.status_code == 204, r.text
    assert not r.content
    assert_v1_error(v1.get(f"v1/sandboxes/{sid}"), 404, f"sandbox {sid} does not exist")
    assert_v1_error(v1.delete(f"v1/sandboxes/{sid}"), 404, sid)
    assert sid not in {s["id"] for s in v1.sandboxes()}
    assert v1.client.get(f"api/kernels/{sid}").status_code == 404


def test_kernel_is_a_sandbox(v1):
    """A kernel made with POST /api/kernels is a sandbox with one context (never expiring)."""
    r = v1.client.post("api/kernels", json={"name": "python3"})
    assert r.status_code == 201, r.text
    kid = r.json()["id"]
    v1.created.append(kid)
    m = v1.model(kid)
    assert m["state"] == "running" and m["template"] == "python3"
    assert m["ends_at"] is None and m["timeout_s"] == 0, m
    assert [c["id"] for c in m["contexts"]] == [kid] and m["contexts"][0]["default"] is True
    assert kid in {s["id"] for s in v1.sandboxes()}
    assert v1.value(kid, "1 + 1") == "2"
    # deleting the sandbox deletes the kernel
    assert v1.remove(kid).status_code == 204
    assert v1.client.get(f"api/kernels/{kid}").status_code == 404
    assert kid not in {k["id"] for k in v1.client.get("api/kernels").json()}


def test_kernel_started_at_is_when_it_was_made(v1):
    """started_at of a kernel made through /api/kernels (or a Jupyter session) is when it was
    made, not when /v1 first looked at it."""
    for path, body in (("api/kernels", {"name": "python3"}),
                       ("api/sessions", {"path": "started.ipynb", "type": "notebook", "name": "",
                                         "kernel": {"name": "python3"}})):
        before = now()
        r = v1.client.post(path, json=body)
        after = now()
        assert r.status_code == 201, r.text
        kid = r.json()["id"] if path == "api/kernels" else r.json()["kernel"]["id"]
        v1.created.append(kid)
        assert v1.value(kid, "'ran a cell first'") == "'ran a cell first'"
        started = ts(v1.model(kid)["started_at"])
        assert before <= started <= after, (path, before, started, after)
        assert v1.remove(kid).status_code == 204


def test_sandbox_is_a_kernel(v1):
    m = v1.create(timeout_s=0)
    sid = m["id"]
    r = v1.client.get(f"api/kernels/{sid}")
    assert r.status_code == 200, r.text
    assert r.json()["id"] == sid and r.json()["name"] == "python3"
    assert sid in {k["id"] for k in v1.client.get("api/kernels").json()}
    # deleting the kernel deletes the sandbox
    assert v1.client.delete(f"api/kernels/{sid}").status_code == 204
    assert_v1_error(v1.get(f"v1/sandboxes/{sid}"), 404, sid)
    assert sid not in {s["id"] for s in v1.sandboxes()}
    v1.created.remove(sid)


def test_ttl_expiry_and_timeout_endpoint(v1):
    short = v1.create(timeout_s=2)
    kept = v1.create(timeout_s=2)
    never = v1.create(timeout_s=0)
    assert never["ends_at"] is None
    # POST /timeout: 0 = never
    r = expect(v1.post(f"v1/sandboxes/{kept['id']}/timeout", json={"timeout_s": 0}), 200)
    assert r.json()["ends_at"] is None and r.json()["timeout_s"] == 0, r.json()
    t0 = time.monotonic()
    how = wait_until(lambda: gone_or_dead(v1, short["id"]), timeout=15, interval=0.2,
                     message="the 2 s sandbox to expire")
    took = time.monotonic() - t0
    assert took < 10, took
    # reading of the contract: an expired sandbox is gone for good (E2B kills it); "dead" is
    # tolerated, but it must not be listed as running nor be usable
    assert short["id"] not in {s["id"] for s in v1.sandboxes(state="running")}
    if how == "gone":
        assert v1.client.get(f"api/kernels/{short['id']}").status_code == 404
    assert v1.model(kept["id"])["state"] == "running"
    assert v1.model(never["id"])["state"] == "running"
    # POST /timeout: N s from now
    r = expect(v1.post(f"v1/sandboxes/{kept['id']}/timeout", json={"timeout_s": 100}), 200)
    ends = ts(r.json()["ends_at"])
    assert 95 <= (ends - now()).total_seconds() <= 105, r.json()
    assert r.json()["timeout_s"] == 100
    for short_id in (kept["id"], never["id"]):
        v1.remove(short_id)
    v1.created[:] = [s for s in v1.created if s != short["id"]]


def test_expiry_while_a_cell_or_a_command_runs_says_so(v1):
    """The execution stream and the command stream of a sandbox that expires under them end
    with its cause and the way to avoid it, not a bare kernel death or SIGKILL."""
    m = v1.create(timeout_s=0)
    sid = m["id"]
    results = {}

    def command():
        results["command"] = v1.command(sid, "echo started; sleep 120", timeout=90)

    runner = threading.Thread(target=command)
    runner.start()
    wait_until(lambda: any(c["state"] == "running" for c in v1.get(f"v1/sandboxes/{sid}/commands").json()),
               timeout=30, message="the command to start")
    expect(v1.post(f"v1/sandboxes/{sid}/timeout", json={"timeout_s": 2}), 200)
    ev = v1.execute(sid, "print('running', flush=True)\nimport time\ntime.sleep(120)", timeout=90)
    runner.join(timeout=90)
    err = ev.one("error")
    assert err["name"] == "SandboxExpired", err
    assert err["value"].startswith("sandbox expired: its timeout of 2 s ended while this cell ran"), err
    assert f"/v1/sandboxes/{sid}/timeout" in err["value"] and "cellbox timeout" in err["value"], err
    assert ev.types[-1] == "end_of_execution"
    exit_event = results["command"][-1]
    assert exit_event["signal"] == "SIGKILL", exit_event
    assert exit_event["reason"].startswith("sandbox expired: its timeout of 2 s ended while this command ran"), exit_event
    wait_until(lambda: gone_or_dead(v1, sid), timeout=30, message="the expired sandbox to go")
    v1.created[:] = [s for s in v1.created if s != sid]


def test_timeout_endpoint_errors(v1, sandbox):
    sid = sandbox["id"]
    assert_v1_error(v1.post(f"v1/sandboxes/{sid}/timeout", json={"timeout_s": -1}), 400, "timeout_s")
    assert_v1_error(v1.post(f"v1/sandboxes/{sid}/timeout", json={"timeout_s": "10"}), 400, "timeout_s")
    assert_v1_error(v1.post(f"v1/sandboxes/{sid}/timeout", json={}), 400, "timeout_s")
    assert_v1_error(v1.post(f"v1/sandboxes/{sid}/timeout", json={"timeout_s": 5, "x": 1}), 400, "x")
    assert_v1_error(v1.post(f"v1/sandboxes/{sid}/timeout", data="{", headers={"Content-Type": "application/json"}), 400)
    bogus = str(uuid.uuid4())
    assert_v1_error(v1.post(f"v1/sandboxes/{bogus}/timeout", json={"timeout_s": 5}), 404, bogus)
    assert v1.model(sid)["ends_at"] is None  # nothing changed


def test_logs(v1, sandbox):
    sid = sandbox["id"]
    mark = uuid.uuid4().hex[:8]
    v1.execute(sid, f"print('exec-{mark}')")
    v1.command(sid, f"echo cmd-{mark}; echo cmderr-{mark} >&2")
    r = expect(v1.get(f"v1/sandboxes/{sid}/logs"), 200)
    logs = r.json()
    assert isinstance(logs, list) and logs
    for e in logs:
        assert e["source"] in ("execute", "command", "sandbox"), e
        assert e["stream"] in ("stdout", "stderr", "event"), e
    stamps = [ts(e["timestamp"]) for e in logs]
    assert stamps == sorted(stamps), "logs are oldest first"
    assert any(e["source"] == "execute" and e["stream"] == "stdout" and f"exec-{mark}" in e["text"] for e in logs), logs
    assert any(e["source"] == "command" and e["stream"] == "stdout" and f"cmd-{mark}" in e["text"] for e in logs), logs
    assert any(e["source"] == "command" and e["stream"] == "stderr" and f"cmderr-{mark}" in e["text"] for e in logs), logs
    last = expect(v1.get(f"v1/sandboxes/{sid}/logs", params={"limit": 1}), 200).json()
    assert len(last) == 1 and last[0] == logs[-1], (last, logs[-3:])
    assert len(expect(v1.get(f"v1/sandboxes/{sid}/logs", params={"limit": 2}), 200).json()) == 2
    assert_v1_error(v1.get(f"v1/sandboxes/{uuid.uuid4()}/logs"), 404)


def test_dead_sandbox(v1):
    m = v1.create(timeout_s=0)
    sid = m["id"]
    ev = v1.execute(sid, "import os; os._exit(3)", expect_status=None)
    assert ev.status == 200, ev
    dead = wait_until(lambda: (lambda s: s if s["state"] == "dead" else None)(v1.model(sid)), timeout=20,
                      message="the sandbox to be dead")
    assert isinstance(dead.get("reason"), str) and "3" in dead["reason"], dead
    assert sid in {s["id"] for s in v1.sandboxes(state="dead")}
    assert sid not in {s["id"] for s in v1.sandboxes(state="running")}
    r = v1.post(f"v1/sandboxes/{sid}/execute", json={"code": "1"})
    assert_v1_error(r, 409, f"sandbox {sid} is dead")
    assert_v1_error(v1.post(f"v1/sandboxes/{sid}/pause"), 409, "dead")
    assert_v1_error(v1.post(f"v1/sandboxes/{sid}/resume"), 409, "dead")
    assert_v1_error(v1.post(f"v1/sandboxes/{sid}/commands", json={"cmd": "true"}), 409, "dead")
    assert v1.remove(sid).status_code == 204
    assert v1.get(f"v1/sandboxes/{sid}").status_code == 404


def test_usage_grows(v1, sandbox):
    sid = sandbox["id"]
    before = v1.model(sid)["usage"]
    # half a second of the cell's own CPU time, not of the clock: on a loaded machine a wall-clock
    # loop gets less CPU than it runs for
    v1.execute(sid, "blob = bytearray(64 << 20)\nimport time\nt = time.process_time()\n"
                    "while time.process_time() - t < 0.5: pass")
    after = v1.model(sid)["usage"]
    assert after["cpu_seconds"] >= before["cpu_seconds"] + 0.3, (before, after)
    assert after["memory_peak_bytes"] >= 64 << 20, after
    assert after["memory_bytes"] >= before["memory_bytes"] + (48 << 20), (before, after)
    v1.execute(sid, "del blob")
    v1.write(sid, "usage.bin", b"\0" * (4 << 20))
    assert v1.model(sid)["usage"]["disk_bytes"] >= 4 << 20
