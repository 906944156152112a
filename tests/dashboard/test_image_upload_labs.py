"""Your own images in the TAP and Frank-Wolfe labs (issue 26 item 1): an .npz or CSV upload trains,
its views take the images' width x height, a checkpoint records the data's hash and refuses
other data, bad files are refused with their reason (the run and its data stay), and "Copy as
Python" reproduces an uploaded run."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from boltzlab.dashboard import budget
from boltzlab.dashboard.labs import FrankWolfeLab, TAPLab
from boltzlab.dashboard.labtools import read_checkpoint, write_checkpoint
from boltzlab.engine import rbm
from boltzlab.engine.images import load_images
from boltzlab.engine.kernels import rbm as rbm_kernels
from tests.dashboard.test_frankwolfe_lab import tick_until

ROOT = Path(__file__).resolve().parents[2]
HEIGHT, WIDTH = 10, 12
#: small runs on the uploaded images, per lab
SMALL = {TAPLab: dict(n_hidden=6, K=20, batch=20, seed=2),
         FrankWolfeLab: dict(max_hidden=8, samples=200, evaluate="exact", eval_every=1, seed=1)}
LABS = [TAPLab, FrankWolfeLab]
IDS = [cls.key for cls in LABS]
CLOCKS = ("time", "seconds", "elapsed")


def pictures(n: int = 80, seed: int = 0) -> np.ndarray:
    """n binary images of HEIGHT x WIDTH: a bar at a random row plus noise."""
    rng = np.random.default_rng(seed)
    X = (rng.random((n, HEIGHT, WIDTH)) < 0.1).astype(np.uint8)
    X[np.arange(n), rng.integers(0, HEIGHT, n), :] = 1
    return X


def npz_bytes(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def csv_bytes(X: np.ndarray) -> bytes:
    flat = X.reshape(len(X), -1)
    header = ",".join(f"px{j}" for j in range(flat.shape[1]))
    return (header + "\n" + "\n".join(",".join(map(str, row)) for row in flat) + "\n").encode()


def steps(lab, k: int) -> None:
    """k single steps, one tick as the UI would, then the analyses that tick started."""
    for _ in range(k):
        lab.runner.step_once()
    assert lab.runner.wait_idle(120)
    lab.on_records(lab.runner.drain())
    assert lab.jobs.wait(120)
    lab.on_records(lab.runner.drain())
    lab.refresh_status()


def uploaded(lab, content: bytes, filename: str, **settings) -> None:
    """Upload as the page does (the file input's value), wait for the reading job, train on it."""
    lab.uploads.upload.filename = filename
    lab.uploads.upload.value = content
    assert lab.jobs.wait(120)
    lab.apply_settings({"data": "upload", **settings})


def only_run(lab):
    (name,) = [n for n in lab.runner.states if n in ("TAP", "FW")]
    return name


@pytest.mark.parametrize("cls", LABS, ids=IDS)
@pytest.mark.parametrize("kind", ["npz", "csv"])
def test_an_upload_trains_and_its_views_take_the_images_shape(cls, kind, make_lab):
    lab = make_lab(cls, data="digits")
    assert not lab.uploads.upload.visible and not lab.widgets["image_width"].visible
    lab.widgets["data"].value = "upload"  # the radio button: a file input appears, the digits run stays
    assert lab.uploads.upload.visible and lab.widgets["image_width"].visible
    assert "Choose an .npz or CSV file" in lab.settings_msg.text
    X = pictures()
    if kind == "npz":
        uploaded(lab, npz_bytes(images=X), "bars.npz", **SMALL[cls])  # 3-d: the file says its shape
    else:
        uploaded(lab, csv_bytes(X), "bars.csv", image_width=WIDTH, **SMALL[cls])
    assert f"<b>bars.{kind}</b> (your upload, SHA-256" in lab.data_info.object
    assert "56 training, 8 validation" in lab.data_info.object and "10×12 binary pixels" in lab.data_info.object
    steps(lab, 3)
    run = only_run(lab)
    assert lab.runner.states[run].steps == 3 and lab.runner.states[run].status != "error"
    assert lab.fields.image_shape == (HEIGHT, WIDTH) and lab.samples_grid.image_shape == (HEIGHT, WIDTH)
    W = lab.latest(run).arrays["W"]
    assert W.shape[0] == HEIGHT * WIDTH
    assert np.isfinite(lab.records[run][lab.watch_scalar]).all()
    assert lab.data_identity()[1] == f"bars.{kind}"


def test_the_tap_views_of_data_without_labels(make_lab):
    lab = make_lab(TAPLab, data="digits")
    lab.widgets["data"].value = "upload"
    uploaded(lab, npz_bytes(X=pictures()), "bars.npz", **SMALL[TAPLab])
    steps(lab, 8)  # a whole epoch: a snapshot for the Isomaps
    assert lab.jobs.wait(120)
    assert len(lab.data_embedding.source.data["x"]) == 56  # every training image, no digit labels
    assert lab.data_embedding.source.data["label"][0].startswith("training image")
    lab._show_denoising()
    assert lab.jobs.wait(120)
    assert lab.denoise_note.object.startswith("Test image 0 with p =")
    assert lab.solutions_grid.image_shape == (HEIGHT, WIDTH)


@pytest.mark.parametrize("cls", LABS, ids=IDS)
def test_a_checkpoint_records_its_data_and_refuses_other_data(cls, make_lab):
    lab = make_lab(cls, data="digits")
    content = npz_bytes(X=pictures())
    uploaded(lab, content, "bars.npz", **SMALL[cls])
    steps(lab, 2)
    saved = write_checkpoint(lab.tools.checkpoint())
    ckpt = read_checkpoint(saved, lab=cls.key)
    assert ckpt.data == lab.data_identity() and len(ckpt.data[0]) == 64

    fresh = make_lab(cls, data="digits")
    assert not fresh.tools.load_bytes(saved)  # no upload: said, nothing changed
    assert "upload the file first" in fresh.tools.message.text
    assert fresh.data == "digits" and fresh.runner.states[only_run(fresh)].steps == 0

    fresh.widgets["data"].value = "upload"
    other = pictures(seed=5)
    uploaded(fresh, npz_bytes(X=other), "other.npz")
    assert not fresh.tools.load_bytes(saved)
    text = fresh.tools.message.text
    assert "trained on other data (bars.npz, SHA-256" in text and "than this lab has now (other.npz" in text
    assert "The current run is unchanged" in text

    fresh.use_upload(content, "bars.npz")  # the data it was trained on: it loads
    assert fresh.jobs.wait(120)
    assert fresh.tools.load_bytes(saved), fresh.tools.message.text
    run = only_run(fresh)
    assert fresh.runner.states[run].steps == 2
    np.testing.assert_array_equal(fresh.latest(run).arrays["W"], lab.latest(run).arrays["W"])
    steps(fresh, 1)  # and goes on
    assert fresh.runner.states[run].steps == 3


@pytest.mark.parametrize("cls", LABS, ids=IDS)
def test_a_bundled_checkpoint_does_not_load_onto_an_upload(cls, make_lab):
    lab = make_lab(cls, data="digits", **({"max_hidden": 4} if cls is FrankWolfeLab else {"n_hidden": 4, "K": 10}))
    steps(lab, 1)
    saved = write_checkpoint(lab.tools.checkpoint())
    assert read_checkpoint(saved, lab=cls.key).data[1] == "binarised digits 8x8"
    other = make_lab(cls, data="digits")
    assert other.tools.load_bytes(saved), other.tools.message.text  # the same bundled set


class Boom:
    def __reduce__(self):  # would run on unpickling
        return (print, ("unpickled!",))


def _objects() -> bytes:
    obj = np.empty((30, 4), dtype=object)
    obj[:] = Boom()
    buffer = io.BytesIO()
    np.savez(buffer, X=obj)
    return buffer.getvalue()


BAD = [
    ("non-binary", lambda: npz_bytes(X=pictures() * 3), "grey.npz", r"values in [0, 1]"),
    ("wrong shape", lambda: npz_bytes(X=np.zeros((30, 2, 3, 4))), "4d.npz", "at most 3 are allowed"),
    ("too many rows", lambda: b"0,1\n" * 20_001, "rows.csv", "at most 20,000 are allowed"),
    ("too few rows", lambda: csv_bytes(pictures(5)), "few.csv", "at least 20 images"),
    ("not an npz", lambda: b"hello, this is text", "fake.npz", "not a readable .npz archive"),
    ("pickled object array", _objects, "objects.npz", "never loaded"),
    ("empty", lambda: b"", "empty.csv", "is empty"),
]


@pytest.mark.parametrize("cls", LABS, ids=IDS)
def test_bad_files_are_refused_and_the_run_stays(cls, make_lab, capsys):
    lab = make_lab(cls, data="digits")
    lab.widgets["data"].value = "upload"
    uploaded(lab, npz_bytes(X=pictures()), "bars.npz", **SMALL[cls])
    steps(lab, 1)
    run = only_run(lab)
    identity = lab.data_identity()
    for what, make, filename, match in BAD:
        lab.use_upload(make(), filename)
        assert lab.jobs.wait(120)
        text = lab.uploads.message.text
        assert f"Could not use {filename}" in text and match in text, (what, text)
        assert "Still training on: bars.npz" in text
        assert lab.data_identity() == identity and lab.runner.states[run].steps == 1, what
    assert "unpickled!" not in capsys.readouterr().out
    lab.use_upload(b"0" * (50 * 2**20 + 1), "huge.csv")  # refused before any job
    assert not lab.jobs.running() and "at most 50 MB" in lab.uploads.message.text
    # a width that does not fit: a bad setting, said, the run kept
    lab.use_upload(csv_bytes(pictures()), "flat.csv")
    assert lab.jobs.wait(120)
    with pytest.raises(ValueError, match="'image_width' setting must divide the images' 120 pixels. Got 7"):
        lab.apply_settings({"image_width": 7})
    assert lab.data_identity() == identity


@pytest.mark.parametrize("cls", LABS, ids=IDS)
def test_the_work_budget_holds_for_uploads(cls, make_lab, monkeypatch):
    lab = make_lab(cls, data="digits")
    lab.widgets["data"].value = "upload"
    monkeypatch.setattr(budget.LIMITS, "step_seconds", 1e-7)  # every step is too much now
    lab.use_upload(npz_bytes(X=pictures()), "bars.npz")
    assert lab.jobs.wait(120)
    assert "per step" in lab.settings_msg.text and "at most 1e-07 s are allowed" in lab.settings_msg.text
    assert lab.settings_msg.level == "error" and lab.data_identity()[1] != "bars.npz"


@pytest.mark.parametrize("cls", LABS, ids=IDS)
def test_copy_as_python_reproduces_an_uploaded_run(cls, make_lab, tmp_path):
    content = csv_bytes(pictures())
    lab = make_lab(cls, data="digits")
    lab.widgets["data"].value = "upload"
    uploaded(lab, content, "bars.csv", image_width=WIDTH, **SMALL[cls])
    lab.run(steps=2)
    script = lab.python_script()
    ours = lab.records_frame()
    assert "lab.use_upload(Path('bars.csv').read_bytes(), 'bars.csv')" in script
    assert "'data': 'upload'" in script and f"'image_width': {WIDTH}" in script
    (tmp_path / "bars.csv").write_bytes(content)  # the file, beside the script
    (tmp_path / "run.py").write_text(script)
    out = subprocess.run([sys.executable, "run.py"], cwd=tmp_path, capture_output=True, text=True, timeout=1200,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    theirs = pd.read_csv(tmp_path / f"boltzlab-{cls.key}-records.csv")
    keep = [c for c in ours.columns if not any(k in c for k in CLOCKS)]
    assert list(theirs.columns) == list(ours.columns) and len(theirs) == len(ours) > 0
    numeric = [c for c in keep if c != "run" and pd.api.types.is_numeric_dtype(ours[c])]
    np.testing.assert_allclose(theirs[numeric].to_numpy(float), ours[numeric].to_numpy(float),
                               rtol=1e-9, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("cls", LABS, ids=IDS)
def test_a_refused_upload_leaves_the_runs_data_through_a_reset(cls, make_lab, monkeypatch):
    lab = make_lab(cls, data="digits")
    lab.widgets["data"].value = "upload"
    uploaded(lab, npz_bytes(X=pictures()), "bars.npz", **SMALL[cls])
    identity = lab.data_identity()
    monkeypatch.setattr(budget.LIMITS, "step_seconds", 1e-7)
    lab.use_upload(npz_bytes(X=pictures(seed=3)), "other.npz")  # read, then refused by the budget
    assert lab.jobs.wait(120) and "per step" in lab.settings_msg.text
    lab.reset.clicks += 1  # a new run of the same data: the views and the checkpoint keep bars.npz
    assert lab.data_identity() == identity
    assert lab.fields.image_shape == (HEIGHT, WIDTH)
    assert read_checkpoint(write_checkpoint(lab.tools.checkpoint()), lab=cls.key).data == identity


def drawn_tile_shape(grid) -> tuple[int, int]:
    """(height, width) of one tile of what ``grid`` last drew, from the tiled image's own size
    (tiles ``pad`` = 1 apart, ``n_cols`` per row)."""
    rows = -(-grid.n_tiles // grid.n_cols)
    h, w = grid.source.data["image"][0].shape
    assert (h + 1) % rows == 0 and (w + 1) % grid.n_cols == 0
    return (h + 1) // rows - 1, (w + 1) // grid.n_cols - 1


@pytest.mark.parametrize("cls", LABS, ids=IDS)
def test_a_non_square_csv_waits_for_its_width(cls, make_lab):
    """10 x 12 images in a CSV (120 pixels a row, no square): without ``image_width`` the lab
    says to set it and keeps its run; a width that does not divide the row is refused; with the
    width it trains and draws the images' shape (and the other way round with 12 x 10)."""
    lab = make_lab(cls, data="digits")
    before = lab.data_identity()
    lab.widgets["data"].value = "upload"
    lab.use_upload(csv_bytes(pictures()), "flat.csv")
    assert lab.jobs.wait(120)
    need = "The images have 120 pixels, which is no square: set their width (“Image width”"
    assert "80 images of 120 pixels, which is no square: set their **Image width**" in lab.uploads.message.text
    assert lab.settings_msg.level == "info" and need in lab.settings_msg.text  # something to give, not an error
    assert lab.uploads.upload.visible and lab.widgets["image_width"].visible
    assert lab.data_identity() == before and lab.runner.states[only_run(lab)].status != "error"
    with pytest.raises(ValueError, match=r"120 pixels, which is no square: set their width"):
        lab.apply_settings({"data": "upload", **SMALL[cls]})  # from Python: said as a ValueError
    assert lab.data_identity() == before

    with pytest.raises(ValueError, match="'image_width' setting must divide the images' 120 pixels. Got 7"):
        lab.apply_settings({"image_width": 7})
    assert lab.settings_msg.level == "error" and "Got 7" in lab.settings_msg.text
    assert lab.data_identity() == before

    lab.apply_settings({"image_width": WIDTH})
    assert lab.data_identity()[1] == "flat.csv" and not lab.settings_msg.pane.visible
    assert lab.uploads.message.text == "Read flat.csv: 80 images of 120 pixels."  # no longer asks for it
    assert "10×12 binary pixels (height×width)." in lab.data_info.object
    assert "guessed" not in lab.data_info.object
    steps(lab, 2)
    run = only_run(lab)
    assert lab.runner.states[run].steps == 2 and lab.runner.states[run].status != "error"
    for grid in (lab.fields, lab.samples_grid):
        assert grid.image_shape == (HEIGHT, WIDTH)
    assert lab.fields.n_tiles >= 1 and drawn_tile_shape(lab.fields) == (HEIGHT, WIDTH)

    lab.apply_settings({"image_width": HEIGHT})  # the same rows as 12 x 10 images: a new run, the same data
    assert "12×10 binary pixels" in lab.data_info.object and lab.fields.image_shape == (WIDTH, HEIGHT)
    steps(lab, 1)
    assert drawn_tile_shape(lab.fields) == (WIDTH, HEIGHT)


@pytest.mark.parametrize("cls", LABS, ids=IDS)
def test_a_square_number_of_pixels_is_said_to_be_a_guess(cls, make_lab):
    """9 x 16 images in a CSV have 144 pixels, a 12 x 12 square: drawn so, and the data panel
    says the shape is a guess, until the width says otherwise."""
    X = (np.random.default_rng(4).random((60, 9, 16)) < 0.2).astype(np.uint8)
    lab = make_lab(cls, data="digits")
    lab.use_upload(csv_bytes(X), "wide.csv")
    assert lab.jobs.wait(120)
    assert lab.uploads.message.text == "Read wide.csv: choose “Upload” to train on it."
    lab.apply_settings({"data": "upload", **SMALL[cls]})
    assert lab.uploads.message.text == "Read wide.csv: 60 images of 144 pixels."
    info = lab.data_info.object
    assert "12×12 binary pixels" in info and "The shape is guessed from the number of pixels" in info
    assert lab.fields.image_shape == (12, 12)
    lab.apply_settings({"image_width": 16})
    assert "9×16 binary pixels" in lab.data_info.object and "guessed" not in lab.data_info.object
    assert lab.fields.image_shape == (9, 16)
    lab.apply_settings({"image_width": 12})  # a square the user confirms: no longer a guess
    assert "12×12 binary pixels" in lab.data_info.object and "guessed" not in lab.data_info.object


def exact_log_likelihood(X: np.ndarray, W, b_vis, b_hid) -> float:
    """The mean exact log-likelihood per row of X under the RBM (W, b_vis, b_hid)."""
    W, b_vis, b_hid = (np.ascontiguousarray(a, dtype=np.float64) for a in (W, b_vis, b_hid))
    free = rbm_kernels.free_energy(np.ascontiguousarray(X, dtype=np.float64), W, b_vis, b_hid)
    return -float(np.mean(free)) - float(rbm.log_partition_exact(W, b_vis, b_hid))


def test_the_cd_fork_trains_on_the_uploaded_images(make_lab):
    """The Frank-Wolfe lab's CD pair ("Train CD from here") trains on the uploaded images, not
    the bundled ones: 8 x 8 images, as many pixels as the bundled digits, so that a fork on the
    digits would pass every shape check and be caught only by what it trained on."""
    rng = np.random.default_rng(6)
    X = (rng.random((80, 8, 8)) < 0.1).astype(np.uint8)
    X[np.arange(80), :, rng.integers(0, 8, 80)] = 1  # a vertical bar in each image
    lab = make_lab(FrankWolfeLab, data="digits")
    lab.use_upload(npz_bytes(X=X), "bars8.npz")
    assert lab.jobs.wait(120)
    lab.apply_settings({"data": "upload", "max_hidden": 6, "samples": 200, "evaluate": "exact", "eval_every": 2,
                        "seed": 1, "cd_epochs": 2})
    upload, digits = lab.uploads.run_images, load_images("digits")
    assert upload.name == "bars8.npz" and upload.X_train.shape == (56, 64) and digits.X_train.shape[1] == 64
    steps(lab, 3)  # iteration 3 is not evaluated (every 2): the fork's own log-likelihood is a job
    lab._fork_cd()
    assert lab.cd_runner is not None and lab.cd_status.level != "error", lab.cd_status.text
    tick_until(lab, lambda: not lab.cd_runner.active and not lab.jobs.running() and not lab.busy())
    assert lab.cd_curve.n_points("fw") == 2 and lab.cd_curve.n_points("random") == 2
    assert "CD-10 done" in lab.cd_status.text
    for name in ("CD (FW init)", "CD (random init)"):
        assert lab.cd_runner.states[name].steps == 2
        np.testing.assert_array_equal(lab.cd_runner.trainers[name].V, upload.X_train)  # what it trained on
        last = lab.cd_runner.latest(name)  # and what it scored: the uploaded training images
        params = tuple(last.arrays[k] for k in ("W", "b_vis", "b_hid"))
        value = last.scalars["log_likelihood"]
        assert value == pytest.approx(exact_log_likelihood(upload.X_train, *params), abs=1e-6)
        assert abs(value - exact_log_likelihood(digits.X_train, *params)) > 1.0  # the digits score otherwise
        assert lab.cd_curve.sources["fw" if name == "CD (FW init)" else "random"].data["y"][-1] == value
    W, b_vis, b_hid = lab._fork["params"]  # the Frank-Wolfe model at the fork, scored by a job
    assert lab.fork_line.visible
    assert lab.fork_line.location == pytest.approx(exact_log_likelihood(upload.X_train, W, b_vis, b_hid), abs=1e-9)
