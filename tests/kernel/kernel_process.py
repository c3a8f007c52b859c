"""Drives one cellbox-kernel process the way cellboxd does (docs/kernel-protocol.md).

The kernel gets an AF_UNIX socketpair end on fd 3 and pipes on fd 1/2; frames on fd 3 are a
u32 little-endian length plus UTF-8 JSON. Written from the contract, not from the kernel's code.

Binaries: $CELLBOX_BUILD/bin/cellbox-kernel and $CELLBOX_BUILD/share/cellbox/python
(default <repo>/build; see ensure_built()). The kernel gets the environment cellboxd gives one
(helpers/environment.py), nothing of the caller's, with its HOME in a temp dir of its own.
"""
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid

from helpers import wire
from helpers.environment import kernel_environ

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("CELLBOX_BUILD", os.path.join(REPO, "build"))
KERNEL = os.path.join(BUILD, "bin", "cellbox-kernel")
PYTHON_DIR = os.path.join(BUILD, "share", "cellbox", "python")
PACKAGE_SOURCE = os.path.join(REPO, "src", "runtime", "python", "cellbox_kernel")
MAX_FRAME = 64 << 20


def ensure_built():
    """With the default build dir, (re)build the kernel and its Python package with make; with
    $CELLBOX_BUILD set, use what is there."""
    if "CELLBOX_BUILD" not in os.environ:
        targets = ["build/bin/cellbox-kernel"] + [
            f"build/share/cellbox/python/cellbox_kernel/{name}"
            for name in sorted(os.listdir(PACKAGE_SOURCE)) if name.endswith(".py")]
        subprocess.run(["make", "-s", "-C", REPO] + targets, check=True)
    missing = [p for p in (KERNEL, os.path.join(PYTHON_DIR, "cellbox_kernel", "main.py"))
               if not os.path.exists(p)]
    if missing:
        raise AssertionError(f"not built: {missing}; run `make build/bin/cellbox-kernel` and "
                             "copy src/runtime/python into build/share/cellbox/python")


def started_kernel():
    """A kernel that has said `starting`, closed after use: `yield from` it in a fixture."""
    k = KernelProcess()
    try:
        k.wait_starting()
        yield k
    finally:
        k.close()


