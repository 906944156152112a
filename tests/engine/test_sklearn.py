"""The scikit-learn estimators (boltzlab.engine.sklearn) against scikit-learn's own checks and
against plain-NumPy references written here.

References: log P(v) of a tiny RBM by enumerating every (v, h) pair; P(h | v) as
sigmoid(X W^T + c); the FVBM's log-pseudo-likelihood (eq. 2.1), its per-observation scores
and Hessian by central differences of that NumPy formula, and from them the sandwich
standard errors.  Every random choice is seeded: the tests pass or fail the same way on
every run.
"""

import itertools
import math

import numpy as np
import pytest
import scipy.special
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

from boltzlab.engine import fvbm as F
from boltzlab.engine.kernels import rbm as rbm_kernels
from boltzlab.engine.sklearn import FVBM, RBM, TAPRBM

# ------------------------------------------------------------------ references


def ref_states(m):
    """All 2^m binary rows, (2^m, m)."""
    return np.array(list(itertools.product([0.0, 1.0], repeat=m))).reshape(2**m, m)


def ref_log_prob(V, W, b_vis, b_hid):
    """log P(v) for each row of V, W (Nv, Nh): every (v, h) pair enumerated, nothing summed out."""
    Vs, Hs = ref_states(W.shape[0]), ref_states(W.shape[1])

    def logsumexp(a, axis=None):
        top = a.max(axis=axis, keepdims=True)
        return np.squeeze(top, axis=axis) + np.log(np.exp(a - top).sum(axis=axis))

    log_z = logsumexp(Vs @ W @ Hs.T + (Vs @ b_vis)[:, None] + (Hs @ b_hid)[None, :])
    return logsumexp(V @ W @ Hs.T + (V @ b_vis)[:, None] + (Hs @ b_hid)[None, :], axis=1) - log_z


def ref_log_pl_terms(X, b, M):
    """Per-observation terms of eq. 2.1: sum_j x_ij u_ij - log(2 cosh u_ij), u = X M + b (X in +-1)."""
    U = X @ M + b
    return np.sum(X * U - np.logaddexp(U, -U), axis=1)


def theta_to_bM(theta, d):
    b = theta[:d].copy()
    M = np.zeros((d, d))
    M[np.triu_indices(d, 1)] = theta[d:]
    return b, M + M.T


def ref_sandwich_se(X, b, M, h=1e-5):
    """Sandwich standard errors from central differences of :func:`ref_log_pl_terms` in theta
    (b, then the upper triangle of M): scores s_i, J = sum s_i s_i^T, H = d grad / d theta."""
    d = X.shape[1]
    theta = np.concatenate([b, M[np.triu_indices(d, 1)]])
    q = theta.size

    def scores(t):
        out = np.empty((X.shape[0], q))
        for a in range(q):
            e = np.zeros(q)
            e[a] = h
            out[:, a] = (ref_log_pl_terms(X, *theta_to_bM(t + e, d)) - ref_log_pl_terms(X, *theta_to_bM(t - e, d))) / (2 * h)
        return out

    S = scores(theta)
    J = S.T @ S
    H = np.empty((q, q))
    for a in range(q):
        e = np.zeros(q)
        e[a] = 1e-4
        H[:, a] = (scores(theta + e).sum(axis=0) - scores(theta - e).sum(axis=0)) / 2e-4
    H = 0.5 * (H + H.T)
    H_inv = np.linalg.inv(H)
    return np.sqrt(np.diag(H_inv @ J @ H_inv))


def random_binary(n, d, seed, p=0.5):
    return (np.random.default_rng(seed).random((n, d)) < p).astype(np.float64)


def correlated_spins(n, d, seed):
    """+-1 data from a random FVBM (exact sampler), so the MPLE exists and is well determined."""
    return F.FVBM.random(d, seed, variance=0.3).sample(n, seed + 1)


def digits(n_train=500, n_test=300):
    """Binarizable digits: pixel intensities scaled to [0, 1], shuffled with a fixed seed."""
    X, y = load_digits(return_X_y=True)
    order = np.random.RandomState(0).permutation(len(X))
    X, y = X[order] / 16.0, y[order]
    return X[:n_train], y[:n_train], X[n_train:n_train + n_test], y[n_train:n_train + n_test]


