"""/v1 commands: foreground streams (start, stdout/stderr, exit) and background commands
(list, output, stdin, signal, wait, delete)."""
import re
import time
import uuid

import pytest

from helpers.wait import wait_until
from helpers.asserts import assert_v1_error, expect

TS_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})$")


@pytest.fixture(scope="module")
def box(v1):
    m = v1.create(timeout_s=0, env={"BOX_VAR": "from-sandbox"})
    yield m
    v1.remove(m["id"])


def cmd_url(box, cid="", sub=""):
    u = f"v1/sandboxes/{box['id']}/commands"
    if cid:
        u += f"/{cid}"
    if sub:
        u += f"/{sub}"
    return u


def test_foreground_stream(v1, box):
    ev = v1.command(box["id"], "echo out; echo err >&2; exit 3")
    assert ev.types[0] == "start" and ev.types[-1] == "exit"
    start = ev[0]
    assert isinstance(start["id"], str) and start["id"] and type(start["pid"]) is int and start["pid"] > 0
    assert ev.stdout == "out\n" and ev.stderr == "err\n"
    for e in ev.of("stdout") + ev.of("stderr"):
        assert TS_RE.match(e["timestamp"]), e
    ex = ev[-1]
    assert ex["exit_code"] == 3 and ex["timed_out"] is False
    assert type(ex["wall_ms"]) is int and ex["wall_ms"] >= 0
    assert ex.get("signal") in (None, "")
    assert set(ev.types) <= {"start", "stdout", "stderr", "exit"}
    assert ev.response.headers["Content-Type"].startswith("application/x-ndjson")


def test_exit_codes(v1, box):
    assert v1.command(box["id"], "true")[-1]["exit_code"] == 0
    assert v1.command(box["id"], "exit 42")[-1]["exit_code"] == 42
    assert v1.command(box["id"], "no-such-program-here")[-1]["exit_code"] == 127


def test_commands_run_in_bash(v1, box):
    """`/bin/bash -c`, as E2B's commands: what agents write (`source`, `[[ ]]`, arrays) works."""
    ev = v1.command(box["id"], "echo 'x=41' > /tmp/vars.sh; source /tmp/vars.sh; a=(1 2); "
                               "[[ $x == 41 ]] && echo \"bash ${#a[@]} $((x + 1))\"")
    assert (ev.stdout, ev.stderr, ev[-1]["exit_code"]) == ("bash 2 42\n", "", 0)


def test_stdin_cwd_env(v1, box):
    sid = box["id"]
    assert v1.command(sid, "cat", stdin="piped in\n").stdout == "piped in\n"
    assert v1.command(sid, "pwd").stdout == "/workspace\n"
    assert v1.command(sid, "pwd", cwd="/tmp").stdout == "/tmp\n"
    assert v1.command(sid, 'printf "%s %s" "$MY_ENV" "$BOX_VAR"', env={"MY_ENV": "per-command"}).stdout \
        == "per-command from-sandbox"
    # a command runs as the sandbox user, like the kernel
    uid = v1.value(sid, "import os; os.getuid()")
    assert v1.command(sid, "id -u").stdout.strip() == uid
    assert uid != "0"


def test_own_session(v1, box):
    ev = v1.command(box["id"], "ps -o sid= -p $$ 2>/dev/null || cut -d' ' -f6 /proc/$$/stat; echo pid=$$")
    pid = re.search(r"pid=(\d+)", ev.stdout).group(1)
    sid_line = ev.stdout.split()[0]
    assert sid_line == pid, f"the command is not the leader of its own session: {ev.stdout!r}"


def test_timeout_kills(v1, box):
    t0 = time.monotonic()
    ev = v1.command(box["id"], "echo begin; sleep 30; echo never", timeout_s=1)
    assert time.monotonic() - t0 < 10
    ex = ev[-1]
    assert ex["exit_code"] == 124 and ex["timed_out"] is True, ex
    assert ev.stdout == "begin\n"


