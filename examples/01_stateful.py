#!/usr/bin/env python3
"""Stateful execution, as in the seed article: one cell sets `x = 1+2`, a later one prints x.

The model writes each cell as a ```python block in its message (as AutoGen's assistants do);
the blocks go to CellboxCodeExecutor, the AutoGen-style executor, which runs every Python
block in the same live kernel — so the second call still sees `x`.

    python3 examples/01_stateful.py                      # scripted model
    python3 examples/01_stateful.py --model gpt-4o-mini  # a real one (OPENAI_API_KEY, OPENAI_BASE_URL)
"""
import re
import sys

import _common

from cellbox.adapters.autogen import CellboxCodeExecutor, extract_code_blocks

SYSTEM = ("You write Python code for a stateful Jupyter kernel: variables persist between your "
          "messages. Answer with exactly one ```python code block and nothing else.")
TASKS = [
    "Compute x = 1+2 and print 'Round one: The calculation for the value of x is done.'",
    "Print 'Round two: Get the value of variable x again: x=' followed by x. Do not define x "
    "again: it still exists in the kernel.",
]
SCRIPT = [
    '```python\nx = 1+2\nprint("Round one: The calculation for the value of x is done.")\n```',
    '```python\nprint("Round two: Get the value of variable x again: x=", x)\n```',
]


def main(argv=None):
    args = _common.parse_args(__doc__.splitlines()[0], argv)
    model = _common.make_model(args, SCRIPT)
    outputs = []
    with CellboxCodeExecutor(output_dir=args.output_dir, **_common.cellbox_options(args)) as executor:
        print(f"sandbox {executor.sandbox.id}; model: {model.name}")
        for round_number, task in enumerate(TASKS, 1):
            _common.show(f"user (round {round_number})", task)
            reply = model.chat([{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}])
            _common.show(f"assistant ({model.name})", reply["content"])
            result = executor.execute_code_blocks(extract_code_blocks(reply["content"] or ""))
            _common.show(f"executor (exit code {result.exit_code})", result.output)
            outputs.append(result)
    if all(r.exit_code == 0 for r in outputs) and re.search(r"x\s*=\s*3\b", outputs[-1].output):
        print("OK: x was set in one call and read back in the next: the kernel kept its state")
        return 0
    print("FAILED: the second round did not print x = 3")
    return 1


if __name__ == "__main__":
    sys.exit(main())
