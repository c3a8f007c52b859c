"""E2B's official SDK (@e2b/code-interpreter, on npm `e2b`) against cellboxd, unchanged.

- The SDK (tests/clients/node/e2b_client.mjs) pointed at the daemon with E2B_API_URL,
  E2B_SANDBOX_URL and E2B_API_KEY (the daemon's token): sandbox creation, runCode with state,
  output, errors, a chart and streaming callbacks, a second context, files written and read,
  envd's filesystem service (files.list, exists, getInfo, makeDir, rename, remove, and links
  planted towards a host directory, which stays untouched), list, getInfo, setTimeout, kill.
  Every step is checked here again.
- The same routes on the wire with `requests`: what the SDK relies on when things go wrong
  (E2B's error body {"code", "message"}, 502 for a sandbox that is gone, the token required in
  each of E2B's headers) and what cellbox does not serve (methods envd does not have, other ports).

The npm packages come from `scripts/install-deps.sh test` (npm ci in tests/clients/node)."""
import json
import os
import tempfile

import pytest
import requests

from helpers.e2b import ENVD_PORT, api, into, made_sandbox
from helpers.node_clients import assert_every_step_passed, run_e2b_script

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no E2B API

TIMEOUT = 180
INTERPRETER = "49999"


@pytest.fixture
def host_dir():
    """A host directory with one file that sandboxed links point at; it must stay as it is."""
    with tempfile.TemporaryDirectory(prefix="cellbox-e2b-host-") as path:
        with open(os.path.join(path, "secret.txt"), "w") as f:
            f.write("host secret\n")
        yield path


def test_sdk_scenario(daemon, host_dir):
    proc, steps, detail = run_e2b_script(daemon, "e2b_client.mjs", TIMEOUT, env={"CELLBOX_HOST_DIR": host_dir})
    expected = ["create", "state", "print", "error", "chart", "streaming", "context", "files",
                "fs_methods", "fs_escape", "list", "info_and_timeout", "kill"]
    assert_every_step_passed(proc, steps, detail, expected)

    assert steps["state"]["text"] == "3"
    assert steps["print"]["stdout"] == ["hello from e2b\n"]
    assert steps["error"]["name"] == "ZeroDivisionError" and steps["error"]["has_traceback"]
    assert steps["chart"]["png_bytes"] > 1000 and ["png"] in steps["chart"]["formats"]
    assert steps["streaming"]["lines"] == ["line 0\n", "line 1\n", "line 2\n"]
    assert steps["context"]["language"] == "python"
    assert steps["files"]["written"] == {"name": "hello.txt", "type": "file",
                                         "path": "/workspace/notes/hello.txt"}
    assert steps["files"]["bytes"] == [0, 1, 2, 255]
    check_filesystem_methods(steps["fs_methods"])
    check_escape_failed(steps["fs_escape"], host_dir)
    assert steps["list"]["metadata"] == {"purpose": "cellbox-e2b-test"}
    assert steps["info_and_timeout"]["template"] == "python3"
    assert steps["kill"] == {"ok": True, "killed": True, "running": False, "again": False}
    # the sandbox it killed is gone from cellbox's own API too
    sandbox_id = steps["create"]["sandbox_id"]
    r = daemon.client().get(f"v1/sandboxes/{sandbox_id}")
    assert r.status_code == 404, r.text


def check_filesystem_methods(fs):
    assert fs["made"] is True and fs["again"] is False  # makeDir: new, then already there
    assert fs["one"] == ["dir:/workspace/tree/sub", "file:/workspace/tree/top.txt"]
    assert fs["two"] == ["dir:/workspace/tree/sub", "file:/workspace/tree/sub/deep.txt",
                         "file:/workspace/tree/top.txt"]
    # against the home, /home/user: the same directory as /workspace
    assert fs["relative"] == ["/home/user/tree/sub", "/home/user/tree/top.txt"]
    assert fs["exists"] is True and fs["absent"] is False
    file, directory = fs["file"], fs["dir"]
    assert {k: file[k] for k in ("name", "type", "path", "size", "permissions")} == \
        {"name": "top.txt", "type": "file", "path": "/workspace/tree/top.txt", "size": 3,
         "permissions": "-rw-r--r--"}
    assert file["mode"] == 0o644 and file["modifiedTime"][:2] == "20"
    # written by the SDK as the sandbox user, named as the sandbox's /etc/passwd names it
    assert file["owner"] == "user" and file["group"] == "user"
    assert {k: directory[k] for k in ("name", "type", "path", "permissions")} == \
        {"name": "sub", "type": "dir", "path": "/workspace/tree/sub", "permissions": "drwxr-xr-x"}
    assert directory["mode"] == (1 << 31) | 0o755  # Go's os.ModeDir, as envd reports it
    assert fs["renamed"]["path"] == "/workspace/tree/moved.txt" and fs["moved_text"] == "top"
    assert fs["file_gone"] and fs["dir_gone"]
    assert fs["missing"] == {"info": "FileNotFoundError", "list": "FileNotFoundError",
                             "rename": "FileNotFoundError", "remove": "FileNotFoundError"}


