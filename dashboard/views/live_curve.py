"""A live curve: several named lines streamed into raw Bokeh sources.

Raw ``ColumnDataSource.stream(..., rollover=N)`` inside a ``pn.pane.Bokeh`` (see docs/architecture.md:
HoloViews streams were measured too slow at 10 Hz).  Every line has a bounded length.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import panel as pn
from bokeh.models import (BasicTickFormatter, ColumnDataSource, DataRange1d, HoverTool, Label, Legend,
                          LegendItem, LinearAxis, Span)
from bokeh.plotting import figure

from .placeholder import Placeholder


class LiveCurve:
    """A figure of named lines, with an optional second y-axis on the right.

    Parameters
    ----------
    title, x_label, y_label
        What the plot shows; every axis is labelled.
    y2_label
        Label of the right axis; lines added with ``axis="right"`` use it.
    rollover
        Maximum number of points kept per line (older points are discarded).
    legend_cols
        Entries per row of the legend under the plot.
    empty_text
        What the empty plot says (how to fill it).
    """

    def __init__(self, title: str, x_label: str, y_label: str, *, y2_label: str | None = None,
                 rollover: int = 5000, height: int = 320, name: str = "curve",
                 plain_ticks: bool = False, legend_cols: int = 4,
                 empty_text: str = "Press ▶ Play to start") -> None:
        self.rollover = rollover
        self.name = name
        self.sources: dict[str, ColumnDataSource] = {}
        self._markers: dict[str, object] = {}  # key -> the scatter renderer of a lone point
        self._left: list = []
        self._right: list = []
        self._target: ColumnDataSource | None = None
        self._target_renderer = None
        self._target_item: LegendItem | None = None
        self._target_value: float | None = None
        self._x_max = 1.0
        self.pin_layer = None  # pinned runs' lines (add_pins)
        fig = figure(title=title, height=height, sizing_mode="stretch_width",
                     x_axis_label=x_label, y_axis_label=y_label,
                     tools="pan,wheel_zoom,box_zoom,reset,save", toolbar_location="right",
                     y_range=DataRange1d(only_visible=True, range_padding=0.08),
                     x_range=DataRange1d(only_visible=True, range_padding=0.02))
        fig.title.text_font_size = "13pt"
        if plain_ticks:  # large sums read better as -38000 than -3.8e+4
            fig.yaxis[0].formatter = BasicTickFormatter(use_scientific=False)
        if y2_label is not None:
            fig.extra_y_ranges = {"right": DataRange1d(only_visible=True, range_padding=0.08)}
            fig.add_layout(LinearAxis(y_range_name="right", axis_label=y2_label), "right")
        self._hover = HoverTool(tooltips=[("line", "$name"), (x_label, "@x"),
                                          ("value", "@y{0,0.[0000]}")], renderers=[])
        fig.add_tools(self._hover)
        # the legend sits under the plot area, never over the curves (a legend at the
        # side would squeeze half-width plots); click an entry to hide its line
        # (``legend_label=`` in add_line / add_target reuses this legend)
        self.legend = Legend(items=[], location="left", orientation="horizontal",
                             ncols=legend_cols, click_policy="hide",
                             label_text_font_size="9pt", glyph_width=20, glyph_height=12,
                             label_height=12, spacing=12, padding=2, margin=2,
                             border_line_alpha=0.0, background_fill_alpha=0.0)
        fig.add_layout(self.legend, "below")
        self.figure = fig
        self.placeholder = Placeholder(fig, empty_text)
        self.pane = pn.pane.Bokeh(fig, sizing_mode="stretch_width")
        # show/hide this wrapper, not the pane (toggling a Bokeh pane's `visible` fails)
        self.view = pn.Column(self.pane, sizing_mode="stretch_width", margin=0)

    def add_line(self, key: str, label: str, color: str, *, axis: str = "left",
                 dash: str = "solid", width: float = 2.0, legend: bool | str = True) -> None:
        """Add a line named ``label`` fed by :meth:`stream` under ``key``.

        ``legend``: True lists the line under ``label``, False leaves it out, a string
        joins the legend entry of that name (one click then hides both lines).
        """
        source = ColumnDataSource(data={"x": np.zeros(0), "y": np.zeros(0)},
                                  name=f"{self.name}:{key}")
        kwargs = {"y_range_name": "right"} if axis == "right" else {}
        if legend:
            kwargs["legend_label"] = legend if isinstance(legend, str) else label
        renderer = self.figure.line("x", "y", source=source, color=color, line_width=width,
                                    line_dash=dash, name=label, **kwargs)
        # a line of one point draws nothing: a marker shows it until the second point comes
        kwargs.pop("legend_label", None)
        self._markers[key] = self.figure.scatter("x", "y", source=source, color=color, size=7,
                                                 name=label, **kwargs)
        (self._right if axis == "right" else self._left).append(renderer)
        self.figure.y_range.renderers = self._left + self._extra_left()
        if axis == "right":
            self.figure.extra_y_ranges["right"].renderers = list(self._right)
        self._hover.renderers = self._left + self._right
        self.sources[key] = source

    def legend_item(self, label: str) -> LegendItem | None:
        """The legend entry called ``label`` (set its ``visible`` to show or hide it)."""
        for item in self.legend.items:
            if item.label == label or getattr(item.label, "value", None) == label:
                return item
        return None

    def add_target(self, label: str, color: str = "#222") -> None:
        """A dashed horizontal target line that spans the data (part of the y-range)."""
        self._target = ColumnDataSource({"x": [], "y": []}, name=f"{self.name}:target")
        renderer = self.figure.line("x", "y", source=self._target, color=color, line_width=1.5,
                                    line_dash="dashed", legend_label=label, name=label)
        self._target_renderer = renderer
        self._target_item = self.legend_item(label)
        self.figure.y_range.renderers = self._left + self._extra_left()
        self._draw_target()

    def set_target(self, value: float | None) -> None:
        """Move the target line to ``value`` (``None`` hides it)."""
        self._target_value = value
        self._draw_target()

    def _draw_target(self) -> None:
        if self._target is None:
            return
        value = self._target_value
        ok = value is not None and np.isfinite(value)
        self._target.data = {"x": [1.0, max(self._x_max, 2.0)] if ok else [],
                             "y": [value, value] if ok else []}
        if self._target_item is not None and self._target_item.visible != ok:
            self._target_item.visible = ok  # no target, no legend entry

    def stream(self, key: str, x: Sequence[float], y: Sequence[float]) -> None:
        """Append points to line ``key`` (non-finite y values become gaps)."""
        if len(x) == 0:
            return
        y = np.asarray(y, dtype=float)
        y = np.where(np.isfinite(y), y, np.nan)
        x = np.asarray(x, dtype=float)
        source = self.sources[key]
        if len(source.data["x"]) == 0:
            # assign, not stream: a clear() and a stream in one held batch would reach the
            # browser as the (already filled) data *plus* the streamed points, doubled
            source.data = {"x": x[-self.rollover:], "y": y[-self.rollover:]}
        else:
            source.stream({"x": x, "y": y}, rollover=self.rollover)
        marker = self._markers.get(key)
        lone = len(source.data["x"]) < 2
        if marker is not None and marker.visible != lone:
            marker.visible = lone
        if x[-1] > self._x_max:
            self._x_max = float(x[-1])
            if self._target_value is not None:
                self._draw_target()
        self.placeholder.hide()

    def say(self, text: str) -> None:
        """Write ``text`` where the empty plot says "Press ▶ Play", until the next point
        comes (e.g. a line that waits for its first value while another already draws)."""
        self.placeholder.say(text)

    def add_hline(self, value: float | None, *, color: str = "#444", dash: str = "dashed",
                  axis: str = "left", text: str = "") -> HLine:
        """A labelled horizontal reference line (e.g. a target); ``None`` hides it."""
        return HLine(self.figure, value, color=color, dash=dash, text=text,
                     range_name="right" if axis == "right" else "default")

    def clear(self) -> None:
        """Empty every line (keeps the lines)."""
        for source in self.sources.values():
            source.data = {"x": np.zeros(0), "y": np.zeros(0)}
        for marker in self._markers.values():
            marker.visible = True
        self.placeholder.reset()
        self._x_max = 1.0
        self._draw_target()

    def _extra_left(self) -> list:
        extra = [self._target_renderer] if self._target_renderer is not None else []
        return extra + (self.pin_layer.renderers if self.pin_layer is not None else [])

    def add_pins(self, legend_cols: int = 2):
        """Make this figure show pinned runs (:class:`~boltzlab.dashboard.views.pinned.PinLayer`,
        on the left axis): at build time, before the page is shown."""
        from .pinned import PinLayer

        self.pin_layer = PinLayer(self.figure, legend_cols=legend_cols)
        self.figure.y_range.renderers = self._left + self._extra_left()
        return self.pin_layer

    def remove_lines(self) -> None:
        """Drop every line added with :meth:`add_line` (and its legend entry)."""
        lines = set(self._left + self._right)
        markers = set(self._markers.values())
        self.figure.renderers = [r for r in self.figure.renderers if r not in lines and r not in markers]
        self._markers.clear()
        self.legend.items = [i for i in self.legend.items if not lines.intersection(i.renderers)]
        self._left.clear()
        self._right.clear()
        self.sources.clear()
        self._hover.renderers = []

    def n_points(self, key: str) -> int:
        return len(self.sources[key].data["x"])


class HLine:
    """A horizontal :class:`Span` with a text label; set ``location`` / ``visible``."""

    def __init__(self, fig, value: float | None, *, color: str, dash: str, text: str,
                 range_name: str) -> None:
        self.span = Span(dimension="width", location=0.0, line_color=color, line_dash=dash,
                         line_width=1.5, y_range_name=range_name)
        self.label = Label(x=8, x_units="screen", y=0.0, text=text, text_color=color,
                           text_font_size="9pt", y_offset=3, y_range_name=range_name)
        fig.add_layout(self.span)
        fig.add_layout(self.label)
        self.location = value
        self.visible = value is not None

    @property
    def location(self) -> float:
        return self.span.location

    @location.setter
    def location(self, value: float | None) -> None:
        value = 0.0 if value is None else float(value)
        self.span.location = value
        self.label.y = value

    @property
    def visible(self) -> bool:
        return self.span.visible

    @visible.setter
    def visible(self, value: bool) -> None:
        self.span.visible = self.label.visible = bool(value)
