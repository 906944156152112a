"""What the image labs (TAP, Frank-Wolfe) share about their data: a bundled set or the user's own.

The ``data`` setting of both labs is one of :data:`DATASETS`: the bundled binary MNIST, the
8×8 digits, or ``"upload"``, the images a user uploads (a FileInput under the choice, or
``lab.use_upload(content, filename)`` from Python).  An upload is read as a job
(:func:`boltzlab.engine.images.read_upload`: the hardened ``.npz`` reader or a CSV, the
upload limits checked before the values are read, [0, 1] values thresholded, split 70 / 10 /
20 like the bundled sets, its SHA-256 computed); the ``image_width`` setting gives
non-square images their shape.  :class:`ImageData` is the part of a lab that owns this; the
lab calls it from its ``prepare``, ``check_work`` and views.

Jobs and trainer factories get a *data reference* (:data:`DataRef`): a bundled set's key
(a worker process loads the bundled set itself, nothing is pickled) or the uploaded
:class:`~boltzlab.engine.images.ImageSet` (small by the upload limits).  A checkpoint records
the SHA-256 of the data its run was trained on (:meth:`ImageData.identity`), and
``LabTools`` refuses to load it onto other data.
"""

from __future__ import annotations

from typing import Any

import panel as pn
import param

from .base import UPLOAD_JOB, NotReady, held
from ..views import StatusBadge
from ...engine import images as engine_images
from .image_setup import (DATASETS, UPLOAD, DataRef, cache_key, describe_images,
                          fingerprint_of, images_of)
from ...engine.images import ImageSet, load_images, read_upload, with_width

__all__ = ["DATASETS", "UPLOAD", "DataRef", "ImageData", "ImageUploads", "cache_key", "describe_images", "fingerprint_of",
           "image_width_setting", "images_of"]

ACCEPT = ".npz,.csv"
UPLOAD_HELP = (
    f"An **.npz** with an array `X` (or `images`) of shape (n, height, width) or (n, pixels) and optional "
    f"integer labels `y`, or a **CSV** with one image per row (a header row is allowed). Values 0/1, or in "
    f"[0, 1] (above {engine_images.UPLOAD_THRESHOLD} becomes 1). {engine_images.MIN_UPLOAD_IMAGES} to "
    f"{engine_images.MAX_UPLOAD_IMAGES:,} images of at most {engine_images.MAX_UPLOAD_PIXELS:,} pixels, "
    f"at most {engine_images.MAX_UPLOAD_BYTES // 2**20} MB; split 70 / 10 / 20 % into training, validation "
    "and test. Non-square images from a CSV or a 2-d array need their **image width**.")
NEED_FILE = "Choose an .npz or CSV file of images to upload; the current data stay until then."
NEED_FILE_LINK = ("These settings train on uploaded images, which a link or checkpoint does not contain: "
                  "upload the file first (“Upload”), then load again.")

def image_width_setting() -> param.Integer:
    """An image lab's ``image_width`` setting (used by uploads only)."""
    return param.Integer(0, bounds=(0, engine_images.MAX_UPLOAD_PIXELS), label="Image width (pixels)",
                         doc="The width of your images in pixels; 0: the file's own (a 3-d .npz array) or a square.")


