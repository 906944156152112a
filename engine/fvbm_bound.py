"""Maximum pseudo-likelihood for FVBMs by the quadratic bound (Jebara & Choromanska 2012).

The log-pseudo-likelihood of Nguyen & Wood (2016, eq. 2.1) is a sum over rows n and
coordinates i of two-state log-partition terms,

    log p(x_ni | x_n,-i) = x_ni u_ni - log(2 cosh u_ni),   u_ni = b_i + sum_k m_ik x_nk,

each linear in theta = (b, upper triangle of M) through u_ni = a_ni^T theta (a_ni has a 1
at b_i and x_nk at m_ik; m_ik = m_ki is one parameter, shared by the terms i and k).
Algorithm 1 (ComputeBound, :func:`boltzlab.engine.bound.compute_bound`) on one term's two states
(features -a, +a) has a closed form: the first state meets z = 0+ (footnote 3: c = 0),
the second has log(alpha / z) = 2 u~ and l = 2a, so its Sigma is
tanh(u~) / (4 u~) (2a)(2a)^T, i.e.

    log(2 cosh u) <= log(2 cosh u~) + tanh(u~) (u - u~) + 1/2 c(u~) (u - u~)^2,
    c(u) = tanh(u) / u,   c(0) = 1 (the limit),

the Jaakkola-Jordan bound (tanh(u~) / (2 u~) is the coefficient of (u - u~)^2).  Since
sech^2(u) <= c(u) <= 1, the curvature adapts to the fields, between the Hessian's and the
fixed 1 that BSLM's per-coordinate bound uses.  Summing the per-term bounds majorizes
-P_n by a quadratic whose Hessian is Sigma = sum_n sum_i c(u_ni) a_ni a_ni^T (q x q,
q = d + d(d-1)/2) and whose gradient at theta~ is -grad P_n, so one majorization-
minimization update is

    theta <- theta + Sigma^{-1} grad P_n(theta),

one q-dimensional solve (Cholesky) per iteration; P_n never decreases (MM).  Sigma is
accumulated over the distinct rows with their counts (:func:`boltzlab.engine.fvbm.compress_rows`)
in :mod:`boltzlab.engine.kernels.fvbm_bound` from d blocks F_i^T diag(w c(u_i)) F_i, F_i = [1, x_-i],
all read off one BLAS product.

* :class:`BoundMPLETrainer` -- one MM update per ``step()``, monotone by construction.
* :class:`LBFGSMPLETrainer` -- L-BFGS on -P_n (two-loop recursion, memory 10, Armijo
  backtracking from the unit step), one iteration per ``step()``: a fast reference
  without a majorization guarantee (its ascent comes from the line search, which pays
  extra evaluations).

Both produce Records with the keys of :class:`boltzlab.engine.fvbm.FVBMTrainer` (``sweep`` counts
iterations) plus ``grad_norm`` (and ``evaluations`` for L-BFGS), so the FVBM lab plots
them beside BSLM unchanged.

Measured (2 shared cores, OPENBLAS_NUM_THREADS=1; ``python -m boltzlab.engine.fvbm_bound 20 16000
4 0.2 60``, i.e. :func:`race_to_mple`): d = 20, n = 16,000 (1,255 distinct rows) simulated
from b0, M0 ~ N(0, 0.2), seed 4, from theta = 0 until |grad P_n| <= 1e-6 n, stepping time
only.  BSLM 12,681 sweeps in 9.1 s; GA mu = 0.5 25,939 sweeps, 18.6 s; GA mu = 2.5 4,709
sweeps, 3.3 s; GA mu = 8 decreased and did not get there in 60 s; the bound MM 2,188
iterations in 3.0 s (1.4 ms each: Sigma 0.43 ms, Cholesky 0.23 ms, eq. 2.1 and gradient
0.42 ms), monotone; with SQUAREM 78 cycles (156 majorizations) in 0.26 s, monotone;
L-BFGS 428 iterations in 0.21 s (monotone here, through its line search).  So the bound
needs 5.8x fewer iterations than BSLM and is ~3x faster in time (about even with GA at
mu = 2.5, the best step tried, which has no guarantee); its slow modes come from saturated fields, where c(u) ~ 1/|u|
exceeds sech^2(u) by orders of magnitude, and SQUAREM removes them (35x BSLM).  At the §5
variance 0.5 (``bench_fvbm``'s data: d = 20, seed 0, 171 distinct rows) no MPLE exists
(:func:`boltzlab.engine.fvbm.check_mple_exists`; none of the 17 seeds we drew at d = 20 had one):
in 10 s BSLM, GA and the plain bound stay at |grad| ~ 0.3-1.3 while parameters drift off;
SQUAREM and L-BFGS reach |grad| <= 1e-6 n (5.5 s, 1.6 s) on the way to infinity.
"""

