"""POST /v1/sandboxes/{id}/execute: the NDJSON event stream (E2B code interpreter style)."""
import base64
import re
import threading
import time
import uuid

from helpers.asserts import assert_v1_error
from helpers.v1 import TIMEOUT, read_lines

TS_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})$")
EVENT_TYPES = {"stdout", "stderr", "result", "error", "number_of_executions", "keepalive", "accounting",
               "end_of_execution"}


def check_common(ev):
    assert set(ev.types) <= EVENT_TYPES, ev.types
    assert ev.types[-1] == "end_of_execution"
    assert ev.types.count("accounting") == 1, ev.types
    assert ev.types.index("accounting") < len(ev) - 1
    for e in ev.of("stdout") + ev.of("stderr"):
        assert isinstance(e["text"], str) and TS_RE.match(e["timestamp"]), e
    acc = ev.one("accounting")
    for key in ("wall_ms", "cpu_ms", "memory_peak_bytes", "output_bytes"):
        assert type(acc[key]) is int and acc[key] >= 0, acc
    assert type(acc["truncated"]) is bool and type(acc["timed_out"]) is bool, acc


def test_stdout_stderr_result(v1, sandbox):
    ev = v1.execute(sandbox["id"], "import sys\nprint('out')\nprint('err', file=sys.stderr)\n6 * 7")
    check_common(ev)
    assert ev.stdout == "out\n" and ev.stderr == "err\n", ev
    main = ev.main_result
    assert main["text"] == "42" and main["is_main_result"] is True
    assert not ev.errors
    n = ev.one("number_of_executions")
    assert type(n["execution_count"]) is int and n["execution_count"] >= 1
    acc = ev.one("accounting")
    assert acc["output_bytes"] >= len("out\nerr\n") and acc["timed_out"] is False and acc["truncated"] is False
    assert ev.response.headers["Content-Type"].startswith("application/x-ndjson")


def test_output_is_live(v1, sandbox):
    """stdout arrives as printed, not at the end of the cell."""
    r, lines = v1.stream("POST", f"v1/sandboxes/{sandbox['id']}/execute",
                         json={"code": "import time\nprint('first', flush=True)\ntime.sleep(2)\nprint('second')"})
    assert r.status_code == 200
    t0 = time.monotonic()
    got = []
    for e in lines:
        got.append((time.monotonic() - t0, e))
    r.close()
    first = [t for t, e in got if e.get("type") == "stdout" and "first" in e["text"]]
    end = [t for t, e in got if e.get("type") == "end_of_execution"]
    assert first and end, got
    assert end[0] - first[0] > 1.2, f"'first' came {end[0] - first[0]:.2f}s before the end: not live"


def test_rich_results(v1, sandbox):
    code = ("from IPython.display import display, HTML, Markdown\n"
            "display(HTML('<b>bold</b>'))\n"
            "display(Markdown('# title'))\n"
            "import matplotlib.pyplot as plt\n"
            "plt.plot([1, 3, 2])\n"
            "plt.show()\n"
            "{'a': 1}")
    ev = v1.execute(sandbox["id"], code, timeout=90)
    check_common(ev)
    assert not ev.errors, ev.errors
    html = [e for e in ev.results if "html" in e]
    assert html and "<b>bold</b>" in html[0]["html"] and html[0]["is_main_result"] is False, ev
    md = [e for e in ev.results if "markdown" in e]
    assert md and "# title" in md[0]["markdown"], ev
    pngs = [e for e in ev.results if "png" in e]
    assert pngs, [sorted(e) for e in ev.results]
    assert base64.b64decode(pngs[0]["png"]).startswith(b"\x89PNG\r\n\x1a\n")
    assert pngs[0]["is_main_result"] is False
    assert ev.main_result["text"] == "{'a': 1}"
    # the MIME bundle keys are the short names, never MIME types
    for e in ev.results:
        assert not any("/" in k for k in e), e


