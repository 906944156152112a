"""The reusable plot components: what their Bokeh sources hold after an update."""

import numpy as np
import pytest

from boltzlab.dashboard.views.histogram import HistogramSlices, density_curve
from boltzlab.dashboard.views.image_grid import ImageGrid
from boltzlab.dashboard.views.scatter import EmbeddingScatter
from boltzlab.engine.images import tile_images


def test_image_grid_draws_the_tiles_top_left_first_and_outlines_the_highlight():
    rng = np.random.default_rng(0)
    W = rng.normal(size=(16, 5))  # 4 x 4 tiles
    grid = ImageGrid("fields")
    grid.update(W, order=np.array([4, 3, 2, 1, 0]), highlight=2, n_cols=3)
    image = grid.source.data["image"][0]
    expected = tile_images(W[:, [4, 3, 2, 1, 0]], n_cols=3, pad=1, normalize="each")
    np.testing.assert_array_equal(image[::-1], expected)  # flipped back: row 0 on top
    assert grid.n_tiles == 5 and not grid.placeholder.shown
    # column 2 is the third tile: grid row 0, column 2 -> x from 10 to 14, top edge at the top
    box = grid.box.data
    assert box["left"] == [9.5] and box["right"] == [14.5]
    assert box["top"] == [image.shape[0] + 0.5] and box["bottom"] == [image.shape[0] - 4.5]
    grid.update(W, limit=2)
    assert grid.n_tiles == 2 and grid.box.data["left"] == []
    grid.update(None)
    assert grid.placeholder.shown and grid.n_tiles == 0


def test_image_grid_rejects_an_unknown_kind():
    with pytest.raises(ValueError, match="kind"):
        ImageGrid("x", kind="rainbow")


def test_embedding_scatter_colours_by_value_and_shows_the_overlay_legend():
    view = EmbeddingScatter("emb", overlay_label="solutions")
    xy = np.arange(8.0).reshape(4, 2)
    view.update(xy, values=np.array([3.0, 1.0, 2.0, 5.0]), overlay_xy=xy[:1])
    assert (view.mapper.low, view.mapper.high) == (1.0, 5.0)
    assert list(view.source.data["x"]) == [0.0, 2.0, 4.0, 6.0]
    assert view.figure.legend.visible and len(view.overlay.data["x"]) == 1
    view.update(xy[:1], values=np.array([2.0]))  # one point: a non-empty colour range
    assert view.mapper.high > view.mapper.low and not view.figure.legend.visible
    view.update(None)
    assert view.placeholder.shown and len(view.source.data["x"]) == 0


def test_histogram_slices_are_densities_with_kdes():
    view = HistogramSlices("hist", bins=10)
    rng = np.random.default_rng(1)
    view.update({"epoch 1": rng.normal(size=200), "epoch 5": np.array([0.5])})
    bars = view._bars[0].data
    widths = np.asarray(bars["right"]) - np.asarray(bars["left"])
    assert np.sum(np.asarray(bars["top"]) * widths) == pytest.approx(1.0)
    x, y = np.asarray(view._lines[0].data["x"]), np.asarray(view._lines[0].data["y"])
    assert np.trapezoid(y, x) == pytest.approx(1.0, abs=0.05)
    assert view.legend.items[1].label["value"] == "epoch 5 (1)"
    view.update({"only": np.array([1.0, 2.0])})
    assert not view.legend.items[1].visible and len(view._bars[1].data["left"]) == 0


def test_density_curve_of_a_single_value_is_a_normalised_bump():
    grid = np.linspace(-1, 1, 2001)
    y = density_curve(np.array([0.2, 0.2]), grid)
    assert grid[np.argmax(y)] == pytest.approx(0.2, abs=1e-3)
    assert np.trapezoid(y, grid) == pytest.approx(1.0, abs=1e-3)


