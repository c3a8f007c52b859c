"""What a cell produces: every message type ipykernel emits, in order, with live output and
state kept across cells."""
import base64
import json

import pytest

from helpers.asserts import REFERENCE
from helpers.snippets import release, wait_for_file


@pytest.fixture(scope="module")
def mod_kernel(daemon):
    """One kernel shared by the read-mostly tests of this module (saves kernel starts)."""
    c = daemon.client()
    k = c.create_kernel()
    yield k
    c.cleanup()


@pytest.fixture
def ws(daemon, mod_kernel):
    conn = daemon.client().ready_ws(mod_kernel["id"])
    yield conn
    conn.close()


# ------------------------------------------------------------------ state and ordering

def test_state_across_cells(ws):
    r1 = ws.execute("x = 1+2")
    assert r1.reply["content"]["status"] == "ok"
    assert "execute_result" not in r1.types
    r2 = ws.execute("print(x)")
    assert r2.stdout == "3\n"


def test_state_across_connections(daemon, mod_kernel, ws):
    ws.execute("shared_value = [1, 2, 3]")
    with daemon.client().ready_ws(mod_kernel["id"]) as other:
        assert other.execute("sum(shared_value)").result_data()["text/plain"] == "6"


def test_message_sequence_of_a_cell(ws):
    r = ws.execute("print('hi')\n40 + 2")
    iopub = [m["msg_type"] for m in r.iopub]
    assert iopub[0] == "status" and r.iopub[0]["content"]["execution_state"] == "busy"
    assert iopub[-1] == "status" and r.iopub[-1]["content"]["execution_state"] == "idle"
    assert iopub[1] == "execute_input"
    assert iopub.index("stream") < iopub.index("execute_result")
    assert r.statuses == ["busy", "idle"]
    for m in r.messages:
        assert m["parent_header"]["msg_id"] == r.msg_id


def test_execute_input_and_counts(ws):
    r = ws.execute("'counted'")
    count = r.reply["content"]["execution_count"]
    ei = r.first("execute_input")["content"]
    assert ei["code"] == "'counted'"
    assert ei["execution_count"] == count
    res = r.first("execute_result")["content"]
    assert res["execution_count"] == count
    assert res["data"] == {"text/plain": "'counted'"}
    assert isinstance(res["metadata"], dict)
    r2 = ws.execute("'next'")
    assert r2.reply["content"]["execution_count"] == count + 1


def test_silent_execution(ws):
    before = ws.execute("1").reply["content"]["execution_count"]
    r = ws.execute("print('quiet'); 99", silent=True)
    assert r.reply["content"]["status"] == "ok"
    assert "execute_input" not in r.types
    assert "execute_result" not in r.types
    after = ws.execute("1").reply["content"]["execution_count"]
    assert after == before + 1


def test_store_history_false_does_not_count(ws):
    before = ws.execute("1").reply["content"]["execution_count"]
    ws.execute("2", store_history=False)
    assert ws.execute("3").reply["content"]["execution_count"] == before + 1


def test_execute_reply_ok_fields(ws):
    content = ws.execute("a_var = 5").reply["content"]
    assert content["status"] == "ok"
    assert isinstance(content["execution_count"], int)
    assert content.get("user_expressions") == {}
    assert content.get("payload") == []


def test_user_expressions(ws):
    ws.execute("ue = 21")
    content = ws.execute("pass", user_expressions={"double": "ue * 2", "bad": "1/0"}).reply["content"]
    assert content["user_expressions"]["double"]["status"] == "ok"
    assert content["user_expressions"]["double"]["data"]["text/plain"] == "42"
    assert content["user_expressions"]["bad"]["status"] == "error"
    assert content["user_expressions"]["bad"]["ename"] == "ZeroDivisionError"


# ------------------------------------------------------------------ streams

def test_stdout_and_stderr_streams(ws):
    r = ws.execute("import sys\nprint('out line')\nprint('err line', file=sys.stderr)")
    assert r.stdout == "out line\n"
    assert r.stderr == "err line\n"
    for m in r.of_type("stream"):
        assert m["channel"] == "iopub"
        assert m["content"]["name"] in ("stdout", "stderr")


def test_stream_unicode(ws):
    text = "héllo ✓ 日本語 😀"
    assert ws.execute(f"print({text!r})").stdout == text + "\n"


