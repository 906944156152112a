""""Copy as Python" writes the pins too (issue 47 item 3, issue 46 item 2): the exported script
makes each pinned run again in its one lab (its settings, its sweep, its steps, ``lab.pin``),
oldest first, then the live run, and executed in a fresh namespace it holds the same pins with
the same Records (every numeric scalar exactly, bar timings) and the same live Records.  A pin
the script cannot make (trained on uploaded data, settings this lab does not take) is a
comment that says why, never wrong code."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pandas as pd
import pytest

from boltzlab.dashboard.labs import BoundLab, FrankWolfeLab, FVBMLab, TAPLab
from boltzlab.dashboard.labtools import read_checkpoint, write_checkpoint
from boltzlab.dashboard.pins import Pin
from tests.dashboard.test_image_upload_labs import npz_bytes, pictures, uploaded

#: timing columns differ between two runs of the same computation
CLOCKS = ("time", "seconds", "elapsed")
FVBM_SMALL = {"d": 6, "n": 500, "init": "random", "init_seed": 3}


def numbers(frame: pd.DataFrame) -> tuple[list[tuple[str, str]], list[str], np.ndarray]:
    """Each row's (pin, run), the numeric columns but timings (by name: a checkpoint's history
    lists them in another order), and their values."""
    columns = sorted(c for c in frame.columns if c not in ("run", "pin") and not any(k in c for k in CLOCKS)
                     and pd.api.types.is_numeric_dtype(frame[c]))
    return list(zip(frame["pin"], frame["run"])), columns, frame[columns].to_numpy(float)


def made_again(lab, tmp_path, monkeypatch) -> str:
    """Execute ``lab``'s script in a fresh namespace; its lab must hold the same pins (labels,
    settings, sweeps, Records) and the same live run.  Returns the script."""
    script = lab.python_script()
    ours = lab.records_frame()
    pins = [(label, pin.settings, pin.sweep) for label, pin in lab.pins.items()]
    reached = lab.run_settings()
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__main__"}
    with contextlib.redirect_stdout(io.StringIO()):  # the script prints its last Records
        exec(compile(script, f"<{type(lab).__name__} script>", "exec"), namespace)
    remade = namespace["lab"]
    assert [(label, pin.settings, pin.sweep) for label, pin in remade.pins.items()] == pins, script
    assert remade.run_settings() == reached, script
    rows, columns, values = numbers(ours)
    their_rows, their_columns, their_values = numbers(namespace["frame"])
    assert (their_rows, their_columns) == (rows, columns), script
    assert {pin for pin, _ in rows} == {"", *(label for label, _, _ in pins)}
    np.testing.assert_array_equal(their_values, values, err_msg=script)
    return script


#: (lab, its settings, the change after the pin): small runs of every lab
CHANGES = [
    (FVBMLab, FVBM_SMALL, {"d": 4}),
    (BoundLab, {"problem": "fvbm", "race_seed": 2}, {"problem": "chain"}),  # chain's λ comes with it
    (TAPLab, {"data": "digits", "n_hidden": 8, "K": 10, "seed": 1}, {"n_hidden": 5}),
    (FrankWolfeLab, {"data": "digits", "max_hidden": 6, "evaluate": "exact", "eval_every": 1, "samples": 200},
     {"reg": 0.2}),
]


@pytest.mark.parametrize("cls,settings,change", CHANGES, ids=[c.__name__ for c, _, _ in CHANGES])
def test_the_script_makes_the_pins_and_the_run_again(cls, settings, change, make_lab, tmp_path, monkeypatch):
    lab = make_lab(cls, **settings)
    lab.run(steps=2)
    lab.pin()
    lab.apply_settings(change)
    lab.run(steps=1)
    script = made_again(lab, tmp_path, monkeypatch)
    assert "lab.run(steps=2)\nlab.pin('pin 1')\nlab.apply_settings(" in script
    assert script.rstrip().endswith("lab.close()") and "lab.run(steps=1)" in script


def test_a_run_that_goes_on_after_its_pin_or_starts_again_is_made_again(make_lab, tmp_path, monkeypatch):
    lab = make_lab(FVBMLab, **FVBM_SMALL)
    lab.run(steps=2)
    lab.pin()
    lab.run(steps=2)  # the same run goes on
    lab.pin("on")
    lab._reset()  # the Reset button: the same settings, a new run
    lab.run(steps=1)
    script = made_again(lab, tmp_path, monkeypatch)
    assert "lab.pin('pin 1')\nlab.run(steps=2)\nlab.pin('on')\n" in script
    assert "fresh=True)" in script


def test_a_pinned_sweep_is_made_again_also_from_a_checkpoint(make_lab, tmp_path, monkeypatch):
    lab = make_lab(FVBMLab, **FVBM_SMALL)
    lab.sweep("mu", [0.5, 2.0])
    lab.run(steps=2)
    lab.pin("μ")
    lab.sweep(None)
    lab.apply_settings({"d": 4})
    lab.run(steps=1)
    assert lab.pins["μ"].sweep == ("mu", (0.5, 2.0))
    (tmp_path / "1").mkdir()
    script = made_again(lab, tmp_path / "1", monkeypatch)
    assert "lab.sweep('mu', [0.5, 2.0])" in script and "lab.sweep(None)" in script

    content = write_checkpoint(lab.tools.checkpoint())
    assert read_checkpoint(content, lab="fvbm").pins[0].sweep == ("mu", ("0.5", "2"))
    other = make_lab(FVBMLab)
    assert other.tools.load_bytes(content, "run.npz"), other.tools.message.text
    assert other.pins["μ"].sweep == ("mu", (0.5, 2.0))
    (tmp_path / "2").mkdir()
    assert made_again(other, tmp_path / "2", monkeypatch) == script


def test_a_pin_on_uploaded_data_is_a_comment_not_wrong_code(make_lab, tmp_path, monkeypatch):
    small = {"n_hidden": 6, "K": 20, "batch": 20, "seed": 2}
    lab = make_lab(TAPLab, data="digits")
    uploaded(lab, npz_bytes(X=pictures()), "bars.npz", **small)
    lab.run(steps=1)
    lab.pin("mine")
    lab.apply_settings({"data": "digits", **small})
    lab.run(steps=1)
    script = lab.python_script()
    assert "# 'mine' is not made again: it trained on data you uploaded (bars.npz)" in script
    assert "lab.pin(" not in script and "use_upload" not in script
    live = lab.records_frame()
    live = live[live["pin"] == ""]
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__main__"}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(script, "<TAPLab script>", "exec"), namespace)
    assert namespace["lab"].pins == {}
    rows, columns, values = numbers(live)
    assert numbers(namespace["frame"])[:2] == (rows, columns)
    np.testing.assert_array_equal(numbers(namespace["frame"])[2], values)


def test_pins_the_script_cannot_make_say_why(make_lab):
    lab = make_lab(FVBMLab, **FVBM_SMALL)
    lab.run(steps=1)
    lab.pin()
    pin = lab.pins["pin 1"]
    assert lab.unscriptable(pin) is None
    upload = Pin("csv", {**pin.settings, "source": "upload"}, pin.history)  # FVBM says no data identity
    text = Pin("old", {**pin.settings, "d": "many"}, pin.history)  # a checkpoint's text kept as text
    missing = Pin("older", {k: v for k, v in pin.settings.items() if k != "d"}, pin.history)
    sweep = Pin("sweep", pin.settings, pin.history, sweep=("mu", ("0.5", "2")))
    assert "uploaded" in lab.unscriptable(upload)
    for other in (text, missing, sweep):
        assert "not" in lab.unscriptable(other), other
    lab._pins.replace([pin, upload, text])
    script = lab.python_script()
    assert "# 'csv' is not made again: it trained on data you uploaded" in script
    assert "# 'old' is not made again: its settings are not this lab's" in script
    assert script.count("lab.pin(") == 1


def test_a_lab_without_pins_writes_the_script_it_wrote_before(make_lab):
    lab = make_lab(FVBMLab, d=6)
    lab.run(steps=1)
    assert lab.python_script() == (
        '"""Boltzmann Lab, the FVBM lab\'s run as a script ("Copy as Python"): 1 step(s), headless."""\n'
        "from boltzlab.dashboard.labs import FVBMLab\n\n"
        "lab = FVBMLab(d=6)\n"
        "lab.run(steps=1)\n"
        "frame = lab.records_frame()  # one row per Record, the column 'run' first\n"
        "frame.to_csv('boltzlab-fvbm-records.csv', index=False)\n"
        "print(frame.groupby('run').tail(1).to_string())\n"
        "lab.close()\n")
