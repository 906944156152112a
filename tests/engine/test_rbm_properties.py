"""RBM properties against exact oracles: sampling, gradients, AIS, the trainer protocol.

Statistical tests use fixed seeds (so they are deterministic); each states the false-alarm
rate it would have over random seeds.
"""

import math

import numpy as np
import pytest
import scipy.stats
from sklearn.datasets import load_digits

from boltzlab.engine import rbm as R
from boltzlab.engine.kernels import rbm as kernels
from boltzlab.engine.stepping import Trainer
from tests.states import through_npz

from tests.engine.test_rbm_kernels import random_binary, ref_sigmoid, ref_states


@pytest.fixture(scope="module")
def digits():
    """scikit-learn's 8x8 digits binarised (pixel > 7 -> 1): 1797 rows, 64 visibles."""
    data = load_digits()
    return (data.data > 7).astype(np.float64), data.target


def exact_joint(model):
    """P(v, h) over all states, with the state arrays: (P (2^Nv, 2^Nh), Vs, Hs)."""
    Vs, Hs = ref_states(model.n_visible), ref_states(model.n_hidden)
    neg_energy = Vs @ model.W @ Hs.T + (Vs @ model.b_vis)[:, None] + (Hs @ model.b_hid)[None, :]
    P = np.exp(neg_energy - neg_energy.max())
    return P / P.sum(), Vs, Hs


# ------------------------------------------------------------------- sampling


def test_gibbs_chains_reach_the_exact_marginals():
    """20,000 independent chains, 40 block Gibbs steps each from uniform random states.

    Per-unit z-tests of E[v_i], E[h_j] against the exact marginals with Bonferroni over the
    7 units at a family false-alarm rate of 1e-3, and a chi-square test of the 16-state
    visible distribution at 1e-3: about 2e-3 in all (plus the mixing bias after 40 steps,
    below 1e-6 here: the second eigenvalue of this small chain is < 0.7).
    """
    model = R.RBM.random(4, 3, seed=0, scale=1.0)
    P, Vs, Hs = exact_joint(model)
    n = 20_000
    rng = np.random.default_rng(1)
    V0 = (rng.random((n, 4)) < 0.5).astype(float)
    V, H = model.gibbs(V0, 40, seed=2)
    exact_v, exact_h = P.sum(axis=1) @ Vs, P.sum(axis=0) @ Hs
    z_crit = scipy.stats.norm.ppf(1 - 1e-3 / (2 * 7))
    for empirical, exact in ((V.mean(0), exact_v), (H.mean(0), exact_h)):
        z = (empirical - exact) / np.sqrt(exact * (1 - exact) / n)
        assert np.all(np.abs(z) < z_crit), z
    codes = (V @ (2 ** np.arange(4)[::-1])).astype(int)  # ref_states order: first unit is the top bit
    observed = np.bincount(codes, minlength=16)
    expected = P.sum(axis=1) * n
    assert scipy.stats.chisquare(observed, expected).pvalue > 1e-3


def exact_samples(model, n, rng):
    """n exact draws of v from P(v) by inverting its CDF over the 2^Nv states."""
    P, Vs, _ = exact_joint(model)
    pv = P.sum(axis=1)
    return Vs[np.minimum(np.searchsorted(np.cumsum(pv), rng.random(n)), len(pv) - 1)]


def exact_gradient(model, V):
    """d(mean log P(v))/d(W, b_vis, b_hid) by enumeration: data term minus model term."""
    P, Vs, Hs = exact_joint(model)
    Hp = ref_sigmoid(V @ model.W + model.b_hid)
    model_vh = Vs.T @ P @ Hs
    gW = V.T @ Hp / len(V) - model_vh
    gv = V.mean(0) - P.sum(axis=1) @ Vs
    gh = Hp.mean(0) - P.sum(axis=0) @ Hs
    return gW, gv, gh


