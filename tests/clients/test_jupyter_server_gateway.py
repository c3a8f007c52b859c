"""Debian's Jupyter Server (1.23) with --gateway-url pointing at cellboxd: every kernel call a
notebook front end makes through Jupyter Server is forwarded to cellboxd (GatewayClient: REST
with "Authorization: token", last_activity parsed with %Y-%m-%dT%H:%M:%S.%fZ, WebSocket with the
legacy framing decoded as text).

Jupyter Server 1.23's gateway proxy can drop a message a client sends before the proxy's own
connection to the gateway is up (its queued write runs before the connection callback), so
connections here resend kernel_info_request until answered, as JupyterLab does."""
import pytest

from helpers.daemon import JupyterServer, serve
from helpers.wait import wait_until

pytestmark = pytest.mark.cellbox_only  # the gateway is cellboxd


@pytest.fixture(scope="module")
def gateway(daemon):
    yield from serve(JupyterServer(gateway_url=daemon.origin, gateway_token=daemon.token).start())


@pytest.fixture
def js(gateway, daemon):
    """A client of Jupyter Server; kernels it created are deleted afterwards (through cellboxd)."""
    c = gateway.client()
    yield c
    direct = daemon.client()
    for kid in c._kernels:
        direct.delete(f"api/kernels/{kid}")
    if not gateway.alive():
        pytest.fail(f"jupyter server died; log:\n{gateway.log_tail()}", pytrace=False)


def test_kernelspecs_come_from_cellboxd(js):
    r = js.get("api/kernelspecs")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["default"] == "python3"
    assert "python3" in body["kernelspecs"]
    assert body["kernelspecs"]["python3"]["spec"]["language"].lower() == "python"


def test_create_kernel_execute_and_find_it_in_cellboxd(js, daemon, gateway):
    r = js.post("api/kernels", json={"name": "python3"})
    assert r.status_code == 201, f"{r.status_code} {r.text}\n{gateway.log_tail()}"
    kid = r.json()["id"]
    js._kernels.append(kid)
    # the kernel lives in cellboxd, under the same id
    direct = daemon.client()
    assert direct.kernel_model(kid)["name"] == "python3"
    with js.ready_ws(kid, session_id="via-jupyter-server", resend_every=3) as ws:
        res = ws.execute("import sys\nprint('through the gateway')\n6 * 7")
        assert res.reply["content"]["status"] == "ok"
        assert res.stdout == "through the gateway\n"
        assert res.result_data()["text/plain"] == "42"
        wait_until(lambda: direct.kernel_model(kid)["connections"] >= 1, timeout=10,
                   message="cellboxd to count Jupyter Server's connection")
    # Jupyter Server re-reads the model from cellboxd (and parses last_activity)
    r = js.get(f"api/kernels/{kid}")
    assert r.status_code == 200, f"{r.text}\n{gateway.log_tail()}"
    assert r.json()["id"] == kid


def test_list_kernels_through_gateway(js, daemon):
    r = js.post("api/kernels", json={})
    assert r.status_code == 201, r.text
    kid = r.json()["id"]
    js._kernels.append(kid)
    r = js.get("api/kernels")
    assert r.status_code == 200, r.text
    assert kid in {k["id"] for k in r.json()}


def test_state_errors_and_display_through_gateway(js):
    r = js.post("api/kernels", json={"name": "python3"})
    kid = r.json()["id"]
    js._kernels.append(kid)
    with js.ready_ws(kid, resend_every=3) as ws:
        ws.execute("total = sum(range(10))")
        assert ws.execute("total").result_data()["text/plain"] == "45"
        err = ws.execute("1/0")
        assert err.reply["content"]["status"] == "error"
        assert err.first("error")["content"]["ename"] == "ZeroDivisionError"
        res = ws.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()", timeout=90)
        assert any("image/png" in m["content"]["data"] for m in res.of_type("display_data"))


def test_interrupt_and_restart_through_gateway(js, daemon):
    r = js.post("api/kernels", json={"name": "python3"})
    kid = r.json()["id"]
    js._kernels.append(kid)
    with js.ready_ws(kid, resend_every=3) as ws:
        ws.execute("before = 1")
        req = ws.send_execute("print('spin', flush=True)\nwhile True:\n    pass")
        ws.wait_for(lambda m: m["msg_type"] == "stream" and "spin" in m["content"]["text"], what="the loop")
        assert js.post(f"api/kernels/{kid}/interrupt").status_code == 204
        res = ws.collect(req, timeout=30)
        assert res.first("error")["content"]["ename"] == "KeyboardInterrupt"
    r = js.post(f"api/kernels/{kid}/restart")
    assert r.status_code == 200, r.text
    with js.ready_ws(kid, resend_every=3) as ws:
        assert ws.execute("'before' in dir()").result_data()["text/plain"] == "False"


def test_sessions_through_gateway(js, daemon):
    r = js.post("api/sessions", json={"path": "nb.ipynb", "type": "notebook", "name": "nb.ipynb",
                                      "kernel": {"name": "python3"}})
    assert r.status_code == 201, r.text
    sess = r.json()
    kid = sess["kernel"]["id"]
    js._kernels.append(kid)
    assert daemon.client().kernel_exists(kid)
    with js.ready_ws(kid, session_id=sess["id"], resend_every=3) as ws:
        assert ws.execute("'in session'").result_data()["text/plain"] == "'in session'"
    assert js.delete(f"api/sessions/{sess['id']}").status_code == 204
    wait_until(lambda: not daemon.client().kernel_exists(kid), timeout=30,
               message="the session's kernel to be shut down in cellboxd")


def test_delete_through_gateway(js, daemon):
    r = js.post("api/kernels", json={"name": "python3"})
    kid = r.json()["id"]
    assert daemon.client().kernel_exists(kid)
    assert js.delete(f"api/kernels/{kid}").status_code == 204
    wait_until(lambda: not daemon.client().kernel_exists(kid), timeout=30, message="kernel gone in cellboxd")


def test_wrong_gateway_token_is_refused(daemon):
    js = JupyterServer(gateway_url=daemon.origin, gateway_token="wrong").start()
    try:
        c = js.client()
        r = c.post("api/kernels", json={"name": "python3"})
        assert r.status_code >= 400
        assert r.status_code != 201
    finally:
        js.finish()
