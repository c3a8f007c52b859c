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


def run_node_script(daemon, script, timeout=240, env=None):
    """Runs `script` against `daemon`: (the finished process, its last JSON line). The script's
    own deadline ends 20 s before `timeout`; `env` adds variables (a wheel's path, a volume's
    name). e2b_bench.mjs, whose line is figures rather than steps, is read through this."""
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
    return proc, json.loads(lines[-1])


def run_e2b_script(daemon, script, timeout=240, env=None):
    """Runs a scenario `script` against `daemon`: (the finished process, the summary's steps, a
    detail text for assertion messages)."""
    proc, summary = run_node_script(daemon, script, timeout, env)
    detail = (f"{script}: exit {proc.returncode}\nsummary: {json.dumps(summary, indent=1)}\n"
              f"stderr:\n{proc.stderr[-3000:]}")
    return proc, summary["steps"], detail


def passed_step(steps, detail, name):
    """The details of step `name`, asserting that it reported and passed."""
    assert name in steps, f"step {name} never reported\n{detail}"
    assert steps[name]["ok"], f"step {name} failed: {steps[name]}\n{detail}"
    return steps[name]


def assert_every_step_passed(proc, steps, detail, expected):
    """Asserts that each of `expected` reported, that no step failed and that the script exited 0."""
    missing = [name for name in expected if name not in steps]
    assert not missing, f"steps never reported: {missing}\n{detail}"
    failed = {name: step for name, step in steps.items() if not step["ok"]}
    assert not failed, f"failed steps: {failed}\n{detail}"
    assert proc.returncode == 0, detail
