"""Fully visible Boltzmann machines and their maximum pseudo-likelihood estimation.

Nguyen & Wood (2016), "A block successive lower-bound maximization algorithm for the
maximum pseudo-likelihood estimation of fully visible Boltzmann machines", Neural
Computation 28.  Symbols follow the paper: x in {-1, 1}^d, bias b, symmetric coupling
matrix M with zero diagonal (eq. 1.1), log-pseudo-likelihood P_n (eq. 2.1), BSLM updates
(eqs. 2.4, 2.7) and gradient ascent with step mu (eqs. 4.1, 4.2).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Literal, Mapping

import numpy as np
import scipy.optimize
import scipy.sparse
import scipy.special

from .checks import check_int
from .kernels import fvbm as kernels
from .stepping import Record, as_scalar

MAX_EXACT_D = 20  # 2^20 states: exact log Z, log-likelihood and sampling stay cheap
DECREASE_TOLERANCE = 1e-11  # relative: a log-PL drop smaller than this is rounding
REFRESH_EVERY = 32  # sweeps between from-scratch recomputations of tanh(u)


# --------------------------------------------------------------------------- model


def _check_params(b: np.ndarray, M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    b = np.asarray(b, dtype=np.float64)
    M = np.asarray(M, dtype=np.float64)
    if b.ndim != 1 or b.shape[0] < 1:
        raise ValueError(f"The 'b' parameter of FVBM must be a 1-d array of length d >= 1. Got shape {b.shape}.")
    d = b.shape[0]
    if M.shape != (d, d):
        raise ValueError(f"The 'M' parameter of FVBM must have shape ({d}, {d}) to match b. Got {M.shape}.")
    if not (np.all(np.isfinite(b)) and np.all(np.isfinite(M))):
        raise ValueError("The 'b' and 'M' parameters of FVBM must be finite. Got NaN or inf.")
    if np.any(np.diag(M) != 0):
        raise ValueError("The 'M' parameter of FVBM must have a zero diagonal (eq. 1.1).")
    if not np.allclose(M, M.T, rtol=0, atol=1e-12):
        raise ValueError("The 'M' parameter of FVBM must be symmetric (eq. 1.1).")
    return b.copy(), 0.5 * (M + M.T)


@dataclass(frozen=True)
class FVBM:
    """P(x) = exp(x^T M x / 2 + b^T x) / Z(theta) over x in {-1, 1}^d (eq. 1.1)."""

    b: np.ndarray
    M: np.ndarray

    def __post_init__(self) -> None:
        b, M = _check_params(self.b, self.M)
        object.__setattr__(self, "b", b)
        object.__setattr__(self, "M", M)

    @property
    def d(self) -> int:
        return int(self.b.shape[0])

    @classmethod
    def random(cls, d: int, seed: int, variance: float = 0.5) -> "FVBM":
        """b and the upper triangle of M drawn i.i.d. N(0, variance), as in §5."""
        d = check_int("d", d, "FVBM.random", minimum=1)
        if not (variance > 0 and math.isfinite(variance)):
            raise ValueError(f"The 'variance' parameter of FVBM.random must be a float > 0. Got {variance!r}.")
        rng = np.random.default_rng(seed)
        sd = math.sqrt(variance)
        b = rng.normal(0.0, sd, d)
        M = np.zeros((d, d))
        iu = np.triu_indices(d, 1)
        M[iu] = rng.normal(0.0, sd, len(iu[0]))
        return cls(b, M + M.T)

    def theta(self) -> np.ndarray:
        """The parameter vector of the paper: b followed by the upper triangle of M."""
        return pack_theta(self.b, self.M)

    def log_partition(self) -> float:
        """log Z(theta) by enumeration of the 2^d states (d <= 20)."""
        _check_exact_d(self.d, "FVBM.log_partition")
        return float(kernels.log_partition_exact(self.b, self.M))

    def probabilities(self) -> np.ndarray:
        """P(x) for every state; state s has x_j = +1 iff bit j of s is set (d <= 20)."""
        _check_exact_d(self.d, "FVBM.probabilities")
        energies = kernels.state_energies(self.b, self.M)
        energies -= energies.max()
        p = np.exp(energies)
        return p / p.sum()

    def sample(self, n: int, seed: int, *, burn_in: int = 1000, thin: int = 10) -> np.ndarray:
        """n i.i.d. draws (n x d, entries +-1): exact for d <= 20, Gibbs sampling beyond.

        The exact sampler inverts the cumulative distribution over all 2^d states; the Gibbs
        sampler runs one seeded chain with ``burn_in`` sweeps, keeping every ``thin``-th.
        """
        n = check_int("n", n, "FVBM.sample", minimum=1)
        if self.d <= MAX_EXACT_D:
            p = self.probabilities()
            cdf = np.cumsum(p)
            cdf /= cdf[-1]
            u = np.random.default_rng(seed).random(n)
            states = np.minimum(np.searchsorted(cdf, u, side="right"), p.size - 1)
            return states_to_spins(states, self.d)
        seed = int(np.random.default_rng(seed).integers(2**31 - 1))
        return kernels.gibbs_sample(self.b, self.M, n, int(burn_in), int(thin), seed)


def states_to_spins(states: np.ndarray, d: int) -> np.ndarray:
    """Integer state codes to rows of +-1 (bit j set <=> x_j = +1)."""
    bits = (np.asarray(states)[:, None] >> np.arange(d)) & 1
    return np.where(bits == 1, 1.0, -1.0)


def pack_theta(b: np.ndarray, M: np.ndarray) -> np.ndarray:
    d = b.shape[0]
    return np.concatenate([b, M[np.triu_indices(d, 1)]])


def unpack_theta(theta: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    b = np.array(theta[:d], dtype=np.float64)
    M = np.zeros((d, d))
    M[np.triu_indices(d, 1)] = theta[d:]
    return b, M + M.T


def parameter_mse(b: np.ndarray, M: np.ndarray, truth: FVBM) -> float:
    """Mean squared error over the q = d + d(d-1)/2 elements of theta (§5)."""
    diff = pack_theta(b, M) - truth.theta()
    return float(diff @ diff / diff.size)


def _check_exact_d(d: int, owner: str) -> None:
    if d > MAX_EXACT_D:
        raise ValueError(f"{owner} enumerates 2^d states and needs d <= {MAX_EXACT_D}. Got d = {d}.")


# ------------------------------------------------------------- objective functions


def check_data(X: Any, owner: str = "FVBMTrainer") -> np.ndarray:
    """X as a float64 (n, d) array of +-1, or a ValueError that says what is wrong."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 2:
        raise ValueError(f"The 'X' parameter of {owner} must be a 2-d array with n >= 1 rows and d >= 2 columns. Got shape {X.shape}.")
    bad = ~((X == 1.0) | (X == -1.0))
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise ValueError(f"The 'X' parameter of {owner} must hold only -1 and +1. Got {X[i, j]!r} at row {i}, column {j}.")
    return X