def test_static_markdown_renders_as_markdown_once_per_text():
    import panel as pn

    from boltzlab.dashboard.views.text import StaticMarkdown

    text = "## About\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n*static* text (test_views)"
    plain = pn.pane.Markdown(text)._transform_object(text)
    pane = StaticMarkdown(text)
    assert pane._transform_object(text) == plain  # the same HTML as Panel's own pane
    cached = StaticMarkdown._html[next(k for k in StaticMarkdown._html if k[0] == text)]
    assert pane._transform_object(text) == cached and pane._transform_object(text) is not cached
    assert StaticMarkdown(text, hard_line_break=True)._transform_object(text + "\nx") != plain
    assert pn.panel("a string").__class__ is not StaticMarkdown  # never Panel's pick


def test_live_html_sends_a_new_text_alone_and_renders_as_an_html_pane(monkeypatch):
    import panel as pn
    from bokeh.document import Document

    from boltzlab.dashboard.views.text import LiveHTML

    pane, plain = LiveHTML("<b>Sweep 0</b>", styles={"font-size": "1.4em"}), pn.pane.HTML("<b>Sweep 0</b>")
    doc = Document()
    model = pane.get_root(doc)
    doc.add_root(model)
    events = []
    doc.on_change(lambda event: events.append((event.model, getattr(event, "attr", None))))
    rebuilt = []
    original = pn.pane.HTML._get_properties
    monkeypatch.setattr(pn.pane.HTML, "_get_properties", lambda self, d: rebuilt.append(self) or original(self, d))
    for k in range(1, 4):
        pane.object = f"<b>Sweep {k}</b> & <i>more</i>"
    assert events == [(model, "text")] * 3 and rebuilt == []  # the stylesheets are not rebuilt
    assert model.text == plain._transform_object("<b>Sweep 3</b> & <i>more</i>")["object"]
    pane.styles = {"font-size": "2em"}  # other parameters update as any pane's
    assert model.styles["font-size"] == "2em"
    pane.visible = False
    assert model.visible is False


def test_html_table_escapes_its_cells_and_aligns_its_columns():
    from boltzlab.dashboard.views.text import html_table

    table = html_table([("run", ""), ("J − J*", "right")], [("GA μ=0.5", "1.2e-03"), ("<b>x</b>", 3)], "<b>Live</b>")
    assert table.startswith("<p><b>Live</b></p><table><thead><tr><th>run</th><th style=\"text-align:right\">")
    assert "<td>GA μ=0.5</td><td style=\"text-align:right\">1.2e-03</td>" in table
    assert "<td>&lt;b&gt;x&lt;/b&gt;</td>" in table and table.endswith("</tr></tbody></table>")
    assert html_table([("a", "")], []) == "<table><thead><tr><th>a</th></tr></thead><tbody></tbody></table>"


def test_histograms_of_the_same_arrays_are_computed_once_and_drawn_alike(monkeypatch):
    """A shared run's followers draw the teacher's arrays: the first page computes the bins
    and KDEs, the others reuse them (by identity; equal copies are computed anew)."""
    from boltzlab.dashboard.views import histogram

    rng = np.random.default_rng(0)
    slices = {"epoch 0.00": rng.normal(size=200), "epoch 1.00": rng.normal(1.0, 2.0, size=200)}
    calls = []
    real = histogram.density_curve
    monkeypatch.setattr(histogram, "density_curve", lambda v, g: calls.append(1) or real(v, g))
    a, b = histogram.HistogramSlices("a"), histogram.HistogramSlices("b")
    a.update(slices)
    b.update(dict(slices))
    assert len(calls) == 2  # once per slice, for both pages
    for x, y in zip(a._bars + a._lines, b._bars + b._lines):
        assert set(x.data) == set(y.data) and all(np.array_equal(x.data[k], y.data[k]) for k in x.data)
    edges = np.linspace(*(lambda p: (p.min() - 0.05 * np.ptp(p), p.max() + 0.05 * np.ptp(p)))(
        np.concatenate(list(slices.values()))), 31)
    density, _ = np.histogram(slices["epoch 1.00"], bins=edges, density=True)
    np.testing.assert_allclose(a._bars[1].data["top"], density)  # NumPy's own, on the shared bins
    b.update({k: v.copy() for k, v in slices.items()})  # equal values, other arrays: computed anew
    assert len(calls) == 4
