"""A pin's pictures beside the live ones (issue 47 item 2): ``lab.beside(label)`` shows a
pinned run's newest receptive fields, samples, TAP solutions, M̂ or gap map beside the live
picture, drawn from the pin's own arrays in the live picture's colour scale; ``None`` hides
them; unpinning the pin shown hides them; a bad label raises."""

from __future__ import annotations

import math

import numpy as np
import pytest

from boltzlab.dashboard.labs import BoundLab, FrankWolfeLab, FVBMLab, TAPLab
from boltzlab.engine.images import tile_images


def _pinned_then_changed(make_lab, cls, settings, change, steps=2):
    lab = make_lab(cls, **settings)
    lab.run(steps=steps)
    lab.pin()
    lab.apply_settings(change)
    lab.run(steps=steps)
    return lab


def _tiled(grid):
    return np.asarray(grid.source.data["image"][0])


def _expected_tiles(columns, shape, order=None, limit=None, kind="weights"):
    columns = np.asarray(columns, dtype=float)
    index = np.arange(columns.shape[1]) if order is None else np.asarray(order)
    index = index[:limit] if limit is not None else index
    shown = columns[:, index]
    n_cols = max(1, math.ceil(math.sqrt(shown.shape[1])))
    return tile_images(shown, shape, n_cols=n_cols, pad=1, normalize="each" if kind == "weights" else None)[::-1]


def test_tap_fields_samples_and_solutions_of_a_pin_beside_the_live_ones(make_lab):
    lab = _pinned_then_changed(make_lab, TAPLab, {"data": "digits", "n_hidden": 16}, {"n_hidden": 9})
    pair = lab.fields_beside
    assert not pair.twin.view.visible and lab.beside_pin is None
    lab.beside("pin 1")
    assert lab.beside_pin == "pin 1"
    assert pair.twin.view.visible and lab.samples_beside.twin.view.visible and lab.solutions_beside.twin.view.visible
    assert pair.twin.figure.title.text == "pin 1" and pair.live.figure.title.text == "live run"
    arrays = lab.pins["pin 1"].arrays["TAP"]
    W = np.asarray(arrays["W"], dtype=float)
    assert W.shape[1] == 16 and lab._last["W"].shape[1] == 9  # the pin's model, not the live one
    order, _ = lab._field_order(W, arrays["b_hid"])
    np.testing.assert_array_equal(_tiled(pair.twin), _expected_tiles(W, lab.images.image_shape, order))
    np.testing.assert_array_equal(_tiled(lab.samples_beside.twin),
                                  _expected_tiles(np.asarray(arrays["samples"]).T, lab.images.image_shape,
                                                  kind="pixels"))
    assert pair.live.figure.width == pair.twin.figure.width == 350  # the pair fits where one stood
    # same colour scale: the twin's mapper spans what the live one spans
    for p in (pair, lab.samples_beside, lab.solutions_beside):
        assert (p.twin.mapper.low, p.twin.mapper.high) == (p.live.mapper.low, p.live.mapper.high)
    lab.beside(None)
    assert not pair.twin.view.visible and pair.live.figure.width == 700
    assert pair.live.figure.title.text != "live run"  # its own title again


def test_frankwolfe_fields_of_a_pin_with_its_newest_unit_outlined(make_lab):
    lab = _pinned_then_changed(make_lab, FrankWolfeLab, {"data": "digits"}, {"reg": 0.5}, steps=3)
    lab.beside("pin 1")
    twin = lab.fields_beside.twin
    W = np.asarray(lab.pins["pin 1"].arrays["FW"]["W"], dtype=float)
    np.testing.assert_array_equal(_tiled(twin), _expected_tiles(W, lab.fields.image_shape))
    assert twin.outlined() == {"#f0a000": [W.shape[1] - 1]}
    assert lab.samples_beside.twin.n_tiles == len(lab.pins["pin 1"].arrays["FW"]["samples"])
    lab.unpin("pin 1")  # the pin shown goes: so do its pictures
    assert lab.beside_pin is None and not twin.view.visible


def test_fvbm_pinned_M_beside_the_live_one_in_one_colour_scale(make_lab):
    lab = _pinned_then_changed(make_lab, FVBMLab, {"d": 6, "n": 500, "init": "random", "init_seed": 3},
                               {"mu": 0.5}, steps=3)
    lab.beside("pin 1")
    twin = lab.heat_beside.twin
    M_pin = np.asarray(lab.pins["pin 1"].arrays["BSLM"]["M"], dtype=float)
    np.testing.assert_array_equal(np.asarray(twin.source.data["value"], dtype=float).reshape(6, 6), M_pin)
    M_live = lab._last_arrays["BSLM"]["M"]
    vmax = max(np.abs(M_pin).max(), np.abs(M_live).max(), np.abs(lab.data.data.truth.M).max())
    for heat in (lab.heat_est, twin, lab.heat_true):
        assert (heat.mapper.low, heat.mapper.high) == pytest.approx((-vmax, vmax))
    assert twin.figure.title.text == "pin 1" and lab.heat_est.figure.title.text == "M̂ (BSLM)"  # four in a row
    lab.beside(None)
    assert lab.heat_est.figure.title.text == "M̂: current estimate (BSLM)"
    assert lab.heat_true.figure.title.text == "M₀: true couplings"


def test_fvbm_pin_on_other_data_gets_its_own_size(make_lab):
    lab = _pinned_then_changed(make_lab, FVBMLab, {"d": 6, "n": 500}, {"d": 4}, steps=2)
    lab.beside("pin 1")
    twin = lab.heat_beside.twin
    assert len(twin.labels) == 6 and len(lab.heat_est.labels) == 4
    assert len(twin.source.data["value"]) == 36


def test_bound_gap_map_of_a_pin_computed_for_its_settings(make_lab):
    lab = make_lab(BoundLab)
    lab.jobs.wait()
    lab.run(steps=2)
    lab.pin()
    lab.apply_settings({"s_tilde": 1.5})
    lab.jobs.wait()
    live = np.asarray(lab.tightness.slice_src.data["image"][0])
    lab.beside("pin 1")
    assert lab.jobs.wait()
    view = lab.tightness
    pinned = np.asarray(view.pin_slice_src.data["image"][0])
    assert pinned.shape == live.shape and not np.array_equal(pinned, live)  # θ̃ moved: another map
    assert view.pin_tilde_src.data["s"] == [0.0] and view.tilde_src.data["s"] == [1.5]
    assert view.mapper.high == pytest.approx(max(live.max(), pinned.max()))  # one scale for both
    assert view.slice_beside.twin.view.visible and view.slice_fig.width == 300 and not view.slice_bar.visible
    lab.beside(None)
    assert view.pin_slice_src.data["image"] == [] and view.slice_fig.width == 440 and view.slice_bar.visible
    assert view.mapper.high == pytest.approx(live.max())


def test_beside_refuses_a_label_no_pin_has(make_lab):
    lab = make_lab(FVBMLab, d=4, n=200)
    lab.run(steps=1)
    lab.pin()
    with pytest.raises(ValueError, match=r"The 'label' parameter of FVBMLab.beside must be one of \['pin 1'\] "
                                         r"or None. Got 'pin 9'"):
        lab.beside("pin 9")
    items = dict((v, k) for k, v in lab.pin_button.items)
    assert "beside:pin 1" in items  # the page's choice, in the pin menu
    lab.beside("pin 1")
    assert "beside-none" in dict((v, k) for k, v in lab.pin_button.items)
