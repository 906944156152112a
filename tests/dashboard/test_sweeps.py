"""Sweep a setting (issue 47 items 3 and 4): one run per value, stepping together, each run's
Records identical to a lab run alone with that value (same seeds); bad settings and values
refused with sentences that name them; the budget counts the runs together; a checkpoint and
"Copy as Python" keep the sweep."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from boltzlab.dashboard import budget
from boltzlab.dashboard.labs import BoundLab, FrankWolfeLab, FVBMLab, TAPLab
from boltzlab.dashboard.labtools import read_checkpoint, write_checkpoint
from tests.waiting import wait_until

CLOCKS = ("time", "seconds", "elapsed")
#: per lab: small settings, the setting swept and three values
SWEEPS = [
    (FVBMLab, dict(d=6, n=500, algorithm="ga"), "mu", [0.5, 1.0, 2.5]),
    (TAPLab, dict(data="digits", n_hidden=8, K=10), "gamma", [0.01, 0.05, 0.1]),
    (FrankWolfeLab, dict(data="digits", samples=100, max_hidden=10, evaluate="exact", eval_every=1), "reg",
     [0.05, 0.1, 0.2]),
    (BoundLab, dict(problem="fvbm", race_seed=1), "reg", [0.3, 1.0, 2.0]),
]


def same_records(ours: dict, theirs: dict, where: str) -> None:
    keys = [k for k in theirs if not any(c in k for c in CLOCKS)]
    assert set(keys) <= set(ours), where
    for key in keys:
        np.testing.assert_array_equal(np.asarray(ours[key], float), np.asarray(theirs[key], float),
                                      err_msg=f"{where}: {key}")


@pytest.mark.parametrize("cls,settings,setting,values", SWEEPS, ids=[c.__name__ for c, *_ in SWEEPS])
def test_each_run_of_a_sweep_is_the_run_of_a_lab_with_that_value_alone(make_lab, cls, settings, setting, values):
    lab = make_lab(cls, **settings)
    lab.sweep(setting, values)
    assert lab.sweeping == (setting, tuple(values)) and getattr(lab, setting) == values[0]
    lab.run(steps=3)
    records = lab.records
    for value in values:
        alone = make_lab(cls, **settings, **{setting: value})
        alone.run(steps=3)
        for run, columns in alone.records.items():
            text = f"{value:g}"
            name = f"{setting}={text}" if len(alone.runs) == 1 else f"{setting}={text} · {run}"
            assert name in lab.runs, (name, lab.runs)
            same_records(records[name], columns, name)
    assert len(lab.runs) == len(values) * len(alone.runs)
    lab.sweep(None)  # the sweep ends; the setting keeps the first value
    assert lab.sweeping is None and getattr(lab, setting) == values[0] and len(lab.runs) == len(alone.runs)


def test_choosing_one_value_for_the_swept_setting_ends_the_sweep(make_lab):
    lab = make_lab(FVBMLab, d=6, n=500, algorithm="ga")
    lab.sweep("mu", [0.5, 2.5])
    lab.apply_settings({"d": 5})  # another setting: the sweep goes on, rebuilt
    assert lab.runs == ["mu=0.5", "mu=2.5"]
    lab.widgets["mu"].value = 1.0
    assert lab.sweeping is None and lab.runs == ["GA μ=1"]


@pytest.mark.parametrize("setting,values,match", [
    ("speed", [1, 2], r"The 'setting' parameter of FVBMLab.sweep must be one of \["),
    ("nope", [1, 2], r"Got 'nope'"),
    ("mu", [0.5], r"must hold 2 to 4 values. Got 1"),
    ("mu", [0.5, 1, 2, 3, 4], r"must hold 2 to 4 values. Got 5"),
    ("mu", "0.5, 1", r"must be a list of 2 to 4 values"),
    ("mu", [0.5, 0.5], r"must hold different values"),
    ("mu", [0.5, 20.0], r"The 'mu' setting must be in \[0.01, 10.0\]. Got '20'"),
    ("d", [2, 4], r"Got .d."),
])
def test_a_bad_sweep_is_refused_with_a_sentence_that_names_it(make_lab, setting, values, match):
    lab = make_lab(FVBMLab, d=6, n=500)
    with pytest.raises(ValueError, match=match):
        lab.sweep(setting, values)
    assert lab.sweeping is None and lab.runs == ["BSLM"]


def test_the_budget_counts_the_runs_of_a_sweep_together(make_lab, monkeypatch):
    lab = make_lab(TAPLab, data="digits", n_hidden=8, K=10)
    # a limit one TAP step of these settings fits and three together do not
    seconds = []
    monkeypatch.setattr(budget, "require", lambda cost, knobs, what, extra=(): seconds.append(budget.LIMITS.step_seconds))
    lab._check_work()
    assert seconds == [budget.LIMITS.step_seconds]
    seconds.clear()
    lab._sweep = ("gamma", (0.01, 0.05, 0.1))
    lab._check_work()
    lab._sweep = None
    assert seconds == pytest.approx([budget.LIMITS.step_seconds / 3] * 3)


def test_a_sweep_over_the_budget_is_refused_and_the_run_stays(make_lab, monkeypatch):
    lab = make_lab(TAPLab, data="digits", n_hidden=16, K=100)
    lab.run(steps=1)
    monkeypatch.setattr(budget.LIMITS, "step_seconds", budget.LIMITS.step_seconds)  # restored after
    low, high = 1e-6, budget.LIMITS.step_seconds
    for _ in range(40):  # bisect the limit at which one step of these settings just fits
        mid = (low + high) / 2
        budget.LIMITS.step_seconds = mid
        try:
            lab.check_work()
            high = mid
        except budget.TooMuchWork:
            low = mid
    budget.LIMITS.step_seconds = high * 1.5  # one run fits, three together do not
    with pytest.raises(ValueError, match="A sweep of 3 runs steps them together"):
        lab.sweep("gamma", [0.01, 0.05, 0.1])
    assert lab.sweeping is None and lab.runs == ["TAP"]


def test_a_checkpoint_and_the_script_keep_the_sweep(make_lab, tmp_path, monkeypatch):
    lab = make_lab(FVBMLab, d=6, n=500, algorithm="ga")
    lab.sweep("mu", [0.5, 2.5])
    lab.run(steps=2)
    content = write_checkpoint(lab.tools.checkpoint())
    assert read_checkpoint(content, lab="fvbm").sweep == ("mu", ["0.5", "2.5"])
    other = make_lab(FVBMLab, d=6, n=500, algorithm="ga")
    assert other.tools.load_bytes(content, "sweep.npz"), other.tools.message.text
    assert other.sweeping == ("mu", (0.5, 2.5)) and other.runs == lab.runs
    other.run(steps=1)
    lab.run(steps=1)
    for run in lab.runs:
        same_records(other.records[run], lab.records[run], run)
    script = lab.python_script()
    assert "lab.sweep('mu', [0.5, 2.5])" in script
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__main__"}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(script, "<sweep script>", "exec"), namespace)
    theirs = namespace["frame"]
    ours = lab.records_frame()
    assert list(theirs["run"]) == list(ours["run"])
    numeric = [c for c in ours.columns if c not in ("run", "pin") and not any(k in c for k in CLOCKS)]
    np.testing.assert_array_equal(theirs[numeric].to_numpy(float), ours[numeric].to_numpy(float))


def test_the_sweep_table_shows_each_runs_newest_evaluated_headline(make_lab):
    lab = make_lab(FrankWolfeLab, data="digits", samples=100, max_hidden=10, evaluate="exact", eval_every=2)
    lab.sweep("reg", [0.05, 0.2])
    lab.run(steps=3)  # evaluated at t = 2 only: the newest Record has no test log-likelihood
    lab.compare.refresh()
    assert "—" not in lab.compare.table.object and lab.compare.table.object.count("<tr>") == 3


# ---------------------------------------------------------------- the other values' curves
#: per lab whose views draw the first value's runs: small settings, the setting swept, 3 values
LINE_SWEEPS = [sweep for sweep in SWEEPS if not sweep[0].sweep_views]


def layer_lines(layer) -> list:
    """Each value's lines, ``(x, y)`` per run (one multi_line per value before lines were streamed)."""
    if hasattr(layer, "data"):
        return layer.data()
    return [list(zip(source.data["xs"], source.data["ys"])) for source in layer.sources]


