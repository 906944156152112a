"""TAP analyses (engine/tap_analysis.py): Isomap embeddings (Figs. 6-7), receptive-field
ranking (Fig. 4) and denoising on the binary symmetric channel (§VII.4, eqs. 43-46, Fig. 8).

Oracles: Bayes' rule by enumeration, brute-force loops, scikit-learn's MCC.  Statistical
tests use fixed seeds (deterministic) and state their false-alarm rate over seeds.
"""

import itertools
import math
import warnings

import numpy as np
import pytest
import scipy.stats
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from sklearn.manifold import Isomap
from sklearn.metrics import matthews_corrcoef

from boltzlab.engine import tap_analysis as T


def bits(n_rows, n_cols, min_rows=1):
    return hnp.arrays(np.float64, st.tuples(st.integers(min_rows, n_rows), st.integers(1, n_cols)),
                      elements=st.sampled_from([0.0, 1.0]))


# --------------------------------------------------------- binary symmetric channel


@pytest.mark.parametrize("p", [0.02, 0.2, 0.5, 0.9])
def test_bsc_flip_rate_matches_p_on_ones_and_zeros(p):
    """Exact two-sided binomial tests of the flip rate among 0-bits and among 1-bits.

    Each test at level 1e-4: 2 x 4 = 8 tests, family false-alarm rate <= 8e-4 over seeds.
    """
    rng = np.random.default_rng(3)
    X = (rng.random((300, 400)) < 0.3).astype(float)
    Y = T.binary_symmetric_channel(X, p, seed=11)
    flipped = Y != X
    for value in (0.0, 1.0):
        mask = X == value
        k, n = int(flipped[mask].sum()), int(mask.sum())
        assert scipy.stats.binomtest(k, n, p).pvalue > 1e-4, (value, k / n, p)


def test_bsc_flips_are_independent_across_pixels():
    """Pairs of neighbouring pixels flip together at rate p^2: z-test at level 1e-4."""
    p, X = 0.3, np.zeros((2000, 100))
    F = T.binary_symmetric_channel(X, p, seed=5)
    both = (F[:, :-1] * F[:, 1:]).ravel()[::2]  # disjoint pairs (0,1), (2,3), ... are independent
    n = both.size
    z = (both.mean() - p * p) / math.sqrt(p * p * (1 - p * p) / n)
    assert abs(z) < scipy.stats.norm.ppf(1 - 0.5e-4)


@given(X=bits(6, 8), seed=st.integers(0, 2**32 - 1), p=st.floats(0, 1), q=st.floats(0, 1))
def test_bsc_is_seeded_limits_and_nested(X, seed, p, q):
    Y = T.binary_symmetric_channel(X, p, seed)
    assert set(np.unique(Y)) <= {0.0, 1.0} and Y.shape == X.shape and Y.dtype == np.float64
    np.testing.assert_array_equal(Y, T.binary_symmetric_channel(X, p, seed))
    np.testing.assert_array_equal(T.binary_symmetric_channel(X, 0.0, seed), X)
    np.testing.assert_array_equal(T.binary_symmetric_channel(X, 1.0, seed), 1 - X)
    lo, hi = sorted((p, q))  # the same seed gives nested flips
    flips_lo = T.binary_symmetric_channel(X, lo, seed) != X
    flips_hi = T.binary_symmetric_channel(X, hi, seed) != X
    assert np.all(flips_hi[flips_lo])


# ------------------------------------------------------------ channel field, OPE


def all_states(n):
    return np.array(list(itertools.product([0.0, 1.0], repeat=n)))


def brute_posterior_mean(y, m, p):
    """E[x | y] by enumerating x in {0,1}^N: prior prod m^x (1-m)^(1-x), BSC likelihood."""
    Xs = all_states(len(y))
    prior = np.prod(np.where(Xs == 1, m, 1 - m), axis=1)
    likelihood = np.prod(np.where(Xs == y, 1 - p, p), axis=1)
    post = prior * likelihood
    return post @ Xs / post.sum()


probs = st.floats(1e-3, 1 - 1e-3)


