#!/usr/bin/env python3
"""Fibonacci through OpenAI function calling, as in the seed article's agent: the user asks for
the 14th Fibonacci number, the model calls the `execute_python` tool, cellbox runs the code,
the tool message goes back, and the model answers.

The tool definition is cellbox.adapters.openai.TOOL_SCHEMA and every tool call goes through
handle_tool_call(tool_call, sandbox) -> {"role": "tool", "tool_call_id", "content"}.

    python3 examples/03_fibonacci_openai_tool.py                      # scripted model
    python3 examples/03_fibonacci_openai_tool.py --model gpt-4o-mini  # a real one
"""
import re
import sys

import _common

from cellbox import Sandbox
from cellbox.adapters.openai import TOOL_NAME, TOOL_SCHEMA, handle_tool_call

QUESTION = "Calculate the value of the 14th Fibonacci number."
SYSTEM = ("You are a data analysis assistant, good at solving user questions with Python code. "
          "Use the execute_python tool to run code (count Fibonacci numbers from F(1) = F(2) = 1), "
          "and summarise the results as the answer.")
CODE = '''def fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a

print([fib(i) for i in range(1, 15)])
fib(14)'''


def final_answer(messages):
    value = _common.last_tool_output(messages).splitlines()[-1]
    return f"The 14th Fibonacci number is {value}."


SCRIPT = [_common.tool_call("call_fib_1", TOOL_NAME, CODE), final_answer]


def main(argv=None):
    args = _common.parse_args(__doc__.splitlines()[0], argv)
    model = _common.make_model(args, SCRIPT)
    with Sandbox.create(**_common.cellbox_options(args)) as sandbox:
        print(f"sandbox {sandbox.id}; model: {model.name}")
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
        _common.show("user", QUESTION)
        answer = _common.tool_calls_loop(model, messages, [TOOL_SCHEMA],
                                         lambda call: handle_tool_call(call, sandbox))
    used_tool = any(m.get("role") == "tool" for m in messages)
    if used_tool and re.search(r"\b377\b", answer):
        print("OK: the model used the tool and answered 377")
        return 0
    print(f"FAILED: {'no tool call; ' if not used_tool else ''}the answer does not say 377")
    return 1


if __name__ == "__main__":
    sys.exit(main())
