"""Panel-free helpers the image labs (TAP, Frank-Wolfe) share: which data sets there are, and
how jobs and trainer factories name them (:data:`DataRef`).  The lab side, the upload widget
and its job, is :mod:`boltzlab.dashboard.labs.image_data`.

A *data reference* is a bundled set's key (a worker process loads the bundled set itself:
nothing big is pickled) or the uploaded :class:`~boltzlab.engine.images.ImageSet` (small,
by the upload limits of :func:`boltzlab.engine.images.read_upload`).
"""

from __future__ import annotations

import functools
import html
from typing import Union

from ...engine.images import ImageSet, fingerprint, load_images

UPLOAD = "upload"
DATASETS = {"MNIST 28×28": "mnist", "8×8 digits": "digits", "Upload": UPLOAD}

#: what jobs and trainer factories get: a bundled set's key, or the uploaded images themselves
DataRef = Union[str, ImageSet]


def images_of(ref: DataRef) -> ImageSet:
    """The image set a :data:`DataRef` stands for (a bundled one is loaded once per process)."""
    return load_images(ref) if isinstance(ref, str) else ref


@functools.lru_cache(maxsize=4)
def _bundled_fingerprint(key: str) -> str:
    return fingerprint(load_images(key))


def fingerprint_of(ref: DataRef) -> str:
    """The SHA-256 of the set's pixels (:func:`boltzlab.engine.images.fingerprint`)."""
    if isinstance(ref, str):
        return _bundled_fingerprint(ref)
    return ref.meta.get("sha256") or fingerprint(ref)


def cache_key(ref: DataRef) -> str:
    """A hashable name of the data for per-process caches: the key, or the upload's hash."""
    return ref if isinstance(ref, str) else f"upload:{fingerprint_of(ref)}"


def describe_images(images: ImageSet, validation: str = "validation") -> str:
    """One line of HTML for a lab's data panel, the bundled sets and uploads alike: the set's
    name, its splits and image shape (and an upload's SHA-256, what a checkpoint records; a
    shape only guessed from a square number of pixels is said to be one).  The name is
    escaped: an upload's is its file name (user text stays text, see
    :mod:`boltzlab.dashboard.views.text`; this module stays Panel-free)."""
    name = html.escape(images.name)
    n, v, t = images.split_sizes
    shape = images.image_shape
    pixels = f"{shape[0]}×{shape[1]}" if shape is not None else f"{images.n_pixels:,}"
    if images.origin == "user upload":
        sha = fingerprint_of(images)
        guess = (" The shape is guessed from the number of pixels: if your images are not square, set "
                 "their <b>Image width</b>." if images.meta.get("square_guess") else "")
        return (f"<b>{name}</b> (your upload, SHA-256 {sha[:12]}…): {n:,} training, {v:,} {validation} and "
                f"{t:,} test images of {pixels} binary pixels (height×width).{guess}")
    return (f"<b>{name}</b>: {n:,} training, {v:,} {validation} and {t:,} test digits of "
            f"{pixels} binary pixels.")
