"""Numba kernels of the quadratic partition-function bound (Jebara & Choromanska 2012).

Imported as ``boltzlab.engine.kernels.bound``; numba caches the compiled functions on disk
(beside this file, or under ``NUMBA_CACHE_DIR``) and reuses them while this file is unchanged.

Conventions (the paper's symbols).  A log-linear model over an enumerable Omega has

    Z(theta) = sum_y h(y) exp(theta^T f(y)),   alpha(y) = h(y) exp(theta_tilde^T f(y)),

and Algorithm 1 (ComputeBound) visits the rows y_1, ..., y_n of Omega in order, keeping
(z, mu, Sigma) of the bound on the first i terms:

    c   = tanh(1/2 log(alpha/z)) / (2 log(alpha/z))        (footnote 3: c -> 1/4 as
    l   = f(y) - mu                                          alpha/z -> 1, c -> 0 as
    Sigma += c l l^T;  mu += alpha/(z + alpha) l;  z += alpha    alpha/z -> 0 or infinity)

Everything is carried in log space: the kernels receive log alpha (computed by the caller as
log h + F theta_tilde, -inf where h = 0) and keep log z, so r = log alpha - log z is always
finite once the first row with h > 0 has been seen; c(r) = tanh(r/2)/(2r) is even, in
(0, 1/4], and needs no exponential; alpha/(z + alpha) = sigmoid(r).  Rows with alpha = 0
contribute nothing (c = 0, weight 0) and are skipped; the first row with alpha > 0 meets
z = 0+, so c = 0 and mu jumps to its feature vector.

Speed: Sigma = sum_i c_i l_i l_i^T is a sum of rank-one terms whose vectors l_i depend on
the running mean only, so the sequential pass (O(n d)) writes sqrt(c_i) l_i into a block
of rows and every ``block`` rows one BLAS product Sigma += B^T B adds them.  This is the
same sum as the row-by-row update, reassociated (2^16 x 136: about 4x faster than the
upper-triangle rank-one loop on this machine).

All kernels are ``@njit(cache=True, nogil=True)``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .common import logaddexp, sigmoid

#: |r| below which c(r) = tanh(r/2)/(2r) is evaluated by its series 1/4 - r^2/48 + r^4/480.
SERIES_R = 1e-4
#: Rows per BLAS block in Algorithm 1.
BLOCK = 512
#: Low-rank bound: a residual smaller than this times |r| is treated as lying in span(V).
RESIDUAL_RTOL = 1e-8


@njit(cache=True, nogil=True)
def bound_coefficient(r):
    """c(r) = tanh(r/2) / (2 r) with r = log(alpha/z) (Algorithm 1, footnote 3).

    c(0) = 1/4 and c(+-inf) = 0 (the limits z -> 0+ and alpha -> 0); c is even and decreasing
    in |r|, so it never overflows: tanh saturates at 1 and c ~ 1/(2|r|) for large |r|.
    """
    if math.isnan(r):
        return math.nan
    if math.isinf(r):
        return 0.0
    if abs(r) < SERIES_R:
        r2 = r * r
        return 0.25 - r2 / 48.0 + r2 * r2 / 480.0
    return math.tanh(0.5 * r) / (2.0 * r)


@njit(cache=True, nogil=True)
def _mirror_upper(S):
    d = S.shape[0]
    for a in range(d):
        for b in range(a):
            S[a, b] = S[b, a]


@njit(cache=True, nogil=True, inline="always")
def add_term(f, la, log_z, mu, out):
    """One term (f, log alpha) of Algorithm 1's pass, the step every variant shares: with
    l = f - mu, ``out`` <- sqrt(c) l, mu += sigmoid(r) l, and log z <- logaddexp(log z, la).

    Returns (log z, |out|^2, added): alpha = 0 (``la`` = -inf) changes nothing; the first term
    with alpha > 0 meets z = 0+ (c = 0) and sets mu = f; neither writes ``out`` (added False).
    Inlined, so each caller compiles to the loop it had (the same operations in the same
    order: the results are bit for bit those of the copies this replaced).
    """
    if la == -np.inf:
        return log_z, 0.0, False  # alpha = 0: c = 0, weight 0, z unchanged
    if log_z == -np.inf:  # z = 0+: c = 0 (footnote 3), mu += 1 * (f - 0)
        for j in range(mu.shape[0]):
            mu[j] = f[j]
        return la, 0.0, False
    r = la - log_z
    sc = math.sqrt(bound_coefficient(r))
    w = sigmoid(r)
    rn2 = 0.0
    for j in range(mu.shape[0]):
        lj = f[j] - mu[j]
        out[j] = sc * lj
        rn2 += out[j] * out[j]
        mu[j] += w * lj
    return logaddexp(log_z, la), rn2, True


@njit(cache=True, nogil=True)
def compute_bound(F, log_alpha, block):
    """Algorithm 1 (ComputeBound) over the rows of F in order, in log space.

    F : (n, d) feature rows f(y); log_alpha : (n,) log h(y) + theta_tilde^T f(y), -inf for
    h(y) = 0.  Returns (log z, mu, Sigma); log z = -inf (and mu = 0, Sigma = 0) when every
    alpha is 0.  Sigma is exactly symmetric.
    """
    n, d = F.shape
    mu = np.zeros(d)
    Sigma = np.zeros((d, d))
    B = np.empty((block, d))
    log_z = -np.inf
    nb = 0
    for i in range(n):
        log_z, _, added = add_term(F[i], log_alpha[i], log_z, mu, B[nb])
        if not added:
            continue
        nb += 1
        if nb == block:
            Sigma += np.dot(B.T, B)
            nb = 0
    if nb > 0:
        Bb = B[:nb]
        Sigma += np.dot(Bb.T, Bb)
    _mirror_upper(Sigma)
    return log_z, mu, Sigma


@njit(cache=True, nogil=True)
def _jt_add(log_z, mu, S, la, f, mu_b, S_b, l):
    """One configuration w of Algorithm 3's inner loop; returns the new log z_{c|u}."""
    if la == -np.inf:
        return log_z
    d = mu.shape[0]
    for j in range(d):
        l[j] = f[j] - mu[j] + mu_b[j]
    S += S_b
    if log_z == -np.inf:
        coef, w = 0.0, 1.0
    else:
        r = la - log_z
        coef, w = bound_coefficient(r), sigmoid(r)
    if coef > 0.0:
        for a in range(d):
            ca = coef * l[a]
            for b in range(d):
                S[a, b] += ca * l[b]
    for j in range(d):
        mu[j] += w * l[j]
    return logaddexp(log_z, la)


