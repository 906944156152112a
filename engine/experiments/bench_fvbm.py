"""`boltzlab bench fvbm`: BSLM sweeps per second, numba engine vs plain NumPy, same run.

Both implement the same updates (eqs. 2.4, 2.7) in the same order with the same O(n)
per-coordinate work (incremental tanh by the addition formula); the NumPy one pays for
a Python loop over the d(d+1)/2 coordinates and temporary arrays in each.  The headline
numbers use all n rows; the engine's default of sweeping the distinct rows weighted by
their counts (same iterates) is reported beside them, as it depends on the data.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from ..data import simulate_fvbm
from ..fvbm import FVBMTrainer
from ..progress import Reporter

GOAL_MS_PER_SWEEP = 20.0


def numpy_sweep(X: np.ndarray, b: np.ndarray, M: np.ndarray, T: np.ndarray) -> None:
    """One BSLM sweep in plain NumPy; X is (d, n), T = tanh of the fields, in place."""
    d, n = X.shape
    for j in range(d):
        delta = np.sum(X[j] - T[j]) / n
        b[j] += delta
        t = np.tanh(delta)
        T[j] = (T[j] + t) / (1.0 + T[j] * t)
    for j in range(d):
        for k in range(j + 1, d):
            grad = 2.0 * X[j] @ X[k] - X[k] @ T[j] - X[j] @ T[k]
            delta = grad / (2.0 * n)
            M[j, k] += delta
            M[k, j] = M[j, k]
            t = np.tanh(delta)
            sj, sk = t * X[k], t * X[j]
            T[j] = (T[j] + sj) / (1.0 + T[j] * sj)
            T[k] = (T[k] + sk) / (1.0 + T[k] * sk)


def _rate(sweep, min_seconds: float, min_sweeps: int) -> float:
    count, t0 = 0, time.perf_counter()
    while count < min_sweeps or time.perf_counter() - t0 < min_seconds:
        sweep()
        count += 1
    return count / (time.perf_counter() - t0)


def run(n: int = 16_000, d: int = 20, seed: int = 0, min_seconds: float = 3.0, threads: int = 1,
        *, progress: Callable[[str], None] | None = None) -> dict:
    """Measure both implementations on the same simulated data; JSON-ready dict.

    ``threads`` = n > 1 also times the engine's sweeps on n threads (numba's, with n BLAS
    threads), alternating with 1 thread twice and keeping the best of each:
    ``thread_rows`` holds per count ``numba_sweeps_per_second``, ``numba_batched_sweeps_per_second``
    and ``speedup`` (over 1 thread, same run).  The sweep has no matrix product (O(n) work
    per coordinate), so there is no GEMM floor to compare with.

    ``progress`` (see :mod:`boltzlab.engine.progress`) advances after the data and the warm-up,
    then once per timed rate, between the rates (never inside one): 2 per pass and thread
    count, then the distinct rows and NumPy.
    """
    from threadpoolctl import threadpool_limits

    from .. import threads as engine_threads

    counts = sorted({1, int(threads)})
    passes = 2 if len(counts) > 1 else 1
    say = Reporter(progress)
    # the data and compiling; one and ten sweeps a call per pass and count; the distinct rows; NumPy
    say.expect(1 + 2 * passes * len(counts) + 2)
    X = simulate_fvbm(d, n, seed).X
    trainer = FVBMTrainer(X, tol=0, max_sweeps=10**9, compress=False)
    trainer.steps(2)  # compile or load from the cache before timing
    say.unit()
    rates = {c: (0.0, 0.0) for c in counts}
    for _ in range(passes):
        for count in counts:
            with threadpool_limits(limits=count), engine_threads.using(count):
                one = _rate(lambda: trainer.steps(1), min_seconds, 20)
                say.unit()
                batched = _rate(lambda: trainer.steps(10), min_seconds, 5) * 10
                say.unit()
            rates[count] = (max(rates[count][0], one), max(rates[count][1], batched))
    numba_rate, numba_batched = rates[1]
    compressed = FVBMTrainer(X, tol=0, max_sweeps=10**9, compress=True)
    compressed_rate = _rate(lambda: compressed.steps(10), min_seconds, 5) * 10
    say.unit()

    XT = np.ascontiguousarray(X.T)
    b, M = np.zeros(d), np.zeros((d, d))
    T = np.tanh(b[:, None] + M @ XT)
    numpy_rate = _rate(lambda: numpy_sweep(XT, b, M, T), min_seconds, 3)
    say.unit()
    return {
        "n": n, "d": d,
        "numba_sweeps_per_second": numba_rate,
        "numba_ms_per_sweep": 1e3 / numba_rate,
        "numba_batched_sweeps_per_second": numba_batched,
        "distinct_rows": int(compressed._XT.shape[1]),
        "numba_distinct_rows_sweeps_per_second": compressed_rate,
        "numpy_sweeps_per_second": numpy_rate,
        "numpy_ms_per_sweep": 1e3 / numpy_rate,
        "ratio": numba_rate / numpy_rate,
        "goal_ms_per_sweep": GOAL_MS_PER_SWEEP,
        "meets_goal": 1e3 / numba_rate <= GOAL_MS_PER_SWEEP,
        "thread_rows": [{"threads": c, "numba_sweeps_per_second": rates[c][0],
                         "numba_batched_sweeps_per_second": rates[c][1], "speedup": rates[c][0] / numba_rate,
                         "batched_speedup": rates[c][1] / numba_batched} for c in counts],
    }
