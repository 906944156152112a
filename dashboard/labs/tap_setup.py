"""Panel-free helpers of the TAP lab: data sets, the trainer factory, the ground-truth
wrapper and the per-epoch history the views are drawn from."""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from engine import rbm, tap, tap_analysis
from engine.images import ImageSet, digits, mnist
from engine.stepping import Record

DATASETS = {"MNIST 28×28": "mnist", "8×8 digits": "digits"}
STEPS_PER_EPOCH = 8  # evaluations per epoch in the lab: each costs about one mini-batch (more for ground truth)
MAX_DAMPING = 0.9  # a stalled batch is redone with more damping, up to this
EXACT_LIMIT = 20  # the ground-truth panel needs the smaller layer <= 20 units
AIS_RUNS = 20  # live AIS: 20 runs on the 1,001-beta schedule


@functools.lru_cache(maxsize=4)
def load_images(key: str) -> ImageSet:
    """The bundled image set ``key`` ('mnist' or 'digits') as float64, shared by sessions."""
    if key == "mnist":
        return mnist(np.float64)
    if key == "digits":
        return digits(np.float64)
    raise ValueError(f"The data set must be one of {sorted(set(DATASETS.values()))}. Got {key!r}.")


class GroundTruthTrainer:
    """A TAP trainer plus, on every step of a small model, what exact answers allow.

    The :class:`engine.tap.TAPTrainer` Records carry the per-unit TAP and (smaller layer
    <= 20) exact log-likelihoods on its evaluation rows.  This wrapper adds, on the same
    rows and in nats per digit (not per unit): the exact value, the TAP estimate, AIS
    (live schedule, 20 runs, base rates from the data) and the pseudo-likelihood (exact
    over all pixels for 8x8 digits, a stochastic 64-pixel estimate scaled to all pixels
    for MNIST) -- the comparison of the paper's Appendix F, with the exact answer beside
    it.  It runs in the runner's worker thread, never in the UI.
    """

    def __init__(self, trainer: Any, X: np.ndarray) -> None:
        self.trainer = trainer
        self.base_vis = rbm.base_rate_biases(X)
        self.units = trainer.n_visible + trainer.n_hidden

    def __getattr__(self, name: str) -> Any:  # done, status, message, n_hidden, state_dict, ...
        return getattr(self.trainer, name)

    def step(self) -> Record:
        return self.steps(1)[0]

    def steps(self, k: int) -> list[Record]:
        records = self.trainer.steps(k)
        return [self._with_truth(r) if "log_likelihood" in r.scalars else r for r in records]

    def _with_truth(self, record: Record) -> Record:
        s, a = record.scalars, record.arrays
        W, b_vis, b_hid = a["W"], a["b_vis"], a["b_hid"]
        X = self.trainer._V_eval
        t0 = time.perf_counter()
        model = rbm.RBM(W, b_vis, b_hid)
        extra = {"ll_exact": s["log_likelihood"] * self.units}
        if math.isfinite(s.get("tap_log_likelihood", math.nan)):
            extra["ll_tap"] = s["tap_log_likelihood"] * self.units
        log_z_ais, spread = rbm.ais_log_partition(W, b_vis, b_hid, n_runs=AIS_RUNS, schedule=rbm.AIS_SCHEDULE_LIVE,
                                                  seed=int(s.get("iteration", 0)), base_vis=self.base_vis)
        extra["ll_ais"] = float(-np.mean(model.free_energy(X)) - log_z_ais)
        extra["ll_ais_spread"] = spread
        if model.n_visible <= 64:
            extra["pseudo_likelihood"] = rbm.pseudo_log_likelihood_exact(model, X)
        else:
            extra["pseudo_likelihood"] = rbm.stochastic_pseudo_log_likelihood(
                model, X, 64, int(s.get("iteration", 0)), scale_to_all=True)
        extra["truth_seconds"] = time.perf_counter() - t0
        return Record({**s, **extra}, a)


def trainer_factory(data_key: str, *, n_hidden: int, prior_hid: str = "bernoulli", learning_rate: float = 0.005,
                    weight_decay: float = 0.001, momentum: float = 0.5, batch_size: int = 100, n_chains: int = 100,
                    damping: float = 0.0, seed: int = 0, max_epochs: int = 100,
                    batches_per_step: int | None = None) -> Callable[[], dict]:
    """A factory of ``{"TAP": trainer}`` for the runner; validates the settings at once.

    Each step trains ``batches_per_step`` mini-batches (default: about STEPS_PER_EPOCH
    steps per epoch) and then evaluates; a batch where no TAP chain converges is redone
    with more damping (up to MAX_DAMPING) rather than stopping the run.
    """
    images = load_images(data_key)
    X = images.X_train
    if batches_per_step is None:
        per_epoch = -(-len(X) // max(1, min(int(batch_size), len(X)))) if batch_size >= 1 else 1
        batches_per_step = max(1, round(per_epoch / STEPS_PER_EPOCH))

    def build() -> dict:
        trainer = tap.TAPTrainer(X, n_hidden, prior_hid=prior_hid, learning_rate=learning_rate,
                                 weight_decay=weight_decay, momentum=momentum, batch_size=batch_size,
                                 n_chains=n_chains, damping=damping, seed=seed, step_unit="batch",
                                 max_epochs=max_epochs, batches_per_step=batches_per_step,
                                 max_damping=max(MAX_DAMPING, damping))
        return {"TAP": GroundTruthTrainer(trainer, X) if trainer.exact else trainer}

    build()
    return build


@dataclass
class EpochSnapshot:
    """The TAP solutions found at one point of training (one per epoch in the views)."""

    epoch: float
    free_energies: np.ndarray
    solutions_vis: np.ndarray
    solutions_hid: np.ndarray
    helmholtz: float


@dataclass
class History:
    """Bounded per-epoch snapshots: the first, then one per whole epoch, at most ``limit``
    (older ones thinned evenly), so an hour of training keeps bounded memory."""

    limit: int = 60
    snapshots: list[EpochSnapshot] = field(default_factory=list)

    def add(self, record: Record) -> bool:
        """Keep the record's solutions if it opens a new epoch; True when it was kept."""
        a = record.arrays
        if "solution_free_energies" not in a:
            return False
        epoch = float(record.scalars["epoch"])
        if self.snapshots and math.floor(epoch) <= math.floor(self.snapshots[-1].epoch) and epoch > 0:
            self.snapshots[-1] = self._snapshot(record, epoch)  # the latest within the epoch
            return True
        self.snapshots.append(self._snapshot(record, epoch))
        if len(self.snapshots) > self.limit:
            del self.snapshots[1:-1:2]
        return True

    @staticmethod
    def _snapshot(record: Record, epoch: float) -> EpochSnapshot:
        a = record.arrays
        return EpochSnapshot(epoch, np.asarray(a["solution_free_energies"], dtype=float),
                             np.asarray(a["solutions_vis"], dtype=float), np.asarray(a["solutions_hid"], dtype=float),
                             float(record.scalars.get("helmholtz_free_energy", np.nan)))


def isomap_of_history(history: History, seed: int = 0):
    """Figure 6: one Isomap fitted on the latest snapshot's [a_v, a_h], applied to all."""
    solutions = [np.hstack([s.solutions_vis, s.solutions_hid]) for s in history.snapshots]
    return tap_analysis.fit_solution_embedding(solutions, seed=seed)
