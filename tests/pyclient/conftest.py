"""Fixtures of the Python client suite (clients/python, imported from the tree).

One cellboxd serves the whole package (the `daemon` fixture of tests/conftest.py, widened to
package scope: the client's tests do not disturb each other and a daemon per module would only
cost time). On top of it:

  conn      {"url", "token"}: the keyword arguments every client call takes
  sandbox   one Sandbox shared by a module's tests (timeout_s=0), killed after them
  fresh     a new Sandbox for one test, killed after it
"""
import contextlib
import os
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CLIENT = os.path.join(REPO, "clients", "python")
sys.path.insert(0, CLIENT)

from helpers.daemon import Daemon, serve  # noqa: E402

import cellbox  # noqa: E402


@pytest.fixture(scope="package")
def daemon():
    if os.environ.get("CELLBOX_TEST_REFERENCE"):
        pytest.skip("the client speaks cellbox's own /v1 API: nothing to check against Jupyter Server")
    yield from serve(Daemon().start())


@pytest.fixture(scope="package")
def conn(daemon):
    return daemon.connection()


@pytest.fixture(scope="module")
def sandbox(conn):
    sb = cellbox.Sandbox.create(timeout_s=0, **conn)
    yield sb
    with contextlib.suppress(cellbox.CellboxError):
        sb.kill()


@pytest.fixture
def fresh(conn):
    sb = cellbox.Sandbox.create(timeout_s=0, **conn)
    yield sb
    with contextlib.suppress(cellbox.CellboxError):
        sb.kill()