def test_pcd_gradient_is_unbiased_with_exact_chain_states():
    """PCD-with-exact-sampling limit: persistent chains holding exact samples of the model
    stay exact after k = 1 Gibbs step, so the trainer's kernel's update (learning rate 1,
    no momentum or decay: the update is the gradient estimate) is unbiased for the exact
    gradient.  3,000 estimates with 10 fresh exact chains each; every component of the mean
    within z_crit standard errors, Bonferroni over the 19 components at a family
    false-alarm rate of 1e-3.  The positive phase is the whole data set, so it is exact.
    """
    model = R.RBM.random(4, 3, seed=3, scale=0.8)
    V = random_binary(30, 4, 4, p=0.4)
    truth = np.concatenate([g.ravel() for g in exact_gradient(model, V)])
    rng = np.random.default_rng(5)
    reps, n_chains = 3000, 10
    estimates = np.empty((reps, truth.size))
    rows, bounds = np.arange(30, dtype=np.int64), np.array([0, 30], dtype=np.int64)
    for r in range(reps):
        W, bv, bh = model.W.copy(), model.b_vis.copy(), model.b_hid.copy()
        vW, vv, vh = np.zeros_like(W), np.zeros(4), np.zeros(3)
        chains = exact_samples(model, n_chains, rng)
        chain_hid = ref_sigmoid(chains @ model.W + model.b_hid)  # P(h | chains), as the trainer keeps it
        kernels.train_batches(V, rows, bounds, np.array([r], dtype=np.int64), W, bv, bh, vW, vv, vh, chains,
                              chain_hid, True, 1, 1.0, 0.0, 0.0, np.empty(1))
        estimates[r] = np.concatenate([vW.ravel(), vv, vh])
    mean = estimates.mean(0)
    se = estimates.std(0, ddof=1) / math.sqrt(reps)
    z_crit = scipy.stats.norm.ppf(1 - 1e-3 / (2 * truth.size))
    assert np.all(np.abs(mean - truth) < z_crit * se + 1e-12), (mean - truth) / se


def test_gradient_estimator_with_exact_model_samples_is_unbiased():
    """The same for kernels.gradient with exact negative samples (no Gibbs step)."""
    model = R.RBM.random(3, 5, seed=6, scale=0.8)
    V = random_binary(25, 3, 7)
    truth = np.concatenate([g.ravel() for g in exact_gradient(model, V)])
    rng = np.random.default_rng(8)
    reps = 3000
    estimates = np.array([
        np.concatenate([g.ravel() for g in kernels.gradient(V, exact_samples(model, 10, rng), model.W, model.b_vis, model.b_hid)])
        for _ in range(reps)
    ])
    se = estimates.std(0, ddof=1) / math.sqrt(reps)
    z_crit = scipy.stats.norm.ppf(1 - 1e-3 / (2 * truth.size))
    se = np.where(se > 0, se, 1e-15)
    assert np.all(np.abs(estimates.mean(0) - truth) <= z_crit * se + 1e-12)


# --------------------------------------------------------------------- AIS


@pytest.fixture(scope="module")
def trained_digits_rbms(digits):
    """PCD-1 RBMs trained for 10 epochs on binarised digits (batch 20, lr 0.05, momentum 0.5).

    In float64, the models these AIS tests were written against (float32 training is compared
    with float64 in tests/engine/test_rbm_dtype.py; at batch 20 one rounding that moves a
    probability across a draw sends a run on another path, e.g. seed 10 ends 1 nat apart)."""
    V, _ = digits
    out = {}
    for n_hidden in (10, 20):
        trainer = R.RBMTrainer(V, n_hidden, method="pcd", max_epochs=10, batch_size=20, step_unit="epoch",
                               evaluate="none", seed=n_hidden, dtype="float64")
        trainer.run()
        out[n_hidden] = trainer.rbm
    return out


@pytest.mark.parametrize("n_hidden", [10, 20])
def test_ais_is_within_0_2_nats_of_exact_log_z_on_trained_weights(digits, trained_digits_rbms, n_hidden):
    """AIS with 100 runs on the default (Ping, Liu & Ihler) 14,501-beta schedule, base rates
    from the data, against the exact log Z (enumerating the <= 20 hiddens); also the live
    schedule (1,001 betas, 100 runs) within 0.2 nats and within its 3-sd spread + 0.05.
    """
    V, _ = digits
    model = trained_digits_rbms[n_hidden]
    # trained-looking: clearly better than the base-rate model it started from
    base = R.base_rate_biases(V)
    base_model = R.RBM(np.zeros_like(model.W), base, np.zeros(n_hidden))
    assert R.exact_log_likelihood(model, V) > R.exact_log_likelihood(base_model, V) + 2.0
    assert np.abs(model.W).max() > 0.5
    exact = model.log_partition()
    est, spread = R.ais_log_partition(model.W, model.b_vis, model.b_hid, n_runs=100, seed=1, base_vis=base)
    assert abs(est - exact) < 0.2, (est, exact, spread)
    live, live_spread = R.ais_log_partition(model.W, model.b_vis, model.b_hid, n_runs=100, seed=2, base_vis=base,
                                            schedule=R.AIS_SCHEDULE_LIVE)
    assert abs(live - exact) < 0.2
    assert abs(live - exact) < live_spread + 0.05


