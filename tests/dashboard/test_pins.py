"""Pinned runs from Python (issue 47 items 1, 4 and 5): ``lab.pin()``, ``lab.pins``,
``lab.unpin()``, the ``pin`` column of ``records_frame()`` and of the CSV export, and pins
kept bit-exact through a checkpoint (one written before pins still loads)."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

from boltzlab.dashboard.labs import BoundLab, FrankWolfeLab, FVBMLab, TAPLab
from boltzlab.dashboard.labtools import read_checkpoint, write_checkpoint
from boltzlab.dashboard.pins import MAX_PINS, settings_difference
from tests.waiting import wait_until

FVBM_SMALL = {"d": 6, "n": 500, "init": "random", "init_seed": 3}


def test_a_pin_keeps_the_run_through_a_change_of_settings_and_a_reset(make_lab):
    lab = make_lab(FVBMLab, **FVBM_SMALL)
    lab.run(steps=3)
    before = lab.records
    newest = lab.latest()
    label = lab.pin()
    assert label == "pin 1" and list(lab.pins) == ["pin 1"]
    pin = lab.pins["pin 1"]
    assert pin.settings == lab.run_settings() and pin.settings["d"] == 6
    assert pin.runs == ["BSLM"]
    np.testing.assert_array_equal(pin.records["BSLM"]["log_pl"], before["BSLM"]["log_pl"])
    assert set(pin.arrays["BSLM"]) == set(newest.arrays)
    lab.apply_settings({"d": 4})
    lab._reset()
    lab.run(steps=2)
    assert list(lab.pins) == ["pin 1"]  # pins survive a change of settings and Reset
    np.testing.assert_array_equal(lab.pins["pin 1"].records["BSLM"]["log_pl"], before["BSLM"]["log_pl"])
    assert len(lab.records["BSLM"]["log_pl"]) == 2
    assert "Variables d 6→4" in settings_difference(pin.settings, lab.run_settings(),
                                                        {n: lab.param[n].label for n in lab.setting_names()})


def test_pins_are_labelled_counted_and_the_oldest_dropped_past_four(make_lab):
    lab = make_lab(FVBMLab, **FVBM_SMALL)
    lab.run(steps=1)
    labels = [lab.pin() for _ in range(MAX_PINS)]
    assert labels == [f"pin {i}" for i in range(1, MAX_PINS + 1)]
    assert lab.pin("μ large") == "μ large"
    assert list(lab.pins) == [*labels[1:], "μ large"]  # the oldest went
    assert "was dropped" in lab.tools.message.text
    lab.unpin("pin 3")
    assert "pin 3" not in lab.pins
    assert lab.pin() == "pin 6"  # labels count on; none is reused while its pin is there
    lab.unpin()
    assert lab.pins == {}


@pytest.mark.parametrize("call,match", [
    (lambda lab: lab.pin(""), r"The 'label' parameter of FVBMLab.pin must be a non-empty str"),
    (lambda lab: lab.pin(3), r"The 'label' parameter of FVBMLab.pin must be a non-empty str or None. Got 3"),
    (lambda lab: lab.pin("x" * 41), r"at most 40 characters"),
    (lambda lab: (lab.pin("a"), lab.pin("a")), r"names a pin that exists already: 'a'"),
    (lambda lab: lab.unpin("nope"), r"The 'label' parameter of FVBMLab.unpin must be one of \[\] or None. Got 'nope'"),
])
def test_a_bad_label_is_refused_with_a_sentence_that_names_it(make_lab, call, match):
    lab = make_lab(FVBMLab, **FVBM_SMALL)
    lab.run(steps=1)
    with pytest.raises(ValueError, match=match):
        call(lab)


def test_a_run_with_no_record_cannot_be_pinned(make_lab):
    lab = make_lab(FVBMLab, **FVBM_SMALL)
    with pytest.raises(ValueError, match="no Record yet"):
        lab.pin()
    assert lab.pins == {}


def test_records_frame_and_the_csv_export_list_pinned_rows_with_their_label(make_lab):
    lab = make_lab(BoundLab, problem="fvbm", race_seed=2)
    lab.run(steps=2)
    lab.pin("first")
    lab.run(steps=1)
    frame = lab.records_frame()
    assert list(frame.columns[:2]) == ["run", "pin"]
    live, pinned = frame[frame["pin"] == ""], frame[frame["pin"] == "first"]
    assert len(live) == 3 * len(lab.runs) and len(pinned) == 2 * len(lab.runs)
    assert set(pinned["run"]) == set(lab.runs)
    csv = pd.read_csv(io.StringIO(lab.tools._csv_file().getvalue().decode()), keep_default_na=False)
    assert list(csv.columns[:2]) == ["run", "pin"] and sorted(set(csv["pin"])) == ["", "first"]
    assert len(csv) == len(frame)


def test_a_checkpoint_keeps_the_pins_bit_exact(make_lab):
    lab = make_lab(TAPLab, data="digits", n_hidden=8, K=10, seed=1)
    lab.run(steps=2)
    lab.pin()
    lab.apply_settings({"n_hidden": 5})
    lab.run(steps=1)
    lab.pin("five")
    saved = {label: (pin.settings, pin.records, pin.arrays) for label, pin in lab.pins.items()}
    content = write_checkpoint(lab.tools.checkpoint())
    assert [p.label for p in read_checkpoint(content, lab="tap").pins] == ["pin 1", "five"]

    other = make_lab(TAPLab, data="digits", n_hidden=5, K=10, seed=1)
    assert other.tools.load_bytes(content, "run.npz"), other.tools.message.text
    assert "2 pin(s)" in other.tools.message.text
    assert list(other.pins) == ["pin 1", "five"]
    for label, (settings, records, arrays) in saved.items():
        pin = other.pins[label]
        assert pin.settings == settings
        assert pin.records.keys() == records.keys()
        for run in records:
            assert pin.records[run].keys() == records[run].keys()
            for name, values in records[run].items():
                np.testing.assert_array_equal(pin.records[run][name], values, err_msg=f"{label} {name}")
            for name, values in arrays[run].items():
                assert pin.arrays[run][name].dtype == np.asarray(values).dtype
                np.testing.assert_array_equal(pin.arrays[run][name], values)


def test_a_checkpoint_written_before_pins_loads_and_keeps_no_pins(make_lab):
    lab = make_lab(FVBMLab, **FVBM_SMALL)
    lab.run(steps=2)
    content = write_checkpoint(lab.tools.checkpoint())  # no pins: the file has no 'pins' entry
    assert "pins" not in np.load(io.BytesIO(content), allow_pickle=False).files
    other = make_lab(FVBMLab, **FVBM_SMALL)
    other.run(steps=1)
    other.pin()
    assert other.tools.load_bytes(content, "old.npz"), other.tools.message.text
    assert other.pins == {}  # the checkpoint's state, its (no) pins included


def test_damaged_pins_refuse_the_checkpoint_and_keep_the_run(make_lab):
    lab = make_lab(FVBMLab, **FVBM_SMALL)
    lab.run(steps=2)
    lab.pin()
    files = dict(np.load(io.BytesIO(write_checkpoint(lab.tools.checkpoint())), allow_pickle=False))
    files["pins"] = np.asarray('[{"label": 3}]')
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **files)
    steps = lab.runner.states["BSLM"].steps
    assert not lab.tools.load_bytes(buffer.getvalue(), "bad.npz")
    assert "pins are unreadable" in lab.tools.message.text
    assert lab.runner.states["BSLM"].steps == steps and list(lab.pins) == ["pin 1"]


def test_the_page_offers_pin_and_unpin_and_says_links_hold_no_pins(make_lab):
    lab = make_lab(FVBMLab, **FVBM_SMALL)
    assert "Pins are not in links" in lab.tools.copy_link.description
    lab.run(steps=2)
    lab.pin_button.clicked = lab.pin_button.label  # the button itself: pin
    assert list(lab.pins) == ["pin 1"]
    assert [v for _, v in lab.pin_button.items] == ["unpin:pin 1", "beside:pin 1"]
    assert lab.logpl.pin_layer.labels == ["pin 1: same"]
    lab.apply_settings({"d": 4})  # the legend says what differs from the new live run
    assert lab.logpl.pin_layer.labels == ["pin 1: d 6→4"]
    assert "d 6→4" in lab.pin_button.items[0][0]
    lab.run(steps=2)
    lab.pin_button.clicked = lab.pin_button.label
    assert [v for _, v in lab.pin_button.items] == ["unpin:pin 1", "unpin:pin 2", "unpin-all",
                                                    "beside:pin 1", "beside:pin 2"]
    lab.pin_button.clicked = "unpin:pin 1"
    assert list(lab.pins) == ["pin 2"] and lab.logpl.pin_layer.labels == ["pin 2: same"]
    lab.pin_button.clicked = lab.pin_button.label
    lab.pin_button.clicked = "unpin-all"
    assert lab.pins == {} and lab.logpl.pin_layer.labels == []


def test_a_pinned_line_of_one_point_is_drawn_as_a_marker(make_lab):
    """A line needs two points: a pin whose run has one (Frank-Wolfe's test log-likelihood,
    evaluated every few steps; any metric after one step) draws a marker, as a live curve does."""
    lab = make_lab(FrankWolfeLab, data="digits", samples=100, max_hidden=10, evaluate="exact", eval_every=2)
    lab.run(steps=3)  # the test log-likelihood evaluated at t = 2 only; J(w*) at every step
    lab.pin()
    test, inner = lab.ll_curve.pin_layer, lab.inner_curve.pin_layer
    assert test.labels == ["pin 1: same"]  # listed, not hidden as a line that draws nothing
    evaluated = next(iter(lab.records.values()))["test_log_likelihood"]
    assert test.markers[0].visible and test.points[0].data["y"] == [evaluated[np.isfinite(evaluated)][0]]
    assert len(test.points[0].data["x"]) == 1
    assert inner.labels == ["pin 1: same"] and not inner.markers[0].visible  # three points: a line
    lab.unpin()
    assert not test.markers[0].visible and test.points[0].data["x"] == []
    fvbm = make_lab(FVBMLab, **FVBM_SMALL)
    fvbm.run(steps=1)
    fvbm.pin()
    layer = fvbm.logpl.pin_layer
    assert layer.labels == ["pin 1: same"] and layer.markers[0].visible and len(layer.points[0].data["x"]) == 1


#: per lab, small settings whose runs play for a while
PLAYING = [(FVBMLab, FVBM_SMALL), (TAPLab, dict(data="digits", n_hidden=8, K=10)),
           (FrankWolfeLab, dict(data="digits", samples=100, max_hidden=40)), (BoundLab, dict(problem="fvbm", race_seed=1))]


@pytest.mark.parametrize("cls,settings", PLAYING, ids=[c.__name__ for c, _ in PLAYING])
def test_four_pins_cost_nothing_per_tick_while_playing(make_lab, cls, settings):
    """Issue 47 item 7: a pinned run is drawn once; while the live run plays, no tick changes
    any pin layer's sources (no data set, stream or patch: nothing to send)."""
    lab = make_lab(cls, **settings)
    lab.run(steps=2)
    for _ in range(MAX_PINS):
        lab.pin()
        lab.run(steps=1)  # (and the analyses that step started, done)
    layers = lab.pin_layers()
    assert max(len(layer.labels) for layer in layers.values()) == MAX_PINS
    changed: list[str] = []
    for layer in layers.values():
        for source in (*layer.sources, *layer.points):
            source.on_change("data", lambda attr, old, new, name=source.name: changed.append(name))
    steps = lambda: sum(lab.runner.history.counts.values())  # noqa: E731
    ticks = 0
    lab.runner.play()
    try:
        while ticks < 5 and lab.runner.playing:
            seen = steps()
            wait_until(lambda: steps() > seen or not lab.runner.playing)
            lab.tick()
            ticks += 1
    finally:
        lab.runner.pause()
    lab.runner.wait_idle()
    lab.tick()  # the Records of the last step
    assert ticks >= 1 and steps() > 2 + MAX_PINS
    assert changed == [], changed
