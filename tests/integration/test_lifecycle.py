"""A kernel's life: interrupt, restart, death and revival, deletion, its workspace and env."""
import os
import re
import subprocess

import pytest

from helpers.snippets import release, wait_for_file
from helpers.wait import wait_until


def started(ws, req, text):
    """Wait until the running cell `req` printed `text` (so it is really running)."""
    return ws.wait_for(lambda m: m["msg_type"] == "stream" and text in m["content"]["text"]
                       and m["parent_header"].get("msg_id") == req["header"]["msg_id"],
                       timeout=30, what=f"output {text!r} of the running cell")


# ------------------------------------------------------------------ interrupt

@pytest.mark.parametrize("loop", ["while True:\n    pass", "import time\ntime.sleep(100)"])
def test_rest_interrupt_stops_cell_with_keyboard_interrupt(cb, kernel, loop):
    kid = kernel["id"]
    with cb.ready_ws(kid) as ws:
        ws.execute("kept_across_interrupt = 'yes'")
        req = ws.send_execute("print('running', flush=True)\n" + loop)
        started(ws, req, "running")
        r = cb.post(f"api/kernels/{kid}/interrupt")
        assert r.status_code == 204
        res = ws.collect(req, timeout=15)  # the spec says ~1 s; 15 s is a functional bound
        err = res.first("error")["content"]
        assert err["ename"] == "KeyboardInterrupt"
        assert res.reply["content"]["status"] == "error"
        assert res.reply["content"]["ename"] == "KeyboardInterrupt"
        assert res.statuses[-1] == "idle"
        # the kernel and its state survive
        assert ws.execute("kept_across_interrupt").result_data()["text/plain"] == "'yes'"


def test_interrupt_when_idle_is_harmless(cb, kernel):
    kid = kernel["id"]
    with cb.ready_ws(kid) as ws:
        ws.execute("v = 1")
        assert cb.post(f"api/kernels/{kid}/interrupt").status_code == 204
        assert cb.post(f"api/kernels/{kid}/interrupt").status_code == 204
        assert ws.execute("v + 1").result_data()["text/plain"] == "2"


def test_interrupt_reaches_child_waits(cb, kernel):
    """A cell blocked in subprocess.run(sleep) is interrupted too."""
    kid = kernel["id"]
    with cb.ready_ws(kid) as ws:
        req = ws.send_execute("import subprocess\nprint('spawning', flush=True)\nsubprocess.run(['sleep', '100'])")
        started(ws, req, "spawning")
        assert cb.post(f"api/kernels/{kid}/interrupt").status_code == 204
        res = ws.collect(req, timeout=15)
        assert res.first("error")["content"]["ename"] == "KeyboardInterrupt"


# ------------------------------------------------------------------ restart

def test_restart_gives_fresh_state(cb, kernel):
    kid = kernel["id"]
    with cb.ready_ws(kid) as ws:
        ws.execute("before_restart = 1")
        ws.execute("'another'")
    r = cb.post(f"api/kernels/{kid}/restart")
    assert r.status_code == 200
    assert r.json()["id"] == kid
    with cb.ready_ws(kid) as ws:
        res = ws.execute("before_restart")
        assert res.first("error")["content"]["ename"] == "NameError"
        assert ws.execute("'x'").reply["content"]["execution_count"] <= 2


@pytest.mark.cellbox_only  # Jupyter Server 1.23 says "restarting" only on auto-restarts
def test_restart_publishes_restarting_to_connected_clients(cb, kernel):
    kid = kernel["id"]
    with cb.ready_ws(kid, session_id="r1") as a, cb.ready_ws(kid, session_id="r2") as b:
        assert cb.post(f"api/kernels/{kid}/restart").status_code == 200
        for conn in (a, b):
            m = conn.wait_for(lambda m: m["msg_type"] == "status"
                              and m["content"]["execution_state"] == "restarting", what="status restarting")
            assert m["channel"] == "iopub"