def check_escape_failed(escape, host_dir):
    for link, result in escape["results"].items():
        assert result["exists"] is False and result["info"] == "FileNotFoundError", (link, result)
        assert result["list"] == "FileNotFoundError" and result["remove"] == "FileNotFoundError", result
        assert result["rename"] == "FileNotFoundError", result
    assert escape["link_type"] == "symlink" and escape["link_target"] == host_dir
    assert escape["stolen"] is False
    # the host directory is as the test left it
    assert sorted(os.listdir(host_dir)) == ["secret.txt"]
    with open(os.path.join(host_dir, "secret.txt")) as f:
        assert f.read() == "host secret\n"


# ---- on the wire ----

@pytest.fixture
def sandbox(daemon):
    with made_sandbox(daemon, "/v2/sandboxes", templateID="code-interpreter-v1", timeout=120,
                      metadata={"who": "wire"}, envVars={"GREETING": "hi"}) as created:
        yield created


def test_create_answers_what_the_sdk_reads(daemon, sandbox):
    assert sandbox["templateID"] == "python3"
    assert sandbox["envdVersion"] == "0.6.4"
    # the SDK sends these back on every call into the sandbox: envd's access token is the
    # sandbox's own (tests/clients/test_e2b_files.py), the traffic token the daemon's
    assert sandbox["envdAccessToken"].startswith("ea_") and sandbox["envdAccessToken"] != daemon.token
    assert sandbox["trafficAccessToken"] == daemon.token
    # a cellbox sandbox like any other, with the env and the timeout asked for
    native = daemon.client().get(f"v1/sandboxes/{sandbox['sandboxID']}").json()
    assert native["timeout_s"] == 120 and native["metadata"] == {"who": "wire"}
    r = into(daemon, sandbox["sandboxID"], INTERPRETER, "POST", "/execute",
             json={"code": "import os; os.environ['GREETING']"})
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/x-ndjson")
    events = [json.loads(line) for line in r.text.splitlines()]
    assert events[-1] == {"type": "end_of_execution"}
    assert any(e["type"] == "result" and e["text"] == "'hi'" for e in events), events


def test_tracebacks_keep_ipythons_colours_as_e2bs_do(daemon, sandbox):
    """E2B's code interpreter passes ipykernel's traceback on as it is, ANSI colours and all (its
    server joins the error message's lines); /v1 takes them out unless asked."""
    r = into(daemon, sandbox["sandboxID"], INTERPRETER, "POST", "/execute", json={"code": "1 / 0"})
    assert r.status_code == 200, r.text
    error = next(e for e in map(json.loads, r.text.splitlines()) if e["type"] == "error")
    assert error["name"] == "ZeroDivisionError" and "\x1b[" in error["traceback"], error
    native = daemon.client().post(f"v1/sandboxes/{sandbox['sandboxID']}/execute", json={"code": "1 / 0"})
    error = next(e for e in map(json.loads, native.text.splitlines()) if e["type"] == "error")
    assert "ZeroDivisionError" in error["traceback"] and "\x1b" not in error["traceback"], error


def test_unknown_template_is_404_in_e2bs_shape(daemon):
    r = api(daemon, "POST", "/sandboxes", json={"templateID": "no-such-template"})
    assert r.status_code == 404
    assert r.json()["code"] == 404 and "no-such-template" in r.json()["message"]


def test_missing_sandbox_is_404_with_code(daemon):
    # the SDK tells "not found" from other failures by the body's code
    for method, path in [("GET", "/sandboxes/nope"), ("DELETE", "/sandboxes/nope"),
                         ("POST", "/sandboxes/nope/timeout"), ("POST", "/v2/sandboxes/nope/connect")]:
        r = api(daemon, method, path, json={"timeout": 10})
        assert r.status_code == 404, (method, path, r.text)
        assert r.json()["code"] == 404


