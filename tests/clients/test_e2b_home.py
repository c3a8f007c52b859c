"""E2B's layout, users, lifecycle, pagination, metrics, per-run envs and cloud-only calls, through
E2B's official SDK (tests/clients/node/e2b_home.mjs) against a daemon this module starts, and on
the wire with `requests` where the SDK cannot say enough.

- Layout: /home/user is the user's home and E2B's working directory, the workspace under a second
  name: files written there or to a relative path are read back by runCode at the same path and
  at /workspace; runCode and new contexts start in /home/user, HOME is /home/user; /v1 keeps
  /workspace, and nothing else becomes writable.
- Users: `root` writes where `user` may (it is the same sandbox identity, never the host's root)
  and nowhere else; an unknown user is refused with a sentence naming it, in each route's shape.
- Lifecycle: onTimeout 'pause' pauses at the timeout, autoResume resumes on a call with the
  state kept; without autoResume a paused sandbox answers 502 (isRunning() false) until connect.
- Sandbox.list pages (limit, nextToken, x-next-token), getMetrics from the cgroup and the
  workspace volume, runCode's envs for one run only, and every cloud-only call's 501 naming it.

The npm packages come from `scripts/install-deps.sh test` (npm ci in tests/clients/node)."""
import base64
import json
import os

import pytest
import requests

from helpers.e2b import ENVD_PORT, api, into, made_sandbox
from helpers.node_clients import run_e2b_script

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no E2B API

TIMEOUT = 240
INTERPRETER = "49999"
NOT_SUPPORTED = "not supported by cellbox: "


@pytest.fixture(scope="module")
def scenario(daemon):
    _, steps, detail = run_e2b_script(daemon, "e2b_home.mjs", TIMEOUT)
    return steps, detail


def test_every_step_ran_and_passed(scenario):
    steps, detail = scenario
    expected = ["create", "home_files", "cwd", "root", "unknown_user", "envs", "metrics",
                "pagination", "pause_on_timeout", "pause_without_resume", "cloud_only"]
    missing = [s for s in expected if s not in steps]
    assert not missing, f"steps never reported: {missing}\n{detail}"
    failed = {name: s for name, s in steps.items() if not s["ok"]}
    assert not failed, f"failed steps: {failed}\n{detail}"


def test_home_user_is_the_writable_workspace(scenario):
    steps, detail = scenario
    files = steps["home_files"]
    assert files["absolute_path"] == "/home/user/upload.txt", detail
    assert files["relative_path"] == "/home/user/notes/relative.txt", detail  # against the home
    assert files["listed"] == ["/home/user/notes/relative.txt"], detail
    # runCode reads them at the same paths, and the same file at /workspace
    assert files["read_back"] == ["uploaded to home", "relative to home", "uploaded to home"]
    assert files["relative_read"] == "relative to home"


def test_code_starts_in_home_user(scenario):
    steps, detail = scenario
    cwd = steps["cwd"]
    assert cwd["default"] == "/home/user /home/user", detail  # getcwd and HOME
    assert cwd["context_cwd"] == "/home/user" and cwd["context"] == "/home/user", detail
    assert cwd["asked"] == "/tmp", detail  # a context's own cwd is kept


def test_root_writes_where_the_user_may_and_nowhere_else(scenario):
    steps, detail = scenario
    root = steps["root"]
    assert root["path"] == "/home/user/by-root.txt" and root["text"] == "root was here", detail
    assert root["relative_path"] == "/home/user/root-relative.txt", detail
    assert root["exists"] is True and root["tmp_path"] == "/tmp/by-root.txt", detail
    # the sandbox's one identity: never the host's root
    assert root["owner"] == "user", detail
    assert root["seen"] == "root was here\n"
    assert "read-only" in root["etc"]["message"] and "read-only" in root["usr"]["message"], detail
    assert not os.path.exists("/etc/cellbox-root-test") and not os.path.exists("/usr/cellbox-root-test")


def test_unknown_user_is_refused_by_name(scenario):
    steps, detail = scenario
    unknown = steps["unknown_user"]
    for call in ("write", "read", "list"):
        error = unknown[call]
        assert error is not None, (call, detail)
        assert "user 'alice' does not exist" in error["message"], (call, error)
        assert "'user'" in error["message"] and "'root'" in error["message"], (call, error)
    assert unknown["list"]["name"] == "InvalidArgumentError", unknown
    assert unknown["created_file"] is False  # nothing was written for it


def test_run_code_envs_last_one_run(scenario):
    steps, detail = scenario
    envs = steps["envs"]
    assert envs["inside"] == "'only this run'" and envs["after"] is None, detail
    assert envs["home"] == "'/tmp'" and envs["home_after"] == "'/home/user'", detail


