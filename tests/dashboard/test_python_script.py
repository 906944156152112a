""""Copy as Python" (issue 26 item 3): each lab's run as a short script over the public API;
the exported script, run headless in a fresh interpreter, makes the same Records."""

from __future__ import annotations

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
