"""Panel-free helpers of the FVBM lab: data sets with their MPLE, and trainer factories."""

from __future__ import annotations

import functools
import html
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import budget
from ..runner import Build
from ...engine import data as fvbm_data
from ...engine import fvbm, fvbm_bound

EXACT_LIMIT = 20
DEFAULT_DATA = {"d": 10, "n": 16000, "seed": 1}


NO_MPLE = ("**No MPLE for these data.** The log-pseudo-likelihood has no maximum: it keeps "
           "creeping up while some parameters grow without bound. Training still runs, "
           "but there is no target line to reach.")


def exact_every(d: int) -> int:
    """How often (in sweeps) the exact log-likelihood is computed live; 0 = never.

    One evaluation enumerates 2^d states (and costs milliseconds even for small d), so
    it is not done on every sweep: the curve gets a point every few sweeps.
    """
    if d <= 8:
        return 1
    if d <= 14:
        return 5
    if d <= EXACT_LIMIT:
        return 25
    return 0


@dataclass
class DataSet:
    """An ``FVBMData`` plus what the lab computes once per data set."""

    data: Any  # engine.data.FVBMData
    mple_logpl: float | None
    mple_loglik: float | None
    warning: str = ""  # one short paragraph for the data panel
    warning_detail: str = ""  # the full explanation (shown folded)

    @property
    def columns(self) -> list[str]:
        return list(self.data.columns)

    @property
    def exact_every(self) -> int:
        return exact_every(self.data.X.shape[1])

    @functools.cached_property
    def distinct_rows(self) -> int:
        """The distinct rows of X: the ones a sweep visits (engine.fvbm.compress_rows)."""
        return int(len(np.unique(self.data.X, axis=0)))

    def describe(self) -> str:
        """The data panel's HTML: the name (an upload's file name) and notes escaped (user
        text stays text, see :mod:`boltzlab.dashboard.views.text`; this module stays Panel-free)."""
        n, d = self.data.X.shape
        text = f"<b>{html.escape(self.data.name)}</b>: n = {n:,} rows, d = {d} variables"
        if getattr(self.data, "dropped_rows", 0):
            text += f" ({self.data.dropped_rows} rows with missing values dropped)"
        if self.mple_logpl is not None:
            text += f".<br>MPLE log-PL (the maximum of eq. 2.1, drawn as the target): {self.mple_logpl:,.4f}"
        elif self.warning:
            text += ".<br>No MPLE exists, so there is no target line"
        for note in getattr(self.data, "notes", []) or []:
            text += f".<br>{html.escape(note)}"
        if d > EXACT_LIMIT:
            text += f".<br>Exact likelihood not shown (d > {EXACT_LIMIT})."
        return text


def load_data(source: str, *, d: int = 10, n: int = 16000, seed: int = 1,
              content: bytes | None = None, filename: str = "") -> DataSet:
    """Build the chosen data set and its MPLE target; raises ``ValueError`` on bad input."""
    if source in ("simulated", "senate"):
        key = (int(d), int(n), int(seed)) if source == "simulated" else ()
        return _bundled(source, key)
    if source == "upload":
        if content is None:
            raise ValueError("Choose a CSV file to upload.")
        data = fvbm_data.load_fvbm_csv(content, name=filename or "upload")
        return with_target(data)
    raise ValueError(f"The 'source' parameter must be one of 'simulated', 'senate', "
                     f"'upload'. Got {source!r}.")


def simulated_data(d: int, n: int, seed: int) -> tuple[tuple, DataSet]:
    """A simulated data set and its MPLE, keyed by its settings (a job: see FVBMLab)."""
    data = load_data("simulated", d=d, n=n, seed=seed)
    data.distinct_rows  # counted here, in the job, for the work budget
    return ("simulated", d, n, seed), data


def uploaded_data(content: bytes, filename: str) -> DataSet:
    """An uploaded CSV and its MPLE (a job: a 50 MB file takes seconds)."""
    data = load_data("upload", content=content, filename=filename)
    data.distinct_rows  # counted here, in the job, for the work budget
    return data


@functools.lru_cache(maxsize=16)
def _bundled(source: str, key: tuple) -> DataSet:
    """Simulated / bundled data sets and their MPLE, shared (read-only) by all sessions."""
    if source == "senate":
        return with_target(fvbm_data.senate())
    return with_target(fvbm_data.simulate_fvbm(*key))


def warm_default_data() -> None:
    """Compute the default data set and its MPLE before the first visitor arrives."""
    load_data("simulated", **DEFAULT_DATA)


def with_target(data: Any) -> DataSet:
    """Compute the MPLE once (eq. 2.1 maximiser) and its log-PL / exact log-likelihood."""
    try:
        target = fvbm.mple(data.X)  # checks that the MPLE exists first
    except ValueError as exc:
        return DataSet(data, None, None, warning=NO_MPLE, warning_detail=str(exc))
    logpl = float(fvbm.log_pseudo_likelihood(data.X, target.b, target.M))
    loglik = None
    if data.X.shape[1] <= EXACT_LIMIT:
        loglik = float(fvbm.exact_log_likelihood(data.X, target.b, target.M))
    return DataSet(data, logpl, loglik)


