"""Learning infinite RBMs with Frank-Wolfe (Ping, Liu & Ihler, NIPS 2016).

The model (eq. 5) replaces the sum over hidden units of an RBM's free energy by an
expectation over a distribution q(w) of hidden-unit weights, scaled by alpha > 0:

    log p(v | q, theta) = alpha E_q[softplus(w^T v)] + b^T v - log Z(q, theta).

Frank-Wolfe (Algorithm 1) keeps q sparse: with step 1/t, q_t = (1/t) sum_s delta(w = w*_s)
is uniform over the units inserted so far, and with alpha_t = t the model *is* a standard
binary RBM with t hidden units and weights w*_1..w*_t: alpha_t E_{q_t}[softplus(w^T v)] =
t (1/t) sum_s softplus(w*_s^T v) = sum_s softplus(w*_s^T v), the marginal free-energy term
of eq. 3 (Proposition 3.1).  Each iteration therefore "inserts a hidden unit":

1. draw S samples from the current model (persistent block Gibbs chains);
2. solve the inner problem, eq. 9, for the new unit w*_t by L-BFGS (scipy "L-BFGS-B",
   analytic gradient, one fused pass over the samples' and the data's ones per evaluation);
3. q_t = (1 - 1/t) q_{t-1} + (1/t) delta(w = w*_t), alpha_t = t;
4. update the visible biases by eq. 10 until the model's visible means match the data's
   (Algorithm 1's "repeat ... until"; at most ``bias_steps`` updates).

The paper drops the hidden biases, "achieved by introducing a dummy visible unit whose
value is always one" (§2); ``hidden_bias=True`` (the default) does exactly that: the unit's
weight vector is (w, c) with c the weight of the dummy unit, i.e. the hidden bias, and the
L2 penalty covers c like every other weight.  ``hidden_bias=False`` keeps c = 0.

Choices where the paper is silent or inconsistent (also stated in the report of
:class:`FrankWolfeTrainer`):

* **Eq. 9 vs eq. 8.**  The functional gradient (eq. 8) carries a factor alpha_t on its
  likelihood terms which eq. 9 and Algorithm 1 drop.  We solve eq. 9 as printed.  It is
  then the exact Frank-Wolfe linear program (7) of the objective

      L'(q, theta) = (1/N) sum_n log p(v_n | q, theta) - (lam/2) alpha E_q ||w||^2,

  which equals eq. 6 at alpha = 1 and, at alpha = t, is the RBM log-likelihood with
  ordinary L2 weight decay (lam/2) ||W||_F^2.  The Frank-Wolfe gap, the gradient for a
  fitted alpha and the away-step rule are derived from L' (Records: ``fw_objective``);
  Records also carry eq. 6 itself (``penalized_log_likelihood``, penalty (lam/2) times the
  *mean* squared norm of the units).  Neither is guaranteed to rise at every step: the
  unit enters at full strength (alpha_t = t), not at a line-searched step.  With exact
  expectations on small data, eq. 6 and the plain log-likelihood rose at every step for
  lam in {0.03, 0.05} (the tests), while L' fell by up to 3e-2 nats at lam = 0.03 and
  eq. 6 by up to 0.24 at lam = 0.02, where units are larger.
* **q_0 and b_0.**  Algorithm 1 starts from q_0 = delta(w') "at random w'" and b_0 = 0.
  q_0 is discarded by the first step (beta_1 = 1); we take w' = 0, so p(v | q_0, theta_0)
  is the independent model of the visible biases and is sampled exactly.  b_0 is the data's
  base-rate log-odds by default (``init_bias="base_rate"``; ``"zero"`` is the paper's),
  since eq. 10 from b = 0 takes many more updates to converge at the first insertions.
* **Samples.**  Persistent chains (S = ``samples``), advanced ``gibbs_steps`` steps before
  the inner problem and before each bias update; the bias updates use all S chains (M = S)
  and the Rao-Blackwellised means P(v | h) of the chains (unbiased, less noisy than v).
* **"Until" of eq. 10.**  The paper does not say until what.  The loop stops when every
  visible unit has |data mean - model mean| <= ``bias_tol`` + 3 standard errors of the
  model mean over the S chains (the test asks only for what the samples can resolve), or
  after ``bias_steps`` updates (Records: ``bias_updates``, ``bias_mismatch``,
  ``bias_converged``).  A fixed 10 steps (this engine before issue 16) left the digits'
  pixel means up to 0.77 off at lambda = 0.05 and the exact test log-likelihood at -88
  nats after 20 units, against -20.6 converged.  Eq. 10 is gradient ascent on a function
  concave in b, so the converged b does not depend on eta; eta sets how many updates it
  takes (digits, 20 units, S = 2000: about 125 at eta = 0.05, 16 at 0.5).
* **Exact expectations** (``exact_expectations``, for tests and as the reference of
  ``reproduce frankwolfe --data digits``): with Nv <= 16 every expectation enumerates the
  visible states; otherwise, for a standard RBM with at most 20 units, the hidden states
  (:func:`boltzlab.engine.kernels.frankwolfe.hidden_enumeration`): eq. 10's limit is then found
  directly (L-BFGS on the exact, concave log-likelihood in b, the same test with no
  standard errors) and eq. 9 uses S independent exact samples.
* **Inner-problem start.**  Eq. 9 is not convex (a difference of convex functions); L-BFGS
  starts from N(0, ``init_scale``^2) weights (w = 0 is a stationary point once the biases
  match the data's marginals) and ``inner_restarts`` starts keep the best.
* **Away steps** (§3.2, Guelat & Marcotte 1986) are taken in the unnormalised measure
  mu = alpha q, where with alpha = t each unit has mass 1: inserting w* changes L' at the
  rate -J(w*) (J is eq. 9's objective, J(w*) <= 0), removing unit i at the rate +J(w_i).
  When J(w_i) of the worst unit exceeds -J(w*), the unit is removed instead of inserting
  one; in q this is the maximal away step (a "drop step", weight 1/t -> 0) with alpha_t =
  t - 1, so the model stays a standard RBM with one unit fewer.
* **Fitted alpha** (``fit_alpha``): after each insertion alpha starts from
  alpha_{t-1} t / (t - 1) (the same coefficient per unit) and takes one gradient step
  per bias step (on the same samples, a joint ascent on (b, alpha), both concave), with
  dL'/dalpha = -E_q[J(w)] (the appendix's gradient minus (lam/2) E_q||w||^2).  The model is
  then a fractional RBM (eq. 11, coefficients alpha / t), sampled with the
  Metropolis-Hastings sampler of §3.3 (Gibbs proposals of the RBM of eq. 12).
* **Early stopping** (§4): "when the gap of average log-likelihood between training and
  validation data largely increases".  log Z cancels in the gap, so it is cheap and exact:
  gap = mean_valid F(v) - mean_train F(v).  We read "largely increases" as: the gap grew
  by more than ``stop_increase`` nats over the last ``stop_window`` iterations (the paper
  evaluates every 20 units); the selected size is the number of units ``stop_window``
  iterations before the rule fired (see :func:`gap_stop_rule`).
"""

from __future__ import annotations

import math
import time
from typing import Any, Literal, Mapping

import numpy as np
import scipy.optimize

from .checks import check_choice, check_float, check_int, check_seed, derived_seed
from .kernels import frankwolfe as fwk
from .kernels import rbm as rbm_kernels
from .rbm import (
    AIS_SCHEDULE_DEFAULT,
    AIS_SCHEDULE_LIVE,
    MAX_EXACT_UNITS,
    RBM,
    _check_params,
    ais_log_partition,
    base_rate_biases,
    check_binary,
    check_dtype_matches,
    log_partition_exact,
)
from .stepping import Record, as_scalar
from .threads import single_blas

