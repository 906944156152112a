"""The Bound lab's logic without a browser: every model's bound holds on the drawn line and
slice and touches log Z at theta~; moving theta~ (slider or tap) moves the touching point;
the race streams every method, and neither Play nor the tightness views wait on the UI
thread for their heavy computations (J*, exact log Z over grids): those are jobs."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pytest

from boltzlab.dashboard.labs import bound_setup as setup
from boltzlab.dashboard.labs.bound import PLAY_HINT, REFERENCE_HINT, BoundLab
from boltzlab.engine import bound
from tests.waiting import tick


def settle(lab, timeout=120):
    """The analyses in flight (the tightness views, J*) finished and drawn."""
    assert lab.jobs.wait(timeout)


def run(lab, k=1):
    """k single steps, then one tick and the jobs it started, as the UI would."""
    for _ in range(k):
        lab.runner.step_once()
        assert lab.runner.wait_idle(60)
    tick(lab)
    settle(lab)


@pytest.fixture(scope="module")
def lab():
    lab = BoundLab()
    lab.panel()
    settle(lab)
    yield lab
    lab.close()


@pytest.fixture
def make_lab():
    labs = []

    def make():
        lab = BoundLab()
        lab.panel()
        labs.append(lab)
        return lab

    yield make
    for lab in labs:
        lab.close()


@pytest.mark.parametrize("key", sorted(setup.MODELS.values()))
def test_every_model_draws_a_bound_that_holds_and_touches(lab, key):
    view = lab.tightness
    view.model.value = key
    view.s_tilde.value, view.r_tilde.value = 0.5, -0.5
    settle(lab)
    data = view.main_src.data
    s, gap = np.asarray(data["s"]), np.asarray(data["gap"])
    assert gap.min() >= -1e-9
    touch = np.argmin(np.abs(gap))
    assert abs(s[touch] - 0.5) <= (s[1] - s[0])
    # the bound touches log Z at s~ = 0.5 with the same slope (gap(s~) = gap'(s~) = 0), so on the
    # grid gap(s) <= max gap'' / 2 (s - s~)^2: a bound merely near log Z there leaves more
    h = s[1] - s[0]
    curvature = np.max(np.abs(np.diff(gap, 2))) / h**2
    assert gap[touch] <= 0.5 * curvature * (s[touch] - 0.5) ** 2 * 1.05 + 1e-9, (gap[touch], curvature)
    assert view.message.level == "ok" and "the bound holds" in view.message.text
    # the line's log Z is the exact one, independently recomputed
    model = setup.make_model(key, view.scale.value, view.seed.value)
    assert f"**{model.d} parameters.**" in view.model_info.object
    some = [0, 150, 300]
    exact = bound.log_partition(model.point(s[some], np.full(3, -0.5)), model.F, model.h)
    np.testing.assert_allclose(np.asarray(view.line_src.data["log_z"])[some], exact, rtol=1e-12)
    # the slice: bound - log Z >= 0 everywhere (the image floors it at GAP_FLOOR for the log colours)
    grid, log_z2 = setup.log_z_slice(key, view.scale.value, view.seed.value, view.radius.value)
    assert setup.gap_slice(model, grid, log_z2, 0.5, -0.5).min() >= -1e-9


def test_the_tightness_job_is_a_plain_function_of_plain_values():
    """What runs in a worker process: plain arguments in, plain numpy / Python values out."""
    import pickle

    result = setup.tightness("chain", 0.5, 0, 3.0, 0.5, -0.5, (-2.0, 1.5))
    assert pickle.loads(pickle.dumps(result)).keys() == result.keys()
    assert all(isinstance(v, (int, float, str, list, np.ndarray)) for v in result.values())
    assert result["d"] == 39 and len(result["s"]) == setup.LINE_POINTS and len(result["extra_bound"]) == 2
    assert result["gap2"].shape == (setup.SLICE_POINTS["chain"],) * 2 and result["gap2"].min() >= -1e-9
    ref = setup.race_reference("wine", 0.01, 0)
    assert set(ref) == {"value", "grad_norm", "seconds"} and ref["grad_norm"] < 1e-6


def test_the_tightness_views_say_computing_until_the_job_has_drawn(lab):
    view = lab.tightness
    view.model.value = "fvbm12"
    assert view.message.level == "info" and "Computing" in view.message.text  # returned at once
    assert lab.jobs.running("tightness")
    settle(lab)
    assert view.message.level == "ok" and "78 parameters." in view.model_info.object
    # a setting that only changes what is shown (the Taylor expansion) computes nothing
    view.show_taylor.value = False
    assert not lab.jobs.running("tightness") and not view.taylor_line.visible
    view.show_taylor.value = True
    assert view.taylor_line.visible and view.message.level == "ok"


def test_a_tap_on_the_gap_map_moves_the_expansion_point(lab):
    view = lab.tightness
    view.model.value = "loglinear"
    lab._on_tap(SimpleNamespace(x=1.234, y=-2.0))
    assert view.s_tilde.value == pytest.approx(1.25) and view.r_tilde.value == pytest.approx(-2.0)
    assert view.tilde_src.data["s"] == [pytest.approx(1.25)]  # marked at once
    settle(lab)
    s, gap = np.asarray(view.main_src.data["s"]), np.asarray(view.main_src.data["gap"])
    assert abs(s[np.argmin(np.abs(gap))] - 1.25) <= s[1] - s[0]  # the curves followed
    lab._on_tap(SimpleNamespace(x=99.0, y=None))  # a tap outside the data: ignored
    assert view.s_tilde.value == pytest.approx(1.25)


def test_extra_expansion_points_and_their_errors(lab):
    view = lab.tightness
    view.model.value = "fvbm8"
    view.extra.value = "-1, 1, 2"
    settle(lab)
    assert [len(src.data["s"]) > 0 for src in view.extra_srcs[:4]] == [True, True, True, False]
    assert len(view.touch_src.data["s"]) == 4
    # more than two extra bounds share one legend entry (one column in the plot must fit its height)
    labels = [str(getattr(item.label, "value", item.label)) for item in view.line_fig.legend[0].items]
    assert labels[-1] == "3 more bounds (at the dots)" and len(labels) == 4
    view.extra.value = "-2"
    settle(lab)
    labels = [str(getattr(item.label, "value", item.label)) for item in view.line_fig.legend[0].items]
    assert labels[-1] == "bound at s̃ = -2" and len(labels) == 4
    view.extra.value = "1, banana"  # said at once, nothing computed
    assert view.message.level == "error" and "numbers separated by commas" in view.message.text
    assert not lab.jobs.running("tightness")
    view.extra.value = "99"
    assert view.message.level == "error" and "[-3, 3]" in view.message.text
    view.extra.value = ""
    settle(lab)
    assert view.message.level == "ok"


def test_make_model_rejects_unknown_models_and_bad_scales():
    with pytest.raises(ValueError, match="Unknown model"):
        setup.make_model("nope")
    with pytest.raises(ValueError, match="scale"):
        setup.make_model("fvbm8", -1.0)


def test_the_race_streams_every_method_and_the_bound_stays_monotone(make_lab):
    lab = make_lab()
    lab.widgets["speed"].value = "as fast as possible"
    lab._play()
    for _ in range(1200):  # drain as the refresh tick would, until every method has stopped
        if lab.runner.wait_idle(0.1):
            break
        tick(lab)
    assert lab.runner.wait_idle(120) and not lab.runner.active
    tick(lab)
    settle(lab)
    J_star = lab.J_star
    for name, srcs in lab.sources.items():
        ys = np.asarray(srcs["by-iteration"].data["y"])
        assert len(ys) >= 3, name
        assert len(srcs["by-time"].data["x"]) == len(ys)
        assert ys[-1] < 1e-4  # every method reaches Table 1's epsilon on wine
    bound_gaps = np.asarray(lab.sources["Bound majorization"]["by-iteration"].data["y"])
    assert np.all(np.diff(bound_gaps) <= 1e-9 * max(1.0, abs(J_star)))  # never increases
    assert lab.monotone.level == "ok" and "monotone so far" in lab.monotone.text
    assert "<td>Newton</td>" in lab.table.object and "converged" in lab.table.object
    assert lab.run_status.level == "ok" and "Finished" in lab.run_status.text
    # another problem resets the race and its lambda
    lab.widgets["problem"].value = "breast_cancer"
    assert lab.widgets["reg"].value == 0.01 and len(lab.sources["Newton"]["by-iteration"].data["y"]) == 0
    settle(lab)
    assert "569 training examples" in lab.race_info.object
    assert lab.J_star is not None and lab.J_star != J_star
    # a negative lambda cannot be entered (the widget carries the parameter's bounds) nor
    # asked for by name (the one refusal sentence of links and keywords); the race is kept
    with pytest.raises(ValueError):
        lab.widgets["reg"].value = -1.0
    with pytest.raises(ValueError, match="The 'reg' setting must be"):
        lab.apply_settings({"reg": -1.0})
    assert lab.reg == 0.01 and "569 training examples" in lab.race_info.object


def test_the_race_is_built_by_the_runner_not_by_the_click():
    """Building the five trainers evaluates J at θ = 0 six times (0.05-0.5 s for digits): the
    factory is a Build (names now, nothing built), built by the runner's thread, or on the
    worker a Dask backend sends it to (pickled: only the key travels)."""
    import pickle

    from boltzlab.dashboard.labs.bound import RACE_COLORS
    from boltzlab.dashboard.runner import Build

    race = setup.build_race(setup.race_key("wine", 0.01, 0))
    assert isinstance(race, Build) and list(race.names) == list(RACE_COLORS)
    shipped = pickle.loads(pickle.dumps(race))  # as a Dask backend ships it
    trainers = shipped()
    assert list(trainers) == list(RACE_COLORS)
    assert trainers["Newton"].step().scalars["iteration"] == 1
    assert trainers["CG"].state_dict()["theta"].shape == (42,)
    with pytest.raises(ValueError, match="reg"):
        setup.race_key("wine", -1.0, 0)
    with pytest.raises(ValueError, match="problem"):
        setup.race_key("nope", 0.1, 0)


def test_play_does_not_wait_for_the_reference_optimum(make_lab, monkeypatch):
    """J* is a job: the race steps at once, its raw J values are kept, and the J − J* curves
    (and a Next step's explanation) appear when J* has arrived."""
    gate = threading.Event()
    real = setup.race_reference

    def slow_reference(*args):
        assert gate.wait(120)
        return real(*args)

    monkeypatch.setattr(setup, "race_reference", slow_reference)
    lab = make_lab()
    try:
        assert lab.J_star is None and lab.jobs.running("reference")
        lab.tools.set_presenting(True)
        lab.next_step()  # returns at once, J* or not
        assert lab.runner.wait_idle(60)
        tick(lab)
        assert lab.counter() == "Step 1" and lab.J_star is None
        assert not lab.sources["Newton"]["by-iteration"].data["y"]  # nothing to draw against yet
        assert all(h.visible and h.text == REFERENCE_HINT for h in lab._hints)
        assert "J* = computing…" in lab.table.object
        text = lab.tools.changed.object
        assert "Bound majorization</b> step 1: J " in text and "J* still computing" in text
        assert not lab.newest["by-iteration"].data["x"]  # the rings wait for J* too
        for _ in range(2):  # more steps while J* is computing
            lab.runner.step_once()
            assert lab.runner.wait_idle(60)
        tick(lab)
        assert lab.counter() == "Step 3" and lab.J_star is None
    finally:
        gate.set()
    settle(lab)
    assert lab.J_star is not None
    for name, srcs in lab.sources.items():
        assert srcs["by-iteration"].data["x"] == [1, 2, 3], name
    assert not any(h.visible for h in lab._hints)
    assert "J* = computing" not in lab.table.object


def test_play_says_server_busy_when_the_cap_is_reached(make_lab):
    from boltzlab.dashboard.runner import SLOTS, Runner

    lab = make_lab()
    holder = Runner(lambda: lab.runner._factory())
    SLOTS.set_limit(1)
    try:
        holder.play()
        lab._play()
        assert not lab.runner.playing
        assert lab.run_status.level == "warn" and "server is busy" in lab.run_status.text
        holder.pause()
        lab._play()
        assert lab.runner.playing
    finally:
        SLOTS.set_limit(None)
        holder.close()


def test_the_empty_race_plots_say_how_to_start(make_lab):
    lab = make_lab()
    settle(lab)
    assert len(lab._hints) == 2 and all(h.visible and h.text == PLAY_HINT for h in lab._hints)
    lab._step()
    assert lab.runner.wait_idle(60)
    tick(lab)
    settle(lab)
    assert not any(h.visible for h in lab._hints)
    lab._reset()  # reset: empty again, hint back, J* kept (the same race)
    assert all(h.visible and h.text == PLAY_HINT for h in lab._hints)
    assert lab.J_star is not None and not lab.jobs.running("reference")


def test_each_majorization_step_shows_its_bound_and_the_next_iterate(make_lab):
    """Majorization you can watch: after a step, the step view holds J and the bound Q built at
    the step's start along the step; Q >= J, they touch at s = 0, and Q's minimiser (marked) is
    the new iterate, whose J the race's curve shows."""
    lab = make_lab()
    assert lab.step_hint.visible and lab.step_src.data["s"] == []
    run(lab, 2)
    s = np.asarray(lab.step_src.data["s"])
    J, Q = np.asarray(lab.step_src.data["J"]), np.asarray(lab.step_src.data["Q"])
    assert len(s) == setup.STEP_POINTS and not lab.step_hint.visible
    assert np.all(Q >= J - 1e-9 * abs(J).max())
    zero, one = int(np.argmin(abs(s))), int(np.argmin(abs(s - 1)))
    assert Q[zero] == pytest.approx(J[zero], rel=1e-12) and int(np.argmin(Q)) == one
    assert lab.step_marks.data["s"] == [s[zero], s[one]]
    assert J[one] == pytest.approx(lab._raw["Bound majorization"]["J"][-1], rel=1e-10)  # the new iterate
    assert lab.step_fig.title.text.startswith("The bound at step 2")
    lab._reset()
    assert lab.step_src.data["s"] == [] and lab.step_hint.visible


def test_the_step_markers_sit_on_theta_t_and_on_qs_minimum(make_lab):
    """Issue 46 item 5 (g): the step view's two markers are θₜ on J (where Q touches J, the
    race's J of the previous iterate) and θₜ₊₁ on Q at its minimum (Q's minimiser, s = 1),
    which lies above J there unless the bound is tight; read from the drawn curves."""
    lab = make_lab()
    run(lab, 3)
    s = np.asarray(lab.step_src.data["s"])
    J, Q = np.asarray(lab.step_src.data["J"]), np.asarray(lab.step_src.data["Q"])
    marks = lab.step_marks.data
    (s_t, s_next), (y_t, y_next) = marks["s"], marks["y"]
    assert s_t == s[int(np.argmin(abs(s)))] and s_next == s[int(np.argmin(abs(s - 1)))]
    race_J = lab._raw["Bound majorization"]["J"]
    assert y_t == pytest.approx(race_J[-2], rel=1e-10)  # θₜ: J of the iterate the step started from
    assert y_t == pytest.approx(J[int(np.argmin(abs(s)))], rel=1e-12)
    assert y_next == pytest.approx(Q.min(), rel=1e-12)  # θₜ₊₁ is marked on Q, at its minimum
    assert y_next == pytest.approx(Q[int(np.argmin(abs(s - 1)))], rel=1e-12)
    assert y_next <= y_t  # the bound's minimum is no higher than where it touched J
    gap = Q[int(np.argmin(abs(s - 1)))] - J[int(np.argmin(abs(s - 1)))]
    assert gap > 1e-9 * abs(J).max()  # here the bound is not tight at θₜ₊₁: the marker is on Q, not J
    assert len(marks["color"]) == 2 and marks["color"][0] != marks["color"][1]