def test_metrics_are_the_sandboxes_own(daemon, scenario):
    steps, detail = scenario
    m = steps["metrics"]
    assert m["count"] == 1, detail
    assert m["memUsed"] > 32 << 20, m  # the 32 MiB the cell holds, at least
    assert m["diskUsed"] >= 1 << 20, m  # the 1 MiB file written
    assert 0 < m["cpuUsedPct"] <= 100, m  # it summed three million squares
    assert m["cpuCount"] >= 1 and m["timestamp"][:2] == "20", m
    # the totals are a sandbox's limits (the defaults: the SDK's sandbox asked for none)
    c = daemon.client()
    r = c.post("v1/sandboxes", json={})
    assert r.status_code == 201, r.text
    limits = r.json()["limits"]
    c.delete(f"v1/sandboxes/{r.json()['id']}")
    assert m["memTotal"] == limits["memory_bytes"], (m, limits)
    assert m["diskTotal"] == limits["disk_bytes"], (m, limits)


def test_list_pages_through_every_sandbox_once(scenario):
    steps, detail = scenario
    p = steps["pagination"]
    assert [len(page) for page in p["pages"]] == [2, 1], detail
    listed = [sid for page in p["pages"] for sid in page]
    assert sorted(listed) == sorted(p["made"]), detail
    assert p["tokens"][0] and p["tokens"][1] is None, detail  # no token after the last page
    assert p["second"] == p["pages"][1], detail  # a token gives the same page again
    assert p["whole"] == listed and p["has_next_after_all"] is False, detail  # stable order


def test_pause_at_timeout_then_a_call_resumes(scenario):
    steps, detail = scenario
    p = steps["pause_on_timeout"]
    assert p["lifecycle"] == {"onTimeout": "pause", "autoResume": True}, detail
    assert p["reached_paused"] and p["listed_paused"], detail
    assert p["state_before_call"] == "paused", detail
    assert p["text"] == "42" and p["state_after"] == "running", detail  # its memory was kept
    assert p["file_path"] == "/home/user/after-resume.txt"


def test_paused_without_auto_resume_is_not_running(scenario):
    steps, detail = scenario
    p = steps["pause_without_resume"]
    assert p["lifecycle"] == {"onTimeout": "pause", "autoResume": False}, detail
    assert p["reached_paused"] and p["running"] is False, detail
    for call in ("run", "files"):
        assert p[call] is not None and "paused" in p[call]["message"], (call, p)
        assert "Sandbox.connect()" in p[call]["message"], (call, p)
    assert p["text_after_connect"] == "2", detail


def test_cloud_only_calls_name_themselves(scenario):
    steps, detail = scenario
    errors = steps["cloud_only"]["errors"]
    for call, error in errors.items():
        assert error is not None, f"{call} did not fail\n{detail}"
        assert "501" in error["message"] and NOT_SUPPORTED in error["message"], (call, error)
        method = call.split("(")[0].split(".")[1]
        if call != "Sandbox.create({mcp})":
            assert method in error["message"], (call, error)
    assert "MCP gateway" in errors["Sandbox.create({mcp})"]["message"]


# ---- on the wire ----

def basic(user):
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:".encode()).decode()}


@pytest.fixture
def sandbox(daemon):
    with made_sandbox(daemon, templateID="base", timeout=120) as created:
        yield created["sandboxID"]


