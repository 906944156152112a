"""A look inside (issue 26, item 2): the model's samples and the TAP solutions drawn as images.

The samples are drawn in the trainers' steps (in the worker), carried by the Records, and
only tiled by the labs; these tests check both sides on small settings.
"""

from __future__ import annotations

import numpy as np
import pytest

from boltzlab.dashboard.labs.frankwolfe import FrankWolfeLab
from boltzlab.dashboard.labs.frankwolfe_setup import SAMPLE_CHAINS as FW_CHAINS
from boltzlab.dashboard.labs.tap import SOLUTIONS_SHOWN, TAPLab
from boltzlab.dashboard.labs.tap_setup import SAMPLE_CHAINS
from boltzlab.engine import frankwolfe, tap
from boltzlab.engine.images import load_images, tile_images


def shown(grid) -> np.ndarray:
    """The tiled image a grid draws, top tile row first (the view flips it for Bokeh)."""
    return np.asarray(grid.source.data["image"][0])[::-1]


def tiled(columns: np.ndarray, shape) -> np.ndarray:
    n = columns.shape[1]
    return tile_images(columns, shape, n_cols=max(1, int(np.ceil(np.sqrt(n)))), pad=1, normalize=None)


# ---------------------------------------------------------------------- engine
def test_gibbs_sweeps_follow_the_conditionals_and_are_seeded():
    rng = np.random.default_rng(0)
    W = rng.normal(0.0, 0.5, (6, 3))
    V0 = (rng.random((200, 6)) < 0.5).astype(float)
    a = tap.gibbs_sweeps(W, np.zeros(6), np.zeros(3), V0, 3, seed=7)
    b = tap.gibbs_sweeps(W, np.zeros(6), np.zeros(3), V0, 3, seed=7)
    c = tap.gibbs_sweeps(W, np.zeros(6), np.zeros(3), V0, 3, seed=8)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert not np.array_equal(a[0], c[0])
    assert set(np.unique(a[0])) <= {0.0, 1.0} and set(np.unique(a[1])) <= {0.0, 1.0}
    # strong visible fields: every visible follows its bias's sign whatever the hidden units do
    b_vis = np.array([12.0, -12.0, 12.0, -12.0, 12.0, -12.0])
    V, H = tap.gibbs_sweeps(W, b_vis, np.zeros(3), V0, 2, seed=1, prior_hid="spin")
    assert np.all(V == (b_vis > 0)) and set(np.unique(H)) <= {-1.0, 1.0}
    # an independent model (W = 0): the visible means are the logistic of the biases
    b_vis = np.array([-2.0, -1.0, 0.0, 1.0, 2.0, 3.0])
    V, _ = tap.gibbs_sweeps(np.zeros((6, 3)), b_vis, np.zeros(3), np.zeros((20000, 6)), 1, seed=2)
    assert np.allclose(V.mean(0), 1.0 / (1.0 + np.exp(-b_vis)), atol=0.015)


def test_the_tap_trainer_carries_its_chains_through_a_checkpoint():
    X = load_images("digits").X_train
    options = dict(n_hidden=6, batch_size=50, n_chains=20, n_samples=8, sample_sweeps=2, seed=3)
    trainer = tap.TAPTrainer(X, **options)
    first = trainer.step().arrays["samples"]
    assert first.shape == (8, 64) and set(np.unique(first)) <= {0.0, 1.0}
    state = trainer.state_dict()
    after = trainer.step().arrays["samples"]
    resumed = tap.TAPTrainer(X, **options)
    resumed.load_state_dict(state)
    assert np.array_equal(resumed.step().arrays["samples"], after)
    assert "samples" not in tap.TAPTrainer(X, n_hidden=6, n_chains=20).step().arrays  # off by default
    with pytest.raises(ValueError, match="n_samples"):
        tap.TAPTrainer(X, n_hidden=6, prior_hid="truncated_gaussian", n_samples=4)


def test_the_frank_wolfe_trainer_records_its_first_persistent_chains():
    X = load_images("digits").X_train[:200]
    trainer = frankwolfe.FrankWolfeTrainer(X, max_hidden=4, samples=30, evaluate="none", record_samples=5, seed=1)
    record = trainer.step()
    assert np.array_equal(record.arrays["samples"], trainer._chains[:5].astype(float))
    assert "samples" not in frankwolfe.FrankWolfeTrainer(X, max_hidden=4, samples=30, evaluate="none").step().arrays


# ---------------------------------------------------------------------- labs
def tap_lab(seed: int = 0) -> TAPLab:
    lab = TAPLab(data="digits", n_hidden=8, K=20, seed=seed)
    lab.panel()
    return lab


