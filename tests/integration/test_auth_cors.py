"""Token auth on every route and on the WebSocket upgrade; OPTIONS unauthenticated; CORS."""
import re
import tempfile
import uuid

import pytest
import requests
import websocket

from helpers import rawhttp
from helpers.asserts import assert_error
from helpers.daemon import Daemon, free_port, run_daemon_to_exit, serve

pytestmark = pytest.mark.cellbox_only  # Jupyter Server's auth answers 403/redirects, not KG's 401


def routes(kid, sid):
    return [
        ("GET", "api"),
        ("GET", "api/kernelspecs"),
        ("GET", "api/kernelspecs/python3"),
        ("GET", "kernelspecs/python3/logo-64x64.png"),
        ("GET", "api/kernels"),
        ("POST", "api/kernels"),
        ("GET", f"api/kernels/{kid}"),
        ("DELETE", f"api/kernels/{kid}"),
        ("POST", f"api/kernels/{kid}/interrupt"),
        ("POST", f"api/kernels/{kid}/restart"),
        ("GET", "api/sessions"),
        ("POST", "api/sessions"),
        ("GET", f"api/sessions/{sid}"),
        ("PATCH", f"api/sessions/{sid}"),
        ("DELETE", f"api/sessions/{sid}"),
        ("GET", "api/no-such-route"),
        ("GET", f"api/kernels/{uuid.uuid4()}"),
    ]


@pytest.fixture(scope="module")
def targets(daemon):
    c = daemon.client()
    k = c.create_kernel()
    r = c.post("api/sessions", json={"path": "auth.ipynb", "type": "notebook"})
    assert r.status_code == 201, r.text
    yield k["id"], r.json()["id"]
    c.cleanup()
    c.delete(f"api/kernels/{r.json()['kernel']['id']}")


def raw(daemon, method, path, headers=None, params=None):
    url = f"{daemon.origin}/{path}"
    kw = {"json": {"path": "x", "type": "notebook"}} if method in ("POST", "PATCH") else {}
    return requests.request(method, url, headers=headers or {}, params=params, timeout=30,
                            allow_redirects=False, **kw)


@pytest.mark.parametrize("i", range(17))
def test_no_token_401_everywhere(daemon, targets, i):
    method, path = routes(*targets)[i]
    assert_error(raw(daemon, method, path), 401, "Unauthorized")


@pytest.mark.parametrize("i", range(17))
def test_wrong_token_401_everywhere(daemon, targets, i):
    method, path = routes(*targets)[i]
    assert_error(raw(daemon, method, path, headers={"Authorization": "token wrong"}), 401, "Unauthorized")
    assert_error(raw(daemon, method, path, params={"token": "wrong"}), 401, "Unauthorized")


def test_kernels_still_there_after_unauthorized_deletes(daemon, targets):
    kid, sid = targets
    c = daemon.client()
    assert c.kernel_exists(kid)
    assert c.get(f"api/sessions/{sid}").status_code == 200


def test_token_in_header(daemon):
    assert raw(daemon, "GET", "api", headers={"Authorization": f"token {daemon.token}"}).status_code == 200


def test_token_in_query(daemon):
    assert raw(daemon, "GET", "api", params={"token": daemon.token}).status_code == 200


def test_bearer_scheme_accepted_as_jupyter_server_does(daemon):
    # jupyter_server's auth takes "token" or "bearer"; so does cellbox.
    assert raw(daemon, "GET", "api", headers={"Authorization": f"Bearer {daemon.token}"}).status_code == 200


@pytest.mark.parametrize("form", ["bare", "no-space", "basic", "extra-char"])
def test_header_needs_literal_token_scheme(daemon, form):
    t = daemon.token
    value = {"bare": t, "no-space": f"token{t}", "basic": f"Basic {t}",
             "extra-char": f"token  {t}x"}[form]
    assert raw(daemon, "GET", "api", headers={"Authorization": value}).status_code == 401, value


def test_query_token_is_checked_first(daemon):
    good = {"Authorization": f"token {daemon.token}"}
    assert raw(daemon, "GET", "api", headers=good, params={"token": "wrong"}).status_code == 401
    assert raw(daemon, "GET", "api", headers={"Authorization": "token wrong"},
               params={"token": daemon.token}).status_code == 200


def test_token_prefix_or_extension_rejected(daemon):
    for t in (daemon.token[:-1], daemon.token + "x", daemon.token.upper() if daemon.token.upper() != daemon.token else daemon.token + "A", ""):
        assert raw(daemon, "GET", "api", headers={"Authorization": f"token {t}"}).status_code == 401, t


# ------------------------------------------------------------------ WebSocket upgrade

def ws_url(daemon, kid, query=""):
    return f"ws://{daemon.host}:{daemon.port}/api/kernels/{kid}/channels{query}"


@pytest.mark.parametrize("how", ["none", "wrong-header", "wrong-query"])
def test_ws_upgrade_unauthorized_401(daemon, targets, how):
    kid, _ = targets
    header, query = [], ""
    if how == "wrong-header":
        header = ["Authorization: token wrong"]
    elif how == "wrong-query":
        query = "?token=wrong"
    with pytest.raises(websocket.WebSocketBadStatusException) as e:
        websocket.create_connection(ws_url(daemon, kid, query), header=header, timeout=30, suppress_origin=True)
    assert e.value.status_code == 401


def test_ws_upgrade_unauthorized_401_raw(daemon, targets):
    kid, _ = targets
    r = rawhttp.websocket_handshake(daemon.host, daemon.port, f"/api/kernels/{kid}/channels")
    assert r.status == 401, r


