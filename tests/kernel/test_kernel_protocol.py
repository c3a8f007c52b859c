"""cellbox-kernel alone, against docs/kernel-protocol.md and ipykernel 6.17's messages.

Run:  /usr/bin/python3 -m pytest -q tests/kernel
(builds build/bin/cellbox-kernel and the Python package with make unless $CELLBOX_BUILD is set)
"""
import json
import re
import time

import pytest

from kernel_process import PYTHON_DIR, KernelProcess, started_kernel, summary

UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
DATE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


@pytest.fixture
def kernel():
    """A fresh kernel for each test (conftest.py's is shared by a module)."""
    yield from started_kernel()


def statuses(exchange):
    return [m["content"]["execution_state"] for m in exchange.of_type("status")]


# ---------------------------------------------------------------- start, headers, framing

def test_starting_status_is_first_with_empty_parent():
    k = KernelProcess()
    try:
        first = k.wait_starting()
        print(f"kernel start (exec -> status starting): {k.start_seconds * 1000:.0f} ms")
        assert first["channel"] == "iopub"
        assert first["header"]["msg_type"] == "status"
        assert first["content"] == {"execution_state": "starting"}
        assert first["parent_header"] == {}
    finally:
        k.close()


def test_headers_follow_the_contract(kernel):
    exchange = kernel.request("shell", "kernel_info_request")
    sessions = set()
    for message in exchange.messages:
        header = message["header"]
        assert set(header) == {"msg_id", "session", "username", "date", "msg_type", "version"}
        assert UUID4.match(header["session"])
        # jupyter_client 7's form (what ipykernel sends): session, pid, a counter
        session, pid, number = header["msg_id"].rsplit("_", 2)
        assert session == header["session"] and pid.isdigit() and number.isdigit()
        assert header["username"] == "kernel" and header["version"] == "5.3"
        assert DATE.match(header["date"]), header["date"]
        assert message["parent_header"] == exchange.request["header"]
        sessions.add(header["session"])
    assert len(sessions) == 1
    assert len({message["header"]["msg_id"] for message in exchange.messages}) == len(exchange.messages)


def test_every_request_is_wrapped_in_busy_idle(kernel):
    exchange = kernel.request("shell", "kernel_info_request")
    assert summary(exchange.messages) == [("iopub", "status"), ("shell", "kernel_info_reply"),
                                          ("iopub", "status")]
    assert statuses(exchange) == ["busy", "idle"]


def test_kernel_info_reply_is_ipykernels(kernel):
    content = kernel.request("shell", "kernel_info_request").reply["content"]
    assert content["status"] == "ok"
    assert content["protocol_version"] == "5.3"
    assert content["implementation"] == "ipython"
    assert re.match(r"^\d+\.\d+", content["implementation_version"])
    info = content["language_info"]
    assert info["name"] == "python" and info["version"].startswith("3.11")
    assert info["mimetype"] == "text/x-python" and info["file_extension"] == ".py"
    assert info["codemirror_mode"] == {"name": "ipython", "version": 3}
    assert info["pygments_lexer"] == "ipython3" and info["nbconvert_exporter"] == "python"
    assert "IPython" in content["banner"]
    assert any(link["text"] == "Python Reference" for link in content["help_links"])


def test_malformed_frames_are_ignored(kernel):
    kernel.send_raw(b"not json")
    kernel.send_raw(b"\xff\xfe")
    kernel.send_raw(b"[1, 2]")
    kernel.send_raw(json.dumps({"channel": "shell", "header": "nope"}).encode())
    kernel.send_raw(json.dumps({"channel": "shell", "header": {"msg_type": 1}}).encode())
    kernel.send_raw(b"")
    assert kernel.request("shell", "kernel_info_request").reply["content"]["status"] == "ok"
    assert kernel.stderr_text().count("malformed frame") == 6


def test_frames_split_and_coalesced_are_read_whole(kernel):
    first = json.dumps(kernel.message("shell", "kernel_info_request")).encode()
    frame = len(first).to_bytes(4, "little") + first
    for i in range(0, len(frame), 7):  # a frame dribbling in, 7 bytes at a time
        kernel.sock.sendall(frame[i:i + 7])
        time.sleep(0.002)
    messages = [kernel.message("shell", "kernel_info_request") for _ in range(3)]
    bodies = [json.dumps(m).encode() for m in messages]
    kernel.sock.sendall(b"".join(len(b).to_bytes(4, "little") + b for b in bodies))
    for message in [json.loads(first)] + messages:
        assert kernel.collect(message).reply["content"]["status"] == "ok"


