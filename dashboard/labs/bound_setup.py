"""Panel-free helpers of the Bound lab: the small models whose log Z the quadratic bound of
Jebara & Choromanska (2012, Algorithm 1, Theorem 1) is drawn against, and the curves and
slices the tightness views plot.

A model is an enumerable Omega (rows of F, |Omega| x d) with measure h.  The views look at
log Z and the bound on a 2-D plane through a random base point theta_0,

    theta(s, r) = theta_0 + s u + r v        (u, v orthonormal, seeded),

with the expansion point theta~ = theta(s~, r~) and the curves along the line through theta~
in the direction u.  Everything here is exact: log Z by enumeration, the bound by
:func:`boltzlab.engine.bound.compute_bound`.
"""

from __future__ import annotations

import functools
import itertools
import math
import threading
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ...engine import bound
from ..runner import Build

MODELS = {
    "log-linear: 6 outcomes, d = 2": "loglinear",
    "FVBM: 8 spins, |Ω| = 256, d = 36": "fvbm8",
    "FVBM: 12 spins, |Ω| = 4,096, d = 78": "fvbm12",
    "chain CRF: 4 nodes × 3 states, d = 39": "chain",
}
DEFAULT_MODEL = "fvbm8"
LINE_POINTS = 301
SLICE_POINTS = {"loglinear": 61, "fvbm8": 51, "fvbm12": 31, "chain": 51}


@dataclass(frozen=True)
class TightnessModel:
    """An enumerable log-linear model and the plane the views show."""

    key: str
    description: str
    F: np.ndarray  # (|Omega|, d)
    h: np.ndarray  # (|Omega|,)
    theta0: np.ndarray  # base point of the plane
    u: np.ndarray  # direction of the line (unit)
    v: np.ndarray  # second direction of the plane (unit, orthogonal to u)

    @property
    def d(self) -> int:
        return self.F.shape[1]

    def point(self, s: float | np.ndarray, r: float | np.ndarray = 0.0) -> np.ndarray:
        """theta(s, r); arrays of s (and r) give one row per point."""
        s = np.asarray(s, dtype=float)
        r = np.asarray(r, dtype=float)
        return self.theta0 + s[..., None] * self.u + r[..., None] * self.v


def _fvbm_features(d: int) -> np.ndarray:
    """Spins and their pairwise products over Omega = {-1, 1}^d: d + d(d-1)/2 columns."""
    X = np.array(list(itertools.product((-1.0, 1.0), repeat=d)))
    i, j = np.triu_indices(d, 1)
    return np.hstack([X, X[:, i] * X[:, j]])


@lru_cache(maxsize=32)
def make_model(key: str, scale: float = 0.5, seed: int = 0) -> TightnessModel:
    """The model ``key`` (a value of :data:`MODELS`) with base point theta_0 ~ N(0, scale^2)
    and a random orthonormal pair (u, v), all from ``seed``."""
    if key not in MODELS.values():
        raise ValueError(f"Unknown model {key!r}; choose one of {sorted(MODELS.values())}.")
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale >= 0):
        raise ValueError(f"The scale of the base point must be a finite number >= 0. Got {scale!r}.")
    rng = np.random.default_rng([seed, 7])
    if key == "loglinear":
        F = rng.normal(size=(6, 2))
        h = np.ones(6)
        description = "6 outcomes with random 2-d features f(y) ~ N(0, I): the plane is the whole θ space"
    elif key in ("fvbm8", "fvbm12"):
        d_spins = 8 if key == "fvbm8" else 12
        F = _fvbm_features(d_spins)
        h = np.ones(F.shape[0])
        description = (f"a fully visible Boltzmann machine on {d_spins} ±1 spins: f(x) = (x_i, x_i x_j), "
                       f"|Ω| = 2^{d_spins}")
    else:
        chain = bound.chain_features(4, 3)
        F = chain.F
        h = np.ones(F.shape[0])
        description = "a chain of 4 variables with 3 states: node and transition indicators, |Ω| = 81"
    d = F.shape[1]
    theta0 = scale * rng.normal(size=d)
    q, _ = np.linalg.qr(rng.normal(size=(d, 2)))
    u, v = q[:, 0].copy(), q[:, 1].copy()
    for a in (F, h, theta0, u, v):
        a.setflags(write=False)
    return TightnessModel(key, description, F, h, theta0, u, v)


