"""Pinned runs (issue 47, "Compare runs"): a lab keeps up to :data:`MAX_PINS` earlier runs,
each with the settings it was made with, its Records' scalars and its newest arrays, so that
a new run can be watched against them.

A :class:`Pin` is plain data (a :class:`~boltzlab.dashboard.runner.History` copy and the
settings' values), built in the lab's process from what the runner already holds: pinning
costs no training and no worker round trip.  :class:`Pins` is a lab's ordered set of them
(oldest first; a fifth pin drops the oldest).  Checkpoints carry them
(:func:`boltzlab.dashboard.labtools.write_checkpoint`), the CSV export and
``Lab.records_frame()`` list their rows with a ``pin`` column.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from .runner import History

MAX_PINS = 4  # a fifth pin drops the oldest (and the page says so)
MAX_LABEL = 40  # characters of a pin's label


def history_columns(history: History) -> dict[str, dict[str, np.ndarray]]:
    """Every run's scalars as arrays, ``{run: {name: array}}``, one entry per Record, oldest
    first; a scalar some Records lack is NaN there (``Lab.records``)."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for name, rows in history.rows.items():
        keys = list(dict.fromkeys(k for row in rows for k in row))
        out[name] = {k: (np.asarray([row[k] for row in rows]) if all(k in row for row in rows)
                         else np.asarray([row.get(k, np.nan) for row in rows], dtype=float))
                     for k in keys}
    return out


@dataclass
class Pin:
    """One pinned run (all the runs of a race): ``settings`` (the values it was made with),
    ``history`` (its Records' scalars and newest arrays), ``data``, the ``(sha256, name)``
    of user data it trained on (``Lab.data_identity``; None when the settings say it), and
    ``sweep``, the ``(setting, values)`` of the sweep it was (``Lab.sweeping``; None: none)."""

    label: str
    settings: dict[str, Any]
    history: History = field(default_factory=History)
    data: tuple[str, str] | None = None
    sweep: tuple[str, tuple] | None = None

    @property
    def runs(self) -> list[str]:
        """The pinned runs' names, e.g. ``["BSLM"]`` or a race's five."""
        return list(self.history.rows)

    @property
    def records(self) -> dict[str, dict[str, np.ndarray]]:
        """``{run: {scalar: array}}``, as ``Lab.records``."""
        return history_columns(self.history)

    @property
    def arrays(self) -> dict[str, dict[str, np.ndarray]]:
        """The newest arrays each run reported (weights, receptive fields, ...)."""
        return {name: dict(arrays) for name, arrays in self.history.arrays.items()}

    def __repr__(self) -> str:
        steps = {name: self.history.counts.get(name, len(rows)) for name, rows in self.history.rows.items()}
        return f"Pin({self.label!r}, runs={steps})"


class Pins:
    """A lab's pins by label, oldest first, at most :data:`MAX_PINS`."""

    def __init__(self) -> None:
        self._pins: dict[str, Pin] = {}
        self._made = 0  # pins made so far: the default labels count on ("pin 1", "pin 2", ...)

    def __len__(self) -> int:
        return len(self._pins)

    def __iter__(self):
        return iter(list(self._pins.values()))

    def as_dict(self) -> dict[str, Pin]:
        return dict(self._pins)

    def label(self, label: Any, owner: str) -> str:
        """``label`` checked for a new pin (``None``: the next "pin N"); ``ValueError`` naming it."""
        if label is None:
            n = self._made + 1
            while f"pin {n}" in self._pins:
                n += 1
            return f"pin {n}"
        if not isinstance(label, str) or not label.strip():
            raise ValueError(f"The 'label' parameter of {owner} must be a non-empty str or None. Got {label!r}.")
        label = label.strip()
        if len(label) > MAX_LABEL:
            raise ValueError(f"The 'label' parameter of {owner} must be at most {MAX_LABEL} characters. "
                             f"Got {len(label)}.")
        if label in self._pins:
            raise ValueError(f"The 'label' parameter of {owner} names a pin that exists already: {label!r}. "
                             "Unpin it first or choose another label.")
        return label

    def add(self, pin: Pin) -> Pin | None:
        """Keep ``pin`` (newest); return the pin it dropped to stay at :data:`MAX_PINS`, if any."""
        self._made += 1
        self._pins[pin.label] = pin
        if len(self._pins) > MAX_PINS:
            oldest = next(iter(self._pins))
            return self._pins.pop(oldest)
        return None

    def remove(self, label: Any, owner: str) -> None:
        """Drop the pin ``label`` (``None``: every pin); ``ValueError`` for a label no pin has."""
        if label is None:
            self._pins.clear()
            return
        if label not in self._pins:
            raise ValueError(f"The 'label' parameter of {owner} must be one of {list(self._pins)} or None. "
                             f"Got {label!r}.")
        del self._pins[label]

    def replace(self, pins: list[Pin]) -> None:
        """Hold exactly ``pins`` (a loaded checkpoint's)."""
        self._pins = {pin.label: pin for pin in pins[-MAX_PINS:]}
        self._made = max(self._made, len(self._pins))


def settings_difference(pinned: Mapping[str, Any], live: Mapping[str, Any], labels: Mapping[str, str] | None = None,
                        limit: int = 3) -> str:
    """What differs from the live run's settings, for a pin's legend: ``"n_hidden 64→16"``
    (the pin's value first, the live one after), at most ``limit`` changes and "+k more"."""
    changes = [f"{(labels or {}).get(name, name)} {_short(value)}→{_short(live[name])}"
               for name, value in pinned.items() if name in live and live[name] != value]
    if not changes:
        return "same"
    more = len(changes) - limit
    return ", ".join(changes[:limit]) + (f", +{more} more" if more > 0 else "")


def _short(value: Any) -> str:
    """A setting's value for a legend: numbers in 4 significant digits, booleans as on/off."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return format(value, ".4g")
    return str(value)
