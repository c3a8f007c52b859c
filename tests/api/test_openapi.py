"""docs/openapi.yaml: the document is sound, and a live cellboxd answers as it says.

Every response of this module's client is checked against the schema the document declares for
its path, method, status and content type (an undeclared status fails), every NDJSON line
against the stream's line schema (ExecutionEvent, CommandEvent). The last test checks that each
path+method of the document was exercised here at least once.
"""
import base64
import io
import os
import re
import tarfile
import time
import uuid

import pytest
import requests
from jsonschema import Draft202012Validator

from helpers.asserts import assert_v1_error, expect
from helpers.v1 import V1
from openapi_spec import METHODS, Spec

SPEC = Spec(soft=True)
_reported = [0]  # problems reported so far (those of module fixtures go to the first test using them)


@pytest.fixture(autouse=True)
def _mismatches():
    """Every test fails with the list of the responses that did not match the document
    (collected, not raised, so that one wrong field does not hide the others)."""
    yield
    new = SPEC.problems[_reported[0]:]
    _reported[0] = len(SPEC.problems)
    if new:
        pytest.fail(f"{len(new)} response(s) do not match docs/openapi.yaml:\n\n" + "\n\n".join(new[:12]),
                    pytrace=False)


# ---------------------------------------------------------------------------- the document

def test_document_basics():
    doc = SPEC.doc
    assert str(doc["openapi"]).startswith("3.1"), doc["openapi"]
    assert doc["info"]["title"] and doc["info"]["version"]
    assert set(doc["components"]["securitySchemes"]) == {"tokenHeader", "tokenQuery"}
    header = doc["components"]["securitySchemes"]["tokenHeader"]
    assert header == {**header, "type": "apiKey", "in": "header", "name": "Authorization"}
    query = doc["components"]["securitySchemes"]["tokenQuery"]
    assert query == {**query, "type": "apiKey", "in": "query", "name": "token"}
    assert {"tokenHeader": []} in doc["security"] and {"tokenQuery": []} in doc["security"]
    err = doc["components"]["schemas"]["Error"]
    assert set(err["required"]) == {"reason", "message"}
    assert all(p.startswith("/v1/") for p in doc["paths"]), "only the /v1 API is described here"


def test_every_ref_resolves():
    refs = SPEC.all_refs()
    assert len(refs) > 50
    for where, ref in refs:
        try:
            SPEC.resolve(ref)
        except AssertionError as e:
            raise AssertionError(f"{where}: {e}") from None


def test_every_operation_is_complete():
    ids = []
    for template, method, op in SPEC.operations():
        what = f"{method.upper()} {template}"
        assert op.get("operationId"), f"{what} has no operationId"
        ids.append(op["operationId"])
        responses = op.get("responses")
        assert responses, f"{what} has no responses"
        assert any(str(s).startswith("2") for s in responses), f"{what} has no success response"
        assert "401" in responses, f"{what} does not declare 401"
        for status, resp in responses.items():
            assert re.fullmatch(r"[1-5]\d\d", str(status)), (what, status)
            resp = SPEC.deref(resp)
            assert resp.get("description"), (what, status)
            if str(status)[0] in "45":
                schema = resp["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/Error"}, (what, status, schema)
        # every {param} of the path is declared as a path parameter
        params = [SPEC.deref(p) for p in SPEC.doc["paths"][template].get("parameters", []) + op.get("parameters", [])]
        declared = {p["name"] for p in params if p["in"] == "path"}
        assert declared == set(re.findall(r"\{([^}]+)\}", template)), (what, declared)
        for p in params:
            if p["in"] == "path":
                assert p["required"] is True, (what, p)
        for body_type, media in (op.get("requestBody", {}).get("content") or {}).items():
            assert "schema" in media, (what, body_type)
    assert len(ids) == len(set(ids)), "operationIds must be unique"
    for template, item in SPEC.doc["paths"].items():
        assert set(item) <= set(METHODS) | {"parameters", "summary", "description"}, (template, set(item))


