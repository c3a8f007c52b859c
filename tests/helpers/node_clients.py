"""Running the npm SDK scenario scripts of tests/clients/node against a daemon a test started.

Each script (built on tests/clients/node/scenario.mjs) is pointed at the daemon by the
environment alone, E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY, as a user points E2B's SDK at
cellbox, and prints one JSON summary line, {"ok", "steps": {name: {ok, ...}}}. The npm packages
come from `scripts/install-deps.sh test` (npm ci in tests/clients/node)."""
import json
import os
import shutil
import subprocess

NODE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "clients",
                        "node")


def run_e2b_script(daemon, script, timeout=240, env=None):
    """Runs `script` against `daemon`: (the finished process, the summary's steps, a detail
    text for assertion messages). The script's own deadline ends 20 s before `timeout`."""
    node = shutil.which("node")
    assert node, "node is not installed (scripts/install-deps.sh test installs it)"
    assert os.path.isdir(os.path.join(NODE_DIR, "node_modules", "@e2b", "code-interpreter")), \
        "npm packages missing: run `scripts/install-deps.sh test` (npm ci in tests/clients/node)"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
    environment.update(E2B_API_URL=daemon.origin, E2B_SANDBOX_URL=daemon.origin,
                       E2B_API_KEY=daemon.token,
                       CELLBOX_CLIENT_DEADLINE_MS=str((timeout - 20) * 1000))
    environment.update(env or {})
    proc = subprocess.run([node, script], cwd=NODE_DIR, env=environment, capture_output=True,
                          text=True, timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no summary from {script} (exit {proc.returncode})\nstderr:\n{proc.stderr[-4000:]}"
    summary = json.loads(lines[-1])
    detail = (f"{script}: exit {proc.returncode}\nsummary: {json.dumps(summary, indent=1)}\n"
              f"stderr:\n{proc.stderr[-3000:]}")
    return proc, summary["steps"], detail