@pytest.mark.cellbox_only
def test_connection_keeps_working_after_restart(cb, kernel):
    """Kernel Gateway keeps the WebSocket across a restart (JupyterLab reconnects anyway)."""
    kid = kernel["id"]
    with cb.ready_ws(kid) as ws:
        ws.execute("gone = 1")
        assert cb.post(f"api/kernels/{kid}/restart").status_code == 200
        r = ws.kernel_info(timeout=60)
        assert r.reply["content"]["status"] == "ok"
        assert ws.execute("'gone' in dir()").result_data()["text/plain"] == "False"


def test_restart_while_busy(cb, kernel):
    kid = kernel["id"]
    with cb.ready_ws(kid) as ws:
        req = ws.send_execute("print('spinning', flush=True)\nwhile True:\n    pass")
        started(ws, req, "spinning")
        assert cb.post(f"api/kernels/{kid}/restart").status_code == 200
    with cb.ready_ws(kid) as ws:
        assert ws.execute("'fresh'").result_data()["text/plain"] == "'fresh'"
    wait_until(lambda: cb.kernel_model(kid)["execution_state"] == "idle", timeout=30,
               message="idle after restart")


@pytest.mark.cellbox_only  # Jupyter Server leaves a running cell without a reply on restart
def test_restart_while_busy_answers_the_running_cell(cb, kernel):
    """A REST restart tells the client waiting for the running cell why no result will come: an
    error and an execute_reply naming the restart, once."""
    kid = kernel["id"]
    with cb.ready_ws(kid) as ws:
        req = ws.send_execute("print('spinning', flush=True)\nwhile True:\n    pass")
        started(ws, req, "spinning")
        assert cb.post(f"api/kernels/{kid}/restart").status_code == 200
        msg_id = req["header"]["msg_id"]

        def of_the_cell(msg_type):
            return lambda m: m["msg_type"] == msg_type and (m.get("parent_header") or {}).get("msg_id") == msg_id

        error = ws.wait_for(of_the_cell("error"), timeout=30, what="the cell's error")
        assert error["content"]["ename"] == "KernelRestarted" and "restarted" in error["content"]["evalue"]
        reply = ws.wait_for(of_the_cell("execute_reply"), timeout=30, what="the cell's reply")
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KernelRestarted"
        assert ws.execute("'fresh'", timeout=60).result_data()["text/plain"] == "'fresh'"


def test_restart_keeps_workspace_files(cb, daemon, kernel):
    kid = kernel["id"]
    with cb.ready_ws(kid) as ws:
        ws.execute("open('survives.txt', 'w').write('data')")
    assert cb.post(f"api/kernels/{kid}/restart").status_code == 200
    with cb.ready_ws(kid) as ws:
        assert ws.execute("open('survives.txt').read()").result_data()["text/plain"] == "'data'"


# ------------------------------------------------------------------ death

# evalue must name the cause: "kernel died: killed by signal 9 (SIGKILL)", "kernel died: exited
# with status 3", ...; each regex below is what the evalue must contain.
DEATHS = {
    "sigkill": ("import os\nos.kill(os.getpid(), 9)", r"killed by signal 9 \(SIGKILL\b"),
    "exit": ("import os\nos._exit(3)", r"exited with status 3\b"),
    "segfault": ("import ctypes\nctypes.string_at(0)", r"killed by signal 11 \(SIGSEGV\b"),
}