@pytest.mark.parametrize("n_vis,n_hid,scale", [(12, 16, 0.5), (20, 8, 1.0), (40, 12, 0.3)])
def test_ais_is_within_0_2_nats_on_random_models(n_vis, n_hid, scale):
    """AIS, 100 runs, default schedule, the default base (the model's own Gibbs marginals), random N(0, scale^2) models."""
    model = R.RBM.random(n_vis, n_hid, seed=n_vis, scale=scale)
    est, _ = R.ais_log_partition(model.W, model.b_vis, model.b_hid, n_runs=100, seed=3)
    assert abs(est - model.log_partition()) < 0.2


@pytest.mark.slow
def test_ais_defaults_are_within_0_2_nats_on_an_mnist_sized_rbm():
    """The public defaults alone (100 runs, 14,501 betas, base rates from the model's own
    Gibbs marginals, no data) on a 784 x 20 RBM trained by PCD on binarised MNIST,
    against the exact log Z summed over the 20 hiddens.  About 30 s."""
    from boltzlab.engine.images import mnist

    V = np.asarray(mnist().X_train, dtype=np.float64)
    trainer = R.RBMTrainer(V, 20, method="pcd", max_epochs=15, step_unit="epoch", evaluate="none", seed=0)
    trainer.run()
    model = trainer.rbm
    assert np.abs(model.W).max() > 1.0  # trained-looking, far from the base model
    exact = model.log_partition()
    est, spread = R.ais_log_partition(model.W, model.b_vis, model.b_hid)
    assert abs(est - exact) < 0.2, (est, exact, spread)
    assert spread < 1.0


def test_model_base_rates_match_the_marginals_of_an_independent_model():
    """With W = 0 the visibles are independent Bernoulli(sigmoid(b_vis)): the Gibbs-estimated
    base rates are their log-odds up to sampling noise (400 chains: sd of a marginal
    <= 0.025, so 0.1 is > 4 sd; false-alarm rate per unit < 1e-4)."""
    rng = np.random.default_rng(0)
    b_vis = rng.normal(0.0, 1.0, 30)
    base = R.model_base_rate_biases(np.zeros((30, 5)), b_vis, rng.normal(0, 1, 5), n_chains=400, n_steps=3, seed=2)
    p = 1.0 / (1.0 + np.exp(-base))
    np.testing.assert_allclose(p, 1.0 / (1.0 + np.exp(-b_vis)), atol=0.1)
    again = R.model_base_rate_biases(np.zeros((30, 5)), b_vis, np.zeros(5), n_chains=400, n_steps=3, seed=2)
    np.testing.assert_array_equal(base, again)


def test_ais_schedules():
    assert R.AIS_SCHEDULE_DEFAULT.size == 500 + 4000 + 10000 + 1
    assert R.AIS_SCHEDULE_DEFAULT[0] == 0.0 and R.AIS_SCHEDULE_DEFAULT[-1] == 1.0
    assert np.all(np.diff(R.AIS_SCHEDULE_DEFAULT) > 0)
    assert np.sum(R.AIS_SCHEDULE_DEFAULT < 0.5) == 500
    assert np.sum((R.AIS_SCHEDULE_DEFAULT >= 0.5) & (R.AIS_SCHEDULE_DEFAULT < 0.9)) == 4000
    assert R.AIS_SCHEDULE_LIVE.size == 1001 and np.all(np.diff(R.AIS_SCHEDULE_LIVE) > 0)


