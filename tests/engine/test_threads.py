"""The threaded kernels: against the NumPy references and against one thread, at 1 and 2 threads.

Every parallel kernel splits its work into blocks fixed by the shapes (never by the thread
count), so a seed gives bit-identical results on 1 or 2 threads; the sizes here are chosen
to span several blocks (ROW_BLOCK rows, WEIGHT_BLOCK weight rows, CHAIN_BLOCK chains).
Never timed: speed is measured by ``boltzlab bench ... --threads N``.
"""

import numpy as np
import pytest

from boltzlab.engine import tap, threads
from boltzlab.engine.kernels import rbm as rbm_kernels
from boltzlab.engine.kernels import tap as tap_kernels
from tests.engine.test_rbm_kernels import Stream, ref_sigmoid, ref_train_batch

THREADS = [1, 2]


def test_thread_counts_are_clipped_and_restored():
    before = threads.threads()
    with threads.using(10**6) as n:
        assert n == threads.available() == threads.threads()
    assert threads.threads() == before
    with threads.using(0) as n:
        assert n == 1 == threads.threads()
    assert threads.threads() == before


def _train_setup(n, n_vis, n_hid, n_chains, dtype, seed=0):
    rng = np.random.default_rng(seed)
    V = (rng.random((n, n_vis)) < 0.3).astype(dtype)
    W = rng.normal(0, 0.3, (n_vis, n_hid)).astype(dtype)
    b_vis = rng.normal(0, 0.2, n_vis).astype(dtype)
    b_hid = rng.normal(0, 0.2, n_hid).astype(dtype)
    chains = (rng.random((n_chains, n_vis)) < 0.5).astype(dtype)
    chain_hid = ref_sigmoid(chains.astype(np.float64) @ W + b_hid).astype(dtype)
    state = [W, b_vis, b_hid, rng.normal(0, 0.01, (n_vis, n_hid)).astype(dtype),
             np.zeros(n_vis, dtype), np.zeros(n_hid, dtype), chains, chain_hid]
    rows = rng.permutation(n).astype(np.int64)
    return V, rows, state


def _train(V, rows, bounds, seeds, state, persistent, k):
    out = [a.copy() for a in state]
    recon = np.empty(len(seeds))
    rbm_kernels.train_batches(V, rows, bounds, seeds, *out, persistent, k, 0.1, 0.5, 0.01, recon)
    return out, recon


# batches of 150 and 70 rows and 130 chains: 3, 2 and 3 row blocks; 300 visibles: 2 weight blocks
SHAPE = dict(n=220, n_vis=300, n_hid=70, n_chains=130)
BOUNDS = np.array([0, 150, 220], dtype=np.int64)
SEEDS = np.array([11, 12], dtype=np.int64)


@pytest.mark.parametrize("persistent,k", [(True, 1), (False, 1), (True, 2)])
@pytest.mark.parametrize("n_threads", THREADS)
def test_threaded_train_batches_match_the_numpy_reference(persistent, k, n_threads):
    V, rows, state = _train_setup(**SHAPE, dtype=np.float64)
    with threads.using(n_threads):
        got, recon = _train(V, rows, BOUNDS, SEEDS, state, persistent, k)
    ref = list(state)
    for t in range(len(SEEDS)):
        B = V[rows[BOUNDS[t]:BOUNDS[t + 1]]]
        out = ref_train_batch(B, ref[6], ref[7], *ref[:6], persistent, k, 0.1, 0.5, 0.01, Stream(int(SEEDS[t])))
        ref = list(out[:8])
        assert recon[t] == pytest.approx(out[8], rel=1e-10)
    for g, w in zip(got, ref):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("persistent,k", [(True, 1), (False, 2)])
def test_train_batches_give_the_same_bits_on_1_and_2_threads(dtype, persistent, k):
    V, rows, state = _train_setup(**SHAPE, dtype=dtype)
    results = {}
    for n_threads in THREADS:
        with threads.using(n_threads):
            results[n_threads] = _train(V, rows, BOUNDS, SEEDS, state, persistent, k)
    (a, ra), (b, rb) = results[1], results[2]
    np.testing.assert_array_equal(ra, rb)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def _tap_problem(K, n_vis=120, n_hid=90, seed=0):
    rng = np.random.default_rng(seed)
    W = rng.normal(0, 0.1, (n_vis, n_hid))
    return W, rng.normal(0, 0.2, n_vis), rng.normal(0, 0.2, n_hid), (rng.random((K, n_vis)) < 0.4).astype(float)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tap_chain_blocks_give_the_same_bits_on_1_and_2_threads(dtype):
    K = 2 * tap_kernels.CHAIN_BLOCK + 5  # three blocks
    assert tap_kernels.chain_blocks(K) == 3
    W, b_vis, b_hid, init = _tap_problem(K)
    field = np.random.default_rng(5).normal(0, 0.5, init.shape)
    results = {}
    for n_threads in THREADS:
        with threads.using(n_threads):
            results[n_threads] = tap.tap_fixed_points(W, b_vis, b_hid, init, field_vis=field, damping=0.1,
                                                      tol=1e-9, max_iter=200, dtype=dtype)
    a, b = results[1], results[2]
    for name in ("a_vis", "c_vis", "a_hid", "c_hid", "iterations", "converged"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


@pytest.mark.parametrize("n_threads", THREADS)
def test_tap_chain_blocks_match_one_block_and_the_numpy_reference(n_threads):
    from boltzlab.engine.experiments.bench_tap import numpy_tap_sweeps

    K = 2 * tap_kernels.CHAIN_BLOCK + 5
    W, b_vis, b_hid, init = _tap_problem(K)
    with threads.using(n_threads):
        got = tap.tap_fixed_points(W, b_vis, b_hid, init, tol=0.0, max_iter=30)
    av, cv, ah, ch, _ = numpy_tap_sweeps(W, b_vis, b_hid, init, 30)
    np.testing.assert_allclose(got.a_vis, av, atol=1e-12)
    np.testing.assert_allclose(got.a_hid, ah, atol=1e-12)
    # one block of all K chains (the kernel the blocks run) agrees to rounding
    model = tap._Model(W, b_vis, b_hid, "bernoulli", "bernoulli", "test", None, K)
    one = [init.copy(), np.zeros_like(init), np.zeros((K, W.shape[1])), np.zeros((K, W.shape[1]))]
    it, ok = np.zeros(K, np.int64), np.zeros(K, np.bool_)
    tap_kernels.tap_iterate(*model.args(), *one, 0.0, 0.0, 30, it, ok)
    np.testing.assert_allclose(got.a_vis, one[0], atol=1e-12)
    np.testing.assert_array_equal(got.iterations, it)
