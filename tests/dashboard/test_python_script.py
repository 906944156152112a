""""Copy as Python" (issue 26 item 3): each lab's run as a short script over the public API;
the exported script, run headless in a fresh interpreter, makes the same Records."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from boltzlab.dashboard.labs import BoundLab, FrankWolfeLab, FVBMLab, TAPLab

ROOT = Path(__file__).resolve().parents[2]
#: small runs of every lab, settings away from their defaults (what the script must carry)
SMALL = [
    (FVBMLab, dict(d=6, data_seed=3, mode="Race", race_mus="0.5, 8")),
    # lambda and Nh equal to the class defaults, which the problem's and the data set's
    # defaults would change: the script must name them (issue 46 item 2)
    (BoundLab, dict(problem="fvbm", race_seed=2, reg=0.01)),
    (TAPLab, dict(data="digits", n_hidden=100, K=20, seed=1)),
    (FrankWolfeLab, dict(data="digits", reg=0.2, max_hidden=10, evaluate="exact", eval_every=1, samples=200)),
]
#: timing columns differ between two runs of the same computation
CLOCKS = ("time", "seconds", "elapsed")


def comparable(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[[c for c in frame.columns if not any(k in c for k in CLOCKS)]].reset_index(drop=True)


@pytest.mark.parametrize("cls,settings", SMALL, ids=[c.__name__ for c, _ in SMALL])
def test_the_exported_script_makes_the_labs_records(cls, settings, tmp_path):
    lab = cls(**settings)
    try:
        lab.run(steps=2)
        script = lab.python_script()
        ours = comparable(lab.records_frame())
    finally:
        lab.close()
    assert f"lab = {cls.__name__}(" in script and "lab.run(steps=2)" in script
    for name, value in settings.items():
        assert f"{name}={value!r}" in script, name  # every non-default setting is named
    path = tmp_path / "run.py"
    path.write_text(script)
    out = subprocess.run([sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=1200, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    theirs = comparable(pd.read_csv(tmp_path / f"boltzlab-{cls.key}-records.csv"))
    assert list(theirs.columns) == list(ours.columns) and len(theirs) == len(ours) > 0
    assert list(theirs["run"]) == list(ours["run"])
    numeric = [c for c in ours.columns if c != "run" and pd.api.types.is_numeric_dtype(ours[c])]
    # the CSV holds every float as repr writes it: the same bits back
    np.testing.assert_array_equal(theirs[numeric].to_numpy(float), ours[numeric].to_numpy(float))


def test_the_page_shows_the_script_and_offers_it_as_a_file():
    lab = FVBMLab(d=6)
    try:
        lab.tools.copy_python.clicks += 1
        assert lab.tools.script.visible and lab.tools.script.value == lab.python_script()
        assert lab.tools._python_file().getvalue().decode() == lab.python_script()
        assert "lab = FVBMLab(d=6)" in lab.python_script()
    finally:
        lab.close()


#: each lab's learning rate (its step size) at a value that is no round decimal: the script
#: must carry every bit of it (issue 46 item 5 (h))
LEARNING_RATES = [
    (TAPLab, dict(data="digits", n_hidden=6, K=10), "gamma", math.nextafter(0.05, 1.0)),
    (TAPLab, dict(data="digits", n_hidden=6, K=10), "gamma", 0.1 + 0.2),
    (FVBMLab, dict(d=6, algorithm="ga"), "mu", math.nextafter(1.5, 0.0)),
    (FVBMLab, dict(d=6, algorithm="ga"), "mu", 1 / 3),
    (FrankWolfeLab, dict(data="digits", max_hidden=4), "bias_lr", 1 / 7),
]
#: the trainer's name for each learning-rate setting
TRAINER_ATTRIBUTE = {"gamma": "learning_rate", "mu": "mu", "bias_lr": "bias_lr"}


def construction(script: str) -> str:
    """The script's lines up to its first ``lab.run``: the lab made and set, not stepped."""
    lines = script.splitlines()
    return "\n".join(lines[:next(i for i, line in enumerate(lines) if line.startswith("lab.run("))])


@pytest.mark.parametrize("by_keywords", [True, False], ids=["keywords", "changed"])
@pytest.mark.parametrize("cls, settings, name, value", LEARNING_RATES,
                         ids=[f"{c.__name__}-{n}-{v!r}" for c, _, n, v in LEARNING_RATES])
def test_an_exported_learning_rate_is_the_runs_to_the_last_bit(cls, settings, name, value, by_keywords):
    """The exported script's lab has the run's learning rate exactly (keywords, or changed after
    the lab was made, as in the page), and so do the trainers it builds."""
    if by_keywords:
        lab = cls(**settings, **{name: value})
    else:
        lab = cls(**settings)
        lab.apply_settings({name: value})
    try:
        script = lab.python_script(steps=1)
        reached = lab.run_settings()
    finally:
        lab.close()
    assert reached[name] == value
    namespace: dict = {"__name__": "__main__"}
    exec(compile(construction(script), "<script>", "exec"), namespace)
    remade = namespace["lab"]
    try:
        assert remade.run_settings() == reached, script
        assert getattr(remade, name) == value and float(getattr(remade, name)).hex() == value.hex(), script
        assert remade.runner.wait_started(120)
        [trainer] = remade.runner.trainers.values()
        assert getattr(trainer, TRAINER_ATTRIBUTE[name]) == value, script
    finally:
        remade.close()
