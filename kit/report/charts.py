"""Charts as inline SVG (matplotlib, Agg backend): text stays text, nothing is fetched, and the
same data always gives the same bytes (fixed hash salt, no date in the metadata)."""

from __future__ import annotations

import base64
import functools
import io
import re
from math import cos, floor, log10, radians, sin
from xml.dom import minidom

from markupsafe import Markup
from pydantic import BaseModel

from kit.report.chart_cache import drawn_once
from kit.report.model import html_id
from kit.units import binary_size

STYLE = {
    "font.family": "DejaVu Sans",
    "font.size": 8,
    "axes.titlesize": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "svg.fonttype": "none",
}
PALETTE = ("#1f4e79", "#c55a11", "#548235", "#7030a0", "#bf9000", "#2e75b6")
WIDTH_IN = 6.8
TALLEST_IN = 8.6  # with its title and caption a chart still fits one A4 page; more bars get thinner
POINT_IN = 1 / 72
EDGE_IN = 0.06  # white space at the figure's edges and between texts
TICK_IN = 7 * POINT_IN  # a tick (3.5 pt) and its label's pad (3.5 pt)


class Bar(BaseModel):
    """One bar: a mean with its standard deviation (None for a single run) over `runs` runs; or,
    where the case has no figure (out of memory, an error), `mark` drawn in its place. A bar with
    a value and a mark ("invalid") is drawn hatched, the mark beside it."""

    label: str
    group: str
    value: float | None = None
    error: float | None = None
    runs: int = 1
    mark: str | None = None


class Limit(BaseModel):
    """A vertical line across a bar chart's panels: what no bar can pass (a GPU's memory)."""

    value: float
    label: str


class ScalingPoint(BaseModel):
    gpus: int
    throughput: float
    error: float | None = None
    efficiency: float | None = None


class ScalingSeries(BaseModel):
    label: str
    points: list[ScalingPoint]


class SizePoint(BaseModel):
    size_bytes: int
    bus_bandwidth_gb_s: float
    time_us: float


class Sweep(BaseModel):
    """One collective over message sizes (the mean over its runs at each size)."""

    label: str
    points: list[SizePoint]


class RatioBar(BaseModel):
    label: str
    ratio: float
    significant: bool | None


