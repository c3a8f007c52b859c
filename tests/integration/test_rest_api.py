"""The Kernel Gateway REST surface: every route, its status codes, models and error bodies."""
import datetime
import re
import uuid

import pytest

from helpers import rawhttp
from helpers.asserts import LAST_ACTIVITY_RE, assert_error, assert_kernel_model
from helpers.snippets import release, wait_for_file
from helpers.wait import wait_until

# ------------------------------------------------------------------ /api, kernelspecs

def test_api_version(cb):
    r = cb.get("api")
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("application/json")
    assert isinstance(r.json()["version"], str) and r.json()["version"]


def test_kernelspecs_list(cb):
    r = cb.get("api/kernelspecs")
    assert r.status_code == 200
    body = r.json()
    assert body["default"] == "python3"
    spec = body["kernelspecs"]["python3"]
    assert spec["name"] == "python3"
    # @jupyterlab/services drops specs missing any of these
    assert isinstance(spec["spec"]["argv"], list)
    assert spec["spec"]["language"].lower() == "python"
    assert isinstance(spec["spec"]["display_name"], str) and spec["spec"]["display_name"]
    assert isinstance(spec["resources"], dict)


def test_kernelspec_by_name(cb):
    r = cb.get("api/kernelspecs/python3")
    assert r.status_code == 200
    body = r.json()
    assert body["name"] == "python3"
    assert isinstance(body["spec"]["argv"], list)
    assert body["spec"]["language"].lower() == "python"


def test_kernelspec_unknown_is_404(cb):
    assert_error(cb.get("api/kernelspecs/no-such-kernel"), 404, "Not Found")


def test_kernelspec_logo_is_served_without_api_prefix(cb):
    resources = cb.get("api/kernelspecs/python3").json()["resources"]
    assert "logo-64x64" in resources, resources
    assert resources["logo-64x64"].endswith("/kernelspecs/python3/logo-64x64.png")
    r = cb.get("kernelspecs/python3/logo-64x64.png")
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("image/png")
    assert r.content.startswith(b"\x89PNG\r\n\x1a\n")


def test_kernelspec_resource_unknown_file_is_404(cb):
    assert cb.get("kernelspecs/python3/no-such-file.png").status_code == 404
    assert cb.get("kernelspecs/no-such-kernel/logo-64x64.png").status_code == 404


def test_kernelspec_resource_rejects_path_traversal(cb):
    for path in ("kernelspecs/python3/../../../../etc/passwd",
                 "kernelspecs/python3/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
                 "kernelspecs/..%2f..%2f..%2fetc/passwd"):
        r = cb.get(path)
        assert r.status_code in (400, 403, 404), (path, r.status_code)
        assert b"root:" not in r.content


# ------------------------------------------------------------------ kernels

def test_create_kernel_201_location_and_model(cb):
    r = cb.post("api/kernels", json={})
    assert r.status_code == 201, r.text
    model = r.json()
    cb._kernels.append(model["id"])
    assert_kernel_model(model)
    assert r.headers["Location"] == f"{cb.base_path}api/kernels/{model['id']}"


def test_create_kernel_by_name(cb):
    model = cb.create_kernel(name="python3")
    assert_kernel_model(model)


def test_create_kernel_without_body(cb):
    r = cb.post("api/kernels")
    assert r.status_code == 201, r.text
    cb._kernels.append(r.json()["id"])
    assert_kernel_model(r.json())


@pytest.mark.cellbox_only
def test_create_kernel_unknown_name_404(cb):
    assert_error(cb.post("api/kernels", json={"name": "no-such-kernel"}), 404, "Not Found")


@pytest.mark.cellbox_only
@pytest.mark.parametrize("env", [["KERNEL_A=1"], "KERNEL_A=1", 5, True])
def test_create_kernel_env_not_object_400(cb, env):
    assert_error(cb.post("api/kernels", json={"env": env}), 400, "Bad Request")


@pytest.mark.parametrize("body", [b"{not json", b'{"name": "python3"', b"[1, 2",
                                  pytest.param(b"\xff\xfe", marks=pytest.mark.cellbox_only)])  # JS 1.23: 500
def test_create_kernel_malformed_json_400(cb, body):
    r = cb.post("api/kernels", data=body, headers={"Content-Type": "application/json"})
    assert_error(r, 400, "Bad Request")


