"""`boltzlab bench rbm`: seconds per PCD-1 epoch on binarised MNIST, this engine vs
scikit-learn's BernoulliRBM with the same settings, measured in the same run; and the
time of an AIS estimate of log Z."""

from __future__ import annotations

import time

import numpy as np


def run(hidden: tuple[int, ...] = (100, 500), *, batch_size: int = 100, learning_rate: float = 0.05,
        repeats: int = 2, ais_runs: int = 100, ais_schedule: str = "default") -> dict:
    """JSON-ready timings; ``ais_schedule`` is "default" (14,501 betas) or "live" (1,001).

    The engine's epoch is timed as the trainer's own ``wall_time`` of its numba call (the
    35 mini-batch updates); the pseudo-likelihood and log-likelihood evaluations the
    trainer schedules between epochs are excluded, as scikit-learn's ``fit`` computes none.
    scikit-learn's epoch is ``BernoulliRBM(n_iter=1).fit`` (PCD-1 with ``batch_size``
    persistent chains, the same as the engine's).  Both run with the same settings (no
    momentum, no weight decay), float64, best of ``repeats``, in the same process.
    """
    from sklearn.neural_network import BernoulliRBM

    from engine import rbm as rbm_module
    from engine.images import mnist

    if ais_schedule not in ("default", "live"):
        raise ValueError(f"The 'ais_schedule' parameter of bench rbm must be 'default' or 'live'. Got {ais_schedule!r}.")
    data = mnist()
    V = np.asarray(data.X_train, dtype=np.float64)
    rows = []
    for n_hidden in hidden:
        trainer = rbm_module.RBMTrainer(
            V, n_hidden, method="pcd", k=1, batch_size=batch_size, learning_rate=learning_rate,
            momentum=0.0, step_unit="epoch", evaluate="none", seed=0, max_epochs=10**6,
        )
        trainer.step()  # compile or load the kernels from the cache before timing
        engine_s = min(trainer.step()["wall_time"] for _ in range(repeats))
        sklearn_times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            BernoulliRBM(n_components=n_hidden, batch_size=batch_size, learning_rate=learning_rate,
                         n_iter=1, random_state=0).fit(V)
            sklearn_times.append(time.perf_counter() - t0)
        sklearn_s = min(sklearn_times)
        state = trainer.state_dict()
        W, b_vis, b_hid = state["W"], state["b_vis"], state["b_hid"]
        schedule = None if ais_schedule == "default" else rbm_module.AIS_SCHEDULE_LIVE
        rbm_module.ais_log_partition(W, b_vis, b_hid, n_runs=2, schedule=rbm_module.AIS_SCHEDULE_LIVE, seed=0)
        t0 = time.perf_counter()
        estimate, spread = rbm_module.ais_log_partition(W, b_vis, b_hid, n_runs=ais_runs, schedule=schedule, seed=0,
                                                        base_vis=trainer.base_vis)
        ais_s = time.perf_counter() - t0
        rows.append({
            "n_hidden": n_hidden, "n_train": int(V.shape[0]), "batch_size": batch_size,
            "engine_seconds_per_epoch": engine_s, "sklearn_seconds_per_epoch": sklearn_s,
            "ratio": sklearn_s / engine_s,
            "ais_runs": ais_runs, "ais_schedule": ais_schedule, "ais_betas": int(
                (rbm_module.AIS_SCHEDULE_DEFAULT if schedule is None else schedule).shape[0]),
            "ais_seconds": ais_s, "ais_seconds_per_run": ais_s / ais_runs, "ais_log_z": estimate, "ais_spread": spread,
        })
    return {"rows": rows, "note": "engine time excludes the trainer's scheduled evaluations; AIS base rates from the training data"}