def test_request_with_bad_content_gets_busy_idle_and_a_log_line(kernel):
    exchange = kernel.request("shell", "execute_request", {"silent": False})  # no code
    assert summary(exchange.messages) == [("iopub", "status"), ("iopub", "status")]
    assert "execute_request failed" in kernel.stderr_text()
    assert kernel.execute("1").reply["content"]["status"] == "ok"


def test_oversized_frame_from_daemon_is_skipped(kernel):
    size = (64 << 20) + 1
    kernel.sock.sendall(size.to_bytes(4, "little"))
    chunk = b"x" * (1 << 20)
    for _ in range(64):
        kernel.sock.sendall(chunk)
    kernel.sock.sendall(b"x")
    assert kernel.request("shell", "kernel_info_request").reply["content"]["status"] == "ok"
    assert "limit" in kernel.stderr_text()


def test_large_message_to_daemon_is_framed_whole(kernel):
    # Several MB do not fit a socket buffer at once: the kernel must finish the frame.
    exchange = kernel.execute("display({'text/plain': 'x' * 5_000_000}, raw=True)")
    assert len(exchange.one("display_data")["content"]["data"]["text/plain"]) == 5_000_000


def test_unknown_types_and_cellbox_channel_are_ignored(kernel):
    exchange = kernel.request("shell", "no_such_request")
    assert summary(exchange.messages) == [("iopub", "status"), ("iopub", "status")]
    kernel.send_raw(json.dumps({"channel": "cellbox", "type": "no_such_command"}).encode())
    kernel.send("stdin", "input_reply", {"value": "stale"})
    exchange = kernel.request("shell", "kernel_info_request")
    assert summary(exchange.messages)[1] == ("shell", "kernel_info_reply")
    assert len(exchange.messages) == 3


# ---------------------------------------------------------------- execute

def test_state_persists_and_results_carry_execution_count(kernel):
    first = kernel.execute("x = 20")
    assert first.types() == ["status", "execute_input", "execute_reply", "status"]
    assert first.one("execute_input")["content"] == {"code": "x = 20", "execution_count": 1}
    second = kernel.execute("x + 22")
    result = second.one("execute_result")
    assert result["content"] == {"data": {"text/plain": "42"}, "metadata": {},
                                 "execution_count": 2}
    reply = second.reply
    assert reply["channel"] == "shell"
    assert reply["content"] == {"status": "ok", "execution_count": 2, "user_expressions": {},
                                "payload": []}
    assert reply["metadata"]["status"] == "ok" and "started" in reply["metadata"]


def test_stdout_reaches_the_pipe_while_the_cell_runs(kernel):
    request = kernel.send("shell", "execute_request", {
        "code": "import time\nprint('first')\ntime.sleep(1.5)\nprint('second')",
        "silent": False})
    waited = kernel.wait_output("stdout", "first\n")
    assert waited < 1.2
    assert b"second" not in kernel.output["stdout"]
    exchange = kernel.collect(request)
    assert exchange.reply["content"]["status"] == "ok"
    kernel.wait_output("stdout", "second\n")
    assert not any(m["header"]["msg_type"] == "stream" for m in exchange.messages)


def test_c_level_output_is_unbuffered_too(kernel):
    request = kernel.send("shell", "execute_request", {
        "code": "import ctypes, time\nctypes.CDLL(None).printf(b'from C\\n')\ntime.sleep(1.5)",
        "silent": False})
    assert kernel.wait_output("stdout", "from C\n") < 1.2
    kernel.collect(request)


def test_heavy_output_arrives_complete_and_in_order(kernel):
    kernel.execute("for i in range(100000):\n    print(i)")
    kernel.wait_output("stdout", "\n99999\n")
    assert kernel.output["stdout"].decode().split() == [str(i) for i in range(100000)]


def test_stderr_and_warnings_go_to_fd_2(kernel):
    kernel.execute("import sys, warnings\nsys.stderr.write('oops\\n')\nwarnings.warn('careful')")
    kernel.wait_output("stderr", "oops\n")
    # ipykernel's cell file names: /tmp/ipykernel_<pid>/<hash>.py
    kernel.wait_output("stderr", "UserWarning: careful")
    assert re.search(rb"ipykernel_\d+/\d+\.py:3: UserWarning", kernel.output["stderr"])


