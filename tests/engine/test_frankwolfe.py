"""Frank-Wolfe infinite RBMs (engine.frankwolfe, engine.kernels.frankwolfe) against plain-NumPy
references and exact oracles (Ping, Liu & Ihler 2016).

Kernels are compared with NumPy references written here from the paper's equations; the
sampling kernels draw from the splitmix64 stream of engine.kernels.rbm, which the
references consume in the same order (``Stream``), so those comparisons are draw for draw.
Statistical tests use fixed seeds (so they are deterministic) and state the false-alarm
rate they would have over random seeds.
"""

import math

import numpy as np
import pytest
import scipy.special
import scipy.stats
from hypothesis import given, settings, strategies as st

from boltzlab.engine import frankwolfe as FW
from boltzlab.engine.checks import derived_seed
from boltzlab.engine import rbm as R
from boltzlab.engine.kernels import frankwolfe as kernels
from boltzlab.engine.stepping import Trainer
from tests.states import through_npz

from tests.engine.test_rbm_kernels import Stream, random_binary, ref_sigmoid, ref_softplus, ref_states

# ------------------------------------------------------------------ references


def ref_inner_objective(theta, V_model, a, V_data, lam, use_bias=True):
    """Eq. 9 and its gradient, dense NumPy: rows of V_model weighted by a, data by -1/N."""
    n_vis = V_model.shape[1]
    w, c = theta[:n_vis], (theta[n_vis] if use_bias else 0.0)
    xm, xd = V_model @ w + c, V_data @ w + c
    f = 0.5 * lam * (w @ w + c * c) + a @ ref_softplus(xm) - ref_softplus(xd).mean()
    sm, sd = a * ref_sigmoid(xm), ref_sigmoid(xd) / len(V_data)
    g = np.empty(n_vis + 1)
    g[:n_vis] = lam * w + V_model.T @ sm - V_data.T @ sd
    g[n_vis] = (lam * c + sm.sum() - sd.sum()) if use_bias else 0.0
    return f, g


def ref_fractional_log_p_unnorm(V, W, b_vis, b_hid, coef):
    """b^T v + sum_i coef_i softplus(w_i^T v + c_i) (eq. 11 without log Z)."""
    return V @ b_vis + ref_softplus(V @ W + b_hid) @ coef


def ref_fractional_log_z(W, b_vis, b_hid, coef):
    return scipy.special.logsumexp(ref_fractional_log_p_unnorm(ref_states(W.shape[0]), W, b_vis, b_hid, coef))


def ref_exact_probs(W, b_vis, b_hid, coef):
    """p(v) of eq. 11 over ref_states order."""
    log_p = ref_fractional_log_p_unnorm(ref_states(W.shape[0]), W, b_vis, b_hid, coef)
    return np.exp(log_p - scipy.special.logsumexp(log_p))


def ref_mh_step(V, W, b_hid, coef, lin_vis, stream):
    """One §3.3 Metropolis-Hastings step: Gibbs proposal of eq. 12, acceptance of §3.3."""
    S = V.shape[0]
    X = V @ W + b_hid
    H = (stream.take((S, W.shape[1])) < ref_sigmoid(coef * X)).astype(float)
    Vp = (stream.take(V.shape) < ref_sigmoid(H @ (W * coef).T + lin_vis)).astype(float)
    Xp = Vp @ W + b_hid
    log_a = (coef * ref_softplus(Xp) - ref_softplus(coef * Xp)).sum(1) - (coef * ref_softplus(X) - ref_softplus(coef * X)).sum(1)
    accept = stream.take((S,)) < np.minimum(1.0, np.exp(log_a))
    return np.where(accept[:, None], Vp, V), int(accept.sum())


def ref_gibbs_step(V, W, b_vis, b_hid, stream):
    H = (stream.take((V.shape[0], W.shape[1])) < ref_sigmoid(V @ W + b_hid)).astype(float)
    return (stream.take(V.shape) < ref_sigmoid(H @ W.T + b_vis)).astype(float)


def tiny_fractional(n_vis=5, n_hid=3, seed=0, scale=1.0, coef=(0.4, 1.0, 2.3)):
    model = R.RBM.random(n_vis, n_hid, seed, scale=scale)
    return model.W, model.b_vis, model.b_hid, np.asarray(coef[:n_hid], dtype=float)


def proto_data(n, d, k, seed, flip=0.1):
    """n rows near k random binary prototypes of length d (each bit flipped with prob. flip)."""
    rng = np.random.default_rng(seed)
    P = (rng.random((k, d)) < 0.5).astype(float)
    X = P[rng.integers(k, size=n)]
    return np.abs(X - (rng.random((n, d)) < flip)).astype(float)


def unit_J(trainer):
    """Eq. 9's objective J(w_i) of every unit of an exact-expectation trainer, by enumeration."""
    W, b, c = trainer.params
    S = ref_states(trainer.n_visible)
    p = ref_exact_probs(W, b, c, trainer.coefficients)
    return (0.5 * trainer.reg * ((W * W).sum(0) + c * c) + p @ ref_softplus(S @ W + c)
            - ref_softplus(trainer.V @ W + c).mean(0))


# ------------------------------------------------------------------- kernels


def test_to_csr_and_unit_softplus_match_numpy():
    V = random_binary(9, 7, 0, p=0.3)
    V[2] = 0.0  # an empty row
    indptr, indices = kernels.to_csr(V)
    rows, cols = np.nonzero(V)
    np.testing.assert_array_equal(indices, cols)
    np.testing.assert_array_equal(indptr, np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=9))]))
    w = np.random.default_rng(1).normal(0, 2, 7)
    np.testing.assert_allclose(kernels.unit_softplus(indptr, indices, w, -0.7), ref_softplus(V @ w - 0.7), rtol=1e-13)