def test_status_codes_of_the_contract_are_declared():
    """The codes docs/api.md lists for each route appear in the document."""
    want = {
        ("/v1/sandboxes", "post"): {"201", "400", "403", "404"},
        ("/v1/sandboxes", "get"): {"200", "400"},
        ("/v1/sandboxes/{id}", "get"): {"200", "404"},
        ("/v1/sandboxes/{id}", "delete"): {"204", "404"},
        ("/v1/sandboxes/{id}/timeout", "post"): {"200", "400", "404"},
        ("/v1/sandboxes/{id}/network", "put"): {"200", "400", "404", "409"},
        ("/v1/sandboxes/{id}/pause", "post"): {"200", "404", "409"},
        ("/v1/sandboxes/{id}/resume", "post"): {"200", "404", "409"},
        ("/v1/sandboxes/{id}/logs", "get"): {"200", "404"},
        ("/v1/sandboxes/{id}/execute", "post"): {"200", "400", "404", "409"},
        ("/v1/sandboxes/{id}/contexts", "post"): {"201", "400"},
        ("/v1/sandboxes/{id}/contexts/{cid}/restart", "post"): {"200", "404"},
        ("/v1/sandboxes/{id}/contexts/{cid}", "delete"): {"204", "404", "409"},
        ("/v1/sandboxes/{id}/files", "get"): {"200", "400", "403", "404"},
        ("/v1/sandboxes/{id}/files", "put"): {"200", "201", "400", "403", "413", "507"},
        ("/v1/sandboxes/{id}/files", "delete"): {"204", "404", "409"},
        ("/v1/sandboxes/{id}/files/stat", "get"): {"200", "404"},
        ("/v1/sandboxes/{id}/files/list", "get"): {"200", "400", "404"},
        ("/v1/sandboxes/{id}/files/mkdir", "post"): {"200", "201", "409"},
        ("/v1/sandboxes/{id}/files/move", "post"): {"200", "404"},
        ("/v1/sandboxes/{id}/files/batch", "post"): {"200", "413", "507"},
        ("/v1/sandboxes/{id}/files/tar", "get"): {"200", "404"},
        ("/v1/sandboxes/{id}/files/tar", "put"): {"200", "400", "507"},
        ("/v1/sandboxes/{id}/commands", "post"): {"200", "201", "404"},
        ("/v1/sandboxes/{id}/commands/{cid}/stdin", "post"): {"204", "409"},
        ("/v1/sandboxes/{id}/commands/{cid}/signal", "post"): {"204"},
        ("/v1/sandboxes/{id}/commands/{cid}/wait", "get"): {"200"},
        ("/v1/sandboxes/{id}/commands/{cid}", "delete"): {"204"},
        ("/v1/sandboxes/{id}/commands/{cid}", "get"): {"200", "404"},
        ("/v1/run", "post"): {"200", "400"},
        ("/v1/sandboxes/{id}/snapshots", "post"): {"201", "400", "404", "409", "507"},
        ("/v1/sandboxes/{id}/hibernate", "post"): {"200", "404", "409", "507"},
        ("/v1/snapshots", "get"): {"200"},
        ("/v1/snapshots/{sid}", "get"): {"200", "404"},
        ("/v1/snapshots/{sid}", "delete"): {"204", "404", "409"},
        ("/v1/snapshots/{sid}/restore", "post"): {"200", "201", "400", "403", "404", "409"},
    }
    for (template, method), codes in want.items():
        declared = set(map(str, SPEC.doc["paths"][template][method]["responses"]))
        assert codes <= declared, (template, method, codes - declared)


def test_schemas_are_valid_2020_12():
    for name, schema in SPEC.doc["components"]["schemas"].items():
        Draft202012Validator.check_schema(schema)
    assert SPEC.doc.get("jsonSchemaDialect", "").startswith("https://json-schema.org/draft/2020-12")


def schema(name):
    return {"$ref": f"#/components/schemas/{name}"}


def valid(instance, name):
    return not list(SPEC.validator(schema(name)).iter_errors(instance))


