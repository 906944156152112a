"""Bad checkpoints loaded into every lab, headless (issue 15): a decompression bomb, object
and structured dtypes, a Fortran-order header trick, a huge declared shape, a truncated
member, duplicated names, too many members, bytes that are no zip, a checkpoint of another
lab, NaN/inf parameters.  Each is refused with its exact sentence in the lab's message,
and the session is unchanged: settings, history, step counts and every trainer's state.

The archives are built here from the lab's own checkpoint (builders: test_archives.py).
"""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest
from test_archives import checkpoint_bomb, decompressed, npy, raw_npy_header, zip_of  # noqa: F401 - a fixture

from boltzlab import engine
from boltzlab.dashboard.labs import LABS
from boltzlab.dashboard.labtools import Checkpoint, read_checkpoint, write_checkpoint
from tests.waiting import tick

#: settings small enough for a few quick steps (as in tests/dashboard/test_lab_contract.py)
SMALL = {
    "fvbm": {"d": "6", "n": "2000", "mode": "Race", "race_mus": "0.5, 2.5", "init": "random", "init_seed": "3"},
    "tap": {"data": "digits", "n_hidden": "6", "batch": "50", "K": "20", "seed": "3"},
    "frankwolfe": {"data": "digits", "max_hidden": "20"},
    "bound": {"problem": "fvbm", "race_seed": "2"},
}
#: a parameter array of each lab's first run
PARAM = {"fvbm": "M", "tap": "W", "frankwolfe": "W", "bound": "theta"}
WALL_CLOCK = ("time", "second", "elapsed")


@pytest.fixture(scope="module", params=LABS, ids=[cls.key for cls in LABS])
def lab(request):
    """One lab per class, two steps in; every test leaves it as it found it (or fails)."""
    engine.warm_up()
    lab = request.param()
    lab.panel()
    lab.apply_settings(lab.tools.decode(SMALL[lab.key], strict=True)[0])
    for _ in range(2):
        lab.runner.step_once()
    assert lab.runner.wait_idle(120)
    tick(lab)
    assert lab.jobs.wait(120)
    yield lab
    lab.close()


def session(lab) -> dict:
    """What a load must not change: settings, history (wall-clock columns aside), steps, states."""
    return {
        "settings": lab.tools.settings_text(),
        "history": {name: [{k: v for k, v in row.items() if not any(w in k for w in WALL_CLOCK)} for row in rows]
                    for name, rows in lab.runner.history.rows.items()},
        "steps": {name: state.steps for name, state in lab.runner.states.items()},
        "states": {name: trainer.state_dict() for name, trainer in lab.runner.trainers.items()},
    }


def assert_same(before: dict, after: dict) -> None:
    assert after["settings"] == before["settings"]
    assert after["history"] == before["history"]
    assert after["steps"] == before["steps"]
    assert after["states"].keys() == before["states"].keys()
    for name, state in before["states"].items():
        assert after["states"][name].keys() == state.keys(), name
        for key, value in state.items():
            np.testing.assert_array_equal(after["states"][name][key], value, err_msg=f"{name}: {key}")


def members(lab) -> list[tuple[str, bytes]]:
    """The lab's own checkpoint, member by member."""
    with zipfile.ZipFile(io.BytesIO(write_checkpoint(lab.tools.checkpoint()))) as zf:
        return [(name, zf.read(name)) for name in zf.namelist()]


def replaced(lab, data: bytes) -> bytes:
    """The lab's checkpoint with its first run's parameter array replaced by ``data``."""
    target = f"state/0/{PARAM[lab.key]}.npy"
    return zip_of([(name, data if name == target else old) for name, old in members(lab)])


def with_param(lab, value: float) -> bytes:
    ckpt = lab.tools.checkpoint()
    run = next(iter(ckpt.states))
    param = np.array(ckpt.states[run][PARAM[lab.key]], dtype=np.float64)
    param.flat[-1] = value
    ckpt.states[run] = {**ckpt.states[run], PARAM[lab.key]: param}
    return write_checkpoint(ckpt)


def first_run(lab) -> str:
    return next(iter(lab.runner.trainers))


def other_lab(lab) -> str:
    return next(cls.key for cls in LABS if cls.key != lab.key)


def param_bytes(lab) -> int:
    return len(npy(np.asarray(lab.tools.checkpoint().states[first_run(lab)][PARAM[lab.key]])))


