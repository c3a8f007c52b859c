"""The command-line client `cellbox`, end to end against a real cellboxd.

The client under test is $CELLBOX_BUILD/bin/cellbox (default build/bin/cellbox); the daemon is
the `daemon` fixture of tests/conftest.py (one per module). Every call runs the binary as a user
would, with CELLBOX_URL and CELLBOX_TOKEN set, in a temp directory of its own, and checks what
the user sees: stdout, stderr and the exit status (0 ok, 1 failed, 2 usage, 3 unreachable,
4 refused, 124 timeout).
"""
import json
import os
import pty
import secrets
import select
import subprocess
import threading

import pytest

from helpers.daemon import built, cli_binary, free_port
from helpers.wait import wait_until

TIMEOUT = 120
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class Cli:
    """Runs `cellbox` against one daemon; removes the sandboxes it created at the end."""

    def __init__(self, url, token, cwd):
        self.url, self.token, self.cwd = url, token, cwd
        self.created = []

    def environ(self, url=None, token=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CELLBOX_")}
        env["CELLBOX_URL"] = url if url is not None else self.url
        if token is not False:
            env["CELLBOX_TOKEN"] = token if token is not None else self.token
        return env

    def __call__(self, *args, input=None, binary=False, url=None, token=None, cwd=None,
                 timeout=TIMEOUT):
        """Runs cellbox ARGS; stdin is empty unless `input` is given. CompletedProcess."""
        if isinstance(input, str) and binary:
            input = input.encode()
        return subprocess.run([cli_binary(), *args], input=input if input is not None else b"" if binary else "",
                              capture_output=True, text=not binary, timeout=timeout,
                              env=self.environ(url, token), cwd=cwd or self.cwd)

    def ok(self, *args, **kw):
        r = self(*args, **kw)
        assert r.returncode == 0, f"cellbox {' '.join(args)} -> {r.returncode}\nstdout: {r.stdout!r}\nstderr: {r.stderr!r}"
        return r

    def create(self, *args):
        sid = self.ok("create", *args).stdout.strip()
        self.created.append(sid)
        return sid

    def cleanup(self):
        for sid in self.created:
            self("rm", sid)


def explain(r):
    return f"exit {r.returncode}\nstdout: {r.stdout!r}\nstderr: {r.stderr!r}"


@pytest.fixture(scope="module", autouse=True)
def _cli_built():
    if not os.access(cli_binary(), os.X_OK):
        pytest.fail(f"the client is not built at {cli_binary()} (run `make build` or set CELLBOX_BUILD)",
                    pytrace=False)


@pytest.fixture(scope="module")
def cli(daemon, tmp_path_factory):
    runner = Cli(daemon.origin, daemon.token,
                 str(tmp_path_factory.mktemp("cli-cwd")))
    yield runner
    runner.cleanup()


@pytest.fixture(scope="module")
def sid(cli):
    """One sandbox shared by the tests that do not disturb each other."""
    return cli.create("--timeout", "0")


@pytest.fixture
def workdir(cli, tmp_path):
    """A fresh current directory for one test."""
    return str(tmp_path)


# ------------------------------------------------------------------ without a daemon

def test_version_and_help():
    env = {k: v for k, v in os.environ.items() if not k.startswith("CELLBOX_")}
    run = lambda *a: subprocess.run([cli_binary(), *a], capture_output=True, text=True, env=env, timeout=30)
    r = run("--version")
    assert r.returncode == 0 and r.stdout.startswith("cellbox "), explain(r)
    r = run("help")
    assert r.returncode == 0, explain(r)
    for command in ("templates", "template", "create", "ls", "info", "network", "exec", "sh", "run", "cp",
                    "logs", "pause", "resume", "timeout", "restart", "rm"):
        assert f"  {command} " in r.stdout, f"`cellbox help` does not list {command}"
        r2 = run(command, "--help")
        assert r2.returncode == 0 and r2.stdout.startswith(f"usage: cellbox {command}"), explain(r2)
    assert run("help", "exec").stdout == run("exec", "--help").stdout


@pytest.mark.parametrize("args,words", [
    ([], ["usage"]),
    (["frobnicate"], ["unknown command", "cellbox help"]),
    (["create", "--bogus"], ["--bogus", "cellbox create --help"]),
    (["create", "--timeout", "soon"], ["--timeout", "soon"]),
    (["create", "--env", "NOEQUALS"], ["NAME=VALUE"]),
    (["templates", "extra"], ["unexpected", "extra"]),
    (["template", "frob"], ["unknown action", "show, delete or import"]),
    (["template", "import", "x"], ["NAME", "FILE.tar"]),
    (["info"], ["missing"]),
    (["info", "a", "b"], ["unexpected"]),
    (["timeout", "some-id", "ten"], ["SECONDS"]),
    (["exec"], ["missing"]),
    (["exec", "some-id", "x", "y"], ["quote"]),
    (["exec", "some-id"], ["CODE"]),
    (["sh", "some-id"], ["COMMAND"]),
    (["run"], ["FILE"]),
    (["run", "--lang", "ruby", "-c", "1"], ["python, bash, sh, javascript (js), typescript (ts) or r"]),
    (["cp", "a", "b"], ["ID:PATH"]),
    (["cp", "x:a", "y:b"], ["both"]),
    (["logs", "id", "--limit", "many"], ["--limit"]),
    (["--url"], ["--url"]),
    (["restart"], ["missing", "ID"]),
    (["restart", "a", "b"], ["unexpected", "'b'"]),
    (["restart", "--bogus", "a"], ["--bogus", "cellbox restart --help"]),
    (["restart", "a", "--context"], ["--context"]),
])
def test_usage_errors_exit_2(args, words):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CELLBOX_")}
    env["CELLBOX_URL"] = f"http://127.0.0.1:{free_port()}"
    r = subprocess.run([cli_binary(), *args], capture_output=True, text=True, env=env, timeout=30,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 2, explain(r)
    for w in words:
        assert w.lower() in (r.stderr + r.stdout).lower(), f"{w!r} not in the message: {explain(r)}"


def test_unreachable_daemon_exits_3(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CELLBOX_")}
    for args in (["ls"], ["create"], ["exec", "x", "1"], ["--url", url, "info", "x"]):
        r = subprocess.run([cli_binary(), *args], capture_output=True, text=True, timeout=30, cwd=tmp_path,
                           env={**env, "CELLBOX_URL": url}, stdin=subprocess.DEVNULL)
        assert r.returncode == 3, explain(r)
        assert f"cannot reach cellboxd at {url}" in r.stderr, explain(r)
        assert "make run" in r.stderr and "CELLBOX_URL" in r.stderr, explain(r)


# ------------------------------------------------------------------ refusals

def test_bad_token_exits_4_and_says_token(cli):
    r = cli("ls", token="not-" + secrets.token_hex(8))
    assert r.returncode == 4, explain(r)
    assert "token" in r.stderr.lower() and "CELLBOX_TOKEN" in r.stderr, explain(r)
    r = cli("--token", "wrong", "ls")  # the flag wins over the environment
    assert r.returncode == 4, explain(r)


def test_token_file_of_make_run_is_read(cli, workdir):
    os.makedirs(os.path.join(workdir, ".cellbox"))
    with open(os.path.join(workdir, ".cellbox", "token"), "w") as f:
        f.write(cli.token + "\n")
    r = cli("ls", token=False, cwd=workdir)
    assert r.returncode == 0, explain(r)
    r = cli("ls", token=False)  # no file there, no variable: refused
    assert r.returncode == 4, explain(r)


@pytest.mark.parametrize("args", [["info", "no-such-sandbox"], ["rm", "no-such-sandbox"],
                                  ["pause", "no-such-sandbox"], ["exec", "no-such-sandbox", "1"],
                                  ["sh", "no-such-sandbox", "true"], ["logs", "no-such-sandbox"],
                                  ["timeout", "no-such-sandbox", "5"], ["restart", "no-such-sandbox"],
                                  ["cp", "no-such-sandbox:/workspace/x", "x"]])
def test_unknown_sandbox_exits_4_with_hint(cli, args):
    r = cli(*args)
    assert r.returncode == 4, explain(r)
    assert "no-such-sandbox" in r.stderr and "cellbox ls" in r.stderr, explain(r)


def test_refusal_in_json_mode_prints_the_error_body(cli):
    r = cli("--json", "info", "no-such-sandbox")
    assert r.returncode == 4, explain(r)
    body = json.loads(r.stdout)
    assert "no-such-sandbox" in body["message"]


# ------------------------------------------------------------------ lifecycle

def test_templates_lists_what_sandboxes_are_made_from(cli):
    table = cli.ok("templates").stdout.splitlines()
    assert table[0].split() == ["NAME", "DEFAULT", "KIND", "FROM", "SIZE", "BUILD", "PACKAGES",
                                "PRELOADED", "POOL"]
    row = next(line for line in table if line.startswith("python3"))
    assert row.split()[1:8] == ["yes", "built-in", "cellbox", "-", "-", "-",
                                "numpy,pandas,matplotlib,IPython"], row
    [model] = json.loads(cli.ok("--json", "templates").stdout)
    assert model["name"] == "python3" and model["default"] is True and model["kind"] == "built-in"
    assert model["preload"] == "numpy,pandas,matplotlib,IPython"
    assert str(model["pool_size"]) == row.split()[8]


def ls_json(cli, *args):
    return {m["id"]: m for m in json.loads(cli.ok("--json", "ls", *args).stdout)}


def test_create_ls_info_timeout_pause_resume_rm(cli):
    sid = cli.create("--timeout", "600", "--memory", "256M", "--meta", "owner=cli-test",
                     "--meta", "purpose=lifecycle", "--env", "GREETING=hello")
    assert sid and "\n" not in sid and " " not in sid

    table = cli.ok("ls").stdout.splitlines()
    assert table[0].split() == ["ID", "STATE", "TEMPLATE", "STARTED", "ENDS", "MEMORY", "META"]
    row = next(line for line in table if line.startswith(sid))
    assert "running" in row and "owner=cli-test" in row and "256M" in row, row

    assert sid in ls_json(cli, "--meta", "owner=cli-test")
    assert sid in ls_json(cli, "--meta", "owner=cli-test", "--meta", "purpose=lifecycle")
    assert sid not in ls_json(cli, "--meta", "owner=somebody-else")
    assert sid in ls_json(cli, "--state", "running")
    assert sid not in ls_json(cli, "--state", "paused")

    info = cli.ok("info", sid).stdout
    assert sid in info and "running" in info and "owner=cli-test" in info, info
    model = json.loads(cli.ok("--json", "info", sid).stdout)
    assert model["id"] == sid and model["timeout_s"] == 600 and model["ends_at"]
    limits = model["limits"]
    assert limits.get("memory_bytes", limits.get("memory")) == 256 * 1024 * 1024
    assert cli.ok("exec", sid, "import os; print(os.environ['GREETING'])").stdout == "hello\n"

    cli.ok("timeout", sid, "0")
    assert json.loads(cli.ok("--json", "info", sid).stdout)["ends_at"] is None
    cli.ok("timeout", sid, "900")
    assert json.loads(cli.ok("--json", "info", sid).stdout)["timeout_s"] == 900

    cli.ok("pause", sid)
    assert ls_json(cli, "--state", "paused")[sid]["state"] == "paused"
    r = cli("exec", sid, "1")
    assert r.returncode == 4 and "paused" in r.stderr and "cellbox resume" in r.stderr, explain(r)
    cli.ok("resume", sid)
    assert json.loads(cli.ok("--json", "info", sid).stdout)["state"] == "running"

    cli.ok("rm", sid)
    assert sid not in ls_json(cli)
    r = cli("info", sid)
    assert r.returncode == 4, explain(r)


def test_rm_several(cli):
    a, b = cli.create("--timeout", "0"), cli.create("--timeout", "0")
    r = cli.ok("rm", a, b)
    assert a in r.stdout and b in r.stdout
    listed = ls_json(cli)
    assert a not in listed and b not in listed


def test_create_json_prints_the_model(cli):
    r = cli.ok("--json", "create", "--timeout", "0")
    model = json.loads(r.stdout)
    cli.created.append(model["id"])
    assert model["state"] == "running" and model["timeout_s"] == 0


def test_restart_clears_python_state_and_keeps_files(cli):
    sid = cli.create("--timeout", "0")
    cli.ok("exec", sid, "kept_in_memory = 1\nopen('/workspace/kept.txt', 'w').write('on disk')")
    r = cli.ok("restart", sid)
    assert r.stdout == f"restarted {sid}\n", explain(r)
    r = cli("exec", sid, "kept_in_memory")
    assert r.returncode == 1 and "NameError" in r.stderr, explain(r)
    assert cli.ok("exec", sid, "print(open('/workspace/kept.txt').read())").stdout == "on disk\n"
    model = json.loads(cli.ok("--json", "restart", sid).stdout)
    assert model["id"] == sid and model["default"] is True, model


def test_restart_brings_a_dead_sandbox_back(cli, daemon):
    sid = cli.create("--timeout", "0")
    cli("exec", sid, "import os; os._exit(7)")
    wait_until(lambda: daemon.client().get(f"v1/sandboxes/{sid}").json()["state"] == "dead", timeout=30,
               message="the sandbox to die")
    r = cli("exec", sid, "1")
    assert r.returncode == 4 and "is dead" in r.stderr and f"cellbox restart" in r.stderr, explain(r)
    cli.ok("restart", sid)
    assert cli.ok("exec", sid, "'back'").stdout == "'back'\n"


def test_restart_one_context_leaves_the_default_alone(cli, daemon):
    sid = cli.create("--timeout", "0")
    cli.ok("exec", sid, "in_default = 'still here'")
    r = daemon.client().post(f"v1/sandboxes/{sid}/contexts", json={})
    assert r.status_code == 201, r.text
    context_id = r.json()["id"]
    cli.ok("exec", sid, "--context", context_id, "in_context = 1")
    r = cli.ok("restart", sid, "--context", context_id)
    assert r.stdout == f"restarted context {context_id} of {sid}\n", explain(r)
    r = cli("exec", sid, "--context", context_id, "in_context")
    assert r.returncode == 1 and "NameError" in r.stderr, explain(r)
    assert cli.ok("exec", sid, "print(in_default)").stdout == "still here\n"


def test_restart_of_an_unknown_context_exits_4_and_says_where_to_look(cli):
    sid = cli.create("--timeout", "0")
    r = cli("restart", sid, "--context", "no-such-context")
    assert r.returncode == 4, explain(r)
    assert "no-such-context" in r.stderr and f"cellbox info" in r.stderr, explain(r)


# ------------------------------------------------------------------ exec

def test_exec_keeps_state_across_calls(cli, sid):
    assert cli.ok("exec", sid, "counter = 41").stdout == ""
    assert cli.ok("exec", sid, "counter += 1\nprint('counter is', counter)").stdout == "counter is 42\n"
    assert cli.ok("exec", sid, "counter * 2").stdout == "84\n"  # the cell's value


def test_exec_language_runs_in_that_languages_context(cli, sid):
    probe = subprocess.run([built("bin", "cellbox-kernel"), "--channel-fd=0", "--language=bash"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=20)
    if "not built yet" in probe.stderr:
        pytest.skip("the bash kernel is not built on this branch")
    cli.ok("exec", sid, "--language", "bash", "cd /tmp; WHO=bash")
    assert cli.ok("exec", sid, "--lang", "sh", 'echo "$WHO in $PWD"').stdout == "bash in /tmp\n"
    r = cli("exec", sid, "--language", "cobol", "x")
    assert r.returncode != 0 and "python" in r.stderr and "bash" in r.stderr, explain(r)


def test_exec_streams_stdout_and_stderr_apart(cli, sid):
    r = cli.ok("exec", sid, "import sys\nprint('to out')\nprint('to err', file=sys.stderr)")
    assert r.stdout == "to out\n" and r.stderr == "to err\n", explain(r)


def test_exec_error_exits_1_with_traceback(cli, sid):
    r = cli("exec", sid, "def f():\n    return 1 / 0\nf()")
    assert r.returncode == 1, explain(r)
    assert "ZeroDivisionError" in r.stderr and "division by zero" in r.stderr, explain(r)
    assert cli.ok("exec", sid, "'still alive'").stdout == "'still alive'\n"


def stderr_on_a_terminal(cli, *args, env=None):
    """Runs cellbox ARGS with its stderr on a pseudo-terminal (stdout a pipe): what it wrote there."""
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.Popen([cli_binary(), *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=terminal, env={**cli.environ(), **(env or {})}, cwd=cli.cwd)
        os.close(terminal)
        terminal = None
        written = b""
        for _ in range(1000):  # until the child closes its end (EIO), at most ~100 s of reads
            if not select.select([controller], [], [], 0.1)[0]:
                if proc.poll() is not None and not select.select([controller], [], [], 0.5)[0]:
                    break
                continue
            try:
                chunk = os.read(controller, 65536)
            except OSError:
                break
            if not chunk:
                break
            written += chunk
        proc.communicate(timeout=TIMEOUT)
        return proc.returncode, written.decode()
    finally:
        os.close(controller)
        if terminal is not None:
            os.close(terminal)


def test_traceback_colours_only_on_a_terminal_without_no_color(cli, sid):
    code = "def f():\n    return 1 / 0\nf()"
    r = cli("exec", sid, code)  # stderr is a pipe
    assert r.returncode == 1 and "ZeroDivisionError" in r.stderr and "\x1b" not in r.stderr, explain(r)
    status, written = stderr_on_a_terminal(cli, "exec", sid, code)
    assert status == 1 and "ZeroDivisionError" in written and "\x1b[" in written, written
    for no_color in ("1", "yes"):
        status, written = stderr_on_a_terminal(cli, "exec", sid, code, env={"NO_COLOR": no_color})
        assert status == 1 and "ZeroDivisionError" in written and "\x1b" not in written, written
    status, written = stderr_on_a_terminal(cli, "exec", sid, code, env={"NO_COLOR": ""})  # empty: unset
    assert "\x1b[" in written, written
    r = cli("--json", "exec", sid, code)
    error = next(e for e in map(json.loads, r.stdout.splitlines()) if e["type"] == "error")
    assert "\x1b" not in error["traceback"], error


def test_exec_from_file_and_stdin(cli, sid, workdir):
    path = os.path.join(workdir, "snippet.py")
    with open(path, "w") as f:
        f.write("from_file = 'yes'\nprint('ran', from_file)\n")
    assert cli.ok("exec", sid, "-f", path).stdout == "ran yes\n"
    assert cli.ok("exec", sid, "-f", "-", input="print(from_file * 2)").stdout == "yesyes\n"


def test_exec_plot_saves_png(cli, sid, workdir):
    code = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()\n"
    r = cli("exec", sid, code, cwd=workdir)
    assert r.returncode == 0, explain(r)
    saved = sorted(n for n in os.listdir(workdir) if n.startswith("result-") and n.endswith(".png"))
    assert saved, f"no result-*.png in {os.listdir(workdir)}; {explain(r)}"
    with open(os.path.join(workdir, saved[0]), "rb") as f:
        assert f.read(8) == PNG_SIGNATURE
    assert f"saved chart to ./{saved[0]}" in r.stderr, explain(r)
    assert saved[0].endswith("-1.png") and saved[0].count("-") == 2, saved  # result-<count>-<n>


def test_exec_out_dir(cli, sid, workdir):
    out = os.path.join(workdir, "charts")
    os.makedirs(out)
    code = "from IPython.display import SVG\nSVG('<svg xmlns=\"http://www.w3.org/2000/svg\"></svg>')"
    r = cli.ok("exec", sid, "--out", out, code, cwd=workdir)
    names = os.listdir(out)
    assert any(n.endswith(".svg") for n in names), explain(r)
    assert f"saved chart to {out}/" in r.stderr


def test_exec_json_prints_ndjson_events_as_they_come(cli, sid):
    r = cli.ok("--json", "exec", sid, "print('hi')\n6 * 7")
    events = [json.loads(line) for line in r.stdout.splitlines()]
    types = [e["type"] for e in events]
    assert types[-1] == "end_of_execution", types
    assert next(e for e in events if e["type"] == "stdout")["text"] == "hi\n"
    result = next(e for e in events if e["type"] == "result")
    assert result["text"] == "42" and result["is_main_result"] is True


def test_exec_timeout_exits_124(cli, sid):
    r = cli("exec", sid, "--timeout", "1", "import time\ntime.sleep(60)", timeout=60)
    assert r.returncode == 124, explain(r)
    assert cli.ok("exec", sid, "'after timeout'").stdout == "'after timeout'\n"


# ------------------------------------------------------------------ sh

def test_sh_output_and_exit_code(cli, sid):
    r = cli("sh", sid, "echo out; echo err >&2; exit 3")
    assert r.returncode == 3, explain(r)
    assert r.stdout == "out\n" and r.stderr == "err\n", explain(r)
    assert cli.ok("sh", sid, "--", "echo", "several", "words").stdout == "several words\n"
    assert cli.ok("sh", sid, "--cwd", "/tmp", "pwd").stdout == "/tmp\n"


def test_sh_says_when_the_sandbox_expired_under_the_command(cli):
    sid = cli.create("--timeout", "3")
    r = cli("sh", sid, "sleep 120")
    assert r.returncode == 137, explain(r)  # SIGKILL, as the shell would say
    assert "sandbox expired: its timeout of 3 s ended while this command ran" in r.stderr, explain(r)
    assert f"cellbox timeout {sid}" in r.stderr, explain(r)
    cli.created.remove(sid)


def test_sh_passes_stdin(cli, sid):
    r = cli.ok("sh", sid, "tr a-z A-Z", input="hello from stdin\n")
    assert r.stdout == "HELLO FROM STDIN\n", explain(r)


def test_sh_json_events(cli, sid):
    r = cli("--json", "sh", sid, "echo hi; exit 7")
    assert r.returncode == 7, explain(r)
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert events[0]["type"] == "start" and events[-1]["type"] == "exit"
    assert events[-1]["exit_code"] == 7


def test_sh_timeout_exits_124(cli, sid):
    r = cli("sh", sid, "--timeout", "1", "sleep 60", timeout=60)
    assert r.returncode == 124, explain(r)


# ------------------------------------------------------------------ cp

def test_cp_file_both_ways(cli, sid, workdir):
    data = os.urandom(300_000) + b"\0tail"
    src = os.path.join(workdir, "data.bin")
    with open(src, "wb") as f:
        f.write(data)
    cli.ok("cp", src, f"{sid}:/workspace/copied/data.bin")
    assert cli.ok("sh", sid, "wc -c < /workspace/copied/data.bin").stdout.strip() == str(len(data))
    back = os.path.join(workdir, "back.bin")
    cli.ok("cp", f"{sid}:/workspace/copied/data.bin", back)
    with open(back, "rb") as f:
        assert f.read() == data
    # onto an existing directory, on both sides: the file goes inside it
    cli.ok("cp", src, f"{sid}:copied")
    os.makedirs(os.path.join(workdir, "here"))
    cli.ok("cp", f"{sid}:copied/data.bin", os.path.join(workdir, "here"))
    with open(os.path.join(workdir, "here", "data.bin"), "rb") as f:
        assert f.read() == data
    # to stdout
    r = cli("cp", f"{sid}:copied/data.bin", "-", binary=True)
    assert r.returncode == 0 and r.stdout == data


def make_tree(root):
    files = {"a.txt": b"alpha\n", "sub/b.txt": b"beta\n", "sub/deeper/c.bin": os.urandom(5000),
             "empty.txt": b""}
    for rel, content in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(content)
    return files


def read_tree(root):
    found = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, root)] = f.read()
    return found


def test_cp_directory_both_ways(cli, sid, workdir):
    src = os.path.join(workdir, "project")
    files = make_tree(src)
    cli.ok("cp", src, f"{sid}:/workspace/project")
    assert cli.ok("sh", sid, "cat /workspace/project/sub/b.txt").stdout == "beta\n"
    out = os.path.join(workdir, "fetched")
    cli.ok("cp", f"{sid}:/workspace/project", out)
    assert read_tree(out) == files
    # onto an existing local directory: it lands inside, under its own name
    into = os.path.join(workdir, "into")
    os.makedirs(into)
    cli.ok("cp", f"{sid}:project", into)
    assert read_tree(os.path.join(into, "project")) == files


def test_cp_missing_sandbox_path_exits_4(cli, sid, workdir):
    r = cli("cp", f"{sid}:/workspace/nothing-here", os.path.join(workdir, "x"))
    assert r.returncode == 4, explain(r)
    assert "nothing-here" in r.stderr
    r = cli("cp", os.path.join(workdir, "no-such-local-file"), f"{sid}:x")
    assert r.returncode != 0 and "no-such-local-file" in r.stderr, explain(r)


# ------------------------------------------------------------------ run

def test_run_python_and_bash_with_exit_codes(cli, workdir):
    py = os.path.join(workdir, "hello.py")
    with open(py, "w") as f:
        f.write("import sys\nprint('hello from python')\nprint('warn', file=sys.stderr)\nsys.exit(3)\n")
    r = cli("run", py)
    assert r.returncode == 3, explain(r)
    assert "hello from python" in r.stdout and "warn" in r.stderr, explain(r)

    sh = os.path.join(workdir, "script.sh")
    with open(sh, "w") as f:
        f.write("echo from bash ${BASH_VERSION:+yes}\nexit 5\n")
    r = cli("run", sh)
    assert r.returncode == 5 and "from bash yes" in r.stdout, explain(r)

    assert cli.ok("run", "-c", "print(6 * 7)").stdout == "42\n"
    assert cli.ok("run", "--lang", "sh", "-c", "echo plain sh").stdout == "plain sh\n"
    r = cli("run", "-c", "raise ValueError('bad value')")
    assert r.returncode == 1 and "ValueError" in r.stdout + r.stderr, explain(r)


@pytest.mark.skipif(not os.access("/usr/bin/node", os.X_OK), reason="no node on this host")
def test_run_javascript_and_typescript_by_extension_shebang_and_lang(cli, workdir):
    js = os.path.join(workdir, "hello.mjs")
    with open(js, "w") as f:
        f.write("console.log('hello from node'); process.exit(4)\n")
    r = cli("run", js)
    assert r.returncode == 4 and r.stdout == "hello from node\n", explain(r)
    ts = os.path.join(workdir, "typed.ts")
    with open(ts, "w") as f:
        f.write("const n: number = 41;\nconsole.log(n + 1);\n")
    r = cli.ok("run", ts)
    assert r.stdout == "42\n", explain(r)
    script = os.path.join(workdir, "no-extension")
    with open(script, "w") as f:
        f.write("#!/usr/bin/env node\nconsole.log('by shebang')\n")
    assert cli.ok("run", script).stdout == "by shebang\n"
    assert cli.ok("run", "--lang", "js", "-c", "console.log(6 * 7)").stdout == "42\n"


def test_run_json_and_timeout(cli):
    r = cli.ok("--json", "run", "-c", "print('x')")
    answer = json.loads(r.stdout)
    assert answer["exit_code"] == 0 and "x" in answer["output"]
    r = cli("run", "--timeout", "1", "-c", "import time\ntime.sleep(60)", timeout=60)
    assert r.returncode == 124, explain(r)


def test_run_passes_stdin(cli):
    r = cli.ok("run", "-c", "import sys\nprint(sys.stdin.read().upper())", input="quiet")
    assert r.stdout == "QUIET\n", explain(r)


# ------------------------------------------------------------------ logs

def test_logs_show_output(cli, sid):
    marker = "log-marker-" + secrets.token_hex(4)
    cli.ok("exec", sid, f"print('{marker}')")
    wait_until(lambda: marker in cli.ok("logs", sid).stdout, timeout=10, message="the marker in the log")
    entries = json.loads(cli.ok("--json", "logs", sid, "--limit", "1000").stdout)
    assert any(marker in e["text"] for e in entries)
    assert len(json.loads(cli.ok("--json", "logs", sid, "--limit", "1").stdout)) <= 1


def test_logs_follow_prints_new_entries_and_stops_when_removed(cli):
    sid = cli.create("--timeout", "0")
    proc = subprocess.Popen([cli_binary(), "logs", sid, "--follow"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=cli.environ(), cwd=cli.cwd)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        marker = "followed-" + secrets.token_hex(4)
        cli.ok("exec", sid, f"print('{marker}')")
        wait_until(lambda: any(marker in line for line in lines), timeout=15,
                   message="the follower to print the new entry")
        cli.ok("rm", sid)
        proc.wait(timeout=15)
        reader.join(timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read()
    assert proc.returncode == 0, (lines, err)
    assert "gone" in err, err
