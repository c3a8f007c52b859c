"""The JavaScript and TypeScript kernel (src/runtime/node/kernel.js) against docs/kernel-protocol.md.

Each kernel is started as cellbox-kernel's language host starts it — `/usr/bin/node
<share>/node/kernel.js [--typescript]` with fd 3 a socketpair bringing requests, fd 4 a
socketpair taking its frames and giving back the one-byte acknowledgement it waits for after each
(this harness sends it once it has read the output before the frame, as cellbox-kernel does), and
fd 1/2 pipes — and, where the language host is built in, also through `cellbox-kernel
--channel-fd=3 --language=...`, which relays the same frames.

Run:  /usr/bin/python3 -m pytest -q tests/kernel/test_node_kernel.py
"""
import base64
import fcntl
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid

import pytest

from helpers.environment import kernel_environ
from kernel_process import BUILD, KERNEL, KernelProcess

NODE = "/usr/bin/node"
SHARE = os.path.join(BUILD, "share", "cellbox")
KERNEL_JS = os.path.join(SHARE, "node", "kernel.js")
DATE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
PNG_1X1 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")

pytestmark = pytest.mark.skipif(not os.path.exists(NODE), reason="node is not installed (apt install nodejs)")


def language_host_built():
    """Whether cellbox-kernel runs --language=javascript (language_host.c, branch lang-host)."""
    try:
        probe = subprocess.run([KERNEL, "--channel-fd=99", "--language=javascript", f"--share-dir={SHARE}"],
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return b"not built" not in probe.stderr and b"not implemented" not in probe.stderr


class NodeKernel(KernelProcess):
    """A KernelProcess whose program is node running kernel.js (or cellbox-kernel's host)."""

    def __init__(self, typescript=False, via_host=False, cwd=None):
        ours, theirs = socket.socketpair()
        # Node's own frames and their acks (fd 4); cellbox-kernel makes this pair itself.
        self.frames, their_frames = (None, None) if via_host else socket.socketpair()
        self.acknowledging = True  # each frame is acknowledged as it arrives, as cellbox-kernel does
        self._uncounted = 0  # bytes at the end of _inbox not yet counted into whole frames
        self.home = tempfile.mkdtemp(prefix="cellbox-test-node-")
        self.started_at = time.monotonic()
        language = "typescript" if typescript else "javascript"
        argv = ([KERNEL, "--channel-fd=3", f"--language={language}", f"--share-dir={SHARE}"] if via_host
                else [NODE, KERNEL_JS] + (["--typescript"] if typescript else []))
        child_fds = [theirs] + ([their_frames] if their_frames else [])

        def place_fds():
            # Above 9 first, so that putting one on 3 or 4 cannot overwrite the other's source.
            high = [fcntl.fcntl(s.fileno(), fcntl.F_DUPFD, 10) for s in child_fds]
            for number, fd in enumerate(high, start=3):
                os.dup2(fd, number)

        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=kernel_environ(self.home), close_fds=False, cwd=cwd or self.home,
            # A group of its own, which interrupt() signals whole, as cellboxd does: through
            # cellbox-kernel (which ignores SIGINT) the signal reaches node that way.
            start_new_session=True, preexec_fn=place_fds)
        for s in child_fds:
            s.close()
        self.sock = ours
        self.session = uuid.uuid4().hex
        self._inbox = b""
        self.output = {"stdout": b"", "stderr": b""}
        for pipe in (self.proc.stdout, self.proc.stderr):
            os.set_blocking(pipe.fileno(), False)

    def acknowledge(self):
        """What cellbox-kernel does once a frame of Node's is relayed: the output before it is
        read, then Node may go on."""
        self.drain_output()
        self.frames.sendall(b"\x01")

    def _pump(self, timeout):
        """Reads Node's frame socket (fd 4) and, while `acknowledging`, acknowledges each whole
        frame as it arrives, as cellbox-kernel does (waiting for output or an exit needs it)."""
        if self.frames is None:
            return super()._pump(timeout)
        ready, _, _ = select.select([self.frames, self.proc.stdout, self.proc.stderr], [], [], timeout)
        if self.frames in ready:
            chunk = self.frames.recv(1 << 20)
            assert chunk, "kernel closed its frame socket"
            self._inbox += chunk
            self._uncounted += len(chunk)
        self.drain_output()
        while self._uncounted >= 4:
            start = len(self._inbox) - self._uncounted
            size = int.from_bytes(self._inbox[start:start + 4], "little")
            if self._uncounted < 4 + size:
                break
            self._uncounted -= 4 + size
            if self.acknowledging:
                self.acknowledge()

    def wait_output(self, name, text, timeout=10.0):
        if self.frames is None:
            return super().wait_output(name, text, timeout)
        start = time.monotonic()  # the frames before the output must be acknowledged meanwhile
        while text.encode() not in self.output[name]:
            assert time.monotonic() - start < timeout, \
                f"{text!r} never came on {name}: {self.output[name][-500:]!r}"
            self._pump(0.05)
        return time.monotonic() - start

    def wait_exit(self, timeout=10.0):
        if self.frames is None:
            return super().wait_exit(timeout)
        deadline = time.monotonic() + timeout  # acknowledging the frames before the exit
        while self.proc.poll() is None and time.monotonic() < deadline:
            try:
                self._pump(0.05)
            except AssertionError:  # its frame socket closed: it is exiting
                break
        return self.proc.wait(max(0.0, deadline - time.monotonic()))

    def interrupt(self):
        os.killpg(self.proc.pid, signal.SIGINT)  # the group this object's kernel leads

    def close(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # node too, when cellbox-kernel runs it
        super().close()
        if self.frames is not None:
            self.frames.close()


LAUNCHERS = ["node"] + (["cellbox-kernel"] if language_host_built() else [])


@pytest.fixture(params=LAUNCHERS)
def launcher(request):
    return request.param


def started(launcher, **options):
    k = NodeKernel(via_host=launcher == "cellbox-kernel", **options)
    starting = k.wait_starting()
    assert starting["header"]["msg_type"] == "status", k.stderr_text()
    assert starting["content"]["execution_state"] == "starting"
    return k


@pytest.fixture
def js(launcher):
    k = started(launcher)
    yield k
    k.close()


@pytest.fixture
def ts(launcher):
    k = started(launcher, typescript=True)
    yield k
    k.close()


def ok(exchange):
    reply = exchange.reply
    assert reply["content"]["status"] == "ok", reply["content"]
    return exchange


def result_text(exchange):
    return exchange.one("execute_result")["content"]["data"]["text/plain"]


# ---------------------------------------------------------------- protocol

def test_starting_then_busy_input_result_reply_idle_with_headers(js):
    request = js.send("shell", "execute_request", {"code": "1 + 2", "silent": False, "store_history": True,
                                                   "user_expressions": {}, "allow_stdin": False,
                                                   "stop_on_error": True})
    exchange = js.collect(request)
    assert exchange.types() == ["status", "execute_input", "execute_result", "execute_reply", "status"]
    for message in exchange.messages:
        assert message["parent_header"]["msg_id"] == request["header"]["msg_id"]
        header = message["header"]
        assert header["version"] == "5.3" and DATE.match(header["date"]), header
        # <session>_<pid>_<n>: the pid is node's (cellbox-kernel's child, when it relays)
        assert re.match(rf"^{re.escape(header['session'])}_\d+_\d+$", header["msg_id"]), header
        assert re.match(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$", header["session"])
    assert exchange.one("execute_input")["content"] == {"code": "1 + 2", "execution_count": 1}
    assert exchange.one("execute_result")["content"]["data"] == {"text/plain": "3"}
    assert exchange.reply["content"]["execution_count"] == 1


def test_node_waits_for_each_frames_acknowledgement_before_printing_more():
    """Node writes a frame, then nothing until cellbox-kernel acknowledges it: so the output
    drained before a frame is exactly what the cell printed before it (an unacknowledged frame
    leaves the cell's later lines unwritten), and the rest follows once it is acknowledged."""
    k = NodeKernel()
    try:
        assert k.wait_starting()["content"]["execution_state"] == "starting", k.stderr_text()
        k.acknowledging = False
        request = k.send("shell", "execute_request", {"code": "console.log('before');\n"
                                                      "display.html('<i>x</i>');\nconsole.log('after')"})
        seen = []
        while not seen or seen[-1]["header"]["msg_type"] != "display_data":
            frame = k.recv(timeout=30)
            assert frame is not None, (seen, k.stderr_text())
            seen.append(frame)
            if frame["header"]["msg_type"] != "display_data":
                k.acknowledge()
        k.wait_output("stdout", "before\n")
        k.drain_output()
        # The display_data frame is not acknowledged: Node is still inside display.html.
        assert k.output["stdout"] == b"before\n", k.output
        k.acknowledge()
        k.acknowledging = True
        exchange = k.collect(request)
        assert exchange.reply["content"]["status"] == "ok", exchange.reply
        k.drain_output()
        assert k.output["stdout"] == b"before\nafter\n", k.output
        assert [m["header"]["msg_type"] for m in seen] == ["status", "execute_input", "display_data"]
    finally:
        k.close()


def test_kernel_info_names_javascript_and_node(js):
    info = ok(js.request("shell", "kernel_info_request")).reply["content"]
    assert info["implementation"] == "cellbox-node"
    assert info["language_info"]["name"] == "javascript"
    assert info["language_info"]["file_extension"] == ".js"
    assert re.match(r"^\d+\.\d+\.\d+$", info["language_info"]["version"])


def test_unknown_request_gets_an_error_reply_and_kernel_lives(js):
    exchange = js.request("shell", "no_such_request")
    assert exchange.types() == ["status", "no_such_reply", "status"]
    assert exchange.reply["content"]["status"] == "error"
    assert exchange.reply["content"]["ename"] == "UnknownRequest"
    assert result_text(js.execute("40 + 2")) == "42"


def test_shutdown_replies_then_exits_zero(js):
    exchange = js.request("control", "shutdown_request", {"restart": False})
    assert exchange.reply["content"]["status"] == "ok"
    assert js.wait_exit() == 0


# ---------------------------------------------------------------- state

def test_declarations_persist_and_may_be_declared_again(js):
    ok(js.execute("let a = 1; const b = 2; class C { get v() { return 7 } }; function f(x) { return x * 10 }"))
    assert result_text(js.execute("[a, b, new C().v, f(3)]")) == "[ 1, 2, 7, 30 ]"
    ok(js.execute("let a = 5; const b = 6; class C {}"))
    assert result_text(js.execute("a + b")) == "11"
    ok(js.execute("const {p, q: [r]} = {p: 1, q: [2]}"))
    assert result_text(js.execute("p + r")) == "3"


def test_top_level_await_keeps_declarations(js):
    exchange = ok(js.execute("const v = await Promise.resolve(41);\nfunction g() { return v + 1 }\nlet w = g()\nw"))
    assert result_text(exchange) == "42"
    assert result_text(js.execute("[v, w, g()]")) == "[ 41, 42, 42 ]"
    assert result_text(js.execute("await new Promise(r => setTimeout(() => r('later'), 10))")) == "'later'"


def test_promise_value_is_awaited(js):
    assert result_text(js.execute("Promise.resolve({x: 1})")) == "{ x: 1 }"


def test_a_cell_that_is_an_object_literal_shows_the_object(js):
    assert result_text(js.execute("{a: 1, b: [2]}")) == "{ a: 1, b: [ 2 ] }"
    assert js.execute("{ let inBlock = 1 }").of_type("execute_result") == []


def test_undefined_and_declarations_show_no_result(js):
    for code in ("undefined", "let nothing = 1", "function h() {}", "if (true) { 5 }"):
        assert js.execute(code).of_type("execute_result") == [], code


# ---------------------------------------------------------------- output

def test_console_and_process_streams_in_order(js):
    exchange = ok(js.execute("console.log('one'); console.error('two'); process.stdout.write('three\\n');"
                             "console.warn('four'); 'done'"))
    assert result_text(exchange) == "'done'"
    js.wait_output("stdout", "one\nthree\n")
    js.wait_output("stderr", "two\nfour\n")


def test_output_of_a_callback_after_the_cell_still_arrives(js):
    ok(js.execute("setTimeout(() => console.log('from the timer'), 20)"))
    js.wait_output("stdout", "from the timer\n")


def test_display_html_png_json_and_deno_convention(js):
    code = (f"display.html('<b>hi</b>'); display.png(Buffer.from('{base64.b64encode(PNG_1X1).decode()}', 'base64'));"
            "display.json({a: [1, 2]});"
            "({[Symbol.for('Jupyter.display')]() { return {'text/markdown': '# title'} }})")
    exchange = ok(js.execute(code))
    shown = [m["content"]["data"] for m in exchange.of_type("display_data")]
    assert shown == [{"text/html": "<b>hi</b>"}, {"image/png": base64.b64encode(PNG_1X1).decode()},
                     {"application/json": {"a": [1, 2]}}]
    assert exchange.one("execute_result")["content"]["data"] == {"text/markdown": "# title"}


# ---------------------------------------------------------------- errors

def test_thrown_error_has_name_message_and_cell_traceback(js):
    exchange = js.execute("function boom() { throw new TypeError('bad thing') }\nboom()")
    error = exchange.one("error")["content"]
    assert error["ename"] == "TypeError" and error["evalue"] == "bad thing"
    assert error["traceback"][0] == "TypeError: bad thing"
    assert any("cell[1]:1" in line for line in error["traceback"]), error["traceback"]
    assert not any("kernel.js" in line or "node:vm" in line for line in error["traceback"]), error["traceback"]
    reply = exchange.reply["content"]
    assert reply["status"] == "error" and reply["ename"] == "TypeError"


def test_thrown_non_error_value(js):
    error = js.execute("throw 'plain'").one("error")["content"]
    assert (error["ename"], error["evalue"]) == ("string", "plain")


def test_syntax_error_shows_line_and_caret(js):
    error = js.execute("let ok = 1\nlet x = ;").one("error")["content"]
    assert error["ename"] == "SyntaxError"
    assert error["traceback"][:3] == ["cell[1]:2", "let x = ;", "        ^"]


def test_stop_on_error_aborts_waiting_executes(js):
    failing = js.message("shell", "execute_request", {"code": "throw new Error('x')", "stop_on_error": True})
    waiting = js.message("shell", "execute_request", {"code": "globalThis.ran = true", "stop_on_error": True})
    # One write, so the second request is already waiting when the first fails (two writes race
    # the kernel's check, the more so through cellbox-kernel's relay).
    js.sock.sendall(b"".join(len(body).to_bytes(4, "little") + body
                             for body in (json.dumps(m).encode() for m in (failing, waiting))))
    js.collect(failing)
    exchange = js.collect(waiting)
    assert exchange.reply["content"]["status"] == "aborted"
    assert result_text(js.execute("typeof ran")) == "'undefined'"


def test_rejection_in_a_callback_is_printed_and_kernel_lives(js):
    ok(js.execute("Promise.reject(new Error('nobody caught me')); setTimeout(() => { throw new Error('late') }, 5)"))
    js.wait_output("stderr", "nobody caught me")
    js.wait_output("stderr", "late")
    assert result_text(js.execute("1")) == "1"


# ---------------------------------------------------------------- interrupt, exit

def interrupted_after_started(kernel, code, marker):
    request = kernel.send("shell", "execute_request", {"code": code, "stop_on_error": True})
    kernel.wait_output("stdout", marker)
    kernel.interrupt()
    return kernel.collect(request)


def test_interrupt_stops_a_busy_loop(js):
    exchange = interrupted_after_started(js, "console.log('spinning'); while (true) {}", "spinning")
    assert exchange.reply["content"]["status"] == "error"
    assert exchange.one("error")["content"]["ename"] == "Interrupted"
    assert result_text(js.execute("'alive'")) == "'alive'"


def test_interrupt_ends_an_await_that_never_settles(js):
    exchange = interrupted_after_started(js, "console.log('waiting'); await new Promise(() => {})", "waiting")
    assert exchange.one("error")["content"]["ename"] == "Interrupted"
    assert result_text(js.execute("'alive'")) == "'alive'"


def test_interrupt_when_idle_does_nothing(js):
    js.interrupt()
    assert result_text(js.execute("'still here'")) == "'still here'"
    assert js.proc.poll() is None


def test_process_exit_ends_the_kernel_with_its_status(js):
    js.send("shell", "execute_request", {"code": "process.exit(3)"})
    assert js.wait_exit() == 3


# ---------------------------------------------------------------- requests

def test_is_complete(js):
    def status(code):
        return js.request("shell", "is_complete_request", {"code": code}).reply["content"]["status"]
    assert status("let x = 1") == "complete"
    assert status("function f() {") == "incomplete"
    assert status("let = = 1") == "invalid"


def test_complete_global_and_member_names(js):
    ok(js.execute("const myObject = {alpha: 1, alpine: 2, beta: 3}"))
    reply = js.request("shell", "complete_request", {"code": "myObject.al", "cursor_pos": 11}).reply["content"]
    assert reply["matches"] == ["alpha", "alpine"] and reply["cursor_start"] == 9
    reply = js.request("shell", "complete_request", {"code": "myObj", "cursor_pos": 5}).reply["content"]
    assert "myObject" in reply["matches"]


def test_inspect_shows_a_names_value(js):
    ok(js.execute("const settings = {depth: 3}"))
    reply = js.request("shell", "inspect_request", {"code": "settings", "cursor_pos": 4, "detail_level": 0}).reply
    assert reply["content"]["found"] is True
    assert "{ depth: 3 }" in reply["content"]["data"]["text/plain"]
    reply = js.request("shell", "inspect_request", {"code": "noSuchName", "cursor_pos": 3}).reply
    assert reply["content"]["found"] is False


def test_request_metadata_environment_lasts_one_execution(js):
    request = js.send("shell", "execute_request", {"code": "process.env.ONLY_NOW"},
                      metadata={"cellbox": {"env": {"ONLY_NOW": "yes"}}})
    assert result_text(js.collect(request)) == "'yes'"
    assert result_text(js.execute("typeof process.env.ONLY_NOW")) == "'undefined'"


def test_environment_frame_sets_variables_and_cwd(js):
    where = tempfile.mkdtemp(prefix="cellbox-test-node-cwd-")
    try:
        js.send_raw(__import__("json").dumps({"channel": "cellbox", "type": "environment",
                                              "set": {"GREETING": "hello"}, "cwd": where}).encode())
        assert result_text(js.execute("[process.env.GREETING, process.cwd()]")) == f"[ 'hello', '{where}' ]"
    finally:
        shutil.rmtree(where, ignore_errors=True)


# ---------------------------------------------------------------- modules

def test_require_finds_debian_packages_and_the_cwd_node_modules(launcher):
    home = tempfile.mkdtemp(prefix="cellbox-test-node-modules-")
    package = os.path.join(home, "node_modules", "local-thing")
    os.makedirs(package)
    with open(os.path.join(package, "index.js"), "w") as out:
        out.write("module.exports = { answer: 42 };\n")
    k = started(launcher, cwd=home)
    try:
        assert result_text(k.execute("typeof require('acorn').parse")) == "'function'"
        assert result_text(k.execute("require('local-thing').answer")) == "42"
        assert result_text(k.execute("import thing from 'local-thing'\nimport * as path from 'path'\n"
                                     "import {join} from 'node:path'\n[thing.answer, path.sep, join('a', 'b')]")) \
            == "[ 42, '/', 'a/b' ]"
        assert result_text(k.execute("[thing.answer, typeof join]")) == "[ 42, 'function' ]"
        assert result_text(k.execute("(await import('local-thing')).default.answer")) == "42"
        assert result_text(k.execute("const load = () => import('acorn'); typeof (await load()).parse")) \
            == "'function'"
    finally:
        k.close()
        shutil.rmtree(home, ignore_errors=True)


# ---------------------------------------------------------------- TypeScript

def test_typescript_types_interface_enum(ts):
    info = ok(ts.request("shell", "kernel_info_request")).reply["content"]
    assert info["language_info"]["name"] == "typescript" and info["language_info"]["file_extension"] == ".ts"
    ok(ts.execute("interface Point { x: number; y: number }\nenum Color { Red, Green }\n"
                  "const p: Point = { x: 1, y: 2 };\nfunction norm(q: Point): number { return q.x + q.y }"))
    assert result_text(ts.execute("[norm(p), Color.Green, Color[0]] as const")) == "[ 3, 1, 'Red' ]"
    assert result_text(ts.execute("const later: string = await Promise.resolve('ts'); later")) == "'ts'"


def test_typescript_traceback_names_the_typescript_line(ts):
    error = ts.execute("interface Shape {\n  sides: number\n}\nconst square: Shape = { sides: 4 };\n"
                       "throw new RangeError('too many sides')").one("error")["content"]
    assert error["ename"] == "RangeError"
    assert any("cell[1]:5:" in line for line in error["traceback"]), error["traceback"]


def test_typescript_is_complete(ts):
    def status(code):
        return ts.request("shell", "is_complete_request", {"code": code}).reply["content"]["status"]
    assert status("let n: number = 1") == "complete"
    assert status("function f(x: number) {") == "incomplete"
    assert status("let = = 1") == "invalid"


def test_typescript_syntax_error_is_an_error_result(ts):
    error = ts.execute("let x: number = ;").one("error")["content"]
    assert error["ename"] == "SyntaxError" and error["traceback"][0] == "cell[1]:1"
    assert result_text(ts.execute("1 as number")) == "1"
