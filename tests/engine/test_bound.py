"""The quadratic partition-function bound (engine.bound, engine.kernels.bound) against
plain-NumPy references and exact log Z by enumeration (Jebara & Choromanska 2012).

The references below are written from the paper in NumPy, independently of the kernels:
Algorithm 1 straight in float64 (z, alpha = h e^{theta^T f}, no log-space tricks; only
footnote 3's limits), Algorithm 3 on a chain, and Algorithm 4 exactly as printed (which
drops cross terms and can fail to majorize: see test_printed_algorithm4_fails_to_majorize).
"""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from boltzlab.engine import bound as B
from boltzlab.engine.experiments import bench_bound
from boltzlab.engine.kernels import bound as kernels

# ------------------------------------------------------------------ references


def ref_coefficient(alpha, z):
    """tanh(1/2 log(alpha/z)) / (2 log(alpha/z)) with footnote 3's limits."""
    if z == 0.0 or alpha == 0.0:
        return 0.0
    x = math.log(alpha / z)
    return 0.25 if x == 0.0 else math.tanh(0.5 * x) / (2.0 * x)


def ref_algorithm1(theta, F, h):
    """Algorithm 1 (ComputeBound) as printed: z -> 0+, mu = 0, Sigma = z I; for each y ..."""
    d = F.shape[1]
    z, mu, Sigma = 0.0, np.zeros(d), np.zeros((d, d))
    for f, hy in zip(F, h):
        alpha = hy * math.exp(theta @ f)
        l = f - mu
        Sigma = Sigma + ref_coefficient(alpha, z) * np.outer(l, l)
        if alpha > 0.0:
            mu = mu + alpha / (z + alpha) * l
        z = z + alpha
    return z, mu, Sigma


def ref_log_z(theta, F, h):
    return math.log(sum(hy * math.exp(theta @ f) for f, hy in zip(F, h)))


def ref_chain_jt(theta, Fc, hc):
    """Algorithm 3 on a chain (cliques (y_c, y_{c+1}), parent c + 1), plain float64."""
    m, k, _, d = Fc.shape
    child = None  # per value of the shared variable: (z, mu, Sigma)
    for c in range(m):
        root = c == m - 1
        us = [None] if root else range(k)
        out = {}
        for u in us:
            z, mu, S = 0.0, np.zeros(d), np.zeros((d, d))
            ws = list(itertools.product(range(k), range(k))) if root else [(v, u) for v in range(k)]
            for a, b in ws:
                zb, mub, Sb = child[a] if child is not None else (1.0, np.zeros(d), np.zeros((d, d)))
                alpha = hc[c, a, b] * math.exp(theta @ Fc[c, a, b]) * zb
                if alpha == 0.0:
                    continue  # no term of Z (see the kernel's docstring)
                l = Fc[c, a, b] - mu + mub
                S = S + Sb + ref_coefficient(alpha, z) * np.outer(l, l)
                mu = mu + alpha / (z + alpha) * l
                z += alpha
            out[u] = (z, mu, S)
        child = out
    return child[None]


def printed_algorithm4(theta, F, h, k):
    """Algorithm 4 (LowRankBound) exactly as printed, t = 1, lambda = 0 (ties go to S)."""
    n, d = F.shape
    V, S, D = np.eye(k, d), np.zeros((k, k)), np.zeros(d)
    z, mu = 0.0, np.zeros(d)
    for f, hy in zip(F, h):
        alpha = hy * math.exp(theta @ f)
        r = math.sqrt(ref_coefficient(alpha, z)) * (f - mu)
        p = V @ r
        r = r - V.T @ p
        S = S + np.outer(p, p)
        A, Q = np.linalg.eigh(S)  # S = Q A Q^T
        S, V = np.diag(A), Q.T @ V
        s = np.r_[np.diag(S), r @ r]
        kk = int(np.argmin(s))
        if kk < k:
            D = D + S[kk, kk] * np.abs(V[kk]).sum() * np.abs(V[kk])
            S[kk, kk] = r @ r
            if r @ r > 0:
                V[kk] = r / np.linalg.norm(r)
        else:
            D = D + np.abs(r).sum() * np.abs(r)
        if alpha > 0.0:
            mu = mu + alpha / (z + alpha) * (f - mu)
        z += alpha
    return math.log(z), mu, V.T @ S @ V + np.diag(D)


