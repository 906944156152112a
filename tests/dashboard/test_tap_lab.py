"""The TAP lab's logic without a browser: controls -> runner -> views, and its helpers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dashboard.labs.tap import DEFAULTS, TAPLab
from dashboard.labs.tap_setup import GroundTruthTrainer, History, trainer_factory
from engine import rbm
from engine.stepping import Record
from tests.dashboard.test_fvbm_lab import pump


@pytest.fixture
def lab():
    lab = TAPLab()
    lab.panel()
    yield lab
    lab.runner.close()


def test_small_models_get_exact_ais_and_pseudo_likelihood_beside_tap():
    trainer = trainer_factory("digits", n_hidden=6, batch_size=50, n_chains=20)()["TAP"]
    assert isinstance(trainer, GroundTruthTrainer)
    record = trainer.step()
    s = record.scalars
    units = 64 + 6
    assert s["ll_exact"] == pytest.approx(s["log_likelihood"] * units)
    model = rbm.RBM(record.arrays["W"], record.arrays["b_vis"], record.arrays["b_hid"])
    assert s["ll_exact"] == pytest.approx(rbm.exact_log_likelihood(model, trainer._V_eval), rel=1e-10)
    assert abs(s["ll_ais"] - s["ll_exact"]) < 0.5  # near-independent units: AIS is easy here
    assert s["pseudo_likelihood"] == pytest.approx(rbm.pseudo_log_likelihood_exact(model, trainer._V_eval))
    assert math.isfinite(s["ll_tap"])


def test_large_models_train_without_the_ground_truth_wrapper():
    trainer = trainer_factory("digits", n_hidden=30, batch_size=50, n_chains=10)()["TAP"]
    assert not isinstance(trainer, GroundTruthTrainer)


def test_bad_settings_are_reported_where_they_were_made(lab):
    lab.K.value = 0
    assert lab.settings_msg.pane.visible and "n_chains" in lab.settings_msg.text


def test_history_keeps_one_snapshot_per_epoch_and_stays_bounded():
    history = History(limit=5)

    def record(epoch):
        return Record({"epoch": epoch, "helmholtz_free_energy": -epoch},
                      {"solution_free_energies": np.array([-epoch]), "solutions_vis": np.zeros((1, 3)),
                       "solutions_hid": np.zeros((1, 2))})

    for e in np.arange(0.25, 12.01, 0.25):
        history.add(record(float(e)))
    epochs = [s.epoch for s in history.snapshots]
    assert len(epochs) <= 5 + 1 and epochs == sorted(epochs)
    assert epochs[0] == 0.75 and epochs[-1] == 12.0  # the first epoch's latest, and the newest
    assert not history.add(Record({"epoch": 13.0}, {}))


def test_the_lab_opens_on_mnist_with_its_defaults(lab):
    assert lab.data.value == "mnist"
    assert (lab.n_hidden.value, lab.gamma.value, lab.batch.value) == tuple(DEFAULTS["mnist"][k] for k in
                                                                             ("n_hidden", "gamma", "batch"))
    assert lab.fields.image_shape == (28, 28)
    assert not lab.truth.view.visible  # Nh = 100 > 20: no exact answer
    trainer = lab.runner._factory()["TAP"]  # about 8 evaluations per epoch, stalls rescued by damping
    assert trainer.batches_per_step == round(35 / 8) and trainer.max_damping == 0.9


def test_lab_steps_train_several_batches_and_rescue_stalls():
    trainer = trainer_factory("mnist", n_hidden=5, batch_size=100, n_chains=5)()["TAP"]
    assert trainer.batches_per_step == 4 and trainer.max_damping == 0.9  # 35 batches per epoch, ~8 steps
    assert trainer.step()["iteration"] == 4
    assert trainer_factory("digits", n_hidden=30, batch_size=50, n_chains=5, damping=0.95)()["TAP"].max_damping == 0.95


def test_playing_fills_every_view(lab):
    lab.data.value = "digits"
    assert lab.n_hidden.value == DEFAULTS["digits"]["n_hidden"]
    lab._play()
    pump(lab, until=lambda: len(lab.history.snapshots) >= 2, timeout=120)
    lab._pause()
    lab.runner.wait_idle()
    pump(lab)
    lab._show_embedding()
    assert lab.ll_curve.n_points("ll") >= 5 and lab.ll_curve.n_points("count") >= 5  # ~8 steps per epoch
    assert lab.truth.n_points("exact") >= 5 and lab.truth.n_points("ais") >= 5
    assert len(lab.fe_points.data["x"]) >= lab.ll_curve.n_points("ll")
    assert lab.fields.n_tiles == DEFAULTS["digits"]["n_hidden"]
    assert len(lab.embedding.source.data["x"]) == len(lab.history.snapshots[-1].free_energies)
    assert len(lab.data_embedding.source.data["x"]) == 1000
    assert any(len(b.data["left"]) for b in lab.hist._bars)
    assert lab.counter.object.startswith("Epoch ") and float(lab.counter.object.split()[1]) >= 1.0
    lab._denoise_curve()
    assert lab.mcc_curve.n_points("tap") == 7
    assert lab.denoise_grid.n_tiles == 5


def test_switching_data_applies_its_defaults_and_resets(lab):
    lab.data.value = "digits"
    assert lab.n_hidden.value == DEFAULTS["digits"]["n_hidden"] and lab.batch.value == DEFAULTS["digits"]["batch"]
    assert lab.fields.image_shape == (8, 8)
    assert lab.truth.view.visible  # Nh = 16 <= 20: exact answers beside TAP
    assert lab.ll_curve.n_points("ll") == 0
