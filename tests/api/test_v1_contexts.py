"""/v1 contexts: more Python kernels in one sandbox, sharing its files but not their state."""
import uuid

import pytest

from helpers.wait import wait_until
from helpers.asserts import assert_v1_error, expect


@pytest.fixture(scope="module")
def ctx_box(v1):
    m = v1.create(timeout_s=0)
    yield m
    v1.remove(m["id"])


def new_context(v1, sid, **body):
    r = v1.post(f"v1/sandboxes/{sid}/contexts", json=body)
    assert r.status_code == 201, f"{r.status_code} {r.text}"
    return r.json()


def test_create_and_list(v1, ctx_box):
    sid = ctx_box["id"]
    c = new_context(v1, sid)
    assert c["id"] and c["id"] != sid
    assert c["language"] == "python" and c["cwd"] == "/workspace" and c["default"] is False
    assert c["state"] in ("starting", "idle", "busy")
    listed = expect(v1.get(f"v1/sandboxes/{sid}/contexts"), 200).json()
    assert listed[0]["id"] == sid and listed[0]["default"] is True
    assert c["id"] in [x["id"] for x in listed]
    assert sum(1 for x in listed if x["default"]) == 1
    # the sandbox model lists them too
    assert c["id"] in [x["id"] for x in v1.model(sid)["contexts"]]
    # a context is not a sandbox of its own
    assert c["id"] not in {s["id"] for s in v1.sandboxes()}
    assert v1.value(sid, "'default'", context_id=c["id"]) == "'default'"


def test_state_isolated_files_shared(v1, ctx_box):
    sid = ctx_box["id"]
    c = new_context(v1, sid)
    v1.execute(sid, "only_here = 'ctx'\nopen('/workspace/from_ctx.txt', 'w').write('shared!')", context_id=c["id"])
    assert v1.value(sid, "'only_here' in dir()") == "False"
    assert v1.value(sid, "'only_here' in dir()", context_id=c["id"]) == "True"
    assert v1.value(sid, "open('/workspace/from_ctx.txt').read()") == "'shared!'"
    # the same sandbox: the same processes are visible, the same /tmp
    v1.execute(sid, "open('/tmp/from_default', 'w').write('t')")
    assert v1.value(sid, "open('/tmp/from_default').read()", context_id=c["id"]) == "'t'"


def test_cwd_and_bad_bodies(v1, ctx_box):
    sid = ctx_box["id"]
    c = new_context(v1, sid, cwd="/tmp", language="python")
    assert c["cwd"] == "/tmp"
    assert v1.value(sid, "import os; os.getcwd()", context_id=c["id"]) == "'/tmp'"
    url = f"v1/sandboxes/{sid}/contexts"
    assert_v1_error(v1.post(url, json={"cwd": "relative/dir"}), 400, "cwd")
    assert_v1_error(v1.post(url, json={"language": "ruby"}), 400, "language")
    assert_v1_error(v1.post(url, json={"cwd": 7}), 400, "cwd")
    assert_v1_error(v1.post(url, json={"shell": "bash"}), 400, "unknown field 'shell'")
    assert_v1_error(v1.post(f"v1/sandboxes/{uuid.uuid4()}/contexts", json={}), 404)
    assert_v1_error(v1.get(f"v1/sandboxes/{uuid.uuid4()}/contexts"), 404)


def test_a_context_whose_cwd_is_missing_dies_saying_why(v1, ctx_box):
    """The sandbox's setup fails in the context's process: its state, and an execution in it,
    name the reason, and the sandbox's other contexts carry on."""
    sid = ctx_box["id"]
    c = new_context(v1, sid, cwd="/no/such/dir")
    why = "could not be set up: cannot change to the working directory: /no/such/dir"

    def dead():
        listed = expect(v1.get(f"v1/sandboxes/{sid}/contexts"), 200).json()
        return next(x for x in listed if x["id"] == c["id"])["state"] == "dead" and listed
    listed = wait_until(dead, timeout=30, message="the context to die")
    assert why in next(x for x in listed if x["id"] == c["id"])["reason"]
    r = expect(v1.post(f"v1/sandboxes/{sid}/execute", json={"code": "1", "context_id": c["id"]}), 200)
    assert '"KernelDied"' in r.text and why in r.text, r.text
    assert v1.value(sid, "6 * 7") == "42"


