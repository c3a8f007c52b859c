"""cellboxd's options: both flag forms, the config file, CELLBOX_* variables, and the options
with visible effects (--list-kernels, --max-kernels, --base-url, --default-kernel)."""
import json
import os
import tempfile

import pytest

from helpers.asserts import assert_error, assert_kernel_model
from helpers.daemon import Daemon, free_port, run_daemon_to_exit

pytestmark = pytest.mark.cellbox_only


# ------------------------------------------------------------------ --help, --version, bad options

def test_help():
    r = run_daemon_to_exit(["--help"])
    assert r.returncode == 0
    text = r.stdout + r.stderr
    for opt in ("--ip", "--port", "--token", "--base-url", "--list-kernels", "--max-kernels",
                "--cull-idle-timeout", "--cull-interval", "--cull-connected", "--cull-busy",
                "--allow-origin", "--data-dir", "--keep-workspaces", "--max-body-size",
                "--max-message-size", "--config", "--version"):
        assert opt in text, opt


def test_version():
    r = run_daemon_to_exit(["--version"])
    assert r.returncode == 0
    import re
    assert re.search(r"\d+\.\d+", r.stdout + r.stderr), r.stdout + r.stderr


@pytest.mark.parametrize("args,word", [
    (["--no-such-option"], "no-such-option"),
    (["--port", "notaport"], "port"),
    (["--port", "70000"], "port"),
    (["--max-kernels", "-1"], "max-kernels"),
    (["--list-kernels=maybe"], "list-kernels"),
    (["--cull-idle-timeout", "soon"], "cull-idle-timeout"),
    (["--port"], "port"),
])
def test_bad_options_refused_with_a_message(args, word):
    with tempfile.TemporaryDirectory(prefix="cellbox-test-") as tmp:
        r = run_daemon_to_exit(["--ip", "127.0.0.1", "--data-dir", tmp, "--token", "t"] + args)
    assert r.returncode != 0
    assert word in r.stderr, r.stderr


def test_missing_config_file_refused():
    r = run_daemon_to_exit(["--config", "/nonexistent/cellbox.json"])
    assert r.returncode != 0
    assert "cellbox.json" in r.stderr, r.stderr


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"port": "eighty"}', '{"no_such_option": 1}'])
def test_bad_config_file_refused(content):
    with tempfile.TemporaryDirectory(prefix="cellbox-test-") as tmp:
        path = os.path.join(tmp, "bad.json")
        with open(path, "w") as f:
            f.write(content)
        r = run_daemon_to_exit(["--config", path, "--data-dir", tmp])
    assert r.returncode != 0
    assert r.stderr.strip(), "refused without a message"


def test_port_in_use_refused():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        with tempfile.TemporaryDirectory(prefix="cellbox-test-") as tmp:
            r = run_daemon_to_exit(["--ip", "127.0.0.1", "--port", str(port), "--token", "t", "--data-dir", tmp])
    assert r.returncode != 0
    assert str(port) in r.stderr or "in use" in r.stderr.lower(), r.stderr


# ------------------------------------------------------------------ option forms and sources

def test_equals_form(make_daemon):
    d = make_daemon(equals_form=True, args=["--list-kernels=false", "--max-kernels=1"])
    c = d.client()
    assert c.get("api/kernels").status_code == 403
    c.create_kernel()
    assert c.post("api/kernels", json={}).status_code == 403


