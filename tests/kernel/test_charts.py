"""A figure a cell shows carries its structured chart (cellbox_kernel/charts.py): the
application/vnd.cellbox.chart+json entry beside image/png in the display_data, in the shape of
E2B's result.chart, read from a real cellbox-kernel.

Run:  /usr/bin/python3 -m pytest -q tests/kernel/test_charts.py
"""
import json

import pytest

from kernel_process import started_kernel

CHART = "application/vnd.cellbox.chart+json"


def shown(kernel, code):
    """The data of each display_data the cell `code` (plus plt.show()) sent; fails on an error."""
    exchange = kernel.execute("import matplotlib.pyplot as plt\n" + code + "\nplt.show()")
    errors = exchange.of_type("error")
    assert not errors, "\n".join(errors[0]["content"]["traceback"])
    assert exchange.reply["content"]["status"] == "ok"
    return [m["content"]["data"] for m in exchange.of_type("display_data")]


def chart_of(kernel, code):
    (data,) = shown(kernel, code)
    assert data["image/png"].startswith("iVBORw0KGgo")  # the figure itself still goes
    return data[CHART]


def test_line_chart_has_title_labels_units_ticks_and_points(kernel):
    chart = chart_of(kernel, """
plt.plot([1, 2, 3], [4, 5, 6], label="speed")
plt.plot([1, 2, 3], [1, 1, 2])
plt.axhline(2)  # a reference line, not data
plt.title("Runs"); plt.xlabel("Time (s)"); plt.ylabel("Distance [km]")""")
    assert chart["type"] == "line" and chart["title"] == "Runs"
    assert (chart["x_label"], chart["y_label"]) == ("Time (s)", "Distance [km]")
    assert (chart["x_unit"], chart["y_unit"]) == ("s", "km")
    assert chart["x_scale"] == chart["y_scale"] == "linear"
    assert chart["elements"] == [
        {"label": "speed", "points": [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]},
        {"label": "Line 1", "points": [[1.0, 1.0], [2.0, 1.0], [3.0, 2.0]]}]
    assert all(isinstance(t, float) for t in chart["x_ticks"] + chart["y_ticks"])
    assert len(chart["x_tick_labels"]) == len(chart["x_ticks"]) and "2.00" in chart["x_tick_labels"]


def test_dates_on_an_axis_are_iso_text_with_a_datetime_scale(kernel):
    chart = chart_of(kernel, """
import datetime, numpy as np
days = [datetime.date(2024, 3, d) for d in (1, 2, 3)]
plt.plot(days, [10, 20, 15], label="dates")
plt.plot(np.array(["2024-03-01T12:00", "2024-03-02T12:00"], dtype="datetime64[m]"), [1, 2])""")
    assert chart["x_scale"] == "datetime" and chart["y_scale"] == "linear"
    assert chart["elements"][0] == {"label": "dates", "points": [
        ["2024-03-01", 10.0], ["2024-03-02", 20.0], ["2024-03-03", 15.0]]}
    assert chart["elements"][1]["points"] == [["2024-03-01T12:00:00", 1.0],
                                              ["2024-03-02T12:00:00", 2.0]]
    assert chart["x_ticks"] and all(t.startswith("2024-03-0") for t in chart["x_ticks"])


def test_scatter_chart_points_per_series(kernel):
    chart = chart_of(kernel, """
plt.scatter([1, 2, 3], [3, 1, 2], label="a")
plt.scatter([5], [6], label="b")
plt.xlabel("x"); plt.ylabel("y"); plt.title("Dots")""")
    assert (chart["type"], chart["title"], chart["x_label"], chart["y_label"]) == (
        "scatter", "Dots", "x", "y")
    assert chart["elements"] == [
        {"label": "a", "points": [[1.0, 3.0], [2.0, 1.0], [3.0, 2.0]]},
        {"label": "b", "points": [[5.0, 6.0]]}]


def test_categorical_line_axis(kernel):
    chart = chart_of(kernel, "plt.plot(['mon', 'tue', 'wed'], [3, 4, 5])")
    assert chart["x_scale"] == "categorical"
    assert chart["elements"][0]["points"] == [["mon", 3.0], ["tue", 4.0], ["wed", 5.0]]