def test_bad_bodies(v1, box):
    u = cmd_url(box)
    assert_v1_error(v1.post(u, json={}), 400, "cmd")
    assert_v1_error(v1.post(u, json={"cmd": ["ls"]}), 400, "cmd")
    assert_v1_error(v1.post(u, json={"cmd": "ls", "timeout_s": "5"}), 400, "timeout_s")
    assert_v1_error(v1.post(u, json={"cmd": "ls", "env": {"A": 1}}), 400, "env")
    assert_v1_error(v1.post(u, json={"cmd": "ls", "background": "yes"}), 400, "background")
    assert_v1_error(v1.post(u, json={"cmd": "ls", "user": "root"}), 400, "unknown field 'user'")
    assert_v1_error(v1.post(u, data="cmd=ls", headers={"Content-Type": "application/json"}), 400)
    assert_v1_error(v1.post(f"v1/sandboxes/{uuid.uuid4()}/commands", json={"cmd": "ls"}), 404, "does not exist")


def test_background_lifecycle(v1, box):
    sid = box["id"]
    m = v1.background(sid, "read line; echo got:$line; echo warn >&2; exit 5")
    assert m["state"] == "running" and m["exit_code"] is None and m["ended_at"] is None, m
    assert m["cmd"] == "read line; echo got:$line; echo warn >&2; exit 5"
    assert m["cwd"] == "/workspace" and type(m["pid"]) is int and m["timed_out"] is False
    assert TS_RE.match(m["started_at"])
    listed = expect(v1.get(cmd_url(box)), 200).json()
    assert m["id"] in [c["id"] for c in listed]
    r = v1.post(cmd_url(box, m["id"], "stdin"), json={"data": "hello\n"})
    assert r.status_code == 204 and not r.content, r.text
    done = expect(v1.get(cmd_url(box, m["id"], "wait"), params={"timeout_s": 20}), 200).json()
    assert done["state"] == "exited" and done["exit_code"] == 5 and done["ended_at"], done
    got = expect(v1.get(cmd_url(box, m["id"])), 200).json()
    assert got["stdout"] == "got:hello\n" and got["stderr"] == "warn\n", got
    assert got["state"] == "exited" and TS_RE.match(got["ended_at"])
    assert_v1_error(v1.post(cmd_url(box, m["id"], "stdin"), json={"data": "late\n"}), 409)
    r = v1.delete(cmd_url(box, m["id"]))
    assert r.status_code == 204
    assert_v1_error(v1.get(cmd_url(box, m["id"])), 404, m["id"])
    assert m["id"] not in [c["id"] for c in expect(v1.get(cmd_url(box)), 200).json()]


def test_background_output_while_running(v1, box):
    m = v1.background(box["id"], "echo early; sleep 100")
    try:
        wait_until(lambda: v1.get(cmd_url(box, m["id"])).json()["stdout"] == "early\n", timeout=10,
                   message="the background command's output so far")
        assert v1.get(cmd_url(box, m["id"])).json()["state"] == "running"
    finally:
        v1.delete(cmd_url(box, m["id"]))


def test_stdin_eof(v1, box):
    m = v1.background(box["id"], "cat; echo closed")
    expect(v1.post(cmd_url(box, m["id"], "stdin"), json={"data": "abc"}), 204)
    expect(v1.post(cmd_url(box, m["id"], "stdin"), json={"data": "def", "eof": True}), 204)
    done = expect(v1.get(cmd_url(box, m["id"], "wait"), params={"timeout_s": 20}), 200).json()
    assert done["exit_code"] == 0
    assert v1.get(cmd_url(box, m["id"])).json()["stdout"] == "abcdefclosed\n"
    assert_v1_error(v1.post(cmd_url(box, m["id"], "stdin"), json={"data": "x"}), 409)


