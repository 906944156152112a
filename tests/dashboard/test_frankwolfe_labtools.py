"""Share / preset / checkpoint / present (dashboard.labtools) on the Frank-Wolfe lab, headless."""

from __future__ import annotations

import numpy as np
import panel as pn
import pytest
from bokeh.models import HoverTool

from boltzlab import engine
from boltzlab.dashboard.labs.frankwolfe import FrankWolfeLab
from boltzlab.dashboard.labtools import write_checkpoint
from tests.waiting import tick

# small and fast: 8x8 digits, few chains, exact log-likelihoods (max_hidden <= 20)
SMALL = {"data": "digits", "reg": 0.2, "bias_lr": 0.05, "samples": 60, "max_hidden": 12, "evaluate": "exact",
         "eval_every": 2, "seed": 3, "away": False}
# away steps: at lambda = 0.15 the third iteration removes a unit (insert, insert, remove, ...)
AWAY = {**SMALL, "reg": 0.15, "samples": 200, "evaluate": "ais", "eval_every": 1, "away": True, "max_hidden": 20}


@pytest.fixture(scope="module", autouse=True)
def _warm():
    engine.warm_up()


@pytest.fixture
def make_lab(make_lab):
    """The shared ``make_lab`` (tests/conftest.py: built headlessly, closed after the test with
    its runners and jobs) bound to the Frank-Wolfe lab."""
    return lambda settings=None: make_lab(FrankWolfeLab, settings)


def steps(lab, k):
    """k single steps, then one tick (and the jobs it started), as the UI would."""
    for _ in range(k):
        lab.runner.step_once()
    assert lab.runner.wait_idle(60)
    tick(lab)
    assert lab.jobs.wait(60)


def explain(lab):
    """Presentation mode's Next step: it returns at once; the tick after the step has come
    back says what changed (and highlights it)."""
    lab.next_step()
    assert lab.tools.changed.object == "Computing this step…"
    assert lab.runner.wait_idle(60)
    tick(lab)
    assert lab.jobs.wait(60)
    return lab.tools.changed.object


def comparable(rows):
    """History rows without wall-clock entries (they differ between runs by nature)."""
    return [{k: v for k, v in row.items() if not any(w in k for w in ("time", "second", "elapsed"))} for row in rows]


def fork_cd(lab):
    lab.widgets["cd_epochs"].value = 1
    lab._fork_cd()
    assert lab.cd_runner is not None
    return lab.cd_runner


# ---------------------------------------------------------------- (a) checkpoints resume exactly
@pytest.mark.parametrize("settings", [SMALL, AWAY], ids=["exact", "away-ais"])
def test_loaded_checkpoint_continues_exactly_like_an_uninterrupted_run(make_lab, settings):
    lab = make_lab(settings)
    steps(lab, 3)
    content = write_checkpoint(lab.tools.checkpoint())
    steps(lab, 4)
    uninterrupted = comparable(lab.runner.history.rows["FW"])
    assert len(uninterrupted) == 7
    if settings["away"]:
        assert any(row["away_step"] for row in uninterrupted)  # the case this checks

    other = make_lab()  # opens on MNIST: the checkpoint's settings come with it
    assert other.tools.load_bytes(content, filename="fw.npz")
    assert other.tools.message.level == "ok" and "fw.npz" in other.tools.message.text
    assert "CD comparison" in other.tools.message.text
    assert other.tools.settings_text() == lab.tools.settings_text()
    assert other.widgets["data"].value == "digits" and other.fields.image_shape == (8, 8)
    # the views are redrawn from the checkpoint's history and newest arrays
    n = int(uninterrupted[2]["n_hidden"])
    assert other.ll_curve.n_points("units") == 3 and other.inner_curve.n_points("inner") == 3
    assert other.fields.n_tiles == n and other.counter_pane.object == f"Hidden units: {n}"
    assert other.runner.states["FW"].steps == 3 and not other.fork.disabled
    steps(other, 4)
    assert comparable(other.runner.history.rows["FW"]) == uninterrupted
    np.testing.assert_array_equal(other.runner.history.arrays["FW"]["W"], lab.runner.history.arrays["FW"]["W"])
    assert other.ll_curve.n_points("units") == 7


