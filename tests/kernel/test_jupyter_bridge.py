"""cellbox-kernel --jupyter: any Jupyter kernel behind the daemon's channel, over ZMQ.

Runs cellbox-kernel outside a sandbox, as cellboxd would start it inside one, with three kernels:
Debian's ipykernel from a kernelspec the test writes, Debian's IRkernel from its own
kernel.json, and a fake kernel (pyzmq) that signs one reply with the wrong key.

Run:  /usr/bin/python3 -m pytest -q tests/kernel/test_jupyter_bridge.py
"""
import json
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import time

import pytest

from kernel_process import KernelProcess, summary

IRKERNEL_SPEC = "/usr/share/jupyter/kernels/ir/kernel.json"


class BridgeProcess(KernelProcess):
    """A bridge whose close() also removes its connection directory: a bridge killed by the test
    (SIGKILL, as KernelProcess.close does) cannot remove it itself."""

    connection_dir = None

    def find_connection_dir(self):
        for pid in child_pids(self.proc.pid):
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                for word in f.read().decode(errors="replace").split("\0"):
                    if word.startswith("/tmp/cellbox-jupyter-"):
                        self.connection_dir = os.path.dirname(word)

    def close(self):
        super().close()
        if self.connection_dir is not None:
            shutil.rmtree(self.connection_dir, ignore_errors=True)


def bridge(spec_argv, extra=()):
    """cellbox-kernel --jupyter running `spec_argv`, with its starting status already read."""
    k = BridgeProcess(args=["--channel-fd=3", "--jupyter", *extra, "--", *spec_argv])
    started = k.recv(90.0)
    if started is None:
        stderr = k.stderr_text()
        k.close()
        raise AssertionError(f"no starting status; stderr: {stderr}")
    k.find_connection_dir()
    assert started["header"]["msg_type"] == "status", started
    assert started["content"]["execution_state"] == "starting"
    assert started["parent_header"] == {}
    return k


def child_pids(pid):
    """The direct children of `pid` (the Jupyter kernel the bridge started)."""
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def process_state(pid):
    """The state letter of `pid` in /proc (R, S, Z, ...), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def interrupt_group(k):
    """What cellboxd does: SIGINT to the kernel's whole process group (here: the bridge and its
    child, by pid, because the test shares pytest's group)."""
    for pid in [k.proc.pid] + child_pids(k.proc.pid):
        os.kill(pid, signal.SIGINT)


def stdout_of(k):
    k.drain_output()
    return k.output["stdout"].decode(errors="replace")


# ---------------------------------------------------------------- ipykernel

@pytest.fixture(scope="module")
def ipykernel_spec():
    """A minimal kernelspec as a user would install one: Debian's ipykernel."""
    directory = tempfile.mkdtemp(prefix="cellbox-test-kernelspec-")
    spec = {"argv": ["/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Test IPython", "language": "python"}
    with open(os.path.join(directory, "kernel.json"), "w") as f:
        json.dump(spec, f)
    with open(os.path.join(directory, "kernel.json")) as f:
        yield json.load(f)["argv"]
    shutil.rmtree(directory)


@pytest.fixture
def ipykernel(ipykernel_spec):
    k = bridge(ipykernel_spec)
    try:
        yield k
    finally:
        k.close()


def test_kernel_info_is_the_kernels_own(ipykernel):
    exchange = ipykernel.request("shell", "kernel_info_request")
    reply = exchange.reply
    assert reply["content"]["implementation"] == "ipython"
    assert reply["content"]["language_info"]["name"] == "python"
    assert reply["parent_header"]["msg_id"] == exchange.request["header"]["msg_id"]


def test_state_is_kept_across_cells(ipykernel):
    assert ipykernel.execute("x = 40").reply["content"]["status"] == "ok"
    result = ipykernel.execute("x + 2").one("execute_result")
    assert result["content"]["data"]["text/plain"] == "42"


def test_stream_comes_before_result_and_idle(ipykernel):
    exchange = ipykernel.execute("print('hello from ipykernel'); 7")
    # Stream text goes to fd 1, never as a frame; every frame that follows it was sent after it.
    assert "stream" not in exchange.types()
    assert "hello from ipykernel" in stdout_of(ipykernel)
    types = exchange.types()
    assert types.index("execute_result") < len(types) - 1
    assert exchange.messages[-1]["content"]["execution_state"] == "idle"
    assert [t for t in types if t in ("status", "execute_input", "execute_result")] == \
        ["status", "execute_input", "execute_result", "status"]


def test_error_has_its_traceback(ipykernel):
    exchange = ipykernel.execute("1/0")
    error = exchange.one("error")["content"]
    assert error["ename"] == "ZeroDivisionError"
    plain = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in error["traceback"]]
    assert any("1/0" in line for line in plain), plain
    assert exchange.reply["content"]["status"] == "error"


