"""scikit-learn estimators on the engine: :class:`RBM` (CD-k / PCD-k), :class:`TAPRBM` (TAP
mean-field training) and :class:`FVBM` (maximum pseudo-likelihood).

Imported as ``boltzlab.engine.sklearn``.  The estimators are thin: training, sampling and
likelihoods are the engine's (:class:`boltzlab.engine.rbm.RBMTrainer`, the CD/PCD kernel
:func:`boltzlab.engine.kernels.rbm.train_batches`, :class:`boltzlab.engine.tap.TAPTrainer`,
:func:`boltzlab.engine.fvbm.mple`, :func:`~boltzlab.engine.fvbm.wald_tests`); this module
converts data, parameters and random states between scikit-learn's conventions and the engine's.

Shapes and encodings shared by every estimator here:

* ``X`` is (n_samples, n_features), any real array without NaN or inf; n_features = Nv, the
  visible units (RBMs) or d, the variables (FVBM).  The models are defined on binary data, so
  X is binarized: ``v = 1 if X > binarize else 0`` with ``binarize = 0.5`` by default.  Data
  in [0, 1] (pixel intensities scaled by their maximum, 0/1 data) are thresholded at one half;
  +-1 data map to 0/1 as well.  ``binarize=None`` takes X as it is and raises a ValueError
  unless it holds only 0 and 1.  (scikit-learn's BernoulliRBM instead uses values in [0, 1] as
  they are; the engine's samplers, trainers and exact likelihoods need 0/1 states.)
* RBMs: v in {0, 1}^Nv, h in {0, 1}^Nh.  ``components_`` is (n_components, n_features) =
  W^T of the engine's W (Nv, Nh) -- BernoulliRBM's orientation --, ``intercept_visible_`` is
  b_vis (Nv,), ``intercept_hidden_`` b_hid (Nh,); E(v, h) = -v^T W h - b_vis^T v - b_hid^T h.
* FVBM: the paper's spins x = 2 v - 1 in {-1, +1}^d (Nguyen & Wood 2016, eq. 1.1), which is
  what :mod:`boltzlab.engine.fvbm` expects; ``coef_`` is M (d, d), symmetric with a zero
  diagonal, ``intercept_`` is b (d,).

Random states: ``random_state`` (None, an int or a RandomState) is read the scikit-learn way
at the start of ``fit`` (``random_state_``); the engine's seeded kernels get ints drawn from it,
so an int random_state gives the same model on every fit.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import scipy.optimize
from sklearn.base import BaseEstimator, DensityMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import Bunch, check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from . import fvbm as fvbm_engine
from .checks import check_choice, check_float, check_int
from .kernels import rbm as rbm_kernels
from .rbm import (
    AIS_SCHEDULE_DEFAULT,
    AIS_SCHEDULE_LIVE,
    MAX_EXACT_UNITS,
    RBMTrainer,
    ais_log_partition,
    base_rate_biases,
    log_partition_exact,
)
from .rbm import RBM as EngineRBM
from .tap import DEFAULT_MAX_ITER, DEFAULT_TOL, TAPTrainer
from .threads import single_blas

__all__ = ["RBM", "TAPRBM", "FVBM"]

_SEED_LIMIT = 2**31 - 1  # the engine's seeds are ints >= 0; numba's generators take 31 bits
_AIS_SCHEDULES = {"default": AIS_SCHEDULE_DEFAULT, "live": AIS_SCHEDULE_LIVE}


def _draw_seed(random_state: np.random.RandomState) -> int:
    return int(random_state.randint(_SEED_LIMIT))


def _binary(X: np.ndarray, binarize: Any, owner: str) -> np.ndarray:
    """X (validated, float64) as a C-contiguous 0/1 float64 array (see the module docstring)."""
    if binarize is None:
        bad = ~((X == 0.0) | (X == 1.0))
        if bad.any():
            i, j = np.argwhere(bad)[0]
            raise ValueError(f"{owner} with binarize=None needs X to hold only 0 and 1. Got {X[i, j]!r} at row {i}, "
                             f"column {j}; set binarize to a threshold (e.g. 0.5) to binarize X.")
        return np.ascontiguousarray(X, dtype=np.float64)
    if isinstance(binarize, bool) or not isinstance(binarize, (int, float, np.integer, np.floating)) \
            or not math.isfinite(binarize):
        raise ValueError(f"The 'binarize' parameter of {owner} must be a finite float or None. Got {binarize!r}.")
    return np.ascontiguousarray(X > binarize, dtype=np.float64)


# ------------------------------------------------------------------------------ RBMs


class _BinaryRBM(TransformerMixin, BaseEstimator):
    """What :class:`RBM` and :class:`TAPRBM` share: the fitted parameters and every method
    but training (transform, gibbs, score_samples)."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # dense, finite input of any sign (binarized, so no positivity is required)
        tags.input_tags.sparse = False
        tags.input_tags.allow_nan = False
        tags.input_tags.positive_only = False
        tags.transformer_tags.preserves_dtype = ["float64"]  # P(h|v) is computed in float64
        return tags

    # -- parameters in the engine's orientation
    def _engine_params(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (np.ascontiguousarray(self.components_.T, dtype=np.float64),
                np.asarray(self.intercept_visible_, dtype=np.float64), np.asarray(self.intercept_hidden_, dtype=np.float64))

    def _set_engine_params(self, W: np.ndarray, b_vis: np.ndarray, b_hid: np.ndarray) -> None:
        self.components_ = np.array(np.asarray(W, dtype=np.float64).T, order="C")
        self.intercept_visible_ = np.array(b_vis, dtype=np.float64)
        self.intercept_hidden_ = np.array(b_hid, dtype=np.float64)
        self._log_z = None  # the cached log Z belongs to the old parameters

    def _check_training(self, status: str, message: str) -> None:
        if status in ("diverged", "stalled"):
            warnings.warn(f"{type(self).__name__}: {message}", ConvergenceWarning, stacklevel=3)

    def _start(self, X: Any, reset: bool) -> np.ndarray:
        X = validate_data(self, X, dtype=np.float64, reset=reset)
        if reset or not hasattr(self, "random_state_"):
            self.random_state_ = check_random_state(self.random_state)
        return _binary(X, self.binarize, type(self).__name__)

    def _visible(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "components_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return _binary(X, self.binarize, type(self).__name__)

    def _model(self) -> EngineRBM:
        return EngineRBM(*self._engine_params())

    # -- inference
    def transform(self, X: Any) -> np.ndarray:
        """Hidden unit probabilities P(h_j = 1 | v) = sigmoid(b_hid_j + (v^T W)_j), (n_samples, n_components).

        v is X binarized (module docstring).  These are the features for a downstream
        classifier, as BernoulliRBM's ``transform``.
        """
        V = self._visible(X)
        W, _, b_hid = self._engine_params()
        return rbm_kernels.hidden_probabilities(V, W, b_hid)

    def gibbs(self, v: Any) -> np.ndarray:
        """One block Gibbs step from the (binarized) visibles: h ~ P(h | v), then v' ~ P(v | h).

        Returns v' as a float 0/1 array (n_samples, n_features).  Stochastic: each call draws
        a new seed from ``random_state_``, as BernoulliRBM's ``gibbs`` does.
        """
        V = self._visible(v)
        return self._model().gibbs(V, 1, _draw_seed(self.random_state_))[0]

    def log_partition(self) -> tuple[float, bool]:
        """(log Z, exact): the partition function of the fitted model and whether it is exact.

        Exact (:func:`boltzlab.engine.rbm.log_partition_exact`: the smaller layer's 2^m states
        enumerated, the other layer summed out) when the smaller layer has <= 20 units -- in
        particular whenever n_components <= 20.  Otherwise annealed importance sampling
        (:func:`boltzlab.engine.rbm.ais_log_partition`, Salakhutdinov & Murray 2008) with
        ``ais_runs`` runs on the ``ais_schedule`` temperatures ("default": the 14,500 intermediate
        temperatures of Ping, Liu & Ihler 2016, §4; "live": 1,000), from the base-rate model of the training
        data, seeded at fit time: an estimate, the same on every call for one fitted model.
        Cached until the parameters or the AIS settings change.
        """
        check_is_fitted(self, "components_")
        W, b_vis, b_hid = self._engine_params()
        settings = (self.ais_runs, self.ais_schedule)  # a cached AIS estimate is for these
        cached = getattr(self, "_log_z", None)
        if (cached is not None and cached[3] == settings
                and all(np.array_equal(a, c) for a, c in zip((W, b_vis, b_hid), cached[0]))):
            return cached[1], cached[2]
        if min(W.shape) <= MAX_EXACT_UNITS:
            value, exact = log_partition_exact(W, b_vis, b_hid), True
        else:
            ais_runs = check_int("ais_runs", self.ais_runs, type(self).__name__, 2)
            schedule = _AIS_SCHEDULES[check_choice("ais_schedule", self.ais_schedule, type(self).__name__,
                                                   tuple(_AIS_SCHEDULES))]
            value, _ = ais_log_partition(W, b_vis, b_hid, n_runs=ais_runs, schedule=schedule, seed=self._ais_seed,
                                         base_vis=self._base_vis)
            exact = False
        self._log_z = ((W.copy(), b_vis.copy(), b_hid.copy()), float(value), exact, settings)
        return float(value), exact

    def score_samples(self, X: Any) -> np.ndarray:
        """Log-likelihood log P(v) = -F(v) - log Z of each (binarized) sample, (n_samples,), in nats.

        F(v) = -b_vis^T v - sum_j softplus(b_hid_j + (v^T W)_j) is exact.  log Z is EXACT by
        enumeration when the smaller layer has <= 20 units (so whenever n_components <= 20),
        and estimated by annealed importance sampling beyond (see :meth:`log_partition`;
        AIS tends to underestimate log Z when its schedule is too short, which overstates
        the log-likelihood).  BernoulliRBM's ``score_samples`` is a pseudo-likelihood instead.
        """
        V = self._visible(X)
        W, b_vis, b_hid = self._engine_params()
        log_z, _ = self.log_partition()
        return -rbm_kernels.free_energy(V, W, b_vis, b_hid) - log_z

    def _remember_data(self, V: np.ndarray) -> None:
        # the AIS base model: independent visibles at the data's base rates (Salakhutdinov &
        # Murray's choice), and a seed, so score_samples is the same on every call
        self._base_vis = base_rate_biases(V)
        self._ais_seed = _draw_seed(self.random_state_)

    def _begin_partial_fit(self, X: Any) -> np.ndarray | None:
        """partial_fit's start: X binarized, or None after a first call, which initialises the
        model from X (one epoch of one batch: all of X)."""
        first = not hasattr(self, "components_")
        V = self._start(X, reset=first)
        if not first:
            return V
        trainer = self._trainer(V, batch_size=V.shape[0], max_epochs=1)
        trainer.run()
        self._adopt(trainer)
        self._remember_data(V)
        return None

    #: the trainer's state (beyond the parameters) partial_fit continues from
    _continued: tuple[str, ...] = ()

    def _adopt(self, trainer: Any) -> None:
        state = trainer.state_dict()
        self.n_iter_ = math.ceil(trainer.epoch)
        self._set_engine_params(state["W"], state["b_vis"], state["b_hid"])
        self._train_state = {key: np.array(state[key]) for key in self._continued}
        self._check_training(trainer.status, trainer.message)

    def fit(self, X, y=None):
        """Train for ``n_iter`` passes over X (binarized) from a fresh initialisation.

        Returns
        -------
        self
        """
        V = self._start(X, reset=True)
        trainer = self._trainer(V, batch_size=self.batch_size, max_epochs=self.n_iter)
        trainer.run()
        self._adopt(trainer)
        self._remember_data(V)
        return self


class RBM(_BinaryRBM):
    """A binary restricted Boltzmann machine trained by CD-k or persistent CD-k (PCD-k).

    In BernoulliRBM's shape (``fit``, ``partial_fit``, ``transform``, ``gibbs``,
    ``score_samples``, the same fitted attributes), trained by the engine's
    :class:`boltzlab.engine.rbm.RBMTrainer`: mini-batch gradient of the mean log-likelihood,
    positive phase E[v P(h|v)^T] on the batch, negative phase the same after ``k`` block Gibbs
    steps from the batch ("cd") or from ``batch_size`` persistent chains ("pcd", Tieleman
    2008), with momentum and L2 weight decay on W.  Initial W ~ N(0, 0.01^2), b_vis the
    log-odds of the data's base rates, b_hid = 0.

    Input: see the module docstring (X > ``binarize`` is a 1).

    Parameters
    ----------
    n_components : int, default=64
        Number of hidden units Nh.
    method : {"pcd", "cd"}, default="pcd"
        Where the negative phase's Gibbs chains start: persistent chains or the batch.
    k : int, default=1
        Block Gibbs steps per negative phase (the k of CD-k / PCD-k).
    learning_rate, momentum, weight_decay : float, defaults 0.05, 0.5, 0.0
        vel <- momentum vel + learning_rate (grad - weight_decay W), W <- W + vel (biases
        without decay).
    batch_size : int, default=10
    n_iter : int, default=10
        Passes over the (shuffled) training data in ``fit``.
    binarize : float or None, default=0.5
        Threshold for binarizing X; None: X must already be 0/1.
    ais_runs : int, default=100
    ais_schedule : {"default", "live"}, default="default"
        AIS settings for :meth:`score_samples` when log Z cannot be enumerated.
    random_state : None, int or RandomState, default=None

    Attributes
    ----------
    components_ : (n_components, n_features) W^T
    intercept_hidden_ : (n_components,) b_hid
    intercept_visible_ : (n_features,) b_vis
    n_features_in_ : int
    n_iter_ : int
        Passes over the data of the last ``fit`` (1 after ``partial_fit``).
    random_state_ : RandomState
    """

    def __init__(self, n_components=64, *, method="pcd", k=1, learning_rate=0.05, momentum=0.5, weight_decay=0.0,
                 batch_size=10, n_iter=10, binarize=0.5, ais_runs=100, ais_schedule="default", random_state=None):
        self.n_components = n_components
        self.method = method
        self.k = k
        self.learning_rate = learning_rate
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.n_iter = n_iter
        self.binarize = binarize
        self.ais_runs = ais_runs
        self.ais_schedule = ais_schedule
        self.random_state = random_state

    _continued = ("vW", "v_vis", "v_hid", "chains", "chain_hid")  # the optimizer's and the chains' state

    def _trainer(self, V: np.ndarray, *, batch_size: int, max_epochs: int) -> RBMTrainer:
        # evaluations are the trainer's live metrics: one row, one unit, nearly free
        return RBMTrainer(V, self.n_components, method=self.method, k=self.k, batch_size=batch_size,
                          learning_rate=self.learning_rate, momentum=self.momentum, weight_decay=self.weight_decay,
                          step_unit="epoch", seed=_draw_seed(self.random_state_), evaluate="none",
                          max_epochs=max_epochs, eval_rows=1, pl_units=1, dtype="float64")

    def partial_fit(self, X, y=None):
        """One update with X (binarized) as the mini-batch, continuing the previous state.

        The first call initialises the model from X; later calls keep the momentum and (PCD)
        the persistent chains.  The AIS base model of :meth:`score_samples` stays the first
        call's (or ``fit``'s) data.

        Returns
        -------
        self
        """
        V = self._begin_partial_fit(X)
        if V is None:
            return self
        owner = "RBM"
        method = check_choice("method", self.method, owner, ("pcd", "cd"))
        k = check_int("k", self.k, owner, 1)
        learning_rate = check_float("learning_rate", self.learning_rate, owner, 0.0, low_open=True)
        momentum = check_float("momentum", self.momentum, owner, 0.0, 1.0)
        weight_decay = check_float("weight_decay", self.weight_decay, owner, 0.0)
        W, b_vis, b_hid = (np.array(a) for a in self._engine_params())
        if W.shape[1] != self.n_components:
            raise ValueError(f"The 'n_components' parameter of RBM was {W.shape[1]} when the model was fitted; "
                             f"partial_fit cannot change it to {self.n_components!r}. Call fit instead.")
        s = self._train_state
        n = V.shape[0]
        single_blas()
        rbm_kernels.train_batches(
            V, np.arange(n, dtype=np.int64), np.array([0, n], dtype=np.int64),
            np.array([_draw_seed(self.random_state_)], dtype=np.int64), W, b_vis, b_hid, s["vW"], s["v_vis"], s["v_hid"],
            s["chains"], s["chain_hid"], method == "pcd", k, learning_rate, momentum, weight_decay,
            np.empty(1),
        )
        self._set_engine_params(W, b_vis, b_hid)
        self.n_iter_ = 1
        if not (np.all(np.isfinite(W)) and np.all(np.isfinite(b_vis)) and np.all(np.isfinite(b_hid))):
            self._check_training("diverged", "partial_fit diverged: the parameters are no longer finite.")
        return self


class TAPRBM(_BinaryRBM):
    """A binary RBM trained through the TAP free energy (Tramel et al. 2018, Algorithm 2).

    In BernoulliRBM's shape, trained by the engine's :class:`boltzlab.engine.tap.TAPTrainer`
    with Bernoulli priors on both layers (the model of eq. 9 is then exactly the RBM of
    :class:`RBM`).  Per mini-batch of ``batch_size`` rows, Algorithm 1 runs from ``n_chains``
    data rows to its fixed points (the TAP magnetizations), the distinct ones are kept, and the
    parameters ascend the TAP log-likelihood (eq. 39) along its gradient (eqs. 40-42), averaged
    uniformly over the distinct solutions, with momentum and L2 weight decay on W.  Defaults
    are Table 1's for binary MNIST (learning rate 0.005, weight decay 0.001, momentum 0.5)
    except the smaller batch and chain counts; initial W ~ N(0, 0.001^2).  When no chain of
    a batch converges, the damping of Algorithm 1 is raised (up to ``max_damping``) and the
    batch redone; if that fails too, training stops with a ConvergenceWarning.

    :meth:`score_samples` is the exact (or AIS) log-likelihood, as for :class:`RBM`, not
    the TAP estimate that training ascends.

    Parameters
    ----------
    n_components : int, default=64
    learning_rate, weight_decay, momentum : float, defaults 0.005, 0.001, 0.5
    batch_size : int, default=10
    n_chains : int, default=10
        TAP chains (initialisations of Algorithm 1) per mini-batch: the batch's rows, then
        further random data rows.
    n_iter : int, default=10
        Passes over the data in ``fit``.
    damping, max_damping : float, defaults 0.0, 0.9
        Algorithm 1's damping, and how far it may be raised on a batch where no chain converges.
    tol, max_iter : Algorithm 1's stopping rule (mean squared change of the magnetizations, Fig. 3)
    binarize, ais_runs, ais_schedule, random_state : as for :class:`RBM`.

    Attributes
    ----------
    components_, intercept_hidden_, intercept_visible_, n_features_in_, n_iter_, random_state_ :
        as for :class:`RBM` (n_iter_ counts passes begun: fewer than ``n_iter`` after a stall).
    """

    def __init__(self, n_components=64, *, learning_rate=0.005, weight_decay=0.001, momentum=0.5, batch_size=10,
                 n_chains=10, n_iter=10, damping=0.0, max_damping=0.9, tol=DEFAULT_TOL, max_iter=DEFAULT_MAX_ITER,
                 binarize=0.5, ais_runs=100, ais_schedule="default", random_state=None):
        self.n_components = n_components
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.momentum = momentum
        self.batch_size = batch_size
        self.n_chains = n_chains
        self.n_iter = n_iter
        self.damping = damping
        self.max_damping = max_damping
        self.tol = tol
        self.max_iter = max_iter
        self.binarize = binarize
        self.ais_runs = ais_runs
        self.ais_schedule = ais_schedule
        self.random_state = random_state

    _continued = ("vW", "precision_vis", "rho_vis", "precision_hid", "rho_hid", "damping")

    def _trainer(self, V: np.ndarray, *, batch_size: int, max_epochs: int,
                 damping: float | None = None) -> TAPTrainer:
        # n_eval = 1: the trainer's per-step evaluation is for the live lab, not needed here
        return TAPTrainer(V, self.n_components, batch_size=batch_size, n_chains=self.n_chains,
                          learning_rate=self.learning_rate, weight_decay=self.weight_decay, momentum=self.momentum,
                          damping=self.damping if damping is None else damping, tol=self.tol,
                          max_iter=self.max_iter, step_unit="epoch",
                          max_epochs=max_epochs, n_eval=1, max_damping=self.max_damping,
                          seed=_draw_seed(self.random_state_), dtype="float64")

    def partial_fit(self, X, y=None):
        """One update of Algorithm 2 with X (binarized) as the mini-batch, continuing the previous
        state (momentum, and the damping if a stall raised it).

        Returns
        -------
        self
        """
        V = self._begin_partial_fit(X)
        if V is None:
            return self
        W, b_vis, b_hid = self._engine_params()
        if W.shape[1] != self.n_components:
            raise ValueError(f"The 'n_components' parameter of TAPRBM was {W.shape[1]} when the model was fitted; "
                             f"partial_fit cannot change it to {self.n_components!r}. Call fit instead.")
        s = self._train_state
        trainer = self._trainer(V, batch_size=V.shape[0], max_epochs=1, damping=float(s["damping"]))
        # continue from the fitted state: a checkpoint without the keys tying it to other data
        trainer.load_state_dict({"W": W, "b_vis": b_vis, "b_hid": b_hid, **s, "iteration": 0, "elapsed": 0.0,
                                 "status": "running", "message": "", "dtype": "float64"})
        trainer.run()
        self._adopt(trainer)
        return self


# ------------------------------------------------------------------------------ FVBM


def _penalized_mple(S: np.ndarray, alpha: float, grad_tol: float) -> tuple[np.ndarray, np.ndarray]:
    """(b, M) maximizing P_n(theta) - n alpha |theta|^2 / 2 (eq. 2.1 plus an L2 penalty).

    The engine's -P_n with its gradient and exact Hessian, over the distinct rows weighted by
    their counts (as :func:`boltzlab.engine.fvbm.mple`), plus the penalty's n alpha theta and
    n alpha I; strictly convex, so scipy's trust-region Newton ("trust-exact") converges
    from theta = 0 even where the unpenalized maximum is at infinity.
    """
    rows, counts = np.unique(S, axis=0, return_counts=True)
    w = counts.astype(np.float64)
    n, d = w.sum(), S.shape[1]
    q = d + d * (d - 1) // 2
    ridge = n * alpha

    def objective(theta):
        value, grad = fvbm_engine._negative_log_pl(theta, rows, w, d)
        return value + 0.5 * ridge * (theta @ theta), grad + ridge * theta

    def hessian(theta):
        return ridge * np.eye(q) - fvbm_engine._hessian(rows, w, *fvbm_engine.unpack_theta(theta, d))

    result = scipy.optimize.minimize(objective, np.zeros(q), jac=True, hess=hessian, method="trust-exact",
                                     options={"gtol": grad_tol * n, "maxiter": 1000})
    if not np.all(np.isfinite(result.x)):
        raise ValueError("FVBM: the penalized pseudo-likelihood maximization did not stay finite; raise alpha.")
    return fvbm_engine.unpack_theta(result.x, d)


class FVBM(DensityMixin, BaseEstimator):
    """A fully visible Boltzmann machine fitted by maximum pseudo-likelihood (Nguyen & Wood 2016).

    P(x) = exp(x^T M x / 2 + b^T x) / Z(theta) over x in {-1, 1}^d (eq. 1.1), M symmetric with
    a zero diagonal.  ``fit`` finds the MPLE, the maximizer of the concave log-pseudo-likelihood

        P_n(theta) = sum_i sum_j [x_ij u_ij - log(2 cosh u_ij)],  u_ij = m_j^T x_i + b_j   (eq. 2.1)

    (with a small L2 penalty ``alpha``; ``alpha=0``: :func:`boltzlab.engine.fvbm.mple`), then the
    sandwich standard errors H^-1 J H^-1 of eq. 2.1 at the estimate
    (:func:`boltzlab.engine.fvbm.wald_tests`), which are the MPLE's asymptotic ones when alpha
    is 0 (or negligible against the curvature H / n).

    Input: X is binarized (X > ``binarize`` is a 1, see the module docstring) and mapped to the
    paper's spins x = 2 v - 1.  The MPLE does not exist for every data set: a constant column,
    or a column the others predict perfectly, sends parameters to infinity, and ``fit`` raises
    a ValueError that says which columns (:func:`boltzlab.engine.fvbm.check_mple_exists`) when
    ``alpha=0``; the default alpha > 0 keeps the estimate finite there (see ``alpha``).

    Parameters
    ----------
    alpha : float, default=1e-4
        L2 penalty per sample: ``fit`` maximizes P_n(theta) / n - alpha |theta|^2 / 2 (theta: b
        and the upper triangle of M).  ``alpha=0`` is the plain MPLE, found by
        :func:`boltzlab.engine.fvbm.mple` itself, and raises a ValueError where no MPLE exists
        (a constant column, or columns the others predict perfectly: the parameters would grow
        without bound; :func:`boltzlab.engine.fvbm.check_mple_exists` says which columns).
        Any alpha > 0 makes the objective strictly concave, so a maximizer always exists; the
        default is small: it moves a well-posed estimate by about alpha (H / n)^-1 theta to
        first order (H the Hessian of eq. 2.1), far less than its standard errors.
    binarize : float or None, default=0.5
        Threshold for binarizing X; None: X must already be 0/1.
    grad_tol : float, default=1e-9
        Stop when |gradient| <= grad_tol * n_samples.

    Attributes
    ----------
    coef_ : (n_features, n_features) the coupling matrix M (zero diagonal)
    intercept_ : (n_features,) the bias b
    se_ : Bunch with ``coef`` (n_features, n_features; NaN on the diagonal, which is no
        parameter) and ``intercept`` (n_features,): the sandwich standard errors.  NaN (with a
        warning) if the Hessian of eq. 2.1 is singular at the estimate.
    n_features_in_ : int
    """

    def __init__(self, *, alpha=1e-4, binarize=0.5, grad_tol=1e-9):
        self.alpha = alpha
        self.binarize = binarize
        self.grad_tol = grad_tol

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        tags.input_tags.allow_nan = False
        tags.target_tags.required = False  # unsupervised: y is ignored
        return tags

    def _spins(self, X: Any, reset: bool) -> np.ndarray:
        X = validate_data(self, X, dtype=np.float64, reset=reset)
        return 2.0 * _binary(X, self.binarize, "FVBM") - 1.0

    def fit(self, X, y=None):
        """The MPLE of eq. 2.1 on X, with sandwich standard errors.

        Raises
        ------
        ValueError
            If n_samples < 2 or n_features < 2, or if the MPLE does not exist for X.

        Returns
        -------
        self
        """
        S = self._spins(X, reset=True)
        n, d = S.shape
        if n < 2:
            raise ValueError(f"FVBM needs n_samples >= 2 to estimate anything. Got n_samples = {n}.")
        if d < 2:
            raise ValueError(f"FVBM needs n_features >= 2 (a coupling is between two variables). Got n_features = {d}.")
        grad_tol = check_float("grad_tol", self.grad_tol, "FVBM", 0.0, low_open=True)
        alpha = check_float("alpha", self.alpha, "FVBM", 0.0)
        if alpha == 0.0:
            model = fvbm_engine.mple(S, grad_tol=grad_tol)
        else:
            model = fvbm_engine.FVBM(*_penalized_mple(S, alpha, grad_tol))
        self.coef_, self.intercept_ = model.M, model.b
        try:
            tests = fvbm_engine.wald_tests(S, model.b, model.M)
            se_b, se_M = tests["se"]
            z, p = tests["z"], tests["p"]
        except ValueError as error:
            warnings.warn(f"FVBM: {error} The standard errors, z and p-values are NaN.", UserWarning, stacklevel=2)
            nan_b, nan_M = np.full(d, np.nan), np.full((d, d), np.nan)
            se_b, se_M, z, p = nan_b, nan_M, (nan_b, nan_M), (nan_b, nan_M)
        self.se_ = Bunch(intercept=se_b, coef=se_M)
        self._wald = (z, p)
        return self

    def wald_test(self) -> Bunch:
        """Wald tests of every parameter against zero, from the sandwich standard errors.

        z = estimate / SE and the two-sided p = P(|N(0, 1)| >= |z|) (asymptotic normality
        of the MPLE; Nguyen & Wood 2016 cite it from their paper in press).  Returns a Bunch

            {"z": Bunch(intercept=(d,), coef=(d, d)), "p": Bunch(intercept=(d,), coef=(d, d)),
             "se": self.se_}

        shaped like ``intercept_`` and ``coef_``; the diagonal of the coef arrays is NaN.
        One test per parameter: correct for multiple testing yourself when reading many.
        """
        check_is_fitted(self, "coef_")
        (zb, zM), (pb, pM) = self._wald
        return Bunch(z=Bunch(intercept=zb.copy(), coef=zM.copy()), p=Bunch(intercept=pb.copy(), coef=pM.copy()),
                     se=Bunch(intercept=self.se_.intercept.copy(), coef=self.se_.coef.copy()))

    def score(self, X, y=None) -> float:
        """Mean log-pseudo-likelihood per sample, P_n(theta) / n (eq. 2.1, including its -log 2
        terms), of X (binarized) at the fitted parameters.  Not the log-likelihood: that needs
        Z(theta), a sum over 2^d states."""
        check_is_fitted(self, "coef_")
        S = self._spins(X, reset=False)
        return float(fvbm_engine.log_pseudo_likelihood(S, self.intercept_, self.coef_) / S.shape[0])