@pytest.mark.parametrize("use_bias", [True, False])
def test_inner_objective_kernel_matches_numpy_reference(use_bias):
    rng = np.random.default_rng(3)
    Vm, Vd = random_binary(11, 6, 1), random_binary(17, 6, 2)
    a = rng.random(11)
    a /= a.sum()  # e.g. exact probabilities of enumerated states
    theta = rng.normal(0, 1.5, 7)
    indptr, indices = kernels.to_csr(np.vstack([Vm, Vd]))
    weights = np.concatenate([a, np.full(17, -1 / 17)])
    f, g = kernels.inner_objective(indptr, indices, weights, theta, 0.3, 6, use_bias)
    f_ref, g_ref = ref_inner_objective(theta, Vm, a, Vd, 0.3, use_bias)
    assert f == pytest.approx(f_ref, rel=1e-12, abs=1e-14)
    np.testing.assert_allclose(g, g_ref, rtol=1e-11, atol=1e-14)
    # the public wrapper (uniform weights over the samples)
    f2, g2 = FW.inner_objective(theta, Vm, Vd, 0.3, hidden_bias=use_bias)
    f2_ref, g2_ref = ref_inner_objective(theta, Vm, np.full(11, 1 / 11), Vd, 0.3, use_bias)
    assert f2 == pytest.approx(f2_ref, rel=1e-12, abs=1e-14)
    np.testing.assert_allclose(g2, g2_ref, rtol=1e-11, atol=1e-14)


@settings(deadline=None, max_examples=20)
@given(seed=st.integers(0, 10_000), lam=st.floats(0.0, 2.0), scale=st.floats(0.1, 3.0), use_bias=st.booleans())
def test_inner_objective_gradient_matches_finite_differences(seed, lam, scale, use_bias):
    """Central differences (h = 1e-5) of eq. 9 against its analytic gradient, every coordinate."""
    rng = np.random.default_rng(seed)
    Vm, Vd = random_binary(15, 5, seed), random_binary(20, 5, seed + 1)
    theta = rng.normal(0, scale, 6)
    if not use_bias:
        theta[5] = 0.0
    f, g = FW.inner_objective(theta, Vm, Vd, lam, hidden_bias=use_bias)
    h = 1e-5
    fd = np.empty(6)
    for i in range(6):
        e = np.zeros(6)
        e[i] = h
        fd[i] = (FW.inner_objective(theta + e, Vm, Vd, lam, hidden_bias=use_bias)[0]
                 - FW.inner_objective(theta - e, Vm, Vd, lam, hidden_bias=use_bias)[0]) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("n_vis", [1, 4, 13])  # 13: 8,192 states, fields refreshed past 4,096 flips
def test_fractional_free_energy_and_log_partition_match_enumeration(n_vis):
    W, b, c, _ = tiny_fractional(n_vis, 3, seed=n_vis, scale=0.8)
    coef = np.array([0.3, 1.0, 2.7])
    V = ref_states(n_vis)
    np.testing.assert_allclose(FW.fractional_free_energy(V, W, b, c, coef), -ref_fractional_log_p_unnorm(V, W, b, c, coef),
                               rtol=1e-12, atol=1e-12)
    assert FW.fractional_log_partition_exact(W, b, c, coef) == pytest.approx(ref_fractional_log_z(W, b, c, coef), rel=1e-12)
    # coef = 1 is the standard RBM
    assert kernels.fractional_log_partition(W, b, c, np.ones(3)) == pytest.approx(R.log_partition_exact(W, b, c), rel=1e-12)


def test_mh_chains_match_numpy_reference_draw_for_draw():
    W, b, c, coef = tiny_fractional(6, 3, seed=2, scale=1.5)
    V0 = random_binary(9, 6, 4)
    V = V0.copy()
    accepted = kernels.mh_chains(V, W, b, c, coef, 4, 123)
    stream, Vr, acc = Stream(123), V0.copy(), 0
    for _ in range(4):
        Vr, a = ref_mh_step(Vr, W, c, coef, b, stream)
        acc += a
    np.testing.assert_array_equal(V, Vr)
    assert accepted == acc
    assert 0 < acc < 36  # some proposals refused, some taken: the test sees both branches


def test_sample_model_is_gibbs_for_a_standard_rbm():
    model = R.RBM.random(5, 4, 3)
    V0 = random_binary(6, 5, 1)
    V = V0.copy()
    assert kernels.sample_model(V, model.W, model.b_vis, model.b_hid, np.ones(4), True, 2, 9) == 12
    Vr, stream = V0.copy(), Stream(9)
    for _ in range(2):
        Vr = ref_gibbs_step(Vr, model.W, model.b_vis, model.b_hid, stream)
    np.testing.assert_array_equal(V, Vr)


def ref_bias_loop(V, W, b, c, alpha, data_mean, alpha_data, eta, alpha_lr, k, standard, fit_alpha, seed, max_steps,
                  tol, z):
    """Algorithm 1's eq.-10 loop as the kernel runs it: one stream; Rao-Blackwellised means
    P(v | h) of the last Gibbs step (the chains' mean for Metropolis-Hastings); stop before
    updating when every |data mean - m| <= tol + z se, or after max_steps updates."""
    stream, S, n = Stream(seed), V.shape[0], W.shape[1]
    acc = prop = updates = 0
    while True:
        coef = np.full(n, alpha / n)
        for _ in range(k):
            if standard:
                H = (stream.take((S, n)) < ref_sigmoid(V @ W + c)).astype(float)
                P = ref_sigmoid(H @ W.T + b)
                V = (stream.take(V.shape) < P).astype(float)
                acc += S
            else:
                V, a = ref_mh_step(V, W, c, coef, b, stream)
                acc += a
        prop += k * S
        m, var = (P.mean(0), P.var(0)) if standard else (V.mean(0), V.mean(0) * (1 - V.mean(0)))
        mismatch = np.abs(data_mean - m)
        if np.max(mismatch - z * np.sqrt(var / S)) <= tol:
            return V, b, alpha, acc, prop, updates, mismatch.max(), True
        if updates == max_steps:
            return V, b, alpha, acc, prop, updates, mismatch.max(), False
        b = b + eta * (data_mean - m)
        if fit_alpha:
            alpha = max(1e-6, alpha + alpha_lr * (alpha_data - ref_softplus(V @ W + c).mean()))
        updates += 1


