"""`bench bound`: Algorithm 1 (ComputeBound) on a fully visible Boltzmann machine's Omega,
the numba engine against plain NumPy, all measured in the same run.

Problem: Omega = {-1, +1}^n_bits (2^16 = 65,536 rows for the default 16 bits), features
f(y) = (y_1..y_n, y_i y_j for i < j), so d = n + n(n-1)/2 = 136; h = 1 and a seeded
theta ~ N(0, 0.1^2) (theta^T f has standard deviation about 1.2).  The work is
|Omega| d^2 ~ 1.2e9 multiply-adds for the sum of rank-one terms.

Three implementations of the same recursion (the same rows in the same order, log space):

* numba -- :func:`boltzlab.engine.bound.compute_bound`: a sequential O(|Omega| d) pass writes
  sqrt(c_i) l_i into blocks of rows, each block added to Sigma by one BLAS product.
* NumPy, row by row -- :func:`numpy_rowwise`: Algorithm 1 as printed, one rank-one update
  (np.outer into a buffer, Sigma += buffer) per row.  Its cost per row does not depend on the
  row, so it is timed on the first ``numpy_rows`` rows of Omega and scaled by
  |Omega| / numpy_rows; its Sigma is compared with the engine's on that same prefix.
* NumPy, vectorised -- :func:`numpy_vectorised`: in Algorithm 1, z and mu after row i are a
  running sum and a running weighted mean, so every l_i = f_i - mu_{i-1} and c_i follow
  from cumulative sums; Sigma = L^T diag(c) L is then one BLAS product (done in chunks of
  rows to bound memory).  The running sums use alpha / max alpha, which underflow only for
  rows e^{-700} times smaller than the largest (not the case here; the engine's sequential
  log-space recursion has no such limit).  Compared with the engine on the full Omega.

Timings are the best of ``repeats``.  Set OPENBLAS_NUM_THREADS=1 for one core.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np

from ..bound import compute_bound, log_partition
from ..progress import Reporter

GOAL_SECONDS = 1.0


def fvbm_features(n_bits: int) -> np.ndarray:
    """Omega = {-1, +1}^n_bits (bit i of the row index, 0 -> -1) with spins and pairwise products."""
    idx = np.arange(2**n_bits)
    Y = np.where((idx[:, None] >> np.arange(n_bits)) & 1, 1.0, -1.0)
    iu, ju = np.triu_indices(n_bits, 1)
    return np.ascontiguousarray(np.hstack([Y, Y[:, iu] * Y[:, ju]]))


def _coefficients(r: np.ndarray) -> np.ndarray:
    """tanh(r/2)/(2r) elementwise with c(0) = 1/4 (footnote 3)."""
    small = np.abs(r) < 1e-4
    safe = np.where(small, 1.0, r)
    return np.where(small, 0.25 - r * r / 48.0, np.tanh(0.5 * safe) / (2.0 * safe))


def numpy_rowwise(theta: np.ndarray, F: np.ndarray, h: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Algorithm 1 row by row in NumPy (log space, the same limits as the engine)."""
    n, d = F.shape
    with np.errstate(divide="ignore"):
        la = F @ theta + np.log(h)
    log_z = -math.inf
    mu = np.zeros(d)
    Sigma = np.zeros((d, d))
    buf = np.empty((d, d))
    for i in range(n):
        a = la[i]
        if a == -math.inf:
            continue
        if log_z == -math.inf:
            mu[:] = F[i]
            log_z = a
            continue
        r = a - log_z
        c = 0.25 - r * r / 48.0 if abs(r) < 1e-4 else math.tanh(0.5 * r) / (2.0 * r)
        w = 1.0 / (1.0 + math.exp(-r)) if r >= 0 else math.exp(r) / (1.0 + math.exp(r))
        l = F[i] - mu
        np.outer(l, c * l, out=buf)
        Sigma += buf
        mu += w * l
        log_z = float(np.logaddexp(log_z, a))
    return log_z, mu, Sigma


