"""A matplotlib figure as a structured chart: E2B's `result.chart`, read from the figure's own
artists when it is displayed.

A figure shown by a cell goes out as image/png (matplotlib_inline) and, beside it, as
CHART_MIME_TYPE: a JSON object with the chart's type, title, axis labels, units, ticks and
scales, and its elements (points for line and scatter, bars, pie slices, box-and-whisker
statistics), in the shape E2B's code interpreter gives (its SDKs read it as `result.chart`;
cellboxd's execution stream names it `chart`). A figure of several axes is a `superchart`
whose elements are one chart per axes. What cannot be read as one of these kinds is `unknown`
(type and title only); a blank figure has no chart.

Lazy on purpose: the formatter's printer is registered for matplotlib's figures *by name*
(matplotlib.figure.FigureBase), so IPython never imports matplotlib for it, and nothing here runs
unless a figure is being displayed; a cell without figures pays nothing. The code below imports matplotlib only inside the functions a
Figure reaches (matplotlib is in sys.modules by then).

Never in the way of the figure itself: any failure while reading a chart gives no chart (the PNG
still goes), never an error in the cell; and a figure with more data than a chart should carry
(CHART_MAX_POINTS points, CHART_MAX_BYTES of JSON) gives none either, so that it cannot push the
cell's output past its limit and take the PNG with it.
"""
import datetime
import json
import math
import re

from IPython.core.formatters import BaseFormatter
from traitlets import ObjectName, Unicode

CHART_MIME_TYPE = "application/vnd.cellbox.chart+json"
CHART_MAX_POINTS = 20000       # points, bars, slices and outliers in one figure
CHART_MAX_BYTES = 256 * 1024   # the chart's JSON

# "Time (s)" -> s, "Distance [km]" -> km: the unit a label names, as E2B reads it.
_UNIT_IN_LABEL = re.compile(r"\s\((.*?)\)|\[(.*?)\]")
# matplotlib's names for unlabelled artists ("_child3", "_container1"): E2B shows these as
# "Line 3" and "Group 1".
_UNLABELLED = re.compile(r"_(child|container)(\d+)$")


class ChartFormatter(BaseFormatter):
    """IPython's formatter for CHART_MIME_TYPE. Plain BaseFormatter behaviour (a registered
    printer, else a `_repr_cellbox_chart_` method), so fast_paths can still tell that it has
    nothing to say about an int."""

    format_type = Unicode(CHART_MIME_TYPE)
    print_method = ObjectName("_repr_cellbox_chart_")
    _return_type = dict


def register_chart_formatter(display_formatter):
    """Adds the chart formatter to a shell's DisplayFormatter, with the figure printer deferred
    by module name (no import of matplotlib). It is registered for Figure's base class:
    matplotlib_inline, each time it configures a shell (at start, at every %matplotlib), takes
    Figure's printer out of every formatter (pylabtools.select_figure_formats), and would take
    ours with it."""
    formatter = ChartFormatter(parent=display_formatter)
    formatter.for_type_by_name("matplotlib.figure", "FigureBase", figure_chart)
    display_formatter.formatters[CHART_MIME_TYPE] = formatter


def figure_chart(figure):
    """The chart of a matplotlib Figure as a JSON-ready dict, or None (blank, too large, or
    unreadable)."""
    try:
        chart = _figure_chart(figure)
    except Exception:  # noqa: BLE001  a chart is an extra: it must never fail the cell
        return None
    if chart is None or len(json.dumps(chart, allow_nan=False)) > CHART_MAX_BYTES:
        return None
    return chart


def _figure_chart(figure):
    axes = figure.get_axes()
    if not any(ax.has_data() for ax in axes):
        return None
    if sum(_data_count(ax) for ax in axes) > CHART_MAX_POINTS:
        return None
    if len(axes) == 1:
        return _axes_chart(axes[0])
    suptitle = getattr(figure, "_suptitle", None)  # Figure.get_suptitle() only from 3.8
    return {"type": "superchart", "title": _text_or_none(suptitle.get_text() if suptitle else ""),
            "elements": [_axes_chart(ax) for ax in axes]}


def _data_count(ax):
    count = sum(len(line.get_xdata()) for line in ax.lines)
    count += sum(len(collection.get_offsets()) for collection in ax.collections)
    return count + len(ax.patches)


