"""An `execute_code` tool for LangChain-style agents, backed by a cellbox sandbox, without
importing LangChain: a name, a description, its arguments as a JSON schema, and a callable
that takes `code` and returns the text a model reads (stdout, the value of the last
expression, the error and its traceback).

    from cellbox.adapters.langchain import execute_code_tool

    tool = execute_code_tool()                 # creates a sandbox at first use
    tool("x = 6 * 7")
    tool("x")                                  # "42": state is kept between calls
    lc_tool = tool.as_langchain_tool()         # a StructuredTool, if langchain-core is installed
"""
from ..sandbox import Sandbox
from ._text import MAX_CHARS, execution_text

NAME = "execute_code"
DESCRIPTION = (
    "Run Python code in a stateful Jupyter-style kernel and return what it printed, the value "
    "of its last expression and any error with its traceback. The state is kept between calls: "
    "reuse variables, imports and data frames from earlier calls instead of recomputing them. "
    "pandas, numpy and matplotlib are available; files live in /workspace.")
ARGS_SCHEMA = {
    "type": "object",
    "properties": {
        "code": {
            "type": "string",
            "description": "The Python code to run: only the code itself, no Markdown fences.",
        },
    },
    "required": ["code"],
    "additionalProperties": False,
}


class ExecuteCodeTool:
    """The `execute_code` tool. sandbox: an existing Sandbox (left alone at the end); without
    it one is created at first use with Sandbox.create(**sandbox_options) and killed by
    close(). context: the context to run in; timeout_s: per call; max_chars: longest answer."""

    name = NAME
    description = DESCRIPTION
    args_schema = ARGS_SCHEMA

    def __init__(self, sandbox=None, *, context=None, timeout_s=None, max_chars=MAX_CHARS, **sandbox_options):
        self._sandbox = sandbox
        self._owns_sandbox = sandbox is None
        self._sandbox_options = {"timeout_s": 3600, **sandbox_options}
        self.context = context
        self.timeout_s = timeout_s
        self.max_chars = max_chars
        self.last_execution = None   # the Execution of the latest call, with its rich results

    @property
    def sandbox(self):
        if self._sandbox is None:
            self._sandbox = Sandbox.create(**self._sandbox_options)
        return self._sandbox

    def __call__(self, code):
        """Run `code`; return the text for the model."""
        self.last_execution = self.sandbox.run_code(code, context=self.context, timeout_s=self.timeout_s)
        return execution_text(self.last_execution, self.max_chars)

    run = __call__

    def invoke(self, tool_input):
        """LangChain's calling convention: a dict {"code": ...} or the code itself."""
        code = tool_input.get("code", "") if isinstance(tool_input, dict) else str(tool_input)
        return self(code)

    def openai_schema(self):
        """The tool as an OpenAI function-calling definition."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.args_schema}}

    def as_langchain_tool(self):
        """A langchain_core StructuredTool calling this one. Raises ImportError when
        langchain-core is not installed."""
        try:
            from langchain_core.tools import StructuredTool
        except ImportError as e:
            raise ImportError("as_langchain_tool() needs langchain-core (pip install langchain-core); "
                              "the tool itself works without it") from e

        def execute_code(code: str) -> str:
            return self(code)

        try:  # langchain-core 0.3 takes a JSON schema; older ones infer it from `code: str`
            return StructuredTool.from_function(func=execute_code, name=self.name, description=self.description,
                                                args_schema=self.args_schema)
        except Exception:  # noqa: BLE001 - whatever an older version raises about the dict
            return StructuredTool.from_function(func=execute_code, name=self.name, description=self.description)

    def close(self):
        """Kill the sandbox if this tool created it."""
        if self._owns_sandbox and self._sandbox is not None:
            self._sandbox.kill()
            self._sandbox = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def execute_code_tool(sandbox=None, **options):
    """An ExecuteCodeTool (see its arguments)."""
    return ExecuteCodeTool(sandbox, **options)


def as_langchain_tool(sandbox=None, **options):
    """A LangChain StructuredTool named execute_code (needs langchain-core)."""
    return ExecuteCodeTool(sandbox, **options).as_langchain_tool()
