"""The adapters: AutoGen's code-executor shape (sync and async), the LangChain-style
execute_code tool, and OpenAI function calling — none of them needing those packages."""
import asyncio
import json
import sys
from types import SimpleNamespace

import pytest

import cellbox
from cellbox.adapters import execution_text
from cellbox.adapters.autogen import (AsyncCellboxCodeExecutor, CellboxCodeExecutor, CellboxCodeResult,
                                      CodeBlock, extract_code_blocks)
from cellbox.adapters.langchain import ARGS_SCHEMA, ExecuteCodeTool, as_langchain_tool, execute_code_tool
from cellbox.adapters.openai import TOOL_SCHEMA, handle_tool_call, handle_tool_calls, parse_tool_call

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------------- AutoGen

def test_autogen_executor_keeps_state_and_cleans_up(conn, tmp_path):
    out = tmp_path / "images" / "here"
    with CellboxCodeExecutor(output_dir=out, timeout=20, **conn) as executor:
        assert out.is_dir()
        sid = executor.sandbox.id
        first = executor.execute_code_blocks([CodeBlock(code="x = 1+2\nprint('Round one done')", language="python")])
        assert isinstance(first, CellboxCodeResult)
        assert (first.exit_code, first.output, first.output_files) == (0, "Round one done", [])
        # dict blocks and objects with .code/.language; state carried between calls
        second = executor.execute_code_blocks([{"code": "print('x =', x)", "language": "python"},
                                               SimpleNamespace(code="echo from bash; ls /workspace", language="bash")])
        assert second.exit_code == 0 and second.output.startswith("x = 3\nfrom bash")

        chart = executor.execute_code_blocks([CodeBlock(
            "import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.show()\n'value'")])
        assert chart.exit_code == 0 and len(chart.output_files) == 1
        image = chart.output_files[0]
        assert image.parent == out and image.read_bytes().startswith(PNG_MAGIC)
        assert f"Image data saved to {image}" in chart.output and "'value'" in chart.output

        stopped = executor.execute_code_blocks([CodeBlock("print('before')"), CodeBlock("1/0"),
                                                CodeBlock("print('never')")])
        assert stopped.exit_code == 1
        assert "before" in stopped.output and "ERROR: ZeroDivisionError: division by zero" in stopped.output
        assert "never" not in stopped.output and "\x1b[" not in stopped.output

        shell = executor.execute_code_blocks([CodeBlock("echo partial; exit 3", "sh"), CodeBlock("print('never')")])
        assert (shell.exit_code, shell.output) == (3, "partial")
        unknown = executor.execute_code_blocks([CodeBlock("puts 1", "ruby")])
        assert unknown.exit_code == 1 and "unknown language" in unknown.output

        executor.restart()
        after = executor.execute_code_blocks([CodeBlock("print(x)")])
        assert after.exit_code == 1 and "NameError" in after.output
    assert not cellbox.Sandbox(sid, **conn).is_running()      # the executor's own sandbox is gone


def test_autogen_timeouts(conn):
    with CellboxCodeExecutor(timeout=1, **conn) as executor:
        slow = executor.execute_code_blocks([CodeBlock("import time; time.sleep(30)")])
        assert slow.exit_code == 124 and slow.output.endswith("Timeout")
        slow_shell = executor.execute_code_blocks([CodeBlock("sleep 30", "bash")])
        assert slow_shell.exit_code == 124 and slow_shell.output.endswith("Timeout")
        assert executor.execute_code_blocks([CodeBlock("print('alive')")]).output == "alive"


def test_autogen_executor_on_a_given_sandbox_and_context(sandbox, tmp_path):
    ctx = sandbox.create_context()
    executor = CellboxCodeExecutor(sandbox, context=ctx, output_dir=tmp_path)
    with executor:
        executor.execute_code_blocks([CodeBlock("mine = 'ctx'")])
        assert executor.execute_code_blocks([CodeBlock("print(mine)")]).output == "ctx"
    assert sandbox.is_running()                                 # not ours to kill
    assert sandbox.run_code("'mine' in globals()").text == "False"
    sandbox.remove_context(ctx)