# ------------------------------------------------------ scikit-learn's checks


# scikit-learn's data for FVBM are often separable (no MPLE): the default penalty keeps the fit
# finite, but the Hessian there is singular and fit warns that the standard errors are NaN
@pytest.mark.filterwarnings("ignore:FVBM. The standard errors are undefined:UserWarning")
@parametrize_with_checks([RBM(), TAPRBM(), FVBM()])
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


# ------------------------------------------------------------------ the RBMs


@pytest.mark.parametrize("cls", [RBM, TAPRBM])
def test_score_samples_is_the_exact_log_likelihood_by_enumeration(cls):
    X = random_binary(40, 5, 0, p=0.3)
    est = cls(n_components=3, n_iter=3, learning_rate=0.1, random_state=0).fit(X)
    W = est.components_.T
    assert W.shape == (5, 3) and est.intercept_visible_.shape == (5,) and est.intercept_hidden_.shape == (3,)
    assert est.n_features_in_ == 5
    V = ref_states(5)
    got = est.score_samples(V)
    np.testing.assert_allclose(got, ref_log_prob(V, W, est.intercept_visible_, est.intercept_hidden_), rtol=1e-10, atol=1e-10)
    assert scipy.special.logsumexp(got) == pytest.approx(0.0, abs=1e-10)  # a distribution over {0, 1}^5
    assert est.log_partition()[1] is True


def test_score_samples_uses_ais_beyond_twenty_units_and_it_is_close():
    """Both layers of 21 units: AIS (the cheaper 'live' schedule); the exact log Z from the
    engine's enumeration kernel over 2^21 states, called past the estimator's limit."""
    rng = np.random.default_rng(3)
    est = RBM(n_components=21, n_iter=1, ais_runs=50, ais_schedule="live", random_state=0).fit(random_binary(30, 21, 1))
    est.components_ = rng.normal(0.0, 0.2, (21, 21))
    est.intercept_visible_ = rng.normal(0.0, 0.2, 21)
    est.intercept_hidden_ = rng.normal(0.0, 0.2, 21)
    log_z, exact = est.log_partition()
    assert exact is False
    W = np.ascontiguousarray(est.components_.T)
    truth = rbm_kernels.log_partition_sum_over(W, est.intercept_visible_, est.intercept_hidden_)
    assert log_z == pytest.approx(truth, abs=0.05)
    V = random_binary(4, 21, 2)
    free = rbm_kernels.free_energy(V, W, est.intercept_visible_, est.intercept_hidden_)
    np.testing.assert_allclose(est.score_samples(V), -free - log_z, rtol=1e-12)
    np.testing.assert_array_equal(est.score_samples(V), est.score_samples(V))  # seeded at fit: no new draws


@pytest.mark.parametrize("cls", [RBM, TAPRBM])
def test_transform_is_the_hidden_probabilities(cls):
    X = random_binary(30, 6, 4)
    est = cls(n_components=4, n_iter=2, random_state=1).fit(X)
    expected = 1.0 / (1.0 + np.exp(-(X @ est.components_.T + est.intercept_hidden_)))
    np.testing.assert_allclose(est.transform(X), expected, rtol=1e-12)
    # values in [0, 1] are binarized at 0.5 first (module docstring)
    grey = np.where(X == 1.0, 0.9, 0.2)
    np.testing.assert_allclose(est.transform(grey), expected, rtol=1e-12)


def test_binarize_none_refuses_non_binary_data():
    with pytest.raises(ValueError, match="only 0 and 1"):
        RBM(binarize=None, n_iter=1).fit(np.array([[0.0, 0.5], [1.0, 0.0]]))
    est = RBM(binarize=None, n_components=2, n_iter=1, random_state=0).fit(random_binary(10, 3, 0))
    assert est.components_.shape == (2, 3)