def log_pseudo_likelihood(X: np.ndarray, b: np.ndarray, M: np.ndarray) -> float:
    """P_n(theta) of eq. 2.1, summed over the n rows, including the -log 2 terms."""
    X = check_data(X, "log_pseudo_likelihood")
    b, M = _check_params(b, M)
    XT, w = compress_rows(X)
    T = np.empty_like(XT)
    return float(kernels.log_pl_and_fields(XT, w, False, b, M, T, True))


def compress_rows(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of X, transposed to (d, m), and how often each occurs (m,).

    Eq. 2.1 sums over observations, so a row seen c times contributes c times one term:
    the sweeps on (distinct rows, counts) are the sweeps on X, at O(m) instead of O(n).
    Strongly coupled FVBMs put their mass on few states (d = 20 in §5: ~450 distinct rows
    among 16,000), so this is often a large saving.
    """
    rows, counts = np.unique(X, axis=0, return_counts=True)
    return np.ascontiguousarray(rows.T), counts.astype(np.float64)


def log_pl_gradient(
    X: np.ndarray, b: np.ndarray, M: np.ndarray, w: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """dP_n/db_j and dP_n/dm_jk (the partials below eqs. 2.4 and 2.7), zero diagonal.

    With ``w``, row i of X stands for w_i observations (see :func:`compress_rows`).
    """
    R = X - np.tanh(b + X @ M)  # x_ij - tanh(u_ij)
    if w is not None:
        R *= w[:, None]
    G = X.T @ R
    grad_M = G + G.T
    np.fill_diagonal(grad_M, 0.0)
    return R.sum(axis=0), grad_M


def exact_log_likelihood(X: np.ndarray, b: np.ndarray, M: np.ndarray) -> float:
    """sum_i log P(x_i; theta) of eq. 1.1 with the exact log Z (d <= 20)."""
    X = check_data(X, "exact_log_likelihood")
    b, M = _check_params(b, M)
    _check_exact_d(b.shape[0], "exact_log_likelihood")
    rows, counts = np.unique(X, axis=0, return_counts=True)
    energy = counts @ (0.5 * np.einsum("ij,jk,ik->i", rows, M, rows) + rows @ b)
    return float(energy - X.shape[0] * kernels.log_partition_exact(b, M))


def _negative_log_pl(theta: np.ndarray, X: np.ndarray, w: np.ndarray, d: int) -> tuple[float, np.ndarray]:
    """-P_n and its gradient in theta; row i of X stands for w_i observations."""
    b, M = unpack_theta(theta, d)
    U = b + X @ M
    value = w @ np.sum(X * U - np.logaddexp(U, -U), axis=1)  # log(2 cosh u) = logaddexp(u, -u)
    grad_b, grad_M = log_pl_gradient(X, b, M, w)
    return -value, -pack_theta(grad_b, grad_M)


def _hessian(X: np.ndarray, w: np.ndarray, b: np.ndarray, M: np.ndarray) -> np.ndarray:
    """The Hessian of eq. 2.1 in theta (b, upper triangle of M): concave, (q, q)."""
    n, d = X.shape
    q = d + d * (d - 1) // 2
    index = np.zeros((d, d), dtype=np.int64)
    iu = np.triu_indices(d, 1)
    index[iu] = d + np.arange(len(iu[0]))
    index = index + index.T
    S = (1.0 - np.tanh(b + X @ M) ** 2) * w[:, None]  # sech^2(u_ij), per observation
    H = np.zeros((q, q))
    for j in range(d):
        # u_ij depends on b_j (feature 1) and m_jk (feature x_ik), k != j.
        cols = np.concatenate([[j], index[j, np.arange(d) != j]])
        F = np.column_stack([np.ones(n), np.delete(X, j, axis=1)])
        H[np.ix_(cols, cols)] -= F.T @ (F * S[:, j : j + 1])
    return H


def maximize_log_pl(
    rows: np.ndarray, w: np.ndarray, *, grad_tol: float = 1e-9, newton_steps: int = 100
) -> np.ndarray:
    """theta maximizing eq. 2.1 over ``rows`` weighted by ``w`` (as far as it goes).

    A short scipy L-BFGS run from theta = 0, then Newton steps with the exact Hessian and
    step halving until the gradient norm is <= grad_tol * n: quadratic convergence where
    L-BFGS alone crawls (thousands of evaluations for a 1e-9 gradient).  On data without
    an MPLE it stops after ``newton_steps`` with parameters drifting off.
    """
    d = rows.shape[1]
    n = w.sum()
    q = d + d * (d - 1) // 2
    result = scipy.optimize.minimize(
        _negative_log_pl, np.zeros(q), args=(rows, w, d), jac=True, method="L-BFGS-B",
        options={"maxiter": 200, "gtol": 1e-3 * n},
    )
    return _newton(result.x, rows, w, grad_tol, newton_steps)[0]


def _newton(theta: np.ndarray, rows: np.ndarray, w: np.ndarray, grad_tol: float,
            max_steps: int) -> tuple[np.ndarray, int, float]:
    """Newton steps on eq. 2.1 with the exact Hessian and step halving, from ``theta``, until
    ``|gradient| <= grad_tol * n``: ``(theta, steps taken, |gradient| / n)``."""
    d = rows.shape[1]
    n = w.sum()
    value, grad = _negative_log_pl(theta, rows, w, d)
    steps = 0
    for _ in range(max_steps):
        if np.linalg.norm(grad) <= grad_tol * n:
            break
        b, M = unpack_theta(theta, d)
        step = np.linalg.lstsq(_hessian(rows, w, b, M), grad, rcond=None)[0]  # -H^-1 grad(-P_n)
        t = 1.0
        while t > 1e-10:
            candidate = theta + t * step
            cvalue, cgrad = _negative_log_pl(candidate, rows, w, d)
            if cvalue <= value + 1e-13 * abs(value):
                break
            t *= 0.5
        else:
            break
        theta, value, grad = candidate, cvalue, cgrad
        steps += 1
    return theta, steps, float(np.linalg.norm(grad) / n)


def newton_polish(X: np.ndarray, b: np.ndarray, M: np.ndarray, *, grad_tol: float = 1e-10,
                  max_steps: int = 50) -> tuple[np.ndarray, np.ndarray, int, float]:
    """Finish a fit at the MPLE: Newton steps on the concave eq. 2.1 from ``(b, M)``.

    A first-order stopping rule (BSLM's log-PL increase < tol) stops where the increase is
    small, not where the estimate is: on the Senate data BSLM's default tol leaves the
    couplings 3e-3 from the MPLE.  From there Newton converges quadratically, a few steps of
    a q x q solve (q = d + d(d-1)/2).  Returns ``(b, M, steps, |gradient| / n)``.
    """
    X = check_data(X, "newton_polish")
    b, M = _check_params(b, M)
    rows, w = np.unique(X, axis=0, return_counts=True)
    theta, steps, gradient = _newton(pack_theta(b, M), rows, w.astype(np.float64), grad_tol, max_steps)
    b, M = unpack_theta(theta, X.shape[1])
    return b, M, steps, gradient


def mple(X: np.ndarray, *, grad_tol: float = 1e-9, check: bool = True) -> FVBM:
    """The maximum pseudo-likelihood estimate: argmax of the concave eq. 2.1.

    Found by :func:`maximize_log_pl` on the distinct rows weighted by their counts; the
    dashboard draws it as the target line.  (The tests check it against scipy L-BFGS.)

    Raises
    ------
    ValueError
        With ``check``, if the MPLE does not exist for X (see
        :func:`boltzlab.engine.fvbm.check_mple_exists`, which uses this solution as its hint).
    """
    X = check_data(X, "mple")
    d = X.shape[1]
    rows, w = np.unique(X, axis=0, return_counts=True)  # eq. 2.1 over distinct rows, weighted
    theta = maximize_log_pl(rows, w.astype(np.float64), grad_tol=grad_tol)
    if check:
        check_mple_exists(X, theta)
    return FVBM(*unpack_theta(theta, d))


def sandwich_covariance(X: np.ndarray, b: np.ndarray, M: np.ndarray) -> np.ndarray:
    """Asymptotic covariance of the MPLE, H^-1 J H^-1 (Nguyen & Wood, in press).

    H is the Hessian of eq. 2.1 and J = sum_i s_i s_i^T the outer products of the
    per-observation scores, both evaluated at (b, M).  Its trace / q is the MSE an MPLE
    is expected to have from sampling error alone.
    """
    X, w = np.unique(X, axis=0, return_counts=True)
    w = w.astype(np.float64)
    d = X.shape[1]
    q = d + d * (d - 1) // 2
    iu = np.triu_indices(d, 1)
    J = np.zeros((q, q))
    chunk = max(1, 2**22 // q)  # distinct rows per block: the scores never take more than 32 MB
    for start in range(0, X.shape[0], chunk):
        Xc, wc = X[start:start + chunk], w[start:start + chunk]
        R = Xc - np.tanh(b + Xc @ M)
        # score of observation i: d/db_j = R_ij; d/dm_jk = x_ik R_ij + x_ij R_ik
        scores = np.concatenate([R, Xc[:, iu[1]] * R[:, iu[0]] + Xc[:, iu[0]] * R[:, iu[1]]], axis=1)
        J += scores.T @ (scores * wc[:, None])
    H_inv = np.linalg.inv(_hessian(X, w, b, M))
    return H_inv @ J @ H_inv


def wald_tests(X: np.ndarray, b: np.ndarray, M: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Standard errors, Wald z and two-sided p-values of every b_j and m_jk at (b, M).

    The standard errors are the square roots of the diagonal of :func:`sandwich_covariance`
    (meant at the MPLE), z = estimate / SE and p = P(|N(0, 1)| >= |z|).  Returns
    ``{"se": (b, M), "z": (b, M), "p": (b, M)}`` shaped like the estimates: a (d,) array for
    b and a symmetric (d, d) array for M whose diagonal (not a parameter) is NaN.

    Raises
    ------
    ValueError
        If the covariance is not finite with positive variances (a singular Hessian).
    """
    X = check_data(X, "wald_tests")
    b, M = _check_params(b, M)
    d = X.shape[1]
    if b.shape[0] != d:
        raise ValueError(f"The 'b' parameter of wald_tests must have length d = {d}. Got {b.shape[0]}.")
    try:
        variances = np.diag(sandwich_covariance(X, b, M))
    except np.linalg.LinAlgError:
        variances = np.full(d + d * (d - 1) // 2, np.nan)
    if not (np.all(np.isfinite(variances)) and np.all(variances > 0)):
        raise ValueError("The standard errors are undefined: the Hessian of eq. 2.1 is singular at the estimate.")
    se = np.sqrt(variances)
    z = pack_theta(b, M) / se
    p = scipy.special.erfc(np.abs(z) / math.sqrt(2.0))

    def shaped(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        vb, vM = unpack_theta(values, d)
        np.fill_diagonal(vM, np.nan)
        return vb, vM

    return {"se": shaped(se), "z": shaped(z), "p": shaped(p)}


# ------------------------------------------------------------------------ trainers

Algorithm = Literal["bslm", "ga"]


def sweep_records(trainer: Any, records: list[dict[str, Any]]) -> list[Record]:
    """A batch of sweeps' scalars as Records, for :class:`FVBMTrainer` and
    :class:`boltzlab.engine.fvbm_bound.FVBMBoundTrainer`: the last carries the parameter MSE
    (data simulated from a known truth), the exact log-likelihood (at sweep 1, every
    ``exact_every`` sweeps and at the end; not once diverged) and the arrays b, M."""
    last = records[-1]
    finite = trainer.status != "diverged"
    b, M = trainer._b, trainer._M
    if trainer.truth is not None and finite:
        last["mse"] = parameter_mse(b, M, trainer.truth)
    every = trainer.exact_every
    if every and finite and (trainer.done or any(r["sweep"] == 1 or r["sweep"] % every == 0 for r in records)):
        last["log_lik"] = exact_log_likelihood(trainer.X, b, M)
    out = [Record(r) for r in records[:-1]]
    out.append(Record(last, {"b": b.copy(), "M": M.copy()}))
    return out


class FVBMTrainer:
    """BSLM (Nguyen & Wood 2016, eqs. 2.4, 2.7) or gradient ascent with step mu (4.1, 4.2).

    ``step()`` is one full sweep: every b_j, then every m_jk in lexicographic order, each
    with the freshest values.  BSLM is gradient ascent with mu = 1; for mu <= 1 the log-PL
    cannot decrease, for mu > 1 nothing is guaranteed.

    Parameters
    ----------
    X : (n, d) array of +-1
    algorithm : "bslm" or "ga"
    mu : step of gradient ascent (ignored by BSLM, which uses mu = 1)
    tol : stop once |P_n(theta^(s+1)) - P_n(theta^(s))| < tol; 0 runs exactly max_sweeps
    max_sweeps : at most this many sweeps
    init : "zeros" (b = 0, M = 0) or "random" (b, upper M ~ N(0, 0.5) as in §5, from seed)
    seed : seed of the random start
    truth : the generating FVBM, if known: records carry the parameter MSE
    exact_every : at the first sweep, every this many sweeps and when done, add the exact log-likelihood
        to the Record (d <= 20); 0 never
    compress : sweep over the distinct rows weighted by their counts (see
        :func:`compress_rows`; the same iterates up to rounding).  None: when the distinct
        rows are at most half of the rows.
    """

    def __init__(
        self,
        X: np.ndarray,
        *,
        algorithm: Algorithm = "bslm",
        mu: float = 1.0,
        tol: float = 1e-5,
        max_sweeps: int = 100_000,
        init: Literal["zeros", "random"] = "zeros",
        seed: int = 0,
        truth: FVBM | None = None,
        exact_every: int = 0,
        compress: bool | None = None,
    ) -> None:
        owner = "FVBMTrainer"
        self.X = check_data(X, owner)
        self.n, self.d = self.X.shape
        if algorithm not in ("bslm", "ga"):
            raise ValueError(f"The 'algorithm' parameter of {owner} must be 'bslm' or 'ga'. Got {algorithm!r}.")
        if not (isinstance(mu, (int, float)) and math.isfinite(mu) and mu > 0):
            raise ValueError(f"The 'mu' parameter of {owner} must be a float > 0. Got {mu!r}.")
        if not (isinstance(tol, (int, float)) and math.isfinite(tol) and tol >= 0):
            raise ValueError(f"The 'tol' parameter of {owner} must be a float >= 0. Got {tol!r}.")
        if init not in ("zeros", "random"):
            raise ValueError(f"The 'init' parameter of {owner} must be 'zeros' or 'random'. Got {init!r}.")
        self.max_sweeps = check_int("max_sweeps", max_sweeps, owner, minimum=1)
        self.exact_every = check_int("exact_every", exact_every, owner, minimum=0)
        if self.exact_every and self.d > MAX_EXACT_D:
            raise ValueError(f"The 'exact_every' parameter of {owner} needs d <= {MAX_EXACT_D}. Got d = {self.d}.")
        if truth is not None and truth.d != self.d:
            raise ValueError(f"The 'truth' parameter of {owner} must have d = {self.d}. Got d = {truth.d}.")
        self.algorithm = algorithm
        self.mu = 1.0 if algorithm == "bslm" else float(mu)
        self.tol = float(tol)
        self.init = init
        self.seed = int(seed)
        self.truth = truth
        rows, counts = compress_rows(self.X)
        self.compressed = bool(compress) if compress is not None else rows.shape[1] <= self.n // 2
        if self.compressed:
            self._XT, self._w = rows, counts
        else:
            self._XT, self._w = np.ascontiguousarray(self.X.T), np.ones(self.n)
        self._T = np.empty_like(self._XT)
        start = FVBM.random(self.d, seed) if init == "random" else FVBM(np.zeros(self.d), np.zeros((self.d, self.d)))
        self._set_state(start.b, start.M, sweep=0, elapsed=0.0, first_decrease=-1, status="running", message="")

    # -- state
    def _set_state(self, b, M, *, sweep, elapsed, first_decrease, status, message, T=None) -> None:
        self._b = np.array(b, dtype=np.float64)
        self._M = np.array(M, dtype=np.float64)
        self.sweep = int(sweep)
        self.elapsed = float(elapsed)
        self.first_decrease = int(first_decrease)
        self.status = str(status)
        self.message = str(message)
        if T is None:
            self.log_pl = float(kernels.log_pl_and_fields(self._XT, self._w, not self.compressed, self._b, self._M, self._T, True))
        else:
            self._T[...] = T
            self.log_pl = float(kernels.log_pl_and_fields(self._XT, self._w, not self.compressed, self._b, self._M, self._T, False))

    @property
    def b(self) -> np.ndarray:
        return self._b.copy()

    @property
    def M(self) -> np.ndarray:
        return self._M.copy()

    @property
    def done(self) -> bool:
        return self.status != "running"

    @property
    def label(self) -> str:
        return "BSLM" if self.algorithm == "bslm" else f"GA μ={self.mu:g}"

    # -- stepping
    def step(self) -> Record:
        """One sweep (all b_j, then all m_jk); see :meth:`steps`."""
        return self.steps(1)[0]

    def steps(self, k: int) -> list[Record]:
        """Up to k sweeps in one call into numba (fewer if the stopping rule fires).

        The numba loop returns to Python only once, so a fast sweep does not make the
        caller's thread fight for the GIL.  Every sweep gets a Record of scalars; the last
        one also carries the arrays b and M, the parameter MSE and, when due, the exact
        log-likelihood.
        """
        if self.done:
            raise RuntimeError(f"This trainer is done ({self.status}); reset it to train again.")
        k = max(1, min(int(k), self.max_sweeps - self.sweep))
        out = np.empty(k)
        t0 = time.perf_counter()
        ran = kernels.run_sweeps(
            self._XT, self._w, not self.compressed, self._b, self._M, self._T, self.mu, self.sweep + 1, k,
            self.tol, REFRESH_EVERY, self.log_pl, out,
        )
        wall = (time.perf_counter() - t0) / ran
        records = []
        for s in range(ran):
            previous, current = self.log_pl, float(out[s])
            self.sweep += 1
            self.elapsed += wall
            increase = current - previous
            if self.first_decrease < 0 and increase < -DECREASE_TOLERANCE * max(1.0, abs(previous)):
                self.first_decrease = self.sweep
            self.log_pl = current
            if not (math.isfinite(current) and np.all(np.isfinite(self._M)) and np.all(np.isfinite(self._b))):
                self.status = "diverged"
                self.message = f"{self.label} diverged at sweep {self.sweep}: the parameters are no longer finite."
            elif self.tol > 0 and abs(increase) < self.tol:
                self.status = "converged"
                self.message = f"Converged after {self.sweep} sweeps: the increase {increase:.2e} < τ = {self.tol:g}."
            elif self.sweep >= self.max_sweeps:
                self.status = "max_sweeps"
                self.message = f"Stopped at the maximum of {self.max_sweeps} sweeps (last increase {increase:.2e})."
            scalars: dict[str, Any] = {
                "sweep": self.sweep,
                "log_pl": current,
                "increase": increase,
                "wall_time": wall,
                "elapsed": self.elapsed,
                "monotone": self.first_decrease < 0,
                "first_decrease": self.first_decrease,
            }
            records.append(scalars)
        return sweep_records(self, records)

    def run(self) -> list[Record]:
        """Sweep until done; the Records of every sweep."""
        records: list[Record] = []
        while not self.done:
            records.extend(self.steps(256))
        return records

    # -- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """b, M, the kept tanh-fields, counters and settings: restores bit-exactly."""
        return {
            "b": self._b.copy(), "M": self._M.copy(), "tanh_fields": self._T.copy(),
            "sweep": self.sweep, "elapsed": self.elapsed, "log_pl": self.log_pl,
            "first_decrease": self.first_decrease, "status": self.status, "message": self.message,
            "algorithm": self.algorithm, "mu": self.mu, "tol": self.tol, "n": self.n, "d": self.d,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output, validated against this trainer's data."""
        required = ("b", "M", "tanh_fields", "sweep", "elapsed", "first_decrease", "status", "message")
        missing = [key for key in required if key not in state]
        if missing:
            raise ValueError(f"The checkpoint lacks the entries {missing} of an FVBM trainer.")
        for key in ("n", "d"):
            if key in state and as_scalar(state[key]) != getattr(self, key):
                raise ValueError(f"The checkpoint was made with {key} = {as_scalar(state[key])}, but the data has {key} = {getattr(self, key)}.")
        b, M = _check_params(state["b"], state["M"])
        if b.shape[0] != self.d:
            raise ValueError(f"The checkpoint's 'b' has length {b.shape[0]}; the data has d = {self.d}.")
        T = np.asarray(state["tanh_fields"], dtype=np.float64)
        if T.shape != self._T.shape or not np.all(np.abs(T) <= 1.0):
            raise ValueError(f"The checkpoint's 'tanh_fields' must have shape {self._T.shape} with values in [-1, 1].")
        status = str(as_scalar(state["status"]))
        if status not in ("running", "converged", "max_sweeps", "diverged"):
            raise ValueError(f"The checkpoint's 'status' must be a trainer status. Got {status!r}.")
        self._set_state(
            b, M, sweep=as_scalar(state["sweep"]), elapsed=as_scalar(state["elapsed"]),
            first_decrease=as_scalar(state["first_decrease"]), status=status,
            message=as_scalar(state["message"]), T=T,
        )


# ------------------------------------------------------------- does the MPLE exist?


def check_mple_exists(X: np.ndarray, theta: np.ndarray | None = None) -> None:
    """Raise ValueError if the maximum pseudo-likelihood estimate does not exist for X.

    Each term of eq. 2.1 is -log(1 + exp(-2 x_ij u_ij)), a logistic loss in the margin
    x_ij u_ij = A theta (theta = b and the upper triangle of M).  By Stiemke's lemma exactly
    one of these holds:

    * some direction D has A D >= 0, A D != 0: P_n keeps increasing along it, the
      parameters diverge and no MPLE exists (a constant column, or columns that the
      others predict perfectly, are such cases);
    * some lambda > 0 has A^T lambda = 0: P_n -> -inf in every direction, the MPLE exists.

    Fast path: at an approximate maximizer (``theta``, or one found here) the gradient
    A^T lambda with lambda = 2 w sigmoid(-2 margins) > 0 is nearly zero; projecting lambda
    onto the null space of A^T gives an exact certificate if it stays positive.  Otherwise
    a linear program over the distinct rows (HiGHS) looks for the diverging direction.
    """
    X = check_data(X, "check_mple_exists")
    n, d = X.shape
    for j in range(d):
        if np.all(X[:, j] == X[0, j]):
            raise ValueError(
                f"The MPLE does not exist: column {j + 1} is constant ({int(X[0, j]):+d} in every row), "
                "so its bias b_j diverges to infinity. Drop that column."
            )
    rows, counts = np.unique(X, axis=0, return_counts=True)
    m = rows.shape[0]
    A = margin_matrix(rows)
    if theta is None:
        theta = maximize_log_pl(rows, counts.astype(np.float64), newton_steps=15)
    if _positive_null_vector(A, np.tile(counts, d).astype(np.float64), theta):
        return
    # maximize the sum of margins subject to margins >= 0 and |theta| <= 1
    objective = -np.asarray(A.sum(axis=0)).ravel()
    result = scipy.optimize.linprog(
        objective, A_ub=-A, b_ub=np.zeros(A.shape[0]), bounds=[(-1.0, 1.0)] * A.shape[1], method="highs"
    )
    if result.status != 0:
        return  # the LP is always feasible (theta = 0); a solver failure is not evidence
    if -result.fun > 1e-7:
        margins = A @ result.x
        involved = sorted({int(r // m) + 1 for r in np.flatnonzero(margins > 1e-9)})
        raise ValueError(
            "The MPLE does not exist for these data: the pseudo-likelihood keeps increasing as the "
            "parameters grow without bound, because columns "
            f"{', '.join(map(str, involved))} are perfectly predicted by the other columns in every row "
            f"({m} distinct rows among {n}). Drop such columns or add observations."
        )


def margin_matrix(rows: np.ndarray) -> scipy.sparse.csr_matrix:
    """A with (A theta)[j m + r] = x_rj u_rj, the margin of variable j in distinct row r.

    u_rj = b_j + sum_{k != j} m_jk x_rk, and theta = (b, upper triangle of M) in the order
    of :func:`boltzlab.engine.fvbm.pack_theta`.
    """
    m, d = rows.shape
    iu = np.triu_indices(d, 1)
    q = d + len(iu[0])
    pair_index = np.zeros((d, d), dtype=np.int64)
    pair_index[iu] = d + np.arange(len(iu[0]))
    pair_index = pair_index + pair_index.T
    r_idx, j_idx, cols, vals = [], [], [], []
    for j in range(d):
        others = [k for k in range(d) if k != j]
        r_idx.append(np.repeat(np.arange(m), d))
        j_idx.append(np.full(m * d, j))
        cols.append(np.tile(np.concatenate([[j], pair_index[j, others]]), m))
        coef = np.column_stack([rows[:, j], rows[:, j : j + 1] * rows[:, others]])
        vals.append(coef.ravel())
    r_idx = np.concatenate(r_idx)
    j_idx = np.concatenate(j_idx)
    return scipy.sparse.csr_matrix(
        (np.concatenate(vals), (j_idx * m + r_idx, np.concatenate(cols))), shape=(m * d, q)
    )


def _positive_null_vector(A: scipy.sparse.csr_matrix, weights: np.ndarray, theta: np.ndarray) -> bool:
    """True if a lambda > 0 with A^T lambda = 0 is found near the gradient weights at theta."""
    margins = A @ theta
    lam = 2.0 * weights * scipy.special.expit(-2.0 * margins)
    gram = (A.T @ A).toarray()
    y = np.linalg.lstsq(gram, A.T @ lam, rcond=None)[0]
    corrected = lam - A @ y  # the projection of lam onto the null space of A^T
    residual = np.abs(A.T @ corrected).max()
    return bool(corrected.min() > 1e-9 * lam.max() and residual <= 1e-8 * lam.max())