def test_interrupt_stops_a_sleep(ipykernel):
    request = ipykernel.send("shell", "execute_request",
                             {"code": "import time\ntime.sleep(60)", "silent": False,
                              "store_history": True, "user_expressions": {},
                              # else ipykernel aborts the next cell if it comes quickly
                              "allow_stdin": False, "stop_on_error": False})
    busy = ipykernel.recv(30.0)
    assert busy["content"].get("execution_state") == "busy", busy
    ipykernel.recv(30.0)  # execute_input: the cell is running
    time.sleep(0.5)       # let time.sleep start: SIGINT before it would interrupt the import
    interrupt_group(ipykernel)
    exchange = ipykernel.collect(request, timeout=30.0)
    assert exchange.one("error")["content"]["ename"] == "KeyboardInterrupt"
    assert ipykernel.proc.poll() is None, "the bridge must outlive an interrupt"
    assert ipykernel.execute("'still here'").one("execute_result")["content"]["data"][
        "text/plain"] == "'still here'"


def test_input_request_and_reply(ipykernel):
    request = ipykernel.send("shell", "execute_request",
                             {"code": "answer = input('name? ')", "silent": False,
                              "store_history": True, "user_expressions": {},
                              "allow_stdin": True, "stop_on_error": True})
    deadline = time.monotonic() + 30
    while True:
        message = ipykernel.recv(max(0.0, deadline - time.monotonic()))
        assert message is not None, f"no input_request; stderr: {ipykernel.stderr_text()}"
        if message["header"]["msg_type"] == "input_request":
            break
    assert message["channel"] == "stdin"
    assert message["content"]["prompt"] == "name? "
    ipykernel.send("stdin", "input_reply", {"value": "cellbox"},
                   parent_header=message["header"])
    ipykernel.collect(request)
    result = ipykernel.execute("answer").one("execute_result")
    assert result["content"]["data"]["text/plain"] == "'cellbox'"


def test_shutdown_ends_the_bridge_with_status_0(ipykernel):
    ipykernel.send("control", "shutdown_request", {"restart": False})
    # ipykernel also publishes its shutdown_reply on iopub; the one that answers is on control.
    reply = ipykernel.recv(30.0)
    while reply is not None and (reply["header"]["msg_type"], reply["channel"]) != \
            ("shutdown_reply", "control"):
        reply = ipykernel.recv(30.0)
    assert reply is not None, "no shutdown_reply on control"
    assert ipykernel.wait_exit(30) == 0


def test_a_killed_kernel_kills_the_bridge_with_its_signal(ipykernel):
    (kernel_pid,) = child_pids(ipykernel.proc.pid)
    os.kill(kernel_pid, signal.SIGKILL)
    assert ipykernel.wait_exit(30) == -signal.SIGKILL
    assert "SIGKILL" in ipykernel.stderr_text() or "signal 9" in ipykernel.stderr_text()