def test_tap_lab_draws_the_models_samples():
    lab = tap_lab()
    try:
        assert lab.samples_grid.n_tiles == 0
        lab.run(steps=2)
        samples = lab.latest("TAP").arrays["samples"]
        assert samples.shape == (SAMPLE_CHAINS, 64)
        image = shown(lab.samples_grid)
        assert lab.samples_grid.n_tiles == SAMPLE_CHAINS and image.shape == (4 * 8 + 3, 4 * 8 + 3)
        values = image[np.isfinite(image)]
        assert values.min() >= 0.0 and values.max() <= 1.0
        assert np.array_equal(image, tiled(samples.T, (8, 8)), equal_nan=True)
        lab.run(steps=2)  # the chains move as the model trains
        later = shown(lab.samples_grid)
        assert not np.array_equal(later, image, equal_nan=True)
        assert "Samples" in lab.stage()
    finally:
        lab.close()
    again = tap_lab()  # the same seed draws the same samples
    try:
        again.run(steps=4)
        assert np.array_equal(shown(again.samples_grid), later, equal_nan=True)
    finally:
        again.close()


def test_tap_lab_draws_the_solutions_as_images_beside_the_isomap():
    lab = tap_lab()
    try:
        lab.run(steps=3)
        snap = lab.history.snapshots[lab._shown_snapshot()]
        n = min(len(snap.free_energies), SOLUTIONS_SHOWN)
        assert lab.solutions_grid.n_tiles == n >= 1
        order = np.argsort(snap.free_energies, kind="stable")[:n]
        image = shown(lab.solutions_grid)
        assert np.allclose(image, tiled(np.clip(snap.solutions_vis[order].T, 0, 1), (8, 8)), equal_nan=True)
        values = image[np.isfinite(image)]
        assert values.min() >= 0.0 and values.max() <= 1.0
        assert "lowest F first" in lab.solutions_grid.figure.title.text
        # in the Isomap tab, between Fig. 6 and Fig. 7
        isomap = lab.stage()["Isomap"]
        row = isomap.objects[1]
        # the solutions with a pin's beside them on demand (issue 47), between the two scatters
        assert [o is v for o, v in zip(row.objects, (lab.embedding.view, lab.solutions_beside.view,
                                                     lab.data_embedding.view))] == [True] * 3
        assert lab.solutions_beside.live is lab.solutions_grid
    finally:
        lab.close()


def test_frank_wolfe_lab_draws_its_persistent_chains():
    lab = FrankWolfeLab(data="digits", samples=50, max_hidden=6, evaluate="none")
    lab.panel()
    try:
        lab.run(steps=2)
        samples = lab.latest().arrays["samples"]
        assert samples.shape == (FW_CHAINS, 64)
        image = shown(lab.samples_grid)
        assert lab.samples_grid.n_tiles == FW_CHAINS
        assert np.array_equal(image, tiled(samples.T, (8, 8)), equal_nan=True)
        values = image[np.isfinite(image)]
        assert values.min() >= 0.0 and values.max() <= 1.0
        lab.run(steps=2)
        assert not np.array_equal(shown(lab.samples_grid), image, equal_nan=True)
        assert "Samples" in lab.stage()
    finally:
        lab.close()


def test_selecting_points_in_the_isomap_shows_those_solutions():
    from boltzlab.dashboard.labs.tap_setup import EpochSnapshot

    lab = tap_lab()
    try:
        lab.run(steps=2)
        rng = np.random.default_rng(0)
        vis = rng.random((5, 64))
        fe = np.array([3.0, 1.0, 4.0, 0.5, 2.0])
        lab.history.snapshots = [EpochSnapshot(1.0, fe, vis, rng.random((5, 8)), float(fe.mean()))]
        lab._scatter_rows = np.array([0, 2, 4])  # Fig. 6 maps solutions 0, 2 and 4 of the snapshot
        lab.embedding.source.selected.indices = [1, 2]  # a lasso around the last two points
        assert lab.solutions_grid.n_tiles == 2
        assert np.allclose(shown(lab.solutions_grid), tiled(vis[[2, 4]].T, (8, 8)), equal_nan=True)
        assert "2 selected of 5" in lab.solutions_grid.figure.title.text
        lab.embedding.source.selected.indices = []  # deselect: the lowest free energies again
        assert lab.solutions_grid.n_tiles == 5
        assert np.allclose(shown(lab.solutions_grid), tiled(vis[np.argsort(fe)].T, (8, 8)), equal_nan=True)
        tools = {type(t).__name__ for t in lab.embedding.figure.tools}
        assert {"TapTool", "LassoSelectTool"} <= tools
    finally:
        lab.close()


