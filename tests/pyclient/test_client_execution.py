"""run_code: the Execution model (results, logs, error, execution_count, accounting), the
streaming callbacks firing while the cell runs, rich results (PNG from matplotlib, HTML from
pandas), env_vars, timeouts, and contexts."""
import ast
import threading
import time

import pytest

import cellbox

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_execution_model(sandbox):
    execution = sandbox.run_code("import sys\nprint('out')\nprint('err', file=sys.stderr)\n6 * 7")
    assert isinstance(execution, cellbox.Execution)
    assert execution.logs.stdout == ["out\n"] and execution.logs.stderr == ["err\n"]
    assert execution.stdout == "out\n" and execution.stderr == "err\n"
    assert execution.error is None
    assert execution.text == "42"
    [result] = execution.results
    assert result.is_main_result and result.text == "42" and str(result) == "42"
    assert result.formats() == ["text"]
    assert isinstance(execution.execution_count, int) and execution.execution_count >= 1
    acc = execution.accounting
    assert isinstance(acc, cellbox.Accounting)
    assert acc.wall_ms >= 0 and acc.memory_peak_bytes > 0 and acc.output_bytes >= 8
    assert acc.truncated is False and acc.timed_out is False
    assert '"text": "42"' in execution.to_json()
    following = sandbox.run_code("None")
    assert following.execution_count == execution.execution_count + 1
    assert following.text is None and following.results == []


def test_state_is_kept(sandbox):
    sandbox.run_code("x = 1 + 2")
    assert sandbox.run_code("print(x)").logs.stdout == ["3\n"]


def test_stdout_callback_fires_before_the_cell_ends(sandbox):
    seen = []
    started = time.monotonic()
    execution = sandbox.run_code(
        "import time\nprint('first', flush=True)\ntime.sleep(1.5)\nprint('second', flush=True)",
        on_stdout=lambda m: seen.append((time.monotonic(), m)))
    ended = time.monotonic()
    assert [m for _, m in seen] == ["first\n", "second\n"]
    first_at = seen[0][0]
    assert ended - first_at >= 1.0, f"'first' arrived {ended - first_at:.2f}s before the end: not live"
    assert first_at - started < 1.0
    message = seen[0][1]
    assert isinstance(message, str) and isinstance(message, cellbox.OutputMessage)
    assert message.timestamp and message.error is False and message.line == "first\n"
    assert execution.logs.stdout == ["first\n", "second\n"]


def test_every_callback(sandbox):
    calls = []
    execution = sandbox.run_code(
        "import sys\nprint('o')\nprint('e', file=sys.stderr)\nfrom IPython.display import display, HTML\n"
        "display(HTML('<b>hi</b>'))\n1/0",
        on_stdout=lambda m: calls.append(("stdout", str(m))),
        on_stderr=lambda m: calls.append(("stderr", str(m), m.error)),
        on_result=lambda r: calls.append(("result", r.html, r.is_main_result)),
        on_error=lambda e: calls.append(("error", e.name)))
    assert calls == [("stdout", "o\n"), ("stderr", "e\n", True), ("result", "<b>hi</b>", False),
                     ("error", "ZeroDivisionError")]
    assert execution.text is None


def test_error(sandbox):
    execution = sandbox.run_code("def f():\n    return 1 / 0\nf()")
    error = execution.error
    assert isinstance(error, cellbox.ExecutionError)
    assert error.name == "ZeroDivisionError" and error.value == "division by zero"
    assert "\x1b[" in error.traceback                     # IPython's colours, as E2B keeps them
    assert "\x1b[" not in error.traceback_text
    assert "return 1 / 0" in error.traceback_text and error.traceback_text.rstrip().endswith("division by zero")
    assert str(error) == "ZeroDivisionError: division by zero"
    assert '"name": "ZeroDivisionError"' in error.to_json()
    # the kernel lives on
    assert sandbox.run_code("'still here'").text == "'still here'"


def test_png_from_matplotlib(sandbox, tmp_path):
    execution = sandbox.run_code(
        "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.bar(['a', 'b'], [3, 5])\nplt.show()")
    images = [r for r in execution.results if r.png]
    assert len(images) == 1
    chart = images[0]
    assert "png" in chart.formats() and not chart.is_main_result
    # the figure's structured chart (E2B's result.chart) rides along
    assert chart.chart["type"] == "bar" and "chart" in chart.formats()
    assert [(bar["label"], bar["value"]) for bar in chart.chart["elements"]] == [("a", 3), ("b", 5)]
    path = chart.save_png(str(tmp_path / "chart.png"))
    data = open(path, "rb").read()
    assert data.startswith(PNG_MAGIC) and data == chart.png_bytes() and len(data) > 1000
    with pytest.raises(ValueError, match="no jpeg"):
        chart.save_jpeg(str(tmp_path / "chart.jpg"))