@given(data=st.data(), n=st.integers(1, 4), p=probs)
def test_ope_is_the_exact_posterior_mean_under_the_independent_prior(data, n, p):
    m = np.array(data.draw(st.lists(st.floats(0.01, 0.99), min_size=n, max_size=n)))
    Y = data.draw(hnp.arrays(np.float64, (3, n), elements=st.sampled_from([0.0, 1.0])))
    expected = np.array([brute_posterior_mean(y, m, p) for y in Y])
    np.testing.assert_allclose(T.ope_denoise(Y, m, p), expected, rtol=1e-10, atol=1e-12)


@given(data=st.data(), n=st.integers(1, 4), p=probs)
def test_channel_field_is_the_log_likelihood_ratio_of_eq_44(data, n, p):
    """log P(y | x) - sum_i D_i x_i does not depend on x (P(y|x) proportional to e^{D.x})."""
    y = np.array(data.draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=n, max_size=n)))
    D = T.channel_field(y[None, :], p)[0]
    Xs = all_states(n)
    log_lik = np.sum(np.where(Xs == y, math.log1p(-p), math.log(p)), axis=1)
    rest = log_lik - Xs @ D
    np.testing.assert_allclose(rest, rest[0], rtol=0, atol=1e-9)


def test_ope_limits_p0_returns_observation_and_p_half_returns_prior():
    rng = np.random.default_rng(0)
    Y = (rng.random((20, 12)) < 0.5).astype(float)
    m = np.r_[0.0, 1.0, 1e-9, 1 - 1e-9, rng.random(8)]  # includes pixels never / always on
    np.testing.assert_allclose(T.ope_denoise(Y, m, 0.0), Y, rtol=0, atol=1e-12)
    np.testing.assert_allclose(T.ope_denoise(Y, m, 1.0), 1 - Y, rtol=0, atol=1e-12)
    half = T.ope_denoise(Y, m, 0.5)
    np.testing.assert_allclose(half, np.broadcast_to(np.clip(m, T.M_CLIP, 1 - T.M_CLIP), Y.shape), rtol=1e-12)


def test_channel_field_limits_are_finite_and_zero_at_half():
    Y = np.array([[0.0, 1.0, 1.0]])
    np.testing.assert_array_equal(T.channel_field(Y, 0.5), 0.0)
    np.testing.assert_array_equal(T.channel_field(Y, 0.0), [[-T.LOG_ODDS_CLIP, T.LOG_ODDS_CLIP, T.LOG_ODDS_CLIP]])
    np.testing.assert_array_equal(T.channel_field(Y, 1.0), -T.channel_field(Y, 0.0))
    np.testing.assert_allclose(T.channel_field(Y, 0.1), np.array([[-1, 1, 1]]) * np.log(9.0), rtol=1e-14)


# -------------------------------------------------------------------- 1-NN, MCC


@given(Y=bits(7, 9), data=st.data(), chunk_bytes=st.sampled_from([1, 50, T.HAMMING_CHUNK_BYTES]))
def test_nearest_neighbour_matches_a_brute_force_loop(Y, data, chunk_bytes):
    X_train = data.draw(hnp.arrays(np.float64, (data.draw(st.integers(1, 8)), Y.shape[1]),
                                   elements=st.sampled_from([0.0, 1.0])))
    est, idx = T.nearest_neighbour_denoise(Y, X_train, return_index=True, chunk_bytes=chunk_bytes)
    expected = []
    for y in Y:
        dists = [int(np.sum(y != x)) for x in X_train]
        expected.append(dists.index(min(dists)))  # first (lowest-index) minimum
    np.testing.assert_array_equal(idx, expected)
    np.testing.assert_array_equal(est, X_train[expected])


@given(truth=bits(5, 8), data=st.data())
def test_mcc_matches_sklearn_on_flattened_bits(truth, data):
    est = data.draw(hnp.arrays(np.float64, truth.shape, elements=st.sampled_from([0.0, 0.2, 0.5, 0.7, 1.0])))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # sklearn warns when only one label occurs
        expected = matthews_corrcoef(truth.ravel().astype(int), (est.ravel() >= 0.5).astype(int))
    assert T.matthews_corrcoef_bits(truth, est) == pytest.approx(expected, abs=1e-12)