def test_ais_same_seed_same_numbers():
    model = R.RBM.random(10, 6, seed=0)
    a = R.ais_log_partition(model.W, model.b_vis, model.b_hid, n_runs=10, schedule=R.AIS_SCHEDULE_LIVE, seed=4)
    b = R.ais_log_partition(model.W, model.b_vis, model.b_hid, n_runs=10, schedule=R.AIS_SCHEDULE_LIVE, seed=4)
    c = R.ais_log_partition(model.W, model.b_vis, model.b_hid, n_runs=10, schedule=R.AIS_SCHEDULE_LIVE, seed=5)
    assert a == b and a != c


# ------------------------------------------------------------------ trainer


def test_trainer_follows_the_protocol_and_learns(digits):
    V, _ = digits
    trainer = R.RBMTrainer(V, 16, max_epochs=3, batch_size=20, seed=0)
    assert isinstance(trainer, Trainer)
    assert trainer.evaluate == "exact"  # auto: the hidden layer is small
    before = R.exact_log_likelihood(trainer.rbm, V)
    np.testing.assert_allclose(trainer.rbm.b_vis, R.base_rate_biases(V))
    assert abs(trainer.rbm.W.std() - 0.01) < 0.001
    records = trainer.run()
    assert trainer.done and trainer.status == "max_epochs" and "3 epochs" in trainer.message
    assert len(records) == 3 * 90 and records[-1]["iteration"] == 270 and records[-1]["epoch"] == 3.0
    last = records[-1]
    for key in ("reconstruction_error", "pseudo_likelihood", "log_likelihood", "wall_time"):
        assert math.isfinite(last[key])
    assert last["W"].shape == (64, 16) and last["b_vis"].shape == (64,) and last["b_hid"].shape == (16,)
    assert last["log_likelihood"] > before + 1.0
    assert last["log_likelihood"] == pytest.approx(R.exact_log_likelihood(trainer.rbm, trainer._V_eval), rel=1e-12)
    assert last["pseudo_likelihood_exact"] is True  # 64 visibles <= pl_units
    assert records[0]["reconstruction_error"] > last["reconstruction_error"]
    with pytest.raises(RuntimeError):
        trainer.step()


def test_evaluations_are_spread_by_cost():
    """Large exact evaluations are not done on every mini-batch, but always on the last."""
    V = random_binary(400, 300, 0, p=0.2)
    trainer = R.RBMTrainer(V, 18, max_epochs=2, batch_size=20, evaluate="exact", pl_units=20)
    records = []
    while not trainer.done:
        records.append(trainer.step())
    has_ll = [("log_likelihood" in r) for r in records]
    assert has_ll[0] and has_ll[-1] and 0 < sum(has_ll) < len(records) // 2
    assert records[-1]["pseudo_likelihood_exact"] is False


def test_trainer_ais_evaluation():
    V = random_binary(200, 30, 1, p=0.3)
    trainer = R.RBMTrainer(V, 25, max_epochs=1, step_unit="epoch", evaluate="ais", ais_runs=10)
    record = trainer.step()
    assert math.isfinite(record["log_likelihood_ais"]) and record["log_z_spread"] >= 0
    assert "log_likelihood" not in record


@pytest.mark.parametrize("method", ["pcd", "cd"])
@pytest.mark.parametrize("step_unit", ["batch", "epoch"])
def test_same_seed_same_numbers(method, step_unit):
    V = random_binary(230, 12, 3)
    runs = []
    for seed in (7, 7, 8):
        trainer = R.RBMTrainer(V, 5, method=method, k=2, batch_size=50, step_unit=step_unit, max_epochs=2, seed=seed)
        records = trainer.run()
        runs.append((trainer.rbm.W, [r["reconstruction_error"] for r in records]))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    assert runs[0][1] == runs[1][1]
    assert not np.array_equal(runs[0][0], runs[2][0])


def strip_times(record):
    return {k: v for k, v in record.scalars.items() if k not in ("wall_time", "elapsed", "eval_time")}