def test_a_successful_load_resets_the_cd_fork_and_says_so(make_lab):
    lab = make_lab(SMALL)
    steps(lab, 2)
    content = write_checkpoint(lab.tools.checkpoint())
    fork_cd(lab)
    assert lab.tools.load_bytes(content)
    assert lab.cd_runner is None and lab.cd_curve.n_points("fw") == 0 and not lab.fork_line.visible
    assert "not part of a checkpoint" in lab.cd_status.text and "CD comparison" in lab.tools.message.text
    # forking again from the loaded model works
    assert fork_cd(lab) is not None


# ---------------------------------------------------------------- (b) bad checkpoints change nothing
def test_bad_file_keeps_the_current_run(make_lab):
    lab = make_lab(SMALL)
    steps(lab, 3)
    before = comparable(lab.runner.history.rows["FW"])
    assert not lab.tools.load_bytes(b"garbage", filename="junk.npz")
    assert lab.tools.message.level == "error" and "junk.npz" in lab.tools.message.text
    assert "unchanged" in lab.tools.message.text
    assert comparable(lab.runner.history.rows["FW"]) == before
    assert lab.ll_curve.n_points("units") == 3 and lab.runner.states["FW"].steps == 3


def test_checkpoint_of_another_lab_is_refused(make_lab):
    from boltzlab.dashboard.labtools import Checkpoint
    lab = make_lab(SMALL)
    steps(lab, 1)
    ckpt = lab.tools.checkpoint()
    foreign = write_checkpoint(Checkpoint("fvbm", ckpt.settings, ckpt.states, ckpt.history))
    assert not lab.tools.load_bytes(foreign)
    assert lab.tools.message.level == "error" and "'fvbm' lab" in lab.tools.message.text
    assert lab.runner.states["FW"].steps == 1


def test_checkpoint_that_does_not_fit_the_trainer_is_rolled_back(make_lab):
    source = make_lab(SMALL)
    steps(source, 2)
    ckpt = source.tools.checkpoint()
    ckpt.states["FW"]["chains"] = np.zeros((7, 64))  # not the trainer's S x Nv chains
    lab = make_lab({**SMALL, "seed": 9, "max_hidden": 15})
    steps(lab, 3)
    cd = fork_cd(lab)
    state = lab.runner.trainers["FW"].state_dict()
    rows = comparable(lab.runner.history.rows["FW"])
    assert not lab.tools.load_bytes(write_checkpoint(ckpt), filename="bad.npz")
    assert lab.tools.message.level == "error" and "chains" in lab.tools.message.text
    assert lab.widgets["seed"].value == 9 and lab.widgets["max_hidden"].value == 15  # the settings are back
    assert lab.runner.states["FW"].steps == 3 and comparable(lab.runner.history.rows["FW"]) == rows
    assert lab.ll_curve.n_points("units") == 3 and lab.fields.n_tiles == 3
    restored = lab.runner.trainers["FW"].state_dict()
    for key, value in state.items():
        np.testing.assert_array_equal(np.asarray(restored[key]), np.asarray(value), err_msg=key)
    assert lab.cd_runner is cd  # a failed load leaves the CD fork alone
    # ... and its log-likelihood job (iteration 3 was not evaluated), cancelled by the redraw, starts again
    assert lab._fork is not None and lab._fork["ll"] is None
    tick(lab)
    assert lab.jobs.wait(60)
    tick(lab)
    assert lab.fork_line.visible and "Frank-Wolfe at the fork: -" in lab.cd_status.text


# ---------------------------------------------------------------- (c) presets
def test_every_preset_applies_and_says_what_to_watch(make_lab):
    lab = make_lab()
    assert 3 <= len(lab.presets) <= 5
    resets = []
    reset = lab.runner.reset
    lab.runner.reset = lambda factory=None: (resets.append(factory), reset(factory))
    for preset in lab.presets:
        resets.clear()
        lab.tools.preset.value = preset.title
        assert len(resets) == 1, preset.title  # many widgets set, the run rebuilt once
        assert lab.tools.message.level == "info", lab.tools.message.text
        assert preset.title in lab.tools.message.text and preset.note
        for name, value in preset.settings.items():
            assert lab.settings()[name].value == value, (preset.title, name)
        trainer = lab.runner.trainers["FW"]
        assert trainer.reg == preset.settings["reg"] and trainer.away_steps == preset.settings["away"]
        assert trainer.max_hidden == preset.settings["max_hidden"]
        assert not lab.settings_msg.pane.visible and lab.ll_curve.n_points("units") == 0


