"""The work budget's rates, measured: every lab's step timed headlessly on one core.

``python -m boltzlab.dashboard.calibration`` times a few configurations of each lab and prints the
measured CPU seconds beside :mod:`boltzlab.dashboard.budget`'s estimate, whose constants come from
this run.  It lives above the labs (it builds their trainers); the budget itself stays below
them, since every lab's setup asks it.
"""

from __future__ import annotations

from .budget import (BOUND_PROBLEMS, EXACT_UNITS, bound_step, cd_epoch, frankwolfe_step, fvbm_step,
                     tap_step)


def _timed(trainer, steps: int = 3) -> tuple[float, list]:
    """Median CPU seconds of ``steps`` steps of ``trainer`` (after one untimed step), and the
    Records.  CPU time of this process (one BLAS thread): what the step costs one core,
    whatever else the machine runs meanwhile."""
    import statistics
    import time

    records = [trainer.step()]
    times = []
    for _ in range(steps):
        t0 = time.process_time()
        records.append(trainer.step())
        times.append(time.process_time() - t0)
    return statistics.median(times), records


def calibrate() -> list[tuple[str, float, float]]:
    """Time a few configurations of every lab headlessly on one core; ``(configuration,
    measured seconds, estimated seconds)`` for each (``python -m boltzlab.dashboard.calibration``)."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    from .. import engine
    from .labs import bound_setup, frankwolfe_setup, tap_setup

    engine.warm_up()
    rows = []

    def add(name: str, measured: float, estimated: float) -> None:
        rows.append((name, measured, estimated))
        print(f"{name:58s} measured {measured:8.3f} s   estimated {estimated:8.3f} s   "
              f"ratio {measured / estimated:5.2f}", flush=True)

    with threadpool_limits(limits=1):
        for data, nh, k, m in (("mnist", 100, 100, 100), ("mnist", 300, 300, 100), ("mnist", 100, 1000, 500),
                               ("digits", 16, 100, 20), ("digits", 200, 500, 20), ("mnist", 18, 20, 500)):
            n, nv = tap_setup.load_images(data).X_train.shape
            batches = tap_setup.default_batches_per_step(n, m)
            trainer = tap_setup.trainer_factory(data, n_hidden=nh, n_chains=k, batch_size=m)()["TAP"]
            seconds, records = _timed(trainer)
            sweeps = sum(r.scalars["tap_iterations"] for r in records) / len(records)
            estimate = tap_step(n_visible=nv, n_hidden=nh, chains=k, batch=m, batches=batches, eval_rows=min(n, k),
                                exact=min(nv, nh) <= EXACT_UNITS, sweeps=sweeps)
            add(f"TAP {data} Nh={nh} K={k} M={m} (mean sweeps {sweeps:.1f})", seconds, estimate)
        from ..engine import fvbm, fvbm_bound

        for d, n in ((20, 20000), (30, 20000), (30, 60000)):  # uniform rows: about n distinct
            X = np.where(np.random.default_rng(d).random((n, d)) < 0.5, -1.0, 1.0)
            rows_ = len(np.unique(X, axis=0))
            for name, trainer, counts in (
                    ("BSLM", fvbm.FVBMTrainer(X, algorithm="bslm", tol=0.0), {"sweeps": 1}),
                    ("bound", fvbm_bound.BoundMPLETrainer(X, tol=0.0), {"bounds": 1}),
                    ("SQUAREM", fvbm_bound.BoundMPLETrainer(X, accelerate=True, tol=0.0), {"squarems": 1}),
                    ("L-BFGS", fvbm_bound.LBFGSMPLETrainer(X, tol=0.0), {"lbfgs": 1})):
                add(f"FVBM {name} d={d} n={n} ({rows_} distinct rows)", _timed(trainer)[0],
                    fvbm_step(rows=rows_, d=d, **counts))
        for data, T, samples, evaluate in (("mnist", 30, 500, "auto"), ("mnist", 30, 2000, "none"),
                                           ("digits", 40, 500, "auto"), ("digits", 20, 500, "exact"),
                                           ("digits", 150, 2000, "auto")):
            X, _, _ = frankwolfe_setup.splits(data)
            trainer = frankwolfe_setup.fw_factory(data, reg=0.1, bias_lr=0.5, samples=samples, max_hidden=T,
                                                  evaluate=evaluate)()["FW"]
            for _ in range(T - 2):
                trainer.step()
            seconds, records = _timed(trainer, 1)  # the last step, to T units, evaluated
            evaluations = records[-1].scalars["inner_evaluations"]
            add(f"Frank-Wolfe {data} T={T} S={samples} evaluate={evaluate} ({evaluations} inner evaluations)", seconds,
                frankwolfe_step(n_visible=X.shape[1], rows=len(X), samples=samples, max_hidden=T, evaluate=evaluate))
        for data, nh in (("mnist", 100), ("mnist", 18), ("digits", 30), ("digits", 400)):
            X, _, _ = frankwolfe_setup.splits(data)
            rng = np.random.default_rng(0)
            params = (rng.normal(0, 0.01, (X.shape[1], nh)), np.zeros(X.shape[1]), np.zeros(nh))
            trainer = frankwolfe_setup.cd_factory(data, params, epochs=10)()["CD (FW init)"]
            seconds, _ = _timed(trainer, 2)
            add(f"CD fork {data} Nh={nh} (one trainer's epoch)", seconds,
                cd_epoch(n_visible=X.shape[1], n_hidden=nh, rows=len(X), trainers=1))
        for problem in BOUND_PROBLEMS:
            race = bound_setup.race_trainers(bound_setup.race_key(problem, 0.1, 0))
            add(f"Bound race {problem}", sum(_timed(t)[0] for t in race.values()), bound_step(problem))
    return rows


if __name__ == "__main__":
    calibrate()
