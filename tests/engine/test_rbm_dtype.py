"""RBM training in float32 and float64 (issue 18): the kernels against float32 NumPy
references, both precisions against each other on exact and AIS log-likelihoods, and
checkpoints that record their dtype.

Draws: both precisions consume the same splitmix64 stream and compare the float64 draw u
with the probability promoted to float64, so a float32 run differs from a float64 one only
where rounding moves a probability across a draw (rare): the trained models agree far
closer than training noise.
"""

import numpy as np
import pytest
from sklearn.datasets import load_digits

from boltzlab.engine import rbm as R
from boltzlab.engine.images import mnist
from boltzlab.engine.kernels import rbm as kernels
from tests.engine.test_rbm_kernels import Stream, random_binary, ref_train_batch, small_rbm

#: |mean log-likelihood (nats per row) of float32 training - that of float64 training|, same
#: seed and settings.  Training noise between seeds is ~0.02-1 nats on these models; the two
#: precisions measured 1e-7 (digits) to 4e-6 (MNIST) apart.
LL_TOLERANCE = 0.01


def ref_sigmoid32(x):
    x = np.asarray(x, dtype=np.float32)
    return (np.float32(1.0) / (np.float32(1.0) + np.exp(-x))).astype(np.float32)


@pytest.fixture(scope="module")
def digits():
    return (load_digits().data > 7).astype(np.float64)


@pytest.fixture(scope="module")
def mnist_rows():
    return np.asarray(mnist().X_train, dtype=np.float64)


# ---------------------------------------------------------------- kernels in float32


def test_gibbs_chains_in_float32_match_a_float32_numpy_reference_draw_for_draw():
    model = small_rbm(6, 4, 1)
    W = model.W.astype(np.float32)
    bv, bh = model.b_vis.astype(np.float32), model.b_hid.astype(np.float32)
    V0 = random_binary(7, 6, 3).astype(np.float32)
    V = V0.copy()
    H = kernels.gibbs_chains(V, W, np.ascontiguousarray(W.T), bv, bh, 3, 11)
    assert V.dtype == H.dtype == np.float32
    stream = Stream(11)
    Vr = V0.copy()
    for _ in range(3):
        Hr = (stream.take((7, 4)) < ref_sigmoid32(Vr @ W + bh)).astype(np.float32)
        Vr = (stream.take((7, 6)) < ref_sigmoid32(Hr @ W.T + bv)).astype(np.float32)
    np.testing.assert_array_equal(V, Vr)
    np.testing.assert_array_equal(H, Hr)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_probabilities_in_both_dtypes_match_numpy(dtype):
    model = small_rbm(9, 5, 4, scale=3.0)
    V = random_binary(11, 9, 2).astype(dtype)
    W, bh = model.W.astype(dtype), model.b_hid.astype(dtype)
    P = kernels.hidden_probabilities(V, W, bh)
    assert P.dtype == dtype
    rtol = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(P, ref_sigmoid32(V @ W + bh) if dtype == np.float32
                               else 1.0 / (1.0 + np.exp(-(V @ W + bh))), rtol=rtol, atol=0)


@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("k", [1, 3])
def test_train_batches_in_float32_match_a_float32_numpy_reference(persistent, k):
    """The same reference as the float64 test (tests/engine/test_rbm_kernels.py), fed float32
    arrays so NumPy computes in float32; agreement to float32 rounding."""
    n_vis, n_hid, n_chains = 9, 5, 6
    f32 = np.float32
    V = random_binary(40, n_vis, 0)
    model = small_rbm(n_vis, n_hid, 2, scale=0.5)
    state = [a.astype(f32) for a in (model.W, model.b_vis, model.b_hid,
                                     np.random.default_rng(1).normal(0, 0.01, (n_vis, n_hid)), np.zeros(n_vis), np.zeros(n_hid))]
    chains = random_binary(n_chains, n_vis, 5).astype(f32)
    chain_hid = ref_sigmoid32(chains @ state[0] + state[2])
    rows = np.random.default_rng(3).permutation(40).astype(np.int64)
    bounds = np.array([0, 25, 31, 40], dtype=np.int64)
    seeds = np.array([101, 202, 303], dtype=np.int64)
    W, bv, bh, vW, vv, vh = (a.copy() for a in state)
    ch, chh = chains.copy(), chain_hid.copy()
    recon = np.empty(3)
    kernels.train_batches(V.astype(f32), rows, bounds, seeds, W, bv, bh, vW, vv, vh, ch, chh, persistent, k,
                          0.1, 0.5, 0.01, recon)
    for a in (W, bv, bh, vW, vv, vh, ch, chh):
        assert a.dtype == f32
    ref = [*state, chains, chain_hid]
    lr, mom, wd = f32(0.1), f32(0.5), f32(0.01)
    for t in range(3):
        B = V[rows[bounds[t]:bounds[t + 1]]].astype(f32)
        out = ref_train_batch(B, ref[6], ref[7], *ref[:6], persistent, k, lr, mom, wd, Stream(int(seeds[t])))
        ref = [np.asarray(a, dtype=f32) for a in out[:8]]
        assert recon[t] == pytest.approx(float(out[8]), rel=1e-5)
    for got, want in zip((W, bv, bh, vW, vv, vh, ch, chh), ref):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------- trainers, both precisions


