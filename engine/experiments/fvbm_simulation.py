"""§5 of Nguyen & Wood (2016), headless: BSLM on simulated FVBM data, d = 5, 10, 15, 20.

For each d: one data set of n = 16,000 draws from an FVBM whose b0 and upper-triangular
M0 are N(0, 0.5) ("a single instance of n = 16,000 observations"), then R = 5 BSLM runs
from initial values drawn the same way, stopped when the increase of eq. 2.1 is below
tau = 1e-5.  The paper's average MSE is (qR)^-1 sum_r |theta_hat_r - theta_0|^2.

Beside the paper's numbers this reports what explains them: whether the MPLE exists at
all for the simulated data (see engine.fvbm.check_mple_exists), and the MSE an MPLE is
expected to have from sampling error alone, trace(H^-1 J H^-1) / q (sandwich covariance).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..data import check_mple_exists, simulate_fvbm
from ..fvbm import FVBMTrainer, mple, parameter_mse, sandwich_covariance
from ..progress import Reporter

PAPER_MSE = {5: 2.09e-6, 10: 5.96e-7, 15: 4.64e-7, 20: 2.89e-7}


@dataclass
class Settings:
    dims: tuple[int, ...] = (5, 10, 15, 20)
    n: int = 16_000
    repetitions: int = 5
    tol: float = 1e-5
    max_sweeps: int = 20_000
    seed: int = 2016
    variance: float = 0.5  # of b0 and the upper triangle of M0 (the paper: 0.5)

    @classmethod
    def quick(cls) -> "Settings":
        return cls(dims=(5, 10, 15, 20), n=4000, repetitions=2, tol=1e-3, max_sweeps=2000)


def run(settings: Settings, progress=None) -> dict:
    """Run the simulation; returns a JSON-ready dict with a row per d and the histories."""
    say = Reporter(progress)
    total, done = len(settings.dims) * settings.repetitions, 0
    rows, histories = [], {}
    for d in settings.dims:
        data = simulate_fvbm(d, settings.n, settings.seed + d, settings.variance)
        truth = data.truth
        try:
            check_mple_exists(data.X)
            exists, why = True, ""
        except ValueError as exc:
            exists, why = False, str(exc)
        mses, sweeps, seconds, monotone, curves = [], [], [], [], []
        for r in range(settings.repetitions):
            trainer = FVBMTrainer(
                data.X, tol=settings.tol, max_sweeps=settings.max_sweeps, init="random",
                seed=settings.seed + 1000 * d + r,
            )
            start_log_pl = trainer.log_pl
            t0 = time.perf_counter()
            records = trainer.run()
            seconds.append(time.perf_counter() - t0)
            curve = [start_log_pl] + [rec["log_pl"] for rec in records]
            curves.append(curve)
            mses.append(parameter_mse(trainer.b, trainer.M, truth))
            sweeps.append(trainer.sweep)
            monotone.append(trainer.first_decrease < 0)
            say(f"d={d} run {r + 1}/{settings.repetitions}: {trainer.sweep} sweeps, "
                f"{seconds[-1]:.1f} s, {trainer.status}")
            done += 1
            say.advance(done, total)
        row = {
            "d": d, "n": settings.n, "repetitions": settings.repetitions, "tol": settings.tol,
            "average_mse": float(np.mean(mses)), "paper_mse": PAPER_MSE.get(d),
            "mean_sweeps": float(np.mean(sweeps)), "max_sweeps_hit": int(sum(s >= settings.max_sweeps for s in sweeps)),
            "mean_seconds": float(np.mean(seconds)), "ms_per_sweep": 1e3 * float(np.sum(seconds) / np.sum(sweeps)),
            "all_monotone": bool(all(monotone)), "mple_exists": exists, "mple_note": why,
            "distinct_rows": int(len(np.unique(data.X, axis=0))),
        }
        if exists:
            estimate = mple(data.X, check=False)
            covariance = sandwich_covariance(data.X, estimate.b, estimate.M)
            row["mple_mse"] = parameter_mse(estimate.b, estimate.M, truth)
            row["expected_sampling_mse"] = float(np.trace(covariance) / covariance.shape[0])
        else:
            row["mple_mse"] = None
            row["expected_sampling_mse"] = None
        rows.append(row)
        histories[str(d)] = curves
    return {"settings": settings.__dict__ | {"dims": list(settings.dims)}, "rows": rows, "histories": histories}


def format_table(result: dict) -> str:
    """The per-d table as aligned text."""
    head = (f"{'d':>3} {'avg MSE':>10} {'paper MSE':>10} {'MPLE MSE':>10} {'sampling MSE':>12} "
            f"{'sweeps':>8} {'capped':>6} {'ms/sweep':>9} {'s/run':>7} {'monotone':>9} {'MPLE exists':>11}")
    lines = [head, "-" * len(head)]
    fmt = lambda v: "n/a" if v is None else f"{v:.2e}"
    for r in result["rows"]:
        lines.append(
            f"{r['d']:>3} {fmt(r['average_mse']):>10} {fmt(r['paper_mse']):>10} {fmt(r['mple_mse']):>10} "
            f"{fmt(r['expected_sampling_mse']):>12} {r['mean_sweeps']:>8.0f} {r['max_sweeps_hit']:>6} {r['ms_per_sweep']:>9.2f} "
            f"{r['mean_seconds']:>7.1f} {'yes' if r['all_monotone'] else 'NO':>9} {'yes' if r['mple_exists'] else 'NO':>11}"
        )
    return "\n".join(lines)