@pytest.mark.parametrize("method,step_unit", [("pcd", "batch"), ("cd", "batch"), ("pcd", "epoch")])
def test_state_dict_round_trip_resumes_bit_exactly(method, step_unit):
    V = random_binary(230, 12, 4)
    kwargs = dict(method=method, k=1, batch_size=50, step_unit=step_unit, max_epochs=4, seed=3, momentum=0.9)
    a = R.RBMTrainer(V, 6, **kwargs)
    a.steps(3 if step_unit == "batch" else 1)
    state = through_npz(a)
    b = R.RBMTrainer(V, 6, **kwargs)
    b.load_state_dict(state)
    ra, rb = a.steps(4), b.steps(4)
    assert [strip_times(r) for r in ra] == [strip_times(r) for r in rb]
    for key in ("W", "b_vis", "b_hid"):
        np.testing.assert_array_equal(ra[-1][key], rb[-1][key])
    np.testing.assert_array_equal(a._chains, b._chains)
    np.testing.assert_array_equal(a._vW, b._vW)
    # and resuming equals never stopping
    c = R.RBMTrainer(V, 6, **kwargs)
    c.steps(3 if step_unit == "batch" else 1)
    c.steps(4)
    np.testing.assert_array_equal(c.rbm.W, a.rbm.W)


def test_steps_batches_equal_single_steps():
    V = random_binary(230, 12, 5)
    a = R.RBMTrainer(V, 6, batch_size=50, seed=1)
    b = R.RBMTrainer(V, 6, batch_size=50, seed=1)
    ra = a.steps(7)
    rb = [b.step() for _ in range(7)]
    np.testing.assert_array_equal(a.rbm.W, b.rbm.W)
    assert [r["reconstruction_error"] for r in ra] == [r["reconstruction_error"] for r in rb]
    assert [r["iteration"] for r in ra] == list(range(1, 8))


def test_load_state_dict_rejects_foreign_checkpoints():
    V = random_binary(100, 12, 5)
    a = R.RBMTrainer(V, 6, batch_size=50)
    state = a.state_dict()
    with pytest.raises(ValueError, match="n_hidden"):
        R.RBMTrainer(V, 7, batch_size=50).load_state_dict(state)
    bad = dict(state)
    del bad["chains"]
    with pytest.raises(ValueError, match="chains"):
        R.RBMTrainer(V, 6, batch_size=50).load_state_dict(bad)
    bad = dict(state, chains=np.full_like(state["chains"], 0.5))
    with pytest.raises(ValueError, match="chains"):
        R.RBMTrainer(V, 6, batch_size=50).load_state_dict(bad)


def test_divergence_is_reported():
    V = random_binary(100, 12, 6)
    trainer = R.RBMTrainer(V, 6, batch_size=50)
    trainer.step()
    trainer._W[0, 0] = np.inf  # as an exploding learning rate would leave it
    record = trainer.step()
    assert trainer.status == "diverged" and "diverged" in trainer.message and trainer.done
    assert "pseudo_likelihood" not in record


# ------------------------------------------------------------------ features


def test_hidden_features_and_classification_error(digits):
    V, y = digits
    trainer = R.RBMTrainer(V[:1200], 40, max_epochs=5, batch_size=20, step_unit="epoch", evaluate="none", seed=0)
    trainer.run()
    model = trainer.rbm
    F = R.hidden_features(model, V[:5])
    np.testing.assert_allclose(F, ref_sigmoid(V[:5] @ model.W + model.b_hid), rtol=1e-12)
    error = R.classification_error(model, V[:1200], y[:1200], V[1200:], y[1200:])
    assert 0.0 <= error < 0.3  # chance is 0.9
    with pytest.raises(ValueError, match="y_test"):
        R.classification_error(model, V[:1200], y[:1200], V[1200:], y[:10])


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"n_hidden": 0}, "n_hidden"),
        ({"n_hidden": 2.5}, "n_hidden"),
        ({"method": "pt"}, "method"),
        ({"k": 0}, "'k'"),
        ({"batch_size": 0}, "batch_size"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"learning_rate": float("nan")}, "learning_rate"),
        ({"momentum": 1.0}, "momentum"),
        ({"weight_decay": -1.0}, "weight_decay"),
        ({"step_unit": "sweep"}, "step_unit"),
        ({"seed": -1}, "seed"),
        ({"evaluate": "tap"}, "evaluate"),
        ({"max_epochs": 0}, "max_epochs"),
        ({"ais_runs": 1}, "ais_runs"),
        ({"V": np.full((5, 3), 0.5)}, "'V'"),
        ({"V": np.zeros(5)}, "'V'"),
    ],
)
def test_bad_trainer_arguments_raise_value_error_naming_them(kwargs, name):
    args = {"V": random_binary(20, 5, 0), "n_hidden": 3}
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        R.RBMTrainer(args.pop("V"), args.pop("n_hidden"), **args)