def test_json_and_extra_mime(v1, sandbox):
    code = ("from IPython.display import display\n"
            "display({'application/json': {'k': [1, 2]}, 'text/plain': 'j',"
            " 'application/vnd.custom+json': {'x': 1}}, raw=True)")
    ev = v1.execute(sandbox["id"], code)
    res = [e for e in ev.results if "json" in e]
    assert res and res[0]["json"] == {"k": [1, 2]} and res[0]["text"] == "j", ev
    assert res[0].get("extra", {}).get("application/vnd.custom+json") == {"x": 1}, res[0]


def test_error_event(v1, sandbox):
    ev = v1.execute(sandbox["id"], "print('before')\n1 / 0")
    check_common(ev)
    err = ev.one("error")
    assert err["name"] == "ZeroDivisionError"
    assert err["value"] == "division by zero"
    assert isinstance(err["traceback"], str) and "ZeroDivisionError" in err["traceback"]
    assert ev.stdout == "before\n"
    assert not [e for e in ev.results if e.get("is_main_result")]
    assert ev.types.index("error") < ev.types.index("end_of_execution")


def test_traceback_is_plain_unless_colour_is_asked_for(v1, sandbox):
    code = "def f():\n    return 1 / 0\nf()"
    plain = v1.execute(sandbox["id"], code).one("error")["traceback"]
    assert "\x1b" not in plain and "ZeroDivisionError" in plain and "return 1 / 0" in plain, plain
    assert "\x1b" not in v1.execute(sandbox["id"], code, color=False).one("error")["traceback"]
    coloured = v1.execute(sandbox["id"], code, color=True).one("error")["traceback"]
    assert "\x1b[" in coloured and "ZeroDivisionError" in coloured, coloured
    # The same text once the colours are out: nothing else is lost.
    in_cell = re.compile(r"Cell In \[\d+\]")  # the execution count differs
    assert in_cell.sub("", re.sub(r"\x1b\[[0-9;]*m", "", coloured)) == in_cell.sub("", plain)
    r = v1.post(f"v1/sandboxes/{sandbox['id']}/execute", json={"code": "1", "color": "yes"})
    assert_v1_error(r, 400, "color")


def test_execution_count_increments(v1, sandbox):
    a = v1.execute(sandbox["id"], "1").one("number_of_executions")["execution_count"]
    b = v1.execute(sandbox["id"], "2").one("number_of_executions")["execution_count"]
    assert b == a + 1


def test_keepalive(v1, sandbox):
    ev = v1.execute(sandbox["id"], "import time\ntime.sleep(6)\nprint('done')")
    check_common(ev)
    assert "keepalive" in ev.types, ev.types
    assert ev.types.index("keepalive") < ev.types.index("stdout"), ev.types
    assert ev.stdout == "done\n"


def test_state_persists_in_context(v1, sandbox):
    v1.execute(sandbox["id"], "persisted = [1, 2, 3]")
    assert v1.value(sandbox["id"], "sum(persisted)") == "6"
    # an explicit language (no context) means the default context too
    assert v1.value(sandbox["id"], "len(persisted)", language="python") == "3"
    assert v1.value(sandbox["id"], "len(persisted)", context_id=sandbox["id"]) == "3"


def test_context_and_language_together(v1, sandbox):
    r = v1.post(f"v1/sandboxes/{sandbox['id']}/execute",
                json={"code": "1", "context_id": sandbox["id"], "language": "python"})
    assert_v1_error(r, 400, "context_id", "language")


def test_unknown_context(v1, sandbox):
    bogus = str(uuid.uuid4())
    r = v1.post(f"v1/sandboxes/{sandbox['id']}/execute", json={"code": "1", "context_id": bogus})
    assert_v1_error(r, 404, bogus)


