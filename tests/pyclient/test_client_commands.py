"""sandbox.commands: foreground runs (output, exit code, callbacks live, cwd, env, stdin,
timeout) and background ones (send_stdin, signal, kill, wait, output, list, connect, remove)."""
import time

import pytest

import cellbox


def test_foreground(sandbox):
    result = sandbox.commands.run("echo out; echo err >&2; exit 3")
    assert isinstance(result, cellbox.CommandResult)
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert not result.ok and result.error == "err\n" and result.signal is None and not result.timed_out
    assert result.id and result.pid and result.wall_ms >= 0
    ok = sandbox.commands.run("true")
    assert ok.ok and ok.error is None


def test_cwd_env_stdin(sandbox):
    sandbox.files.make_dir("/workspace/cmd-dir")
    assert sandbox.commands.run("pwd", cwd="/workspace/cmd-dir").stdout == "/workspace/cmd-dir\n"
    assert sandbox.commands.run("pwd").stdout == "/workspace\n"
    assert sandbox.commands.run("echo $A-$B", env={"A": "1", "B": "two"}).stdout == "1-two\n"
    assert sandbox.commands.run("tr a-z A-Z", stdin="shout\n").stdout == "SHOUT\n"


def test_callbacks_fire_live(sandbox):
    seen = []
    started = time.monotonic()
    result = sandbox.commands.run("echo first; sleep 1.2; echo second >&2",
                                  on_stdout=lambda m: seen.append(("out", m, time.monotonic())),
                                  on_stderr=lambda m: seen.append(("err", m, time.monotonic())))
    ended = time.monotonic()
    assert [(k, str(m)) for k, m, _ in seen] == [("out", "first\n"), ("err", "second\n")]
    assert ended - seen[0][2] >= 0.8 and seen[0][2] - started < 0.8
    assert seen[1][1].error and not seen[0][1].error and seen[0][1].timestamp
    assert result.stdout == "first\n" and result.stderr == "second\n"


def test_timeout(sandbox):
    started = time.monotonic()
    result = sandbox.commands.run("sleep 30", timeout_s=1)
    assert time.monotonic() - started < 10
    assert result.exit_code == 124 and result.timed_out


def test_background(sandbox):
    handle = sandbox.commands.run("read line; echo got:$line; read rest; echo rest:$rest; sleep 30",
                                  background=True)
    assert isinstance(handle, cellbox.CommandHandle)
    assert handle.id and handle.pid and handle.cmd.startswith("read line")
    assert handle.info().state == "running"
    assert handle.output().exit_code is None
    handle.send_stdin("hello\n")
    sandbox.commands.send_stdin(handle.id, "world\n")
    deadline = time.monotonic() + 10
    while "rest:world" not in handle.output().stdout and time.monotonic() < deadline:
        time.sleep(0.05)
    assert handle.output().stdout == "got:hello\nrest:world\n"
    assert handle.id in [c.id for c in sandbox.commands.list()]
    assert all(isinstance(c, cellbox.CommandInfo) for c in sandbox.commands.list())
    with pytest.raises(cellbox.TimeoutError):
        handle.wait(timeout_s=1)
    assert handle.kill() is True
    result = handle.wait()
    assert result.signal == "SIGKILL" and result.exit_code == 137
    assert result.stdout == "got:hello\nrest:world\n"
    assert handle.kill() is False                      # already ended
    again = sandbox.commands.connect(handle.id)
    assert again.id == handle.id and again.output().signal == "SIGKILL"
    handle.remove()
    with pytest.raises(cellbox.NotFoundError):
        handle.info()
    with pytest.raises(cellbox.NotFoundError):
        sandbox.commands.connect(handle.id)


def test_background_stdin_eof_and_signals(sandbox):
    cat = sandbox.commands.run("cat", background=True)
    cat.send_stdin("all of it", eof=True)
    result = cat.wait(timeout_s=10)
    assert result.exit_code == 0 and result.stdout == "all of it"
    with pytest.raises(cellbox.ConflictError):
        cat.send_stdin("too late")

    trap = sandbox.commands.run("trap 'echo caught; exit 7' TERM; while true; do sleep 0.1; done",
                                background=True)
    time.sleep(0.3)   # let the shell install its trap
    trap.signal("SIGTERM")
    result = trap.wait(timeout_s=10)
    assert result.exit_code == 7 and result.stdout == "caught\n"

    sleeper = sandbox.commands.run("sleep 30", background=True)
    sleeper.signal("INT")
    assert sleeper.wait(timeout_s=10).signal == "SIGINT"
    closer = sandbox.commands.run("cat; echo eof-seen", background=True)
    closer.close_stdin()
    assert closer.wait(timeout_s=10).stdout == "eof-seen\n"
    killed = sandbox.commands.run("sleep 30", background=True)
    assert sandbox.commands.kill(killed.id) is True
    assert killed.wait(timeout_s=10).exit_code == 137
