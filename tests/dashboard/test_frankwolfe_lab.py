"""The Frank-Wolfe lab's logic without a browser: controls -> runner -> views, the CD fork."""

from __future__ import annotations

import re

import pickle
import time

import numpy as np
import pytest

from boltzlab.dashboard.labs.frankwolfe import FrankWolfeLab
from boltzlab.dashboard.labs.frankwolfe_setup import (DEFAULTS, cd_factory, fw_curves, fw_factory, log_likelihood_of,
                                             train_log_likelihood)
from boltzlab.engine import rbm
from boltzlab.engine.stepping import Record
from tests.dashboard.test_fvbm_lab import pump
from tests.waiting import tick


@pytest.fixture
def lab():
    lab = FrankWolfeLab()
    lab.panel()
    yield lab
    lab.close()  # the Frank-Wolfe runner, the CD fork's runner and the jobs


def steps(lab, k):
    """k single steps, then one tick (and the jobs it started), as the UI would."""
    for _ in range(k):
        lab.runner.step_once()
    assert lab.runner.wait_idle(60)
    tick(lab)
    assert lab.jobs.wait(60)


def tick_until(lab, until, timeout=120.0):
    """Refresh ticks (which drain the CD fork too) until ``until()`` holds."""
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)
        tick(lab)
    tick(lab)


def test_the_lab_opens_on_mnist_with_its_defaults(lab):
    assert lab.widgets["data"].value == "mnist"
    for name, value in DEFAULTS["mnist"].items():
        assert getattr(lab, name) == value and lab.widgets[name].value == value
    assert lab.fields.image_shape == (28, 28)
    assert lab.fork.disabled  # nothing to fork yet
    trainer = lab.runner._factory()["FW"]
    assert trainer.max_hidden == DEFAULTS["mnist"]["max_hidden"] and trainer.V_valid is not None


def test_growing_fills_every_view_and_highlights_the_newest_unit(lab):
    lab.widgets["data"].value = "digits"
    lab.widgets["max_hidden"].value = 12
    lab.widgets["eval_every"].value = 1
    lab._play()
    pump(lab, until=lambda: lab._last.get("n_hidden", 0) >= 6, timeout=120)
    lab._pause()
    lab.runner.wait_idle()
    pump(lab)
    n = lab._last["n_hidden"]
    assert lab.ll_curve.n_points("units") >= 6 and lab.ll_curve.n_points("test") >= 6  # digits: every iteration
    assert lab.inner_curve.n_points("inner") >= 6
    assert np.all(np.asarray(lab.inner_curve.sources["inner"].data["y"]) <= 1e-9)  # w = 0 is feasible: J(w*) <= 0
    assert lab.fields.n_tiles == n and len(lab.fields.box.data["left"]) == 1  # the newest unit outlined
    assert lab.counter_pane.object == f"Hidden units: {n}"
    assert not lab.fork.disabled


def test_training_cd_from_here_runs_both_starts(lab):
    lab.widgets["data"].value = "digits"
    lab.widgets["max_hidden"].value = 5
    lab.widgets["eval_every"].value = 1
    lab.widgets["cd_epochs"].value = 3
    lab._play()
    pump(lab, until=lambda: not lab.runner.active, timeout=120)
    lab.runner.wait_idle()
    pump(lab)
    W = lab._last["W"]
    np.testing.assert_array_equal(W, lab.runner.history.arrays["FW"]["W"])  # the newest Record's model
    lab._fork_cd()
    assert lab.cd_runner is not None and lab.fork_line.visible  # the last iteration was evaluated: no job
    # the fork starts from the Frank-Wolfe model the Records carried (cd_factory's start: below)
    np.testing.assert_array_equal(lab._fork["params"][0], W)
    assert lab.busy()  # the base's tick runs at full rate while CD trains
    # the base's tick drains the CD runner (on_tick): no periodic callback of its own
    tick_until(lab, lambda: not lab.cd_runner.active and not lab.busy())
    assert lab.cd_curve.n_points("fw") == 3 and lab.cd_curve.n_points("random") == 3
    assert "CD-10 done (5 units)" in lab.cd_status.text
    assert W.shape == (64, 5)


def test_the_model_at_an_unevaluated_fork_is_scored_by_a_job(lab):
    lab.apply_settings({"data": "digits", "samples": 60, "max_hidden": 12, "eval_every": 2, "cd_epochs": 1})
    steps(lab, 3)  # iteration 3: not evaluated (every 2)
    assert "train_log_likelihood" not in lab.runner.history.rows["FW"][-1]
    lab._fork_cd()
    assert not lab.fork_line.visible and "computing" in lab.cd_status.text
    assert lab.jobs.running("fork-ll")
    tick_until(lab, lambda: not lab.jobs.running() and not lab.busy())
    W, b_vis, b_hid = (lab.runner.history.arrays["FW"][k] for k in ("W", "b_vis", "b_hid"))
    expected = train_log_likelihood("digits", W, b_vis, b_hid, "auto", 0)
    assert expected["exact"] and lab.fork_line.visible and lab.fork_line.location == pytest.approx(expected["value"])
    assert f"Frank-Wolfe at the fork: {expected['value']:.2f}" in lab.cd_status.text


