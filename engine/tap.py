"""TAP machines: RBMs with general unit priors, inferred and trained through the TAP free
energy (Tramel, Gabrié, Manoel, Caltagirone & Krzakala 2018, §§III-VI, Algorithms 1-2).

Model (eq. 9) with W (Nv, Nh) and per-layer priors (see :mod:`boltzlab.engine.kernels.tap`):

    P(x, h) proportional to exp(x^T W h) prod_i mu_i(x_i) prod_j mu_j(h_j),

where the biases b_vis, b_hid are the priors' linear parameters U, so binary {0, 1} priors
give exactly the RBM of :mod:`boltzlab.engine.rbm` (E = -v^T W h - b_vis^T v - b_hid^T h) and the
TAP estimate of log Z is comparable with :func:`boltzlab.engine.rbm.log_partition_exact`.

* :func:`tap_fixed_points` -- Algorithm 1 for K chains at once.
* :func:`tap_free_energy` -- eq. 36; :func:`unique_solutions` -- distinct fixed points, their
  free energies and the Helmholtz estimate (§V.2, §VII.3).
* :func:`tap_log_partition`, :func:`tap_log_likelihood` (eq. 39), :func:`tap_gradient`
  (eqs. 40-42).
* :class:`TAPTrainer` -- Algorithm 2 as a Trainer (see engine/stepping.py).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Literal, Mapping

import numpy as np

from .checks import check_choice, check_float, check_int, check_seed
from .kernels import tap as kernels
from .rbm import (
    MAX_EXACT_UNITS,
    _check_params,
    base_rate_biases,
    check_binary,
    check_dtype,
    check_dtype_matches,
    log_partition_exact,
)
from .stepping import Record, as_scalar
from .tap_priors import PRIOR_CODES, PRIOR_KINDS, TRUNCATED, Prior, _layer, prior_log_partition  # noqa: F401 - this module's names too
from .threads import single_blas

#: The paper's convergence rule (Fig. 3): mean squared change of the magnetizations.
DEFAULT_TOL = 1e-8
#: For log Z estimates compared with exact values: RMS change per unit below 1e-12.
TIGHT_TOL = 1e-24
DEFAULT_MAX_ITER = 1000
#: Two converged chains are the same TAP solution when every magnetization (a_v and a_h)
#: agrees within this.  At the paper's tol = 1e-8 chains stop while still moving, about
#: 150 sqrt(tol) from the fixed point: on a 784 x 100 RBM trained on MNIST (600 chains from
#: data) chains of one solution (identified at tol = 1e-20) ended <= 0.03 apart, distinct
#: solutions >= 0.95 apart (a distinct fixed point flips at least one unit).
DEFAULT_UNIQUE_TOL = 0.1


# -------------------------------------------------------------------- inference


@dataclass(frozen=True)
class TAPResult:
    """Moments of K chains after Algorithm 1: a (means) and c (variances) of each layer."""

    a_vis: np.ndarray
    c_vis: np.ndarray
    a_hid: np.ndarray
    c_hid: np.ndarray
    iterations: np.ndarray  # sweeps used per chain
    converged: np.ndarray  # bool per chain

    @property
    def n_chains(self) -> int:
        return int(self.a_vis.shape[0])


class _Model:
    """Validated parameters in the kernels' calling convention."""

    def __init__(self, W, b_vis, b_hid, prior_vis, prior_hid, owner, field_vis=None, n_chains=None, dtype="float64"):
        W, b_vis, b_hid = _check_params(W, b_vis, b_hid, owner)
        # W in the precision of the products; biases and prior parameters stay float64
        self.W = W if dtype == "float64" else np.ascontiguousarray(W, dtype=dtype)
        self.vis = _layer(prior_vis, b_vis, "prior_vis", owner)
        self.hid = _layer(prior_hid, b_hid, "prior_hid", owner)
        self.has_field = field_vis is not None
        if self.has_field:
            field = np.asarray(field_vis, dtype=np.float64)
            want = (n_chains, self.W.shape[0])
            if field.shape != want or not np.all(np.isfinite(field)):
                raise ValueError(f"The 'field_vis' parameter of {owner} must be a finite array of shape {want} (one row per chain). Got shape {field.shape}.")
            self.field = np.ascontiguousarray(field)
        else:
            self.field = np.zeros((1, 1))

    def args(self) -> tuple:
        return (self.W, *self.vis, *self.hid, self.field, self.has_field)


def _check_moments(X: Any, name: str, owner: str, n_cols: int, n_rows: int | None = None) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] != n_cols or (n_rows is not None and X.shape[0] != n_rows):
        rows = "K >= 1" if n_rows is None else str(n_rows)
        raise ValueError(f"The '{name}' parameter of {owner} must be a 2-d array of shape ({rows}, {n_cols}). Got shape {X.shape}.")
    if not np.all(np.isfinite(X)):
        raise ValueError(f"The '{name}' parameter of {owner} must be finite. Got NaN or inf.")
    return np.ascontiguousarray(X)


def tap_fixed_points(
    W: np.ndarray, b_vis: np.ndarray, b_hid: np.ndarray, init_vis: np.ndarray, *,
    prior_vis: str | Prior = "bernoulli", prior_hid: str | Prior = "bernoulli",
    field_vis: np.ndarray | None = None, damping: float = 0.0, tol: float = DEFAULT_TOL,
    max_iter: int = DEFAULT_MAX_ITER, init_c_vis: np.ndarray | None = None, dtype: str = "float64",
) -> TAPResult:
    """TAP inference, Algorithm 1, for K = len(init_vis) chains at once.

    Each sweep updates the hidden layer, A_h = -c_v W^2, B_h = A_h a_h + a_v W,
    (a_h, c_h) = (f_a, f_c)(B_h, A_h) (eqs. 33-35), then the visible layer the same way
    from the new hidden moments.  Chains start at a_v = ``init_vis`` (data rows, eq. 37, or
    random magnetizations, :func:`random_init`) and c_v = 0 (eq. 38) unless ``init_c_vis``.
    A chain has converged when the mean squared change of its magnetizations (a_v, a_h)
    over one sweep is below ``tol`` (the paper's 1e-8); it then stops, independently of
    the others.  ``damping`` in [0, 1) keeps that fraction of the old moments per update.
    ``field_vis`` (K, Nv) adds a per-chain field to the visible prior (U -> U + field), as
    for denoising on a binary symmetric channel (§VII.4, eq. 47).

    ``dtype`` ("float64" default, or "float32") is the precision of the products and of the
    returned moments.  float32 runs about twice as fast but its magnetizations stop moving
    at rounding level (~1e-7): use a ``tol`` >= 1e-12 with it, and :func:`refine_fixed_points`
    before comparing with exact answers.
    """
    owner = "tap_fixed_points"
    dtype = check_dtype(dtype, owner)
    init = np.asarray(init_vis, dtype=np.float64)
    model = _Model(W, b_vis, b_hid, prior_vis, prior_hid, owner, field_vis, init.shape[0] if init.ndim == 2 else None,
                   dtype=dtype)
    n_vis, n_hid = model.W.shape
    av = _check_moments(init, "init_vis", owner, n_vis).astype(dtype)
    K = av.shape[0]
    cv = (np.zeros((K, n_vis), dtype) if init_c_vis is None
          else _check_moments(init_c_vis, "init_c_vis", owner, n_vis, K).astype(dtype))
    damping = check_float("damping", damping, owner, 0.0, 1.0)
    tol = check_float("tol", tol, owner, 0.0)
    max_iter = check_int("max_iter", max_iter, owner, 1)
    ah = np.zeros((K, n_hid), dtype)
    ch = np.zeros((K, n_hid), dtype)
    iters = np.zeros(K, dtype=np.int64)
    conv = np.zeros(K, dtype=np.bool_)
    single_blas()
    kernels.tap_iterate_blocks(*model.args(), av, cv, ah, ch, damping, tol, max_iter, iters, conv)
    return TAPResult(av, cv, ah, ch, iters, conv)