def test_gibbs_draws_binary_visibles_from_the_model():
    X = random_binary(20, 6, 5)
    est = RBM(n_components=3, n_iter=1, random_state=0).fit(X)
    # strong biases: the visible step is nearly deterministic whatever h was drawn
    est.components_ = np.zeros((3, 6))
    est.intercept_visible_ = np.array([30.0, -30.0, 30.0, -30.0, 30.0, -30.0])
    out = est.gibbs(X)
    assert out.shape == X.shape and set(np.unique(out)) <= {0.0, 1.0}
    np.testing.assert_array_equal(out, np.tile([1.0, 0.0], 3)[None, :].repeat(20, axis=0))
    # with no field at all, each draw is a fair coin: the chains are random, not the input
    est.intercept_visible_ = np.zeros(6)
    draws = np.concatenate([est.gibbs(X) for _ in range(20)])
    assert abs(draws.mean() - 0.5) < 5 * math.sqrt(0.25 / draws.size)


@pytest.mark.parametrize("cls", [RBM, TAPRBM])
def test_fit_and_partial_fit_are_reproducible_from_random_state(cls):
    X = random_binary(40, 6, 6)
    a = cls(n_components=4, n_iter=2, random_state=7).fit(X)
    b = cls(n_components=4, n_iter=2, random_state=7).fit(X)
    np.testing.assert_array_equal(a.components_, b.components_)
    np.testing.assert_array_equal(a.intercept_hidden_, b.intercept_hidden_)
    c, e = cls(n_components=4, random_state=3), cls(n_components=4, random_state=3)
    for start in (0, 10, 20):
        c.partial_fit(X[start:start + 10])
        e.partial_fit(X[start:start + 10])
    np.testing.assert_array_equal(c.components_, e.components_)
    before = c.components_.copy()
    c.partial_fit(X[30:])
    assert not np.array_equal(before, c.components_)  # another update happened
    assert c.n_iter_ == 1


def test_partial_fit_refuses_a_changed_number_of_hidden_units():
    X = random_binary(20, 4, 0)
    est = RBM(n_components=3, random_state=0).partial_fit(X)
    est.set_params(n_components=5)
    with pytest.raises(ValueError, match="n_components"):
        est.partial_fit(X)


def test_rbm_features_in_a_pipeline_beat_chance_on_digits():
    X_train, y_train, X_test, y_test = digits()
    pipe = Pipeline([("rbm", RBM(n_components=16, n_iter=10, random_state=0)),
                     ("logistic", LogisticRegression(max_iter=1000))])
    pipe.fit(X_train, y_train)
    assert pipe.score(X_test, y_test) > 0.5  # chance is 0.1 (ten classes); about 0.7 here


def test_taprbm_learns_more_than_the_base_rates_on_digits():
    """The exact mean log-likelihood after TAP training beats the independent-pixel model
    fitted to the same data (a smoothed maximum-likelihood Bernoulli per pixel)."""
    X_train, _, X_test, _ = digits()
    V_train, V_test = (X_train > 0.5).astype(float), (X_test > 0.5).astype(float)
    tap = TAPRBM(n_components=16, learning_rate=0.05, n_iter=10, random_state=0).fit(X_train)
    p = (V_train.sum(axis=0) + 1.0) / (V_train.shape[0] + 2.0)
    base = np.mean(V_test @ np.log(p) + (1 - V_test) @ np.log1p(-p))
    assert tap.log_partition()[1] is True
    assert tap.score_samples(X_test).mean() > base + 1.0


# ------------------------------------------------------------------ the FVBM