def _axes_chart(ax):
    """One Axes as a chart of the kind its artists make."""
    boxes = _boxes(ax)
    if boxes is not None:
        return _box_chart(ax, boxes)
    kind = _chart_kind(ax)
    if kind == "line":
        return _line_chart(ax)
    if kind == "scatter":
        return _scatter_chart(ax)
    if kind == "bar":
        return _bar_chart(ax)
    if kind == "pie":
        return _pie_chart(ax)
    return {"type": "unknown", "title": _text_or_none(ax.get_title()), "elements": []}


# ---------------------------------------------------------------------- which kind of chart

def _chart_kind(ax):
    """line, scatter, bar, pie or unknown (box plots are told apart by _boxes, first)."""
    from matplotlib.collections import PathCollection
    from matplotlib.container import BarContainer
    from matplotlib.patches import Rectangle, Wedge

    lines = _data_lines(ax)
    patches, collections = list(ax.patches), list(ax.collections)
    if ax.images or ax.tables:
        return "unknown"
    if patches and not lines and not collections:
        if all(isinstance(patch, Wedge) for patch in patches):
            return "pie"
        if all(isinstance(patch, Rectangle) for patch in patches) and any(
                isinstance(container, BarContainer) for container in ax.containers):
            return "bar"
    if collections and not lines and not patches:
        if all(isinstance(collection, PathCollection) for collection in collections):
            return "scatter"
    if lines and not patches and not collections:
        return "line"
    return "unknown"


def _data_lines(ax):
    """The Axes' lines without axhline/axvline references: those are drawn in axes
    coordinates along one direction, not from data."""
    return [line for line in ax.lines
            if all(line.get_transform().contains_branch_seperately(ax.transData))]


# ---------------------------------------------------------------------- axes

def _chart_2d(kind, ax, swap_axes=False):
    """The fields of every chart with axes. E2B's x is the axis along which the categories lie
    (bars, boxes): for horizontal ones the labels are swapped."""
    x_label, y_label = _text_or_none(ax.get_xlabel()), _text_or_none(ax.get_ylabel())
    if swap_axes:
        x_label, y_label = y_label, x_label
    return {"type": kind, "title": _text_or_none(ax.get_title()),
            "x_label": x_label, "y_label": y_label,
            "x_unit": _unit_of(x_label), "y_unit": _unit_of(y_label), "elements": []}


def _point_chart(kind, ax):
    chart = _chart_2d(kind, ax)
    for name, axis, scale in (("x", ax.xaxis, ax.get_xscale()), ("y", ax.yaxis, ax.get_yscale())):
        ticks = list(axis.get_ticklocs())
        labels = [label.get_text() for label in axis.get_ticklabels()]
        chart[f"{name}_ticks"] = [_position_reader(axis)(tick) for tick in ticks]
        chart[f"{name}_tick_labels"] = labels
        chart[f"{name}_scale"] = _scale_of(axis, scale, ticks, labels)
    chart["elements"] = chart.pop("elements")  # last, as E2B has it
    return chart


def _is_date_axis(axis):
    from matplotlib import dates
    return isinstance(axis.get_major_locator(), dates.DateLocator) or _period_frequency(axis)


def _period_frequency(axis):
    """The frequency of a pandas time series axis (DataFrame.plot() of a regular DatetimeIndex),
    whose positions are period numbers rather than matplotlib's dates; else None. Read from its
    locator by name: pandas is not imported for a figure that has no such axis."""
    locator = axis.get_major_locator()
    if type(locator).__name__ != "TimeSeries_DateLocator":
        return None
    return getattr(locator, "freq", None)


def _scale_of(axis, scale, ticks, labels):
    """E2B's scale names: datetime, categorical, or matplotlib's own (linear, log, ...)."""
    from matplotlib import category
    if _is_date_axis(axis):
        return "datetime"
    if scale != "linear":
        return scale
    converter = getattr(axis, "converter", None)
    if isinstance(converter, category.StrCategoryConverter):
        return "categorical"
    # Categories placed by hand (set_xticks(range(n), names)): ticks 0..n-1 named otherwise.
    if ticks and labels and all(tick == i and label != str(i)
                                for i, (tick, label) in enumerate(zip(ticks, labels))):
        return "categorical"
    return "linear"


