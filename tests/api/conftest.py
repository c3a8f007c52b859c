"""Fixtures of the native API (/v1) suite.

The `daemon` fixture of tests/conftest.py (one cellboxd per module) is reused; on top of it:

  v1        a V1 client for the module's daemon (module scope); deletes the sandboxes it made
  sandbox   one sandbox shared by the tests of a module that do not disturb each other
  fresh     a new sandbox for one test, deleted after it
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from helpers.v1 import V1  # noqa: E402


@pytest.fixture(scope="module")
def v1(daemon):
    client = V1(daemon)
    yield client
    client.cleanup()


@pytest.fixture(scope="module")
def sandbox(v1):
    model = v1.create(timeout_s=0)
    yield model
    v1.remove(model["id"])


@pytest.fixture
def fresh(v1):
    model = v1.create(timeout_s=0)
    yield model
    v1.remove(model["id"])

