"""E2B's official SDK drives envd's process service in cellboxd (api/envd_process.c), unchanged:
sandbox.commands and sandbox.pty as tests/clients/node/e2b_commands.mjs runs them, every step's
details checked here again.

The npm packages come from `scripts/install-deps.sh test` (npm ci in tests/clients/node)."""
import pytest

from helpers.node_clients import passed_step, run_e2b_script

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no E2B API

TIMEOUT = 180
# envd's processes start in the user's home (api/envd.h, ENVD_HOME_DIR)
ENVD_HOME = "/home/user"


@pytest.fixture(scope="module")
def scenario(daemon):
    proc, steps, detail = run_e2b_script(daemon, "e2b_commands.mjs", TIMEOUT)
    return steps, detail, proc.returncode


def get_step(scenario, name):
    steps, detail, _ = scenario
    return passed_step(steps, detail, name)


def test_every_step_passed(scenario):
    steps, detail, returncode = scenario
    expected = ["create", "foreground", "bytes", "exit_error", "envs_and_cwd", "timeout",
                "background", "kill", "pty", "sandbox_death"]
    assert [s for s in expected if s not in steps] == [], detail
    assert {name: s for name, s in steps.items() if not s["ok"]} == {}, detail
    assert returncode == 0, detail


def test_foreground_output_exit_code_and_callbacks(scenario):
    s = get_step(scenario, "foreground")
    assert s["stdout"] == f"hello\n{s['shell_pid']}\n" and s["stderr"] == "oops\n"
    assert s["exit_code"] == 0 and s["error"] is None
    assert s["callback_stdout"] == s["stdout"] and s["callback_stderr"] == "oops\n"
    assert 1 < s["shell_pid"] < 100000  # a pid of the sandbox's own pid namespace


def test_output_is_bytes_decoded_by_the_sdk(scenario):
    s = get_step(scenario, "bytes")
    # a NUL kept, a stray 0xff one U+FFFD, and the euro sign whole though split across writes
    assert s["stdout_codes"] == [ord("a"), 0, ord("b"), 0xFFFD, ord("c"), 10, 0x20AC, 10]


def test_a_non_zero_exit_is_command_exit_error(scenario):
    s = get_step(scenario, "exit_error")
    assert s["threw"] == "CommandExitError" and s["is_exit_error"]
    assert s["exitCode"] == 7 and s["error"] == "exit status 7"
    assert s["stdout"] == "out\n" and s["stderr"] == "err\n"


def test_envs_and_cwd(scenario):
    s = get_step(scenario, "envs_and_cwd")
    assert s["envs"] == "hi there-yes\n"
    assert s["cwd"] == "/tmp\n" and s["default_cwd"] == ENVD_HOME + "\n"
    assert s["missing_threw"] == "InvalidArgumentError" and "/no/such/dir" in s["missing_error"]


def test_timeout_ends_the_command(scenario):
    s = get_step(scenario, "timeout")
    assert s["threw"] == "TimeoutError", s
    assert s["sleepers_left"] == 0  # envd kills a command at its timeoutMs


def test_background_stdin_list_and_a_second_handle(scenario):
    s = get_step(scenario, "background")
    listed = s["listed"]
    assert listed and listed["pid"] == s["pid"] and listed["cmd"] == "/bin/bash"
    assert listed["args"][:2] == ["-l", "-c"] and "read line" in listed["args"][2]
    assert listed["cwd"] == ENVD_HOME
    assert s["first"]["stdout"] == "got:one\nend:two\neof\n" and s["first"]["exitCode"] == 0
    # connected after the start: what came after, and the end
    assert s["second"]["exitCode"] == 0 and s["second"]["stdout"] == "got:one\nend:two\neof\n"
    assert s["second_callbacks"] == s["second"]["stdout"]
    assert s["gone_from_list"]


def test_kill(scenario):
    s = get_step(scenario, "kill")
    assert s["listed"] and s["killed"] is True and s["killed_again"] is False
    assert s["ended"]["threw"] == "CommandExitError" and s["ended"]["exitCode"] == -1
    assert s["ended"]["error"] == "signal: killed"
    assert s["connect_after"] == "NotFoundError"


def test_pty(scenario):
    s = get_step(scenario, "pty")
    assert s["echoed"] and s["sized"] and s["resized"] and s["on_pts"]
    assert s["listed"]["cmd"] == "/bin/bash" and s["listed"]["args"] == ["-i", "-l"]
    assert s["killed"] is True and s["ended"]["exitCode"] == -1


def test_a_command_ends_with_its_sandbox(scenario):
    s = get_step(scenario, "sandbox_death")
    assert s["killed"] is True
    assert s["ended"]["threw"] == "CommandExitError" and s["ended"]["exitCode"] == -1, s
    assert s["ended"]["error"].startswith("signal: killed"), s
