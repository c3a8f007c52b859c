"""The Bash kernel's life as the Kernel Gateway WebSocket shows it (issue 23's fix-bash part):
`starting` once per kernel process, before anything else, and never again before its death;
an interrupt that lands as bash starts a program still ends the cell; `$?` carries over.

Cells are small; each kernel is the test's own (they end or are interrupted).
"""
import pytest

from helpers.asserts import expect
from helpers.languages import BASH, missing_runtime

pytestmark = [pytest.mark.cellbox_only,
              pytest.mark.skipif(missing_runtime(BASH) is not None, reason=str(missing_runtime(BASH)))]

CELL_TIMEOUT = 60
INTERRUPT_ROUNDS = 15


def statuses(messages):
    return [m["content"]["execution_state"] for m in messages if m["msg_type"] == "status"]


def test_starting_is_published_once_and_never_before_death(cb):
    """What the WebSocket carried, in the order it came (ws.log: not the helper's inbox, where a
    `starting` left unread at connection time sits until a later wait_for scans past it)."""
    k = cb.create_kernel(name=BASH.kernelspec)
    with cb.ready_ws(k["id"]) as ws:
        assert ws.execute("echo one", timeout=CELL_TIMEOUT).reply["content"]["status"] == "ok"
        logged_before = len(ws.log)
        res = ws.collect(ws.send_execute("exit 4"), timeout=CELL_TIMEOUT)
        assert res.first("error")["content"]["evalue"] == "the shell exited with status 4", res.messages
        ws.wait_for(lambda m: m["msg_type"] == "status" and m["content"]["execution_state"] == "dead",
                    timeout=30, what="status dead")
        carried = [m for _, m in ws.log]
        after_exit = statuses(carried[logged_before:])
        assert after_exit[-1] == "dead" and "starting" not in after_exit, after_exit
        everything = statuses(carried)
        assert everything.count("starting") <= 1, everything
        if "starting" in everything:  # published before the WebSocket was open, it is not seen
            assert carried[0]["content"] == {"execution_state": "starting"}, carried[0]


def test_interrupt_as_bash_starts_a_program_ends_the_cell_every_time(cb):
    k = cb.create_kernel(name=BASH.kernelspec)
    with cb.ready_ws(k["id"]) as ws:
        for round_number in range(INTERRUPT_ROUNDS):
            req = ws.send_execute(f"echo round-{round_number}; sleep 60; echo after")
            mine = req["header"]["msg_id"]
            ws.wait_for(lambda m: (m.get("parent_header") or {}).get("msg_id") == mine
                        and m["msg_type"] == "stream" and "round-" in m["content"]["text"],
                        timeout=CELL_TIMEOUT, what="the cell's first line")
            expect(cb.post(f"api/kernels/{k['id']}/interrupt"), 204)
            res = ws.collect(req, timeout=CELL_TIMEOUT)
            assert res.reply["content"]["status"] == "error", (round_number, res.reply["content"])
            assert res.reply["content"]["evalue"] == "130", (round_number, res.reply["content"])
            assert "after" not in res.stdout, res.messages
        assert ws.execute("echo alive", timeout=CELL_TIMEOUT).stdout == "alive\n"


def test_dollar_question_is_the_previous_cells_status(cb):
    k = cb.create_kernel(name=BASH.kernelspec)
    with cb.ready_ws(k["id"]) as ws:
        assert ws.execute("(exit 3)", timeout=CELL_TIMEOUT).reply["content"]["evalue"] == "3"
        res = ws.execute('echo "previous=$?"', timeout=CELL_TIMEOUT)
        assert res.stdout == "previous=3\n", res.messages
        res = ws.execute('echo "previous=$?"', timeout=CELL_TIMEOUT)
        assert res.stdout == "previous=0\n", res.messages
