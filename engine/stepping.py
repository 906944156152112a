"""The Trainer protocol and the Record type shared by every family.

Every algorithm in every lab is a *Trainer*: built from validated arguments and a seed,
it advances by ``step()`` -- one natural unit of work (a BSLM sweep, one majorization
update, ...) -- and returns a :class:`Record`.  A Trainer knows nothing about threads or
plots: the same object runs headless in tests, in ``boltzlab reproduce``, in benchmarks
and inside the dashboard's runner thread.

``state_dict()`` holds plain numpy arrays and scalars only, so a Trainer can be saved to
``.npz`` and loaded with ``allow_pickle=False`` (nothing a user uploads is unpickled) and
restored bit-exactly.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, runtime_checkable

import numpy as np

Scalar = float | int | bool


@dataclass(frozen=True)
class Record:
    """What one ``Trainer.step()`` produced.

    Parameters
    ----------
    scalars
        A flat mapping of named scalars (``iteration``, objective, ``wall_time``, ...).
        Values are plain Python ``float``/``int``/``bool``.
    arrays
        Optional named numpy arrays (parameters, receptive fields, ...).  Consumers must
        treat them as read-only snapshots: trainers hand out copies, never live buffers.
    """

    scalars: Mapping[str, Scalar]
    arrays: Mapping[str, np.ndarray] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        if key in self.scalars:
            return self.scalars[key]
        return self.arrays[key]

    def __contains__(self, key: object) -> bool:
        return key in self.scalars or key in self.arrays

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default


@runtime_checkable
class Trainer(Protocol):
    """The protocol every trainer follows (see DESIGN.md, "The Trainer protocol")."""

    @property
    def done(self) -> bool:
        """True once the trainer's stopping rule holds (or it failed, see ``status``)."""

    def step(self) -> Record:
        """Do one natural unit of work and report it."""

    def state_dict(self) -> dict[str, np.ndarray | Scalar]:
        """Everything needed to resume bit-exactly, as numpy arrays and scalars."""

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""


MAX_CHECKPOINT_BYTES = 50 * 1024 * 1024


def save_state(trainer: Trainer, path: str | os.PathLike | io.BytesIO) -> None:
    """Save ``trainer.state_dict()`` to ``.npz`` (no pickled objects)."""
    state = {k: np.asarray(v) for k, v in trainer.state_dict().items()}
    for key, value in state.items():
        if value.dtype == object:
            raise ValueError(f"state_dict entry {key!r} is not a plain numpy array or scalar")
    np.savez(path, **state)


def load_state(path: str | os.PathLike | io.BytesIO) -> dict[str, np.ndarray]:
    """Load an ``.npz`` checkpoint with ``allow_pickle=False``.

    Raises
    ------
    ValueError
        If the file is too large, not an npz archive, or holds object arrays.
    """
    if not isinstance(path, io.BytesIO):
        size = os.path.getsize(path)
        if size > MAX_CHECKPOINT_BYTES:
            raise ValueError(
                f"The checkpoint file is {size} bytes; at most {MAX_CHECKPOINT_BYTES} are allowed."
            )
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except ValueError as exc:  # object arrays refuse to load without pickle
        raise ValueError(f"The checkpoint holds data that needs unpickling, refused: {exc}") from exc
    except Exception as exc:  # zipfile.BadZipFile, OSError, ...
        raise ValueError(f"The checkpoint is not a readable .npz archive: {exc}") from exc


def as_scalar(value: Any) -> Scalar:
    """A 0-d array or numpy scalar from an npz state as a plain Python scalar."""
    return np.asarray(value).item()
