"""A lab's trainers are built by its runner's thread, never by the caller (a click or a page
being built on the server's event loop), and a setting only a trainer refuses keeps the run."""

from __future__ import annotations

import threading

import pytest

from boltzlab.dashboard.labs.frankwolfe import FrankWolfeLab
from boltzlab.dashboard.labs.tap import TAPLab
from boltzlab.engine import frankwolfe, tap

SMALL_FW = {"data": "digits", "reg": 0.2, "bias_lr": 0.05, "samples": 60, "max_hidden": 12,
            "evaluate": "exact", "eval_every": 2, "seed": 3, "away": False}


def threads_that_build(monkeypatch, cls) -> list[int]:
    built_on: list[int] = []
    original = cls.__init__

    def init(self, *args, **kwargs):
        built_on.append(threading.get_ident())
        original(self, *args, **kwargs)

    monkeypatch.setattr(cls, "__init__", init)
    return built_on


def test_a_tap_lab_builds_its_trainer_off_the_calling_thread_on_open_and_on_a_change(make_lab, monkeypatch):
    built_on = threads_that_build(monkeypatch, tap.TAPTrainer)
    lab = make_lab(TAPLab, data="digits", n_hidden=6, K=20)
    assert lab.runner.wait_built(60) and len(built_on) == 1
    lab.widgets["n_hidden"].value = 7  # a widget's change, on the event loop: returns before the trainer exists
    assert lab.runs == ["TAP"] and lab.runner.trainers["TAP"].n_hidden == 7  # (trainers waits for it)
    assert len(built_on) == 2 and threading.get_ident() not in built_on


def test_a_setting_only_the_trainer_refuses_keeps_the_run_and_says_why(make_lab):
    lab = make_lab(FrankWolfeLab, **SMALL_FW)
    lab.runner.step_once()
    assert lab.runner.wait_idle(60)
    lab.tick()
    trainer = lab.runner.trainers["FW"]
    # exact log Z of MNIST at 100 units is not enumerable: FrankWolfeTrainer refuses it; set
    # from Python, the refusal raises (issue 46), and the page says why as for a widget's change
    with pytest.raises(ValueError, match="'evaluate' parameter"):
        lab.param.update(data="mnist", max_hidden=100)
    lab.tick()
    assert lab.settings_msg.pane.visible and "evaluate" in lab.settings_msg.text
    assert lab.runner.trainers["FW"] is trainer and lab.runner.states["FW"].steps == 1
    assert lab.counter() == "Iteration 1" or "1" in lab.counter()  # the old run drawn again
    # as do apply_settings and keywords, with the trainer's own sentence
    with pytest.raises(ValueError, match="'evaluate' parameter"):
        lab.apply_settings({"data": "mnist", "max_hidden": 100})
    with pytest.raises(ValueError, match="'evaluate' parameter"):
        FrankWolfeLab(**{**SMALL_FW, "data": "mnist", "max_hidden": 100})
    assert frankwolfe.MAX_EXACT_UNITS < 100