def test_users_on_connect_and_files(daemon, sandbox):
    stat = {"Content-Type": "application/json"}
    for user in ("user", "root", ""):
        r = into(daemon, sandbox, ENVD_PORT, "POST", "/filesystem.Filesystem/Stat", json={"path": "."},
                 headers={**stat, **basic(user)})
        assert r.status_code == 200 and r.json()["entry"]["path"] == "/home/user", (user, r.text)
    r = into(daemon, sandbox, ENVD_PORT, "POST", "/filesystem.Filesystem/Stat", json={"path": "."},
             headers={**stat, **basic("nobody")})
    assert r.status_code == 400 and r.json()["code"] == "invalid_argument", r.text
    assert "user 'nobody' does not exist" in r.json()["message"]
    r = into(daemon, sandbox, ENVD_PORT, "POST", "/filesystem.Filesystem/Stat", json={"path": "."},
             headers={**stat, "Authorization": "Basic %%%"})
    assert r.status_code == 400 and "Authorization" in r.json()["message"], r.text
    r = into(daemon, sandbox, ENVD_PORT, "GET", "/files?path=x&username=mallory")
    assert r.status_code == 400 and r.json()["code"] == 400, r.text
    assert "user 'mallory' does not exist" in r.json()["message"]
    r = into(daemon, sandbox, ENVD_PORT, "POST", "/files?path=raw.txt&username=root", data=b"as root",
             headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 200 and r.json()[0]["path"] == "/home/user/raw.txt", r.text
    r = into(daemon, sandbox, ENVD_PORT, "GET", "/files?path=/workspace/raw.txt&username=user")
    assert r.status_code == 200 and r.content == b"as root"


def test_v1_keeps_workspace(daemon, sandbox):
    """/v1's contexts and relative paths stay at /workspace: the same directory."""
    c = daemon.client()
    r = c.post("v1/sandboxes", json={})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    try:
        r = c.post(f"v1/sandboxes/{sid}/execute", json={"code": "import os; os.getcwd(), os.environ['HOME']"})
        assert "('/workspace', '/home/user')" in r.text, r.text
        r = c.put(f"v1/sandboxes/{sid}/files", params={"path": "v1.txt"}, data=b"v1")
        assert r.status_code in (200, 201) and r.json()["path"] == "/workspace/v1.txt", r.text
        r = c.get(f"v1/sandboxes/{sid}/files", params={"path": "/home/user/v1.txt"})
        assert r.status_code == 200 and r.content == b"v1"
    finally:
        c.delete(f"v1/sandboxes/{sid}")


def test_home_is_the_only_new_writable_place(daemon, sandbox):
    r = into(daemon, sandbox, INTERPRETER, "POST", "/execute", json={"code": """
import os, json
result = {}
for p in ('/home/pwned', '/home/user/../pwned', '/root/pwned', '/home/user/ok'):
    try:
        open(p, 'w').write('x'); result[p] = 'written'
    except OSError as e:
        result[p] = e.errno
result['home'] = sorted(os.listdir('/home'))
result['same'] = os.path.samefile('/home/user/ok', '/workspace/ok')
print(json.dumps(result))
"""})
    out = "".join(json.loads(line).get("text", "") for line in r.text.splitlines()
                  if json.loads(line).get("type") == "stdout")
    got = json.loads(out)
    assert got["/home/user/ok"] == "written" and got["same"] is True, got
    for p in ('/home/pwned', '/home/user/../pwned', '/root/pwned'):
        assert got[p] in (13, 30), (p, got)  # EACCES or EROFS
    assert got["home"] == ["user"], got


def test_list_limit_and_token_errors(daemon):
    r = api(daemon, "GET", "/v2/sandboxes", params={"limit": "0"})
    assert r.status_code == 400 and "limit" in r.json()["message"], r.text
    r = api(daemon, "GET", "/v2/sandboxes", params={"nextToken": "garbage"})
    assert r.status_code == 400 and "x-next-token" in r.json()["message"], r.text


def test_auto_resume_needs_auto_pause(daemon):
    r = api(daemon, "POST", "/v2/sandboxes", json={"autoResume": {"enabled": True}})
    assert r.status_code == 400 and "autoPause" in r.json()["message"], r.text


@pytest.mark.parametrize("method,path", [
    ("GET", "/secrets"), ("POST", "/secrets"), ("DELETE", "/secrets/abc"),
    ("POST", "/v3/templates"), ("GET", "/templates/x/tags"),
    ("POST", "/v2/templates/t/builds/b"), ("GET", "/teams"), ("GET", "/api-keys"),
])
def test_cloud_only_paths_answer_501(daemon, method, path):
    r = api(daemon, method, path, json={})
    assert r.status_code == 501, (method, path, r.text)
    assert r.json()["code"] == 501 and r.json()["message"].startswith(NOT_SUPPORTED), r.text
    assert path in r.json()["message"]


@pytest.mark.parametrize("options,named", [
    ({"network": {"egressProxy": {"address": "proxy.example:1080"}}}, "egressProxy"),
    ({"network": {"httpsPorts": [3000]}}, "httpsPorts"),
    ({"network": {"rules": {}}}, "rules"),
    ({"network": {"maskRequestHost": "x.example"}}, "maskRequestHost"),
    ({"network": {"allowPublicTraffic": True}}, "allowPublicTraffic"),
    ({"iam": {"tokens": {"gh": {"audience": "a", "tokenType": "t"}}}}, "iam"),
])
def test_create_refuses_the_clouds_network_options_by_name(daemon, options, named):
    """The egress proxy's options (rules, a proxy, masked hosts, https ports), public hosts and
    identity tokens are E2B's cloud's: refused by name (501), and no sandbox is made."""
    before = len(api(daemon, "GET", "/v2/sandboxes").json())
    r = api(daemon, "POST", "/v2/sandboxes", json={"templateID": "python3", **options})
    assert r.status_code == 501, r.text
    assert r.json()["message"].startswith(NOT_SUPPORTED) and named in r.json()["message"], r.text
    assert len(api(daemon, "GET", "/v2/sandboxes").json()) == before


def test_create_takes_what_cellbox_does_anyway(daemon):
    """allowPublicTraffic false is cellbox's way already (hosts need the token): accepted."""
    r = api(daemon, "POST", "/v2/sandboxes",
            json={"templateID": "python3", "network": {"allowPublicTraffic": False}})
    assert r.status_code == 201, r.text
    api(daemon, "DELETE", f"/sandboxes/{r.json()['sandboxID']}")


def test_cloud_only_paths_need_the_token(daemon):
    r = requests.get(daemon.origin + "/secrets", timeout=30)
    assert r.status_code == 401