@pytest.mark.cellbox_only
@pytest.mark.parametrize("body", [{"name": 5}, {"name": ["python3"]}, [1, 2], "python3", 7])
def test_create_kernel_wrong_types_400(cb, body):
    assert_error(cb.post("api/kernels", json=body), 400, "Bad Request")


def test_list_kernels(cb):
    a = cb.create_kernel()
    b = cb.create_kernel()
    r = cb.get("api/kernels")
    assert r.status_code == 200
    listed = r.json()
    assert isinstance(listed, list)
    ids = {m["id"] for m in listed}
    assert {a["id"], b["id"]} <= ids
    for m in listed:
        assert_kernel_model(m)
    cb.delete_kernel(a["id"])
    ids = {m["id"] for m in cb.get("api/kernels").json()}
    assert a["id"] not in ids and b["id"] in ids


def test_get_kernel(cb, kernel):
    r = cb.get(f"api/kernels/{kernel['id']}")
    assert r.status_code == 200
    assert r.json()["id"] == kernel["id"]
    assert_kernel_model(r.json())


@pytest.mark.cellbox_only  # Jupyter Server 1.23 keeps "starting" until an execute
def test_kernel_becomes_idle(cb, kernel):
    cb.ready_ws(kernel["id"]).close()
    wait_until(lambda: cb.kernel_model(kernel["id"])["execution_state"] == "idle", timeout=60,
               message="the new kernel to report idle")


def test_delete_kernel_204_then_404(cb, kernel):
    r = cb.delete(f"api/kernels/{kernel['id']}")
    assert r.status_code == 204
    assert r.content == b""
    body = assert_error(cb.get(f"api/kernels/{kernel['id']}"), 404, "Not Found")
    assert body["message"] == f"Kernel does not exist: {kernel['id']}"
    assert_error(cb.delete(f"api/kernels/{kernel['id']}"), 404, "Not Found")


@pytest.mark.parametrize("method,suffix", [("GET", ""), ("DELETE", ""), ("POST", "/interrupt"),
                                           pytest.param("POST", "/restart", marks=pytest.mark.cellbox_only)])
def test_unknown_kernel_404_message(cb, method, suffix):
    kid = str(uuid.uuid4())
    r = cb.request(method, f"api/kernels/{kid}{suffix}")
    body = assert_error(r, 404, "Not Found")
    assert body["message"] == f"Kernel does not exist: {kid}"


def test_unknown_kernel_channels_404(cb):
    r = cb.get(f"api/kernels/{uuid.uuid4()}/channels")
    assert r.status_code in (400, 404), r.status_code  # a plain GET, not an upgrade
    import websocket
    with pytest.raises(websocket.WebSocketBadStatusException) as e:
        cb.ws(str(uuid.uuid4()))
    assert e.value.status_code == 404


def test_malformed_kernel_id_404(cb):
    assert cb.get("api/kernels/not-a-kernel-id").status_code == 404
    assert cb.get("api/kernels/" + "a" * 5000).status_code in (404, 414)


def test_interrupt_204(cb, kernel):
    r = cb.post(f"api/kernels/{kernel['id']}/interrupt")
    assert r.status_code == 204
    assert r.content == b""


def test_restart_200_model(cb, kernel):
    r = cb.post(f"api/kernels/{kernel['id']}/restart")
    assert r.status_code == 200, r.text
    assert r.json()["id"] == kernel["id"]
    assert_kernel_model(r.json())


@pytest.mark.parametrize("path", ["api/nothing", "nothing", "api/kernels/x/y/z", "api/kernelspecs/python3/extra/x"])
def test_unknown_route_404(cb, path):
    r = cb.get(path)
    assert r.status_code == 404
    if r.headers.get("Content-Type", "").startswith("application/json"):
        assert r.json()["reason"] == "Not Found"


@pytest.mark.cellbox_only
def test_unknown_api_route_json_404(cb):
    assert_error(cb.get("api/nothing"), 404, "Not Found")


@pytest.mark.parametrize("method,path", [
    ("PUT", "api/kernels"),
    ("DELETE", "api/kernels"),
    ("POST", "api/kernelspecs"),
    ("DELETE", "api/kernelspecs/python3"),
    ("POST", "api"),
    ("PUT", "api/sessions"),
])
def test_wrong_method_405(cb, method, path):
    assert_error(cb.request(method, path), 405, "Method Not Allowed")


