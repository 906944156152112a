"""A user's image set as the TAP and Frank-Wolfe labs take it (issue 26 item 1): read through
the hardened archive reader or as CSV, [0, 1] values thresholded, the upload limits, the
train / validation / test split and the hash a checkpoint records."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest

from boltzlab.engine import images as im
from boltzlab.engine.images import (MIN_UPLOAD_IMAGES, ImageSet, fingerprint, load_images, read_upload,
                                    split_images, tile_images, with_width)


def npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def csv(X: np.ndarray, header: bool = False) -> bytes:
    lines = ([",".join(f"p{j}" for j in range(X.shape[1]))] if header else [])
    lines += [",".join(f"{v:g}" for v in row) for row in X]
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture
def pictures() -> np.ndarray:
    """60 images of 10 x 12 pixels (height x width), binary."""
    return (np.random.default_rng(1).random((60, 10, 12)) < 0.3).astype(np.uint8)


def test_an_npz_of_3d_images_keeps_its_shape_and_is_split(pictures):
    data = read_upload(npz(X=pictures), "mine.npz")
    assert data.image_shape == (10, 12) and data.name == "mine.npz" and data.origin == "user upload"
    assert data.split_sizes == (42, 6, 12) and data.X_train.dtype == np.float64
    rows = np.concatenate([data.X_train, data.X_valid, data.X_test])
    # every image once, in one split
    assert sorted(map(bytes, rows.astype(np.uint8))) == sorted(map(bytes, pictures.reshape(60, -1)))
    assert data.meta["sha256"] == fingerprint(data) and len(data.meta["sha256"]) == 64


def test_a_csv_gives_the_same_split_and_hash_and_needs_a_width(pictures):
    flat = pictures.reshape(60, -1)
    from_npz = read_upload(npz(X=pictures), "mine.npz")
    from_csv = read_upload(csv(flat, header=True), "mine.csv")
    assert from_csv.image_shape is None  # 120 pixels: no square
    assert from_csv.meta["sha256"] == from_npz.meta["sha256"]
    np.testing.assert_array_equal(from_csv.X_test, from_npz.X_test)
    with pytest.raises(ValueError, match="120 pixels, which is no square: set their width"):
        with_width(from_csv, 0)
    assert with_width(from_csv, 12).image_shape == (10, 12)
    assert with_width(from_csv, 10).image_shape == (12, 10)
    with pytest.raises(ValueError, match="'image_width' setting must divide the images' 120 pixels. Got 7"):
        with_width(from_csv, 7)
    with pytest.raises(ValueError, match=r"contradicts the file's own image shape \(10, 12\)"):
        with_width(from_npz, 10)
    assert with_width(from_npz, 12) is from_npz


WIDTH = 12  # of the pictures


def rows_of(data: ImageSet) -> list[bytes]:
    return sorted(map(bytes, np.concatenate([data.X_train, data.X_valid, data.X_test]).astype(np.uint8)))


@pytest.mark.parametrize("kind", ["csv", "2-d npz"])
def test_non_square_images_need_their_width_and_are_drawn_in_it(pictures, kind):
    """10 x 12 images flattened (a CSV, or a 2-d array): no shape until the width is given;
    with it each row is drawn as the image it was; a width that does not divide the row is refused."""
    flat = pictures.reshape(60, -1)
    data = read_upload(csv(flat) if kind == "csv" else npz(X=flat), "flat")
    assert data.image_shape is None and "square_guess" not in data.meta
    with pytest.raises(ValueError, match=r"The images have 120 pixels, which is no square: set their width "
                                         r"\(“Image width”, the 'image_width' setting\)\."):
        with_width(data, 0)
    shaped = with_width(data, WIDTH)
    assert shaped.image_shape == (10, WIDTH) and shaped.meta["sha256"] == data.meta["sha256"]
    assert rows_of(shaped) == rows_of(data)  # the same rows, only a shape
    tiled = tile_images(shaped.X_train[:3].T, shaped.image_shape, n_cols=3, pad=1, normalize=None)
    assert tiled.shape == (10, 3 * WIDTH + 2)
    originals = {bytes(p) for p in pictures.reshape(60, -1)}
    for k in range(3):  # tile k is training row k in the images' own 10 x 12 layout
        tile = tiled[:, k * (WIDTH + 1):k * (WIDTH + 1) + WIDTH]
        np.testing.assert_array_equal(tile, shaped.X_train[k].reshape(10, WIDTH))
        assert bytes(tile.astype(np.uint8).ravel()) in originals
    for width in (7, 11, 121, 240):
        with pytest.raises(ValueError, match=f"must divide the images' 120 pixels. Got {width}."):
            with_width(data, width)
    assert with_width(data, 120).image_shape == (1, 120)  # one row of 120: allowed, if odd


def test_a_square_number_of_pixels_is_only_a_guess():
    """9 x 16 images flattened have 144 pixels, a 12 x 12 square: drawn as one until the width
    is given, and the set says that its shape is a guess."""
    X = (np.random.default_rng(2).random((40, 9, 16)) < 0.3).astype(np.uint8)
    data = read_upload(csv(X.reshape(40, -1)), "wide.csv")
    assert data.image_shape == (12, 12) and data.meta["square_guess"]
    wide = with_width(data, 16)
    assert wide.image_shape == (9, 16) and "square_guess" not in wide.meta
    assert wide.meta["sha256"] == data.meta["sha256"] and data.meta["square_guess"]  # data itself unchanged
    square = with_width(data, 12)  # a square the user says it is: no longer a guess
    assert square.image_shape == (12, 12) and "square_guess" not in square.meta
    assert with_width(data, 0) is data
    with pytest.raises(ValueError, match="must divide the images' 144 pixels. Got 10; 0 draws them 12×12."):
        with_width(data, 10)
    own = read_upload(npz(X=X[:, :, :9]), "own.npz")  # 9 x 9 from a 3-d array: the file's own
    assert own.image_shape == (9, 9) and "square_guess" not in own.meta


def test_grey_values_in_0_1_are_thresholded(pictures):
    grey = np.where(pictures == 1, 0.8, 0.2)
    a = read_upload(npz(images=grey.astype(np.float32)), "grey.npz")
    b = read_upload(npz(X=pictures), "bin.npz")
    assert a.meta["sha256"] == b.meta["sha256"]
    c = read_upload(csv(grey.reshape(60, -1)), "grey.csv")
    assert c.meta["sha256"] == b.meta["sha256"]


def test_labels_split_stratified_and_the_split_is_reproducible(pictures):
    y = np.repeat(np.arange(3), 20)
    data = read_upload(npz(X=pictures, y=y), "labelled.npz")
    assert data.split_sizes == (42, 6, 12)
    assert np.bincount(data.y_valid).tolist() == [2, 2, 2] and np.bincount(data.y_test).tolist() == [4, 4, 4]
    again = read_upload(npz(X=pictures, y=y), "labelled.npz")
    assert again.meta["sha256"] == data.meta["sha256"]
    np.testing.assert_array_equal(again.X_valid, data.X_valid)


def test_split_images_keeps_every_row_and_has_a_row_in_each_split():
    X = np.eye(5, 4)
    data = split_images(ImageSet(X, X[:0], X[:0], None, None, None, image_shape=(2, 2), name="t", origin="t"))
    assert sum(data.split_sizes) == 5 and min(data.split_sizes) >= 1
    with pytest.raises(ValueError, match="at least 3 images"):
        split_images(ImageSet(X[:2], X[:0], X[:0], None, None, None, image_shape=(2, 2), name="t", origin="t"))


def test_the_hash_tells_data_apart():
    digits = load_images("digits")
    assert fingerprint(digits) == fingerprint(load_images("digits"))
    assert fingerprint(digits) != fingerprint(load_images("mnist"))
    X = digits.X_train.copy()
    X[0, 0] = 1 - X[0, 0]
    changed = ImageSet(X, digits.X_valid, digits.X_test, None, None, None, (8, 8), "x", "x")
    assert fingerprint(changed) != fingerprint(digits)
    moved = ImageSet(digits.X_valid, digits.X_train, digits.X_test, None, None, None, (8, 8), "x", "x")
    assert fingerprint(moved) != fingerprint(digits)  # the same rows in other splits


BAD_FILES = [
    (npz(X=np.full((30, 16), 2.0)), "two.npz", r"must hold values in \[0, 1\].*row 0 \(0-based\), pixel column 0 holds 2.0"),
    (npz(X=np.full((30, 16), 255, dtype=np.uint8)), "grey.npz", "divide 0..255 by 255"),
    (b"0,1,0,1\n" * 29 + b"0,1,3,1\n", "bad.csv", r"Line 30, column 3 of the image file holds '3'; only values in \[0, 1\]"),
    (b"0,1,0,1\n" * 29 + b"0,1,-0.5,1\n", "bad.csv", "holds '-0.5'"),
    (npz(X=np.zeros((30, 2, 2, 2))), "4d.npz", "at most 3 are allowed"),
    (npz(X=np.zeros(30)), "1d.npz", "2-d .* or 3-d"),
    (b"0,1\n1,0,1\n", "ragged.csv", "Line 2 of the image file has 3 values"),
    (npz(X=np.zeros((5, 16))), "few.npz", f"at least {MIN_UPLOAD_IMAGES} images"),
    (b"", "empty.csv", "'empty.csv' is empty"),
    (b"this is not a zip archive", "fake.npz", "not a readable .npz archive"),
    (pickle.dumps(np.zeros((30, 4))), "pickled.npz", "pickled data, which is never loaded"),
    (npz(X=np.zeros((30, 65, 65))), "large.npz", "4,225 pixels each; at most 4,096"),
    (b"0,1\n" * (im.MAX_UPLOAD_IMAGES + 1), "rows.csv", "20,001 images .* at most 20,000"),
    (npz(X=np.zeros((im.MAX_UPLOAD_IMAGES + 1, 2), dtype=np.uint8)), "rows.npz", "at most 20,000 are allowed"),
    (npz(X=np.zeros((3000, 4000), dtype=np.uint8)), "values.npz", "at most 10,000,000 values"),
]


@pytest.mark.parametrize("content, name, match", BAD_FILES, ids=[name for _, name, _ in BAD_FILES])
def test_bad_files_get_one_sentence(content, name, match):
    with pytest.raises(ValueError, match=match):
        read_upload(content, name)


def test_a_pickled_object_array_is_never_unpickled(capsys):
    class Boom:
        def __reduce__(self):
            return (print, ("unpickled!",))

    obj = np.empty((30, 4), dtype=object)
    obj[:] = Boom()
    buf = io.BytesIO()
    np.savez(buf, X=obj)
    with pytest.raises(ValueError, match="dtype object .*never loaded"):
        read_upload(buf.getvalue(), "objects.npz")
    assert "unpickled!" not in capsys.readouterr().out


def test_a_file_over_the_upload_limit_is_refused_before_it_is_read():
    with pytest.raises(ValueError, match="at most 50 MB"):
        read_upload(b"0" * (im.MAX_UPLOAD_BYTES + 1), "huge.csv")


# issue 46 item 5 (a): the values docs/tap.md promises to refuse ("values 0/1, or anything in
# [0, 1]"), each alone in an otherwise valid file, in both formats.  NaN compares false with
# everything, so a check written as "below 0 or above 1" would let it through.
OUT_OF_RANGE = [np.nan, np.inf, -np.inf, -1e-9, 1.000001, 2.0, -1.0]


@pytest.mark.parametrize("value", OUT_OF_RANGE, ids=repr)
def test_every_value_outside_0_1_is_refused_in_an_npz(value):
    X = np.full((30, 16), 0.25)
    X[7, 5] = value
    with pytest.raises(ValueError, match=r"must hold values in \[0, 1\].*row 7 \(0-based\), pixel column 5"):
        read_upload(npz(X=X), "one-bad.npz")
    with pytest.raises(ValueError, match=r"row 7 \(0-based\), pixel column 5"):
        read_upload(npz(X=X.astype(np.float32)), "one-bad32.npz")


@pytest.mark.parametrize("token", ["nan", "NaN", "inf", "-inf", "-1e-9", "1.000001", "2", "-0.5"])
def test_every_value_outside_0_1_is_refused_in_a_csv(token):
    rows = ["0.25,0.75,0,1"] * 30
    rows[11] = f"0.25,0.75,{token},1"
    with pytest.raises(ValueError, match=rf"Line 12, column 3 of the image file holds '{token}'"):
        read_upload(("\n".join(rows) + "\n").encode(), "one-bad.csv")


def test_the_ends_of_0_1_are_accepted_and_thresholded_like_numpy():
    X = np.random.default_rng(3).random((30, 16))
    X[0, :4] = [0.0, 1.0, 0.5, np.nextafter(0.5, 1)]
    data = read_upload(npz(X=X), "edges.npz")
    got = np.concatenate([data.X_train, data.X_valid, data.X_test])
    assert sorted(map(bytes, got.astype(np.uint8))) == sorted(map(bytes, (X > 0.5).astype(np.uint8)))
