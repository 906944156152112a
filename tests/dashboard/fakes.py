"""Small fake Trainers with the Record shape of ``boltzlab.engine.fvbm.FVBMTrainer``."""

from __future__ import annotations

import threading
import time

import numpy as np

from boltzlab.engine.stepping import Record


class FakeTrainer:
    """log_pl rises towards 0; optional per-step sleep, failure, divergence and stop rule."""

    def __init__(self, *, delay: float = 0.0, fail_at: int | None = None,
                 diverge_at: int | None = None, max_sweeps: int | None = None,
                 d: int = 3) -> None:
        self.delay, self.fail_at, self.diverge_at = delay, fail_at, diverge_at
        self.max_sweeps = max_sweeps
        self.sweep = 0
        self.d = d
        self.done = False
        self.status = "running"
        self.message = ""
        self.calls = 0
        self.thread_ids: set[int] = set()

    def step(self) -> Record:
        self.calls += 1
        self.thread_ids.add(threading.get_ident())
        if self.delay:
            time.sleep(self.delay)
        if self.fail_at is not None and self.sweep + 1 == self.fail_at:
            raise RuntimeError("kernel exploded")
        self.sweep += 1
        log_pl = -100.0 / self.sweep
        if self.diverge_at is not None and self.sweep >= self.diverge_at:
            log_pl = float("nan")
        if self.max_sweeps is not None and self.sweep >= self.max_sweeps:
            self.done, self.status, self.message = True, "max_sweeps", "stopped at max_sweeps"
        M = np.full((self.d, self.d), float(self.sweep))
        return Record({"sweep": self.sweep, "log_pl": log_pl, "increase": float("nan")},
                      {"M": M, "b": np.zeros(self.d)})

    def state_dict(self):
        return {"sweep": self.sweep}

    def load_state_dict(self, state):
        self.sweep = int(state["sweep"])


class DivergingTrainer(FakeTrainer):
    """Reports divergence through its own status (like FVBMTrainer does)."""

    def step(self) -> Record:
        record = super().step()
        if self.sweep >= (self.diverge_at or 3):
            self.done, self.status, self.message = True, "diverged", "parameters exploded"
        return record


class BatchTrainer(FakeTrainer):
    """Offers ``steps(k)`` like FVBMTrainer: only the last Record carries the arrays."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.batches: list[int] = []

    def steps(self, k: int) -> list[Record]:
        self.batches.append(k)
        out = []
        for _ in range(k):
            out.append(super().step())
            if self.done:
                break
        return out