#: Exact expectations enumerate the 2^Nv visible states: allowed up to this many visibles ...
MAX_EXACT_EXPECTATION_UNITS = 16
#: ... or, for a standard RBM, the 2^n hidden states up to this many hidden units (0.7 s per
#: enumeration at n = 20, Nv = 64): eq. 10 is then solved exactly and eq. 9 uses exact samples.
MAX_EXACT_HIDDEN_EXPECTATION_UNITS = 20
#: Eq. 10's convergence test allows this many standard errors of the sampled model means.
BIAS_TEST_Z = 3.0
#: ``evaluate="auto"`` uses the exact log Z when 2^m max(Nv, n) (m the smaller layer) is at
#: most this many softplus terms (about 0.1 s), else AIS.
AUTO_EXACT_BUDGET = 2**22
ALPHA_MIN = 1e-6


# ------------------------------------------------------------------ model functions


def _coefficients(coef: Any, n: int, owner: str) -> np.ndarray:
    coef = np.asarray(coef, dtype=np.float64)
    if coef.shape != (n,) or not np.all(np.isfinite(coef)) or np.any(coef <= 0.0):
        raise ValueError(f"The 'coef' parameter of {owner} must be a positive finite array of shape ({n},). Got {coef!r:.80}.")
    return coef


def inner_objective(theta: np.ndarray, V_model: np.ndarray, V_data: np.ndarray, reg: float, *,
                    model_weights: np.ndarray | None = None, hidden_bias: bool = True) -> tuple[float, np.ndarray]:
    """Eq. 9 and its gradient at theta = (w, c) (c: the hidden bias, weight of the dummy unit).

        J(w, c) = reg/2 (||w||^2 + c^2) + sum_s a_s softplus(w^T v_s + c)
                  - (1/N) sum_n softplus(w^T v_n + c),

    with a_s = 1/S over the model samples ``V_model`` (or ``model_weights``, e.g. exact
    probabilities of enumerated states).  The gradient is eq. 9's "gradient of the
    objective": reg w + E_model[sigmoid(.) v] - (1/N) sum_n sigmoid(.) v_n (and the same with
    v -> 1 for c).  ``theta`` has Nv + 1 entries; ``hidden_bias=False`` holds c at 0.
    """
    owner = "inner_objective"
    V_model = check_binary(V_model, "V_model", owner)
    n_vis = V_model.shape[1]
    V_data = check_binary(V_data, "V_data", owner, n_vis)
    reg = check_float("reg", reg, owner, 0.0)
    theta = np.asarray(theta, dtype=np.float64)
    if theta.shape != (n_vis + 1,) or not np.all(np.isfinite(theta)):
        raise ValueError(f"The 'theta' parameter of {owner} must be a finite array of shape ({n_vis + 1},). Got shape {theta.shape}.")
    if model_weights is None:
        a = np.full(V_model.shape[0], 1.0 / V_model.shape[0])
    else:
        a = np.asarray(model_weights, dtype=np.float64)
        if a.shape != (V_model.shape[0],) or not np.all(np.isfinite(a)):
            raise ValueError(f"The 'model_weights' parameter of {owner} must be a finite array of shape ({V_model.shape[0]},).")
    indptr, indices = fwk.to_csr(np.vstack([V_model, V_data]))
    weights = np.concatenate([a, np.full(V_data.shape[0], -1.0 / V_data.shape[0])])
    f, g = fwk.inner_objective(indptr, indices, weights, theta, reg, n_vis, bool(hidden_bias))
    return float(f), g


def fractional_log_partition_exact(W: np.ndarray, b_vis: np.ndarray, b_hid: np.ndarray, coef: np.ndarray) -> float:
    """Exact log Z of the fractional RBM of eq. 11 by enumerating the visibles (Nv <= 20).

    coef = 1 is the standard RBM (then :func:`boltzlab.engine.rbm.log_partition_exact` also works
    with few hidden units and many visibles).
    """
    owner = "fractional_log_partition_exact"
    W, b_vis, b_hid = _check_params(W, b_vis, b_hid, owner)
    coef = _coefficients(coef, W.shape[1], owner)
    if W.shape[0] > MAX_EXACT_UNITS:
        raise ValueError(f"{owner} enumerates the visible layer and needs n_visible <= {MAX_EXACT_UNITS}. Got {W.shape[0]}.")
    return float(fwk.fractional_log_partition(W, b_vis, b_hid, coef))


def fractional_free_energy(V: np.ndarray, W: np.ndarray, b_vis: np.ndarray, b_hid: np.ndarray, coef: np.ndarray) -> np.ndarray:
    """F(v) = -b_vis^T v - sum_i coef_i softplus(w_i^T v + b_hid_i) for every row (eq. 11), (n,)."""
    owner = "fractional_free_energy"
    W, b_vis, b_hid = _check_params(W, b_vis, b_hid, owner)
    coef = _coefficients(coef, W.shape[1], owner)
    V = check_binary(V, "V", owner, W.shape[0])
    return fwk.fractional_free_energy(V, W, b_vis, b_hid, coef)


def mh_sample(W: np.ndarray, b_vis: np.ndarray, b_hid: np.ndarray, coef: np.ndarray, V0: np.ndarray, k: int,
              seed: int) -> tuple[np.ndarray, float]:
    """k Metropolis-Hastings steps (§3.3) for the fractional RBM of eq. 11 from each row of V0.

    The proposal is one block Gibbs step of the standard RBM of eq. 12 (coefficients pushed
    into the softplus: weights coef_i w_i, hidden biases coef_i b_hid_i); it is accepted with
    probability min(1, A), A = prod_i (1 + e^{x'_i})^{c_i} (1 + e^{c_i x_i}) /
    ((1 + e^{x_i})^{c_i} (1 + e^{c_i x'_i})), x = W^T v + b_hid.  Returns the final states
    and the acceptance rate.  V0 is not modified.
    """
    owner = "mh_sample"
    W, b_vis, b_hid = _check_params(W, b_vis, b_hid, owner)
    coef = _coefficients(coef, W.shape[1], owner)
    V = check_binary(V0, "V0", owner, W.shape[0]).copy()
    k = check_int("k", k, owner, 1)
    seed = check_seed(owner, seed)
    accepted = fwk.mh_chains(V, W, b_vis, b_hid, coef, k, derived_seed(seed, 21))
    return V, accepted / (k * V.shape[0])