@pytest.mark.parametrize("standard,fit_alpha,dtype", [(True, False, np.float64), (False, True, np.float64),
                                                     (False, False, np.float64), (True, False, np.float32),
                                                     (True, True, np.float64)])
@pytest.mark.parametrize("tol,max_steps", [(0.0, 3), (0.15, 200)])
def test_bias_alpha_updates_match_numpy_reference(standard, fit_alpha, dtype, tol, max_steps):
    """Eq. 10 steps (and alpha steps) with the sampler run before each, as in the kernel:
    with tol = 0 the loop runs to its cap; with tol = 0.15 it stops on the test (both seen).
    float32: chains and weights in single precision (the products too), biases float64."""
    W, b0, c, _ = tiny_fractional(6, 3, seed=5)
    W = W.astype(dtype)
    chains0 = random_binary(40, 6, 6).astype(dtype)
    data_mean = np.random.default_rng(7).random(6)
    alpha0, alpha_data, eta, alpha_lr, k = (3.0 if standard else 2.2), 0.9, 0.1, 0.2, 2
    chains, b = chains0.copy(), b0.copy()
    got = kernels.bias_alpha_updates(chains, W, b, c, alpha0, data_mean, alpha_data, eta, alpha_lr, 1e-6, k,
                                     standard, fit_alpha, 123, max_steps, tol, 1.0)
    ref = ref_bias_loop(chains0.copy(), W, b0.copy(), c, alpha0, data_mean, alpha_data, eta, alpha_lr, k, standard,
                        fit_alpha, 123, max_steps, tol, 1.0)
    rel = 1e-12 if dtype == np.float64 else 1e-6  # float32: sigmoid of single-precision fields
    np.testing.assert_array_equal(chains, ref[0])
    np.testing.assert_allclose(b, ref[1], rtol=rel, atol=rel)
    assert got[0] == pytest.approx(ref[2], rel=rel)
    assert got[1:3] == ref[3:5] and got[3] == ref[5] and got[5] == ref[7]
    assert got[4] == pytest.approx(ref[6], rel=rel)
    assert got[5] == (tol > 0) and (got[3] == max_steps) == (tol == 0)


def test_hidden_enumeration_matches_visible_enumeration():
    """log Z and E[v] by the Gray-code walk over 2^n hidden states against the 2^Nv visible states (NumPy)."""
    for n_vis, n_hid, seed in ((7, 5, 0), (4, 9, 1), (6, 13, 2)):  # 13 > 12: passes the every-4096 refresh
        model = R.RBM.random(n_vis, n_hid, seed, scale=1.5)
        W, b, c = model.W, model.b_vis, model.b_hid
        S = ref_states(n_vis)
        lp = S @ b + ref_softplus(S @ W + c).sum(1)
        p = np.exp(lp - scipy.special.logsumexp(lp))
        logp, log_z, means = kernels.hidden_enumeration(W, b, c)
        assert log_z == pytest.approx(scipy.special.logsumexp(lp), abs=1e-10)
        np.testing.assert_allclose(means, p @ S, atol=1e-12)
        g = np.arange(2**n_hid)
        H = (((g ^ (g >> 1))[:, None] >> np.arange(n_hid)) & 1).astype(float)  # Gray-code order
        np.testing.assert_allclose(logp, H @ c + ref_softplus(H @ W.T + b).sum(1), atol=1e-9)

def ref_fractional_ais(W, b_vis, b_hid, coef, base, betas, n_runs, stream):
    V = (stream.take((n_runs, W.shape[0])) < ref_sigmoid(base)).astype(float)
    logw = np.zeros(n_runs)
    for kk in range(1, len(betas)):
        logw += (betas[kk] - betas[kk - 1]) * (V @ (b_vis - base) + ref_softplus(V @ W + b_hid) @ coef)
        if kk == len(betas) - 1:
            break
        beta = betas[kk]
        V, _ = ref_mh_step(V, W, b_hid, beta * coef, (1 - beta) * base + beta * b_vis, stream)
    return logw


def test_fractional_ais_kernel_matches_numpy_reference_draw_for_draw():
    W, b, c, coef = tiny_fractional(6, 3, seed=8, scale=1.2)
    base = np.random.default_rng(0).normal(0, 1, 6)
    betas = np.linspace(0, 1, 25)
    got = kernels.fractional_ais_log_weights(W, b, c, coef, base, betas, 7, 55)
    np.testing.assert_allclose(got, ref_fractional_ais(W, b, c, coef, base, betas, 7, Stream(55)), rtol=1e-11, atol=1e-11)


def test_fractional_ais_estimate_and_spread_from_log_weights():
    """As the RBM's (test_rbm_kernels): estimate = log mean exp(log w) + log Z_base, spread =
    3 std(w) / (mean(w) sqrt(R)), from the weights of the NumPy reference, draw for draw
    (issue 27: the spread that test_fractional_ais_estimate_is_close_to_exact and the AIS
    evaluation accept within was never checked)."""
    W, b, c, coef = tiny_fractional(6, 3, seed=8, scale=1.2)
    base = np.random.default_rng(0).normal(0, 1, 6)
    betas = np.linspace(0, 1, 40)
    est, spread = FW.fractional_ais_log_partition(W, b, c, coef, n_runs=30, schedule=betas, seed=5, base_vis=base)
    logw = ref_fractional_ais(W, b, c, coef, base, betas, 30, Stream(derived_seed(5, 23)))
    w = np.exp(logw)
    assert est == pytest.approx(math.log(w.mean()) + ref_softplus(base).sum(), rel=1e-12)
    assert spread == pytest.approx(3 * w.std(ddof=1) / (w.mean() * math.sqrt(30)), rel=1e-9)


