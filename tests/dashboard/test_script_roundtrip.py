"""A run as code is the run (issue 46 item 2): whatever settings a user reaches, by keywords or
by changing them one at a time as in the page (where a data set brings its own defaults), the
script "Copy as Python" writes makes the same Records when it is executed.

Hypothesis draws valid settings from ranges cheap enough to run a few steps (every setting
in its own bounds, values equal to class defaults and to data-set defaults drawn often: those
are the ones a script leaves out), runs k steps, executes the exported script in a fresh
namespace in this process and compares every numeric scalar exactly, bar timings.
``tests/dashboard/test_python_script.py`` runs one script per lab in a subprocess, as a user would.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boltzlab.dashboard.labs import BoundLab, FrankWolfeLab, FVBMLab, TAPLab
from boltzlab.dashboard.labs.frankwolfe_setup import DEFAULTS as FW_DEFAULTS
from boltzlab.dashboard.labs.tap import DEFAULT_DATA as TAP_DEFAULT_DATA
from boltzlab.dashboard.labs.tap import DEFAULTS as TAP_DEFAULTS
from boltzlab.engine.majorize import DEFAULT_REG

#: timing columns differ between two runs of the same computation
CLOCKS = ("time", "seconds", "elapsed")
EXAMPLES = 25


def numbers(frame: pd.DataFrame) -> tuple[list[str], list[str], np.ndarray]:
    """The runs' names, the numeric columns but timings, and their values."""
    columns = [c for c in frame.columns if c != "run" and not any(k in c for k in CLOCKS)
               and pd.api.types.is_numeric_dtype(frame[c])]
    return list(frame["run"]), columns, frame[columns].to_numpy(float)


def a_pick(values: list) -> st.SearchStrategy:
    return st.sampled_from(values)


# One strategy per lab: {setting: strategy}.  Values are valid (inside each parameter's
# bounds) and small enough for a few steps; each list holds the class default and the
# data sets' defaults, which the exported script must name or leave out correctly.
TAP = {
    "data": a_pick(["digits", "digits", "mnist"]),
    "n_hidden": a_pick([2, 5, 16, 100]),
    "prior_hid": a_pick(["bernoulli", "spin"]),
    "gamma": a_pick([0.001, 0.05, 0.2]),
    "eps": a_pick([0.0, 0.001, 0.01]),
    "eta": a_pick([0.0, 0.5, 0.9]),
    "batch": a_pick([5, 20, 100]),
    "K": a_pick([3, 10, 100]),
    "damping": a_pick([0.0, 0.5]),
    "seed": a_pick([0, 1, 7]),
}
FRANK_WOLFE = {
    "data": a_pick(["digits", "digits", "mnist"]),
    "reg": a_pick([0.05, 0.1, 0.5]),
    "bias_lr": a_pick([0.1, 0.5]),
    "samples": a_pick([20, 50, 120]),
    "bias_steps": a_pick([0, 5, 20]),
    "max_hidden": a_pick([2, 5, 60, 100]),
    "evaluate": a_pick(["none", "exact", "auto"]),
    "eval_every": a_pick([1, 2, 5]),
    "seed": a_pick([0, 3]),
    "away": st.booleans(),
    "cd_epochs": a_pick([5, 50]),
}
FVBM = {
    "source": a_pick(["simulated", "simulated", "senate"]),
    "d": a_pick([2, 5, 8]),
    "n": a_pick([50, 400, 1000]),
    "data_seed": a_pick([0, 4]),
    "mode": a_pick(["Single run", "Race"]),
    "algorithm": a_pick(["bslm", "ga"]),
    "mu": a_pick([0.3, 1.5, 4.0]),
    "race_mus": a_pick(["0.5, 2.5", "1", "0.2, 1.7, 3"]),
    "tol": a_pick([1e-3, 1e-5]),
    "init": a_pick(["zeros", "random"]),
    "init_seed": a_pick([0, 2]),
}
BOUND = {
    "problem": a_pick(["fvbm", "chain", "breast_cancer"]),  # the default, wine, is drawn when none is
    "reg": a_pick([DEFAULT_REG["wine"], DEFAULT_REG["wine"], DEFAULT_REG["chain"], DEFAULT_REG["fvbm"], 0.0, 0.3]),
    "race_seed": a_pick([0, 5]),
    "model": a_pick(["fvbm8", "loglinear"]),
    "radius": a_pick([2.0, 3.0]),
    "s_tilde": a_pick([0.0, 1.5]),
    "taylor": st.booleans(),
}


