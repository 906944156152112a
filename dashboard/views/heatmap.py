"""A heatmap of a matrix with a diverging colormap symmetric around 0 and a colour bar."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import panel as pn
from bokeh.models import ColorBar, ColumnDataSource, FactorRange, HoverTool, LinearColorMapper
from bokeh.plotting import figure
from matplotlib import colormaps
from matplotlib.colors import to_hex

DIVERGING = [to_hex(c) for c in colormaps["RdBu_r"](np.linspace(0, 1, 256))]


class Heatmap:
    """Show a square matrix; blue is negative, red positive, white zero.

    Call :meth:`set_labels` when the matrix size changes and :meth:`update` with new
    values.  The colour range is ``[-vmax, vmax]`` (``vmax`` fixed or taken from the data).
    """

    def __init__(self, title: str, labels: Sequence[str], *, value_label: str = "value",
                 size: int = 300, name: str = "heatmap") -> None:
        self.mapper = LinearColorMapper(palette=DIVERGING, low=-1.0, high=1.0,
                                        nan_color="#eeeeee")
        self.source = ColumnDataSource(data={"row": [], "col": [], "value": []}, name=name)
        # scales down with the page (keeping its shape) so a row of them fits
        fig = figure(title=title, width=size + 70, height=size, tools="save,hover",
                     sizing_mode="scale_width", aspect_ratio=(size + 70) / size,
                     max_width=size + 70, min_width=200,
                     toolbar_location=None, x_axis_label="column j",
                     y_axis_label="row i", x_range=FactorRange(), y_range=FactorRange())
        fig.rect("col", "row", 1, 1, source=self.source, line_color=None,
                 fill_color={"field": "value", "transform": self.mapper})
        # presentation mode outlines the cells that just changed most (see mark())
        self.marks = ColumnDataSource(data={"row": [], "col": []}, name=f"{name}-marks")
        fig.rect("col", "row", 1, 1, source=self.marks, fill_color=None, line_color="#111111",
                 line_width=3)
        fig.select_one(HoverTool).renderers = [fig.renderers[0]]
        fig.select_one(HoverTool).tooltips = [("row i", "@row"), ("column j", "@col"),
                                              (value_label, "@value{0.000}")]
        fig.add_layout(ColorBar(color_mapper=self.mapper, width=10, title=value_label), "right")
        fig.xaxis.major_label_orientation = 0.9
        fig.grid.visible = False
        fig.axis.major_tick_line_color = None
        fig.title.text_font_size = "11pt"
        self.figure = fig
        self.labels: list[str] = []
        self.set_labels(labels)
        self.pane = pn.pane.Bokeh(fig, sizing_mode="scale_width", max_width=size + 70)
        # show/hide this wrapper, not the pane (toggling a Bokeh pane's `visible` fails)
        self.view = pn.Column(self.pane, margin=0, sizing_mode="stretch_width",
                              max_width=size + 80)

    def set_labels(self, labels: Sequence[str]) -> None:
        self.labels = [str(s) for s in labels]
        # many variables: smaller tick labels, so neighbours do not overlap
        size = f"{max(6, min(11, 170 // max(len(self.labels), 1)))}px"
        for axis in (self.figure.xaxis, self.figure.yaxis):
            axis.major_label_text_font_size = size
        self.figure.x_range.factors = list(self.labels)
        self.figure.y_range.factors = list(reversed(self.labels))
        self.source.data = {"row": [], "col": [], "value": []}
        self.marks.data = {"row": [], "col": []}

    def mark(self, cells: Sequence[tuple[int, int]]) -> None:
        """Outline the cells ``(i, j)`` (an empty list clears the outline)."""
        self.marks.data = {"row": [self.labels[i] for i, _ in cells],
                           "col": [self.labels[j] for _, j in cells]}

    def update(self, matrix: np.ndarray | None, vmax: float | None = None) -> None:
        """Show ``matrix`` (``None`` blanks the plot)."""
        if matrix is None:
            self.source.data = {"row": [], "col": [], "value": []}
            return
        matrix = np.asarray(matrix, dtype=float)
        d = len(self.labels)
        if matrix.shape != (d, d):
            raise ValueError(f"expected a {d}x{d} matrix, got shape {matrix.shape}")
        finite = np.abs(matrix[np.isfinite(matrix)])
        if vmax is None:
            vmax = float(finite.max()) if finite.size else 1.0
        vmax = vmax if np.isfinite(vmax) and vmax > 0 else 1.0
        self.mapper.update(low=-vmax, high=vmax)
        labels = np.array(self.labels, dtype=object)
        values = np.where(np.isfinite(matrix), matrix, np.nan).ravel()
        if len(self.source.data["value"]) == d * d:
            self.source.patch({"value": [(slice(0, d * d), values)]})
        else:
            self.source.data = {"row": list(np.repeat(labels, d)), "col": list(np.tile(labels, d)),
                                "value": values}
