"""Pinned runs drawn in a time-series figure (issue 47): a faded line per pinned run, under
the live lines, with a legend entry that says what differs from the live run.

A :class:`PinLayer` makes all its Bokeh models when the figure is built, hidden: one
``multi_line`` renderer per pin slot (a race's runs are one pin's several lines) and one
legend entry each.  Drawing a pin only sets a source's data and a legend label, so the
session's model graph never changes while a page is live (a new renderer makes Bokeh walk
every model of the document, see docs/architecture.md), and a pinned run costs nothing per
tick: its source changes only when pins or the live settings change.

A sweep's other values are a :class:`SweepLayer` beside the pins: a line per run of each
value, each with a source of its own into which every tick streams only the new points.  In
both, a line of one point is drawn as a marker (a line needs two).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from bokeh.core.properties import value
from bokeh.models import ColumnDataSource, Legend, LegendItem

from ..pins import MAX_PINS

#: one colour per pin slot, muted and distinct from the runs' own palettes (tab10), dark
#: enough for a projector at the width and alpha below
PIN_COLORS = ("#6b6b6b", "#a0522d", "#2f7f7f", "#8b6fae")
PIN_WIDTH = 3.0
PIN_ALPHA = 0.55
PIN_DASH = [10, 5]  # long dashes: at width 3 Bokeh's "dashed" reads as dots
#: characters of a pin's legend entry ("pin 1: Nh 16→64"): two entries side by side under a
#: half-width plot at 1280x720 in presentation mode (20 ran 30 px past its edge); the whole
#: text is in the pin menu
MAX_LEGEND = 17
#: a sweep's other runs: solid, nearly opaque, in tab10 colours no lab's own lines use (pink, olive, cyan)
SWEEP_COLORS = ("#e377c2", "#bcbd22", "#17becf")
SWEEP_ALPHA = 0.9
#: a line of one point draws nothing: a marker of this size shows the point (as a live curve's)
POINT_SIZE = 8


class PinLayer:
    """The pinned runs of one figure: ``show([(legend, [(x, y), ...]), ...])``, oldest first.

    ``y_range_name``: the axis the pinned lines share with the live metric they compare to.
    The lines are drawn under the figure's other renderers (never over the live line) and
    count in its data ranges (same axes)."""

    def __init__(self, fig, *, y_range_name: str = "default", legend_cols: int = 2,
                 colors: tuple[str, ...] = PIN_COLORS[:MAX_PINS], dash: Any = PIN_DASH, alpha: float = PIN_ALPHA,
                 name: str = "pin") -> None:
        self.figure = fig
        self._y_range_name = y_range_name
        self.sources: list[ColumnDataSource] = []
        self.lines = []
        kwargs = {} if y_range_name == "default" else {"y_range_name": y_range_name}
        for i, color in enumerate(colors):
            source = ColumnDataSource({"xs": [], "ys": []}, name=f"{name}-{i}")
            renderer = fig.multi_line("xs", "ys", source=source, line_color=color, line_width=PIN_WIDTH,
                                      line_alpha=alpha, line_dash=dash, visible=False,
                                      name=f"{name} {i + 1}", **kwargs)
            self.sources.append(source)
            self.lines.append(renderer)
        # each slot's lines of one point, as markers
        self.points, self.markers = _markers(fig, colors, alpha, name, kwargs)
        self.renderers = self.lines + self.markers
        # under the live lines: the figure draws its renderers in order
        fig.renderers = self.renderers + [r for r in fig.renderers if r not in self.renderers]
        self.items = [LegendItem(label=value(""), renderers=[r], visible=False) for r in self.lines]
        self._y_range = fig.extra_y_ranges[y_range_name] if y_range_name != "default" else fig.y_range
        self._x_range = fig.x_range
        self.legend = Legend(items=self.items, location="left", orientation="horizontal", ncols=legend_cols,
                             click_policy="hide", label_text_font_size="9pt", glyph_width=20, glyph_height=12,
                             label_height=12, spacing=8, padding=2, margin=2, border_line_alpha=0.0,
                             background_fill_alpha=0.0, visible=False,
                             # named: Bokeh's legend_label= on this figure keeps using its one
                             # unnamed legend (a second unnamed one makes it refuse)
                             name="pins")
        fig.add_layout(self.legend, "below")

    def sweep_layer(self, runs: int = 1) -> "SweepLayer":
        """A layer for a sweep's other values in this figure: ``runs`` solid lines per value
        (one per run a value makes), of their own colours, listed in this layer's legend (made
        at build time, as this one)."""
        return SweepLayer(self, runs)

    def show(self, pins: Sequence[tuple[str, Sequence[tuple[Sequence[float], Sequence[float]]]]]) -> None:
        """Draw ``pins``: per slot its legend text and lines (``(x, y)`` pairs; non-finite y
        values become gaps; a line of one point is a marker); the slots after the last are hidden."""
        for i, source in enumerate(self.sources):
            renderer, item = self.lines[i], self.items[i]
            if i < len(pins):
                text, lines = pins[i]
                xs, ys = [], []
                for x, y in lines:
                    y = np.asarray(y, dtype=float)
                    xs.append(np.asarray(x, dtype=float))
                    ys.append(np.where(np.isfinite(y), y, np.nan))
                source.data = {"xs": xs, "ys": ys}
                label = text if len(text) <= MAX_LEGEND else text[:MAX_LEGEND - 1] + "…"
                if getattr(item.label, "value", item.label) != label:
                    item.label = value(label)  # a text, not the name of a data column
                renderer.visible = item.visible = any(len(x) for x in xs)
                _show_points(self.points[i], self.markers[i], xs, ys)
            elif renderer.visible or item.visible or source.data["xs"]:
                source.data = {"xs": [], "ys": []}
                renderer.visible = item.visible = False
                _show_points(self.points[i], self.markers[i], [], [])
        shown = any(item.visible for item in self.legend.items)
        if self.legend.visible != shown:
            self.legend.visible = shown
        self._ranges()

    def _ranges(self) -> None:
        _in_ranges((self._y_range, self._x_range), self.renderers)

    @property
    def labels(self) -> list[str]:
        """The legend texts of the pins shown (for tests)."""
        return [str(getattr(item.label, "value", item.label)) for item in self.items if item.visible]


def _in_ranges(ranges: Sequence[Any], renderers: Sequence[Any]) -> None:
    """``renderers`` count in the figure's auto ``ranges`` (``only_visible`` ranges list their
    renderers; a figure that lists none takes every renderer anyway)."""
    for axis_range in ranges:
        listed = list(getattr(axis_range, "renderers", []) or [])
        if not listed or listed == "auto":
            continue
        wanted = listed + [r for r in renderers if r not in listed]
        if wanted != listed:
            axis_range.renderers = wanted


def _markers(fig, colors: Sequence[str], alpha: float, name: str, kwargs: dict) -> tuple[list, list]:
    """Per slot a hidden marker renderer and its source: the points of the slot's lines of one
    point (a line of one point draws nothing; a live curve draws a marker too)."""
    points, markers = [], []
    for i, color in enumerate(colors):
        source = ColumnDataSource({"x": [], "y": []}, name=f"{name}-{i}-points")
        points.append(source)
        markers.append(fig.scatter("x", "y", source=source, marker="circle", size=POINT_SIZE, fill_color=color,
                                   line_color=color, fill_alpha=alpha, line_alpha=alpha, visible=False,
                                   name=f"{name}-point {i + 1}", **kwargs))
    return points, markers


def _show_points(source: ColumnDataSource, marker: Any, xs: Sequence[Sequence[float]],
                 ys: Sequence[Sequence[float]]) -> None:
    """Mark the lines of ``xs``/``ys`` that have one point (a finite one); the source is set
    only when they change."""
    lone = [(float(x[0]), float(y[0])) for x, y in zip(xs, ys) if len(x) == 1 and math.isfinite(y[0])]
    if lone != list(zip(source.data["x"], source.data["y"])):
        source.data = {"x": [p[0] for p in lone], "y": [p[1] for p in lone]}
    if marker.visible != bool(lone):
        marker.visible = bool(lone)


def _points(x: Sequence[float], y: Sequence[float]) -> tuple[list[float], list[float]]:
    """A line's points as the sources hold them: lists of floats (a stream extends a list in
    place; a NumPy column is copied whole), non-finite y values as NaN (gaps)."""
    return ([float(v) for v in x], [float(v) if math.isfinite(v) else math.nan for v in map(float, y)])


class SweepLayer:
    """A sweep's other values in one figure (issue 47): per value a slot of ``runs`` lines,
    one per run the value makes (a race makes several), solid, in :data:`SWEEP_COLORS`, listed
    in the pins' legend (one entry per value).

    Each line has a source of its own, so a tick appends only its new points
    (:meth:`draw` ``whole=False``: ``ColumnDataSource.stream``, a message of those points) and
    the server's work per tick is the new Records', not the history's; a whole line is drawn
    again only when the sweep, its settings or the run change.  Made at build time, hidden
    (the session's model graph never changes while a page is live)."""

    def __init__(self, pins: PinLayer, runs: int = 1, colors: tuple[str, ...] = SWEEP_COLORS) -> None:
        fig = pins.figure
        self.figure = fig
        kwargs = {} if pins._y_range_name == "default" else {"y_range_name": pins._y_range_name}
        self.sources: list[list[ColumnDataSource]] = []
        self.lines: list[list[Any]] = []
        for i, color in enumerate(colors):
            sources = [ColumnDataSource({"x": [], "y": []}, name=f"sweep-{i}-{j}") for j in range(runs)]
            self.sources.append(sources)
            self.lines.append([fig.line("x", "y", source=source, line_color=color, line_width=PIN_WIDTH,
                                        line_alpha=SWEEP_ALPHA, visible=False, name=f"sweep {i + 1}", **kwargs)
                               for source in sources])
        self.points, self.markers = _markers(fig, colors, SWEEP_ALPHA, "sweep", kwargs)
        self.renderers = [r for lines in self.lines for r in lines] + self.markers
        # under the other lines, as the pins: the figure draws its renderers in order
        fig.renderers = self.renderers + [r for r in fig.renderers if r not in self.renderers]
        self.items = [LegendItem(label=value(""), renderers=list(lines), visible=False) for lines in self.lines]
        self.legend = pins.legend  # the values list under the pins
        self.legend.items = [*self.legend.items, *self.items]
        self._ranges = (pins._y_range, pins._x_range)
        self._shown = [False] * len(colors)

    @property
    def runs(self) -> int:
        """Lines per value."""
        return len(self.sources[0]) if self.sources else 0

    def draw(self, slot: int, run: int, x: Sequence[float], y: Sequence[float], *, whole: bool) -> None:
        """Run ``run`` of value ``slot``: its whole line (``whole``: the source's data set), or
        the points after those drawn (streamed).  Never both in one held batch: a data set and a
        stream in one message would reach the browser as the new data *plus* the points."""
        if slot >= len(self.sources) or run >= self.runs:
            return  # more values or runs than the layer was made for (see Lab.sweep_runs)
        source = self.sources[slot][run]
        x, y = _points(x, y)
        if whole or not len(source.data["x"]):
            if x or len(source.data["x"]):
                source.data = {"x": x, "y": y}
        elif x:
            source.stream({"x": x, "y": y})

    def settle(self, texts: Sequence[str]) -> None:
        """After :meth:`draw`: the first ``len(texts)`` values' legend entries say ``texts``,
        the other slots are emptied; a line of one point is a marker."""
        for i, (sources, lines, item) in enumerate(zip(self.sources, self.lines, self.items)):
            if i >= len(texts):
                for source in sources:
                    if len(source.data["x"]):
                        source.data = {"x": [], "y": []}
            else:
                label = texts[i] if len(texts[i]) <= MAX_LEGEND else texts[i][:MAX_LEGEND - 1] + "…"
                if getattr(item.label, "value", item.label) != label:
                    item.label = value(label)
            shown = i < len(texts) and any(len(source.data["x"]) for source in sources)
            if shown != self._shown[i]:  # only then: a line hidden from its legend stays hidden
                self._shown[i] = item.visible = shown
                for line in lines:
                    line.visible = shown
            lone = [s for s in sources if len(s.data["x"]) == 1]  # a lone point: its list is the source's own
            _show_points(self.points[i], self.markers[i], [s.data["x"] for s in lone], [s.data["y"] for s in lone])
        shown = any(item.visible for item in self.legend.items)
        if self.legend.visible != shown:
            self.legend.visible = shown
        _in_ranges(self._ranges, self.renderers)

    def data(self) -> list[list[tuple[list[float], list[float]]]]:
        """Each value's lines as drawn, ``(x, y)`` per run (for tests)."""
        return [[(list(s.data["x"]), list(s.data["y"])) for s in sources] for sources in self.sources]

    @property
    def labels(self) -> list[str]:
        """The legend texts of the values shown (for tests)."""
        return [str(getattr(item.label, "value", item.label)) for item in self.items if item.visible]
