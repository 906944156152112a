"""Sweeps (issue 47, "Run for several values"): one run per value of one numeric setting,
side by side in one runner, stepping together as a race's runs do.

A lab makes each value's trainers with its own ``trainer_factory()`` (the setting set to that
value), and :func:`combined` joins them into one factory whose runs are named
``"setting=value"`` (``"setting=value · run"`` for a lab that races several runs).  Each run is
built exactly as a lab with that value alone would build it (same seeds), so its Records are
that run's Records.  Plain data: a :class:`runner.Build`'s builder must travel to a Dask worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from .runner import Build

MIN_VALUES, MAX_VALUES = 2, 4


def run_name(setting: str, text: str, run: str, runs: int) -> str:
    """The sweep run of ``run`` (one of ``runs`` runs a value makes) at ``setting = text``."""
    head = f"{setting}={text}"
    return head if runs == 1 else f"{head} · {run}"


@dataclass(frozen=True)
class SweepBuild:
    """Build each value's runs with its own factory and name them (see :func:`combined`).
    ``parts``: ``(setting, value text, names or None, factory)`` per value; ``names`` None for a
    plain factory, whose runs are named when it is called."""

    parts: tuple[tuple[str, str, tuple[str, ...] | None, Callable[[], Mapping[str, Any]]], ...]

    def __call__(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for setting, text, _, factory in self.parts:
            trainers = factory()
            for run, trainer in trainers.items():
                out[run_name(setting, text, run, len(trainers))] = trainer
        return out


def combined(setting: str, parts: Sequence[tuple[str, Callable[[], Mapping[str, Any]]]]) -> Any:
    """One factory for the values' factories ``parts`` (``(value text, factory)``): a
    :class:`Build` when every part is one (its names known now), else a plain callable."""
    entries = tuple((setting, text, tuple(factory.names) if isinstance(factory, Build) else None, factory)
                    for text, factory in parts)
    build = SweepBuild(entries)
    if all(names is not None for _, _, names, _ in entries):
        names = tuple(run_name(setting, text, run, len(names)) for _, text, names, _ in entries for run in names)
        return Build(names, build)
    return build