def test_autogen_async_executor(conn):
    class Token:                                                # autogen-core's CancellationToken shape
        linked = []

        def link_future(self, future):
            self.linked.append(future)
            return future

    async def main():
        async with AsyncCellboxCodeExecutor(**conn) as executor:
            await executor.execute_code_blocks([CodeBlock("n = 5")], cancellation_token=Token())
            result = await executor.execute_code_blocks([{"code": "print(n * 2)", "language": "python"}],
                                                        cancellation_token=Token())
            assert (result.exit_code, result.output) == (0, "10")
            assert len(Token.linked) == 2 and executor.output_dir.is_dir() and executor.timeout == 60
            await executor.restart()
            assert (await executor.execute_code_blocks([CodeBlock("print(n)")])).exit_code == 1
            return executor.sync.sandbox.id

    sid = asyncio.run(main())
    assert not cellbox.Sandbox(sid, **conn).is_running()


def test_extract_code_blocks():
    text = ("Here you go:\n```python\nx = 1\nprint(x)\n```\nand\n```bash\nls -l\n```\n"
            "then\n```\nprint('no language')\n```")
    blocks = extract_code_blocks(text)
    assert [(b.language, b.code) for b in blocks] == [("python", "x = 1\nprint(x)\n"), ("bash", "ls -l\n"),
                                                      ("python", "print('no language')\n")]
    assert extract_code_blocks("no code here") == []


# ---------------------------------------------------------------------------- LangChain

def test_execute_code_tool(conn, sandbox):
    tool = execute_code_tool(sandbox)
    assert isinstance(tool, ExecuteCodeTool)
    assert tool.name == "execute_code" and "stateful" in tool.description
    assert tool.args_schema == ARGS_SCHEMA and ARGS_SCHEMA["required"] == ["code"]
    assert tool.args_schema["properties"]["code"]["type"] == "string"
    assert tool.openai_schema()["function"]["parameters"] is ARGS_SCHEMA

    assert tool("import pandas as pd\ndf = pd.DataFrame({'v': [1, 2, 3]})\nprint('loaded')") == "loaded"
    assert tool.invoke({"code": "df.v.sum()"}) == "6"
    assert tool.run("print('out')\ndf.v.max()") == "out\n3"
    assert tool.invoke("print('plain string input')") == "plain string input"
    assert tool("y = 1") == "(the code ran without output)"
    error = tool("import sys\nprint('partial')\nprint('warn', file=sys.stderr)\ndf.nope")
    assert error.startswith("partial\n[stderr]\nwarn\nError:")
    assert "AttributeError" in error and "'DataFrame' object has no attribute 'nope'" in error
    assert "\x1b[" not in error
    chart = tool("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()")
    assert chart == "[image/png displayed]"
    assert tool.last_execution.results[0].png
    assert "characters cut" in tool("print('x' * 20000)") and len(tool.last_execution.stdout) == 20001
    tool.close()
    assert sandbox.is_running()                                 # given, so not killed


def test_execute_code_tool_owns_its_sandbox(conn):
    with ExecuteCodeTool(timeout_s=1, **conn) as tool:
        assert tool("1 + 1") == "2"
        assert "TimeoutError" in tool("import time; time.sleep(30)")
        sid = tool.sandbox.id
    assert not cellbox.Sandbox(sid, **conn).is_running()


def test_as_langchain_tool_without_langchain(conn, monkeypatch):
    monkeypatch.setitem(sys.modules, "langchain_core", None)   # not installed
    monkeypatch.setitem(sys.modules, "langchain_core.tools", None)
    with pytest.raises(ImportError, match="langchain-core"):
        execute_code_tool(**conn).as_langchain_tool()
    with pytest.raises(ImportError):
        as_langchain_tool(**conn)


def test_as_langchain_tool_with_a_stand_in(monkeypatch, sandbox):
    made = {}

    class StructuredTool:
        @classmethod
        def from_function(cls, func, name, description, args_schema=None):
            made.update(func=func, name=name, description=description, args_schema=args_schema)
            return "lc-tool"

    fake = SimpleNamespace(tools=SimpleNamespace(StructuredTool=StructuredTool))
    monkeypatch.setitem(sys.modules, "langchain_core", fake)
    monkeypatch.setitem(sys.modules, "langchain_core.tools", fake.tools)
    assert execute_code_tool(sandbox).as_langchain_tool() == "lc-tool"
    assert made["name"] == "execute_code" and made["args_schema"] == ARGS_SCHEMA
    assert made["func"](code="21 * 2") == "42"


# ---------------------------------------------------------------------------- OpenAI

