"""The Bound lab's logic without a browser: every model's bound holds on the drawn line and
slice and touches log Z at theta~; moving theta~ (slider or tap) moves the touching point."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from dashboard.labs import bound_setup as setup
from dashboard.labs.bound import BoundLab
from engine import bound


@pytest.fixture(scope="module")
def lab():
    lab = BoundLab()
    lab.panel()
    return lab


@pytest.mark.parametrize("key", sorted(setup.MODELS.values()))
def test_every_model_draws_a_bound_that_holds_and_touches(lab, key):
    view = lab.tightness
    view.model.value = key
    view.s_tilde.value, view.r_tilde.value = 0.5, -0.5
    data = view.main_src.data
    s, gap = np.asarray(data["s"]), np.asarray(data["gap"])
    assert gap.min() >= -1e-9
    touch = np.argmin(np.abs(gap))
    assert abs(s[touch] - 0.5) <= (s[1] - s[0]) and abs(gap[touch]) < 0.05
    assert view.message.level == "ok" and "the bound holds" in view.message.text
    # the line's log Z is the exact one, independently recomputed
    model = setup.make_model(key, view.scale.value, view.seed.value)
    some = [0, 150, 300]
    exact = bound.log_partition(model.point(s[some], np.full(3, -0.5)), model.F, model.h)
    np.testing.assert_allclose(np.asarray(view.line_src.data["log_z"])[some], exact, rtol=1e-12)
    # the slice: bound - log Z >= 0 everywhere (the image floors it at GAP_FLOOR for the log colours)
    grid, log_z2 = setup.log_z_slice(key, view.scale.value, view.seed.value, view.radius.value)
    assert setup.gap_slice(model, grid, log_z2, 0.5, -0.5).min() >= -1e-9


def test_a_tap_on_the_gap_map_moves_the_expansion_point(lab):
    view = lab.tightness
    view.model.value = "loglinear"
    view._on_tap(SimpleNamespace(x=1.234, y=-2.0))
    assert view.s_tilde.value == pytest.approx(1.25) and view.r_tilde.value == pytest.approx(-2.0)
    assert view.tilde_src.data["s"] == [pytest.approx(1.25)]
    view._on_tap(SimpleNamespace(x=99.0, y=None))  # a tap outside the data: ignored
    assert view.s_tilde.value == pytest.approx(1.25)


def test_extra_expansion_points_and_their_errors(lab):
    view = lab.tightness
    view.model.value = "fvbm8"
    view.extra.value = "-1, 1, 2"
    assert [len(src.data["s"]) > 0 for src in view.extra_srcs[:4]] == [True, True, True, False]
    assert len(view.touch_src.data["s"]) == 4
    view.extra.value = "1, banana"
    assert view.message.level == "error" and "numbers separated by commas" in view.message.text
    view.extra.value = "99"
    assert view.message.level == "error" and "[-3, 3]" in view.message.text
    view.extra.value = ""
    assert view.message.level == "ok"


def test_make_model_rejects_unknown_models_and_bad_scales():
    with pytest.raises(ValueError, match="Unknown model"):
        setup.make_model("nope")
    with pytest.raises(ValueError, match="scale"):
        setup.make_model("fvbm8", -1.0)


def test_the_race_streams_every_method_and_the_bound_stays_monotone():
    import time

    lab = BoundLab()
    lab.panel()
    race = lab.race
    try:
        race.speed.value = "as fast as possible"
        race._play()
        t0 = time.monotonic()
        while race.runner.active and time.monotonic() - t0 < 60:
            time.sleep(0.1)
            race.on_records(race.runner.drain())
        race.on_records(race.runner.drain())
        J_star = race._reference.value
        for name, srcs in race.sources.items():
            ys = np.asarray(srcs["by-iteration"].data["y"])
            assert len(ys) >= 3, name
            assert len(srcs["by-time"].data["x"]) == len(ys)
            assert ys[-1] < 1e-4  # every method reaches Table 1's epsilon on wine
        bound_gaps = np.asarray(race.sources["Bound majorization"]["by-iteration"].data["y"])
        assert np.all(np.diff(bound_gaps) <= 1e-9 * max(1.0, abs(J_star)))  # never increases
        assert race.monotone.level == "ok" and "monotone so far" in race.monotone.text
        assert "| Newton |" in race.table.object and "converged" in race.table.object
        # another problem resets the race and its lambda
        race.problem.value = "breast_cancer"
        assert race._reference is None and len(race.sources["Newton"]["by-iteration"].data["y"]) == 0
        race.reg.value = -1.0
        assert race.status.level == "error" and "reg" in race.status.text.lower()
    finally:
        race.runner.close()


def test_play_says_server_busy_when_the_cap_is_reached():
    from dashboard.runner import SLOTS, Runner

    lab = BoundLab()
    lab.panel()
    holder = Runner(lambda: lab.race.runner._factory())
    SLOTS.set_limit(1)
    try:
        holder.play()
        lab.race._play()
        assert not lab.race.runner.playing
        assert lab.race.status.level == "warn" and "server is busy" in lab.race.status.text
        holder.pause()
        lab.race._play()
        assert lab.race.runner.playing
    finally:
        SLOTS.set_limit(None)
        holder.close()
        lab.race.runner.close()


def test_the_empty_race_plots_say_how_to_start():
    lab = BoundLab()
    lab.panel()
    race = lab.race
    try:
        assert len(race._hints) == 2 and all(h.visible for h in race._hints)
        race._step()
        assert race.runner.wait_idle()
        race.on_records(race.runner.drain())
        assert not any(h.visible for h in race._hints)
        race._rebuild()  # reset: empty again, hint back
        assert all(h.visible for h in race._hints)
    finally:
        race.runner.close()
