"""Algorithm 4 (LowRankBound) against a plain NumPy reference (issue 27: the low-rank kernels,
``bound.low_rank_bound`` / ``absorb_rank_one`` and ``majorize.sum_low_rank_bounds`` /
``low_rank_class_bounds``, were compared only with each other).

The reference follows the kernel's documented steps with NumPy's own linear algebra: Algorithm 1's
recursion for log z and mu, each rank-one term r = sqrt(c) (f - mu) split on span(V) as
r = V^T p + g, the (k+1)-dimensional system [[diag(s) + p p^T, |g| p], [|g| p^T, |g|^2]]
diagonalised and its smallest eigenpair absorbed into D by lam u u^T <= lam |u|_1 diag(|u|).
Eigenvectors are defined up to sign and, for repeated eigenvalues, up to rotation, so the
curvature is compared as the dense V^T diag(s) V and D, not as V.
"""

import numpy as np
import pytest

from boltzlab.engine import bound as B
from boltzlab.engine.kernels import majorize as KM


def coefficient(rho):
    """Algorithm 1's c = tanh(rho / 2) / (2 rho), c(0) = 1/4."""
    return 0.25 if rho == 0 else np.tanh(rho / 2) / (2 * rho)


#: which branch of ref_absorb each term took ("in span" or "new direction"), for the tests
BRANCHES = []


def ref_absorb(r, V, s, D):
    """r r^T added to V^T diag(s) V + diag(D), the rank kept; returns (V, s, D)."""
    k = V.shape[0]
    p = V @ r
    g = r - V.T @ p
    gn, pn = np.linalg.norm(g), np.linalg.norm(p)
    BRANCHES.append("in span" if gn <= 1e-8 * np.linalg.norm(r) else "new direction")
    if gn <= 1e-8 * np.linalg.norm(r):  # r (almost) in span(V): (1 + e) p-part + (1 + 1/e) g-part
        if gn > 0:
            e = gn / pn
            D = D + (1 + 1 / e) * np.abs(g).sum() * np.abs(g)
            p = p * np.sqrt(1 + e)
        lam, Q = np.linalg.eigh(np.diag(s) + np.outer(p, p))
        return Q.T @ V, np.maximum(lam, 0), D
    M = np.zeros((k + 1, k + 1))
    M[:k, :k] = np.diag(s) + np.outer(p, p)
    M[:k, k] = M[k, :k] = gn * p
    M[k, k] = gn * gn
    lam, Q = np.linalg.eigh(M)
    rot = Q.T @ np.vstack([V, g / gn])
    if lam[0] > 0:
        D = D + lam[0] * np.abs(rot[0]).sum() * np.abs(rot[0])
    return rot[1:], np.maximum(lam[1:], 0), D


def ref_low_rank(F, log_alpha, rank, state=None):
    """Algorithm 4 on the rows of one partition function; ``state`` (V, s, D) carries the
    curvature on from earlier examples (the summed bound).  Returns (log z, mu, (V, s, D))."""
    d = F.shape[1]
    V, s, D = state if state is not None else (np.eye(rank, d), np.zeros(rank), np.zeros(d))
    log_z, mu = -np.inf, np.zeros(d)
    for f, la in zip(F, log_alpha):
        if la == -np.inf:
            continue
        if log_z == -np.inf:
            log_z, mu = la, f.copy()
            continue
        rho = la - log_z
        r = np.sqrt(coefficient(rho)) * (f - mu)
        mu = mu + (f - mu) / (1 + np.exp(-rho))
        log_z = np.logaddexp(log_z, la)
        if r @ r > 0:
            V, s, D = ref_absorb(r, V, s, D)
    return log_z, mu, (V, s, D)


def dense(V, s):
    return (V.T * s) @ V


def assert_same_curvature(V, s, D, ref):
    rV, rs, rD = ref
    scale = max(1.0, np.abs(dense(rV, rs)).max(), np.abs(rD).max())
    np.testing.assert_allclose(dense(V, s), dense(rV, rs), rtol=0, atol=1e-10 * scale)
    np.testing.assert_allclose(D, rD, rtol=0, atol=1e-10 * scale)
    np.testing.assert_allclose(V @ V.T, np.eye(len(V)), atol=1e-10)  # orthonormal rows


