"""Share / preset / checkpoint / present (dashboard.labtools) on the TAP lab, headless.

Small settings keep this fast: 8x8 digits with 6 hidden units (the ground-truth wrapper
with exact log-likelihood and AIS runs too) and a few TAP chains.
"""

from __future__ import annotations

import numpy as np
import panel as pn
import pytest
from bokeh.models import HoverTool

from boltzlab import engine
from boltzlab.dashboard.labs.tap import TAPLab
from boltzlab.dashboard.labtools import Checkpoint, write_checkpoint
from boltzlab.dashboard.labs.tap_setup import GroundTruthTrainer
from tests.waiting import tick

SMALL = {"data": "digits", "n_hidden": 6, "batch": 50, "K": 20, "gamma": 0.05, "seed": 3}


@pytest.fixture(scope="module", autouse=True)
def _warm():
    engine.warm_up()


@pytest.fixture
def make_lab():
    labs = []

    def make(settings=SMALL):
        lab = TAPLab()
        lab.panel()
        if settings:
            lab.apply_settings(lab.tools.decode({k: str(v) for k, v in settings.items()}, strict=True)[0])
        labs.append(lab)
        return lab

    yield make
    for lab in labs:
        lab.close()


def steps(lab, k):
    """k single steps, one tick as the UI would, then the analyses that tick started."""
    for _ in range(k):
        lab.runner.step_once()
    assert lab.runner.wait_idle(120)
    tick(lab)
    assert lab.jobs.wait(120)
    lab.refresh_status()


def next_step(lab):
    """Presentation mode's Next step: it returns at once; a later tick says what changed."""
    lab.next_step()
    assert lab.runner.wait_idle(120)
    tick(lab)
    assert lab.jobs.wait(120)
    return lab.tools.changed.object


def comparable(rows):
    """History rows without wall-clock entries (they differ between runs by nature)."""
    return [{k: v for k, v in row.items() if not any(w in k for w in ("time", "second", "elapsed"))} for row in rows]


@pytest.mark.parametrize("n_hidden", [6, 25])
def test_loaded_checkpoint_continues_exactly_and_redraws_the_analysis(make_lab, n_hidden):
    lab = make_lab({**SMALL, "n_hidden": n_hidden})
    # Nh = 6: the ground-truth wrapper (exact, AIS, pseudo-likelihood on every step); 25: the plain trainer
    assert isinstance(lab.runner.trainers["TAP"], GroundTruthTrainer) == (n_hidden <= 20)
    steps(lab, 3)
    content = write_checkpoint(lab.tools.checkpoint())
    steps(lab, 3)
    uninterrupted = comparable(lab.runner.history.rows["TAP"])
    assert len(uninterrupted) == 6 and ("ll_ais" in uninterrupted[-1]) == (n_hidden <= 20)

    other = make_lab(settings=None)  # a fresh lab on its defaults (MNIST, Nh = 100)
    assert other.tools.load_bytes(content, filename="tap.npz")
    assert other.tools.message.level == "ok", other.tools.message.text
    assert other.tools.settings_text() == {**lab.tools.settings_text()}
    assert other.fields.image_shape == (8, 8) and other.truth.view.visible == (n_hidden <= 20)
    # the curves come back from the history, the analysis from the saved model
    assert other.ll_curve.n_points("ll") == 3 and other.truth.n_points("exact") == (3 if n_hidden <= 20 else 0)
    assert len(other.fe_line.data["x"]) == 3
    assert other.fields.n_tiles == n_hidden
    assert len(other.history.snapshots) == 1
    assert any(len(b.data["left"]) for b in other.hist._bars)
    assert len(other.embedding.source.data["x"]) >= 1
    assert len(other.data_embedding.source.data["x"]) == 1000
    assert other.counter_pane.object.startswith("Epoch ") and other.counter_pane.object != "Epoch 0.00"
    steps(other, 3)
    assert comparable(other.runner.history.rows["TAP"]) == uninterrupted


def test_bad_or_mismatched_checkpoints_keep_the_current_run(make_lab):
    lab = make_lab()
    steps(lab, 2)
    before = comparable(lab.runner.history.rows["TAP"])
    settings = lab.tools.settings_text()

    assert not lab.tools.load_bytes(b"garbage", filename="junk.npz")
    assert lab.tools.message.level == "error" and "junk.npz" in lab.tools.message.text
    assert "unchanged" in lab.tools.message.text

    fvbm = write_checkpoint(Checkpoint("fvbm", {}, {"BSLM": {"x": np.zeros(1)}}))
    assert not lab.tools.load_bytes(fvbm, filename="fvbm.npz")
    assert "'fvbm' lab" in lab.tools.message.text

    # states that do not fit their own settings: rolled back, the current run kept
    for change, words in ((lambda c: c.states["TAP"].update(W=np.zeros((64, 7))), "to match W"),
                          (lambda c: c.settings.update(K="30"), "n_chains = 20")):
        ckpt = lab.tools.checkpoint()
        change(ckpt)
        assert not lab.tools.load_bytes(write_checkpoint(ckpt), filename="bad.npz")
        assert lab.tools.message.level == "error" and words in lab.tools.message.text, lab.tools.message.text
    assert lab.tools.settings_text() == settings
    assert lab.runner.states["TAP"].steps == 2
    assert comparable(lab.runner.history.rows["TAP"]) == before
    assert lab.ll_curve.n_points("ll") == 2 and lab.fields.n_tiles == 6
    steps(lab, 1)  # and the run goes on
    assert lab.runner.states["TAP"].steps == 3