def test_bad_bodies(v1, sandbox):
    url = f"v1/sandboxes/{sandbox['id']}/execute"
    assert_v1_error(v1.post(url, json={}), 400, "code")
    assert_v1_error(v1.post(url, json={"code": 5}), 400, "code")
    assert_v1_error(v1.post(url, json={"code": "1", "colour": "red"}), 400, "unknown field 'colour'")
    assert_v1_error(v1.post(url, json={"code": "1", "env_vars": {"A": 1}}), 400, "env_vars")
    assert_v1_error(v1.post(url, json={"code": "1", "timeout_s": -2}), 400, "timeout_s")
    assert_v1_error(v1.post(url, json={"code": "1", "language": "cobol"}), 400, "language")
    assert_v1_error(v1.post(url, data="{'code': 1}", headers={"Content-Type": "application/json"}), 400)
    assert_v1_error(v1.post(url, json=["code"]), 400)
    assert_v1_error(v1.post(f"v1/sandboxes/{uuid.uuid4()}/execute", json={"code": "1"}), 404, "does not exist")


def test_env_vars_for_one_execution(v1, sandbox):
    sid = sandbox["id"]
    code = "import os, subprocess\n(os.environ.get('EXEC_VAR'), subprocess.run(['sh', '-c', 'echo $EXEC_VAR'], capture_output=True, text=True).stdout.strip())"
    assert v1.value(sid, code, env_vars={"EXEC_VAR": "only-now"}) == "('only-now', 'only-now')"
    assert v1.value(sid, code) == "(None, '')"


def test_timeout(v1, sandbox):
    sid = sandbox["id"]
    t0 = time.monotonic()
    ev = v1.execute(sid, "import time\nprint('sleeping', flush=True)\ntime.sleep(60)", timeout_s=1)
    took = time.monotonic() - t0
    assert took < 15, took
    err = ev.one("error")
    assert err["name"] == "TimeoutError", err
    assert ev.one("accounting")["timed_out"] is True
    assert ev.stdout == "sleeping\n"
    assert v1.value(sid, "'alive'") == "'alive'"


def test_disconnect_interrupts(v1, sandbox):
    sid = sandbox["id"]
    r, lines = v1.stream("POST", f"v1/sandboxes/{sid}/execute",
                         json={"code": "print('spinning', flush=True)\nwhile True: pass"})
    assert r.status_code == 200
    for e in lines:
        if e.get("type") == "stdout" and "spinning" in e["text"]:
            break
    r.close()  # drops the connection
    t0 = time.monotonic()
    ev = v1.execute(sid, "'after'", timeout=30)
    assert time.monotonic() - t0 < 10, "the abandoned loop was not interrupted"
    assert ev.main_result["text"] == "'after'", ev


def test_executions_in_a_context_run_in_turn(v1, sandbox):
    sid = sandbox["id"]
    v1.execute(sid, "turn = 1")
    out = {}

    def first():
        out["a"] = v1.execute(sid, "import time\ntime.sleep(1.5)\nturn = 2")

    t = threading.Thread(target=first)
    t.start()
    time.sleep(0.4)
    second = v1.execute(sid, "turn")
    t.join(TIMEOUT)
    assert second.main_result["text"] == "2", second
    assert not out["a"].errors


def test_large_output_is_truncated(v1):
    m = v1.create(timeout_s=0, limits={"output": "64K"})
    try:
        ev = v1.execute(m["id"], "for i in range(5000):\n    print('x' * 99)")
        acc = ev.one("accounting")
        assert acc["truncated"] is True, acc
        assert len(ev.stdout) <= 64 * 1024 + 4096, len(ev.stdout)
        assert ev.types[-1] == "end_of_execution"
    finally:
        v1.remove(m["id"])


def test_read_lines_helper_handles_split_chunks():
    class Raw:
        def __init__(self, parts):
            self.parts = list(parts)

        def read(self, n):
            return self.parts.pop(0) if self.parts else b""

    class R:
        raw = Raw([b'{"type": "std', b'out", "text": "a"}\n{"type"', b': "end_of_execution"}\n'])

    assert [e["type"] for e in read_lines(R())] == ["stdout", "end_of_execution"]