@pytest.mark.cellbox_only  # Jupyter Server auto-restarts dead kernels instead
@pytest.mark.parametrize("cause", sorted(DEATHS))
def test_kernel_death_is_reported_then_restart_revives(cb, kernel, cause):
    code, evalue_part = DEATHS[cause]
    kid = kernel["id"]
    with cb.ready_ws(kid, session_id="dying") as ws, cb.ready_ws(kid, session_id="watching") as other:
        ws.execute("doomed_state = 1")
        req = ws.send_execute("print('about to die', flush=True)\n" + code)
        res = ws.collect(req, timeout=30)
        dead = [m for m in ws.log if m[1]["msg_type"] == "status"
                and m[1]["content"]["execution_state"] == "dead"]
        assert dead, "no status: dead on iopub"
        assert dead[0][1]["channel"] == "iopub"
        err = res.first("error")["content"]
        assert err["ename"] == "KernelDied"
        assert re.search(evalue_part, err["evalue"]), err["evalue"]
        assert err["evalue"].startswith("kernel died: "), err["evalue"]
        assert isinstance(err["traceback"], list)
        reply = res.reply
        assert reply["msg_type"] == "execute_reply" and reply["channel"] == "shell"
        assert reply["content"]["status"] == "error"
        assert reply["content"]["ename"] == "KernelDied"
        assert re.search(evalue_part, reply["content"]["evalue"]), reply["content"]["evalue"]
        assert "about to die" in res.stdout
        # every connection hears of it
        other.wait_for(lambda m: m["msg_type"] == "status" and m["content"]["execution_state"] == "dead",
                       what="status dead on the other connection")
    wait_until(lambda: cb.kernel_model(kid)["execution_state"] == "dead", timeout=30,
               message="model execution_state dead")
    r = cb.post(f"api/kernels/{kid}/restart")
    assert r.status_code == 200, r.text
    with cb.ready_ws(kid) as ws:
        assert ws.execute("1+1").result_data()["text/plain"] == "2"
        assert ws.execute("'doomed_state' in dir()").result_data()["text/plain"] == "False"
    assert cb.kernel_model(kid)["execution_state"] in ("idle", "busy")


@pytest.mark.cellbox_only  # a TTL is cellbox's (/v1)
def test_expiry_while_a_cell_runs_is_named_to_the_websocket_client(cb, kernel):
    """A sandbox whose TTL ends while a cell runs: the cell gets an error and a reply naming the
    expiry and what to do, not a bare kernel death; the connection then closes (1001)."""
    kid = kernel["id"]
    with cb.ready_ws(kid) as ws:
        req = ws.send_execute("print('running', flush=True)\nimport time\ntime.sleep(120)")
        started(ws, req, "running")
        r = cb.post(f"v1/sandboxes/{kid}/timeout", json={"timeout_s": 1})
        assert r.status_code == 200, r.text
        mine = lambda m: (m.get("parent_header") or {}).get("msg_id") == req["header"]["msg_id"]
        err = ws.wait_for(lambda m: mine(m) and m["msg_type"] == "error", timeout=60,
                          what="the cell's error")["content"]
        assert err["ename"] == "SandboxExpired", err
        assert err["evalue"].startswith("sandbox expired: its timeout of 1 s ended while this cell ran"), err
        assert f"/v1/sandboxes/{kid}/timeout" in err["evalue"] and "longer timeout" in err["evalue"], err
        reply = ws.wait_for(lambda m: mine(m) and m["msg_type"] == "execute_reply", timeout=30,
                            what="the cell's reply")["content"]
        assert reply["status"] == "error" and reply["ename"] == "SandboxExpired", reply
        ws.wait_closed(timeout=30)
        assert ws.close_code == 1001, ws.close_code
    wait_until(lambda: not cb.kernel_exists(kid), timeout=30, message="the expired kernel to go")


@pytest.mark.cellbox_only
def test_requests_to_a_dead_kernel_are_answered(cb, kernel):
    """After death, a new execute_request must not hang forever: it gets an error reply (or the
    connection is closed) rather than silence."""
    kid = kernel["id"]
    with cb.ready_ws(kid) as ws:
        ws.collect(ws.send_execute("import os\nos._exit(1)"), timeout=30)
        wait_until(lambda: cb.kernel_model(kid)["execution_state"] == "dead", timeout=30,
                   message="dead")
        req = ws.send_execute("1")
        from helpers.client import WSClosed
        try:
            m = ws.wait_for(lambda m: m["parent_header"].get("msg_id") == req["header"]["msg_id"]
                            and m["msg_type"] in ("execute_reply", "error"), timeout=15,
                            what="an answer from a dead kernel")
            if m["msg_type"] == "execute_reply":
                assert m["content"]["status"] in ("error", "aborted")
        except WSClosed:
            pass