def drawn_lines(lab) -> dict:
    """What the sweep layers draw: per figure, each value's non-empty lines in run order."""
    return {key: [[(np.asarray(x, float), np.asarray(y, float)) for x, y in runs if len(x)]
                  for runs in layer_lines(layer)] for key, layer in lab.sweep_layers().items()}


def whole_lines(lab) -> dict:
    """What drawing the other values' curves from their whole history gives (the drawing before
    lines were streamed: each value's runs as one pin, ``Lab.pin_lines``)."""
    from boltzlab.dashboard.labtools import setting_text
    from boltzlab.dashboard.pins import Pin
    from boltzlab.dashboard.runner import History

    setting, values = lab.sweeping
    history = lab.runner.copy_history()
    out: dict = {key: [] for key in lab.sweep_layers()}
    for value in values[1:]:
        head = f"{setting}={setting_text(value)}"
        part = History()
        for name, rows in history.rows.items():
            if name == head or name.startswith(head + " · "):
                part.rows[name] = rows
        lines = lab.pin_lines(Pin(head, {**lab.run_settings(), setting: value}, part))
        for key in out:
            out[key].append([(np.asarray(x, float), np.where(np.isfinite(np.asarray(y, float)), np.asarray(y, float),
                                                             np.nan)) for x, y in lines.get(key, [])])
    return out