def test_stdin_closed_while_running(v1, box):
    m = v1.background(box["id"], "exec 0<&-; sleep 100")
    try:
        expect(v1.post(cmd_url(box, m["id"], "stdin"), json={"data": "", "eof": True}), 204)
        assert_v1_error(v1.post(cmd_url(box, m["id"], "stdin"), json={"data": "more"}), 409, "stdin")
        assert_v1_error(v1.post(cmd_url(box, m["id"], "stdin"), json={"text": "x"}), 400)
    finally:
        v1.delete(cmd_url(box, m["id"]))


@pytest.mark.parametrize("sig,name", [("SIGTERM", "SIGTERM"), ("TERM", "SIGTERM"), (9, "SIGKILL"),
                                      ("KILL", "SIGKILL")])
def test_signal(v1, box, sig, name):
    m = v1.background(box["id"], "sleep 100")
    # (a signal sent at once, before the command has settled, must not be lost either: see
    # test_signal_right_away)
    time.sleep(0.3)
    r = v1.post(cmd_url(box, m["id"], "signal"), json={"signal": sig})
    assert r.status_code == 204, r.text
    done = expect(v1.get(cmd_url(box, m["id"], "wait"), params={"timeout_s": 10}), 200).json()
    assert done["state"] == "exited" and done["signal"] == name, done
    v1.delete(cmd_url(box, m["id"]))


@pytest.mark.parametrize("sig,name", [("KILL", "SIGKILL"), ("INT", "SIGINT")])
def test_signal_right_away(v1, box, sig, name):
    """A signal sent the moment the command exists reaches its whole process group: the shell
    (which catches SIGINT while it waits for a child) and the program it runs alike."""
    lost = []
    for i in range(8):
        m = v1.background(box["id"], "sleep 100")
        expect(v1.post(cmd_url(box, m["id"], "signal"), json={"signal": sig}), 204)
        done = expect(v1.get(cmd_url(box, m["id"], "wait"), params={"timeout_s": 5}), 200).json()
        if done["state"] != "exited" or done["signal"] != name:
            lost.append((i, done["state"], done.get("signal")))
        v1.delete(cmd_url(box, m["id"]))
    assert not lost, f"{name} sent right after the start was lost: {lost} of 8 tries"
    # and no `sleep 100` was left behind by a shell that died alone
    assert v1.command(box["id"], "ps -eo args | grep -c '^sleep 100' || true").stdout.strip() == "0"


def test_a_pipelines_writer_ends_quietly_when_its_reader_is_done(v1, box):
    """Commands get SIGPIPE's default action, not the daemon's `ignore`: `yes` dies of it
    silently instead of reporting a broken pipe."""
    ev = v1.command(box["id"], "yes | head -n 1")
    assert ev.stdout == "y\n" and ev.stderr == "", (ev.stdout, ev.stderr)
    assert ev[-1]["exit_code"] == 0


def test_signal_errors(v1, box):
    m = v1.background(box["id"], "sleep 100")
    try:
        assert_v1_error(v1.post(cmd_url(box, m["id"], "signal"), json={"signal": "SIGNOPE"}), 400, "signal")
        assert_v1_error(v1.post(cmd_url(box, m["id"], "signal"), json={}), 400, "signal")
        assert v1.get(cmd_url(box, m["id"])).json()["state"] == "running"
    finally:
        v1.delete(cmd_url(box, m["id"]))


def running(v1, sid, marker):
    """Is a process whose command line holds `marker` running in the sandbox?"""
    out = v1.command(sid, "ps -eo args").stdout
    return any(marker in line and "ps -eo" not in line for line in out.splitlines())


def test_wait_timeout_and_delete_kills(v1, box):
    sid = box["id"]
    m = v1.background(sid, "sleep 1818")
    t0 = time.monotonic()
    r = expect(v1.get(cmd_url(box, m["id"], "wait"), params={"timeout_s": 1}), 200)
    took = time.monotonic() - t0
    assert 0.8 <= took < 5, took
    assert r.json()["state"] == "running" and r.json()["exit_code"] is None
    assert running(v1, sid, "sleep 1818")
    expect(v1.delete(cmd_url(box, m["id"])), 204)
    assert_v1_error(v1.get(cmd_url(box, m["id"])), 404)
    wait_until(lambda: not running(v1, sid, "sleep 1818"), timeout=10, interval=0.3,
               message="DELETE to kill the command")