def test_fvbm_coefficients_are_the_engines_mple():
    X = correlated_spins(400, 5, 0)
    est = FVBM(alpha=0.0).fit(X)  # +-1 data: -1 < 0.5 <= +1, so the spins are unchanged
    truth = F.mple(X)
    np.testing.assert_allclose(est.coef_, truth.M, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(est.intercept_, truth.b, rtol=1e-10, atol=1e-12)
    # 0/1 data give the same fit
    np.testing.assert_allclose(FVBM(alpha=0.0).fit((X + 1) / 2).coef_, est.coef_, rtol=1e-12, atol=1e-14)
    assert np.all(np.diag(est.coef_) == 0.0) and np.allclose(est.coef_, est.coef_.T)


def test_fvbm_standard_errors_match_a_numerical_sandwich():
    X = correlated_spins(300, 4, 1)
    est = FVBM(alpha=0.0).fit(X)
    se = ref_sandwich_se(X, est.intercept_, est.coef_)
    d = 4
    np.testing.assert_allclose(est.se_.intercept, se[:d], rtol=1e-4)
    iu = np.triu_indices(d, 1)
    np.testing.assert_allclose(est.se_.coef[iu], se[d:], rtol=1e-4)
    np.testing.assert_allclose(est.se_.coef.T[iu], se[d:], rtol=1e-4)
    assert np.all(np.isnan(np.diag(est.se_.coef)))


def test_fvbm_wald_test_is_estimate_over_se_with_two_sided_normal_p():
    X = correlated_spins(300, 4, 2)
    est = FVBM(alpha=0.0).fit(X)
    result = est.wald_test()
    z_b = est.intercept_ / est.se_.intercept
    np.testing.assert_allclose(result.z.intercept, z_b, rtol=1e-12)
    off = ~np.eye(4, dtype=bool)
    np.testing.assert_allclose(result.z.coef[off], (est.coef_ / est.se_.coef)[off], rtol=1e-12)
    np.testing.assert_allclose(result.p.intercept, 2 * scipy.special.ndtr(-np.abs(z_b)), rtol=1e-10)
    np.testing.assert_allclose(result.p.coef[off], 2 * scipy.special.ndtr(-np.abs(result.z.coef[off])), rtol=1e-10)
    assert np.all(np.isnan(np.diag(result.p.coef)))


def test_fvbm_score_is_the_mean_log_pseudo_likelihood():
    X = correlated_spins(200, 5, 3)
    est = FVBM().fit(X)
    assert est.score(X) == pytest.approx(ref_log_pl_terms(X, est.intercept_, est.coef_).mean(), rel=1e-12)
    held_out = correlated_spins(50, 5, 30)
    assert est.score(held_out) == pytest.approx(ref_log_pl_terms(held_out, est.intercept_, est.coef_).mean(), rel=1e-12)


def test_fvbm_penalty_keeps_degenerate_data_finite_and_alpha_zero_refuses_it():
    X = random_binary(30, 4, 4)
    X[:, 3] = X[:, 0]  # column 4 is predicted perfectly by column 1: no MPLE
    with pytest.raises(ValueError, match="MPLE does not exist"):
        FVBM(alpha=0.0).fit(X)
    est = FVBM(alpha=1e-2).fit(X)
    assert np.all(np.isfinite(est.coef_)) and est.coef_[0, 3] > 1.0
    # stationary for the penalized objective: grad P_n / n = alpha theta (NumPy gradient)
    S = 2 * X - 1
    R = S - np.tanh(S @ est.coef_ + est.intercept_)
    G = S.T @ R
    grad_M = G + G.T
    np.testing.assert_allclose(R.sum(axis=0) / 30, 1e-2 * est.intercept_, atol=1e-8)
    iu = np.triu_indices(4, 1)
    np.testing.assert_allclose(grad_M[iu] / 30, 1e-2 * est.coef_[iu], atol=1e-8)


def test_fvbm_default_penalty_barely_moves_a_well_posed_estimate():
    X = correlated_spins(1000, 5, 5)
    mple, default = FVBM(alpha=0.0).fit(X), FVBM().fit(X)
    assert np.max(np.abs(default.coef_ - mple.coef_)) < 0.05 * np.min(mple.se_.coef[~np.eye(5, dtype=bool)])


def test_fvbm_refuses_too_little_data():
    with pytest.raises(ValueError, match="n_features = 1"):
        FVBM().fit(np.array([[0.0], [1.0], [1.0]]))
    with pytest.raises(ValueError, match="n_samples = 1"):
        FVBM().fit(np.array([[0.0, 1.0, 1.0]]))
    with pytest.raises(ValueError, match="only 0 and 1"):
        FVBM(binarize=None).fit(np.array([[0.0, 2.0], [1.0, 0.0]]))
