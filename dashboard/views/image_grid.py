"""An image grid: receptive fields (columns of W) or digits, tiled into one Bokeh image.

The tiling itself is :func:`boltzlab.engine.images.tile_images` (shared by every lab); this view
only draws the tiled array, optionally outlines one tile in orange (the newest hidden unit in the
Frank-Wolfe lab, the unit that changed most in the TAP lab's presentation mode) and a set of
tiles in green (the hidden units most active in the TAP solutions selected in the Isomap), and
names each tile on hover (which column it shows, its largest |value|).
"""

from __future__ import annotations

import math

import numpy as np
import panel as pn
from bokeh.models import ColorBar, ColumnDataSource, HoverTool, LinearColorMapper
from bokeh.plotting import figure
from matplotlib import colormaps
from matplotlib.colors import to_hex

from ...engine.images import tile_images
from .placeholder import Placeholder

DIVERGING = [to_hex(c) for c in colormaps["RdBu_r"](np.linspace(0, 1, 256))]
GRAYS = [to_hex(c) for c in colormaps["gray_r"](np.linspace(0, 1, 256))]  # 0 white, 1 black
HIGHLIGHT_COLOR = "#f0a000"  # one tile: orange
OUTLINE_COLOR = "#00a000"  # a set of tiles (update's / set_outline's ``outline``): green, apart from red and blue
NO_BOXES = {"left": [], "right": [], "top": [], "bottom": [], "color": []}