def test_the_fork_job_scores_like_the_frank_wolfe_run():
    """The job's exact log-likelihood of a grown model equals the one its Record carries."""
    trainer = fw_factory("digits", reg=0.2, bias_lr=0.05, samples=60, max_hidden=5, evaluate="exact")()["FW"]
    for _ in range(3):
        record = trainer.step()
    a = record.arrays
    out = train_log_likelihood("digits", a["W"], a["b_vis"], a["b_hid"], "exact", 0)
    assert out["exact"] and out["value"] == pytest.approx(record.scalars["train_log_likelihood"], abs=1e-9)


def test_the_cd_trainers_are_built_by_the_runner_not_by_the_click():
    from boltzlab.dashboard.runner import Build

    model = rbm.RBM.random(784, 6, seed=1, scale=0.5)
    factory = cd_factory("mnist", (model.W, model.b_vis, model.b_hid), epochs=1)
    assert isinstance(factory, Build) and factory.names == ("CD (FW init)", "CD (random init)")
    assert len(pickle.dumps(factory)) < 200_000  # shipped to a worker without the 3,500 digits
    with pytest.raises(ValueError, match="shape"):
        cd_factory("digits", (model.W, model.b_vis, model.b_hid))


def test_cd_pair_starts_from_the_given_model_and_from_random():
    model = rbm.RBM.random(64, 4, seed=1, scale=0.5)
    pair = cd_factory("digits", (model.W, model.b_vis, model.b_hid), epochs=2)()
    assert set(pair) == {"CD (FW init)", "CD (random init)"}
    # the fork trains in float32 (issue 18): the given weights, rounded to single precision
    np.testing.assert_array_equal(pair["CD (FW init)"].rbm.W, model.W.astype(np.float32).astype(np.float64))
    assert not np.array_equal(pair["CD (random init)"].rbm.W, model.W)
    assert pair["CD (FW init)"].k == 10 and pair["CD (FW init)"].evaluate == "exact"
    record = pair["CD (FW init)"].step()
    assert np.isfinite(log_likelihood_of(record))


def test_bad_settings_show_an_error_and_keep_the_lab(lab):
    with pytest.raises(ValueError, match=re.escape("The 'samples' setting must be in [1, 20000]. Got '0'.")):
        lab.apply_settings({"samples": 0})
    lab.widgets["samples"].value = 100
    assert not lab.settings_msg.pane.visible
    with pytest.raises(ValueError, match="max_hidden"):  # the trainer checks when it is built
        fw_factory("digits", reg=0.1, bias_lr=0.05, samples=10, max_hidden=0)()


def test_fw_curves_reads_only_evaluated_splits():
    c = fw_curves(Record({"iteration": 3, "n_hidden": 3, "inner_objective": -1.0, "bias_change": 0.1,
                          "train_log_likelihood": -30.0, "test_log_likelihood": float("nan")}, {}))
    assert c["train"] == -30.0 and "test" not in c and "valid" not in c


def test_next_step_says_how_eq10_ended(lab):
    """Issue 16: the presentation text says how many eq.-10 updates an insertion took and
    whether the loop's test passed or its cap stopped it (the 'eq. 10 cut off' preset)."""
    lab.apply_settings({"data": "digits", "samples": 500, "max_hidden": 12, "bias_steps": 2, "bias_lr": 0.05})
    steps(lab, 2)
    rows = lab.runner.history.rows["FW"]
    text = lab.describe_change("FW", rows[-2], rows[-1], None, None)
    assert "in 2 updates, <b>its cap: stopped before the pixel means matched</b>" in text
    lab.apply_settings({"bias_steps": 200, "bias_lr": 0.5})
    steps(lab, 2)
    rows = lab.runner.history.rows["FW"]
    text = lab.describe_change("FW", rows[-2], rows[-1], None, None)
    assert "until the pixel means matched the data's" in text and rows[-1]["bias_converged"]


def test_fig1_says_when_the_log_likelihood_comes_while_only_the_units_line_draws(lab):
    lab.widgets["data"].value = "digits"
    lab.widgets["eval_every"].value = 3
    placeholder = lab.ll_curve.placeholder.label
    assert placeholder.visible and placeholder.text == "Press ▶ Play to start"
    steps(lab, 1)
    assert lab.ll_curve.n_points("units") == 1 and lab.ll_curve.n_points("train") == 0
    assert placeholder.visible and placeholder.text == "log-likelihood at t = 3, 6, …"
    steps(lab, 2)
    assert lab.ll_curve.n_points("train") == 1 and not placeholder.visible
    lab._reset()
    tick(lab)
    assert placeholder.visible and placeholder.text == "Press ▶ Play to start"
