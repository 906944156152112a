"""Numba kernels for fully visible Boltzmann machines (Nguyen & Wood 2016).

Imported as ``boltzlab.engine.kernels.fvbm``; numba caches the compiled functions on disk
(beside this file, or under ``NUMBA_CACHE_DIR``) and reuses them while this file is unchanged.

Conventions shared by every kernel here:

* ``XT`` is the data transposed, shape (d, m), float64 with entries in {-1, +1}; each row is
  one variable, contiguous, so the O(m) inner loops stream through memory.  Its m columns
  are either the n observations or the distinct observations, with ``w`` (m,) holding how
  often each occurs: eq. 2.1 is a sum over observations, so a repeated row contributes
  its count times one term, and every sum below is weighted by w (n = sum w).
  ``unit`` says that w is all ones (no compression), which allows a faster log-PL.
* ``T`` (d, m) holds tanh(u_ij) of the local fields u_ij = m_j^T x_i + b_j of eq. 2.1.
* ``M`` is symmetric with a zero diagonal (eq. 1.1).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

LOG2 = math.log(2.0)
# Let LLVM reorder sums (so O(n) reductions vectorize) and fuse multiply-adds, but keep
# IEEE semantics for NaN/inf: divergence must stay detectable.
_REDUCE = {"reassoc", "contract"}
# |u| beyond which 1 - tanh(u) < 1e-10 and tanh no longer pins u down to better than ~1e-6.
SATURATION = 12.0


@njit(cache=True, nogil=True, fastmath=_REDUCE)
def _field_row(XT, b, M, j, u):
    """u_i = m_j^T x_i + b_j for every observation i (one row of the local fields)."""
    n = XT.shape[1]
    bj = b[j]
    for i in range(n):
        u[i] = bj
    for k in range(XT.shape[0]):
        mkj = M[k, j]
        if mkj != 0.0:
            for i in range(n):
                u[i] += mkj * XT[k, i]


@njit(cache=True, nogil=True, fastmath=_REDUCE, error_model="numpy")
def _row_log_pl(XT, w, unit, j, u, T, fresh_tanh):
    """Return sum_i w_i (x_ij u_i - log(2 cosh u_i)) for one variable j (a term of eq. 2.1).

    Uses log(2 cosh u) = |u| + log 2 - log1p(|tanh u|), exact and overflow-free for large
    |u|.  With unit weights the log1p terms are taken as the log of products of 16 factors
    (1 + |tanh u|) in [1, 2], one log per 16 observations (no overflow: <= 2^16).

    T[j] is recomputed as tanh(u) from scratch when ``fresh_tanh`` is set, and whenever a
    field is beyond SATURATION: there tanh rounds towards +-1 and stops carrying u, so
    the incremental updates could not bring it back accurately.
    """
    m = XT.shape[1]
    linear = 0.0
    largest = 0.0
    for i in range(m):
        a = abs(u[i])
        linear += w[i] * (XT[j, i] * u[i] - a)
        largest = max(largest, a)
    if fresh_tanh or largest > SATURATION:
        for i in range(m):
            T[j, i] = math.tanh(u[i])
    logs = 0.0
    if unit:
        full = m - m % 16
        for start in range(0, full, 16):
            prod = 1.0
            for i in range(start, start + 16):
                prod *= 1.0 + abs(T[j, i])
            logs += math.log(prod)
        for i in range(full, m):
            logs += math.log1p(abs(T[j, i]))
    else:
        for i in range(m):
            logs += w[i] * math.log1p(abs(T[j, i]))
    return linear + logs


@njit(cache=True, nogil=True)
def log_pl_and_fields(XT, w, unit, b, M, T, fresh_tanh):
    """Eq. 2.1 at (b, M), with the fields u_ij = m_j^T x_i + b_j recomputed from scratch.

    T must hold tanh of those fields (the sweeps keep it incrementally); with
    ``fresh_tanh`` it is recomputed from scratch too, which the trainers do every few
    sweeps so rounding drift cannot accumulate.  Rows are summed with Neumaier
    compensation: the stopping rule compares increases of 1e-5 on totals of order 1e5.
    """
    d, m = XT.shape
    n = 0.0
    for i in range(m):
        n += w[i]
    u = np.empty(m)
    total = -d * n * LOG2
    comp = 0.0
    for j in range(d):
        _field_row(XT, b, M, j, u)
        row = _row_log_pl(XT, w, unit, j, u, T, fresh_tanh)
        t = total + row
        if abs(total) >= abs(row):
            comp += (total - t) + row
        else:
            comp += (row - t) + total
        total = t
    return total + comp


@njit(cache=True, nogil=True, fastmath=_REDUCE, error_model="numpy")
def coordinate_sweep(XT, w, b, M, T, mu):
    """One sweep of BSLM (mu = 1, eqs. 2.4 and 2.7) or coordinate gradient ascent (4.1, 4.2).

    In the paper's order: every b_j (j = 1..d), then every m_jk in lexicographic order of
    the upper triangle, each update using the freshest values.  T holds tanh(u_ij) of the
    current local fields and is kept up to date incrementally, so each coordinate costs
    O(m): tanh(u + s) = (tanh u + tanh s) / (1 + tanh u tanh s), and tanh(delta x) =
    x tanh(delta) because x = +-1, so a shift costs one division, not a fresh tanh.

    b-step (eq. 2.4):  b_j += mu/n * sum_i (x_ij - tanh u_ij)
    M-step (eq. 2.7):  m_jk += mu/(2n) * sum_i (2 x_ij x_ik - x_ik tanh u_ij - x_ij tanh u_ik)
    (sums over observations: weighted by w over the stored rows)
    """
    d, m = XT.shape
    n = 0.0
    for i in range(m):
        n += w[i]
    for j in range(d):
        g = 0.0
        for i in range(m):
            g += w[i] * (XT[j, i] - T[j, i])
        delta = mu * g / n
        if delta != 0.0:
            b[j] += delta
            t = math.tanh(delta)
            for i in range(m):
                T[j, i] = (T[j, i] + t) / (1.0 + T[j, i] * t)
    for j in range(d):
        for k in range(j + 1, d):
            g = 0.0
            for i in range(m):
                xj = XT[j, i]
                xk = XT[k, i]
                g += w[i] * (2.0 * xj * xk - xk * T[j, i] - xj * T[k, i])
            delta = mu * g / (2.0 * n)
            if delta != 0.0:
                M[j, k] += delta
                M[k, j] = M[j, k]
                t = math.tanh(delta)
                for i in range(m):
                    sj = t * XT[k, i]  # u_ij shifts by delta x_ik
                    sk = t * XT[j, i]  # u_ik shifts by delta x_ij
                    T[j, i] = (T[j, i] + sj) / (1.0 + T[j, i] * sj)
                    T[k, i] = (T[k, i] + sk) / (1.0 + T[k, i] * sk)


@njit(cache=True, nogil=True)
def run_sweeps(XT, w, unit, b, M, T, mu, first_sweep, n_sweeps, tol, refresh_every, previous, out_log_pl):
    """Run up to ``n_sweeps`` sweeps in one call, without returning to Python in between.

    ``previous`` is eq. 2.1 at the entry (b, M), whose tanh-fields T must hold.  Sweeps are
    numbered from ``first_sweep``; after sweep s with s % refresh_every == 0, T is
    recomputed from scratch (a deterministic schedule, so runs are reproducible).
    ``out_log_pl[s]`` receives eq. 2.1 after the s-th sweep of this call.  Stops early once
    |increase| < tol (tol <= 0 never stops early) or the log-PL is no longer finite.
    Returns the number of sweeps run.
    """
    for s in range(n_sweeps):
        coordinate_sweep(XT, w, b, M, T, mu)
        fresh = (first_sweep + s) % refresh_every == 0
        current = log_pl_and_fields(XT, w, unit, b, M, T, fresh)
        out_log_pl[s] = current
        if not math.isfinite(current):
            return s + 1
        if tol > 0.0 and abs(current - previous) < tol:
            return s + 1
        previous = current
    return n_sweeps


@njit(cache=True, nogil=True)
def _gray_flip(step, x, h, b, M, energy):
    """Move to the next state in Gray-code order; return (flipped spin k, new energy).

    Step s flips spin k = the lowest set bit of s, so the energy E = 1/2 x^T M x + b^T x
    changes by -2 x_k (b_k + h_k) with h = M x, and h is updated in O(d).
    """
    k = 0
    while not (step >> k) & 1:
        k += 1
    xk = x[k]
    energy += -2.0 * xk * (b[k] + h[k])
    for l in range(x.shape[0]):
        h[l] -= 2.0 * xk * M[l, k]
    x[k] = -xk
    return k, energy


@njit(cache=True, nogil=True)
def log_partition_exact(b, M):
    """log Z(theta) of eq. 1.1 by enumerating the 2^d states in Gray-code order, O(2^d d).

    Streaming log-sum-exp with a running maximum, so nothing overflows.
    """
    d = b.shape[0]
    x = -np.ones(d)
    h = M @ x
    energy = 0.5 * (x @ h) + b @ x
    shift = energy
    acc = 1.0
    for step in range(1, 2**d):
        _, energy = _gray_flip(step, x, h, b, M, energy)
        if energy > shift:
            acc = acc * math.exp(shift - energy) + 1.0
            shift = energy
        else:
            acc += math.exp(energy - shift)
    return shift + math.log(acc)


@njit(cache=True, nogil=True)
def state_energies(b, M):
    """E(x) = 1/2 x^T M x + b^T x for every state, indexed by its bits (bit j set <=> x_j = +1)."""
    d = b.shape[0]
    out = np.empty(2**d)
    x = -np.ones(d)
    h = M @ x
    energy = 0.5 * (x @ h) + b @ x
    index = 0
    out[0] = energy
    for step in range(1, 2**d):
        k, energy = _gray_flip(step, x, h, b, M, energy)
        index ^= 1 << k
        out[index] = energy
    return out


@njit(cache=True, nogil=True)
def gibbs_sample(b, M, n, burn_in, thin, seed):
    """n draws from eq. 1.1 by one systematic-scan Gibbs chain, seeded.

    P(x_j = 1 | x_-j) = (1 + tanh(m_j^T x + b_j)) / 2.  ``burn_in`` sweeps are discarded,
    then one draw is kept every ``thin`` sweeps.
    """
    np.random.seed(seed)
    d = b.shape[0]
    x = np.where(np.random.random(d) < 0.5, -1.0, 1.0)
    out = np.empty((n, d))
    total = burn_in + n * thin
    kept = 0
    for s in range(total):
        for j in range(d):
            u = b[j]
            for k in range(d):
                u += M[k, j] * x[k]
            p_plus = 0.5 * (1.0 + math.tanh(u))
            x[j] = 1.0 if np.random.random() < p_plus else -1.0
        if s >= burn_in and (s - burn_in) % thin == thin - 1:
            out[kept] = x
            kept += 1
    return out