def test_bar_chart_values_labels_and_groups(kernel):
    chart = chart_of(kernel, """
plt.bar(["Author A", "Author B", "Author C"], [100, 200, 300], label="Books Sold")
plt.xlabel("Authors"); plt.ylabel("Number of Books Sold"); plt.title("Book Sales")""")
    assert (chart["type"], chart["title"]) == ("bar", "Book Sales")
    assert (chart["x_label"], chart["y_label"]) == ("Authors", "Number of Books Sold")
    assert chart["elements"] == [
        {"label": "Author A", "group": "Books Sold", "value": 100.0},
        {"label": "Author B", "group": "Books Sold", "value": 200.0},
        {"label": "Author C", "group": "Books Sold", "value": 300.0}]


def test_grouped_and_horizontal_bars(kernel):
    grouped = chart_of(kernel, """
import numpy as np
x = np.arange(2)
plt.bar(x - 0.2, [1, 2], 0.4, label="2023")
plt.bar(x + 0.2, [3, -4], 0.4)
plt.xticks(x, ["north", "south"])""")
    assert grouped["elements"] == [
        {"label": "north", "group": "2023", "value": 1.0},
        {"label": "south", "group": "2023", "value": 2.0},
        {"label": "north", "group": "Group 1", "value": 3.0},
        {"label": "south", "group": "Group 1", "value": -4.0}]
    horizontal = chart_of(kernel, """
plt.barh(["a", "b"], [5, 7])
plt.ylabel("Team"); plt.xlabel("Goals")""")
    # E2B's x is the axis the categories lie along.
    assert (horizontal["x_label"], horizontal["y_label"]) == ("Team", "Goals")
    assert [(e["label"], e["value"]) for e in horizontal["elements"]] == [("a", 5.0), ("b", 7.0)]


def test_pie_chart_slices(kernel):
    chart = chart_of(kernel, """
fig, ax = plt.subplots()
ax.pie([90, 10], labels=["No", "No, in blue"], autopct="%1.1f%%", startangle=90)
ax.set_title("Will I wake up early?")""")
    assert chart == {"type": "pie", "title": "Will I wake up early?", "elements": [
        {"label": "No", "angle": 324.0, "radius": 1.0},
        {"label": "No, in blue", "angle": 36.0, "radius": 1.0}]}


BOX_DATA = '{"A": [85, 90, 78, 92, 88], "B": [95, 89, 76, 91, 84, 87, 40]}'


@pytest.mark.parametrize("options", ["", ", patch_artist=True", ", vert=False"])
def test_box_plot_statistics_match_numpy(kernel, options):
    chart = chart_of(kernel, f"""
data = {BOX_DATA}
fig, ax = plt.subplots()
ax.boxplot(list(data.values()), labels=list(data.keys()){options})
ax.set_title("Scores"); ax.set_xlabel("Class"); ax.set_ylabel("Score")""")
    assert (chart["type"], chart["title"]) == ("box_and_whisker", "Scores")
    if "vert=False" in options:  # drawn sideways: E2B names the category axis x all the same
        assert (chart["x_label"], chart["y_label"]) == ("Score", "Class")
    else:
        assert (chart["x_label"], chart["y_label"]) == ("Class", "Score")
    # matplotlib's statistics: quartiles by numpy's percentile, whiskers at the furthest value
    # within 1.5 IQR, the rest outliers. A: 78 85 88 90 92; B: 40 76 84 87 89 91 95.
    assert chart["elements"] == [
        {"label": "A", "min": 78.0, "first_quartile": 85.0, "median": 88.0,
         "third_quartile": 90.0, "max": 92.0, "outliers": []},
        {"label": "B", "min": 76.0, "first_quartile": 80.0, "median": 87.0,
         "third_quartile": 90.0, "max": 95.0, "outliers": [40.0]}]


def test_subplots_make_a_superchart(kernel):
    chart = chart_of(kernel, """
fig, axs = plt.subplots(1, 2)
fig.suptitle("Two views")
axs[0].plot([0, 1, 2], [0, 1, 4]); axs[0].set_title("Line")
axs[1].bar(["x", "y"], [2, 3]); axs[1].set_title("Bars")""")
    assert (chart["type"], chart["title"]) == ("superchart", "Two views")
    line, bars = chart["elements"]
    assert (line["type"], line["title"]) == ("line", "Line")
    assert line["elements"][0]["points"] == [[0.0, 0.0], [1.0, 1.0], [2.0, 4.0]]
    assert (bars["type"], bars["title"]) == ("bar", "Bars")
    assert [(e["label"], e["value"]) for e in bars["elements"]] == [("x", 2.0), ("y", 3.0)]