def test_pid_is_the_sandbox_pid(v1, box):
    """Reading of the contract: `pid` is the command's pid as seen inside the sandbox (what
    `ps`, `kill` and other commands there use), not the daemon's view of it."""
    ev = v1.command(box["id"], "echo $$")
    assert ev[0]["pid"] == int(ev.stdout), (ev[0], ev.stdout)
    m = v1.background(box["id"], "echo $$; sleep 1919")
    try:
        wait_until(lambda: v1.get(cmd_url(box, m["id"])).json()["stdout"], timeout=10)
        assert int(v1.get(cmd_url(box, m["id"])).json()["stdout"]) == m["pid"], m
    finally:
        v1.delete(cmd_url(box, m["id"]))


def test_background_timeout(v1, box):
    m = v1.background(box["id"], "sleep 100", timeout_s=1)
    done = expect(v1.get(cmd_url(box, m["id"], "wait"), params={"timeout_s": 15}), 200).json()
    assert done["state"] == "exited" and done["timed_out"] is True and done["exit_code"] == 124, done
    v1.delete(cmd_url(box, m["id"]))


def test_unknown_command(v1, box):
    bogus = "no-such-command-" + uuid.uuid4().hex[:6]
    assert_v1_error(v1.get(cmd_url(box, bogus)), 404, bogus)
    assert_v1_error(v1.get(cmd_url(box, bogus, "wait")), 404)
    assert_v1_error(v1.post(cmd_url(box, bogus, "stdin"), json={"data": "x"}), 404)
    assert_v1_error(v1.post(cmd_url(box, bogus, "signal"), json={"signal": "TERM"}), 404)
    assert_v1_error(v1.delete(cmd_url(box, bogus)), 404)


def test_disconnect_kills_foreground(v1, box):
    sid = box["id"]
    r, lines = v1.stream("POST", cmd_url(box), json={"cmd": "echo started; sleep 1717"})
    assert r.status_code == 200
    for e in lines:
        if e["type"] == "stdout":
            break
    assert running(v1, sid, "sleep 1717")
    r.close()
    wait_until(lambda: not running(v1, sid, "sleep 1717"), timeout=10, interval=0.3,
               message="the abandoned command to be killed")


def test_many_lines_in_order(v1, box):
    ev = v1.command(box["id"], "i=0; while [ $i -lt 2000 ]; do echo line$i; i=$((i+1)); done")
    assert ev.stdout.splitlines() == [f"line{i}" for i in range(2000)]


def _ignored_signals(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("SigIgn:")).split()[1], 16)


def test_commands_get_default_signal_actions_whatever_the_daemon_ignores(make_daemon):
    """A daemon started as `cellboxd &` from a script, or under nohup, ignores SIGINT or SIGHUP,
    and an ignored signal stays ignored across exec. Its commands must not inherit that: an
    interrupt interrupts, SIGPIPE ends a pipeline's writer."""
    import signal
    from helpers.v1 import V1
    saved = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGHUP)}
    try:
        d = make_daemon()
    finally:
        for s, action in saved.items():
            signal.signal(s, action)
    assert _ignored_signals(d.pid) & (1 << (signal.SIGINT - 1))  # as it would be under `&`
    v1 = V1(d)
    try:
        box = v1.create(timeout_s=0)
        assert v1.command(box["id"], "grep SigIgn /proc/self/status").stdout.split() == \
            ["SigIgn:", "0000000000000000"]
        m = v1.background(box["id"], "sleep 100")
        expect(v1.post(cmd_url(box, m["id"], "signal"), json={"signal": "INT"}), 204)
        done = expect(v1.get(cmd_url(box, m["id"], "wait"), params={"timeout_s": 10}), 200).json()
        assert done["state"] == "exited" and done["signal"] == "SIGINT", done
    finally:
        v1.cleanup()