@njit(cache=True, nogil=True)
def junction_tree_chain(Fc, log_alpha_c):
    """Algorithm 3 (JunctionTreeBound) on a chain's junction tree.

    Cliques c = 0, ..., m-1 are (y_c, y_{c+1}); clique c's parent is c + 1 and the root is
    m - 1, so 0, 1, ..., m-1 is a reverse-topological order.  Fc : (m, k, k, d) the clique
    features f_c(y_c, y_{c+1}); log_alpha_c : (m, k, k) log h_c + theta_tilde^T f_c (-inf
    where h_c = 0).  For c < m - 1, Y_both = {y_{c+1}} (u) and Y_solo = {y_c} (v); the root
    has Y_both = {} and enumerates w = (y_{m-1}, y_m) with y_m fastest.  The only child of
    clique c is b = c - 1, indexed by w's y_c:

        alpha_w = h_c(w) e^{theta^T f_c(w)} z_{b|y_c}
        l_w = f_c(w) - mu_{c|u} + mu_{b|y_c}
        Sigma_{c|u} += Sigma_{b|y_c} + c(log alpha_w - log z_{c|u}) l_w l_w^T
        mu_{c|u} += alpha_w / (z_{c|u} + alpha_w) l_w;  z_{c|u} += alpha_w

    The leaf clique has no child: z_b = 1, mu_b = 0, Sigma_b = 0.  Configurations with
    alpha_w = 0 contribute no term to Z and are skipped (the printed algorithm would still
    add Sigma_{b|w}; leaving it out keeps the bound valid and tighter).
    Returns (log z, mu, Sigma) of the root.
    """
    m, k, _, d = Fc.shape
    # the child's messages indexed by the shared variable; none for the leaf
    prev_lz = np.zeros(k)
    prev_mu = np.zeros((k, d))
    prev_S = np.zeros((k, d, d))
    cur_lz = np.empty(k)
    cur_mu = np.empty((k, d))
    cur_S = np.empty((k, d, d))
    l = np.empty(d)
    for c in range(m - 1):
        for u in range(k):
            cur_mu[u] = 0.0
            cur_S[u] = 0.0
            lz = -np.inf
            for v in range(k):
                lz = _jt_add(lz, cur_mu[u], cur_S[u], log_alpha_c[c, v, u] + prev_lz[v], Fc[c, v, u],
                             prev_mu[v], prev_S[v], l)
            cur_lz[u] = lz
        prev_lz, cur_lz = cur_lz, prev_lz
        prev_mu, cur_mu = cur_mu, prev_mu
        prev_S, cur_S = cur_S, prev_S
    c = m - 1
    mu = np.zeros(d)
    S = np.zeros((d, d))
    lz = -np.inf
    for v in range(k):
        for u in range(k):
            lz = _jt_add(lz, mu, S, log_alpha_c[c, v, u] + prev_lz[v], Fc[c, v, u], prev_mu[v], prev_S[v], l)
    return lz, mu, S


