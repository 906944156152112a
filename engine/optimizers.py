"""Step-wise baseline optimizers for the bound-majorization race (Jebara & Choromanska 2012, §7).

Table 1 of the paper races the bound (Algorithm 2) against L-BFGS, steepest descent (SD) and
conjugate gradient (CG), and the supplement's Table 3 adds Newton-Raphson.  Here every method
is a Trainer (docs/architecture.md, "The Trainer protocol") on the same *minimisation* problem

    J(theta) = sum_j [log Z_{x_j}(theta) - theta^T f_{x_j}(y_j)] + (t lambda / 2) |theta|^2,

the negative of the paper's eq. (1), given by an :class:`Objective`.  Each ``step()`` is one
outer iteration (one search direction and its line search; one bound update for the
majorizer), and every Trainer reports the same Record keys:

scalars ``iteration``, ``objective`` (J after the step), ``grad_norm`` (|grad J| after the
step), ``wall_time`` (seconds of this step), ``elapsed`` (seconds so far), ``monotone`` (J has
not increased by more than 1e-12 max(1, |J|) at any step so far), ``increase`` (J_new -
J_old), ``step_norm`` (|theta_new - theta_old|), ``evaluations`` (objective evaluations so
far); array ``theta``.

The stopping rule is shared: ``grad_norm <= tol`` (status "converged"), or ``max_iter``
iterations (status "max_iter").  A line search that finds no step lowering J, or
:data:`STALL_ITERATIONS` iterations in a row without a decrease (the iterate is at the
objective's rounding level, so tol is out of reach), end the run with status "stalled";
non-finite values end it with "diverged".

* :class:`LBFGSTrainer` -- limited-memory BFGS, two-loop recursion, memory 10.
* :class:`ConjugateGradientTrainer` -- nonlinear CG, Polak-Ribiere+ with restarts.
* :class:`SteepestDescentTrainer` -- -grad J with a line search.
* :class:`NewtonTrainer` -- exact Hessian, Cholesky with a diagonal shift if not PD.
* :func:`scipy_reference` -- J* by scipy's L-BFGS-B with tight tolerances.
* :func:`iterations_to_epsilon` -- Table 1's "iterations / seconds to within epsilon of J*".

The line search is scipy's strong-Wolfe search (:func:`scipy.optimize.line_search`) with an
Armijo backtracking fallback when it fails.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any, Mapping, NamedTuple, Protocol, Sequence, runtime_checkable

import numpy as np
import scipy.linalg
import scipy.optimize

from .checks import check_int
from .stepping import Record, as_scalar

#: J may rise by this much, relative to max(1, |J|), before a step counts as an increase.
MONOTONE_RTOL = 1e-12
#: Table 1's epsilon (§7: "within epsilon of the LBFGS solution (where epsilon = 1e-4)").
TABLE1_EPSILON = 1e-4
#: Armijo constant of every line search.
ARMIJO_C1 = 1e-4
STATUSES = ("running", "converged", "max_iter", "stalled", "diverged")
#: Consecutive iterations without any decrease of J after which a run is "stalled": the
#: iterate sits at J's rounding level and the gradient cannot be pushed below ``tol``.
STALL_ITERATIONS = 20


@runtime_checkable
class Objective(Protocol):
    """What the trainers need from a problem (see :mod:`boltzlab.engine.majorize`)."""

    dim: int
    name: str

    def value(self, theta: np.ndarray) -> float: ...

    def gradient(self, theta: np.ndarray) -> np.ndarray: ...

    def value_and_gradient(self, theta: np.ndarray) -> tuple[float, np.ndarray]: ...

    def hessian(self, theta: np.ndarray) -> np.ndarray: ...


# ----------------------------------------------------------------------- validation


def check_float(name: str, value: Any, owner: str, minimum: float = 0.0, strict: bool = False) -> float:
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if ok:
        value = float(value)
        ok = math.isfinite(value) and (value > minimum if strict else value >= minimum)
    if not ok:
        op = ">" if strict else ">="
        raise ValueError(f"The '{name}' parameter of {owner} must be a finite float {op} {minimum:g}. Got {value!r}.")
    return value


def check_objective(objective: Any, owner: str) -> Objective:
    needed = ("dim", "value", "gradient", "value_and_gradient")
    if not all(hasattr(objective, a) for a in needed):
        raise ValueError(f"The 'objective' parameter of {owner} must provide {', '.join(needed)} "
                         f"(e.g. engine.majorize.MultinomialLogistic). Got {type(objective).__name__}.")
    return objective


def check_theta0(theta0: Any, dim: int, owner: str) -> np.ndarray:
    if theta0 is None:
        return np.zeros(dim)
    arr = np.asarray(theta0, dtype=np.float64)
    if arr.shape != (dim,):
        raise ValueError(f"The 'theta0' parameter of {owner} must have shape ({dim},). Got shape {arr.shape}.")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"The 'theta0' parameter of {owner} must be finite. Got NaN or inf.")
    return arr.copy()


# ---------------------------------------------------------------------- line search


class _Evaluator:
    """value_and_gradient with a one-point cache and a counter (line searches ask for f and
    f' at the same point separately)."""

    def __init__(self, objective: Objective) -> None:
        self.objective = objective
        self.count = 0
        self._key: bytes | None = None
        self._val: tuple[float, np.ndarray] | None = None

    def __call__(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        key = np.ascontiguousarray(theta, dtype=np.float64).tobytes()
        if key != self._key:
            self.count += 1
            try:
                value, grad = self.objective.value_and_gradient(theta)
            except (ValueError, FloatingPointError, OverflowError):
                value, grad = math.inf, np.full(theta.shape, np.nan)
            self._key, self._val = key, (float(value), np.asarray(grad, dtype=np.float64))
        return self._val

    def f(self, theta: np.ndarray) -> float:
        return self(theta)[0]

    def g(self, theta: np.ndarray) -> np.ndarray:
        return self(theta)[1]


def backtracking(evaluate: _Evaluator, theta: np.ndarray, value: float, grad: np.ndarray,
                 direction: np.ndarray, alpha0: float = 1.0, shrink: float = 0.5,
                 max_halvings: int = 60) -> tuple[float | None, float, np.ndarray]:
    """Armijo backtracking: the largest alpha0 shrink^i with J(theta + alpha p) <= J + c1 alpha g^T p.

    Returns (alpha, J_new, grad_new), alpha None when no step of the search decreases J.
    """
    slope = float(grad @ direction)
    alpha = alpha0
    for _ in range(max_halvings):
        new_value, new_grad = evaluate(theta + alpha * direction)
        if math.isfinite(new_value) and new_value <= value + ARMIJO_C1 * alpha * slope:
            return alpha, new_value, new_grad
        alpha *= shrink
    return None, value, grad


def wolfe_search(evaluate: _Evaluator, theta: np.ndarray, value: float, grad: np.ndarray,
                 direction: np.ndarray, old_value: float | None, c2: float,
                 alpha0: float = 1.0) -> tuple[float | None, float, np.ndarray]:
    """Strong-Wolfe line search (scipy.optimize.line_search), Armijo backtracking if it fails.

    Returns (alpha, J_new, grad_new); alpha None when neither search finds a decrease.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            alpha, _, _, new_value, _, _ = scipy.optimize.line_search(
                evaluate.f, evaluate.g, theta, direction, grad, value, old_value,
                c1=ARMIJO_C1, c2=c2, maxiter=20,
            )
    if alpha is not None and new_value is not None and math.isfinite(new_value) and new_value <= value:
        new_value, new_grad = evaluate(theta + alpha * direction)
        return float(alpha), new_value, new_grad
    return backtracking(evaluate, theta, value, grad, direction, alpha0=alpha0)


# ------------------------------------------------------------------------- trainers


class IterativeTrainer:
    """Shared machinery: state, stopping rule, Records, checkpoints.  Subclasses implement
    :meth:`_update` (one outer iteration) and, if they keep memory, :meth:`_extra_state` /
    :meth:`_load_extra_state`."""

    label = "iterative"

    def __init__(self, objective: Objective, *, max_iter: int = 1000, tol: float = 1e-6,
                 theta0: Any = None) -> None:
        owner = type(self).__name__
        self.objective = check_objective(objective, owner)
        self.dim = int(objective.dim)
        self.max_iter = check_int("max_iter", max_iter, owner, 1)
        self.tol = check_float("tol", tol, owner, 0.0)
        self.theta0 = check_theta0(theta0, self.dim, owner)
        self._evaluate = _Evaluator(objective)
        value, grad = self._evaluate(self.theta0)
        if not (math.isfinite(value) and np.all(np.isfinite(grad))):
            raise ValueError(f"The 'theta0' parameter of {owner} gives a non-finite objective ({value!r}).")
        self.theta = self.theta0.copy()
        self.value = value
        self.grad = grad.copy()
        self.previous_value: float | None = None
        self.iteration = 0
        self.elapsed = 0.0
        self.first_increase = -1
        self.no_decrease = 0
        self.status = "running"
        self.message = ""
        self._reset_memory()
        if self.grad_norm <= self.tol:
            self.status = "converged"
            self.message = f"theta0 already satisfies |grad J| = {self.grad_norm:.3g} <= tol = {self.tol:g}."

    # -- subclass hooks
    def _reset_memory(self) -> None:
        pass

    def _update(self) -> tuple[np.ndarray, float, np.ndarray] | None:
        """One outer iteration from (theta, value, grad): (theta_new, J_new, grad_new), or
        None when no decrease can be found."""
        raise NotImplementedError

    def _extra_state(self) -> dict[str, Any]:
        return {}

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        pass

    # -- protocol
    @property
    def grad_norm(self) -> float:
        return float(np.linalg.norm(self.grad))

    @property
    def done(self) -> bool:
        return self.status != "running"

    @property
    def monotone(self) -> bool:
        return self.first_increase < 0

    @property
    def evaluations(self) -> int:
        return self._evaluate.count

    def step(self) -> Record:
        """One outer iteration; see the module docstring for the Record's keys."""
        if self.done:
            raise RuntimeError(f"This trainer is done ({self.status}); reset it to train again.")
        t0 = time.perf_counter()
        old_theta, old_value = self.theta, self.value
        with np.errstate(over="ignore", invalid="ignore"):
            result = self._update()
        wall = time.perf_counter() - t0
        self.iteration += 1
        self.elapsed += wall
        if result is None:
            new_theta, new_value, new_grad = old_theta, old_value, self.grad
            self.status = "stalled"
            self.message = (f"{self.label} stalled at iteration {self.iteration}: no step lowers J "
                            f"(|grad J| = {self.grad_norm:.3g} > tol = {self.tol:g}; J is at its rounding level).")
        else:
            new_theta, new_value, new_grad = result
        increase = new_value - old_value
        if self.first_increase < 0 and increase > MONOTONE_RTOL * max(1.0, abs(old_value)):
            self.first_increase = self.iteration
        self.no_decrease = self.no_decrease + 1 if increase >= 0.0 else 0
        step_norm = float(np.linalg.norm(new_theta - old_theta))
        self.previous_value = old_value
        self.theta, self.value, self.grad = np.array(new_theta, dtype=np.float64), float(new_value), np.array(new_grad)
        if self.status == "running":
            if not (math.isfinite(self.value) and np.all(np.isfinite(self.theta)) and np.all(np.isfinite(self.grad))):
                self.status = "diverged"
                self.message = f"{self.label} diverged at iteration {self.iteration}: J or theta is no longer finite."
            elif self.grad_norm <= self.tol:
                self.status = "converged"
                self.message = (f"{self.label} converged after {self.iteration} iterations: "
                                f"|grad J| = {self.grad_norm:.3g} <= tol = {self.tol:g}.")
            elif self.no_decrease >= STALL_ITERATIONS:
                self.status = "stalled"
                self.message = (f"{self.label} stalled at iteration {self.iteration}: J has not decreased for "
                                f"{self.no_decrease} iterations (|grad J| = {self.grad_norm:.3g} > tol = {self.tol:g}; "
                                f"J is at its rounding level).")
            elif self.iteration >= self.max_iter:
                self.status = "max_iter"
                self.message = (f"{self.label} stopped at the maximum of {self.max_iter} iterations "
                                f"(|grad J| = {self.grad_norm:.3g}).")
        scalars = {
            "iteration": self.iteration,
            "objective": self.value,
            "grad_norm": self.grad_norm,
            "wall_time": wall,
            "elapsed": self.elapsed,
            "monotone": self.monotone,
            "increase": float(increase),
            "step_norm": step_norm,
            "evaluations": self.evaluations,
        }
        return Record(scalars, {"theta": self.theta.copy()})

    def steps(self, k: int) -> list[Record]:
        """Up to k steps (fewer once done): a runner can batch fast steps into one call."""
        records = []
        for _ in range(max(1, int(k))):
            if self.done:
                break
            records.append(self.step())
        return records

    def run(self) -> list[Record]:
        """Step until done; the Records of every step."""
        records = []
        while not self.done:
            records.append(self.step())
        return records

    def initial_record(self) -> Record:
        """A Record for theta0 (iteration 0, no time spent), to start a curve at J(theta0)."""
        value, grad = self.objective.value_and_gradient(self.theta0)
        scalars = {"iteration": 0, "objective": float(value), "grad_norm": float(np.linalg.norm(grad)),
                   "wall_time": 0.0, "elapsed": 0.0, "monotone": True, "increase": 0.0, "step_norm": 0.0,
                   "evaluations": 0}
        return Record(scalars, {"theta": self.theta0.copy()})

    # -- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """theta, J, grad, counters, settings and the method's memory: restores bit-exactly."""
        state = {
            "method": self.label, "dim": self.dim, "theta": self.theta.copy(), "value": self.value,
            "grad": self.grad.copy(), "iteration": self.iteration, "elapsed": self.elapsed,
            "first_increase": self.first_increase, "no_decrease": self.no_decrease,
            "status": self.status, "message": self.message,
            "evaluations": self._evaluate.count, "max_iter": self.max_iter, "tol": self.tol,
            "previous_value": math.nan if self.previous_value is None else self.previous_value,
        }
        state.update(self._extra_state())
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output, validated against this trainer's objective."""
        required = ("theta", "value", "grad", "iteration", "elapsed", "first_increase", "status", "message")
        missing = [key for key in required if key not in state]
        if missing:
            raise ValueError(f"The checkpoint lacks the entries {missing} of a {type(self).__name__}.")
        if "method" in state and str(as_scalar(state["method"])) != self.label:
            raise ValueError(f"The checkpoint is of the method {as_scalar(state['method'])!r}, not {self.label!r}.")
        theta = np.asarray(state["theta"], dtype=np.float64)
        grad = np.asarray(state["grad"], dtype=np.float64)
        if theta.shape != (self.dim,) or grad.shape != (self.dim,):
            raise ValueError(f"The checkpoint's 'theta' and 'grad' must have shape ({self.dim},). Got {theta.shape} and {grad.shape}.")
        status = str(as_scalar(state["status"]))
        if status not in STATUSES:
            raise ValueError(f"The checkpoint's 'status' must be one of {STATUSES}. Got {status!r}.")
        self._reset_memory()
        self._load_extra_state(state)
        self.theta, self.grad = theta.copy(), grad.copy()
        self.value = float(as_scalar(state["value"]))
        self.iteration = int(as_scalar(state["iteration"]))
        self.elapsed = float(as_scalar(state["elapsed"]))
        self.first_increase = int(as_scalar(state["first_increase"]))
        self.no_decrease = int(as_scalar(state.get("no_decrease", 0)))
        self.status, self.message = status, str(as_scalar(state["message"]))
        previous = float(as_scalar(state.get("previous_value", math.nan)))
        self.previous_value = None if math.isnan(previous) else previous
        if "evaluations" in state:
            self._evaluate.count = int(as_scalar(state["evaluations"]))


class SteepestDescentTrainer(IterativeTrainer):
    """Steepest descent: p = -grad J and a strong-Wolfe line search (c2 = 0.9).

    The first trial step is scipy's: 1, then min(1, 2.02 (J_prev - J) / |g^T p|).
    """

    label = "Steepest descent"

    def _update(self):
        p = -self.grad
        alpha, value, grad = wolfe_search(self._evaluate, self.theta, self.value, self.grad, p,
                                          self.previous_value, c2=0.9)
        if alpha is None:
            return None
        return self.theta + alpha * p, value, grad


class ConjugateGradientTrainer(IterativeTrainer):
    """Nonlinear conjugate gradient, Polak-Ribiere+ (beta = max(0, g^T (g - g_old) / |g_old|^2)).

    Restarts with p = -g every ``restart`` iterations (default: dim) and whenever p is not a
    descent direction; strong-Wolfe line search with c2 = 0.1 (CG needs a tight search).
    """

    label = "CG"

    def __init__(self, objective: Objective, *, max_iter: int = 1000, tol: float = 1e-6,
                 theta0: Any = None, restart: int | None = None) -> None:
        super().__init__(objective, max_iter=max_iter, tol=tol, theta0=theta0)
        self.restart = self.dim if restart is None else check_int("restart", restart, type(self).__name__, 1)

    def _reset_memory(self) -> None:
        self._direction = np.zeros(self.dim)
        self._old_grad = np.zeros(self.dim)
        self._since_restart = 0

    def _update(self):
        g = self.grad
        if self._since_restart == 0 or self._since_restart >= self.restart:
            p, self._since_restart = -g, 0
        else:
            beta = max(0.0, float(g @ (g - self._old_grad)) / float(self._old_grad @ self._old_grad))
            p = -g + beta * self._direction
            if float(g @ p) >= 0.0:
                p, self._since_restart = -g, 0
        alpha, value, grad = wolfe_search(self._evaluate, self.theta, self.value, g, p, self.previous_value, c2=0.1)
        if alpha is None and self._since_restart > 0:  # retry along -g
            p, self._since_restart = -g, 0
            alpha, value, grad = wolfe_search(self._evaluate, self.theta, self.value, g, p, self.previous_value, c2=0.1)
        if alpha is None:
            return None
        self._direction, self._old_grad = p, g.copy()
        self._since_restart += 1
        return self.theta + alpha * p, value, grad

    def _extra_state(self):
        return {"cg_direction": self._direction.copy(), "cg_old_grad": self._old_grad.copy(),
                "cg_since_restart": self._since_restart, "cg_restart": self.restart}

    def _load_extra_state(self, state):
        if "cg_direction" in state:
            self._direction = np.array(state["cg_direction"], dtype=np.float64)
            self._old_grad = np.array(state["cg_old_grad"], dtype=np.float64)
            self._since_restart = int(as_scalar(state["cg_since_restart"]))


class LBFGSTrainer(IterativeTrainer):
    """L-BFGS (Nocedal & Wright, Algorithm 7.4): two-loop recursion, ``memory`` pairs (10).

    H_0 = (s^T y / y^T y) I from the newest pair; a pair with s^T y <= 1e-10 |s| |y| is skipped
    (it would break positive definiteness).  Strong-Wolfe line search with c2 = 0.9 from the
    unit step (after the first iteration, whose trial step is 1 / |g|).
    """

    label = "L-BFGS"

    def __init__(self, objective: Objective, *, max_iter: int = 1000, tol: float = 1e-6,
                 theta0: Any = None, memory: int = 10) -> None:
        self.memory = check_int("memory", memory, type(self).__name__, 1)
        super().__init__(objective, max_iter=max_iter, tol=tol, theta0=theta0)

    def _reset_memory(self) -> None:
        self._S = np.zeros((self.memory, self.dim))
        self._Y = np.zeros((self.memory, self.dim))
        self._pairs = 0  # pairs stored, newest at row (_pairs - 1) % memory

    def _direction(self, g: np.ndarray) -> np.ndarray:
        m = min(self._pairs, self.memory)
        if m == 0:
            return -g / max(1.0, float(np.linalg.norm(g)))
        order = [(self._pairs - 1 - i) % self.memory for i in range(m)]  # newest first
        q = g.copy()
        alphas = []
        for i in order:
            rho = 1.0 / float(self._Y[i] @ self._S[i])
            a = rho * float(self._S[i] @ q)
            q -= a * self._Y[i]
            alphas.append((i, rho, a))
        newest = order[0]
        gamma = float(self._S[newest] @ self._Y[newest]) / float(self._Y[newest] @ self._Y[newest])
        r = gamma * q
        for i, rho, a in reversed(alphas):
            b = rho * float(self._Y[i] @ r)
            r += (a - b) * self._S[i]
        return -r

    def _update(self):
        g = self.grad
        p = self._direction(g)
        if float(g @ p) >= 0.0:  # not a descent direction: forget the memory
            self._pairs = 0
            p = self._direction(g)
        alpha, value, grad = wolfe_search(self._evaluate, self.theta, self.value, g, p, None, c2=0.9)
        if alpha is None and self._pairs > 0:
            self._pairs = 0
            p = self._direction(g)
            alpha, value, grad = wolfe_search(self._evaluate, self.theta, self.value, g, p, None, c2=0.9)
        if alpha is None:
            return None
        s = alpha * p
        y = grad - g
        if float(s @ y) > 1e-10 * float(np.linalg.norm(s) * np.linalg.norm(y)):
            row = self._pairs % self.memory
            self._S[row], self._Y[row] = s, y
            self._pairs += 1
        return self.theta + s, value, grad

    def _extra_state(self):
        return {"lbfgs_S": self._S.copy(), "lbfgs_Y": self._Y.copy(), "lbfgs_pairs": self._pairs}

    def _load_extra_state(self, state):
        if "lbfgs_S" in state:
            S = np.array(state["lbfgs_S"], dtype=np.float64)
            if S.shape != self._S.shape:
                raise ValueError(f"The checkpoint's 'lbfgs_S' must have shape {self._S.shape}. Got {S.shape}.")
            self._S, self._Y = S, np.array(state["lbfgs_Y"], dtype=np.float64)
            self._pairs = int(as_scalar(state["lbfgs_pairs"]))


def shifted_cholesky_solve(H: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, float]:
    """x = (H + tau I)^{-1} b with the smallest tau in {0, 1e-10 s, 1e-9 s, ...} (s the
    largest |diagonal|) that makes the Cholesky factorisation succeed.  Returns (x, tau)."""
    scale = max(float(np.max(np.abs(np.diag(H)))), 1e-300)
    tau = 0.0
    eye = np.eye(H.shape[0])
    for _ in range(30):
        try:
            factor = scipy.linalg.cho_factor(H + tau * eye if tau else H, check_finite=False)
            x = scipy.linalg.cho_solve(factor, b, check_finite=False)
            if np.all(np.isfinite(x)):
                return x, tau
        except np.linalg.LinAlgError:
            pass
        tau = 1e-10 * scale if tau == 0.0 else 10.0 * tau
    return np.linalg.lstsq(H, b, rcond=None)[0], math.inf


class NewtonTrainer(IterativeTrainer):
    """Newton-Raphson with the exact Hessian (``objective.hessian``) and a line search.

    p = -(H + tau I)^{-1} g, tau = 0 when H is positive definite (always, for these convex
    objectives with lambda > 0) and otherwise the smallest shift making Cholesky succeed;
    Armijo backtracking from the unit step (the supplement's remark: Newton without a line
    search need not converge).
    """

    label = "Newton"

    def __init__(self, objective: Objective, *, max_iter: int = 1000, tol: float = 1e-6,
                 theta0: Any = None) -> None:
        if not hasattr(objective, "hessian"):
            raise ValueError(f"The 'objective' parameter of NewtonTrainer must provide hessian(theta). "
                             f"Got {type(objective).__name__}.")
        super().__init__(objective, max_iter=max_iter, tol=tol, theta0=theta0)
        self.last_shift = 0.0

    def _update(self):
        H = self.objective.hessian(self.theta)
        p, self.last_shift = shifted_cholesky_solve(H, -self.grad)
        if not float(self.grad @ p) < 0.0:
            p = -self.grad
        alpha, value, grad = backtracking(self._evaluate, self.theta, self.value, self.grad, p)
        if alpha is None:
            return None
        return self.theta + alpha * p, value, grad


# ---------------------------------------------------------------- reference, Table 1


class Reference(NamedTuple):
    """The optimum found by :func:`scipy_reference`."""

    theta: np.ndarray
    value: float
    grad_norm: float
    iterations: int
    seconds: float


def scipy_reference(objective: Objective, tol: float = 1e-10, *, theta0: Any = None,
                    max_iter: int = 20000, newton_polish: int = 3) -> Reference:
    """J* = min J by scipy.optimize.minimize(method="L-BFGS-B", jac=True) with tight tolerances.

    ``tol`` is the projected-gradient tolerance (``gtol``), relative to max(1, |grad J(theta0)|);
    ``ftol`` is at machine precision, so L-BFGS-B runs until the gradient test or rounding stops
    it.  If the objective has a Hessian, up to ``newton_polish`` Newton steps (accepted while they
    lower |grad J| without raising J beyond its rounding level) then remove what L-BFGS-B left (for these strictly convex objectives J* is then
    exact to rounding, so "within epsilon of J*" is not blurred by the reference's own error).
    The paper's reference is its own L-BFGS's termination point instead (§7).
    """
    objective = check_objective(objective, "scipy_reference")
    tol = check_float("tol", tol, "scipy_reference", 0.0, strict=True)
    max_iter = check_int("max_iter", max_iter, "scipy_reference", 1)
    theta = check_theta0(theta0, objective.dim, "scipy_reference")
    t0 = time.perf_counter()
    g0 = np.linalg.norm(objective.gradient(theta))
    result = scipy.optimize.minimize(
        objective.value_and_gradient, theta, jac=True, method="L-BFGS-B",
        options={"maxiter": max_iter, "maxfun": 4 * max_iter, "ftol": 1e-15,
                 "gtol": tol * max(1.0, g0), "maxcor": 20},
    )
    theta = np.asarray(result.x, dtype=np.float64)
    value, grad = objective.value_and_gradient(theta)
    if newton_polish and hasattr(objective, "hessian"):
        for _ in range(newton_polish):
            p, _ = shifted_cholesky_solve(objective.hessian(theta), -grad)
            cand_value, cand_grad = objective.value_and_gradient(theta + p)
            rounding = 1e-12 * max(1.0, abs(value))  # J's own rounding level
            if not (cand_value <= value + rounding and np.linalg.norm(cand_grad) < np.linalg.norm(grad)):
                break
            theta, value, grad = theta + p, cand_value, cand_grad
    return Reference(theta, float(value), float(np.linalg.norm(grad)), int(result.nit), time.perf_counter() - t0)


class EpsilonHit(NamedTuple):
    """When a run first came within epsilon of J*."""

    iterations: int
    seconds: float


def iterations_to_epsilon(records: Sequence[Record], J_star: float, eps: float = TABLE1_EPSILON,
                          *, relative: bool = False, J0: float | None = None) -> EpsilonHit | None:
    """The first (iteration, elapsed seconds) with J - J* <= eps (Table 1), None if never.

    Table 1 counts "iterations required to obtain within epsilon of the LBFGS solution
    (where epsilon = 1e-4)" for J of eq. (1), which is a *sum* over the training pairs, not a
    mean.  By default epsilon is therefore absolute on that summed J.  With ``relative``, the
    test is J - J* <= eps max(1, |J*|).  ``J0`` (J(theta0)) lets a run that starts inside the
    tolerance count as 0 iterations.
    """
    eps = check_float("eps", eps, "iterations_to_epsilon", 0.0, strict=True)
    threshold = eps * max(1.0, abs(J_star)) if relative else eps
    if J0 is not None and J0 - J_star <= threshold:
        return EpsilonHit(0, 0.0)
    for record in records:
        if record["objective"] - J_star <= threshold:
            return EpsilonHit(int(record["iteration"]), float(record["elapsed"]))
    return None