def same_lines(ours: dict, theirs: dict) -> None:
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert len(ours[key]) >= len(theirs[key]), key
        for slot, (mine, whole) in enumerate(zip(ours[key], theirs[key])):
            assert len(mine) == len(whole), (key, slot)
            for (x, y), (wx, wy) in zip(mine, whole):
                np.testing.assert_array_equal(x, wx, err_msg=f"{key} value {slot + 2}")
                np.testing.assert_array_equal(y, wy, err_msg=f"{key} value {slot + 2}")


class SourceEvents:
    """Counts, per source, the changes sent to the browser: ``streams`` (points appended) and
    ``sets`` (the whole data set, or a patch)."""

    def __init__(self, sources, monkeypatch) -> None:
        from bokeh.models import ColumnDataSource

        self.ids = {id(source) for source in sources}
        self.streams = self.sets = self.points = 0
        stream = ColumnDataSource.stream

        def counted(source, new_data, rollover=None):
            if id(source) in self.ids:
                self.streams += 1
                self.points += len(next(iter(new_data.values())))
                self.sets -= 1  # its data change is counted below as well
            return stream(source, new_data, rollover)

        monkeypatch.setattr(ColumnDataSource, "stream", counted)
        for source in sources:
            source.on_change("data", self._changed)

    def _changed(self, attr, old, new) -> None:
        self.sets += 1


def points(lines: dict) -> int:
    return sum(len(x) for slots in lines.values() for runs in slots for x, _ in runs)


def sweep_sources(lab) -> list:
    return [source for layer in lab.sweep_layers().values() for sources in layer.sources
            for source in (sources if isinstance(sources, list) else [sources])]


@pytest.mark.parametrize("cls,settings,setting,values", LINE_SWEEPS, ids=[c.__name__ for c, *_ in LINE_SWEEPS])
def test_the_other_values_lines_are_streamed_and_drawn_as_from_their_whole_history(make_lab, monkeypatch, cls,
                                                                                 settings, setting, values):
    lab = make_lab(cls, **settings)
    lab.sweep(setting, values)
    lab.run(steps=2)  # the first drawing (Bound: when each value's J* is in)
    lab.run(steps=1)  # (the drawing after a whole one is whole too: see CompareTools.lines)
    same_lines(drawn_lines(lab), whole_lines(lab))
    before = points(drawn_lines(lab))
    events = SourceEvents(sweep_sources(lab), monkeypatch)
    for _ in range(3):
        lab.run(steps=1)
    assert events.sets == 0 and events.streams > 0, (events.sets, events.streams)  # only new points, appended
    lines = drawn_lines(lab)
    assert events.points == points(lines) - before > 0
    same_lines(lines, whole_lines(lab))
    lab.compare.lines(force=True)  # drawn whole again: the same
    same_lines(drawn_lines(lab), lines)
    lab.sweep(None)  # the sweep ends: its lines go
    assert all(not len(x) for slots in drawn_lines(lab).values() for runs in slots for x, _ in runs)
    assert all(not layer.labels for layer in lab.sweep_layers().values())


