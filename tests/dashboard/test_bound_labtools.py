"""Share / preset / checkpoint / present (dashboard.labtools) on the Bound lab, headless.

The race's runner is the lab's runner; the tightness view is settings only (they redraw, they
do not rebuild the race).  The FVBM race (d = 10, 55 parameters) and wine (42) keep every step
a few milliseconds.  J* and the tightness views are jobs: the helpers wait for them.
"""

from __future__ import annotations

import numpy as np
import pytest

from boltzlab.dashboard.labs.bound import RACE_COLORS, BoundLab
from boltzlab.dashboard.labtools import write_checkpoint
from boltzlab.engine import majorize
from tests.waiting import tick


@pytest.fixture(scope="module", autouse=True)
def _warm():
    majorize.warm_up_majorize()


@pytest.fixture
def make_lab():
    labs = []

    def make():
        lab = BoundLab()
        labs.append(lab)
        return lab

    yield make
    for lab in labs:
        lab.close()


def steps(lab, k):
    for _ in range(k):
        lab.runner.step_once()
        assert lab.runner.wait_idle(60)
        tick(lab)
    assert lab.jobs.wait(120)


def explain(lab):
    """Presentation mode's Next step: it returns at once; the tick after the step has come
    back (and J*, a job) says what changed."""
    lab.next_step()
    assert lab.tools.changed.object == "Computing this step…"
    assert lab.runner.wait_idle(60)
    tick(lab)
    assert lab.jobs.wait(120)
    return lab.tools.changed.object


def comparable(rows):
    """History rows without wall-clock entries (they differ between runs by nature)."""
    return [{k: v for k, v in row.items() if not any(w in k for w in ("time", "second", "elapsed"))} for row in rows]


def points(lab, name="Bound majorization"):
    return len(lab.sources[name]["by-iteration"].data["y"])


SMALL = {"problem": "fvbm", "reg": 1.0, "race_seed": 2, "model": "loglinear", "s_tilde": 1.5, "r_tilde": -0.5,
         "extra": "", "speed": "10 steps/s"}


def test_loaded_checkpoint_continues_exactly_like_an_uninterrupted_run(make_lab):
    lab = make_lab()
    lab.apply_settings(SMALL)
    assert lab.jobs.wait(120)
    names = list(lab.runner.trainers)
    assert names == list(RACE_COLORS)
    steps(lab, 4)
    content = write_checkpoint(lab.tools.checkpoint())
    steps(lab, 5)
    uninterrupted = {n: comparable(lab.runner.history.rows[n]) for n in names}

    other = make_lab()
    assert other.tools.load_bytes(content), other.tools.message.text
    assert other.tools.message.level == "ok"
    assert other.tools.settings_text() == {**lab.tools.settings_text()}
    assert other.widgets["problem"].value == "fvbm" and other.widgets["race_seed"].value == 2 and other.widgets["race_seed"].visible
    assert other.tightness.model.value == "loglinear" and other.tightness.tilde_src.data["s"] == [1.5]
    assert list(other.runner.trainers) == names
    assert points(other) == 4 and points(other, "Newton") == 4  # the curves redrawn from the history
    # J* recomputed for the loaded problem: the curves continue at the same heights
    assert other.J_star == pytest.approx(lab.J_star, rel=1e-12, abs=1e-9)
    np.testing.assert_allclose(other.sources["L-BFGS"]["by-iteration"].data["y"][:4],
                               lab.sources["L-BFGS"]["by-iteration"].data["y"][:4], rtol=1e-9)
    steps(other, 5)
    for n in names:
        assert comparable(other.runner.history.rows[n]) == uninterrupted[n], n
    assert points(other) == 9
    assert "<td>Newton</td>" in other.table.object


def test_bad_checkpoints_keep_the_current_run(make_lab):
    lab = make_lab()
    lab.apply_settings({"problem": "wine"})
    steps(lab, 3)
    before = comparable(lab.runner.history.rows["Bound majorization"])
    # not an npz
    assert not lab.tools.load_bytes(b"garbage", filename="junk.npz")
    assert lab.tools.message.level == "error" and "junk.npz" in lab.tools.message.text
    assert "unchanged" in lab.tools.message.text
    # another lab's checkpoint
    ckpt = lab.tools.checkpoint()
    ckpt.lab = "fvbm"
    assert not lab.tools.load_bytes(write_checkpoint(ckpt), filename="other.npz")
    assert lab.tools.message.level == "error" and "'fvbm' lab" in lab.tools.message.text
    # a checkpoint whose states do not fit the trainers its settings build: rolled back
    donor = make_lab()
    donor.apply_settings(SMALL)
    steps(donor, 2)
    bad = donor.tools.checkpoint()
    bad.states["L-BFGS"] = {k: (np.zeros(3) if np.ndim(v) == 1 else v) for k, v in bad.states["L-BFGS"].items()}
    assert not lab.tools.load_bytes(write_checkpoint(bad), filename="bad.npz")
    assert lab.tools.message.level == "error" and "unchanged" in lab.tools.message.text
    assert lab.widgets["problem"].value == "wine" and lab.tightness.model.value == "fvbm8"
    assert lab.runner.states["Bound majorization"].steps == 3
    assert comparable(lab.runner.history.rows["Bound majorization"]) == before
    assert points(lab) == 3 and points(lab, "Newton") == 3
    # and the run goes on from where it was
    steps(lab, 1)
    assert lab.runner.history.rows["Bound majorization"][-1]["iteration"] == 4