def test_html_and_other_formats(sandbox, tmp_path):
    execution = sandbox.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})")
    table = execution.results[0]
    assert table.is_main_result and "<table" in table.html and "a  b" in table.text
    assert set(table.formats()) >= {"text", "html"}
    assert table._repr_html_() == table.html
    table.save_html(str(tmp_path / "t.html"))
    assert (tmp_path / "t.html").read_text() == table.html

    rich = sandbox.run_code(
        "from IPython.display import display, Markdown, Latex, JSON, SVG\n"
        "display(Markdown('**m**'))\ndisplay(Latex(r'$x^2$'))\ndisplay(JSON({'k': 1}))\n"
        "display(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1\" height=\"1\"></svg>'))\n"
        "display({'application/x-custom': 'payload', 'text/plain': 'custom'}, raw=True)")
    markdown, latex, json_result, svg, custom = rich.results
    assert markdown.markdown == "**m**"
    assert latex.latex == "$x^2$"
    assert json_result.json == {"k": 1}
    assert svg.svg.startswith("<svg") and "svg" in svg.formats()
    assert custom.extra == {"application/x-custom": "payload"} and custom.text == "custom"
    assert custom.formats() == ["text", "application/x-custom"]


def test_env_vars_hold_for_one_cell(sandbox):
    code = "import os; os.environ.get('ONLY_NOW', 'unset')"
    assert sandbox.run_code(code, env_vars={"ONLY_NOW": "yes"}).text == "'yes'"
    assert sandbox.run_code(code).text == "'unset'"


def test_cell_timeout(sandbox):
    started = time.monotonic()
    execution = sandbox.run_code("import time\ntime.sleep(30)", timeout_s=1)
    assert time.monotonic() - started < 15
    assert execution.error is not None and execution.error.name == "TimeoutError"
    assert execution.accounting.timed_out is True
    assert sandbox.run_code("'after the timeout'").text == "'after the timeout'"


def test_a_failing_callback_interrupts_the_cell(sandbox):
    def stop(message):
        raise KeyError("stop here")

    started = time.monotonic()
    with pytest.raises(KeyError):
        sandbox.run_code("import time\nprint('go', flush=True)\ntime.sleep(30)\ndone = True", on_stdout=stop)
    # The stream was closed at once: the daemon interrupted the cell, and the next one (queued
    # behind it in the same context) runs.
    assert sandbox.run_code("'done' in globals()").text == "False"
    assert time.monotonic() - started < 5


def test_contexts(sandbox):
    default = sandbox.list_contexts()
    assert default[0].id == sandbox.id and default[0].default

    ctx = sandbox.create_context(cwd="/tmp")
    assert isinstance(ctx, cellbox.Context)
    assert ctx.cwd == "/tmp" and ctx.language == "python" and not ctx.default
    assert [c.id for c in sandbox.list_contexts()] == [sandbox.id, ctx.id]

    sandbox.run_code("where = 'default'")
    sandbox.run_code("where = 'own'", context=ctx)
    assert sandbox.run_code("where").text == "'default'"
    assert sandbox.run_code("where", context=ctx).text == "'own'"
    assert sandbox.run_code("import os; os.getcwd()", context=ctx.id).text == "'/tmp'"

    restarted = sandbox.restart_context(ctx)
    assert restarted.id == ctx.id
    assert sandbox.run_code("'where' in globals()", context=ctx).text == "False"
    assert sandbox.run_code("where").text == "'default'"      # the others keep their state

    sandbox.remove_context(ctx)
    assert [c.id for c in sandbox.list_contexts()] == [sandbox.id]
    with pytest.raises(cellbox.NotFoundError):
        sandbox.run_code("1", context=ctx)
    with pytest.raises(cellbox.ConflictError, match="default context"):
        sandbox.remove_context(sandbox.id)
    with pytest.raises(cellbox.BadRequestError):
        sandbox.create_context(cwd="relative/dir")
    with pytest.raises(cellbox.BadRequestError):
        sandbox.run_code("1", context=sandbox.id, language="python")


def test_restart_default_context(fresh):
    fresh.run_code("value = 1")
    fresh.files.write("kept.txt", "workspace stays")
    fresh.restart_context(fresh.id)
    assert fresh.run_code("'value' in globals()").text == "False"
    assert fresh.files.read_text("kept.txt") == "workspace stays"


def test_concurrent_cells_in_two_contexts(sandbox):
    ctx = sandbox.create_context()
    results = {}

    def run(name, context):
        # each cell says when it ran (the sandbox's clock is the host's)
        code = "import time; began = time.time(); time.sleep(1); (began, time.time())"
        results[name] = ast.literal_eval(sandbox.run_code(code, context=context).text)

    threads = [threading.Thread(target=run, args=("a", None)), threading.Thread(target=run, args=("b", ctx))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (a_began, a_ended), (b_began, b_ended) = results["a"], results["b"]
    # one connection per call: the two cells ran side by side, their seconds overlap
    assert a_began < b_ended and b_began < a_ended, results
    sandbox.remove_context(ctx)
