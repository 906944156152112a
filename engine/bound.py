"""The quadratic bound on the partition function (Jebara & Choromanska 2012, §§2, 3, 5, 6).

A log-linear model over an enumerable Omega (rows of a feature matrix F, |Omega| x d) with a
nonnegative measure h has

    log Z(theta) = log sum_y h(y) exp(theta^T f(y)),

and for any theta_tilde Algorithm 1 finds (z, mu, Sigma) with (Theorem 1)

    Z(theta) <= z exp(1/2 (theta - theta_tilde)^T Sigma (theta - theta_tilde)
                      + (theta - theta_tilde)^T mu),

i.e. on the log scale log Z(theta) <= log z + (theta - theta_tilde)^T mu
+ 1/2 (theta - theta_tilde)^T Sigma (theta - theta_tilde), with equality at theta_tilde
(z = Z(theta_tilde)) and mu = grad log Z(theta_tilde).

* :func:`compute_bound` -- Algorithm 1 (ComputeBound), log space, any |theta|.
* :func:`bound_value` (alias :func:`quadratic_bound`) -- the bound at one or many theta.
* :func:`log_partition`, :func:`gradient_log_partition` -- exact, by enumeration.
* :func:`taylor_quadratic` -- the second-order Taylor expansion of log Z (not a bound).
* :func:`chain_features`, :func:`junction_tree_bound`, :func:`chain_bound` -- Algorithm 3
  (JunctionTreeBound) on a chain-structured log-linear model (a linear-chain CRF).
* :func:`low_rank_bound` -- Algorithm 4 (LowRankBound): Sigma <= V^T diag(S) V + diag(D),
  with (Sigma + lambda I)^{-1} applied by the Woodbury formula (:meth:`LowRankBound.solve`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from .checks import check_float, check_int
from .kernels import bound as kernels

#: Largest |Omega| that :func:`chain_features` enumerates.
MAX_ENUMERATED = 2**20


# --------------------------------------------------------------------- validation


def _check_theta(theta: Any, owner: str, d: int | None = None, name: str = "theta",
                 allow_many: bool = False) -> np.ndarray:
    arr = np.asarray(theta, dtype=np.float64)
    ok_ndim = arr.ndim in ((1, 2) if allow_many else (1,))
    if not ok_ndim or arr.shape[-1] < 1 or (d is not None and arr.shape[-1] != d):
        want = f"({d},)" if d is not None else "(d,)"
        if allow_many:
            want += f" or (m, {d if d is not None else 'd'})"
        raise ValueError(f"The '{name}' parameter of {owner} must have shape {want}. Got shape {arr.shape}.")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"The '{name}' parameter of {owner} must be finite. Got NaN or inf.")
    return np.ascontiguousarray(arr)


def _check_model(theta: Any, F: Any, h: Any, owner: str, allow_many: bool = False,
                 name: str = "theta") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    F = np.asarray(F, dtype=np.float64)
    if F.ndim != 2 or F.shape[0] < 1 or F.shape[1] < 1:
        raise ValueError(f"The 'F' parameter of {owner} must be a 2-d array of shape (|Omega|, d), both >= 1. Got shape {F.shape}.")
    if not np.all(np.isfinite(F)):
        raise ValueError(f"The 'F' parameter of {owner} must be finite. Got NaN or inf.")
    n, d = F.shape
    theta = _check_theta(theta, owner, d, name=name, allow_many=allow_many)
    if h is None:
        h = np.ones(n)
    h = np.asarray(h, dtype=np.float64)
    if h.shape != (n,):
        raise ValueError(f"The 'h' parameter of {owner} must have shape ({n},) to match F. Got {h.shape}.")
    if not np.all(np.isfinite(h)) or np.any(h < 0.0):
        raise ValueError(f"The 'h' parameter of {owner} must be finite and >= 0. Got values in [{np.nanmin(h):g}, {np.nanmax(h):g}].")
    if not np.any(h > 0.0):
        raise ValueError(f"The 'h' parameter of {owner} must have at least one entry > 0 (else Z = 0). Got all zeros.")
    return theta, np.ascontiguousarray(F), h


def _log(h: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(h)


def _log_alpha(theta: np.ndarray, F: np.ndarray, h: np.ndarray, owner: str) -> np.ndarray:
    """log h + F theta (theta (d,) -> (n,), (m, d) -> (n, m)); -inf where h = 0."""
    with np.errstate(over="ignore", invalid="ignore"):
        a = F @ theta.T
    if not np.all(np.isfinite(a)):
        raise ValueError(f"The 'theta' parameter of {owner} is too large for F: theta^T f(y) overflows float64.")
    lh = _log(h)
    return np.ascontiguousarray(a + (lh if a.ndim == 1 else lh[:, None]))


# ------------------------------------------------------------------- exact oracles


def log_partition(theta: Any, F: Any, h: Any = None) -> np.ndarray | float:
    """Exact log Z(theta) = log sum_y h(y) exp(theta^T f(y)) by log-sum-exp.

    theta : (d,) or (m, d) for m points at once; F : (|Omega|, d); h : (|Omega|,) >= 0
    (default all ones).  Returns a float, or an (m,) array.
    """
    theta, F, h = _check_model(theta, F, h, "log_partition", allow_many=True)
    a = _log_alpha(theta, F, h, "log_partition")
    top = a.max(axis=0)
    out = top + np.log(np.sum(np.exp(a - top), axis=0))
    return float(out) if theta.ndim == 1 else out


def _probabilities(theta: np.ndarray, F: np.ndarray, h: np.ndarray, owner: str) -> np.ndarray:
    a = _log_alpha(theta, F, h, owner)
    p = np.exp(a - a.max(axis=0))
    return p / p.sum(axis=0)


def gradient_log_partition(theta: Any, F: Any, h: Any = None) -> np.ndarray:
    """grad log Z(theta) = E_p[f(y)], the mean of F under p(y) = h(y) e^{theta^T f(y)} / Z.

    theta : (d,) -> (d,); (m, d) -> (m, d).
    """
    theta, F, h = _check_model(theta, F, h, "gradient_log_partition", allow_many=True)
    p = _probabilities(theta, F, h, "gradient_log_partition")
    return p @ F if theta.ndim == 1 else (F.T @ p).T


def taylor_quadratic(theta_tilde: Any, F: Any, h: Any = None) -> tuple[float, np.ndarray, np.ndarray]:
    """The second-order Taylor expansion of log Z at theta_tilde: (log Z, mean, covariance).

    log Z(theta) ~ log Z(theta_tilde) + (theta - theta_tilde)^T E_p[f]
                   + 1/2 (theta - theta_tilde)^T Cov_p[f] (theta - theta_tilde),

    the Hessian choice of §2 ("choosing Sigma = sum_y h e^{theta^T f} (f - mu)(f - mu)^T ...
    yields the second-order Taylor approximation"; the paper prints it without the 1/z that
    makes it the Hessian).  It is NOT a bound: the covariance at theta_tilde can be far
    smaller than the curvature log Z needs elsewhere (log 2 cosh(theta) expanded at 3 is below
    log Z at -3 by about 5.8).  Evaluate it with :func:`bound_value` like the bound's triple.
    """
    owner = "taylor_quadratic"
    theta_tilde, F, h = _check_model(theta_tilde, F, h, owner, name="theta_tilde")
    a = _log_alpha(theta_tilde, F, h, owner)
    top = a.max()
    p = np.exp(a - top)
    total = p.sum()
    p /= total
    mean = p @ F
    C = F - mean
    cov = (C * p[:, None]).T @ C
    cov = 0.5 * (cov + cov.T)
    return float(top + math.log(total)), mean, cov


# ------------------------------------------------------------------- Algorithm 1


def compute_bound(theta: Any, F: Any, h: Any = None) -> tuple[float, np.ndarray, np.ndarray]:
    """Algorithm 1 (ComputeBound): the bound's (log z, mu, Sigma) at theta_tilde = theta.

    Parameters
    ----------
    theta : (d,) the point theta_tilde where the bound touches log Z.
    F : (|Omega|, d) feature rows f(y), visited in the given order (the order changes Sigma,
        never z or mu, and never the guarantee).  Repeated rows are allowed.
    h : (|Omega|,) nonnegative measure (default ones); rows with h = 0 contribute nothing.

    Returns
    -------
    log_z : log z = log Z(theta) (the log of the partition function at theta_tilde).
    mu : (d,) the bound's linear term; it equals grad log Z(theta_tilde).
    Sigma : (d, d) symmetric positive semi-definite curvature with (Theorem 1)
        log Z(t) <= log z + (t - theta)^T mu + 1/2 (t - theta)^T Sigma (t - theta) for all t.

    The update coefficient tanh(1/2 log(alpha/z)) / (2 log(alpha/z)) is computed from
    log alpha - log z with the limits of footnote 3 (1/4 at alpha = z, 0 as alpha/z -> 0 or
    infinity), so |theta| of hundreds neither overflows nor produces NaN.  Cost O(|Omega| d^2).
    """
    theta, F, h = _check_model(theta, F, h, "compute_bound")
    log_alpha = _log_alpha(theta, F, h, "compute_bound")
    log_z, mu, Sigma = kernels.compute_bound(F, log_alpha, min(kernels.BLOCK, F.shape[0]))
    return float(log_z), mu, Sigma


def bound_value(theta: Any, theta_tilde: Any, log_z: float, mu: Any, Sigma: Any) -> np.ndarray | float:
    """The quadratic bound on log Z at theta (Theorem 1 on the log scale):

        log z + (theta - theta_tilde)^T mu + 1/2 (theta - theta_tilde)^T Sigma (theta - theta_tilde).

    The paper states it on Z: Z(theta) <= z exp(1/2 (theta - theta_tilde)^T Sigma
    (theta - theta_tilde) + (theta - theta_tilde)^T mu).  theta : (d,) -> float, or (m, d)
    -> (m,) for m points at once (e.g. a curve along a line).  Any (log z, mu, Sigma) works,
    e.g. :func:`taylor_quadratic`'s.
    """
    owner = "bound_value"
    theta_tilde = _check_theta(theta_tilde, owner, name="theta_tilde")
    d = theta_tilde.shape[0]
    theta = _check_theta(theta, owner, d, allow_many=True)
    mu = _check_theta(mu, owner, d, name="mu")
    Sigma = np.asarray(Sigma, dtype=np.float64)
    if Sigma.shape != (d, d) or not np.all(np.isfinite(Sigma)):
        raise ValueError(f"The 'Sigma' parameter of {owner} must be a finite array of shape ({d}, {d}). Got shape {Sigma.shape}.")
    log_z = check_float("log_z", log_z, owner, -math.inf, low_open=True)
    delta = theta - theta_tilde
    out = log_z + delta @ mu + 0.5 * np.sum((delta @ Sigma) * delta, axis=-1)
    return float(out) if theta.ndim == 1 else out


quadratic_bound = bound_value


# ------------------------------------------------------------------- Algorithm 3


@dataclass(frozen=True)
class ChainFeatures:
    """A chain-structured log-linear model (a linear-chain CRF) over y in {0..k-1}^n.

    Parameters theta = [theta_nodes.ravel(), theta_edges.ravel()] with theta_nodes (n, k) and
    theta_edges (n-1, k, k), and indicator features, so that

        theta^T f(y) = sum_i theta_nodes[i, y_i] + sum_i theta_edges[i, y_i, y_{i+1}],

    d = n k + (n-1) k^2.  A measure factorising the same way, h(y) = prod_i h_nodes[i, y_i]
    prod_i h_edges[i, y_i, y_{i+1}] (default ones), gives the clique measures h_c.

    The junction tree has cliques c = (y_c, y_{c+1}), c = 0..n-2; clique c carries edge c
    and node c, the last clique also node n-1.  ``clique_features`` (n-1, k, k, d) holds
    f_c(y_c, y_{c+1}), so f(y) = sum_c f_c(y_c, y_{c+1}).  ``configurations`` (k^n, n) lists
    Omega in lexicographic order (y_{n-1} fastest) and ``F`` (k^n, d) its features, or both
    are None when not enumerated.
    """

    n_nodes: int
    n_states: int
    clique_features: np.ndarray
    configurations: np.ndarray | None
    F: np.ndarray | None

    @property
    def d(self) -> int:
        return self.n_nodes * self.n_states + (self.n_nodes - 1) * self.n_states**2

    def pack(self, theta_nodes: Any, theta_edges: Any) -> np.ndarray:
        """theta (d,) from theta_nodes (n, k) and theta_edges (n-1, k, k)."""
        n, k = self.n_nodes, self.n_states
        tn = np.asarray(theta_nodes, dtype=np.float64)
        te = np.asarray(theta_edges, dtype=np.float64)
        if tn.shape != (n, k) or not np.all(np.isfinite(tn)):
            raise ValueError(f"The 'theta_nodes' parameter of ChainFeatures.pack must be a finite array of shape ({n}, {k}). Got shape {tn.shape}.")
        if te.shape != (n - 1, k, k) or not np.all(np.isfinite(te)):
            raise ValueError(f"The 'theta_edges' parameter of ChainFeatures.pack must be a finite array of shape ({n - 1}, {k}, {k}). Got shape {te.shape}.")
        return np.concatenate([tn.ravel(), te.ravel()])

    def unpack(self, theta: Any) -> tuple[np.ndarray, np.ndarray]:
        """(theta_nodes (n, k), theta_edges (n-1, k, k)) from theta (d,) (or mu)."""
        n, k = self.n_nodes, self.n_states
        theta = _check_theta(theta, "ChainFeatures.unpack", self.d)
        return theta[: n * k].reshape(n, k), theta[n * k:].reshape(n - 1, k, k)

    def _measures(self, h_nodes: Any, h_edges: Any, owner: str) -> tuple[np.ndarray, np.ndarray]:
        n, k = self.n_nodes, self.n_states
        hn = np.ones((n, k)) if h_nodes is None else np.asarray(h_nodes, dtype=np.float64)
        he = np.ones((n - 1, k, k)) if h_edges is None else np.asarray(h_edges, dtype=np.float64)
        for name, arr, shape in (("h_nodes", hn, (n, k)), ("h_edges", he, (n - 1, k, k))):
            if arr.shape != shape:
                raise ValueError(f"The '{name}' parameter of {owner} must have shape {shape}. Got {arr.shape}.")
            if not np.all(np.isfinite(arr)) or np.any(arr < 0.0):
                raise ValueError(f"The '{name}' parameter of {owner} must be finite and >= 0.")
        return hn, he

    def clique_log_h(self, h_nodes: Any = None, h_edges: Any = None) -> np.ndarray:
        """log h_c(y_c, y_{c+1}) (n-1, k, k), -inf where the measure is 0."""
        hn, he = self._measures(h_nodes, h_edges, "ChainFeatures.clique_log_h")
        lh = _log(he).copy()
        lh += _log(hn[:-1])[:, :, None]
        lh[-1] += _log(hn[-1])[None, :]
        return lh

    def h(self, h_nodes: Any = None, h_edges: Any = None) -> np.ndarray:
        """h(y) on the enumerated Omega (k^n,), in the order of ``configurations``."""
        if self.configurations is None:
            raise ValueError("chain_features was called with enumerate_omega=False: Omega was not enumerated.")
        hn, he = self._measures(h_nodes, h_edges, "ChainFeatures.h")
        Y = self.configurations
        out = np.ones(Y.shape[0])
        for i in range(self.n_nodes):
            out *= hn[i, Y[:, i]]
        for i in range(self.n_nodes - 1):
            out *= he[i, Y[:, i], Y[:, i + 1]]
        return out


def chain_features(n_nodes: int, n_states: int, *, enumerate_omega: bool = True) -> ChainFeatures:
    """Indicator features of a chain of ``n_nodes`` variables with ``n_states`` states each.

    See :class:`ChainFeatures`.  With ``enumerate_omega`` (default) also builds Omega and the full
    |Omega| x d feature matrix for Algorithm 1 and exact log Z (k^n <= MAX_ENUMERATED).
    """
    owner = "chain_features"
    n = check_int("n_nodes", n_nodes, owner, 2)
    k = check_int("n_states", n_states, owner, 2)
    d = n * k + (n - 1) * k * k
    if enumerate_omega and k**n > MAX_ENUMERATED:
        raise ValueError(f"The 'n_states' ** 'n_nodes' of {owner} must be <= {MAX_ENUMERATED} to enumerate Omega. "
                         f"Got {k}**{n} = {k**n}; pass enumerate_omega=False.")
    node = lambda i, s: i * k + s  # noqa: E731
    edge = lambda i, a, b: n * k + (i * k + a) * k + b  # noqa: E731
    Fc = np.zeros((n - 1, k, k, d))
    for c in range(n - 1):
        for a in range(k):
            for b in range(k):
                Fc[c, a, b, edge(c, a, b)] = 1.0
                Fc[c, a, b, node(c, a)] = 1.0
                if c == n - 2:
                    Fc[c, a, b, node(n - 1, b)] = 1.0
    Y = F = None
    if enumerate_omega:
        Y = np.array(list(itertools.product(range(k), repeat=n)), dtype=np.int64)
        F = np.zeros((Y.shape[0], d))
        rows = np.arange(Y.shape[0])
        for i in range(n):
            F[rows, node(i, Y[:, i])] = 1.0
        for i in range(n - 1):
            F[rows, edge(i, Y[:, i], Y[:, i + 1])] = 1.0
    return ChainFeatures(n, k, Fc, Y, F)


def chain_bound(theta: Any, clique_features: Any, clique_h: Any = None) -> tuple[float, np.ndarray, np.ndarray]:
    """Algorithm 3 (JunctionTreeBound) on any chain model: (log z, mu, Sigma) at theta.

    clique_features : (m, k, k, d), f_c(y_c, y_{c+1}) for the m = n - 1 cliques of a chain of
    n k-state variables, with f(y) = sum_c f_c; clique_h : (m, k, k) >= 0 (default ones), with
    h(y) = prod_c h_c.  Cost O(m k^2 d^2) instead of Algorithm 1's O(k^n d^2).  z and mu are
    those of Algorithm 1 (log Z and grad log Z at theta); Sigma majorizes but is not
    Algorithm 1's, although §5 says Algorithm 3 "computes the same bound parameters": each
    clique adds its child's Sigma_{b|w} once per configuration w (Algorithm 3's line
    Sigma_{c|u} += sum_b Sigma_{b|w} + ..., so a leaf's curvature is counted up to k^(n-2)
    times at the root) while its rank-one terms are taken over clique configurations, not
    Omega's rows.  In general neither Sigma dominates the other (on random chains the trace
    ratio JT / Algorithm 1 ranged from 0.7 to 2.4).  For n = 2 (one clique) it is
    Algorithm 1 on Omega in lexicographic order.
    """
    owner = "chain_bound"
    Fc = np.asarray(clique_features, dtype=np.float64)
    if Fc.ndim != 4 or Fc.shape[1] != Fc.shape[2] or min(Fc.shape) < 1:
        raise ValueError(f"The 'clique_features' parameter of {owner} must have shape (m, k, k, d), all >= 1. Got shape {Fc.shape}.")
    if not np.all(np.isfinite(Fc)):
        raise ValueError(f"The 'clique_features' parameter of {owner} must be finite. Got NaN or inf.")
    m, k, _, d = Fc.shape
    theta = _check_theta(theta, owner, d)
    if clique_h is None:
        log_h = np.zeros((m, k, k))
    else:
        hc = np.asarray(clique_h, dtype=np.float64)
        if hc.shape != (m, k, k) or not np.all(np.isfinite(hc)) or np.any(hc < 0.0):
            raise ValueError(f"The 'clique_h' parameter of {owner} must be a finite array >= 0 of shape ({m}, {k}, {k}). Got shape {hc.shape}.")
        log_h = _log(hc)
    return _chain_bound(theta, np.ascontiguousarray(Fc), log_h, owner)


def _chain_bound(theta: np.ndarray, Fc: np.ndarray, log_h: np.ndarray, owner: str) -> tuple[float, np.ndarray, np.ndarray]:
    with np.errstate(over="ignore", invalid="ignore"):
        a = Fc @ theta
    if not np.all(np.isfinite(a)):
        raise ValueError(f"The 'theta' parameter of {owner} is too large: theta^T f_c overflows float64.")
    log_z, mu, Sigma = kernels.junction_tree_chain(Fc, np.ascontiguousarray(a + log_h))
    if log_z == -math.inf:
        raise ValueError(f"The measure of {owner} is zero on every configuration (Z = 0).")
    return float(log_z), mu, Sigma


def junction_tree_bound(theta_nodes: Any, theta_edges: Any, h_nodes: Any = None,
                        h_edges: Any = None) -> tuple[float, np.ndarray, np.ndarray]:
    """Algorithm 3 (JunctionTreeBound) for the indicator chain CRF of :func:`chain_features`.

    theta_nodes : (n, k); theta_edges : (n-1, k, k); optional measures h_nodes (n, k) and
    h_edges (n-1, k, k) >= 0.  Returns (log z, mu, Sigma) in the packed ordering
    theta = [theta_nodes.ravel(), theta_edges.ravel()] (:meth:`ChainFeatures.pack`); use
    ``chain_features(n, k).unpack(mu)`` for node / edge marginals.  See :func:`chain_bound`.
    """
    owner = "junction_tree_bound"
    tn = np.asarray(theta_nodes, dtype=np.float64)
    if tn.ndim != 2 or tn.shape[0] < 2 or tn.shape[1] < 2:
        raise ValueError(f"The 'theta_nodes' parameter of {owner} must have shape (n, k) with n >= 2, k >= 2. Got shape {tn.shape}.")
    n, k = tn.shape
    te = np.asarray(theta_edges, dtype=np.float64)
    if te.shape != (n - 1, k, k):
        raise ValueError(f"The 'theta_edges' parameter of {owner} must have shape ({n - 1}, {k}, {k}) to match theta_nodes. Got {te.shape}.")
    model = chain_features(n, k, enumerate_omega=False)
    theta = model.pack(tn, te)
    log_h = model.clique_log_h(h_nodes, h_edges)
    return _chain_bound(theta, model.clique_features, log_h, owner)


# ------------------------------------------------------------------- Algorithm 4


class LowRankBound(NamedTuple):
    """Algorithm 4's bound: Sigma_LR = V^T diag(S) V + diag(D) majorizes Algorithm 1's Sigma.

    log_z, mu as in :func:`compute_bound`; V (k, d) with orthonormal rows; S (k,) >= 0 the
    diagonal of the paper's S; D (d,) >= 0 the diagonal of the paper's D.
    """

    log_z: float
    mu: np.ndarray
    V: np.ndarray
    S: np.ndarray
    D: np.ndarray

    def sigma(self) -> np.ndarray:
        """The dense d x d curvature V^T diag(S) V + diag(D)."""
        out = (self.V.T * self.S) @ self.V
        out = 0.5 * (out + out.T)
        out[np.diag_indices_from(out)] += self.D
        return out

    def value(self, theta: Any, theta_tilde: Any) -> np.ndarray | float:
        """The bound on log Z at theta ((d,) or (m, d)) without forming Sigma: O(m k d)."""
        owner = "LowRankBound.value"
        d = self.mu.shape[0]
        theta_tilde = _check_theta(theta_tilde, owner, d, name="theta_tilde")
        theta = _check_theta(theta, owner, d, allow_many=True)
        delta = theta - theta_tilde
        proj = delta @ self.V.T
        quad = np.sum(proj * proj * self.S, axis=-1) + np.sum(delta * delta * self.D, axis=-1)
        out = self.log_z + delta @ self.mu + 0.5 * quad
        return float(out) if theta.ndim == 1 else out

    def solve(self, b: Any, lam: float = 0.0) -> np.ndarray:
        """(Sigma_LR + lam I)^{-1} b by the Woodbury formula, O(d k^2 + k^3) (§6).

        With U = V^T diag(sqrt(S)) and E = diag(D) + lam I:
        (E + U U^T)^{-1} = E^{-1} - E^{-1} U (I + U^T E^{-1} U)^{-1} U^T E^{-1}
        (the paper's form with S^{-1} needs S > 0; this one does not).  Needs D + lam > 1e-14 max(S, D + lam).
        b : (d,) or (d, m).
        """
        owner = "LowRankBound.solve"
        lam = check_float("lam", lam, owner, 0.0)
        d = self.mu.shape[0]
        b = np.asarray(b, dtype=np.float64)
        if b.ndim not in (1, 2) or b.shape[0] != d or not np.all(np.isfinite(b)):
            raise ValueError(f"The 'b' parameter of {owner} must be a finite array of shape ({d},) or ({d}, m). Got shape {b.shape}.")
        E = self.D + lam
        top = max(float(self.S.max(initial=0.0)), float(E.max()))
        if not E.min() > 1e-14 * top:
            raise ValueError(f"The 'lam' parameter of {owner} must make D + lam > 0 (D has zeros or is "
                             f"negligible: Sigma + lam I is singular). Got {lam!r}; use lam > 0.")
        U = self.V.T * np.sqrt(self.S)
        Einv_b = b / (E if b.ndim == 1 else E[:, None])
        Einv_U = U / E[:, None]
        K = np.eye(U.shape[1]) + U.T @ Einv_U
        return Einv_b - Einv_U @ np.linalg.solve(K, U.T @ Einv_b)


def low_rank_bound(theta: Any, F: Any, h: Any, rank: int) -> LowRankBound:
    """Algorithm 4 (LowRankBound) for one partition function (t = 1; lambda is added at solve).

    theta : (d,) theta_tilde; F : (|Omega|, d) rows in order; h : (|Omega|,) >= 0 or None
    (ones); rank : k in [1, d].  Returns a :class:`LowRankBound` (log_z, mu, V, S, D) with
    ``.value(theta, theta_tilde)``, ``.sigma()`` and ``.solve(b, lam)`` (Woodbury).

    Runs Algorithm 1's recursion but stores Sigma as V^T diag(S) V + diag(D) with V (rank, d)
    orthonormal: each rank-one term is projected on V, the rank-(k+1) system is diagonalised
    and its smallest eigenpair is absorbed into the diagonal D by lam u u^T <=
    lam |u|_1 diag(|u|) (supplement, Lemma 3 and Inequality 3).  The result majorizes
    Algorithm 1's Sigma (same order) in the Loewner order, hence its bound majorizes log Z
    for every rank in 1..d; rank = d reproduces Algorithm 1 (D = 0 up to rounding).
    Unlike the printed pseudo-code, the cross terms between the projection p = V r and the
    residual g are kept (see :func:`boltzlab.engine.kernels.bound.low_rank_bound`).  Cost
    O(|Omega| (k^2 d + k^3)).
    """
    owner = "low_rank_bound"
    theta, F, h = _check_model(theta, F, h, owner)
    d = F.shape[1]
    rank = check_int("rank", rank, owner, 1)
    if rank > d:
        raise ValueError(f"The 'rank' parameter of {owner} must be an int in [1, d] = [1, {d}]. Got {rank}.")
    log_alpha = _log_alpha(theta, F, h, owner)
    log_z, mu, V, S, D = kernels.low_rank_bound(F, log_alpha, rank)
    return LowRankBound(float(log_z), mu, V, S, D)


# ------------------------------------------------------------------------ warm-up


def warm_up_bound() -> None:
    """Compile (or load from numba's cache) the bound kernels on tiny problems."""
    model = chain_features(2, 2)
    theta = np.linspace(-0.5, 0.5, model.d)
    h = np.ones(model.F.shape[0])
    h[0] = 0.0
    compute_bound(theta, model.F, h)
    junction_tree_bound(*model.unpack(theta))
    lr = low_rank_bound(theta, model.F, h, rank=2)
    lr.solve(np.ones(model.d), lam=1.0)