def test_mcc_degenerate_and_perfect_cases():
    X = np.array([[0.0, 1.0, 1.0, 0.0]])
    assert T.matthews_corrcoef_bits(X, X) == 1.0
    assert T.matthews_corrcoef_bits(X, 1 - X) == -1.0
    assert T.matthews_corrcoef_bits(X, np.zeros_like(X)) == 0.0
    assert T.matthews_corrcoef_bits(np.ones_like(X), np.ones_like(X)) == 0.0


# --------------------------------------------------------------- denoising curve


def test_denoising_curve_runs_every_method_on_the_same_noise():
    rng = np.random.default_rng(1)
    X_train = (rng.random((60, 30)) < 0.4).astype(float)
    X_clean = X_train[:15].copy()
    ps = [0.0, 0.1, 0.5]
    seen = []

    def ope_as_tap(Y, p):
        seen.append(Y)
        return T.ope_denoise(Y, X_train.mean(axis=0), p)

    curve = T.denoising_curve(X_clean, X_train, ps, seed=4, tap_denoiser=ope_as_tap)
    assert curve["p"] == ps and all(len(v) == len(ps) for v in curve.values())
    assert curve["mcc_tap"] == curve["mcc_ope"]
    for Y, p in zip(seen, ps):
        np.testing.assert_array_equal(Y, T.binary_symmetric_channel(X_clean, p, 4))
    assert curve["mcc_ope"][0] == 1.0 and curve["mcc_1nn"][0] == 1.0  # clean rows are in X_train
    expected_1nn = T.matthews_corrcoef_bits(X_clean, T.nearest_neighbour_denoise(seen[1], X_train))
    assert curve["mcc_1nn"][1] == expected_1nn

    plain = T.denoising_curve(X_clean, X_train, ps, seed=4)
    assert plain["mcc_tap"] == [None] * 3 and plain["mcc_ope"] == curve["mcc_ope"]


def test_denoising_curve_checks_the_tap_denoiser_output():
    X = np.eye(4)
    with pytest.raises(ValueError, match="must return an array of shape"):
        T.denoising_curve(X, X, [0.1], seed=0, tap_denoiser=lambda Y, p: Y[:, :2])
    with pytest.raises(ValueError, match=r"tap_denoiser\(Y, p\).*\[0.0, 1.0\]"):
        T.denoising_curve(X, X, [0.1], seed=0, tap_denoiser=lambda Y, p: 2 * Y)
    with pytest.raises(ValueError, match="'tap_denoiser' parameter of denoising_curve must be a callable"):
        T.denoising_curve(X, X, [0.1], seed=0, tap_denoiser="tap")


# -------------------------------------------------------------- receptive fields


def test_spread_ranks_a_localized_field_before_a_diffuse_one():
    rng = np.random.default_rng(2)
    localized = np.zeros(100)
    localized[rng.choice(100, 5, replace=False)] = 3.0  # few large weights: a larger l2 norm
    localized += rng.normal(0, 1e-3, 100)
    diffuse = rng.normal(0, 0.3, 100)
    assert np.linalg.norm(localized) > np.linalg.norm(diffuse)
    W = np.column_stack([diffuse, localized, 2 * diffuse])
    order, scores = T.rank_receptive_fields(W)
    np.testing.assert_array_equal(order, [1, 0, 2])
    assert scores[0] < scores[2]  # homogeneous of degree 1


@given(W=hnp.arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(1, 6)), elements=st.floats(-5, 5)),
       p=st.sampled_from([0.1, 0.5, 1.0, 2.0]), data=st.data())
def test_spread_scores_are_the_lp_quasi_norm_and_order_sorts_them(W, p, data):
    order, scores = T.rank_receptive_fields(W, p=p)
    expected = np.array([np.sum(np.abs(w) ** p) ** (1 / p) for w in W.T])
    np.testing.assert_allclose(scores, expected, rtol=1e-9, atol=1e-300)
    assert sorted(order) == list(range(W.shape[1]))
    assert np.all(np.diff(scores[order]) >= 0)
    perm = np.array(data.draw(st.permutations(range(W.shape[1]))))
    np.testing.assert_allclose(T.rank_receptive_fields(W[:, perm], p=p)[1], scores[perm], rtol=1e-12)