def test_display_data_and_clear_output(kernel):
    exchange = kernel.execute(
        "from IPython.display import display, HTML, clear_output\n"
        "display(HTML('<b>hi</b>'))\nclear_output(wait=True)\n"
        "h = display('a', display_id='d1')\nh.update('b')")
    shown = exchange.of_type("display_data")
    assert shown[0]["content"] == {"data": {"text/html": "<b>hi</b>",
                                            "text/plain": "<IPython.core.display.HTML object>"},
                                   "metadata": {}, "transient": {}}
    assert shown[1]["content"]["transient"] == {"display_id": "d1"}
    assert exchange.one("clear_output")["content"] == {"wait": True}
    update = exchange.one("update_display_data")["content"]
    assert update["data"] == {"text/plain": "'b'"} and update["transient"] == {"display_id": "d1"}


def test_matplotlib_figure_is_png_display_data(kernel):
    exchange = kernel.execute("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()")
    data = exchange.one("display_data")["content"]["data"]
    assert data["image/png"].startswith("iVBORw0KGgo")
    assert data["text/plain"].startswith("<Figure size")
    # Without show(): the inline backend flushes figures at the end of the cell.
    exchange = kernel.execute("plt.plot([1, 2])\nNone")
    assert exchange.one("display_data")["content"]["data"]["image/png"].startswith("iVBOR")


def test_matplotlib_inline_magic(kernel):
    exchange = kernel.execute("%matplotlib inline\nimport matplotlib.pyplot as plt\n"
                              "fig = plt.figure(); plt.plot([1])")
    assert exchange.reply["content"]["status"] == "ok"
    assert len(exchange.of_type("display_data")) == 1


def test_dataframe_result_has_html_and_plain(kernel):
    exchange = kernel.execute("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})")
    data = exchange.one("execute_result")["content"]["data"]
    assert "<table" in data["text/html"] and "dataframe" in data["text/html"]
    assert data["text/plain"].splitlines()[0].split() == ["a", "b"]


def test_error_has_ename_evalue_and_traceback(kernel):
    exchange = kernel.execute("def f():\n    return 1 / 0\nf()")
    error = exchange.one("error")["content"]
    assert error["ename"] == "ZeroDivisionError" and error["evalue"] == "division by zero"
    assert all(isinstance(line, str) for line in error["traceback"])
    text = "\n".join(error["traceback"])
    assert "\x1b[" in text  # IPython's colours, as ipykernel sends them
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text)
    assert "Cell In [1], line 3" in plain and "ZeroDivisionError: division by zero" in plain
    reply = exchange.reply["content"]
    assert reply["status"] == "error" and reply["execution_count"] == 1
    assert (reply["ename"], reply["evalue"], reply["traceback"]) == \
        (error["ename"], error["evalue"], error["traceback"])
    assert reply["user_expressions"] == {} and reply["payload"] == []
    assert exchange.reply["metadata"]["status"] == "error"
    # Messages in ipykernel's order: error before the reply, reply before idle.
    assert exchange.types() == ["status", "execute_input", "error", "execute_reply", "status"]


def test_syntax_error(kernel):
    reply = kernel.execute("x +* 2").reply["content"]
    assert reply["status"] == "error" and reply["ename"] == "SyntaxError"


def _send_executes(kernel, codes, **overrides):
    return [kernel.send("shell", "execute_request", {
        "code": code, "silent": False, "store_history": True, "user_expressions": {},
        "allow_stdin": False, **overrides}) for code in codes]


def test_stop_on_error_aborts_requests_already_waiting(kernel):
    failing, second, third = _send_executes(
        kernel, ["import time; time.sleep(0.5); 1/0", "x = 1", "x = 2"], stop_on_error=True)
    assert kernel.collect(failing).reply["content"]["status"] == "error"
    for request in (second, third):
        exchange = kernel.collect(request)
        assert statuses(exchange) == ["busy", "idle"]
        assert exchange.types() == ["status", "execute_reply", "status"]
        assert exchange.reply["content"] == {"status": "aborted"}
        assert exchange.reply["metadata"]["status"] == "aborted"
    later = kernel.execute("'still works'")
    assert later.one("execute_result")["content"]["data"]["text/plain"] == "'still works'"
    assert later.reply["content"]["execution_count"] == 2


