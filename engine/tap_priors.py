"""The unit priors of a TAP machine's layers (Tramel et al. 2018, §IV and Appendix C): which
kinds there are, a layer's prior validated into the kernels' arrays (:func:`_layer`), and a
prior's log-partition with its first two derivatives (eqs. 32 and 35,
:func:`prior_log_partition`).  :mod:`boltzlab.engine.tap` uses them and hands their names on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .checks import check_choice
from .kernels import tap as kernels

PRIOR_CODES = {
    "bernoulli": kernels.BERNOULLI,
    "spin": kernels.SPIN,
    "truncated_gaussian": kernels.TRUNC_GAUSS,
    "truncated_gauss_bernoulli": kernels.TRUNC_GAUSS_BERNOULLI,
}
PRIOR_KINDS = tuple(PRIOR_CODES)
TRUNCATED = ("truncated_gaussian", "truncated_gauss_bernoulli")


@dataclass(frozen=True)
class Prior:
    """A layer's unit prior, beyond its bias U (which is ``b_vis`` / ``b_hid``).

    kind : "bernoulli" {0, 1}, "spin" {-1, +1}, "truncated_gaussian" on ``bounds``
        (Appendix C.1), or "truncated_gauss_bernoulli" (a spike at 0 plus a truncated
        Gaussian slab, Appendix C.2).
    precision : V, the Gaussian precision per unit (truncated kinds; any sign, the support
        is bounded).  A scalar applies to every unit.
    rho : the slab weight in (0, 1) per unit (Gauss-Bernoulli only).
    bounds : (lo, hi) of the truncation, lo < hi.
    """

    kind: str = "bernoulli"
    precision: Any = 1.0
    rho: Any = 0.5
    bounds: tuple[float, float] = (0.0, 1.0)


def _layer(prior: str | Prior, U: np.ndarray, name: str, owner: str) -> tuple:
    """(code, U, V, rho, lo, hi) arrays/scalars for the kernels, validated."""
    if isinstance(prior, str):
        prior = Prior(check_choice(name, prior, owner, PRIOR_KINDS))
    if not isinstance(prior, Prior):
        raise ValueError(f"The '{name}' parameter of {owner} must be one of {', '.join(map(repr, PRIOR_KINDS))} or a Prior. Got {prior!r}.")
    kind = check_choice(f"{name}.kind", prior.kind, owner, PRIOR_KINDS)
    n = U.shape[0]
    V = np.zeros(n)
    R = np.full(n, 0.5)
    lo, hi = 0.0, 1.0
    if kind in TRUNCATED:
        try:
            lo, hi = (float(b) for b in prior.bounds)
        except (TypeError, ValueError):
            raise ValueError(f"The '{name}.bounds' parameter of {owner} must be a pair (lo, hi) of floats. Got {prior.bounds!r}.") from None
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"The '{name}.bounds' parameter of {owner} must be finite with lo < hi. Got {prior.bounds!r}.")
        V = _per_unit(prior.precision, n, f"{name}.precision", owner)
        if kind == "truncated_gauss_bernoulli":
            R = _per_unit(prior.rho, n, f"{name}.rho", owner)
            if np.any(R <= 0.0) or np.any(R >= 1.0):
                raise ValueError(f"The '{name}.rho' parameter of {owner} must lie in (0, 1). Got values in [{R.min():g}, {R.max():g}].")
    return PRIOR_CODES[kind], U, V, R, lo, hi


def _per_unit(value: Any, n: int, name: str, owner: str) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    if arr.shape != (n,) or not np.all(np.isfinite(arr)):
        raise ValueError(f"The '{name}' parameter of {owner} must be a finite scalar or an array of shape ({n},). Got shape {np.shape(value)}.")
    return np.ascontiguousarray(arr)


def prior_log_partition(kind: str | Prior, B: Any, A: Any, U: Any = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """log Z(B, A; theta) (eq. 32) and f_a = d log Z/dB, f_c = d^2 log Z/dB^2 (eq. 35), elementwise.

    Z(B, A) = int mu(dx) exp(B x - A x^2 / 2) with the unnormalised prior measure mu of
    ``kind`` (bias U broadcast with B and A; for a :class:`Prior`, ``precision`` and ``rho``
    must be scalars here).  Normalising the prior subtracts log Z(0, 0), a constant.
    """
    owner = "prior_log_partition"
    B, A, U = (np.asarray(x, dtype=np.float64) for x in (B, A, U))
    B, A, U = np.broadcast_arrays(B, A, U)
    shape = B.shape
    flat = [np.ascontiguousarray(x.ravel()) for x in (B, A, U)]
    code, _, V, R, lo, hi = _layer(kind, np.zeros(1), "kind", owner)
    n = flat[0].shape[0]
    lz, fa, fc = kernels.prior_eval(code, flat[0], flat[1], flat[2], np.full(n, V[0]), np.full(n, R[0]), lo, hi)
    return lz.reshape(shape), fa.reshape(shape), fc.reshape(shape)
