"""References for the TAP denoiser of §VII.4 (``tap_analysis.tap_denoiser``: the TAP lab's MCC
curve and denoised digit), issue 27: without W it is the pointwise estimator, and on a tiny
model it matches the exact posterior marginals, enumerated, to second order in W."""

import itertools

import numpy as np
import pytest
from scipy.special import expit, logsumexp

from boltzlab.engine import tap_analysis as T


def exact_posterior_marginals(W, b_vis, b_hid, Y, p):
    """P(x_i = 1 | y) of a {0, 1} RBM prior through a binary symmetric channel, by enumerating
    the visible configurations (the hidden units summed out in closed form); plain NumPy."""
    V = np.array(list(itertools.product([0.0, 1.0], repeat=W.shape[0])))
    log_free = V @ b_vis + np.logaddexp(0.0, b_hid + V @ W).sum(axis=1)  # log sum_h exp(-E(v, h))
    out = np.empty(Y.shape)
    for row, y in enumerate(Y):
        # P(y | x) = prod_i (1 - p)^[x_i = y_i] p^[x_i != y_i]
        log_channel = np.where(V == y, np.log1p(-p), np.log(p)).sum(axis=1)
        log_post = log_free + log_channel
        out[row] = np.exp(log_post - logsumexp(log_post)) @ V
    return out


def naive_mean_field(W, b_vis, b_hid, Y, p, sweeps=3000):
    """First-order (naive) mean field, the TAP equations without their Onsager terms."""
    field = (2.0 * Y - 1.0) * (np.log1p(-p) - np.log(p))
    a_vis = Y.copy()
    for _ in range(sweeps):
        a_hid = expit(b_hid + a_vis @ W)
        a_vis = 0.5 * a_vis + 0.5 * expit(b_vis + field + a_hid @ W.T)
    return a_vis


def tiny_model(scale, seed=0, n_vis=8, n_hid=4, n_rows=6):
    rng = np.random.default_rng(seed)
    W = rng.normal(0.0, scale, (n_vis, n_hid))
    b_vis, b_hid = rng.normal(0.0, 0.5, n_vis), rng.normal(0.0, 0.5, n_hid)
    Y = (rng.random((n_rows, n_vis)) < 0.5).astype(np.float64)
    return W, b_vis, b_hid, Y


@pytest.mark.parametrize("p", [0.0, 0.05, 0.2, 0.4, 0.5])
def test_without_couplings_the_tap_denoiser_is_the_pointwise_estimator(p):
    # W = 0: the prior factorizes with magnetizations sigm(b_vis), so the posterior marginals are
    # the OPE's (eq. 46) with m = sigm(b_vis), exactly.
    _, b_vis, b_hid, Y = tiny_model(0.0, seed=3, n_vis=30, n_hid=5, n_rows=12)
    b_vis = 2.0 * b_vis
    ope = T.ope_denoise(Y, expit(b_vis), p)
    # undamped, one sweep reaches the fixed point exactly
    estimate = T.tap_denoiser(np.zeros((30, 5)), b_vis, b_hid, damping=0.0)(Y.copy(), p)
    np.testing.assert_allclose(estimate, ope, rtol=0, atol=1e-12)
    # damped (the default), the chain stops when a sweep moves it by < 1e-4 (rms): that close
    estimate = T.tap_denoiser(np.zeros((30, 5)), b_vis, b_hid)(Y.copy(), p)
    np.testing.assert_allclose(estimate, ope, rtol=0, atol=5e-4)


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_tap_denoiser_matches_the_exact_posterior_marginals_of_a_tiny_model(p):
    # Weak couplings (|W| ~ 0.3): TAP is exact to second order in W, so it lands within 2e-3 of
    # the enumerated marginals (6e-4 measured), where naive mean field misses by 6e-3 (no
    # Onsager term) and the model without its hidden layer by 0.1: the tolerance tells them apart.
    W, b_vis, b_hid, Y = tiny_model(0.3)
    exact = exact_posterior_marginals(W, b_vis, b_hid, Y, p)
    estimate = T.tap_denoiser(W, b_vis, b_hid)(Y.copy(), p)
    assert estimate.shape == Y.shape
    np.testing.assert_allclose(estimate, exact, rtol=0, atol=2e-3)
    # the references are themselves apart by more than that tolerance
    assert np.abs(naive_mean_field(W, b_vis, b_hid, Y, p) - exact).max() > 4e-3
    assert np.abs(T.ope_denoise(Y, expit(b_vis), p) - exact).max() > 0.05


def test_exact_posterior_reference_is_the_ope_without_couplings():
    """The enumeration itself, checked where the answer is known in closed form."""
    _, b_vis, b_hid, Y = tiny_model(0.0, seed=1)
    exact = exact_posterior_marginals(np.zeros((8, 4)), b_vis, b_hid, Y, 0.2)
    np.testing.assert_allclose(exact, T.ope_denoise(Y, expit(b_vis), 0.2), rtol=0, atol=1e-12)
