"""`cellbox volume create|ls|rm` and `cellbox create --volume NAME:/PATH` against a real
cellboxd (issue 20, part G): what the user sees on stdout and stderr, and the exit status (0 ok,
2 usage, 4 refused)."""
import json
import os
import subprocess

import pytest

from helpers.daemon import cli_binary

pytestmark = pytest.mark.cellbox_only
TIMEOUT = 120


@pytest.fixture(scope="module")
def cellbox(daemon, tmp_path_factory):
    cwd = str(tmp_path_factory.mktemp("cli-volumes"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CELLBOX_")}
    env.update(CELLBOX_URL=daemon.origin, CELLBOX_TOKEN=daemon.token)
    made = []

    def run(*args):
        r = subprocess.run([cli_binary(), *args], input="", capture_output=True, text=True,
                           timeout=TIMEOUT, env=env, cwd=cwd)
        if args[:1] == ("create",) and r.returncode == 0 and "--json" not in args:
            made.append(r.stdout.strip())
        return r

    yield run
    for sid in made:
        run("rm", sid)


def explain(r):
    return f"exit {r.returncode}\nstdout: {r.stdout!r}\nstderr: {r.stderr!r}"


def test_volume_create_ls_mount_rm(cellbox):
    r = cellbox("volume", "create", "cli-data", "--size", "32M")
    assert r.returncode == 0 and r.stdout == "cli-data\n", explain(r)
    r = cellbox("volume", "ls")
    assert r.returncode == 0, explain(r)
    header, *rows = r.stdout.splitlines()
    assert header.split() == ["NAME", "SIZE", "USED", "CREATED", "SANDBOXES"], r.stdout
    row = [line for line in rows if line.startswith("cli-data ")]
    assert row and row[0].split()[1] == "32M" and row[0].split()[-1] == "-", r.stdout

    writer = cellbox("create", "--volume", "cli-data:/mnt/data")
    assert writer.returncode == 0, explain(writer)
    sid = writer.stdout.strip()
    r = cellbox("sh", sid, "echo via-cli > /mnt/data/note")
    assert r.returncode == 0, explain(r)
    r = cellbox("--json", "info", sid)
    assert json.loads(r.stdout)["volumes"] == {"cli-data": "/mnt/data"}, explain(r)
    r = cellbox("info", sid)
    assert "volumes:  cli-data at /mnt/data\n" in r.stdout, explain(r)
    # in use: refused, naming the sandbox and --force
    r = cellbox("volume", "rm", "cli-data")
    assert r.returncode == 4 and sid in r.stderr and "force" in r.stderr, explain(r)
    r = cellbox("volume", "ls")
    assert sid in r.stdout, explain(r)
    assert cellbox("rm", sid).returncode == 0

    reader = cellbox("create", "--volume", "cli-data:/srv/v").stdout.strip()
    r = cellbox("sh", reader, "cat /srv/v/note")
    assert r.returncode == 0 and r.stdout == "via-cli\n", explain(r)
    r = cellbox("volume", "rm", "--force", "cli-data")
    assert r.returncode == 0 and r.stdout == "removed cli-data\n", explain(r)
    r = cellbox("--json", "volume", "ls")
    assert "cli-data" not in [v["name"] for v in json.loads(r.stdout)], explain(r)


@pytest.mark.parametrize("args, words", [
    (["volume"], "usage: cellbox volume"),
    (["volume", "frobnicate"], "unknown action 'frobnicate'"),
    (["volume", "create"], "missing the volume's NAME"),
    (["volume", "rm"], "missing the volume NAME"),
    (["volume", "create", "x", "--bogus"], "--bogus"),
    (["create", "--volume", "nocolon"], "--volume takes NAME:/PATH"),
    (["create", "--volume", "data:relative"], "--volume takes NAME:/PATH"),
])
def test_usage_errors_exit_2(cellbox, args, words):
    r = cellbox(*args)
    assert r.returncode == 2 and words in r.stderr, explain(r)


def test_refusals_exit_4_with_the_daemons_reason(cellbox):
    r = cellbox("volume", "create", "bad/name")
    assert r.returncode == 4 and "invalid volume name" in r.stderr, explain(r)
    r = cellbox("create", "--volume", "no-such:/mnt/x")
    assert r.returncode == 4 and "no-such does not exist" in r.stderr, explain(r)
    assert cellbox("volume", "create", "cli-paths", "--size", "16M").returncode == 0
    r = cellbox("create", "--volume", "cli-paths:/etc/x")
    assert r.returncode == 4 and "sandbox's own" in r.stderr, explain(r)
    r = cellbox("volume", "rm", "no-such")
    assert r.returncode == 4 and "does not exist" in r.stderr, explain(r)
    assert cellbox("volume", "rm", "cli-paths").returncode == 0
