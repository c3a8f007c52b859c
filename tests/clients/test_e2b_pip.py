"""E2B's walkthrough step "install packages at runtime" through E2B's official SDK, unchanged
(tests/clients/node/e2b_pip.mjs), in a sandbox without a network:

- `commands.run("pip install cowsay")` throws CommandExitError (exit 1) whose stderr ends with
  cellbox's line naming the missing network; runCode's `!pip install cowsay` ends with it too.
- A wheel uploaded with files.write installs with runCode's `%pip install --no-index` and the
  same kernel imports it; commands.run installs it too and runs its console script by name.

The host's system site-packages stay as they were.
"""
import os
import tempfile

import pytest

from helpers import wheels
from helpers.node_clients import run_e2b_script

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no E2B API

TIMEOUT = 240
PACKAGE = "cellbox_e2b_pip_probe"
COMMAND = "cellbox-e2b-pip-probe"
NOTE = "cellbox: this sandbox has no network, so pip could not reach pypi.org"
HOST_SITES = ("/usr/lib/python3/dist-packages", "/usr/local/lib/python3.11/dist-packages")


@pytest.fixture(scope="module")
def sdk_run(daemon):
    before = {d: sorted(os.listdir(d)) for d in HOST_SITES if os.path.isdir(d)}
    with tempfile.TemporaryDirectory(prefix="cellbox-e2b-pip-") as directory:
        path = os.path.join(directory, wheels.wheel_name(PACKAGE, "1.0"))
        with open(path, "wb") as f:
            f.write(wheels.build_wheel(PACKAGE, "1.0", "installed through the E2B SDK", COMMAND))
        proc, steps, detail = run_e2b_script(daemon, "e2b_pip.mjs", TIMEOUT, env={"CELLBOX_WHEEL": path})
    assert {d: sorted(os.listdir(d)) for d in HOST_SITES if os.path.isdir(d)} == before
    return proc, steps, detail


def test_every_step_reported_and_passed(sdk_run):
    proc, steps, detail = sdk_run
    expected = ["create", "commands_pip_without_network", "run_code_pip_without_network",
                "upload_wheel", "run_code_pip_wheel_and_import", "commands_pip_wheel_and_script",
                "kill"]
    assert [s for s in expected if s not in steps] == [], detail
    assert {name: s for name, s in steps.items() if not s["ok"]} == {}, detail
    assert proc.returncode == 0, detail


def test_run_code_pip_by_name_names_the_missing_network(sdk_run):
    _, steps, detail = sdk_run
    assert steps["run_code_pip_without_network"]["last_line"].startswith(NOTE), detail


def test_uploaded_wheel_imports_in_the_same_kernel(sdk_run):
    _, steps, detail = sdk_run
    assert steps["upload_wheel"]["path"].endswith(wheels.wheel_name(PACKAGE, "1.0")), detail
    step = steps["run_code_pip_wheel_and_import"]
    assert step["installed"] and step["text"] == "'installed through the E2B SDK'", detail


def test_commands_run_pip_by_name_throws_naming_the_missing_network(sdk_run):
    _, steps, detail = sdk_run
    step = steps["commands_pip_without_network"]
    assert step["command_exit_error"] is True and step["exit_code"] == 1, detail
    assert step["last_line"].startswith(NOTE), detail
    assert "externally-managed-environment" not in step["stdout"] + step["stderr"], detail


def test_commands_run_installs_the_wheel_and_runs_its_command(sdk_run):
    _, steps, detail = sdk_run
    step = steps["commands_pip_wheel_and_script"]
    assert step["install_exit_code"] == 0, detail
    assert step["script"]["exit_code"] == 0, detail
    assert step["script"]["stdout"] == "installed through the E2B SDK\n", detail