def refine_fixed_points(
    W: np.ndarray, b_vis: np.ndarray, b_hid: np.ndarray, result: TAPResult, *,
    prior_vis: str | Prior = "bernoulli", prior_hid: str | Prior = "bernoulli",
    field_vis: np.ndarray | None = None, damping: float = 0.0, tol: float = DEFAULT_TOL,
    max_iter: int = DEFAULT_MAX_ITER,
) -> TAPResult:
    """Continue Algorithm 1 in float64 from every converged chain of ``result`` (any dtype).

    For estimates reported to users or compared with exact answers (eqs. 36, 39): a float32
    solve finds the fixed points fast, a few float64 sweeps from all four moments (a, c of
    both layers, so the first sweep starts *at* the float32 fixed point) settle them to
    ``tol`` in float64.  Chains that had not converged are returned as they were (float64,
    not converged), so the result's counts never include a chain float32 could not settle.
    ``iterations`` adds the float64 sweeps to the float32 ones.
    """
    owner = "refine_fixed_points"
    model = _Model(W, b_vis, b_hid, prior_vis, prior_hid, owner, field_vis, result.n_chains)
    n_vis, n_hid = model.W.shape
    K = result.n_chains
    av, cv, ah, ch = (_check_moments(getattr(result, name), f"result.{name}", owner, n, K).copy()
                      for name, n in (("a_vis", n_vis), ("c_vis", n_vis), ("a_hid", n_hid), ("c_hid", n_hid)))
    damping = check_float("damping", damping, owner, 0.0, 1.0)
    tol = check_float("tol", tol, owner, 0.0)
    max_iter = check_int("max_iter", max_iter, owner, 1)
    iters = np.asarray(result.iterations, dtype=np.int64).copy()
    conv = np.asarray(result.converged, dtype=np.bool_).copy()
    todo = np.flatnonzero(conv)
    if todo.size:
        sub = [np.ascontiguousarray(x[todo]) for x in (av, cv, ah, ch)]
        it = np.zeros(todo.size, dtype=np.int64)
        ok = np.zeros(todo.size, dtype=np.bool_)
        args = list(model.args())
        if model.has_field:
            args[-2] = np.ascontiguousarray(model.field[todo])
        single_blas()
        kernels.tap_iterate_blocks(*args, *sub, damping, tol, max_iter, it, ok)
        for x, y in zip((av, cv, ah, ch), sub):
            x[todo] = y
        iters[todo] += it
        conv[todo] = ok
    return TAPResult(av, cv, ah, ch, iters, conv)


def random_init(n_chains: int, n_visible: int, seed: int, prior_vis: str | Prior = "bernoulli") -> np.ndarray:
    """Random initial magnetizations, uniform over the prior's range (an alternative to eq. 37)."""
    owner = "random_init"
    n_chains = check_int("n_chains", n_chains, owner, 1)
    n_visible = check_int("n_visible", n_visible, owner, 1)
    code, _, _, _, lo, hi = _layer(prior_vis, np.zeros(n_visible), "prior_vis", owner)
    if code == kernels.SPIN:
        lo, hi = -1.0, 1.0
    return np.random.default_rng(check_seed(owner, seed)).uniform(lo, hi, (n_chains, n_visible))


def tap_free_energy(
    W: np.ndarray, b_vis: np.ndarray, b_hid: np.ndarray, result: TAPResult, *,
    prior_vis: str | Prior = "bernoulli", prior_hid: str | Prior = "bernoulli", field_vis: np.ndarray | None = None,
) -> np.ndarray:
    """The TAP free energy F (eq. 36, F = -RHS) of every chain's moments, (K,).

    Meaningful at fixed points (eq. 35), where -F estimates log Z; (B, A) are recomputed
    from the moments by eqs. 33-34.
    """
    owner = "tap_free_energy"
    model = _Model(W, b_vis, b_hid, prior_vis, prior_hid, owner, field_vis, result.n_chains)
    n_vis, n_hid = model.W.shape
    K = result.n_chains
    moments = [_check_moments(getattr(result, name), f"result.{name}", owner, n, K)
               for name, n in (("a_vis", n_vis), ("c_vis", n_vis), ("a_hid", n_hid), ("c_hid", n_hid))]
    return kernels.tap_free_energy(*model.args(), *moments)


# ------------------------------------------------------------ unique solutions


@dataclass(frozen=True)
class UniqueSolutions:
    """The distinct TAP solutions among the converged chains, sorted by free energy.

    ``labels[k]`` is the solution chain k reached (-1 if it did not converge) and
    ``counts[s]`` how many chains reached solution s.  Each solution is represented by its
    member chain of lowest free energy (ties: lexicographically smallest moments).
    """

    a_vis: np.ndarray
    c_vis: np.ndarray
    a_hid: np.ndarray
    c_hid: np.ndarray
    free_energies: np.ndarray
    labels: np.ndarray
    counts: np.ndarray
    n_chains: int
    n_converged: int
    tol: float

    @property
    def count(self) -> int:
        return int(self.free_energies.shape[0])

    @property
    def helmholtz_free_energy(self) -> float:
        """The uniform average of the solutions' TAP free energies (§V.2): the estimate of -log Z."""
        return float(np.mean(self.free_energies)) if self.count else math.nan

    @property
    def log_partition(self) -> float:
        return -self.helmholtz_free_energy

    @property
    def unique_fraction(self) -> float:
        """Unique solutions per initialisation; near 1 warns of a spin-glass phase (§VII.3)."""
        return self.count / self.n_chains