def test_activation_ranks_most_active_first_ties_by_index():
    W = np.ones((4, 5))
    means = np.array([0.2, 0.9, 0.5, 0.9, 0.1])
    order, scores = T.rank_receptive_fields(W, means, by="activation")
    np.testing.assert_array_equal(order, [1, 3, 2, 0, 4])
    np.testing.assert_array_equal(scores, means)


# ------------------------------------------------------------------------ Isomap


def spiral(t, dim=40, seed=0):
    """Points (t cos t, t sin t) of a planar spiral, rotated into `dim` dimensions."""
    Q = np.linalg.qr(np.random.default_rng(seed).normal(size=(dim, dim)))[0][:, :2]
    return np.column_stack([t * np.cos(t), t * np.sin(t)]) @ Q.T


def test_transform_of_the_fitted_epoch_reproduces_the_fit_embedding():
    rng = np.random.default_rng(7)
    latest = rng.random((150, 30))  # <= 200 rows: dense eigen-solver
    res = T.fit_solution_embedding([rng.random((20, 30)), latest], n_neighbors=8)
    assert res.method == "isomap" and res.fit_epoch == 1 and res.n_neighbors == 8 and res.n_fit == 150
    scale = np.abs(res.model.embedding_).max()
    fitted_rows = np.unique(latest, axis=0)  # the map is fitted on the distinct rows, sorted
    np.testing.assert_allclose(res.model.transform(fitted_rows), res.model.embedding_, atol=1e-9 * scale)
    np.testing.assert_allclose(res.model.transform(latest), res.coords[1], atol=1e-9 * scale)
    # an earlier epoch of slightly moved copies lands next to the fitted solutions
    moved = latest[:40] + rng.normal(0, 1e-7, (40, 30))
    near = T.fit_solution_embedding([moved, latest], n_neighbors=8)
    np.testing.assert_allclose(near.coords[0], near.coords[1][:40], atol=1e-5 * scale)


def test_isomap_unrolls_a_spiral_that_a_linear_map_folds():
    """Isomap recovers the order along a spiral (arc-length neighbours are 0.4 apart, turns
    6.3 apart); the first principal component of the same points does not."""
    t = np.linspace(1.5 * np.pi, 4.5 * np.pi, 200)
    X = spiral(t)
    res = T.fit_solution_embedding([X], n_neighbors=6)
    assert res.method == "isomap"
    assert abs(scipy.stats.spearmanr(res.coords[0][:, 0], t).statistic) > 0.999
    pc1 = (X - X.mean(0)) @ np.linalg.svd(X - X.mean(0), full_matrices=False)[2][0]
    assert abs(scipy.stats.spearmanr(pc1, t).statistic) < 0.9


def test_few_solutions_reduce_neighbours_or_fall_back_to_pca():
    rng = np.random.default_rng(8)
    one = T.fit_solution_embedding([rng.random((4, 6)), rng.random((1, 6))])
    assert one.method == "pca" and one.model is None
    assert [c.shape for c in one.coords] == [(4, 2), (1, 2)]
    np.testing.assert_array_equal(one.coords[1], 0.0)
    two_rows = rng.random((2, 6))
    two = T.fit_solution_embedding([two_rows])
    assert two.method == "pca"
    assert np.linalg.norm(two.coords[0][0] - two.coords[0][1]) == pytest.approx(np.linalg.norm(two_rows[0] - two_rows[1]))
    np.testing.assert_array_equal(two.coords[0][:, 1], 0.0)
    five = T.fit_solution_embedding([rng.random((5, 6))], n_neighbors=10)
    assert five.method == "isomap" and five.n_neighbors == 4
    duplicates = T.fit_solution_embedding([np.repeat(rng.random((1, 6)), 3, axis=0)])
    assert duplicates.n_fit == 1 and duplicates.method == "pca"


