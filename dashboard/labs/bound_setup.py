"""Panel-free helpers of the Bound lab: the small models whose log Z the quadratic bound of
Jebara & Choromanska (2012, Algorithm 1, Theorem 1) is drawn against, and the curves and
slices the tightness views plot.

A model is an enumerable Omega (rows of F, |Omega| x d) with measure h.  The views look at
log Z and the bound on a 2-D plane through a random base point theta_0,

    theta(s, r) = theta_0 + s u + r v        (u, v orthonormal, seeded),

with the expansion point theta~ = theta(s~, r~) and the curves along the line through theta~
in the direction u.  Everything here is exact: log Z by enumeration, the bound by
:func:`engine.bound.compute_bound`.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from engine import bound

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
