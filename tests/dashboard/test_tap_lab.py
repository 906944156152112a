"""The TAP lab's logic without a browser: controls -> runner -> views, and its helpers."""

from __future__ import annotations

import re

import math
import pickle
import threading
import time
from concurrent.futures import Future

import numpy as np
import pytest

from boltzlab.dashboard import jobs
from boltzlab.dashboard.labs import tap as tap_lab
from boltzlab.dashboard.labs import tap_setup
from boltzlab.dashboard.labs.tap import COMPUTING, DEFAULTS, TAPLab
from boltzlab.dashboard.labs.tap_setup import GroundTruthTrainer, History, trainer_factory
from boltzlab.engine import rbm, tap_analysis
from boltzlab.engine.stepping import Record
from tests.dashboard.test_fvbm_lab import pump
from tests.waiting import tick


@pytest.fixture
def lab():
    lab = TAPLab()
    lab.panel()
    yield lab
    lab.close()


def steps(lab, k):
    """k single steps, then one tick as the UI would (the analyses it starts are not awaited)."""
    for _ in range(k):
        lab.runner.step_once()
    assert lab.runner.wait_idle(120)
    tick(lab)
    lab.refresh_status()


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


def test_the_ground_truth_trainer_travels_to_a_worker_process():
    trainer = trainer_factory("digits", n_hidden=6, batch_size=50, n_chains=20)()["TAP"]
    copy = pickle.loads(pickle.dumps(trainer))  # as the distributed runner ships it
    assert isinstance(copy, GroundTruthTrainer) and copy.n_hidden == 6
    assert copy.step().scalars["ll_exact"] == pytest.approx(trainer.step().scalars["ll_exact"])


def test_large_models_train_without_the_ground_truth_wrapper():
    trainer = trainer_factory("digits", n_hidden=30, batch_size=50, n_chains=10)()["TAP"]
    assert not isinstance(trainer, GroundTruthTrainer)