def _position_reader(axis):
    """A function giving a position on `axis` (a number, as matplotlib holds it) as the user
    gave it: ISO 8601 text on a date axis, else the number."""
    frequency = _period_frequency(axis)
    if frequency is not None:
        import pandas

        def period_start(value):
            if not _is_number(value):
                return _json_value(value)
            return pandas.Period(ordinal=round(float(value)), freq=frequency).start_time.isoformat()
        return period_start
    if _is_date_axis(axis):
        from matplotlib import dates

        def date(value):
            return dates.num2date(value).isoformat() if _is_number(value) else _json_value(value)
        return date
    return _json_value


# ---------------------------------------------------------------------- line, scatter

def _line_chart(ax):
    chart = _point_chart("line", ax)
    for index, line in enumerate(_data_lines(ax)):
        points = zip(line.get_xdata(), line.get_ydata())
        chart["elements"].append({
            "label": _element_label(line.get_label(), "Line", index),
            "points": [[_json_value(x), _json_value(y)] for x, y in points]})
    return chart


def _scatter_chart(ax):
    chart = _point_chart("scatter", ax)
    # Offsets are positions, dates already turned into numbers: they are turned back.
    read_x, read_y = _position_reader(ax.xaxis), _position_reader(ax.yaxis)
    for index, collection in enumerate(ax.collections):
        chart["elements"].append({
            "label": _element_label(collection.get_label(), "Series", index),
            "points": [[read_x(x), read_y(y)] for x, y in collection.get_offsets()]})
    return chart


# ---------------------------------------------------------------------- bar

def _bar_chart(ax):
    from matplotlib.container import BarContainer

    containers = [c for c in ax.containers if isinstance(c, BarContainer)]
    horizontal = any(getattr(c, "orientation", None) == "horizontal" for c in containers)
    chart = _chart_2d("bar", ax, swap_axes=horizontal)
    category_axis = ax.yaxis if horizontal else ax.xaxis
    for index, container in enumerate(containers):
        group = _element_label(container.get_label(), "Group", index)
        values = getattr(container, "datavalues", None)
        for position, bar in enumerate(container.patches):
            if horizontal:
                center, size = bar.get_y() + bar.get_height() / 2, bar.get_width()
            else:
                center, size = bar.get_x() + bar.get_width() / 2, bar.get_height()
            value = values[position] if values is not None else size
            chart["elements"].append({"label": _category_at(category_axis, center),
                                      "group": group, "value": _json_value(value)})
    return chart


def _category_at(axis, position):
    """What a bar or box at `position` (its centre) stands for: on an axis whose ticks are named
    (categories, set_xticks(..., labels), a boxplot's labels) the name of the nearest tick, so
    that grouped bars drawn beside their tick are named by it; on a numeric or date axis (a
    histogram, bars over time) the position itself."""
    from matplotlib.ticker import LogFormatter, ScalarFormatter

    ticks = list(axis.get_ticklocs())
    labels = [label.get_text() for label in axis.get_ticklabels()]
    numeric = isinstance(axis.get_major_formatter(), (ScalarFormatter, LogFormatter))
    if not numeric and not _is_date_axis(axis) and ticks and len(labels) == len(ticks):
        nearest = min(range(len(ticks)), key=lambda i: abs(ticks[i] - position))
        if labels[nearest]:
            return labels[nearest]
    value = _position_reader(axis)(position)
    return f"{value:.12g}" if isinstance(value, float) else str(value)  # 2, not 1.9999999999999998


# ---------------------------------------------------------------------- pie

def _pie_chart(ax):
    chart = {"type": "pie", "title": _text_or_none(ax.get_title()), "elements": []}
    for wedge in ax.patches:
        # theta1/theta2 carry float noise (323.99999 for 324): 4 decimals of a degree is plenty.
        chart["elements"].append({"label": wedge.get_label(),
                                  "angle": round(abs(float(wedge.theta2) - float(wedge.theta1)), 4),
                                  "radius": _json_value(wedge.r)})
    return chart


# ---------------------------------------------------------------------- box and whisker

def _box_chart(ax, boxes):
    vertical = boxes[0]["vertical"]
    chart = _chart_2d("box_and_whisker", ax, swap_axes=not vertical)
    category_axis = ax.xaxis if vertical else ax.yaxis
    for box in boxes:
        chart["elements"].append({
            "label": _category_at(category_axis, box["center"]),
            "min": box["min"], "first_quartile": box["q1"], "median": box["median"],
            "third_quartile": box["q3"], "max": box["max"], "outliers": box["outliers"]})
    return chart