def test_stream_large_output_complete_and_in_order(ws):
    r = ws.execute("for i in range(20000):\n    print(i)", timeout=60)
    lines = r.stdout.splitlines()
    assert lines == [str(i) for i in range(20000)]


@pytest.mark.cellbox_only  # ipykernel 6.17 does not capture fd 1 of child processes
def test_stream_from_child_processes(ws):
    r = ws.execute("import os, subprocess\n"
                   "os.system('echo from-system')\n"
                   "subprocess.run(['echo', 'from-subprocess'])\n"
                   "print('from-python', flush=True)")
    out = r.stdout
    for piece in ("from-system", "from-subprocess", "from-python"):
        assert piece in out, out


def test_stream_from_shell_escape(ws):
    r = ws.execute("!echo from-bang")
    assert "from-bang" in r.stdout


def test_stream_arrives_while_cell_runs(daemon, mod_kernel, ws):
    """The first chunk must reach the client before the cell ends: the cell cannot end until
    the test, having seen the chunk, creates the file it waits for."""
    req = ws.send_execute(wait_for_file("live-go", before="print('first chunk', flush=True)"))
    try:
        m = ws.wait_for(lambda m: m["msg_type"] in ("stream", "execute_reply")
                        and m["parent_header"].get("msg_id") == req["header"]["msg_id"],
                        timeout=30, what="the first stream chunk")
        assert m["msg_type"] == "stream", "the reply came before any output"
        assert m["content"]["text"] == "first chunk\n"
    finally:
        release(daemon, mod_kernel["id"], "live-go")
    r = ws.collect(req)
    assert "go seen" in r.stdout
    assert r.reply["content"]["status"] == "ok"


def test_unflushed_print_arrives_live(daemon, mod_kernel, ws):
    """sys.stdout writes straight through: no flush needed for the client to see it."""
    req = ws.send_execute(wait_for_file("live-go2", before="print('no flush')"))
    try:
        m = ws.wait_for(lambda m: m["msg_type"] in ("stream", "execute_reply")
                        and m["parent_header"].get("msg_id") == req["header"]["msg_id"],
                        timeout=30, what="the unflushed stream chunk")
        assert m["msg_type"] == "stream"
        assert "no flush" in m["content"]["text"]
    finally:
        release(daemon, mod_kernel["id"], "live-go2")
    ws.collect(req)


# ------------------------------------------------------------------ rich output

def test_execute_result_rich_repr(ws):
    r = ws.execute("class R:\n"
                   "    def _repr_html_(self): return '<b>rich</b>'\n"
                   "    def __repr__(self): return 'R()'\n"
                   "R()")
    data = r.result_data()
    assert data["text/plain"] == "R()"
    assert data["text/html"] == "<b>rich</b>"


def test_display_data_png_from_matplotlib(ws):
    r = ws.execute("import matplotlib.pyplot as plt\n"
                   "plt.plot([1, 3, 2])\n"
                   "plt.show()", timeout=90)
    assert r.reply["content"]["status"] == "ok"
    displays = r.of_type("display_data")
    assert displays, r.types
    pngs = [d for d in displays if "image/png" in d["content"]["data"]]
    assert pngs, [d["content"]["data"].keys() for d in displays]
    content = pngs[0]["content"]
    raw = base64.b64decode(content["data"]["image/png"])
    assert raw.startswith(b"\x89PNG\r\n\x1a\n")
    assert "text/plain" in content["data"]
    assert isinstance(content["metadata"], dict)
    assert "execute_result" not in r.types


def test_png_from_kernels_of_every_start_path(daemon):
    """The first kernels of a daemon may start cold, later ones come from a preloaded zygote or
    a warm pool: inline figures must work in all of them (with their structured chart, on
    cellbox: E2B's result.chart)."""
    chart = [] if REFERENCE else ["application/vnd.cellbox.chart+json"]
    c = daemon.client()
    try:
        for i in range(4):
            k = c.create_kernel()
            with c.ready_ws(k["id"]) as conn:
                r = conn.execute("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()", timeout=90)
                mimes = [sorted(m["content"]["data"]) for m in r.of_type("display_data")]
                assert mimes == [chart + ["image/png", "text/plain"]], (i, mimes, r.stdout, r.stderr)
                if chart:
                    data = r.of_type("display_data")[0]["content"]["data"]
                    assert data[chart[0]]["elements"] == [
                        {"label": "Line 0", "points": [[0.0, 1.0], [1.0, 2.0]]}], (i, data[chart[0]])
    finally:
        c.cleanup()


