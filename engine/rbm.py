"""Binary restricted Boltzmann machines: model, exact and AIS partition functions,
pseudo-likelihood, and the CD/PCD trainer.

v in {0, 1}^Nv, h in {0, 1}^Nh, weights W (Nv, Nh), biases b_vis (Nv,), b_hid (Nh,):

    E(v, h) = -v^T W h - b_vis^T v - b_hid^T h,   P(v, h) = exp(-E(v, h)) / Z,
    F(v)    = -b_vis^T v - sum_j softplus(b_hid_j + (v^T W)_j),   P(v) = exp(-F(v)) / Z.

Exact log Z sums over the smaller layer (<= 20 units).  Otherwise log Z is estimated by
annealed importance sampling (Salakhutdinov & Murray 2008) with the temperature schedule
of Ping, Liu & Ihler (2016, §5): 500 betas uniform in [0, 0.5], 4,000 in [0.5, 0.9] and
10,000 in [0.9, 1].
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Literal, Mapping

import numpy as np

from .checks import check_choice, check_float, check_int, check_seed, derived_seed
from .kernels import rbm as kernels
from .stepping import Record, as_scalar
from .threads import single_blas

MAX_EXACT_UNITS = 20  # the smaller layer is enumerated: 2^20 states


def _schedule(pieces: list[tuple[float, float, int]]) -> np.ndarray:
    parts = [np.linspace(lo, hi, n, endpoint=False) for lo, hi, n in pieces]
    return np.concatenate(parts + [np.array([1.0])])


#: Ping, Liu & Ihler (2016), §5: 500 + 4,000 + 10,000 intermediate temperatures.
AIS_SCHEDULE_DEFAULT = _schedule([(0.0, 0.5, 500), (0.5, 0.9, 4000), (0.9, 1.0, 10000)])
#: A cheaper schedule (1,000 betas, the same shape) for live estimates in the dashboard.
AIS_SCHEDULE_LIVE = _schedule([(0.0, 0.5, 50), (0.5, 0.9, 250), (0.9, 1.0, 700)])
#: The cost of one scalar exp/log (softplus, sigmoid with a draw) in BLAS multiply-adds:
#: about 30 ns against 0.08 ns on this kind of machine (2 cores, OpenBLAS), measured.
#: Used only to schedule evaluations at a fixed share of the training work.
SCALAR_OP_COST = 350


# ------------------------------------------------------------------- validation


def _check_params(W: Any, b_vis: Any, b_hid: Any, owner: str = "RBM") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    W = np.asarray(W, dtype=np.float64)
    b_vis = np.asarray(b_vis, dtype=np.float64)
    b_hid = np.asarray(b_hid, dtype=np.float64)
    if W.ndim != 2 or W.shape[0] < 1 or W.shape[1] < 1:
        raise ValueError(f"The 'W' parameter of {owner} must be a 2-d array of shape (n_visible, n_hidden), both >= 1. Got shape {W.shape}.")
    if b_vis.shape != (W.shape[0],):
        raise ValueError(f"The 'b_vis' parameter of {owner} must have shape ({W.shape[0]},) to match W. Got {b_vis.shape}.")
    if b_hid.shape != (W.shape[1],):
        raise ValueError(f"The 'b_hid' parameter of {owner} must have shape ({W.shape[1]},) to match W. Got {b_hid.shape}.")
    for name, a in (("W", W), ("b_vis", b_vis), ("b_hid", b_hid)):
        if not np.all(np.isfinite(a)):
            raise ValueError(f"The '{name}' parameter of {owner} must be finite. Got NaN or inf.")
    return np.ascontiguousarray(W), b_vis.copy(), b_hid.copy()


def check_binary(V: Any, name: str, owner: str, n_visible: int | None = None) -> np.ndarray:
    """V as a C-contiguous float64 (n, Nv) array of 0/1, or a ValueError saying what is wrong."""
    V = np.asarray(V)
    if V.ndim != 2 or V.shape[0] < 1 or V.shape[1] < 1:
        raise ValueError(f"The '{name}' parameter of {owner} must be a 2-d array with n >= 1 rows and >= 1 columns. Got shape {V.shape}.")
    if n_visible is not None and V.shape[1] != n_visible:
        raise ValueError(f"The '{name}' parameter of {owner} must have {n_visible} columns (one per visible unit). Got {V.shape[1]}.")
    V = np.ascontiguousarray(V, dtype=np.float64)
    bad = ~((V == 0.0) | (V == 1.0))
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise ValueError(f"The '{name}' parameter of {owner} must hold only 0 and 1. Got {V[i, j]!r} at row {i}, column {j}.")
    return V


#: Precisions a trainer can run in ("float32" is the default for training: BLAS runs it about
#: twice as fast; everything compared with exact answers -- log Z, AIS weights, likelihoods --
#: is evaluated in float64 from the parameters whatever they are stored in).
DTYPES = ("float32", "float64")


def check_dtype(value: Any, owner: str) -> str:
    """'float32' or 'float64' from a name or a NumPy float type, else a ValueError."""
    try:
        name = np.dtype(value).name if not isinstance(value, str) else value
    except TypeError:
        name = value
    return check_choice("dtype", name, owner, DTYPES)


# ------------------------------------------------------------------------ model


@dataclass(frozen=True)
class RBM:
    """A binary RBM: P(v, h) proportional to exp(v^T W h + b_vis^T v + b_hid^T h)."""

    W: np.ndarray
    b_vis: np.ndarray
    b_hid: np.ndarray

    def __post_init__(self) -> None:
        W, b_vis, b_hid = _check_params(self.W, self.b_vis, self.b_hid)
        object.__setattr__(self, "W", W)
        object.__setattr__(self, "b_vis", b_vis)
        object.__setattr__(self, "b_hid", b_hid)

    @property
    def n_visible(self) -> int:
        return int(self.W.shape[0])

    @property
    def n_hidden(self) -> int:
        return int(self.W.shape[1])

    @classmethod
    def random(cls, n_visible: int, n_hidden: int, seed: int, scale: float = 0.1) -> "RBM":
        """W, b_vis, b_hid drawn i.i.d. N(0, scale^2)."""
        n_visible = check_int("n_visible", n_visible, "RBM.random", 1)
        n_hidden = check_int("n_hidden", n_hidden, "RBM.random", 1)
        scale = check_float("scale", scale, "RBM.random", 0.0)
        rng = np.random.default_rng(check_seed("RBM.random", seed))
        return cls(rng.normal(0, scale, (n_visible, n_hidden)), rng.normal(0, scale, n_visible),
                   rng.normal(0, scale, n_hidden))

    def energy(self, V: np.ndarray, H: np.ndarray) -> np.ndarray:
        """E(v, h) = -v^T W h - b_vis^T v - b_hid^T h for paired rows of V and H, (n,)."""
        V = check_binary(V, "V", "RBM.energy", self.n_visible)
        H = check_binary(H, "H", "RBM.energy", self.n_hidden)
        if H.shape[0] != V.shape[0]:
            raise ValueError(f"The 'H' parameter of RBM.energy must have as many rows as V ({V.shape[0]}). Got {H.shape[0]}.")
        return -np.einsum("ri,ij,rj->r", V, self.W, H) - V @ self.b_vis - H @ self.b_hid

    def free_energy(self, V: np.ndarray) -> np.ndarray:
        """F(v) = -b_vis^T v - sum_j softplus(b_hid_j + (v^T W)_j), (n,)."""
        V = check_binary(V, "V", "RBM.free_energy", self.n_visible)
        return kernels.free_energy(V, self.W, self.b_vis, self.b_hid)

    def prob_h_given_v(self, V: np.ndarray) -> np.ndarray:
        """P(h_j = 1 | v) = sigmoid(b_hid_j + (v^T W)_j), (n, Nh)."""
        V = check_binary(V, "V", "RBM.prob_h_given_v", self.n_visible)
        return kernels.hidden_probabilities(V, self.W, self.b_hid)

    def prob_v_given_h(self, H: np.ndarray) -> np.ndarray:
        """P(v_i = 1 | h) = sigmoid(b_vis_i + (W h)_i), (n, Nv)."""
        H = check_binary(H, "H", "RBM.prob_v_given_h", self.n_hidden)
        return kernels.visible_probabilities(H, np.ascontiguousarray(self.W.T), self.b_vis)

    def gibbs(self, V: np.ndarray, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """k block Gibbs steps (h ~ P(h|v), v ~ P(v|h)) from each row of V, all chains at once.

        Returns the final visibles (n, Nv) and the last hidden sample (n, Nh); V is not
        modified.  Seeded: the same (V, k, seed) gives the same chains.
        """
        V = check_binary(V, "V", "RBM.gibbs", self.n_visible).copy()
        k = check_int("k", k, "RBM.gibbs", 1)
        seed = check_seed("RBM.gibbs", seed)
        H = kernels.gibbs_chains(V, self.W, np.ascontiguousarray(self.W.T), self.b_vis, self.b_hid, k, derived_seed(seed, 11))
        return V, H

    def sample(self, n_chains: int, k: int, seed: int) -> np.ndarray:
        """Visible states of ``n_chains`` Gibbs chains after k steps from uniform random states."""
        n_chains = check_int("n_chains", n_chains, "RBM.sample", 1)
        rng = np.random.default_rng(check_seed("RBM.sample", seed))
        V0 = (rng.random((n_chains, self.n_visible)) < 0.5).astype(np.float64)
        return self.gibbs(V0, k, seed)[0]

    def log_partition(self) -> float:
        """Exact log Z (the smaller layer has <= 20 units)."""
        return log_partition_exact(self.W, self.b_vis, self.b_hid)


# -------------------------------------------------------------- partition function


def log_partition_exact(W: np.ndarray, b_vis: np.ndarray, b_hid: np.ndarray) -> float:
    """Exact log Z of a binary RBM, summing over the smaller layer (<= 20 units).

    The other layer is summed out analytically (a softplus per unit); the 2^m states of
    the smaller layer are enumerated in Gray-code order with streaming log-sum-exp,
    O(2^m n).  W has shape (Nv, Nh).

    Raises
    ------
    ValueError
        If the parameters are inconsistent or both layers have more than 20 units.
    """
    W, b_vis, b_hid = _check_params(W, b_vis, b_hid, "log_partition_exact")
    n_vis, n_hid = W.shape
    if min(n_vis, n_hid) > MAX_EXACT_UNITS:
        raise ValueError(
            f"log_partition_exact enumerates the smaller layer and needs it to have <= {MAX_EXACT_UNITS} units. "
            f"Got n_visible = {n_vis}, n_hidden = {n_hid}."
        )
    if n_vis <= n_hid:
        return float(kernels.log_partition_sum_over(W, b_vis, b_hid))
    return float(kernels.log_partition_sum_over(np.ascontiguousarray(W.T), b_hid, b_vis))


def base_rate_biases(V: np.ndarray, *, pseudo_count: float = 1.0) -> np.ndarray:
    """Visible biases log(p / (1 - p)) of the base-rate model from data marginals.

    p_i = (count of v_i = 1 + pseudo_count) / (n + 2 pseudo_count), so no bias is infinite
    (a pixel never on gets a large negative, finite bias).
    """
    V = check_binary(V, "V", "base_rate_biases")
    pseudo_count = check_float("pseudo_count", pseudo_count, "base_rate_biases", 0.0, low_open=True)
    p = (V.sum(axis=0) + pseudo_count) / (V.shape[0] + 2.0 * pseudo_count)
    return np.log(p) - np.log1p(-p)


def model_base_rate_biases(W: np.ndarray, b_vis: np.ndarray, b_hid: np.ndarray, *, n_chains: int = 200,
                           n_steps: int = 500, seed: int = 0) -> np.ndarray:
    """Base-rate biases (as :func:`base_rate_biases`) of the model's own visible marginals.

    Estimated from ``n_chains`` block Gibbs chains run ``n_steps`` steps from uniform
    random states, with the final visible probabilities P(v|h) averaged (less noisy than
    the samples) and one pseudo-count per unit.  For when no data is at hand: AIS needs
    only a base close to the model's marginals, not an exact one.
    """
    owner = "model_base_rate_biases"
    model = RBM(W, b_vis, b_hid)
    n_chains = check_int("n_chains", n_chains, owner, 1)
    n_steps = check_int("n_steps", n_steps, owner, 1)
    seed = derived_seed(check_seed(owner, seed), 17)
    V0 = (np.random.default_rng(seed).random((n_chains, model.n_visible)) < 0.5).astype(np.float64)
    _, H = model.gibbs(V0, n_steps, seed)  # H: the hidden sample the final visibles were drawn from
    P = model.prob_v_given_h(H)
    p = (P.sum(axis=0) + 1.0) / (n_chains + 2.0)
    return np.log(p) - np.log1p(-p)


def ais_log_partition(
    W: np.ndarray, b_vis: np.ndarray, b_hid: np.ndarray, *, n_runs: int = 100,
    schedule: np.ndarray | None = None, seed: int = 0, base_vis: np.ndarray | None = None,
) -> tuple[float, float]:
    """Annealed importance sampling estimate of log Z (Salakhutdinov & Murray 2008).

    The base model has independent visibles with biases ``base_vis`` and hiddens that
    contribute a factor 2^Nh, so
    log Z_base = Nh log 2 + sum_i softplus(base_vis_i).  The intermediate distributions
    p_beta(v) proportional to exp((1 - beta) base_vis^T v) * p*_RBM(v; beta W, beta b)
    have their hiddens summed out analytically; each transition is one block Gibbs step
    of p_beta.  All ``n_runs`` runs advance together in one numba kernel (nogil, seeded).

    Parameters
    ----------
    schedule : increasing betas from 0 to 1; default :data:`AIS_SCHEDULE_DEFAULT`
        (14,501 values: Ping, Liu & Ihler 2016, §5).  :data:`AIS_SCHEDULE_LIVE` is cheaper.
    base_vis : the base model's visible biases.  Pass :func:`base_rate_biases` of the
        training data when there is data (Salakhutdinov & Murray's choice).  Default: the
        model's own visible marginals, estimated by :func:`model_base_rate_biases` (200
        Gibbs chains, 500 steps, about 7% of the default schedule's cost).  Any base
        leaves the estimator unbiased for Z; a base close to the model's marginals makes
        the runs' weights far less spread: on a 784 x 20 RBM trained on MNIST, uniform
        base rates missed the exact log Z by up to 0.46 nats (3 seeds), the model's own
        by at most 0.04.

    Returns
    -------
    estimate, spread : float
        estimate = log mean_r exp(log w_r) + log Z_base.  spread = 3 standard deviations
        of the estimate by the delta method: with w_r = exp(log w_r - max), the standard
        error of log mean w is std(w) / (mean(w) sqrt(n_runs)) (std with ddof = 1;
        0 when n_runs = 1 cannot tell).  It measures the spread of the runs only: when the
        schedule is too short AIS tends to underestimate log Z by more than this.
    """
    owner = "ais_log_partition"
    W, b_vis, b_hid = _check_params(W, b_vis, b_hid, owner)
    n_runs = check_int("n_runs", n_runs, owner, 1)
    seed = check_seed(owner, seed)
    betas = AIS_SCHEDULE_DEFAULT if schedule is None else np.asarray(schedule, dtype=np.float64)
    if (betas.ndim != 1 or betas.shape[0] < 2 or betas[0] != 0.0 or betas[-1] != 1.0
            or np.any(np.diff(betas) < 0) or not np.all(np.isfinite(betas))):
        raise ValueError(f"The 'schedule' parameter of {owner} must be a 1-d non-decreasing array of betas from 0.0 to 1.0 with >= 2 entries. Got {np.asarray(schedule)!r:.80}.")
    if base_vis is None:
        base_vis = model_base_rate_biases(W, b_vis, b_hid, seed=seed)
    base_vis = np.asarray(base_vis, dtype=np.float64)
    if base_vis.shape != (W.shape[0],) or not np.all(np.isfinite(base_vis)):
        raise ValueError(f"The 'base_vis' parameter of {owner} must be a finite array of shape ({W.shape[0]},). Got shape {base_vis.shape}.")
    single_blas()
    logw = kernels.ais_log_weights(W, b_vis, b_hid, base_vis, np.ascontiguousarray(betas), n_runs, derived_seed(seed, 13))
    log_z_base = W.shape[1] * math.log(2.0) + float(np.sum(np.logaddexp(0.0, base_vis)))
    top = logw.max()
    w = np.exp(logw - top)
    estimate = top + math.log(w.mean()) + log_z_base
    spread = 3.0 * float(w.std(ddof=1) / (w.mean() * math.sqrt(n_runs))) if n_runs > 1 else 0.0
    return float(estimate), spread


# ----------------------------------------------------------------------- metrics


def exact_log_likelihood(rbm: RBM, V: np.ndarray) -> float:
    """Mean over rows of log P(v) = -F(v) - log Z, with the exact log Z (smaller layer <= 20)."""
    V = check_binary(V, "V", "exact_log_likelihood", rbm.n_visible)
    log_z = log_partition_exact(rbm.W, rbm.b_vis, rbm.b_hid)
    return float(-np.mean(kernels.free_energy(V, rbm.W, rbm.b_vis, rbm.b_hid)) - log_z)


def pseudo_log_likelihood_exact(rbm: RBM, V: np.ndarray) -> float:
    """Mean over rows of sum over ALL visible units i of log P(v_i | v_-i).

    Each term comes from a free-energy difference, O(Nv Nh) per row and unit, so this is
    meant for small Nv; see :func:`stochastic_pseudo_log_likelihood` for large ones.
    """
    V = check_binary(V, "V", "pseudo_log_likelihood_exact", rbm.n_visible)
    units = np.arange(rbm.n_visible, dtype=np.int64)
    return float(kernels.conditional_log_probs(V, rbm.W, rbm.b_vis, rbm.b_hid, units).sum(axis=1).mean())


def stochastic_pseudo_log_likelihood(
    rbm: RBM, V: np.ndarray, n_units: int, seed: int, *, scale_to_all: bool = False
) -> float:
    """Mean over rows and over a random subset of ``n_units`` visible units of log P(v_i | v_-i).

    The subset (drawn without replacement, seeded, the same for every row) makes this an
    unbiased estimate of the *per-unit* mean log conditional, i.e. of
    pseudo_log_likelihood_exact / Nv.  Only with ``scale_to_all=True`` is it multiplied by
    Nv to estimate the full pseudo-log-likelihood (sum over all units); it is never
    scaled silently.
    """
    owner = "stochastic_pseudo_log_likelihood"
    V = check_binary(V, "V", owner, rbm.n_visible)
    n_units = check_int("n_units", n_units, owner, 1)
    if n_units > rbm.n_visible:
        raise ValueError(f"The 'n_units' parameter of {owner} must be <= n_visible = {rbm.n_visible}. Got {n_units}.")
    rng = np.random.default_rng(check_seed(owner, seed))
    units = np.sort(rng.choice(rbm.n_visible, n_units, replace=False)).astype(np.int64)
    mean = float(kernels.conditional_log_probs(V, rbm.W, rbm.b_vis, rbm.b_hid, units).mean())
    return mean * rbm.n_visible if scale_to_all else mean


def hidden_features(rbm: RBM, V: np.ndarray) -> np.ndarray:
    """E[h | v] = P(h = 1 | v) for every row, (n, Nh): the features for a classifier."""
    V = check_binary(V, "V", "hidden_features", rbm.n_visible)
    return kernels.hidden_probabilities(V, rbm.W, rbm.b_hid)


def classification_error(
    rbm: RBM, V_train: np.ndarray, y_train: np.ndarray, V_test: np.ndarray, y_test: np.ndarray,
    *, C: float = 1.0, max_iter: int = 1000,
) -> float:
    """Test error of scikit-learn's LogisticRegression trained on :func:`hidden_features`."""
    from sklearn.linear_model import LogisticRegression

    y_train = np.asarray(y_train)
    y_test = np.asarray(y_test)
    F_train = hidden_features(rbm, V_train)
    F_test = hidden_features(rbm, V_test)
    if y_train.shape != (F_train.shape[0],):
        raise ValueError(f"The 'y_train' parameter of classification_error must have shape ({F_train.shape[0]},). Got {y_train.shape}.")
    if y_test.shape != (F_test.shape[0],):
        raise ValueError(f"The 'y_test' parameter of classification_error must have shape ({F_test.shape[0]},). Got {y_test.shape}.")
    clf = LogisticRegression(C=C, max_iter=max_iter).fit(F_train, y_train)
    return float(np.mean(clf.predict(F_test) != y_test))


# ----------------------------------------------------------------------- trainer

Method = Literal["pcd", "cd"]


class RBMTrainer:
    """Mini-batch CD-k or PCD-k training of a binary RBM, as a Trainer (see stepping.py).

    ``step()`` is one mini-batch (``step_unit="batch"``) or one pass over the shuffled data
    (``"epoch"``); :meth:`steps` runs several in one call into numba.  Gradient: positive
    phase E[v h^T] on the batch with h replaced by P(h|v); negative phase the same on the
    states after k block Gibbs steps from the batch (CD) or from ``batch_size`` persistent
    chains (PCD, Tieleman 2008).  Updates with momentum and L2 weight decay on W.

    Batch t uses numba's generator seeded from (seed, t), and epoch e's shuffle from
    (seed, e), so a trainer restored from :meth:`state_dict` continues bit-exactly.

    Initialisation: W ~ N(0, 0.01^2), b_vis = log(p / (1 - p)) of the data marginals
    (see :func:`base_rate_biases`), b_hid = 0; persistent chains drawn from the base-rate
    model.

    Records carry ``iteration`` (batches so far), ``epoch`` (passes so far, fractional in
    batch mode), ``reconstruction_error``, ``wall_time``, ``elapsed`` and, when due,
    ``pseudo_likelihood`` (mean over rows of the sum over all units: exact when
    Nv <= ``pl_units``, else Nv times the mean over ``pl_units`` random units;
    ``pseudo_likelihood_exact`` says which), ``log_likelihood`` (exact, mean per row) or
    ``log_likelihood_ais`` with ``log_z`` and ``log_z_spread`` (AIS with ``ais_runs`` runs on
    :data:`AIS_SCHEDULE_LIVE`), all on the same ``eval_rows`` rows drawn once from the data.
    Evaluations are due when the training work since the last one is at least
    1 / ``eval_overhead`` times their cost (a deterministic rule, so evaluation takes about
    ``eval_overhead`` of the time), and always on the last record.  The last record of each
    call carries the arrays W, b_vis, b_hid.

    Parameters
    ----------
    V : (n, Nv) array of 0/1
    n_hidden : number of hidden units
    method, k : "pcd" (``batch_size`` persistent chains) or "cd", with k Gibbs steps
    evaluate : "auto" (exact log-likelihood when the smaller layer has <= 20 units, else
        none), "exact", "ais" or "none".
    init_params : optional (W, b_vis, b_hid) to start from instead of the initialisation
        above (e.g. a model grown by Frank-Wolfe, Ping et al. 2016 §4); the persistent chains
        still start from the base-rate model.
    dtype : "float32" (default) or "float64": the precision of the parameters, the chains,
        the Gibbs sampling and the BLAS products of training (float32 products run about twice
        as fast).  Evaluations (pseudo-likelihood, exact or AIS log-likelihood) always run in
        float64 from the parameters; a checkpoint records its dtype and resumes only in it.
    """

    def __init__(
        self,
        V: np.ndarray,
        n_hidden: int,
        *,
        method: Method = "pcd",
        k: int = 1,
        batch_size: int = 100,
        learning_rate: float = 0.05,
        momentum: float = 0.5,
        weight_decay: float = 0.0,
        step_unit: Literal["batch", "epoch"] = "batch",
        seed: int = 0,
        evaluate: Literal["auto", "exact", "ais", "none"] = "auto",
        max_epochs: int = 10,
        eval_rows: int = 1000,
        pl_units: int = 64,
        ais_runs: int = 20,
        eval_overhead: float = 0.2,
        init_params: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
        dtype: str = "float32",
    ) -> None:
        owner = "RBMTrainer"
        self.V = check_binary(V, "V", owner)
        self.n, self.n_visible = self.V.shape
        self.dtype = check_dtype(dtype, owner)
        self._V_train = self.V if self.dtype == "float64" else self.V.astype(self.dtype)  # 0/1: exact
        self.n_hidden = check_int("n_hidden", n_hidden, owner, 1)
        self.method = check_choice("method", method, owner, ("pcd", "cd"))
        self.k = check_int("k", k, owner, 1)
        self.batch_size = min(check_int("batch_size", batch_size, owner, 1), self.n)
        self.learning_rate = check_float("learning_rate", learning_rate, owner, 0.0, low_open=True)
        self.momentum = check_float("momentum", momentum, owner, 0.0, 1.0)
        self.weight_decay = check_float("weight_decay", weight_decay, owner, 0.0)
        self.step_unit = check_choice("step_unit", step_unit, owner, ("batch", "epoch"))
        self.seed = check_seed(owner, seed)
        evaluate = check_choice("evaluate", evaluate, owner, ("auto", "exact", "ais", "none"))
        small = min(self.n_visible, self.n_hidden) <= MAX_EXACT_UNITS
        if evaluate == "exact" and not small:
            raise ValueError(
                f"The 'evaluate' parameter of {owner} can be 'exact' only when the smaller layer has <= {MAX_EXACT_UNITS} units. "
                f"Got n_visible = {self.n_visible}, n_hidden = {self.n_hidden}."
            )
        self.evaluate = ("exact" if small else "none") if evaluate == "auto" else evaluate
        self.max_epochs = check_int("max_epochs", max_epochs, owner, 1)
        self.eval_rows = check_int("eval_rows", eval_rows, owner, 1)
        self.pl_units = check_int("pl_units", pl_units, owner, 1)
        self.ais_runs = check_int("ais_runs", ais_runs, owner, 2)
        self.eval_overhead = check_float("eval_overhead", eval_overhead, owner, 0.0, low_open=True)
        self.batches_per_epoch = -(-self.n // self.batch_size)
        rng = np.random.default_rng([self.seed, 0])
        pick = np.sort(rng.permutation(self.n)[: min(self.eval_rows, self.n)])
        self._V_eval = np.ascontiguousarray(self.V[pick])
        self.base_vis = base_rate_biases(self.V)
        W = rng.normal(0.0, 0.01, (self.n_visible, self.n_hidden))
        p = 1.0 / (1.0 + np.exp(-self.base_vis))
        chains = (rng.random((self.batch_size, self.n_visible)) < p).astype(np.float64)
        b_vis, b_hid = self.base_vis.copy(), np.zeros(self.n_hidden)
        if init_params is not None:  # start from a given RBM (e.g. one grown by Frank-Wolfe)
            if not isinstance(init_params, (tuple, list)) or len(init_params) != 3:
                raise ValueError(f"The 'init_params' parameter of {owner} must be a tuple (W, b_vis, b_hid) or None. "
                                 f"Got {type(init_params).__name__}.")
            W, b_vis, b_hid = _check_params(*init_params, owner=owner)
            if W.shape != (self.n_visible, self.n_hidden):
                raise ValueError(f"The 'init_params' W of {owner} must have shape {(self.n_visible, self.n_hidden)} "
                                 f"(n_visible, n_hidden). Got {W.shape}.")
            W, b_vis, b_hid = W.copy(), b_vis.copy(), b_hid.copy()
        self._set_state(
            W=W, b_vis=b_vis, b_hid=b_hid, vW=np.zeros_like(W),
            v_vis=np.zeros(self.n_visible), v_hid=np.zeros(self.n_hidden), chains=chains,
            chain_hid=kernels.hidden_probabilities(chains, W, b_hid),
            iteration=0, elapsed=0.0, work_pl=math.inf, work_ll=math.inf, status="running", message="",
        )

    # -- state
    def _set_state(self, *, W, b_vis, b_hid, vW, v_vis, v_hid, chains, chain_hid, iteration, elapsed, work_pl, work_ll,
                   status, message) -> None:
        dt = self.dtype
        self._W = np.array(W, dtype=dt, order="C")
        self._b_vis = np.array(b_vis, dtype=dt)
        self._b_hid = np.array(b_hid, dtype=dt)
        self._vW = np.array(vW, dtype=dt, order="C")
        self._v_vis = np.array(v_vis, dtype=dt)
        self._v_hid = np.array(v_hid, dtype=dt)
        self._chains = np.array(chains, dtype=dt, order="C")
        self._chain_hid = np.array(chain_hid, dtype=dt, order="C")
        self.iteration = int(iteration)
        self.elapsed = float(elapsed)
        self._work_pl = float(work_pl)
        self._work_ll = float(work_ll)
        self.status = str(status)
        self.message = str(message)
        self._perm_epoch = -1
        self._perm = np.empty(0, dtype=np.int64)

    @property
    def rbm(self) -> RBM:
        return RBM(self._W, self._b_vis, self._b_hid)

    @property
    def done(self) -> bool:
        return self.status != "running"

    @property
    def epoch(self) -> float:
        return self.iteration / self.batches_per_epoch

    @property
    def label(self) -> str:
        return f"{self.method.upper()}-{self.k}"

    # -- costs (in multiply-adds), for the deterministic evaluation schedule
    def _batch_work(self) -> float:
        # batch-sized products per batch: the positive fields, 2k - 1 Gibbs half-steps beyond
        # the first (PCD reuses the chains' stored P(h|v); CD's starts from P(h|v) of the
        # batch), the final P(h|v) and the two-phase gradient product of twice the rows
        return float(self.n_visible * self.n_hidden * self.batch_size * (3 + 2 * self.k))

    def _pl_cost(self) -> float:
        units = min(self.pl_units, self.n_visible)
        return float(self._V_eval.shape[0] * self.n_hidden * (self.n_visible + SCALAR_OP_COST * units))

    def _ll_cost(self) -> float:
        if self.evaluate == "exact":
            m = min(self.n_visible, self.n_hidden)
            return float(2**m * max(self.n_visible, self.n_hidden) * SCALAR_OP_COST
                         + self._V_eval.shape[0] * self.n_visible * self.n_hidden)
        if self.evaluate == "ais":
            per_beta = 2 * self.n_visible * self.n_hidden + SCALAR_OP_COST * (3 * self.n_hidden + self.n_visible)
            return float(self.ais_runs * AIS_SCHEDULE_LIVE.shape[0] * per_beta)
        return math.inf

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._perm_epoch:
            self._perm = np.random.default_rng([self.seed, 2, epoch]).permutation(self.n).astype(np.int64)
            self._perm_epoch = epoch
        return self._perm

    # -- stepping
    def step(self) -> Record:
        """One mini-batch or one epoch (``step_unit``); see :meth:`steps`."""
        return self.steps(1)[0]

    def steps(self, k: int) -> list[Record]:
        """Up to k steps (batches or epochs) in one call into numba, fewer at max_epochs."""
        if self.done:
            raise RuntimeError(f"This trainer is done ({self.status}); reset it to train again.")
        per_step = 1 if self.step_unit == "batch" else self.batches_per_epoch
        total = self.max_epochs * self.batches_per_epoch
        if self.step_unit == "epoch" and self.iteration % per_step:
            per_step_first = per_step - self.iteration % per_step
        else:
            per_step_first = per_step
        n_batches = min(per_step_first + (max(1, int(k)) - 1) * per_step, total - self.iteration)
        rows, bounds, seeds = [], [0], []
        for t in range(self.iteration, self.iteration + n_batches):
            epoch, b = divmod(t, self.batches_per_epoch)
            idx = self._permutation(epoch)[b * self.batch_size:(b + 1) * self.batch_size]
            rows.append(idx)
            bounds.append(bounds[-1] + idx.shape[0])
            seeds.append(derived_seed(self.seed, 1, t))
        recon = np.empty(n_batches)
        single_blas()
        t0 = time.perf_counter()
        kernels.train_batches(
            self._V_train, np.concatenate(rows), np.asarray(bounds, dtype=np.int64), np.asarray(seeds, dtype=np.int64),
            self._W, self._b_vis, self._b_hid, self._vW, self._v_vis, self._v_hid, self._chains, self._chain_hid,
            self.method == "pcd", self.k, self.learning_rate, self.momentum, self.weight_decay, recon,
        )
        wall = time.perf_counter() - t0
        # group the batches into steps
        groups, start = [], 0
        first = True
        while start < n_batches:
            size = per_step_first if first else per_step
            groups.append((start, min(start + size, n_batches)))
            start += size
            first = False
        finite = bool(np.all(np.isfinite(self._W)) and np.all(np.isfinite(self._b_vis)) and np.all(np.isfinite(self._b_hid)))
        records: list[dict[str, Any]] = []
        for lo, hi in groups:
            self.iteration += hi - lo
            step_wall = wall * (hi - lo) / n_batches
            self.elapsed += step_wall
            records.append({
                "iteration": self.iteration,
                "epoch": self.epoch,
                "reconstruction_error": float(recon[lo:hi].mean()),
                "wall_time": step_wall,
                "elapsed": self.elapsed,
            })
        if not finite:
            self.status = "diverged"
            self.message = f"{self.label} diverged at iteration {self.iteration}: the parameters are no longer finite."
        elif self.iteration >= total:
            self.status = "max_epochs"
            self.message = f"Stopped after the maximum of {self.max_epochs} epochs ({self.iteration} mini-batches)."
        work = n_batches * self._batch_work()
        self._work_pl += work
        self._work_ll += work
        last = records[-1]
        if finite:
            t1 = time.perf_counter()
            if self.done or self._work_pl * self.eval_overhead >= self._pl_cost():
                self._work_pl = 0.0
                last.update(self._pseudo_likelihood())
            if self.evaluate != "none" and (self.done or self._work_ll * self.eval_overhead >= self._ll_cost()):
                self._work_ll = 0.0
                last.update(self._log_likelihood())
            last["eval_time"] = time.perf_counter() - t1
        out = [Record(r) for r in records[:-1]]
        out.append(Record(last, {"W": self._W.copy(), "b_vis": self._b_vis.copy(), "b_hid": self._b_hid.copy()}))
        return out

    def _pseudo_likelihood(self) -> dict[str, Any]:
        rbm = self.rbm
        if self.n_visible <= self.pl_units:
            return {"pseudo_likelihood": pseudo_log_likelihood_exact(rbm, self._V_eval), "pseudo_likelihood_exact": True}
        value = stochastic_pseudo_log_likelihood(rbm, self._V_eval, self.pl_units, derived_seed(self.seed, 3, self.iteration),
                                                 scale_to_all=True)
        return {"pseudo_likelihood": value, "pseudo_likelihood_exact": False}

    def _log_likelihood(self) -> dict[str, Any]:
        rbm = self.rbm
        free = float(np.mean(kernels.free_energy(self._V_eval, rbm.W, rbm.b_vis, rbm.b_hid)))
        if self.evaluate == "exact":
            log_z = log_partition_exact(rbm.W, rbm.b_vis, rbm.b_hid)
            return {"log_likelihood": -free - log_z, "log_z": log_z}
        log_z, spread = ais_log_partition(rbm.W, rbm.b_vis, rbm.b_hid, n_runs=self.ais_runs, schedule=AIS_SCHEDULE_LIVE,
                                          seed=derived_seed(self.seed, 4, self.iteration), base_vis=self.base_vis)
        return {"log_likelihood_ais": -free - log_z, "log_z": log_z, "log_z_spread": spread}

    def run(self) -> list[Record]:
        """Train until done; the Records of every step."""
        records: list[Record] = []
        while not self.done:
            records.extend(self.steps(64 if self.step_unit == "batch" else 1))
        return records

    # -- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Parameters, velocities, persistent chains, counters and settings: resumes bit-exactly.

        The random state needs no entry: every batch reseeds numba's generator from
        (seed, batch index) and every epoch's shuffle comes from (seed, epoch).
        """
        return {
            "W": self._W.copy(), "b_vis": self._b_vis.copy(), "b_hid": self._b_hid.copy(),
            "vW": self._vW.copy(), "v_vis": self._v_vis.copy(), "v_hid": self._v_hid.copy(),
            "chains": self._chains.copy(), "chain_hid": self._chain_hid.copy(), "iteration": self.iteration, "elapsed": self.elapsed,
            "work_pl": self._work_pl, "work_ll": self._work_ll, "status": self.status, "message": self.message,
            "seed": self.seed, "method": self.method, "k": self.k, "batch_size": self.batch_size,
            "learning_rate": self.learning_rate, "momentum": self.momentum, "weight_decay": self.weight_decay,
            "n": self.n, "n_visible": self.n_visible, "n_hidden": self.n_hidden, "dtype": self.dtype,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output, validated against this trainer's data and settings.

        A checkpoint resumes only in its own precision (``dtype``): converting would not
        continue the same run bit-exactly, so a mismatch is refused with a ValueError that
        says which dtype to build the trainer with (checkpoints from before the option,
        without the entry, are converted: see :func:`check_dtype_matches`).
        """
        required = ("W", "b_vis", "b_hid", "vW", "v_vis", "v_hid", "chains", "chain_hid", "iteration", "elapsed",
                    "work_pl", "work_ll", "status", "message")
        missing = [key for key in required if key not in state]
        if missing:
            raise ValueError(f"The checkpoint lacks the entries {missing} of an RBM trainer.")
        check_dtype_matches(state, self.dtype, "RBMTrainer")
        for key in ("n", "n_visible", "n_hidden", "seed", "batch_size"):
            if key in state and as_scalar(state[key]) != getattr(self, key):
                raise ValueError(f"The checkpoint was made with {key} = {as_scalar(state[key])}, but this trainer has {key} = {getattr(self, key)}.")
        W, b_vis, b_hid = _check_params(state["W"], state["b_vis"], state["b_hid"], "the checkpoint")
        if W.shape != (self.n_visible, self.n_hidden):
            raise ValueError(f"The checkpoint's 'W' has shape {W.shape}; this trainer needs {(self.n_visible, self.n_hidden)}.")
        shapes = {"vW": W.shape, "v_vis": b_vis.shape, "v_hid": b_hid.shape, "chains": self._chains.shape,
                  "chain_hid": self._chain_hid.shape}
        for key, shape in shapes.items():
            if np.shape(state[key]) != shape:
                raise ValueError(f"The checkpoint's '{key}' must have shape {shape}. Got {np.shape(state[key])}.")
        check_binary(state["chains"], "chains", "the checkpoint", self.n_visible)
        chain_hid = np.asarray(state["chain_hid"], dtype=np.float64)
        if not np.all((chain_hid >= 0.0) & (chain_hid <= 1.0)):
            raise ValueError("The checkpoint's 'chain_hid' must hold probabilities in [0, 1].")
        status = str(as_scalar(state["status"]))
        if status not in ("running", "max_epochs", "diverged"):
            raise ValueError(f"The checkpoint's 'status' must be a trainer status. Got {status!r}.")
        self._set_state(
            W=W, b_vis=b_vis, b_hid=b_hid, vW=state["vW"], v_vis=state["v_vis"], v_hid=state["v_hid"],
            chains=state["chains"], chain_hid=state["chain_hid"], iteration=as_scalar(state["iteration"]), elapsed=as_scalar(state["elapsed"]),
            work_pl=as_scalar(state["work_pl"]), work_ll=as_scalar(state["work_ll"]), status=status,
            message=as_scalar(state["message"]),
        )


def check_dtype_matches(state: Mapping[str, Any], dtype: str, owner: str) -> None:
    """Refuse a checkpoint made in another precision than ``dtype``.

    A checkpoint without the entry predates the option (it was float64): it is accepted and
    continues in ``dtype`` (converted, so not bit-for-bit the run it came from), so that
    checkpoints saved before the option still load in the labs, which train in float32."""
    if "dtype" not in state:
        return
    saved = str(as_scalar(state["dtype"]))
    if saved != dtype:
        raise ValueError(f"The checkpoint was made with dtype = {saved!r}, but this trainer has dtype = {dtype!r}; "
                         f"build the {owner} with dtype={saved!r} to resume it (it resumes bit-exactly only in its own precision).")


def warm_up_rbm() -> None:
    """Run every RBM kernel once on a tiny problem (numba compiles or loads its cache)."""
    rng = np.random.default_rng(0)
    V = (rng.random((12, 4)) < 0.5).astype(np.float64)
    model = RBM.random(4, 3, 0)
    for method in ("pcd", "cd"):
        for dtype in DTYPES:
            RBMTrainer(V, 3, method=method, batch_size=5, max_epochs=1, evaluate="ais", ais_runs=2, dtype=dtype).run()
    RBMTrainer(V, 3, batch_size=5, max_epochs=1, evaluate="exact").run()
    model.gibbs(V, 1, 0)
    V32, W32 = V.astype(np.float32), model.W.astype(np.float32)
    kernels.gibbs_chains(V32, W32, np.ascontiguousarray(W32.T), model.b_vis.astype(np.float32),
                         model.b_hid.astype(np.float32), 1, 0)
    model.free_energy(V)
    model.prob_v_given_h(V[:, :3])
    model.log_partition()
    log_partition_exact(model.W.T, model.b_hid, model.b_vis)
    pseudo_log_likelihood_exact(model, V)
    stochastic_pseudo_log_likelihood(model, V, 2, 0)
    kernels.gradient(V, V, model.W, model.b_vis, model.b_hid)
    kernels.uniforms(2, 0)
