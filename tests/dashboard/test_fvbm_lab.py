"""The FVBM lab's logic without a browser: controls -> runner -> views."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from boltzlab import engine
from boltzlab.dashboard.labs.fvbm import FVBMLab
from boltzlab.dashboard.labs.fvbm_setup import (BOUND_LABEL, LBFGS_LABEL, SQUAREM_LABEL, load_data,
                                       monotone_guaranteed, parse_mus, trainer_factory)
from tests.waiting import tick


@pytest.fixture(scope="module", autouse=True)
def _warm():
    engine.warm_up()


@pytest.fixture
def lab():
    lab = FVBMLab()
    yield lab
    lab.runner.close()


def pump(lab, until=None, timeout=120.0):
    """Drain the runner into the views like the periodic callback does, until ``until()``
    holds (an ``AssertionError`` if it does not within the generous ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        tick(lab)
        if until is None or until():
            break
        assert time.monotonic() < deadline, f"pump: condition not met within {timeout} s"
        time.sleep(0.05)
    lab._status_time = 0.0  # force the text panes to refresh
    tick(lab)


def n_points(lab, name="BSLM"):
    return lab.logpl.n_points(f"{name}/log_pl")


def test_default_state_is_simulated_bslm_paused(lab):
    assert lab.widgets["source"].value == "simulated" and lab.widgets["d"].value == 10
    assert list(lab.runner.trainers) == ["BSLM"]
    assert not lab.runner.playing
    assert lab.data.mple_logpl is not None and lab.data.data.truth is not None
    assert lab.counter_pane.object == "Sweep 0"
    assert n_points(lab) == 0


def test_step_adds_exactly_one_point_and_stays_monotone(lab):
    lab._step()
    assert lab.runner.wait_idle(60)
    pump(lab)
    assert n_points(lab) == 1
    assert lab.counter_pane.object == "Sweep 1"
    lab._step()
    assert lab.runner.wait_idle(60)
    pump(lab)
    assert n_points(lab) == 2
    ys = lab.logpl.sources["BSLM/log_pl"].data["y"]
    assert ys[1] > ys[0]
    assert lab.monotone.level == "ok" and "Monotone" in lab.monotone.text
    assert lab.heat_est.source.data["value"] is not None
    assert len(lab.heat_est.source.data["value"]) == 100
    assert lab.mse.n_points("BSLM/mse") == 2


def test_play_pause_and_reset(lab):
    lab.widgets["speed"].value = "as fast as possible"
    lab._play()
    pump(lab, until=lambda: n_points(lab) >= 30)
    lab._pause()
    assert lab.runner.wait_idle(60)
    pump(lab)
    count = n_points(lab)
    assert count >= 30
    assert lab.play_button.disabled is False and lab.pause_button.disabled is True
    time.sleep(0.3)
    pump(lab)
    assert n_points(lab) == count
    # the gap to the MPLE shrinks towards 0 and is never negative beyond round-off
    gap = lab.data.mple_logpl - lab._last_logpl["BSLM"]
    assert -1e-6 * abs(lab.data.mple_logpl) < gap
    lab._reset()
    pump(lab)
    assert n_points(lab) == 0 and lab.counter_pane.object == "Sweep 0"


def test_bad_upload_keeps_previous_data(lab):
    before = lab.data
    lab.widgets["source"].value = "upload"
    lab.upload.filename = "bad.csv"
    lab.upload.value = b"a,b\n1,2\n7,x\n"
    assert lab.settings_msg.level == "info" and "Choose a CSV file" in lab.settings_msg.text  # not an error
    assert lab.jobs.wait(60)  # the upload is read as a job
    assert lab.data is before
    assert lab.data_msg.pane.visible and lab.data_msg.level == "error"
    assert "Could not use" in lab.data_msg.text


def test_good_upload_switches_data(lab):
    rng = np.random.default_rng(0)
    X = rng.choice([-1, 1], size=(200, 4))
    X[:, 1] = np.where(rng.random(200) < 0.8, X[:, 0], -X[:, 0])
    csv = "p,q,r,s\n" + "\n".join(",".join(str(v) for v in row) for row in X)
    lab.widgets["source"].value = "upload"
    lab.upload.filename = "mine.csv"
    lab.upload.value = csv.encode()
    assert lab.jobs.wait(60)  # the upload is read as a job
    assert lab.data.data.X.shape == (200, 4)
    assert lab.heat_est.labels == ["p", "q", "r", "s"]
    assert not lab.mse.view.visible and not lab.heat_true.view.visible  # no truth
    lab._step()
    assert lab.runner.wait_idle(60)
    pump(lab)
    assert n_points(lab) == 1


def test_race_divergence_stops_one_trainer_only(lab):
    lab.widgets["source"].value = "senate"
    lab.widgets["race_mus"].value = "0.5, 50"
    lab.widgets["mode"].value = "Race"
    assert list(lab.runner.trainers) == ["BSLM", "GA μ=0.5", "GA μ=50", BOUND_LABEL, SQUAREM_LABEL,
                                         LBFGS_LABEL]
    lab.widgets["speed"].value = "as fast as possible"
    lab._play()
    pump(lab, until=lambda: lab.runner.states["GA μ=50"].status == "diverged"
         and lab._sweeps["BSLM"] > 20)
    assert lab.runner.states["GA μ=50"].status == "diverged"
    assert lab.runner.states["BSLM"].status in ("running", "converged")
    assert lab.run_status.level == "error" and "diverged" in lab.run_status.text
    lab._pause()


def test_invalid_race_steps_show_a_message(lab):
    lab.widgets["mode"].value = "Race"
    trainers = lab.runner.trainers
    lab.widgets["race_mus"].value = "fast, faster"
    assert lab.settings_msg.pane.visible and "numbers" in lab.settings_msg.text
    assert lab.runner.trainers is trainers


def test_parse_mus():
    assert parse_mus("0.5, 1.5;2") == [0.5, 1.5, 2.0]
    for bad in ("", "0", "-1", "nan", "a"):
        with pytest.raises(ValueError):
            parse_mus(bad)


def _watch_events(lab):
    """Render ``lab`` into a Bokeh Document; log (model, doc held?) for every change."""
    from bokeh.document import Document

    doc = Document()
    doc.add_root(lab.panel().get_root(doc))
    log = []
    trigger = doc.callbacks.trigger_on_change

    def spy(event):
        log.append((getattr(event, "model", None), bool(doc.callbacks.hold_value)))
        return trigger(event)

    doc.callbacks.trigger_on_change = spy
    return doc, log


def test_data_switch_sends_the_heatmaps_in_one_held_message(lab):
    """Regression: switching data emptied the heatmap sources outside a hold and refilled
    them inside ``pn.io.hold``.  In a served session Panel writes a held batch at once and
    the earlier unheld events after it, so the browser ended with empty heatmaps that
    later patches (values only) never filled: M̂ stayed blank after Race + Senate votes.
    Every change a data switch makes must go out in one held message, in order."""
    from panel.io.state import set_curdoc

    lab.panel()  # the heatmaps' tab in view: only that tab of the stage is in the document
    lab.stage_tabs.active = 2  # "Couplings M" (FVBMLab.stage)
    doc, log = _watch_events(lab)
    with set_curdoc(doc):
        lab.widgets["mode"].value = "Race"
        log.clear()
        lab.widgets["source"].value = "senate"
    sources = {lab.heat_est.source, lab.heat_true.source, lab.heat_diff.source}
    held = [h for model, h in log if model in sources]
    assert held, "the heatmaps were not updated"
    assert all(held), "some heatmap changes were sent outside the hold"
    clicked = {model for model, _ in lab.widgets["source"]._models.values()}  # the widget itself
    assert all(h for model, h in log if model not in clicked), \
        "some changes of the data switch were not held"
    # the views draw Records only: M̂ fills with the first sweep of the new data
    lab.runner.step_once()
    assert lab.runner.wait_idle(60)
    tick(lab)
    lab.refresh_status()
    assert len(lab.heat_est.source.data["row"]) == len(lab.data.columns) ** 2


def test_heatmap_shows_the_latest_estimate_of_a_converged_trainer(lab):
    lab.widgets["mode"].value = "Race"
    lab.widgets["source"].value = "senate"
    lab.widgets["speed"].value = "as fast as possible"
    lab._play()
    pump(lab, until=lambda: lab.runner.states["BSLM"].status == "converged")
    lab._pause()
    assert lab.runner.wait_idle(60)
    pump(lab)
    assert lab.runner.states["BSLM"].status == "converged"
    assert lab.heat_pick.value == "BSLM"
    shown = np.asarray(lab.heat_est.source.data["value"], dtype=float)
    final = np.asarray(lab.runner.trainers["BSLM"].M, dtype=float)
    assert len(lab.heat_est.source.data["row"]) == 64
    np.testing.assert_allclose(shown, final.ravel())
    assert np.abs(shown).max() > 0.05
    assert lab.heat_est.figure.title.text.endswith("(BSLM)")


def test_legends_sit_outside_the_plot_area_and_hide_lines_on_click(lab):
    lab.widgets["mode"].value = "Race"
    for curve in (lab.logpl, lab.loglik, lab.mse):
        assert curve.legend in curve.figure.below and curve.legend not in curve.figure.center
        assert curve.legend.click_policy == "hide"
        # every run's entry in that one legend; the pinned runs' in their own, also below
        assert [legend.name for legend in curve.figure.legend] == [None, "pins"]
        assert curve.pin_layer.legend in curve.figure.below
    labels = [item.label.value for item in lab.logpl.legend.items]
    assert {"BSLM", "GA μ=0.5", "GA μ=2.5", BOUND_LABEL, SQUAREM_LABEL, LBFGS_LABEL, "MPLE (target)",
            "first decrease"} <= set(labels)
    # one entry hides a run's log-PL (solid) and its log-increase (dashed) together
    bslm = lab.logpl.legend_item("BSLM")
    assert sorted(r.name for r in bslm.renderers) == ["BSLM", "BSLM: log₁₀ increase"]


def test_first_decrease_is_listed_only_once_marked(lab):
    assert not lab.decrease_item.visible
    lab._step()
    assert lab.runner.wait_idle(60)
    pump(lab)
    assert not lab.decrease_item.visible  # BSLM never decreases
    lab.widgets["source"].value = "senate"
    lab.widgets["race_mus"].value = "8"  # overshoots: decreases within a few sweeps
    lab.widgets["mode"].value = "Race"
    assert not lab.decrease_item.visible
    for _ in range(3):
        lab._step()
        assert lab.runner.wait_idle(60)
    pump(lab)
    assert lab._first_decrease and lab.decrease_item.visible
    assert len(lab.decrease_source.data["x"]) == 1
    lab._reset()
    assert not lab.decrease_item.visible and len(lab.decrease_source.data["x"]) == 0


def test_no_mple_shows_a_short_warning_no_target_and_still_trains(lab):
    lab.widgets["d"].value = 20  # n = 16000, seed 1: the MPLE does not exist
    assert "Simulating d = 20" in lab.settings_msg.text  # a job: larger than the default data
    assert lab.jobs.wait(120)
    assert lab.data.mple_logpl is None
    assert lab.data_msg.pane.visible and lab.data_msg.level == "warn"
    assert "No MPLE" in lab.data_msg.text and len(lab.data_msg.text) < 300
    assert "does not exist" in lab.data_msg.details  # the engine's reason, folded
    assert "<details" in lab.data_msg.pane.object
    assert "No MPLE" in lab.data_info.object
    for curve in (lab.logpl, lab.loglik):
        assert len(curve._target.data["x"]) == 0 and not curve._target_item.visible
    lab._step()
    assert lab.runner.wait_idle(60)
    pump(lab)
    assert n_points(lab) == 1 and lab.counter_pane.object == "Sweep 1"
    assert "<td>–</td>" in lab.summary_table.object  # no gap to a target that does not exist
    lab.widgets["d"].value = 10  # the MPLE exists again: warning gone, target back
    assert not lab.data_msg.pane.visible
    assert len(lab.logpl._target.data["x"]) == 2 and lab.logpl._target_item.visible


def test_race_runs_the_bound_and_lbfgs_beside_bslm(lab):
    lab.widgets["source"].value = "senate"
    lab.widgets["race_mus"].value = "2.5"
    lab.widgets["mode"].value = "Race"
    assert list(lab.runner.trainers) == ["BSLM", "GA μ=2.5", BOUND_LABEL, SQUAREM_LABEL, LBFGS_LABEL]
    # fixed colours for the two new racers, distinct from every other line
    names = set(lab.runner.trainers)
    glyphs = {r.name: r.glyph.line_color for r in lab.logpl.figure.renderers
              if getattr(r, "name", None) in names}
    assert set(glyphs) == names
    assert glyphs[BOUND_LABEL] == "#17becf" and glyphs[LBFGS_LABEL] == "#7f7f7f"
    assert len(set(glyphs.values())) == len(glyphs)
    lab.widgets["speed"].value = "as fast as possible"
    lab._play()
    pump(lab, until=lambda: all(lab.runner.states[n].status == "converged"
                                for n in (BOUND_LABEL, SQUAREM_LABEL, LBFGS_LABEL)))
    lab._pause()
    assert lab.runner.wait_idle(60)
    pump(lab)
    for name in (BOUND_LABEL, SQUAREM_LABEL, LBFGS_LABEL):
        assert lab.runner.states[name].status == "converged"
        ys = np.asarray(lab.logpl.sources[f"{name}/log_pl"].data["y"], dtype=float)
        assert len(ys) >= 2
        # both end at the MPLE: the gap is at most the stopping tolerance's order
        assert abs(lab.data.mple_logpl - lab._last_logpl[name]) < 1e-3
        assert f"<td>{name}</td>" in lab.summary_table.object
    for name in (BOUND_LABEL, SQUAREM_LABEL):  # majorization (SQUAREM keeps only improvements): monotone
        bound = np.asarray(lab.logpl.sources[f"{name}/log_pl"].data["y"], dtype=float)
        assert np.all(np.diff(bound) >= -1e-9 * np.abs(bound[1:]))
        assert name not in lab._first_decrease


def test_monotone_badge_allows_decreases_only_without_a_guarantee(lab):
    lab.widgets["race_mus"].value = "0.5, 8"
    lab.widgets["mode"].value = "Race"
    trainers = lab.runner.trainers
    assert [monotone_guaranteed(trainers[n]) for n in trainers] == [True, True, False, True, True, False]
    lab._sweeps = {n: 5 for n in trainers}
    lab._first_decrease = {LBFGS_LABEL: 4, "GA μ=8": 2}
    lab.refresh_status()
    assert lab.monotone.level == "warn" and lab.monotone.text == "✓ Guaranteed runs monotone; 2 others fell"
    # which ones, and when, on hover: the one line fits a projector's status row
    assert lab.monotone.details == "Decreased (no guarantee): L-BFGS at sweep 4; GA μ=8 at sweep 2"
    lab._first_decrease = {LBFGS_LABEL: 4, BOUND_LABEL: 3}
    lab.refresh_status()
    assert lab.monotone.level == "error" and "Not monotone" in lab.monotone.text
    assert BOUND_LABEL in lab.monotone.text and "L-BFGS" not in lab.monotone.text
    lab._first_decrease = {}
    lab.refresh_status()
    assert lab.monotone.level == "ok" and "Monotone so far" in lab.monotone.text


def test_trainer_factory_builds_the_race():
    data = load_data("simulated", d=4, n=500, seed=2)
    build = trainer_factory(data, race_mus=[0.5], tol=1e-4, init="random", seed=3)
    trainers = build()
    assert list(trainers) == ["BSLM", "GA μ=0.5", BOUND_LABEL, SQUAREM_LABEL, LBFGS_LABEL]
    starts = {n: t.log_pl for n, t in trainers.items()}
    assert max(starts.values()) - min(starts.values()) < 1e-8 * abs(starts["BSLM"])  # same start
    for trainer in trainers.values():
        record = trainer.step()
        assert {"sweep", "log_pl", "increase", "first_decrease", "mse"} <= set(record.scalars)
        assert record["M"].shape == (4, 4)


def _race_steps(lab, mus: str, steps: int) -> None:
    lab.apply_settings({"mode": "Race", "race_mus": mus})
    for _ in range(steps):
        lab.runner.step_once()
        assert lab.runner.wait_idle(120.0)
        tick(lab)


def test_the_default_race_converges_and_its_axis_follows_the_data(lab):
    assert lab.widgets["race_mus"].value == "0.5, 2.5"  # divergence has a preset of its own
    _race_steps(lab, lab.widgets["race_mus"].value, 30)
    assert math.isnan(lab.logpl.figure.y_range.start)  # nothing to keep out: the axis is Bokeh's
    assert all(v >= lab._first_logpl["BSLM"] - 2 * (lab.data.mple_logpl - lab._first_logpl["BSLM"])
               for v in lab._lowest.values())  # every run within reach of the monotone ones


def test_a_diverging_run_does_not_squash_the_others(lab):
    _race_steps(lab, "0.5, 20", 30)
    start = lab.logpl.figure.y_range.start
    assert math.isfinite(start)
    assert lab._lowest["GA μ=20"] < start  # the diverging run leaves the plot ...
    assert all(v >= start for n, v in lab._lowest.items() if n != "GA μ=20")  # ... the others stay whole
    # and the axis still spans the climb to the MPLE: the converging runs are not a flat line
    assert lab.data.mple_logpl - start < 0.5 * (lab.data.mple_logpl - lab._lowest["GA μ=20"])
    lab.apply_settings({"race_mus": "0.5"})  # a new race: the axis follows its data again
    assert math.isnan(lab.logpl.figure.y_range.start)
