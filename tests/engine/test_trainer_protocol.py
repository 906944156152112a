"""Every trainer the project builds follows the Trainer protocol of ``boltzlab.engine.stepping``.

The trainers are built the way the dashboard's labs build them (the ``*_setup.py``
factories) and, for those no lab builds, the way ``engine`` builds them, all on small
data so the test stays fast.
"""

from __future__ import annotations

import functools
import inspect
import math

import numpy as np
import pytest

from boltzlab import engine
from boltzlab.engine.stepping import STATUSES, Record, Trainer

# ------------------------------------------------------------------ the factories
# Each returns a factory ``() -> {name: trainer}`` (fresh trainers on every call), as the
# runner gets them.  Cached: the data and the validation are built once per session.


@functools.cache
def fvbm_race():
    from boltzlab.dashboard.labs import fvbm_setup

    dataset = fvbm_setup.load_data("simulated", d=5, n=400, seed=1)
    return fvbm_setup.trainer_factory(dataset, race_mus=[2.0])


@functools.cache
def bound_race(problem: str):
    from boltzlab.engine import majorize

    kw = {"chain": dict(n_sequences=20, length=5), "fvbm": dict(d=4, n=100)}.get(problem, {})
    objective = majorize.make_objective(problem, **kw)
    return lambda: majorize.make_race(problem, objective=objective, max_iter=50)


@functools.cache
def latent_race():
    from boltzlab.engine import latent

    X, y, _, _, K = latent.load_latent_problem("toy")
    objective = latent.LatentConditional(X, y, K, 2, latent.LATENT_REG["toy"])
    theta0 = latent.random_init(X, y, K, 2, seed=0).to_theta()

    def build():
        trainers = latent._trainers(objective, theta0, tol=1e-6, max_iter=50)
        trainers["EM"] = latent.EMTrainer(X, y, K, 2, max_iter=50, objective=objective)
        return trainers

    return build


@functools.cache
def tap_lab(n_hidden: int):
    from boltzlab.dashboard.labs import tap_setup

    # 8 hidden units: the smaller layer is exact, so the lab wraps it in GroundTruthTrainer
    return tap_setup.trainer_factory("digits", n_hidden=n_hidden, batch_size=50, n_chains=20,
                                     batches_per_step=1)


@functools.cache
def frankwolfe_lab():
    from boltzlab.dashboard.labs import frankwolfe_setup

    return frankwolfe_setup.fw_factory("digits", reg=0.2, bias_lr=0.05, samples=50, max_hidden=10,
                                       evaluate="exact", eval_every=1)


@functools.cache
def cd_lab():
    from boltzlab.dashboard.labs import frankwolfe_setup

    fw = frankwolfe_lab()()["FW"]
    for _ in range(2):
        record = fw.step()
    params = (record["W"], record["b_vis"], record["b_hid"])
    return frankwolfe_setup.cd_factory("digits", params, epochs=3)


def case(factory, name, cls_name):
    return pytest.param(factory, name, cls_name, id=f"{cls_name}:{name}")


CASES = [
    case(fvbm_race, "BSLM", "FVBMTrainer"),
    case(fvbm_race, "GA μ=2", "FVBMTrainer"),
    case(fvbm_race, "Bound (Jebara–Choromanska)", "BoundMPLETrainer"),
    case(fvbm_race, "Bound + SQUAREM", "BoundMPLETrainer"),
    case(fvbm_race, "L-BFGS", "LBFGSMPLETrainer"),
    *[case(functools.partial(bound_race, problem), name, cls)
      for problem in ("wine", "chain", "fvbm")
      for name, cls in [("Bound majorization", "BoundMajorizer"), ("L-BFGS", "LBFGSTrainer"),
                        ("CG", "ConjugateGradientTrainer"), ("Steepest descent", "SteepestDescentTrainer"),
                        ("Newton", "NewtonTrainer")]],
    case(latent_race, "Bound majorization", "LatentBoundTrainer"),
    case(latent_race, "EM", "EMTrainer"),
    case(functools.partial(tap_lab, 8), "TAP", "GroundTruthTrainer"),
    case(functools.partial(tap_lab, 24), "TAP", "TAPTrainer"),
    case(frankwolfe_lab, "FW", "FrankWolfeTrainer"),
    case(cd_lab, "CD (FW init)", "RBMTrainer"),
    case(cd_lab, "CD (random init)", "RBMTrainer"),
]

