"""Bundled binary image sets, user image files and receptive-field tiling."""

import gzip
import io
import pickle
from pathlib import Path

import numpy as np
import pytest

from boltzlab.engine.images import (
    DIGITS_ASSET,
    MAX_UPLOAD_BYTES,
    MNIST_ASSET,
    SPLIT_SEED,
    build_digits_asset,
    build_mnist_asset,
    digits,
    load_asset,
    load_binary_images,
    stratified_split,
    tile_images,
)

# shared/ sits beside the repository (on developer machines and in CI)
MNIST_CSV = Path(__file__).resolve().parents[3] / "shared" / "data" / "mnist_5k.csv.gz"


# ---------------------------------------------------------------------- bundled


def test_mnist_asset_shape_values_splits_and_balance():
    from boltzlab.engine.images import mnist

    data = mnist()
    assert MNIST_ASSET.stat().st_size < 1_000_000
    assert data.image_shape == (28, 28) and data.n_pixels == 784
    assert data.split_sizes == (3500, 500, 1000)
    for split, per_class in (("train", 350), ("valid", 50), ("test", 100)):
        X, y = data.split(split)
        assert X.dtype == np.uint8 and X.shape[1] == 784
        assert set(np.unique(X)) == {0, 1}
        np.testing.assert_array_equal(np.bincount(y, minlength=10), np.full(10, per_class))
        assert not np.all(np.diff(y) >= 0)  # shuffled, not sorted by class
    assert 0.05 < data.X_train.mean() < 0.3  # MNIST is mostly background
    assert data.meta["seed"] == SPLIT_SEED and data.meta["threshold"] == 127
    assert "CC BY-SA 3.0" in data.origin
    # no image appears in two splits
    rows = {row.tobytes() for row in data.X_test}
    assert sum(row.tobytes() in rows for row in data.X_train) < 5  # duplicates of a digit are rare


def test_loading_is_cached_read_only_and_float_on_request():
    from boltzlab.engine.images import mnist

    a, b = mnist(), mnist()
    assert a.X_train is b.X_train
    assert not a.X_train.flags.writeable
    f = mnist(np.float64)
    assert f.X_train.dtype == np.float64 and set(np.unique(f.X_train)) == {0.0, 1.0}
    np.testing.assert_array_equal(f.X_test, a.X_test)
    with pytest.raises(ValueError, match="'dtype' parameter of load_asset must be uint8 or float64"):
        load_asset(MNIST_ASSET, np.int32)
    with pytest.raises(ValueError, match="'which' parameter"):
        a.split("validation")


def test_asset_is_read_without_pickle():
    with np.load(MNIST_ASSET, allow_pickle=False) as npz:
        assert npz["X_train_bits"].shape == (3500, 98)
        np.testing.assert_array_equal(npz["image_shape"], [28, 28])
        np.testing.assert_array_equal(npz["split_sizes"], [3500, 500, 1000])
        assert int(npz["threshold"]) == 127 and int(npz["seed"]) == SPLIT_SEED


@pytest.mark.skipif(not MNIST_CSV.is_file(), reason="the source CSV lives outside the repository")
def test_rebuilding_mnist_from_the_csv_gives_identical_arrays(tmp_path):
    from boltzlab.engine.images import mnist, read_mnist_csv

    out = build_mnist_asset(MNIST_CSV, tmp_path / "again.npz")
    again, shipped = load_asset(out), mnist()
    for name in ("X_train", "X_valid", "X_test", "y_train", "y_valid", "y_test"):
        np.testing.assert_array_equal(getattr(again, name), getattr(shipped, name))
    # thresholding: pixel > 127 -> 1, exactly
    pixels, labels = read_mnist_csv(MNIST_CSV)
    train, _, _ = stratified_split(labels)
    np.testing.assert_array_equal(shipped.X_train, (pixels[train] > 127).astype(np.uint8))
    np.testing.assert_array_equal(shipped.y_train, labels[train])