def _trained_ll(V, n_hidden, epochs, seed, dtype, evaluate_rows):
    trainer = R.RBMTrainer(V, n_hidden, step_unit="epoch", evaluate="none", max_epochs=epochs, seed=seed, dtype=dtype)
    trainer.run()
    assert trainer._W.dtype == np.dtype(dtype)
    return trainer, R.exact_log_likelihood(trainer.rbm, evaluate_rows)


def test_float32_and_float64_training_reach_the_same_exact_log_likelihood_on_digits(digits):
    for seed in (0, 1):
        _, ll32 = _trained_ll(digits, 10, 10, seed, "float32", digits[:500])
        _, ll64 = _trained_ll(digits, 10, 10, seed, "float64", digits[:500])
        assert abs(ll32 - ll64) < LL_TOLERANCE
        assert ll64 > -30.0  # trained: the base-rate model is at about -33 nats here


def test_float32_and_float64_training_reach_the_same_log_likelihood_on_mnist(mnist_rows):
    """784 x 16 (exact log Z) and 784 x 100 (AIS, the same runs for both models)."""
    V = mnist_rows[:2000]
    _, ll32 = _trained_ll(V, 16, 2, 0, "float32", V[:500])
    _, ll64 = _trained_ll(V, 16, 2, 0, "float64", V[:500])
    assert abs(ll32 - ll64) < LL_TOLERANCE
    values = []
    for dtype in ("float32", "float64"):
        trainer = R.RBMTrainer(V, 100, step_unit="epoch", evaluate="ais", ais_runs=20, max_epochs=2, seed=0,
                               eval_overhead=1e-9, dtype=dtype)  # evaluates only at the end
        rec = trainer.run()[-1]
        values.append(rec["log_likelihood_ais"])
        spread = rec["log_z_spread"]
    assert abs(values[0] - values[1]) < max(LL_TOLERANCE, spread)


def test_evaluations_run_in_float64_from_float32_parameters(digits):
    trainer = R.RBMTrainer(digits, 8, evaluate="exact", max_epochs=1, step_unit="epoch", seed=2)
    rec = trainer.step()
    assert trainer.rbm.W.dtype == np.float64
    np.testing.assert_array_equal(trainer.rbm.W, trainer._W.astype(np.float64))
    want = R.exact_log_likelihood(trainer.rbm, trainer._V_eval)
    assert rec["log_likelihood"] == pytest.approx(want, rel=1e-12)


# ------------------------------------------------------------------- checkpoints


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_checkpoint_records_its_dtype_and_resumes_bit_exactly(digits, dtype):
    kwargs = dict(batch_size=50, seed=4, evaluate="none", dtype=dtype)
    a = R.RBMTrainer(digits, 6, **kwargs)
    a.steps(7)
    state = a.state_dict()
    assert state["dtype"] == dtype and state["W"].dtype == np.dtype(dtype)
    saved = {key: np.asarray(value) for key, value in state.items()}  # as an .npz round trip gives
    a.steps(9)
    b = R.RBMTrainer(digits, 6, **kwargs)
    b.load_state_dict(saved)
    b.steps(9)
    for key in ("W", "b_vis", "b_hid", "vW", "chains", "chain_hid"):
        np.testing.assert_array_equal(a.state_dict()[key], b.state_dict()[key])


def test_a_checkpoint_in_the_other_dtype_is_refused_with_a_clear_message(digits):
    a64 = R.RBMTrainer(digits, 6, batch_size=50, dtype="float64")
    a64.step()
    with pytest.raises(ValueError, match=r"dtype = 'float64'.*dtype='float64'"):
        R.RBMTrainer(digits, 6, batch_size=50).load_state_dict(a64.state_dict())
    old = a64.state_dict()
    del old["dtype"]  # checkpoints from before the option (float64) load into either, converted
    for dtype in ("float32", "float64"):
        t = R.RBMTrainer(digits, 6, batch_size=50, dtype=dtype)
        t.load_state_dict(old)
        assert t.state_dict()["W"].dtype == np.dtype(dtype)
        np.testing.assert_allclose(t.state_dict()["W"], old["W"], rtol=1e-6)


def test_dtype_is_validated(digits):
    assert R.RBMTrainer(digits, 3, dtype=np.float64).dtype == "float64"
    assert R.RBMTrainer(digits, 3).dtype == "float32"
    with pytest.raises(ValueError, match="'dtype' parameter of RBMTrainer must be one of 'float32', 'float64'"):
        R.RBMTrainer(digits, 3, dtype="float16")
