"""`bench tap`: TAP sweeps per second (Algorithm 1, K chains at once) on MNIST-sized binary
RBMs, this engine against the best plain NumPy/BLAS implementation written here, both
measured in the same run, and against the machine's float64 matrix-multiply rate.

One sweep is a hidden and a visible half-step: four products (K x Nv)(Nv x Nh) or
(K x Nh)(Nh x Nv) -- a_v W, c_v W^2, a_h W^T, c_h (W^2)^T -- plus K (Nv + Nh) sigmoids and
the per-chain convergence test.  Both implementations run the same number of sweeps on all
K chains (tol = 0, so no chain retires) from the same data rows.  Timings are the best of
``repeats`` (the machine has 2 cores shared with other work).
"""

from __future__ import annotations

import time

import numpy as np
import scipy.special


def numpy_tap_sweeps(W: np.ndarray, b_vis: np.ndarray, b_hid: np.ndarray, init_vis: np.ndarray,
                     n_sweeps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Algorithm 1 for binary units in NumPy: preallocated buffers, BLAS products with out=,
    in-place ufuncs (scipy.special.expit) and no temporaries in the loop.

    x_h = b_hid + a_v W - (c_v W^2)(a_h - 1/2) is U + B - A/2 with A = -c_v W^2 and
    B = A a_h + a_v W (eqs. 33-34, C.3).  Returns (a_v, c_v, a_h, c_h, mean squared change).
    """
    K, n_vis = init_vis.shape
    n_hid = W.shape[1]
    W2 = W * W
    WT = np.ascontiguousarray(W.T)
    W2T = np.ascontiguousarray(W2.T)
    av, cv = init_vis.copy(), np.zeros((K, n_vis))
    ah, ch = np.zeros((K, n_hid)), np.zeros((K, n_hid))
    G_h, S_h, new_h = np.empty((K, n_hid)), np.empty((K, n_hid)), np.empty((K, n_hid))
    G_v, S_v, new_v = np.empty((K, n_vis)), np.empty((K, n_vis)), np.empty((K, n_vis))
    change = np.empty(K)
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
    from engine.rbm import RBMTrainer

    trainer = RBMTrainer(V, n_hidden, step_unit="epoch", evaluate="none", max_epochs=epochs, seed=0)
    trainer.run()
    rbm = trainer.rbm  # float64 parameters, whatever the training precision
    return rbm.W, rbm.b_vis, rbm.b_hid


def run(hidden: tuple[int, ...] = (100, 500), K: int = 100, *, n_sweeps: int = 40, repeats: int = 7,
        train_epochs: int = 1, threads: int | None = 1) -> dict:
    """JSON-ready sweep rates for each Nh in ``hidden``.

    Per row: ``engine_sweeps_per_s``, ``numpy_sweeps_per_s``, ``ratio`` (engine / NumPy),
    ``matmul_gflops`` (the best float64 rate of the four products of a sweep, timed alone),
    ``engine_gflops`` (8 K Nv Nh flops per sweep over the engine's time) and
    ``fraction_of_matmul`` (engine_gflops / matmul_gflops: 1 would mean the sigmoids and
    bookkeeping cost nothing), ``max_abs_difference`` between the two implementations'
    magnetizations, and the engine's time to convergence at the paper's tol = 1e-8 from
    the same rows (``converge_seconds``, ``converge_sweeps_median``).
    ``threads`` limits the BLAS threads of every library (threadpoolctl); None keeps the
    libraries' defaults.  The default is 1: on this 2-core machine shared with other work,
    OpenBLAS's default two threads spin against the other load and multiplied 5-8 GFLOPS
    where one thread did 33-37 (measured), so one thread is the best case for both sides.
    """
    from contextlib import nullcontext

    import scipy.linalg  # noqa: F401 -- load scipy's OpenBLAS (numba's np.dot calls it) before limiting
    from threadpoolctl import threadpool_limits

    from engine import tap
    from engine.images import mnist

    data = mnist()
    V = np.asarray(data.X_train, dtype=np.float64)
    init = np.ascontiguousarray(V[:K])
    rows = []
    limit = nullcontext() if threads is None else threadpool_limits(limits=threads)
    with limit:
        for n_hidden in hidden:
            W, b_vis, b_hid = _trained_rbm(n_hidden, V, train_epochs)
            n_vis = W.shape[0]

            def engine():
                return tap.tap_fixed_points(W, b_vis, b_hid, init, tol=0.0, max_iter=n_sweeps)

            def numpy_ref():
                return numpy_tap_sweeps(W, b_vis, b_hid, init, n_sweeps)

            got, want = engine(), numpy_ref()  # compile / warm caches, and check agreement
            diff = max(float(np.abs(got.a_vis - want[0]).max()), float(np.abs(got.a_hid - want[2]).max()))
            engine_s = _best_of(engine, repeats) / n_sweeps
            numpy_s = _best_of(numpy_ref, repeats) / n_sweeps
            W2, WT = W * W, np.ascontiguousarray(W.T)
            W2T = np.ascontiguousarray(W2.T)
            A = np.ascontiguousarray(init)
            H = np.random.default_rng(0).random((K, n_hidden))
            out_h, out_v = np.empty((K, n_hidden)), np.empty((K, n_vis))

            def products():
                for _ in range(n_sweeps):
                    np.dot(A, W, out=out_h)
                    np.dot(A, W2, out=out_h)
                    np.dot(H, WT, out=out_v)
                    np.dot(H, W2T, out=out_v)

            matmul_s = _best_of(products, repeats) / n_sweeps
            flops = 8.0 * K * n_vis * n_hidden
            t0 = time.perf_counter()
            conv = tap.tap_fixed_points(W, b_vis, b_hid, init, tol=tap.DEFAULT_TOL, max_iter=tap.DEFAULT_MAX_ITER)
            converge_s = time.perf_counter() - t0
            rows.append({
                "n_visible": n_vis, "n_hidden": n_hidden, "K": K, "n_sweeps": n_sweeps, "repeats": repeats,
                "threads": threads,
                "engine_sweeps_per_s": 1.0 / engine_s, "numpy_sweeps_per_s": 1.0 / numpy_s,
                "ratio": numpy_s / engine_s,
                "matmul_gflops": flops / matmul_s / 1e9, "engine_gflops": flops / engine_s / 1e9,
                "numpy_gflops": flops / numpy_s / 1e9, "fraction_of_matmul": matmul_s / engine_s,
                "max_abs_difference": diff,
                "converge_seconds": converge_s, "converge_sweeps_median": float(np.median(conv.iterations)),
                "converged_fraction": float(conv.converged.mean()),
            })
    return {"rows": rows}


if __name__ == "__main__":  # python -m engine.experiments.bench_tap [threads | default]
    import json
    import sys

    arg = sys.argv[1] if len(sys.argv) > 1 else "1"  # BLAS threads, or "default"
    print(json.dumps(run(threads=None if arg == "default" else int(arg)), indent=2))