def test_the_connection_file_is_private_and_removed(ipykernel_spec):
    k = bridge(ipykernel_spec)
    try:
        (kernel_pid,) = child_pids(k.proc.pid)
        with open(f"/proc/{kernel_pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        path = argv[argv.index(b"-f") + 1].decode()
        assert os.stat(path).st_mode & 0o777 == 0o600
        assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700
        with open(path) as f:
            connection = json.load(f)
        assert connection["ip"] == "127.0.0.1" and connection["transport"] == "tcp"
        assert connection["signature_scheme"] == "hmac-sha256" and len(connection["key"]) == 64
        k.send("control", "shutdown_request", {"restart": False})
        assert k.wait_exit(30) == 0
        assert not os.path.exists(os.path.dirname(path))
    finally:
        k.close()


# ---------------------------------------------------------------- IRkernel

@pytest.fixture(scope="module")
def irkernel():
    if not os.path.exists(IRKERNEL_SPEC):
        pytest.skip("r-cran-irkernel is not installed (scripts/install-deps.sh installs it)")
    with open(IRKERNEL_SPEC) as f:
        k = bridge(json.load(f)["argv"])
    try:
        yield k
    finally:
        k.close()


def r_value(exchange):
    """IRkernel publishes a cell's visible value as display_data (not execute_result)."""
    (value,) = exchange.of_type("execute_result") + exchange.of_type("display_data")
    return value["content"]["data"]


def test_r_value_is_published(irkernel):
    assert r_value(irkernel.execute("1 + 1", timeout=60))["text/plain"] == "[1] 2"


def test_r_data_frame_is_html(irkernel):
    exchange = irkernel.execute("data.frame(a = 1:2, b = c('x', 'y'))", timeout=60)
    assert "<table" in r_value(exchange)["text/html"]


def test_r_plot_is_a_png(irkernel):
    exchange = irkernel.execute("plot(1:10)", timeout=60)
    displays = exchange.of_type("display_data")
    assert displays, f"no display_data: {summary(exchange.messages)}"
    assert any("image/png" in d["content"]["data"] for d in displays)


def test_r_error(irkernel):
    exchange = irkernel.execute('stop("x went wrong")', timeout=60)
    error = exchange.one("error")["content"]
    assert "x went wrong" in error["evalue"]
    assert exchange.reply["content"]["status"] == "error"


def test_r_state_is_kept_across_cells(irkernel):
    irkernel.execute("answer <- 41", timeout=60)
    assert r_value(irkernel.execute("answer + 1", timeout=60))["text/plain"] == "[1] 42"


# ---------------------------------------------------------------- signatures

FAKE_KERNEL = r'''
import hashlib, hmac, json, signal, sys, uuid, zmq
connection = json.load(open(sys.argv[1]))
key = connection["key"].encode()
context = zmq.Context()
def bind(kind, port):
    s = context.socket(kind); s.bind(f"tcp://127.0.0.1:{connection[port]}"); return s
shell, iopub = bind(zmq.ROUTER, "shell_port"), bind(zmq.PUB, "iopub_port")
control, stdin = bind(zmq.ROUTER, "control_port"), bind(zmq.ROUTER, "stdin_port")
def send(sock, ids, msg_type, parent, content, signing_key=key):
    parts = [json.dumps(p).encode() for p in (
        {"msg_id": uuid.uuid4().hex, "session": "fake", "username": "fake", "date": "",
         "msg_type": msg_type, "version": "5.3"}, parent, {}, content)]
    signature = hmac.new(signing_key, b"".join(parts), hashlib.sha256).hexdigest().encode()
    sock.send_multipart(ids + [b"<IDS|MSG>", signature] + parts)
poller = zmq.Poller(); poller.register(shell, zmq.POLLIN); poller.register(control, zmq.POLLIN)
for _ in range(1000):
    if not poller.poll(60000):
        break
    for sock in (shell, control):
        try:
            frames = sock.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            continue
        split = frames.index(b"<IDS|MSG>")
        ids, header = frames[:split], json.loads(frames[split + 2])
        kind = header["msg_type"]
        if kind == "interrupt_request":
            ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
            send(iopub, [], "stream", {}, {"name": "stdout", "text":
                 f"interrupt_request received; SIGINT {'ignored' if ignored else 'default'}\n"})
        send(iopub, [], "status", header, {"execution_state": "busy"})
        if kind == "execute_request":
            send(sock, ids, "execute_reply", header, {"status": "ok", "forged": True},
                 signing_key=b"not the key")
            send(sock, ids, "execute_reply", header, {"status": "ok", "execution_count": 1})
        else:
            send(sock, ids, kind.replace("_request", "_reply"), header, {"status": "ok"})
        send(iopub, [], "status", header, {"execution_state": "idle"})
        if kind == "shutdown_request":
            sys.exit(0)
'''


@pytest.fixture
def fake_kernel():
    directory = tempfile.mkdtemp(prefix="cellbox-test-fake-kernel-")
    script = os.path.join(directory, "fake_kernel.py")
    with open(script, "w") as f:
        f.write(FAKE_KERNEL)
    yield [sys.executable, script, "{connection_file}"]
    shutil.rmtree(directory)


def test_a_message_with_a_bad_signature_is_dropped(fake_kernel):
    k = bridge(fake_kernel)
    try:
        exchange = k.execute("anything")
        replies = exchange.of_type("execute_reply")
        assert len(replies) == 1, summary(exchange.messages)
        assert "forged" not in replies[0]["content"]
        assert "bad signature" in k.stderr_text()
        k.send("control", "shutdown_request", {"restart": False})
        assert k.wait_exit(30) == 0
    finally:
        k.close()


def test_message_mode_turns_sigint_into_one_interrupt_request(fake_kernel):
    k = bridge(fake_kernel, extra=["--interrupt-mode=message"])
    try:
        (kernel_pid,) = child_pids(k.proc.pid)
        interrupt_group(k)
        # The kernel got the request, and started with SIGINT ignored: the group's signal
        # did not reach it as a default (deadly) SIGINT.
        k.wait_output("stdout", "interrupt_request received; SIGINT ignored\n")
        assert k.proc.poll() is None and child_pids(k.proc.pid) == [kernel_pid]
        exchange = k.execute("anything")
        assert "interrupt_reply" not in exchange.types(), "the bridge's own reply leaked"
        assert stdout_of(k).count("interrupt_request received") == 1
        k.send("control", "shutdown_request", {"restart": False})
        assert k.wait_exit(30) == 0
    finally:
        k.close()


# ---------------------------------------------------------------- the daemon's side

def test_the_daemons_channel_closing_ends_bridge_and_kernel(ipykernel_spec):
    k = bridge(ipykernel_spec)
    try:
        (kernel_pid,) = child_pids(k.proc.pid)
        k.sock.shutdown(socket.SHUT_RDWR)
        assert k.wait_exit(30) == 0
        # The kernel was killed, not left running: gone, or a zombie for init to reap (its
        # parent, the bridge, has exited).
        deadline = time.monotonic() + 10
        while process_state(kernel_pid) not in (None, "Z") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process_state(kernel_pid) in (None, "Z")
    finally:
        k.close()


def test_adoption_switch_says_idle_first_then_relays_on_the_new_channel(ipykernel):
    new_ours, new_theirs = socket.socketpair()
    socket.send_fds(ipykernel.sock, [b"A"], [new_theirs.fileno()])
    new_theirs.close()
    old = ipykernel.sock
    ipykernel.sock, ipykernel._inbox = new_ours, b""
    try:
        first = ipykernel.recv(30.0)
        assert first["header"]["msg_type"] == "status", first
        assert first["content"]["execution_state"] == "idle" and first["parent_header"] == {}
        result = ipykernel.execute("6 * 7").one("execute_result")
        assert result["content"]["data"]["text/plain"] == "42"
    finally:
        old.close()


def test_r_interrupt_stops_a_sleep(irkernel):
    request = irkernel.send("shell", "execute_request",
                            {"code": "Sys.sleep(60)", "silent": False, "store_history": True,
                             "user_expressions": {}, "allow_stdin": False,
                             "stop_on_error": False})
    busy = irkernel.recv(60.0)
    assert busy["content"].get("execution_state") == "busy", busy
    irkernel.recv(60.0)  # execute_input: the cell is running
    time.sleep(0.5)
    interrupt_group(irkernel)
    exchange = irkernel.collect(request, timeout=30.0)
    assert exchange.reply["content"]["status"] in ("error", "abort", "aborted"), \
        exchange.reply["content"]
    assert irkernel.proc.poll() is None
    assert r_value(irkernel.execute("'after'", timeout=60))["text/plain"] == '[1] "after"'
