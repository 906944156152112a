"""The FVBM lab's logic without a browser: controls -> runner -> views."""

from __future__ import annotations

import time

import numpy as np
import pytest

import engine
from dashboard.labs.fvbm import FVBMLab
from dashboard.labs.fvbm_setup import parse_mus


@pytest.fixture(scope="module", autouse=True)
def _warm():
    engine.warm_up()


@pytest.fixture
def lab():
    lab = FVBMLab()
    yield lab
    lab.runner.close()


def pump(lab, until=None, timeout=20.0):
    """Drain the runner into the views like the periodic callback does."""
    deadline = time.monotonic() + timeout
    while True:
        lab.on_records(lab.runner.drain())
        if until is None or until() or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    lab._status_time = 0.0  # force the text panes to refresh
    lab.on_records(lab.runner.drain())


def n_points(lab, name="BSLM"):
    return lab.logpl.n_points(f"{name}/log_pl")


def test_default_state_is_simulated_bslm_paused(lab):
    assert lab.source.value == "simulated" and lab.d.value == 10
    assert list(lab.runner.trainers) == ["BSLM"]
    assert not lab.runner.playing
    assert lab.data.mple_logpl is not None and lab.data.data.truth is not None
    assert lab.sweep_counter.object == "Sweep 0"
    assert n_points(lab) == 0


def test_step_adds_exactly_one_point_and_stays_monotone(lab):
    lab._step()
    lab.runner.wait_idle()
    pump(lab)
    assert n_points(lab) == 1
    assert lab.sweep_counter.object == "Sweep 1"
    lab._step()
    lab.runner.wait_idle()
    pump(lab)
    assert n_points(lab) == 2
    ys = lab.logpl.sources["BSLM/log_pl"].data["y"]
    assert ys[1] > ys[0]
    assert lab.monotone.level == "ok" and "Monotone" in lab.monotone.text
    assert lab.heat_est.source.data["value"] is not None
    assert len(lab.heat_est.source.data["value"]) == 100
    assert lab.mse.n_points("BSLM/mse") == 2


def test_play_pause_and_reset(lab):
    lab.speed.value = "as fast as possible"
    lab._play()
    pump(lab, until=lambda: n_points(lab) >= 30)
    lab._pause()
    lab.runner.wait_idle()
    pump(lab)
    count = n_points(lab)
    assert count >= 30
    assert lab.play.disabled is False and lab.pause.disabled is True
    time.sleep(0.3)
    pump(lab)
    assert n_points(lab) == count
    # the gap to the MPLE shrinks towards 0 and is never negative beyond round-off
    gap = lab.data.mple_logpl - lab._last_logpl["BSLM"]
    assert -1e-6 * abs(lab.data.mple_logpl) < gap
    lab._reset()
    pump(lab)
    assert n_points(lab) == 0 and lab.sweep_counter.object == "Sweep 0"


def test_bad_upload_keeps_previous_data(lab):
    before = lab.data
    lab.source.value = "upload"
    lab.upload.filename = "bad.csv"
    lab.upload.value = b"a,b\n1,2\n7,x\n"
    assert lab.data is before
    assert lab.data_msg.pane.visible and lab.data_msg.level == "error"
    assert "Could not use" in lab.data_msg.text


def test_good_upload_switches_data(lab):
    rng = np.random.default_rng(0)
    X = rng.choice([-1, 1], size=(200, 4))
    X[:, 1] = np.where(rng.random(200) < 0.8, X[:, 0], -X[:, 0])
    csv = "p,q,r,s\n" + "\n".join(",".join(str(v) for v in row) for row in X)
    lab.source.value = "upload"
    lab.upload.filename = "mine.csv"
    lab.upload.value = csv.encode()
    assert lab.data.data.X.shape == (200, 4)
    assert lab.heat_est.labels == ["p", "q", "r", "s"]
    assert not lab.mse.view.visible and not lab.heat_true.view.visible  # no truth
    lab._step()
    lab.runner.wait_idle()
    pump(lab)
    assert n_points(lab) == 1


def test_race_divergence_stops_one_trainer_only(lab):
    lab.source.value = "senate"
    lab.race_mus.value = "0.5, 50"
    lab.mode.value = "Race"
    assert list(lab.runner.trainers) == ["BSLM", "GA μ=0.5", "GA μ=50"]
    lab.speed.value = "as fast as possible"
    lab._play()
    pump(lab, until=lambda: lab.runner.states["GA μ=50"].status == "diverged"
         and lab._sweeps["BSLM"] > 20)
    assert lab.runner.states["GA μ=50"].status == "diverged"
    assert lab.runner.states["BSLM"].status in ("running", "converged")
    assert lab.run_status.level == "error" and "diverged" in lab.run_status.text
    lab._pause()


def test_invalid_race_steps_show_a_message(lab):
    lab.mode.value = "Race"
    trainers = lab.runner.trainers
    lab.race_mus.value = "fast, faster"
    assert lab.algo_msg.pane.visible and "numbers" in lab.algo_msg.text
    assert lab.runner.trainers is trainers


def test_parse_mus():
    assert parse_mus("0.5, 1.5;2") == [0.5, 1.5, 2.0]
    for bad in ("", "0", "-1", "nan", "a"):
        with pytest.raises(ValueError):
            parse_mus(bad)
