"""`bench tap`: TAP sweeps per second (Algorithm 1, K chains at once) on MNIST-sized binary
RBMs, this engine in float32 and float64 against the best plain NumPy/BLAS implementation
written here (in both dtypes), all measured in the same run, and against the machine's
SGEMM / DGEMM rate on the sweep's own products.

One sweep is a hidden and a visible half-step: four products (K x Nv)(Nv x Nh) or
(K x Nh)(Nh x Nv) -- a_v W, c_v W^2, a_h W^T, c_h (W^2)^T -- plus K (Nv + Nh) sigmoids and
the per-chain convergence test.  Both implementations run the same number of sweeps on all
K chains (tol = 0, so no chain retires) from the same data rows.  Timings are the best of
``repeats`` (the machine has 2 cores shared with other work).
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import scipy.special
from numba import njit, prange

from ..kernels.common import matmul
from ..kernels.common import col_block, col_blocks
from ..progress import Reporter


def numpy_tap_sweeps(W: np.ndarray, b_vis: np.ndarray, b_hid: np.ndarray, init_vis: np.ndarray,
                     n_sweeps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Algorithm 1 for binary units in NumPy: preallocated buffers, BLAS products with out=,
    in-place ufuncs (scipy.special.expit) and no temporaries in the loop.  Runs in the dtype
    of ``init_vis`` (W is converted to it), float32 or float64.

    x_h = b_hid + a_v W - (c_v W^2)(a_h - 1/2) is U + B - A/2 with A = -c_v W^2 and
    B = A a_h + a_v W (eqs. 33-34, C.3).  Returns (a_v, c_v, a_h, c_h, mean squared change).
    """
    K, n_vis = init_vis.shape
    n_hid = W.shape[1]
    dt = init_vis.dtype
    W = np.ascontiguousarray(W, dtype=dt)
    b_vis, b_hid = np.asarray(b_vis, dtype=dt), np.asarray(b_hid, dtype=dt)
    W2 = W * W
    WT = np.ascontiguousarray(W.T)
    W2T = np.ascontiguousarray(W2.T)
    av, cv = init_vis.copy(), np.zeros((K, n_vis), dt)
    ah, ch = np.zeros((K, n_hid), dt), np.zeros((K, n_hid), dt)
    G_h, S_h, new_h = (np.empty((K, n_hid), dt) for _ in range(3))
    G_v, S_v, new_v = (np.empty((K, n_vis), dt) for _ in range(3))
    change = np.empty(K, dt)
    for _ in range(n_sweeps):
        np.dot(av, W, out=G_h)
        np.dot(cv, W2, out=S_h)
        np.subtract(ah, 0.5, out=new_h)
        new_h *= S_h
        np.subtract(G_h, new_h, out=new_h)
        new_h += b_hid
        scipy.special.expit(new_h, out=new_h)
        np.subtract(new_h, ah, out=G_h)
        change[:] = np.einsum("ij,ij->i", G_h, G_h)
        ah, new_h = new_h, ah
        np.subtract(1.0, ah, out=ch)
        ch *= ah
        np.dot(ah, WT, out=G_v)
        np.dot(ch, W2T, out=S_v)
        np.subtract(av, 0.5, out=new_v)
        new_v *= S_v
        np.subtract(G_v, new_v, out=new_v)
        new_v += b_vis
        scipy.special.expit(new_v, out=new_v)
        np.subtract(new_v, av, out=G_v)
        change += np.einsum("ij,ij->i", G_v, G_v)
        av, new_v = new_v, av
        np.subtract(1.0, av, out=cv)
        cv *= av
    return av, cv, ah, ch, change / (n_vis + n_hid)