def test_build_from_a_small_csv_is_reproducible(tmp_path):
    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 256, size=(40, 784))
    labels = np.repeat(np.arange(10), 4)
    csv = tmp_path / "tiny.csv.gz"
    with gzip.open(csv, "wt") as fh:
        np.savetxt(fh, np.column_stack([pixels, labels]), fmt="%d", delimiter=",")
    a = load_asset(build_mnist_asset(csv, tmp_path / "a.npz"))
    b = load_asset(build_mnist_asset(csv, tmp_path / "b.npz"))
    for name in ("X_train", "X_valid", "X_test", "y_train", "y_valid", "y_test"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert sum(a.split_sizes) == 40
    order = np.concatenate(stratified_split(labels))
    np.testing.assert_array_equal(np.sort(order), np.arange(40))  # a partition
    X_all = np.concatenate([a.X_train, a.X_valid, a.X_test])
    np.testing.assert_array_equal(X_all, (pixels[order] > 127).astype(np.uint8))


def test_build_rejects_a_wrong_csv(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("1,2,3\n4,5,6\n")
    with pytest.raises(ValueError, match="785 columns"):
        build_mnist_asset(bad, tmp_path / "x.npz")


@pytest.mark.parametrize("n_pixels", [784, 64, 7, 1])
def test_packbits_round_trip(n_pixels):
    X = np.random.default_rng(n_pixels).integers(0, 2, size=(13, n_pixels), dtype=np.uint8)
    packed = np.packbits(X, axis=1)
    assert packed.shape == (13, -(-n_pixels // 8))
    np.testing.assert_array_equal(np.unpackbits(packed, axis=1, count=n_pixels), X)


def test_digits_set():
    from sklearn.datasets import load_digits

    data = digits()
    assert data.image_shape == (8, 8) and data.n_pixels == 64
    assert data.split_sizes == (1259, 179, 359) and sum(data.split_sizes) == 1797
    assert set(np.unique(data.X_train)) == {0, 1}
    counts = np.bincount(np.concatenate([data.y_train, data.y_valid, data.y_test]))
    np.testing.assert_array_equal(counts, np.bincount(load_digits().target))
    assert np.bincount(data.y_test, minlength=10).min() >= 34  # stratified: about 20 % of each class
    assert data.meta["threshold"] == 7
    bunch = load_digits()
    _, _, test = stratified_split(bunch.target)
    np.testing.assert_array_equal(data.X_test, (bunch.data[test] > 7).astype(np.uint8))


def test_rebuilding_digits_gives_identical_arrays(tmp_path):
    again, shipped = load_asset(build_digits_asset(tmp_path / "d.npz")), digits()
    for name in ("X_train", "X_valid", "X_test", "y_train", "y_valid", "y_test"):
        np.testing.assert_array_equal(getattr(again, name), getattr(shipped, name))
    assert DIGITS_ASSET.stat().st_size < 100_000


# ------------------------------------------------------------------- user files


def _npz_bytes(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def test_npz_upload_2d_3d_and_labels(tmp_path):
    X = np.random.default_rng(0).integers(0, 2, size=(5, 4, 3))
    data = load_binary_images(_npz_bytes(images=X.astype(bool), y=np.arange(5)))
    assert data.image_shape == (4, 3) and data.X_train.shape == (5, 12) and data.X_train.dtype == np.uint8
    np.testing.assert_array_equal(data.X_train, X.reshape(5, 12))
    np.testing.assert_array_equal(data.y_train, np.arange(5))
    assert data.split_sizes == (5, 0, 0) and data.X_test.shape == (0, 12)
    path = tmp_path / "mine.npz"
    path.write_bytes(_npz_bytes(X=X.reshape(5, 12).astype(float)))
    data = load_binary_images(path, image_shape=(3, 4))
    assert data.image_shape == (3, 4) and data.name == "mine.npz" and data.y_train is None
    assert load_binary_images(_npz_bytes(X=np.eye(9, 16))).image_shape == (4, 4)  # square default
    assert load_binary_images(_npz_bytes(X=np.eye(3, 10))).image_shape is None


def test_csv_upload_with_and_without_header(tmp_path):
    expected = np.array([[0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 1]], dtype=np.uint8)
    for text in ("a,b,c,d\n0,1,1,0\n1,1,0,0\n0,0,0,1\n",
                 "0, 1, 1, 0\r\n1,1,0,0\r\n\r\n0,0,0,1\r\n",
                 "0 1 1 0\n1 1 0 0\n0 0 0 1\n",
                 "0.0;1.0;1;0\n1;1;0;0\n0;0;0;1.0\n"):
        data = load_binary_images(text.encode(), name="t")
        np.testing.assert_array_equal(data.X_train, expected)
        assert data.image_shape == (2, 2) and data.name == "t"
    path = tmp_path / "imgs.csv"
    path.write_text("0,1,1,0\n1,1,0,0\n")
    assert load_binary_images(path, image_shape=(1, 4)).image_shape == (1, 4)


@pytest.mark.parametrize(
    "text, match",
    [
        (b"", "empty"),
        (b"a,b\n", "header row but no rows"),
        (b"0,1\n1,0,1\n", "Line 2 of the image file has 3 values; the first row has 2"),
        (b"0,1,1\n1,0,1\n0,2,1\n", r"Line 3, column 2 of the image file holds '2'"),
        (b"x,y\n0,1\n1,-1\n", r"Line 3, column 2 .*'-1'"),
        (b"0,1\n1,0.5\n", r"Line 2, column 2 .*'0.5'"),
        (b"0,1,1\n", "at least 2 images"),
        (b"1\n0\n", "at least 2 pixels"),
        (b"\xff\xfe\x00garbage", "UTF-8"),
    ],
)
def test_bad_csv_gets_clear_errors(text, match):
    with pytest.raises(ValueError, match=match):
        load_binary_images(text)


def test_bad_npz_gets_clear_errors(tmp_path):
    X = np.zeros((3, 4))
    X[2, 1] = 0.5
    with pytest.raises(ValueError, match=r"only 0 and 1: row 2 \(0-based\), pixel column 1 holds 0.5"):
        load_binary_images(_npz_bytes(X=X))
    X[2, 1] = np.nan
    with pytest.raises(ValueError, match="row 2"):
        load_binary_images(_npz_bytes(X=X))
    with pytest.raises(ValueError, match="named 'X' or 'images'"):
        load_binary_images(_npz_bytes(data=np.zeros((3, 4))))
    with pytest.raises(ValueError, match="2-d .* or 3-d"):
        load_binary_images(_npz_bytes(X=np.zeros(5)))
    with pytest.raises(ValueError, match="must be numeric"):
        load_binary_images(_npz_bytes(X=np.array([["0", "1"], ["1", "0"]])))
    with pytest.raises(ValueError, match="'y' must be 1-d integer labels"):
        load_binary_images(_npz_bytes(X=np.zeros((3, 4)), y=np.arange(2)))
    with pytest.raises(ValueError, match="not a readable .npz"):
        load_binary_images(b"PK\x03\x04 truncated")
    path = tmp_path / "x.npy"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match="must be .npz or .csv"):
        load_binary_images(path)
    with pytest.raises(ValueError, match="does not exist"):
        load_binary_images(tmp_path / "missing.npz")


class Boom:
    def __reduce__(self):  # would run on unpickling
        return (print, ("unpickled!",))


def test_pickled_npz_is_refused(capsys, tmp_path):
    obj = np.empty((2, 2), dtype=object)
    obj[:] = Boom()
    with pytest.raises(ValueError, match="pickled object arrays, which are never loaded"):
        load_binary_images(_npz_bytes(X=obj))
    with pytest.raises(ValueError, match="neither an .npz archive nor UTF-8"):
        load_binary_images(pickle.dumps(np.zeros((2, 2))))
    path = tmp_path / "pickle.npz"
    path.write_bytes(pickle.dumps(Boom()))
    with pytest.raises(ValueError, match="pickled data, which is never loaded"):
        load_binary_images(path)
    assert "unpickled!" not in capsys.readouterr().out


def test_image_shape_must_match():
    X = np.zeros((3, 12))
    with pytest.raises(ValueError, match=r"'image_shape' parameter \(5, 5\) has 25 pixels, but the images have 12"):
        load_binary_images(_npz_bytes(X=X), image_shape=(5, 5))
    with pytest.raises(ValueError, match="does not match the images' own shape"):
        load_binary_images(_npz_bytes(X=np.zeros((3, 4, 3))), image_shape=(3, 4))
    with pytest.raises(ValueError, match="pair of ints >= 1"):
        load_binary_images(_npz_bytes(X=X), image_shape=(12,))
    with pytest.raises(ValueError, match="pair of ints >= 1"):
        load_binary_images(_npz_bytes(X=X), image_shape=(2.5, 4.8))


def test_too_large_uploads_are_refused(tmp_path):
    with pytest.raises(ValueError, match="at most 50 MB"):
        load_binary_images(b"0,1\n" * (MAX_UPLOAD_BYTES // 4 + 1))
    path = tmp_path / "big.csv"
    with open(path, "wb") as fh:
        fh.truncate(MAX_UPLOAD_BYTES + 1)  # sparse: no 50 MB written
    with pytest.raises(ValueError, match="at most 50 MB"):
        load_binary_images(path)
    # a small compressed file that would decompress past the limit
    buf = io.BytesIO()
    np.savez_compressed(buf, X=np.zeros((30_000, 1000), dtype=np.float64))
    assert len(buf.getvalue()) < MAX_UPLOAD_BYTES
    with pytest.raises(ValueError, match="uncompressed"):
        load_binary_images(buf.getvalue())


# ----------------------------------------------------------------------- tiling


def test_tiling_a_known_small_W():
    W = np.arange(8.0).reshape(4, 2) - 3.0  # columns [-3,-1,1,3] and [-2,0,2,4]
    nan = np.nan
    np.testing.assert_array_equal(
        tile_images(W), [[-1, -1 / 3, nan, -0.5, 0], [1 / 3, 1, nan, 0.5, 1]])
    np.testing.assert_array_equal(
        tile_images(W, normalize="global"), [[-0.75, -0.25, nan, -0.5, 0], [0.25, 0.75, nan, 0.5, 1]])
    np.testing.assert_array_equal(tile_images(W, normalize=None, pad=0), [[-3, -1, -2, 0], [1, 3, 2, 4]])
    np.testing.assert_array_equal(
        tile_images(W, n_cols=1, normalize=None), [[-3, -1], [1, 3], [nan, nan], [-2, 0], [2, 4]])


def test_tiling_grid_layout_blank_cells_and_given_shape():
    W = np.random.default_rng(0).normal(size=(6, 5))
    grid = tile_images(W, (2, 3), pad=2)
    assert grid.shape == (2 * 2 + 2, 3 * 3 + 2 * 2)  # 5 tiles -> 2 rows x 3 columns
    assert np.isnan(grid[4:, 10:]).all()  # the sixth cell is blank
    assert np.isnan(grid[2:4]).all() and np.isnan(grid[:, 3:5]).all()
    tiles = [grid[r * 4:r * 4 + 2, c * 5:c * 5 + 3] for r in range(2) for c in range(3)][:5]
    for k, tile in enumerate(tiles):
        expected = W[:, k].reshape(2, 3)
        np.testing.assert_allclose(tile, expected / np.abs(expected).max())
        assert np.abs(tile).max() == pytest.approx(1.0)
    zeros = tile_images(np.zeros((4, 3)))
    assert np.nanmax(np.abs(zeros)) == 0.0


def test_tiling_errors():
    with pytest.raises(ValueError, match="n_visible = 6 is not a perfect square. Pass image_shape"):
        tile_images(np.zeros((6, 2)))
    with pytest.raises(ValueError, match=r"'image_shape' parameter of tile_images is \(2, 2\) \(4 pixels\), but W has n_visible = 6"):
        tile_images(np.zeros((6, 2)), (2, 2))
    with pytest.raises(ValueError, match="2-d numeric array"):
        tile_images(np.zeros(4))
    with pytest.raises(ValueError, match="'normalize' parameter"):
        tile_images(np.zeros((4, 2)), normalize="max")
    with pytest.raises(ValueError, match="'n_cols' parameter of tile_images must be an int >= 1. Got 0"):
        tile_images(np.zeros((4, 2)), n_cols=0)
    with pytest.raises(ValueError, match="'pad' parameter"):
        tile_images(np.zeros((4, 2)), pad=-1)


def test_tiling_mnist_samples():
    from boltzlab.engine.images import mnist

    X = mnist().X_test[:10]
    grid = tile_images(X.T, normalize=None)
    assert grid.shape == (3 * 28 + 2, 4 * 28 + 3)
    np.testing.assert_array_equal(grid[:28, :28], X[0].reshape(28, 28))
