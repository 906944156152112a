"""`bench frankwolfe`: seconds per Frank-Wolfe insertion against seconds per CD epoch at the
same hidden-layer size, on the bundled binarised MNIST (Nv = 784), measured in one run.

Ping, Liu & Ihler (2016, §4) report that "the running time of the FW procedure is at most
twice as CD for the same number of hidden units" (CD-10, 200 epochs on MNIST).  Per hidden
size n this bench

* trains CD-k (:class:`boltzlab.engine.rbm.RBMTrainer`, ``method="cd"``, mini-batches of
  ``batch_size``) for one untimed epoch (compiles or loads the kernels), then times
  ``repeats`` epochs (the trainer's own ``wall_time`` of its numba call, evaluations off)
  and keeps the best;
* continues Frank-Wolfe from that CD model (``init_rbm``, §3.2), takes one untimed
  insertion (burn-in of the persistent chains), then times ``insertions`` insertions into
  an RBM with n, n + 1, ... units (samples, eq. 9 by L-BFGS, eq. 10 until the visible means
  match the data's, at most ``bias_steps`` updates; evaluations off) and reports their mean
  and the mean number of eq.-10 updates;
* times the same insertions with the schedule used before eq. 10 was run to convergence
  (S = 500, 10 fixed eq.-10 steps) beside it: the price of the converged loop; and with the
  sampler in float64 instead of float32 (issue 18).

The ratio per row is seconds per insertion / seconds per CD epoch.  The paper's claim is
about whole runs, so the result also estimates the time to grow an RBM to n units by FW,
sum_{k < n} s(k) with s(k) = a + b k fitted to the measured insertion times (s(k) = s(n)
when only one size is measured, an upper bound), against ``cd_epochs`` CD epochs at n.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from ..progress import Reporter


def run(hidden: tuple[int, ...] = (100, 300, 500), *, insertions: int = 3, repeats: int = 2, cd_k: int = 10,
        batch_size: int = 100, learning_rate: float = 0.05, samples: int = 2000, bias_steps: int = 1000,
        bias_tol: float = 0.01, bias_lr: float = 0.5, gibbs_steps: int = 1, reg: float = 0.1, cd_epochs: int = 200, burn_in: int = 10,
        seed: int = 0, threads: int = 1, progress: Callable[[str], None] | None = None) -> dict:
    """JSON-ready timings; see the module docstring.  Default run: about a minute on 2 cores.

    ``threads`` = n > 1 runs the whole measurement on 1 thread and then on n threads
    (numba's and BLAS's, :mod:`boltzlab.engine.threads`) in the same process: the result's
    ``rows`` are the 1-thread ones, ``thread_rows`` the n-thread ones with ``speedup_cd``
    (CD epoch) and ``speedup_insertion`` (FW insertion) over 1 thread.

    ``progress`` (see :mod:`boltzlab.engine.progress`) advances between the timed calls, never
    inside one: per thread count and hidden size, the warm-up CD epoch, each timed CD epoch,
    and each of the three insertion runs' burn-in and timed insertions.
    """
    hidden = tuple(int(h) for h in hidden)
    if not hidden or min(hidden) < 1:
        raise ValueError(f"The 'hidden' parameter of bench frankwolfe must be a non-empty tuple of ints >= 1. Got {hidden!r}.")
    for name, value in (("insertions", insertions), ("repeats", repeats), ("cd_k", cd_k)):
        if int(value) < 1:
            raise ValueError(f"The '{name}' parameter of bench frankwolfe must be an int >= 1. Got {value!r}.")
    passes = (1,) if int(threads) <= 1 else (1, int(threads))
    say = Reporter(progress)
    per_size = 1 + repeats + 3 * (1 + insertions)  # CD warm-up and epochs; 3 schedules' burn-in and insertions
    say.expect(len(passes) * len(hidden) * per_size)
    kw = dict(hidden=hidden, insertions=insertions, repeats=repeats, cd_k=cd_k, batch_size=batch_size,
              learning_rate=learning_rate, samples=samples, bias_steps=bias_steps, bias_tol=bias_tol,
              bias_lr=bias_lr, gibbs_steps=gibbs_steps, reg=reg, cd_epochs=cd_epochs, burn_in=burn_in, seed=seed)
    if len(passes) > 1:
        from threadpoolctl import threadpool_limits

        from .. import threads as engine_threads

        out = {}
        for count in passes:
            with threadpool_limits(limits=count), engine_threads.using(count):
                out[count] = _measure(**kw, say=say)
        result = out[1]
        many = out[int(threads)]["rows"]
        for one, row in zip(result["rows"], many):
            row["threads"] = int(threads)
            row["speedup_cd"] = one["cd_seconds_per_epoch"] / row["cd_seconds_per_epoch"]
            row["speedup_insertion"] = one["fw_seconds_per_insertion"] / row["fw_seconds_per_insertion"]
        result["thread_rows"] = many
        return result
    return _measure(**kw, say=say)


def _measure(hidden: tuple[int, ...], *, insertions: int, repeats: int, cd_k: int, batch_size: int,
             learning_rate: float, samples: int, bias_steps: int, bias_tol: float, bias_lr: float,
             gibbs_steps: int, reg: float, cd_epochs: int, burn_in: int, seed: int, say: Reporter) -> dict:
    """:func:`run` on the threads it is given (one pass), advancing ``say`` as it goes."""
    from ..frankwolfe import FrankWolfeTrainer
    from ..images import mnist
    from ..rbm import RBMTrainer

    V = np.asarray(mnist().X_train, dtype=np.float64)
    rows = []
    t_start = time.perf_counter()
    for n_hidden in hidden:
        cd = RBMTrainer(V, n_hidden, method="cd", k=cd_k, batch_size=batch_size, learning_rate=learning_rate,
                        step_unit="epoch", evaluate="none", max_epochs=10**6, seed=seed)
        cd.step()  # compile / load from cache, and a model worth continuing from
        say.unit()
        epochs = []
        for _ in range(repeats):
            epochs.append(cd.step()["wall_time"])
            say.unit()
        cd_s = min(epochs)
        W, b_vis, b_hid = cd.rbm.W, cd.rbm.b_vis, cd.rbm.b_hid

        def insertions_from_cd(S: int, steps: int, tol: float, dtype: str = "float32") -> list:
            fw = FrankWolfeTrainer(V, max_hidden=n_hidden + insertions + 1, samples=S, reg=reg, bias_lr=bias_lr,
                                   bias_steps=steps,
                                   bias_tol=tol, gibbs_steps=gibbs_steps, evaluate="none", seed=seed,
                                   init_rbm=(W, b_vis, b_hid), burn_in=burn_in, dtype=dtype)
            fw.step()  # burn-in and compile
            say.unit()
            records = []
            for _ in range(insertions):
                records.append(fw.step())
                say.unit()
            return records

        records = insertions_from_cd(samples, bias_steps, bias_tol)
        fw_s = float(np.mean([r["wall_time"] for r in records]))
        fixed_s = float(np.mean([r["wall_time"] for r in insertions_from_cd(500, 10, 0.0)]))  # eta as set
        f64_s = float(np.mean([r["wall_time"] for r in insertions_from_cd(samples, bias_steps, bias_tol, "float64")]))
        rows.append({
            "n_hidden": n_hidden, "n_visible": int(V.shape[1]), "n_train": int(V.shape[0]),
            "cd_k": cd_k, "batch_size": batch_size, "cd_seconds_per_epoch": cd_s,
            "fw_seconds_per_insertion": fw_s, "ratio_insertion_to_epoch": fw_s / cd_s,
            "fw_inner_iterations": float(np.mean([r["inner_iterations"] for r in records])),
            "fw_bias_updates": float(np.mean([r["bias_updates"] for r in records])),
            "fw_bias_converged": float(np.mean([r["bias_converged"] for r in records])),
            "fw_fixed10_seconds_per_insertion": fixed_s,
            "fw_float64_seconds_per_insertion": f64_s, "float32_speedup": f64_s / fw_s,
            "samples": samples, "bias_steps": bias_steps, "bias_tol": bias_tol, "gibbs_steps": gibbs_steps,
        })
    sizes = np.array([r["n_hidden"] for r in rows], dtype=float)
    times = np.array([r["fw_seconds_per_insertion"] for r in rows])
    if len(set(sizes.tolist())) >= 2:
        b, a = np.polyfit(sizes, times, 1)
        a, b = max(float(a), 0.0), max(float(b), 0.0)
        fit = "s(k) = a + b k fitted to the measured sizes"
    else:
        a, b = float(times[0]), 0.0
        fit = "s(k) = s(n) (one size measured: an upper bound when s grows with k)"
    for r in rows:
        n = r["n_hidden"]
        total_fw = n * a + b * n * (n - 1) / 2.0
        r["fw_seconds_to_grow_estimate"] = total_fw
        r["cd_seconds_for_epochs"] = cd_epochs * r["cd_seconds_per_epoch"]
        r["ratio_fw_run_to_cd_run"] = total_fw / r["cd_seconds_for_epochs"]
    return {
        "rows": rows, "cd_epochs": cd_epochs, "fit": fit, "fit_a_seconds": a, "fit_b_seconds_per_unit": b,
        "total_seconds": time.perf_counter() - t_start,
        "note": ("per insertion: samples + L-BFGS on eq. 9 + eq. 10 to convergence, evaluations off; fixed10: "
                 "S = 500 and 10 fixed eq.-10 steps (the schedule before issue 16); CD epoch: the trainer's "
                 "numba call; all on the bundled MNIST training split, same process"),
    }


def format_table(result: dict) -> str:
    """A plain-text table of :func:`run`'s rows."""
    lines = [f"{'hidden':>6} {'CD epoch s':>11} {'FW insert s':>12} {'eq.10 upd':>9} {'fixed10 s':>9} {'f64 s':>7} {'ratio':>7} "
             f"{'FW grow s':>10} {'CD run s':>9} {'ratio':>7}"]
    for r in result["rows"]:
        lines.append(f"{r['n_hidden']:>6} {r['cd_seconds_per_epoch']:>11.3f} {r['fw_seconds_per_insertion']:>12.3f} "
                     f"{r['fw_bias_updates']:>9.0f} {r['fw_fixed10_seconds_per_insertion']:>9.3f} "
                     f"{r['fw_float64_seconds_per_insertion']:>7.3f} "
                     f"{r['ratio_insertion_to_epoch']:>7.3f} {r['fw_seconds_to_grow_estimate']:>10.1f} "
                     f"{r['cd_seconds_for_epochs']:>9.1f} {r['ratio_fw_run_to_cd_run']:>7.3f}")
    lines.append(f"(CD run = {result['cd_epochs']} epochs of CD-{result['rows'][0]['cd_k']}; {result['fit']})")
    return "\n".join(lines)