def test_the_other_values_lines_grow_at_every_tick_while_playing(make_lab, monkeypatch):
    """No throttle: each tick that brings the other values' Records streams their points, and
    after Pause the lines are their whole history's."""
    lab = make_lab(BoundLab, problem="fvbm", race_seed=1, speed="as fast as possible")
    lab.sweep("reg", [0.3, 1.0])
    lab.run(steps=1)
    lab.run(steps=1)
    events = SourceEvents(sweep_sources(lab), monkeypatch)
    other = [name for name in lab.runs if name.startswith("reg=1 ")]
    lab.runner.play()
    try:
        for tick in range(1, 5):
            seen = lab.runner.history.counts.get(other[0], 0)
            wait_until(lambda: lab.runner.history.counts.get(other[0], 0) > seen or not lab.runner.playing)
            lab.tick()
            assert events.streams >= tick or not lab.runner.playing, (tick, events.streams)
            assert events.sets == 0
    finally:
        lab.runner.pause()
    lab.runner.wait_idle()
    lab.tick()
    same_lines(drawn_lines(lab), whole_lines(lab))


def live_legend_texts(lab) -> dict:
    """Per figure with other values' lines: the texts of its own legend entries (not the pins')."""
    out = {}
    for key, layer in lab.sweep_layers().items():
        out[key] = [str(getattr(item.label, "value", item.label)) for legend in layer.figure.legend
                    if legend is not layer.legend for item in legend.items]
    return out


@pytest.mark.parametrize("cls,settings,setting,values", LINE_SWEEPS, ids=[c.__name__ for c, *_ in LINE_SWEEPS])
def test_in_a_sweep_the_live_lines_legend_names_the_first_value(make_lab, cls, settings, setting, values):
    lab = make_lab(cls, **settings)
    own = live_legend_texts(lab)
    lab.sweep(setting, values)
    head = f"{setting}={values[0]:g}"
    first = [name for name in lab.runs if name == head or name.startswith(head + " · ")]
    assert first
    lab.run(steps=1)
    for key, texts in live_legend_texts(lab).items():
        for name in first:  # as the table names the run ("gamma=0.01"; "reg=0.3 · Newton" in a race)
            assert any(name in text for text in texts), (key, name, texts)
        assert sum(head in text for text in texts) == len(first), (key, texts)  # no other entry changed
    lab.sweep(None)  # the sweep ends: the entries' own texts are back
    assert live_legend_texts(lab) == own


@pytest.mark.parametrize("cls,settings,setting,values", LINE_SWEEPS, ids=[c.__name__ for c, *_ in LINE_SWEEPS])
def test_the_other_values_lines_of_one_point_are_markers(make_lab, cls, settings, setting, values):
    lab = make_lab(cls, **settings)
    lab.sweep(setting, values)
    lab.run(steps=1)  # one point each
    for key, layer in lab.sweep_layers().items():
        lone = [[len(x) == 1 for x, _ in runs] for runs in layer.data()]
        for slot in range(len(values) - 1):
            if any(lone[slot]):
                assert layer.items[slot].visible, (key, slot, layer.labels)  # the value is listed
                assert layer.markers[slot].visible, (key, slot)
                assert len(layer.points[slot].data["x"]) == sum(lone[slot]), (key, slot)
    marked = [key for key, layer in lab.sweep_layers().items() if any(m.visible for m in layer.markers)]
    assert marked  # each lab has a metric of one point after one step
    lab.run(steps=1)  # two points: lines
    for key in marked:
        layer = lab.sweep_layers()[key]
        lone = [[len(x) == 1 for x, _ in runs] for runs in layer.data()]
        for slot, marker in enumerate(layer.markers):
            assert marker.visible == any(lone[slot]), (key, slot)