def test_schemas_reject_what_they_should():
    ok_entry = {"name": "a", "path": "/workspace/a", "type": "file", "size": 1, "mode": "0644",
                "modified_at": "2026-11-22T17:00:00.000000Z"}
    assert valid(ok_entry, "Entry")
    assert not valid({**ok_entry, "type": "fifo"}, "Entry")
    assert not valid({k: v for k, v in ok_entry.items() if k != "size"}, "Entry")
    assert valid({"type": "stdout", "text": "x", "timestamp": "2026-11-22T17:00:00Z"}, "ExecutionEvent")
    assert valid({"type": "end_of_execution"}, "ExecutionEvent")
    assert valid({"type": "keepalive"}, "ExecutionEvent")
    assert valid({"type": "result", "text": "1", "is_main_result": True}, "ExecutionEvent")
    assert not valid({"type": "result", "text": "1"}, "ExecutionEvent")
    assert not valid({"type": "bogus"}, "ExecutionEvent")
    assert not valid({"type": "error", "name": "E", "value": "v"}, "ExecutionEvent")
    assert not valid({"type": "number_of_executions", "execution_count": "1"}, "ExecutionEvent")
    assert valid({"type": "exit", "exit_code": 0, "timed_out": False, "wall_ms": 3}, "CommandEvent")
    assert not valid({"type": "exit", "exit_code": None, "timed_out": False, "wall_ms": 3}, "CommandEvent")
    assert not valid({"type": "accounting"}, "ExecutionEvent")
    assert not valid({"reason": "Not Found"}, "Error")
    ctx = {"id": "x", "language": "python", "cwd": "/workspace", "default": True, "state": "idle"}
    box = {"id": "x", "template": "python3", "state": "running", "started_at": "2026-11-22T17:00:00.000000Z",
           "ends_at": None, "timeout_s": 0, "metadata": {},
           "limits": {"memory_bytes": 1, "pids": 1, "cpus": 1.0, "disk_bytes": 1, "open_files": 1,
                      "timeout_s": 0, "output_bytes": 1, "network": False},
           "usage": {"cpu_seconds": 0.1, "memory_bytes": 1, "memory_peak_bytes": 1, "disk_bytes": 0},
           "contexts": [ctx], "network": False}
    assert valid(box, "Sandbox")
    networked = {"address": "10.88.0.2", "allowOut": ["203.0.113.20"], "denyOut": ["0.0.0.0/0"]}
    assert valid({**box, "network": networked}, "Sandbox")
    assert valid({**box, "network": {**networked, "address": None}}, "Sandbox")
    assert not valid({**box, "network": True}, "Sandbox"), "network is false or its description"
    assert not valid({k: v for k, v in box.items() if k != "network"}, "Sandbox")
    assert not valid({**box, "state": "sleeping"}, "Sandbox")
    assert not valid({**box, "state": "dead"}, "Sandbox"), "a dead sandbox needs a reason"
    assert valid({**box, "state": "dead", "reason": "kernel died"}, "Sandbox")
    assert not valid({**box, "state": "paused", "ends_at": "2026-11-22T17:00:00Z"}, "Sandbox")
    assert not valid({**box, "metadata": {"a": 1}}, "Sandbox")
    cmd = {"id": "c", "pid": 3, "cmd": "ls", "cwd": "/workspace", "state": "running", "exit_code": None,
           "signal": None, "timed_out": False, "started_at": "2026-11-22T17:00:00Z", "ended_at": None}
    assert valid(cmd, "Command")
    assert not valid({**cmd, "state": "done"}, "Command")
    assert not valid(cmd, "CommandWithOutput")
    assert valid({**cmd, "stdout": "", "stderr": ""}, "CommandWithOutput")
    assert not valid({"status": "ok", "exit_code": 1, "output": "", "stdout": "", "stderr": "", "timed_out": False,
                      "truncated": False, "blocks": [],
                      "accounting": {"wall_ms": 1, "cpu_ms": 1, "memory_peak_bytes": 1, "output_bytes": 0}},
                     "RunResult")


# ---------------------------------------------------------------------------- live checks

@pytest.fixture(scope="module")
def api(daemon):
    client = V1(daemon, spec=SPEC)
    yield client
    client.cleanup()


@pytest.fixture(scope="module")
def box(api):
    m = api.create(timeout_s=0, metadata={"suite": "openapi"})
    yield m
    api.remove(m["id"])


def test_one_version_everywhere(cb):
    """The version the daemon reports (GET /api, from common/version.h) is the one this document
    and the Python client (clients/python) carry: the copies follow the source."""
    served = cb.get("api").json()["cellbox"]
    assert SPEC.doc["info"]["version"] == served
    client = os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python")
    with open(os.path.join(client, "cellbox", "__init__.py")) as f:
        assert re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1) == served
    with open(os.path.join(client, "pyproject.toml")) as f:
        assert re.search(r'^version = "([^"]+)"', f.read(), re.M).group(1) == served


