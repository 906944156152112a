"""`boltzlab bench rbm`: seconds per PCD-1 epoch on binarised MNIST, this engine in float32
and float64 against scikit-learn's BernoulliRBM fed float32 and float64 input (it keeps the
input's dtype), all measured in the same run; each engine time against the floor its matrix
products set (their FLOPs over the SGEMM / DGEMM rate measured on the same shapes); and the
time of an AIS estimate of log Z."""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
from numba import njit, prange

from ..kernels.common import col_block, col_blocks, matmul
from ..kernels.rbm import weight_blocks
from ..progress import Reporter

DTYPES = ("float32", "float64")


@njit(cache=True, nogil=True)
def _epoch_products(V, W, WT, n_batches, batch_size, recon_rows, L, R, H, Hs, Vr, G):
    """Only the matrix products of a PCD-1 epoch of engine.kernels.rbm.train_batches, with
    the same shapes, BLAS (numba's np.dot) and output buffers: the floor of an epoch."""
    nb = batch_size
    for _ in range(n_batches):
        np.dot(V[:nb], W, H)  # positive phase P(h|batch)
        np.dot(Hs, WT, Vr)  # reconstruction error on RECON_ROWS rows
        np.dot(H, WT, L[nb:])  # the chains' visible half-step
        np.dot(L[nb:], W, H)  # P(h|chains)
        np.dot(L.T, R, G)  # the gradient of both phases


@njit(cache=True, nogil=True, parallel=True)
def _dot_blocks(A, B, out):
    """out = A B on the fixed column blocks of out in parallel (single-threaded BLAS per block)."""
    m = out.shape[1]
    nb = col_blocks(m)
    for b in prange(nb):
        j0, j1 = col_block(m, nb, b)
        matmul(A, B[:, j0:j1], out[:, j0:j1])


@njit(cache=True, nogil=True, parallel=True)
def _gradient_blocks(L, R, G, nb):
    """G = L^T R on nb fixed blocks of G's rows, each one product of L's columns in place."""
    n = L.shape[1]
    for b in prange(nb):
        lo = b * n // nb
        hi = (b + 1) * n // nb
        matmul(L[:, lo:hi].T, R, G[lo:hi])


@njit(cache=True, nogil=True)
def _epoch_products_blocked(V, W, WT, n_batches, batch_size, recon_rows, L, R, H, Hs, Vr, G):
    """:func:`_epoch_products` on the blocks of engine.kernels.rbm.train_batches, in parallel
    (the engine's own way to run its products on n threads)."""
    nb = batch_size
    for _ in range(n_batches):
        _dot_blocks(V[:nb], W, H)
        _dot_blocks(Hs, WT, Vr)
        _dot_blocks(H, WT, L[nb:])
        _dot_blocks(L[nb:], W, H)
        _gradient_blocks(L, R, G, weight_blocks(W.shape[0]))


def product_flops(n_visible: int, n_hidden: int, batch_size: int, recon_rows: int) -> float:
    """FLOPs (2 per multiply-add) of the five products of one PCD-1 batch (see above)."""
    return 2.0 * n_visible * n_hidden * (5 * batch_size + recon_rows)


