#!/usr/bin/env python3
"""A planner / coder / executor team taking turns, as in the seed article's AutoGen
RoundRobinGroupChat: the planner hands out one sub-task at a time, the coder answers with a
```python block, the executor runs it in the sandbox's kernel (CellboxCodeExecutor, the
AutoGen-style adapter) and posts the output; the planner looks at it and plans the next step,
until it writes the summary and TERMINATION.

Task: "Read the superstore.csv file and find the total sales for each region."

    python3 examples/04_round_robin.py                      # scripted planner and coder
    python3 examples/04_round_robin.py --model gpt-4o-mini  # both played by a real model
"""
import json
import os
import re
import sys
from textwrap import dedent

import _common

from cellbox.adapters.autogen import CellboxCodeExecutor, extract_code_blocks

TASK = "Read the superstore.csv file and find the total sales for each region."
MAX_MESSAGES = 20

PLANNER_PROMPT = dedent("""
    You are the task planning helper in the team, good at breaking down complex user requests into smaller sub-tasks that can be done with Python code.
    ## Duties
    1. **Only split tasks**, don't write code or do the sub-tasks yourself.
    2. **Make just one sub-task at a time**, don't skip steps or merge different steps together.
    3. **Think about the context**, use the results from earlier steps to make new and reasonable sub-tasks.
    4. **Create tasks step by step**, keep breaking things down until the user's original request is fully answered.
    5. When all sub-tasks are done, **make a summary report based on the work history**.
    6. At the very end, output "**TERMINATION**" as the finish signal.
    """).strip()
CODER_PROMPT = dedent("""
    You're a code helper in the team, good at writing Python code that can run in a stateful Jupyter Kernel based on the task you need to do.
    ## Responsibilities
    1. **Understand the task**: Clearly understand the analysis or data processing request you're given.
    2. **Write code step by step**: Build the code in small, growing steps, making full use of the Jupyter Kernel's stateful feature (meaning variables, data, and state stay between code blocks), and avoid running the same thing more than once.
    3. **Show the output clearly**: Make sure each piece of code shows or returns its result clearly so the team can see and check it.
    4. **Follow code format rules**: All Python code must be wrapped in Markdown code blocks like ```python to keep it easy to read and run.
    5. **Reuse context**: Let later code blocks use variables, data frames, models, and other things you set up earlier, without loading or starting them again.
    """).strip()


def planner_summary(history):
    table = history[-1]["content"]
    rows = re.findall(r"^\s*(\w+)\s+([\d.]+)\s*$", table, re.MULTILINE)
    lines = "\n".join(f"- {region}: {float(sales):,.2f}" for region, sales in rows)
    return (f"Summary report: superstore.csv was loaded into a DataFrame and the Sales column was "
            f"summed per Region:\n{lines}\n{rows[0][0]} has the highest total sales.\n\nTERMINATION")


PLANNER_SCRIPT = [
    "Sub-task 1: Load superstore.csv into a pandas DataFrame and show the first 5 rows of its first 6 columns.",
    "Sub-task 2: Using the DataFrame already loaded, compute the total Sales for each Region, rounded "
    "to cents, sorted from highest to lowest, and print it as a table.",
    planner_summary,
]
CODER_SCRIPT = [
    dedent('''
        ```python
        from pathlib import Path
        import pandas as pd
        file_path = Path("superstore.csv")
        df = pd.read_csv(file_path)
        print(df.iloc[:5, :6].head())
        ```''').strip(),
    dedent('''
        ```python
        region_sales_sum = df.groupby("Region", as_index=False)["Sales"].sum()
        region_sales_sum["Sales"] = region_sales_sum["Sales"].round(2)
        region_sales_sum = region_sales_sum.sort_values("Sales", ascending=False)
        print(region_sales_sum.to_string(index=False))
        ```''').strip(),
]


class Assistant:
    """A team member backed by a model: it sees the whole conversation, its own messages as
    the assistant's and everyone else's as the user's, named."""

    def __init__(self, name, system_prompt, model):
        self.name, self.system_prompt, self.model = name, system_prompt, model

    def speak(self, history):
        if isinstance(self.model, _common.ScriptedModel):   # the script reads the history itself
            return self.model.chat(history)["content"]
        messages = [{"role": "system", "content": self.system_prompt}]
        for turn in history:
            if turn["source"] == self.name:
                messages.append({"role": "assistant", "content": turn["content"]})
            else:
                messages.append({"role": "user", "content": f"[{turn['source']}]\n{turn['content']}"})
        return self.model.chat(messages)["content"] or ""


class Executor:
    """AutoGen's CodeExecutorAgent: runs the code blocks of the latest message."""

    name = "code_executor"

    def __init__(self, executor):
        self.executor = executor

    def speak(self, history):
        blocks = extract_code_blocks(history[-1]["content"])
        if not blocks:  # AutoGen's words
            return ("No code blocks found in the thread. Please provide at least one markdown-encoded "
                    "code block to execute.")
        result = self.executor.execute_code_blocks(blocks)
        if result.exit_code == 0:
            return result.output
        return f"The script ran but failed (exit code {result.exit_code}):\n{result.output}"


def main(argv=None):
    args = _common.parse_args(__doc__.splitlines()[0], argv)
    os.makedirs(args.output_dir, exist_ok=True)
    scripted = not args.model
    planner = Assistant("task_planner", PLANNER_PROMPT, _common.make_model(args, PLANNER_SCRIPT))
    coder = Assistant("code_writer", CODER_PROMPT, _common.make_model(args, CODER_SCRIPT))
    history = [{"source": "user", "content": TASK}]
    with CellboxCodeExecutor(output_dir=args.output_dir, timeout=120, **_common.cellbox_options(args)) as executor:
        with open(_common.SUPERSTORE, "rb") as csv_file:
            executor.sandbox.files.write("superstore.csv", csv_file)
        print(f"sandbox {executor.sandbox.id}; superstore.csv uploaded; planner and coder: "
              f"{'script' if scripted else args.model}")
        _common.show("user", TASK)
        team = [planner, coder, Executor(executor)]
        terminated = False
        while len(history) < MAX_MESSAGES and not terminated:
            member = team[(len(history) - 1) % len(team)]
            content = member.speak(history)
            history.append({"source": member.name, "content": content})
            _common.show(member.name, content)
            terminated = member is planner and "TERMINATION" in content
    with open(os.path.join(args.output_dir, "round_robin.json"), "w") as f:
        json.dump({"terminated": terminated, "messages": history}, f, indent=2)
    if terminated:
        print(f"OK: the team finished in {len(history) - 1} turns; the planner wrote TERMINATION")
        return 0
    print(f"FAILED: no TERMINATION after {MAX_MESSAGES} messages")
    return 1


if __name__ == "__main__":
    sys.exit(main())