def _boxes(ax):
    """The boxes of a boxplot on this Axes, each with its statistics, or None when the Axes is
    not a boxplot. A boxplot is boxes (PathPatches, or closed 5-point lines without
    patch_artist), each with a median segment across it and a whisker segment from either end,
    and marker-only lines of outliers; anything else and it is not one."""
    from matplotlib.patches import PathPatch

    lines = _data_lines(ax)
    if any(not isinstance(patch, PathPatch) for patch in ax.patches) or ax.collections:
        return None
    rectangles = [_rectangle(patch.get_path().vertices) for patch in ax.patches]
    segments, fliers = [], []
    for line in lines:
        xs, ys = _floats(line.get_xdata()), _floats(line.get_ydata())
        if xs is None or ys is None:
            return None
        if line.get_linestyle() in ("None", "", " ") and line.get_marker() not in (None, "None", ""):
            fliers.append((xs, ys))
        elif len(xs) == 2:
            segments.append((xs, ys))
        elif len(xs) == 5 and not ax.patches:
            rectangles.append(_rectangle(list(zip(xs, ys))))
        else:
            return None
    if not rectangles or any(r is None for r in rectangles):
        return None
    for vertical in (True, False):
        boxes = [_box_statistics(r, segments, fliers, vertical) for r in rectangles]
        if all(box is not None for box in boxes):
            return sorted(boxes, key=lambda box: box["center"])
    return None


def _rectangle(vertices):
    """(x0, x1, y0, y1) of an axis-aligned rectangle's outline, or None."""
    xs = sorted({float(x) for x, _ in vertices})
    ys = sorted({float(y) for _, y in vertices})
    if len(xs) != 2 or len(ys) != 2:
        return None
    return xs[0], xs[1], ys[0], ys[1]


def _box_statistics(rectangle, segments, fliers, vertical):
    """One box's statistics, reading positions along x and values along y when `vertical`
    (the other way round otherwise); None if the lines around it are not a box's."""
    x0, x1, y0, y1 = rectangle
    if not vertical:
        x0, x1, y0, y1 = y0, y1, x0, x1
        segments = [(ys, xs) for xs, ys in segments]
        fliers = [(ys, xs) for xs, ys in fliers]
    center = (x0 + x1) / 2
    median = low = high = None
    for xs, ys in segments:
        # The median runs across the whole box (the caps are narrower).
        if ys[0] == ys[1] and min(xs) == x0 and max(xs) == x1 and y0 <= ys[0] <= y1:
            median = ys[0]
        elif xs[0] == xs[1] and x0 <= xs[0] <= x1 and ys[0] != ys[1]:
            if max(ys) == y0:
                low = min(ys)
            elif min(ys) == y1:
                high = max(ys)
    # A whisker of length 0 (every value inside the box) is a 2-point line along the box's edge.
    for xs, ys in segments:
        if xs[0] == xs[1] and x0 <= xs[0] <= x1 and ys[0] == ys[1]:
            low = y0 if low is None and ys[0] == y0 else low
            high = y1 if high is None and ys[0] == y1 else high
    if median is None or low is None or high is None:
        return None
    outliers = [y for xs, ys in fliers for x, y in zip(xs, ys) if x0 <= x <= x1]
    return {"vertical": vertical, "center": center, "min": low, "q1": y0, "median": median,
            "q3": y1, "max": high, "outliers": outliers}


def _floats(values):
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------------- values

def _json_value(value):
    """A data value as JSON has it: dates as ISO 8601 text (as E2B gives them), numbers as
    floats, as E2B's are (NaN and infinities as null: JSON has none), anything else as its
    text."""
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if type(value).__name__ == "Period":  # a pandas time series plot's x values
        return value.start_time.isoformat()
    if type(value).__name__ == "datetime64":
        import numpy
        return str(numpy.datetime_as_string(value, unit="s"))
    if isinstance(value, bool):
        return value
    if _is_number(value):
        number = float(value)
        return number if math.isfinite(number) else None
    return str(value)


def _is_number(value):
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return not isinstance(value, (str, bytes))


def _text_or_none(text):
    return text if text else None


def _unit_of(label):
    if not label:
        return None
    match = _UNIT_IN_LABEL.search(label)
    return (match.group(1) or match.group(2)) if match else None


def _element_label(label, kind, index):
    """An artist's legend label; matplotlib's hidden ones (starting with "_") as E2B names them,
    "Line 3" for "_child3", else by position."""
    match = _UNLABELLED.match(label or "")
    if match:
        return f"{kind} {match.group(2)}"
    return label if label and not label.startswith("_") else f"{kind} {index}"