class ImageGrid:
    """Tiles of images in one plot.

    ``kind="weights"``: a diverging map, blue negative, red positive, white 0, each tile
    scaled to its own max |w| (``normalize="each"``) so weak and strong fields both show.
    ``kind="pixels"``: values in [0, 1] drawn white (0) to black (1).
    ``tile_label`` names a tile on hover (``"hidden unit"`` -> "hidden unit 7"); :meth:`update`
    can pass a label per column instead.
    """

    def __init__(self, title: str, *, kind: str = "weights", image_shape: tuple[int, int] | None = None,
                 height: int = 360, width: int | None = None, name: str = "grid",
                 empty_text: str = "Press ▶ Play to start", tile_label: str = "column") -> None:
        if kind not in ("weights", "pixels"):
            raise ValueError(f"ImageGrid kind must be 'weights' or 'pixels'. Got {kind!r}.")
        self.kind = kind
        self.image_shape = image_shape
        low, palette = (-1.0, DIVERGING) if kind == "weights" else (0.0, GRAYS)
        self.mapper = LinearColorMapper(palette=palette, low=low, high=1.0, nan_color=(0, 0, 0, 0))
        self.source = ColumnDataSource({"image": [np.full((1, 1), np.nan)], "x": [0], "y": [0], "dw": [1], "dh": [1]},
                                       name=name)
        self.tile_label = tile_label
        self.box = ColumnDataSource(dict(NO_BOXES), name=f"{name}-box")
        # one invisible rectangle per tile carries its hover text
        self.tiles = ColumnDataSource({"x": [], "y": [], "w": [], "h": [], "label": [], "peak": []},
                                      name=f"{name}-tiles")
        options = dict(height=height, match_aspect=True, tools="pan,wheel_zoom,box_zoom,reset,save",
                       toolbar_location="right", title=title)
        if width is None:
            options["sizing_mode"] = "stretch_width"
        else:
            options["width"] = width
        fig = figure(**options)
        fig.image(image="image", x="x", y="y", dw="dw", dh="dh", source=self.source, color_mapper=self.mapper)
        tiles = fig.rect("x", "y", "w", "h", source=self.tiles, fill_alpha=0.0, line_alpha=0.0)
        fig.quad(left="left", right="right", top="top", bottom="bottom", source=self.box, fill_alpha=0.0,
                 line_color="color", line_width=3)
        peak = "max |w|" if kind == "weights" else "max value"
        fig.add_tools(HoverTool(renderers=[tiles], tooltips=[("", "@label"), (peak, "@peak{0.000}")]))
        if kind == "weights":
            fig.add_layout(ColorBar(color_mapper=self.mapper, width=10, title="w / max|w| of its unit"), "right")
        fig.axis.visible = False
        fig.grid.visible = False
        fig.title.text_font_size = "11pt"
        self.placeholder = Placeholder(fig, empty_text)
        self.figure = fig
        self.pane = pn.pane.Bokeh(fig, sizing_mode="stretch_width" if width is None else None)
        self.view = pn.Column(self.pane, sizing_mode="stretch_width" if width is None else None, margin=0)
        self.n_tiles = 0
        self.n_cols = 1
        self._index = np.zeros(0, dtype=int)  # the original column behind each tile drawn
        self._geometry = (0, 1, 1)  # the tiled image's height and one tile's (height, width)
        self._highlight: int | None = None

    def update(self, columns: np.ndarray | None, *, order: np.ndarray | None = None, highlight: int | None = None,
               n_cols: int | None = None, limit: int | None = None, labels=None, outline=None) -> None:
        """Show the columns of ``columns`` (n_visible, n_tiles), in ``order`` if given.

        ``limit`` keeps the first ``limit`` tiles (after ordering); ``highlight`` outlines in
        orange the tile that shows column ``highlight`` of the original array, ``outline`` (columns
        of the original array) in green the tiles that show them; ``labels`` (one per column of
        the original array) are the tiles' hover texts (default: "<tile_label> j").
        """
        if columns is None or np.size(columns) == 0:
            self.source.data = {"image": [np.full((1, 1), np.nan)], "x": [0], "y": [0], "dw": [1], "dh": [1]}
            self.box.data = dict(NO_BOXES)
            self.tiles.data = {"x": [], "y": [], "w": [], "h": [], "label": [], "peak": []}
            self.placeholder.show()
            self.n_tiles = 0
            self._index = np.zeros(0, dtype=int)
            return
        columns = np.asarray(columns, dtype=float)
        index = np.arange(columns.shape[1]) if order is None else np.asarray(order, dtype=int)
        if limit is not None:
            index = index[:limit]
        shown = columns[:, index]
        n = shown.shape[1]
        n_cols = n_cols or max(1, math.ceil(math.sqrt(n)))
        normalize = "each" if self.kind == "weights" else None
        tiled = tile_images(shown, self.image_shape, n_cols=n_cols, pad=1, normalize=normalize)
        h, w = tiled.shape
        # Bokeh draws row 0 at the bottom: flip so the first tile is top-left
        self.source.data = {"image": [tiled[::-1].copy()], "x": [0], "y": [0], "dw": [w], "dh": [h]}
        self.placeholder.hide()
        self.n_tiles, self.n_cols = n, n_cols
        th, tw = self._tile_shape(columns.shape[0])
        rows, cols = np.divmod(np.arange(n), n_cols)
        texts = [f"{self.tile_label} {j}" if labels is None else str(labels[j]) for j in index.tolist()]
        peaks = np.abs(np.nan_to_num(shown)).max(axis=0)
        # tile (r, c) spans x in [c (tw + 1), + tw] and, from the top, th rows below h - r (th + 1)
        self.tiles.data = {"x": cols * (tw + 1) + tw / 2, "y": h - rows * (th + 1) - th / 2,
                           "w": np.full(n, float(tw)), "h": np.full(n, float(th)), "label": texts,
                           "peak": peaks}
        self._index, self._geometry, self._highlight = index, (h, th, tw), highlight
        self.set_outline(outline)

    def set_outline(self, outline=None) -> None:
        """Outline in green the tiles showing the columns ``outline`` (of the array last drawn;
        the ones not drawn are skipped), keeping :meth:`update`'s ``highlight``: only the
        boxes change (cheap: no tiling)."""
        h, th, tw = self._geometry
        position = {int(j): pos for pos, j in enumerate(self._index.tolist())}
        marked = [] if self._highlight is None else [(self._highlight, HIGHLIGHT_COLOR)]
        marked += [(j, OUTLINE_COLOR) for j in ([] if outline is None else np.asarray(outline, dtype=int).tolist())]
        boxes = {key: [] for key in NO_BOXES}
        for j, color in marked:
            if j not in position:
                continue
            r, c = divmod(position[j], self.n_cols)
            left = c * (tw + 1)
            top = h - r * (th + 1)
            for key, value in (("left", left - 0.5), ("right", left + tw + 0.5), ("top", top + 0.5),
                               ("bottom", top - th - 0.5), ("color", color)):
                boxes[key].append(value)
        self.box.data = boxes

    def outlined(self) -> dict[str, list[int]]:
        """The columns outlined now, by colour (``{"#00a000": [4, 9], ...}``), for tests."""
        h, th, tw = self._geometry
        out: dict[str, list[int]] = {}
        for left, top, color in zip(self.box.data["left"], self.box.data["top"], self.box.data["color"]):
            c, r = round((left + 0.5) / (tw + 1)), round((h - top + 0.5) / (th + 1))
            out.setdefault(color, []).append(int(self._index[r * self.n_cols + c]))
        return out

    def _tile_shape(self, n_visible: int) -> tuple[int, int]:
        if self.image_shape is not None:
            return self.image_shape
        side = math.isqrt(n_visible)
        return side, side