@njit(cache=True, nogil=True)
def absorb_rank_one(r, rn2, V, s, D, g, Va, M):
    """Add r r^T to V^T diag(s) V + diag(D), keeping rank k (Algorithm 4's inner step).

    r is the scaled residual row (rn2 = |r|^2); the projection on span(V), the exact
    (k+1)-dimensional eigendecomposition with the cross terms kept, and the smallest
    eigenpair (lam, u) absorbed into D by lam u u^T <= lam |u|_1 diag(|u|).  g, Va, M are
    work arrays.  Returns the new V (s and D are updated in place).
    """
    k, d = V.shape
    p = np.dot(V, r)
    g[:] = r - np.dot(V.T, p)
    p2 = np.dot(V, g)
    p += p2
    g -= np.dot(V.T, p2)
    gn = math.sqrt(np.dot(g, g))
    pn = math.sqrt(np.dot(p, p))
    if gn <= RESIDUAL_RTOL * math.sqrt(rn2):
        if gn > 0.0:
            e = gn / pn if pn > 0.0 else 1.0
            g1 = 0.0
            for j in range(d):
                g1 += abs(g[j])
            scale = (1.0 + 1.0 / e) * g1
            for j in range(d):
                D[j] += scale * abs(g[j])
            p *= math.sqrt(1.0 + e)
        Mk = np.outer(p, p)
        for a in range(k):
            Mk[a, a] += s[a]
        lam, Q = np.linalg.eigh(Mk)
        V = np.ascontiguousarray(np.dot(Q.T, V))
        for a in range(k):
            s[a] = max(lam[a], 0.0)
        return V
    M[:, :] = 0.0
    for a in range(k):
        M[a, a] = s[a]
        for b in range(k):
            M[a, b] += p[a] * p[b]
        M[a, k] = gn * p[a]
        M[k, a] = gn * p[a]
    M[k, k] = gn * gn
    Va[:k] = V
    for j in range(d):
        Va[k, j] = g[j] / gn
    lam, Q = np.linalg.eigh(M)  # ascending
    rot = np.dot(Q.T, Va)
    smallest = max(lam[0], 0.0)
    if smallest > 0.0:
        u1 = 0.0
        for j in range(d):
            u1 += abs(rot[0, j])
        for j in range(d):
            D[j] += smallest * u1 * abs(rot[0, j])
    V = np.ascontiguousarray(rot[1:])
    for a in range(k):
        s[a] = max(lam[a + 1], 0.0)
    return V


@njit(cache=True, nogil=True)
def low_rank_start(k, d):
    """Algorithm 4's state before its first term: V (k, d) the first k unit rows, s (k,) and
    D (d,) zero; and its scratch: r, g (d,), Va (k + 1, d), M (k + 1, k + 1) for
    :func:`absorb_rank_one`.  Returns (V, s, D, r, g, Va, M)."""
    V = np.zeros((k, d))
    for i in range(k):
        V[i, i] = 1.0
    return V, np.zeros(k), np.zeros(d), np.empty(d), np.empty(d), np.empty((k + 1, d)), np.zeros((k + 1, k + 1))


@njit(cache=True, nogil=True)
def low_rank_bound(F, log_alpha, rank):
    """Algorithm 4 (LowRankBound) for one partition function, t = 1 and lambda = 0.

    Keeps Sigma_i <= V^T diag(s) V + diag(D) (Loewner order) where V (rank, d) has
    orthonormal rows, s >= 0 and D >= 0.  Each rank-one term r r^T, r = sqrt(c) (f - mu),
    is split as r = V^T p + g with p = V r and g orthogonal to the rows of V; the exact
    rank-(k+1) system in the basis [V; g/|g|],

        M = [[diag(s) + p p^T, |g| p], [|g| p^T, |g|^2]],

    is diagonalised and its smallest eigenpair (lam, u) is absorbed into the diagonal with
    lam u u^T <= lam |u|_1 diag(|u|) (the paper's Lemma 3 / Inequality 3).  (The printed
    pseudo-code adds p p^T to S and |g|^2 as a separate eigenvalue, dropping the cross terms
    |g| p; the supplement's expansion drops them too, so that version can fail to
    majorize; see the tests.)  When |g| <= RESIDUAL_RTOL |r|, r r^T <= (1 + e) V^T p p^T V
    + (1 + 1/e) g g^T with e = |g|/|p| keeps the bound without a new direction.

    Returns (log z, mu, V, s, D).
    """
    n, d = F.shape
    k = rank
    V, s, D, r, g, Va, M = low_rank_start(k, d)
    mu = np.zeros(d)
    log_z = -np.inf
    for i in range(n):
        log_z, rn2, added = add_term(F[i], log_alpha[i], log_z, mu, r)
        if not added or rn2 == 0.0:
            continue
        V = absorb_rank_one(r, rn2, V, s, D, g, Va, M)
    return log_z, mu, V, s, D