def test_fractional_ais_spread_is_three_standard_deviations_of_the_estimate():
    """Over 40 seeds, the estimates scatter by about spread / 3 (one standard deviation):
    the stated spread is neither inflated nor shrunk (by sqrt(R) or the factor 3)."""
    W, b, c, coef = tiny_fractional(6, 3, seed=8, scale=1.2)
    runs = [FW.fractional_ais_log_partition(W, b, c, coef, n_runs=20, schedule=np.linspace(0, 1, 30), seed=seed)
            for seed in range(40)]
    estimates, spreads = np.array([r[0] for r in runs]), np.array([r[1] for r in runs])
    ratio = estimates.std(ddof=1) / (np.median(spreads) / 3)
    assert 0.6 < ratio < 1.6, ratio


def test_fractional_ais_spread_is_zero_when_the_weights_are_equal():
    """W = 0, hidden biases 0 and base = b_vis: every weight is sum_j coef_j log 2, the
    estimate is exact and the spread 0."""
    b = np.array([0.3, -1.0, 2.0])
    coef = np.array([0.4, 1.7])
    est, spread = FW.fractional_ais_log_partition(np.zeros((3, 2)), b, np.zeros(2), coef, n_runs=5,
                                                  schedule=np.array([0.0, 1.0]), base_vis=b)
    assert est == pytest.approx(FW.fractional_log_partition_exact(np.zeros((3, 2)), b, np.zeros(2), coef), rel=1e-13)
    assert spread == 0.0


def test_fractional_ais_estimate_is_close_to_exact():
    """400 runs x 1,001 betas on a 10 x 6 fractional RBM: within 0.05 nats plus the stated spread."""
    model = R.RBM.random(10, 6, 4, scale=0.7)
    coef = np.array([0.3, 0.8, 1.0, 1.6, 2.5, 0.5])
    exact = FW.fractional_log_partition_exact(model.W, model.b_vis, model.b_hid, coef)
    est, spread = FW.fractional_ais_log_partition(model.W, model.b_vis, model.b_hid, coef, n_runs=400,
                                                  schedule=R.AIS_SCHEDULE_LIVE, seed=1)
    assert abs(est - exact) < 0.05 + spread


# ------------------------------------------------------------- MH sampler (§3.3)


def test_mh_sampler_matches_exact_probabilities_of_a_fractional_rbm():
    """20,000 independent chains, 40 MH steps each from uniform states, on a 4 x 3 fractional
    RBM with coefficients 0.35, 1.6, 2.4.  Chi-square test of the 16-state distribution
    against the exact p(v) of eq. 11 at a false-alarm rate of 1e-3 (plus the mixing bias
    after 40 steps, negligible at an acceptance rate > 0.8 on 16 states), and a
    total-variation check.  The same test rejects the plain Gibbs chain of the eq. 12
    approximation (the proposal without the acceptance step), so it has power."""
    W, b, c, _ = tiny_fractional(4, 3, seed=11, scale=1.5)
    coef = np.array([0.35, 1.6, 2.4])
    p = ref_exact_probs(W, b, c, coef)
    n = 20_000
    V0 = random_binary(n, 4, 12)
    V, rate = FW.mh_sample(W, b, c, coef, V0, 40, seed=13)
    assert rate > 0.8
    codes = (V @ (2 ** np.arange(4)[::-1])).astype(int)
    observed = np.bincount(codes, minlength=16)
    chi2 = np.sum((observed - n * p) ** 2 / (n * p))
    assert chi2 < scipy.stats.chi2.ppf(1 - 1e-3, 15)
    assert 0.5 * np.abs(observed / n - p).sum() < 0.02
    # the proposal alone (Gibbs of eq. 12) samples a different distribution: rejected
    Vg, _ = R.RBM(W * coef, b, c * coef).gibbs(V0, 40, seed=13)
    obs_g = np.bincount((Vg @ (2 ** np.arange(4)[::-1])).astype(int), minlength=16)
    assert np.sum((obs_g - n * p) ** 2 / (n * p)) > scipy.stats.chi2.ppf(1 - 1e-3, 15)


# ------------------------------------------------------------ the model (§3.1)


def test_model_with_alpha_t_is_the_standard_rbm_with_t_units():
    """After t insertions q = (1/t) sum_s delta(w_s) and alpha = t (Proposition 3.1): the
    mixture form alpha E_q[softplus] + b^T v, enumerated over v, has the log Z of the RBM
    with t hidden units (engine.rbm.log_partition_exact), and the trainer's log-likelihood
    is the RBM's exact one."""
    V = proto_data(200, 7, 3, 0)
    trainer = FW.FrankWolfeTrainer(V, max_hidden=4, samples=100, reg=0.05, evaluate="exact", seed=1)
    for t in range(1, 5):
        record = trainer.step()
        W, b, c = trainer.params
        assert W.shape == (7, t) and trainer.alpha == t and record["t"] == t
        q = trainer.q_weights
        np.testing.assert_allclose(q, np.full(t, 1 / t), rtol=0, atol=0)
        S = ref_states(7)
        mixture = trainer.alpha * (ref_softplus(S @ W + c) @ q) + S @ b
        log_z_mixture = scipy.special.logsumexp(mixture)
        assert log_z_mixture == pytest.approx(R.log_partition_exact(W, b, c), rel=1e-12)
        assert record["log_z"] == pytest.approx(log_z_mixture, rel=1e-12)
        assert record["train_log_likelihood"] == pytest.approx(R.exact_log_likelihood(trainer.rbm, V), rel=1e-12)
        np.testing.assert_array_equal(record["W"], W)
        np.testing.assert_array_equal(record["new_unit"], W[:, -1])


