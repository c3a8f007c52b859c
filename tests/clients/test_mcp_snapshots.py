"""The MCP server's snapshot tools with the official TypeScript SDK's Client
(tests/clients/node/mcp_snapshots.mjs, issue 24): snapshot_sandbox, run_code_in_fork (a risky
cell tried in a fork, the original untouched), fork_sandbox with a count (forks diverge
independently), restore_snapshot as a new sandbox and in place, and their refusals as tool
errors that say what to do. Every step the script reports is checked here.

The npm packages come from `scripts/install-deps.sh test` (npm ci in tests/clients/node)."""
import json
import os
import shutil
import subprocess

import pytest

from helpers.wait import wait_until

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no MCP endpoint

NODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")
TIMEOUT = 200


def wait_for_zygote(daemon):
    """A snapshot or a fork images a zygote's clone: the sandboxes here start once the daemon's
    zygote is ready (one made before is a plain process, which cannot be imaged)."""
    client = daemon.client()
    wait_until(lambda: client.get("api").json()["zygote_ready"], timeout=120, message="the zygote")


@pytest.fixture(scope="module")
def scenario(daemon):
    """The script's steps, run once for this module's tests: (steps, detail)."""
    node = shutil.which("node")
    assert node, "node is not installed (scripts/install-deps.sh test installs it)"
    wait_for_zygote(daemon)
    env = dict(os.environ, CELLBOX_URL=daemon.origin, CELLBOX_TOKEN=daemon.token,
               CELLBOX_CLIENT_DEADLINE_MS=str((TIMEOUT - 20) * 1000))
    proc = subprocess.run([node, "mcp_snapshots.mjs"], cwd=NODE_DIR, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    detail = f"exit {proc.returncode}\nstdout:\n{proc.stdout[-6000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert lines, f"no summary from mcp_snapshots.mjs\n{detail}"
    yield json.loads(lines[-1])["steps"], detail
    assert daemon.alive(), f"cellboxd died during the scenario; log tail:\n{daemon.log_tail()}"


def step(scenario, name):
    steps, detail = scenario
    assert steps.get(name, {}).get("ok"), f"step {name} did not run: {steps.get(name)}\n{detail}"
    return steps[name]


def ok_text(answer):
    assert answer and not answer["isError"], answer
    return answer["text"]


def test_tools_are_listed_with_their_arguments(scenario):
    tools = step(scenario, "connect")
    assert set(tools["snapshot_sandbox"]["properties"]) == {"name", "sandbox_id"}, tools
    assert tools["restore_snapshot"]["required"] == ["snapshot_id"], tools
    assert "in_place" in tools["restore_snapshot"]["properties"], tools
    assert {"count", "sandbox_id"} <= set(tools["fork_sandbox"]["properties"]), tools
    assert tools["run_code_in_fork"]["required"] == ["code"], tools
    assert {"language", "sandbox_id", "timeout_s"} <= set(tools["run_code_in_fork"]["properties"])


def test_snapshot_names_its_id_and_its_sandbox(scenario):
    setup = step(scenario, "setup")
    taken = step(scenario, "snapshot")
    text = ok_text(taken["taken"])
    assert taken["snapshot_id"] and setup["source"] in text, text
    assert "restore_snapshot" in text, text


def test_run_code_in_fork_leaves_the_original_alone(scenario):
    s = step(scenario, "run_code_in_fork")
    text = ok_text(s["tried"])
    assert s["fork"] and s["fork"] != step(scenario, "setup")["source"], text
    assert "100" in text and "delete_sandbox" in text, text
    assert ok_text(s["original"]).strip().endswith("5"), s["original"]
    assert ok_text(s["in_fork"]).strip().endswith("100"), s["in_fork"]  # the fork is kept


def test_fork_sandbox_gives_count_independent_copies(scenario):
    s = step(scenario, "fork_sandbox")
    assert len(set(s["ids"])) == 2, s["forked"]
    assert ok_text(s["changed"]).strip().endswith("7"), s["changed"]
    assert ok_text(s["other"]).strip().endswith("5"), s["other"]
    assert ok_text(s["original"]).strip().endswith("5"), s["original"]


def test_restore_snapshot_as_a_new_sandbox_and_in_place(scenario):
    new = step(scenario, "restore_new")
    assert new["id"] and new["id"] != step(scenario, "setup")["source"], new["restored"]
    assert ok_text(new["value"]).strip().endswith("5"), new["value"]
    assert ok_text(new["original"]).strip().endswith("0"), new["original"]  # not rewound
    in_place = step(scenario, "restore_in_place")
    assert in_place["id"] == step(scenario, "setup")["source"], in_place["restored"]
    assert ok_text(in_place["value"]).strip().endswith("5"), in_place["value"]


def test_refusals_are_tool_errors_that_say_what_to_do(scenario):
    s = step(scenario, "refusals")
    assert s["unknown_snapshot"]["isError"], s
    assert "does not exist" in s["unknown_snapshot"]["text"], s
    assert "snapshot_sandbox" in s["unknown_snapshot"]["text"], s
    assert s["too_many"]["isError"] and "1 to 16" in s["too_many"]["text"], s
    assert s["no_code"]["isError"] and "'code' is required" in s["no_code"]["text"], s
