"""`result.chart`: the structured chart of each matplotlib figure a cell shows, on every route a
figure takes (runtime/python/cellbox_kernel/charts.py extracts it; model/execution.c names it).

- E2B's code interpreter SDK, unchanged (tests/clients/node/e2b_charts.mjs): runCode with a
  line, dates on an axis, scatter, bar, pie, box plot and subplots; each chart's type, title,
  labels, units, scales and values checked here; the chart in onResult; none without a figure.
- /v1's execution stream: the same `chart` key, checked against docs/openapi.yaml.
- MCP's run_code: the chart as a line of JSON in the tool's text, beside the PNG.

The npm packages come from `scripts/install-deps.sh test` (npm ci in tests/clients/node)."""
import json
import os
import sys

import pytest
import requests

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "api"))

from helpers.v1 import V1  # noqa: E402
from helpers.node_clients import assert_every_step_passed, run_e2b_script  # noqa: E402
from openapi_spec import Spec  # noqa: E402

pytestmark = pytest.mark.cellbox_only  # Jupyter Server has no E2B API

TIMEOUT = 180

LINE_ELEMENTS = [{"label": "speed", "points": [[1, 4], [2, 5], [3, 6]]},
                 {"label": "Line 1", "points": [[1, 1], [2, 1], [3, 2]]}]


def test_sdk_reads_each_kind_of_chart(daemon):
    proc, steps, detail = run_e2b_script(daemon, "e2b_charts.mjs", TIMEOUT)
    expected = ["create", "line", "dates", "scatter", "bar", "pie", "box", "superchart",
                "on_result", "no_figure", "kill"]
    assert_every_step_passed(proc, steps, detail, expected)

    for name in ("line", "dates", "scatter", "bar", "pie", "box", "superchart"):
        # The chart is the SDK's own field: not a format of its own, nothing left in extra.
        assert steps[name]["figures"] == 1 and steps[name]["error"] is None, steps[name]
        assert "png" in steps[name]["formats"] and "chart" not in steps[name]["formats"]
        assert steps[name]["extra"] == {}, steps[name]

    line = steps["line"]["chart"]
    assert {k: line[k] for k in ("type", "title", "x_label", "y_label", "x_unit", "y_unit",
                                 "x_scale", "y_scale")} == {
        "type": "line", "title": "Runs", "x_label": "Time (s)", "y_label": "Distance [km]",
        "x_unit": "s", "y_unit": "km", "x_scale": "linear", "y_scale": "linear"}
    assert line["elements"] == LINE_ELEMENTS
    assert len(line["x_ticks"]) == len(line["x_tick_labels"]) > 2
    assert "2.00" in line["x_tick_labels"]

    dates = steps["dates"]["chart"]
    assert dates["x_scale"] == "datetime" and dates["title"] is None
    assert dates["elements"] == [{"label": "visits", "points": [
        ["2024-03-01", 10], ["2024-03-02", 20], ["2024-03-03", 15]]}]
    assert all(tick.startswith("2024-03-0") for tick in dates["x_ticks"]), dates["x_ticks"]

    scatter = steps["scatter"]["chart"]
    assert (scatter["title"], scatter["x_label"], scatter["y_label"]) == ("Dots", "x", "y")
    assert scatter["elements"] == [{"label": "a", "points": [[1, 3], [2, 1], [3, 2]]}]

    bar = steps["bar"]["chart"]
    assert (bar["title"], bar["x_label"], bar["y_label"]) == (
        "Book Sales", "Authors", "Number of Books Sold")
    assert bar["elements"] == [{"label": f"Author {c}", "group": "Books Sold", "value": v}
                               for c, v in (("A", 100), ("B", 200), ("C", 300))]

    assert steps["pie"]["chart"] == {"type": "pie", "title": "Will I wake up early?", "elements": [
        {"label": "No", "angle": 324, "radius": 1}, {"label": "No, in blue", "angle": 36, "radius": 1}]}

    box = steps["box"]["chart"]
    assert (box["title"], box["x_label"], box["y_label"]) == ("Scores", "Class", "Score")
    assert box["elements"] == [
        {"label": "A", "min": 78, "first_quartile": 85, "median": 88, "third_quartile": 90,
         "max": 92, "outliers": []},
        {"label": "B", "min": 76, "first_quartile": 80, "median": 87, "third_quartile": 90,
         "max": 95, "outliers": [40]}]

    superchart = steps["superchart"]["chart"]
    assert (superchart["type"], superchart["title"]) == ("superchart", "Two views")
    assert [(c["type"], c["title"]) for c in superchart["elements"]] == [("line", "Line"),
                                                                        ("bar", "Bars")]
    assert superchart["elements"][0]["elements"] == [
        {"label": "Line 0", "points": [[0, 0], [1, 1], [2, 4]]}]
    assert superchart["elements"][1]["elements"] == [
        {"label": "x", "group": "Group 0", "value": 2}, {"label": "y", "group": "Group 0", "value": 3}]

    assert steps["on_result"]["seen"] == ["bar"]
    assert steps["no_figure"]["chart"] is None and steps["no_figure"]["formats"] == []
    assert steps["kill"]["killed"] is True


@pytest.fixture(scope="module")
def v1(daemon):
    client = V1(daemon, spec=Spec())
    yield client
    client.cleanup()


def test_v1_execution_stream_has_the_chart(v1):
    sandbox = v1.create(timeout_s=0)
    events = v1.execute(sandbox["id"], "import matplotlib.pyplot as plt\n"
                        "plt.plot([1, 2, 3], [4, 5, 6], label='speed')\n"
                        "plt.plot([1, 2, 3], [1, 1, 2])\nplt.title('Runs')\nplt.show()\n6 * 7",
                        timeout=90)  # every line checked against docs/openapi.yaml
    assert not events.errors, events.errors
    figure = [e for e in events.results if "png" in e]
    assert len(figure) == 1 and figure[0]["chart"]["type"] == "line", events.results
    assert figure[0]["chart"]["title"] == "Runs"
    assert figure[0]["chart"]["elements"] == LINE_ELEMENTS
    assert "extra" not in figure[0]  # the chart's MIME type is named `chart`, not left in extra
    assert "chart" not in events.main_result and events.main_result["text"] == "42"


def test_mcp_run_code_lists_the_chart(daemon):
    url, token = daemon.origin + "/mcp", daemon.token
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "Authorization": f"token {token}"}
    r = requests.post(url, headers=headers, timeout=30, json={
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "pytest", "version": "0"}}})
    assert r.status_code == 200, r.text
    headers["Mcp-Session-Id"] = r.headers["Mcp-Session-Id"]
    try:
        r = requests.post(url, headers=headers, timeout=120, json={
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "run_code", "arguments": {
                "code": "import matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [3, 5])\n"
                        "plt.title('mcp')\nplt.show()"}}})
        assert r.status_code == 200, r.text
        result = r.json()["result"]
        assert not result.get("isError"), result
        text = "\n".join(c["text"] for c in result["content"] if c["type"] == "text")
        assert [c["mimeType"] for c in result["content"] if c["type"] == "image"] == ["image/png"]
        assert text.startswith("chart:\n"), text
        chart = json.loads(text.splitlines()[1])
        assert chart["type"] == "bar" and chart["title"] == "mcp"
        assert [(e["label"], e["value"]) for e in chart["elements"]] == [("a", 3), ("b", 5)]
    finally:
        requests.delete(url, headers=headers, timeout=30)  # the session and its sandbox