def test_other_figures_are_unknown_and_blank_or_huge_ones_have_no_chart(kernel):
    assert chart_of(kernel, "plt.imshow([[1, 2], [3, 4]]); plt.title('img')") == {
        "type": "unknown", "title": "img", "elements": []}
    (blank,) = shown(kernel, "fig = plt.figure(); fig.add_subplot()")
    assert "image/png" in blank and CHART not in blank
    # More points than a chart carries (charts.CHART_MAX_POINTS): the PNG alone, no error.
    (huge,) = shown(kernel, "plt.plot(range(30000))")
    assert "image/png" in huge and CHART not in huge


def test_a_failing_extraction_costs_the_chart_not_the_cell(kernel):
    kernel.execute("from cellbox_kernel import charts\n"
                   "_saved = charts._figure_chart\n"
                   "def _broken(figure): raise RuntimeError('extractor bug')\n"
                   "charts._figure_chart = _broken")
    try:
        (data,) = shown(kernel, "plt.plot([1, 2])")  # shown() asserts no error came
        assert "image/png" in data and CHART not in data
    finally:
        kernel.execute("charts._figure_chart = _saved")


def test_a_figure_as_the_cells_value_carries_its_chart(kernel):
    exchange = kernel.execute("import matplotlib.pyplot as plt\n"
                              "fig, ax = plt.subplots(); ax.plot([1, 2]); plt.close(fig)\nfig")
    data = exchange.one("execute_result")["content"]["data"]
    assert data[CHART]["type"] == "line" and "image/png" in data


def test_cells_without_figures_import_nothing_and_keep_the_formatter_shortcut():
    # A kernel of its own: nothing may have imported matplotlib in it yet.
    for fresh in started_kernel():
        exchange = fresh.execute("""
import json, sys
from cellbox_kernel import charts, fast_paths
ip = get_ipython()
chart_formatter = ip.display_formatter.formatters[charts.CHART_MIME_TYPE]
json.dumps({"matplotlib": "matplotlib" in sys.modules,
            "shortcut": fast_paths._answers_nothing(chart_formatter, 1, int.__mro__),
            "value": ip.display_formatter.format(41)[0]})""")
        result = json.loads(eval(exchange.one("execute_result")["content"]["data"]["text/plain"]))
        assert result == {"matplotlib": False, "shortcut": True, "value": {"text/plain": "41"}}


def test_matplotlib_inline_configured_again_keeps_the_chart(kernel):
    # %matplotlib inline takes Figure's printers out of every formatter and puts back its own.
    exchange = kernel.execute("%matplotlib inline")
    assert exchange.reply["content"]["status"] == "ok"
    assert chart_of(kernel, "plt.plot([3, 1])")["elements"] == [
        {"label": "Line 0", "points": [[0.0, 3.0], [1.0, 1.0]]}]


def test_a_pandas_time_series_plot_has_dates_on_its_axis(kernel):
    # DataFrame.plot() of a regular DatetimeIndex puts periods on the axis, not matplotlib dates.
    chart = chart_of(kernel, """
import pandas as pd
frame = pd.DataFrame({"sales": [3, 5, 4]}, index=pd.date_range("2024-01-01", periods=3, freq="D"))
frame.plot(title="Sales")""")
    assert (chart["type"], chart["title"], chart["x_scale"]) == ("line", "Sales", "datetime")
    assert chart["elements"] == [{"label": "sales", "points": [
        ["2024-01-01T00:00:00", 3.0], ["2024-01-02T00:00:00", 5.0], ["2024-01-03T00:00:00", 4.0]]}]
    assert chart["x_ticks"] and all(t.startswith("2024-01-0") for t in chart["x_ticks"])


def test_bars_on_a_numeric_or_date_axis_are_named_by_their_position(kernel):
    histogram = chart_of(kernel, "plt.hist([1, 1, 2, 3, 3, 3], bins=2)")
    assert histogram["type"] == "bar"
    # Two bins, [1, 2) and [2, 3], named by their centres.
    assert [(e["label"], e["value"]) for e in histogram["elements"]] == [("1.5", 2.0), ("2.5", 4.0)]
    by_day = chart_of(kernel, "import datetime\n"
                              "plt.bar([datetime.date(2024, 1, 1), datetime.date(2024, 1, 2)], [3, 4])")
    assert [(e["label"], e["value"]) for e in by_day["elements"]] == [
        ("2024-01-01T00:00:00+00:00", 3.0), ("2024-01-02T00:00:00+00:00", 4.0)]