def test_config_file(make_daemon):
    d = make_daemon(start=False, auto_args=False)
    cfg = {"ip": "127.0.0.1", "port": d.port, "token": d.token, "data_dir": d.data_dir,
           "list_kernels": False, "max_kernels": 1, "base_url": "/cfg/",
           "allow_origin": "https://cfg.example.test", "cull_idle_timeout": 0,
           "keep_workspaces": True}
    path = os.path.join(d.tmp, "cellbox.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    d.args = ["--config", path]
    d.base_url = "/cfg/"
    d.start()
    c = d.client()
    assert c.get("api").status_code == 200
    assert c.get("api").headers.get("Access-Control-Allow-Origin") == "https://cfg.example.test"
    assert_error(c.get("api/kernels"), 403, "Forbidden")
    k = c.create_kernel()
    assert c.post("api/kernels", json={}).status_code == 403
    c.ready_ws(k["id"]).close()
    c.delete_kernel(k["id"])
    # keep_workspaces from the file: the workspace volume's image stays
    assert os.path.exists(os.path.join(d.data_dir, "volumes", k["id"] + ".img"))


def test_environment_variables(make_daemon):
    d = make_daemon(start=False, auto_args=False)
    d.extra_env = {"CELLBOX_IP": "127.0.0.1", "CELLBOX_PORT": str(d.port), "CELLBOX_TOKEN": d.token,
                   "CELLBOX_DATA_DIR": d.data_dir, "CELLBOX_LIST_KERNELS": "false",
                   "CELLBOX_MAX_KERNELS": "1", "CELLBOX_BASE_URL": "/envy/",
                   "CELLBOX_MAX_BODY_SIZE": "4096"}
    d.base_url = "/envy/"
    d.start()
    c = d.client()
    assert c.get("api").status_code == 200
    assert c.get("api/kernels").status_code == 403
    c.create_kernel()
    assert c.post("api/kernels", json={}).status_code == 403
    assert c.post("api/sessions", data=b"x" * 5000,
                  headers={"Content-Type": "application/json"}).status_code == 413


def test_flag_beats_environment_beats_config(make_daemon):
    d = make_daemon(start=False, auto_args=False)
    path = os.path.join(d.tmp, "c.json")
    with open(path, "w") as f:
        json.dump({"ip": "127.0.0.1", "port": d.port, "data_dir": d.data_dir, "token": "from-config",
                   "max_kernels": 5, "list_kernels": False}, f)
    d.args = ["--config", path, "--token", d.token]
    d.extra_env = {"CELLBOX_TOKEN": "from-env", "CELLBOX_LIST_KERNELS": "true"}
    d.start()
    c = d.client()
    assert c.get("api").status_code == 200                    # the flag's token
    assert c.get("api/kernels").status_code == 200            # env over config


def test_config_from_environment_variable(make_daemon):
    d = make_daemon(start=False, auto_args=False)
    path = os.path.join(d.tmp, "c.json")
    with open(path, "w") as f:
        json.dump({"ip": "127.0.0.1", "port": d.port, "token": d.token, "data_dir": d.data_dir,
                   "list_kernels": False}, f)
    d.extra_env = {"CELLBOX_CONFIG": path}
    d.start()
    assert d.client().get("api/kernels").status_code == 403


# ------------------------------------------------------------------ options' effects

def test_list_kernels_false(make_daemon):
    d = make_daemon(args=["--list-kernels=false"])
    c = d.client()
    assert_error(c.get("api/kernels"), 403, "Forbidden")
    k = c.create_kernel()
    assert c.get(f"api/kernels/{k['id']}").status_code == 200  # single kernels stay readable
    with c.ready_ws(k["id"]) as ws:
        assert ws.execute("2**10").result_data()["text/plain"] == "1024"


def test_list_kernels_true_explicit(make_daemon):
    d = make_daemon(args=["--list-kernels=true"])
    assert d.client().get("api/kernels").status_code == 200


def test_max_kernels(make_daemon):
    d = make_daemon(args=["--max-kernels", "2"])
    c = d.client()
    a = c.create_kernel()
    c.create_kernel()
    assert_error(c.post("api/kernels", json={}), 403, "Forbidden")
    assert len(c.get("api/kernels").json()) == 2
    c.delete_kernel(a["id"])
    c.create_kernel()
    assert c.post("api/kernels", json={}).status_code == 403


def test_max_kernels_counts_session_kernels(make_daemon):
    d = make_daemon(args=["--max-kernels", "1"])
    c = d.client()
    r = c.post("api/sessions", json={"path": "a.ipynb", "type": "notebook"})
    assert r.status_code == 201
    c._kernels.append(r.json()["kernel"]["id"])
    assert c.post("api/kernels", json={}).status_code == 403


def test_max_kernels_zero_is_unlimited(make_daemon):
    d = make_daemon(args=["--max-kernels", "0"])
    c = d.client()
    for _ in range(4):
        c.create_kernel()


@pytest.mark.parametrize("base", ["/cb/", "/a/b", "/deep/er/"])
def test_base_url(make_daemon, base):
    d = make_daemon(base_url=base)
    c = d.client()
    prefix = "/" + base.strip("/") + "/"
    assert c.get("api").status_code == 200
    assert c.get("api/kernelspecs").json()["default"] == "python3"
    # nothing answers outside the prefix
    import requests
    root = f"{d.origin}/api"
    assert requests.get(root, headers={"Authorization": f"token {d.token}"}, timeout=10).status_code == 404
    r = c.post("api/kernels", json={})
    assert r.status_code == 201
    kid = r.json()["id"]
    c._kernels.append(kid)
    assert r.headers["Location"] == f"{prefix}api/kernels/{kid}"
    resources = c.get("api/kernelspecs/python3").json()["resources"]
    assert resources["logo-64x64"].startswith(prefix + "kernelspecs/")
    assert c.get("kernelspecs/python3/logo-64x64.png").status_code == 200
    with c.ready_ws(kid) as ws:
        assert ws.execute("'based'").result_data()["text/plain"] == "'based'"
    r = c.post("api/sessions", json={"path": "x.ipynb", "type": "notebook"})
    assert r.status_code == 201
    c._kernels.append(r.json()["kernel"]["id"])


def test_default_kernel_name(make_daemon):
    d = make_daemon(args=["--default-kernel", "python3"])
    c = d.client()
    assert c.get("api/kernelspecs").json()["default"] == "python3"
    assert_kernel_model(c.create_kernel())


def test_log_level_debug_starts(make_daemon):
    d = make_daemon(args=["--log-level", "debug"])
    c = d.client()
    with c.kernel() as k:
        with c.ready_ws(k["id"]) as ws:
            ws.execute("1")


def test_port_zero_picks_a_free_port():
    """--port 0 binds any free port and says which on stderr."""
    import re
    d = Daemon(pass_port=False, args=["--port", "0"])
    d.port = None
    d._spawn(d.argv(), d.environ())
    try:
        from helpers.wait import wait_until
        m = wait_until(lambda: re.search(r"cellboxd listening on http://127\.0\.0\.1:(\d+)/", d.log_text()),
                       timeout=30, message="the listening line")
        port = int(m.group(1))
        assert port > 0
        from helpers.client import Client
        assert Client("127.0.0.1", port, d.token).get("api").status_code == 200
    finally:
        problem = d.finish()
    assert problem is None, problem


def test_two_daemons_side_by_side_and_one_stops(make_daemon):
    """Two daemons on one host (same cgroup): stopping one must not break the other."""
    a = make_daemon()
    b = make_daemon()
    ca, cbb = a.client(), b.client()
    ka = ca.create_kernel()
    kb = cbb.create_kernel()
    with cbb.ready_ws(kb["id"]) as ws:
        ws.execute("1")
    assert b.finish() is None
    with ca.ready_ws(ka["id"]) as ws:
        assert ws.execute("'a alive'").result_data()["text/plain"] == "'a alive'"
    k2 = ca.create_kernel()  # a can still start kernels
    with ca.ready_ws(k2["id"]) as ws:
        assert ws.execute("'new one'").result_data()["text/plain"] == "'new one'"


def test_sigterm_stops_daemon_and_its_kernels(make_daemon):
    d = make_daemon()
    c = d.client()
    k = c.create_kernel()
    with c.ready_ws(k["id"]) as ws:
        pid_in_kernel = ws.execute("import os\nos.getpid()").result_data()["text/plain"]
    del pid_in_kernel
    rc = d.stop(timeout=20)
    assert rc == 0, f"cellboxd exited {rc} on SIGTERM; log:\n{d.log_tail()}"
    assert not d.alive()