def unique_solutions(
    W: np.ndarray, b_vis: np.ndarray, b_hid: np.ndarray, result: TAPResult, *,
    prior_vis: str | Prior = "bernoulli", prior_hid: str | Prior = "bernoulli", field_vis: np.ndarray | None = None,
    tol: float = DEFAULT_UNIQUE_TOL,
) -> UniqueSolutions:
    """Cluster the converged chains into distinct TAP solutions and take their free energies.

    Chains are joined (single linkage) when every magnetization of [a_v, a_h] agrees within
    ``tol`` (default :data:`DEFAULT_UNIQUE_TOL`); the count does not depend on the order of
    the chains, and duplicated chains never add solutions.
    """
    owner = "unique_solutions"
    tol = check_float("tol", tol, owner, 0.0)
    finite = np.ones(result.n_chains, dtype=bool)
    for arr in (result.a_vis, result.c_vis, result.a_hid, result.c_hid):
        finite &= np.all(np.isfinite(arr), axis=1)
    conv = np.flatnonzero(np.asarray(result.converged, dtype=bool) & finite)
    labels = np.full(result.n_chains, -1, dtype=np.int64)
    if conv.size == 0:
        empty = np.zeros((0, result.a_vis.shape[1])), np.zeros((0, result.a_hid.shape[1]))
        return UniqueSolutions(empty[0], empty[0].copy(), empty[1], empty[1].copy(), np.zeros(0), labels,
                               np.zeros(0, dtype=np.int64), result.n_chains, 0, tol)
    sub = TAPResult(result.a_vis[conv], result.c_vis[conv], result.a_hid[conv], result.c_hid[conv],
                    result.iterations[conv], result.converged[conv])
    field = None
    if field_vis is not None:
        field = np.asarray(field_vis, dtype=np.float64)
        if field.shape != result.a_vis.shape:
            raise ValueError(f"The 'field_vis' parameter of {owner} must have shape {result.a_vis.shape} (one row per chain). Got shape {field.shape}.")
        field = field[conv]
    F = tap_free_energy(W, b_vis, b_hid, sub, prior_vis=prior_vis, prior_hid=prior_hid, field_vis=field)
    X = np.ascontiguousarray(np.hstack([sub.a_vis, sub.a_hid]))
    roots = kernels.cluster_roots(X, tol)
    # representative per component: lowest F, then lexicographically smallest moments
    reps = {}
    for i in _canonical_order(F, X):
        reps.setdefault(int(roots[i]), int(i))
    rep_idx = np.array(list(reps.values()), dtype=np.int64)
    rep_idx = rep_idx[_canonical_order(F[rep_idx], X[rep_idx])]
    solution_of_root = {int(roots[i]): s for s, i in enumerate(rep_idx)}
    local = np.array([solution_of_root[int(r)] for r in roots], dtype=np.int64)
    labels[conv] = local
    counts = np.bincount(local, minlength=rep_idx.size)
    return UniqueSolutions(sub.a_vis[rep_idx], sub.c_vis[rep_idx], sub.a_hid[rep_idx], sub.c_hid[rep_idx],
                           F[rep_idx], labels, counts, result.n_chains, int(conv.size), tol)


def _canonical_order(F: np.ndarray, X: np.ndarray) -> np.ndarray:
    """Indices sorting by F, ties (equal F) broken by the rows of X lexicographically:
    an order that does not depend on the order of the input rows."""
    order = np.argsort(F, kind="stable")
    Fs = F[order]
    start = 0
    while start < order.size:
        end = start + 1
        while end < order.size and Fs[end] == Fs[start]:
            end += 1
        if end - start > 1:
            group = order[start:end]
            G = X[group]
            # only the columns where the tied rows differ decide (constant keys change no
            # lexsort order, and equal rows keep theirs: stable), often none of Nv + Nh
            varying = np.flatnonzero(np.any(G != G[0], axis=0))
            if varying.size:
                order[start:end] = group[np.lexsort(G[:, varying].T[::-1])]
        start = end
    return order


# ------------------------------------------------------- log Z, likelihood, gradient


def tap_log_partition(
    W: np.ndarray, b_vis: np.ndarray, b_hid: np.ndarray, init_vis: np.ndarray, *,
    damping: float = 0.0, tol: float = TIGHT_TOL, max_iter: int = 20_000, unique_tol: float = DEFAULT_UNIQUE_TOL,
    dtype: str = "float64",
) -> float:
    """TAP estimate of log Z of a binary {0, 1} RBM (same Z as :func:`boltzlab.engine.rbm.log_partition_exact`).

    Runs Algorithm 1 from the rows of ``init_vis`` to ``tol`` (default :data:`TIGHT_TOL`, an
    RMS change of 1e-12 per unit, so the estimate itself is accurate far below 1e-6) and
    returns -F averaged uniformly over the distinct solutions reached (eq. 39, §V.2).
    With ``dtype="float32"`` Algorithm 1 runs in float32 to the paper's tol = 1e-8 and the
    fixed points are then refined in float64 to ``tol`` (:func:`refine_fixed_points`) before
    eq. 36 is evaluated (always in float64).

    Raises
    ------
    RuntimeError
        If no chain converged within ``max_iter`` sweeps (try ``damping``).
    """
    dtype = check_dtype(dtype, "tap_log_partition")
    if dtype == "float64":
        result = tap_fixed_points(W, b_vis, b_hid, init_vis, damping=damping, tol=tol, max_iter=max_iter)
    else:
        rough = tap_fixed_points(W, b_vis, b_hid, init_vis, damping=damping, tol=max(tol, DEFAULT_TOL),
                                 max_iter=max_iter, dtype=dtype)
        result = refine_fixed_points(W, b_vis, b_hid, rough, damping=damping, tol=tol, max_iter=max_iter)
    unique = unique_solutions(W, b_vis, b_hid, result, tol=unique_tol)
    if unique.count == 0:
        raise RuntimeError(f"tap_log_partition: none of the {result.n_chains} chains converged within {max_iter} sweeps "
                           f"to tol = {tol:g}; try damping > 0.")
    return unique.log_partition


def _data_layer_check(X: Any, code: int, lo: float, hi: float, name: str, owner: str, n_visible: int) -> np.ndarray:
    """Data rows valid for the visible prior: 0/1, +-1, or within [lo, hi]."""
    if code == kernels.BERNOULLI:
        return check_binary(X, name, owner, n_visible)
    X = _check_moments(X, name, owner, n_visible)
    if code == kernels.SPIN:
        bad = ~((X == -1.0) | (X == 1.0))
        allowed = "only -1 and +1"
    else:
        bad = (X < lo) | (X > hi)
        allowed = f"values in [{lo:g}, {hi:g}]"
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise ValueError(f"The '{name}' parameter of {owner} must hold {allowed}. Got {X[i, j]!r} at row {i}, column {j}.")
    return X


def tap_log_likelihood(
    W: np.ndarray, b_vis: np.ndarray, b_hid: np.ndarray, X: np.ndarray, solutions: UniqueSolutions, *,
    prior_vis: str | Prior = "bernoulli", prior_hid: str | Prior = "bernoulli",
) -> float:
    """Mean over the rows x of X of the TAP log-likelihood (eq. 39), in nats per sample:

        ln P(x) ~ sum_i ln mu_i(x_i) + sum_j ln Z_j^h(sum_i W_ij x_i, 0) - log Z_TAP,

    log Z_TAP = -(mean TAP free energy of the distinct solutions).  For binary units the
    first two terms are -F(x), the RBM's free energy, so this is -F(x) - log Z_TAP.
    Not normalised per unit (:class:`TAPTrainer` records divide by Nv + Nh).
    """
    owner = "tap_log_likelihood"
    model = _Model(W, b_vis, b_hid, prior_vis, prior_hid, owner)
    X = _data_layer_check(X, model.vis[0], model.vis[4], model.vis[5], "X", owner, model.W.shape[0])
    if solutions.count == 0:
        raise ValueError(f"The 'solutions' parameter of {owner} must hold at least one converged TAP solution. Got none.")
    logp = kernels.data_terms(X, model.W, *model.vis, *model.hid)[0]
    return float(np.mean(logp) - solutions.log_partition)


