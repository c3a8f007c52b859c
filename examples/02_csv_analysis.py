#!/usr/bin/env python3
"""CSV analysis, as in the seed articles: upload a superstore sales CSV into a sandbox, then
let the model explore it cell by cell in one live kernel — load it with pandas and look at
df.head() (an HTML table), total the sales by region, draw a bar chart (a PNG) and print the
totals.

The model calls the `execute_code` tool (cellbox.adapters.langchain, the tool of the seed's
LangChain agent) through OpenAI-style function calling; the rich results of each call are kept:
the table is written to head.html and the chart to region_sales.png in --output-dir, the totals
to region_totals.json.

    python3 examples/02_csv_analysis.py                      # scripted model
    python3 examples/02_csv_analysis.py --model gpt-4o-mini  # a real one (OPENAI_API_KEY, OPENAI_BASE_URL)
"""
import json
import os
import sys

import _common

from cellbox import Sandbox
from cellbox.adapters.langchain import execute_code_tool
from cellbox.adapters.openai import parse_tool_call

TASK = ("The sales data is in superstore.csv (in the working directory). Load it with pandas and "
        "show the first rows; compute the total Sales and Profit per Region; draw a bar chart of "
        "sales by region, save it as region_sales.png and show it; finally print, as one line of "
        "JSON, {\"regions\": {region: total sales}, \"total_sales\": ..., \"total_profit\": ..., "
        "\"orders\": number of distinct Order IDs, \"rows\": ...} with amounts rounded to cents. "
        "Then summarise the result.")
SYSTEM = ("You are a data analysis assistant. You solve the user's questions with Python, using "
          "the execute_code tool: it runs your code in a stateful Jupyter kernel, so look at the "
          "data first and build on earlier results. Summarise the results as the answer.")

LOAD = '''import pandas as pd
df = pd.read_csv("superstore.csv", parse_dates=["Order Date", "Ship Date"])
print(df.shape)
df.head()'''
GROUP = '''region_sales = (df.groupby("Region")[["Sales", "Profit"]].sum()
                .round(2).sort_values("Sales", ascending=False))
region_sales'''
CHART = '''import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(8, 4.5))
region_sales["Sales"].plot.bar(ax=ax, color="#4C72B0", rot=0)
ax.set_title("Total sales by region")
ax.set_ylabel("Sales (USD)")
for i, value in enumerate(region_sales["Sales"]):
    ax.annotate(f"{value:,.0f}", (i, value), ha="center", va="bottom")
plt.tight_layout()
plt.savefig("region_sales.png", dpi=100)
plt.show()'''
TOTALS = '''import json
totals = {
    "regions": {region: round(float(sales), 2) for region, sales in region_sales["Sales"].items()},
    "total_sales": round(float(df["Sales"].sum()), 2),
    "total_profit": round(float(df["Profit"].sum()), 2),
    "orders": int(df["Order ID"].nunique()),
    "rows": len(df),
}
print(json.dumps(totals))'''


def summary(messages):
    totals = json.loads(_common.last_tool_output(messages).splitlines()[-1])
    best = max(totals["regions"], key=totals["regions"].get)
    lines = [f"- {region}: ${sales:,.2f}" for region, sales in totals["regions"].items()]
    return (f"{totals['rows']} order lines ({totals['orders']} orders) total ${totals['total_sales']:,.2f} in sales "
            f"and ${totals['total_profit']:,.2f} in profit. Sales by region:\n" + "\n".join(lines) +
            f"\n{best} sells the most. The chart is in region_sales.png.")


SCRIPT = [_common.tool_call("call_load", "execute_code", LOAD),
          _common.tool_call("call_group", "execute_code", GROUP),
          _common.tool_call("call_chart", "execute_code", CHART),
          _common.tool_call("call_totals", "execute_code", TOTALS),
          summary]


def main(argv=None):
    args = _common.parse_args(__doc__.splitlines()[0], argv)
    os.makedirs(args.output_dir, exist_ok=True)
    model = _common.make_model(args, SCRIPT)
    executions = []
    with Sandbox.create(**_common.cellbox_options(args)) as sandbox:
        with open(_common.SUPERSTORE, "rb") as csv_file:
            entry = sandbox.files.write("superstore.csv", csv_file)
        print(f"sandbox {sandbox.id}; uploaded {entry.path} ({entry.size} bytes); model: {model.name}")
        tool = execute_code_tool(sandbox)

        def run_tool(call):
            call_id, name, arguments = parse_tool_call(call)
            content = tool.invoke(arguments) if name == tool.name else f"Error: unknown tool {name!r}"
            executions.append(tool.last_execution)
            return {"role": "tool", "tool_call_id": call_id, "content": content}

        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
        _common.show("user", TASK)
        answer = _common.tool_calls_loop(model, messages, [tool.openai_schema()], run_tool)
    return report(args.output_dir, executions, answer)


def report(output_dir, executions, answer):
    """Keep what the cells produced: the first HTML table, the last chart, the totals."""
    results = [r for e in executions if e for r in e.results]
    html = next((r for r in results if r.html), None)
    chart = next((r for r in reversed(results) if r.png), None)
    if html:
        print(f"df.head() as HTML: {html.save_html(os.path.join(output_dir, 'head.html'))}")
    if chart:
        print(f"chart: {chart.save_png(os.path.join(output_dir, 'region_sales.png'))}")
    totals = None
    for execution in reversed([e for e in executions if e]):
        for line in reversed(execution.stdout.splitlines()):
            try:
                candidate = json.loads(line)
            except ValueError:
                continue
            if isinstance(candidate, dict) and "regions" in candidate:
                totals = candidate
                break
        if totals:
            break
    if totals:
        path = os.path.join(output_dir, "region_totals.json")
        with open(path, "w") as f:
            json.dump(totals, f, indent=2)
        print(f"totals: {path}")
        for region, sales in totals["regions"].items():
            print(f"  {region:<8} {sales:>14,.2f}")
        print(f"  {'total':<8} {totals['total_sales']:>14,.2f}")
    if html and chart and totals and answer:
        print("OK: loaded, looked at, grouped, charted and totalled in one stateful kernel")
        return 0
    print("FAILED: " + ", ".join(what for what, got in (("no HTML table", html), ("no chart", chart),
                                                           ("no totals", totals), ("no answer", answer)) if not got))
    return 1


if __name__ == "__main__":
    sys.exit(main())