@lru_cache(maxsize=64)
def log_z_line(key: str, scale: float, seed: int, r: float, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """(s, log Z(theta(s, r))) on LINE_POINTS values of s in [-radius, radius]."""
    model = make_model(key, scale, seed)
    s = np.linspace(-radius, radius, LINE_POINTS)
    return s, np.asarray(bound.log_partition(model.point(s, np.full_like(s, r)), model.F, model.h))


@lru_cache(maxsize=16)
def log_z_slice(key: str, scale: float, seed: int, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """(grid of s = r values, log Z on the (r, s) grid: rows r, columns s)."""
    model = make_model(key, scale, seed)
    n = SLICE_POINTS[key]
    g = np.linspace(-radius, radius, n)
    S, R = np.meshgrid(g, g)
    log_z = np.asarray(bound.log_partition(model.point(S.ravel(), R.ravel()), model.F, model.h)).reshape(n, n)
    return g, log_z


@dataclass(frozen=True)
class Expansion:
    """The bound (and, for contrast, the Taylor expansion) at one theta~ on the line."""

    s_tilde: float
    bound: np.ndarray  # on the line's s grid
    taylor: np.ndarray
    log_z: float
    grad_error: float  # max |mu - grad log Z(theta~)|


def expand(model: TightnessModel, s_tilde: float, r_tilde: float, s: np.ndarray) -> Expansion:
    """Algorithm 1 at theta~ = theta(s~, r~), evaluated along theta(s, r~)."""
    theta_tilde = model.point(s_tilde, r_tilde)
    log_z, mu, Sigma = bound.compute_bound(theta_tilde, model.F, model.h)
    points = model.point(s, np.full_like(s, r_tilde))
    upper = np.asarray(bound.bound_value(points, theta_tilde, log_z, mu, Sigma))
    t_log_z, mean, cov = bound.taylor_quadratic(theta_tilde, model.F, model.h)
    taylor = np.asarray(bound.bound_value(points, theta_tilde, t_log_z, mean, cov))
    grad_error = float(np.max(np.abs(mu - mean)))
    return Expansion(float(s_tilde), upper, taylor, float(log_z), grad_error)


def gap_slice(model: TightnessModel, grid: np.ndarray, log_z: np.ndarray, s_tilde: float,
              r_tilde: float) -> np.ndarray:
    """bound - log Z on the (r, s) grid for the expansion at theta(s~, r~) (>= 0 by Theorem 1)."""
    theta_tilde = model.point(s_tilde, r_tilde)
    lz, mu, Sigma = bound.compute_bound(theta_tilde, model.F, model.h)
    S, R = np.meshgrid(grid, grid)
    upper = np.asarray(bound.bound_value(model.point(S.ravel(), R.ravel()), theta_tilde, lz, mu, Sigma))
    return upper.reshape(log_z.shape) - log_z


def parse_points(text: str, radius: float) -> list[float]:
    """Extra expansion points s~ along the line: numbers separated by commas, in [-radius, radius]."""
    text = (text or "").strip()
    if not text:
        return []
    try:
        values = [float(t) for t in text.replace(";", ",").split(",") if t.strip()]
    except ValueError:
        raise ValueError(f"The extra expansion points must be numbers separated by commas, e.g. '-2, 1.5'. "
                         f"Got {text!r}.") from None
    if len(values) > 5:
        raise ValueError(f"At most 5 extra expansion points. Got {len(values)}.")
    bad = [x for x in values if not (math.isfinite(x) and abs(x) <= radius)]
    if bad:
        raise ValueError(f"Every extra expansion point must lie in [-{radius:g}, {radius:g}] (the plotted range). "
                         f"Got {bad}.")
    return values


# ---------------------------------------------------------------------------- the race
RACE_PROBLEMS = {
    "wine: 3 classes, 13 features": "wine",
    "breast cancer: 2 classes, 30 features": "breast_cancer",
    "digits: 10 classes, 64 pixels": "digits",
    "chain CRF (synthetic)": "chain",
    "FVBM, exact likelihood (d = 10)": "fvbm",
}
RACE_DESCRIPTIONS = {
    "wine": "Multinomial logistic regression on scikit-learn's wine data (standardised): Algorithm 1 per example over its 3 classes.",
    "breast_cancer": "Logistic regression on scikit-learn's breast-cancer data (standardised): Algorithm 1 per example.",
    "digits": "Multinomial logistic regression on scikit-learn's 8×8 digits: Algorithm 1 per example over 10 classes.",
    "chain": "A linear-chain CRF on sequences sampled from a random chain model: the bound per sequence by the junction tree (Algorithm 3).",
    "fvbm": "Exact maximum likelihood of a fully visible Boltzmann machine: Algorithm 1 over all 2^10 spin states.",
}
RACE_MAX_ITER = 1000
SEEDED_PROBLEMS = ("chain", "fvbm")  # synthetic data: the race's data seed matters


# ---------------------------------------------------------------------------- jobs
# What the lab computes away from the UI thread (see dashboard.jobs): plain arguments in,
# plain numpy / Python values out, so they can run in another process.

def tightness(key: str, scale: float, seed: int, radius: float, s_tilde: float, r_tilde: float,
              extra: tuple[float, ...]) -> dict:
    """Everything the tightness views draw for one setting: log Z along the line through
    theta~ = theta(s~, r~) (direction u), the bound and the Taylor expansion at theta~ and the
    bounds at the extra points s~ on that line, and bound - log Z over the (r, s) slice.

    Exact log Z over a grid of thetas: tens to hundreds of milliseconds for the FVBMs."""
    model = make_model(key, scale, seed)
    s, log_z = log_z_line(key, scale, seed, r_tilde, radius)
    main = expand(model, s_tilde, r_tilde, s)
    extras = [expand(model, x, r_tilde, s) for x in extra]
    grid, log_z2 = log_z_slice(key, scale, seed, radius)
    return {"d": model.d, "description": model.description, "s": s.copy(), "log_z": log_z.copy(),
            "bound": main.bound, "taylor": main.taylor, "log_z_tilde": main.log_z,
            "grad_error": main.grad_error, "extra": list(extra),
            "extra_bound": [e.bound for e in extras], "extra_log_z": [e.log_z for e in extras],
            "grid": grid.copy(), "gap2": gap_slice(model, grid, log_z2, s_tilde, r_tilde)}


#: Points of the bound majorizer's step picture (J and its majorizer along each step), the lab's view.
STEP_POINTS = 41


def race_key(problem: str, reg: float, seed: int) -> tuple[str, float, int]:
    """What defines a race's objective (the seed only for the synthetic problems); a
    ``ValueError`` at once for a bad setting."""
    if problem not in RACE_DESCRIPTIONS:
        raise ValueError(f"The problem must be one of {sorted(RACE_DESCRIPTIONS)}. Got {problem!r}.")
    if not isinstance(reg, (int, float)) or isinstance(reg, bool) or not math.isfinite(reg) or reg < 0:
        raise ValueError(f"The regularization λ ('reg') must be a finite number >= 0. Got {reg!r}.")
    if problem in SEEDED_PROBLEMS and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
        raise ValueError(f"The data seed ('race_seed') must be an int >= 0. Got {seed!r}.")
    return problem, float(reg), int(seed) if problem in SEEDED_PROBLEMS else 0


_OBJECTIVES = threading.Lock()  # one build of an objective at a time: the next one finds it cached


def race_objective(problem: str, reg: float, seed: int):
    """The race's objective J for :func:`race_key`'s ``(problem, reg, seed)``.  Cached:
    objectives are stateless after construction (the race's five trainers share one), and
    building one loads or simulates its data set (0.2-1 s for digits or the chain CRF)."""
    with _OBJECTIVES:
        return _race_objective(problem, reg, seed)


@lru_cache(maxsize=8)
def _race_objective(problem: str, reg: float, seed: int):
    from ...engine import majorize

    return majorize.make_objective(problem, reg=reg, seed=seed)


def race_size(problem: str, reg: float, seed: int) -> dict:
    """The race's number of parameters and of training pairs (builds its objective)."""
    objective = race_objective(problem, reg, seed)
    return {"dim": int(objective.dim), "n_examples": int(objective.n_examples)}


def race_reference(problem: str, reg: float, seed: int) -> dict:
    """J* = min J, the reference the race's curves J - J* are drawn against (scipy L-BFGS-B
    polished by Newton): from tens of milliseconds (wine) to seconds (digits)."""
    from ...engine import majorize

    ref = majorize.scipy_reference(race_objective(problem, reg, seed))
    return {"value": float(ref.value), "grad_norm": float(ref.grad_norm), "seconds": float(ref.seconds)}


def race_trainers(key: tuple[str, float, int]) -> dict:
    """The five trainers of one race (:func:`boltzlab.engine.majorize.make_race`) in Table 1's
    order.  Building them evaluates J and ∇J at θ = 0 six times (and builds the objective the
    first time): 0.05-0.5 s for digits or the chain, so never on the UI thread
    (:func:`build_race`)."""
    from ...engine import majorize

    problem, reg, seed = key
    return majorize.make_race(problem, reg=reg, seed=seed, max_iter=RACE_MAX_ITER,
                              objective=race_objective(*key), trace=STEP_POINTS)


def build_race(key: tuple[str, float, int]) -> Build:
    """The race as a :class:`~boltzlab.dashboard.runner.Build`: its names now, its trainers
    built by the runner's thread (or on the worker a Dask backend sends it to), as every lab's."""
    from ...engine import majorize

    return Build(tuple(majorize.RACE_METHODS), functools.partial(race_trainers, tuple(key)))