def test_every_preset_applies_and_says_what_to_watch(make_lab):
    lab = make_lab()
    for preset in lab.presets:
        steps(lab, 1)  # a race in progress: a preset starts a fresh one
        lab.tools.preset.value = preset.title
        assert lab.tools.message.level == "info", lab.tools.message.text
        assert preset.title in lab.tools.message.text and preset.note
        for name, value in preset.settings.items():
            assert lab.settings()[name].value == value, (preset.title, name)
        assert list(lab.runner.trainers) == list(RACE_COLORS)
        if set(preset.settings) - lab.view_settings - {"speed"}:  # a fresh race
            assert all(s.steps == 0 for s in lab.runner.states.values()), preset.title
            assert points(lab) == 0
        else:  # the tightness views' settings only redraw them: the race goes on
            assert all(s.steps >= 1 for s in lab.runner.states.values()), preset.title
            assert points(lab) >= 1
        assert lab.run_status.level != "error" and not lab.settings_msg.pane.visible
        assert lab.jobs.wait(120)
        assert lab.tightness.message.level == "ok", lab.tightness.message.text
    taylor = lab.presets[0]
    lab.tools.apply_preset(taylor)
    assert lab.jobs.wait(120)
    assert min(lab.tightness.main_src.data["taylor_gap"]) < -1.0  # visibly not a bound
    assert min(lab.tightness.main_src.data["gap"]) >= -1e-9


def test_url_round_trip_and_bad_values_are_named(make_lab):
    lab = make_lab()
    # R = 5 and s~ = 4 come together: s~ is checked against the new range, not the old R = 3
    lab.tools.apply_query({"bound.problem": [b"fvbm"], "bound.reg": [b"0.5"], "bound.race_seed": [b"3"],
                           "bound.radius": [b"5"], "bound.s_tilde": [b"4"], "bound.r_tilde": [b"-1.25"],
                           "bound.model": [b"chain"], "bound.speed": [b"warp 9"], "fvbm.d": [b"6"]})
    assert lab.tools.message.level == "warn" and "'speed'" in lab.tools.message.text
    assert "s_tilde" not in lab.tools.message.text
    assert lab.jobs.wait(120)
    assert lab.widgets["problem"].value == "fvbm" and lab.widgets["reg"].value == 0.5 and lab.widgets["race_seed"].value == 3
    assert lab.tightness.radius.value == 5 and lab.tightness.s_tilde.value == 4.0
    assert lab.tightness.s_tilde.end == 5 and lab.tightness.tilde_src.data["s"] == [4.0]
    assert lab.tightness.message.level == "ok"
    assert lab.widgets["speed"].value == "30 steps/s"  # the bad value is ignored
    query = lab.tools.query()
    assert query["bound.problem"] == "fvbm" and query["bound.s_tilde"] == "4"

    other = make_lab()
    other.tools.apply_query({k: [v.encode()] for k, v in query.items()})
    assert other.tools.message.level == "info"
    assert other.tools.settings_text() == lab.tools.settings_text()
    steps(lab, 2)
    steps(other, 2)
    for name in RACE_COLORS:
        assert comparable(other.runner.history.rows[name]) == comparable(lab.runner.history.rows[name]), name
    # a value out of range is named; the others apply
    third = make_lab()
    third.tools.apply_query({"bound.s_tilde": [b"9"], "bound.taylor": [b"0"]})
    assert third.tools.message.level == "warn" and "'s_tilde'" in third.tools.message.text
    assert third.tightness.s_tilde.value == 0.0  # the bad value is ignored
    assert third.jobs.wait(120)
    assert third.tightness.show_taylor.value is False and not third.tightness.taylor_line.visible
    # a value each widget accepts but the lab cannot draw: named too, the race still rebuilt
    third.tools.apply_query({"bound.extra": [b"1, banana"], "bound.problem": [b"breast_cancer"]})
    assert third.tools.message.level == "warn" and "numbers separated by commas" in third.tools.message.text
    assert third.tightness.message.level == "error"
    assert third.jobs.wait(120)
    assert third.widgets["problem"].value == "breast_cancer" and "569 training examples" in third.race_info.object
    assert third.runner.states["Newton"].steps == 0 and not third.settings_msg.pane.visible


def test_next_step_says_what_changed_and_rings_the_newest_points(make_lab):
    lab = make_lab()
    lab.apply_settings({"problem": "wine"})
    assert lab.jobs.wait(120)  # J* known
    lab.tools.set_presenting(True)
    assert lab.tools.next_step.visible
    text = explain(lab)
    assert "Bound majorization</b> step 1:" in text and "J − J*" in text
    assert "decades" in text and "monotone ✓" in text and text.count("<br>") == len(RACE_COLORS) - 1
    text = explain(lab)
    assert "step 2:" in text and "▼" in text
    ring = lab.newest["by-iteration"].data
    assert sorted(ring["method"]) == sorted(RACE_COLORS) and ring["x"] == [2] * len(RACE_COLORS)
    bound_row = lab.runner.history.rows["Bound majorization"][-1]
    i = ring["method"].index("Bound majorization")
    assert ring["y"][i] == pytest.approx(bound_row["objective"] - lab.J_star)
    assert len(lab.newest["by-time"].data["x"]) == len(RACE_COLORS)
    lab._reset()  # reset: the rings go
    assert not lab.newest["by-iteration"].data["x"] and not lab.newest["by-time"].data["x"]


def test_every_plot_has_a_title_axis_labels_and_a_hover(make_lab):
    from bokeh.models import HoverTool

    lab = make_lab()
    figures = [lab.tightness.line_fig, lab.tightness.gap_fig, lab.tightness.slice_fig, lab.by_iteration,
               lab.by_time]
    for fig in figures:
        assert fig.title.text
        assert fig.xaxis[0].axis_label and fig.yaxis[0].axis_label
        assert any(isinstance(t, HoverTool) and t.tooltips for t in fig.tools), fig.title.text