@pytest.mark.parametrize("method,suffix", [("PUT", ""), ("PATCH", ""), ("GET", "/interrupt"),
                                           ("GET", "/restart"), ("DELETE", "/restart")])
def test_wrong_method_on_kernel_405(cb, kernel, method, suffix):
    assert_error(cb.request(method, f"api/kernels/{kernel['id']}{suffix}"), 405, "Method Not Allowed")


# ------------------------------------------------------------------ model fields

@pytest.mark.cellbox_only
def test_last_activity_format_and_clock(cb, kernel):
    la = cb.kernel_model(kernel["id"])["last_activity"]
    assert LAST_ACTIVITY_RE.match(la), la
    when = datetime.datetime.strptime(la, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
    now = datetime.datetime.now(datetime.timezone.utc)
    assert abs((now - when).total_seconds()) < 600, (la, now)  # UTC, not local time


@pytest.mark.cellbox_only
def test_last_activity_moves_on_execute_not_on_kernel_info(cb, kernel):
    with cb.ready_ws(kernel["id"]) as ws:
        ws.kernel_info()
        before = cb.kernel_model(kernel["id"])["last_activity"]
        ws.kernel_info()
        ws.kernel_info()
        assert cb.kernel_model(kernel["id"])["last_activity"] == before
        r = ws.execute("1+1")
        assert r.reply["content"]["status"] == "ok"
        after = cb.kernel_model(kernel["id"])["last_activity"]
        assert after > before, (before, after)  # the format sorts as text


def test_connections_counts_open_websockets(cb, kernel):
    kid = kernel["id"]
    assert cb.kernel_model(kid)["connections"] == 0
    a = cb.ready_ws(kid)
    wait_until(lambda: cb.kernel_model(kid)["connections"] == 1, timeout=10, message="connections == 1")
    b = cb.ws(kid)
    wait_until(lambda: cb.kernel_model(kid)["connections"] == 2, timeout=10, message="connections == 2")
    a.close()
    wait_until(lambda: cb.kernel_model(kid)["connections"] == 1, timeout=10, message="connections == 1 after close")
    b.close()
    wait_until(lambda: cb.kernel_model(kid)["connections"] == 0, timeout=10, message="connections == 0 after close")


def test_execution_state_busy_while_running(cb, daemon, kernel):
    kid = kernel["id"]
    with cb.ready_ws(kid) as ws:
        req = ws.send_execute(wait_for_file("busy-go"))
        try:
            wait_until(lambda: cb.kernel_model(kid)["execution_state"] == "busy", timeout=30,
                       message="execution_state busy")
        finally:
            release(daemon, kid, "busy-go")
        r = ws.collect(req)
        assert r.reply["content"]["status"] == "ok"
        assert "go seen" in r.stdout
        wait_until(lambda: cb.kernel_model(kid)["execution_state"] == "idle", timeout=30,
                   message="execution_state idle")


# ------------------------------------------------------------------ 413

@pytest.mark.cellbox_only
def test_body_over_default_limit_413(daemon):
    limit = 16 * 1024 * 1024
    r = rawhttp.request(daemon.host, daemon.port, "POST", f"{daemon.base_url}api/kernels",
                        headers={"Authorization": f"token {daemon.token}",
                                 "Content-Type": "application/json"},
                        body_size=limit + 1, body_prefix=b'{"name": "python3", "pad": "')
    assert r.status == 413, r


@pytest.mark.cellbox_only
def test_body_over_configured_limit_413_and_under_ok(make_daemon):
    d = make_daemon(args=["--max-body-size", "2048"])
    auth = {"Authorization": f"token {d.token}", "Content-Type": "application/json"}
    r = rawhttp.request(d.host, d.port, "POST", "/api/kernels", headers=auth, body_size=4096,
                        body_prefix=b'{"pad": "')
    assert r.status == 413, r
    if r.headers.get("content-type", "").startswith("application/json"):
        import json
        assert json.loads(r.body)["reason"] in ("Request Entity Too Large", "Payload Too Large",
                                                "Content Too Large")
    c = d.client()
    small = {"name": "python3", "pad": "x" * 1000}
    r = c.post("api/kernels", json=small)
    assert r.status_code == 201, r.text
    c.delete_kernel(r.json()["id"])