def test_templates_and_sandboxes(api):
    expect(api.get("v1/templates"), 200)
    expect(api.get("v1/templates/python3"), 200)
    assert_v1_error(api.get("v1/templates/no-such"), 404)
    assert_v1_error(api.delete("v1/templates/python3"), 400)
    assert_v1_error(api.delete("v1/templates/no-such"), 404)
    assert_v1_error(api.post("v1/templates/python3/import", data=b"x"), 409)
    assert_v1_error(api.post("v1/templates/fresh/import", data=b"not a tarball",
                             headers={"Content-Type": "application/x-tar"}), 400)
    m = api.create(timeout_s=60, metadata={"k": "v"}, env={"A": "b"}, limits={"memory": "512M"})
    sid = m["id"]
    expect(api.get("v1/sandboxes"), 200)
    expect(api.get("v1/sandboxes", params={"state": "running", "metadata.k": "v"}), 200)
    assert_v1_error(api.get("v1/sandboxes", params={"state": "nope"}), 400)
    expect(api.get(f"v1/sandboxes/{sid}"), 200)
    expect(api.post(f"v1/sandboxes/{sid}/timeout", json={"timeout_s": 30}), 200)
    assert_v1_error(api.post(f"v1/sandboxes/{sid}/timeout", json={"timeout_s": "x"}), 400)
    assert_v1_error(api.put(f"v1/sandboxes/{sid}/network", json={"denyOut": []}), 409)  # no network
    expect(api.get(f"v1/sandboxes/{sid}/logs"), 200)
    expect(api.get(f"v1/sandboxes/{sid}/logs", params={"limit": 5}), 200)
    expect(api.post(f"v1/sandboxes/{sid}/pause"), 200)
    expect(api.get("v1/sandboxes", params={"state": "paused"}), 200)
    expect(api.get(f"v1/sandboxes/{sid}"), 200)
    assert_v1_error(api.post(f"v1/sandboxes/{sid}/execute", json={"code": "1"}), 409)
    expect(api.post(f"v1/sandboxes/{sid}/resume"), 200)
    assert api.remove(sid).status_code == 204
    bogus = str(uuid.uuid4())
    assert_v1_error(api.get(f"v1/sandboxes/{bogus}"), 404)
    assert_v1_error(api.delete(f"v1/sandboxes/{bogus}"), 404)
    assert_v1_error(api.post(f"v1/sandboxes/{bogus}/pause"), 404)
    assert_v1_error(api.post(f"v1/sandboxes/{bogus}/resume"), 404)
    assert_v1_error(api.get(f"v1/sandboxes/{bogus}/logs"), 404)
    assert_v1_error(api.post("v1/sandboxes", json={"template": "nope"}), 404)
    assert_v1_error(api.post("v1/sandboxes", json={"bogus": 1}), 400)
    assert_v1_error(api.post("v1/sandboxes", json={"network": True}), 403)


def test_volumes(api):
    expect(api.post("v1/volumes", json={"name": "openapi-vol", "size": "16M"}), 201)
    assert_v1_error(api.post("v1/volumes", json={"name": "openapi-vol"}), 409)
    assert_v1_error(api.post("v1/volumes", json={"name": "bad/name"}), 400)
    expect(api.get("v1/volumes"), 200)
    expect(api.get("v1/volumes/openapi-vol"), 200)
    assert_v1_error(api.get("v1/volumes/no-such"), 404)
    m = api.create(timeout_s=0, volumes={"openapi-vol": "/mnt/v"})
    assert m["volumes"] == {"openapi-vol": "/mnt/v"}
    assert_v1_error(api.delete("v1/volumes/openapi-vol"), 409)
    assert_v1_error(api.delete("v1/volumes/openapi-vol", params={"force": "maybe"}), 400)
    api.remove(m["id"])
    assert_v1_error(api.delete("v1/volumes/no-such"), 404)
    assert api.delete("v1/volumes/openapi-vol").status_code == 204


