"""The numba RBM kernels against plain-NumPy references written here.

Random draws: every kernel takes a seed and draws from a splitmix64 stream, the same stream
``kernels.uniforms(n, seed)`` returns, consumed in row-major order of each sampled block.
The references below consume that stream in the same order, so the comparisons are of
identical computations up to rounding.
"""

import itertools
import math

import numpy as np
import pytest
import scipy.special
from hypothesis import given
from hypothesis import strategies as st

from boltzlab.engine import rbm as R
from boltzlab.engine.checks import derived_seed
from boltzlab.engine.kernels import rbm as kernels

# ------------------------------------------------------------------ references


def ref_states(m):
    """All 2^m binary rows, (2^m, m)."""
    return np.array(list(itertools.product([0.0, 1.0], repeat=m))).reshape(2**m, m)


def ref_log_partition_both_layers(W, b_vis, b_hid):
    """log Z by enumerating every (v, h) pair: sum exp(v^T W h + b_vis^T v + b_hid^T h)."""
    Vs, Hs = ref_states(W.shape[0]), ref_states(W.shape[1])
    neg_energy = Vs @ W @ Hs.T + (Vs @ b_vis)[:, None] + (Hs @ b_hid)[None, :]
    top = neg_energy.max()
    return top + math.log(np.exp(neg_energy - top).sum())


def ref_free_energy(V, W, b_vis, b_hid):
    """F(v) = -log sum_h exp(-E(v, h)) by enumeration over h."""
    Hs = ref_states(W.shape[1])
    neg_energy = V @ W @ Hs.T + (V @ b_vis)[:, None] + (Hs @ b_hid)[None, :]
    top = neg_energy.max(axis=1, keepdims=True)
    return -(top[:, 0] + np.log(np.exp(neg_energy - top).sum(axis=1)))


def ref_sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def ref_softplus(x):
    return np.logaddexp(0.0, x)


class Stream:
    """The kernels' random stream, consumed block by block in row-major order."""

    def __init__(self, seed, n=1_000_000):
        self.u = kernels.uniforms(n, seed)
        self.pos = 0

    def take(self, shape):
        size = int(np.prod(shape))
        out = self.u[self.pos:self.pos + size].reshape(shape)
        self.pos += size
        return out


def small_rbm(n_vis, n_hid, seed, scale=1.0):
    return R.RBM.random(n_vis, n_hid, seed, scale=scale)


def random_binary(n, d, seed, p=0.5):
    return (np.random.default_rng(seed).random((n, d)) < p).astype(np.float64)


# ---------------------------------------------------------------- elementwise


def test_softplus_and_sigmoid_are_stable_and_match_numpy():
    xs = np.array([-800.0, -40.0, -1.0, 0.0, 1e-12, 3.0, 40.0, 800.0])
    for x in xs:
        assert kernels.softplus(x) == pytest.approx(ref_softplus(x), rel=1e-14, abs=1e-300)
        assert kernels.sigmoid(x) == pytest.approx(scipy.special.expit(x), rel=1e-14, abs=1e-300)
        assert math.isfinite(kernels.softplus(x)) and 0.0 <= kernels.sigmoid(x) <= 1.0


def test_uniforms_are_seeded_and_uniform():
    a, b = kernels.uniforms(100_000, 7), kernels.uniforms(100_000, 7)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, kernels.uniforms(100_000, 8))
    assert a.min() >= 0.0 and a.max() < 1.0
    # mean of 1e5 U(0,1): sd 0.000913; 5 sd => false-alarm rate 6e-7 (seeded, so fixed anyway)
    assert abs(a.mean() - 0.5) < 5 * math.sqrt(1 / 12 / a.size)


# ------------------------------------------------------------ model functions