@functools.cache
def pyplot():
    """matplotlib's pyplot on the Agg backend, imported when a chart is drawn: the stages import
    this module, and `kit run` need not pay matplotlib's 2 s of imports before it measures."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _text_size_in(renderer, text: str, properties) -> tuple[float, float]:
    """Width and height of a text in inches, as the renderer would draw it."""
    mathtext = text.count("$") >= 2
    width, height, _ = renderer.get_text_width_height_descent(text, properties, ismath=mathtext)
    return width / renderer.dpi, height / renderer.dpi


def _tick_labels_in(renderer, axis) -> tuple[float, float, float]:
    """The widest and tallest tick label of an axis, and the width of its last one, in inches
    (of the ticks inside the axis's limits: the locator proposes some beyond them, not drawn)."""
    low, high = sorted(axis.get_view_interval())
    locations = axis.get_majorticklocs()
    labels = axis.get_major_formatter().format_ticks(locations)  # all of them: a fixed formatter counts
    texts = [text for loc, text in zip(locations, labels) if text and low <= loc <= high]
    if not texts:
        return 0.0, 0.0, 0.0
    tick = axis.get_major_ticks()[0].label1
    sizes = [_text_size_in(renderer, text, tick.get_fontproperties()) for text in texts]
    rotation = radians(abs(tick.get_rotation()))
    if rotation:  # a turned label takes the room of its bounding box
        sizes = [(w * cos(rotation) + h * sin(rotation), w * sin(rotation) + h * cos(rotation)) for w, h in sizes]
    return max(w for w, _ in sizes), max(h for _, h in sizes), sizes[-1][0]


def _label_in(renderer, text) -> float:
    """The height of an axis label or title (0 when it is empty)."""
    return _text_size_in(renderer, text.get_text(), text.get_fontproperties())[1] + EDGE_IN if text.get_text() else 0.0


def _fixed_layout(figure, panels, bottom_extra_in: float = 0.0) -> None:
    """Place the panels (side by side) with margins measured from their tick labels, axis labels
    and titles, once. Matplotlib's constrained layout finds the same room by laying the whole
    figure out over and over, which took about 40 % of the time of drawing a chart; measuring the
    texts that sit outside the axes costs a fraction of it. `bottom_extra_in` leaves room below
    for a legend under the panels."""
    renderer = figure.canvas.get_renderer()
    width_in, height_in = figure.get_size_inches()
    lefts, bottoms, tops, right_in = [], [], [], EDGE_IN
    for axes in panels:
        y_width, _, _ = _tick_labels_in(renderer, axes.yaxis)
        _, x_height, x_last = _tick_labels_in(renderer, axes.xaxis)
        lefts.append(EDGE_IN + _label_in(renderer, axes.yaxis.label) + y_width + TICK_IN)
        bottoms.append(EDGE_IN + _label_in(renderer, axes.xaxis.label) + x_height + TICK_IN)
        tops.append(EDGE_IN + _label_in(renderer, axes.title))
        right_in = max(right_in, x_last / 2 + EDGE_IN)
    bottom, top = max(bottoms) + bottom_extra_in, max(tops)
    panel_in = (width_in - sum(lefts) - right_in * len(panels)) / len(panels)
    x = 0.0
    for axes, left in zip(panels, lefts):
        x += left
        axes.set_position(
            [x / width_in, bottom / height_in, panel_in / width_in, (height_in - bottom - top) / height_in]
        )
        x += panel_in + right_in


def _height_in(wanted: float) -> float:
    """A chart's height, at most TALLEST_IN: a taller one was split from its title over pages."""
    return min(wanted, TALLEST_IN)


def _svg(figure, salt: str) -> str:
    """The figure as an <svg> element to inline in HTML (no XML prolog, no doctype)."""
    buffer = io.StringIO()
    with pyplot().rc_context({"svg.hashsalt": salt}):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    pyplot().close(figure)
    return _scoped_ids(_flattened(buffer.getvalue()), salt)


def _flattened(svg: str) -> str:
    """The same drawing with fewer elements: matplotlib wraps every artist in a <g id=...>
    (figure, axes, each tick, each label), adds an RDF <metadata> block and draws each marker
    (a tick, an error bar's cap, a point of a line) as a <use> of a path; the PDF printer
    cascades styles into and draws each element, so they cost time on every chart. Each <use>
    becomes the path it names, moved to its place; ids nothing refers to then are dropped, a
    definition nobody uses with them, and each <g> left without attributes gives its children to
    its parent, in order (groups that carry a clip-path, a transform or a style stay). Last,
    neighbouring paths drawn alike are joined into one (_joined). (minidom keeps every name as
    written, xlink:href included, as an HTML parser needs it.)"""
    document = minidom.parseString(svg)
    root = document.documentElement
    assert root is not None  # a parsed document has its root element (minidom types it optional)
    markers = _inline_markers(document)
    referenced = set(re.findall(r'(?:url\(#|href="#)([^)"]+)', root.toxml()))

    def flatten(node: minidom.Element) -> None:
        for child in list(node.childNodes):
            if child.nodeType != child.ELEMENT_NODE:
                continue
            if child.tagName == "metadata":
                node.removeChild(child)
                continue
            flatten(child)
            if child.hasAttribute("id") and child.getAttribute("id") not in referenced:
                if node.tagName == "defs":
                    node.removeChild(child)
                    continue
                child.removeAttribute("id")
            if child.tagName == "defs" and not any(c.nodeType == c.ELEMENT_NODE for c in child.childNodes):
                node.removeChild(child)
            elif child.tagName == "g" and not child.attributes.length:
                while child.firstChild:
                    node.insertBefore(child.firstChild, child)
                node.removeChild(child)
        _joined(node, markers)

    flatten(root)
    return root.toxml()


def _moved(path: str, x: float, y: float) -> str:
    """An SVG path's data moved by (x, y): matplotlib writes absolute commands (M, L, Q, C, z)
    each followed by its points, so every number alternates between x and y."""
    words, at = [], 0
    for word in path.split():
        if word.isalpha():
            words.append(word)
            at = 0
        else:
            words.append(f"{float(word) + (y if at % 2 else x):.6f}".rstrip("0").rstrip("."))
            at += 1
    return " ".join(words)


def _inline_markers(document: minidom.Document) -> dict[minidom.Element, str]:
    """Each <use> of a path replaced by that path at the use's place, with the use's other
    attributes (its style, its clip-path); returns each new path with the marker it draws."""
    definitions = {
        path.getAttribute("id"): path for path in document.getElementsByTagName("path") if path.hasAttribute("id")
    }
    markers = {}
    for use in list(document.getElementsByTagName("use")):
        name = use.getAttribute("xlink:href").removeprefix("#")
        if name not in definitions:
            continue
        x, y = float(use.getAttribute("x") or 0), float(use.getAttribute("y") or 0)
        path = document.createElement("path")
        path.setAttribute("d", _moved(definitions[name].getAttribute("d"), x, y))
        for key, value in use.attributes.items():
            if key not in ("xlink:href", "x", "y"):
                path.setAttribute(key, value)
        parent = use.parentNode
        assert parent is not None  # an element found in the document is in it
        parent.replaceChild(path, use)
        markers[path] = name
    return markers


def _joined(node: minidom.Element, markers: dict[minidom.Element, str]) -> None:
    """Neighbouring paths with the same attributes joined into one path of several pieces, where
    that draws the same: lines without fill (ticks, grid lines, error bars), and copies of one
    marker (same shape, same winding, so their fills add up the same). Nothing translucent is
    joined: overlapping pieces of one path are not blended twice."""

    def kind(element) -> tuple | None:
        if element.nodeType != element.ELEMENT_NODE or element.tagName != "path" or element.hasAttribute("id"):
            return None
        attributes = tuple(sorted((k, v) for k, v in element.attributes.items() if k != "d"))
        style = element.getAttribute("style")
        if "opacity" in style or (element not in markers and "fill: none" not in style):
            return None
        return markers.get(element), attributes

    previous, previous_kind = None, None
    for child in list(node.childNodes):
        if child.nodeType != child.ELEMENT_NODE:
            continue
        this = kind(child)
        if this is not None and this == previous_kind and previous is not None:
            previous.setAttribute("d", previous.getAttribute("d") + " " + child.getAttribute("d"))
            node.removeChild(child)
        else:
            previous, previous_kind = child, this


def data_uri(svg: str) -> Markup:
    """The chart as an image address for the PDF's source: WeasyPrint parses an <img> of SVG once,
    where an inline <svg> also passes every element through the HTML parser and the CSS cascade
    (tests/benchmarks/render_report.py measures the difference). The drawing is the same vector
    SVG, its text still text. Base64 characters only: printed as it is (Markup), never read as
    text to shorten."""
    return Markup("data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii"))