def test_snapshots_and_hibernation(api):
    m = api.create(timeout_s=0)
    sid = m["id"]
    snap = expect(api.post(f"v1/sandboxes/{sid}/snapshots", json={"name": "openapi"}), 201).json()
    assert_v1_error(api.post(f"v1/sandboxes/{sid}/snapshots", json={"bogus": 1}), 400)
    expect(api.get("v1/snapshots"), 200)
    expect(api.get("v1/snapshots", params={"sandbox_id": sid}), 200)
    expect(api.get(f"v1/snapshots/{snap['snapshot_id']}"), 200)
    restored = expect(api.post(f"v1/snapshots/{snap['snapshot_id']}/restore", json={}), 201).json()
    api.created.append(restored["id"])
    expect(api.post(f"v1/snapshots/{snap['snapshot_id']}/restore", json={"sandbox_id": sid}), 200)
    assert_v1_error(api.post(f"v1/snapshots/{snap['snapshot_id']}/restore",
                             json={"sandbox_id": restored["id"]}), 400)
    from_create = api.create(snapshot_id=snap["snapshot_id"], timeout_s=0)
    assert from_create["restore"]["snapshot_id"] == snap["snapshot_id"]
    hibernated = expect(api.post(f"v1/sandboxes/{sid}/hibernate"), 200).json()
    expect(api.get("v1/sandboxes", params={"state": "hibernated"}), 200)
    assert_v1_error(api.delete(f"v1/snapshots/{hibernated['snapshot_id']}"), 409)
    assert_v1_error(api.post(f"v1/sandboxes/{sid}/snapshots", json={}), 409)
    expect(api.post(f"v1/sandboxes/{sid}/resume"), 200)
    assert api.delete(f"v1/snapshots/{snap['snapshot_id']}").status_code == 204
    bogus = str(uuid.uuid4())
    assert_v1_error(api.get(f"v1/snapshots/{bogus}"), 404)
    assert_v1_error(api.delete(f"v1/snapshots/{bogus}"), 404)
    assert_v1_error(api.post(f"v1/snapshots/{bogus}/restore", json={}), 404)
    assert_v1_error(api.post(f"v1/sandboxes/{bogus}/snapshots", json={}), 404)
    assert_v1_error(api.post(f"v1/sandboxes/{bogus}/hibernate"), 404)
    for model in (m, restored, from_create):
        api.remove(model["id"])


def test_dead_sandbox_model(api):
    m = api.create(timeout_s=0)
    api.execute(m["id"], "import os; os._exit(7)", expect_status=None)
    deadline = time.monotonic() + 20
    while api.get(f"v1/sandboxes/{m['id']}").json()["state"] != "dead":
        assert time.monotonic() < deadline, "the sandbox did not become dead"
        time.sleep(0.1)
    expect(api.get("v1/sandboxes", params={"state": "dead"}), 200)
    assert_v1_error(api.post(f"v1/sandboxes/{m['id']}/pause"), 409)
    api.remove(m["id"])


def test_execute_events(api, box):
    sid = box["id"]
    code = ("import sys\nprint('out')\nprint('err', file=sys.stderr)\n"
            "from IPython.display import display, HTML\ndisplay(HTML('<i>x</i>'))\n"
            "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\n"
            "display({'application/json': {'a': 1}, 'text/plain': 'j', 'application/x-other': 'o'}, raw=True)\n"
            "42")
    ev = api.execute(sid, code, timeout=90)
    assert {"stdout", "stderr", "result", "number_of_executions", "accounting", "end_of_execution"} <= set(ev.types)
    ev = api.execute(sid, "1/0")
    assert "error" in ev.types
    ev = api.execute(sid, "import time\ntime.sleep(6)")
    assert "keepalive" in ev.types
    ev = api.execute(sid, "import time\ntime.sleep(10)", timeout_s=1)
    assert ev.one("error")["name"] == "TimeoutError"
    ev = api.execute(sid, "1", env_vars={"X": "y"}, language="python")
    ev = api.execute(sid, "1", context_id=sid)
    assert_v1_error(api.post(f"v1/sandboxes/{sid}/execute", json={"code": "1", "context_id": sid, "language": "python"}), 400)
    assert_v1_error(api.post(f"v1/sandboxes/{sid}/execute", json={"code": "1", "context_id": "nope"}), 404)
    assert_v1_error(api.post(f"v1/sandboxes/{uuid.uuid4()}/execute", json={"code": "1"}), 404)
    assert SPEC.lines_checked > 10


