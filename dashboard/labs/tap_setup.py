"""Panel-free helpers of the TAP lab: data sets, the trainer factory, the ground-truth
wrapper, the per-epoch history the views are drawn from, and the lab's analysis *jobs*.

The jobs (:func:`solution_embedding`, :func:`data_embedding`, :func:`denoise_digit`,
:func:`denoise_curve`) are what takes too long for the UI thread: module-level functions
of plain arrays and values returning plain arrays and values, so :mod:`boltzlab.dashboard.jobs` can
run them in a worker process (they are pickled by reference) or a thread.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import budget
from ..runner import Build
from ...engine import rbm, tap, tap_analysis
from .image_setup import DATASETS, DataRef, cache_key, describe_images, images_of
from ...engine.images import ImageSet, load_images
from ...engine.stepping import Record

__all__ = ["DATASETS", "DataRef", "ImageSet", "describe_images", "load_images"]  # re-exported for the lab
STEPS_PER_EPOCH = 8  # evaluations per epoch in the lab: each costs about one mini-batch (more for ground truth)
MAX_DAMPING = 0.9  # a stalled batch is redone with more damping, up to this
EXACT_LIMIT = 20  # the ground-truth panel needs the smaller layer <= 20 units
AIS_RUNS = 20  # live AIS: 20 runs on the 1,001-beta schedule
DATA_MAP_ROWS = 1000  # training digits in the data Isomap (Fig. 7)
SAMPLE_CHAINS = 16  # persistent Gibbs chains drawn as the model's samples (a few ms a step in the worker)
SAMPLE_SWEEPS = 5  # their block Gibbs sweeps per step


class GroundTruthTrainer:
    """A TAP trainer plus, on every step of a small model, what exact answers allow.

    The :class:`boltzlab.engine.tap.TAPTrainer` Records carry the per-unit TAP and (smaller layer
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
        if name == "trainer" or name.startswith("__"):
            # not set yet (unpickling in a worker process looks up __setstate__ first): no recursion
            raise AttributeError(name)
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


def trainer_factory(data: DataRef, *, n_hidden: int, prior_hid: str = "bernoulli", learning_rate: float = 0.005,
                    weight_decay: float = 0.001, momentum: float = 0.5, batch_size: int = 100, n_chains: int = 100,
                    damping: float = 0.0, seed: int = 0, max_epochs: int = 100,
                    batches_per_step: int | None = None, dtype: str = "float32") -> Build:
    """A factory of ``{"TAP": trainer}`` on ``data`` (a bundled set's key or uploaded images)
    for the runner (the trainer validates the settings).

    Each step trains ``batches_per_step`` mini-batches (default: about STEPS_PER_EPOCH
    steps per epoch) and then evaluates; a batch where no TAP chain converges is redone
    with more damping (up to MAX_DAMPING) rather than stopping the run.  The lab trains in
    float32 (``dtype``; see :class:`boltzlab.engine.tap.TAPTrainer`): its reported log Z and
    likelihoods are evaluated in float64 all the same.  Every Record also carries ``samples``:
    SAMPLE_CHAINS persistent Gibbs chains of the current model, SAMPLE_SWEEPS sweeps a step.
    """
    def build() -> dict:
        X = images_of(data).X_train  # here: on a worker, a bundled set is loaded there, not shipped
        per_step = default_batches_per_step(len(X), batch_size) if batches_per_step is None else batches_per_step
        trainer = tap.TAPTrainer(X, n_hidden, prior_hid=prior_hid, learning_rate=learning_rate,
                                 weight_decay=weight_decay, momentum=momentum, batch_size=batch_size,
                                 n_chains=n_chains, damping=damping, seed=seed, step_unit="batch",
                                 max_epochs=max_epochs, batches_per_step=per_step,
                                 max_damping=max(MAX_DAMPING, damping), dtype=dtype,
                                 n_samples=SAMPLE_CHAINS, sample_sweeps=SAMPLE_SWEEPS)
        return {"TAP": GroundTruthTrainer(trainer, X) if trainer.exact else trainer}

    return Build(("TAP",), build)  # built once, by the runner's thread


def default_batches_per_step(n_rows: int, batch_size: int) -> int:
    """Mini-batches per lab step: about STEPS_PER_EPOCH steps per epoch."""
    per_epoch = -(-n_rows // max(1, min(int(batch_size), n_rows))) if batch_size >= 1 else 1
    return max(1, round(per_epoch / STEPS_PER_EPOCH))


def check_work(data: DataRef, *, n_hidden: int, n_chains: int, batch_size: int, prior_hid: str = "bernoulli") -> None:
    """Refuse (:class:`boltzlab.dashboard.budget.TooMuchWork`) settings whose step would take longer
    than the server allows: the lab's factory trains ``default_batches_per_step``
    mini-batches of K chains per step, then evaluates from min(n, K) rows."""
    n, n_visible = images_of(data).X_train.shape

    def seconds(s) -> float:
        batch = min(s["batch"], n)
        return budget.tap_step(n_visible=n_visible, n_hidden=s["n_hidden"], chains=s["K"], batch=batch,
                               batches=default_batches_per_step(n, batch), eval_rows=min(n, s["K"]),
                               exact=prior_hid == "bernoulli" and min(n_visible, s["n_hidden"]) <= EXACT_LIMIT)

    batches = default_batches_per_step(n, batch_size)
    what = (f"Nh = {n_hidden:,} hidden units × K = {n_chains:,} chains, {batches} mini-batch"
            f"{'es' if batches != 1 else ''} of M = {min(batch_size, n):,} per step")
    budget.require(seconds, [budget.Knob("K", "chains K", n_chains, 1),
                             budget.Knob("n_hidden", "hidden units Nh", n_hidden, 1),
                             budget.Knob("batch", "mini-batch M", batch_size, max(batch_size, n))], what)


def isomap_rows(n: int) -> np.ndarray:
    """The rows of a snapshot's ``n`` solutions an Isomap job takes: all of them, or
    ``budget.LIMITS.isomap_rows`` evenly spaced (a fit's time grows with the square of its
    rows, and every snapshot is mapped)."""
    cap = budget.LIMITS.isomap_rows
    return np.arange(n) if n <= cap else np.linspace(0, n - 1, cap).round().astype(int)


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


# ---------------------------------------------------------------------- analysis jobs
def solution_embedding(solutions: list[np.ndarray], seed: int = 0) -> tuple[list[np.ndarray], int]:
    """Job, Figure 6: one Isomap fitted on the latest epoch's solutions [a_v, a_h] (one
    (n_e, Nv + Nh) array per epoch, oldest first), applied to every epoch.

    Returns ``(coords, fit_epoch)``: one (n_e, 2) array per epoch and the index of the
    epoch the map was fitted on.  Takes seconds on MNIST (about 3 s for 100 solutions).
    """
    fitted = tap_analysis.fit_solution_embedding(list(solutions), seed=seed)
    return [np.asarray(c, dtype=float) for c in fitted.coords], int(fitted.fit_epoch)


_DATA_MAP_LOCK = threading.Lock()
_DATA_MAPS: dict[str, tap_analysis.DataMap] = {}  # by cache_key(data): the two newest data sets
DATA_MAPS_KEPT = 2


def data_map(data: DataRef) -> tap_analysis.DataMap:
    """The Isomap of the first DATA_MAP_ROWS training images of ``data`` (a bundled key or
    uploaded images), fitted once per data set and process (the costly part of Figure 7:
    about a second on MNIST)."""
    key = cache_key(data)
    with _DATA_MAP_LOCK:  # two jobs at once fit it once
        if key not in _DATA_MAPS:
            _DATA_MAPS[key] = tap_analysis.DataMap(images_of(data).X_train[:DATA_MAP_ROWS])
            while len(_DATA_MAPS) > DATA_MAPS_KEPT:
                del _DATA_MAPS[next(iter(_DATA_MAPS))]
        return _DATA_MAPS[key]


def data_embedding(data: DataRef, solutions_vis: np.ndarray) -> dict[str, np.ndarray | None]:
    """Job, Figure 7: the training images of ``data`` and the solutions' visible
    magnetizations ``solutions_vis`` (n, Nv) in one Isomap space.

    Returns ``{"data_coords": (m, 2), "digits": (m,) labels of those rows (None for images
    without labels), "rows": (m,) their rows, "solution_coords": (n, 2)}``.
    """
    both = data_map(data).embed(np.asarray(solutions_vis, dtype=float))
    y = images_of(data).y_train
    return {"data_coords": np.asarray(both.data_coords, dtype=float),
            "digits": None if y is None else np.asarray(y[:DATA_MAP_ROWS][both.data_index]),
            "rows": np.asarray(both.data_index),
            "solution_coords": np.asarray(both.solution_coords, dtype=float)}


def denoise_digit(data: DataRef, index: int, p: float, W: np.ndarray, b_vis: np.ndarray, b_hid: np.ndarray,
                  damping: float) -> dict[str, Any]:
    """Job, §VII.4: held-out image ``index`` of ``data`` through a binary symmetric
    channel with flip probability ``p``, denoised by the TAP machine (W, b_vis, b_hid), the
    optimal pointwise estimator (eq. 46) and the nearest training digit.

    Returns ``{"tiles": (Nv, 5) clean, noisy, TAP, OPE, 1-NN; "digit": its label (None
    without labels)}``.
    """
    images = images_of(data)
    x = images.X_test[index: index + 1]
    y = tap_analysis.binary_symmetric_channel(x, p, seed=index)
    tap_est = tap_analysis.tap_denoiser(W, b_vis, b_hid, damping=damping)(y, p)
    ope = tap_analysis.ope_denoise(y, images.X_train.mean(0), p)
    nn = tap_analysis.nearest_neighbour_denoise(y, images.X_train)
    label = None if images.y_test is None else int(images.y_test[index])
    return {"tiles": np.vstack([x, y, tap_est, ope, nn]).T, "digit": label}


def denoise_curve(data: DataRef, rows: int, ps: list[float], W: np.ndarray, b_vis: np.ndarray, b_hid: np.ndarray,
                  damping: float) -> dict[str, list]:
    """Job, Figure 8: MCC against the flip probability for the first ``rows`` held-out
    images of ``data``: TAP (this model), OPE and 1-NN (see
    :func:`boltzlab.engine.tap_analysis.denoising_curve`, whose dict of lists it returns)."""
    images = images_of(data)
    return tap_analysis.denoising_curve(images.X_test[:rows], images.X_train, list(ps), seed=0,
                                        tap_denoiser=tap_analysis.tap_denoiser(W, b_vis, b_hid, damping=damping))
