"""The Bash kernel (cellbox-kernel --language=bash, src/runtime/kernel_bash.c) against
docs/kernel-protocol.md and docs/languages.md "Bash", driven over a socketpair as cellboxd
drives it, outside any sandbox.

Run:  /usr/bin/python3 -m pytest -q tests/kernel/test_bash_kernel.py
"""
import glob
import json
import os

import pytest

from language_kernel import LanguageKernel, started

BASH = ["--channel-fd=3", "--language=bash"]


@pytest.fixture
def kernel():
    yield from started(BASH)


def stdout_of(kernel, exchange):
    kernel.drain_output()
    return kernel.output["stdout"].decode()


def test_kernel_info_names_bash(kernel):
    exchange = kernel.request("shell", "kernel_info_request")
    content = exchange.reply["content"]
    assert content["status"] == "ok"
    assert content["implementation"] == "cellbox-bash"
    info = content["language_info"]
    assert info["name"] == "bash" and info["mimetype"] == "text/x-sh"
    assert info["file_extension"] == ".sh" and info["version"][0].isdigit()
    assert [m["content"]["execution_state"] for m in exchange.of_type("status")] == ["busy", "idle"]


def test_cwd_variables_and_functions_persist(kernel, tmp_path):
    first = kernel.execute(f"cd {tmp_path}; answer=42; greet() {{ echo \"hello $1\"; }}")
    assert first.reply["content"]["status"] == "ok"
    second = kernel.execute("echo \"$PWD $answer\"; greet world")
    assert second.reply["content"]["status"] == "ok"
    kernel.wait_output("stdout", f"{tmp_path} 42\nhello world\n")


def test_execute_messages_in_order_with_counts(kernel):
    exchange = kernel.execute("echo one")
    assert exchange.types() == ["status", "execute_input", "execute_reply", "status"]
    assert exchange.one("execute_input")["content"] == {"code": "echo one", "execution_count": 1}
    assert exchange.reply["content"]["execution_count"] == 1
    assert kernel.execute("true").reply["content"]["execution_count"] == 2
    silent = kernel.execute("true", silent=True)
    assert "execute_input" not in silent.types()
    assert kernel.execute("true").reply["content"]["execution_count"] == 3


def test_output_is_drained_before_the_reply(kernel):
    """The drain rule: what bash wrote is in the pipe's reader's hands before the reply frame."""
    exchange = kernel.execute("for i in $(seq 1 2000); do echo line-$i; done; echo err >&2")
    assert exchange.reply["content"]["status"] == "ok"
    # Nothing was read from the pipes after the idle frame arrived: recv drains them as it goes,
    # so the whole output must already be here.
    assert kernel.output["stdout"].decode().endswith("line-2000\n")
    assert kernel.output["stderr"].decode().endswith("err\n")


def test_non_zero_status_is_an_error(kernel):
    exchange = kernel.execute("echo before; (exit 3)")
    error = exchange.one("error")["content"]
    assert error["ename"] == "ExitStatus" and error["evalue"] == "3"
    assert "status 3" in error["traceback"][0]
    reply = exchange.reply["content"]
    assert reply["status"] == "error" and reply["ename"] == "ExitStatus"
    assert kernel.execute("echo still-here").reply["content"]["status"] == "ok"
    kernel.wait_output("stdout", "still-here\n")


def test_stop_on_error_aborts_waiting_executes(kernel):
    failing = kernel.message("shell", "execute_request",
                             {"code": "false", "silent": False, "stop_on_error": True})
    queued = kernel.message("shell", "execute_request",
                            {"code": "echo must-not-run", "silent": False})
    # One write: the second request is waiting on the channel when the first one fails.
    kernel.sock.sendall(b"".join(len(body).to_bytes(4, "little") + body
                                 for body in (json.dumps(m).encode() for m in (failing, queued))))
    assert kernel.collect(failing).reply["content"]["status"] == "error"
    aborted = kernel.collect(queued)
    assert aborted.reply["content"]["status"] == "aborted"
    assert b"must-not-run" not in kernel.output["stdout"]


@pytest.mark.parametrize("code, process", [("echo started; sleep 30; echo after", "sleep"),
                                           ("echo started; while :; do :; done; echo after", None)])
def test_interrupt_stops_the_cell_and_reports_it(kernel, code, process):
    request = kernel.send("shell", "execute_request", {"code": code, "silent": False})
    kernel.wait_output("stdout", "started\n")
    if process:
        kernel.wait_process(process)
    kernel.interrupt()
    exchange = kernel.collect(request)
    error = exchange.one("error")["content"]
    assert error["ename"] == "Interrupted" and error["evalue"] == "130"
    assert "interrupted" in error["traceback"][0]
    assert exchange.reply["content"]["status"] == "error"
    assert b"after" not in kernel.output["stdout"]
    # The shell (and its state) survived the interrupt.
    assert kernel.execute("echo alive").reply["content"]["status"] == "ok"
    kernel.wait_output("stdout", "alive\n")


def test_exit_ends_the_kernel_with_the_shells_status():
    k = LanguageKernel(BASH)
    try:
        k.wait_starting()
        exchange = k.execute("exit 7")
        error = exchange.one("error")["content"]
        assert error["ename"] == "ShellExited"
        assert error["evalue"] == "the shell exited with status 7"
        assert k.wait_exit() == 7
    finally:
        k.close()


