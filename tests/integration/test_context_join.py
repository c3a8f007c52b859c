"""A context made while its sandbox is still starting (issue 23, bug 3): another kernel joining a
sandbox whose default context has not yet said "starting" waits until that sandbox is set up,
then runs in it; if the sandbox ends first, the context is dead with the reason.

MCP makes a sandbox and at once a context of another language in it; the context's kernel joins
its host's namespaces. It used to do so before the host's pid 1 had its root in place ("its
sandbox could not be set up: cannot change to the working directory: /workspace"), or, while the
zygote had not yet answered with the host's pid, failed with "the sandbox is not running".
/v1's create answers only once the sandbox runs, so the tests here reach a starting sandbox the
two ways /v1 allows: a Kernel Gateway kernel given a /v1 context the moment it is created, and a
/v1 sandbox whose default context was just restarted. Each round makes a Bash context and a
second Python context at once, then runs a cell in each and in the default context: all three
run, in the same sandbox (they read one file). Both ways a sandbox starts are covered: cloned by
the zygote, and exec'd (--zygote=false, as every sandbox starts while the zygote is importing).
"""
import json
import os

import pytest

from helpers.v1 import V1
from helpers.wait import wait_until

pytestmark = pytest.mark.cellbox_only

ROUNDS = 10
START_MODES = {"zygote": [], "exec": ["--zygote=false"]}
# what a sandbox's / holds (sandbox/rootfs.c); the host's has more
SANDBOX_ROOT_ENTRIES = {".", "..", "bin", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32",
                        "opt", "proc", "root", "sbin", "tmp", "usr", "workspace"}


@pytest.fixture(params=list(START_MODES))
def v1(request, make_daemon):
    client = V1(make_daemon(args=START_MODES[request.param]))
    yield client
    client.cleanup()


def new_context(v1, sid, language):
    r = v1.post(f"v1/sandboxes/{sid}/contexts", json={"language": language})
    assert r.status_code == 201, f"POST contexts {language} -> {r.status_code} {r.text[:500]}"
    return r.json()["id"]


def contexts_run_in_the_sandbox(v1, sid, bash, python, mark):
    ev = v1.execute(sid, f"echo -n {mark} > /workspace/mark; cat /workspace/mark",
                    context_id=bash)
    assert not ev.errors and ev.stdout == mark, ev
    ev = v1.execute(sid, "print(open('/workspace/mark').read())", context_id=python)
    assert not ev.errors and ev.stdout == mark + "\n", ev
    ev = v1.execute(sid, "print(open('/workspace/mark').read())")
    assert not ev.errors and ev.stdout == mark + "\n", ev
    listed = v1.get(f"v1/sandboxes/{sid}/contexts").json()
    assert [c for c in listed if c["state"] == "dead"] == [], listed


def test_contexts_made_as_a_kernel_starts_run_in_its_sandbox(v1):
    for round_number in range(ROUNDS):
        sid = v1.client.create_kernel()["id"]
        bash = new_context(v1, sid, "bash")
        python = new_context(v1, sid, "python")
        contexts_run_in_the_sandbox(v1, sid, bash, python, f"kernel-{round_number}")
        assert v1.client.delete(f"api/kernels/{sid}").status_code == 204


def test_contexts_made_as_the_default_context_restarts_run_in_its_sandbox(v1):
    sid = v1.create(timeout_s=0)["id"]
    for round_number in range(ROUNDS):
        r = v1.post(f"v1/sandboxes/{sid}/contexts/{sid}/restart")
        assert r.status_code == 200, r.text
        bash = new_context(v1, sid, "bash")
        python = new_context(v1, sid, "python")
        contexts_run_in_the_sandbox(v1, sid, bash, python, f"restart-{round_number}")
        for context in (bash, python):
            assert v1.delete(f"v1/sandboxes/{sid}/contexts/{context}").status_code == 204



def test_a_context_waiting_for_a_sandbox_that_dies_is_dead_with_the_reason(make_daemon, tmp_path):
    """The default context is a kernel (installed by the test) that exits with status 7 a second
    after it starts, never having said "starting": a context made meanwhile never runs, and says
    its sandbox ended first, with the sandbox's cause."""
    spec_dir = tmp_path / "kernels" / "dies-at-start"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps(
        {"argv": ["/usr/bin/sh", "-c", "sleep 1; exit 7"], "display_name": "Dies at start (test)",
         "language": "dies"}))
    v1 = V1(make_daemon(args=["--kernelspec-path", str(tmp_path / "kernels")]))
    sid = v1.client.create_kernel(name="dies-at-start")["id"]
    context = new_context(v1, sid, "bash")

    def context_model():
        listed = v1.get(f"v1/sandboxes/{sid}/contexts").json()
        return next(c for c in listed if c["id"] == context)

    wait_until(lambda: context_model()["state"] == "dead", timeout=30,
               message="the waiting context to be dead")
    reason = context_model()["reason"]
    assert reason.startswith("kernel died: it could not join its sandbox: it ended before this "
                             "context started (kernel died: "), reason
    assert "status 7" in reason or "dead" in reason, reason
    ev = v1.execute(sid, "echo never", context_id=context, expect_status=None)
    assert ev.status != 200 or ev.errors, ev


def test_a_command_never_joins_a_sandbox_still_being_built(v1):
    """A command made as a kernel starts is refused with 409 until the sandbox runs (a command
    joined an exec'd sandbox's half-built mount namespace, and `ls /` listed the host's root);
    once it runs, the command sees the sandbox's root, not the host's."""
    host_only = sorted(set(os.listdir("/")) - SANDBOX_ROOT_ENTRIES)
    assert host_only, "the host's / has nothing a sandbox's lacks: the test cannot tell them apart"
    refused = 0
    for round_number in range(ROUNDS):
        sid = v1.client.create_kernel()["id"]
        ev = v1.command(sid, "ls -a /", cwd="/", expect_status=None)
        if ev.status == 409:
            refused += 1
            assert "still starting" in ev.body["message"], ev.body
            wait_until(lambda: v1.command(sid, "true", expect_status=None).status == 200,
                       timeout=30, message="the sandbox to run")
            ev = v1.command(sid, "ls -a /", cwd="/")
        assert ev.status == 200 and not ev.errors, ev
        listed = set(ev.stdout.split())
        assert "workspace" in listed and not listed & set(host_only), (round_number, ev.stdout)
        assert v1.client.delete(f"api/kernels/{sid}").status_code == 204