def fractional_ais_log_partition(
    W: np.ndarray, b_vis: np.ndarray, b_hid: np.ndarray, coef: np.ndarray, *, n_runs: int = 100,
    schedule: np.ndarray | None = None, seed: int = 0, base_vis: np.ndarray | None = None,
) -> tuple[float, float]:
    """AIS estimate of log Z for the fractional RBM of eq. 11 (geometric path, MH transitions).

    See :func:`boltzlab.engine.kernels.frankwolfe.fractional_ais_log_weights`; ``schedule``, ``base_vis``
    and the returned (estimate, 3-standard-deviation spread) are as in
    :func:`boltzlab.engine.rbm.ais_log_partition` (base default: the visible biases' own rates).
    """
    owner = "fractional_ais_log_partition"
    W, b_vis, b_hid = _check_params(W, b_vis, b_hid, owner)
    coef = _coefficients(coef, W.shape[1], owner)
    n_runs = check_int("n_runs", n_runs, owner, 1)
    seed = check_seed(owner, seed)
    betas = AIS_SCHEDULE_DEFAULT if schedule is None else np.asarray(schedule, dtype=np.float64)
    if (betas.ndim != 1 or betas.shape[0] < 2 or betas[0] != 0.0 or betas[-1] != 1.0
            or np.any(np.diff(betas) < 0) or not np.all(np.isfinite(betas))):
        raise ValueError(f"The 'schedule' parameter of {owner} must be a 1-d non-decreasing array of betas from 0.0 to 1.0 with >= 2 entries.")
    base = b_vis.copy() if base_vis is None else np.asarray(base_vis, dtype=np.float64)
    if base.shape != (W.shape[0],) or not np.all(np.isfinite(base)):
        raise ValueError(f"The 'base_vis' parameter of {owner} must be a finite array of shape ({W.shape[0]},).")
    logw = fwk.fractional_ais_log_weights(W, b_vis, b_hid, coef, base, np.ascontiguousarray(betas), n_runs,
                                          derived_seed(seed, 23))
    log_z0 = float(np.sum(np.logaddexp(0.0, base)))
    top = logw.max()
    w = np.exp(logw - top)
    spread = 3.0 * float(w.std(ddof=1) / (w.mean() * math.sqrt(n_runs))) if n_runs > 1 else 0.0
    return float(top + math.log(w.mean()) + log_z0), spread


def gap_stop_rule(gaps: np.ndarray, n_hidden: np.ndarray, *, window: int, increase: float) -> tuple[int, int]:
    """The early-stopping rule of §4 on a history of train/validation gaps.

    ``gaps[k]`` is mean train log-likelihood minus mean validation log-likelihood (log Z
    cancels) after iteration k + 1, ``n_hidden[k]`` the number of units then.  The rule
    fires at the first k >= window with gaps[k] - gaps[k - window] > increase ("the gap
    ... largely increases"); the selected size is n_hidden[k - window], the model before
    that increase.  Returns (k, selected) or (-1, -1) when it has not fired.
    """
    gaps = np.asarray(gaps, dtype=np.float64)
    n_hidden = np.asarray(n_hidden)
    for k in range(window, gaps.shape[0]):
        if gaps[k] - gaps[k - window] > increase:
            return k, int(n_hidden[k - window])
    return -1, -1


def _all_states(n: int) -> np.ndarray:
    """All 2^n binary rows, first unit the top bit, (2^n, n) float64."""
    codes = np.arange(2**n)[:, None]
    return ((codes >> np.arange(n - 1, -1, -1)[None, :]) & 1).astype(np.float64)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


# ------------------------------------------------------------------------ trainer

Evaluate = Literal["auto", "exact", "ais", "none"]