class KernelProcess:
    def __init__(self, args=None, env=None):
        """env: the kernel's whole environment; by default what cellboxd gives a kernel."""
        ours, theirs = socket.socketpair()
        self.home = tempfile.mkdtemp(prefix="cellbox-test-kernel-")
        self.started_at = time.monotonic()
        argv = [KERNEL] + (args if args is not None
                           else ["--channel-fd=3", f"--python-dir={PYTHON_DIR}"])
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env if env is not None else kernel_environ(self.home), close_fds=False,
            # The channel must be fd 3 in the child; dup2 also makes it inheritable there.
            preexec_fn=lambda: os.dup2(theirs.fileno(), 3))
        theirs.close()
        self.sock = ours
        self.session = uuid.uuid4().hex
        self._inbox = b""
        self.output = {"stdout": b"", "stderr": b""}
        for pipe in (self.proc.stdout, self.proc.stderr):
            os.set_blocking(pipe.fileno(), False)

    # ------------------------------------------------------------------ frames

    def send_raw(self, body):
        self.sock.sendall(len(body).to_bytes(4, "little") + body)

    def send(self, channel, msg_type, content=None, parent_header=None, metadata=None):
        message = self.message(channel, msg_type, content, parent_header, metadata)
        self.send_raw(json.dumps(message).encode())
        return message

    def message(self, channel, msg_type, content=None, parent_header=None, metadata=None):
        return {
            "channel": channel,
            "header": {"msg_id": uuid.uuid4().hex, "session": self.session, "username": "test",
                       "date": "2024-01-01T00:00:00.000000Z", "msg_type": msg_type,
                       "version": "5.3"},
            "parent_header": parent_header or {},
            "metadata": metadata or {},
            "content": content if content is not None else {},
        }

    def recv(self, timeout=30.0):
        """The next frame from the kernel as a dict; None if none came in `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self._inbox) >= 4:
                size = int.from_bytes(self._inbox[:4], "little")
                assert size <= MAX_FRAME, f"kernel sent a {size}-byte frame"
                if len(self._inbox) >= 4 + size:
                    body, self._inbox = self._inbox[4:4 + size], self._inbox[4 + size:]
                    return json.loads(body.decode("utf-8"))
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._pump(left)

    def _pump(self, timeout):
        """Wait up to `timeout` for channel bytes, draining the output pipes meanwhile (a full
        pipe would block the kernel)."""
        fds = [self.sock, self.proc.stdout, self.proc.stderr]
        ready, _, _ = select.select(fds, [], [], timeout)
        if self.sock in ready:
            chunk = self.sock.recv(1 << 20)
            assert chunk, "kernel closed the channel"
            self._inbox += chunk
        self.drain_output()

    def drain_output(self):
        for name, pipe in (("stdout", self.proc.stdout), ("stderr", self.proc.stderr)):
            try:
                chunk = os.read(pipe.fileno(), 1 << 20)
            except BlockingIOError:
                continue
            self.output[name] += chunk

    def wait_output(self, name, text, timeout=10.0):
        """Wait until the pipe `name` has carried `text`; returns the seconds waited."""
        start = time.monotonic()
        while text.encode() not in self.output[name]:
            assert time.monotonic() - start < timeout, \
                f"{text!r} never came on {name}: {self.output[name][-500:]!r}"
            select.select([self.proc.stdout, self.proc.stderr], [], [], 0.05)
            self.drain_output()
        return time.monotonic() - start

    # ------------------------------------------------------------------ requests

    def wait_starting(self, timeout=30.0):
        message = self.recv(timeout)
        assert message is not None, f"no starting status; stderr: {self.stderr_text()}"
        self.start_seconds = time.monotonic() - self.started_at
        return message

    def collect(self, request, timeout=30.0):
        """Every message until the idle status whose parent is `request`."""
        messages = []
        deadline = time.monotonic() + timeout
        while True:
            message = self.recv(max(0.0, deadline - time.monotonic()))
            assert message is not None, \
                f"no idle for {request['header']['msg_type']}; got {summary(messages)}"
            messages.append(message)
            if (message["header"]["msg_type"] == "status"
                    and message["content"]["execution_state"] == "idle"
                    and message["parent_header"].get("msg_id") == request["header"]["msg_id"]):
                return Exchange(request, messages)

    def request(self, channel, msg_type, content=None, timeout=30.0):
        return self.collect(self.send(channel, msg_type, content), timeout)

    def execute(self, code, timeout=30.0, **overrides):
        return self.request("shell", "execute_request", wire.execute_content(code, **overrides),
                            timeout)

    # ------------------------------------------------------------------ process

    def interrupt(self):
        os.kill(self.proc.pid, signal.SIGINT)

    def wait_exit(self, timeout=10.0):
        return self.proc.wait(timeout)

    def stderr_text(self):
        self.drain_output()
        return self.output["stderr"].decode(errors="replace")

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()   # by pid: only the process this object started
        self.proc.wait()
        self.sock.close()
        self.proc.stdout.close()
        self.proc.stderr.close()
        shutil.rmtree(self.home, ignore_errors=True)


class Exchange:
    """The messages one request caused, up to its idle status."""

    def __init__(self, request, messages):
        self.request = request
        self.messages = messages

    def of_type(self, msg_type):
        return [m for m in self.messages if m["header"]["msg_type"] == msg_type]

    def one(self, msg_type):
        found = self.of_type(msg_type)
        assert len(found) == 1, f"expected one {msg_type}, got {summary(self.messages)}"
        return found[0]

    @property
    def reply(self):
        """The reply on the request's own channel."""
        reply_type = self.request["header"]["msg_type"].rsplit("_", 1)[0] + "_reply"
        found = [m for m in self.of_type(reply_type) if m["channel"] == self.request["channel"]]
        assert len(found) == 1, f"expected one {reply_type}, got {summary(self.messages)}"
        return found[0]

    def types(self):
        return [m["header"]["msg_type"] for m in self.messages]


def summary(messages):
    return [(m["channel"], m["header"]["msg_type"]) for m in messages]