@st.composite
def histories(draw, space: dict[str, st.SearchStrategy]) -> tuple[bool, list[tuple[str, object]], int]:
    """``(by_keywords, changes, steps)``: settings reached by keywords at construction, or by
    changing them one at a time afterwards (a data set then brings its defaults)."""
    names = draw(st.lists(st.sampled_from(sorted(space)), min_size=1, max_size=5, unique=True))
    changes = [(name, draw(space[name])) for name in names]
    return draw(st.booleans()), changes, draw(st.integers(1, 3))


def reach(cls: type, by_keywords: bool, changes: list[tuple[str, object]]):
    """A lab with ``changes`` applied; a change the lab refuses (over the work budget, a
    trainer's own check) keeps the old run, as in the page, though the setting shows the
    new value: the script must make the run, not the refused value."""
    if by_keywords:
        try:
            return cls(**dict(changes))
        except ValueError:
            pass  # e.g. a combination the trainers refuse: reach it one change at a time
    lab = cls()
    for name, value in changes:
        try:
            lab.apply_settings({name: value})
        except ValueError:
            pass
    return lab


def check_round_trip(cls: type, by_keywords: bool, changes: list, steps: int, tmp_path, monkeypatch) -> None:
    lab = reach(cls, by_keywords, changes)
    try:
        lab.run(steps=steps)
        script = lab.python_script()
        ours = lab.records_frame()
        reached = lab.run_settings()
    finally:
        lab.close()
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__main__"}
    with contextlib.redirect_stdout(io.StringIO()):  # the script prints its last Records
        exec(compile(script, f"<{cls.__name__} script>", "exec"), namespace)
    theirs = namespace["frame"]
    remade = namespace["lab"]
    assert remade.run_settings() == reached, script
    runs, columns, values = numbers(ours)
    their_runs, their_columns, their_values = numbers(theirs)
    assert (their_runs, their_columns) == (runs, columns), script
    assert len(runs) > 0
    np.testing.assert_array_equal(their_values, values, err_msg=script)


SPACES = [(FVBMLab, FVBM), (BoundLab, BOUND), (TAPLab, TAP), (FrankWolfeLab, FRANK_WOLFE)]


@pytest.mark.slow
@pytest.mark.parametrize("cls,space", SPACES, ids=[c.__name__ for c, _ in SPACES])
def test_the_exported_script_makes_the_same_records(cls, space, tmp_path_factory):
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(histories(space))
    def round_trip(history):
        by_keywords, changes, steps = history
        with pytest.MonkeyPatch.context() as monkeypatch:
            check_round_trip(cls, by_keywords, changes, steps, tmp_path_factory.mktemp("script"), monkeypatch)

    round_trip()


def test_a_setting_equal_to_its_default_is_named_when_the_data_imply_another():
    """The two runs of the issue: the digits' defaults would make 16 hidden units and a
    batch of 20, the FVBM race problem a lambda of 1.0."""
    lab = TAPLab(data="digits", n_hidden=100)
    try:
        assert lab.script_settings() == {"data": "digits", "n_hidden": 100}
        assert "TAPLab(data='digits', n_hidden=100)" in lab.python_script()
    finally:
        lab.close()
    lab = BoundLab(problem="fvbm", reg=DEFAULT_REG["wine"])
    try:
        assert lab.script_settings() == {"problem": "fvbm", "reg": DEFAULT_REG["wine"]}
    finally:
        lab.close()


def test_the_default_data_sets_defaults_are_the_class_defaults():
    """``Lab.constructed`` takes a lab built with no data keyword to have the class defaults:
    so must the default data set's own defaults be."""
    for name, value in TAP_DEFAULTS[TAP_DEFAULT_DATA].items():
        assert TAPLab.param[name].default == value, name
    for name, value in FW_DEFAULTS[FrankWolfeLab.param["data"].default].items():
        assert FrankWolfeLab.param[name].default == value, name