P = "state/0/{param}"
CASES = {
    "bomb": (lambda lab: checkpoint_bomb(),
             "The array 'state/0/W' is 2048 MB uncompressed; at most 128 MB are allowed."),
    "object dtype": (lambda lab: replaced(lab, npy(np.array([{"evil": 1}], dtype=object))),
                     f"The array '{P}' has dtype object (pickled object arrays, which are never loaded, could run "
                     "code); save plain numeric arrays."),
    "structured dtype": (lambda lab: replaced(lab, npy(np.zeros(3, dtype=[("a", "<f8"), ("b", "<i8")]))),
                         f"The array '{P}' has a structured dtype; save each field as a plain array of its own."),
    "fortran-order trick": (lambda lab: replaced(lab, raw_npy_header(
                                "{'descr': '<f8', 'fortran_order': 'yes', 'shape': (2, 2), }") + bytes(32)),
                            f"The array '{P}' has no readable .npy header; save the file again with numpy.savez."),
    "huge declared shape": (lambda lab: replaced(lab, raw_npy_header(
                                "{'descr': '<f8', 'fortran_order': False, 'shape': (8589934592, 2147483648), }")),
                            f"The array '{P}' is more than 1,000,000,000 MB uncompressed; at most 128 MB are "
                            "allowed."),
    "complex dtype": (lambda lab: replaced(lab, npy(np.zeros(3, dtype=complex))),
                      f"The array '{P}' must be numeric (bool, int or float) or text. Got dtype complex128."),
    "truncated member": (lambda lab: replaced(lab, npy(np.asarray(
                             lab.tools.checkpoint().states[first_run(lab)][PARAM[lab.key]]))[:-8]),
                         "The array '{P}' is truncated: the archive holds {short} of the {full} bytes its .npy "
                         "header describes; save the file again."),
    "duplicated name": (lambda lab: zip_of(members(lab) + [("lab.npy", npy(np.asarray(lab.key)))]),
                        "The .npz file holds the array 'lab' twice; save each array once (numpy.savez does)."),
    "too many members": (lambda lab: zip_of(members(lab) + [(f"history/0/pad{i}.npy", npy(np.zeros(1)))
                                                            for i in range(4096)]),
                         "The .npz file holds more than 4096 arrays; at most 4096 are allowed."),
    "unknown member": (lambda lab: zip_of(members(lab) + [("evil.npy", npy(np.zeros(1)))]),
                       "The .npz file holds an array 'evil' that a Boltzmann Lab checkpoint never has."),
    "not a zip": (lambda lab: b"PK\x03\x04 and then nothing a zip has",
                  "The file is not a .npz checkpoint saved by Boltzmann Lab (it could not be read as an .npz "
                  "archive)."),
    "not a zip (no PK)": (lambda lab: b"\x80\x04garbage",
                          "The file is not a .npz checkpoint saved by Boltzmann Lab (it could not be read as an "
                          ".npz archive)."),
    "another lab": (lambda lab: write_checkpoint(Checkpoint(other_lab(lab), lab.tools.settings_text(),
                                                            *lab.runner.snapshot()[:2])),
                    "The checkpoint was saved in the '{other}' lab; this is the '{lab}' lab. Open that lab's page "
                    "to load it."),
    "NaN parameter": (lambda lab: with_param(lab, np.nan),
                      "The checkpoint's '{param_key}' of run '{run}' holds NaN or inf values though the run did "
                      "not diverge: the file is damaged."),
    "inf parameter": (lambda lab: with_param(lab, -np.inf),
                      "The checkpoint's '{param_key}' of run '{run}' holds NaN or inf values though the run did "
                      "not diverge: the file is damaged."),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_checkpoint_is_refused_with_its_sentence_and_the_session_is_unchanged(lab, case):
    build, template = CASES[case]
    full = param_bytes(lab)
    sentence = template.replace("{P}", P).format(
        param=PARAM[lab.key], param_key=PARAM[lab.key], run=first_run(lab), other=other_lab(lab), lab=lab.key,
        short=full - 8, full=full)
    content = build(lab)
    before = session(lab)

    assert not lab.tools.load_bytes(content, filename="bad.npz")
    assert lab.tools.message.level == "error"
    assert lab.tools.message.text == f"**Could not load bad.npz:** {sentence}  \nThe current run is unchanged."
    assert_same(before, session(lab))


def test_the_labs_own_checkpoint_still_loads_and_the_run_goes_on(lab):
    before = session(lab)
    assert lab.tools.load_bytes(write_checkpoint(lab.tools.checkpoint()), filename="good.npz"), lab.tools.message.text
    assert lab.tools.message.level == "ok"
    assert_same(before, session(lab))
    lab.runner.step_once()
    assert lab.runner.wait_idle(120)
    tick(lab)
    assert sum(lab.runner.states[name].steps for name in lab.runner.states) > sum(before["steps"].values())


def test_nan_parameters_of_a_diverged_run_are_left_to_its_trainer():
    """A run saved after it diverged has them by right: read_checkpoint passes them on."""
    state = {"W": np.array([[np.nan, 1.0]]), "status": np.asarray("diverged")}
    ckpt = read_checkpoint(write_checkpoint(Checkpoint("tap", {}, {"TAP": state})), lab="tap")
    assert np.isnan(ckpt.states["TAP"]["W"][0, 0])
    state["status"] = np.asarray("running")
    with pytest.raises(ValueError, match=r"^The checkpoint's 'W' of run 'TAP' holds NaN or inf values"):
        read_checkpoint(write_checkpoint(Checkpoint("tap", {}, {"TAP": state})), lab="tap")


def test_a_checkpoint_that_decompresses_past_4x_the_upload_limit_is_refused_before_decompressing(decompressed):
    state = {"W": np.zeros((256, 256)), "b": np.zeros((256, 256))}  # 1 MB of zeros: 2 kB deflated
    content = write_checkpoint(Checkpoint("tap", {}, {"TAP": state}))
    limit = 128 * 1024
    assert len(content) < limit
    with pytest.raises(ValueError) as info:
        read_checkpoint(content, lab="tap", limit=limit)
    assert str(info.value) == "The arrays of the .npz file add up to 1 MB uncompressed; at most 512 kB are allowed."
    assert decompressed[0] < 64 * 1024  # headers only
