"""`cellbox snapshot`, `snapshots`, `restore`, `fork`, `hibernate` and `snapshot-rm` against a
real cellboxd (issue 24, the command line over /v1/snapshots, /fork and /hibernate): what the
user sees on stdout and stderr, the exit status (0 ok, 2 usage, 4 refused), and that the state
each command names really came back."""
import json
import os
import subprocess

import pytest

from helpers.daemon import cli_binary, free_port
from helpers.wait import wait_until

pytestmark = pytest.mark.cellbox_only
TIMEOUT = 120


def wait_for_zygote(daemon):
    """A snapshot or a fork images a zygote's clone: the sandboxes here start once the daemon's
    zygote is ready (one made before is a plain process, which cannot be imaged)."""
    client = daemon.client()
    wait_until(lambda: client.get("api").json()["zygote_ready"], timeout=120, message="the zygote")


def explain(r):
    return f"exit {r.returncode}\nstdout: {r.stdout!r}\nstderr: {r.stderr!r}"


@pytest.fixture(scope="module")
def cellbox(daemon, tmp_path_factory):
    """Runs the client against the module's daemon; removes every sandbox it made at the end
    (create, restore and fork print the new ids on stdout)."""
    wait_for_zygote(daemon)
    cwd = str(tmp_path_factory.mktemp("cli-snapshots"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CELLBOX_")}
    env.update(CELLBOX_URL=daemon.origin, CELLBOX_TOKEN=daemon.token)
    made = []

    def run(*args):
        r = subprocess.run([cli_binary(), *args], input="", capture_output=True, text=True,
                           timeout=TIMEOUT, env=env, cwd=cwd)
        if args[:1] in (("create",), ("restore",), ("fork",)) and r.returncode == 0 \
                and "--into" not in args:
            made.extend(r.stdout.split())
        return r

    yield run
    for sid in made:
        run("rm", sid)


def ok(r):
    assert r.returncode == 0, explain(r)
    return r.stdout


@pytest.mark.parametrize("args,words", [
    (["snapshot"], ["missing", "sandbox ID"]),
    (["snapshot", "a", "b"], ["one sandbox ID"]),
    (["snapshot", "a", "--meta", "NOEQUALS"], ["KEY=VALUE"]),
    (["snapshots", "extra"], ["unexpected", "extra"]),
    (["restore"], ["missing", "SNAPSHOT"]),
    (["restore", "s", "--timeout", "soon"], ["--timeout", "soon"]),
    (["fork"], ["missing", "sandbox ID"]),
    (["fork", "a", "-n", "0"], ["1 to 16"]),
    (["fork", "a", "-n", "17"], ["1 to 16"]),
    (["fork", "a", "-n", "many"], ["-n", "many"]),
    (["hibernate"], ["missing"]),
    (["snapshot-rm"], ["missing", "SNAPSHOT"]),
    (["snapshot-rm", "--bogus", "s"], ["--bogus", "cellbox snapshot-rm --help"]),
])
def test_usage_errors_exit_2(args, words):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CELLBOX_")}
    env["CELLBOX_URL"] = f"http://127.0.0.1:{free_port()}"  # nothing is asked of a daemon
    r = subprocess.run([cli_binary(), *args], capture_output=True, text=True, env=env, timeout=30,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 2, explain(r)
    for w in words:
        assert w.lower() in (r.stderr + r.stdout).lower(), f"{w!r} not in the message: {explain(r)}"


def test_help_lists_the_snapshot_commands():
    env = {k: v for k, v in os.environ.items() if not k.startswith("CELLBOX_")}
    r = subprocess.run([cli_binary(), "help"], capture_output=True, text=True, env=env, timeout=30)
    for command in ("snapshot", "snapshots", "restore", "fork", "hibernate", "snapshot-rm"):
        assert f"  {command} " in r.stdout, f"`cellbox help` does not list {command}"
        usage = subprocess.run([cli_binary(), command, "--help"], capture_output=True, text=True,
                               env=env, timeout=30)
        assert usage.returncode == 0 and usage.stdout.startswith(f"usage: cellbox {command}"), \
            explain(usage)


def test_snapshot_ls_restore_rewind_rm(cellbox):
    sid = ok(cellbox("create")).strip()
    ok(cellbox("exec", sid, "kept = 'before'"))
    ok(cellbox("sh", sid, "echo before > /workspace/note"))
    snapshot = ok(cellbox("snapshot", sid, "--name", "cli-snap", "--meta", "k=v")).strip()
    assert snapshot and "\n" not in snapshot

    table = ok(cellbox("snapshots", "--sandbox", sid)).splitlines()
    assert table[0].split() == ["ID", "NAME", "SANDBOX", "CREATED", "MEMORY", "FILES", "CONTEXTS"]
    row = [line.split() for line in table[1:] if line.startswith(snapshot + " ")]
    assert row and row[0][1] == "cli-snap" and row[0][2] == sid, table
    listed = json.loads(ok(cellbox("--json", "snapshots")))
    assert [s["metadata"] for s in listed if s["snapshot_id"] == snapshot] == [{"k": "v"}]

    ok(cellbox("exec", sid, "kept = 'after'"))
    ok(cellbox("sh", sid, "echo after > /workspace/note"))
    restored = ok(cellbox("restore", snapshot)).strip()
    assert restored and restored != sid
    assert ok(cellbox("exec", restored, "print(kept)")) == "before\n"
    assert ok(cellbox("sh", restored, "cat /workspace/note")) == "before\n"
    assert ok(cellbox("exec", sid, "print(kept)")) == "after\n"  # the source is untouched

    assert ok(cellbox("restore", snapshot, "--into", sid)).strip() == sid
    assert ok(cellbox("exec", sid, "print(kept)")) == "before\n"

    assert ok(cellbox("snapshot-rm", snapshot)) == f"removed {snapshot}\n"
    r = cellbox("restore", snapshot)
    assert r.returncode == 4 and snapshot in r.stderr, explain(r)
    r = cellbox("snapshot-rm", snapshot)
    assert r.returncode == 4, explain(r)


def test_fork_prints_one_id_a_fork_each_its_own(cellbox):
    sid = ok(cellbox("create")).strip()
    ok(cellbox("exec", sid, "n = 1"))
    forks = ok(cellbox("fork", sid, "-n", "2")).split()
    assert len(forks) == 2 and len({sid, *forks}) == 3, forks
    ok(cellbox("exec", forks[0], "n += 10"))
    assert ok(cellbox("exec", forks[0], "print(n)")) == "11\n"
    assert ok(cellbox("exec", forks[1], "print(n)")) == "1\n"
    assert ok(cellbox("exec", sid, "print(n)")) == "1\n"


def test_hibernate_then_resume(cellbox):
    sid = ok(cellbox("create")).strip()
    ok(cellbox("exec", sid, "sleepy = 42"))
    out = ok(cellbox("hibernate", sid))
    assert out.startswith(f"hibernated {sid} (snapshot ") and "(snapshot -)" not in out, out
    assert json.loads(ok(cellbox("--json", "info", sid)))["state"] == "hibernated"
    info = ok(cellbox("info", sid))
    assert "state:    hibernated\n" in info and f"`cellbox resume {sid}` wakes it" in info, info
    ok(cellbox("resume", sid))
    assert ok(cellbox("exec", sid, "print(sleepy)")) == "42\n"


def test_unknown_sandbox_or_snapshot_exits_4(cellbox):
    for args in (["snapshot", "no-such-sandbox"], ["fork", "no-such-sandbox"],
                 ["hibernate", "no-such-sandbox"], ["restore", "no-such-snapshot"]):
        r = cellbox(*args)
        assert r.returncode == 4 and "no-such-" in r.stderr, explain(r)