def tap_gradient(
    W: np.ndarray, b_vis: np.ndarray, b_hid: np.ndarray, X: np.ndarray, solutions: UniqueSolutions, *,
    prior_vis: str | Prior = "bernoulli", prior_hid: str | Prior = "bernoulli",
) -> dict[str, np.ndarray]:
    """Gradient of :func:`tap_log_likelihood` w.r.t. the parameters (eqs. 40-42, C.1.1, C.2.).

    Returns {"W", "b_vis", "b_hid"} and, for truncated priors, "precision_vis" /
    "precision_hid" (d/dV) and for Gauss-Bernoulli "rho_vis" / "rho_hid" (d/drho).  The TAP
    free energy is stationary in the moments at a fixed point (eq. 35), so only the explicit
    dependence on the parameters counts: e.g. dW = <x f_a^h>_X - <a_v a_h^T + W c_v c_h^T>.
    """
    owner = "tap_gradient"
    model = _Model(W, b_vis, b_hid, prior_vis, prior_hid, owner)
    X = _data_layer_check(X, model.vis[0], model.vis[4], model.vis[5], "X", owner, model.W.shape[0])
    if solutions.count == 0:
        raise ValueError(f"The 'solutions' parameter of {owner} must hold at least one converged TAP solution. Got none.")
    return _gradient(model, X, solutions)


def _gradient(model: _Model, X: np.ndarray, sol: UniqueSolutions) -> dict[str, np.ndarray]:
    """Eqs. 40-42 with the products in the precision of ``model.W``."""
    W = model.W
    X = np.ascontiguousarray(X, dtype=W.dtype)
    sol = _astype_solutions(sol, W.dtype)
    _, Ha, Hc, Hnz = kernels.data_terms(X, W, *model.vis, *model.hid)
    if model.vis[0] == kernels.TRUNC_GAUSS_BERNOULLI or model.hid[0] == kernels.TRUNC_GAUSS_BERNOULLI:
        Bv, Av, Bh, Ah = kernels.tap_fields(W, sol.a_vis, sol.c_vis, sol.a_hid, sol.c_hid)
        nzv = kernels.layer_nonzero(model.vis[0], Bv, Av, *model.vis[1:])
        nzh = kernels.layer_nonzero(model.hid[0], Bh, Ah, *model.hid[1:])
    else:
        nzv = np.ones_like(sol.a_vis)
        nzh = np.ones_like(sol.a_hid)
    nzv, nzh = (np.ascontiguousarray(x, dtype=W.dtype) for x in (nzv, nzh))
    gW, gUv, gVv, gRv, gUh, gVh, gRh = kernels.tap_gradient(
        X, Ha, Hc, Hnz, sol.a_vis, sol.c_vis, sol.a_hid, sol.c_hid, nzv, nzh, W, model.vis[3], model.hid[3])
    out = {"W": gW, "b_vis": gUv, "b_hid": gUh}
    for side, code, gV, gR in (("vis", model.vis[0], gVv, gRv), ("hid", model.hid[0], gVh, gRh)):
        if code in (kernels.TRUNC_GAUSS, kernels.TRUNC_GAUSS_BERNOULLI):
            out[f"precision_{side}"] = gV
        if code == kernels.TRUNC_GAUSS_BERNOULLI:
            out[f"rho_{side}"] = gR
    return out


def _astype_solutions(sol: UniqueSolutions, dtype) -> UniqueSolutions:
    if sol.a_vis.dtype == dtype:
        return sol
    cast = {name: np.ascontiguousarray(getattr(sol, name), dtype=dtype) for name in ("a_vis", "c_vis", "a_hid", "c_hid")}
    return UniqueSolutions(**cast, free_energies=sol.free_energies, labels=sol.labels, counts=sol.counts,
                           n_chains=sol.n_chains, n_converged=sol.n_converged, tol=sol.tol)


# ----------------------------------------------------------------------- model samples

#: the unit priors :func:`gibbs_sweeps` samples (discrete units: their conditionals are logistic)
SAMPLED_PRIORS = ("bernoulli", "spin")
_BLAS: Any = None  # a threadpoolctl controller, made on first use


def _one_blas_thread():
    """A context with BLAS on one thread: the sweeps' products are small (16 x Nv x Nh), and
    a multi-threaded BLAS on a busy 2-core machine took ~50 ms each instead of ~0.4 ms."""
    global _BLAS
    if _BLAS is None:
        from threadpoolctl import ThreadpoolController
        _BLAS = ThreadpoolController()
    return _BLAS.limit(limits=1, user_api="blas")


def _conditional_sample(field: np.ndarray, kind: str, rng: np.random.Generator) -> np.ndarray:
    """x ~ P(x | field) with P(x) proportional to e^{field x} on the prior's support (the
    Bernoulli and spin measures mu = e^{U x} of Appendix C, U folded into ``field``)."""
    if kind == "bernoulli":
        return (rng.random(field.shape) < 1.0 / (1.0 + np.exp(-field))).astype(np.float64)
    return np.where(rng.random(field.shape) < 1.0 / (1.0 + np.exp(-2.0 * field)), 1.0, -1.0)


def gibbs_sweeps(W: np.ndarray, b_vis: np.ndarray, b_hid: np.ndarray, V: np.ndarray, k: int, seed: int, *,
                 prior_vis: str = "bernoulli", prior_hid: str = "bernoulli") -> tuple[np.ndarray, np.ndarray]:
    """``k`` block Gibbs sweeps (h ~ P(h | v), then v ~ P(v | h)) of the RBM whose joint is
    P(v, h) proportional to exp(v^T W h) times the unit priors mu(x) = e^{U x} (eq. 1 with the
    Bernoulli or spin priors of §IV / Appendix C), from each row of ``V``.

    Returns the visible states after the last sweep (n, Nv) and the hidden sample that
    produced them (n, Nh).  Seeded: the same inputs give the same chains.  Only discrete
    priors ("bernoulli", "spin") are sampled; ``V`` is not modified.
    """
    owner = "gibbs_sweeps"
    prior_vis = check_choice("prior_vis", prior_vis, owner, SAMPLED_PRIORS)
    prior_hid = check_choice("prior_hid", prior_hid, owner, SAMPLED_PRIORS)
    k = check_int("k", k, owner, 1)
    W = np.asarray(W, dtype=np.float64)
    b_vis = np.asarray(b_vis, dtype=np.float64)
    b_hid = np.asarray(b_hid, dtype=np.float64)
    V = np.asarray(V, dtype=np.float64)
    if V.ndim != 2 or V.shape[1] != W.shape[0]:
        raise ValueError(f"The 'V' parameter of {owner} must have shape (n, {W.shape[0]}). Got shape {V.shape}.")
    rng = np.random.default_rng(check_seed(owner, seed))
    H = np.zeros((V.shape[0], W.shape[1]))
    with _one_blas_thread():
        for _ in range(k):
            H = _conditional_sample(V @ W + b_hid, prior_hid, rng)
            V = _conditional_sample(H @ W.T + b_vis, prior_vis, rng)
    return V, H