def test_restart_context(v1, ctx_box):
    sid = ctx_box["id"]
    c = new_context(v1, sid)
    v1.execute(sid, "forget_me = 1\nopen('/workspace/kept_by_ctx_restart', 'w').write('k')", context_id=c["id"])
    v1.execute(sid, "default_state = 5")
    r = expect(v1.post(f"v1/sandboxes/{sid}/contexts/{c['id']}/restart"), 200)
    assert r.json()["id"] == c["id"] and r.json()["default"] is False
    assert v1.value(sid, "'forget_me' in dir()", context_id=c["id"]) == "False"
    assert v1.value(sid, "open('/workspace/kept_by_ctx_restart').read()", context_id=c["id"]) == "'k'"
    # other contexts keep their state
    assert v1.value(sid, "default_state") == "5"
    assert_v1_error(v1.post(f"v1/sandboxes/{sid}/contexts/{uuid.uuid4()}/restart"), 404)


def test_restart_default_restarts_sandbox(v1):
    m = v1.create(timeout_s=0)
    sid = m["id"]
    try:
        v1.execute(sid, "x = 1\nopen('/tmp/gone', 'w').write('t')\nopen('/workspace/stays', 'w').write('w')")
        cmd = v1.background(sid, "sleep 1000")
        r = expect(v1.post(f"v1/sandboxes/{sid}/contexts/{sid}/restart"), 200)
        assert r.json()["id"] == sid and r.json()["default"] is True
        assert v1.model(sid)["state"] == "running"
        assert v1.value(sid, "'x' in dir()") == "False"
        assert v1.value(sid, "import os; os.path.exists('/tmp/gone')") == "False"
        assert v1.value(sid, "open('/workspace/stays').read()") == "'w'"

        def cmd_gone():
            g = v1.get(f"v1/sandboxes/{sid}/commands/{cmd['id']}")
            return g.status_code == 404 or g.json()["state"] == "exited"

        wait_until(cmd_gone, timeout=10, message="the sandbox's command to be gone after the restart")
        ev = v1.command(sid, "ps -eo args 2>/dev/null || ls /proc")
        assert "sleep 1000" not in ev.stdout, ev.stdout
    finally:
        v1.remove(sid)


def test_delete_context(v1, ctx_box):
    sid = ctx_box["id"]
    c = new_context(v1, sid)
    r = v1.delete(f"v1/sandboxes/{sid}/contexts/{c['id']}")
    assert r.status_code == 204 and not r.content, r.text
    assert c["id"] not in [x["id"] for x in expect(v1.get(f"v1/sandboxes/{sid}/contexts"), 200).json()]
    assert_v1_error(v1.post(f"v1/sandboxes/{sid}/execute", json={"code": "1", "context_id": c["id"]}), 404, c["id"])
    assert_v1_error(v1.delete(f"v1/sandboxes/{sid}/contexts/{c['id']}"), 404, c["id"])
    assert_v1_error(v1.delete(f"v1/sandboxes/{sid}/contexts/{sid}"), 409, "default")
    assert v1.value(sid, "'still here'") == "'still here'"
    assert v1.model(sid)["state"] == "running"


def test_contexts_go_with_the_sandbox(v1):
    m = v1.create(timeout_s=0)
    sid = m["id"]
    c = new_context(v1, sid)
    pid = v1.value(sid, "import os; os.getpid()", context_id=c["id"])
    assert pid.isdigit()
    assert v1.remove(sid).status_code == 204
    assert_v1_error(v1.get(f"v1/sandboxes/{sid}/contexts"), 404)
    assert v1.client.get(f"api/kernels/{c['id']}").status_code == 404
