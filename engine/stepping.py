"""The Trainer protocol and the Record type shared by every family.

Every algorithm in every lab is a *Trainer*: built from validated arguments and a seed,
it advances by ``step()`` -- one natural unit of work (a BSLM sweep, one majorization
update, ...) -- and returns a :class:`Record`.  A Trainer knows nothing about threads or
plots: the same object runs headless in tests, in ``boltzlab reproduce``, in benchmarks
and inside the dashboard's runner thread.

``state_dict()`` holds plain numpy arrays and scalars only, so a lab's checkpoint carries it
as ``.npz`` and reads it back through :mod:`boltzlab.engine.archive` (nothing a user uploads
is unpickled), and ``load_state_dict`` restores it bit-exactly.
"""

from __future__ import annotations

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


#: What each status means.  A trainer reports ``"running"`` until it stops, then one of the
#: stopping statuses; the dashboard's runner adds its own (``"ready"``, ``"error"``,
#: ``"done"``) for runs that have not stepped yet or that stopped without saying why.
STATUS_MEANINGS: Mapping[str, str] = {
    "starting": "built, being sent to a worker process (the runner's, under boltzlab serve)",
    "ready": "built, not stepped yet (the runner's)",
    "running": "can step further (every trainer's status until it stops)",
    "converged": "its convergence test holds (increase < tol, or |grad| <= tol)",
    "stalled": "no step lowers the objective any more, or no TAP chain converged",
    "max_sweeps": "stopped at the cap on sweeps (FVBM and the MPLE race)",
    "max_iter": "stopped at the cap on iterations (gradient methods, bound majorization, EM)",
    "max_iterations": "stopped at the cap on Frank-Wolfe iterations",
    "max_epochs": "stopped at the cap on epochs (RBM, TAP)",
    "max_hidden": "stopped at the cap on hidden units (Frank-Wolfe)",
    "early_stopped": "stopped by the validation rule (Frank-Wolfe, the train/validation gap grew)",
    "diverged": "the parameters or the objective became non-finite",
    "error": "a step raised; the message holds the exception (the runner's)",
    "done": "finished without naming a reason (the runner's)",
}

#: The closed set of statuses a Trainer or the runner may report.
STATUSES = frozenset(STATUS_MEANINGS)

#: The statuses of a run that can still step.
ACTIVE_STATUSES = frozenset({"starting", "ready", "running"})


@runtime_checkable
class Trainer(Protocol):
    """The protocol every trainer follows (see docs/architecture.md, "The Trainer protocol").

    Besides the members below, a trainer may offer ``steps(k) -> list[Record]``: up to
    ``k`` steps in one call, fewer if it becomes done, one Record per step (only the last
    needs to carry the arrays).  The runner uses it to batch fast steps, so that it comes
    back to Python (and lets the UI thread have the GIL) about every 50 ms, not every step.
    """

    @property
    def done(self) -> bool:
        """True once the trainer's stopping rule holds (or it failed, see ``status``)."""

    @property
    def status(self) -> str:
        """One of :data:`STATUSES`: ``"running"`` until the trainer stops, then why."""

    @property
    def message(self) -> str:
        """A human-readable sentence on the status (``""`` while running)."""

    def step(self) -> Record:
        """Do one natural unit of work and report it."""

    def state_dict(self) -> dict[str, np.ndarray | Scalar]:
        """Everything needed to resume bit-exactly, as numpy arrays and scalars."""

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""


MAX_CHECKPOINT_BYTES = 50 * 1024 * 1024


def as_scalar(value: Any) -> Scalar:
    """A 0-d array or numpy scalar from an npz state as a plain Python scalar."""
    return np.asarray(value).item()