class ImageData:
    """The data of one image lab: the chosen bundled set or the user's upload.

    Owns the upload widgets (:meth:`widgets`), reads an upload as a job and rebuilds the
    lab's run when it is ready (the current run stays meanwhile, and on a refusal), and
    gives the lab the images its settings choose (:meth:`chosen`, raising
    :class:`~boltzlab.dashboard.labs.base.NotReady` before a file is there)."""

    def __init__(self, lab: Any) -> None:
        self.lab = lab
        self.upload = pn.widgets.FileInput(accept=ACCEPT, multiple=False, visible=False, width=290,
                                           css_classes=[f"{lab.key}-upload"])
        self.help = pn.pane.Markdown(UPLOAD_HELP, visible=False, styles={"font-size": "0.85em", "color": "#555"})
        self.message = StatusBadge("", "info", visible=False, name=f"{lab.key}-upload-message")
        self.uploaded: ImageSet | None = None  # the newest upload that was read (and its file name)
        self.filename: str | None = None
        self._saying_read = False  # the message says what was read (not a refusal): prepare keeps it current
        self.run_images: ImageSet | None = None  # the data of the lab's current run (set_run)
        self.run_ref: DataRef | None = None
        self.upload.param.watch(self._on_upload, "value")

    def widgets(self) -> list:
        return [self.upload, self.help, self.message.pane]

    def update_visibility(self) -> None:
        uploading = self.lab.data == UPLOAD
        self.upload.visible = self.help.visible = uploading
        width = self.lab.widgets.get("image_width")
        if width is not None:
            width.visible = uploading
        if not uploading:
            self.message.pane.visible = False

    # ------------------------------------------------------------------ what the settings choose
    def chosen(self) -> ImageSet:
        """The images the lab's ``data`` and ``image_width`` settings choose; ``NotReady``
        before a file is uploaded and while non-square images (a CSV or 2-d array) wait for
        their width, ``ValueError`` for a width that does not fit."""
        key = self.lab.data
        if key != UPLOAD:
            return load_images(key)
        if self.uploaded is None:
            raise NotReady(NEED_FILE, link=NEED_FILE_LINK)
        width = self.lab.image_width
        try:
            images = with_width(self.uploaded, width)
        except ValueError as exc:
            if not width:  # not a bad setting: the width is still to be given
                self._say_read(need_width=True)
                raise NotReady(str(exc)) from None
            raise
        self._say_read(need_width=False)
        return images

    def for_budget(self) -> ImageSet | None:
        """The images the work budget is estimated on (None: no upload yet; prepare says so)."""
        return load_images(self.lab.data) if self.lab.data != UPLOAD else self.uploaded

    def ref(self, images: ImageSet) -> DataRef:
        """What jobs and trainer factories get for ``images`` (see :data:`DataRef`)."""
        return images if images.origin == "user upload" else self.lab.data

    def set_run(self, images: ImageSet) -> None:
        """The lab's new run trains on ``images`` (what :meth:`identity` reports)."""
        self.run_images, self.run_ref = images, self.ref(images)

    def identity(self) -> tuple[str, str] | None:
        """(SHA-256, name) of the current run's data: what a checkpoint records."""
        if self.run_images is None:
            return None
        return fingerprint_of(self.run_ref), self.run_images.name

    # ------------------------------------------------------------------ uploading
    def _on_upload(self, event: Any) -> None:
        if event.new is not None:  # an empty file too: the reader says it is empty
            self.use(event.new, self.upload.filename or "upload.npz")

    def use(self, content: bytes, filename: str) -> None:
        """Read ``content`` (the bytes of ``filename``, an .npz or CSV) as a job; when ready
        it is the lab's "Upload" data, else the reason is said and the data stay."""
        self.filename = str(filename)
        limit = engine_images.MAX_UPLOAD_BYTES
        if len(content) > limit:  # before anything is copied or parsed
            self._failed(ValueError(f"The file is {len(content) / 2**20:.1f} MB; at most {limit // 2**20} MB "
                                    "are allowed."))
            return
        self._saying_read = False
        self.message.set("info", f"Reading {self.filename}…")
        self.message.pane.visible = True
        self.lab.jobs.submit(UPLOAD_JOB, read_upload, bytes(content), self.filename, then=self._ready,
                             error=self._failed)

    @held
    def _ready(self, images: ImageSet) -> None:
        self.uploaded = images
        self._saying_read = True
        if self.lab.data == UPLOAD:
            self._say_read(need_width=images.image_shape is None and not self.lab.image_width)
            self.lab.rebuild({"data"})
        else:
            self.message.set("ok", f"Read {images.name}: choose “Upload” to train on it.")
            self.message.pane.visible = True

    def _say_read(self, need_width: bool) -> None:
        """Say what was read, and, while non-square images wait for their width, that it is
        needed (beside the width's widget; the lab's settings message says it too); not over a
        refusal of a newer file."""
        if not self._saying_read:
            return
        images = self.uploaded
        read = f"Read {images.name}: {sum(images.split_sizes):,} images of {images.n_pixels:,} pixels"
        self.message.set("ok", read + (", which is no square: set their **Image width**." if need_width else "."))
        self.message.pane.visible = True

    def _failed(self, exc: BaseException) -> None:
        self._saying_read = False
        now = self.run_images.name if self.run_images is not None else "nothing"
        text = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
        self.message.set("error", f"**Could not use {self.filename}:** {text}  \nStill training on: {now}.")
        self.message.pane.visible = True

    def script_lines(self) -> list[str]:
        """Lines of ``Lab.python_script`` that upload the file again, from beside the script."""
        if self.lab.data != UPLOAD or self.filename is None:
            return []
        return [f"lab.use_upload(Path({self.filename!r}).read_bytes(), {self.filename!r})"
                "  # the file you uploaded, beside this script",
                "lab.jobs.wait()  # reading it"]


class ImageUploads:
    """What the image labs (TAP, Frank-Wolfe) offer about a user's images, through their
    :class:`ImageData` (``self.uploads``): a mixin of the lab."""

    uploads: ImageData

    def use_upload(self, content: bytes, filename: str) -> None:
        """Train on your own images: read ``content`` (the bytes of an ``.npz`` or CSV file
        named ``filename``) as a job; once read it is the data of "Upload"
        (``data="upload"``; non-square images from a CSV need ``image_width``).  A bad file is
        refused with its reason and the current data stay.  From Python: ``lab.use_upload(
        Path("mine.npz").read_bytes(), "mine.npz"); lab.jobs.wait(); lab.apply_settings(
        {"data": "upload"})``."""
        self.uploads.use(content, filename)

    def script_data(self) -> list[str]:
        return self.uploads.script_lines()

    def data_identity(self) -> tuple[str, str] | None:
        return self.uploads.identity()
