"""The order of a non-Python kernel's messages as a Kernel Gateway client sees them (issue 23):
`status: starting` is published once per kernel process, before anything else, so a client
never takes a later one for a restart.

Run:  CELLBOX_BUILD=$PWD/build /usr/bin/python3 -m pytest -q tests/integration/test_languages_order.py
"""
import pytest

from helpers.languages import ALL, missing_runtime

pytestmark = pytest.mark.cellbox_only

LANGS = [pytest.param(lang, id=lang.name,
                      marks=pytest.mark.skipif(missing_runtime(lang) is not None,
                                               reason=str(missing_runtime(lang))))
         for lang in ALL]
CELL_TIMEOUT = 60  # seconds for one cell's messages (R's first cell loads its packages)


def statuses(conn):
    """Every status the connection received, in arrival order, with the parent's type."""
    return [(m["content"].get("execution_state"), (m.get("parent_header") or {}).get("msg_type"))
            for _, m in conn.log if m["msg_type"] == "status"]


@pytest.mark.parametrize("lang", LANGS)
def test_kg_starting_comes_once_before_everything_else(daemon, lang):
    """A WebSocket opened at once on a new kernel sees at most one `starting`, and none after
    the first busy or idle, through its first cells (a stray one came after the first idle)."""
    client = daemon.client()
    kernel = client.create_kernel(name=lang.kernelspec)
    try:
        with client.ws(kernel["id"]) as conn:
            conn.kernel_info(timeout=CELL_TIMEOUT)
            for _ in range(3):
                res = conn.execute(lang.many_lines.format(n=3), timeout=CELL_TIMEOUT)
                assert res.reply["content"]["status"] == "ok", res.reply["content"]
            # whatever the kernel published after the last idle (a late `starting`) arrives
            # before this reply's own messages
            conn.kernel_info(timeout=CELL_TIMEOUT)
            states = statuses(conn)
        starting = [i for i, (state, _) in enumerate(states) if state == "starting"]
        assert starting in ([], [0]), states
    finally:
        client.delete_kernel(kernel["id"])