def cov_under_p(theta, F, h):
    a = F @ theta
    with np.errstate(divide="ignore"):
        a = a + np.log(h)
    p = np.exp(a - a.max())
    p /= p.sum()
    m = p @ F
    return (F - m).T @ ((F - m) * p[:, None])


# ------------------------------------------------------------------ strategies


@st.composite
def models(draw, max_d=6, max_n=64, scales=(0.1, 1.0, 3.0, 50.0, 500.0)):
    """(theta, F, h): integer, real or +-1 features; repeated rows; h with zeros; |theta| up to 500."""
    d = draw(st.integers(1, max_d))
    n = draw(st.integers(1, max_n))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(["int", "real", "spin"]))
    if kind == "int":
        F = rng.integers(-2, 3, size=(n, d)).astype(float)
    elif kind == "real":
        F = rng.normal(size=(n, d))
    else:
        F = rng.choice([-1.0, 1.0], size=(n, d))
    if n > 1 and draw(st.booleans()):  # repeated rows
        F[rng.integers(0, n, n // 2)] = F[rng.integers(0, n, n // 2)]
    hkind = draw(st.sampled_from(["ones", "random", "zeros"]))
    h = np.ones(n) if hkind == "ones" else rng.random(n) * 3.0
    if hkind == "zeros":
        h[rng.random(n) < 0.4] = 0.0
        h[rng.integers(0, n)] = 1.0 + rng.random()
    theta = rng.normal(size=d) * draw(st.sampled_from(scales))
    return theta, F, h


def probe_points(theta_tilde, rng, m=120):
    """Points at distances 1e-3 .. 300 from theta_tilde in random directions."""
    d = theta_tilde.shape[0]
    dirs = rng.normal(size=(m, d))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    return theta_tilde + dirs * 10.0 ** rng.uniform(-3, 2.5, size=(m, 1))


def assert_majorizes(theta_tilde, F, h, log_z, mu, Sigma, seed=0, value=None):
    rng = np.random.default_rng(seed)
    T = probe_points(theta_tilde, rng)
    bound = B.bound_value(T, theta_tilde, log_z, mu, Sigma) if value is None else value(T)
    exact = B.log_partition(T, F, h)
    delta = T - theta_tilde
    size = abs(log_z) + np.abs(delta @ mu) + np.abs(np.sum((delta @ Sigma) * delta, axis=1)) + np.abs(exact)
    assert np.all(np.isfinite(bound))
    gap = bound - exact
    assert np.all(gap >= -1e-11 * size - 1e-12), gap.min()


def assert_psd(A, scale=1.0, tol=1e-10):
    A = 0.5 * (A + A.T)
    assert np.linalg.eigvalsh(A).min() >= -tol * (1.0 + scale)


# ------------------------------------------------------------------ footnote 3


def test_coefficient_limits_of_footnote_3():
    c = kernels.bound_coefficient
    assert c(0.0) == 0.25
    assert c(math.inf) == 0.0 and c(-math.inf) == 0.0
    assert math.isnan(c(math.nan))
    for r in (1e-12, 1e-6, 9.9e-5, 1.01e-4, 1e-2, 0.5, 3.0, 40.0, 1e4, 1e300):
        exact = math.tanh(0.5 * r) / (2.0 * r)
        assert c(r) == pytest.approx(exact, rel=1e-14) and c(-r) == c(r)
    assert c(1e300) > 0.0 and c(1e300) == pytest.approx(0.5e-300)
    # continuous through the series threshold, decreasing in |r|, in (0, 1/4]
    rs = np.linspace(0.0, 5 * kernels.SERIES_R, 101)
    vals = np.array([c(r) for r in rs])
    assert np.all(np.diff(vals) <= 1e-18) and vals.max() == 0.25 and vals.min() > 0.2499


def test_sigmoid_and_logaddexp_do_not_overflow():
    assert kernels.sigmoid(1000.0) == 1.0 and kernels.sigmoid(-1000.0) == 0.0
    assert kernels.sigmoid(0.0) == 0.5
    assert kernels.logaddexp(-math.inf, 3.0) == 3.0
    assert kernels.logaddexp(1000.0, 1000.0) == pytest.approx(1000.0 + math.log(2.0))


# ------------------------------------------------------------------ Algorithm 1


@given(models(scales=(0.1, 0.5, 1.0, 2.0)))
@settings(max_examples=150)
def test_algorithm1_matches_plain_reference(model):
    theta, F, h = model
    log_z, mu, Sigma = B.compute_bound(theta, F, h)
    z, rmu, rSigma = ref_algorithm1(theta, F, h)
    assert log_z == pytest.approx(math.log(z), rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(mu, rmu, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(Sigma, rSigma, rtol=1e-9, atol=1e-10 * (1 + np.abs(rSigma).max()))
    assert np.array_equal(Sigma, Sigma.T)


def test_two_points_give_the_classical_curvature():
    """|Omega| = 2: Sigma = tanh(r/2)/(2r) (f2 - f1)(f2 - f1)^T with r = log(alpha2/alpha1)."""
    F = np.array([[1.0, -2.0, 0.5], [0.0, 1.0, 2.0]])
    h = np.array([0.7, 2.0])
    theta = np.array([0.3, -0.4, 0.2])
    log_z, mu, Sigma = B.compute_bound(theta, F, h)
    la = np.log(h) + F @ theta
    r = la[1] - la[0]
    df = F[1] - F[0]
    np.testing.assert_allclose(Sigma, math.tanh(r / 2) / (2 * r) * np.outer(df, df), rtol=1e-13)


@given(models())
@settings(max_examples=200)
def test_bound_majorizes_and_touches_log_partition(model):
    """Theorem 1: log Z(theta) <= bound(theta) everywhere, equality at theta_tilde."""
    theta, F, h = model
    log_z, mu, Sigma = B.compute_bound(theta, F, h)
    assert np.all(np.isfinite(mu)) and np.all(np.isfinite(Sigma)) and math.isfinite(log_z)
    exact = B.log_partition(theta, F, h)
    assert log_z == pytest.approx(exact, rel=1e-12, abs=1e-12)
    assert B.bound_value(theta, theta, log_z, mu, Sigma) == log_z
    assert_majorizes(theta, F, h, log_z, mu, Sigma)
    assert_psd(Sigma, np.abs(Sigma).max())


@given(models())
@settings(max_examples=100)
def test_mu_is_the_gradient_and_sigma_dominates_the_hessian(model):
    """mu = grad log Z(theta_tilde) = E_p[f]; a majorizer touching at theta_tilde with that
    gradient must have Sigma >= Cov_p[f] (the Hessian) in the Loewner order."""
    theta, F, h = model
    log_z, mu, Sigma = B.compute_bound(theta, F, h)
    mean = B.gradient_log_partition(theta, F, h)
    np.testing.assert_allclose(mu, mean, rtol=1e-9, atol=1e-9 * (1 + np.abs(F).max()))
    assert_psd(Sigma - cov_under_p(theta, F, h), np.abs(Sigma).max(), tol=1e-9)


@given(models(scales=(0.1, 1.0, 2.0)))
@settings(max_examples=25)
def test_mu_matches_finite_differences(model):
    theta, F, h = model
    _, mu, _ = B.compute_bound(theta, F, h)
    eps = 1e-5
    E = np.eye(theta.shape[0]) * eps
    fd = (B.log_partition(theta + E, F, h) - B.log_partition(theta - E, F, h)) / (2 * eps)
    np.testing.assert_allclose(mu, fd, atol=1e-6 * (1 + np.abs(F).max() ** 2))


def test_extreme_theta_gives_no_nan():
    """|theta| = 500 on +-1 features, h with zeros, equal alpha (r = 0) and tiny alpha/z."""
    F = bench_bound.fvbm_features(5)
    rng = np.random.default_rng(3)
    h = np.ones(F.shape[0])
    h[rng.random(F.shape[0]) < 0.3] = 0.0
    for theta in (np.full(F.shape[1], 500.0), -500.0 * np.sign(rng.normal(size=F.shape[1])),
                  rng.normal(size=F.shape[1]) * 500.0, np.zeros(F.shape[1])):
        log_z, mu, Sigma = B.compute_bound(theta, F, h)
        assert math.isfinite(log_z) and np.all(np.isfinite(mu)) and np.all(np.isfinite(Sigma))
        assert log_z == pytest.approx(B.log_partition(theta, F, h), rel=1e-13)
        assert_majorizes(theta, F, h, log_z, mu, Sigma)
    # all rows equal: every later row has alpha = z exactly at r = log(1/i) ... and l = 0
    F1 = np.tile([[2.0, -1.0]], (6, 1))
    log_z, mu, Sigma = B.compute_bound(np.array([400.0, -300.0]), F1, np.ones(6))
    assert log_z == pytest.approx(1100.0 + math.log(6)) and np.all(Sigma == 0.0)
    np.testing.assert_array_equal(mu, [2.0, -1.0])


def test_zero_measure_rows_contribute_nothing():
    rng = np.random.default_rng(0)
    F = rng.normal(size=(12, 3))
    h = rng.random(12)
    h[[0, 4, 5, 11]] = 0.0
    keep = h > 0
    theta = rng.normal(size=3)
    full = B.compute_bound(theta, F, h)
    kept = B.compute_bound(theta, F[keep], h[keep])
    assert full[0] == kept[0]
    np.testing.assert_array_equal(full[1], kept[1])
    np.testing.assert_allclose(full[2], kept[2], rtol=1e-14)


def test_row_order_changes_sigma_but_not_z_or_mu():
    rng = np.random.default_rng(1)
    F = rng.normal(size=(7, 3))
    h = rng.random(7) + 0.1
    theta = rng.normal(size=3)
    a = B.compute_bound(theta, F, h)
    perm = np.array([6, 2, 0, 5, 1, 3, 4])
    b = B.compute_bound(theta, F[perm], h[perm])
    assert a[0] == pytest.approx(b[0], rel=1e-14)
    np.testing.assert_allclose(a[1], b[1], rtol=1e-12, atol=1e-14)
    assert np.abs(a[2] - b[2]).max() > 1e-3 * np.abs(a[2]).max()


@given(models(max_n=40), st.integers(0, 2**32 - 1))
@settings(max_examples=100)
def test_any_row_order_majorizes(model, seed):
    theta, F, h = model
    perm = np.random.default_rng(seed).permutation(F.shape[0])
    log_z, mu, Sigma = B.compute_bound(theta, F[perm], h[perm])
    assert_majorizes(theta, F, h, log_z, mu, Sigma, seed=seed)


def test_bound_value_many_points_and_the_paper_form_on_z():
    rng = np.random.default_rng(2)
    F, h = rng.normal(size=(9, 4)), rng.random(9)
    tt = rng.normal(size=4)
    log_z, mu, Sigma = B.compute_bound(tt, F, h)
    T = rng.normal(size=(5, 4))
    many = B.bound_value(T, tt, log_z, mu, Sigma)
    assert many.shape == (5,)
    for t, v in zip(T, many):
        dt = t - tt
        assert v == pytest.approx(B.bound_value(t, tt, log_z, mu, Sigma), rel=1e-14)
        # the paper's statement on Z
        assert math.exp(v) == pytest.approx(math.exp(log_z) * math.exp(0.5 * dt @ Sigma @ dt + dt @ mu), rel=1e-12)
    assert B.quadratic_bound is B.bound_value
    np.testing.assert_allclose(B.log_partition(T, F, h), [ref_log_z(t, F, h) for t in T], rtol=1e-13)
    np.testing.assert_allclose(B.gradient_log_partition(T, F, h)[2], B.gradient_log_partition(T[2], F, h))


def test_taylor_quadratic_is_the_hessian_expansion_and_not_a_bound():
    F = np.array([[1.0], [-1.0]])  # log Z = log 2 cosh(theta)
    tt = np.array([3.0])
    log_z, mean, cov = B.taylor_quadratic(tt, F)
    assert log_z == pytest.approx(math.log(2 * math.cosh(3.0)))
    assert mean[0] == pytest.approx(math.tanh(3.0))
    assert cov[0, 0] == pytest.approx(1.0 / math.cosh(3.0) ** 2)
    far = np.array([[-3.0]])
    assert B.bound_value(far, tt, log_z, mean, cov)[0] < B.log_partition(far, F)[0] - 1.0
    b = B.compute_bound(tt, F, np.ones(2))
    assert B.bound_value(far, tt, *b)[0] >= B.log_partition(far, F)[0]
    # on a random model: value, gradient and Hessian by finite differences
    rng = np.random.default_rng(4)
    F, h, tt = rng.normal(size=(10, 3)), rng.random(10), rng.normal(size=3)
    log_z, mean, cov = B.taylor_quadratic(tt, F, h)
    eps = 1e-4
    E = np.eye(3) * eps
    hess = np.array([(B.gradient_log_partition(tt + e, F, h) - B.gradient_log_partition(tt - e, F, h)) / (2 * eps) for e in E])
    np.testing.assert_allclose(cov, hess, atol=1e-7)
    np.testing.assert_allclose(mean, B.gradient_log_partition(tt, F, h), rtol=1e-12)


@pytest.mark.parametrize("call, match", [
    (lambda: B.compute_bound(np.zeros(2), np.zeros((3, 3)), None), "'theta' parameter of compute_bound"),
    (lambda: B.compute_bound([np.nan, 0.0], np.zeros((3, 2)), None), "'theta'.*finite"),
    (lambda: B.compute_bound(np.zeros(2), np.zeros(3), None), "'F' parameter"),
    (lambda: B.compute_bound(np.zeros(2), np.zeros((3, 2)), [1.0, -1.0, 1.0]), "'h' parameter.*>= 0"),
    (lambda: B.compute_bound(np.zeros(2), np.zeros((3, 2)), np.zeros(3)), "'h'.*at least one"),
    (lambda: B.compute_bound(np.zeros(2), np.zeros((3, 2)), np.ones(4)), "'h'.*shape \\(3,\\)"),
    (lambda: B.compute_bound(np.full(1, 1e300), np.full((2, 1), 1e300), None), "'theta'.*overflows"),
    (lambda: B.bound_value(np.zeros(3), np.zeros(2), 0.0, np.zeros(2), np.eye(2)), "'theta' parameter of bound_value"),
    (lambda: B.bound_value(np.zeros(2), np.zeros(2), 0.0, np.zeros(2), np.eye(3)), "'Sigma'"),
    (lambda: B.low_rank_bound(np.zeros(2), np.eye(2), None, rank=3), "'rank'.*\\[1, 2\\]"),
    (lambda: B.low_rank_bound(np.zeros(2), np.eye(2), None, rank=0), "'rank'"),
    (lambda: B.chain_features(1, 2), "'n_nodes'"),
    (lambda: B.chain_features(30, 3), "enumerate_omega=False"),
    (lambda: B.junction_tree_bound(np.zeros((3, 2)), np.zeros((3, 2, 2))), "'theta_edges'"),
    (lambda: B.junction_tree_bound(np.zeros((3, 2)), np.zeros((2, 2, 2)), h_nodes=-np.ones((3, 2))), "'h_nodes'"),
    (lambda: B.junction_tree_bound(np.zeros((2, 2)), np.zeros((1, 2, 2)), h_edges=np.zeros((1, 2, 2))), "zero on every"),
    (lambda: B.chain_bound(np.zeros(2), np.zeros((1, 2, 3, 2))), "'clique_features'"),
])
def test_bad_input_raises_value_error_naming_the_parameter(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ------------------------------------------------------------------ Algorithm 3


@st.composite
def chains(draw):
    n = draw(st.integers(2, 5))
    k = draw(st.integers(2, 3 if n > 3 else 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = draw(st.sampled_from([0.1, 1.0, 3.0, 50.0]))
    tn, te = rng.normal(size=(n, k)) * scale, rng.normal(size=(n - 1, k, k)) * scale
    hn = he = None
    if draw(st.booleans()):
        hn = rng.random((n, k)) * (rng.random((n, k)) > 0.2)
        he = rng.random((n - 1, k, k)) * (rng.random((n - 1, k, k)) > 0.2)
        hn[:, 0] = he[:, 0, 0] = 1.0  # y = 0 keeps Z > 0
    return tn, te, hn, he


def test_chain_features_are_the_indicator_model():
    model = B.chain_features(3, 2)
    tn = np.arange(6.0).reshape(3, 2)
    te = np.arange(8.0).reshape(2, 2, 2) * 10
    theta = model.pack(tn, te)
    for y, f in zip(model.configurations, model.F):
        assert theta @ f == tn[0, y[0]] + tn[1, y[1]] + tn[2, y[2]] + te[0, y[0], y[1]] + te[1, y[1], y[2]]
        np.testing.assert_array_equal(model.clique_features[0, y[0], y[1]] + model.clique_features[1, y[1], y[2]], f)
    back = model.unpack(theta)
    np.testing.assert_array_equal(back[0], tn)
    np.testing.assert_array_equal(back[1], te)  # the edge half too (issue 27)
    assert model.F.shape == (8, model.d) and model.d == 3 * 2 + 2 * 4
    assert B.chain_features(25, 2, enumerate_omega=False).F is None


@given(chains())
@settings(max_examples=100)
def test_junction_tree_recovers_z_and_mu_of_algorithm1_and_majorizes(chain):
    tn, te, hn, he = chain
    n, k = tn.shape
    model = B.chain_features(n, k)
    theta = model.pack(tn, te)
    h = model.h(hn, he)
    log_z, mu, Sigma = B.junction_tree_bound(tn, te, hn, he)
    a_log_z, a_mu, a_Sigma = B.compute_bound(theta, model.F, h)
    assert log_z == pytest.approx(a_log_z, rel=1e-12, abs=1e-12)
    assert log_z == pytest.approx(B.log_partition(theta, model.F, h), rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(mu, a_mu, atol=1e-10)
    assert np.all(np.isfinite(Sigma)) and np.allclose(Sigma, Sigma.T, rtol=0, atol=1e-12 * (1 + np.abs(Sigma).max()))
    assert_majorizes(theta, model.F, h, log_z, mu, Sigma)
    assert_psd(Sigma - cov_under_p(theta, model.F, h), np.abs(Sigma).max(), tol=1e-9)
    if n == 2:  # one clique: Algorithm 1 over Omega in lexicographic order
        np.testing.assert_allclose(Sigma, a_Sigma, rtol=1e-12, atol=1e-14)


@given(st.integers(2, 5), st.integers(2, 3), st.integers(1, 5), st.integers(0, 2**32 - 1), st.booleans())
@settings(max_examples=80)
def test_chain_bound_with_tied_features_matches_the_plain_reference(n, k, d, seed, zeros):
    """Generic clique features (parameters shared across the chain) and clique measures."""
    rng = np.random.default_rng(seed)
    Fc = rng.integers(-2, 3, size=(n - 1, k, k, d)).astype(float)
    hc = rng.random((n - 1, k, k)) + 0.1
    if zeros:
        hc[rng.random(hc.shape) < 0.3] = 0.0
        hc[:, 0, 0] = 1.0
    theta = rng.normal(size=d)
    log_z, mu, Sigma = B.chain_bound(theta, Fc, hc)
    z, rmu, rSigma = ref_chain_jt(theta, Fc, hc)
    assert log_z == pytest.approx(math.log(z), rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(mu, rmu, atol=1e-10)
    np.testing.assert_allclose(Sigma, rSigma, rtol=1e-10, atol=1e-10)
    Y = np.array(list(itertools.product(range(k), repeat=n)))
    F = sum(Fc[c, Y[:, c], Y[:, c + 1]] for c in range(n - 1))
    h = np.prod([hc[c, Y[:, c], Y[:, c + 1]] for c in range(n - 1)], axis=0)
    np.testing.assert_allclose(mu, B.gradient_log_partition(theta, F, h), atol=1e-10)
    assert_majorizes(theta, F, h, log_z, mu, Sigma, seed=seed)


def test_junction_tree_sigma_differs_from_algorithm1_in_both_directions():
    """§5 says Algorithm 3 'computes the same bound parameters'; true for z and mu, not Sigma:
    for n >= 3 the JT curvature is neither above nor below Algorithm 1's (lexicographic)."""
    model = B.chain_features(3, 2)
    theta = np.random.default_rng(0).normal(size=model.d)
    _, _, jt = B.junction_tree_bound(*model.unpack(theta))
    _, _, a1 = B.compute_bound(theta, model.F, np.ones(8))
    eig = np.linalg.eigvalsh(jt - a1)
    assert eig.min() < -1e-3 and eig.max() > 1e-3


# ------------------------------------------------------------------ Algorithm 4


@given(models(max_n=48, scales=(0.1, 1.0, 3.0, 50.0)))
@settings(max_examples=80)
def test_low_rank_bound_majorizes_for_every_rank(model):
    theta, F, h = model
    d = F.shape[1]
    log_z, mu, Sigma = B.compute_bound(theta, F, h)
    for k in range(1, d + 1):
        lr = B.low_rank_bound(theta, F, h, rank=k)
        assert lr.log_z == log_z
        np.testing.assert_allclose(lr.mu, mu, rtol=1e-12, atol=1e-12)
        assert lr.V.shape == (k, d) and lr.S.shape == (k,) and lr.D.shape == (d,)
        assert np.all(lr.S >= 0) and np.all(lr.D >= 0)
        np.testing.assert_allclose(lr.V @ lr.V.T, np.eye(k), atol=1e-9)
        dense = lr.sigma()
        scale = np.abs(dense).max()
        assert_psd(dense - Sigma, scale, tol=1e-9)  # Sigma_LR >= Sigma (same row order)
        assert_majorizes(theta, F, h, log_z, mu, dense, value=lambda T: lr.value(T, theta))
        if k == d:
            np.testing.assert_allclose(dense, Sigma, atol=1e-9 * (1 + scale))


def test_printed_algorithm4_fails_to_majorize():
    """The printed Algorithm 4 (and the supplement's expansion of Sigma + r r^T) drops the
    cross terms between r's projection on V and its residual.  Two points f = +-(1, -1) at
    theta_tilde = 0 with k = 1: the printed update gives Sigma = I, but log Z = log 2 cosh(a - b)
    has curvature 2 along (1, -1); the kept-cross-terms version majorizes."""
    F = np.array([[-1.0, 1.0], [1.0, -1.0]])
    h = np.ones(2)
    tt = np.zeros(2)
    log_z, mu, Sigma = printed_algorithm4(tt, F, h, 1)
    np.testing.assert_allclose(Sigma, np.eye(2), atol=1e-15)
    t = np.array([[0.3, -0.3]])
    assert B.bound_value(t, tt, log_z, mu, Sigma)[0] < B.log_partition(t, F, h)[0] - 0.05
    lr = B.low_rank_bound(tt, F, h, rank=1)
    assert lr.value(t, tt)[0] >= B.log_partition(t, F, h)[0]
    assert_psd(lr.sigma() - np.array([[1.0, -1.0], [-1.0, 1.0]]))


def test_woodbury_solve_matches_dense_solve():
    rng = np.random.default_rng(5)
    F, h = rng.normal(size=(40, 6)), rng.random(40)
    theta = rng.normal(size=6)
    for k in (1, 3, 6):
        lr = B.low_rank_bound(theta, F, h, rank=k)
        b = rng.normal(size=(6, 2))
        for lam in (1e-3, 1.0):
            dense = lr.sigma() + lam * np.eye(6)
            np.testing.assert_allclose(lr.solve(b, lam), np.linalg.solve(dense, b), rtol=1e-8, atol=1e-10)
            np.testing.assert_allclose(lr.solve(b[:, 0], lam), np.linalg.solve(dense, b[:, 0]), rtol=1e-8, atol=1e-10)
    for k in (6, 1):  # D ~ 0 (rank d: only rounding residuals absorbed); d = 1: D = 0 exactly
        lr = B.low_rank_bound(theta[:k], F[:, :k], h, rank=k)
        with pytest.raises(ValueError, match="'lam'"):
            lr.solve(np.ones(k), 0.0)


# ------------------------------------------------------------------ bench


def test_bench_references_are_algorithm1():
    F = bench_bound.fvbm_features(5)
    assert F.shape == (32, 15)
    rng = np.random.default_rng(6)
    h = np.ones(32)
    h[rng.random(32) < 0.3] = 0.0
    h[3] = 1.0
    theta = rng.normal(size=15) * 0.3
    a = B.compute_bound(theta, F, h)
    for ref in (bench_bound.numpy_rowwise, lambda t, F, h: bench_bound.numpy_vectorised(t, F, h, chunk=7)):
        b = ref(theta, F, h)
        assert b[0] == pytest.approx(a[0], rel=1e-13)
        np.testing.assert_allclose(b[1], a[1], atol=1e-12)
        np.testing.assert_allclose(b[2], a[2], rtol=1e-11, atol=1e-12)


def test_bench_run_reports_times_ratios_and_agreement():
    result = bench_bound.run(n_bits=6, repeats=1, numpy_rows=16)
    assert result["omega"] == 64 and result["d"] == 21
    for key in ("numba_seconds", "numpy_rowwise_seconds", "numpy_vectorised_seconds", "ratio_rowwise", "ratio_vectorised"):
        assert result[key] > 0
    assert result["max_abs_diff_sigma_rowwise"] < 1e-10 and result["max_abs_diff_sigma_vectorised"] < 1e-10
    assert result["log_z_error"] < 1e-12
    assert "NumPy row by row" in bench_bound.format_table(result)
