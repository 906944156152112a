"""The per-session work budget: how long one step of a lab may take on this server.

The widgets bound each setting alone (TAP: Nh <= 1000, K <= 2000; FVBM: d <= 30, n <=
200,000; ...), but not their combinations: a link with TAP Nh = 1000 and K = 2000 asks for
minutes per step.  So every lab estimates the work of its slowest step from its settings,
in multiply-adds (the cost models below, plain Python), converts it to seconds with rates
measured on one core of this machine (:data:`RATES`), and refuses, through its bad-setting
path (:meth:`boltzlab.dashboard.labs.base.Lab.check_work`), a run whose step would take longer than
:data:`LIMITS` allow, saying what is too big and what would fit.  The analyses a lab runs
beside its steps are capped by size (the TAP Isomaps: :attr:`Limits.isomap_rows`).

The limits are the operator's: ``boltzlab serve --max-step-seconds S --max-isomap-rows N``
(:func:`set_limits`).  They are per process, like ``--max-training``.  The step limit holds in
a served session and wherever :func:`set_limits` was called (``boltzlab serve`` calls it);
a lab in a notebook or a script has none unless it asks (:func:`in_force`, issue 46): there
the machine is the user's own.

The estimates are of the *settings*: work that depends on the data or on the state of
training (e.g. how many sweeps Algorithm 1 needs before a TAP chain converges) enters at a
nominal value measured on the default runs; a run far from that can be slower or faster.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, Sequence

DEFAULT_STEP_SECONDS = 2.0
DEFAULT_ISOMAP_ROWS = 500


@dataclass
class Limits:
    """What one session may ask of this server process."""

    step_seconds: float = DEFAULT_STEP_SECONDS  # the slowest step of a run, on one core
    isomap_rows: int = DEFAULT_ISOMAP_ROWS  # TAP solutions per snapshot in an Isomap job
    enforced: bool = False  # set_limits was called: the step limit holds outside served sessions too


#: The limits in force (one place: ``boltzlab serve`` sets them, the labs read them).
LIMITS = Limits()


def set_limits(step_seconds: float | None = None, isomap_rows: int | None = None) -> None:
    """Set the limits in force, and hold them in this process's labs outside served sessions
    too (a notebook's: :func:`in_force`); ``None`` leaves one as it is."""
    if step_seconds is not None:
        if isinstance(step_seconds, bool) or not isinstance(step_seconds, (int, float)) \
                or not math.isfinite(step_seconds) or step_seconds <= 0:
            raise ValueError(f"The step-seconds limit must be a finite number > 0. Got {step_seconds!r}.")
        LIMITS.step_seconds = float(step_seconds)
    if isomap_rows is not None:
        if isinstance(isomap_rows, bool) or not isinstance(isomap_rows, int) or isomap_rows < 2:
            raise ValueError(f"The Isomap row cap must be an int >= 2. Got {isomap_rows!r}.")
        LIMITS.isomap_rows = isomap_rows
    LIMITS.enforced = True


def in_force() -> bool:
    """Whether the step limit holds here: in a served session (a page of a server, whoever
    serves it) or after :func:`set_limits`; not in a notebook's or a script's lab."""
    if LIMITS.enforced:
        return True
    try:
        from panel.io.state import state
    except ImportError:  # pragma: no cover - Panel is a dependency
        return False
    doc = state.curdoc
    return doc is not None and doc.session_context is not None


@contextlib.contextmanager
def shared(runs: int) -> Iterator[None]:
    """Inside: each of ``runs`` runs that step together (a sweep) gets a ``runs``-th of a
    step's seconds, so that their steps together fit the limit of one.  On the server's event
    loop only (the limit is the process's)."""
    before = LIMITS.step_seconds
    LIMITS.step_seconds = before / max(1, runs)
    try:
        yield
    finally:
        LIMITS.step_seconds = before


class TooMuchWork(ValueError):
    """Settings whose step would take longer than :data:`LIMITS` allow (a bad setting)."""


# ---------------------------------------------------------------------- calibration
#: Multiply-adds per second, one core of this machine, per kind of work (the cost models
#: below count multiply-adds; their slowest step divided by these rates is its seconds).
#: Calibrated with ``python -m boltzlab.dashboard.calibration`` (:func:`boltzlab.dashboard.calibration.calibrate`: CPU seconds of a step,
#: median of 3 after one, one BLAS thread; 2 shared cores, 2026-11-24), measured / estimated:
#:   TAP MNIST Nh=100 K=100 M=100 0.054 / 0.068 s; Nh=300 K=300 0.33 / 0.57; Nh=100 K=1000
#:     M=500 0.26 / 0.25; Nh=18 K=20 M=500 (exact answer) 1.96 / 2.38; digits Nh=16 K=100
#:     M=20 (exact) 0.065 / 0.065; Nh=200 K=500 0.086 / 0.090 (all at the 3 sweeps measured)
#:   FVBM, uniform rows (~n distinct), d=30 n=60,000: BSLM 0.038 / 0.036, bound 0.074 / 0.10,
#:     SQUAREM 0.17 / 0.20, L-BFGS 0.022 / 0.036; d=20 and d=30 at n=20,000: 0.56-1.13x
#:   Frank-Wolfe, last step: MNIST T=30 S=500 auto (AIS) 0.22 / 0.26, S=2000 none 0.19 / 0.24;
#:     digits T=20 exact 0.64 / 0.75, T=150 S=2000 auto 0.16 / 0.17, T=40 0.038 / 0.027
#:   CD fork, one trainer's epoch: MNIST Nh=100 0.79 / 0.81, Nh=18 (exact) 2.06 / 2.15;
#:     digits Nh=30 0.057 / 0.051, Nh=400 0.65 / 0.68
RATES = {
    "tap": 9e9,  # BLAS products of Algorithm 1 (K x Nv)(Nv x Nh)
    "tap_truth": 1.8e9,  # the ground truth of small TAP models: AIS, pseudo-likelihood
    "enumerate": 1.8e9,  # an RBM's exact log Z over the 2^m states of its smaller layer
    "fvbm_sweep": 1.5e9,  # BSLM / gradient-ascent coordinate sweeps, L-BFGS's evaluations (numba loops)
    "fvbm_bound": 2.5e10,  # the bound's curvature and Cholesky (BLAS)
    "frankwolfe": 5e9,  # Gibbs sampling, AIS and the inner problem of a Frank-Wolfe step
    "cd": 1.2e10,  # CD-10 epochs of the Frank-Wolfe lab's fork (MNIST), and their AIS
    "cd_small": 1.3e9,  # ... on the 8x8 digits
}

#: Nominal sweeps of Algorithm 1 per TAP chain (the paper's tol = 1e-8): a fresh model needs
#: 3, the default MNIST run 4-75 over its first 90 s (mostly 20-50), the preset with momentum
#: 0.9 60-460 after a minute (measured: its steps then take 1-4 s).  What training does to
#: the sweeps is not a setting: the budget bounds what the settings ask at the nominal count.
TAP_SWEEPS = 30
#: Nominal objective evaluations of a Frank-Wolfe inner problem (L-BFGS; measured 8-45).
FW_INNER_EVALUATIONS = 40
AIS_BETAS = 1001  # engine.rbm.AIS_SCHEDULE_LIVE
AIS_RUNS = 20  # the labs' live AIS
EXACT_UNITS = 20  # engine.rbm.MAX_EXACT_UNITS: the smaller layer is enumerated


# ---------------------------------------------------------------------- cost models
def _enumeration(n_visible: int, n_hidden: int) -> float:
    """Seconds of an RBM's exact log Z: the 2^m states of the smaller layer (m units), each
    with the fields of the other layer."""
    small, large = sorted((n_visible, n_hidden))
    return 2**small * small * large / RATES["enumerate"] if small <= EXACT_UNITS else math.inf


def tap_step(*, n_visible: int, n_hidden: int, chains: int, batch: int, batches: int, eval_rows: int,
             exact: bool, sweeps: float | None = None) -> float:
    """Seconds of one TAP lab step (:class:`boltzlab.engine.tap.TAPTrainer`, ``batches`` mini-batches
    then an evaluation).  Per mini-batch: Algorithm 1 on K chains (4 products of Nv x Nh
    per sweep, TAP_SWEEPS sweeps), the solutions' free energies and gradient terms (2 K
    Nv Nh) and the data term of the gradient (2 M Nv Nh).  The evaluation runs Algorithm 1
    from ``eval_rows`` rows.  With the exact answer (the smaller layer <= 20 units): log Z by
    enumeration, AIS (20 runs, 1,001 betas) and the pseudo-likelihood.  ``sweeps``: the
    sweeps per chain (default the nominal TAP_SWEEPS; calibration passes the measured ones)."""
    sweeps = TAP_SWEEPS if sweeps is None else sweeps
    unit = n_visible * n_hidden
    per_batch = (4 * sweeps * chains + 2 * chains + 2 * batch) * unit
    seconds = (batches * per_batch + (4 * sweeps + 2) * eval_rows * unit) / RATES["tap"]
    if exact:
        truth = 2 * AIS_RUNS * AIS_BETAS * unit + eval_rows * min(n_visible, 64) * unit
        seconds += _enumeration(n_visible, n_hidden) + truth / RATES["tap_truth"]
    return seconds


def fvbm_step(*, rows: int, d: int, sweeps: int = 0, bounds: int = 0, squarems: int = 0, lbfgs: int = 0,
              exact: bool = False) -> float:
    """Seconds of one FVBM lab step: every trainer of the run steps once (``sweeps``
    BSLM / gradient-ascent trainers, ``bounds`` quadratic-bound MMs, ``squarems`` of them
    with SQUAREM, ``lbfgs`` L-BFGS) over ``rows`` distinct data rows.

    A coordinate sweep updates d + d(d-1)/2 parameters at O(rows) each: ~rows d^2.  A
    bound iteration forms the curvature (d blocks of d x d per row: rows d^3), solves it
    (q^3 / 3, q = d + d(d-1)/2) and evaluates eq. 2.1 and its gradient (rows d^2);
    SQUAREM does two per step; an L-BFGS iteration evaluates eq. 2.1 and its gradient
    (about a sweep's work: measured 0.6-1x).
    ``exact``: each trainer's first step also enumerates 2^d states (d <= 20)."""
    q = d + d * (d - 1) // 2
    loops = rows * d * d * (sweeps + bounds + 2 * squarems + lbfgs)
    blas = (rows * d**3 + q**3 / 3) * (bounds + 2 * squarems)
    trainers = sweeps + bounds + squarems + lbfgs
    if exact:
        loops += trainers * 2**d * d
    return loops / RATES["fvbm_sweep"] + blas / RATES["fvbm_bound"]


def eq10_updates(bias_lr: float, bias_steps: int) -> float:
    """The eq.-10 updates an insertion typically takes before its loop's test passes: about
    7 / eta (measured on the digits, S = 2000, lambda = 0.05, 20 units: mean 125 / 36 / 16 / 9
    / 6 at eta = 0.05 / 0.2 / 0.5 / 1 / 2), plus the final test, at most the cap."""
    return min(float(bias_steps), 7.0 / max(bias_lr, 1e-9)) + 1.0


def frankwolfe_step(*, n_visible: int, rows: int, samples: int, max_hidden: int, evaluate: str,
                    gibbs_steps: int = 1, bias_lr: float = 0.5, bias_steps: int = 200) -> float:
    """Seconds of the slowest Frank-Wolfe step (:class:`boltzlab.engine.frankwolfe.FrankWolfeTrainer`):
    the last one, with T = ``max_hidden`` units, which is always evaluated.  Gibbs sampling
    of the S chains before the inner problem and in each of the eq.-10 updates
    (:func:`eq10_updates`; 2 S Nv T each), the units' expectations (S Nv T), the inner problem (eq. 9: L-BFGS,
    FW_INNER_EVALUATIONS passes over the S samples and the ``rows`` data rows) and the
    evaluation: exact log Z (2^m max(Nv, T), m = min(Nv, T) <= 20) or AIS (20 runs of
    1,001 betas, 2 Nv T each), as ``evaluate`` asks ("auto": exact while 2^m max <= 2^22)."""
    T = max_hidden
    unit = n_visible * T
    work = (2 * gibbs_steps * (1 + eq10_updates(bias_lr, bias_steps)) + 1) * samples * unit
    work += FW_INNER_EVALUATIONS * (samples + rows) * n_visible
    small, large = sorted((n_visible, T))
    cheap = small <= EXACT_UNITS and 2**small * large <= 2**22  # engine.frankwolfe.AUTO_EXACT_BUDGET
    if evaluate == "exact" or (evaluate == "auto" and cheap):
        return work / RATES["frankwolfe"] + _enumeration(n_visible, T)
    if evaluate != "none":
        work += 2 * AIS_RUNS * AIS_BETAS * unit
    return work / RATES["frankwolfe"]


def cd_epoch(*, n_visible: int, n_hidden: int, rows: int, k: int = 10, trainers: int = 2) -> float:
    """Seconds of one step of the Frank-Wolfe lab's CD fork: each of ``trainers`` runs one
    epoch of CD-k over ``rows`` rows (k + 1 Gibbs sweeps and the gradient: ~2 (k + 2)
    Nv Nh per row), then its log-likelihood (exact when the smaller layer has <= 20 units,
    else AIS)."""
    unit = n_visible * n_hidden
    # measured: the 8x8 digits' CD epochs run at ~1/9 of MNIST's multiply-add rate (small products)
    epoch = 2 * (k + 2) * rows * unit / (RATES["cd"] if n_visible >= 256 else RATES["cd_small"])
    if min(n_visible, n_hidden) <= EXACT_UNITS:  # dashboard.labs.frankwolfe_setup.cd_factory's choice
        return trainers * (epoch + _enumeration(n_visible, n_hidden))
    return trainers * (epoch + 2 * AIS_RUNS * AIS_BETAS * unit / RATES["cd"])


#: The Bound lab's race problems: (parameters, training pairs, CPU seconds of one step of
#: the race: its five methods once each, as measured by :func:`calibrate`).  The lab has no
#: size setting (a choice among these fixed problems), so the measured step is the estimate.
BOUND_PROBLEMS = {"wine": (42, 178, 0.001), "breast_cancer": (62, 569, 0.002), "digits": (650, 1797, 0.037),
                  "chain": (48, 100, 0.015), "fvbm": (55, 500, 0.002)}


def bound_step(problem: str) -> float:
    """Seconds of one step of the Bound lab's race on ``problem`` (measured)."""
    return BOUND_PROBLEMS[problem][2]


# ---------------------------------------------------------------------- the check
@dataclass(frozen=True)
class Knob:
    """A setting the refusal may suggest moving: ``key`` in the cost function's settings,
    ``label`` as said to the user, its current ``value`` and ``cheap``, the end of its
    range where the step costs least (below ``value``: "lower", above: "raise").  ``advice``,
    if given, says the fix instead, with ``{value}`` the value that fits."""

    key: str
    label: str
    value: int
    cheap: int
    advice: str = ""


def _seconds_text(seconds: float) -> str:
    if seconds >= 10:
        return f"{seconds:,.0f}"
    return f"{seconds:.1f}" if seconds >= 0.1 else f"{seconds:.2g}"


def _fitting(cost: Callable[[Mapping[str, int]], float], settings: Mapping[str, int], knob: Knob,
             limit: float) -> int | None:
    """The value of ``knob`` nearest its current one at which the step fits, or None if not
    even its cheap end fits.  The cost is about monotone in each knob: bisection, then a
    short walk over what it may have jumped (e.g. the TAP lab's exact answer below 21
    hidden units adds a cost of its own)."""
    def fits(value: int) -> bool:
        return cost({**settings, knob.key: value}) <= limit

    good, bad = knob.cheap, knob.value
    if good == bad or not fits(good):
        return None
    while abs(good - bad) > 1:  # bisection between a value that fits and one that does not
        mid = (good + bad) // 2
        good, bad = (mid, bad) if fits(mid) else (good, mid)
    toward = 1 if knob.value > good else -1
    for _ in range(64):
        if good + toward == knob.value or not fits(good + toward):
            break
        good += toward
    return good


def refusal(cost: Callable[[Mapping[str, int]], float], knobs: Sequence[Knob], what: str,
            extra: Sequence[str] = ()) -> str | None:
    """The sentence refusing the settings (``cost`` of ``{knob.key: knob.value}`` in seconds,
    described as ``what``), or None when they fit the limit.  It names the estimate, the
    limit and, for each knob that alone can make the step fit, the value that does; ``extra``
    adds suggestions of the lab's own."""
    if not in_force():
        return None
    limit = LIMITS.step_seconds
    settings = {k.key: k.value for k in knobs}
    seconds = cost(settings)
    if seconds <= limit:
        return None
    fixes = []
    for knob in knobs:
        value = _fitting(cost, settings, knob, limit)
        if value is not None and knob.advice:
            fixes.append(knob.advice.format(value=value))
        elif value is not None:
            verb, sign = ("lower", "≤") if value < knob.value else ("raise", "≥")
            fixes.append(f"{verb} the {knob.label} to {sign} {value:,}")
    fixes += list(extra)
    if not fixes:
        fixes = ["choose smaller settings"]
    advice = fixes[0] if len(fixes) == 1 else ", ".join(fixes[:-1]) + " or " + fixes[-1]
    return (f"This asks for ~{_seconds_text(seconds)} s per step ({what}); at most {limit:g} s are allowed "
            f"on this server: {advice}.")


def require(cost: Callable[[Mapping[str, int]], float], knobs: Sequence[Knob], what: str,
            extra: Sequence[str] = ()) -> None:
    """Raise :class:`TooMuchWork` with :func:`refusal`'s sentence unless the settings fit."""
    text = refusal(cost, knobs, what, extra)
    if text is not None:
        raise TooMuchWork(text)