def test_display_data_html_and_json(ws):
    r = ws.execute("from IPython.display import display, HTML, JSON\n"
                   "display(HTML('<i>hi</i>'))\n"
                   "display({'application/json': {'a': 1}, 'text/plain': 'j'}, raw=True)")
    d = r.of_type("display_data")
    assert len(d) == 2, r.types
    assert d[0]["content"]["data"]["text/html"] == "<i>hi</i>"
    assert d[1]["content"]["data"]["application/json"] == {"a": 1}
    for m in d:
        assert "transient" in m["content"] and isinstance(m["content"]["transient"], dict)


def test_display_id_and_update(ws):
    r = ws.execute("from IPython.display import display\n"
                   "h = display('v1', display_id='disp-1')\n"
                   "h.update('v2')")
    shown = r.first("display_data")["content"]
    assert shown["transient"] == {"display_id": "disp-1"}
    upd = r.first("update_display_data")["content"]
    assert upd["transient"] == {"display_id": "disp-1"}
    assert upd["data"]["text/plain"] == "'v2'"


def test_clear_output(ws):
    r = ws.execute("from IPython.display import clear_output\n"
                   "print('before')\n"
                   "clear_output(wait=True)\n"
                   "print('after')")
    clear = r.first("clear_output")["content"]
    assert clear == {"wait": True}
    types = r.types
    assert types.index("clear_output") > types.index("stream")
    assert r.stdout == "before\nafter\n"


def test_pandas_dataframe_repr(ws):
    r = ws.execute("import pandas as pd\n"
                   "df = pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})\n"
                   "df", timeout=90)
    data = r.result_data()
    assert "text/html" in data and "<table" in data["text/html"]
    assert "a" in data["text/plain"] and "x" in data["text/plain"]


# ------------------------------------------------------------------ errors

def test_error_and_execute_reply_error(ws):
    r = ws.execute("1/0")
    err = r.first("error")
    assert err["channel"] == "iopub"
    assert err["content"]["ename"] == "ZeroDivisionError"
    assert err["content"]["evalue"] == "division by zero"
    tb = err["content"]["traceback"]
    assert isinstance(tb, list) and tb and all(isinstance(line, str) for line in tb)
    assert "ZeroDivisionError" in "".join(tb)
    assert "\x1b[" in "".join(tb), "the Jupyter API passes IPython's coloured traceback as ipykernel sends it"
    reply = r.reply["content"]
    assert reply["status"] == "error"
    assert reply["ename"] == "ZeroDivisionError"
    assert reply["evalue"] == "division by zero"
    assert isinstance(reply["traceback"], list)
    assert isinstance(reply["execution_count"], int)
    assert r.statuses == ["busy", "idle"]


def test_syntax_error(ws):
    r = ws.execute("def broken(:\n    pass")
    assert r.reply["content"]["status"] == "error"
    assert r.first("error")["content"]["ename"] == "SyntaxError"


def test_name_error_then_kernel_still_works(ws):
    r = ws.execute("undefined_name_xyz")
    assert r.first("error")["content"]["ename"] == "NameError"
    assert ws.execute("'fine'").result_data()["text/plain"] == "'fine'"


def test_output_before_error_is_kept(ws):
    r = ws.execute("print('partial')\nraise ValueError('boom')")
    assert r.stdout == "partial\n"
    err = r.first("error")["content"]
    assert (err["ename"], err["evalue"]) == ("ValueError", "boom")
    assert r.types.index("stream") < r.types.index("error")


def test_stop_on_error_aborts_queued_requests(daemon, mod_kernel, ws):
    first = ws.send_execute(wait_for_file("abort-go", after="raise RuntimeError('first fails')"))
    second = ws.send_execute("aborted_marker = 1")
    third = ws.send_execute("print('should not run')")
    ws.wait_for(lambda m: m["msg_type"] == "execute_input"
                and m["parent_header"].get("msg_id") == first["header"]["msg_id"], what="first cell started")
    release(daemon, mod_kernel["id"], "abort-go")
    r1 = ws.collect(first)
    assert r1.reply["content"]["status"] == "error"
    for req in (second, third):
        r = ws.collect(req)
        assert r.reply["content"]["status"] == "aborted", r.reply["content"]
        assert "stream" not in r.types and "execute_input" not in r.types
    assert ws.execute("'aborted_marker' in dir()").result_data()["text/plain"] == "False"