def test_shutdown_replies_then_exits_zero_and_removes_its_files():
    before = set(glob.glob("/tmp/cellbox-bash-*"))
    k = LanguageKernel(BASH)
    try:
        k.wait_starting()
        k.execute("true")
        made = set(glob.glob("/tmp/cellbox-bash-*")) - before
        assert made, "the kernel keeps its cells in a /tmp/cellbox-bash-* directory"
        for directory in made:
            assert os.stat(directory).st_mode & 0o777 == 0o700
        exchange = k.request("control", "shutdown_request", {"restart": False})
        assert exchange.reply["content"] == {"status": "ok", "restart": False}
        assert k.wait_exit() == 0
        assert not any(os.path.exists(directory) for directory in made)
    finally:
        k.close()


def test_environment_frame_exports_and_changes_directory(kernel, tmp_path):
    kernel.send_raw(b'{"channel":"cellbox","type":"environment","set":{"GREETING":"it\'s me",'
                    b'"bad name":"x"},"cwd":"' + str(tmp_path).encode() + b'"}')
    exchange = kernel.execute("echo \"$GREETING in $PWD\"; bash -c 'echo child sees $GREETING'")
    assert exchange.reply["content"]["status"] == "ok"
    kernel.wait_output("stdout", f"it's me in {tmp_path}\nchild sees it's me\n")


def test_request_variables_hold_for_one_execution(kernel):
    request = kernel.message("shell", "execute_request",
                             {"code": "echo \"one:$ONLY_NOW\"", "silent": False},
                             metadata={"cellbox": {"env": {"ONLY_NOW": "yes"}}})
    kernel.send_raw(json.dumps(request).encode())
    kernel.collect(request)
    kernel.execute("echo \"two:$ONLY_NOW\"")
    kernel.wait_output("stdout", "one:yes\ntwo:\n")


def test_is_complete(kernel):
    def status(code):
        return kernel.request("shell", "is_complete_request", {"code": code}).reply["content"]["status"]
    assert status("echo hi") == "complete"
    assert status("if true; then") == "incomplete"
    assert status("echo 'open") == "incomplete"
    assert status("fi") == "invalid"


def test_stdin_is_dev_null(kernel):
    exchange = kernel.execute("read line; echo \"read=$?\"")
    assert exchange.reply["content"]["status"] == "ok"
    kernel.wait_output("stdout", "read=1\n")


def test_garbage_on_the_channel_ends_the_kernel():
    k = LanguageKernel(BASH)
    try:
        k.wait_starting()
        k.send_raw(b"this is not json")
        assert k.wait_exit() == 0
        assert "not a JSON object" in k.stderr_text()
    finally:
        k.close()


def test_complete_knows_the_shells_functions_variables_and_files(kernel, tmp_path):
    (tmp_path / "report-2026.txt").write_text("x")
    kernel.execute(f"cd {tmp_path}; my_helper_fn() {{ :; }}; MY_SETTING=1")

    def complete(code, cursor=None):
        reply = kernel.request("shell", "complete_request",
                               {"code": code, "cursor_pos": len(code) if cursor is None else cursor})
        return reply.reply["content"]

    function = complete("my_helper")
    assert function["matches"] == ["my_helper_fn"]
    assert (function["cursor_start"], function["cursor_end"]) == (0, 9)
    assert complete("echo $MY_SET")["matches"] == ["$MY_SETTING"]
    argument = complete("cat rep")
    assert argument["matches"] == ["report-2026.txt"] and argument["cursor_start"] == 4
    assert complete("é; my_helper")["cursor_start"] == 3  # code points, not bytes
    # Completion wrote nothing to the output pipes.
    kernel.execute("true")
    assert b"my_helper_fn" not in kernel.output["stdout"]


INTERRUPT_RACE_ROUNDS = 40


def test_interrupt_while_the_shell_starts_a_program_still_ends_the_cell(kernel):
    """A SIGINT sent the moment the cell has printed, while bash is forking `sleep` (the
    window where bash's child still has the shell's handler and drops the signal), still ends
    the cell: its error, its reply and idle, every round; the shell then answers."""
    for round_number in range(INTERRUPT_RACE_ROUNDS):
        marker = f"round-{round_number}\n"
        request = kernel.send("shell", "execute_request",
                              {"code": f"echo round-{round_number}; sleep 30; echo after",
                               "silent": False})
        kernel.wait_output("stdout", marker)
        kernel.interrupt()
        exchange = kernel.collect(request, timeout=20)
        error = exchange.one("error")["content"]
        assert error["ename"] == "Interrupted" and error["evalue"] == "130", (round_number, error)
        assert exchange.reply["content"]["status"] == "error", exchange.reply["content"]
    assert b"after" not in kernel.output["stdout"]
    assert kernel.execute("echo alive").reply["content"]["status"] == "ok"
    kernel.wait_output("stdout", "alive\n")


def test_dollar_question_is_the_previous_cells_status_even_across_requests(kernel):
    """`$?` at a cell's start is the last cell's status: 3 after `(exit 3)`, 130 after an
    interrupt; completion and is_complete between cells do not change it."""
    assert kernel.execute("(exit 3)").reply["content"]["evalue"] == "3"
    kernel.request("shell", "complete_request", {"code": "ech", "cursor_pos": 3})
    kernel.request("shell", "is_complete_request", {"code": "echo"})
    assert kernel.execute('echo "first=$?"').reply["content"]["status"] == "ok"
    kernel.wait_output("stdout", "first=3\n")
    request = kernel.send("shell", "execute_request", {"code": "echo spin; sleep 30",
                                                       "silent": False})
    kernel.wait_output("stdout", "spin\n")
    kernel.interrupt()
    assert kernel.collect(request).reply["content"]["evalue"] == "130"
    assert kernel.execute('echo "second=$?"').reply["content"]["status"] == "ok"
    kernel.wait_output("stdout", "second=130\n")