def _scoped_ids(svg: str, salt: str) -> str:
    """Matplotlib numbers element ids per figure (figure_1, patch_1...); prefixing them, and
    every reference to them, lets several charts share one HTML document. The prefix is made
    safe in an id (a chart's salt may hold a run's name, which is any folder name) before it is
    written into the markup, which the report inlines as it is."""
    scope = html_id(salt)
    svg = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{scope}-{m.group(1)}"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{scope}-{m.group(1)})", svg)
    return re.sub(r'href="#([^"]+)"', lambda m: f'href="#{scope}-{m.group(1)}"', svg)


def _plain_log_ticks(axis) -> None:
    """A log axis's ticks as plain numbers (0.1, 1, 10), none on its minor ticks: matplotlib writes
    powers of ten with exponents a third smaller than the text around them, and a label on every
    minor tick of a short log axis overlaps."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis.set_major_formatter(FuncFormatter(lambda value, _position: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


MARK_COLOURS = {"OOM": "#8a5a00", "invalid": "#b00020"}  # any other mark (error, timeout...) in grey


def _draw_bars(
    axes, bars: list[Bar], labels: list[str], offset: float, thickness: float, colour: str, label: str | None = None
) -> None:
    """Bars at their label's row (+ offset); a mark in the place of a bar without a value, and
    beside a hatched bar with one."""
    drawn = [bar for bar in bars if bar.value is not None]
    rows = [labels.index(bar.label) + offset for bar in drawn]
    axes.barh(
        rows,
        [bar.value for bar in drawn],
        height=thickness * 0.9,
        xerr=[bar.error or 0 for bar in drawn],
        color=[colour if bar.mark is None else "white" for bar in drawn],
        edgecolor=[colour if bar.mark is None else MARK_COLOURS.get(bar.mark, "#777") for bar in drawn],
        hatch=[None if bar.mark is None else "////" for bar in drawn],
        linewidth=0.6,
        error_kw={"elinewidth": 0.8, "capsize": 2},
        label=label,
    )
    for bar in bars:  # the mark beside a hatched bar's end, or where a bar without a value would start
        if bar.mark is not None:
            at, colour = labels.index(bar.label) + offset, MARK_COLOURS.get(bar.mark, "#777")
            if bar.value is None:
                axes.text(
                    0.01, at, bar.mark, transform=axes.get_yaxis_transform(), va="center", fontsize=7, color=colour
                )
            else:
                axes.text(bar.value + (bar.error or 0), at, f" {bar.mark}", va="center", fontsize=7, color=colour)


LEGEND_COLUMNS = 6
LEGEND_POINTS = 7


def _legend_rows_in(rows: int) -> float:
    """The height of a frameless legend of `rows` rows at LEGEND_POINTS (matplotlib's defaults:
    half a line between rows, half a line of border and of space to the figure's edge)."""
    return (rows * 1.5 + 1) * LEGEND_POINTS * POINT_IN


def _legend_below(figure, entries: int, columns: int = LEGEND_COLUMNS) -> float:
    """A frameless legend of the figure's labelled artists under its panels, where it covers no
    bar; the height it takes, for _fixed_layout to leave room for."""
    columns = min(entries, columns)
    figure.legend(frameon=False, fontsize=LEGEND_POINTS, ncols=columns, loc="lower center")
    return _legend_rows_in(-(-entries // columns))


def log_axis_limits(smallest: float, largest: float) -> tuple[float, float]:
    """Where a log axis of bars starts and ends: at the power of ten at or below the smallest bar
    (a decade lower where that bar would be under twice it), and the power of ten above the
    largest. A bar's length on a log axis is its value over the axis's start: started just below
    the smallest, 0.098 and 0.106 would read as 1 to 10."""
    start = 10.0 ** floor(log10(smallest))
    return (start / 10 if smallest < 2 * start else start), 10.0 ** (floor(log10(largest)) + 1)


@drawn_once
def bar_chart(
    salt: str, bars: list[Bar], unit: str, *, log: bool = False, panels: bool = False, limit: Limit | None = None
) -> str:
    """Horizontal bars, error bars where there are several runs. One colour per group (model) on
    one axis, or, with `panels`, one panel per group, each on its own scale (a 70B model's bars
    are not a sliver beside a 7B's); `log` scales the axis by powers of ten; `limit` is drawn as
    a line in every panel."""
    labels = list(dict.fromkeys(bar.label for bar in bars))
    groups = list(dict.fromkeys(bar.group for bar in bars))
    below = 0.0  # the height of a legend under the panel
    with pyplot().rc_context(STYLE):
        if panels:  # the labels on the first panel only: the others draw no tick to line up with them
            height = _height_in(0.9 + 0.2 * len(labels))
            figure, grid = pyplot().subplots(1, len(groups), figsize=(WIDTH_IN, height), squeeze=False)
            all_axes = list(grid[0])
            for index, (axes, group) in enumerate(zip(all_axes, groups)):
                _draw_bars(
                    axes, [bar for bar in bars if bar.group == group], labels, 0.0, 0.8, PALETTE[index % len(PALETTE)]
                )
                axes.set_title(group)
                axes.set_ylim(len(labels) - 0.5, -0.5)  # the first label on top, as in every panel
                axes.set_yticks([])
        else:  # each label's bars side by side, one per group; one bar a label needs no room for others
            side_by_side = len(labels) < len(bars)
            thickness = 0.8 / len(groups) if side_by_side else 0.8
            rows_in = 0.28 * max(1, len(groups) ** 0.5) if side_by_side else 0.22
            figure, axes = pyplot().subplots(figsize=(WIDTH_IN, _height_in(0.8 + rows_in * len(labels))))
            all_axes = [axes]
            for index, group in enumerate(groups):
                offset = index * thickness - 0.4 + thickness / 2 if side_by_side else 0.0
                _draw_bars(
                    axes,
                    [bar for bar in bars if bar.group == group],
                    labels,
                    offset,
                    thickness,
                    PALETTE[index % len(PALETTE)],
                    label=group,
                )
            if len(groups) > 1:
                below = _legend_below(figure, len(groups), columns=3)
                figure.set_figheight(figure.get_figheight() + below)
        all_axes[0].set_yticks(range(len(labels)), labels)
        if not panels:
            all_axes[0].invert_yaxis()
        ends = [(bar.value, bar.value + (bar.error or 0.0)) for bar in bars if bar.value]
        for axes in all_axes:
            if log:
                axes.set_xscale("log")
                _plain_log_ticks(axes.xaxis)
                if ends:
                    axes.set_xlim(*log_axis_limits(min(low for low, _ in ends), max(high for _, high in ends)))
            if limit is not None:
                axes.axvline(limit.value, color=MARK_COLOURS["invalid"], linestyle="--", linewidth=0.8)
                axes.text(
                    limit.value,
                    0.0,
                    f"{limit.label} ",
                    transform=axes.get_xaxis_transform(),
                    va="bottom",
                    ha="right",
                    rotation=90,
                    fontsize=7,
                    color=MARK_COLOURS["invalid"],
                )
            axes.set_xlabel(unit)
            axes.grid(axis="x", linewidth=0.3)
        _fixed_layout(figure, all_axes, bottom_extra_in=below)
        return _svg(figure, salt)


@drawn_once
def scaling_chart(salt: str, series: list[ScalingSeries], device_word: str, devices_word: str) -> str:
    """Throughput against N with the ideal line N x throughput(1), and the efficiency 1 -> N."""
    with pyplot().rc_context(STYLE):
        figure, (left, right) = pyplot().subplots(1, 2, figsize=(WIDTH_IN, 2.6))
        for index, line in enumerate(series):
            colour = PALETTE[index % len(PALETTE)]
            gpus = [p.gpus for p in line.points]
            left.errorbar(
                gpus,
                [p.throughput for p in line.points],
                yerr=[p.error or 0 for p in line.points],
                marker="o",
                color=colour,
                capsize=2,
                linewidth=1,
                label=line.label,
            )
            base = next((p.throughput for p in line.points if p.gpus == 1), None)
            if base is not None:
                left.plot(
                    gpus,
                    [base * n for n in gpus],
                    linestyle="--",
                    color=colour,
                    linewidth=0.8,
                    label=f"{line.label}: ideal (N × 1 {device_word})",
                )
            efficient = [(p.gpus, p.efficiency) for p in line.points if p.efficiency is not None]
            right.plot(
                [n for n, _ in efficient],
                [100 * efficiency for _, efficiency in efficient],
                marker="o",
                color=colour,
                linewidth=1,
                label=line.label,
            )
        all_gpus = sorted({p.gpus for line in series for p in line.points})
        for axes in (left, right):
            axes.set_xticks(all_gpus)
            axes.set_xlabel(f"{devices_word} (N)")
            axes.grid(linewidth=0.3)
        left.set_ylabel("10^3 tokens/s")
        left.set_title("Throughput")
        left.legend(frameon=False, fontsize=7)
        right.axhline(100, color="grey", linestyle="--", linewidth=0.8)
        right.set_ylabel("scaling efficiency (%)")
        right.set_title("Efficiency: T(N) / (N × T(1))")
        right.set_ylim(
            bottom=0, top=max(110, *(100 * (p.efficiency or 0) + 10 for line in series for p in line.points))
        )
        _fixed_layout(figure, [left, right])
        return _svg(figure, salt)


@drawn_once
def ratio_chart(salt: str, bars: list[RatioBar], caption_unit: str) -> str:
    """B / A per case around 1, dark where Welch's test finds the difference significant."""
    with pyplot().rc_context(STYLE):
        figure, axes = pyplot().subplots(figsize=(WIDTH_IN, _height_in(0.8 + 0.25 * len(bars))))
        colours = [PALETTE[0] if bar.significant else "#9dc3e6" for bar in bars]
        axes.barh(range(len(bars)), [bar.ratio - 1 for bar in bars], left=1, color=colours)
        axes.axvline(1, color="black", linewidth=0.8)
        axes.set_yticks(range(len(bars)), [bar.label for bar in bars])
        axes.invert_yaxis()
        axes.set_xlabel(f"B / A, {caption_unit} (dark: significant difference)")
        axes.grid(axis="x", linewidth=0.3)
        _fixed_layout(figure, [axes])
        return _svg(figure, salt)


def _bytes_label(size: float, _position: int = 0) -> str:
    return binary_size(size)


@drawn_once
def sweep_chart(salt: str, sweeps: list[Sweep]) -> str:
    """Bus bandwidth and time against message size, both on log axes: small messages are bound
    by latency (flat time), large ones by bandwidth (flat busbw)."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    with pyplot().rc_context(STYLE):
        figure, (left, right) = pyplot().subplots(1, 2, figsize=(WIDTH_IN, 2.8))
        for index, sweep in enumerate(sweeps):
            sizes = [p.size_bytes for p in sweep.points]
            colour = PALETTE[index % len(PALETTE)]
            # a small square marks each measured size: a round dot is a curve of ~25 coordinates, which
            # the PDF printer parses one by one for every point of every sweep
            line = {"marker": "s", "markersize": 2, "color": colour, "linewidth": 1, "label": sweep.label}
            left.plot(sizes, [p.bus_bandwidth_gb_s for p in sweep.points], **line)
            right.plot(sizes, [p.time_us for p in sweep.points], **line)
        for axes in (left, right):
            axes.set_xscale("log", base=2)
            axes.xaxis.set_major_locator(LogLocator(base=4))
            axes.xaxis.set_major_formatter(FuncFormatter(_bytes_label))
            axes.tick_params(axis="x", labelrotation=45)
            axes.set_xlabel("message size")
            axes.grid(linewidth=0.3)
        left.set_ylabel("bus bandwidth (GB/s)")
        left.set_title("Bus bandwidth")
        left.legend(frameon=False, fontsize=7)
        right.set_yscale("log")
        _plain_log_ticks(right.yaxis)
        right.set_ylabel("time (µs)")
        right.set_title("Time per operation")
        _fixed_layout(figure, [left, right])
        return _svg(figure, salt)


class Segment(BaseModel):
    """One piece of a stacked bar; a hatched piece is a share of time the device sat idle."""

    label: str
    value: float
    hatched: bool = False


class Stack(BaseModel):
    label: str
    segments: list[Segment]


@drawn_once
def stacked_chart(salt: str, stacks: list[Stack], unit: str) -> str:
    """Horizontal stacked bars, one colour per segment label across all bars, so that a part
    reads the same in every case; a hatched segment (idle time) takes the colour of the segment
    before it, the phase it is part of."""
    labels = list(dict.fromkeys(seg.label for stack in stacks for seg in stack.segments if not seg.hatched))
    palette = PALETTE if len(labels) <= len(PALETTE) else pyplot().get_cmap("tab20").colors  # a step has ~12 parts
    colours = {label: palette[index % len(palette)] for index, label in enumerate(labels)}
    with pyplot().rc_context(STYLE):
        figure, axes = pyplot().subplots(figsize=(WIDTH_IN, _height_in(1.0 + 0.3 * len(stacks))))
        shown: set[str] = set()
        for row, stack in enumerate(stacks):
            left, colour = 0.0, PALETTE[0]
            for segment in stack.segments:
                colour = colour if segment.hatched else colours[segment.label]
                axes.barh(
                    row,
                    segment.value,
                    left=left,
                    height=0.7,
                    color=colour,
                    hatch="////" if segment.hatched else None,
                    edgecolor="white",
                    linewidth=0.4,
                    label=None if segment.label in shown else segment.label,
                )
                shown.add(segment.label)
                left += segment.value
        axes.set_yticks(range(len(stacks)), [stack.label for stack in stacks])
        axes.invert_yaxis()
        axes.set_xlabel(unit)
        axes.grid(axis="x", linewidth=0.3)
        _fixed_layout(figure, [axes], bottom_extra_in=_legend_below(figure, len(shown)))
        return _svg(figure, salt)


class CdfSeries(BaseModel):
    """The values of one engine and model (e.g. every request's TTFT), drawn as their empirical CDF."""

    label: str
    values: list[float]


@drawn_once
def cdf_chart(salt: str, panels: list[tuple[str, list[CdfSeries]]], unit: str) -> str:
    """One empirical CDF per series, one panel per quantity (TTFT, end-to-end latency): the whole
    distribution, so a long tail shows where a median hides it."""
    with pyplot().rc_context(STYLE):
        figure, all_axes = pyplot().subplots(1, len(panels), figsize=(WIDTH_IN, 2.6), squeeze=False)
        for axes, (title, series) in zip(all_axes[0], panels):
            for index, line in enumerate(series):
                values = sorted(line.values)
                fractions = [(rank + 1) / len(values) for rank in range(len(values))]
                axes.step(
                    values, fractions, where="post", color=PALETTE[index % len(PALETTE)], linewidth=1, label=line.label
                )
            axes.set_title(title)
            axes.set_xlabel(unit)
            axes.set_ylabel("fraction of requests")
            axes.set_ylim(0, 1.02)
            axes.grid(linewidth=0.3)
        all_axes[0][0].legend(frameon=False, fontsize=7, loc="lower right")
        _fixed_layout(figure, list(all_axes[0]))
        return _svg(figure, salt)


class ParetoPoint(BaseModel):
    """One point of a sweep: its throughput, its p99 latencies, whether it meets the objectives."""

    concurrency: int
    tokens_per_s: float
    ttft_p99_s: float
    tpot_p99_s: float
    meets: bool  # within the objectives, judged and valid
    invalid: bool = False  # no measurement (kit.measure.slo.SweepPoint.invalid): hollow, labelled "invalid"


class ParetoSeries(BaseModel):
    label: str
    points: list[ParetoPoint]


@drawn_once
def pareto_chart(salt: str, series: list[ParetoSeries], ttft_objective_s: float, tpot_objective_s: float) -> str:
    """Output tokens/s against p99 TPOT and against p99 TTFT, one line per engine through its
    points in order of concurrency, each labelled with it and filled where it meets both
    objectives (a dashed line at each), hollow and labelled "invalid" where it is no measurement;
    both latencies on log axes. A point whose p99 is a failed request (never answered) has no
    place on them and is left out."""
    from matplotlib.ticker import LogLocator

    with pyplot().rc_context(STYLE):
        figure, (left, right) = pyplot().subplots(1, 2, figsize=(WIDTH_IN, 2.8), sharey=True)
        for index, line in enumerate(series):
            colour = PALETTE[index % len(PALETTE)]
            for axes, latency, scale in ((left, "tpot_p99_s", 1000), (right, "ttft_p99_s", 1)):
                placed = [p for p in line.points if getattr(p, latency) < float("inf")]
                xs, ys = [scale * getattr(p, latency) for p in placed], [p.tokens_per_s for p in placed]
                axes.plot(xs, ys, color=colour, linewidth=1, label=line.label if axes is left else None)
                axes.scatter(
                    xs,
                    ys,
                    s=14,
                    zorder=3,
                    edgecolors=colour,
                    facecolors=[colour if p.meets else "white" for p in placed],
                    linewidths=1,
                )
                for x, y, point in zip(xs, ys, placed):
                    axes.annotate(
                        f"{point.concurrency} invalid" if point.invalid else str(point.concurrency),
                        (x, y),
                        textcoords="offset points",
                        xytext=(3, 3),
                        fontsize=7,
                        color=MARK_COLOURS["invalid"] if point.invalid else "black",
                    )
        for axes, objective, label in (
            (left, 1000 * tpot_objective_s, "p99 time per output token (ms)"),
            (right, ttft_objective_s, "p99 time to first token (s)"),
        ):
            axes.axvline(objective, color="grey", linestyle="--", linewidth=0.8)
            axes.set_xscale("log")
            axes.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            _plain_log_ticks(axes.xaxis)
            axes.set_xlabel(label)
            axes.grid(linewidth=0.3)
        left.set_ylabel("output tokens/s")
        left.set_title("Throughput against TPOT")
        right.set_title("Throughput against TTFT")
        left.legend(frameon=False, fontsize=LEGEND_POINTS)
        _fixed_layout(figure, [left, right])
        return _svg(figure, salt)


class TimeSeries(BaseModel):
    """One quantity of one case over time: (minutes since the start, value) per window."""

    label: str
    points: list[tuple[float, float]]


@drawn_once
def time_chart(salt: str, panels: list[tuple[str, str, list[TimeSeries]]]) -> str:
    """Panels side by side, each a quantity (title, y label) of each series over the minutes of a
    soak: whether the figures hold from the first minute to the last."""
    with pyplot().rc_context(STYLE):
        figure, all_axes = pyplot().subplots(1, len(panels), figsize=(WIDTH_IN, 2.6), squeeze=False)
        for axes, (title, unit, series) in zip(all_axes[0], panels):
            for index, line in enumerate(series):
                axes.plot(
                    [x for x, _ in line.points],
                    [y for _, y in line.points],
                    marker="s",
                    markersize=2,
                    color=PALETTE[index % len(PALETTE)],
                    linewidth=1,
                    label=line.label,
                )
            axes.set_title(title)
            axes.set_xlabel("minutes since the soak began")
            axes.set_ylabel(unit)
            axes.grid(linewidth=0.3)
        all_axes[0][0].legend(frameon=False, fontsize=LEGEND_POINTS, loc="lower left")
        _fixed_layout(figure, list(all_axes[0]))
        return _svg(figure, salt)