def test_no_abort_when_stop_on_error_false(daemon, mod_kernel, ws):
    first = ws.send_execute(wait_for_file("noabort-go", after="raise RuntimeError('x')"), stop_on_error=False)
    second = ws.send_execute("ran_anyway = 1\nprint('second ran')", stop_on_error=False)
    ws.wait_for(lambda m: m["msg_type"] == "execute_input"
                and m["parent_header"].get("msg_id") == first["header"]["msg_id"], what="first cell started")
    release(daemon, mod_kernel["id"], "noabort-go")
    assert ws.collect(first).reply["content"]["status"] == "error"
    r2 = ws.collect(second)
    assert r2.reply["content"]["status"] == "ok"
    assert r2.stdout == "second ran\n"


def test_requests_after_an_error_batch_run_normally(ws):
    ws.execute("1/0")
    assert ws.execute("'after'").reply["content"]["status"] == "ok"


# ------------------------------------------------------------------ stdin

def test_input_request_and_reply(ws):
    req = ws.send_execute("answer = input('Your name? ')\nprint('hello', answer)", allow_stdin=True)
    ask = ws.wait_for(lambda m: m["msg_type"] == "input_request", what="input_request")
    assert ask["channel"] == "stdin"
    assert ask["parent_header"]["msg_id"] == req["header"]["msg_id"]
    assert ask["content"]["prompt"] == "Your name? "
    assert ask["content"]["password"] is False
    reply = ws.new("input_reply", {"value": "Ada"}, channel="stdin")
    reply["parent_header"] = ask["header"]
    ws.send(reply)
    r = ws.collect(req)
    assert r.reply["content"]["status"] == "ok"
    assert "hello Ada" in r.stdout
    assert ws.execute("answer").result_data()["text/plain"] == "'Ada'"


def test_getpass_is_a_password_request(ws):
    req = ws.send_execute("import getpass\nsecret = getpass.getpass('pw: ')\nlen(secret)", allow_stdin=True)
    ask = ws.wait_for(lambda m: m["msg_type"] == "input_request", what="input_request")
    assert ask["content"]["password"] is True
    assert ask["content"]["prompt"] == "pw: "
    reply = ws.new("input_reply", {"value": "hunter2"}, channel="stdin")
    reply["parent_header"] = ask["header"]
    ws.send(reply)
    assert ws.collect(req).result_data()["text/plain"] == "7"


def test_input_without_allow_stdin(ws):
    r = ws.execute("input('x? ')", allow_stdin=False)
    assert "input_request" not in r.types
    assert r.first("error")["content"]["ename"] == "StdinNotImplementedError"
    assert r.reply["content"]["status"] == "error"


# ------------------------------------------------------------------ other shell requests

def test_kernel_info_reply(ws):
    r = ws.kernel_info()
    c = r.reply["content"]
    assert r.reply["channel"] == "shell"
    assert c["status"] == "ok"
    assert c["protocol_version"].startswith("5.")
    assert isinstance(c["implementation"], str) and c["implementation"]
    assert isinstance(c["implementation_version"], str)
    assert isinstance(c["banner"], str)
    li = c["language_info"]
    assert li["name"] == "python"
    assert li["version"].startswith("3.")
    assert li["mimetype"] == "text/x-python"
    assert li["file_extension"] == ".py"
    assert li["pygments_lexer"] == "ipython3"
    assert li["codemirror_mode"] == {"name": "ipython", "version": 3}
    assert li["nbconvert_exporter"] == "python"
    assert r.statuses == ["busy", "idle"]


def test_complete_request(ws):
    ws.execute("import os\ncompletion_target_variable = 1")
    code = "completion_target_va"
    c = ws.request("complete_request", {"code": code, "cursor_pos": len(code)}).reply["content"]
    assert c["status"] == "ok"
    assert "completion_target_variable" in c["matches"]
    assert c["cursor_start"] == 0 and c["cursor_end"] == len(code)
    assert isinstance(c["metadata"], dict)
    code = "os.pa"
    c = ws.request("complete_request", {"code": code, "cursor_pos": len(code)}).reply["content"]
    assert any(m.endswith("path") for m in c["matches"]), c["matches"]


