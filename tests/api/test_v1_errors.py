"""/v1 bad input: invalid JSON, wrong types, unknown fields (400 naming the field), unknown
sandboxes (404), refusals (403), auth (401), and nothing half-created after a failure."""
import uuid

import pytest
import requests

from helpers.asserts import assert_v1_error, expect


def counts(v1):
    return len(v1.sandboxes()), len(v1.client.get("api/kernels").json())


BAD_CREATES = [
    ('{"timeout_s": 5', 400, ()),                                   # invalid JSON
    ('[]', 400, ()),                                               # not an object
    ('{"timeout_s": "5"}', 400, ("timeout_s",)),
    ('{"timeout_s": -1}', 400, ("timeout_s",)),
    ('{"timeout_s": 1.5}', 400, ("timeout_s",)),
    ('{"timeout_s": 6.6e72}', 400, ("timeout_s",)),               # past long long (fuzzing)
    ('{"template": 3}', 400, ("template",)),
    ('{"env": ["A=1"]}', 400, ("env",)),
    ('{"env": {"A": 1}}', 400, ("env",)),
    ('{"metadata": {"k": 1}}', 400, ("metadata",)),
    ('{"metadata": "k=v"}', 400, ("metadata",)),
    ('{"limits": {"memory": "lots"}}', 400, ("memory",)),
    ('{"limits": {"memory": "999T"}}', 400, ("memory",)),
    ('{"limits": {"memory": "16M"}}', 400, ("memory", "at least 64 MiB")),
    ('{"limits": {"memory": "1e90G"}}', 400, ("memory",)),         # past long long (fuzzing)
    ('{"limits": {"pids": "nan"}}', 400, ("pids",)),               # NaN passed every range check
    ('{"limits": {"timeout": 1e12}}', 400, ("timeout",)),          # past int (no maximum by default)
    ('{"env": {"KERNEL_CELLBOX_MEMORY": "inf"}}', 400, ("memory",)),
    ('{"limits": {"volume": 11}}', 400, ("volume",)),
    ('{"network": "no"}', 400, ("network",)),
    ('{"foo": 1}', 400, ("unknown field 'foo'",)),
    ('{"template": "no-such-template"}', 404, ("no-such-template",)),
    ('{"network": true}', 403, ("network",)),
]


@pytest.mark.parametrize("body,status,words", BAD_CREATES, ids=[b for b, _, _ in BAD_CREATES])
def test_bad_create_creates_nothing(v1, body, status, words):
    before = counts(v1)
    r = v1.post("v1/sandboxes", data=body, headers={"Content-Type": "application/json"})
    assert_v1_error(r, status, *words)
    assert counts(v1) == before, "a failed create left a sandbox or kernel behind"


def test_invalid_json_cut_mid_character_is_still_a_json_400(v1):
    """jansson's error quotes the body near the error and can cut a character there (a backslash
    before U+04CF: 'invalid escape near '"l\\<0xd3>''): the answer is still JSON naming the
    problem, and the daemon serves on (it died encoding that answer; found by fuzzing)."""
    for path in ("v1/sandboxes", "api/kernels"):
        r = v1.post(path, data='{"l\\\u04cf": 1}'.encode(), headers={"Content-Type": "application/json"})
        assert_v1_error(r, 400, "request body is not valid JSON", "invalid escape")
    expect(v1.get("v1/templates"), 200)


def test_long_unknown_template_name_is_a_json_404(v1):
    """An unknown template's name is quoted in the 404; a long one was cut mid-character to fit
    the message, which jansson then refused, and the daemon died encoding it."""
    name = "a" + "\u00e9" * 300
    for path, body in (("api/kernels", {"name": name}), ("v1/sandboxes", {"template": name}),
                       ("sandboxes", {"templateID": name})):
        r = v1.post(path, json=body)
        assert r.status_code == 404, (path, r.status_code, r.text[:200])
        assert "a\u00e9\u00e9" in r.json()["message"], r.text[:200]
    expect(v1.get("v1/templates"), 200)


def test_max_kernels_is_403_and_creates_nothing(make_daemon):
    from helpers.v1 import V1
    d = make_daemon(args=["--max-kernels", "1", "--pool-size", "0"])
    c = V1(d)
    try:
        first = c.create(timeout_s=0)
        assert first["id"]
        r = c.post("v1/sandboxes", json={})
        assert_v1_error(r, 403)
        assert len(c.sandboxes()) == 1
    finally:
        c.cleanup()