def test_contexts(api, box):
    sid = box["id"]
    r = expect(api.post(f"v1/sandboxes/{sid}/contexts", json={"language": "python", "cwd": "/tmp"}), 201)
    cid = r.json()["id"]
    expect(api.post(f"v1/sandboxes/{sid}/contexts"), 201)
    expect(api.get(f"v1/sandboxes/{sid}/contexts"), 200)
    expect(api.post(f"v1/sandboxes/{sid}/contexts/{cid}/restart"), 200)
    assert_v1_error(api.post(f"v1/sandboxes/{sid}/contexts", json={"cwd": "rel"}), 400)
    assert_v1_error(api.post(f"v1/sandboxes/{sid}/contexts/nope/restart"), 404)
    expect(api.delete(f"v1/sandboxes/{sid}/contexts/{cid}"), 204)
    assert_v1_error(api.delete(f"v1/sandboxes/{sid}/contexts/{cid}"), 404)
    assert_v1_error(api.delete(f"v1/sandboxes/{sid}/contexts/{sid}"), 409)
    assert_v1_error(api.get(f"v1/sandboxes/{uuid.uuid4()}/contexts"), 404)


def test_files(api, box):
    sid = box["id"]
    f = f"v1/sandboxes/{sid}/files"
    expect(api.put(f, params={"path": "oa/one.txt"}, data=b"one"), 201)
    expect(api.put(f, params={"path": "oa/one.txt"}, data=b"uno"), 200)
    assert expect(api.get(f, params={"path": "oa/one.txt"}), 200).content == b"uno"
    assert_v1_error(api.get(f, params={"path": "oa/missing"}), 404)
    assert_v1_error(api.get(f, params={"path": "oa"}), 400)
    assert_v1_error(api.get(f, params={"path": "../x"}), 400)
    assert_v1_error(api.get(f, params={"path": "/proc/self/environ"}), 403)
    expect(api.get(f + "/stat", params={"path": "oa/one.txt"}), 200)
    assert_v1_error(api.get(f + "/stat", params={"path": "oa/nothing"}), 404)
    expect(api.post(f + "/mkdir", json={"path": "oa/d1/d2"}), 201)
    expect(api.post(f + "/mkdir", json={"path": "oa/d1/d2"}), 200)
    assert_v1_error(api.post(f + "/mkdir", json={"path": "oa/one.txt"}), 409)
    expect(api.get(f + "/list", params={"path": "oa", "depth": 3}), 200)
    assert_v1_error(api.get(f + "/list", params={"path": "oa/one.txt"}), 400)
    assert_v1_error(api.get(f + "/list", params={"path": "oa/none"}), 404)
    expect(api.post(f + "/move", json={"from": "oa/one.txt", "to": "oa/two.txt"}), 200)
    assert_v1_error(api.post(f + "/move", json={"from": "oa/one.txt", "to": "oa/three.txt"}), 404)
    expect(api.post(f + "/batch", json={"files": [
        {"path": "oa/b1", "content": "x"},
        {"path": "oa/b2", "content": base64.b64encode(b"\0\1").decode(), "encoding": "base64"}]}), 200)
    assert_v1_error(api.post(f + "/batch", json={"files": "no"}), 400)
    assert_v1_error(api.delete(f, params={"path": "oa"}), 409)
    expect(api.delete(f, params={"path": "oa/b1"}), 204)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("t/inside.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    expect(api.put(f + "/tar", params={"path": "oa/tar"}, data=buf.getvalue()), 200)
    assert_v1_error(api.put(f + "/tar", params={"path": "oa/tar2"}, data=b"not a tar" * 100), 400)
    r = expect(api.get(f + "/tar", params={"path": "oa"}), 200)
    assert r.headers["Content-Type"].startswith("application/x-tar")
    assert_v1_error(api.get(f + "/tar", params={"path": "oa/none"}), 404)
    expect(api.delete(f, params={"path": "oa", "recursive": "true"}), 204)
    assert_v1_error(api.delete(f, params={"path": "oa"}), 404)


def test_files_limits(api):
    m = api.create(timeout_s=0, limits={"disk": "16M"})
    api.execute(m["id"], "1")  # started (the files API may answer 409 "still starting" before)
    f = f"v1/sandboxes/{m['id']}/files"
    expect(api.put(f, params={"path": "a.bin"}, data=b"a" * (10 << 20)), 201)
    assert_v1_error(api.put(f, params={"path": "b.bin"}, data=b"b" * (10 << 20), timeout=20), 507)
    try:
        r = api.put(f, params={"path": "c.bin"}, data=b"c" * (20 << 20), timeout=20)
        assert_v1_error(r, 413)
    except requests.ConnectionError:
        pass  # answered before the body was sent (the 413 is checked in test_v1_files)
    api.remove(m["id"])


def test_commands(api, box):
    sid = box["id"]
    c = f"v1/sandboxes/{sid}/commands"
    ev = api.command(sid, "echo o; echo e >&2; exit 2")
    assert set(ev.types) == {"start", "stdout", "stderr", "exit"}
    ev = api.command(sid, "sleep 5", timeout_s=1)
    assert ev[-1]["exit_code"] == 124
    m = api.background(sid, "cat")
    expect(api.get(c), 200)
    expect(api.get(f"{c}/{m['id']}"), 200)
    expect(api.post(f"{c}/{m['id']}/stdin", json={"data": "x"}), 204)
    assert_v1_error(api.post(f"{c}/{m['id']}/stdin", json={"data": 1}), 400)
    expect(api.get(f"{c}/{m['id']}/wait", params={"timeout_s": 1}), 200)
    expect(api.post(f"{c}/{m['id']}/stdin", json={"data": "", "eof": True}), 204)
    expect(api.get(f"{c}/{m['id']}/wait", params={"timeout_s": 10}), 200)
    assert_v1_error(api.post(f"{c}/{m['id']}/stdin", json={"data": "late"}), 409)
    expect(api.delete(f"{c}/{m['id']}"), 204)
    m = api.background(sid, "sleep 100")
    expect(api.post(f"{c}/{m['id']}/signal", json={"signal": "SIGTERM"}), 204)
    assert_v1_error(api.post(f"{c}/{m['id']}/signal", json={"signal": "SIGWHAT"}), 400)
    done = expect(api.get(f"{c}/{m['id']}/wait", params={"timeout_s": 10}), 200).json()
    assert done["state"] == "exited"
    expect(api.get(f"{c}/{m['id']}"), 200)
    expect(api.delete(f"{c}/{m['id']}"), 204)
    for method, sub in (("GET", ""), ("DELETE", ""), ("GET", "/wait")):
        assert_v1_error(api.request(method, f"{c}/nope{sub}"), 404)
    assert_v1_error(api.post(f"{c}/nope/stdin", json={"data": "x"}), 404)
    assert_v1_error(api.post(f"{c}/nope/signal", json={"signal": "TERM"}), 404)
    assert_v1_error(api.post(c, json={"cmd": 1}), 400)
    assert_v1_error(api.post(f"v1/sandboxes/{uuid.uuid4()}/commands", json={"cmd": "true"}), 404)


def test_run(api):
    expect(api.post("v1/run", json={"language": "python", "code": "print(1)"}), 200)
    r = expect(api.post("v1/run", json={"code_blocks": [{"language": "sh", "code": "echo a > f; exit 1"}],
                                        "fetch_files": ["f"], "timeout_s": 10}), 200)
    assert r.json()["exit_code"] == 1
    r = expect(api.post("v1/run", json={"language": "python", "code": "import time; time.sleep(9)", "timeout_s": 1}), 200)
    assert r.json()["status"] == "timeout"
    assert_v1_error(api.post("v1/run", json={"language": "fortran", "code": "x"}), 400)


def test_auth_is_401_with_error_body(daemon, api):
    for method, path in (("GET", "v1/sandboxes"), ("POST", "v1/run"), ("GET", "v1/templates")):
        r = requests.request(method, api.url(path), timeout=30)
        assert_v1_error(r, 401)
        SPEC.check_response(r, streamed=False)


@pytest.mark.parametrize("method,path", [("GET", "v1/nope"), ("POST", "v1/sandboxes/x/explode"),
                                         ("GET", "v1/sandboxes/x/files/nope"), ("GET", "v1/templates/x/y"),
                                         ("GET", "v1")])
def test_unknown_routes(daemon, api, method, path):
    r = api.http.request(method, api.url(path), timeout=30)
    body = assert_v1_error(r, 404)
    SPEC.check(body, schema("Error"), f"{method} {path}")


def test_every_operation_was_exercised():
    missing = [f"{m.upper()} {t}" for t, m, _ in SPEC.operations()
               if not any(seen[0] == t and seen[1] == m for seen in SPEC.seen)]
    assert not missing, f"operations of docs/openapi.yaml never exercised: {missing}"
    statuses = {}
    for t, m, s in SPEC.seen:
        statuses.setdefault(f"{m.upper()} {t}", set()).add(s)
    assert SPEC.bodies_checked > 50 and SPEC.lines_checked > 10, (SPEC.bodies_checked, SPEC.lines_checked)