def test_without_stop_on_error_later_requests_run(kernel):
    failing, second = _send_executes(kernel, ["import time; time.sleep(0.3); 1/0", "7"],
                                     stop_on_error=False)
    assert kernel.collect(failing).reply["content"]["status"] == "error"
    assert kernel.collect(second).reply["content"]["status"] == "ok"


def test_silent_has_no_input_no_result_and_keeps_the_count(kernel):
    kernel.execute("y = 5")
    exchange = kernel.execute("y * 2", silent=True)
    assert exchange.types() == ["status", "execute_reply", "status"]
    assert exchange.reply["content"]["execution_count"] == 1
    assert kernel.execute("y").reply["content"]["execution_count"] == 2


def test_store_history_false_does_not_bump_the_count(kernel):
    exchange = kernel.execute("1", store_history=False)
    assert exchange.one("execute_input")["content"]["execution_count"] == 1
    assert kernel.execute("2").reply["content"]["execution_count"] == 1


def test_user_expressions_are_evaluated(kernel):
    content = kernel.execute("z = 4", user_expressions={"double": "z * 2", "bad": "1/0"}).reply[
        "content"]
    assert content["user_expressions"]["double"] == {
        "status": "ok", "data": {"text/plain": "8"}, "metadata": {}}
    assert content["user_expressions"]["bad"]["status"] == "error"
    assert content["user_expressions"]["bad"]["ename"] == "ZeroDivisionError"


def test_top_level_await(kernel):
    exchange = kernel.execute("import asyncio\nawait asyncio.sleep(0.01)\n'awaited'")
    assert exchange.one("execute_result")["content"]["data"]["text/plain"] == "'awaited'"


def test_shell_escape_writes_to_fd_1(kernel):
    exchange = kernel.execute("!echo hi-from-shell")
    assert exchange.reply["content"]["status"] == "ok"
    kernel.wait_output("stdout", "hi-from-shell\n")


def test_children_do_not_inherit_the_channel(kernel):
    # os.system keeps every inheritable fd: fd 3 must not be one.
    kernel.execute("import os\nos.system('readlink /proc/self/fd/3 || echo no-fd-3')")
    kernel.wait_output("stdout", "no-fd-3\n")
    assert b"socket:" not in kernel.output["stdout"]


def test_question_mark_help_is_a_page_payload(kernel):
    payload = kernel.execute("len?").reply["content"]["payload"]
    assert payload[0]["source"] == "page" and "Return the number" in \
        payload[0]["data"]["text/plain"]


def test_exit_replies_then_ends_the_kernel(kernel):
    exchange = kernel.execute("exit()")
    assert exchange.reply["content"]["payload"] == [{"source": "ask_exit", "keepkernel": False}]
    assert kernel.wait_exit() == 0


def test_no_threads_even_with_the_scientific_stack(kernel):
    kernel.execute("import os, numpy, pandas, matplotlib.pyplot as plt\nplt.plot([1])\n"
                   "print('tasks', len(os.listdir('/proc/self/task')))")
    kernel.wait_output("stdout", "tasks 1\n")


def test_sys_executable_and_prefix_are_debians_python(kernel):
    exchange = kernel.execute("import sys; (sys.executable, sys.prefix, "
                              "any(p.endswith('dist-packages') for p in sys.path), "
                              "'' in sys.path)")
    assert exchange.one("execute_result")["content"]["data"]["text/plain"] == \
        "('/usr/bin/python3', '/usr', True, True)"


# ---------------------------------------------------------------- stdin

def test_input_request_and_reply(kernel):
    request = kernel.send("shell", "execute_request", {
        "code": "name = input('who? ')\nprint('hello', name)", "silent": False,
        "allow_stdin": True})
    asked = kernel.recv()
    while asked["channel"] != "stdin":
        asked = kernel.recv()
    assert asked["header"]["msg_type"] == "input_request"
    assert asked["content"] == {"prompt": "who? ", "password": False}
    assert asked["parent_header"] == request["header"]
    kernel.send("stdin", "input_reply", {"value": "ada"}, parent_header=asked["header"])
    assert kernel.collect(request).reply["content"]["status"] == "ok"
    kernel.wait_output("stdout", "hello ada\n")


