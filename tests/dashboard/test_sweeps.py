"""Sweep a setting (issue 47 items 3 and 4): one run per value, stepping together, each run's
Records identical to a lab run alone with that value (same seeds); bad settings and values
refused with sentences that name them; the budget counts the runs together; a checkpoint and
"Copy as Python" keep the sweep."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from boltzlab.dashboard import budget
from boltzlab.dashboard.labs import BoundLab, FrankWolfeLab, FVBMLab, TAPLab
from boltzlab.dashboard.labtools import read_checkpoint, write_checkpoint

CLOCKS = ("time", "seconds", "elapsed")
#: per lab: small settings, the setting swept and three values
SWEEPS = [
    (FVBMLab, dict(d=6, n=500, algorithm="ga"), "mu", [0.5, 1.0, 2.5]),
    (TAPLab, dict(data="digits", n_hidden=8, K=10), "gamma", [0.01, 0.05, 0.1]),
    (FrankWolfeLab, dict(data="digits", samples=100, max_hidden=10, evaluate="exact", eval_every=1), "reg",
     [0.05, 0.1, 0.2]),
    (BoundLab, dict(problem="fvbm", race_seed=1), "reg", [0.3, 1.0, 2.0]),
]


def same_records(ours: dict, theirs: dict, where: str) -> None:
    keys = [k for k in theirs if not any(c in k for c in CLOCKS)]
    assert set(keys) <= set(ours), where
    for key in keys:
        np.testing.assert_array_equal(np.asarray(ours[key], float), np.asarray(theirs[key], float),
                                      err_msg=f"{where}: {key}")


@pytest.mark.parametrize("cls,settings,setting,values", SWEEPS, ids=[c.__name__ for c, *_ in SWEEPS])
def test_each_run_of_a_sweep_is_the_run_of_a_lab_with_that_value_alone(make_lab, cls, settings, setting, values):
    lab = make_lab(cls, **settings)
    lab.sweep(setting, values)
    assert lab.sweeping == (setting, tuple(values)) and getattr(lab, setting) == values[0]
    lab.run(steps=3)
    records = lab.records
    for value in values:
        alone = make_lab(cls, **settings, **{setting: value})
        alone.run(steps=3)
        for run, columns in alone.records.items():
            text = f"{value:g}"
            name = f"{setting}={text}" if len(alone.runs) == 1 else f"{setting}={text} · {run}"
            assert name in lab.runs, (name, lab.runs)
            same_records(records[name], columns, name)
    assert len(lab.runs) == len(values) * len(alone.runs)
    lab.sweep(None)  # the sweep ends; the setting keeps the first value
    assert lab.sweeping is None and getattr(lab, setting) == values[0] and len(lab.runs) == len(alone.runs)


def test_choosing_one_value_for_the_swept_setting_ends_the_sweep(make_lab):
    lab = make_lab(FVBMLab, d=6, n=500, algorithm="ga")
    lab.sweep("mu", [0.5, 2.5])
    lab.apply_settings({"d": 5})  # another setting: the sweep goes on, rebuilt
    assert lab.runs == ["mu=0.5", "mu=2.5"]
    lab.widgets["mu"].value = 1.0
    assert lab.sweeping is None and lab.runs == ["GA μ=1"]


@pytest.mark.parametrize("setting,values,match", [
    ("speed", [1, 2], r"The 'setting' parameter of FVBMLab.sweep must be one of \["),
    ("nope", [1, 2], r"Got 'nope'"),
    ("mu", [0.5], r"must hold 2 to 4 values. Got 1"),
    ("mu", [0.5, 1, 2, 3, 4], r"must hold 2 to 4 values. Got 5"),
    ("mu", "0.5, 1", r"must be a list of 2 to 4 values"),
    ("mu", [0.5, 0.5], r"must hold different values"),
    ("mu", [0.5, 20.0], r"The 'mu' setting must be in \[0.01, 10.0\]. Got '20'"),
    ("d", [2, 4], r"Got .d."),
])
def test_a_bad_sweep_is_refused_with_a_sentence_that_names_it(make_lab, setting, values, match):
    lab = make_lab(FVBMLab, d=6, n=500)
    with pytest.raises(ValueError, match=match):
        lab.sweep(setting, values)
    assert lab.sweeping is None and lab.runs == ["BSLM"]


def test_the_budget_counts_the_runs_of_a_sweep_together(make_lab, monkeypatch):
    lab = make_lab(TAPLab, data="digits", n_hidden=8, K=10)
    # a limit one TAP step of these settings fits and three together do not
    seconds = []
    monkeypatch.setattr(budget, "require", lambda cost, knobs, what, extra=(): seconds.append(budget.LIMITS.step_seconds))
    lab._check_work()
    assert seconds == [budget.LIMITS.step_seconds]
    seconds.clear()
    lab._sweep = ("gamma", (0.01, 0.05, 0.1))
    lab._check_work()
    lab._sweep = None
    assert seconds == pytest.approx([budget.LIMITS.step_seconds / 3] * 3)


def test_a_sweep_over_the_budget_is_refused_and_the_run_stays(make_lab, monkeypatch):
    lab = make_lab(TAPLab, data="digits", n_hidden=16, K=100)
    lab.run(steps=1)
    monkeypatch.setattr(budget.LIMITS, "step_seconds", budget.LIMITS.step_seconds)  # restored after
    low, high = 1e-6, budget.LIMITS.step_seconds
    for _ in range(40):  # bisect the limit at which one step of these settings just fits
        mid = (low + high) / 2
        budget.LIMITS.step_seconds = mid
        try:
            lab.check_work()
            high = mid
        except budget.TooMuchWork:
            low = mid
    budget.LIMITS.step_seconds = high * 1.5  # one run fits, three together do not
    with pytest.raises(ValueError, match="A sweep of 3 runs steps them together"):
        lab.sweep("gamma", [0.01, 0.05, 0.1])
    assert lab.sweeping is None and lab.runs == ["TAP"]


def test_a_checkpoint_and_the_script_keep_the_sweep(make_lab, tmp_path, monkeypatch):
    lab = make_lab(FVBMLab, d=6, n=500, algorithm="ga")
    lab.sweep("mu", [0.5, 2.5])
    lab.run(steps=2)
    content = write_checkpoint(lab.tools.checkpoint())
    assert read_checkpoint(content, lab="fvbm").sweep == ("mu", ["0.5", "2.5"])
    other = make_lab(FVBMLab, d=6, n=500, algorithm="ga")
    assert other.tools.load_bytes(content, "sweep.npz"), other.tools.message.text
    assert other.sweeping == ("mu", (0.5, 2.5)) and other.runs == lab.runs
    other.run(steps=1)
    lab.run(steps=1)
    for run in lab.runs:
        same_records(other.records[run], lab.records[run], run)
    script = lab.python_script()
    assert "lab.sweep('mu', [0.5, 2.5])" in script
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__main__"}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(script, "<sweep script>", "exec"), namespace)
    theirs = namespace["frame"]
    ours = lab.records_frame()
    assert list(theirs["run"]) == list(ours["run"])
    numeric = [c for c in ours.columns if c not in ("run", "pin") and not any(k in c for k in CLOCKS)]
    np.testing.assert_array_equal(theirs[numeric].to_numpy(float), ours[numeric].to_numpy(float))


def test_the_sweep_table_shows_each_runs_newest_evaluated_headline(make_lab):
    lab = make_lab(FrankWolfeLab, data="digits", samples=100, max_hidden=10, evaluate="exact", eval_every=2)
    lab.sweep("reg", [0.05, 0.2])
    lab.run(steps=3)  # evaluated at t = 2 only: the newest Record has no test log-likelihood
    lab.compare.refresh()
    assert "—" not in lab.compare.table.object and lab.compare.table.object.count("<tr>") == 3