def _floor_seconds(n_visible: int, n_hidden: int, batch_size: int, n_batches: int, dtype: str, repeats: int,
                   threads: int | None = None, blocked: bool = False) -> float:
    """Best time of an epoch's products alone: BLAS's own ``threads`` (None: its default) on
    whole products, or (``blocked``) the engine's blocks on ``threads`` numba threads."""
    from contextlib import nullcontext

    from threadpoolctl import threadpool_limits

    from .. import threads as engine_threads
    from ..kernels.rbm import RECON_ROWS

    rng = np.random.default_rng(0)
    V = (rng.random((batch_size, n_visible)) < 0.3).astype(dtype)
    W = rng.normal(0, 0.01, (n_visible, n_hidden)).astype(dtype)
    WT = np.ascontiguousarray(W.T)
    L = np.ascontiguousarray(np.vstack([V, V]))
    R = rng.random((2 * batch_size, n_hidden)).astype(dtype)
    H = rng.random((batch_size, n_hidden)).astype(dtype)
    Hs = np.ascontiguousarray(H[:RECON_ROWS])
    Vr = np.empty((Hs.shape[0], n_visible), dtype)
    G = np.empty((n_visible, n_hidden), dtype)
    args = (V, W, WT, n_batches, batch_size, RECON_ROWS, L, R, H, Hs, Vr, G)
    if blocked:
        fn = _epoch_products_blocked
        limit = engine_threads.using(threads or engine_threads.threads())
    else:
        fn = _epoch_products
        limit = nullcontext() if threads is None else threadpool_limits(limits=threads)
    best = np.inf
    with limit:
        if blocked:
            engine_threads.single_blas()
        fn(*args[:3], 1, *args[4:])  # compile / warm
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn(*args)
            best = min(best, time.perf_counter() - t0)
    return best