def problem(seed, n=12, d=6, zeros=True):
    rng = np.random.default_rng(seed)
    F = rng.normal(size=(n, d))
    theta = rng.normal(size=d)
    h = rng.random(n) + 0.1
    if zeros:
        h[[1, 5]] = 0.0  # states outside the support: skipped
    return theta, F, h


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("rank", [1, 2, 4])
def test_low_rank_bound_matches_numpy(seed, rank):
    theta, F, h = problem(seed)
    lr = B.low_rank_bound(theta, F, h, rank=rank)
    with np.errstate(divide="ignore"):
        log_alpha = F @ theta + np.log(h)
    log_z, mu, ref = ref_low_rank(F, log_alpha, rank)
    assert lr.log_z == pytest.approx(log_z, rel=1e-12)
    np.testing.assert_allclose(lr.mu, mu, rtol=1e-12, atol=1e-12)
    assert_same_curvature(lr.V, lr.S, lr.D, ref)
    if rank < F.shape[1]:
        assert lr.D.max() > 0  # something was absorbed: the comparison covers that step


def test_low_rank_bound_with_a_term_in_span_matches_numpy():
    """A term inside span(V) takes the documented (1 + e), (1 + 1/e) split."""
    rng = np.random.default_rng(5)
    base = rng.normal(size=(2, 5))
    F = np.vstack([base, base[0] + base[1], 2 * base[0] - base[1]])  # rows 3, 4 in the span of the first terms
    theta = rng.normal(size=5)
    lr = B.low_rank_bound(theta, F, None, rank=2)
    BRANCHES.clear()
    log_z, mu, ref = ref_low_rank(F, F @ theta, 2)
    assert BRANCHES == ["new direction", "new direction", "in span"]
    assert lr.log_z == pytest.approx(log_z, rel=1e-12)
    np.testing.assert_allclose(lr.mu, mu, rtol=1e-12, atol=1e-12)
    assert_same_curvature(lr.V, lr.S, lr.D, ref)


@pytest.mark.parametrize("rank", [1, 3])
def test_sum_low_rank_bounds_matches_numpy(rank):
    rng = np.random.default_rng(7)
    sizes = [4, 1, 6, 3]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    F = rng.normal(size=(offsets[-1], 5))
    theta = rng.normal(size=5)
    log_alpha = F @ theta
    log_alpha[2] = -np.inf  # a state outside the support
    got = KM.sum_low_rank_bounds(F, log_alpha, offsets, rank)
    state, mu_sum, log_zs = None, np.zeros(5), []
    for e in range(len(sizes)):
        rows = slice(offsets[e], offsets[e + 1])
        log_z, mu, state = ref_low_rank(F[rows], log_alpha[rows], rank, state)
        log_zs.append(log_z)
        mu_sum += mu
    np.testing.assert_allclose(got[5], log_zs, rtol=1e-12)
    assert got[0] == pytest.approx(sum(log_zs), rel=1e-12)
    np.testing.assert_allclose(got[1], mu_sum, rtol=1e-12, atol=1e-12)
    assert_same_curvature(got[2], got[3], got[4], state)


@pytest.mark.parametrize("rank", [1, 4])
def test_low_rank_class_bounds_match_numpy_on_kronecker_rows(rank):
    """f(x, y) = e_y (x) x in the class-major layout, rows formed explicitly here."""
    rng = np.random.default_rng(9)
    t, p, K = 5, 3, 3
    X = np.hstack([rng.normal(size=(t, p - 1)), np.ones((t, 1))])
    theta = rng.normal(size=K * p)
    log_alpha = X @ theta.reshape(K, p).T  # (t, K): theta_y^T x
    got = KM.low_rank_class_bounds(X, np.ascontiguousarray(log_alpha), rank)
    state, mu_sum, log_zs = None, np.zeros(K * p), []
    for e in range(t):
        F = np.kron(np.eye(K), X[e])  # row y: e_y (x) x
        log_z, mu, state = ref_low_rank(F, F @ theta, rank, state)
        log_zs.append(log_z)
        mu_sum += mu
    np.testing.assert_allclose(got[5], log_zs, rtol=1e-12)
    np.testing.assert_allclose(got[1], mu_sum, rtol=1e-12, atol=1e-12)
    assert_same_curvature(got[2], got[3], got[4], state)
