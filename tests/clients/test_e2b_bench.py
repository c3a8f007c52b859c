"""make bench's E2B figures (tests/clients/node/e2b_bench.mjs), run short against a daemon this
test starts: that they are measured and what they measure is right, never how fast (speed
belongs in `make bench`).

- files: sandbox.files.write of 10 MiB through the SDK and PUT /v1/.../files, each sample a
  whole write; both files land in the sandbox whole.
- commands: sandbox.commands.run('true') (the SDK's `bash -l -c true`) and /v1's command route,
  each sample one command to its exit.
- bench.py's reduction of the samples to p50/p99 and ratios (e2b_figures)."""
import importlib.util
import os

import pytest

from helpers.node_clients import run_node_script

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no E2B API

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "bench.py")
TIMEOUT = 180
RUNS = 3


def load_bench():
    spec = importlib.util.spec_from_file_location("cellbox_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_e2b_bench_measures_both_paths(daemon):
    proc, figures = run_node_script(daemon, "e2b_bench.mjs", TIMEOUT,
                                    env={"CELLBOX_BENCH_RUNS": str(RUNS), "CELLBOX_BENCH_FILE_RUNS": "2"})
    assert proc.returncode == 0 and figures["ok"], (figures, proc.stderr[-3000:])
    assert figures["runs"] == RUNS

    files = figures["files"]
    assert files["bytes"] == 10 * 1024 * 1024
    assert len(files["sdk_ms"]) == 2 and len(files["v1_ms"]) == 2
    assert all(ms > 0 for ms in files["sdk_ms"] + files["v1_ms"])

    commands = figures["commands"]
    assert len(commands["sdk_ms"]) == RUNS and len(commands["v1_ms"]) == RUNS
    assert all(ms > 0 for ms in commands["sdk_ms"] + commands["v1_ms"])
    # the sandbox the client made is gone
    assert daemon.client().get("v1/sandboxes").json() == []


def test_bench_reduces_samples_to_percentiles_and_ratios():
    bench = load_bench()
    raw = {"ok": True, "runs": 5,
           "commands": {"sdk_ms": [4.0, 2.0, 3.0, 8.0, 6.0], "v1_ms": [1.0, 1.0, 2.0, 4.0, 2.0]},
           "files": {"bytes": 10485760, "sdk_ms": [30.0, 10.0, 20.0], "v1_ms": [5.0, 5.0, 5.0]}}
    figures = bench.e2b_figures(raw)
    # ratio: the E2B SDK's time over /v1's (1.0: the E2B path costs nothing more)
    assert figures["commands_run_true_ms"] == {"e2b_sdk_p50": 4.0, "e2b_sdk_p99": 8.0, "v1_p50": 2.0,
                                               "v1_p99": 4.0, "ratio_p50": 2.0, "ratio_p99": 2.0, "runs": 5}
    assert figures["file_write_10mib_ms"] == {"e2b_sdk_p50": 20.0, "e2b_sdk_p99": 30.0, "v1_p50": 5.0,
                                              "v1_p99": 5.0, "ratio_p50": 4.0, "ratio_p99": 6.0, "runs": 3}
    with pytest.raises(RuntimeError, match="the E2B bench client failed: boom"):
        bench.e2b_figures({"ok": False, "error": "boom"})