@settings(deadline=None, max_examples=15)
@given(seed=st.integers(0, 10_000), scale=st.floats(0.2, 3.0))
def test_eq9_is_the_frank_wolfe_linear_program_of_the_penalized_likelihood(seed, scale):
    """For any unit theta = (w, c): adding it with coefficient eps to the model changes
    L' = mean log p - (lam/2) sum_i coef_i ||theta_i||^2 at the rate -J(theta) at eps = 0,
    J being eq. 9 with exact expectations.  Checked against a forward difference (eps = 1e-6)
    of exact fractional-RBM log-likelihoods on a trained 6-visible model; and the trainer's
    fw_objective_exact is that L'."""
    V = proto_data(150, 6, 3, 2)
    trainer = FW.FrankWolfeTrainer(V, max_hidden=3, reg=0.05, bias_lr=0.5, bias_steps=20, bias_tol=0.0, exact_expectations=True,
                                   evaluate="exact")
    trainer.step()
    trainer.step()
    W, b, c = trainer.params
    lam = trainer.reg
    theta = np.random.default_rng(seed).normal(0, scale, 7)

    def penalized(eps):
        W2, c2 = np.column_stack([W, theta[:6]]), np.append(c, theta[6])
        coef = np.append(trainer.coefficients, eps) if eps > 0 else trainer.coefficients
        if eps <= 0:
            W2, c2 = W, c
        log_z = FW.fractional_log_partition_exact(W2, b, c2, coef)
        F = FW.fractional_free_energy(V, W2, b, c2, coef)
        return -F.mean() - log_z - 0.5 * lam * np.sum(coef * ((W2 * W2).sum(0) + c2 * c2))

    assert penalized(0.0) == pytest.approx(trainer.fw_objective_exact(), rel=1e-12)
    h = 1e-6
    slope = (penalized(h) - penalized(0.0)) / h
    S = ref_states(6)
    J, _ = FW.inner_objective(theta, S, V, lam, model_weights=ref_exact_probs(W, b, c, trainer.coefficients))
    assert slope == pytest.approx(-J, abs=1e-4 * max(1.0, abs(J)))


@pytest.mark.parametrize("reg", [0.03, 0.05])
def test_penalized_log_likelihood_rises_over_frank_wolfe_iterations_with_exact_expectations(reg):
    """Exact expectations (no sampling), the biases solved to convergence by eq. 10 at each
    iteration (200 steps of 0.5), on six tiny data sets (6-8 visibles, three prototypes with
    10 % noise), eight insertions each.  Checked at every iteration: J(w*) <= 0 and the
    Frank-Wolfe gap >= 0, to L-BFGS's tolerance of 1e-6 (the inserted unit is an ascent direction of L'), and eq. 6's
    penalized log-likelihood L = mean log p - (lam/2) E_q ||w||^2 and the plain
    log-likelihood strictly rise.

    This is the paper's empirical claim (Fig. 1), not a theorem: Frank-Wolfe with step 1/t
    and alpha_t = t inserts each unit at full strength.  With lam = 0.02 (larger units) eq. 6
    fell by up to 0.24 nats on these data, and L' (eq. 9's own objective, which charges each
    unit's full norm) fell by up to 3e-2 nats at lam = 0.03 (reported, not asserted)."""
    for data_seed, n_vis in ((0, 8), (1, 8), (2, 7), (3, 8), (4, 8), (5, 6)):
        V = proto_data(400, n_vis, 3, data_seed)
        trainer = FW.FrankWolfeTrainer(V, max_hidden=8, reg=reg, bias_lr=0.5, bias_steps=200, bias_tol=1e-6, exact_expectations=True,
                                       evaluate="exact", seed=0)
        seq, ll = [trainer.penalized_log_likelihood_exact()], [trainer.penalized_log_likelihood_exact()]
        while not trainer.done:
            record = trainer.step()
            seq.append(trainer.penalized_log_likelihood_exact())
            ll.append(record["train_log_likelihood"])
            assert record["penalized_log_likelihood"] == pytest.approx(seq[-1], rel=1e-12)
            assert record["fw_objective"] == pytest.approx(trainer.fw_objective_exact(), rel=1e-12)
            assert record["inner_objective"] <= 1e-6  # J(0) = 0; L-BFGS stops within its tolerance
            assert record["fw_gap"] >= -1e-6
        assert np.all(np.diff(seq) > 0), (data_seed, np.diff(seq))
        assert np.all(np.diff(ll) > 0), (data_seed, np.diff(ll))


# ----------------------------------------------------------- options (§3.2-3.3)


def test_continuing_from_an_existing_rbm():
    """A CD-trained RBM continued at t = |h| + 1: before the first step the model (alpha = |h|,
    q uniform over its units) has the RBM's exact likelihood; the step adds one unit and
    leaves the old ones untouched."""
    V = proto_data(300, 9, 4, 3)
    cd = R.RBMTrainer(V, 3, method="cd", batch_size=50, max_epochs=5, evaluate="none", seed=0)
    cd.run()
    rbm = cd.rbm
    trainer = FW.FrankWolfeTrainer(V, max_hidden=6, samples=200, init_rbm=(rbm.W, rbm.b_vis, rbm.b_hid), evaluate="exact",
                                   V_valid=V[:50])
    assert trainer.n_hidden == 3 and trainer.alpha == 3.0
    exact = R.exact_log_likelihood(rbm, V)
    ll = trainer.log_likelihoods()
    assert ll["train_log_likelihood"] == pytest.approx(exact, rel=1e-12)
    assert ll["valid_log_likelihood"] == pytest.approx(R.exact_log_likelihood(rbm, V[:50]), rel=1e-12)
    np.testing.assert_allclose(trainer.free_energy(V), rbm.free_energy(V), rtol=1e-12)
    record = trainer.step()
    assert record["t"] == 4 and record["n_hidden"] == 4 and record["iteration"] == 1
    np.testing.assert_array_equal(record["W"][:, :3], rbm.W)
    np.testing.assert_array_equal(record["b_hid"][:3], rbm.b_hid)
    assert record["train_log_likelihood"] == pytest.approx(R.exact_log_likelihood(trainer.rbm, V), rel=1e-12)


