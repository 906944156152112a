"""A picture and, on demand, the same picture of a pinned run beside it (issue 47 item 2).

``Beside(live, twin)`` holds two views of one kind (:class:`~.image_grid.ImageGrid`,
:class:`~.heatmap.Heatmap`, or :class:`Figure` around a bare Bokeh figure) in one row.  The
twin is hidden until :meth:`Beside.show` gives it a title (the pin's label and what differs);
the lab draws the pin's newest arrays into ``twin`` with the live picture's colour scale.
Fixed-width figures share the live one's width while the pair is shown (``width``), so the row
keeps its size and nothing below or beside it moves; figures that stretch share the row (a lab
may place ``live.view`` and ``twin.view`` in a row of its own instead of ``Beside.view``: a
row of heatmaps that scale together).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import panel as pn


#: a twin's title until a pin is shown in it (it is hidden until then)
PIN_TITLE = "a pinned run"


@dataclass
class Figure:
    """A bare Bokeh figure as a view: ``figure`` and a ``view`` that can be hidden (hiding a
    Bokeh pane itself fails; its wrapper does not)."""

    figure: Any
    view: Any = field(init=False)

    def __post_init__(self) -> None:
        self.view = pn.Column(pn.pane.Bokeh(self.figure), margin=0)


class Beside:
    """``live`` and, when shown, ``twin`` beside it (see the module's docstring)."""

    def __init__(self, live: Any, twin: Any, *, width: int | tuple[int, int] | None = None,
                 short: str = "live run") -> None:
        self.live, self.twin = live, twin
        self._alone = live.figure.width  # the live figure's width when alone
        # each figure's width while the pair is shown (live, twin); None: they stretch
        self._width = (width, width) if isinstance(width, int) else width
        self._full = live.figure.title.text  # the live figure's title alone ...
        self.short = short  # ... and in a pair: half the width holds less text
        twin.view.visible = False
        self.view = pn.Row(live.view, twin.view, margin=0,
                           sizing_mode="stretch_width" if width is None else None)
        self.shown = False

    def show(self, label: str | None) -> None:
        """Show the twin titled with the pin's ``label`` (cut to what its width holds), or
        hide it (``None``)."""
        on = label is not None
        if on:
            chars = max(8, (self._width[1] if self._width else 300) // 12)
            self.twin.figure.title.text = label if len(label) <= chars else label[:chars - 1] + "…"
        if on == self.shown:
            return
        self.shown = on
        self.twin.view.visible = on
        self.live.figure.title.text = self.short if on else self._full
        if self._width is not None:
            self.live.figure.width = self._width[0] if on else self._alone
            self.twin.figure.width = self._width[1]

    def set_title(self, text: str) -> None:
        """The live figure's title when it is shown alone (now, or once the twin is hidden)."""
        self._full = text
        if not self.shown:
            self.live.figure.title.text = text

    def draw_tiles(self, columns: Any, **options: Any) -> None:
        """Draw ``columns`` (n_visible, n_tiles) in the twin of an ImageGrid, tiled as the live
        grid's images when they have its size (a pin trained on other data: square tiles)."""
        shape = self.live.image_shape
        n_visible = np.shape(columns)[0]
        self.twin.image_shape = shape if shape is not None and shape[0] * shape[1] == n_visible else None
        self.twin.update(columns, **options)
