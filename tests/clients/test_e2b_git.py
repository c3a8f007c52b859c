"""E2B's sandbox.git.* and re-attaching to processes, through E2B's official SDK unchanged
(tests/clients/node/e2b_git.mjs) against a daemon this module starts.

git runs in the sandbox through commands.run, as E2B's SDK builds each command; a bare repository
in the sandbox is the remote, so no network is needed: init, add, commit, status, branches,
remotes, push, clone, pull, reset and restore each change the repository as git says. A
background command disconnected and connected again by pid gives its later output and exit
code; a pty connected from a second handle sees what the terminal prints."""
import shutil

import pytest

from helpers.node_clients import run_e2b_script

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no E2B API


@pytest.fixture(scope="module")
def git_steps(daemon):
    assert shutil.which("git"), "git is not installed (scripts/install-deps.sh run installs it)"
    _, steps, detail = run_e2b_script(daemon, "e2b_git.mjs")
    return steps, detail


def test_every_step_ran_and_passed(git_steps):
    steps, detail = git_steps
    expected = ["create", "config", "init_add_commit", "branches", "remote_push_clone_pull",
                "reset_restore", "disconnect_and_connect", "pty_connect", "kill"]
    assert [s for s in expected if s not in steps] == [], detail
    assert {name: s for name, s in steps.items() if not s["ok"]} == {}, detail


def test_git_commits_branches_and_remotes(git_steps):
    steps, detail = git_steps
    commit = steps["init_add_commit"]
    assert commit["dirty_files"] == ["a.txt"] and commit["clean"] and commit["branch"] == "main"
    assert commit["log"] == "first commit\tAda", detail
    branches = steps["branches"]
    assert branches["on_feature"] == "feature" and sorted(branches["branches_then"]) == ["feature", "main"]
    assert branches["branches_after"] == ["main"], detail
    remote = steps["remote_push_clone_pull"]
    assert remote["url"] == "/home/user/remote.git", detail
    assert (remote["cloned"], remote["pulled"]) == ("first\n", "second\n"), detail
    assert steps["reset_restore"] == {"ok": True, "restored": "first\n", "b_after_reset": False}


def test_a_process_is_followed_again(git_steps):
    steps, detail = git_steps
    again = steps["disconnect_and_connect"]
    assert (again["stdout"], again["exit_code"]) == ("later\n", 3), detail
    assert steps["pty_connect"]["saw_output"], detail