def numpy_vectorised(theta: np.ndarray, F: np.ndarray, h: np.ndarray, chunk: int = 8192) -> tuple[float, np.ndarray, np.ndarray]:
    """Algorithm 1 by cumulative sums and one BLAS product per chunk of rows (see module doc)."""
    n, d = F.shape
    with np.errstate(divide="ignore"):
        la = F @ theta + np.log(h)
    ref = la.max()
    w = np.exp(la - ref)  # alpha / max alpha
    Sigma = np.zeros((d, d))
    sum_w, sum_wf = 0.0, np.zeros(d)
    for s in range(0, n, chunk):
        Fc, wc = F[s:s + chunk], w[s:s + chunk]
        cw = sum_w + np.cumsum(wc)
        cwf = sum_wf + np.cumsum(wc[:, None] * Fc, axis=0)
        z_prev = np.concatenate([[sum_w], cw[:-1]])
        wf_prev = np.vstack([sum_wf, cwf[:-1]])
        valid = (z_prev > 0.0) & (wc > 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            mu_prev = wf_prev / np.where(z_prev > 0.0, z_prev, 1.0)[:, None]
            r = np.where(valid, np.log(np.where(valid, wc, 1.0)) - np.log(np.where(valid, z_prev, 1.0)), 0.0)
        c = np.where(valid, _coefficients(r), 0.0)
        L = (Fc - mu_prev) * np.sqrt(c)[:, None]
        Sigma += L.T @ L
        sum_w, sum_wf = cw[-1], cwf[-1]
    Sigma = np.triu(Sigma) + np.triu(Sigma, 1).T
    return float(ref + math.log(sum_w)), sum_wf / sum_w, Sigma


def _best(fn, repeats: int, after: Callable[[], None] = lambda: None) -> tuple[float, tuple]:
    """The best time of ``repeats`` calls and the last result; ``after()`` between calls (untimed)."""
    best, out = math.inf, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
        after()
    return best, out


def run(n_bits: int = 16, repeats: int = 3, numpy_rows: int = 8192, seed: int = 0, *,
        progress: Callable[[str], None] | None = None) -> dict:
    """Time the three implementations on the n_bits FVBM; JSON-ready dict.

    ``progress`` (see :mod:`boltzlab.engine.progress`) advances after each timed call, between
    the calls: ``repeats`` per implementation."""
    say = Reporter(progress)
    say.expect(3 * repeats)
    F = fvbm_features(n_bits)
    n, d = F.shape
    h = np.ones(n)
    theta = np.random.default_rng(seed).normal(0.0, 0.1, d)
    prefix = min(numpy_rows, n)
    compute_bound(theta, F[:8], h[:8])  # compile or load from the cache before timing

    numba_s, (log_z, mu, Sigma) = _best(lambda: compute_bound(theta, F, h), repeats, say.unit)
    vec_s, (vz, vmu, vS) = _best(lambda: numpy_vectorised(theta, F, h), repeats, say.unit)
    row_s, (_, _, rS) = _best(lambda: numpy_rowwise(theta, F[:prefix], h[:prefix]), repeats, say.unit)
    _, _, pS = compute_bound(theta, F[:prefix], h[:prefix])
    row_full_s = row_s * n / prefix
    scale = float(np.abs(Sigma).max())
    return {
        "n_bits": n_bits, "omega": n, "d": d, "multiply_adds": float(n) * d * d,
        "numba_seconds": numba_s,
        "numba_gflops": 2.0 * n * d * d / numba_s / 1e9,
        "numpy_rowwise_rows_timed": prefix,
        "numpy_rowwise_seconds_timed": row_s,
        "numpy_rowwise_seconds": row_full_s,
        "numpy_vectorised_seconds": vec_s,
        "ratio_rowwise": row_full_s / numba_s,
        "ratio_vectorised": vec_s / numba_s,
        "max_abs_sigma": scale,
        "max_abs_diff_sigma_rowwise": float(np.abs(rS - pS).max()),
        "max_abs_diff_sigma_vectorised": float(np.abs(vS - Sigma).max()),
        "max_abs_diff_mu_vectorised": float(np.abs(vmu - mu).max()),
        "log_z": log_z,
        "log_z_error": abs(log_z - log_partition(theta, F, h)),
        "goal_seconds": GOAL_SECONDS,
        "meets_goal": numba_s <= GOAL_SECONDS,
    }


def format_table(result: dict) -> str:
    """A plain-text table of :func:`run`'s result."""
    r = result
    lines = [
        f"Algorithm 1 on Omega = {{-1,1}}^{r['n_bits']}: |Omega| = {r['omega']}, d = {r['d']}, "
        f"|Omega| d^2 = {r['multiply_adds']:.3g} multiply-adds",
        f"{'implementation':<24} {'seconds':>9} {'x numba':>8} {'max|dSigma|':>12}",
        f"{'numba (engine)':<24} {r['numba_seconds']:>9.3f} {1.0:>8.2f} {'-':>12}",
        f"{'NumPy vectorised':<24} {r['numpy_vectorised_seconds']:>9.3f} {r['ratio_vectorised']:>8.2f} "
        f"{r['max_abs_diff_sigma_vectorised']:>12.2e}",
        f"{'NumPy row by row':<24} {r['numpy_rowwise_seconds']:>9.3f} {r['ratio_rowwise']:>8.2f} "
        f"{r['max_abs_diff_sigma_rowwise']:>12.2e}",
        f"(row by row: {r['numpy_rowwise_seconds_timed']:.3f} s measured on the first "
        f"{r['numpy_rowwise_rows_timed']} rows, scaled by {r['omega'] / r['numpy_rowwise_rows_timed']:g}, "
        f"Sigma compared on those rows; max|Sigma| = {r['max_abs_sigma']:.3g})",
        f"(numba: {r['numba_gflops']:.2f} GFLOP/s; |log z - log Z| = {r['log_z_error']:.1e}; "
        f"goal <= {r['goal_seconds']:g} s: {'met' if r['meets_goal'] else 'NOT met'})",
    ]
    return "\n".join(lines)