# ----------------------------------------------------------------------- trainer


def _derived_rng(*words: int) -> np.random.Generator:
    return np.random.default_rng([int(w) for w in words])


def _initial_visible_prior(kind: str, V: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(U, precision, rho) of the visible prior matched to the data ("theta^(0) <- X", Alg. 2).

    Bernoulli: base-rate log-odds (engine.rbm.base_rate_biases); spin: atanh of the mean
    with one pseudo-count per sign; truncated Gaussian: V = 1/var, U = mean/var of each
    column; Gauss-Bernoulli: rho = share of non-zeros (one pseudo-count each way) and the
    Gaussian matched to the non-zero values.  Variances are floored at 1e-4 (constant
    columns); columns with < 2 non-zeros use the uniform's mean and variance on [lo, hi].
    """
    n, d = V.shape
    prec = np.ones(d)
    rho = np.full(d, 0.5)
    if kind == "bernoulli":
        return base_rate_biases(V), prec, rho
    if kind == "spin":
        p = ((V > 0).sum(axis=0) + 1.0) / (n + 2.0)
        return np.arctanh(2.0 * p - 1.0), prec, rho
    if kind == "truncated_gaussian":
        var = np.maximum(V.var(axis=0), 1e-4)
        return V.mean(axis=0) / var, 1.0 / var, rho
    nz = V != 0.0
    counts = nz.sum(axis=0)
    rho = (counts + 1.0) / (n + 2.0)
    mean = np.full(d, 0.5 * (lo + hi))
    var = np.full(d, (hi - lo) ** 2 / 12.0)
    for i in np.flatnonzero(counts >= 2):
        values = V[nz[:, i], i]
        mean[i] = values.mean()
        var[i] = max(values.var(), 1e-4)
    return mean / var, 1.0 / var, rho


class TAPTrainer:
    """TAP training of an RBM with general unit priors (Algorithm 2) as a Trainer.

    Per mini-batch of ``batch_size`` (M) rows: run Algorithm 1 from ``n_chains`` (K)
    initialisations -- the batch's own rows (eqs. 37-38; beyond M, further data rows) or
    random magnetizations (``init="random"``) -- keep the distinct converged solutions
    (:func:`unique_solutions`), and ascend the TAP log-likelihood (eqs. 40-42, averaging
    uniformly over the distinct solutions, as for the Helmholtz estimate):

        vel <- momentum vel + learning_rate (dW - weight_decay W),   W <- W + vel
        theta <- theta + learning_rate d theta      (biases U, precisions V, slab weights rho)

    i.e. R(W) = -W (l2) and the momentum term eta Delta W^(t-1) of Alg. 2 is the previous
    update.  rho is kept in [1e-3, 1 - 1e-3].  Defaults are Table 1's for binary MNIST
    (M = K = 100, gamma = 0.005, epsilon = 0.001, eta = 0.5) and W ~ N(0, 0.001^2) (§VII.3).

    Initialisation: W as above, the visible prior matched to the data
    (:func:`_initial_visible_prior`), hidden U = 0, V = 1, rho = 0.5.  Batches follow a
    permutation per epoch drawn from (seed, epoch); extra initial rows from (seed, batch);
    TAP inference is deterministic, so :meth:`state_dict` resumes bit-exactly.

    Records (one per ``step_unit``: "batch" or "epoch") evaluate the parameters *after*
    the step on ``n_eval`` rows drawn once from the data (default min(n, K)): TAP inference
    from those rows (or fixed random starts), then

    * ``tap_log_likelihood``: the mean over the evaluation rows of eq. 39 divided by the
      number of units Nv + Nh -- the paper's "normalized (per-unit) TAP log-likelihood"
      (Fig. 3), comparable across model sizes;
    * ``log_likelihood`` (and ``log_z_exact``): the exact value, normalised the same way,
      when both priors are Bernoulli and the smaller layer has <= 20 units;
    * ``n_solutions``, ``unique_fraction`` (solutions per initialisation, §VII.3),
      ``helmholtz_free_energy`` (mean TAP free energy of the solutions, not normalised),
      ``log_z_tap``, ``n_converged``, ``tap_iterations`` (mean sweeps), ``batch_solutions``
      (distinct solutions in the last training batch), ``wall_time`` (seconds of this step,
      training and evaluation), ``elapsed``;
    * arrays W, b_vis, b_hid (and precision_* / rho_* for truncated priors),
      ``solution_free_energies``, ``solutions_vis`` (a_v) and ``solutions_hid`` (a_h);
    * with ``n_samples`` > 0, ``samples``: the visible states (n_samples, Nv) of that many
      persistent block Gibbs chains of the current model (:func:`gibbs_sweeps`), advanced
      ``sample_sweeps`` sweeps per step after training.  They show what the model generates
      and never enter the gradient (which uses the TAP solutions); discrete priors only.
      They start from uniform random states drawn from the seed, each step's sweeps from
      (seed, iteration), and :meth:`state_dict` carries them, so a resumed run continues them.

    ``dtype`` ("float32" default, or "float64") is the precision of Algorithm 1's sweeps
    during training and of the gradient products and W's update of Algorithm 2 (float32
    products run about twice as fast).  The biases and prior parameters, the solutions' free
    energies and everything a Record reports stay float64: an evaluation solves in ``dtype``
    and refines the fixed points in float64 (:func:`refine_fixed_points`) before eq. 36.

    In batch mode a step trains ``batches_per_step`` mini-batches (default 1), then
    evaluates: the evaluation costs about as much as one batch, so the live lab trains
    several per step.  With ``max_damping`` set, a batch in which no chain converges is
    redone with 1 - damping halved (up to ``max_damping``; the Record's ``damping`` and
    :attr:`damping_changes` say when) instead of stopping.  The trainer is done
    at ``max_epochs``, when the parameters stop being finite ("diverged"), or when no chain
    of a batch converges ("stalled": raise ``damping`` or ``max_iter``).
    """

    def __init__(
        self,
        V: np.ndarray,
        n_hidden: int,
        *,
        prior_vis: str = "bernoulli",
        prior_hid: str = "bernoulli",
        bounds: tuple[float, float] = (0.0, 1.0),
        batch_size: int = 100,
        n_chains: int = 100,
        learning_rate: float = 0.005,
        weight_decay: float = 0.001,
        momentum: float = 0.5,
        damping: float = 0.0,
        tol: float = DEFAULT_TOL,
        max_iter: int = DEFAULT_MAX_ITER,
        unique_tol: float = DEFAULT_UNIQUE_TOL,
        init: Literal["data", "random"] = "data",
        init_scale: float = 0.001,
        step_unit: Literal["batch", "epoch"] = "batch",
        max_epochs: int = 100,
        n_eval: int | None = None,
        batches_per_step: int = 1,
        max_damping: float | None = None,
        seed: int = 0,
        dtype: str = "float32",
        n_samples: int = 0,
        sample_sweeps: int = 5,
    ) -> None:
        owner = "TAPTrainer"
        self.dtype = check_dtype(dtype, owner)
        self.prior_vis = check_choice("prior_vis", prior_vis, owner, PRIOR_KINDS)
        self.prior_hid = check_choice("prior_hid", prior_hid, owner, PRIOR_KINDS)
        probe = _layer(Prior("truncated_gaussian", bounds=bounds), np.zeros(1), "bounds", owner)
        self.bounds = (probe[4], probe[5])
        shape = np.shape(V)
        if len(shape) != 2 or shape[0] < 1 or shape[1] < 1:
            raise ValueError(f"The 'V' parameter of {owner} must be a 2-d array with n >= 1 rows and >= 1 columns. Got shape {shape}.")
        self.V = _data_layer_check(V, PRIOR_CODES[self.prior_vis], *self.bounds, "V", owner, shape[1])
        self.n, self.n_visible = self.V.shape
        self.n_hidden = check_int("n_hidden", n_hidden, owner, 1)
        self.batch_size = min(check_int("batch_size", batch_size, owner, 1), self.n)
        self.n_chains = check_int("n_chains", n_chains, owner, 1)
        self.learning_rate = check_float("learning_rate", learning_rate, owner, 0.0, low_open=True)
        self.weight_decay = check_float("weight_decay", weight_decay, owner, 0.0)
        self.momentum = check_float("momentum", momentum, owner, 0.0, 1.0)
        self.damping = check_float("damping", damping, owner, 0.0, 1.0)
        self.tol = check_float("tol", tol, owner, 0.0)
        self.max_iter = check_int("max_iter", max_iter, owner, 1)
        self.unique_tol = check_float("unique_tol", unique_tol, owner, 0.0)
        self.init = check_choice("init", init, owner, ("data", "random"))
        self.init_scale = check_float("init_scale", init_scale, owner, 0.0)
        self.step_unit = check_choice("step_unit", step_unit, owner, ("batch", "epoch"))
        self.max_epochs = check_int("max_epochs", max_epochs, owner, 1)
        n_eval = min(self.n, self.n_chains) if n_eval is None else check_int("n_eval", n_eval, owner, 1)
        self.n_eval = min(n_eval, self.n)
        self.batches_per_step = check_int("batches_per_step", batches_per_step, owner, 1)
        if max_damping is not None:
            max_damping = check_float("max_damping", max_damping, owner, 0.0, 1.0)
        self.max_damping = max_damping
        self.damping_changes: list[tuple[int, float]] = []  # (iteration, new damping) raised on a stall
        self.seed = check_seed(owner, seed)
        self.n_samples = check_int("n_samples", n_samples, owner, 0)
        self.sample_sweeps = check_int("sample_sweeps", sample_sweeps, owner, 1)
        if self.n_samples and (self.prior_vis not in SAMPLED_PRIORS or self.prior_hid not in SAMPLED_PRIORS):
            raise ValueError(f"The 'n_samples' parameter of {owner} needs discrete priors ({', '.join(SAMPLED_PRIORS)}) "
                             f"on both layers to sample the model. Got prior_vis = {self.prior_vis!r}, "
                             f"prior_hid = {self.prior_hid!r}; use n_samples = 0.")
        self._samples = self._initial_samples()
        self.batches_per_epoch = -(-self.n // self.batch_size)
        self.exact = (self.prior_vis == self.prior_hid == "bernoulli"
                      and min(self.n_visible, self.n_hidden) <= MAX_EXACT_UNITS)
        pick = np.sort(_derived_rng(self.seed, 0).permutation(self.n)[: self.n_eval])
        self._V_eval = np.ascontiguousarray(self.V[pick])
        if self.init == "data":
            self._eval_init = self._V_eval
        else:
            self._eval_init = random_init(self.n_eval, self.n_visible, self.seed + 1, self._vis_prior_kind())
        U, prec, rho = _initial_visible_prior(self.prior_vis, self.V, *self.bounds)
        W = _derived_rng(self.seed, 1).normal(0.0, self.init_scale, (self.n_visible, self.n_hidden))
        self._set_state(W=W, b_vis=U, b_hid=np.zeros(self.n_hidden), precision_vis=prec, rho_vis=rho,
                        precision_hid=np.ones(self.n_hidden), rho_hid=np.full(self.n_hidden, 0.5),
                        vW=np.zeros_like(W), iteration=0, elapsed=0.0, status="running", message="")

    # -- state
    def _set_state(self, *, W, b_vis, b_hid, precision_vis, rho_vis, precision_hid, rho_hid, vW, iteration,
                   elapsed, status, message) -> None:
        # W and its velocity in the training precision; biases and prior parameters (vectors) float64
        self._W = np.array(W, dtype=self.dtype, order="C")
        self._b_vis = np.array(b_vis, dtype=np.float64)
        self._b_hid = np.array(b_hid, dtype=np.float64)
        self._prec_vis = np.array(precision_vis, dtype=np.float64)
        self._rho_vis = np.array(rho_vis, dtype=np.float64)
        self._prec_hid = np.array(precision_hid, dtype=np.float64)
        self._rho_hid = np.array(rho_hid, dtype=np.float64)
        self._vW = np.array(vW, dtype=self.dtype, order="C")
        self.iteration = int(iteration)
        self.elapsed = float(elapsed)
        self.status = str(status)
        self.message = str(message)
        self._perm_epoch = -1
        self._perm = np.empty(0, dtype=np.int64)

    def _vis_prior_kind(self) -> Prior:
        return Prior(self.prior_vis, bounds=self.bounds)

    def _initial_samples(self) -> np.ndarray:
        """The display chains' start: uniform random states of the visible prior, from the seed."""
        V0 = (_derived_rng(self.seed, 4).random((self.n_samples, self.n_visible)) < 0.5).astype(np.float64)
        return 2.0 * V0 - 1.0 if self.prior_vis == "spin" else V0

    def _advance_samples(self) -> None:
        """``sample_sweeps`` Gibbs sweeps of the display chains under the current parameters."""
        seed = int(_derived_rng(self.seed, 5, self.iteration).integers(2**31))
        self._samples, _ = gibbs_sweeps(self._W, self._b_vis, self._b_hid, self._samples, self.sample_sweeps, seed,
                                        prior_vis=self.prior_vis, prior_hid=self.prior_hid)

    @property
    def priors(self) -> tuple[Prior, Prior]:
        """The current (prior_vis, prior_hid) as :class:`Prior` objects (with learned V, rho)."""
        return (Prior(self.prior_vis, self._prec_vis, self._rho_vis, self.bounds),
                Prior(self.prior_hid, self._prec_hid, self._rho_hid, self.bounds))

    @property
    def params(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Copies of (W, b_vis, b_hid)."""
        return self._W.copy(), self._b_vis.copy(), self._b_hid.copy()

    @property
    def done(self) -> bool:
        return self.status != "running"

    @property
    def epoch(self) -> float:
        return self.iteration / self.batches_per_epoch

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._perm_epoch:
            self._perm = _derived_rng(self.seed, 2, epoch).permutation(self.n)
            self._perm_epoch = epoch
        return self._perm

    def _model(self, dtype: str | None = None) -> _Model:
        pv, ph = self.priors
        return _Model(self._W, self._b_vis, self._b_hid, pv, ph, "TAPTrainer", dtype=dtype or self.dtype)

    def _solve(self, init: np.ndarray, refine: bool = False) -> tuple[TAPResult, UniqueSolutions]:
        """Algorithm 1 in the training precision, then the distinct solutions (free energies
        in float64).  ``refine``: settle the fixed points in float64 first (evaluations)."""
        pv, ph = self.priors
        result = tap_fixed_points(self._W, self._b_vis, self._b_hid, init, prior_vis=pv, prior_hid=ph,
                                  damping=self.damping, tol=self.tol, max_iter=self.max_iter, dtype=self.dtype)
        if refine and self.dtype != "float64":
            result = refine_fixed_points(self._W, self._b_vis, self._b_hid, result, prior_vis=pv, prior_hid=ph,
                                         damping=self.damping, tol=self.tol, max_iter=self.max_iter)
        unique = unique_solutions(self._W, self._b_vis, self._b_hid, result, prior_vis=pv, prior_hid=ph,
                                  tol=self.unique_tol)
        return result, unique

    # -- stepping
    def _train_batch(self) -> int:
        """One update of Algorithm 2; returns the number of distinct solutions used."""
        t = self.iteration
        epoch, b = divmod(t, self.batches_per_epoch)
        rows = self._permutation(epoch)[b * self.batch_size:(b + 1) * self.batch_size]
        X = self.V[rows]
        if self.init == "random":
            init = random_init(self.n_chains, self.n_visible, int(_derived_rng(self.seed, 3, t).integers(2**31)),
                               self._vis_prior_kind())
        elif self.n_chains <= rows.size:
            init = X[: self.n_chains]
        else:
            extra = _derived_rng(self.seed, 3, t).integers(0, self.n, self.n_chains - rows.size)
            init = np.vstack([X, self.V[extra]])
        result, unique = self._solve(init)
        while unique.count == 0 and self.max_damping is not None and self.damping < self.max_damping - 1e-12:
            # No chain converged: halve 1 - damping (towards max_damping) and redo the batch;
            # damping changes the path of Algorithm 1, not its fixed points.
            self.damping = min(self.max_damping, 1.0 - (1.0 - self.damping) / 2.0)
            self.damping_changes.append((self.iteration, self.damping))
            result, unique = self._solve(init)
        if unique.count == 0:
            self.status = "stalled"
            self.message = (f"No TAP chain converged within {self.max_iter} sweeps at iteration {t}; "
                            "raise 'damping' or 'max_iter'.")
            return 0
        g = _gradient(self._model(), X, unique)
        self._vW *= self.momentum
        self._vW += self.learning_rate * (g["W"] - self.weight_decay * self._W)
        self._W += self._vW
        self._b_vis += self.learning_rate * g["b_vis"]
        self._b_hid += self.learning_rate * g["b_hid"]
        for side in ("vis", "hid"):
            if f"precision_{side}" in g:
                prec = self._prec_vis if side == "vis" else self._prec_hid
                prec += self.learning_rate * g[f"precision_{side}"]
            if f"rho_{side}" in g:
                rho = self._rho_vis if side == "vis" else self._rho_hid
                rho += self.learning_rate * g[f"rho_{side}"]
                np.clip(rho, 1e-3, 1.0 - 1e-3, out=rho)
        self.iteration += 1
        finite = all(np.all(np.isfinite(a)) for a in (self._W, self._b_vis, self._b_hid, self._prec_vis,
                                                          self._prec_hid, self._rho_vis, self._rho_hid))
        if not finite:
            self.status = "diverged"
            self.message = f"TAP training diverged at iteration {self.iteration}: the parameters are no longer finite."
        return unique.count

    def step(self) -> Record:
        """One mini-batch or one epoch (``step_unit``), then an evaluation; see the class docstring."""
        if self.done:
            raise RuntimeError(f"This trainer is done ({self.status}); reset it to train again.")
        t0 = time.perf_counter()
        total = self.max_epochs * self.batches_per_epoch
        if self.step_unit == "batch":
            n_batches = self.batches_per_step
        else:
            n_batches = self.batches_per_epoch - self.iteration % self.batches_per_epoch
        batch_solutions = 0
        for _ in range(min(n_batches, total - self.iteration)):
            batch_solutions = self._train_batch()
            if self.done:
                break
        if not self.done and self.iteration >= total:
            self.status = "max_epochs"
            self.message = f"Stopped after the maximum of {self.max_epochs} epochs ({self.iteration} mini-batches)."
        scalars: dict[str, Any] = {"iteration": self.iteration, "epoch": self.epoch, "batch_solutions": batch_solutions,
                                   "damping": self.damping}
        arrays = self._param_arrays()
        if self.status != "diverged":
            s, a = self._evaluate()
            scalars.update(s)
            arrays.update(a)
            if self.n_samples:
                self._advance_samples()
                arrays["samples"] = self._samples.copy()
        wall = time.perf_counter() - t0
        self.elapsed += wall
        scalars["wall_time"] = wall
        scalars["elapsed"] = self.elapsed
        return Record(scalars, arrays)

    def steps(self, k: int) -> list[Record]:
        """Up to k steps; fewer if the trainer becomes done."""
        if self.done:
            raise RuntimeError(f"This trainer is done ({self.status}); reset it to train again.")
        records = []
        for _ in range(max(1, int(k))):
            if self.done:
                break
            records.append(self.step())
        return records

    def run(self) -> list[Record]:
        """Train until done; the Records of every step."""
        records: list[Record] = []
        while not self.done:
            records.append(self.step())
        return records

    def _param_arrays(self) -> dict[str, np.ndarray]:
        out = {"W": self._W.copy(), "b_vis": self._b_vis.copy(), "b_hid": self._b_hid.copy()}
        for side, kind, prec, rho in (("vis", self.prior_vis, self._prec_vis, self._rho_vis),
                                      ("hid", self.prior_hid, self._prec_hid, self._rho_hid)):
            if kind in TRUNCATED:
                out[f"precision_{side}"] = prec.copy()
            if kind == "truncated_gauss_bernoulli":
                out[f"rho_{side}"] = rho.copy()
        return out

    def _evaluate(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        result, unique = self._solve(self._eval_init, refine=True)  # reported: fixed points settled in float64
        units = self.n_visible + self.n_hidden
        scalars: dict[str, Any] = {
            "n_solutions": unique.count,
            "unique_fraction": unique.unique_fraction,
            "n_converged": unique.n_converged,
            "tap_iterations": float(np.mean(result.iterations)),
            "helmholtz_free_energy": unique.helmholtz_free_energy,
            "log_z_tap": unique.log_partition,
        }
        model = self._model("float64")
        logp = kernels.data_terms(self._V_eval, model.W, *model.vis, *model.hid)[0]
        mean_logp = float(np.mean(logp))
        scalars["tap_log_likelihood"] = (mean_logp - unique.log_partition) / units if unique.count else math.nan
        if self.exact:
            log_z = log_partition_exact(self._W, self._b_vis, self._b_hid)
            scalars["log_z_exact"] = log_z
            scalars["log_likelihood"] = (mean_logp - log_z) / units
        arrays = {"solution_free_energies": unique.free_energies, "solutions_vis": unique.a_vis,
                  "solutions_hid": unique.a_hid}
        return scalars, arrays

    # -- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Parameters, velocity, counters and settings: resumes bit-exactly (no random state
        is carried: every random choice is re-derived from (seed, epoch or batch))."""
        return {
            "W": self._W.copy(), "b_vis": self._b_vis.copy(), "b_hid": self._b_hid.copy(),
            "precision_vis": self._prec_vis.copy(), "rho_vis": self._rho_vis.copy(),
            "precision_hid": self._prec_hid.copy(), "rho_hid": self._rho_hid.copy(), "vW": self._vW.copy(),
            "iteration": self.iteration, "elapsed": self.elapsed, "status": self.status, "message": self.message,
            "seed": self.seed, "n": self.n, "n_visible": self.n_visible, "n_hidden": self.n_hidden,
            "batch_size": self.batch_size, "n_chains": self.n_chains, "prior_vis": self.prior_vis,
            "prior_hid": self.prior_hid, "learning_rate": self.learning_rate, "weight_decay": self.weight_decay,
            "momentum": self.momentum, "damping": self.damping, "tol": self.tol, "dtype": self.dtype,
            **({"samples": self._samples.copy()} if self.n_samples else {}),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output, validated against this trainer's data and settings.

        A checkpoint resumes only in its own ``dtype`` (no entry: from before the option,
        converted); another is refused
        with a ValueError saying which dtype to build the trainer with."""
        required = ("W", "b_vis", "b_hid", "precision_vis", "rho_vis", "precision_hid", "rho_hid", "vW",
                    "iteration", "elapsed", "status", "message")
        missing = [key for key in required if key not in state]
        if missing:
            raise ValueError(f"The checkpoint lacks the entries {missing} of a TAP trainer.")
        check_dtype_matches(state, self.dtype, "TAPTrainer")
        for key in ("n", "n_visible", "n_hidden", "seed", "batch_size", "n_chains", "prior_vis", "prior_hid"):
            if key in state and as_scalar(state[key]) != getattr(self, key):
                raise ValueError(f"The checkpoint was made with {key} = {as_scalar(state[key])!r}, but this trainer has {key} = {getattr(self, key)!r}.")
        W, b_vis, b_hid = _check_params(state["W"], state["b_vis"], state["b_hid"], "the checkpoint")
        if W.shape != (self.n_visible, self.n_hidden):
            raise ValueError(f"The checkpoint's 'W' has shape {W.shape}; this trainer needs {(self.n_visible, self.n_hidden)}.")
        shapes = {"vW": W.shape, "precision_vis": b_vis.shape, "rho_vis": b_vis.shape,
                  "precision_hid": b_hid.shape, "rho_hid": b_hid.shape}
        for key, shape in shapes.items():
            value = np.asarray(state[key], dtype=np.float64)
            if value.shape != shape or not np.all(np.isfinite(value)):
                raise ValueError(f"The checkpoint's '{key}' must be a finite array of shape {shape}. Got shape {value.shape}.")
        status = str(as_scalar(state["status"]))
        if status not in ("running", "max_epochs", "diverged", "stalled"):
            raise ValueError(f"The checkpoint's 'status' must be a trainer status. Got {status!r}.")
        self._set_state(W=W, b_vis=b_vis, b_hid=b_hid, precision_vis=state["precision_vis"], rho_vis=state["rho_vis"],
                        precision_hid=state["precision_hid"], rho_hid=state["rho_hid"], vW=state["vW"],
                        iteration=as_scalar(state["iteration"]), elapsed=as_scalar(state["elapsed"]), status=status,
                        message=as_scalar(state["message"]))
        if "damping" in state:  # raised on stalls when max_damping is set; resume with it
            self.damping = check_float("damping", float(as_scalar(state["damping"])), "the checkpoint", 0.0, 1.0)
        # the display chains continue when the checkpoint has them (else they start afresh)
        samples = np.asarray(state["samples"], dtype=np.float64) if "samples" in state else None
        values = (-1.0, 1.0) if self.prior_vis == "spin" else (0.0, 1.0)
        if samples is not None and samples.shape == self._samples.shape and np.all(np.isin(samples, values)):
            self._samples = samples.copy()
        else:
            self._samples = self._initial_samples()


def warm_up_tap() -> None:
    """Run every TAP kernel once on tiny problems (numba compiles or loads its cache)."""
    rng = np.random.default_rng(0)
    V = (rng.random((12, 5)) < 0.5).astype(np.float64)
    for dtype in ("float32", "float64"):
        TAPTrainer(V, 3, batch_size=4, n_chains=4, max_epochs=1, step_unit="epoch", dtype=dtype).run()
    Vr = rng.random((12, 5)) * (rng.random((12, 5)) < 0.7)
    for kind in ("truncated_gaussian", "truncated_gauss_bernoulli"):
        TAPTrainer(Vr, 3, prior_vis=kind, prior_hid=kind, batch_size=6, n_chains=3, max_epochs=1).step()
    # on several threads a tiny model is split by chains; one of more hidden units by columns
    Wc = rng.normal(0, 0.1, (5, kernels.CHAIN_SPLIT_MAX_HIDDEN + 1))
    for dtype in ("float32", "float64"):
        res = tap_fixed_points(Wc, np.zeros(5), np.zeros(Wc.shape[1]), V[:4], dtype=dtype)
    tap_free_energy(Wc, np.zeros(5), np.zeros(Wc.shape[1]), res)
    W = rng.normal(0, 0.1, (5, 3))
    init = random_init(3, 5, 0, "spin")
    tap_fixed_points(W, np.zeros(5), np.zeros(3), init, prior_vis="spin", prior_hid="spin", field_vis=np.zeros((3, 5)))
    tap_log_partition(W, np.zeros(5), np.zeros(3), V[:3])
    tap_log_partition(W, np.zeros(5), np.zeros(3), V[:3], dtype="float32")
    for kind in PRIOR_KINDS:
        prior_log_partition(kind, np.zeros(2), np.zeros(2))
