"""JupyterLab's client library (@jupyterlab/services, in node with the `ws` package) against a
live cellboxd: kernel specs, a kernel started, executed, interrupted, restarted and shut down,
and a session. The node side is tests/clients/node/jupyterlab_services_client.js; its
packages are installed by `scripts/install-deps.sh test` (npm ci)."""
import json
import os
import shutil
import subprocess

import pytest

NODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")
SCRIPT = "jupyterlab_services_client.js"


def run_client(url, token, timeout=180):
    node = shutil.which("node")
    assert node, "node is not installed (scripts/install-deps.sh test installs it)"
    assert os.path.isdir(os.path.join(NODE_DIR, "node_modules", "@jupyterlab", "services")), \
        "npm packages missing: run `scripts/install-deps.sh test` (npm ci in tests/clients/node)"
    env = dict(os.environ, CELLBOX_URL=url, CELLBOX_TOKEN=token,
               CELLBOX_CLIENT_DEADLINE_MS=str((timeout - 20) * 1000))
    proc = subprocess.run([node, SCRIPT], cwd=NODE_DIR, env=env, capture_output=True, text=True,
                          timeout=timeout)
    steps = {}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            rec = json.loads(line[len("RESULT "):])
            steps[rec["step"]] = rec
    return proc, steps


def assert_all_steps(proc, steps):
    detail = f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr (tail):\n{proc.stderr[-3000:]}"
    failed = [s for s in steps.values() if not s["ok"]]
    assert not failed, f"failed steps: {failed}\n{detail}"
    expected = ["kernelspecs", "kernel_info", "wire_protocol", "execute_1+1", "execute_print", "state",
                "error", "running_list", "interrupt", "restart", "session_execute", "session_list",
                "session_shutdown", "shutdown", "done"]
    missing = [s for s in expected if s not in steps]
    assert not missing, f"steps never reported: {missing}\n{detail}"
    assert proc.returncode == 0, detail


def test_jupyterlab_services_full_cycle(daemon):
    proc, steps = run_client(f"{daemon.origin}/", daemon.token)
    assert_all_steps(proc, steps)
    assert steps["kernelspecs"]["default"] == "python3"
    assert steps["execute_1+1"]["result"] == "2"
    assert steps["execute_print"]["stdout"] == "hello from jupyterlab services\n"
    assert steps["kernel_info"]["protocol_version"].startswith("5.")
    # the kernel it shut down is gone from cellboxd too
    assert not daemon.client().kernel_exists(steps["shutdown"]["kernel_id"])


@pytest.mark.cellbox_only
def test_jupyterlab_services_uses_v1_protocol(daemon):
    """JupyterLab offers v1.kernel.websocket.jupyter.org first; cellboxd must pick it."""
    proc, steps = run_client(f"{daemon.origin}/", daemon.token)
    assert steps.get("wire_protocol", {}).get("protocol") == "v1.kernel.websocket.jupyter.org", proc.stdout


@pytest.mark.cellbox_only
def test_jupyterlab_services_under_base_url(make_daemon):
    d = make_daemon(base_url="/lab/base/")
    proc, steps = run_client(f"{d.origin}/lab/base/", d.token)
    assert_all_steps(proc, steps)
