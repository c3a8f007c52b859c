"""sandbox.commands: shell commands inside the sandbox (`/bin/bash -c cmd`, as the sandbox user,
in its own session). In the foreground their output streams to callbacks and the call returns
a CommandResult; in the background a CommandHandle controls them."""
import time
import urllib.parse

from . import errors
from .models import CommandInfo, CommandResult, OutputMessage

_WAIT_SLICE_S = 30   # a long wait is made of /wait requests this long


def _quote(part):
    return urllib.parse.quote(str(part), safe="")


class Commands:
    """Commands of one sandbox (sandbox.commands)."""

    def __init__(self, sandbox):
        self._sandbox = sandbox

    def run(self, cmd, cwd=None, env=None, timeout_s=None, stdin=None, background=False,
            on_stdout=None, on_stderr=None):
        """Run `cmd` with /bin/bash. Foreground (the default): wait for it and return a
        CommandResult; on_stdout/on_stderr get each chunk as it is printed; timeout_s kills it
        (exit code 124, timed_out). background=True: return a CommandHandle at once (its
        output is kept by the daemon; send_stdin, signal, kill, wait). stdin: text fed to it.
        A non-zero exit is not an exception: look at exit_code. Without timeout_s a foreground
        command may run (and this call wait) for as long as the sandbox lives."""
        body = {"cmd": cmd}
        for name, value in (("cwd", cwd), ("env", env), ("timeout_s", timeout_s), ("stdin", stdin)):
            if value is not None:
                body[name] = value
        if background:
            body["background"] = True
            model = self._sandbox._call("POST", "commands", json_body=body)
            return CommandHandle(self._sandbox, CommandInfo.from_model(model))
        return self._run_foreground(body, timeout_s, on_stdout, on_stderr)

    def _run_foreground(self, body, timeout_s, on_stdout, on_stderr):
        # Commands send nothing while they are quiet: wait as long as they may run.
        timeout = timeout_s + 30 if timeout_s else None
        result = CommandResult(exit_code=None)
        out, err = [], []
        stream = self._sandbox._stream("POST", "commands", body, timeout=timeout)
        try:
            for event in stream:
                kind = event.get("type")
                if kind == "start":
                    result.id, result.pid = event.get("id"), event.get("pid")
                elif kind in ("stdout", "stderr"):
                    message = OutputMessage(event.get("text", ""), event.get("timestamp"), kind == "stderr")
                    (out if kind == "stdout" else err).append(str(message))
                    callback = on_stdout if kind == "stdout" else on_stderr
                    if callback:
                        callback(message)
                elif kind == "exit":
                    result.exit_code = event.get("exit_code")
                    result.signal = event.get("signal")
                    result.timed_out = bool(event.get("timed_out"))
                    result.wall_ms = event.get("wall_ms")
        finally:
            stream.close()  # at once: the daemon kills a command whose client went away
        if result.exit_code is None:
            raise errors.ConnectionError("the command stream ended before the command's exit "
                                         "(the daemon stopped or the connection broke)")
        result.stdout, result.stderr = "".join(out), "".join(err)
        return result

    def list(self):
        """The sandbox's commands (background ones, and foreground ones still running)."""
        return [CommandInfo.from_model(m) for m in self._sandbox._call("GET", "commands")]

    def connect(self, command_id):
        """A handle on an existing command (NotFoundError if there is none)."""
        return CommandHandle(self._sandbox, CommandInfo.from_model(
            self._sandbox._call("GET", f"commands/{_quote(command_id)}")))

    def send_stdin(self, command_id, data, eof=False):
        CommandHandle(self._sandbox, CommandInfo(id=command_id)).send_stdin(data, eof)

    def kill(self, command_id):
        return CommandHandle(self._sandbox, CommandInfo(id=command_id)).kill()


class CommandHandle:
    """A command running in the background: .id, .pid, .cmd."""

    def __init__(self, sandbox, info):
        self._sandbox = sandbox
        self.id = info.id
        self.pid = info.pid
        self.cmd = info.cmd

    def __repr__(self):
        return f"CommandHandle({self.id!r}, pid={self.pid}, cmd={self.cmd!r})"

    def _sub(self, rest=""):
        return f"commands/{_quote(self.id)}" + (f"/{rest}" if rest else "")

    def info(self):
        """The command model now, with its output so far (the last 1 MiB of each stream)."""
        return CommandInfo.from_model(self._sandbox._call("GET", self._sub()))

    def output(self):
        """What it printed so far, as a CommandResult (exit_code None while it runs)."""
        return self.info().result()

    def send_stdin(self, data, eof=False):
        """Write text to its stdin; eof=True closes stdin after it (ConflictError once stdin
        is closed or the command ended)."""
        self._sandbox._call("POST", self._sub("stdin"), json_body={"data": data, "eof": eof})

    def close_stdin(self):
        self.send_stdin("", eof=True)

    def signal(self, signal="SIGTERM"):
        """Send a signal: a name ("SIGTERM", "INT") or a number."""
        self._sandbox._call("POST", self._sub("signal"), json_body={"signal": signal})

    def kill(self):
        """SIGKILL it. Returns False if it had already ended."""
        if self.info().state != "running":
            return False
        try:
            self.signal("SIGKILL")
        except errors.ConflictError:
            return False
        return True

    def wait(self, timeout_s=None):
        """Wait until it ends and return its CommandResult; raise cellbox.TimeoutError if it
        is still running after timeout_s seconds (it keeps running)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            slice_s = _WAIT_SLICE_S
            if deadline is not None:
                slice_s = max(0, min(slice_s, int(deadline - time.monotonic() + 0.999)))
            model = self._sandbox._call("GET", self._sub("wait"), {"timeout_s": slice_s},
                                        timeout=slice_s + 30)
            info = CommandInfo.from_model(model)
            if info.state != "running":
                return info.result()
            if deadline is not None and time.monotonic() >= deadline:
                raise errors.TimeoutError(f"command {self.id} ({self.cmd or '?'}) still running after {timeout_s} s")

    def remove(self):
        """Kill it if it runs, and let the daemon forget it (and its output)."""
        self._sandbox._call("DELETE", self._sub())
