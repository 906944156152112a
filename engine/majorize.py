"""Bound majorization for CRFs and log-linear models (Jebara & Choromanska 2012, §§2, 3, 5, 6).

The paper maximises the regularised conditional log-likelihood of eq. (1); here every
objective is its negative, to be *minimised*:

    J(theta) = sum_{j=1}^t [log Z_{x_j}(theta) - theta^T f_{x_j}(y_j)] + (t lambda / 2) |theta|^2

with t the number of training pairs and ``reg`` = lambda the paper's regulariser (eq. (1)
writes "- t lambda / 2 |theta|^2", Algorithm 2 adds lambda I per example, i.e. t lambda I in
total, and the supplement initialises Algorithm 4's D to t lambda I).  ``objective.ridge`` is
the total coefficient t lambda.  (h_{x_j}(y_j) = 1 throughout, so the log h term vanishes.)

Every objective offers ``value``, ``gradient``, ``value_and_gradient``, ``hessian`` (exact,
for Newton), ``bound(theta_tilde) -> (Sigma, g)`` and ``dim``.  ``bound`` returns the curvature
Sigma = sum_j Sigma_j of the per-example bounds of Algorithm 1 (Algorithm 3 for chains),
WITHOUT the regulariser, and g = grad J(theta_tilde), so that for every theta (Theorem 1,
summed over j)

    J(theta) <= J(theta_tilde) + g^T (theta - theta_tilde)
                + 1/2 (theta - theta_tilde)^T (Sigma + t lambda I) (theta - theta_tilde).

Its minimiser is Algorithm 2's unconstrained update theta <- theta - (Sigma + t lambda I)^{-1} g,
which :class:`BoundMajorizer` applies once per step.

Objectives
----------
* :class:`MultinomialLogistic` -- f(x, y) = e_y (x) [x, 1] (Omega_j = the classes).
* :class:`FVBMLikelihood` -- exact ML of a fully visible Boltzmann machine: one partition
  function over {-1, 1}^d, so the bound is n times Algorithm 1's.
* :class:`ChainCRF` -- a linear-chain CRF; Algorithm 3 per sequence.
* :meth:`MultinomialLogistic.bound_low_rank` -- Algorithm 4 (§6): one low-rank-plus-diagonal
  curvature for the whole sum, solved by Woodbury.

Races: :func:`make_race` builds the five Trainers of the Bound lab on one problem from the
same theta0 = 0; :func:`race_table` runs them headless and prints a Table-1-style summary
(``python -m boltzlab.engine.majorize --help``).

Readings of the paper
---------------------
* Regulariser.  t is the number of training pairs and lambda the regulariser: eq. (1) has
  - t lambda / 2 |theta|^2 and Algorithm 2 adds lambda I to every Sigma_j (t lambda I in all);
  the supplement starts Algorithm 4's D at t lambda I.  ``reg`` is that lambda; the ridge is
  t lambda.  The regulariser is quadratic, so it is kept exactly in the majorizer.
* Algorithm 3 as printed adds a child's Sigma_{b|w} once per clique configuration w; on a
  chain of length L with k states the leaf's curvature reaches the root k^(L-2) times (trace
  of Sigma / trace of the Hessian about 3800 on 10-step, 3-state chains), and majorization
  stalls.  :class:`ChainCRF` keeps it as ``curvature="printed"`` (its default, equal to
  :func:`boltzlab.engine.bound.chain_bound`) and offers ``curvature="shared"``, a rigorous variant with
  one dominating curvature per clique (linear in L); :func:`make_race` uses "shared".
* Algorithm 4 over a CRF: the printed algorithm loops "For each t { z -> 0+; mu = 0; For each
  y ... }" with ONE (V, S, D) -- every example's rank-one terms go into the same low-rank-plus-
  diagonal matrix; that is what :meth:`MultinomialLogistic.bound_low_rank` does (the sum of
  per-example low-rank bounds would not be low-rank).
* Table 1's epsilon (1e-4 "within epsilon of the LBFGS solution") is read as absolute on the
  summed J of eq. (1) (:func:`boltzlab.engine.optimizers.iterations_to_epsilon`, ``relative=True`` for
  the other reading), and the target is the optimum J* (scipy L-BFGS-B + Newton polish), not
  one L-BFGS run's termination point.
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np
import scipy.special

from .bound import LowRankBound
from .checks import check_int
from .fvbm import FVBM, check_data, pack_theta, states_to_spins, unpack_theta
from .kernels import majorize as kernels
from .optimizers import (
    TABLE1_EPSILON,
    ConjugateGradientTrainer,
    IterativeTrainer,
    LBFGSTrainer,
    NewtonTrainer,
    SteepestDescentTrainer,
    check_float,
    iterations_to_epsilon,
    scipy_reference,
    shifted_cholesky_solve,
)
from .progress import advancer
from .stepping import Record

#: Largest d of FVBMLikelihood (2^16 states: one Algorithm-1 pass ~0.2 s).
MAX_FVBM_D = 16
#: Largest number of labelings ChainCRF.enumerate_sequence builds.
MAX_CHAIN_ENUMERATION = 2**16


# ------------------------------------------------------------------------ helpers


def _check_theta(theta: Any, dim: int, owner: str, name: str = "theta") -> np.ndarray:
    arr = np.asarray(theta, dtype=np.float64)
    if arr.shape != (dim,):
        raise ValueError(f"The '{name}' parameter of {owner} must have shape ({dim},). Got shape {arr.shape}.")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"The '{name}' parameter of {owner} must be finite. Got NaN or inf.")
    return arr


def _check_labels(y: Any, n: int, n_classes: int, owner: str, name: str = "y") -> np.ndarray:
    arr = np.asarray(y)
    if arr.shape != (n,):
        raise ValueError(f"The '{name}' parameter of {owner} must have shape ({n},). Got shape {arr.shape}.")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise ValueError(f"The '{name}' parameter of {owner} must hold integer labels. Got non-integers.")
    elif arr.dtype.kind not in "iub":
        raise ValueError(f"The '{name}' parameter of {owner} must hold integer labels. Got dtype {arr.dtype}.")
    arr = arr.astype(np.int64)
    if n and (arr.min() < 0 or arr.max() >= n_classes):
        raise ValueError(f"The '{name}' parameter of {owner} must hold labels in [0, {n_classes - 1}]. "
                         f"Got values in [{arr.min()}, {arr.max()}].")
    return arr


class KroneckerCurvature:
    """sum_j C_j (x) x_j x_j^T for fixed inputs X (t, P) and symmetric C_j (K x K), class-major.

    Block (a, b) of the result is X^T diag(C[:, a, b]) X.  Both C_j and x_j x_j^T are
    symmetric, so only the K(K+1)/2 pairs a <= b and the P(P+1)/2 products x_q x_r (q <= r)
    are needed: the products are formed once (t x P(P+1)/2, e.g. 31 MB for digits) and each
    call is ONE BLAS product (K(K+1)/2 x t) @ (t x P(P+1)/2), scattered into the four
    mirror positions -- a quarter of the multiply-adds of the block-by-block products.
    """

    def __init__(self, X: np.ndarray, n_classes: int) -> None:
        t, P = X.shape
        K = n_classes
        self.K, self.P = K, P
        self._qi, self._ri = np.triu_indices(P)
        self._ai, self._bi = np.triu_indices(K)
        self.products = np.ascontiguousarray(X[:, self._qi] * X[:, self._ri])  # (t, P(P+1)/2)
        a = self._ai[:, None] * P
        b = self._bi[:, None] * P
        q, r = self._qi[None, :], self._ri[None, :]
        self._rows = np.concatenate([(a + q).ravel(), (a + r).ravel(), (b + q).ravel(), (b + r).ravel()])
        self._cols = np.concatenate([(b + r).ravel(), (b + q).ravel(), (a + r).ravel(), (a + q).ravel()])

    def __call__(self, C: np.ndarray) -> np.ndarray:
        Cu = np.ascontiguousarray(C[:, self._ai, self._bi])  # (t, K(K+1)/2)
        V = (Cu.T @ self.products).ravel()
        d = self.K * self.P
        out = np.empty((d, d))
        out[self._rows, self._cols] = np.tile(V, 4)
        return out


class _Base:
    """Shared plumbing: the ridge term and the majorization check."""

    name = "objective"
    dim: int
    ridge: float
    reg: float
    n_examples: int

    def _penalty(self, theta: np.ndarray) -> float:
        return 0.5 * self.ridge * float(theta @ theta)

    def value(self, theta: Any) -> float:
        """J(theta)."""
        return self.value_and_gradient(theta)[0]

    def gradient(self, theta: Any) -> np.ndarray:
        """grad J(theta)."""
        return self.value_and_gradient(theta)[1]

    def majorizer(self, theta: Any, theta_tilde: Any, Sigma: np.ndarray | None = None) -> float:
        """The quadratic upper bound on J at theta built at theta_tilde (for checks and plots)."""
        theta_tilde = _check_theta(theta_tilde, self.dim, type(self).__name__, "theta_tilde")
        theta = _check_theta(theta, self.dim, type(self).__name__)
        if Sigma is None:
            Sigma, g = self.bound(theta_tilde)
        else:
            g = self.gradient(theta_tilde)
        delta = theta - theta_tilde
        return self.value(theta_tilde) + float(g @ delta) + 0.5 * float(delta @ Sigma @ delta) + 0.5 * self.ridge * float(delta @ delta)


def _check_reg(reg: Any, owner: str) -> float:
    return check_float("reg", reg, owner, 0.0)


# ---------------------------------------------------------- multinomial logistic


class MultinomialLogistic(_Base):
    """Regularised multinomial logistic regression as a CRF (Table 1's logistic problems).

    For example j with input x_j (p features, a bias 1 appended: p + 1 = P) and class y_j,
    Omega_j = {0, ..., K-1} and f(x, y) = e_y (x) [x, 1], so theta = [theta_0, ..., theta_{K-1}]
    (class-major, K P entries) and theta^T f(x, y) = theta_y^T [x, 1].  log Z_{x_j} =
    logsumexp_y theta_y^T x_j.  J, its gradient and Hessian are vectorised NumPy; the bound is
    Algorithm 1 per example (kernel :func:`boltzlab.engine.kernels.majorize.class_bounds`), whose
    curvature has the Kronecker form Sigma_j = C_j (x) x_j x_j^T.

    Parameters
    ----------
    X : (t, p) finite inputs (used as given; see :func:`load_problem` for standardised sets).
    y : (t,) integer labels in [0, n_classes).
    n_classes : K >= 2.
    reg : lambda >= 0; J carries (t lambda / 2) |theta|^2 (eq. 1).
    """

    name = "multinomial logistic"

    def __init__(self, X: Any, y: Any, n_classes: int, reg: float) -> None:
        owner = "MultinomialLogistic"
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
            raise ValueError(f"The 'X' parameter of {owner} must be a 2-d array (t, p) with t, p >= 1. Got shape {X.shape}.")
        if not np.all(np.isfinite(X)):
            raise ValueError(f"The 'X' parameter of {owner} must be finite. Got NaN or inf.")
        self.n_classes = check_int("n_classes", n_classes, owner, 2)
        self.y = _check_labels(y, X.shape[0], self.n_classes, owner)
        self.reg = _check_reg(reg, owner)
        self.X = np.ascontiguousarray(np.hstack([X, np.ones((X.shape[0], 1))]))
        self.n_examples, self.n_inputs = self.X.shape
        self.dim = self.n_classes * self.n_inputs
        self.ridge = self.n_examples * self.reg
        self._Y = np.zeros((self.n_examples, self.n_classes))
        self._Y[np.arange(self.n_examples), self.y] = 1.0
        self._observed = (self._Y.T @ self.X).ravel()  # sum_j f(x_j, y_j)
        self._kron: KroneckerCurvature | None = None

    def _curvature(self, C: np.ndarray) -> np.ndarray:
        if self._kron is None:  # built on first use (Hessian or bound), then reused
            self._kron = KroneckerCurvature(self.X, self.n_classes)
        return self._kron(C)

    def weights(self, theta: Any) -> np.ndarray:
        """theta as the (K, p + 1) matrix whose row y is theta_y (bias last)."""
        return _check_theta(theta, self.dim, "MultinomialLogistic.weights").reshape(self.n_classes, self.n_inputs)

    def _scores(self, theta: np.ndarray) -> np.ndarray:
        return self.X @ theta.reshape(self.n_classes, self.n_inputs).T  # (t, K)

    def value_and_gradient(self, theta: Any) -> tuple[float, np.ndarray]:
        theta = _check_theta(theta, self.dim, "MultinomialLogistic")
        A = self._scores(theta)
        log_z = scipy.special.logsumexp(A, axis=1)
        P = np.exp(A - log_z[:, None])
        value = float(log_z.sum()) - float(theta @ self._observed) + self._penalty(theta)
        grad = ((P.T @ self.X).ravel() - self._observed) + self.ridge * theta
        return value, grad

    def probabilities(self, theta: Any) -> np.ndarray:
        """p(y | x_j, theta) for every example, (t, K)."""
        theta = _check_theta(theta, self.dim, "MultinomialLogistic")
        return scipy.special.softmax(self._scores(theta), axis=1)

    def hessian(self, theta: Any) -> np.ndarray:
        """sum_j (diag(p_j) - p_j p_j^T) (x) x_j x_j^T + t lambda I (exact)."""
        P = self.probabilities(theta)
        C = -P[:, :, None] * P[:, None, :]
        idx = np.arange(self.n_classes)
        C[:, idx, idx] += P
        H = self._curvature(C)
        H[np.diag_indices_from(H)] += self.ridge
        return H

    def bound(self, theta_tilde: Any) -> tuple[np.ndarray, np.ndarray]:
        """(Sigma, g): sum_j of Algorithm 1's Sigma_j over the classes in order 0..K-1, and
        g = grad J(theta_tilde) = sum_j (mu_j - f(x_j, y_j)) + t lambda theta_tilde."""
        theta = _check_theta(theta_tilde, self.dim, "MultinomialLogistic.bound", "theta_tilde")
        C, M, _ = kernels.class_bounds(np.ascontiguousarray(self._scores(theta)))
        Sigma = self._curvature(C)
        g = (M.T @ self.X).ravel() - self._observed + self.ridge * theta
        return Sigma, g

    def bound_terms(self, theta_tilde: Any) -> tuple[float, np.ndarray, np.ndarray]:
        """(sum_j log z_j, sum_j mu_j, Sigma) of Algorithm 1 (the data-independent part of the
        bound, without - theta^T f(x_j, y_j) and the regulariser)."""
        theta = _check_theta(theta_tilde, self.dim, "MultinomialLogistic.bound_terms", "theta_tilde")
        C, M, log_z = kernels.class_bounds(np.ascontiguousarray(self._scores(theta)))
        return float(log_z.sum()), (M.T @ self.X).ravel(), self._curvature(C)

    def kronecker_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(F, offsets): every example's rows f(x_j, y) = e_y (x) x_j, y = 0..K-1, stacked
        (t K, K P).  Only for small problems and tests (digits: 93 MB)."""
        t, P, K = self.n_examples, self.n_inputs, self.n_classes
        F = np.zeros((t, K, K, P))
        for y in range(K):
            F[:, y, y, :] = self.X
        return F.reshape(t * K, K * P), np.arange(0, t * K + 1, K, dtype=np.int64)

    def bound_low_rank(self, theta_tilde: Any, rank: int) -> tuple[LowRankBound, np.ndarray]:
        """Algorithm 4 (§6): (LowRankBound, g) with Sigma_LR = V^T diag(S) V + diag(D) >= Sigma.

        As in the paper's Algorithm 4 (and its proof in the supplement), the rank-one terms
        r = sqrt(c) (f - mu) of ALL examples feed one shared (V, S, D): z and mu restart per
        example, V/S/D do not.  Each absorption keeps V^T S V + D above the exact running sum in
        the Loewner order, so Sigma_LR >= sum_j Sigma_j and the quadratic still majorizes J.
        (A sum of per-example low-rank bounds would have rank up to t k and need a dense solve.)
        D starts at 0 rather than t lambda I; the regulariser enters at solve time:
        ``lr.solve(g, lam=objective.ridge)`` is (Sigma_LR + t lambda I)^{-1} g by Woodbury.
        """
        owner = "MultinomialLogistic.bound_low_rank"
        theta = _check_theta(theta_tilde, self.dim, owner, "theta_tilde")
        rank = check_int("rank", rank, owner, 1)
        if rank > self.dim:
            raise ValueError(f"The 'rank' parameter of {owner} must be an int in [1, {self.dim}]. Got {rank}.")
        log_z, mu, V, S, D, _ = kernels.low_rank_class_bounds(self.X, np.ascontiguousarray(self._scores(theta)), rank)
        g = mu - self._observed + self.ridge * theta
        return LowRankBound(float(log_z), mu, V, S, D), g


# ------------------------------------------------------------------- FVBM exact ML


class FVBMLikelihood(_Base):
    """Exact maximum likelihood of a fully visible Boltzmann machine (no conditioning).

    One partition function over Omega = {-1, 1}^d (enumerated once, state s has x_i = +1 iff
    bit i of s is set, as in :mod:`boltzlab.engine.fvbm`), features phi(x) = [x, x_i x_j (i < j)] in the
    order of :func:`boltzlab.engine.fvbm.pack_theta`, so theta = [b, upper triangle of M] and
    theta^T phi(x) = b^T x + x^T M x / 2.  With n observations,

        J(theta) = n log Z(theta) - theta^T sum_i phi(x_i) + (n lambda / 2) |theta|^2,

    the bound is n times one Algorithm 1 pass over Omega: Sigma = n Sigma_Omega.

    Parameters
    ----------
    S : (n, d) spins in {-1, 1}, 2 <= d <= 16.
    reg : lambda >= 0 (the ML estimate may not exist when lambda = 0).
    """

    name = "FVBM likelihood"

    def __init__(self, S: Any, reg: float) -> None:
        owner = "FVBMLikelihood"
        try:
            S = check_data(S, owner)
        except ValueError as exc:  # engine.fvbm calls the data X; here it is S
            raise ValueError(str(exc).replace("'X' parameter", "'S' parameter")) from None
        if S.shape[1] > MAX_FVBM_D:
            raise ValueError(f"The 'S' parameter of {owner} must have d <= {MAX_FVBM_D} columns "
                             f"(Omega = 2^d states is enumerated). Got d = {S.shape[1]}.")
        self.reg = _check_reg(reg, owner)
        self.S = S
        self.n_examples, self.d = S.shape
        self.dim = self.d + self.d * (self.d - 1) // 2
        self.ridge = self.n_examples * self.reg
        self.omega = states_to_spins(np.arange(2**self.d), self.d)
        self.F = np.ascontiguousarray(self.features(self.omega))
        self._observed = self.features(S).sum(axis=0)

    def features(self, X: np.ndarray) -> np.ndarray:
        """phi(x) = [x, x_i x_j (i < j)] for every row of X."""
        iu, ju = np.triu_indices(X.shape[1], 1)
        return np.hstack([X, X[:, iu] * X[:, ju]])

    def to_fvbm_params(self, theta: Any) -> tuple[np.ndarray, np.ndarray]:
        """(b, M) of :class:`boltzlab.engine.fvbm.FVBM` from theta."""
        theta = _check_theta(theta, self.dim, "FVBMLikelihood.to_fvbm_params")
        return unpack_theta(theta, self.d)

    def from_fvbm_params(self, b: Any, M: Any) -> np.ndarray:
        """theta from (b, M) (validated by :class:`boltzlab.engine.fvbm.FVBM`)."""
        model = FVBM(b, M)
        if model.d != self.d:
            raise ValueError(f"The 'b' parameter of FVBMLikelihood.from_fvbm_params must have length {self.d}. Got {model.d}.")
        return pack_theta(model.b, model.M)

    def _log_alpha(self, theta: np.ndarray) -> np.ndarray:
        return self.F @ theta

    def log_partition(self, theta: Any) -> float:
        theta = _check_theta(theta, self.dim, "FVBMLikelihood")
        return float(scipy.special.logsumexp(self._log_alpha(theta)))

    def value_and_gradient(self, theta: Any) -> tuple[float, np.ndarray]:
        theta = _check_theta(theta, self.dim, "FVBMLikelihood")
        a = self._log_alpha(theta)
        log_z = scipy.special.logsumexp(a)
        p = np.exp(a - log_z)
        n = self.n_examples
        value = n * float(log_z) - float(theta @ self._observed) + self._penalty(theta)
        grad = n * (p @ self.F) - self._observed + self.ridge * theta
        return value, grad

    def log_likelihood(self, theta: Any) -> float:
        """sum_i log P(x_i; theta) (no regulariser): equals engine.fvbm.exact_log_likelihood."""
        theta = _check_theta(theta, self.dim, "FVBMLikelihood")
        return float(theta @ self._observed) - self.n_examples * self.log_partition(theta)

    def hessian(self, theta: Any) -> np.ndarray:
        """n Cov_p[phi] + n lambda I (exact)."""
        theta = _check_theta(theta, self.dim, "FVBMLikelihood")
        a = self._log_alpha(theta)
        p = np.exp(a - scipy.special.logsumexp(a))
        Cc = self.F - p @ self.F
        H = self.n_examples * ((Cc * p[:, None]).T @ Cc)
        H = 0.5 * (H + H.T)
        H[np.diag_indices_from(H)] += self.ridge
        return H

    def bound(self, theta_tilde: Any) -> tuple[np.ndarray, np.ndarray]:
        """(n Sigma_Omega, grad J(theta_tilde)): Algorithm 1 over Omega once, times n."""
        theta = _check_theta(theta_tilde, self.dim, "FVBMLikelihood.bound", "theta_tilde")
        offsets = np.array([0, self.F.shape[0]], dtype=np.int64)
        _, mu, Sigma, _ = kernels.sum_compute_bounds(self.F, self._log_alpha(theta), offsets, min(512, self.F.shape[0]))
        n = self.n_examples
        return n * Sigma, n * mu - self._observed + self.ridge * theta


# ------------------------------------------------------------------- chain CRF


CHAIN_CURVATURES = ("printed", "shared")


class ChainData(NamedTuple):
    """Sequences from :func:`make_chain_data`."""

    sequences: list[np.ndarray]
    labels: list[np.ndarray]
    theta: np.ndarray
    n_states: int


class ChainCRF(_Base):
    """A linear-chain CRF with shared node weights and shared transitions.

    Sequence s has inputs x_0..x_{L-1} (each p features, used as given) and labels y_t in
    {0..k-1}.  theta = [W.ravel(), T.ravel()] with W (k, p) and T (k, k), d = k p + k^2:

        theta^T f(x, y) = sum_t W[y_t]^T x_t + sum_{t < L-1} T[y_t, y_{t+1}],

    i.e. node features x_t (x) e_{y_t} and transition indicators shared along the chain.
    The junction tree has the cliques (y_c, y_{c+1}), c = 0..L-2; clique c carries edge c and
    node c, the last clique also node L-1 (as :func:`boltzlab.engine.bound.chain_features`).  Exact log Z
    and marginals by forward-backward, the exact Hessian by a second-order forward recursion,
    the bound by Algorithm 3 per sequence (:func:`boltzlab.engine.bound.chain_bound`, looped in numba).

    Parameters
    ----------
    sequences : list of (L_s, p) finite arrays, L_s >= 2.
    labels : list of (L_s,) integer arrays in [0, n_states).
    n_states : k >= 2.
    reg : lambda >= 0; J carries (S lambda / 2) |theta|^2 with S the number of sequences.
    curvature : "printed" -- Algorithm 3 as printed (:func:`boltzlab.engine.bound.chain_bound`): a
        child's Sigma_{b|w} is added once per clique configuration w, so a leaf's curvature
        reaches the root up to k^(L-2) times and the bound gets geometrically looser with
        the chain length L; or "shared" -- the same z and mu with one curvature per clique
        that dominates all of Algorithm 3's per-separator curvatures
        (:func:`boltzlab.engine.kernels.majorize.sum_chain_bounds_shared`), linear in L.  Both
        majorize J.
    """

    name = "chain CRF"

    def __init__(self, sequences: Sequence[Any], labels: Sequence[Any], n_states: int, reg: float,
                 *, curvature: str = "printed") -> None:
        owner = "ChainCRF"
        if curvature not in CHAIN_CURVATURES:
            raise ValueError(f"The 'curvature' parameter of {owner} must be one of {CHAIN_CURVATURES}. Got {curvature!r}.")
        self.curvature = curvature
        if isinstance(sequences, np.ndarray) and sequences.ndim == 3:
            sequences = list(sequences)
        if not isinstance(sequences, (list, tuple)) or len(sequences) < 1:
            raise ValueError(f"The 'sequences' parameter of {owner} must be a non-empty list of (L, p) arrays. Got {type(sequences).__name__}.")
        if isinstance(labels, np.ndarray) and labels.ndim == 2:
            labels = list(labels)
        if not isinstance(labels, (list, tuple)) or len(labels) != len(sequences):
            raise ValueError(f"The 'labels' parameter of {owner} must be a list with one label array per sequence "
                             f"({len(sequences)}). Got {len(labels) if hasattr(labels, '__len__') else labels!r}.")
        self.n_states = k = check_int("n_states", n_states, owner, 2)
        self.reg = _check_reg(reg, owner)
        seqs, labs = [], []
        p = None
        for s, (X, y) in enumerate(zip(sequences, labels)):
            X = np.asarray(X, dtype=np.float64)
            if X.ndim != 2 or X.shape[0] < 2 or X.shape[1] < 1 or (p is not None and X.shape[1] != p):
                want = "p" if p is None else str(p)
                raise ValueError(f"The 'sequences' parameter of {owner} must hold (L, {want}) arrays with L >= 2. "
                                 f"Got shape {X.shape} for sequence {s}.")
            if not np.all(np.isfinite(X)):
                raise ValueError(f"The 'sequences' parameter of {owner} must be finite. Got NaN or inf in sequence {s}.")
            p = X.shape[1]
            seqs.append(X)
            labs.append(_check_labels(y, X.shape[0], k, owner, name="labels"))
        self.sequences, self.labels = seqs, labs
        self.n_features = p
        self.n_examples = len(seqs)
        self.dim = k * p + k * k
        self.ridge = self.n_examples * self.reg
        self.lengths = np.array([X.shape[0] for X in seqs], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths - 1)]).astype(np.int64)
        self.Fc = np.ascontiguousarray(np.concatenate([self.clique_features(X) for X in seqs]))
        self._observed = sum(self.features(X, y) for X, y in zip(seqs, labs))

    # -- features
    def clique_features(self, X: np.ndarray) -> np.ndarray:
        """f_c(a, b) for the L-1 cliques of one sequence: (L-1, k, k, d)."""
        L, p = X.shape
        k, d = self.n_states, self.dim
        Fc = np.zeros((L - 1, k, k, d))
        for a in range(k):
            Fc[:, a, :, a * p:(a + 1) * p] += X[:-1, None, :]
            for b in range(k):
                Fc[:, a, b, k * p + a * k + b] = 1.0
        for b in range(k):
            Fc[-1, :, b, b * p:(b + 1) * p] += X[-1]
        return Fc

    def features(self, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """f(x, y) of one labelled sequence (d,)."""
        k, p = self.n_states, X.shape[1]
        f = np.zeros(self.dim)
        W = f[: k * p].reshape(k, p)
        np.add.at(W, y, X)
        T = f[k * p:].reshape(k, k)
        np.add.at(T, (y[:-1], y[1:]), 1.0)
        return f

    def unpack(self, theta: Any) -> tuple[np.ndarray, np.ndarray]:
        """(W (k, p), T (k, k)) from theta."""
        theta = _check_theta(theta, self.dim, "ChainCRF.unpack")
        k, p = self.n_states, self.n_features
        return theta[: k * p].reshape(k, p), theta[k * p:].reshape(k, k)

    def _log_alpha(self, theta: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(self.Fc @ theta)

    # -- objective
    def value_and_gradient(self, theta: Any) -> tuple[float, np.ndarray]:
        theta = _check_theta(theta, self.dim, "ChainCRF")
        la = self._log_alpha(theta)
        log_z, P = kernels.chain_marginals(la, self.offsets)
        mean = np.tensordot(P, self.Fc, axes=3)
        value = float(log_z.sum()) - float(theta @ self._observed) + self._penalty(theta)
        return value, mean - self._observed + self.ridge * theta

    def log_partitions(self, theta: Any) -> np.ndarray:
        """log Z_{x_s}(theta) per sequence (forward algorithm)."""
        theta = _check_theta(theta, self.dim, "ChainCRF")
        return kernels.chain_marginals(self._log_alpha(theta), self.offsets)[0]

    def hessian(self, theta: Any) -> np.ndarray:
        """sum_s Cov_s[f] + S lambda I (exact, O(sum_s L_s k^2 d^2))."""
        theta = _check_theta(theta, self.dim, "ChainCRF")
        _, _, H = kernels.chain_moments(self.Fc, self._log_alpha(theta), self.offsets)
        H[np.diag_indices_from(H)] += self.ridge
        return H

    def bound(self, theta_tilde: Any) -> tuple[np.ndarray, np.ndarray]:
        """(sum_s Sigma_s of Algorithm 3, grad J(theta_tilde)); see ``curvature``."""
        theta = _check_theta(theta_tilde, self.dim, "ChainCRF.bound", "theta_tilde")
        kernel = kernels.sum_chain_bounds if self.curvature == "printed" else kernels.sum_chain_bounds_shared
        _, mu, Sigma, _ = kernel(self.Fc, self._log_alpha(theta), self.offsets)
        return Sigma, mu - self._observed + self.ridge * theta

    def enumerate_sequence(self, s: int) -> tuple[np.ndarray, np.ndarray]:
        """(labelings (k^L, L), F (k^L, d)) of sequence s, for Algorithm 1 / exact checks."""
        X = self.sequences[s]
        L, k = X.shape[0], self.n_states
        if k**L > MAX_CHAIN_ENUMERATION:
            raise ValueError(f"Sequence {s} has k^L = {k}^{L} labelings; at most {MAX_CHAIN_ENUMERATION} are enumerated.")
        Y = np.array(np.unravel_index(np.arange(k**L), (k,) * L)).T
        F = np.stack([self.features(X, y) for y in Y])
        return Y, F


def make_chain_data(n_sequences: int, length: int, n_states: int, n_features: int, seed: int,
                    *, scale: float = 1.0) -> ChainData:
    """Sequences sampled exactly from a random chain CRF (:class:`ChainCRF`'s parametrisation).

    theta: W ~ N(0, scale^2) (k, p), T ~ N(0, scale^2) (k, k) plus scale on the diagonal
    (labels tend to persist); inputs x_t ~ N(0, 1) with the last of the ``n_features`` columns a
    constant 1 (a per-state bias); labels drawn from p(y | x, theta) by forward filtering,
    backward sampling.  Everything from ``seed``.
    """
    owner = "make_chain_data"
    n_sequences = check_int("n_sequences", n_sequences, owner, 1)
    length = check_int("length", length, owner, 2)
    k = check_int("n_states", n_states, owner, 2)
    p = check_int("n_features", n_features, owner, 1)
    scale = check_float("scale", scale, owner, 0.0)
    rng = np.random.default_rng(seed)
    W = rng.normal(0.0, scale, (k, p))
    T = rng.normal(0.0, scale, (k, k)) + scale * np.eye(k)
    theta = np.concatenate([W.ravel(), T.ravel()])
    sequences, labels = [], []
    for _ in range(n_sequences):
        X = rng.normal(0.0, 1.0, (length, p))
        X[:, -1] = 1.0
        node = X @ W.T  # (L, k)
        fw = np.zeros((length, k))
        fw[0] = node[0]
        for t in range(1, length):
            fw[t] = node[t] + scipy.special.logsumexp(fw[t - 1][:, None] + T, axis=0)
        y = np.empty(length, dtype=np.int64)
        w = np.exp(fw[-1] - fw[-1].max())
        y[-1] = rng.choice(k, p=w / w.sum())
        for t in range(length - 2, -1, -1):
            lw = fw[t] + T[:, y[t + 1]]
            w = np.exp(lw - lw.max())
            y[t] = rng.choice(k, p=w / w.sum())
        sequences.append(X)
        labels.append(y)
    return ChainData(sequences, labels, theta, k)


# ------------------------------------------------------------------- the trainer


class BoundMajorizer(IterativeTrainer):
    """Algorithm 2 without constraints: theta <- theta - (Sigma + t lambda I)^{-1} grad J(theta).

    Each ``step()`` builds the bound at the current theta (``objective.bound``: Algorithm 1 per
    example, Algorithm 3 for chains) and jumps to the minimiser of the quadratic majorizer, so J
    never increases (Theorem 1); the Record's ``monotone`` reports whether it did, to rounding.
    With ``low_rank = k`` the curvature is Algorithm 4's rank-k-plus-diagonal Sigma_LR
    (``objective.bound_low_rank``) and the solve is Woodbury's.

    Parameters
    ----------
    objective : MultinomialLogistic, FVBMLikelihood, ChainCRF or anything with ``bound``.
    reg : must equal the objective's lambda if given (the majorizer minimises the same J as the
        baselines; lambda is part of the objective).  None: the objective's.
    max_iter, tol : stop after ``max_iter`` steps or once |grad J| <= tol.
    theta0 : start (default zeros).
    low_rank : None (dense Sigma) or the rank k of Algorithm 4 (needs t lambda > 0).
    trace : 0 (default) or the number of points at which each Record also carries the step's
        picture (``step_s``, ``step_J``, ``step_Q``): J and the quadratic majorizer Q built at
        the step's start theta_t along the step, theta(s) = theta_t - s delta.  With
        A = Sigma + t lambda I and delta = A^{-1} g, Q(s) = J(theta_t) - s a + a s^2 / 2 with
        a = g^T delta (Theorem 1: Q >= J, equal at s = 0); its minimiser s = 1 is the next
        iterate.  Computed after the step's timing, so the race's seconds do not include it.

    The dense solve is a Cholesky factorisation of Sigma + t lambda I.  With lambda = 0 it can be
    singular (softmax's shift invariance); then the smallest diagonal shift tau that makes it
    factorise is added -- Sigma + tau I still majorizes, so monotonicity is kept.
    """

    label = "Bound majorization"

    def __init__(self, objective: Any, *, reg: float | None = None, max_iter: int = 1000, tol: float = 1e-6,
                 theta0: Any = None, low_rank: int | None = None, trace: int = 0) -> None:
        owner = "BoundMajorizer"
        self.trace = check_int("trace", trace, owner, 0)
        if not hasattr(objective, "bound"):
            raise ValueError(f"The 'objective' parameter of {owner} must provide bound(theta). Got {type(objective).__name__}.")
        if reg is not None:
            reg = check_float("reg", reg, owner, 0.0)
            if not math.isclose(reg, objective.reg, rel_tol=1e-12, abs_tol=0.0):
                raise ValueError(f"The 'reg' parameter of {owner} must equal the objective's lambda = {objective.reg:g} "
                                 f"(build the objective with the regulariser you want). Got {reg!r}.")
        if low_rank is not None:
            if not hasattr(objective, "bound_low_rank"):
                raise ValueError(f"The 'low_rank' parameter of {owner} needs an objective with bound_low_rank "
                                 f"(MultinomialLogistic). Got {type(objective).__name__}.")
            low_rank = check_int("low_rank", low_rank, owner, 1)
            if low_rank > objective.dim:
                raise ValueError(f"The 'low_rank' parameter of {owner} must be an int in [1, {objective.dim}]. Got {low_rank}.")
            if not objective.ridge > 0.0:
                raise ValueError(f"The 'low_rank' parameter of {owner} needs reg > 0 (the Woodbury solve inverts "
                                 f"diag(D) + t lambda I). Got low_rank={low_rank} with reg={objective.reg!r}.")
        self.low_rank = low_rank
        super().__init__(objective, max_iter=max_iter, tol=tol, theta0=theta0)
        if low_rank is not None:
            self.label = f"Bound majorization (rank {low_rank})"
        self.last_shift = 0.0
        self._step: tuple | None = None  # (theta_t, J(theta_t), delta, g^T delta) of the last update

    def step(self) -> Record:
        """One update (Algorithm 2); with ``trace``, the step's picture in the Record's arrays."""
        self._step = None
        record = super().step()
        if self.trace and self._step is not None:
            record.arrays.update(self.step_picture(*self._step))
        return record

    def step_picture(self, theta_t: np.ndarray, value_t: float, delta: np.ndarray, a: float) -> dict[str, np.ndarray]:
        """J and the majorizer Q along theta_t - s delta, s in [-0.5, 1.5] (``trace`` points; 41
        put s = 0, theta_t, and s = 1, the next iterate, on the grid)."""
        s = np.linspace(-0.5, 1.5, self.trace)
        with np.errstate(over="ignore", invalid="ignore"):
            J = np.array([self.objective.value(theta_t - si * delta) for si in s])
        Q = value_t - s * a + 0.5 * a * s**2
        return {"step_s": s, "step_J": J, "step_Q": Q}

    def _update(self):
        ridge = self.objective.ridge
        if self.low_rank is None:
            Sigma, g = self.objective.bound(self.theta)
            Sigma[np.diag_indices_from(Sigma)] += ridge
            delta, self.last_shift = shifted_cholesky_solve(Sigma, g)
        else:
            lr, g = self.objective.bound_low_rank(self.theta, self.low_rank)
            delta = lr.solve(g, lam=ridge)
        if not np.linalg.norm(delta) > 1e-15 * max(1.0, float(np.linalg.norm(self.theta))):
            return None  # the update no longer moves theta: J is at its rounding level
        self._step = (self.theta, self.value, delta, float(g @ delta))
        theta = self.theta - delta
        value, grad = self._evaluate(theta)
        return theta, value, grad


# ----------------------------------------------------------------- problems, races


PROBLEMS = ("digits", "wine", "breast_cancer", "chain", "fvbm")
#: Default lambda per problem (the paper cross-validates lambda; these keep the race readable:
#: L-BFGS needs tens to hundreds of iterations, steepest descent hundreds to thousands).
DEFAULT_REG = {"digits": 1e-1, "wine": 1e-2, "breast_cancer": 1e-2, "chain": 1e-1, "fvbm": 1.0}


def standardise(X: np.ndarray) -> np.ndarray:
    """Columns to mean 0 and standard deviation 1 (constant columns to 0)."""
    X = np.asarray(X, dtype=np.float64)
    sd = X.std(axis=0)
    return (X - X.mean(axis=0)) / np.where(sd > 0, sd, 1.0)


def load_problem(name: str) -> tuple[np.ndarray, np.ndarray, int]:
    """(X standardised, y, n_classes) of scikit-learn's bundled digits / wine / breast_cancer."""
    from sklearn import datasets

    loaders = {"digits": datasets.load_digits, "wine": datasets.load_wine,
               "breast_cancer": datasets.load_breast_cancer}
    if name not in loaders:
        raise ValueError(f"The 'name' parameter of load_problem must be one of {tuple(loaders)}. Got {name!r}.")
    X, y = loaders[name](return_X_y=True)
    return standardise(X), y.astype(np.int64), int(y.max()) + 1


def make_objective(problem: str, *, reg: float | None = None, seed: int = 0, **kw: Any):
    """The objective of a race problem (see :func:`make_race` for the keywords)."""
    owner = "make_objective"
    if problem not in PROBLEMS:
        raise ValueError(f"The 'problem' parameter of {owner} must be one of {PROBLEMS}. Got {problem!r}.")
    reg = DEFAULT_REG[problem] if reg is None else reg
    if problem in ("digits", "wine", "breast_cancer"):
        _no_extra(kw, owner, ())
        X, y, K = load_problem(problem)
        return MultinomialLogistic(X, y, K, reg)
    if problem == "chain":
        _no_extra(kw, owner, ("n_sequences", "length", "n_states", "n_features", "curvature"))
        data = make_chain_data(kw.get("n_sequences", 100), kw.get("length", 10), kw.get("n_states", 4),
                               kw.get("n_features", 8), seed)
        return ChainCRF(data.sequences, data.labels, data.n_states, reg, curvature=kw.get("curvature", "shared"))
    _no_extra(kw, owner, ("d", "n", "source"))
    source = kw.get("source", "simulated")
    if source == "senate":
        from .data import senate

        S = senate().X
    elif source == "simulated":
        d = check_int("d", kw.get("d", 10), owner, 2)
        if d > MAX_FVBM_D:
            raise ValueError(f"The 'd' parameter of {owner} must be an int in [2, {MAX_FVBM_D}]. Got {d}.")
        n = check_int("n", kw.get("n", 500), owner, 1)
        S = FVBM.random(d, seed).sample(n, seed + 1)
    else:
        raise ValueError(f"The 'source' parameter of {owner} must be 'simulated' or 'senate'. Got {source!r}.")
    return FVBMLikelihood(S, reg)


def _no_extra(kw: Mapping[str, Any], owner: str, allowed: tuple[str, ...]) -> None:
    extra = sorted(set(kw) - set(allowed))
    if extra:
        raise ValueError(f"The keyword '{extra[0]}' of {owner} is not used by this problem; allowed: {allowed or 'none'}.")


RACE_METHODS = ("Bound majorization", "L-BFGS", "CG", "Steepest descent", "Newton")


def make_race(problem: str, *, reg: float | None = None, seed: int = 0, max_iter: int = 1000,
              tol: float | None = None, low_rank: int | None = None, objective: Any = None,
              trace: int = 0, **kw: Any) -> dict[str, IterativeTrainer]:
    """The Bound lab's race: five Trainers on the same J from the same theta0 = 0.

    Parameters
    ----------
    problem : "digits", "wine", "breast_cancer" (multinomial logistic on scikit-learn's bundled
        sets, standardised), "chain" (a chain CRF on :func:`make_chain_data`; keywords
        n_sequences=100, length=10, n_states=4, n_features=8) or "fvbm" (exact FVBM ML; keywords
        d=10, n=500 draws from FVBM.random(d, seed), or source="senate" for the bundled 147 x 8
        Senate votes).
    reg : lambda (default :data:`DEFAULT_REG`).
    seed : seed of the synthetic data (chain, fvbm).
    max_iter : iteration cap of every trainer.
    tol : gradient-norm tolerance; default 1e-6 max(1, |grad J(0)|).
    low_rank : use Algorithm 4 with this rank for the bound (multinomial problems only).
    objective : an already built objective to share (then problem/reg/seed/kw only label it).
    trace : points of the bound majorizer's step picture in its Records (``BoundMajorizer``).

    Returns {"Bound majorization", "L-BFGS", "CG", "Steepest descent", "Newton"} -> Trainer; the
    trainers share one (stateless) objective, available as ``trainer.objective``.
    """
    if objective is None:
        objective = make_objective(problem, reg=reg, seed=seed, **kw)
    if tol is None:
        tol = 1e-6 * max(1.0, float(np.linalg.norm(objective.gradient(np.zeros(objective.dim)))))
    common = dict(max_iter=max_iter, tol=tol, theta0=np.zeros(objective.dim))
    return {
        "Bound majorization": BoundMajorizer(objective, low_rank=low_rank, trace=trace, **common),
        "L-BFGS": LBFGSTrainer(objective, **common),
        "CG": ConjugateGradientTrainer(objective, **common),
        "Steepest descent": SteepestDescentTrainer(objective, **common),
        "Newton": NewtonTrainer(objective, **common),
    }


def race_table(problems: Sequence[str] = PROBLEMS, *, eps: float = TABLE1_EPSILON, relative: bool = False,
               max_iter: int = 2000, max_seconds: float = 60.0, low_rank: int | None = None,
               seed: int = 0, reg: float | None = None, print_fn=print) -> list[dict[str, Any]]:
    """Run every race headless and print Table 1: iterations / seconds to within eps of J*.

    J* from :func:`scipy_reference`.  Each trainer runs until done, ``max_iter`` steps or
    ``max_seconds`` of its own time, whichever first.  Returns one row per (problem, method).
    """
    warm_up_majorize()  # so no step's wall time includes loading numba's cache
    rows = []
    advance = advancer(print_fn)
    for p_index, problem in enumerate(problems):
        rank = low_rank if problem in ("digits", "wine", "breast_cancer") else None
        race = make_race(problem, reg=reg, seed=seed, max_iter=max_iter, low_rank=rank)
        objective = race["L-BFGS"].objective
        ref = scipy_reference(objective)
        J0 = objective.value(np.zeros(objective.dim))
        print_fn(f"\n{problem}: d = {objective.dim}, t = {objective.n_examples}, lambda = {objective.reg:g}, "
                 f"J(0) = {J0:.6g}, J* = {ref.value:.10g} (|grad| {ref.grad_norm:.1e}), eps = {eps:g}"
                 f"{' relative' if relative else ' absolute'}")
        print_fn(f"  {'method':<34}{'s/step':>9}{'iter to eps':>13}{'s to eps':>10}{'steps':>7}  status")
        for m_index, (name, trainer) in enumerate(race.items()):
            advance(p_index * len(race) + m_index, len(problems) * len(race))
            records: list[Record] = []
            while not trainer.done and trainer.elapsed < max_seconds:
                records.append(trainer.step())
            hit = iterations_to_epsilon(records, ref.value, eps, relative=relative, J0=J0)
            per_step = trainer.elapsed / max(1, len(records))
            label = trainer.label
            rows.append({"problem": problem, "method": label, "seconds_per_step": per_step,
                         "iterations": None if hit is None else hit.iterations,
                         "seconds": None if hit is None else hit.seconds, "steps": len(records),
                         "status": trainer.status, "monotone": trainer.monotone})
            it = "-" if hit is None else str(hit.iterations)
            sec = "-" if hit is None else f"{hit.seconds:.3f}"
            print_fn(f"  {label:<34}{per_step:>9.4f}{it:>13}{sec:>10}{len(records):>7}  {trainer.status}"
                     f"{'' if trainer.monotone else ' (J increased)'}")
    advance(1, 1)
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m boltzlab.engine.majorize",
                                     description="Table 1 of Jebara & Choromanska (2012) on the Bound lab's problems.")
    parser.add_argument("problems", nargs="*", help=f"any of {', '.join(PROBLEMS)} (default: all)")
    parser.add_argument("--eps", type=float, default=TABLE1_EPSILON)
    parser.add_argument("--relative", action="store_true", help="eps relative to |J*| instead of absolute")
    parser.add_argument("--max-iter", type=int, default=2000)
    parser.add_argument("--max-seconds", type=float, default=60.0)
    parser.add_argument("--low-rank", type=int, default=None, help="rank k of Algorithm 4 (multinomial problems)")
    parser.add_argument("--reg", type=float, default=None, help="lambda (default: per problem)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    unknown = [p for p in args.problems if p not in PROBLEMS]
    if unknown:
        parser.error(f"unknown problem {unknown[0]!r}; choose from {', '.join(PROBLEMS)}")
    race_table(args.problems or PROBLEMS, eps=args.eps, relative=args.relative, max_iter=args.max_iter,
               max_seconds=args.max_seconds, low_rank=args.low_rank, reg=args.reg, seed=args.seed)


def warm_up_majorize() -> None:
    """Compile (or load from numba's cache) the majorization kernels on tiny problems."""
    rng = np.random.default_rng(0)
    obj = MultinomialLogistic(rng.normal(size=(4, 2)), [0, 1, 2, 0], 3, 0.1)
    theta = rng.normal(size=obj.dim)
    obj.bound(theta)
    obj.bound_low_rank(theta, 2)
    F, off = obj.kronecker_rows()
    kernels.sum_low_rank_bounds(F, F @ theta, off, 2)
    FVBMLikelihood(np.array([[1.0, -1.0], [1.0, 1.0]]), 0.1).bound(np.zeros(3))
    data = make_chain_data(2, 3, 2, 2, 0)
    crf = ChainCRF(data.sequences, data.labels, 2, 0.1)
    crf.value_and_gradient(data.theta)
    crf.bound(data.theta)
    crf.hessian(data.theta)
    ChainCRF(data.sequences, data.labels, 2, 0.1, curvature="shared").bound(data.theta)


if __name__ == "__main__":
    main()