def test_away_steps_remove_harmful_units_and_never_exceed_t():
    """Exact expectations, lam = 0.02 (large units that overshoot): away steps happen.  Each
    removes the unit with the largest J(w_i), only when J(w_i) > -J(w*), leaves the other
    units as they were, and the model stays a standard RBM (alpha = n); n_hidden <= t."""
    V = proto_data(300, 7, 3, 1)
    trainer = FW.FrankWolfeTrainer(V, max_hidden=6, reg=0.02, bias_lr=0.5, bias_steps=50, bias_tol=0.0, exact_expectations=True,
                                   away_steps=True, evaluate="exact", max_iterations=14)
    n_away = 0
    while not trainer.done:
        J_before, (W_before, _, c_before) = unit_J(trainer), trainer.params
        record = trainer.step()
        assert record["n_hidden"] <= record["t"]
        assert trainer.alpha == trainer.n_hidden and np.all(trainer.coefficients == 1.0)
        if record["away_step"]:
            n_away += 1
            a = record["removed_unit"]
            assert a == int(np.argmax(J_before))
            assert J_before[a] > -record["inner_objective"]
            assert "new_unit" not in record
            np.testing.assert_array_equal(record["removed_weights"], W_before[:, a])
            np.testing.assert_array_equal(record["W"], np.delete(W_before, a, axis=1))
            np.testing.assert_array_equal(record["b_hid"], np.delete(c_before, a))
        else:
            assert record["removed_unit"] == -1
            assert len(J_before) < 2 or J_before.max() <= -record["inner_objective"] + 1e-9
    assert n_away >= 1


def test_fitted_alpha_follows_the_gradient_of_the_penalized_likelihood():
    """fit_alpha: the model is a fractional RBM (coef = alpha / n != 1).  The gradient used,
    dL'/dalpha = -E_q[J(w)], matches central differences of the exact L' in alpha; and the
    sampled trainer (MH chains) runs and reports its acceptance rate."""
    V = proto_data(300, 7, 3, 4)
    trainer = FW.FrankWolfeTrainer(V, max_hidden=4, reg=0.05, bias_lr=0.5, bias_steps=30, bias_tol=0.0, exact_expectations=True,
                                   fit_alpha=True, alpha_lr=0.5, evaluate="exact")
    records = trainer.run()
    assert not trainer.standard
    assert abs(trainer.alpha - 4.0) > 1e-3
    np.testing.assert_allclose(trainer.coefficients, trainer.alpha / 4)
    alpha = trainer.alpha
    grad = -float(np.mean(unit_J(trainer)))
    h = 1e-6
    trainer.alpha = alpha + h
    up = trainer.fw_objective_exact()
    trainer.alpha = alpha - h
    down = trainer.fw_objective_exact()
    trainer.alpha = alpha
    assert (up - down) / (2 * h) == pytest.approx(grad, rel=1e-5, abs=1e-7)
    assert records[-1]["train_log_likelihood"] > records[0]["train_log_likelihood"]
    with pytest.raises(ValueError, match="fractional"):
        trainer.rbm
    sampled = FW.FrankWolfeTrainer(V, max_hidden=3, samples=100, reg=0.05, fit_alpha=True, evaluate="exact")
    rec = sampled.run()[-1]
    assert 0.0 < rec["acceptance_rate"] < 1.0
    assert rec["log_z"] == pytest.approx(ref_fractional_log_z(*sampled.params, sampled.coefficients), rel=1e-12)


def test_ais_evaluation_agrees_with_exact():
    """evaluate="ais" (live schedule, 100 runs) against the exact log Z of the same model."""
    V = proto_data(300, 10, 4, 5)
    kw = dict(max_hidden=4, samples=100, reg=0.1, V_valid=V[:40], V_test=V[40:80], seed=3)
    exact = FW.FrankWolfeTrainer(V, evaluate="exact", **kw).run()[-1]
    ais = FW.FrankWolfeTrainer(V, evaluate="ais", ais_runs=100, **kw).run()[-1]
    assert exact["log_z_exact"] and not ais["log_z_exact"]
    assert ais["log_z"] == pytest.approx(exact["log_z"], abs=0.05 + ais["log_z_spread"])
    for split in ("train", "valid", "test"):
        gap = exact[f"{split}_log_likelihood"] - ais[f"{split}_log_likelihood"]
        assert gap == pytest.approx(ais["log_z"] - exact["log_z"], abs=1e-9)