def test_exact_evaluation_needs_a_small_layer():
    with pytest.raises(ValueError, match="evaluate"):
        R.RBMTrainer(random_binary(20, 25, 0), 21, evaluate="exact")
    assert R.RBMTrainer(random_binary(20, 25, 0), 21).evaluate == "none"


def test_bad_model_and_function_arguments():
    with pytest.raises(ValueError, match="'W'"):
        R.RBM(np.zeros(3), np.zeros(3), np.zeros(1))
    with pytest.raises(ValueError, match="'b_vis'"):
        R.RBM(np.zeros((3, 2)), np.zeros(2), np.zeros(2))
    with pytest.raises(ValueError, match="'b_hid'"):
        R.RBM(np.zeros((3, 2)), np.zeros(3), np.zeros(3))
    with pytest.raises(ValueError, match="'W'"):
        R.RBM(np.full((3, 2), np.nan), np.zeros(3), np.zeros(2))
    with pytest.raises(ValueError, match="smaller layer"):
        R.log_partition_exact(np.zeros((21, 22)), np.zeros(21), np.zeros(22))
    model = R.RBM.random(4, 3, 0)
    with pytest.raises(ValueError, match="'V'"):
        model.free_energy(np.zeros((2, 5)))
    with pytest.raises(ValueError, match="n_runs"):
        R.ais_log_partition(model.W, model.b_vis, model.b_hid, n_runs=0)
    with pytest.raises(ValueError, match="schedule"):
        R.ais_log_partition(model.W, model.b_vis, model.b_hid, schedule=np.array([0.0, 0.5]))
    with pytest.raises(ValueError, match="schedule"):
        R.ais_log_partition(model.W, model.b_vis, model.b_hid, schedule=np.array([0.0, 0.7, 0.5, 1.0]))
    with pytest.raises(ValueError, match="base_vis"):
        R.ais_log_partition(model.W, model.b_vis, model.b_hid, base_vis=np.zeros(3))
    with pytest.raises(ValueError, match="n_units"):
        R.stochastic_pseudo_log_likelihood(model, np.zeros((2, 4)), 5, 0)
    with pytest.raises(ValueError, match="'k'"):
        model.gibbs(np.zeros((2, 4)), 0, 0)
    with pytest.raises(ValueError, match="seed"):
        model.gibbs(np.zeros((2, 4)), 1, -3)


def test_base_rate_biases_are_finite_log_odds():
    V = np.array([[0, 1, 1], [0, 1, 0], [0, 1, 1], [0, 1, 0]], dtype=float)
    b = R.base_rate_biases(V)
    assert np.all(np.isfinite(b))
    np.testing.assert_allclose(b, np.log(np.array([1, 5, 3]) / np.array([5, 1, 3])))


def test_trainer_starts_from_given_parameters(digits):
    """init_params: the first record's exact log-likelihood before any update is the given
    model's (a CD run initialised from a Frank-Wolfe model, Ping et al. 2016 §4)."""
    V = digits[0][:300]
    model = R.RBM.random(V.shape[1], 7, seed=3, scale=0.3)
    trainer = R.RBMTrainer(V, 7, init_params=(model.W, model.b_vis, model.b_hid), evaluate="exact", seed=1,
                           dtype="float64")
    np.testing.assert_array_equal(trainer.rbm.W, model.W)
    np.testing.assert_array_equal(trainer.rbm.b_vis, model.b_vis)
    np.testing.assert_array_equal(trainer.rbm.b_hid, model.b_hid)
    # the float32 default starts from the given model rounded to float32
    t32 = R.RBMTrainer(V, 7, init_params=(model.W, model.b_vis, model.b_hid), evaluate="exact", seed=1)
    np.testing.assert_array_equal(t32.rbm.W, model.W.astype(np.float32))
    np.testing.assert_array_equal(t32.rbm.b_hid, model.b_hid.astype(np.float32))
    assert trainer.rbm.W is not model.W  # a copy: training does not change the caller's arrays
    trainer.step()
    assert not np.array_equal(trainer.rbm.W, model.W)
    with pytest.raises(ValueError, match="init_params"):
        R.RBMTrainer(V, 8, init_params=(model.W, model.b_vis, model.b_hid))
    with pytest.raises(ValueError, match="init_params"):
        R.RBMTrainer(V, 7, init_params=model.W)
