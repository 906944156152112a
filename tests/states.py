"""A trainer's state through ``.npz`` and back, as a checkpoint carries it.

``Trainer.state_dict()`` holds plain arrays and scalars only (engine/stepping.py), so it
survives ``numpy.savez`` and a load that refuses pickles; the resume tests go through this.
"""

from __future__ import annotations

import io

import numpy as np


def through_npz(trainer) -> dict[str, np.ndarray]:
    """``trainer.state_dict()`` saved to ``.npz`` in memory and loaded with ``allow_pickle=False``."""
    state = {key: np.asarray(value) for key, value in trainer.state_dict().items()}
    assert not [key for key, value in state.items() if value.dtype == object], "object arrays in a state_dict"
    buffer = io.BytesIO()
    np.savez(buffer, **state)
    buffer.seek(0)
    with np.load(buffer, allow_pickle=False) as archive:
        return {key: archive[key] for key in archive.files}