def test_inspect_request(ws):
    c = ws.request("inspect_request", {"code": "len", "cursor_pos": 3, "detail_level": 0}).reply["content"]
    assert c["status"] == "ok"
    assert c["found"] is True
    assert "text/plain" in c["data"]
    assert "len" in c["data"]["text/plain"] or "Return the number" in c["data"]["text/plain"]
    c = ws.request("inspect_request", {"code": "no_such_thing_q", "cursor_pos": 5, "detail_level": 0}).reply["content"]
    assert c["status"] == "ok" and c["found"] is False


@pytest.mark.parametrize("code,status", [
    ("x = 1", "complete"),
    ("for i in range(3):", "incomplete"),
    ("x = (1,", "incomplete"),
    ("def f():\n    return 1\n", "complete"),
])
def test_is_complete_request(ws, code, status):
    c = ws.request("is_complete_request", {"code": code}).reply["content"]
    assert c["status"] == status, c
    if status == "incomplete":
        assert isinstance(c.get("indent"), str)


def test_is_complete_indent(ws):
    c = ws.request("is_complete_request", {"code": "if True:"}).reply["content"]
    assert c == {"status": "incomplete", "indent": "    "}


def test_history_request(ws):
    c = ws.request("history_request", {"hist_access_type": "tail", "n": 5, "output": False,
                                       "raw": True}).reply["content"]
    assert c["status"] == "ok"
    assert isinstance(c["history"], list)


def test_comm_info_request(ws):
    r = ws.request("comm_info_request", {})
    assert r.reply["msg_type"] == "comm_info_reply"
    assert r.reply["content"]["status"] == "ok"
    assert isinstance(r.reply["content"]["comms"], dict)


def test_interrupt_request_on_control_when_idle(ws):
    r = ws.request("interrupt_request", {}, channel="control")
    assert r.reply["msg_type"] == "interrupt_reply"
    assert r.reply["channel"] == "control"
    assert r.reply["content"].get("status", "ok") == "ok"  # ipykernel 6 sends {} here
    assert ws.execute("'alive'").result_data()["text/plain"] == "'alive'"


def test_interrupt_request_on_control_stops_running_cell(daemon, mod_kernel, ws):
    req = ws.send_execute("import time\nprint('looping', flush=True)\nwhile True:\n    time.sleep(0.01)")
    ws.wait_for(lambda m: m["msg_type"] == "stream" and m["parent_header"].get("msg_id") == req["header"]["msg_id"],
                what="the loop to start")
    intr = ws.send(ws.new("interrupt_request", {}, channel="control"))
    ir = ws.wait_for(lambda m: m["msg_type"] == "interrupt_reply"
                     and m["parent_header"].get("msg_id") == intr["header"]["msg_id"], what="interrupt_reply")
    assert ir["channel"] == "control"
    r = ws.collect(req)
    assert r.first("error")["content"]["ename"] == "KeyboardInterrupt"
    assert r.reply["content"]["status"] == "error"


def test_unknown_request_type_does_not_hang_kernel(ws):
    ws.send(ws.new("no_such_request"))
    assert ws.execute("'ok after unknown'").result_data()["text/plain"] == "'ok after unknown'"


def test_json_content_survives_round_trip(ws):
    payload = {"nested": [1, 2.5, None, True, "s"], "ü": "ñ"}
    r = ws.execute(f"import json\nprint(json.dumps({payload!r}, sort_keys=True))")
    assert json.loads(r.stdout) == payload


def test_shutdown_request_on_control(daemon):
    """On a kernel of its own: shutdown_request is answered with shutdown_reply."""
    c = daemon.client()
    k = c.create_kernel()
    try:
        with c.ready_ws(k["id"]) as conn:
            conn.send(conn.new("shutdown_request", {"restart": False}, channel="control"))
            # (ipykernel also broadcasts a copy on iopub; the reply proper is on control)
            rep = conn.wait_for(lambda m: m["msg_type"] == "shutdown_reply" and m["channel"] == "control",
                                what="shutdown_reply on control")
            assert rep["channel"] == "control"
            assert rep["content"]["status"] == "ok"
            assert rep["content"]["restart"] is False
    finally:
        c.cleanup()