def test_openai_tool_schema():
    assert TOOL_SCHEMA["type"] == "function"
    function = TOOL_SCHEMA["function"]
    assert function["name"] == "execute_python" and function["description"]
    assert function["parameters"]["required"] == ["code"]
    json.dumps(TOOL_SCHEMA)                                     # plain JSON, ready to send


def test_handle_tool_call_dict_and_object(sandbox):
    call = {"id": "call_1", "type": "function",
            "function": {"name": "execute_python", "arguments": json.dumps({"code": "fib = [0, 1]\nprint('ok')"})}}
    assert handle_tool_call(call, sandbox) == {"role": "tool", "tool_call_id": "call_1", "content": "ok"}
    # the openai package's objects: attributes instead of keys
    obj = SimpleNamespace(id="call_2", type="function",
                          function=SimpleNamespace(name="execute_python",
                                                   arguments='{"code": "fib.append(fib[-1] + fib[-2])\\nfib"}'))
    assert handle_tool_call(obj, sandbox) == {"role": "tool", "tool_call_id": "call_2", "content": "[0, 1, 1]"}
    message = {"role": "assistant", "content": None, "tool_calls": [call, obj]}
    assert [m["tool_call_id"] for m in handle_tool_calls(message, sandbox)] == ["call_1", "call_2"]
    assert handle_tool_calls({"role": "assistant", "content": "no tools"}, sandbox) == []
    assert parse_tool_call(call) == ("call_1", "execute_python", {"code": "fib = [0, 1]\nprint('ok')"})


def test_handle_tool_call_errors_go_back_to_the_model(sandbox):
    bad_json = {"id": "c1", "function": {"name": "execute_python", "arguments": "{not json"}}
    reply = handle_tool_call(bad_json, sandbox)
    assert reply["tool_call_id"] == "c1" and reply["content"].startswith("Error: the arguments are not valid JSON")
    wrong_tool = {"id": "c2", "function": {"name": "browse", "arguments": "{}"}}
    assert "unknown tool 'browse'" in handle_tool_call(wrong_tool, sandbox)["content"]
    no_code = {"id": "c3", "function": {"name": "execute_python", "arguments": '{"src": "1"}'}}
    assert "'code' argument" in handle_tool_call(no_code, sandbox)["content"]
    not_object = {"id": "c4", "function": {"name": "execute_python", "arguments": "[1]"}}
    assert "JSON object" in handle_tool_call(not_object, sandbox)["content"]
    raised = {"id": "c5", "function": {"name": "execute_python", "arguments": '{"code": "raise ValueError(7)"}'}}
    content = handle_tool_call(raised, sandbox)["content"]
    assert content.startswith("Error:") and "ValueError: 7" in content


def test_execution_text_formats():
    execution = cellbox.Execution(
        results=[cellbox.Result(text="<Figure>", png="iVBOR"), cellbox.Result(html="<table>", text=""),
                 cellbox.Result(text="'main'", is_main_result=True)],
        logs=cellbox.Logs(stdout=["a\n", "b\n"], stderr=[]),
        error=cellbox.ExecutionError("KeyError", "'k'", ""))
    assert execution_text(execution) == "a\nb\n[image/png displayed]\n[text/html displayed]\n'main'\nError: KeyError: 'k'"
    assert execution_text(cellbox.Execution()) == "(the code ran without output)"
    long = execution_text(cellbox.Execution(logs=cellbox.Logs(stdout=["y" * 100]), results=[]), max_chars=30)
    assert long.startswith("y" * 20) and long.endswith("y" * 10) and "70 characters cut" in long


def test_adapters_import_no_third_party_packages():
    import ast
    import os

    root = os.path.dirname(cellbox.__file__)
    stdlib = set(sys.stdlib_module_names)
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            if not name.endswith(".py"):
                continue
            path = os.path.join(dirpath, name)
            tree = ast.parse(open(path).read())
            top_level = {id(n) for n in tree.body}
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    modules = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    modules = [node.module]
                else:
                    continue
                for module in modules:
                    base = module.split(".")[0]
                    if base in stdlib or base == "cellbox":
                        continue
                    # only optional ones, never at the top level: langchain_core inside
                    # as_langchain_tool, autogen_core and pydantic under try/except ImportError
                    assert base in ("langchain_core", "autogen_core", "pydantic") and id(node) not in top_level, \
                        f"{path}: imports {module}"