def test_auto_evaluation_is_exact_while_cheap_then_ais():
    """evaluate="auto": exact while 2^m max(Nv, n) <= 2^22 (m the smaller layer), AIS beyond;
    a fractional model is enumerated over its visibles only."""
    V = random_binary(50, 30, 0)
    rng = np.random.default_rng(1)
    for n, exact in ((16, True), (18, False)):
        init = (rng.normal(0, 0.1, (30, n)), np.zeros(30), np.zeros(n))
        trainer = FW.FrankWolfeTrainer(V, max_hidden=n + 1, init_rbm=init, ais_runs=2)
        out = trainer.log_likelihoods()
        assert out["log_z_exact"] is exact
        if exact:
            assert out["log_z"] == pytest.approx(R.log_partition_exact(*init), rel=1e-12)
    small = FW.FrankWolfeTrainer(random_binary(50, 8, 2), max_hidden=30, fit_alpha=True, samples=20,
                                 init_rbm=(rng.normal(0, 0.3, (8, 25)), np.zeros(8), np.zeros(25)))
    out = small.log_likelihoods()
    assert out["log_z_exact"] and out["log_z"] == pytest.approx(
        ref_fractional_log_z(*small.params, small.coefficients), rel=1e-12)


# --------------------------------------------------------- model selection (§4)


def test_gap_stop_rule():
    gaps = np.array([0.0, 0.1, 0.1, 0.2, 0.9, 1.6, 1.7])
    n = np.arange(1, 8)
    assert FW.gap_stop_rule(gaps, n, window=2, increase=1.0) == (5, 4)
    assert FW.gap_stop_rule(gaps, n, window=2, increase=2.0) == (-1, -1)
    assert FW.gap_stop_rule(gaps, n, window=1, increase=0.6) == (4, 4)


def test_early_stopping_selects_the_size_before_the_gap_grows():
    """Validation data unlike the training data: the gap grows as units fit the training set;
    the rule fires, Records report it, selected_hidden is the size ``stop_window`` iterations
    earlier, and with early_stopping the trainer stops there."""
    V = proto_data(300, 10, 3, 6, flip=0.05)
    V_valid = proto_data(100, 10, 3, 7, flip=0.05)
    kw = dict(max_hidden=12, samples=200, reg=0.05, evaluate="none", V_valid=V_valid, stop_window=2, stop_increase=0.5)
    records = FW.FrankWolfeTrainer(V, **kw).run()
    gaps = np.array([r["train_valid_gap"] for r in records])
    k, selected = FW.gap_stop_rule(gaps, np.array([r["n_hidden"] for r in records]), window=2, increase=0.5)
    assert k >= 0, gaps
    assert [r["stop_rule_fired"] for r in records] == [i >= k for i in range(len(records))]
    assert all(r["selected_hidden"] == (selected if i >= k else -1) for i, r in enumerate(records))
    trainer = FW.FrankWolfeTrainer(V, early_stopping=True, **kw)
    stopped = trainer.run()
    assert len(stopped) == k + 1 and trainer.status == "early_stopped"
    assert trainer.selected_hidden == selected == stopped[k - 2]["n_hidden"]
    # the gap is mean train log p - mean valid log p: log Z cancels
    last = records[-1]
    rbm = R.RBM(last["W"], last["b_vis"], last["b_hid"])
    assert last["train_valid_gap"] == pytest.approx(
        np.mean(rbm.free_energy(V_valid)) - np.mean(rbm.free_energy(V)), rel=1e-9, abs=1e-9)


# ------------------------------------------------------------------ protocol


def _trainer(**kw):
    V = proto_data(120, 9, 3, 8)
    args = dict(max_hidden=8, samples=40, bias_steps=3, V_valid=V[:30], V_test=V[30:60], evaluate="exact", seed=5)
    args.update(kw)
    return FW.FrankWolfeTrainer(V, **args)


def _same(a, b):
    skip = {"wall_time", "elapsed", "eval_time"}
    assert {k: v for k, v in a.scalars.items() if k not in skip} == {k: v for k, v in b.scalars.items() if k not in skip}
    assert set(a.arrays) == set(b.arrays)
    for key in a.arrays:
        np.testing.assert_array_equal(a.arrays[key], b.arrays[key])


@pytest.mark.parametrize("kw", [{}, {"dtype": "float64"}, {"fit_alpha": True, "away_steps": True, "reg": 0.02},
                                {"init_rbm": (np.random.default_rng(0).normal(0, 0.5, (9, 2)), np.zeros(9), np.zeros(2)),
                                 "burn_in": 5, "evaluate": "ais", "ais_runs": 4}])
def test_state_dict_round_trip_resumes_bit_exactly(kw):
    straight = _trainer(**kw)
    assert isinstance(straight, Trainer)
    first = [straight.step() for _ in range(5)]
    resumed = _trainer(**kw)
    for _ in range(2):
        resumed.step()
    state = through_npz(resumed)
    fresh = _trainer(**kw)
    fresh.load_state_dict(state)
    for want in first[2:]:
        _same(fresh.step(), want)
    # same seed, same numbers; another seed, other numbers
    again = _trainer(**kw)
    _same(again.step(), first[0])
    other = _trainer(seed=6, **{k: v for k, v in kw.items()})
    assert not np.array_equal(other.step()["W"], first[0]["W"])


def test_a_checkpoint_records_its_dtype_and_refuses_the_other():
    state = _trainer().state_dict()
    assert state["dtype"] == "float32" and state["chains"].dtype == np.float32
    state = through_npz(_trainer())
    with pytest.raises(ValueError, match="dtype = 'float32', but this trainer has dtype = 'float64'"):
        _trainer(dtype="float64").load_state_dict(state)


def test_load_state_dict_rejects_foreign_checkpoints():
    state = _trainer().state_dict()
    with pytest.raises(ValueError, match="samples"):
        _trainer(samples=41).load_state_dict(state)
    bad = dict(state)
    bad["chains"] = np.full((40, 9), 0.5)
    with pytest.raises(ValueError, match="chains"):
        _trainer().load_state_dict(bad)
    with pytest.raises(ValueError, match="lacks"):
        _trainer().load_state_dict({"W": state["W"]})


