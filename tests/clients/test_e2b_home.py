"""E2B's layout and users on the wire (envd's /files and Connect-RPC, the code interpreter), against a
daemon this module starts.

- Layout: /home/user is the user's home and E2B's working directory, the workspace under a second
  name: relative paths on E2B's routes resolve there, /v1 keeps /workspace, and nothing else
  becomes writable.
- Users: `root` writes where `user` may (it is the same sandbox identity, never the host's root);
  an unknown user is refused with a sentence naming it, in each route's shape."""
import base64
import json

import pytest
import requests

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no E2B API

ENVD = "49983"
INTERPRETER = "49999"


# ---- on the wire ----

def api(daemon, method, path, **kw):
    return requests.request(method, daemon.origin + path, headers={"X-API-Key": daemon.token},
                            timeout=60, **kw)


def into(daemon, sandbox_id, port, method, path, **kw):
    headers = {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": port, "X-Access-Token": daemon.token}
    headers.update(kw.pop("headers", {}))
    return requests.request(method, daemon.origin + path, headers=headers, timeout=60, **kw)


def basic(user):
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:".encode()).decode()}


@pytest.fixture
def sandbox(daemon):
    r = api(daemon, "POST", "/sandboxes", json={"templateID": "base", "timeout": 120})
    assert r.status_code == 201, r.text
    sid = r.json()["sandboxID"]
    yield sid
    api(daemon, "DELETE", f"/sandboxes/{sid}")


def test_users_on_connect_and_files(daemon, sandbox):
    stat = {"Content-Type": "application/json"}
    for user in ("user", "root", ""):
        r = into(daemon, sandbox, ENVD, "POST", "/filesystem.Filesystem/Stat", json={"path": "."},
                 headers={**stat, **basic(user)})
        assert r.status_code == 200 and r.json()["entry"]["path"] == "/home/user", (user, r.text)
    r = into(daemon, sandbox, ENVD, "POST", "/filesystem.Filesystem/Stat", json={"path": "."},
             headers={**stat, **basic("nobody")})
    assert r.status_code == 400 and r.json()["code"] == "invalid_argument", r.text
    assert "user 'nobody' does not exist" in r.json()["message"]
    r = into(daemon, sandbox, ENVD, "POST", "/filesystem.Filesystem/Stat", json={"path": "."},
             headers={**stat, "Authorization": "Basic %%%"})
    assert r.status_code == 400 and "Authorization" in r.json()["message"], r.text
    r = into(daemon, sandbox, ENVD, "GET", "/files?path=x&username=mallory")
    assert r.status_code == 400 and r.json()["code"] == 400, r.text
    assert "user 'mallory' does not exist" in r.json()["message"]
    r = into(daemon, sandbox, ENVD, "POST", "/files?path=raw.txt&username=root", data=b"as root",
             headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 200 and r.json()[0]["path"] == "/home/user/raw.txt", r.text
    r = into(daemon, sandbox, ENVD, "GET", "/files?path=/workspace/raw.txt&username=user")
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

