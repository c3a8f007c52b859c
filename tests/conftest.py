"""Fixtures shared by tests/integration and tests/clients.

The binary under test is $CELLBOX_DAEMON, else $CELLBOX_BUILD/bin/cellboxd, else
<repo>/build/bin/cellboxd.

To check the tests themselves (not cellboxd), CELLBOX_TEST_REFERENCE=jupyter runs them against
Debian's Jupyter Server with ipykernel instead; tests marked `cellbox_only` (options and
behaviour Jupyter Server does not have) are skipped then.

Fixtures
  daemon        one cellboxd per test module (default options)
  cb            a Client for `daemon`; deletes the kernels it created after each test
  kernel        a fresh kernel on `daemon` (model dict), deleted after the test
  kernel_ws     a legacy-framed WebSocket to `kernel`, kernel ready (kernel_info answered)
  make_daemon   factory: make_daemon(args=[...], env={...}, ...) -> started Daemon, stopped
                at the end of the test
"""
import contextlib
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from helpers.daemon import Daemon, JupyterServer, fail_if_dead, serve  # noqa: E402
from helpers.environment import scrub_session  # noqa: E402

# Before any test: nothing the caller exported (a CELLBOX_PORT, a proxy, thread counts, a
# locale) reaches the tests' clients or what they start (helpers/environment.py).
scrub_session()

REFERENCE = os.environ.get("CELLBOX_TEST_REFERENCE", "")


def pytest_configure(config):
    config.addinivalue_line("markers", "cellbox_only: behaviour only cellboxd has (skipped against the "
                                       "reference Jupyter Server)")


def pytest_collection_modifyitems(config, items):
    if REFERENCE:
        skip = pytest.mark.skip(reason=f"cellbox-only behaviour (CELLBOX_TEST_REFERENCE={REFERENCE})")
        for item in items:
            if "cellbox_only" in item.keywords:
                item.add_marker(skip)


class ReferenceServer(JupyterServer):
    """Jupyter Server + ipykernel dressed as a Daemon, to check the tests against a known-good
    implementation of the same REST/WebSocket API."""

    def __init__(self, **kw):
        super().__init__()
        self.data_dir = self.root_dir
        self.base_url = "/"

    def workspace(self, kernel_id):
        return self.tmp  # Jupyter Server starts kernels in its own cwd when no path is given

    def finish(self):
        super().finish()
        return None


def _start(**kw):
    if REFERENCE:
        return ReferenceServer(**kw).start()
    return Daemon(**kw).start()


@pytest.fixture(scope="module")
def daemon():
    yield from serve(_start())


@pytest.fixture(autouse=True)
def _daemon_alive(request):
    yield
    fail_if_dead(request)


@pytest.fixture
def cb(daemon):
    c = daemon.client()
    yield c
    c.cleanup()
    if not daemon.alive():
        pytest.fail(f"the server died during this test; log tail:\n{daemon.log_tail()}", pytrace=False)


@pytest.fixture
def kernel(cb):
    return cb.create_kernel()


@pytest.fixture
def kernel_ws(cb, kernel):
    conn = cb.ready_ws(kernel["id"])
    yield conn
    conn.close()


@pytest.fixture
def make_daemon():
    started = []

    def make(start=True, **kw):
        d = Daemon(**kw) if not REFERENCE else ReferenceServer(**kw)
        started.append(d)
        return d.start() if start else d

    yield make
    problems = []
    for d in started:
        with contextlib.suppress(Exception):
            p = d.finish()
            if p:
                problems.append(p)
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


IP_FORWARD = "/proc/sys/net/ipv4/ip_forward"


@pytest.fixture(scope="session", autouse=True)
def _ip_forwarding_as_found():
    """IPv4 forwarding back to off at the end of the run if it was off at its start and no
    cellbox daemon's table (`inet cellbox_*`) is left: a daemon a test killed with SIGKILL cannot
    turn off what it turned on, and its successor reads it on (docs/security.md). The same rule
    as cellboxd's own stop, so another daemon still running on the machine keeps it."""
    was_off = False
    with contextlib.suppress(OSError):
        with open(IP_FORWARD) as f:
            was_off = f.read().strip() == "0"
    yield
    if not was_off or os.geteuid() != 0:
        return
    tables = subprocess.run(["nft", "list", "tables", "inet"], capture_output=True, text=True,
                            timeout=20)
    if tables.returncode == 0 and "table inet cellbox_" not in tables.stdout:
        with contextlib.suppress(OSError):
            with open(IP_FORWARD, "w") as f:
                f.write("0")
