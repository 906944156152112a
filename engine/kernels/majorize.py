"""Numba kernels for bound majorization over many training pairs (Jebara & Choromanska 2012).

A CRF objective (eq. 1) has one partition function Z_{x_j} per training pair j, so the
bound of Algorithm 2 is the sum of t per-example bounds of Algorithm 1 (or Algorithm 3 on a
chain).  One Python-level call per example would return to the interpreter t times per
iteration; these kernels loop over the examples inside numba and return the sums

    sum_j log z_j,   sum_j mu_j,   Sigma = sum_j Sigma_j

(or, for multinomial logistic regression, the small per-example factors from which the sum is
assembled by BLAS).  The per-example recursions are those of :mod:`boltzlab.engine.kernels.bound`
(log space, footnote 3's limits through :func:`bound_coefficient`), which is reused, not
edited.

* :func:`sum_compute_bounds` -- Algorithm 1 on each example's rows F[offsets[j]:offsets[j+1]],
  summed; Sigma is accumulated in BLAS blocks of sqrt(c) l rows across examples.
* :func:`class_bounds` -- Algorithm 1 for features f(x, y) = e_y (x) x (multinomial logistic
  regression): with rows e_y the running mean is m (x) x, so l_i = (e_i - m) (x) x and
  Sigma_j = C_j (x) x x^T, mu_j = m_j (x) x.  The kernel returns C_j (K x K), m_j and log z_j.
* :func:`sum_chain_bounds` -- Algorithm 3 (JunctionTreeBound) on every sequence of a chain CRF,
  summed (calls :func:`boltzlab.engine.kernels.bound.junction_tree_chain`).
* :func:`chain_marginals` / :func:`chain_moments` -- exact log Z, clique marginals and the
  feature covariance of chain CRFs (forward-backward; a second-order forward recursion for
  the exact Hessian used by Newton's method).
* :func:`sum_low_rank_bounds`, :func:`low_rank_class_bounds` -- Algorithm 4 (LowRankBound)
  across all examples with ONE low-rank-plus-diagonal curvature V^T diag(s) V + diag(D),
  as the paper's Algorithm 4 does ("For each t { z -> 0+; mu = 0; For each y { ... } }"):
  every rank-one term of every example is absorbed into the same (V, s, D).

All kernels are ``@njit(cache=True, nogil=True)``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .bound import (
    absorb_rank_one,
    add_term,
    low_rank_start,
    bound_coefficient,
    junction_tree_chain,
    logaddexp,
    sigmoid,
)


@njit(cache=True, nogil=True)
def _mirror_upper(S):
    d = S.shape[0]
    for a in range(d):
        for b in range(a):
            S[a, b] = S[b, a]


# ------------------------------------------------------------ Algorithm 1, summed


@njit(cache=True, nogil=True)
def sum_compute_bounds(F, log_alpha, offsets, block):
    """Algorithm 1 on every example, summed: (sum_j log z_j, sum_j mu_j, sum_j Sigma_j).

    F : (R, d) the rows of all examples, example j in F[offsets[j]:offsets[j+1]];
    log_alpha : (R,) log h + theta_tilde^T f (-inf where h = 0); offsets : (t + 1,) int64.
    z and mu restart (z -> 0+, mu = 0) at every example; the rank-one terms sqrt(c) l of all
    examples are stacked into blocks of ``block`` rows and added by one BLAS product each.
    Returns (log_z_sum, mu_sum, Sigma, log_z (t,)); log_z_sum is -inf if an example has Z = 0.
    """
    R, d = F.shape
    t = offsets.shape[0] - 1
    mu_sum = np.zeros(d)
    Sigma = np.zeros((d, d))
    B = np.empty((block, d))
    mu = np.empty(d)
    log_zs = np.empty(t)
    nb = 0
    for e in range(t):
        log_z = -np.inf
        mu[:] = 0.0
        for i in range(offsets[e], offsets[e + 1]):
            log_z, _, added = add_term(F[i], log_alpha[i], log_z, mu, B[nb])
            if not added:
                continue
            nb += 1
            if nb == block:
                Sigma += np.dot(B.T, B)
                nb = 0
        log_zs[e] = log_z
        for j in range(d):
            mu_sum[j] += mu[j]
    if nb > 0:
        Bb = B[:nb]
        Sigma += np.dot(Bb.T, Bb)
    _mirror_upper(Sigma)
    return log_zs.sum(), mu_sum, Sigma, log_zs


@njit(cache=True, nogil=True)
def class_bounds(log_alpha):
    """Algorithm 1 for f(x, y) = e_y (x) x over y = 0..K-1, for every example.

    log_alpha : (t, K), theta_y^T x_j.  With rows e_y (x) x_j the running mean is
    mu = m (x) x_j, so every l = f - mu = (e_y - m) (x) x_j and Algorithm 1 on the Kronecker
    rows equals Algorithm 1 on the rows e_y, Kronecker-multiplied by x_j:
    Sigma_j = C_j (x) x_j x_j^T, mu_j = m_j (x) x_j, with the same z.

    Returns (C (t, K, K), m (t, K), log_z (t,)).  m_j = softmax(log_alpha_j) (= E_p[e_y]).
    """
    t, K = log_alpha.shape
    C = np.zeros((t, K, K))
    M = np.zeros((t, K))
    log_zs = np.empty(t)
    u = np.empty(K)
    for e in range(t):
        log_z = -np.inf
        m = M[e]
        for i in range(K):
            la = log_alpha[e, i]
            if la == -np.inf:
                continue
            if log_z == -np.inf:
                m[i] = 1.0
                log_z = la
                continue
            r = la - log_z
            c = bound_coefficient(r)
            w = sigmoid(r)
            for a in range(K):
                u[a] = -m[a]
            u[i] += 1.0
            for a in range(K):
                ca = c * u[a]
                for b in range(K):
                    C[e, a, b] += ca * u[b]
                m[a] += w * u[a]
            log_z = logaddexp(log_z, la)
        log_zs[e] = log_z
    return C, M, log_zs


# ------------------------------------------------------------ Algorithm 3, summed


@njit(cache=True, nogil=True)
def sum_chain_bounds(Fc, log_alpha_c, offsets):
    """Algorithm 3 (JunctionTreeBound) on every sequence, summed.

    Fc : (C, k, k, d) the clique features of all sequences, sequence s owning cliques
    offsets[s]..offsets[s+1]-1 (a chain of n_s >= 2 nodes has n_s - 1 cliques);
    log_alpha_c : (C, k, k).  Returns (sum_s log z_s, sum_s mu_s, sum_s Sigma_s, log_z (S,)).
    """
    S = offsets.shape[0] - 1
    d = Fc.shape[3]
    mu_sum = np.zeros(d)
    Sigma = np.zeros((d, d))
    log_zs = np.empty(S)
    for s in range(S):
        a, b = offsets[s], offsets[s + 1]
        lz, mu, Sg = junction_tree_chain(Fc[a:b], log_alpha_c[a:b])
        log_zs[s] = lz
        mu_sum += mu
        Sigma += Sg
    return log_zs.sum(), mu_sum, Sigma, log_zs


# --------------------------------------------------------- exact chain inference


@njit(cache=True, nogil=True)
def chain_marginals(log_alpha_c, offsets):
    """Forward-backward on every sequence: log Z_s and the clique marginals.

    log_alpha_c : (C, k, k) with log_alpha_c[c, a, b] = theta^T f_c(a, b) for clique
    c = (y_c = a, y_{c+1} = b); offsets as in :func:`sum_chain_bounds`.
    Returns (log_z (S,), P (C, k, k)) with P[c, a, b] = p(y_c = a, y_{c+1} = b | x_s).
    """
    C, k, _ = log_alpha_c.shape
    S = offsets.shape[0] - 1
    P = np.empty((C, k, k))
    log_zs = np.empty(S)
    tmp = np.empty(k)
    for s in range(S):
        c0, c1 = offsets[s], offsets[s + 1]
        m = c1 - c0
        fw = np.zeros((m + 1, k))  # fw[c, a]: log sum over y_0..y_{c-1} with y_c = a
        bw = np.zeros((m + 1, k))  # bw[c, a]: log sum over y_{c+1}.. with y_c = a
        for c in range(m):
            for b in range(k):
                top = -np.inf
                for a in range(k):
                    tmp[a] = fw[c, a] + log_alpha_c[c0 + c, a, b]
                    if tmp[a] > top:
                        top = tmp[a]
                acc = 0.0
                for a in range(k):
                    acc += math.exp(tmp[a] - top)
                fw[c + 1, b] = top + math.log(acc)
        for c in range(m - 1, -1, -1):
            for a in range(k):
                top = -np.inf
                for b in range(k):
                    tmp[b] = bw[c + 1, b] + log_alpha_c[c0 + c, a, b]
                    if tmp[b] > top:
                        top = tmp[b]
                acc = 0.0
                for b in range(k):
                    acc += math.exp(tmp[b] - top)
                bw[c, a] = top + math.log(acc)
        top = -np.inf
        for a in range(k):
            if fw[m, a] > top:
                top = fw[m, a]
        acc = 0.0
        for a in range(k):
            acc += math.exp(fw[m, a] - top)
        lz = top + math.log(acc)
        log_zs[s] = lz
        for c in range(m):
            for a in range(k):
                for b in range(k):
                    P[c0 + c, a, b] = math.exp(fw[c, a] + log_alpha_c[c0 + c, a, b] + bw[c + 1, b] - lz)
    return log_zs, P


@njit(cache=True, nogil=True)
def chain_moments(Fc, log_alpha_c, offsets):
    """Exact sum_s Cov_s[f] of chain CRFs: the Hessian of sum_s log Z_s (for Newton).

    A forward recursion in the second-order expectation semiring: for each state b of
    y_{c+1} it keeps the conditional mean m1[b] and second moment m2[b] of the prefix
    feature sum F_{c+1} = f_0 + ... + f_c given y_{c+1} = b,

        w_a = p(y_c = a | y_{c+1} = b, prefix)  (from the forward messages),
        m1'[b] = sum_a w_a (m1[a] + f_c(a, b)),
        m2'[b] = sum_a w_a (m2[a] + m1[a] f^T + f m1[a]^T + f f^T),

    and mixes the last position's states at the end; Cov = E[F F^T] - E[F] E[F]^T.
    Cost O(C k^2 d^2).  Returns (log_z (S,), mean_sum (d,), cov_sum (d, d)).
    """
    C, k, _, d = Fc.shape
    S = offsets.shape[0] - 1
    cov = np.zeros((d, d))
    mean_sum = np.zeros(d)
    log_zs = np.empty(S)
    m1 = np.zeros((k, d))
    m2 = np.zeros((k, d, d))
    n1 = np.zeros((k, d))
    n2 = np.zeros((k, d, d))
    fw = np.zeros(k)
    nfw = np.zeros(k)
    w = np.empty(k)
    for s in range(S):
        c0, c1 = offsets[s], offsets[s + 1]
        m1[:] = 0.0
        m2[:] = 0.0
        fw[:] = 0.0
        for c in range(c0, c1):
            for b in range(k):
                top = -np.inf
                for a in range(k):
                    w[a] = fw[a] + log_alpha_c[c, a, b]
                    if w[a] > top:
                        top = w[a]
                acc = 0.0
                for a in range(k):
                    w[a] = math.exp(w[a] - top)
                    acc += w[a]
                nfw[b] = top + math.log(acc)
                n1[b] = 0.0
                n2[b] = 0.0
                for a in range(k):
                    wa = w[a] / acc
                    if wa == 0.0:
                        continue
                    f = Fc[c, a, b]
                    for i in range(d):
                        n1[b, i] += wa * (m1[a, i] + f[i])
                        x = wa * (m1[a, i] + f[i])
                        y = wa * f[i]
                        for j in range(d):
                            # m2 + m1 f^T + f m1^T + f f^T = m2 + (m1 + f) f^T + f m1^T
                            n2[b, i, j] += wa * m2[a, i, j] + x * f[j] + y * m1[a, j]
            m1, n1 = n1, m1
            m2, n2 = n2, m2
            fw, nfw = nfw, fw
        top = -np.inf
        for b in range(k):
            if fw[b] > top:
                top = fw[b]
        acc = 0.0
        for b in range(k):
            w[b] = math.exp(fw[b] - top)
            acc += w[b]
        log_zs[s] = top + math.log(acc)
        mean = np.zeros(d)
        second = np.zeros((d, d))
        for b in range(k):
            wb = w[b] / acc
            mean += wb * m1[b]
            second += wb * m2[b]
        mean_sum += mean
        for i in range(d):
            for j in range(d):
                cov[i, j] += second[i, j] - mean[i] * mean[j]
    for i in range(d):
        for j in range(i):
            v = 0.5 * (cov[i, j] + cov[j, i])
            cov[i, j] = v
            cov[j, i] = v
    return log_zs, mean_sum, cov


# ------------------------------------------------------------ Algorithm 4, summed


@njit(cache=True, nogil=True)
def sum_low_rank_bounds(F, log_alpha, offsets, rank):
    """Algorithm 4 over all examples: one V^T diag(s) V + diag(D) >= sum_j Sigma_j.

    F, log_alpha, offsets as in :func:`sum_compute_bounds` (same row order, hence the same
    rank-one terms).  D starts at 0 (the paper starts it at t lambda I; the regulariser is
    added at solve time instead).  Returns (log_z_sum, mu_sum, V, s, D, log_z (t,)).
    """
    R, d = F.shape
    t = offsets.shape[0] - 1
    V, s, D, r, g, Va, M = low_rank_start(rank, d)
    mu = np.empty(d)
    mu_sum = np.zeros(d)
    log_zs = np.empty(t)
    for e in range(t):
        log_z = -np.inf
        mu[:] = 0.0
        for i in range(offsets[e], offsets[e + 1]):
            log_z, rn2, added = add_term(F[i], log_alpha[i], log_z, mu, r)
            if added and rn2 > 0.0:
                V = absorb_rank_one(r, rn2, V, s, D, g, Va, M)
        log_zs[e] = log_z
        mu_sum += mu
    return log_zs.sum(), mu_sum, V, s, D, log_zs


@njit(cache=True, nogil=True)
def low_rank_class_bounds(X, log_alpha, rank):
    """Algorithm 4 over all examples for f(x, y) = e_y (x) x (multinomial logistic).

    X : (t, p) inputs (bias column included); log_alpha : (t, K) = theta_y^T x_j.  The
    rank-one terms are r = sqrt(c) (e_y - m) (x) x_j in the class-major layout
    theta = [theta_0, ..., theta_{K-1}], built on the fly (F is never formed); the same
    terms, in the same order, as :func:`sum_low_rank_bounds` on the Kronecker rows.
    Returns (log_z_sum, mu_sum (K p,), V, s, D, log_z (t,)).
    """
    t, p = X.shape
    K = log_alpha.shape[1]
    d = K * p
    V, s, D, r, g, Va, M = low_rank_start(rank, d)
    m = np.empty(K)
    u = np.empty(K)
    mu_sum = np.zeros(d)
    log_zs = np.empty(t)
    for e in range(t):
        log_z = -np.inf
        m[:] = 0.0
        for i in range(K):
            la = log_alpha[e, i]
            if la == -np.inf:
                continue
            if log_z == -np.inf:
                m[i] = 1.0
                log_z = la
                continue
            rho = la - log_z
            sc = math.sqrt(bound_coefficient(rho))
            w = sigmoid(rho)
            for a in range(K):
                u[a] = -m[a]
            u[i] += 1.0
            rn2 = 0.0
            for a in range(K):
                for q in range(p):
                    v = sc * u[a] * X[e, q]
                    r[a * p + q] = v
                    rn2 += v * v
                m[a] += w * u[a]
            log_z = logaddexp(log_z, la)
            if rn2 > 0.0:
                V = absorb_rank_one(r, rn2, V, s, D, g, Va, M)
        log_zs[e] = log_z
        for a in range(K):
            for q in range(p):
                mu_sum[a * p + q] += m[a] * X[e, q]
    return log_zs.sum(), mu_sum, V, s, D, log_zs


@njit(cache=True, nogil=True)
def sum_chain_bounds_shared(Fc, log_alpha_c, offsets):
    """Algorithm 3 on every sequence with ONE curvature per clique instead of one per
    separator value, summed: (sum_s log z_s, sum_s mu_s, sum_s Sigma_s, log_z (S,)).

    Algorithm 3 adds the child's Sigma_{b|w} once for every configuration w of the clique, so
    on a chain a leaf's curvature reaches the root k^(n-2) times.  Here clique c keeps the
    z_{c|u}, mu_{c|u} of Algorithm 3 (exact) but a single Sigma_c that dominates every
    Sigma_{c|u}:

        Sigma_c = Sigma_{c-1} + sum_u sum_v coef(log alpha_w - log z_{c|u}) l_w l_w^T,

    valid because each Z_{c|u}(theta) <= z_{c|u} exp(delta^T mu_{c|u} + 1/2 delta^T
    (Sigma_{c-1} + sum_v coef l l^T) delta) when Sigma_{c-1} dominates every child curvature
    (Theorem 1 on the linear terms after factoring exp(1/2 delta^T Sigma_{c-1} delta) out of
    the sum over v), and adding the PSD terms of the other u keeps the bound.  The curvature
    grows linearly, not geometrically, with the chain length.  Cost O(m k^2 d^2).
    """
    C, k, _, d = Fc.shape
    S = offsets.shape[0] - 1
    mu_sum = np.zeros(d)
    Sigma = np.zeros((d, d))
    log_zs = np.empty(S)
    prev_lz = np.zeros(k)
    prev_mu = np.zeros((k, d))
    cur_lz = np.empty(k)
    cur_mu = np.empty((k, d))
    l = np.empty(d)
    mu = np.empty(d)
    for s in range(S):
        c0, c1 = offsets[s], offsets[s + 1]
        m = c1 - c0
        prev_lz[:] = 0.0
        prev_mu[:] = 0.0
        for c in range(m):
            root = c == m - 1
            n_u = 1 if root else k
            for uu in range(n_u):
                mu[:] = 0.0
                lz = -np.inf
                for v in range(k):
                    for u2 in range(k if root else 1):
                        u = u2 if root else uu
                        la = log_alpha_c[c0 + c, v, u] + prev_lz[v]
                        if la == -np.inf:
                            continue
                        for j in range(d):
                            l[j] = Fc[c0 + c, v, u, j] - mu[j] + prev_mu[v, j]
                        if lz == -np.inf:
                            coef, w = 0.0, 1.0
                        else:
                            r = la - lz
                            coef, w = bound_coefficient(r), sigmoid(r)
                        if coef > 0.0:
                            for a in range(d):
                                ca = coef * l[a]
                                if ca != 0.0:
                                    for b in range(a, d):
                                        Sigma[a, b] += ca * l[b]
                        for j in range(d):
                            mu[j] += w * l[j]
                        lz = logaddexp(lz, la)
                if root:
                    log_zs[s] = lz
                    mu_sum += mu
                else:
                    cur_lz[uu] = lz
                    cur_mu[uu] = mu
            if not root:
                prev_lz, cur_lz = cur_lz, prev_lz
                prev_mu, cur_mu = cur_mu, prev_mu
    _mirror_upper(Sigma)
    return log_zs.sum(), mu_sum, Sigma, log_zs