@pytest.mark.cellbox_only
def test_death_while_idle_is_noticed(cb, kernel):
    """A kernel that dies between cells (a background thread calls os._exit) is reported dead."""
    kid = kernel["id"]
    with cb.ready_ws(kid) as ws:
        ws.execute("import threading, os, time\n"
                   "threading.Thread(target=lambda: (time.sleep(0.3), os._exit(5)), daemon=True).start()")
        ws.wait_for(lambda m: m["msg_type"] == "status" and m["content"]["execution_state"] == "dead",
                    timeout=30, what="status dead")
    wait_until(lambda: cb.kernel_model(kid)["execution_state"] == "dead", timeout=30, message="dead")
    assert cb.post(f"api/kernels/{kid}/restart").status_code == 200
    with cb.ready_ws(kid) as ws:
        assert ws.execute("5").result_data()["text/plain"] == "5"


@pytest.mark.cellbox_only
def test_delete_dead_kernel(cb, kernel):
    kid = kernel["id"]
    with cb.ready_ws(kid) as ws:
        ws.collect(ws.send_execute("import os\nos._exit(2)"), timeout=30)
    wait_until(lambda: cb.kernel_model(kid)["execution_state"] == "dead", timeout=30, message="dead")
    assert cb.delete(f"api/kernels/{kid}").status_code == 204
    assert cb.get(f"api/kernels/{kid}").status_code == 404


# ------------------------------------------------------------------ delete

def test_delete_busy_kernel(cb, kernel):
    kid = kernel["id"]
    ws = cb.ready_ws(kid)
    try:
        req = ws.send_execute("print('busy', flush=True)\nwhile True:\n    pass")
        started(ws, req, "busy")
        assert cb.delete(f"api/kernels/{kid}").status_code == 204
        assert cb.get(f"api/kernels/{kid}").status_code == 404
    finally:
        ws.close()


def test_many_kernels_are_independent(cb):
    kernels = [cb.create_kernel() for _ in range(3)]
    conns = [cb.ready_ws(k["id"]) for k in kernels]
    try:
        for i, ws in enumerate(conns):
            ws.execute(f"ident = {i}")
        for i, ws in enumerate(conns):
            assert ws.execute("ident").result_data()["text/plain"] == str(i)
    finally:
        for ws in conns:
            ws.close()


# ------------------------------------------------------------------ workspace

@pytest.mark.cellbox_only
def test_workspace_created_is_cwd_and_removed_on_delete(cb, daemon, kernel):
    kid = kernel["id"]
    ws_dir = daemon.workspace(kid)
    wait_until(lambda: os.path.isdir(ws_dir), timeout=30, message=f"{ws_dir} to exist")
    with cb.ready_ws(kid) as ws:
        ws.execute("open('from-kernel.txt', 'w').write('hello host')")
    path = os.path.join(ws_dir, "from-kernel.txt")
    wait_until(lambda: os.path.exists(path), timeout=10, message="the kernel's file on the host")
    with open(path) as f:
        assert f.read() == "hello host"
    # and the other way round: a file put there from the host is visible in the kernel's cwd
    with open(os.path.join(ws_dir, "from-host.txt"), "w") as f:
        f.write("hello kernel")
    with cb.ready_ws(kid) as ws:
        assert ws.execute("open('from-host.txt').read()").result_data()["text/plain"] == "'hello kernel'"
    cb.delete_kernel(kid)
    wait_until(lambda: not os.path.exists(ws_dir), timeout=30, message=f"{ws_dir} to be removed")


@pytest.mark.cellbox_only
def test_workspaces_are_separate(cb, daemon):
    a, b = cb.create_kernel(), cb.create_kernel()
    with cb.ready_ws(a["id"]) as wa, cb.ready_ws(b["id"]) as wb:
        wa.execute("open('mine.txt', 'w').write('a')")
        assert wb.execute("import os\nos.path.exists('mine.txt')").result_data()["text/plain"] == "False"
        assert wa.execute("import os\nos.getcwd() != ''").result_data()["text/plain"] == "True"
    assert os.path.exists(os.path.join(daemon.workspace(a["id"]), "mine.txt"))
    assert not os.path.exists(os.path.join(daemon.workspace(b["id"]), "mine.txt"))