WALL_CLOCK = ("time", "second", "elapsed")
#: the trainers without the optional ``steps(k)`` of the protocol
WITHOUT_STEPS = {"EMTrainer", "FrankWolfeTrainer"}


def check_record(record, where):
    assert isinstance(record, Record), where
    for key, value in record.scalars.items():
        assert type(value) in (float, int, bool), f"{where}: scalar {key!r} is a {type(value).__name__}"
    for key, value in record.arrays.items():
        assert isinstance(value, np.ndarray) and value.dtype != object, f"{where}: array {key!r}"


def same(a, b) -> bool:
    """Equal, NaN equal to NaN (bit-exact resumption)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b, equal_nan=True)
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def copied(state):
    return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in state.items()}


@pytest.mark.parametrize("factory, name, cls_name", CASES)
def test_every_trainer_follows_the_protocol(factory, name, cls_name):
    build = factory()
    trainer = build()[name]
    inner = getattr(trainer, "trainer", trainer)  # GroundTruthTrainer wraps a TAPTrainer
    assert cls_name in (type(trainer).__name__, type(inner).__name__)
    where = f"{cls_name} {name!r}"

    assert isinstance(trainer, Trainer), where
    assert trainer.status in STATUSES and isinstance(trainer.message, str), where
    assert not trainer.done, where
    check_record(trainer.step(), where)
    assert trainer.status in STATUSES and isinstance(trainer.message, str), where

    # state_dict() is plain numpy; a fresh trainer loading it steps as this one does next
    state = trainer.state_dict()
    for key, value in state.items():
        assert np.asarray(value).dtype != object, f"{where}: state_dict entry {key!r} is not plain"
    restored = build()[name]
    restored.load_state_dict(copied(state))
    assert (restored.status, restored.message) == (trainer.status, trainer.message), where
    # every case runs longer than one step, so the resumption check always runs (issue 27: an
    # `if trainer.done: return` here skipped it for a trainer that stopped at once)
    assert not trainer.done, f"{where}: done after one step ({trainer.status}: {trainer.message})"
    a, b = trainer.step(), restored.step()
    assert set(a.scalars) == set(b.scalars) and set(a.arrays) == set(b.arrays), where
    for key in a.scalars:
        if not any(w in key for w in WALL_CLOCK):
            assert same(a.scalars[key], b.scalars[key]), f"{where}: {key!r} {a.scalars[key]!r} != {b.scalars[key]!r}"
    for key in a.arrays:
        assert same(a.arrays[key], b.arrays[key]), f"{where}: array {key!r}"

    # steps(k) is optional: which trainers have it is stated, so the check below cannot
    # silently stop running for one (issue 27)
    assert hasattr(trainer, "steps") == (cls_name not in WITHOUT_STEPS), where
    if hasattr(trainer, "steps"):
        assert not trainer.done, f"{where}: done after two steps ({trainer.status}: {trainer.message})"
        records = trainer.steps(2)
        assert len(records) == 2 or (1 <= len(records) < 2 and trainer.done), where
        for record in records:
            check_record(record, where)
        assert trainer.status in STATUSES and isinstance(trainer.message, str), where


def test_the_cases_cover_every_trainer_class_of_the_engine():
    """A new trainer class in ``engine`` must be added to CASES (and so be checked)."""
    import importlib
    import pkgutil

    built = {c.values[2] for c in CASES}
    found = set()
    for info in pkgutil.iter_modules(engine.__path__):
        if info.name in ("experiments", "kernels", "warmup"):
            continue
        module = importlib.import_module(f"boltzlab.engine.{info.name}")
        # a module's own list of statuses (checked on load_state_dict) is part of the closed set
        assert set(getattr(module, "STATUSES", ())) <= STATUSES, module.__name__
        for cls_name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and callable(getattr(cls, "step", None)):
                found.add(cls_name)
    found -= {"IterativeTrainer", "_MPLETrainer", "Trainer"}  # base classes and the protocol
    assert found <= built, f"not exercised: {sorted(found - built)}"