UNKNOWN_ROUTES = [
    ("GET", "v1/sandboxes/{bogus}", None),
    ("DELETE", "v1/sandboxes/{bogus}", None),
    ("POST", "v1/sandboxes/{bogus}/pause", None),
    ("POST", "v1/sandboxes/{bogus}/resume", None),
    ("POST", "v1/sandboxes/{bogus}/timeout", {"timeout_s": 5}),
    ("GET", "v1/sandboxes/{bogus}/logs", None),
    ("POST", "v1/sandboxes/{bogus}/execute", {"code": "1"}),
    ("GET", "v1/sandboxes/{bogus}/contexts", None),
    ("POST", "v1/sandboxes/{bogus}/contexts", {}),
    ("POST", "v1/sandboxes/{bogus}/contexts/{bogus}/restart", None),
    ("DELETE", "v1/sandboxes/{bogus}/contexts/{bogus}", None),
    ("GET", "v1/sandboxes/{bogus}/files?path=x", None),
    ("GET", "v1/sandboxes/{bogus}/files/list?path=/workspace", None),
    ("GET", "v1/sandboxes/{bogus}/files/stat?path=x", None),
    ("POST", "v1/sandboxes/{bogus}/files/mkdir", {"path": "x"}),
    ("GET", "v1/sandboxes/{bogus}/files/tar?path=/workspace", None),
    ("GET", "v1/sandboxes/{bogus}/commands", None),
    ("POST", "v1/sandboxes/{bogus}/commands", {"cmd": "true"}),
    ("GET", "v1/sandboxes/{bogus}/commands/c1", None),
]


@pytest.mark.parametrize("method,path,body", UNKNOWN_ROUTES, ids=[f"{m} {p}" for m, p, _ in UNKNOWN_ROUTES])
def test_unknown_sandbox_404(v1, method, path, body):
    bogus = str(uuid.uuid4())
    r = v1.request(method, path.replace("{bogus}", bogus), json=body)
    assert_v1_error(r, 404, f"sandbox {bogus} does not exist")


@pytest.mark.parametrize("path", ["v1", "v1/", "v1/nope", "v1/sandboxes/x/y/z/w", "v1/sandbox",
                                  "v1/templates/python3/x"])
def test_unknown_routes_404(v1, path):
    assert_v1_error(v1.get(path), 404)


def test_auth(v1, daemon):
    base = v1.url("v1/sandboxes")
    r = requests.get(base, timeout=30)
    assert_v1_error(r, 401)
    r = requests.get(base, headers={"Authorization": "token wrong"}, timeout=30)
    assert_v1_error(r, 401)
    assert requests.get(base, params={"token": daemon.token}, timeout=30).status_code == 200
    assert requests.get(base, headers={"Authorization": f"Bearer {daemon.token}"}, timeout=30).status_code == 200
    # a ?token= that is given decides on its own
    r = requests.get(base, params={"token": "wrong"}, headers={"Authorization": f"token {daemon.token}"},
                     timeout=30)
    assert_v1_error(r, 401)
    assert_v1_error(requests.post(v1.url("v1/run"), json={"code": "print(1)"}, timeout=30), 401)


def test_unknown_fields_everywhere(v1, sandbox):
    sid = sandbox["id"]
    cases = [
        (f"v1/sandboxes/{sid}/execute", {"code": "1", "kernel": "x"}, "kernel"),
        (f"v1/sandboxes/{sid}/contexts", {"name": "x"}, "name"),
        (f"v1/sandboxes/{sid}/commands", {"cmd": "true", "shell": "bash"}, "shell"),
        (f"v1/sandboxes/{sid}/timeout", {"timeout_s": 1, "when": 2}, "when"),
        (f"v1/sandboxes/{sid}/files/mkdir", {"path": "d", "mode": "0700"}, "mode"),
        (f"v1/sandboxes/{sid}/files/move", {"from": "a", "to": "b", "force": True}, "force"),
        (f"v1/sandboxes/{sid}/files/batch", {"files": [], "atomic": True}, "atomic"),
        (f"v1/sandboxes/{sid}/files/batch", {"files": [{"path": "a", "content": "b", "mode": 1}]}, "mode"),
        ("v1/run", {"code": "1", "lang": "python"}, "lang"),
    ]
    for path, body, field in cases:
        assert_v1_error(v1.post(path, json=body), 400, f"unknown field '{field}'")
    # and wrong types name the field
    assert_v1_error(v1.post(f"v1/sandboxes/{sid}/files/move", json={"from": 1, "to": "b"}), 400, "from")
    assert_v1_error(v1.post(f"v1/sandboxes/{sid}/files/batch", json={"files": {}}), 400, "files")
    # nothing happened to the sandbox
    assert v1.value(sid, "'fine'") == "'fine'"
    assert v1.get(f"v1/sandboxes/{sid}/files/stat", params={"path": "d"}).status_code == 404


def test_failed_calls_leave_no_commands_or_contexts(v1, sandbox):
    sid = sandbox["id"]
    n_cmd = len(expect(v1.get(f"v1/sandboxes/{sid}/commands"), 200).json())
    n_ctx = len(expect(v1.get(f"v1/sandboxes/{sid}/contexts"), 200).json())
    v1.post(f"v1/sandboxes/{sid}/commands", json={"cmd": "true", "timeout_s": "x"})
    v1.post(f"v1/sandboxes/{sid}/commands", json={"cmd": "true", "background": True, "cwd": 5})
    v1.post(f"v1/sandboxes/{sid}/contexts", json={"cwd": "rel"})
    v1.post(f"v1/sandboxes/{sid}/contexts", json={"language": "perl"})
    assert len(expect(v1.get(f"v1/sandboxes/{sid}/commands"), 200).json()) == n_cmd
    assert len(expect(v1.get(f"v1/sandboxes/{sid}/contexts"), 200).json()) == n_ctx