def volume_image(server, kernel_id):
    return os.path.join(server.data_dir, "volumes", f"{kernel_id}.img")


def read_from_image(image, name):
    """A file's content inside an ext4 image, read without mounting it (debugfs)."""
    r = subprocess.run(["/sbin/debugfs", "-R", f"cat /{name}", image], capture_output=True, text=True, timeout=30)
    return r.stdout


@pytest.mark.cellbox_only
def test_keep_workspaces(make_daemon):
    """docs/api.md: with --keep-workspaces a deleted kernel's files stay in its volume image,
    DATA_DIR/volumes/<id>.img (DATA_DIR/workspaces/<id> was only its mount point)."""
    d = make_daemon(args=["--keep-workspaces"])
    c = d.client()
    k = c.create_kernel()
    with c.ready_ws(k["id"]) as ws:
        ws.execute("open('keep.txt', 'w').write('kept')")
    c.delete_kernel(k["id"])
    image = volume_image(d, k["id"])
    assert os.path.isfile(image), os.listdir(os.path.join(d.data_dir, "volumes"))
    assert read_from_image(image, "keep.txt") == "kept"
    assert not os.path.ismount(d.workspace(k["id"]))


@pytest.mark.cellbox_only
@pytest.mark.parametrize("flag", [[], ["--keep-workspaces=false"]])
def test_workspace_and_image_removed_without_keep(make_daemon, flag):
    d = make_daemon(args=flag)
    c = d.client()
    k = c.create_kernel()
    with c.ready_ws(k["id"]) as ws:
        ws.execute("open('gone.txt', 'w').write('x')")
    c.delete_kernel(k["id"])
    wait_until(lambda: not os.path.exists(d.workspace(k["id"])), timeout=30, message="workspace removed")
    wait_until(lambda: not os.path.exists(volume_image(d, k["id"])), timeout=30, message="image removed")


# ------------------------------------------------------------------ kernel environment

@pytest.mark.cellbox_only
def test_kernel_env_passes_kernel_vars_only_and_never_the_token(make_daemon):
    d = make_daemon(env={"CELLBOX_SECRET_PROBE": "daemon-env-secret"})
    c = d.client()
    k = c.create_kernel(env={"KERNEL_FOO": "bar", "KERNEL_EMPTY": "", "OTHER_VAR": "no"})
    with c.ready_ws(k["id"]) as ws:
        r = ws.execute("import os\n(os.environ.get('KERNEL_FOO'), os.environ.get('KERNEL_EMPTY'), "
                       "os.environ.get('OTHER_VAR'))")
        assert r.result_data()["text/plain"] == "('bar', '', None)"
        r = ws.execute("import os\n"
                       f"[k for k, v in os.environ.items() if {d.token!r} in v or 'daemon-env-secret' in v "
                       "or k == 'CELLBOX_SECRET_PROBE' or k == 'CELLBOX_TOKEN']")
        assert r.result_data()["text/plain"] == "[]"


@pytest.mark.cellbox_only
@pytest.mark.parametrize("via", ["flag", "env"])
def test_token_not_readable_from_kernel_processes(make_daemon, via):
    """No process a kernel can see (its own, the sandbox's pid 1, ...) shows the daemon's token
    in its command line or environment."""
    if via == "flag":
        d = make_daemon()
    else:
        d = make_daemon(pass_token=False, env={"CELLBOX_TOKEN": "envtoken-" + "9" * 24})
        d.token = "envtoken-" + "9" * 24
    c = d.client()
    k = c.create_kernel()
    with c.ready_ws(k["id"]) as ws:
        r = ws.execute("import os\nfound = []\n"
                       "for pid in os.listdir('/proc'):\n"
                       "    if pid.isdigit():\n"
                       "        for name in ('cmdline', 'environ'):\n"
                       "            try:\n"
                       f"                if {d.token!r}.encode() in open(f'/proc/{{pid}}/{{name}}', 'rb').read():\n"
                       "                    found.append((pid, name))\n"
                       "            except OSError:\n"
                       "                pass\n"
                       "found")
        assert r.result_data()["text/plain"] == "[]"