@pytest.mark.parametrize("n_vis,n_hid", [(3, 5), (5, 3), (4, 4), (1, 6), (6, 1)])
def test_free_energy_and_conditionals_match_enumeration(n_vis, n_hid):
    model = small_rbm(n_vis, n_hid, 3)
    V = ref_states(n_vis)
    np.testing.assert_allclose(model.free_energy(V), ref_free_energy(V, model.W, model.b_vis, model.b_hid), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(model.prob_h_given_v(V), ref_sigmoid(V @ model.W + model.b_hid), rtol=1e-12)
    H = ref_states(n_hid)
    np.testing.assert_allclose(model.prob_v_given_h(H), ref_sigmoid(H @ model.W.T + model.b_vis), rtol=1e-12)
    E = model.energy(np.repeat(V[:1], len(H), 0), H)
    np.testing.assert_allclose(E, -(V[0] @ model.W @ H.T) - V[0] @ model.b_vis - H @ model.b_hid, rtol=1e-12, atol=1e-12)


def test_free_energy_is_finite_for_huge_weights():
    model = R.RBM(np.full((3, 2), 500.0), np.full(3, -400.0), np.full(2, 300.0))
    V = ref_states(3)
    F = model.free_energy(V)
    assert np.all(np.isfinite(F))
    np.testing.assert_allclose(F, ref_free_energy(V, model.W, model.b_vis, model.b_hid), rtol=1e-12)


@pytest.mark.parametrize("n_vis,n_hid", [(3, 7), (7, 3), (5, 5), (1, 9), (9, 1), (6, 8)])
@pytest.mark.parametrize("seed", [0, 1])
def test_log_partition_exact_matches_full_enumeration_of_both_layers(n_vis, n_hid, seed):
    """log Z summing over either layer equals the double sum over (v, h)."""
    model = small_rbm(n_vis, n_hid, seed, scale=1.5)
    truth = ref_log_partition_both_layers(model.W, model.b_vis, model.b_hid)
    assert R.log_partition_exact(model.W, model.b_vis, model.b_hid) == pytest.approx(truth, rel=1e-12, abs=1e-10)
    # force each of the two layers to be the enumerated one
    over_vis = kernels.log_partition_sum_over(model.W, model.b_vis, model.b_hid)
    over_hid = kernels.log_partition_sum_over(np.ascontiguousarray(model.W.T), model.b_hid, model.b_vis)
    assert over_vis == pytest.approx(truth, rel=1e-12, abs=1e-10)
    assert over_hid == pytest.approx(truth, rel=1e-12, abs=1e-10)


def test_log_partition_exact_refreshes_fields_past_4096_flips():
    """m = 14 enumerates 16,384 states (four from-scratch field refreshes); compare with a
    vectorised NumPy sum over the smaller layer."""
    model = small_rbm(14, 30, 5, scale=0.3)
    Vs = ref_states(14)
    log_terms = Vs @ model.b_vis + ref_softplus(Vs @ model.W + model.b_hid).sum(axis=1)
    top = log_terms.max()
    truth = top + math.log(np.exp(log_terms - top).sum())
    assert model.log_partition() == pytest.approx(truth, rel=1e-12)


def test_exact_log_likelihood_matches_enumeration():
    model = small_rbm(5, 4, 2)
    V = random_binary(40, 5, 1)
    log_z = ref_log_partition_both_layers(model.W, model.b_vis, model.b_hid)
    truth = np.mean(-ref_free_energy(V, model.W, model.b_vis, model.b_hid)) - log_z
    assert R.exact_log_likelihood(model, V) == pytest.approx(truth, rel=1e-12)
    # probabilities of all states sum to one
    all_v = ref_states(5)
    total = np.exp(-ref_free_energy(all_v, model.W, model.b_vis, model.b_hid) - model.log_partition()).sum()
    assert total == pytest.approx(1.0, rel=1e-12)


# -------------------------------------------------------------- pseudo-likelihood


def ref_conditional_log_probs(V, model):
    """log P(v_i | v_-i) = log(exp(-F(v)) / (exp(-F(v)) + exp(-F(v with i flipped))))."""
    F = ref_free_energy(V, model.W, model.b_vis, model.b_hid)
    out = np.empty(V.shape)
    for i in range(V.shape[1]):
        Vf = V.copy()
        Vf[:, i] = 1 - Vf[:, i]
        Ff = ref_free_energy(Vf, model.W, model.b_vis, model.b_hid)
        out[:, i] = -F - np.logaddexp(-F, -Ff)
    return out


@given(st.integers(1, 7), st.integers(1, 6), st.integers(0, 1000))
def test_pseudo_likelihood_matches_free_energy_reference(n_vis, n_hid, seed):
    model = small_rbm(n_vis, n_hid, seed, scale=2.0)
    V = random_binary(30, n_vis, seed + 1)
    ref = ref_conditional_log_probs(V, model)
    assert R.pseudo_log_likelihood_exact(model, V) == pytest.approx(ref.sum(axis=1).mean(), rel=1e-10, abs=1e-10)
    n_units = max(1, n_vis // 2)
    rng = np.random.default_rng(seed)
    units = np.sort(rng.choice(n_vis, n_units, replace=False))
    value = R.stochastic_pseudo_log_likelihood(model, V, n_units, seed)
    assert value == pytest.approx(ref[:, units].mean(), rel=1e-10, abs=1e-10)
    scaled = R.stochastic_pseudo_log_likelihood(model, V, n_units, seed, scale_to_all=True)
    assert scaled == pytest.approx(n_vis * value, rel=1e-12)


def test_stochastic_pseudo_likelihood_over_all_units_is_the_exact_one_per_unit():
    model = small_rbm(8, 5, 4)
    V = random_binary(50, 8, 2)
    exact = R.pseudo_log_likelihood_exact(model, V)
    assert R.stochastic_pseudo_log_likelihood(model, V, 8, 0) == pytest.approx(exact / 8, rel=1e-12)
    assert R.stochastic_pseudo_log_likelihood(model, V, 8, 0, scale_to_all=True) == pytest.approx(exact, rel=1e-12)


# ---------------------------------------------------------------- sampling kernels


def test_gibbs_chains_match_numpy_reference_draw_for_draw():
    model = small_rbm(6, 4, 1)
    V0 = random_binary(7, 6, 3)
    V, H = model.gibbs(V0, 3, seed=11)
    stream = Stream(derived_seed(11, 11))
    Vr = V0.copy()
    for _ in range(3):
        Hr = (stream.take((7, 4)) < ref_sigmoid(Vr @ model.W + model.b_hid)).astype(float)
        Vr = (stream.take((7, 6)) < ref_sigmoid(Hr @ model.W.T + model.b_vis)).astype(float)
    np.testing.assert_array_equal(V, Vr)
    np.testing.assert_array_equal(H, Hr)
    np.testing.assert_array_equal(V0, random_binary(7, 6, 3))  # input untouched


def ref_train_batch(B, chains, chain_hid, W, b_vis, b_hid, vW, v_vis, v_hid, persistent, k, lr, mom, wd, stream):
    """One CD-k/PCD-k batch of engine.kernels.rbm.train_batches, written in NumPy.

    PCD's first hidden half-step samples from the chains' stored P(h|v) (``chain_hid``);
    the batch's negative-phase P(h|v) becomes the next ``chain_hid``.
    """
    W, b_vis, b_hid, vW, v_vis, v_hid = (a.copy() for a in (W, b_vis, b_hid, vW, v_vis, v_hid))
    chains = chains.copy()
    nb = B.shape[0]
    Hp = ref_sigmoid(B @ W + b_hid)
    if persistent:
        nr = min(nb, kernels.RECON_ROWS)
        Hs = (stream.take((nr, W.shape[1])) < Hp[:nr]).astype(float)
        recon = np.sum((B[:nr] - ref_sigmoid(Hs @ W.T + b_vis)) ** 2) / nr
        neg = chains
        for step in range(k):
            P = chain_hid if step == 0 else ref_sigmoid(neg @ W + b_hid)
            Hc = (stream.take((neg.shape[0], W.shape[1])) < P).astype(float)
            neg = (stream.take(neg.shape) < ref_sigmoid(Hc @ W.T + b_vis)).astype(float)
        chains = neg
    else:
        Hs = (stream.take(Hp.shape) < Hp).astype(float)
        Vr = ref_sigmoid(Hs @ W.T + b_vis)
        recon = np.sum((B - Vr) ** 2) / nb
        neg = (stream.take(B.shape) < Vr).astype(float)
        for _ in range(k - 1):
            Hc = (stream.take((nb, W.shape[1])) < ref_sigmoid(neg @ W + b_hid)).astype(float)
            neg = (stream.take(B.shape) < ref_sigmoid(Hc @ W.T + b_vis)).astype(float)
    Hn = ref_sigmoid(neg @ W + b_hid)
    gW = B.T @ Hp / nb - neg.T @ Hn / neg.shape[0]
    vW = mom * vW + lr * (gW - wd * W)
    v_vis = mom * v_vis + lr * (B.mean(0) - neg.mean(0))
    v_hid = mom * v_hid + lr * (Hp.mean(0) - Hn.mean(0))
    if persistent:
        chain_hid = Hn
    return W + vW, b_vis + v_vis, b_hid + v_hid, vW, v_vis, v_hid, chains, chain_hid, recon


@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("k", [1, 3])
def test_train_batches_matches_numpy_reference(persistent, k):
    n_vis, n_hid, n_chains = 9, 5, 6
    V = random_binary(40, n_vis, 0)
    model = small_rbm(n_vis, n_hid, 2, scale=0.5)
    state = [model.W.copy(), model.b_vis.copy(), model.b_hid.copy(),
             np.random.default_rng(1).normal(0, 0.01, (n_vis, n_hid)), np.zeros(n_vis), np.zeros(n_hid)]
    chains = random_binary(n_chains, n_vis, 5)
    chain_hid = ref_sigmoid(chains @ model.W + model.b_hid)
    rows = np.random.default_rng(3).permutation(40).astype(np.int64)
    bounds = np.array([0, 25, 31, 40], dtype=np.int64)  # uneven batches (the last is short)
    seeds = np.array([101, 202, 303], dtype=np.int64)
    W, bv, bh, vW, vv, vh = (a.copy() for a in state)
    ch, chh = chains.copy(), chain_hid.copy()
    recon = np.empty(3)
    kernels.train_batches(V, rows, bounds, seeds, W, bv, bh, vW, vv, vh, ch, chh, persistent, k, 0.1, 0.5, 0.01, recon)
    ref = [*state, chains, chain_hid]
    for t in range(3):
        B = V[rows[bounds[t]:bounds[t + 1]]]
        out = ref_train_batch(B, ref[6], ref[7], *ref[:6], persistent, k, 0.1, 0.5, 0.01, Stream(int(seeds[t])))
        ref = list(out[:8])
        assert recon[t] == pytest.approx(out[8], rel=1e-10)
    for got, want in zip((W, bv, bh, vW, vv, vh, ch, chh), ref):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-13)


def test_gradient_kernel_matches_numpy():
    model = small_rbm(7, 4, 9)
    Vp, Vn = random_binary(20, 7, 1), random_binary(13, 7, 2)
    gW, gv, gh = kernels.gradient(Vp, Vn, model.W, model.b_vis, model.b_hid)
    Hp, Hn = ref_sigmoid(Vp @ model.W + model.b_hid), ref_sigmoid(Vn @ model.W + model.b_hid)
    np.testing.assert_allclose(gW, Vp.T @ Hp / 20 - Vn.T @ Hn / 13, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(gv, Vp.mean(0) - Vn.mean(0), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(gh, Hp.mean(0) - Hn.mean(0), rtol=1e-12, atol=1e-14)


def ref_ais_log_weights(W, b_vis, b_hid, base_vis, betas, n_runs, stream):
    """boltzlab.engine.kernels.rbm.ais_log_weights in NumPy, consuming the same draws."""
    n_vis, n_hid = W.shape
    V = (stream.take((n_runs, n_vis)) < ref_sigmoid(base_vis)).astype(float)
    logw = np.zeros(n_runs)
    for kk in range(1, len(betas)):
        X = V @ W + b_hid
        logw += (betas[kk] - betas[kk - 1]) * (V @ (b_vis - base_vis))
        logw += (ref_softplus(betas[kk] * X) - ref_softplus(betas[kk - 1] * X)).sum(axis=1)
        H = (stream.take((n_runs, n_hid)) < ref_sigmoid(betas[kk] * X)).astype(float)
        if kk == len(betas) - 1:
            break
        Y = (1 - betas[kk]) * base_vis + betas[kk] * (b_vis + H @ W.T)
        V = (stream.take((n_runs, n_vis)) < ref_sigmoid(Y)).astype(float)
    return logw


def test_ais_kernel_matches_numpy_reference_draw_for_draw():
    model = small_rbm(6, 4, 3)
    base = np.random.default_rng(0).normal(0, 1, 6)
    betas = np.linspace(0, 1, 30)
    got = kernels.ais_log_weights(model.W, model.b_vis, model.b_hid, base, betas, 8, 77)
    want = ref_ais_log_weights(model.W, model.b_vis, model.b_hid, base, betas, 8, Stream(77))
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11)


def test_ais_estimate_and_spread_from_log_weights():
    """estimate = log mean exp(log w) + log Z_base; spread = 3 * std(w)/(mean(w) sqrt(R))."""
    model = small_rbm(6, 4, 3)
    base = np.random.default_rng(0).normal(0, 1, 6)
    betas = np.linspace(0, 1, 50)
    est, spread = R.ais_log_partition(model.W, model.b_vis, model.b_hid, n_runs=40, schedule=betas, seed=5, base_vis=base)
    logw = kernels.ais_log_weights(model.W, model.b_vis, model.b_hid, base, betas, 40, derived_seed(5, 13))
    log_z_base = 4 * math.log(2) + ref_softplus(base).sum()
    w = np.exp(logw)
    assert est == pytest.approx(math.log(w.mean()) + log_z_base, rel=1e-12)
    assert spread == pytest.approx(3 * w.std(ddof=1) / (w.mean() * math.sqrt(40)), rel=1e-10)


def test_ais_with_beta_one_only_is_exact_for_a_model_equal_to_the_base():
    """With W = 0, b_hid = 0 and base_vis = b_vis the weights are all zero: log Z exact."""
    b_vis = np.array([0.3, -1.0, 2.0])
    est, spread = R.ais_log_partition(np.zeros((3, 2)), b_vis, np.zeros(2), n_runs=5, schedule=np.array([0.0, 1.0]),
                                      base_vis=b_vis)
    assert est == pytest.approx(R.log_partition_exact(np.zeros((3, 2)), b_vis, np.zeros(2)), rel=1e-13)
    assert spread == 0.0