def test_getpass_asks_for_a_password(kernel):
    request = kernel.send("shell", "execute_request", {
        "code": "import getpass\nsecret = getpass.getpass()\nlen(secret)", "silent": False,
        "allow_stdin": True})
    asked = kernel.recv()
    while asked["channel"] != "stdin":
        asked = kernel.recv()
    assert asked["content"] == {"prompt": "", "password": True}
    kernel.send("stdin", "input_reply", {"value": "hunter2"}, parent_header=asked["header"])
    exchange = kernel.collect(request)
    assert exchange.one("execute_result")["content"]["data"]["text/plain"] == "7"


def test_requests_arriving_during_input_wait_are_handled_after(kernel):
    request = kernel.send("shell", "execute_request", {
        "code": "input('> ')", "silent": False, "allow_stdin": True})
    asked = kernel.recv()
    while asked["channel"] != "stdin":
        asked = kernel.recv()
    info = kernel.send("shell", "kernel_info_request")
    time.sleep(0.2)
    kernel.send("stdin", "input_reply", {"value": "v"}, parent_header=asked["header"])
    execute = kernel.collect(request)
    assert execute.one("execute_result")["content"]["data"]["text/plain"] == "'v'"
    assert not execute.of_type("kernel_info_reply")
    assert kernel.collect(info).reply["content"]["status"] == "ok"


def test_input_without_allow_stdin_raises_ipykernels_error(kernel):
    content = kernel.execute("input('x')", allow_stdin=False).reply["content"]
    assert content["ename"] == "StdinNotImplementedError"
    assert content["evalue"] == \
        "raw_input was called, but this frontend does not support input requests."


# ---------------------------------------------------------------- introspection

def test_complete_reply(kernel):
    kernel.execute("import os\nmy_variable = 1")
    content = kernel.request("shell", "complete_request",
                             {"code": "my_vari", "cursor_pos": 7}).reply["content"]
    assert content["status"] == "ok" and "my_variable" in content["matches"]
    assert (content["cursor_start"], content["cursor_end"]) == (0, 7)
    assert "_jupyter_types_experimental" in content["metadata"]
    content = kernel.request("shell", "complete_request",
                             {"code": "os.pa", "cursor_pos": 5}).reply["content"]
    assert "path" in content["matches"] and content["cursor_start"] == 3


def test_inspect_reply(kernel):
    content = kernel.request("shell", "inspect_request",
                             {"code": "len", "cursor_pos": 3, "detail_level": 0}).reply["content"]
    assert content["status"] == "ok" and content["found"] is True
    assert "Return the number of items" in content["data"]["text/plain"]
    assert content["metadata"] == {}
    content = kernel.request("shell", "inspect_request",
                             {"code": "no_such_name", "cursor_pos": 3}).reply["content"]
    assert content == {"status": "ok", "data": {}, "metadata": {}, "found": False}


@pytest.mark.parametrize("code, expected", [
    ("x = 1", {"status": "complete"}),
    ("for i in range(3):", {"status": "incomplete", "indent": "    "}),
    ("x = )", {"status": "invalid"}),
])
def test_is_complete_reply(kernel, code, expected):
    reply = kernel.request("shell", "is_complete_request", {"code": code}).reply
    assert reply["content"] == expected


def test_history_and_comm_info_replies(kernel):
    history = kernel.request("shell", "history_request", {
        "hist_access_type": "tail", "output": False, "raw": True, "n": 10}).reply
    assert history["content"] == {"status": "ok", "history": []}
    comms = kernel.request("shell", "comm_info_request", {}).reply
    assert comms["content"] == {"comms": {}, "status": "ok"}


def test_comm_open_to_unknown_target_is_closed(kernel):
    exchange = kernel.request("shell", "comm_open",
                              {"comm_id": "c1", "target_name": "nowhere", "data": {}})
    assert exchange.one("comm_close")["content"] == {"data": {}, "comm_id": "c1"}


# ---------------------------------------------------------------- interrupt, shutdown

def _interrupt_running(kernel, code):
    request = kernel.send("shell", "execute_request", {"code": code, "silent": False})
    message = kernel.recv()
    while message["header"]["msg_type"] != "execute_input":
        message = kernel.recv()
    time.sleep(0.3)  # well inside the cell's code
    kernel.interrupt()
    started = time.monotonic()
    exchange = kernel.collect(request, timeout=5)
    return exchange, time.monotonic() - started