def test_collinear_solutions_have_a_zero_second_axis_and_exact_distances():
    """Points on a line: geodesic = Euclidean and the kernel has rank 1, so the first axis
    keeps the distances and the degenerate second axis is exactly 0 (not amplified
    round-off), for the fitted epoch and for a transformed one."""
    direction = np.random.default_rng(13).normal(size=7)
    s_fit, s_old = np.linspace(0, 1, 9), np.array([0.05, 0.5, 0.93])
    res = T.fit_solution_embedding([s_old[:, None] * direction, s_fit[:, None] * direction], n_neighbors=3)
    for coords, s in zip(res.coords, (s_old, s_fit)):
        np.testing.assert_array_equal(coords[:, 1], 0.0)
        np.testing.assert_allclose(np.abs(coords[:, 0] - coords[0, 0]), (s - s[0]) * np.linalg.norm(direction),
                                   rtol=1e-9, atol=1e-12)


def test_empty_epochs_and_the_latest_non_empty_fit_epoch():
    rng = np.random.default_rng(9)
    epochs = [np.empty((0, 5)), rng.random((12, 5)), np.empty((0, 5))]
    res = T.fit_solution_embedding(epochs, n_neighbors=4)
    assert res.fit_epoch == 1 and [c.shape for c in res.coords] == [(0, 2), (12, 2), (0, 2)]


def test_subsampling_is_seeded_and_bounded():
    rng = np.random.default_rng(10)
    latest = rng.random((90, 8))
    a = T.fit_solution_embedding([latest], max_fit=40, seed=3)
    b = T.fit_solution_embedding([latest], max_fit=40, seed=3)
    assert a.n_fit == 40 and len(a.coords[0]) == 90
    np.testing.assert_array_equal(a.coords[0], b.coords[0])


def test_embed_data_and_solutions_shares_one_space():
    rng = np.random.default_rng(11)
    data = (rng.random((200, 25)) < 0.3).astype(float)
    data[5] = data[17]  # a duplicate row
    solutions = np.vstack([data[3], rng.random((9, 25))])
    res = T.embed_data_and_solutions(data, solutions, n_neighbors=8)
    assert res.method == "isomap" and res.n_fit == 199
    assert res.data_coords.shape == (200, 2) and res.solution_coords.shape == (10, 2)
    np.testing.assert_array_equal(res.data_index, np.arange(200))
    np.testing.assert_array_equal(res.solution_coords[0], res.data_coords[3])  # a solution on a data row
    np.testing.assert_array_equal(res.data_coords[5], res.data_coords[17])
    # the data coordinates are Isomap's embedding of the distinct rows (up to each axis' sign)
    distinct, inverse = np.unique(data, axis=0, return_inverse=True)
    ref = Isomap(n_neighbors=8, n_components=2).fit(distinct).embedding_[inverse.ravel()]
    signs = np.sign(np.sum(ref * res.data_coords, axis=0))
    np.testing.assert_allclose(res.data_coords, ref * signs, rtol=1e-9, atol=1e-9 * np.abs(ref).max())
    # the other solutions go through Isomap.transform
    np.testing.assert_allclose(res.solution_coords[1:], res.model.transform(solutions[1:]), rtol=1e-12)


def test_embed_data_subsample_is_seeded_and_bounded():
    data = (np.random.default_rng(12).random((120, 10)) < 0.5).astype(float)
    a = T.embed_data_and_solutions(data, data[:3] * 0.5, n_neighbors=5, max_fit=50, seed=2)
    b = T.embed_data_and_solutions(data, data[:3] * 0.5, n_neighbors=5, max_fit=50, seed=2)
    assert len(a.data_index) == 50 and np.all(np.diff(a.data_index) > 0) and a.data_index.max() < 120
    np.testing.assert_array_equal(a.data_index, b.data_index)
    np.testing.assert_array_equal(a.solution_coords, b.solution_coords)
    c = T.embed_data_and_solutions(data, data[:3] * 0.5, n_neighbors=5, max_fit=50, seed=3)
    assert not np.array_equal(a.data_index, c.data_index)