def test_selecting_points_outlines_the_hidden_units_most_active_in_those_solutions():
    from boltzlab.dashboard.labs.tap import ACTIVE_UNITS, FIELDS_TITLE
    from boltzlab.dashboard.labs.tap_setup import EpochSnapshot
    from boltzlab.dashboard.views.image_grid import HIGHLIGHT_COLOR, OUTLINE_COLOR

    lab = tap_lab()  # 8 hidden units, all drawn
    try:
        lab.run(steps=2)
        rng = np.random.default_rng(1)
        hid = rng.random((6, 8))  # six solutions' hidden magnetizations a_h
        fe = np.arange(6, dtype=float)
        lab.history.snapshots = [EpochSnapshot(1.0, fe, rng.random((6, 64)), hid, float(fe.mean()))]
        lab._scatter_rows = np.array([5, 1, 3, 0])  # the points of Fig. 6 and the solutions behind them
        lab.embedding.source.selected.indices = [0, 2]  # solutions 5 and 3
        expected = np.argsort(-hid[[5, 3]].mean(axis=0), kind="stable")[:ACTIVE_UNITS]
        assert list(lab._active) == list(expected)
        outlined = lab.fields.outlined()
        assert sorted(outlined[OUTLINE_COLOR]) == sorted(expected.tolist()) and len(expected) == ACTIVE_UNITS
        # the boxes sit on those units' tiles: each box's centre is the centre of the tile labelled with the unit
        tiles = lab.fields.tiles.data
        for left, right, top, bottom in zip(*(lab.fields.box.data[k] for k in ("left", "right", "top", "bottom"))):
            at = [i for i, (x, y) in enumerate(zip(tiles["x"], tiles["y"]))
                  if abs(x - (left + right) / 2) < 1e-9 and abs(y - (top + bottom) / 2) < 1e-9]
            assert len(at) == 1 and int(tiles["label"][at[0]].split()[2].rstrip(",")) in expected
        assert "most active" in lab.fields.figure.title.text
        assert ", ".join(map(str, expected)) in lab.isomap_note.object
        # a redraw of the fields (new weights, another ranking) keeps the outlines
        lab.rank_by.value = "activation"
        assert sorted(lab.fields.outlined()[OUTLINE_COLOR]) == sorted(expected.tolist())
        # presentation mode's orange outline and the selection's green ones together
        lab._highlight = int(expected[0])
        lab._show_fields()
        outlined = lab.fields.outlined()
        assert outlined[HIGHLIGHT_COLOR] == [int(expected[0])] and len(outlined[OUTLINE_COLOR]) == ACTIVE_UNITS
        lab._highlight = None
        # one point: its own most active units
        lab.embedding.source.selected.indices = [1]
        assert list(lab._active) == list(np.argsort(-hid[1], kind="stable")[:ACTIVE_UNITS])
        # no selection: no outline, the plain title
        lab.embedding.source.selected.indices = []
        lab._show_fields()
        assert lab._active is None and lab.fields.outlined() == {}
        assert lab.fields.figure.title.text == FIELDS_TITLE
    finally:
        lab.close()


def _states(n: int, values) -> np.ndarray:
    """Every configuration of n units taking ``values``, one per row."""
    grids = np.meshgrid(*[np.asarray(values, dtype=float)] * n, indexing="ij")
    return np.stack([g.ravel() for g in grids], axis=1)


@pytest.mark.parametrize("prior_vis, prior_hid", [("bernoulli", "bernoulli"), ("bernoulli", "spin"),
                                                  ("spin", "bernoulli")])
def test_gibbs_sweeps_draw_from_the_enumerated_conditionals(prior_vis, prior_hid):
    """Issue 46 item 5 (f): one sweep from a fixed v0 draws h from P(h | v0) and then v from
    P(v | h), each the joint exp(v^T W h + b_vis^T v + b_hid^T h) on the priors' support
    (Bernoulli {0, 1}, spin {-1, 1}) normalised by enumeration, with every weight and bias
    non-zero.  The frequencies of 40,000 seeded chains are within 5 standard errors."""
    support = {"bernoulli": (0.0, 1.0), "spin": (-1.0, 1.0)}
    rng = np.random.default_rng(5)
    n_vis, n_hid, n = 3, 2, 40_000
    W = rng.normal(0.0, 1.0, (n_vis, n_hid))
    b_vis, b_hid = rng.normal(0.0, 1.0, n_vis), rng.normal(0.0, 1.0, n_hid)
    v0 = _states(n_vis, support[prior_vis])[3]
    V, H = tap.gibbs_sweeps(W, b_vis, b_hid, np.tile(v0, (n, 1)), 1, seed=11, prior_vis=prior_vis, prior_hid=prior_hid)
    hs, vs = _states(n_hid, support[prior_hid]), _states(n_vis, support[prior_vis])

    def check(draws: np.ndarray, states: np.ndarray, log_weights: np.ndarray) -> None:
        p = np.exp(log_weights - log_weights.max())
        p /= p.sum()
        freq = np.array([np.mean(np.all(draws == s, axis=1)) for s in states])
        assert freq.sum() == pytest.approx(1.0)  # every draw is on the support
        se = np.sqrt(p * (1 - p) / len(draws))
        assert np.all(np.abs(freq - p) <= 5 * se + 1e-12), (freq, p)

    check(H, hs, hs @ (v0 @ W + b_hid))  # P(h | v0)
    for h in hs:  # P(v | h), among the chains that drew h
        rows = np.all(H == h, axis=1)
        if rows.sum() >= 2000:
            check(V[rows], vs, vs @ (W @ h + b_vis))
