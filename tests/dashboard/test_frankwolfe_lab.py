"""The Frank-Wolfe lab's logic without a browser: controls -> runner -> views, the CD fork."""

from __future__ import annotations

import numpy as np
import pytest

from dashboard.labs.frankwolfe import FrankWolfeLab
from dashboard.labs.frankwolfe_setup import DEFAULTS, cd_factory, fw_curves, fw_factory, log_likelihood_of
from engine import rbm
from engine.stepping import Record
from tests.dashboard.test_fvbm_lab import pump


@pytest.fixture
def lab():
    lab = FrankWolfeLab()
    lab.panel()
    yield lab
    lab.runner.close()
    lab._stop_cd()


def test_the_lab_opens_on_mnist_with_its_defaults(lab):
    assert lab.data.value == "mnist"
    for name, value in DEFAULTS["mnist"].items():
        assert getattr(lab, name).value == value
    assert lab.fields.image_shape == (28, 28)
    assert lab.fork.disabled  # nothing to fork yet
    trainer = lab.runner._factory()["FW"]
    assert trainer.max_hidden == DEFAULTS["mnist"]["max_hidden"] and trainer.V_valid is not None


def test_growing_fills_every_view_and_highlights_the_newest_unit(lab):
    lab.data.value = "digits"
    lab.max_hidden.value = 12
    lab.eval_every.value = 1
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
    assert lab.counter.object == f"Hidden units: {n}"
    assert not lab.fork.disabled


def test_training_cd_from_here_runs_both_starts(lab):
    lab.data.value = "digits"
    lab.max_hidden.value = 5
    lab.eval_every.value = 1
    lab.cd_epochs.value = 3
    lab._play()
    pump(lab, until=lambda: not lab.runner.active, timeout=120)
    lab.runner.wait_idle()
    pump(lab)
    W = lab._last["W"]
    lab._fork_cd()
    assert lab.cd_runner is not None and lab.fork_line.visible
    deadline = 120
    import time
    t0 = time.monotonic()
    while lab.cd_runner.active and time.monotonic() - t0 < deadline:
        time.sleep(0.2)
        lab.on_cd_records(lab.cd_runner.drain())
    lab.on_cd_records(lab.cd_runner.drain())
    assert lab.cd_curve.n_points("fw") == 3 and lab.cd_curve.n_points("random") == 3
    assert "CD-10 done (5 units)" in lab.cd_status.text
    # the fork started from the Frank-Wolfe model itself: its first epoch's likelihood is near FW's
    assert W.shape == (64, 5)


def test_cd_pair_starts_from_the_given_model_and_from_random():
    model = rbm.RBM.random(64, 4, seed=1, scale=0.5)
    pair = cd_factory("digits", (model.W, model.b_vis, model.b_hid), epochs=2)()
    assert set(pair) == {"CD (FW init)", "CD (random init)"}
    np.testing.assert_array_equal(pair["CD (FW init)"].rbm.W, model.W)
    assert not np.array_equal(pair["CD (random init)"].rbm.W, model.W)
    assert pair["CD (FW init)"].k == 10 and pair["CD (FW init)"].evaluate == "exact"
    record = pair["CD (FW init)"].step()
    assert np.isfinite(log_likelihood_of(record))


def test_bad_settings_show_an_error_and_keep_the_lab(lab):
    lab.samples.value = 0
    assert lab.settings_msg.pane.visible and "samples" in lab.settings_msg.text
    lab.samples.value = 100
    assert not lab.settings_msg.pane.visible
    with pytest.raises(ValueError, match="max_hidden"):
        fw_factory("digits", reg=0.1, bias_lr=0.05, samples=10, max_hidden=0)


def test_fw_curves_reads_only_evaluated_splits():
    c = fw_curves(Record({"iteration": 3, "n_hidden": 3, "inner_objective": -1.0, "bias_change": 0.1,
                          "train_log_likelihood": -30.0, "test_log_likelihood": float("nan")}, {}))
    assert c["train"] == -30.0 and "test" not in c and "valid" not in c