class FrankWolfeTrainer:
    """Frank-Wolfe learning of an infinite RBM (Algorithm 1), one hidden unit per ``step()``.

    See the module docstring for the model and the choices made where the paper is silent.
    ``step()`` is one Frank-Wolfe iteration t: samples, the inner problem (eq. 9) by
    L-BFGS, insertion with step 1/t and alpha_t = t (or an away step), eq. 10 with
    learning rate ``bias_lr`` (eta) until the visible means match (at most ``bias_steps``).  All random numbers come from
    (seed, iteration), so :meth:`state_dict` (which holds the persistent chains) resumes
    bit-exactly.

    Parameters
    ----------
    V : (N, Nv) training data of 0/1.
    max_hidden : T; the trainer is done when the model has this many hidden units.
    samples : S, the number of persistent chains (model samples for eq. 9 and eq. 10).
    reg : lam, the L2 regularisation of eq. 6/9 (the paper selects from 1, 0.5, 0.1, 0.05, 0.01).
        The new unit's norm scales like 1/lam and it enters at full strength (alpha_t = t).
        With eq. 10 converged the paper's grid works: on the digits (exact likelihoods) 0.05
        is best; 0.01 makes units so large that the likelihood falls even with exact
        expectations (-27.3 at 10 units, -39.4 at 20).  On the bundled MNIST (S = 2000,
        eta = 0.5) lam = 0.1 reaches -140 nats (AIS) at 100 units.
    bias_lr : eta, the step size of eq. 10 (the paper: 0.05, 0.02, 0.01, 0.005).
    bias_steps : at most this many eq. 10 updates (Algorithm 1's "repeat" loop) per iteration.
    bias_tol : the loop's test: every |data mean - model mean| <= bias_tol + 3 standard errors
        (0: run all ``bias_steps`` updates unless the means match exactly).
    gibbs_steps : sampler steps on the chains before each use of their samples.
    evaluate : log-likelihoods of train / valid / test in the Records (mean per example, nats):
        "exact" (exact log Z: needs the smaller layer <= 20 units at max_hidden, or Nv <= 20
        for a fractional model; 2^20 states of 784 visibles take about 25 s), "ais" (AIS with ``ais_runs`` runs on ``ais_schedule``),
        "auto" (exact while it is cheap -- 2^m max(Nv, n) <= 2^22 -- else AIS), "none".
    ais_runs, ais_schedule : AIS settings: "live" (:data:`boltzlab.engine.rbm.AIS_SCHEDULE_LIVE`) or
        "default" (the paper's 14,501 temperatures).
    eval_every : evaluate log-likelihoods every this many iterations (and on the last).
    V_valid, V_test : optional held-out data; V_valid enables the early-stopping rule.
    seed : every random number derives from (seed, iteration).
    init_rbm : (W, b_vis, b_hid) of an existing RBM (e.g. CD-trained): continue at t = |h| + 1
        with q uniform over its units and alpha = |h| (§3.2, "Adding hidden units on RBM").
    away_steps : allow away (drop) steps that remove a harmful unit (§3.2).
    fit_alpha : fit alpha by gradient steps (learning rate ``alpha_lr``) instead of alpha_t = t;
        the model becomes a fractional RBM sampled by Metropolis-Hastings (§3.3).
    exact_expectations : replace model samples by exact expectations: over the 2^Nv visible
        states (Nv <= 16), or over the 2^n hidden states of a standard RBM (max_hidden <= 20;
        eq. 9 then uses S exact samples): for tests and the digits reference.
    hidden_bias : learn a hidden bias per unit (the dummy visible unit of §2).
    init_bias : initial visible biases: "base_rate" (data log-odds) or "zero" (Algorithm 1).
    init_scale, inner_restarts, inner_max_iter, inner_tol : L-BFGS start scale, number of
        starts (best kept), iteration limit and projected-gradient tolerance for eq. 9.
    burn_in : sampler steps on the chains before the first iteration (default 0 from scratch,
        where the initial chains are exact samples, and 100 with ``init_rbm``).
    stop_window, stop_increase, early_stopping : the §4 rule (see :func:`gap_stop_rule`);
        with ``early_stopping`` the trainer is done when it fires.
    max_iterations : a cap on iterations (default: max_hidden - |h_0| without away steps,
        three times that with them).

    Records
    -------
    scalars: ``iteration`` (steps of this trainer), ``t`` (the paper's index: |h_0| +
    iteration), ``n_hidden``, ``inner_objective`` (eq. 9 at w*), ``inner_iterations``,
    ``inner_evaluations`` (on an away step: of the candidate not inserted), ``fw_gap`` (alpha (E_q J - J(w*)), the Frank-Wolfe duality gap of
    L' before the step), ``away_step``, ``removed_unit`` (index or -1), ``alpha``,
    ``bias_change`` (||b_t - b_{t-1}||_2), ``bias_updates`` (eq. 10 updates taken),
    ``bias_mismatch`` (largest |data mean - model mean| at the loop's last test),
    ``bias_converged`` (False: the loop hit ``bias_steps``), ``acceptance_rate`` (of the sampler: 1 for Gibbs),
    ``train_valid_gap`` (with V_valid), ``stop_rule_fired``, ``selected_hidden`` (-1 until
    the rule fires), ``wall_time``, ``elapsed``, ``eval_time`` and, when evaluated,
    ``train_log_likelihood``, ``valid_log_likelihood``, ``test_log_likelihood``,
    ``penalized_log_likelihood`` (eq. 6 on the training data), ``fw_objective`` (L'), ``log_z``, ``log_z_exact``,
    ``log_z_spread`` (AIS).  arrays: ``new_unit`` (w*, (Nv,); absent on an away step,
    which has ``removed_weights``), ``W``, ``b_vis``, ``b_hid`` and, with ``record_samples``
    = m > 0, ``samples``: the first min(m, S) persistent chains (the model samples {v_s} of
    step 1 of Algorithm 1, after this iteration's eq. 10 updates), (m, Nv) of 0/1 -- what the
    model generates, at no extra cost.  None with exact expectations over the visible states
    (no chains are used there).
    """

    def __init__(
        self,
        V: np.ndarray,
        *,
        max_hidden: int = 100,
        samples: int = 500,
        reg: float = 0.3,
        bias_lr: float = 0.05,
        bias_steps: int = 1000,
        bias_tol: float = 0.01,
        gibbs_steps: int = 1,
        evaluate: Evaluate = "auto",
        ais_runs: int = 20,
        ais_schedule: Literal["live", "default"] = "live",
        eval_every: int = 1,
        V_valid: np.ndarray | None = None,
        V_test: np.ndarray | None = None,
        seed: int = 0,
        init_rbm: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
        away_steps: bool = False,
        fit_alpha: bool = False,
        alpha_lr: float = 0.05,
        exact_expectations: bool = False,
        hidden_bias: bool = True,
        init_bias: Literal["base_rate", "zero"] = "base_rate",
        init_scale: float = 0.01,
        inner_restarts: int = 1,
        inner_max_iter: int = 200,
        inner_tol: float = 1e-5,
        burn_in: int | None = None,
        stop_window: int = 20,
        stop_increase: float = 1.0,
        early_stopping: bool = False,
        max_iterations: int | None = None,
        dtype: Literal["float32", "float64"] = "float32",
        record_samples: int = 0,
    ) -> None:
        owner = "FrankWolfeTrainer"
        self.V = check_binary(V, "V", owner)
        self.n, self.n_visible = self.V.shape
        self.max_hidden = check_int("max_hidden", max_hidden, owner, 1)
        self.samples = check_int("samples", samples, owner, 1)
        self.reg = check_float("reg", reg, owner, 0.0)
        self.bias_lr = check_float("bias_lr", bias_lr, owner, 0.0)
        self.bias_steps = check_int("bias_steps", bias_steps, owner, 0)
        self.bias_tol = check_float("bias_tol", bias_tol, owner, 0.0)
        self.gibbs_steps = check_int("gibbs_steps", gibbs_steps, owner, 1)
        evaluate = check_choice("evaluate", evaluate, owner, ("auto", "exact", "ais", "none"))
        self.ais_runs = check_int("ais_runs", ais_runs, owner, 2)
        self.ais_schedule = check_choice("ais_schedule", ais_schedule, owner, ("live", "default"))
        self.eval_every = check_int("eval_every", eval_every, owner, 1)
        self.seed = check_seed(owner, seed)
        self.record_samples = check_int("record_samples", record_samples, owner, 0)
        for name, flag in (("away_steps", away_steps), ("fit_alpha", fit_alpha),
                           ("exact_expectations", exact_expectations), ("hidden_bias", hidden_bias),
                           ("early_stopping", early_stopping)):
            if not isinstance(flag, (bool, np.bool_)):
                raise ValueError(f"The '{name}' parameter of {owner} must be a bool. Got {flag!r}.")
        self.away_steps = bool(away_steps)
        self.fit_alpha = bool(fit_alpha)
        self.exact_expectations = bool(exact_expectations)
        self.hidden_bias = bool(hidden_bias)
        self.early_stopping = bool(early_stopping)
        self.alpha_lr = check_float("alpha_lr", alpha_lr, owner, 0.0)
        self.dtype = check_choice("dtype", dtype, owner, ("float32", "float64"))
        # the sampler's precision: the fractional model's Metropolis-Hastings sampler stays float64
        self._chain_dtype = np.dtype(np.float64 if self.fit_alpha else self.dtype)
        self.init_bias = check_choice("init_bias", init_bias, owner, ("base_rate", "zero"))
        self.init_scale = check_float("init_scale", init_scale, owner, 0.0, low_open=True)
        self.inner_restarts = check_int("inner_restarts", inner_restarts, owner, 1)
        self.inner_max_iter = check_int("inner_max_iter", inner_max_iter, owner, 1)
        self.inner_tol = check_float("inner_tol", inner_tol, owner, 0.0)
        self.stop_window = check_int("stop_window", stop_window, owner, 1)
        self.stop_increase = check_float("stop_increase", stop_increase, owner, 0.0)
        # exact expectations enumerate the smaller side: the visibles, or the hidden units of a standard RBM
        self._exact_mode = None
        if self.exact_expectations:
            if self.n_visible <= MAX_EXACT_EXPECTATION_UNITS:
                self._exact_mode = "visible"
            elif not self.fit_alpha and self.max_hidden <= MAX_EXACT_HIDDEN_EXPECTATION_UNITS:
                self._exact_mode = "hidden"
            else:
                raise ValueError(
                    f"The 'exact_expectations' parameter of {owner} enumerates the 2^Nv visible states (n_visible <= "
                    f"{MAX_EXACT_EXPECTATION_UNITS}) or the 2^n hidden states of a standard RBM (max_hidden <= "
                    f"{MAX_EXACT_HIDDEN_EXPECTATION_UNITS}, fit_alpha False). Got n_visible = {self.n_visible}, "
                    f"max_hidden = {max_hidden}, fit_alpha = {self.fit_alpha}.")
        self.V_valid = None if V_valid is None else check_binary(V_valid, "V_valid", owner, self.n_visible)
        self.V_test = None if V_test is None else check_binary(V_test, "V_test", owner, self.n_visible)

        # initial model: an existing RBM, or none (q_0 = delta(0): the independent model)
        if init_rbm is None:
            W0, c0 = np.zeros((self.n_visible, 0)), np.zeros(0)
            b0 = base_rate_biases(self.V) if self.init_bias == "base_rate" else np.zeros(self.n_visible)
        else:
            if not isinstance(init_rbm, (tuple, list)) or len(init_rbm) != 3:
                raise ValueError(f"The 'init_rbm' parameter of {owner} must be a tuple (W, b_vis, b_hid). Got {type(init_rbm).__name__}.")
            W0, b0, c0 = _check_params(*init_rbm, owner=f"{owner} (init_rbm)")
            if W0.shape[0] != self.n_visible:
                raise ValueError(f"The 'init_rbm' parameter of {owner} must have {self.n_visible} visible units to match V. Got {W0.shape[0]}.")
        self.initial_hidden = int(W0.shape[1])
        if self.max_hidden <= self.initial_hidden:
            raise ValueError(f"The 'max_hidden' parameter of {owner} must be an int > the {self.initial_hidden} units of init_rbm. Got {self.max_hidden}.")
        default_cap = self.max_hidden - self.initial_hidden
        if max_iterations is None:
            self.max_iterations = 3 * default_cap if self.away_steps else default_cap
        else:
            self.max_iterations = check_int("max_iterations", max_iterations, owner, 1)
        self.burn_in = (0 if init_rbm is None else 100) if burn_in is None else check_int("burn_in", burn_in, owner, 0)

        # evaluation mode
        top = self.max_hidden
        if evaluate == "exact":
            ok = (self.n_visible <= MAX_EXACT_UNITS) if self.fit_alpha else (min(self.n_visible, top) <= MAX_EXACT_UNITS)
            if not ok:
                raise ValueError(
                    f"The 'evaluate' parameter of {owner} can be 'exact' only when the log-partition function is enumerable "
                    f"at every size: the smaller layer <= {MAX_EXACT_UNITS} units at max_hidden (n_visible <= {MAX_EXACT_UNITS} "
                    f"with fit_alpha). Got n_visible = {self.n_visible}, max_hidden = {top}, fit_alpha = {self.fit_alpha}.")
        self.evaluate = evaluate

        # data summaries (fixed)
        self._data_mean = self.V.mean(axis=0)
        self.base_vis = base_rate_biases(self.V)
        self._splits: dict[str, np.ndarray] = {"train": self.V}
        if self.V_valid is not None:
            self._splits["valid"] = self.V_valid
        if self.V_test is not None:
            self._splits["test"] = self.V_test
        self._csr = {name: fwk.to_csr(X) for name, X in self._splits.items()}
        if self._exact_mode == "visible":
            self._states = _all_states(self.n_visible)
            self._states_csr = fwk.to_csr(self._states)

        # state
        rng = np.random.default_rng([self.seed, 0])
        chains = (rng.random((self.samples, self.n_visible)) < 1.0 / (1.0 + np.exp(-b0))).astype(np.float64)
        n0 = self.initial_hidden
        sums = {name: np.zeros(X.shape[0]) for name, X in self._splits.items()}
        unit_data = np.empty(n0)
        for i in range(n0):
            for name, (indptr, indices) in self._csr.items():
                sp = fwk.unit_softplus(indptr, indices, W0[:, i].copy(), float(c0[i]))
                sums[name] += sp
                if name == "train":
                    unit_data[i] = sp.mean()
        self._set_state(
            W=W0, b_hid=c0, b_vis=b0, alpha=float(n0) if n0 else 1.0, chains=chains, unit_data=unit_data, sums=sums,
            gaps=np.zeros(0), gap_hidden=np.zeros(0, np.int64), iteration=0, elapsed=0.0, status="running",
            message="", selected_hidden=-1, stop_fired_at=-1,
        )

    # ------------------------------------------------------------------ state
    def _set_state(self, *, W, b_hid, b_vis, alpha, chains, unit_data, sums, gaps, gap_hidden, iteration, elapsed,
                   status, message, selected_hidden, stop_fired_at) -> None:
        self._W = np.array(W, dtype=np.float64, order="C").reshape(self.n_visible, -1)
        self._W_cast, self._W_cast_of = None, None
        self._c = np.array(b_hid, dtype=np.float64)
        self._b = np.array(b_vis, dtype=np.float64)
        self.alpha = float(alpha)
        self._chains = np.array(chains, dtype=self._chain_dtype, order="C")
        self._unit_data = np.array(unit_data, dtype=np.float64)
        self._sums = {name: np.array(sums[name], dtype=np.float64) for name in self._splits}
        self._gaps = np.array(gaps, dtype=np.float64)
        self._gap_hidden = np.array(gap_hidden, dtype=np.int64)
        self.iteration = int(iteration)
        self.elapsed = float(elapsed)
        self.status = str(status)
        self.message = str(message)
        self._selected = int(selected_hidden)
        self._stop_fired_at = int(stop_fired_at)

    @property
    def n_hidden(self) -> int:
        return int(self._W.shape[1])

    @property
    def done(self) -> bool:
        return self.status != "running"

    @property
    def standard(self) -> bool:
        """True when the model is a standard RBM (alpha = number of units, not fitted)."""
        return not self.fit_alpha

    @property
    def coefficients(self) -> np.ndarray:
        """coef_i = alpha q_i = alpha / n of every unit (eq. 11); all 1 for a standard RBM."""
        n = self.n_hidden
        return np.ones(n) if self.standard else np.full(n, self.alpha / max(n, 1))

    @property
    def q_weights(self) -> np.ndarray:
        """q(w) as the weights of its atoms w_1..w_n: uniform 1/n (step 1/t and drop steps keep it so)."""
        return np.full(self.n_hidden, 1.0 / max(self.n_hidden, 1))

    @property
    def params(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Copies of (W, b_vis, b_hid): the hidden units' weights as the columns of W (Nv, n)."""
        return self._W.copy(), self._b.copy(), self._c.copy()

    @property
    def rbm(self) -> RBM:
        """The model as a standard RBM (needs alpha = n, i.e. not ``fit_alpha``, and n >= 1)."""
        if not self.standard:
            raise ValueError("The model is a fractional RBM (fit_alpha=True): it is not a standard RBM; use coefficients.")
        if self.n_hidden == 0:
            raise ValueError("The model has no hidden units yet: call step() first.")
        return RBM(self._W, self._b, self._c)

    @property
    def selected_hidden(self) -> int | None:
        """The hidden-layer size chosen by the §4 early-stopping rule, None until it fires."""
        return None if self._selected < 0 else self._selected

    # ------------------------------------------------------------- model maths
    def _seed_for(self, purpose: int, *extra: int) -> int:
        return derived_seed(self.seed, purpose, self.iteration, *extra)

    def _penalties(self) -> np.ndarray:
        """||(w_i, c_i)||^2 of every unit."""
        return np.einsum("ij,ij->j", self._W, self._W) + self._c * self._c

    def free_energy(self, V: np.ndarray) -> np.ndarray:
        """F(v) = -b^T v - alpha E_q[softplus(w^T v + c)] for every row of V (eq. 5), (n,)."""
        V = check_binary(V, "V", "FrankWolfeTrainer.free_energy", self.n_visible)
        if self.n_hidden == 0:
            return -(V @ self._b) - self.alpha * math.log(2.0)  # q_0 = delta(0): softplus(0) = log 2
        return fwk.fractional_free_energy(V, self._W, self._b, self._c, self.coefficients)

    def _exact_probabilities(self) -> np.ndarray:
        F = self.free_energy(self._states)
        logp = -F - np.max(-F)
        p = np.exp(logp)
        return p / p.sum()

    def _enumerable(self) -> bool:
        """Whether log Z can be enumerated at all (the smaller layer, or the visibles of a fractional model, <= 20)."""
        if self.n_hidden == 0:
            return True
        return min(self.n_hidden, self.n_visible) <= MAX_EXACT_UNITS if self.standard else self.n_visible <= MAX_EXACT_UNITS

    def _enumeration_cheap(self) -> bool:
        n, nv = self.n_hidden, self.n_visible
        m = min(n, nv) if self.standard else nv
        return self._enumerable() and 2**m * max(n, nv) <= AUTO_EXACT_BUDGET

    def log_partition_exact(self) -> float:
        """Exact log Z of the current model (eq. 5 / 11); ValueError when it is not enumerable."""
        n = self.n_hidden
        if n == 0:  # q_0 = delta(0): alpha softplus(0) = alpha log 2 on every state
            return float(np.sum(np.logaddexp(0.0, self._b)) + self.alpha * math.log(2.0))
        if not self._enumerable():
            raise ValueError(
                f"The exact log-partition function needs the smaller layer <= {MAX_EXACT_UNITS} units (the visibles for a "
                f"fractional model). Got n_visible = {self.n_visible}, n_hidden = {n}.")
        if self.standard:
            return log_partition_exact(self._W, self._b, self._c)
        return float(fwk.fractional_log_partition(self._W, self._b, self._c, self.coefficients))

    def log_partition(self) -> tuple[float, bool, float]:
        """(log Z, exact?, AIS spread) as ``evaluate`` asks: "exact"; "ais"; "auto"/"none": exact when cheap, else AIS."""
        if self.n_hidden == 0 or self.evaluate == "exact" or (self.evaluate != "ais" and self._enumeration_cheap()):
            return self.log_partition_exact(), True, 0.0
        schedule = AIS_SCHEDULE_LIVE if self.ais_schedule == "live" else AIS_SCHEDULE_DEFAULT
        seed = self._seed_for(4)
        if self.standard:
            log_z, spread = ais_log_partition(self._W, self._b, self._c, n_runs=self.ais_runs, schedule=schedule,
                                              seed=seed, base_vis=self.base_vis)
        else:
            log_z, spread = fractional_ais_log_partition(self._W, self._b, self._c, self.coefficients,
                                                         n_runs=self.ais_runs, schedule=schedule, seed=seed,
                                                         base_vis=self.base_vis)
        return log_z, False, spread

    def mean_free_energy(self, split: str) -> float:
        """Mean free energy over a stored split ("train", "valid", "test"), from cached softplus sums."""
        if split not in self._splits:
            raise ValueError(f"The 'split' parameter of FrankWolfeTrainer.mean_free_energy must be one of {tuple(self._splits)}. Got {split!r}.")
        X = self._splits[split]
        lin = float(np.mean(X @ self._b))
        if self.n_hidden == 0:
            return -lin - self.alpha * math.log(2.0)
        kappa = 1.0 if self.standard else self.alpha / self.n_hidden
        return -lin - kappa * float(np.mean(self._sums[split]))

    def log_likelihoods(self) -> dict[str, float]:
        """Mean log-likelihood per example of each stored split, and log Z (the evaluation of a Record)."""
        log_z, exact, spread = self.log_partition()
        out: dict[str, Any] = {"log_z": log_z, "log_z_exact": exact}
        if not exact:
            out["log_z_spread"] = spread
        for split in self._splits:
            out[f"{split}_log_likelihood"] = -self.mean_free_energy(split) - log_z
        out["penalized_log_likelihood"] = out["train_log_likelihood"] - self.penalty()
        out["fw_objective"] = out["train_log_likelihood"] - self.fw_penalty()
        return out

    def penalty(self) -> float:
        """Eq. 6's penalty (lam/2) E_q ||(w, c)||^2: q is uniform, so the mean over the units."""
        return 0.5 * self.reg * float(np.mean(self._penalties())) if self.n_hidden else 0.0

    def fw_penalty(self) -> float:
        """L''s penalty (lam/2) alpha E_q ||(w, c)||^2 = (lam/2) sum_i coef_i ||(w_i, c_i)||^2."""
        return 0.5 * self.reg * float(np.sum(self.coefficients * self._penalties()))

    def penalized_log_likelihood_exact(self) -> float:
        """Eq. 6: L = mean_train log p - (lam/2) E_q ||(w, c)||^2, with the exact log Z."""
        return -self.mean_free_energy("train") - self.log_partition_exact() - self.penalty()

    def fw_objective_exact(self) -> float:
        """L' = mean_train log p - (lam/2) alpha E_q ||(w, c)||^2 (eq. 9 is its linear program), exact log Z."""
        return -self.mean_free_energy("train") - self.log_partition_exact() - self.fw_penalty()

    # ------------------------------------------------------------------ steps
    def _sample(self, k: int, seed: int) -> tuple[int, int]:
        """Advance the chains k sampler steps under the current model; (accepted, proposed)."""
        S = self.samples
        if self.n_hidden == 0:  # the independent model: exact samples
            u = rbm_kernels.uniforms(S * self.n_visible, seed).reshape(S, self.n_visible)
            self._chains[...] = u < 1.0 / (1.0 + np.exp(-self._b))
            return S, S
        acc = fwk.sample_model(self._chains, self._sampler_weights(), self._b, self._c, self.coefficients, self.standard,
                               k, seed)
        return int(acc), k * S

    def _sampler_weights(self) -> np.ndarray:
        """W in the chains' precision (``dtype``), cast once per change of W."""
        if self._chains.dtype == np.float64:
            return self._W
        if self._W_cast_of is not self._W:
            self._W_cast, self._W_cast_of = np.ascontiguousarray(self._W, dtype=self._chains.dtype), self._W
        return self._W_cast

    def _model_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(indptr, indices, weights) of the model's expectation: chains (1/S each) or all states (p(v))."""
        if self._exact_mode == "visible":
            indptr, indices = self._states_csr
            return indptr, indices, self._exact_probabilities()
        indptr, indices = fwk.to_csr(self._chains)
        return indptr, indices, np.full(self.samples, 1.0 / self.samples)

    def _model_softplus_means(self) -> np.ndarray:
        """E_model softplus(w_i^T v + c_i) of every unit (chains or exact), (n,)."""
        if self._exact_mode == "visible":
            p = self._exact_probabilities()
            return p @ _softplus(self._states @ self._W + self._c)
        return _softplus(self._chains @ self._W + self._c).mean(axis=0)

    def _solve_inner(self, rows) -> tuple[np.ndarray, float, int, int]:
        """argmin of eq. 9 by L-BFGS from ``inner_restarts`` random starts: (theta*, J*, nit, nfev)."""
        m_ptr, m_idx, m_w = rows
        d_ptr, d_idx = self._csr["train"]
        indptr = np.concatenate([m_ptr, d_ptr[1:] + m_ptr[-1]])
        indices = np.concatenate([m_idx, d_idx])
        weights = np.concatenate([m_w, np.full(self.n, -1.0 / self.n)])
        nv, lam, use_bias = self.n_visible, self.reg, self.hidden_bias

        def fun(theta):
            return fwk.inner_objective(indptr, indices, weights, theta, lam, nv, use_bias)

        best, nit, nfev = None, 0, 0
        for r in range(self.inner_restarts):
            rng = np.random.default_rng([self.seed, 2, self.iteration, r])
            x0 = rng.normal(0.0, self.init_scale, nv + 1)
            if not use_bias:
                x0[nv] = 0.0
            res = scipy.optimize.minimize(fun, x0, jac=True, method="L-BFGS-B",
                                          options={"maxiter": self.inner_max_iter, "gtol": self.inner_tol})
            nit += int(res.nit)
            nfev += int(res.nfev)
            if best is None or res.fun < best.fun:
                best = res
        theta = np.array(best.x, dtype=np.float64)
        if not use_bias:
            theta[nv] = 0.0
        return theta, float(best.fun), nit, nfev

    def _add_unit(self, theta: np.ndarray) -> None:
        w, c = theta[: self.n_visible].copy(), float(theta[self.n_visible])
        for name, (indptr, indices) in self._csr.items():
            sp = fwk.unit_softplus(indptr, indices, w, c)
            self._sums[name] += sp
            if name == "train":
                self._unit_data = np.append(self._unit_data, sp.mean())
        self._W = np.ascontiguousarray(np.column_stack([self._W, w]))
        self._c = np.append(self._c, c)

    def _remove_unit(self, a: int) -> None:
        w, c = self._W[:, a].copy(), float(self._c[a])
        for name, (indptr, indices) in self._csr.items():
            self._sums[name] -= fwk.unit_softplus(indptr, indices, w, c)
        self._W = np.ascontiguousarray(np.delete(self._W, a, axis=1))
        self._c = np.delete(self._c, a)
        self._unit_data = np.delete(self._unit_data, a)

    def _bias_alpha_steps(self) -> tuple[int, int, int, float, bool]:
        """Algorithm 1's eq.-10 loop until the visible means match (and alpha with fit_alpha).

        Returns (accepted, proposed, updates, largest |data mean - model mean| at the last
        test, converged); see :func:`boltzlab.engine.kernels.frankwolfe.bias_alpha_updates` for the test.
        """
        n = self.n_hidden
        alpha_data = float(np.mean(self._unit_data - 0.5 * self.reg * self._penalties()))
        if self.exact_expectations:
            return (0, 0) + self._exact_bias_alpha_steps(alpha_data)
        single_blas()
        alpha, acc, prop, updates, mismatch, converged = fwk.bias_alpha_updates(
            self._chains, self._sampler_weights(), self._b, self._c, self.alpha if self.fit_alpha else float(n),
            self._data_mean,
            alpha_data, self.bias_lr, self.alpha_lr, ALPHA_MIN, self.gibbs_steps, self.standard, self.fit_alpha,
            self._seed_for(3), self.bias_steps, self.bias_tol, BIAS_TEST_Z)
        if self.fit_alpha:
            self.alpha = float(alpha)
        return int(acc), int(prop), int(updates), float(mismatch), bool(converged)

    def _exact_visible_means(self) -> np.ndarray:
        """E[v] under the current model, exactly (enumerating the visible or the hidden states)."""
        if self.n_hidden == 0:
            return 1.0 / (1.0 + np.exp(-self._b))
        if self._exact_mode == "visible":
            return self._exact_probabilities() @ self._states
        return fwk.hidden_enumeration(self._W, self._b, self._c)[2]

    def _exact_samples(self, seed: int) -> None:
        """S independent exact samples of the current standard RBM into the chains (enumerating h)."""
        if self.n_hidden == 0:
            self._sample(1, seed)
            return
        logp, log_z, _ = fwk.hidden_enumeration(self._W, self._b, self._c)
        rng = np.random.default_rng(seed)
        p = np.exp(logp - log_z)
        g = rng.choice(p.shape[0], size=self.samples, p=p / p.sum())
        codes = g ^ (g >> 1)  # Gray-code position -> hidden state (bit j = h_j)
        H = ((codes[:, None] >> np.arange(self.n_hidden)[None, :]) & 1).astype(np.float64)
        P = 1.0 / (1.0 + np.exp(-(H @ self._W.T + self._b)))
        self._chains[...] = rng.random(P.shape) < P

    def _exact_bias_alpha_steps(self, alpha_data: float) -> tuple[int, float, bool]:
        """Eq. 10 (and alpha) with exact expectations until max |data mean - E[v]| <= bias_tol.

        Enumerating the hidden layer, the loop's limit is computed directly: eq. 10 is gradient
        ascent on the log-likelihood, concave in b, so it converges to the b where data mean
        = E[v]; L-BFGS finds that b with the same test (max |gradient| <= bias_tol, at most
        ``bias_steps`` iterations).
        """
        if self._exact_mode == "hidden" and self.bias_steps > 0:
            W, c, d = self._W, self._c, self._data_mean

            def negative_ll(b):  # -(d^T b - log Z(b)) + const; gradient E[v] - d
                _, log_z, m = fwk.hidden_enumeration(W, b, c)
                return log_z - float(d @ b), m - d

            res = scipy.optimize.minimize(negative_ll, self._b.copy(), jac=True, method="L-BFGS-B",
                                          options={"maxiter": self.bias_steps, "gtol": self.bias_tol,
                                                   "ftol": 0.0})
            self._b = np.array(res.x, dtype=np.float64)
            mismatch = float(np.max(np.abs(res.jac)))
            return int(res.nit), mismatch, mismatch <= self.bias_tol
        updates = 0
        while True:
            m = self._exact_visible_means()
            mismatch = float(np.max(np.abs(self._data_mean - m)))
            if mismatch <= self.bias_tol:
                return updates, mismatch, True
            if updates == self.bias_steps:
                return updates, mismatch, False
            if self.fit_alpha:
                p = self._exact_probabilities()
                grad_a = alpha_data - float(np.mean(p @ _softplus(self._states @ self._W + self._c)))
            self._b += self.bias_lr * (self._data_mean - m)
            if self.fit_alpha:
                self.alpha = max(ALPHA_MIN, self.alpha + self.alpha_lr * grad_a)
            updates += 1

    def step(self) -> Record:
        """One Frank-Wolfe iteration (Algorithm 1's loop body): a unit inserted (or removed)."""
        if self.done:
            raise RuntimeError(f"This trainer is done ({self.status}); reset it to train again.")
        t0 = time.perf_counter()
        accepted = proposed = 0
        if self.iteration == 0 and self.burn_in > 0 and not self.exact_expectations and self.n_hidden > 0:
            a, p = self._sample(self.burn_in, derived_seed(self.seed, 5))
            accepted, proposed = accepted + a, proposed + p
        self.iteration += 1
        n_before = self.n_hidden
        b_before = self._b.copy()
        # 1. samples {v_s} from p(v | q_{t-1}, theta_{t-1})
        if self._exact_mode == "hidden":
            self._exact_samples(self._seed_for(1))
        elif not self.exact_expectations:
            a, p = self._sample(self.gibbs_steps, self._seed_for(1))
            accepted, proposed = accepted + a, proposed + p
        rows = self._model_rows()
        # 2. the inner problem, eq. 9
        theta, j_star, nit, nfev = self._solve_inner(rows)
        # the Frank-Wolfe gap alpha (E_q J - J*) and, for away steps, J of every unit
        if n_before > 0:
            j_units = 0.5 * self.reg * self._penalties() + self._model_softplus_means() - self._unit_data
            alpha_prev = self.alpha if self.fit_alpha else float(n_before)
            fw_gap = alpha_prev * (float(np.mean(j_units)) - j_star)
        else:
            j_units, fw_gap = np.zeros(0), -j_star
        # 3. insert the unit (step 1/t, alpha_t = t) or take an away (drop) step
        removed = -1
        if self.away_steps and n_before >= 2:
            worst = int(np.argmax(j_units))
            if j_units[worst] > -j_star:
                removed = worst
        arrays: dict[str, np.ndarray] = {}
        if removed >= 0:
            arrays["removed_weights"] = self._W[:, removed].copy()
            self._remove_unit(removed)
            self.alpha = self.alpha * (n_before - 1) / n_before if self.fit_alpha else float(n_before - 1)
        else:
            self._add_unit(theta)
            arrays["new_unit"] = theta[: self.n_visible].copy()
            if self.fit_alpha and n_before > 0:
                self.alpha = self.alpha * (n_before + 1) / n_before
            else:
                self.alpha = float(n_before + 1)
        # 4. eq. 10 (and alpha with fit_alpha)
        a, p, bias_updates, bias_mismatch, bias_converged = self._bias_alpha_steps()
        accepted, proposed = accepted + a, proposed + p
        n = self.n_hidden
        finite = bool(np.all(np.isfinite(self._W)) and np.all(np.isfinite(self._b)) and np.all(np.isfinite(self._c))
                      and math.isfinite(self.alpha))
        scalars: dict[str, Any] = {
            "iteration": self.iteration, "t": self.initial_hidden + self.iteration, "n_hidden": n,
            "inner_objective": j_star, "inner_iterations": nit, "inner_evaluations": nfev, "fw_gap": float(fw_gap),
            "away_step": removed >= 0, "removed_unit": removed, "new_hidden_bias": float(theta[self.n_visible]) if removed < 0 else 0.0,
            "alpha": self.alpha, "bias_change": float(np.linalg.norm(self._b - b_before)),
            "bias_updates": bias_updates, "bias_mismatch": bias_mismatch, "bias_converged": bias_converged,
            "acceptance_rate": accepted / proposed if proposed else 1.0,
        }
        # early stopping (§4): the train/validation gap, log Z cancelled
        if "valid" in self._splits and finite:
            gap = self.mean_free_energy("valid") - self.mean_free_energy("train")
            scalars["train_valid_gap"] = gap
            self._gaps = np.append(self._gaps, gap)
            self._gap_hidden = np.append(self._gap_hidden, n)
            if self._stop_fired_at < 0:
                k, selected = gap_stop_rule(self._gaps, self._gap_hidden, window=self.stop_window,
                                            increase=self.stop_increase)
                if k >= 0:
                    self._stop_fired_at, self._selected = self.iteration, selected
        scalars["stop_rule_fired"] = self._stop_fired_at >= 0
        scalars["selected_hidden"] = self._selected
        if not finite:
            self.status = "diverged"
            self.message = f"Frank-Wolfe diverged at iteration {self.iteration}: the parameters are no longer finite."
        elif n >= self.max_hidden:
            self.status = "max_hidden"
            self.message = f"Stopped at the maximum of {self.max_hidden} hidden units."
        elif self.early_stopping and self._stop_fired_at >= 0:
            self.status = "early_stopped"
            self.message = (f"The train/validation gap grew by more than {self.stop_increase:g} nats over {self.stop_window} "
                            f"iterations; selected {self._selected} hidden units.")
        elif self.iteration >= self.max_iterations:
            self.status = "max_iterations"
            self.message = f"Stopped after the maximum of {self.max_iterations} iterations."
        train_time = time.perf_counter() - t0
        t1 = time.perf_counter()
        if finite and self.evaluate != "none" and (self.done or self.iteration % self.eval_every == 0):
            scalars.update(self.log_likelihoods())
        eval_time = time.perf_counter() - t1
        self.elapsed += train_time + eval_time
        scalars.update({"wall_time": train_time + eval_time, "eval_time": eval_time, "elapsed": self.elapsed})
        arrays.update({"W": self._W.copy(), "b_vis": self._b.copy(), "b_hid": self._c.copy()})
        if self.record_samples and self._exact_mode != "visible":
            arrays["samples"] = np.asarray(self._chains[: self.record_samples], dtype=np.float64)
        return Record(scalars, arrays)

    def run(self) -> list[Record]:
        """Step until done; every Record."""
        records = []
        while not self.done:
            records.append(self.step())
        return records

    # ------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Units, biases, alpha, persistent chains, cached sums, gap history, counters and settings.

        No random state is needed: every draw derives from (seed, iteration).
        """
        state: dict[str, Any] = {
            "W": self._W.copy(), "b_hid": self._c.copy(), "b_vis": self._b.copy(), "alpha": self.alpha,
            "chains": self._chains.copy(), "unit_data": self._unit_data.copy(), "gaps": self._gaps.copy(),
            "gap_hidden": self._gap_hidden.copy(), "iteration": self.iteration, "elapsed": self.elapsed,
            "status": self.status, "message": self.message, "selected_hidden": self._selected,
            "stop_fired_at": self._stop_fired_at, "seed": self.seed, "n": self.n, "n_visible": self.n_visible,
            "samples": self.samples, "initial_hidden": self.initial_hidden, "fit_alpha": self.fit_alpha,
            "dtype": self.dtype,
        }
        for name, s in self._sums.items():
            state[f"softplus_sum_{name}"] = s.copy()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output, validated against this trainer's data and settings."""
        required = ["W", "b_hid", "b_vis", "alpha", "chains", "unit_data", "gaps", "gap_hidden", "iteration",
                    "elapsed", "status", "message", "selected_hidden", "stop_fired_at"]
        required += [f"softplus_sum_{name}" for name in self._splits]
        missing = [key for key in required if key not in state]
        if missing:
            raise ValueError(f"The checkpoint lacks the entries {missing} of a Frank-Wolfe trainer.")
        check_dtype_matches(state, self.dtype, "FrankWolfeTrainer")
        for key in ("n", "n_visible", "seed", "samples", "initial_hidden", "fit_alpha"):
            if key in state and as_scalar(state[key]) != getattr(self, key):
                raise ValueError(f"The checkpoint was made with {key} = {as_scalar(state[key])}, but this trainer has {key} = {getattr(self, key)}.")
        W = np.asarray(state["W"], dtype=np.float64)
        if W.ndim != 2 or W.shape[0] != self.n_visible:
            raise ValueError(f"The checkpoint's 'W' must have shape ({self.n_visible}, n). Got {W.shape}.")
        n = W.shape[1]
        shapes = {"b_hid": (n,), "b_vis": (self.n_visible,), "unit_data": (n,), "chains": (self.samples, self.n_visible)}
        shapes.update({f"softplus_sum_{name}": (X.shape[0],) for name, X in self._splits.items()})
        for key, shape in shapes.items():
            if np.shape(state[key]) != shape:
                raise ValueError(f"The checkpoint's '{key}' must have shape {shape}. Got {np.shape(state[key])}.")
        check_binary(state["chains"], "chains", "the checkpoint", self.n_visible)
        status = str(as_scalar(state["status"]))
        if status not in ("running", "max_hidden", "max_iterations", "early_stopped", "diverged"):
            raise ValueError(f"The checkpoint's 'status' must be a trainer status. Got {status!r}.")
        self._set_state(
            W=W, b_hid=state["b_hid"], b_vis=state["b_vis"], alpha=as_scalar(state["alpha"]), chains=state["chains"],
            unit_data=state["unit_data"], sums={name: state[f"softplus_sum_{name}"] for name in self._splits},
            gaps=state["gaps"], gap_hidden=state["gap_hidden"], iteration=as_scalar(state["iteration"]),
            elapsed=as_scalar(state["elapsed"]), status=status, message=as_scalar(state["message"]),
            selected_hidden=as_scalar(state["selected_hidden"]), stop_fired_at=as_scalar(state["stop_fired_at"]),
        )


def warm_up_frankwolfe() -> None:
    """Run every Frank-Wolfe kernel once on a tiny problem (numba compiles or loads its cache)."""
    rng = np.random.default_rng(0)
    V = (rng.random((12, 4)) < 0.5).astype(np.float64)
    FrankWolfeTrainer(V, max_hidden=2, samples=6, bias_steps=1, evaluate="ais", ais_runs=2, V_valid=V).run()
    FrankWolfeTrainer(V, max_hidden=2, samples=6, bias_steps=1, fit_alpha=True, evaluate="ais", ais_runs=2).run()
    FrankWolfeTrainer(V, max_hidden=2, samples=6, bias_steps=1, fit_alpha=True, evaluate="exact").run()
    model = RBM.random(4, 3, 0)
    coef = np.full(3, 0.5)
    mh_sample(model.W, model.b_vis, model.b_hid, coef, V, 1, 0)
    fractional_free_energy(V, model.W, model.b_vis, model.b_hid, coef)
