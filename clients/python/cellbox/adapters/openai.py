"""OpenAI function calling with a cellbox sandbox: the tool definition to send with a chat
completion request, and the handler that runs a tool call and makes the tool message.

    from cellbox import Sandbox
    from cellbox.adapters.openai import TOOL_SCHEMA, handle_tool_call

    response = client.chat.completions.create(model=..., messages=messages, tools=[TOOL_SCHEMA])
    message = response.choices[0].message
    messages.append(message)
    for call in message.tool_calls or []:
        messages.append(handle_tool_call(call, sandbox))

Tool calls may be the openai package's objects or plain dicts (as in the JSON of
/chat/completions); nothing here imports openai.
"""
import json

from ._text import MAX_CHARS, execution_text

TOOL_NAME = "execute_python"
TOOL_SCHEMA = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": (
            "Execute Python code in a stateful Jupyter-style kernel and get back its printed output, "
            "the value of its last expression and any error with its traceback. Variables, imports "
            "and data frames persist between calls. pandas, numpy and matplotlib are available; "
            "files live in /workspace."),
        "parameters": {
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": "The Python code to execute (no Markdown fences)."},
            },
            "required": ["code"],
            "additionalProperties": False,
        },
    },
}


def _get(obj, name, default=None):
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def parse_tool_call(tool_call):
    """(id, function name, arguments dict) of a tool call object or dict. Raises ValueError
    when the arguments are not a JSON object."""
    function = _get(tool_call, "function") or {}
    arguments = _get(function, "arguments") or "{}"
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError as e:
            raise ValueError(f"the arguments are not valid JSON ({e}): {arguments[:200]!r}") from None
    if not isinstance(arguments, dict):
        raise ValueError(f"the arguments must be a JSON object, got {type(arguments).__name__}")
    return _get(tool_call, "id"), _get(function, "name"), arguments


def handle_tool_call(tool_call, sandbox, context=None, timeout_s=None, max_chars=MAX_CHARS):
    """Run the code of an execute_python tool call in `sandbox` and return the tool message
    {"role": "tool", "tool_call_id", "content"}. A malformed call is answered with a message
    that says what is wrong (so that the model can fix it), not an exception."""
    call_id = _get(tool_call, "id")
    try:
        call_id, name, arguments = parse_tool_call(tool_call)
        if name != TOOL_NAME:
            raise ValueError(f"unknown tool {name!r}: the only tool is {TOOL_NAME}")
        code = arguments.get("code")
        if not isinstance(code, str):
            raise ValueError("the 'code' argument (a string) is missing")
    except ValueError as e:
        return {"role": "tool", "tool_call_id": call_id, "content": f"Error: {e}"}
    execution = sandbox.run_code(code, context=context, timeout_s=timeout_s)
    return {"role": "tool", "tool_call_id": call_id, "content": execution_text(execution, max_chars)}


def handle_tool_calls(message, sandbox, **options):
    """The tool messages answering every tool call of an assistant message (object or dict)."""
    return [handle_tool_call(call, sandbox, **options) for call in (_get(message, "tool_calls") or [])]