# ---------------------------------------------------------------- (d) URL query
def test_url_settings_apply_and_bad_ones_are_named(make_lab):
    lab = make_lab()
    query = {f"frankwolfe.{k}": [str(v).encode()] for k, v in SMALL.items() if k != "away"}
    query.update({"frankwolfe.away": [b"0"], "frankwolfe.evaluate": [b"sometimes"], "fvbm.d": [b"3"]})
    lab.tools.apply_query(query)
    assert lab.tools.message.level == "warn" and "'evaluate'" in lab.tools.message.text
    assert lab.widgets["data"].value == "digits" and lab.widgets["samples"].value == 60 and lab.widgets["seed"].value == 3
    assert lab.widgets["evaluate"].value == "auto"  # the bad value is ignored, the others apply
    trainer = lab.runner.trainers["FW"]
    assert trainer.samples == 60 and trainer.n_visible == 64
    # the query text of a lab reproduces its settings and its first Records in a fresh lab
    text = lab.tools.query()
    assert text["frankwolfe.data"] == "digits" and text["frankwolfe.away"] == "0"
    other = make_lab()
    other.tools.apply_query({k: [v.encode()] for k, v in text.items()})
    assert other.tools.message.level == "info"
    assert other.tools.settings_text() == lab.tools.settings_text()
    steps(lab, 2)
    steps(other, 2)
    assert comparable(other.runner.history.rows["FW"]) == comparable(lab.runner.history.rows["FW"])


def test_url_settings_that_make_no_valid_run_keep_the_current_one(make_lab):
    lab = make_lab(SMALL)
    steps(lab, 1)
    # exact log Z of MNIST at 100 units is not enumerable: no valid run
    lab.tools.apply_query({"frankwolfe.data": [b"mnist"], "frankwolfe.evaluate": [b"exact"],
                           "frankwolfe.max_hidden": [b"100"]})
    assert lab.tools.message.level == "warn" and "evaluate" in lab.tools.message.text
    assert lab.runner.trainers["FW"].n_visible == 64 and lab.runner.states["FW"].steps == 1


# ---------------------------------------------------------------- (e) presentation mode
def test_next_step_names_the_inserted_unit_and_highlights_it(make_lab):
    lab = make_lab({**SMALL, "eval_every": 1})
    lab.tools.set_presenting(True)
    assert lab.tools.next_step.visible
    text = explain(lab)
    assert "Iteration 1" in text and "#1 inserted" in text and "eq. 9" in text and "J(w*)" in text
    assert "‖Δb‖" in text and "test log-likelihood" in text and "→" not in text
    assert lab.fields.n_tiles == 1 and len(lab.fields.box.data["left"]) == 1  # outlined
    assert lab.mark_inner.data["x"] == [1] and lab.mark_ll.data["x"] == [1] and lab.mark_inner_item.visible
    text = explain(lab)
    assert "Iteration 2" in text and "#2 inserted" in text and "→" in text and ("▲" in text or "▼" in text)
    assert lab.fields.n_tiles == 2 and lab.fields.box.data["left"]
    assert lab.mark_inner.data["x"] == [2] and lab.tools.changed.object == text
    # the grid's hover names each tile
    assert list(lab.fields.tiles.data["label"]) == ["hidden unit #1 of 2", "hidden unit #2 of 2 (the newest, outlined)"]
    lab._play()  # playing clears the marks
    lab._pause()
    assert lab.mark_inner.data["x"] == [] and not lab.mark_inner_item.visible


def test_next_step_on_an_unevaluated_step_and_on_an_away_step(make_lab):
    lab = make_lab({**AWAY, "eval_every": 2})
    texts = [explain(lab) for _ in range(3)]
    assert "not evaluated this step (every 2)" in texts[0]
    assert "removed" in texts[2] and "away step" in texts[2] and "§3.2" in texts[2], texts
    assert not lab.fields.box.data["left"]  # nothing new to outline after a removal


# ---------------------------------------------------------------- plots
def test_every_plot_has_a_title_labelled_axes_and_a_hover(make_lab):
    lab = make_lab()
    figures = [p.object for p in lab.panel().select(pn.pane.Bokeh)]
    # eq. 9, the test log-likelihood, the fields, the CD fork, the samples, and a pin's fields
    # and samples (shown beside the live ones on demand)
    assert len(figures) == 7
    for fig in figures:
        assert fig.title.text, fig
        assert any(isinstance(tool, HoverTool) for tool in fig.tools), fig.title.text
        for axis in fig.xaxis + fig.yaxis:
            assert not axis.visible or axis.axis_label, (fig.title.text, axis)