@pytest.mark.parametrize("code", [
    "while True:\n    pass",
    "import time\ntime.sleep(100)",
    "import socket\na, b = socket.socketpair()\na.recv(1)",
    "import os\nr, w = os.pipe()\nos.read(r, 1)",
    "!sleep 100",
])
def test_sigint_interrupts_a_running_cell(kernel, code):
    exchange, seconds = _interrupt_running(kernel, code)
    assert seconds < 1.0, f"interrupt took {seconds:.2f}s"
    reply = exchange.reply["content"]
    if code.startswith("!"):
        # IPython's system_raw reports the interrupt and carries on, as in a terminal.
        assert reply["status"] == "ok"
        return
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt"
    assert exchange.one("error")["content"]["ename"] == "KeyboardInterrupt"
    assert kernel.execute("'alive'").reply["content"]["status"] == "ok"


def test_sigint_interrupts_an_input_wait(kernel):
    request = kernel.send("shell", "execute_request", {"code": "input('? ')", "silent": False,
                                                       "allow_stdin": True})
    asked = kernel.recv()
    while asked["channel"] != "stdin":
        asked = kernel.recv()
    kernel.interrupt()
    exchange = kernel.collect(request, timeout=5)
    error = exchange.one("error")["content"]
    assert (error["ename"], error["evalue"]) == ("KeyboardInterrupt", "Interrupted by user")


def test_sigint_during_start_is_harmless():
    k = KernelProcess()
    try:
        for _ in range(5):
            time.sleep(0.05)
            k.interrupt()
        k.wait_starting()
        assert k.execute("1").reply["content"]["status"] == "ok"
    finally:
        k.close()


def test_sigint_while_idle_is_harmless(kernel):
    for _ in range(3):
        kernel.interrupt()
        time.sleep(0.1)
    assert kernel.recv(timeout=0.3) is None
    assert kernel.proc.poll() is None
    assert kernel.execute("1 + 1").one("execute_result")["content"]["data"]["text/plain"] == "2"


def test_interrupt_request_on_control(kernel):
    exchange = kernel.request("control", "interrupt_request")
    assert exchange.reply["channel"] == "control"
    assert exchange.reply["content"] == {"status": "ok"}
    assert statuses(exchange) == ["busy", "idle"]


def test_shutdown_replies_on_control_then_exits_zero(kernel):
    exchange = kernel.request("control", "shutdown_request", {"restart": False})
    assert summary(exchange.messages) == [("iopub", "status"), ("control", "shutdown_reply"),
                                          ("iopub", "shutdown_reply"), ("iopub", "status")]
    assert exchange.reply["content"] == {"status": "ok", "restart": False}
    assert kernel.wait_exit() == 0


def test_daemon_hanging_up_ends_the_kernel(kernel):
    kernel.sock.close()
    assert kernel.wait_exit() == 0


# ---------------------------------------------------------------- command line

@pytest.mark.parametrize("args, message", [
    ([], "required"),
    (["--channel-fd=abc", f"--python-dir={PYTHON_DIR}"], "file descriptor number"),
    (["--channel-fd=57", f"--python-dir={PYTHON_DIR}"], "not an open file descriptor"),
    (["--channel-fd=3", "--python-dir=/nonexistent"], "cellbox_kernel/__init__.py"),
    (["--bogus"], "unknown argument"),
])
def test_bad_arguments_fail_clearly(args, message):
    k = KernelProcess(args=args)
    try:
        assert k.wait_exit() == 2
        assert message in k.stderr_text()
    finally:
        k.close()


def test_start_time_is_reported():
    """Not a limit: prints exec -> `starting` for the record (pytest -s shows it)."""
    times = []
    for _ in range(3):
        k = KernelProcess()
        try:
            k.wait_starting()
            times.append(k.start_seconds)
        finally:
            k.close()
    print(f"cellbox-kernel start times (ms): {[round(t * 1000) for t in times]}")
    assert min(times) < 5.0


def test_a_sigint_handler_changed_below_python_does_not_outlive_its_request(kernel):
    """A library may set SIGINT's disposition in C, where Python's record of the handler does
    not see it; the next request still gets ours, so an interrupt still stops it."""
    code = "import ctypes, signal\nctypes.CDLL(None).signal(signal.SIGINT, ctypes.c_void_p(1))"
    assert kernel.execute(code).reply["content"]["status"] == "ok"  # 1: SIG_IGN
    exchange, seconds = _interrupt_running(kernel, "import time\ntime.sleep(100)")
    assert exchange.reply["content"]["ename"] == "KeyboardInterrupt"