def test_done_at_max_hidden_and_records_carry_the_issue_fields():
    trainer = _trainer(max_hidden=3)
    records = trainer.run()
    assert trainer.done and trainer.status == "max_hidden" and len(records) == 3
    last = records[-1]
    for key in ("n_hidden", "inner_objective", "bias_change", "iteration", "wall_time", "train_log_likelihood",
                "valid_log_likelihood", "test_log_likelihood", "stop_rule_fired", "selected_hidden"):
        assert key in last.scalars, key
    for key, shape in (("new_unit", (9,)), ("W", (9, 3)), ("b_vis", (9,)), ("b_hid", (3,))):
        assert last[key].shape == shape
    assert last["bias_change"] > 0
    with pytest.raises(RuntimeError):
        trainer.step()


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"max_hidden": 0}, "max_hidden"),
        ({"samples": 0}, "samples"),
        ({"reg": -0.1}, "reg"),
        ({"bias_lr": float("nan")}, "bias_lr"),
        ({"bias_steps": -1}, "bias_steps"),
        ({"gibbs_steps": 0}, "gibbs_steps"),
        ({"evaluate": "tap"}, "evaluate"),
        ({"ais_runs": 1}, "ais_runs"),
        ({"ais_schedule": "fast"}, "ais_schedule"),
        ({"seed": -1}, "seed"),
        ({"away_steps": "yes"}, "away_steps"),
        ({"inner_restarts": 0}, "inner_restarts"),
        ({"init_scale": 0.0}, "init_scale"),
        ({"V_valid": np.zeros((3, 4))}, "V_valid"),
        ({"V": np.full((5, 6), 0.5)}, "'V'"),
        ({"init_rbm": (np.zeros((5, 2)), np.zeros(5), np.zeros(2))}, "init_rbm"),
        ({"init_rbm": (np.zeros((6, 2)), np.zeros(6), np.zeros(2)), "max_hidden": 2}, "max_hidden"),
        ({"exact_expectations": True, "V": np.zeros((5, 17))}, "exact_expectations"),
        ({"evaluate": "exact", "V": np.zeros((5, 30)), "max_hidden": 25}, "evaluate"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(kwargs, name):
    args = {"V": random_binary(10, 6, 0)}
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        FW.FrankWolfeTrainer(args.pop("V"), **args)


def test_bad_function_arguments():
    W, b, c, coef = tiny_fractional(4, 3)
    with pytest.raises(ValueError, match="coef"):
        FW.fractional_log_partition_exact(W, b, c, np.array([1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match="n_visible"):
        FW.fractional_log_partition_exact(np.zeros((21, 1)), np.zeros(21), np.zeros(1), np.ones(1))
    with pytest.raises(ValueError, match="theta"):
        FW.inner_objective(np.zeros(3), random_binary(4, 4, 0), random_binary(4, 4, 1), 0.1)
    with pytest.raises(ValueError, match="k"):
        FW.mh_sample(W, b, c, coef, random_binary(3, 4, 0), 0, 0)


def test_bench_runs_and_reports_ratios():
    from boltzlab.engine.experiments import bench_frankwolfe

    result = bench_frankwolfe.run(hidden=(5, 10), insertions=1, repeats=1, cd_k=1, samples=50, bias_steps=2, burn_in=1)
    assert [r["n_hidden"] for r in result["rows"]] == [5, 10]
    for r in result["rows"]:
        assert r["ratio_insertion_to_epoch"] == pytest.approx(r["fw_seconds_per_insertion"] / r["cd_seconds_per_epoch"])
        assert r["fw_seconds_to_grow_estimate"] > 0 and r["fw_fixed10_seconds_per_insertion"] > 0
        assert 0 <= r["fw_bias_updates"] <= 2
    assert "ratio" in bench_frankwolfe.format_table(result)


def _softplus_np(x):
    return np.logaddexp(0.0, x)


@pytest.mark.parametrize("fit_alpha", [False, True])
def test_an_insertion_mixes_q_with_step_one_over_t(fit_alpha):
    """Issue 46 item 5 (c): at an insertion q_t = (1 - 1/t) q_{t-1} + (1/t) delta(w*_t) (§3.1,
    Algorithm 1) with alpha_t = t, or with a fitted alpha alpha_{t-1} t / (t - 1): every unit
    keeps its coefficient alpha q_i and the new one gets the same.  With no eq. 10 updates the
    free energy after the step is, in plain NumPy, the one before minus that coefficient times
    the new unit's softplus; the coefficients are those of a reference built from the records."""
    V = proto_data(200, 6, 3, 11)
    trainer = FW.FrankWolfeTrainer(V, max_hidden=5, reg=0.1, bias_steps=0, exact_expectations=True,
                                   fit_alpha=fit_alpha, alpha_lr=0.0, evaluate="exact")
    trainer.step()
    trainer.step()
    if fit_alpha:
        trainer.alpha = 2.7  # as a fitted alpha would be: not the number of units
    coef_before = trainer.coefficients.copy()
    W_before, _, c_before = (a.copy() for a in trainer.params)
    F_before = trainer.free_energy(V.astype(np.float64))
    record = trainer.step()
    assert record["removed_unit"] == -1 and trainer.n_hidden == 3
    per_unit = 2.7 / 2 if fit_alpha else 1.0
    np.testing.assert_allclose(coef_before, per_unit, rtol=1e-12)
    np.testing.assert_allclose(trainer.coefficients, per_unit, rtol=1e-12)  # old units and the new one
    assert record["alpha"] == pytest.approx(per_unit * 3, rel=1e-12)
    W, _, c = trainer.params
    np.testing.assert_array_equal(W[:, :2], W_before)
    np.testing.assert_array_equal(c[:2], c_before)
    new = _softplus_np(V @ record["new_unit"] + record["new_hidden_bias"])
    np.testing.assert_allclose(trainer.free_energy(V.astype(np.float64)), F_before - per_unit * new,
                               rtol=1e-10, atol=1e-10)