def test_every_preset_applies_and_says_what_to_watch(make_lab):
    lab = make_lab(settings=None)
    for preset in lab.presets:
        lab.tools.preset.value = preset.title
        assert lab.tools.message.level == "info", lab.tools.message.text
        assert preset.title in lab.tools.message.text and preset.note
        for name, value in preset.settings.items():
            assert lab.settings()[name].value == value, (preset.title, name)
        assert lab.runner.trainers and not lab.settings_msg.pane.visible
        trainer = lab.runner.trainers["TAP"]
        assert (trainer.n_hidden, trainer.n_chains) == (preset.settings["n_hidden"], preset.settings["K"])
        assert lab.ll_curve.n_points("ll") == 0


def test_url_settings_round_trip_and_bad_ones_are_named(make_lab):
    lab = make_lab()
    query = lab.tools.query()
    assert query["tap.data"] == "digits" and query["tap.n_hidden"] == "6" and query["tap.seed"] == "3"
    other = make_lab(settings=None)
    other.tools.apply_query({k: [v.encode()] for k, v in query.items()})
    assert other.tools.message.level == "info"
    assert other.tools.settings_text() == lab.tools.settings_text()
    steps(lab, 2)
    steps(other, 2)
    assert comparable(other.runner.history.rows["TAP"]) == comparable(lab.runner.history.rows["TAP"])

    third = make_lab(settings=None)
    third.tools.apply_query({"tap.data": [b"digits"], "tap.n_hidden": [b"5"], "tap.K": [b"0"],
                             "tap.prior_hid": [b"gaussian"], "fvbm.d": [b"3"]})
    assert third.widgets["data"].value == "digits" and third.widgets["n_hidden"].value == 5
    assert third.widgets["K"].value == 100 and third.widgets["prior_hid"].value == "bernoulli"
    assert third.tools.message.level == "warn"
    assert "'K'" in third.tools.message.text and "'prior_hid'" in third.tools.message.text
    assert third.runner.trainers["TAP"].n_hidden == 5


def test_next_step_says_what_changed_and_outlines_the_unit(make_lab):
    lab = make_lab()
    lab.tools.set_presenting(True)
    assert lab.tools.next_step.visible
    # the first step has no earlier weights in any Record: it names the strongest unit
    text = next_step(lab)
    assert "Epoch 0.00 →" in text and "unique TAP solution" in text and "strongest weights" in text
    assert len(lab.fields.box.data["left"]) == 1
    text = next_step(lab)
    assert "unique TAP solutions" in text and "→" in text and "TAP log-likelihood" in text
    assert ("▲" in text) or ("▼" in text)
    assert lab.tools.changed.object == text and lab.tools.changed.visible
    unit = lab._highlight
    assert unit is not None and f"Hidden unit {unit}'s weights moved most" in text
    assert len(lab.fields.box.data["left"]) == 1  # the orange outline in the receptive fields
    # ... around the tile whose hover names that unit
    tiles, box = lab.fields.tiles.data, lab.fields.box.data
    k = next(i for i, label in enumerate(tiles["label"]) if label.startswith(f"hidden unit {unit},"))
    assert tiles["x"][k] == pytest.approx((box["left"][0] + box["right"][0]) / 2)
    assert tiles["y"][k] == pytest.approx((box["top"][0] + box["bottom"][0]) / 2)
    tick(lab)
    lab._show_fields()
    assert len(lab.fields.box.data["left"]) == 1  # the next redraw keeps it
    lab.clear_highlight()
    assert lab.fields.box.data["left"] == []
    next_step(lab)
    lab._step()  # a plain step clears the outline
    assert lab.fields.box.data["left"] == [] and lab._highlight is None


def test_every_plot_has_a_title_axis_labels_and_a_hover(make_lab):
    lab = make_lab(settings=None)
    page = lab.panel()
    figures = [p.object for p in page.select(pn.pane.Bokeh)]
    assert len(figures) >= 9
    for fig in figures:
        assert fig.title.text, fig
        assert fig.select(HoverTool), fig.title.text
        if fig.xaxis[0].visible:
            assert fig.xaxis[0].axis_label and fig.yaxis[0].axis_label, fig.title.text