@pytest.mark.parametrize("how", ["header", "query"])
def test_ws_upgrade_authorized(daemon, targets, how):
    kid, _ = targets
    c = daemon.client()
    ws = c.ws(kid, auth=how)
    try:
        assert ws.kernel_info(timeout=60).reply["content"]["status"] == "ok"
    finally:
        ws.close()


# ------------------------------------------------------------------ OPTIONS and CORS

@pytest.mark.parametrize("path", ["api", "api/kernels", "api/kernelspecs", "api/sessions",
                                  f"api/kernels/{uuid.uuid4()}"])
def test_options_needs_no_token(daemon, path):
    r = raw(daemon, "OPTIONS", path)
    assert r.status_code in (200, 204), (path, r.status_code, r.text)


def test_options_on_existing_kernel_needs_no_token(daemon, targets):
    kid, _ = targets
    for path in (f"api/kernels/{kid}", f"api/kernels/{kid}/interrupt", f"api/kernels/{kid}/restart"):
        assert raw(daemon, "OPTIONS", path).status_code in (200, 204), path


def test_no_cors_headers_by_default(daemon):
    r = raw(daemon, "GET", "api", headers={"Authorization": f"token {daemon.token}"})
    assert not [h for h in r.headers if h.lower().startswith("access-control-")], dict(r.headers)


CORS = {
    "Access-Control-Allow-Origin": "https://app.example.test",
    "Access-Control-Allow-Headers": "Authorization,Content-Type,X-Custom",
    "Access-Control-Allow-Methods": "GET,POST,DELETE,OPTIONS",
    "Access-Control-Allow-Credentials": "true",
    "Access-Control-Expose-Headers": "Location,X-Other",
    "Access-Control-Max-Age": "600",
}


@pytest.fixture(scope="module")
def cors_daemon():
    d = Daemon(args=[
        "--allow-origin", CORS["Access-Control-Allow-Origin"],
        "--allow-headers", CORS["Access-Control-Allow-Headers"],
        "--allow-methods", CORS["Access-Control-Allow-Methods"],
        "--allow-credentials=" + CORS["Access-Control-Allow-Credentials"],
        "--expose-headers", CORS["Access-Control-Expose-Headers"],
        "--max-age", CORS["Access-Control-Max-Age"],
    ]).start()
    yield from serve(d)


def assert_cors(r):
    for name, value in CORS.items():
        assert r.headers.get(name) == value, (name, dict(r.headers))


@pytest.mark.parametrize("path", ["api", "api/kernels", "api/kernelspecs", "api/sessions"])
def test_cors_on_preflight_without_token(cors_daemon, path):
    r = raw(cors_daemon, "OPTIONS", path, headers={
        "Origin": CORS["Access-Control-Allow-Origin"],
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type"})
    assert r.status_code in (200, 204)
    assert_cors(r)


def test_cors_on_authorized_responses(cors_daemon):
    auth = {"Authorization": f"token {cors_daemon.token}", "Origin": CORS["Access-Control-Allow-Origin"]}
    assert_cors(raw(cors_daemon, "GET", "api", headers=auth))
    assert_cors(raw(cors_daemon, "GET", "api/kernelspecs", headers=auth))
    r = requests.post(f"{cors_daemon.origin}/api/kernels", json={}, headers=auth, timeout=30)
    assert r.status_code == 201
    assert_cors(r)
    cors_daemon.client().delete_kernel(r.json()["id"])


def test_cors_on_error_responses(cors_daemon):
    auth = {"Authorization": f"token {cors_daemon.token}"}
    assert_cors(raw(cors_daemon, "GET", f"api/kernels/{uuid.uuid4()}", headers=auth))
    assert_cors(raw(cors_daemon, "GET", "api"))  # 401


# ------------------------------------------------------------------ where the token comes from

def test_token_from_environment(make_daemon):
    d = make_daemon(pass_token=False, env={"CELLBOX_TOKEN": "env-token-123456"})
    d.token = "env-token-123456"
    assert raw(d, "GET", "api", headers={"Authorization": "token env-token-123456"}).status_code == 200
    assert raw(d, "GET", "api").status_code == 401


def test_token_generated_and_printed_when_absent(make_daemon):
    d = make_daemon(pass_token=False)
    assert raw(d, "GET", "api").status_code == 401
    candidates = set(re.findall(r"[A-Za-z0-9_\-]{16,}", d.log_text()))
    working = [t for t in candidates
               if raw(d, "GET", "api", headers={"Authorization": f"token {t}"}).status_code == 200]
    assert working, f"no token printed in the log:\n{d.log_tail()}"
    assert len(working[0]) >= 22, "a generated token should carry at least 128 bits"


def test_empty_token_on_loopback_disables_auth(make_daemon):
    d = make_daemon(pass_token=False, args=["--token", ""])
    assert raw(d, "GET", "api").status_code == 200
    c = d.client()
    c.http.headers.pop("Authorization", None)
    with c.kernel() as k:
        ws = c.ws(k["id"], auth=None)
        try:
            assert ws.kernel_info(timeout=60).reply["content"]["status"] == "ok"
        finally:
            ws.close()


@pytest.mark.parametrize("token_args", [["--token", ""], ["--token="]])
def test_empty_token_refused_on_non_loopback(token_args):
    with tempfile.TemporaryDirectory(prefix="cellbox-test-") as tmp:
        r = run_daemon_to_exit(["--ip", "0.0.0.0", "--port", str(free_port()), "--data-dir", tmp] + token_args)
    assert r.returncode != 0
    assert "token" in (r.stderr + r.stdout).lower(), r.stderr