def _best_of(fn, repeats: int) -> float:
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _trained_rbm(n_hidden: int, V: np.ndarray, epochs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A briefly trained RBM: ``epochs`` of PCD-1 (engine.rbm.RBMTrainer) on the MNIST subset."""
    from ..rbm import RBMTrainer

    trainer = RBMTrainer(V, n_hidden, step_unit="epoch", evaluate="none", max_epochs=epochs, seed=0)
    trainer.run()
    rbm = trainer.rbm  # float64 parameters, whatever the training precision
    return rbm.W, rbm.b_vis, rbm.b_hid


@njit(cache=True, nogil=True)
def _blocked_products(A, W, W2, H, WT, W2T, out_h, out_v, n_sweeps):
    """The four products of ``n_sweeps`` sweeps on the engine's column blocks, in parallel:
    the floor of :func:`boltzlab.engine.kernels.tap.tap_iterate_blocks` on more than one
    thread (same blocks, same single-threaded BLAS calls, two forks per sweep)."""
    for _ in range(n_sweeps):
        _column_products(A, W, W2, out_h)
        _column_products(H, WT, W2T, out_v)


@njit(cache=True, nogil=True, parallel=True)
def _column_products(X, Wm, W2m, out):
    """out = X Wm then X W2m on the :func:`col_blocks` of out's columns, in parallel."""
    m = out.shape[1]
    nb = col_blocks(m)
    for b in prange(nb):
        j0, j1 = col_block(m, nb, b)
        matmul(X, Wm[:, j0:j1], out[:, j0:j1])
        matmul(X, W2m[:, j0:j1], out[:, j0:j1])


def run(hidden: tuple[int, ...] = (100, 500), K: int = 100, *, n_sweeps: int = 40, repeats: int = 7,
        train_epochs: int = 1, threads: int | None = 1, progress: Callable[[str], None] | None = None) -> dict:
    """JSON-ready sweep rates for each Nh in ``hidden`` and each thread count.

    ``threads`` = n >= 1 measures every variant on 1 thread and, when n > 1, on n threads
    too, interleaved in the same run (one row per Nh and thread count, key ``threads``): the
    engine on n numba threads (:mod:`boltzlab.engine.threads`), the NumPy reference and the
    GEMM floors with n BLAS threads (threadpoolctl).  ``threads=None`` is one pass with the
    libraries' default threads.

    Per row, for the float64 engine (keys kept from before): ``engine_sweeps_per_s``,
    ``numpy_sweeps_per_s`` (the float64 NumPy reference), ``ratio`` (engine / NumPy),
    ``matmul_gflops`` (= ``dgemm_gflops``: the float64 GEMM floor of the four products of a
    sweep, see below), ``engine_gflops`` (8 K Nv Nh flops per sweep over the engine's time),
    ``fraction_of_matmul`` (engine_gflops / matmul_gflops: 1 would mean the sigmoids and
    bookkeeping cost nothing), ``max_abs_difference`` between the two implementations'
    magnetizations, and the engine's time to convergence at the paper's tol = 1e-8 from the
    same rows (``converge_seconds``, ``converge_sweeps_median``).  For float32:
    ``engine_float32_sweeps_per_s``, ``numpy_float32_sweeps_per_s``, ``sgemm_gflops``,
    ``engine_float32_gflops``, ``float32_fraction_of_sgemm``, ``float32_vs_numpy_float64``,
    ``float32_speedup`` (float32 engine / float64 engine), ``max_abs_difference_float32``
    (float32 engine vs float64 engine after ``n_sweeps``), ``converge_float32_seconds``.
    ``float64_fraction_of_dgemm`` repeats ``fraction_of_matmul`` under the new naming.

    The n-thread GEMM floor of a dtype is the faster of two ways to run the sweep's four
    products on n threads: BLAS's own n threads on whole products (``blas_sgemm_gflops``,
    ``blas_dgemm_gflops``) and the engine's column blocks on n numba threads with
    single-threaded BLAS (``blocked_sgemm_gflops``, ``blocked_dgemm_gflops``).  Thread
    rows: ``speedup_float32`` / ``speedup_float64`` (engine rate over its 1-thread rate in
    the same run), ``sgemm_speedup`` (the floor's likewise).  Every variant is timed in the
    same process, interleaved repeat by repeat.

    ``progress`` (see :mod:`boltzlab.engine.progress`) advances between the timed calls, never
    inside one: per Nh, the training, the warm-up, each variant's timing per repeat and thread
    count, and each dtype's run to convergence per thread count.
    """
    from contextlib import nullcontext

    import scipy.linalg  # noqa: F401 -- load scipy's OpenBLAS (numba's np.dot calls it) before limiting
    from threadpoolctl import threadpool_limits

    from .. import tap
    from .. import threads as engine_threads
    from ..images import mnist

    counts = [None] if threads is None else sorted({1, int(threads)})
    say = Reporter(progress)
    variants = 4 * 2  # the engine, NumPy, BLAS's products and the blocked products; float32 and float64
    say.expect(len(hidden) * (2 + repeats * len(counts) * variants + len(counts) * 2))
    data = mnist()
    V = np.asarray(data.X_train, dtype=np.float64)
    init = np.ascontiguousarray(V[:K])
    rows = []

    def limits(count):
        if count is None:
            return nullcontext(), nullcontext()
        return threadpool_limits(limits=count), engine_threads.using(count)

    def own_blas(name, count):
        """NumPy's products on BLAS's own ``count`` threads: the engine keeps every BLAS at one
        (:func:`boltzlab.engine.threads.single_blas`), so the NumPy and BLAS rows set theirs per call."""
        if count is None or not name.startswith(("numpy_", "matmul_")):
            return nullcontext()
        return threadpool_limits(limits=count)

    for n_hidden in hidden:
        W, b_vis, b_hid = _trained_rbm(n_hidden, V, train_epochs)
        say.unit()
        n_vis = W.shape[0]
        flops = 8.0 * K * n_vis * n_hidden
        fns = {}
        for dtype in ("float32", "float64"):
            start = init.astype(dtype)

            def engine(dtype=dtype):
                return tap.tap_fixed_points(W, b_vis, b_hid, init, tol=0.0, max_iter=n_sweeps, dtype=dtype)

            def numpy_ref(start=start):
                return numpy_tap_sweeps(W, b_vis, b_hid, start, n_sweeps)

            Wd = W.astype(dtype)
            W2, WT = Wd * Wd, np.ascontiguousarray(Wd.T)
            W2T = np.ascontiguousarray(W2.T)
            H = np.random.default_rng(0).random((K, n_hidden)).astype(dtype)
            out_h, out_v = np.empty((K, n_hidden), dtype), np.empty((K, n_vis), dtype)

            def matmul(A=start, Wd=Wd, W2=W2, WT=WT, W2T=W2T, H=H, out_h=out_h, out_v=out_v):
                for _ in range(n_sweeps):
                    np.dot(A, Wd, out=out_h)
                    np.dot(A, W2, out=out_h)
                    np.dot(H, WT, out=out_v)
                    np.dot(H, W2T, out=out_v)

            def blocked(A=start, Wd=Wd, W2=W2, WT=WT, W2T=W2T, H=H, out_h=out_h, out_v=out_v):
                engine_threads.single_blas()
                _blocked_products(A, Wd, W2, H, WT, W2T, out_h, out_v, n_sweeps)

            fns[f"engine_{dtype}"], fns[f"numpy_{dtype}"] = engine, numpy_ref
            fns[f"matmul_{dtype}"], fns[f"blocked_{dtype}"] = matmul, blocked
        got, want = fns["engine_float64"](), fns["numpy_float64"]()  # compile / warm caches, check agreement
        diff = max(float(np.abs(got.a_vis - want[0]).max()), float(np.abs(got.a_hid - want[2]).max()))
        got32 = fns["engine_float32"]()
        diff32 = max(float(np.abs(got32.a_vis - got.a_vis).max()), float(np.abs(got32.a_hid - got.a_hid).max()))
        best = {(count, name): np.inf for count in counts for name in fns}
        for count in counts:
            blas, numba_threads = limits(count)
            with blas, numba_threads:
                for fn in fns.values():
                    fn()
        say.unit()
        for _ in range(repeats):
            for count in counts:
                blas, numba_threads = limits(count)
                with blas, numba_threads:
                    for name, fn in fns.items():
                        with own_blas(name, count):
                            t0 = time.perf_counter()
                            fn()
                            best[count, name] = min(best[count, name], (time.perf_counter() - t0) / n_sweeps)
                        say.unit()
        for count in counts:
            converge = {}
            blas, numba_threads = limits(count)
            with blas, numba_threads:
                for dtype in ("float32", "float64"):
                    t0 = time.perf_counter()
                    conv = tap.tap_fixed_points(W, b_vis, b_hid, init, tol=tap.DEFAULT_TOL,
                                                max_iter=tap.DEFAULT_MAX_ITER, dtype=dtype)
                    converge[dtype] = (time.perf_counter() - t0, conv)
                    say.unit()
            b = {name: best[count, name] for name in fns}
            one = {name: best[counts[0], name] for name in fns}
            e64, e32 = b["engine_float64"], b["engine_float32"]
            n64, n32 = b["numpy_float64"], b["numpy_float32"]
            m64 = min(b["matmul_float64"], b["blocked_float64"])
            m32 = min(b["matmul_float32"], b["blocked_float32"])
            m32_one = min(one["matmul_float32"], one["blocked_float32"])
            conv64 = converge["float64"][1]
            rows.append({
                "n_visible": n_vis, "n_hidden": n_hidden, "K": K, "n_sweeps": n_sweeps, "repeats": repeats,
                "threads": count,
                "engine_sweeps_per_s": 1.0 / e64, "numpy_sweeps_per_s": 1.0 / n64, "ratio": n64 / e64,
                "matmul_gflops": flops / m64 / 1e9, "engine_gflops": flops / e64 / 1e9,
                "numpy_gflops": flops / n64 / 1e9, "fraction_of_matmul": m64 / e64,
                "max_abs_difference": diff,
                "converge_seconds": converge["float64"][0], "converge_sweeps_median": float(np.median(conv64.iterations)),
                "converged_fraction": float(conv64.converged.mean()),
                "dgemm_gflops": flops / m64 / 1e9, "sgemm_gflops": flops / m32 / 1e9,
                "blas_sgemm_gflops": flops / b["matmul_float32"] / 1e9,
                "blas_dgemm_gflops": flops / b["matmul_float64"] / 1e9,
                "blocked_sgemm_gflops": flops / b["blocked_float32"] / 1e9,
                "blocked_dgemm_gflops": flops / b["blocked_float64"] / 1e9,
                "float64_fraction_of_dgemm": m64 / e64,
                "engine_float32_sweeps_per_s": 1.0 / e32, "numpy_float32_sweeps_per_s": 1.0 / n32,
                "engine_float32_gflops": flops / e32 / 1e9, "float32_fraction_of_sgemm": m32 / e32,
                "float32_vs_numpy_float64": n64 / e32, "float32_speedup": e64 / e32,
                "speedup_float32": one["engine_float32"] / e32, "speedup_float64": one["engine_float64"] / e64,
                "sgemm_speedup": m32_one / m32,
                "max_abs_difference_float32": diff32,
                "converge_float32_seconds": converge["float32"][0],
                "converge_float32_sweeps_median": float(np.median(converge["float32"][1].iterations)),
            })
    return {"rows": rows}


if __name__ == "__main__":  # python -m boltzlab.engine.experiments.bench_tap [threads | default]
    import json
    import sys

    arg = sys.argv[1] if len(sys.argv) > 1 else "1"  # BLAS threads, or "default"
    print(json.dumps(run(threads=None if arg == "default" else int(arg)), indent=2))