from __future__ import annotations

import math
import time
from typing import Any, Literal, Mapping

import numpy as np

from .checks import check_int
from .fvbm import (
    DECREASE_TOLERANCE,
    FVBM,
    MAX_EXACT_D,
    _check_params,
    check_data,
    compress_rows,
    sweep_records,
)
from .kernels import fvbm_bound as kernels
from .stepping import Record, as_scalar

STATUSES = ("running", "converged", "max_sweeps", "diverged")
BOUND_LABEL = "Bound (Jebara–Choromanska)"
SQUAREM_LABEL = "Bound + SQUAREM"
LBFGS_LABEL = "L-BFGS"
#: Keep the pair products x_j x_k of the distinct rows when they take at most this many
#: entries (32 MB); beyond, the curvature kernel forms them block by block each time.
MAX_CACHED_PRODUCTS = 2**22


def bound_curvature(u: Any) -> np.ndarray | float:
    """c(u) = tanh(u) / u, the curvature of Algorithm 1's bound on log(2 cosh u) at u.

    Closed form of :func:`boltzlab.engine.bound.compute_bound` on the two states x = +-1 with
    features x a: Sigma = c(a^T theta) a a^T (module docstring).  c(0) = 1.
    """
    u = np.asarray(u, dtype=np.float64)
    out = np.vectorize(kernels.bound_curvature, otypes=[np.float64])(u)
    return float(out) if out.ndim == 0 else out


def curvature_matrix(X: np.ndarray, b: np.ndarray, M: np.ndarray,
                     w: np.ndarray | None = None) -> np.ndarray:
    """Sigma = sum_n w_n sum_i c(u_ni) a_ni a_ni^T in the packed theta = (b, triu(M)) order.

    The Hessian of the quadratic that majorizes -P_n (eq. 2.1) at (b, M); ``w`` weights
    the rows of X (default ones).
    """
    X = check_data(X, "curvature_matrix")
    b, M = _check_params(b, M)
    if b.shape[0] != X.shape[1]:
        raise ValueError(f"The 'b' parameter of curvature_matrix must have length d = {X.shape[1]}. Got {b.shape[0]}.")
    m, d = X.shape
    w = np.ones(m) if w is None else _check_weights(w, m, "curvature_matrix")
    X = np.ascontiguousarray(X)
    U, R, C = np.empty((m, d)), np.empty((m, d)), np.empty((m, d))
    q = d + d * (d - 1) // 2
    grad = np.empty(q)
    kernels.log_pl_and_gradient(X, np.ascontiguousarray(X.T), w, b, M, U, R, C, grad)
    Sigma = np.empty((q, q))
    kernels.bound_curvature_matrix(X, C, _products(X), kernels.parameter_index(d), Sigma)
    return Sigma


def _products(X: np.ndarray) -> np.ndarray:
    """The cached pair products of X, or an empty array if they would be too large."""
    m, d = X.shape
    width = d + d * (d - 1) // 2
    if m * width <= MAX_CACHED_PRODUCTS:
        return kernels.pair_products(X)
    return np.empty((0, width))


def _check_weights(w: Any, m: int, owner: str) -> np.ndarray:
    w = np.asarray(w, dtype=np.float64)
    if w.shape != (m,) or not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError(f"The 'w' parameter of {owner} must be a finite array of shape ({m},) with values >= 0. Got shape {w.shape}.")
    return w