def parse_mus(text: str) -> list[float]:
    """``"0.5, 1.5"`` -> ``[0.5, 1.5]``; raises ``ValueError`` with a readable message."""
    parts = [p for p in text.replace(";", ",").split(",") if p.strip()]
    try:
        mus = [float(p) for p in parts]
    except ValueError:
        raise ValueError(f"The race step sizes must be numbers separated by commas. "
                         f"Got {text!r}.") from None
    if not mus or len(mus) > 6 or any(not (m > 0 and np.isfinite(m)) for m in mus):
        raise ValueError(f"The race step sizes must be 1 to 6 numbers > 0. Got {text!r}.")
    return mus


#: The race's quadratic-bound MM and its fast reference (engine.fvbm_bound).
BOUND_LABEL = fvbm_bound.BOUND_LABEL
LBFGS_LABEL = fvbm_bound.LBFGS_LABEL
#: the bound MM with SQUAREM extrapolation (kept only when it improves: still monotone)
SQUAREM_LABEL = "Bound + SQUAREM"


def monotone_guaranteed(trainer: Any) -> bool:
    """Whether the log-PL of ``trainer`` provably never decreases.

    BSLM (Theorem 1), gradient ascent with μ ≤ 1 (§4) and the bound MM (majorization)
    are monotone; gradient ascent with μ > 1 and L-BFGS are not: their decreases are
    shown, but they are allowed, not failures.
    """
    flag = getattr(trainer, "monotone_guaranteed", None)
    if flag is not None:
        return bool(flag)
    return getattr(trainer, "algorithm", "") == "bslm" or getattr(trainer, "mu", 2.0) <= 1.0


def guaranteed_by_label(label: str) -> bool:
    """:func:`monotone_guaranteed` from a run's name in :func:`trainer_factory` (the views
    read Records and names, never trainers)."""
    if label.startswith("GA μ="):
        return float(label[len("GA μ="):]) <= 1.0
    return label != LBFGS_LABEL


def trainer_factory(dataset: DataSet, *, algorithm: str = "bslm", mu: float = 1.0,
                    tol: float = 1e-5, init: str = "zeros", seed: int = 0,
                    race_mus: list[float] | None = None) -> Build:
    """A factory of ``{label: trainer}`` for the runner (one trainer, or a race).

    The race is BSLM, gradient ascent with each μ of ``race_mus``, the quadratic-bound MM
    (:class:`boltzlab.engine.fvbm_bound.BoundMPLETrainer`) and L-BFGS
    (:class:`boltzlab.engine.fvbm_bound.LBFGSMPLETrainer`), all from the same start and with the
    same stopping rule.
    """
    data = dataset.data
    common = dict(tol=tol, init=init, seed=seed, truth=data.truth,
                  exact_every=dataset.exact_every)
    if race_mus is not None:
        specs = [("BSLM", "bslm", 1.0)] + [(f"GA μ={m:g}", "ga", m) for m in race_mus]
        specs += [(BOUND_LABEL, "bound", None), (SQUAREM_LABEL, "squarem", None), (LBFGS_LABEL, "lbfgs", None)]
    elif algorithm == "ga":
        specs = [(f"GA μ={mu:g}", "ga", mu)]
    else:
        specs = [("BSLM", "bslm", 1.0)]

    def make(alg: str, m: float | None):
        if alg == "bound":
            return fvbm_bound.BoundMPLETrainer(data.X, **common)
        if alg == "squarem":
            return fvbm_bound.BoundMPLETrainer(data.X, accelerate=True, **common)
        if alg == "lbfgs":
            return fvbm_bound.LBFGSMPLETrainer(data.X, **common)
        return fvbm.FVBMTrainer(data.X, algorithm=alg, mu=m, **common)

    def build() -> dict:
        return {label: make(alg, m) for label, alg, m in specs}

    return Build(tuple(label for label, _, _ in specs), build)  # built once, by the runner's thread


def check_work(dataset: DataSet, *, race_mus: list[float] | None, source: str = "simulated") -> None:
    """Refuse (:class:`boltzlab.dashboard.budget.TooMuchWork`) a run whose step (every trainer of
    :func:`trainer_factory` once) would take longer than the server allows on ``dataset``
    (its distinct rows are what a sweep visits; other sizes suggested for simulated data are
    assumed to keep the same fraction of distinct rows, at most 2^d)."""
    n, d = dataset.data.X.shape
    distinct = dataset.distinct_rows

    def counts(racing: bool) -> dict:
        if not racing:
            return {"sweeps": 1}
        return {"sweeps": 1 + len(race_mus), "bounds": 1, "squarems": 1, "lbfgs": 1}

    def seconds(s, racing: bool = race_mus is not None) -> float:
        n_, d_ = s.get("n", n), s.get("d", d)  # the knobs, or the data's own size
        rows = min(n_, 2**d_, max(1, distinct * n_ // n))
        return budget.fvbm_step(rows=rows, d=d_, exact=exact_every(d_) > 0, **counts(racing))

    racing = race_mus is not None
    what = (f"d = {d} variables, n = {n:,} rows ({distinct:,} distinct), "
            + (f"{sum(counts(True).values())} methods racing" if racing else "one run"))
    extra = []
    if racing and seconds({"n": n, "d": d}, racing=False) <= budget.LIMITS.step_seconds:
        extra.append("run a single algorithm instead of the race")
    if source == "simulated":
        knobs = [budget.Knob("n", "rows n", n, 10), budget.Knob("d", "variables d", d, 2)]
    else:  # the data's size is the file's (or the bundled set's)
        knobs = []
        extra.append("use a smaller data set")
    budget.require(seconds, knobs, what, extra)
