"""Pinned runs drawn in a time-series figure (issue 47): a faded line per pinned run, under
the live lines, with a legend entry that says what differs from the live run.

A :class:`PinLayer` makes all its Bokeh models when the figure is built, hidden: one
``multi_line`` renderer per pin slot (a race's runs are one pin's several lines) and one
legend entry each.  Drawing a pin only sets a source's data and a legend label, so the
session's model graph never changes while a page is live (a new renderer makes Bokeh walk
every model of the document, see docs/architecture.md), and a pinned run costs nothing per
tick: its source changes only when pins or the live settings change.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from bokeh.core.properties import value
from bokeh.models import ColumnDataSource, Legend, LegendItem

from boltzlab.dashboard.pins import MAX_PINS

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


class PinLayer:
    """The pinned runs of one figure: ``show([(legend, [(x, y), ...]), ...])``, oldest first.

    ``y_range_name``: the axis the pinned lines share with the live metric they compare to.
    The lines are drawn under the figure's other renderers (never over the live line) and
    count in its data ranges (same axes)."""

    def __init__(self, fig, *, y_range_name: str = "default", legend_cols: int = 2,
                 colors: tuple[str, ...] = PIN_COLORS[:MAX_PINS], dash: Any = PIN_DASH, alpha: float = PIN_ALPHA,
                 name: str = "pin", legend: Legend | None = None) -> None:
        self.figure = fig
        self.sources: list[ColumnDataSource] = []
        self.renderers = []
        kwargs = {} if y_range_name == "default" else {"y_range_name": y_range_name}
        for i, color in enumerate(colors):
            source = ColumnDataSource({"xs": [], "ys": []}, name=f"{name}-{i}")
            renderer = fig.multi_line("xs", "ys", source=source, line_color=color, line_width=PIN_WIDTH,
                                      line_alpha=alpha, line_dash=dash, visible=False,
                                      name=f"{name} {i + 1}", **kwargs)
            self.sources.append(source)
            self.renderers.append(renderer)
        # under the live lines: the figure draws its renderers in order
        fig.renderers = self.renderers + [r for r in fig.renderers if r not in self.renderers]
        self.items = [LegendItem(label=value(""), renderers=[r], visible=False) for r in self.renderers]
        self._y_range = fig.extra_y_ranges[y_range_name] if y_range_name != "default" else fig.y_range
        self._x_range = fig.x_range
        if legend is not None:  # another layer's legend (a sweep's runs list under the pins)
            self.legend = legend
            legend.items = [*legend.items, *self.items]
            return
        self.legend = Legend(items=self.items, location="left", orientation="horizontal", ncols=legend_cols,
                             click_policy="hide", label_text_font_size="9pt", glyph_width=20, glyph_height=12,
                             label_height=12, spacing=8, padding=2, margin=2, border_line_alpha=0.0,
                             background_fill_alpha=0.0, visible=False,
                             # named: Bokeh's legend_label= on this figure keeps using its one
                             # unnamed legend (a second unnamed one makes it refuse)
                             name="pins")
        fig.add_layout(self.legend, "below")
        self._y_range_name = y_range_name

    def sweep_layer(self) -> "PinLayer":
        """A layer for a sweep's other runs in this figure: solid lines of their own colours
        over the pins, listed in this layer's legend (made at build time, as this one)."""
        layer = PinLayer(self.figure, y_range_name=self._y_range_name, colors=SWEEP_COLORS, dash="solid",
                         alpha=SWEEP_ALPHA, name="sweep", legend=self.legend)
        layer._y_range_name = self._y_range_name
        return layer

    def show(self, pins: Sequence[tuple[str, Sequence[tuple[Sequence[float], Sequence[float]]]]]) -> None:
        """Draw ``pins``: per slot its legend text and lines (``(x, y)`` pairs; non-finite y
        values become gaps); the slots after the last are hidden."""
        for i, source in enumerate(self.sources):
            renderer, item = self.renderers[i], self.items[i]
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
                renderer.visible = item.visible = any(len(x) > 1 for x in xs)  # a lone point draws no line
            elif renderer.visible or item.visible or source.data["xs"]:
                source.data = {"xs": [], "ys": []}
                renderer.visible = item.visible = False
        shown = any(item.visible for item in self.legend.items)
        if self.legend.visible != shown:
            self.legend.visible = shown
        self._ranges()

    def _ranges(self) -> None:
        """The pinned lines count in the figure's auto ranges (``only_visible`` ranges list
        their renderers; a figure that lists none takes every renderer anyway)."""
        for axis_range in (self._y_range, self._x_range):
            listed = list(getattr(axis_range, "renderers", []) or [])
            if not listed or listed == "auto":
                continue
            wanted = listed + [r for r in self.renderers if r not in listed]
            if wanted != listed:
                axis_range.renderers = wanted

    @property
    def labels(self) -> list[str]:
        """The legend texts of the pins shown (for tests)."""
        return [str(getattr(item.label, "value", item.label)) for item in self.items if item.visible]
