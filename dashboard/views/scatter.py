"""Scatter views: a 2-D embedding coloured by a value, with an optional overlay of points."""

from __future__ import annotations

import numpy as np
import panel as pn
from bokeh.models import BasicTickFormatter, ColorBar, ColumnDataSource, HoverTool, LinearColorMapper, NoOverlap
from bokeh.palettes import Viridis256
from bokeh.plotting import figure

from .placeholder import Placeholder


class EmbeddingScatter:
    """Points at (x, y) coloured by ``value`` (e.g. a TAP free energy), plus an overlay.

    The colour range follows the values shown (min to max), as the paper's Figure 6 does
    per epoch; the overlay (e.g. the solutions over the data of Figure 7) is drawn in
    black on top, and its legend says what it is.
    """

    def __init__(self, title: str, *, color_label: str = "value", x_label: str = "Isomap 1",
                 y_label: str = "Isomap 2", overlay_label: str = "overlay", height: int = 360,
                 name: str = "embedding", empty_text: str = "Press ▶ Play to start") -> None:
        self.mapper = LinearColorMapper(palette=Viridis256, low=0.0, high=1.0)
        self.source = ColumnDataSource({"x": [], "y": [], "value": [], "label": []}, name=name)
        self.overlay = ColumnDataSource({"x": [], "y": [], "label": []}, name=f"{name}-overlay")
        fig = figure(title=title, height=height, sizing_mode="stretch_width", x_axis_label=x_label,
                     y_axis_label=y_label, tools="pan,wheel_zoom,box_zoom,reset,save", toolbar_location="right")
        points = fig.scatter("x", "y", source=self.source, size=6, alpha=0.75, line_color=None,
                             fill_color={"field": "value", "transform": self.mapper})
        over = fig.scatter("x", "y", source=self.overlay, size=7, marker="diamond", color="black", alpha=0.9,
                           legend_label=overlay_label)
        fig.add_tools(HoverTool(renderers=[points], tooltips=[("", "@label"), (color_label, "@value{0.000}")]))
        fig.add_tools(HoverTool(renderers=[over], tooltips=[("", "@label")]))
        fig.add_layout(ColorBar(color_mapper=self.mapper, width=10, title=color_label,
                                formatter=BasicTickFormatter(precision=2, use_scientific=False)), "right")
        # the overlay's legend under the plot, never over the points
        legend = fig.legend[0]
        fig.center.remove(legend)
        legend.update(orientation="horizontal", location="left", label_text_font_size="9pt",
                      border_line_alpha=0.0, background_fill_alpha=0.0, visible=False)
        fig.add_layout(legend, "below")
        fig.title.text_font_size = "11pt"
        # a third of the stage at 1280x720 leaves the frame narrow: tick labels that would
        # overlap are skipped
        fig.xaxis.major_label_policy = NoOverlap()
        fig.yaxis.major_label_policy = NoOverlap()
        self.placeholder = Placeholder(fig, empty_text)
        self.figure = fig
        self.pane = pn.pane.Bokeh(fig, sizing_mode="stretch_width")
        self.view = pn.Column(self.pane, sizing_mode="stretch_width", margin=0)

    def update(self, xy: np.ndarray | None, values: np.ndarray | None = None, labels=None,
               overlay_xy: np.ndarray | None = None, overlay_labels=None) -> None:
        """Replace the points (``xy`` (n, 2)); ``values`` colour them, ``overlay_xy`` on top."""
        if xy is None or len(xy) == 0:
            self.source.data = {"x": [], "y": [], "value": [], "label": []}
            self.overlay.data = {"x": [], "y": [], "label": []}
            self.figure.legend.visible = False
            self.placeholder.show()
            return
        xy = np.asarray(xy, dtype=float)
        values = np.zeros(len(xy)) if values is None else np.asarray(values, dtype=float)
        finite = values[np.isfinite(values)]
        low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        if high - low < 1e-6 * max(1.0, abs(low)):  # one value: a readable unit range around it
            low, high = low - 0.5, high + 0.5
        self.mapper.update(low=low, high=high)
        labels = [""] * len(xy) if labels is None else [str(s) for s in labels]
        self.source.data = {"x": xy[:, 0], "y": xy[:, 1], "value": values, "label": labels}
        if overlay_xy is not None and len(overlay_xy):
            overlay_xy = np.asarray(overlay_xy, dtype=float)
            ol = [""] * len(overlay_xy) if overlay_labels is None else [str(s) for s in overlay_labels]
            self.overlay.data = {"x": overlay_xy[:, 0], "y": overlay_xy[:, 1], "label": ol}
            self.figure.legend.visible = True
        else:
            self.overlay.data = {"x": [], "y": [], "label": []}
            self.figure.legend.visible = False
        self.placeholder.hide()