class _MPLETrainer:
    """Shared machinery: validation, start, Records, stopping rule, checkpoints."""

    owner = "_MPLETrainer"
    label = ""  # overridden
    #: True if the objective provably never decreases (the FVBM lab flags decreases of such
    #: trainers as failures, and those of others as allowed).
    monotone_guaranteed = True

    def __init__(
        self,
        X: np.ndarray,
        *,
        tol: float = 1e-5,
        max_sweeps: int = 100_000,
        init: Literal["zeros", "random"] = "zeros",
        seed: int = 0,
        truth: FVBM | None = None,
        exact_every: int = 0,
        grad_tol: float = 0.0,
        init_params: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        owner = self.owner
        self.X = check_data(X, owner)
        self.n, self.d = self.X.shape
        for name, value in (("tol", tol), ("grad_tol", grad_tol)):
            if isinstance(value, bool) or not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"The '{name}' parameter of {owner} must be a float >= 0. Got {value!r}.")
        if init not in ("zeros", "random"):
            raise ValueError(f"The 'init' parameter of {owner} must be 'zeros' or 'random'. Got {init!r}.")
        self.max_sweeps = check_int("max_sweeps", max_sweeps, owner, minimum=1)
        self.exact_every = check_int("exact_every", exact_every, owner, minimum=0)
        if self.exact_every and self.d > MAX_EXACT_D:
            raise ValueError(f"The 'exact_every' parameter of {owner} needs d <= {MAX_EXACT_D}. Got d = {self.d}.")
        if truth is not None and truth.d != self.d:
            raise ValueError(f"The 'truth' parameter of {owner} must have d = {self.d}. Got d = {truth.d}.")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise ValueError(f"The 'seed' parameter of {owner} must be an int. Got {seed!r}.")
        self.tol = float(tol)
        self.grad_tol = float(grad_tol)
        self.init = init
        self.seed = int(seed)
        self.truth = truth
        XT, self._w = compress_rows(self.X)
        self._XT = XT
        self._Xr = np.ascontiguousarray(XT.T)
        self._P = _products(self._Xr)
        m = self._Xr.shape[0]
        self.q = self.d + self.d * (self.d - 1) // 2
        self._pidx = kernels.parameter_index(self.d)
        self._U = np.empty((m, self.d))
        self._R = np.empty((m, self.d))
        self._C = np.empty((m, self.d))
        self._grad = np.empty(self.q)
        if init_params is not None:
            try:
                b0, M0 = init_params
            except (TypeError, ValueError):
                raise ValueError(f"The 'init_params' parameter of {owner} must be a pair (b, M). Got {type(init_params).__name__}.") from None
            b0, M0 = _check_params(b0, M0)
            if b0.shape[0] != self.d:
                raise ValueError(f"The 'init_params' parameter of {owner} must have b of length d = {self.d}. Got {b0.shape[0]}.")
            start = FVBM(b0, M0)
        elif init == "random":
            start = FVBM.random(self.d, self.seed)
        else:
            start = FVBM(np.zeros(self.d), np.zeros((self.d, self.d)))
        self._reset_memory()
        self._set_state(start.b, start.M, sweep=0, elapsed=0.0, first_decrease=-1, status="running", message="")

    # -- state
    def _reset_memory(self) -> None:
        """Method-specific state beyond (b, M) (L-BFGS: its pairs)."""

    def _set_state(self, b, M, *, sweep, elapsed, first_decrease, status, message) -> None:
        self._b = np.array(b, dtype=np.float64)
        self._M = np.array(M, dtype=np.float64)
        self.sweep = int(sweep)
        self.elapsed = float(elapsed)
        self.first_decrease = int(first_decrease)
        self.status = str(status)
        self.message = str(message)
        self.log_pl = float(kernels.log_pl_and_gradient(
            self._Xr, self._XT, self._w, self._b, self._M, self._U, self._R, self._C, self._grad))
        self.grad_norm = float(np.linalg.norm(self._grad))

    @property
    def b(self) -> np.ndarray:
        return self._b.copy()

    @property
    def M(self) -> np.ndarray:
        return self._M.copy()

    @property
    def gradient(self) -> np.ndarray:
        """grad P_n at the current theta, packed as (b, upper triangle of M)."""
        return self._grad.copy()

    @property
    def done(self) -> bool:
        return self.status != "running"

    # -- stepping
    def step(self) -> Record:
        """One iteration; see :meth:`steps`."""
        return self.steps(1)[0]

    def _run(self, k: int, out_log_pl: np.ndarray, out_grad: np.ndarray, out_evals: np.ndarray) -> int:
        raise NotImplementedError

    def steps(self, k: int) -> list[Record]:
        """Up to k iterations in one call into numba (fewer if a stopping rule fires).

        Every iteration gets a Record of scalars (the keys of FVBMTrainer's, ``sweep``
        counting iterations, plus ``grad_norm`` and ``evaluations``); the last also
        carries b and M, the parameter MSE and, when due, the exact log-likelihood.
        Stopping: |increase| < tol (tol > 0), |grad P_n| <= grad_tol * n (grad_tol > 0),
        max_sweeps, or non-finite parameters (diverged).
        """
        if self.done:
            raise RuntimeError(f"This trainer is done ({self.status}); reset it to train again.")
        k = max(1, min(int(k), self.max_sweeps - self.sweep))
        out_log_pl, out_grad, out_evals = np.empty(k), np.empty(k), np.ones(k, dtype=np.int64)
        t0 = time.perf_counter()
        ran = self._run(k, out_log_pl, out_grad, out_evals)
        wall = (time.perf_counter() - t0) / ran
        grad_stop = self.grad_tol * self.n
        records = []
        for s in range(ran):
            previous, current = self.log_pl, float(out_log_pl[s])
            self.sweep += 1
            self.elapsed += wall
            increase = current - previous
            if self.first_decrease < 0 and increase < -DECREASE_TOLERANCE * max(1.0, abs(previous)):
                self.first_decrease = self.sweep
            self.log_pl = current
            self.grad_norm = float(out_grad[s])
            finite = math.isfinite(current) and np.all(np.isfinite(self._M)) and np.all(np.isfinite(self._b))
            if not finite:
                self.status = "diverged"
                self.message = f"{self.label} diverged at iteration {self.sweep}: the parameters are no longer finite."
            elif out_evals[s] < 0:
                self.status = "converged"
                self.message = (f"Converged after {self.sweep} iterations: the line search finds no "
                                f"further increase (|grad| = {self.grad_norm:.2e}).")
            elif self.tol > 0 and abs(increase) < self.tol:
                self.status = "converged"
                self.message = f"Converged after {self.sweep} iterations: the increase {increase:.2e} < τ = {self.tol:g}."
            elif self.grad_tol > 0 and self.grad_norm <= grad_stop:
                self.status = "converged"
                self.message = f"Converged after {self.sweep} iterations: |grad| = {self.grad_norm:.2e} <= {self.grad_tol:g} n."
            elif self.sweep >= self.max_sweeps:
                self.status = "max_sweeps"
                self.message = f"Stopped at the maximum of {self.max_sweeps} iterations (last increase {increase:.2e})."
            records.append({
                "sweep": self.sweep,
                "log_pl": current,
                "increase": increase,
                "wall_time": wall,
                "elapsed": self.elapsed,
                "monotone": self.first_decrease < 0,
                "first_decrease": self.first_decrease,
                "grad_norm": self.grad_norm,
                "evaluations": int(abs(out_evals[s])),
            })
            if self.done:
                break
        return sweep_records(self, records)

    def run(self) -> list[Record]:
        """Iterate until done; the Records of every iteration."""
        records: list[Record] = []
        while not self.done:
            records.extend(self.steps(64))
        return records

    # -- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """b, M, counters, settings (and L-BFGS's memory): restores bit-exactly."""
        return {
            "b": self._b.copy(), "M": self._M.copy(), "sweep": self.sweep, "elapsed": self.elapsed,
            "log_pl": self.log_pl, "first_decrease": self.first_decrease, "status": self.status,
            "message": self.message, "tol": self.tol, "grad_tol": self.grad_tol, "n": self.n, "d": self.d,
            "method": type(self).__name__,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output, validated against this trainer's data."""
        required = ("b", "M", "sweep", "elapsed", "first_decrease", "status", "message")
        missing = [key for key in required if key not in state]
        if missing:
            raise ValueError(f"The checkpoint lacks the entries {missing} of a {type(self).__name__}.")
        if "method" in state and as_scalar(state["method"]) != type(self).__name__:
            raise ValueError(f"The checkpoint was made by {as_scalar(state['method'])}, not {type(self).__name__}.")
        for key in ("n", "d"):
            if key in state and as_scalar(state[key]) != getattr(self, key):
                raise ValueError(f"The checkpoint was made with {key} = {as_scalar(state[key])}, but the data has {key} = {getattr(self, key)}.")
        b, M = _check_params(state["b"], state["M"])
        if b.shape[0] != self.d:
            raise ValueError(f"The checkpoint's 'b' has length {b.shape[0]}; the data has d = {self.d}.")
        status = str(as_scalar(state["status"]))
        if status not in STATUSES:
            raise ValueError(f"The checkpoint's 'status' must be a trainer status. Got {status!r}.")
        self._load_memory(state)
        self._set_state(b, M, sweep=as_scalar(state["sweep"]), elapsed=as_scalar(state["elapsed"]),
                        first_decrease=as_scalar(state["first_decrease"]), status=status,
                        message=as_scalar(state["message"]))

    def _load_memory(self, state: Mapping[str, Any]) -> None:
        """Method-specific state (L-BFGS)."""


class BoundMPLETrainer(_MPLETrainer):
    """MPLE by majorization-minimization with Algorithm 1's quadratic bound on each term.

    ``step()`` is one update theta <- theta + Sigma^{-1} grad P_n (module docstring): the
    maximizer of the quadratic minorizer of eq. 2.1 that touches it at the current theta,
    so P_n never decreases.

    Parameters
    ----------
    X : (n, d) array of +-1
    tol : stop once |P_n(theta^(s+1)) - P_n(theta^(s))| < tol; 0 never
    max_sweeps : at most this many iterations
    init : "zeros" or "random" (b, upper M ~ N(0, 0.5) from ``seed``, as FVBMTrainer)
    seed : seed of the random start
    truth : the generating FVBM, if known: records carry the parameter MSE
    exact_every : at the first iteration, every this many and when done, add the exact log-likelihood
    grad_tol : stop once |grad P_n| <= grad_tol * n; 0 never
    init_params : (b, M) to start from instead of ``init``
    accelerate : if True, ``step()`` is one SQUAREM cycle instead (two majorizations and
        an extrapolation kept only if it is better: still monotone; Varadhan & Roland
        2008), typically an order of magnitude fewer majorizations to the MPLE.
    """

    owner = "BoundMPLETrainer"
    monotone_guaranteed = True

    def __init__(self, X: np.ndarray, *, accelerate: bool = False, **kwargs: Any) -> None:
        if not isinstance(accelerate, (bool, np.bool_)):
            raise ValueError(f"The 'accelerate' parameter of {self.owner} must be a bool. Got {accelerate!r}.")
        self.accelerate = bool(accelerate)
        super().__init__(X, **kwargs)

    @property
    def label(self) -> str:
        return SQUAREM_LABEL if self.accelerate else BOUND_LABEL

    def _reset_memory(self) -> None:
        self._Sigma = np.empty((self.q, self.q))
        self._delta = np.empty(self.q)

    def curvature(self) -> np.ndarray:
        """Sigma at the current theta (the majorizer's Hessian), (q, q)."""
        kernels.bound_curvature_matrix(self._Xr, self._C, self._P, self._pidx, self._Sigma)
        return self._Sigma.copy()

    def _run(self, k, out_log_pl, out_grad, out_evals) -> int:
        args = (self._Xr, self._XT, self._P, self._w, self._pidx, self._b, self._M, self._U, self._R, self._C,
                self._grad, self._Sigma, self._delta, self.log_pl, k, self.tol, self.grad_tol * self.n,
                out_log_pl, out_grad)
        if self.accelerate:
            return kernels.squarem_steps(*args, out_evals)
        return kernels.bound_mm_steps(*args)


class LBFGSMPLETrainer(_MPLETrainer):
    """MPLE by L-BFGS on -P_n: a fast reference without a majorization guarantee.

    ``step()`` is one iteration: the two-loop recursion over the ``memory`` newest pairs
    (H_0 = (s^T y / y^T y) I; before any pair, a unit-length steepest-ascent step), then
    Armijo backtracking (c1 = 1e-4, halving from t = 1).  Parameters as
    :class:`BoundMPLETrainer`, plus ``memory`` (int >= 1, default 10).  Records also carry
    ``evaluations``: eq. 2.1 evaluations this iteration (line-search trials).
    """

    owner = "LBFGSMPLETrainer"
    label = LBFGS_LABEL
    monotone_guaranteed = False

    def __init__(self, X: np.ndarray, *, memory: int = 10, **kwargs: Any) -> None:
        self.memory = check_int("memory", memory, self.owner, minimum=1)
        super().__init__(X, **kwargs)
        self._mem_state[2] = 1.0 / max(self.grad_norm, 1e-300)  # no pairs yet: a unit-length first step

    def _reset_memory(self) -> None:
        self._S = np.zeros((self.memory, self.q))
        self._Y = np.zeros((self.memory, self.q))
        self._rho = np.zeros(self.memory)
        self._mem_state = np.array([self.memory - 1.0, 0.0, 0.0, 0.0])  # head, count, gamma, last step


    def _run(self, k, out_log_pl, out_grad, out_evals) -> int:
        return kernels.lbfgs_steps(
            self._Xr, self._XT, self._w, self._pidx, self._b, self._M, self._U, self._R, self._C, self._grad,
            self._S, self._Y, self._rho, self._mem_state, self.log_pl, k, self.tol, self.grad_tol * self.n,
            out_log_pl, out_grad, out_evals,
        )

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update({"lbfgs_s": self._S.copy(), "lbfgs_y": self._Y.copy(), "lbfgs_rho": self._rho.copy(),
                      "lbfgs_state": self._mem_state.copy(), "memory": self.memory})
        return state

    def _load_memory(self, state: Mapping[str, Any]) -> None:
        keys = ("lbfgs_s", "lbfgs_y", "lbfgs_rho", "lbfgs_state")
        missing = [key for key in keys if key not in state]
        if missing:
            raise ValueError(f"The checkpoint lacks the entries {missing} of an LBFGSMPLETrainer.")
        S = np.asarray(state["lbfgs_s"], dtype=np.float64)
        Y = np.asarray(state["lbfgs_y"], dtype=np.float64)
        rho = np.asarray(state["lbfgs_rho"], dtype=np.float64)
        mem = np.asarray(state["lbfgs_state"], dtype=np.float64)
        shape = (self.memory, self.q)
        if S.shape != shape or Y.shape != shape or rho.shape != (self.memory,) or mem.shape != (4,):
            raise ValueError(f"The checkpoint's L-BFGS memory must have shapes {shape}, {shape}, ({self.memory},), (4,) "
                             f"(memory = {self.memory}, q = {self.q}).")
        if not all(np.all(np.isfinite(a)) for a in (S, Y, rho, mem)):
            raise ValueError("The checkpoint's L-BFGS memory must be finite.")
        self._S, self._Y, self._rho, self._mem_state = S.copy(), Y.copy(), rho.copy(), mem.copy()


def warm_up_fvbm_bound() -> None:
    """Compile (or load from numba's cache) the kernels on a tiny problem."""
    X = FVBM.random(3, 0).sample(16, 1)
    BoundMPLETrainer(X, tol=0, max_sweeps=2).run()
    BoundMPLETrainer(X, tol=0, max_sweeps=2, accelerate=True).run()
    LBFGSMPLETrainer(X, tol=0, max_sweeps=2).run()


# ------------------------------------------------------------------ measured race


def race_to_mple(X: np.ndarray, *, grad_tol: float = 1e-6, mus: tuple[float, ...] = (0.5, 2.5, 8.0),
                 max_seconds: float = 60.0, max_sweeps: int = 10**9) -> list[dict]:
    """Time BSLM, GA (each mu), the bound MM (plain and SQUAREM) and L-BFGS from theta = 0
    until |grad P_n| <= grad_tol * n (or ``max_seconds`` of stepping, or ``max_sweeps``
    iterations: with ``max_seconds=math.inf`` the outcome no longer depends on the machine's load).

    Only the calls to ``steps`` are timed; the gradient check after each iteration is
    not.  Rows: method, iterations, seconds, log_pl, grad_norm, reached, monotone.
    """
    from .fvbm import FVBMTrainer, log_pl_gradient, pack_theta

    X = check_data(X, "race_to_mple")
    max_sweeps = check_int("max_sweeps", max_sweeps, "race_to_mple", minimum=1)
    n = X.shape[0]
    stop = grad_tol * n
    rows = []

    def measure(trainer, gradient):
        start = trainer.state_dict()
        trainer.steps(1)  # compile / load the kernels; restart below
        trainer.load_state_dict(start)
        seconds, reached, g = 0.0, False, gradient(trainer)
        while seconds < max_seconds and not trainer.done:
            t0 = time.perf_counter()
            trainer.steps(1)
            seconds += time.perf_counter() - t0
            g = gradient(trainer)
            if not np.isfinite(g) or g <= stop:
                reached = bool(np.isfinite(g))
                break
        rows.append({"method": trainer.label, "iterations": trainer.sweep, "seconds": seconds,
                     "log_pl": trainer.log_pl, "grad_norm": g, "reached": reached,
                     "monotone": trainer.first_decrease < 0})

    def fvbm_gradient(tr):
        gb, gM = log_pl_gradient(tr._XT.T, tr._b, tr._M, tr._w)
        return float(np.linalg.norm(pack_theta(gb, gM)))

    for algorithm, mu in [("bslm", 1.0)] + [("ga", m) for m in mus]:
        trainer = FVBMTrainer(X, algorithm=algorithm, mu=mu, tol=0, max_sweeps=max_sweeps)
        measure(trainer, fvbm_gradient)
    for trainer in (BoundMPLETrainer(X, tol=0, max_sweeps=max_sweeps),
                    BoundMPLETrainer(X, tol=0, max_sweeps=max_sweeps, accelerate=True),
                    LBFGSMPLETrainer(X, tol=0, max_sweeps=max_sweeps)):
        measure(trainer, lambda tr: tr.grad_norm)
    return rows


def format_race(rows: list[dict]) -> str:
    """The race as an aligned text table."""
    head = f"{'method':<28} {'iterations':>10} {'seconds':>8} {'log-PL':>16} {'|grad|':>9} {'reached':>7} {'monotone':>8}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['method']:<28} {r['iterations']:>10} {r['seconds']:>8.2f} {r['log_pl']:>16.6f} "
                     f"{r['grad_norm']:>9.2e} {'yes' if r['reached'] else 'no':>7} {'yes' if r['monotone'] else 'NO':>8}")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m boltzlab.engine.fvbm_bound [d n seed variance max_seconds]
    import sys

    from .data import simulate_fvbm

    d, n, seed = (int(a) for a in (sys.argv[1:4] if len(sys.argv) > 3 else (20, 16000, 4)))
    variance = float(sys.argv[4]) if len(sys.argv) > 4 else 0.2
    max_seconds = float(sys.argv[5]) if len(sys.argv) > 5 else 60.0
    data = simulate_fvbm(d, n, seed, variance)
    print(f"{data.name}, variance {variance}: {len(np.unique(data.X, axis=0))} distinct rows; "
          f"until |grad P_n| <= 1e-6 n = {1e-6 * n:g} (at most {max_seconds:g} s each)")
    print(format_race(race_to_mple(data.X, max_seconds=max_seconds)))