def test_pause_and_connect(daemon, sandbox):
    sid = sandbox["sandboxID"]
    assert api(daemon, "POST", f"/sandboxes/{sid}/pause").status_code == 204
    assert api(daemon, "POST", f"/sandboxes/{sid}/pause").status_code == 409  # already paused
    listed = api(daemon, "GET", "/v2/sandboxes?state=paused").json()
    assert [s["sandboxID"] for s in listed] == [sid]
    assert api(daemon, "GET", "/v2/sandboxes?state=running").json() == []
    r = api(daemon, "POST", f"/v2/sandboxes/{sid}/connect", json={"timeout": 60})
    assert r.status_code == 201 and r.json()["sandboxID"] == sid, r.text
    r = api(daemon, "POST", f"/v2/sandboxes/{sid}/connect", json={})
    assert r.status_code == 200
    assert api(daemon, "GET", f"/sandboxes/{sid}").json()["state"] == "running"


def test_list_filters_by_metadata(daemon, sandbox):
    r = api(daemon, "GET", "/v2/sandboxes", params={"metadata": "who=wire"})
    assert [s["sandboxID"] for s in r.json()] == [sandbox["sandboxID"]]
    r = api(daemon, "GET", "/v2/sandboxes", params={"metadata": "who=someone-else"})
    assert r.json() == []


def test_token_is_required_in_each_header(daemon, sandbox):
    sid = sandbox["sandboxID"]
    assert api(daemon, "GET", "/v2/sandboxes", key="wrong").status_code == 401
    r = requests.get(daemon.origin + "/v2/sandboxes", timeout=30)
    assert r.status_code == 401
    for header in ["X-Access-Token", "E2B-Traffic-Access-Token"]:
        assert into(daemon, sid, INTERPRETER, "GET", "/contexts", header=header).status_code == 200
        assert into(daemon, sid, INTERPRETER, "GET", "/contexts", header=header,
                    token="wrong").status_code == 401
    # envd's "Authorization: Basic user:" names a user; the access token still decides
    r = into(daemon, sid, ENVD_PORT, "GET", "/health", headers={"Authorization": "Basic dXNlcjo="})
    assert r.status_code == 204


def test_calls_into_a_sandbox_that_is_gone_are_502(daemon):
    # Sandbox.isRunning() reads 502 from envd's /health as "not running"
    r = into(daemon, "no-such-sandbox", ENVD_PORT, "GET", "/health")
    assert r.status_code == 502 and r.json()["code"] == 502


def test_other_ports_and_connect_rpc_are_not_served(daemon, sandbox):
    sid = sandbox["sandboxID"]
    r = into(daemon, sid, "8080", "GET", "/")
    assert r.status_code == 502 and "49999" in r.json()["message"]
    r = into(daemon, sid, ENVD_PORT, "POST", "/process.Process/NoSuchMethod", data=b"{}",
             headers={"Content-Type": "application/json"})
    assert r.status_code == 404 and r.json()["code"] == "unimplemented"


def test_envd_files_octet_stream_and_errors(daemon, sandbox):
    sid = sandbox["sandboxID"]
    r = into(daemon, sid, ENVD_PORT, "POST", "/files?path=/workspace/raw.bin", data=b"\x00raw\xff",
             headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 200, r.text
    assert r.json() == [{"name": "raw.bin", "type": "file", "path": "/workspace/raw.bin"}]
    r = into(daemon, sid, ENVD_PORT, "GET", "/files?path=/workspace/raw.bin")
    assert r.status_code == 200 and r.content == b"\x00raw\xff"
    r = into(daemon, sid, ENVD_PORT, "POST", "/files?path=/workspace/x.gz", data=b"...",
             headers={"Content-Type": "application/octet-stream", "Content-Encoding": "gzip"})
    assert r.status_code == 400 and "not a valid gzip stream" in r.json()["message"]
    r = into(daemon, sid, ENVD_PORT, "POST", "/files?path=/workspace/y", data=b"not a form",
             headers={"Content-Type": "multipart/form-data; boundary=xyz"})
    assert r.status_code == 400
    # paths stay inside the sandbox
    r = into(daemon, sid, ENVD_PORT, "GET", "/files?path=/proc/self/environ")
    assert r.status_code >= 400