def test_embed_data_and_solutions_pca_fallback_and_no_solutions():
    res = T.embed_data_and_solutions(np.array([[0.0, 1.0], [0.0, 1.0]]), np.empty((0, 2)))
    assert res.method == "pca" and res.n_fit == 1 and res.solution_coords.shape == (0, 2)
    np.testing.assert_array_equal(res.data_coords, 0.0)


# -------------------------------------------------------------------- validation


@pytest.mark.parametrize("call, match", [
    (lambda: T.binary_symmetric_channel(np.array([[0, 2]]), 0.1, 0), "'X' parameter of binary_symmetric_channel must hold only 0 and 1"),
    (lambda: T.binary_symmetric_channel(np.eye(2), 1.5, 0), "'p' parameter of binary_symmetric_channel must be a float >= 0 and <= 1. Got 1.5"),
    (lambda: T.binary_symmetric_channel(np.eye(2), 0.1, -1), "'seed' parameter of binary_symmetric_channel must be an int >= 0"),
    (lambda: T.ope_denoise(np.eye(2), [0.5, 0.5, 0.5], 0.1), "'m' parameter of ope_denoise must have 2 entries"),
    (lambda: T.ope_denoise(np.eye(2), [0.5, 1.5], 0.1), r"'m' parameter of ope_denoise must hold values in \[0.0, 1.0\]"),
    (lambda: T.ope_denoise(np.eye(2), [0.5, 0.5], float("nan")), "'p' parameter of ope_denoise"),
    (lambda: T.channel_field(np.ones(3), 0.1), "'Y' parameter of channel_field must be a 2-d array"),
    (lambda: T.nearest_neighbour_denoise(np.eye(3), np.eye(2)), "'Y' parameter of nearest_neighbour_denoise must have 2 columns"),
    (lambda: T.matthews_corrcoef_bits(np.eye(2), np.ones((2, 3))), "'X_estimate' parameter of matthews_corrcoef_bits must have the shape"),
    (lambda: T.denoising_curve(np.eye(2), np.eye(2), [], 0), "'ps' parameter of denoising_curve must be a non-empty"),
    (lambda: T.denoising_curve(np.eye(2), np.eye(2), [0.1, -0.2], 0), "'ps' parameter of denoising_curve must be a float >= 0"),
    (lambda: T.rank_receptive_fields(np.ones(4)), "'W' parameter of rank_receptive_fields must be a 2-d array"),
    (lambda: T.rank_receptive_fields(np.ones((3, 2)), by="size"), "'by' parameter of rank_receptive_fields must be one of"),
    (lambda: T.rank_receptive_fields(np.ones((3, 2)), by="activation"), "'hidden_means' parameter of rank_receptive_fields is required"),
    (lambda: T.rank_receptive_fields(np.ones((3, 2)), [0.1, 0.2, 0.3], by="activation"), "'hidden_means' parameter of rank_receptive_fields must have 2 entries"),
    (lambda: T.rank_receptive_fields(np.ones((3, 2)), p=0), "'p' parameter of rank_receptive_fields must be a float > 0"),
    (lambda: T.rank_receptive_fields(np.array([[1.0, np.inf]])), "'W' parameter of rank_receptive_fields must be finite"),
    (lambda: T.fit_solution_embedding([]), "'solutions_by_epoch' parameter of fit_solution_embedding must be a non-empty list"),
    (lambda: T.fit_solution_embedding([np.ones((3, 4)), np.ones((3, 5))]), r"'solutions_by_epoch\[1\]' parameter of fit_solution_embedding must have 4 columns"),
    (lambda: T.fit_solution_embedding([np.empty((0, 4))]), "must have at least one solution in some epoch"),
    (lambda: T.fit_solution_embedding([np.ones((3, 4))], n_neighbors=0), "'n_neighbors' parameter of fit_solution_embedding must be an int >= 1. Got 0"),
    (lambda: T.embed_data_and_solutions(np.ones((5, 4)), np.ones((2, 3))), "'solutions_vis' parameter of embed_data_and_solutions must have 4 columns"),
    (lambda: T.embed_data_and_solutions(np.ones((5, 4)), np.ones((2, 4)), max_fit=1), "'max_fit' parameter of embed_data_and_solutions must be an int >= 2"),
])
def test_bad_input_raises_a_clear_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()