def test_bad_settings_are_reported_where_they_were_made(lab):
    trainers = lab.runner.trainers
    with pytest.raises(ValueError, match=re.escape("The 'K' setting must be in [1, 2000]. Got '0'.")):
        lab.apply_settings({"K": 0})
    assert lab.K != 0 and lab.runner.trainers is trainers


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
    assert lab.widgets["data"].value == "mnist"
    assert (lab.widgets["n_hidden"].value, lab.widgets["gamma"].value, lab.widgets["batch"].value) == tuple(DEFAULTS["mnist"][k] for k in
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
    lab.widgets["data"].value = "digits"
    assert lab.widgets["n_hidden"].value == DEFAULTS["digits"]["n_hidden"]
    lab._play()
    pump(lab, until=lambda: len(lab.history.snapshots) >= 2, timeout=120)
    lab._pause()
    lab.runner.wait_idle()
    pump(lab)
    assert lab.jobs.wait(180)  # the Isomap jobs of the newest snapshots
    assert lab.ll_curve.n_points("ll") >= 5 and lab.ll_curve.n_points("count") >= 5  # ~8 steps per epoch
    # the solution count's trend: at each point the mean of the last COUNT_WINDOW raw counts
    raw = np.asarray(lab.ll_curve.sources["count"].data["y"], dtype=float)
    trend = np.asarray(lab.ll_curve.sources["count_trend"].data["y"], dtype=float)
    window = tap_lab.COUNT_WINDOW
    expected = [raw[max(0, i - window + 1):i + 1].mean() for i in range(len(raw))]
    np.testing.assert_allclose(trend, expected)
    assert lab.truth.n_points("exact") >= 5 and lab.truth.n_points("ais") >= 5
    assert len(lab.fe_points.data["x"]) >= lab.ll_curve.n_points("ll")
    assert lab.fields.n_tiles == DEFAULTS["digits"]["n_hidden"]
    assert len(lab.embedding.source.data["x"]) == len(lab.history.snapshots[-1].free_energies)
    assert len(lab.data_embedding.source.data["x"]) == 1000
    assert any(len(b.data["left"]) for b in lab.hist._bars)
    assert lab.counter_pane.object.startswith("Epoch ") and float(lab.counter_pane.object.split()[1]) >= 1.0
    lab._denoise_curve()
    assert lab.jobs.wait(180)  # the MCC curve, then the single digit through the model
    assert lab.mcc_curve.n_points("tap") == 7
    assert lab.denoise_grid.n_tiles == 5


def test_switching_data_applies_its_defaults_and_resets(lab):
    lab.widgets["data"].value = "digits"
    assert lab.widgets["n_hidden"].value == DEFAULTS["digits"]["n_hidden"] and lab.widgets["batch"].value == DEFAULTS["digits"]["batch"]
    assert lab.fields.image_shape == (8, 8)
    assert lab.truth.view.visible  # Nh = 16 <= 20: exact answers beside TAP
    assert lab.ll_curve.n_points("ll") == 0


def test_switching_data_with_named_settings_keeps_them(lab):
    lab.apply_settings({"data": "digits", "n_hidden": 5})
    assert lab.widgets["n_hidden"].value == 5 and lab.widgets["batch"].value == DEFAULTS["digits"]["batch"]
    assert lab.runner.trainers["TAP"].n_hidden == 5
    lab.apply_settings({"gamma": 0.02})  # the same data set: no defaults come back
    assert lab.widgets["n_hidden"].value == 5 and lab.widgets["gamma"].value == 0.02


SMALL = {"data": "digits", "n_hidden": 6, "batch": 50, "K": 20, "gamma": 0.05, "seed": 3}


def test_the_tick_only_submits_the_heavy_analyses(lab, monkeypatch):
    """Isomap fits and denoising are jobs: a tick (or a click) submits them and returns; the
    views say "Computing…" until a later tick hands the results over."""
    lab.apply_settings(SMALL)
    submitted = []

    def record(fn, *args):
        submitted.append(fn)
        return Future()  # never done: nothing may be drawn before it is

    monkeypatch.setattr(jobs, "submit", record)
    steps(lab, 2)
    assert tap_setup.solution_embedding in submitted and tap_setup.data_embedding in submitted
    assert lab.ll_curve.n_points("ll") == 2 and lab.fields.n_tiles == 6  # cheap views: drawn at once
    for view in (lab.embedding, lab.data_embedding):
        assert len(view.source.data["x"]) == 0 and view.placeholder.shown and "Computing" in view.placeholder.text
    fits = submitted.count(tap_setup.solution_embedding)
    steps(lab, 1)  # a newer snapshot while a fit is in flight: it waits for that fit
    assert submitted.count(tap_setup.solution_embedding) == fits and lab.busy()
    lab._denoise_curve()
    lab.denoise_p.value = 0.2
    assert tap_setup.denoise_curve in submitted and tap_setup.denoise_digit in submitted
    assert lab.mcc_curve.n_points("tap") == 0 and lab.denoise_grid.n_tiles == 0
    assert lab.mcc_curve.placeholder.text == COMPUTING and lab.denoise_grid.placeholder.text == COMPUTING
    lab._reset()  # a new run: the views forget "Computing…" and the jobs are dropped
    assert "Press ▶ Play" in lab.embedding.placeholder.text and not lab.jobs.running()
    assert lab.mcc_curve.placeholder.text == "Press Compute MCC vs p"  # its own button fills it, not ▶ Play


def test_the_isomap_views_say_what_they_wait_for_once_the_run_has_started(lab, monkeypatch):
    """Step (as the button does): from then until the first Isomap is drawn, Figs. 6-7 and the
    note beside their slider say what is happening (the first step's TAP solutions, then their
    Isomap, a job on a worker), never the stale "Press ▶ Play to start"; a new run says it again."""
    lab.apply_settings(SMALL)
    monkeypatch.setattr(jobs, "submit", lambda fn, *args: Future())  # the fits never come back
    views = (lab.embedding, lab.data_embedding)

    def said():
        return [view.placeholder.text for view in views if view.placeholder.shown] + [lab.isomap_note.object]

    assert all("Press ▶ Play" in view.placeholder.text and view.placeholder.shown for view in views)
    lab._step()  # the first step's Records are not drawn yet: no tick has run
    assert said() == [tap_lab.ISOMAP_WAITING] * 2 + [tap_lab.ISOMAP_WAITING_NOTE]
    assert lab.runner.wait_idle(120)
    tick(lab)  # the step's solutions are in, their Isomap jobs submitted (and never done)
    assert lab.history.snapshots and lab.jobs.running("isomap") and lab.jobs.running("isomap-data")
    assert all(len(view.source.data["x"]) == 0 for view in views)
    assert said() == [tap_lab.ISOMAP_COMPUTING] * 2 + [tap_lab.ISOMAP_COMPUTING_NOTE]
    assert "Isomap" in tap_lab.ISOMAP_COMPUTING and "Isomap of the TAP solutions" in tap_lab.ISOMAP_COMPUTING_NOTE
    lab._reset()
    assert all("Press ▶ Play" in view.placeholder.text and view.placeholder.shown for view in views)
    assert lab.isomap_note.object == ""
    lab._play()  # Play says it too
    assert said() == [tap_lab.ISOMAP_WAITING] * 2 + [tap_lab.ISOMAP_WAITING_NOTE]
    lab._pause()


def test_heavy_analyses_never_run_on_the_ui_thread(lab, monkeypatch):
    calls = []
    release = threading.Event()  # the analyses wait for it: drawn only after it is set

    def off_ui(fn):
        def guarded(*args, **kwargs):
            calls.append(fn.__name__)
            assert threading.current_thread() is not threading.main_thread(), f"{fn.__name__} on the UI thread"
            assert release.wait(120)
            return fn(*args, **kwargs)
        return guarded

    for name in ("fit_solution_embedding", "DataMap", "denoising_curve", "tap_denoiser"):
        monkeypatch.setattr(tap_analysis, name, off_ui(getattr(tap_analysis, name)))
    tap_setup._DATA_MAPS.clear()  # the data map is fitted in the job, once per data set
    lab.apply_settings(SMALL)
    steps(lab, 2)
    assert lab.jobs.running("isomap") and lab.jobs.running("isomap-data")  # submitted, not drawn ...
    assert len(lab.embedding.source.data["x"]) == 0 and len(lab.data_embedding.source.data["x"]) == 0
    release.set()
    assert lab.jobs.wait(120)  # ... until a later tick hands the results over
    assert len(lab.embedding.source.data["x"]) == len(lab.history.snapshots[-1].free_energies)
    assert len(lab.data_embedding.source.data["x"]) == 1000
    assert "Isomap fitted at epoch" in lab.isomap_note.object and "Fig. 6" in lab.embedding.figure.title.text
    lab.epoch_slider.value = 0  # an earlier snapshot: drawn from the fit, its digits' map in a job
    assert lab.jobs.wait(120)
    lab._denoise_curve()
    assert lab.jobs.wait(180)
    assert lab.mcc_curve.n_points("tap") == 7 and lab.denoise_grid.n_tiles == 5
    assert {"fit_solution_embedding", "DataMap", "denoising_curve", "tap_denoiser"} <= set(calls)
    lab.rank_by.value = "activation"  # ranking by mean activation is cheap (ms): drawn at once
    assert lab.fields.n_tiles == 6 and "by mean activation" in lab.fields.tiles.data["label"][0]


def test_a_failed_analysis_is_said_in_its_view_and_training_goes_on(lab, monkeypatch):
    def broken(solutions, seed=0):
        raise ValueError("no map today")

    monkeypatch.setattr("boltzlab.dashboard.labs.tap.solution_embedding", broken)
    lab.apply_settings(SMALL)
    steps(lab, 1)
    assert lab.jobs.wait(120)  # the error goes to the view, not out of the tick
    assert "no map today" in lab.embedding.placeholder.text and lab.embedding.placeholder.shown
    assert len(lab.data_embedding.source.data["x"]) == 1000  # the other analysis is drawn
    steps(lab, 1)
    assert lab.runner.states["TAP"].steps == 2 and lab.ll_curve.n_points("ll") == 2


def test_a_refused_data_switch_keeps_the_old_run_drawn_on_its_own_data(lab):
    from boltzlab.dashboard import budget

    steps(lab, 1)
    # each value allowed (K = 0 no longer even reaches the lab: the parameter's bounds refuse
    # it), but the run they make is refused: here by a server allowing no work at all
    budget.set_limits(1e-9, budget.DEFAULT_ISOMAP_ROWS)
    try:
        with pytest.raises(ValueError, match="This asks for"):
            lab.apply_settings({"data": "digits", "K": 50})
    finally:
        budget.set_limits(budget.DEFAULT_STEP_SECONDS, budget.DEFAULT_ISOMAP_ROWS)
    assert lab.settings_msg.pane.visible and lab.widgets["data"].value == "digits"
    assert lab.runner.trainers["TAP"].n_visible == 784 and lab.fields.image_shape == (28, 28)
    steps(lab, 1)  # the MNIST run goes on and its fields are drawn as 28x28 tiles
    assert lab.fields.n_tiles == DEFAULTS["mnist"]["n_hidden"] and lab.ll_curve.n_points("ll") == 2
    lab.widgets["K"].value = 20  # a valid setting: now the digits run, with the digits' views
    assert lab.runner.trainers["TAP"].n_visible == 64 and lab.fields.image_shape == (8, 8)


def test_while_playing_the_image_grids_are_drawn_only_in_view(lab, monkeypatch):
    """Hidden receptive fields, samples and solutions cost the shared event loop nothing while
    a run plays; a click on their tab draws them at the next tick; paused, all are drawn."""
    lab.widgets["data"].value = "digits"
    steps(lab, 2)  # paused: everything drawn at once
    assert lab.fields.n_tiles == DEFAULTS["digits"]["n_hidden"] and not lab._fields_stale
    playing = {"now": True}
    monkeypatch.setattr(type(lab.runner), "playing", property(lambda self: playing["now"]))
    drawn = []
    for name in ("_show_fields", "_show_samples", "_show_solutions"):
        monkeypatch.setattr(lab, name, lambda name=name: drawn.append(name) or
                            setattr(lab, "_fields_stale" if name != "_show_solutions" else "_solutions_stale", False))
    lab._fields_stale = lab._solutions_stale = True
    lab._fields_time = -math.inf
    assert lab.stage_tabs.active == 0
    lab.on_tick()
    assert drawn == [] and lab._fields_stale and lab._solutions_stale
    lab._fields_time = time.monotonic()  # drawn a moment ago: the click still draws at once
    lab.stage_tabs.active = list(lab.stage()).index(tap_lab.FIELDS_TAB)
    lab.on_tick()
    assert drawn == ["_show_fields", "_show_samples"] and lab._solutions_stale
    lab.stage_tabs.active = list(lab.stage()).index(tap_lab.ISOMAP_TAB)
    lab.on_tick()
    assert drawn[-1] == "_show_solutions"
    lab.stage_tabs.active = 0
    lab._fields_stale, playing["now"] = True, False
    lab.on_tick()  # paused: drawn whatever the tab
    assert drawn[-2:] == ["_show_fields", "_show_samples"]


def test_while_playing_the_histograms_are_drawn_only_in_view(lab, monkeypatch):
    """Fig. 5's histograms (four full redraws a snapshot) wait while their tab is hidden and
    a run plays; they are drawn when the tab comes into view, and at once when paused."""
    lab.widgets["data"].value = "digits"
    steps(lab, 2)  # paused: drawn at once
    assert not lab._histograms_stale and any(len(b.data["left"]) for b in lab.hist._bars)
    playing = {"now": True}
    monkeypatch.setattr(type(lab.runner), "playing", property(lambda self: playing["now"]))
    drawn = []
    real = lab._show_histograms
    monkeypatch.setattr(lab, "_show_histograms", lambda: drawn.append(1) or real())
    lab._update_epoch_widgets()  # a new snapshot while playing, the first tab in view
    assert lab._histograms_stale and lab.busy() and drawn == []
    lab.on_tick()
    assert lab._histograms_stale and drawn == []
    lab.stage_tabs.active = list(lab.stage()).index(tap_lab.HISTOGRAMS_TAB)
    lab.on_tick()
    assert not lab._histograms_stale and drawn == [1]
    lab.on_tick()
    assert drawn == [1]  # once per snapshot
    lab.stage_tabs.active = 0
    playing["now"] = False
    lab._update_epoch_widgets()  # paused: drawn whatever the tab
    assert not lab._histograms_stale and drawn == [1, 1]


def test_the_labs_denoiser_works_on_the_noisy_digit_it_shows():
    """Issue 46 item 5 (i): the Denoising tab's tiles, read back from the drawn grid: the clean
    held-out digit, that digit through the binary symmetric channel, and TAP's posterior mean
    computed from the *noisy* digit (a second code path: Algorithm 1 with the channel field
    of eq. 47 started at the noisy digit, on the lab's current model), not from the clean one."""
    from boltzlab.engine import tap
    from boltzlab.engine.images import load_images

    lab = TAPLab(data="digits", n_hidden=8, K=20, seed=0)
    try:
        lab.panel()
        steps(lab, 3)
        index, p = 4, 0.3
        lab.denoise_index.value = index
        lab.denoise_p.value = p  # each change submits the digit's job; the newest is drawn
        assert lab.jobs.wait(180)
        tick(lab)
        assert lab.denoise_grid.n_tiles == 5
        h, w = lab.denoise_grid.image_shape
        image = np.asarray(lab.denoise_grid.source.data["image"][0])[::-1]  # top row first
        tiles = [image[:h, j * (w + 1): j * (w + 1) + w].ravel() for j in range(5)]
        clean, noisy, tap_mean = tiles[0], tiles[1], tiles[2]
        x = load_images("digits").X_test[index].astype(float)
        np.testing.assert_array_equal(clean, x)
        np.testing.assert_array_equal(noisy, tap_analysis.binary_symmetric_channel(x[None], p, seed=index)[0])
        assert np.any(noisy != clean)  # p = 0.3 flips some of its 64 pixels
        W, b_vis, b_hid = (np.asarray(lab._last[k], dtype=float) for k in ("W", "b_vis", "b_hid"))
        Y = noisy[None]
        field = np.log((1 - p) / p) * (2 * Y - 1)  # eq. 47: log-odds of the channel, +-
        ref = tap.tap_fixed_points(W, b_vis, b_hid, Y, field_vis=field, damping=max(0.5, lab.damping), max_iter=2000)
        np.testing.assert_allclose(tap_mean, np.clip(ref.a_vis[0], 0, 1), rtol=0, atol=1e-9)
    finally:
        lab.close()
