"""Histograms with kernel density estimates, one per slice (e.g. per training epoch)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Mapping

import numpy as np
import panel as pn
import scipy.stats
from bokeh.models import ColumnDataSource, HoverTool, Legend, LegendItem
from bokeh.palettes import Category10_10
from bokeh.plotting import figure

from .placeholder import Placeholder


def density_curve(values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Gaussian KDE of ``values`` on ``grid`` (Scott's bandwidth); a narrow bump when the
    values have no spread (one value, or all equal), where a KDE is undefined."""
    values = np.asarray(values, dtype=float)
    if values.size >= 2 and np.ptp(values) > 0:
        try:
            return scipy.stats.gaussian_kde(values)(grid)
        except np.linalg.LinAlgError:
            pass
    width = max(1e-3, 0.01 * (grid[-1] - grid[0]))
    return np.exp(-0.5 * ((grid - values.mean()) / width) ** 2) / (width * np.sqrt(2 * np.pi))


#: the newest drawings, shared by the pages that draw the same arrays (a shared run's
#: followers draw the teacher's Records: one computes the bins and KDEs, the others reuse them)
_DRAWINGS: "OrderedDict[tuple, tuple[list, list]]" = OrderedDict()
_DRAWINGS_KEPT = 8
_DRAWINGS_LOCK = threading.Lock()


def drawing(slices: Mapping[str, np.ndarray], bins: int) -> list[tuple[dict, dict]]:
    """Each slice's bars and KDE line on shared bins: ``[(bars data, line data), ...]``.
    Computed once for the same arrays (by identity: the entry keeps them, so an id is not
    reused while it is kept); the data must not be changed in place."""
    arrays = list(slices.values())
    key = (bins, tuple((label, id(v)) for label, v in slices.items()))
    with _DRAWINGS_LOCK:
        kept = _DRAWINGS.get(key)
        if kept is not None and all(a is b for a, b in zip(kept[0], arrays)):
            _DRAWINGS.move_to_end(key)
            return kept[1]
    values = [np.asarray(v, dtype=float) for v in arrays]
    pooled = np.concatenate(values)
    low, high = float(pooled.min()), float(pooled.max())
    pad = 0.05 * (high - low) if high > low else max(1e-3, abs(low) * 1e-3)
    edges = np.linspace(low - pad, high + pad, bins + 1)
    grid = np.linspace(edges[0], edges[-1], 200)
    drawn = []
    for label, v in zip(slices, values):
        density, _ = np.histogram(v, bins=edges, density=True)
        counts, _ = np.histogram(v, bins=edges)
        drawn.append(({"left": edges[:-1], "right": edges[1:], "top": density, "count": counts,
                       "label": [label] * bins}, {"x": grid, "y": density_curve(v, grid)}))
    with _DRAWINGS_LOCK:
        _DRAWINGS[key] = (arrays, drawn)
        while len(_DRAWINGS) > _DRAWINGS_KEPT:
            _DRAWINGS.popitem(last=False)
    return drawn


class HistogramSlices:
    """Density-normalised histograms (bars) and KDEs (lines) of several named slices.

    Hovering a bar says its slice, its bin and its density (and how many values fell in it).
    The renderers of ``slices`` slices are made at once: adding a renderer to a live
    document makes Bokeh re-walk every model of the session (measured: a fifth of the
    server's event loop with 8 TAP sessions, when each made its four while training).
    """

    def __init__(self, title: str, *, x_label: str = "value", y_label: str = "density", bins: int = 30,
                 height: int = 300, name: str = "histogram", empty_text: str = "Press ▶ Play to start",
                 slices: int = 4) -> None:
        self.bins = bins
        fig = figure(title=title, height=height, sizing_mode="stretch_width", x_axis_label=x_label,
                     y_axis_label=y_label, tools="pan,wheel_zoom,box_zoom,reset,save", toolbar_location="right")
        fig.title.text_font_size = "11pt"
        # two entries a row: one row of four long labels would widen the plot past its column
        self.legend = Legend(items=[], location="left", orientation="horizontal", click_policy="hide", ncols=2,
                             label_text_font_size="9pt", border_line_alpha=0.0, background_fill_alpha=0.0)
        fig.add_layout(self.legend, "below")
        self.placeholder = Placeholder(fig, empty_text)
        self._hover = HoverTool(renderers=[], tooltips=[("", "@label"), (x_label, "@left{0,0.[000]} to @right{0,0.[000]}"),
                                                        (y_label, "@top{0.[0000]}"), ("values in bin", "@count")])
        fig.add_tools(self._hover)
        self.figure = fig
        self._bars: list[ColumnDataSource] = []
        self._lines: list[ColumnDataSource] = []
        self._name = name
        self.pane = pn.pane.Bokeh(fig, sizing_mode="stretch_width")
        self.view = pn.Column(self.pane, sizing_mode="stretch_width", margin=0)
        self._ensure(slices)
        for item in self.legend.items:
            item.visible = False

    def _ensure(self, n: int) -> None:
        while len(self._bars) < n:
            k = len(self._bars)
            color = Category10_10[k % 10]
            bars = ColumnDataSource(self._no_bars(), name=f"{self._name}-bars-{k}")
            line = ColumnDataSource({"x": [], "y": []}, name=f"{self._name}-kde-{k}")
            r1 = self.figure.quad(left="left", right="right", top="top", bottom=0, source=bars, fill_color=color,
                                  fill_alpha=0.25, line_color=color, line_alpha=0.5)
            r2 = self.figure.line("x", "y", source=line, color=color, line_width=2)
            self.legend.items.append(LegendItem(label="", renderers=[r1, r2]))
            self._hover.renderers = [*self._hover.renderers, r1]
            self._bars.append(bars)
            self._lines.append(line)

    @staticmethod
    def _no_bars() -> dict:
        return {"left": [], "right": [], "top": [], "count": [], "label": []}

    def update(self, slices: Mapping[str, np.ndarray]) -> None:
        """Show one histogram + KDE per entry of ``slices`` (label -> values); shared bins."""
        slices = {k: v for k, v in slices.items() if np.size(v)}
        self._ensure(len(slices))
        if not slices:
            for s in self._bars:
                s.data = self._no_bars()
            for s in self._lines:
                s.data = {"x": [], "y": []}
            self.placeholder.show()
            return
        for k, (label, (bars, line)) in enumerate(zip(slices, drawing(slices, self.bins))):
            self._bars[k].data = dict(bars)
            self._lines[k].data = dict(line)
            self.legend.items[k].label = {"value": f"{label} ({np.size(slices[label])})"}
            self.legend.items[k].visible = True
        for k in range(len(slices), len(self._bars)):
            self._bars[k].data = self._no_bars()
            self._lines[k].data = {"x": [], "y": []}
            self.legend.items[k].visible = False
        self.placeholder.hide()
