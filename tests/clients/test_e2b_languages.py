"""E2B's SDK (@e2b/code-interpreter), unchanged, running JavaScript, TypeScript, Bash and R in
cellboxd (issue 23): runCode(code, {language}) under each name E2B gives a language, its results
(text, html, png), errors (name, traceback), createCodeContext({language}) keeping state apart
from the language's default context, and onStdout in order. The script
(tests/clients/node/e2b_languages.mjs) reports what the SDK returned; every step is checked here.

The npm packages come from `scripts/install-deps.sh test` (npm ci in tests/clients/node)."""
import re

import pytest

from helpers.languages import BASH, JAVASCRIPT, R, TYPESCRIPT, missing_runtime
from helpers.node_clients import assert_every_step_passed, run_e2b_script

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no E2B API

TIMEOUT = 240
E2B_NAMES = {JAVASCRIPT: "js", TYPESCRIPT: "ts", BASH: "bash", R: "r"}


def test_sdk_runs_every_language(daemon):
    names = [E2B_NAMES[lang] for lang in E2B_NAMES if not missing_runtime(lang)]
    proc, steps, detail = run_e2b_script(daemon, "e2b_languages.mjs", TIMEOUT,
                                         env={"CELLBOX_LANGUAGES": ",".join(names)})
    expected = ["create", "kill"]
    if "js" in names:
        expected += ["value_js", "value_javascript", "state_js", "rich_js", "error_js",
                     "stdout_order_js", "context_js"]
    if "ts" in names:
        expected += ["value_ts", "value_typescript", "error_ts"]
    if "bash" in names:
        expected += ["value_bash", "state_bash", "error_bash", "stdout_order_bash", "context_bash"]
    if "r" in names:
        expected += ["value_r", "rich_r", "error_r"]
    assert_every_step_passed(proc, steps, detail, expected)

    def ran_clean(name):
        assert steps[name]["error"] is None, f"{name}: {steps[name]}\n{detail}"
        return steps[name]

    if "js" in names:
        assert ran_clean("value_js")["text"] == "42", detail
        assert ran_clean("value_javascript")["text"] == "42", detail
        assert ran_clean("state_js")["text"] == "42", detail
        rich = ran_clean("rich_js")
        assert any("<b>bold</b>" in h for h in rich["html"]) and rich["png"], rich
        assert rich["text"] == "'done'", rich
        error = steps["error_js"]["error"]
        assert error["name"] == "RangeError" and "out of range" in error["value"], error
        assert "fail" in error["traceback"], error
        order = ran_clean("stdout_order_js")
        assert "".join(order["lines"]) == "line 0\nline 1\nline 2\n", order  # in order, however chunked
        assert order["text"] == "'end'", order
        context = steps["context_js"]
        assert context["language"] in ("js", "javascript"), context
        assert context["there"]["text"] == "'only here'", context
        assert context["elsewhere"]["text"] == "'undefined'", context  # another kernel's state
    if "ts" in names:
        assert ran_clean("value_ts")["text"] == "42", detail
        assert ran_clean("value_typescript")["text"] == "42", detail
        error = steps["error_ts"]["error"]
        assert error["name"] == "TypeError" and "typed boom" in error["value"], error
        assert error["traceback"], error
    if "bash" in names:
        value = ran_clean("value_bash")
        assert value["stdout"] == "42\n" and value["text"] is None, value
        assert ran_clean("state_bash")["stdout"] == "42 /tmp\n", steps["state_bash"]
        error = steps["error_bash"]
        assert error["stdout"] == "before\n", error
        assert error["error"] and re.search(r"\b1\b", error["error"]["value"] + error["error"]["traceback"]), error
        order = ran_clean("stdout_order_bash")
        assert "".join(order["lines"]) == "line 0\nline 1\nline 2\n", order  # in order, however chunked
        context = steps["context_bash"]
        assert context["language"] == "bash", context
        assert context["there"]["stdout"] == "yes\n" and context["elsewhere"]["stdout"] == "unset\n", context
    if "r" in names:
        value = ran_clean("value_r")
        # IRkernel shows a value as display_data: a result, not always the main one
        assert "[1] 42" in [value["text"]] + value["texts"], value
        rich = steps["rich_r"]
        assert rich["frame"]["error"] is None and any("<table" in h for h in rich["frame"]["html"]), rich
        assert rich["plot"]["error"] is None and rich["plot"]["png"], rich
        error = steps["error_r"]["error"]
        assert error and "r says no" in error["value"] and error["traceback"], steps["error_r"]
