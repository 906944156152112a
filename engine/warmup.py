"""Compile (or load from numba's on-disk cache) every kernel on tiny problems."""

from __future__ import annotations

import numpy as np


def warm_up() -> None:
    """Run each numba kernel once on a tiny problem, so no user or test waits for a compile."""
    from engine.fvbm import FVBM, FVBMTrainer, exact_log_likelihood
    from engine.kernels import fvbm as kernels

    model = FVBM.random(3, 0)
    X = model.sample(16, 1)
    trainer = FVBMTrainer(X, tol=0, max_sweeps=2, exact_every=1)
    trainer.run()
    exact_log_likelihood(X, model.b, model.M)
    kernels.gibbs_sample(model.b, model.M, 2, 1, 1, 0)
    np.asarray(model.probabilities())
    from engine.fvbm_bound import warm_up_fvbm_bound

    warm_up_fvbm_bound()
    from engine.rbm import warm_up_rbm

    warm_up_rbm()
    from engine.tap import warm_up_tap

    warm_up_tap()
    from engine.frankwolfe import warm_up_frankwolfe

    warm_up_frankwolfe()
    from engine.bound import warm_up_bound

    warm_up_bound()
    from engine.majorize import warm_up_majorize

    warm_up_majorize()
