"""Fixtures of the hostile-code suite.

Order of events in a run:
1. `sandbox_guard` (session, autouse) starts a cellboxd, opens one kernel and checks from inside
   it that the sandbox is in effect (own mount/pid/net namespaces, Seccomp 2, non-root uid, no
   capabilities, no_new_privs). If not, every test of tests/security fails at setup and no
   hostile cell is sent anywhere.
2. `box` (module) starts the module's cellboxd (a secret in its environment, the token in its
   argv) and a neighbour kernel that keeps state for the whole module. Every module runs twice:
   [zygote] (kernels cloned from the daemon's preloaded interpreter, waited for until ready)
   and [exec] (`--zygote=false`, a fresh process per kernel); each kernel's proof checks which
   path really started it.
3. Every kernel a test gets (`box.kernel()`, `hostile`, `fresh`) proves again, with its own
   process, that it is sandboxed before the test sends it anything (seclib.SandboxKernel.prove);
   a failure there stops the run.

Tests end with `box.assert_contained()`: host unchanged, server healthy, neighbour unaffected.
"""
import contextlib
import os
import secrets
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from helpers.daemon import Daemon, daemon_binary, finish_or_fail  # noqa: E402
from seclib import (PROOF_CODE, Sandboxes, all_gone, processes_of, proof_problems,  # noqa: E402
                    read_proof, wait_until)

_guard = {"problems": None}


def _daemon_modes():
    """How the daemon under test can start kernels. A zygote (a preloaded interpreter cloned into
    each sandbox) and exec (a fresh process per kernel) are different code paths with different
    leftovers in a sandbox's memory and pid 1, so every module runs against both."""
    with contextlib.suppress(Exception):
        out = subprocess.run([daemon_binary(), "--help"], capture_output=True, text=True, timeout=20)
        if "--zygote" in out.stdout + out.stderr:
            return ["zygote", "exec"]
    return ["default"]


DAEMON_MODES = _daemon_modes()
MODE_ARGS = {"zygote": ["--zygote=true"], "exec": ["--zygote=false"], "default": []}


def pytest_generate_tests(metafunc):
    if "box" in metafunc.fixturenames:
        metafunc.parametrize("daemon_mode", DAEMON_MODES, indirect=True, scope="module")


@pytest.fixture(scope="module")
def daemon_mode(request):
    return request.param


@pytest.fixture(scope="session", autouse=True)
def sandbox_guard():
    """Prove, before any hostile test of this run, that kernels are sandboxed."""
    if os.environ.get("CELLBOX_TEST_REFERENCE"):
        pytest.fail("tests/security run only against cellboxd (CELLBOX_TEST_REFERENCE is set: the "
                    "reference server has no sandbox, hostile cells would hit this machine)",
                    pytrace=False)
    if _guard["problems"] is None:
        d = Daemon()
        problems = []
        try:
            d.start()
            c = d.client()
            model = c.create_kernel()
            conn = c.ready_ws(model["id"])
            res = conn.execute(PROOF_CODE, timeout=60)
            problems = proof_problems(read_proof(res.stdout))
            conn.close()
            c.cleanup()
        except Exception as e:  # noqa: BLE001 - any failure means "not proven"
            problems = [f"could not run the proof: {e!r}"]
        finally:
            with contextlib.suppress(Exception):
                d.finish()
        _guard["problems"] = problems
    if _guard["problems"]:
        pytest.fail("the sandbox is NOT proven to be in effect, so no hostile test runs: "
                    + "; ".join(_guard["problems"]), pytrace=False)
    yield


@pytest.fixture(scope="module")
def box(request, sandbox_guard, daemon_mode):
    """The module's daemon + neighbour kernel + host baseline (seclib.Sandboxes)."""
    secret = "host-secret-" + secrets.token_hex(12)
    args = MODE_ARGS[daemon_mode] + list(getattr(request.module, "DAEMON_ARGS", []))
    d = Daemon(args=args, env={"HOST_SECRET_CANARY": secret})
    # A module may put things in the data directory the daemon reads at start (templates).
    prepare = getattr(request.module, "PREPARE_DATA_DIR", None)
    if prepare:
        prepare(d.data_dir)
    d.start()
    sandboxes = Sandboxes(d, secret, daemon_mode)
    try:
        if daemon_mode == "zygote":
            # kernels asked for before the zygote is ready are exec'd: wait, so that this
            # module's kernels really are zygote clones
            wait_until(lambda: "zygote ready" in d.log_text() or "zygote is not usable" in d.log_text()
                       or not d.alive(), timeout=120, message="the zygote to be ready")
            assert "zygote ready" in d.log_text(), f"the zygote did not start:\n{d.log_tail()}"
        sandboxes.start_neighbour()
        yield sandboxes
    finally:
        sandboxes.cleanup()
        finish_or_fail(d)


@pytest.fixture(scope="module")
def hostile(box):
    """A kernel shared by a module's non-destructive attacks (default limits)."""
    return box.kernel()


@pytest.fixture
def fresh(box):
    """Factory for kernels of one test: fresh(limits={...}); deleted after the test."""
    made = []

    def make(limits=None, **kw):
        k = box.kernel(limits=limits, **kw)
        made.append(k)
        return k

    yield make
    processes = {}
    for k in made:
        # Only a sandbox that still exists: the namespace of one the test deleted itself may
        # already carry another sandbox's name (the kernel reuses freed inode numbers at once).
        if k.proof and box.client.get(f"api/kernels/{k.id}").status_code == 200:
            processes.update(processes_of(k.proof["pidns"]))
        with contextlib.suppress(Exception):
            k.delete()
        with contextlib.suppress(ValueError):
            box.kernels.remove(k)
    # Deleting a kernel ends its whole sandbox: no process of its pid namespace stays.
    wait_until(lambda: all_gone(processes), timeout=30,
               message="every process of the test's deleted sandboxes gone from the host")
