"""Lessons (issue 48 item 2): lesson files read and checked (every error names the file, the
line and the reason), the built-in ones stepped through on their labs, the page's *Lesson ▸*
path that never waits, and ``boltzlab serve --lessons`` refusing a bad file (exit 2)."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from boltzlab.dashboard import lessons
from boltzlab.dashboard.labs import LABS, BoundLab, FrankWolfeLab, FVBMLab, TAPLab
from boltzlab.dashboard.lessons.model import CATALOGUE
from boltzlab.dashboard.views.text import text_html
from tests.waiting import wait_until

GOOD = """\
title: A small lesson
lab: fvbm
steps:
  - preset: "BSLM on the paper's simulation (d = 10, n = 16,000)"
    narration: The start.
  - play: 5
    narration: Five sweeps.
  - pin: first
    narration: Pinned.
  - settings: {algorithm: ga, mu: 2.5}
    play: 3
    tab: Who won
    narration: Gradient ascent.
    question: Faster?
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


# (file text, line of the error, what the reason says)
BAD = {
    "not YAML": ("title: x\nlab: fvbm\nsteps: [\n  - narration: a\n", 4, "not valid YAML"),
    "a list": ("- title: x\n", 1, "a lesson must be a mapping"),
    "no title": ("lab: fvbm\nsteps:\n  - narration: a\n", 1, "a lesson needs 'title'"),
    "typo in a key": ("title: x\nlab: fvbm\nsetps:\n  - narration: a\n", 3, "unknown key 'setps'"),
    "no such lab": ("title: x\nlab: rbm\nsteps:\n  - narration: a\n", 2, "no lab 'rbm'; the labs are fvbm, tap"),
    "no steps": ("title: x\nlab: fvbm\nsteps: []\n", 3, "'steps' must be a list of steps"),
    "no narration": ("title: x\nlab: fvbm\nsteps:\n  - narration: a\n  - play: 3\n", 5,
                     "step 2 needs a 'narration'"),
    "no such preset": ("title: x\nlab: tap\nsteps:\n  - narration: a\n    preset: Fast MNIST\n", 5,
                       "step 1: the TAP lab has no preset 'Fast MNIST'; its presets: The paper's binary MNIST"),
    "no such setting": ("title: x\nlab: fvbm\nsteps:\n  - narration: a\n    settings:\n      d: 12\n      sigma: 3\n",
                        7, "step 1: The lab has no setting 'sigma'."),
    "value out of range": ("title: x\nlab: fvbm\nsteps:\n  - narration: a\n    settings: {mu: 50}\n", 5,
                           "step 1: The 'mu' setting must be in [0.01, 10.0]. Got '50'."),
    "not a choice": ("title: x\nlab: fvbm\nsteps:\n  - narration: a\n    settings:\n      algorithm: newton\n", 6,
                     "The 'algorithm' setting must be one of ['bslm', 'ga']. Got 'newton'."),
    "a range from another setting": ("title: x\nlab: bound\nsteps:\n  - narration: a\n    settings: {radius: 2, "
                                     "s_tilde: 2.5}\n", 5, "The 's_tilde' setting must be in [-2.0, 2.0]"),
    "two actions": ("title: x\nlab: fvbm\nsteps:\n  - narration: a\n    play: 3\n    pin: true\n", 6,
                    "step 1 has 2 actions (play, pin); give one per step"),
    "play zero": ("title: x\nlab: fvbm\nsteps:\n  - narration: a\n  - narration: b\n    play: 0\n", 6,
                  "step 2: 'play' takes a number of steps from 1 to 5000; got 0"),
    "play words": ("title: x\nlab: fvbm\nsteps:\n  - narration: a\n    play: ten\n", 5, "got 'ten'"),
    "next three": ("title: x\nlab: fvbm\nsteps:\n  - narration: a\n    next: 3\n", 5, "'next' is 'next: true'"),
    "no such tab": ("title: x\nlab: frankwolfe\nsteps:\n  - narration: a\n    tab: Fields\n", 5,
                    "the Frank-Wolfe lab has no tab 'Fields'; its tabs: Log-likelihood · eq. 9; Receptive fields"),
    "sweep a choice": ("title: x\nlab: fvbm\nsteps:\n  - narration: a\n    sweep:\n      setting: algorithm\n"
                       "      values: [bslm, ga]\n", 6, "the FVBM lab cannot sweep 'algorithm'"),
    "sweep one value": ("title: x\nlab: tap\nsteps:\n  - narration: a\n    sweep: {setting: gamma, values: [0.1]}\n",
                        5, "a sweep takes a list of 2 to 4 values"),
    "sweep a bad value": ("title: x\nlab: tap\nsteps:\n  - narration: a\n    sweep:\n      setting: gamma\n"
                          "      values:\n        - 0.1\n        - 7\n", 9, "The 'gamma' setting must be in"),
    "a key twice": ("title: x\nlab: fvbm\nsteps:\n  - narration: a\n    play: 3\n    play: 4\n", 6,
                    "step 1: 'play' is given twice"),
    "a pin label too long": ("title: x\nlab: fvbm\nsteps:\n  - narration: a\n    pin: " + "p" * 41 + "\n", 5,
                             "'pin' takes a label of 1 to 40 characters"),
    "a narration too long": ("title: x\nlab: fvbm\nsteps:\n  - narration: " + "word " * 200 + "\n", 4,
                             "step 1: the narration has 999 characters; at most 800"),
    "an empty file": ("", 1, "is empty"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_lesson_file_is_refused_naming_its_file_line_and_reason(tmp_path, case):
    text, line, reason = BAD[case]
    path = tmp_path / "mine.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError) as caught:
        lessons.load(path)
    said = str(caught.value)
    assert said.startswith(f"{path}:{line}: "), said
    assert reason in said, said


def test_a_file_that_is_not_utf8_is_refused_at_its_line(tmp_path):
    path = tmp_path / "latin.yaml"
    path.write_bytes(b"title: x\nlab: fvbm\nsteps:\n  - narration: caf\xe9\n")
    with pytest.raises(ValueError, match=rf"^{path}:4: is not UTF-8 text$"):
        lessons.load(path)


def test_a_good_file_reads_into_checked_steps(tmp_path):
    lesson = lessons.load(write(tmp_path, "small.yml", GOOD))
    assert (lesson.name, lesson.title, lesson.lab, len(lesson)) == ("small", "A small lesson", "fvbm", 4)
    first, play, pin, ga = lesson.steps
    assert first.preset.startswith("BSLM") and first.action is None and first.line == 4
    assert (play.action, play.steps, play.line) == ("play", 5, 6)
    assert (pin.action, pin.pin) == ("pin", "first")
    assert ga.settings == {"algorithm": "ga", "mu": 2.5} and isinstance(ga.settings["mu"], float)
    assert (ga.tab, ga.question) == ("Who won", "Faster?")


def test_the_built_in_lessons_one_per_paper():
    built = lessons.LESSONS
    assert sorted(lesson.lab for lesson in built) == sorted(cls.key for cls in LABS)
    for lesson in built:
        assert Path(lesson.path).parent == lessons.builtin_folder()
        assert lesson == lessons.load(lesson.path)
        assert lesson.steps and all(step.narration for step in lesson.steps)
    assert [lesson.name for lesson in lessons.for_lab("fvbm")] == ["fvbm-monotone"]


def test_each_lab_stage_tabs_are_those_lessons_may_name(make_lab):
    for cls, settings in ((FVBMLab, {}), (TAPLab, {"data": "digits"}), (FrankWolfeLab, {"data": "digits"}),
                          (BoundLab, {})):
        lab = make_lab(cls, **settings)
        lab.build_stage()
        assert tuple(lab._stage_labels) == lessons.TABS[cls.key]


def test_a_folder_is_read_all_or_none(tmp_path):
    write(tmp_path, "a-good.yaml", GOOD)
    bad = write(tmp_path, "b-bad.yaml", "title: x\nlab: fvbm\nsteps:\n  - narration: a\n    play: -1\n")
    write(tmp_path, "notes.txt", "not a lesson")
    with pytest.raises(ValueError) as caught:
        lessons.load_dir(tmp_path, lessons.LESSONS)
    assert str(caught.value) == f"{bad}:5: step 1: 'play' takes a number of steps from 1 to 5000; got -1"
    bad.unlink()
    assert [lesson.name for lesson in lessons.load_dir(tmp_path, lessons.LESSONS)] == ["a-good"]
    write(tmp_path, "fvbm-monotone.yaml", GOOD)  # a built-in lesson's name
    with pytest.raises(ValueError, match=r"fvbm-monotone.yaml:1: a lesson named 'fvbm-monotone' exists already"):
        lessons.load_dir(tmp_path, lessons.LESSONS)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no lesson files in it"):
        lessons.load_dir(empty)


def caption(lab) -> str:
    return lab.lesson_tools.caption.object


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fvbm-monotone", "tap-solutions", "frankwolfe-units", "bound-tightness"])
def test_each_built_in_lesson_steps_through_on_its_lab(make_lab, name):
    lesson = next(each for each in lessons.LESSONS if each.name == name)
    cls = next(cls for cls in LABS if cls.key == lesson.lab)
    lab = make_lab(cls)
    assert lab.lesson(name) is lesson and lab.lesson_steps_done == 0
    for number, step in enumerate(lesson.steps, 1):
        before = {run: len(rows) for run, rows in lab.runner.history.rows.items()}
        active = {run for run, state in lab.runner.states.items() if state.active}
        assert lab.next_lesson_step(timeout=900) is step
        assert lab.lesson_steps_done == number and lab.lesson_tools.error == ""
        assert f"step {number} of {len(lesson)}" in caption(lab)
        assert text_html(step.narration) in caption(lab)
        if step.question:
            assert "Question:" in caption(lab)
        if step.tab is not None:
            assert lab._stage_labels[lab.stage_tabs.active] == step.tab
        if step.action == "pin":
            assert step.pin in lab.pins
        if step.action in ("play", "next"):  # every run that could step did, N times (or until it stopped)
            fresh = bool(step.settings or step.preset)
            stepped = {run: len(lab.runner.history.rows[run]) - (0 if fresh else before.get(run, 0))
                       for run in lab.runs if fresh or run in active}
            assert stepped and max(stepped.values()) > 0, (step.describe(), stepped)
            assert all(n == step.steps or not lab.runner.states[run].active for run, n in stepped.items()), \
                (step.describe(), stepped)
    assert lab.next_lesson_step() is None  # done


def test_narration_is_text_never_html(tmp_path, make_lab):
    path = write(tmp_path, "html.yaml", """\
        title: <b>bold</b> title
        lab: bound
        steps:
          - narration: "**Bold** and <script>alert(1)</script> & <img src=x onerror=alert(2)>"
            question: <i>why</i>?
        """)
    lab = make_lab(BoundLab)
    lab.lesson(lessons.load(path))
    lab.next_lesson_step(timeout=300)
    shown = caption(lab)
    assert "<script>" not in shown and "<img" not in shown and "<i>" not in shown and "<b>bold</b>" not in shown
    assert "&lt;script&gt;" in shown and "&lt;img src=x" in shown and "<b>Bold</b>" in shown
    assert "&lt;b&gt;bold&lt;/b&gt; title" in shown


def test_choosing_a_lesson_that_is_not_this_labs(tmp_path, make_lab):
    lab = make_lab(BoundLab)
    with pytest.raises(ValueError, match="no lesson chosen"):
        lab.next_lesson_step()
    with pytest.raises(ValueError, match=r"The lab 'bound' has no lesson 'fvbm-monotone'; its lessons: \['bound-"):
        lab.lesson("fvbm-monotone")
    with pytest.raises(ValueError, match="is for the 'fvbm' lab, not 'bound'"):
        lab.lesson(lessons.load(write(tmp_path, "g.yaml", GOOD)))
    assert lab.lesson("Bound: tight at θ̃, above log Z everywhere, and slower than L-BFGS").name == "bound-tightness"
    lab.lesson(None)
    assert lab.current_lesson is None


def test_a_step_the_lab_refuses_raises_and_says_why(tmp_path, make_lab):
    path = write(tmp_path, "upload.yaml", """\
        title: needs a file
        lab: fvbm
        steps:
          - narration: Your own data.
            settings: {source: upload}
          - narration: Then this.
            play: 3
        """)
    lab = make_lab(FVBMLab)
    lab.lesson(lessons.load(path))
    with pytest.raises(ValueError, match="Step 1's settings were refused: .*upload"):
        lab.next_lesson_step(timeout=300)
    assert "settings were refused" in caption(lab)


def ticks_until(lab, done, timeout: float = 600.0) -> None:
    """What the page's refresh tick does, until ``done()``: the clicks below never wait."""
    def ticked():
        lab.tick()
        return done()
    wait_until(ticked, timeout=timeout, interval=0.05)


def test_clicks_never_wait_and_their_steps_happen_in_order(tmp_path, make_lab):
    lab = make_lab(FVBMLab)
    lab.lesson(lessons.load(write(tmp_path, "small.yaml", GOOD)))
    tools = lab.lesson_tools
    started = time.monotonic()
    for _ in range(4):  # four quick clicks: queued, each after the one before
        tools.click(again=True)
    assert time.monotonic() - started < 30  # (nothing waited for a run: generous for a busy machine)
    ticks_until(lab, lambda: not tools.pending and lab.runner.wait_idle(0)
                and len(lab.runner.history.rows.get("GA μ=2.5", [])) == 3)
    assert tools.error == ""
    # the pin came after the five sweeps, the new settings after the pin
    assert list(lab.pins) == ["first"] and len(lab.pins["first"].records["BSLM"]["log_pl"]) == 5
    assert lab.runs == ["GA μ=2.5"] and lab._stage_labels[lab.stage_tabs.active] == "Who won"
    assert "step 4 of 4" in caption(lab) and "Question:" in caption(lab)
    assert tools.next.label == "Lesson ↺"
    tools.click(again=True)  # the lesson again, from its first step
    ticks_until(lab, lambda: not tools.pending and lab.runs == ["BSLM"])
    assert lab.lesson_steps_done == 1 and "step 1 of 4" in caption(lab)


def test_a_lesson_step_pauses_a_playing_run(tmp_path, make_lab):
    lab = make_lab(FVBMLab)
    lab.lesson(lessons.load(write(tmp_path, "small.yaml", GOOD)))
    lab._play()
    wait_until(lambda: lab.runner.history.rows.get("BSLM"), timeout=300)
    lab.lesson_tools.click(again=True)
    assert not lab.runner.playing
    ticks_until(lab, lambda: not lab.lesson_tools.pending and lab.runner.wait_idle(0))
    assert lab.lesson_steps_done == 1


@pytest.fixture
def served(monkeypatch):
    """``boltzlab serve`` in this process: what it passed to ``app.serve`` (not served)."""
    from boltzlab.dashboard import app, cli, recycling

    calls: list[dict] = []
    monkeypatch.setattr(app, "serve", lambda **kwargs: calls.append(kwargs))
    monkeypatch.setenv(recycling.ENV_SOCKETS, "-1")  # as the supervisor's server: no supervisor here
    added = CATALOGUE.added()
    yield cli, calls
    CATALOGUE.add(added)


def test_serve_refuses_a_bad_lesson_file_with_exit_2(served, tmp_path, capsys):
    cli, calls = served
    write(tmp_path, "a-good.yaml", GOOD)
    bad = write(tmp_path, "b-bad.yaml", "title: x\nlab: fvbm\nsteps:\n  - narration: a\n    tab: Nowhere\n")
    assert cli.main(["serve", "--workers", "0", "--lessons", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:5: step 1: the FVBM lab has no tab 'Nowhere'" in err and err.startswith("boltzlab: error: ")
    assert calls == [] and CATALOGUE.added() == []  # never started, nothing half-loaded
    assert cli.main(["serve", "--workers", "0", "--lessons", str(tmp_path / "missing")]) == 2
    assert "not a folder" in capsys.readouterr().err


def test_serve_adds_a_teachers_lessons(served, tmp_path, make_lab):
    cli, calls = served
    write(tmp_path, "mine.yaml", GOOD)
    assert cli.main(["serve", "--workers", "0", "--lessons", str(tmp_path)]) == 0 and len(calls) == 1
    assert [lesson.name for lesson in lessons.for_lab("fvbm")] == ["fvbm-monotone", "mine"]
    lab = make_lab(FVBMLab)
    assert "A small lesson" in lab.lesson_tools.choose.options
    assert lab.lesson("mine").title == "A small lesson"


def test_records_of_a_lesson_equal_a_scripts(make_lab, tmp_path):
    """A lesson's play steps are the lab's own steps: the same Records as ``run``."""
    lesson = lessons.load(write(tmp_path, "small.yaml", GOOD))
    lab = make_lab(FVBMLab)
    lab.lesson(lesson)
    lab.next_lesson_step(timeout=300)
    lab.next_lesson_step(timeout=300)
    other = make_lab(FVBMLab)
    other.apply_settings(dict(next(p for p in FVBMLab.presets if p.title == lesson.steps[0].preset).settings))
    other.run(5)
    np.testing.assert_array_equal(lab.records["BSLM"]["log_pl"], other.records["BSLM"]["log_pl"])