def run(hidden: tuple[int, ...] = (100, 500), *, batch_size: int = 100, learning_rate: float = 0.05,
        repeats: int = 3, ais_runs: int = 100, ais_schedule: str = "default", threads: int = 1,
        progress: Callable[[str], None] | None = None) -> dict:
    """JSON-ready timings; ``ais_schedule`` is "default" (14,501 betas) or "live" (1,001).

    ``threads`` = n > 1 times every variant on 1 and on n threads in the same run (one row
    per Nh and thread count, key ``threads``): the engine on n numba threads
    (:mod:`boltzlab.engine.threads`), scikit-learn and the BLAS floor with n BLAS threads
    (threadpoolctl).  The floor of a dtype on n threads is the faster of BLAS's own n threads
    on whole products (``blas_sgemm_floor_seconds``, ...) and the engine's blocks on n numba
    threads (``blocked_sgemm_floor_seconds``, ...); ``speedup_float32`` /
    ``speedup_float64`` are the engine's 1-thread time over its n-thread time, same run,
    ``sgemm_floor_speedup`` the floor's.  AIS (not threaded) is timed in the 1-thread row.

    The engine's epoch is timed as the trainer's own ``wall_time`` of its numba call (the
    35 mini-batch updates); the pseudo-likelihood and log-likelihood evaluations the
    trainer schedules between epochs are excluded, as scikit-learn's ``fit`` computes none.
    scikit-learn's epoch is ``BernoulliRBM(n_iter=1).fit`` (PCD-1 with ``batch_size``
    persistent chains, the same as the engine's).  Same settings (no momentum, no weight
    decay), best of ``repeats``, every variant in the same process, interleaved repeat by
    repeat so a burst of other load on the machine hits them alike.

    Per row: ``engine_float32_seconds``, ``engine_float64_seconds``,
    ``sklearn_float32_seconds``, ``sklearn_float64_seconds`` (per epoch);
    ``product_gflop_per_epoch`` (the five products per batch: P(h|batch), the
    reconstruction rows, the chains' visible half-step, P(h|chains), the two-phase
    gradient); ``sgemm_floor_seconds`` / ``dgemm_floor_seconds`` (those products alone, same
    shapes and BLAS) with ``sgemm_gflops`` / ``dgemm_gflops``; ``float32_floor_fraction`` =
    sgemm floor / engine float32 time (1 = the sigmoids, draws and updates cost nothing),
    ``float64_floor_fraction`` likewise; ``speedup_vs_sklearn_float32`` = sklearn float32 /
    engine float32.  Kept from before (float64 on both sides): ``engine_seconds_per_epoch``,
    ``sklearn_seconds_per_epoch``, ``ratio``.

    ``progress`` (see :mod:`boltzlab.engine.progress`) advances between the timed calls, never
    inside one: per Nh, each dtype's warm-up, each engine and scikit-learn epoch, each floor
    (two passes of BLAS and blocks per thread count and dtype) and the AIS estimate.
    """
    from sklearn.neural_network import BernoulliRBM

    from .. import rbm as rbm_module
    from ..images import mnist
    from ..kernels.rbm import RECON_ROWS

    if ais_schedule not in ("default", "live"):
        raise ValueError(f"The 'ais_schedule' parameter of bench rbm must be 'default' or 'live'. Got {ais_schedule!r}.")
    counts = sorted({1, int(threads)})
    say = Reporter(progress)
    epochs = repeats * len(counts) * len(DTYPES) * 2  # the engine's and scikit-learn's
    floors = 2 * len(counts) * len(DTYPES) * 2  # two passes of BLAS and blocks
    say.expect(len(hidden) * (len(DTYPES) + epochs + floors + 1))  # + the warm-ups and AIS, per Nh
    data = mnist()
    V = np.asarray(data.X_train, dtype=np.float64)
    inputs = {dtype: V.astype(dtype) for dtype in DTYPES}
    n, n_visible = V.shape
    n_batches = -(-n // batch_size)
    from contextlib import nullcontext

    from threadpoolctl import threadpool_limits

    from .. import threads as engine_threads

    def limits(count):
        return threadpool_limits(limits=count), engine_threads.using(count)

    rows = []
    for n_hidden in hidden:
        trainers = {}
        for dtype in DTYPES:
            trainers[dtype] = rbm_module.RBMTrainer(
                V, n_hidden, method="pcd", k=1, batch_size=batch_size, learning_rate=learning_rate,
                momentum=0.0, step_unit="epoch", evaluate="none", seed=0, max_epochs=10**6, dtype=dtype,
            )
            trainers[dtype].step()  # compile or load the kernels from the cache before timing
            say.unit()
        engine = {(c, dtype): np.inf for c in counts for dtype in DTYPES}
        sklearn = {(c, dtype): np.inf for c in counts for dtype in DTYPES}
        for _ in range(repeats):
            for count in counts:
                blas, numba_threads = limits(count)
                with blas, numba_threads:
                    for dtype in DTYPES:
                        engine[count, dtype] = min(engine[count, dtype], trainers[dtype].step()["wall_time"])
                        say.unit()
                        t0 = time.perf_counter()
                        with threadpool_limits(limits=count):
                            BernoulliRBM(n_components=n_hidden, batch_size=batch_size, learning_rate=learning_rate,
                                         n_iter=1, random_state=0).fit(inputs[dtype])
                        sklearn[count, dtype] = min(sklearn[count, dtype], time.perf_counter() - t0)
                        say.unit()
        flops = n_batches * product_flops(n_visible, n_hidden, batch_size, RECON_ROWS)
        blas_floor, blocked_floor = {}, {}
        for _ in range(2):  # interleaved, best of both passes
            for count in counts:
                for dtype in DTYPES:
                    for store, blocked in ((blas_floor, False), (blocked_floor, True)):
                        t = _floor_seconds(n_visible, n_hidden, batch_size, n_batches, dtype, max(2, repeats // 2),
                                           threads=count, blocked=blocked)
                        store[count, dtype] = min(store.get((count, dtype), np.inf), t)
                        say.unit()
        floor = {key: min(blas_floor[key], blocked_floor[key]) for key in blas_floor}
        rbm = trainers["float64"].rbm
        schedule = None if ais_schedule == "default" else rbm_module.AIS_SCHEDULE_LIVE
        rbm_module.ais_log_partition(rbm.W, rbm.b_vis, rbm.b_hid, n_runs=2, schedule=rbm_module.AIS_SCHEDULE_LIVE, seed=0)
        with nullcontext():
            t0 = time.perf_counter()
            estimate, spread = rbm_module.ais_log_partition(rbm.W, rbm.b_vis, rbm.b_hid, n_runs=ais_runs,
                                                            schedule=schedule, seed=0,
                                                            base_vis=trainers["float64"].base_vis)
            ais_s = time.perf_counter() - t0
        say.unit()
        for count in counts:
            e32, e64 = engine[count, "float32"], engine[count, "float64"]
            s32, s64 = sklearn[count, "float32"], sklearn[count, "float64"]
            f32, f64 = floor[count, "float32"], floor[count, "float64"]
            row = {
                "n_hidden": n_hidden, "n_train": int(n), "batch_size": batch_size, "threads": count,
                "engine_float32_seconds": e32, "engine_float64_seconds": e64,
                "sklearn_float32_seconds": s32, "sklearn_float64_seconds": s64,
                "speedup_vs_sklearn_float32": s32 / e32,
                "product_gflop_per_epoch": flops / 1e9,
                "sgemm_floor_seconds": f32, "dgemm_floor_seconds": f64,
                "blas_sgemm_floor_seconds": blas_floor[count, "float32"],
                "blas_dgemm_floor_seconds": blas_floor[count, "float64"],
                "blocked_sgemm_floor_seconds": blocked_floor[count, "float32"],
                "blocked_dgemm_floor_seconds": blocked_floor[count, "float64"],
                "sgemm_gflops": flops / f32 / 1e9, "dgemm_gflops": flops / f64 / 1e9,
                "float32_floor_fraction": f32 / e32,
                "float64_floor_fraction": f64 / e64,
                "speedup_float32": engine[1, "float32"] / e32, "speedup_float64": engine[1, "float64"] / e64,
                "sgemm_floor_speedup": floor[1, "float32"] / f32,
                "engine_seconds_per_epoch": e64, "sklearn_seconds_per_epoch": s64,
                "ratio": s64 / e64,
            }
            if count == 1:
                row.update({
                    "ais_runs": ais_runs, "ais_schedule": ais_schedule, "ais_betas": int(
                        (rbm_module.AIS_SCHEDULE_DEFAULT if schedule is None else schedule).shape[0]),
                    "ais_seconds": ais_s, "ais_seconds_per_run": ais_s / ais_runs, "ais_log_z": estimate,
                    "ais_spread": spread,
                })
            rows.append(row)
    return {"rows": rows, "note": "engine time excludes the trainer's scheduled evaluations; AIS (float64) on the "
                                  "float64-trained model, base rates from the training data"}


def format_table(result: dict) -> str:
    """The rows as a text table (milliseconds per epoch)."""
    lines = [f"{'Nh':>5} {'thr':>3} {'eng f32':>8} {'eng f64':>8} {'skl f32':>8} {'skl f64':>8} {'vs skl32':>8} "
             f"{'SGEMM':>7} {'DGEMM':>7} {'f32 floor':>9} {'f64 floor':>9}  AIS s/run"]
    for r in result["rows"]:
        lines.append(
            f"{r['n_hidden']:>5} {r['threads']:>3} {1e3 * r['engine_float32_seconds']:>8.1f} {1e3 * r['engine_float64_seconds']:>8.1f} "
            f"{1e3 * r['sklearn_float32_seconds']:>8.1f} {1e3 * r['sklearn_float64_seconds']:>8.1f} "
            f"{r['speedup_vs_sklearn_float32']:>7.2f}x {r['sgemm_gflops']:>7.1f} {r['dgemm_gflops']:>7.1f} "
            f"{100 * r['float32_floor_fraction']:>8.0f}% {100 * r['float64_floor_fraction']:>8.0f}%  "
            + (f"{r['ais_seconds_per_run']:.3f}" if "ais_seconds_per_run" in r else
               f"     {r['threads']} threads vs 1: f32 {r['speedup_float32']:.2f}x, f64 {r['speedup_float64']:.2f}x, "
               f"SGEMM floor {r['sgemm_floor_speedup']:.2f}x"))
    lines.append("ms per PCD-1 epoch; SGEMM/DGEMM in GFLOP/s on the epoch's product shapes; floor = products alone / engine time")
    return "\n".join(lines)
