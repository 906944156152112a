"""The threaded kernels: against the NumPy references and against one thread, at 1 and 2 threads.

On one thread every kernel runs in one piece (whole products, the kernels of before
threads); on more, its work is split into blocks fixed by the shapes (never by the thread
count), so a seed gives bit-identical results on 2, 3, ... threads and results within
rounding of one thread's.  The sizes here are chosen to span several blocks (ROW_BLOCK
rows, WEIGHT_BLOCK weight rows, col_blocks columns).  Never timed: speed is measured by
``boltzlab bench ... --threads N``.
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


def test_the_engine_keeps_every_blas_in_the_process_on_one_thread():
    """numba's pool is the only pool: scipy's OpenBLAS (numba's np.dot) and numpy's own copy
    (a trainer's NumPy products, whose idle threads would spin beside numba's) run on one
    thread once the engine sets its threads or runs a parallel kernel."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from boltzlab.engine.rbm import RBMTrainer

    def blas_threads():
        return {info["filepath"]: info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"}

    with threadpool_limits(limits=2):
        assert any("numpy" in path for path in blas_threads())  # numpy's own copy is seen
        assert set(blas_threads().values()) == {2}
        with threads.using(2):
            assert set(blas_threads().values()) == {1}
    with threadpool_limits(limits=2):
        V = (np.random.default_rng(0).random((40, 12)) < 0.3).astype(np.float64)
        RBMTrainer(V, 5, batch_size=20, evaluate="none").step()  # threads as they are
        assert set(blas_threads().values()) == {1}


def test_openmp_threads_spin_briefly_then_sleep_unless_the_user_says_otherwise():
    """boltzlab.engine sets libgomp's waits before numba loads it: passive, after ~1,000
    spin rounds (a halted core is slow to wake); a user's own settings win."""
    import os
    import subprocess
    import sys

    code = "import os, boltzlab.engine; print(os.environ['OMP_WAIT_POLICY'], os.environ['GOMP_SPINCOUNT'])"
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def child(env):
        return subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True,
                              check=True).stdout.split()

    assert child(env) == ["PASSIVE", "1000"]
    assert child(dict(env, OMP_WAIT_POLICY="ACTIVE", GOMP_SPINCOUNT="7")) == ["ACTIVE", "7"]


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
def test_train_batches_on_1_and_2_threads_agree_to_rounding(dtype, persistent, k):
    # one thread: whole products and sums in row order; two: blocks, sums per block
    V, rows, state = _train_setup(**SHAPE, dtype=dtype)
    results = {}
    for n_threads in THREADS:
        with threads.using(n_threads):
            results[n_threads] = _train(V, rows, BOUNDS, SEEDS, state, persistent, k)
    (a, ra), (b, rb) = results[1], results[2]
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ra, rb, **tol)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, **tol)


_SAME_BITS_CHILD = """
import sys
import numpy as np
from boltzlab.engine import tap, threads
from boltzlab.engine.kernels import frankwolfe as fwk
from tests.engine.test_threads import (BOUNDS, COLUMN_HIDDEN, SEEDS, SHAPE, _eq10_problem, _tap_problem, _train,
                                       _train_setup)
out = {}
for n_threads in (2, 3):
    with threads.using(n_threads):
        assert threads.threads() == n_threads
        for dtype in (np.float32, np.float64):
            V, rows, state = _train_setup(**SHAPE, dtype=dtype)
            got, recon = _train(V, rows, BOUNDS, SEEDS, state, True, 2)
            for i, g in enumerate(got + [recon]):
                out[f"{n_threads} rbm {dtype.__name__} {i}"] = g
            for split, n_hid in (("chains", 90), ("columns", COLUMN_HIDDEN)):
                W, b_vis, b_hid, init = _tap_problem(40, n_hid=n_hid)
                res = tap.tap_fixed_points(W, b_vis, b_hid, init, tol=1e-9, max_iter=200, dtype=dtype.__name__)
                for name in ("a_vis", "c_vis", "a_hid", "c_hid", "iterations", "converged"):
                    out[f"{n_threads} tap {split} {dtype.__name__} {name}"] = getattr(res, name)
            chains, W, b, c, args = _eq10_problem(dtype, True)
            alpha = fwk.bias_alpha_updates(chains, W, b, c, *args)[0]
            for name, value in (("chains", chains), ("b_vis", b), ("alpha", alpha)):
                out[f"{n_threads} fw {dtype.__name__} {name}"] = value
            fwk.sample_model(chains, W, b, c, np.ones(W.shape[1]), True, 2, 5)
            out[f"{n_threads} fw {dtype.__name__} sampled"] = chains
        rows = (np.random.default_rng(1).random((3 * fwk.INNER_BLOCK, 9)) < 0.3).astype(float)
        indptr, indices = fwk.to_csr(rows)
        weights = np.random.default_rng(2).normal(0, 1e-3, rows.shape[0])
        f, g = fwk.inner_objective(indptr, indices, weights, np.linspace(-1, 1, 10), 0.1, 9, True)
        out[f"{n_threads} inner f"], out[f"{n_threads} inner grad"] = f, g
np.savez(sys.argv[1], **out)
"""


def test_the_blocks_give_the_same_bits_on_2_and_3_threads(tmp_path):
    # more threads than this machine's cores: NUMBA_NUM_THREADS=3 in a child process
    import os
    import subprocess
    import sys

    path = tmp_path / "out.npz"
    env = dict(os.environ, NUMBA_NUM_THREADS="3")
    subprocess.run([sys.executable, "-c", _SAME_BITS_CHILD, str(path)], check=True, env=env,
                   cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    out = np.load(path)
    keys = [k[2:] for k in out.files if k.startswith("2 ")]
    assert len(keys) == 2 * (9 + 2 * 6 + 4) + 2
    for key in keys:
        np.testing.assert_array_equal(out["2 " + key], out["3 " + key], err_msg=key)


#: hidden units of the TAP problems split by columns on several threads (more than
#: tap_kernels.CHAIN_SPLIT_MAX_HIDDEN; fewer are split by chains)
COLUMN_HIDDEN = 300


def _tap_problem(K, n_vis=120, n_hid=90, seed=0):
    rng = np.random.default_rng(seed)
    W = rng.normal(0, 0.1, (n_vis, n_hid))
    return W, rng.normal(0, 0.2, n_vis), rng.normal(0, 0.2, n_hid), (rng.random((K, n_vis)) < 0.4).astype(float)


@pytest.mark.parametrize("n_hid, split", [(COLUMN_HIDDEN, "columns"), (90, "chains")])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tap_blocks_on_1_and_2_threads_agree_to_rounding(dtype, n_hid, split):
    K = 40
    W, b_vis, b_hid, init = _tap_problem(K, n_hid=n_hid)
    if split == "columns":
        assert not tap_kernels.by_chains(K, n_hid)
        assert tap_kernels.col_blocks(W.shape[0]) == tap_kernels.col_blocks(W.shape[1]) == 2
    else:
        assert tap_kernels.by_chains(K, n_hid) and tap_kernels.chain_blocks(K) == 2
    field = np.random.default_rng(5).normal(0, 0.5, init.shape)
    results = {}
    for n_threads in THREADS:
        with threads.using(n_threads):
            results[n_threads] = tap.tap_fixed_points(W, b_vis, b_hid, init, field_vis=field, damping=0.1,
                                                      tol=1e-9, max_iter=200, dtype=dtype)
    a, b = results[1], results[2]
    atol = 1e-5 if dtype == "float32" else 1e-12
    for name in ("a_vis", "c_vis", "a_hid", "c_hid"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=0, atol=atol)
    # a convergence decision may move by a sweep when a squared change lands within rounding of tol
    assert np.abs(a.iterations - b.iterations).max() <= 1


@pytest.mark.parametrize("n_hid", [COLUMN_HIDDEN, 90], ids=["columns", "chains"])
@pytest.mark.parametrize("n_threads", THREADS)
def test_tap_blocks_match_one_block_and_the_numpy_reference(n_threads, n_hid):
    from boltzlab.engine.experiments.bench_tap import numpy_tap_sweeps

    K = 133  # 4 chain blocks (chains), 2 column blocks of each layer (columns)
    W, b_vis, b_hid, init = _tap_problem(K, n_hid=n_hid)
    with threads.using(n_threads):
        got = tap.tap_fixed_points(W, b_vis, b_hid, init, tol=0.0, max_iter=30)
    av, cv, ah, ch, _ = numpy_tap_sweeps(W, b_vis, b_hid, init, 30)
    np.testing.assert_allclose(got.a_vis, av, atol=1e-12)
    np.testing.assert_allclose(got.a_hid, ah, atol=1e-12)
    # the products in one piece (the one-thread kernel) agree to rounding
    model = tap._Model(W, b_vis, b_hid, "bernoulli", "bernoulli", "test", None, K)
    one = [init.copy(), np.zeros_like(init), np.zeros((K, W.shape[1])), np.zeros((K, W.shape[1]))]
    it, ok = np.zeros(K, np.int64), np.zeros(K, np.bool_)
    tap_kernels.tap_iterate(*model.args(), *one, 0.0, 0.0, 30, it, ok)
    np.testing.assert_allclose(got.a_vis, one[0], atol=1e-12)
    np.testing.assert_array_equal(got.iterations, it)


def test_small_gemm_rows_follow_the_blas_and_the_shape(monkeypatch):
    monkeypatch.setattr(threads, "_small_gemm_blas", lambda: True)
    assert threads.small_gemm_rows(784, 100, 4) == 12  # 12 x 784 x 100 <= 10^6 < 13 x ...
    assert threads.small_gemm_rows(784, 500, 4) == 0  # pieces of 2 rows: multiply whole
    assert threads.small_gemm_rows(784, 100, 8) == 0  # float64 keeps its one product
    monkeypatch.setattr(threads, "_small_gemm_blas", lambda: False)
    assert threads.small_gemm_rows(784, 100, 4) == 0


@pytest.mark.parametrize("n_threads", THREADS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tap_products_in_row_pieces_match_whole_products_and_the_numpy_reference(monkeypatch, dtype, n_threads):
    from boltzlab.engine.experiments.bench_tap import numpy_tap_sweeps

    K, sweeps = 45, 30  # pieces of 7 rows: 6 whole ones and a remainder, in each chain block
    W, b_vis, b_hid, init = _tap_problem(K)
    seen = []
    monkeypatch.setattr(tap_kernels, "small_gemm_rows", lambda k, n, itemsize: seen.append((k, n)) or 7)
    with threads.using(n_threads):
        got = tap.tap_fixed_points(W, b_vis, b_hid, init, tol=0.0, max_iter=sweeps, dtype=dtype)
    assert seen == [W.shape]
    monkeypatch.undo()
    whole = tap.tap_fixed_points(W, b_vis, b_hid, init, tol=0.0, max_iter=sweeps, dtype=dtype)
    av, _, ah, _, _ = numpy_tap_sweeps(W, b_vis, b_hid, init.astype(dtype), sweeps)
    atol = 1e-5 if dtype == "float32" else 1e-12
    for ref in (whole, None):
        a_vis, a_hid = (ref.a_vis, ref.a_hid) if ref is not None else (av, ah)
        np.testing.assert_allclose(got.a_vis, a_vis, rtol=0, atol=atol)
        np.testing.assert_allclose(got.a_hid, a_hid, rtol=0, atol=atol)


@pytest.mark.parametrize("prior", ["bernoulli", "truncated_gauss_bernoulli"])
def test_tap_free_energies_and_data_terms_give_the_same_bits_on_1_and_2_threads(prior):
    # each row's sum is its own: the rows on two threads give one thread's numbers exactly
    W, b_vis, b_hid, init = _tap_problem(57, n_hid=COLUMN_HIDDEN)
    res = tap.tap_fixed_points(W, b_vis, b_hid, init, prior_vis=prior, tol=1e-9, max_iter=200)
    model = tap._Model(W, b_vis, b_hid, prior, "bernoulli", "test")
    got = {}
    for n_threads in THREADS:
        with threads.using(n_threads):
            F = tap.tap_free_energy(W, b_vis, b_hid, res, prior_vis=prior)
            terms = tap_kernels.data_terms(init, model.W, *model.vis, *model.hid)
        got[n_threads] = (F, *terms)
    for a, b in zip(got[1], got[2]):
        np.testing.assert_array_equal(a, b)
    assert np.all(np.isfinite(got[2][0])) and np.all(np.isfinite(got[2][1]))


@pytest.mark.parametrize("prior", ["bernoulli", "truncated_gauss_bernoulli"])
def test_tap_free_energies_by_chain_blocks_agree_with_one_thread_and_the_reference(prior):
    from tests.engine.test_tap import Layer, ref_free_energy

    K = 133  # 4 blocks of rows, their products included
    W, b_vis, b_hid, init = _tap_problem(K)
    assert tap_kernels.by_chains(K, W.shape[1]) and tap_kernels.chain_blocks(K) == 4
    res = tap.tap_fixed_points(W, b_vis, b_hid, init, prior_vis=prior, tol=1e-9, max_iter=200)
    got = {}
    for n_threads in THREADS:
        with threads.using(n_threads):
            got[n_threads] = tap.tap_free_energy(W, b_vis, b_hid, res, prior_vis=prior)
    np.testing.assert_allclose(got[2], got[1], rtol=1e-13, atol=0)
    if prior == "bernoulli":
        ref = ref_free_energy(W, Layer("bernoulli", b_vis), Layer("bernoulli", b_hid), res.a_vis, res.c_vis,
                              res.a_hid, res.c_hid)
        np.testing.assert_allclose(got[2], ref, rtol=1e-10)


def _eq10_problem(dtype, fit_alpha):
    """(chains, W, b_vis, b_hid, the other arguments of bias_alpha_updates) of a tiny
    fractional RBM with chains in four blocks."""
    from boltzlab.engine.kernels import frankwolfe as fwk
    from tests.engine.test_frankwolfe import random_binary, tiny_fractional

    W, b, c, _ = tiny_fractional(6, 3, seed=5)
    chains = random_binary(3 * fwk.CHAIN_BLOCK + 7, 6, 6).astype(dtype)
    data_mean = np.random.default_rng(7).random(6)
    return chains, W.astype(dtype), b, c, (3.0, data_mean, 0.9, 0.1, 0.2, 1e-6, 2, True, fit_alpha, 123, 3, 0.0, 1.0)


@pytest.mark.parametrize("fit_alpha", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_threaded_eq10_loop_matches_the_numpy_reference_and_one_thread(dtype, fit_alpha):
    from boltzlab.engine.kernels import frankwolfe as fwk
    from tests.engine.test_frankwolfe import ref_bias_loop

    chains0, W, b0, c, args = _eq10_problem(dtype, fit_alpha)
    assert fwk.chain_blocks(chains0.shape[0]) == 4  # several blocks of chains, one shorter
    data_mean = args[1]
    got = {}
    for n_threads in THREADS:
        chains, b = chains0.copy(), b0.copy()
        with threads.using(n_threads):
            out = fwk.bias_alpha_updates(chains, W, b, c, *args)
        got[n_threads] = (chains, b, out)
    # one thread: whole products, sums in row order; two: blocks, sums per block (rounding)
    rel = 1e-12 if dtype == np.float64 else 1e-6
    np.testing.assert_array_equal(got[1][0], got[2][0])
    np.testing.assert_allclose(got[1][1], got[2][1], rtol=rel, atol=rel)
    np.testing.assert_allclose(np.array(got[1][2], float), np.array(got[2][2], float), rtol=rel, atol=rel)
    ref = ref_bias_loop(chains0.copy(), W, b0.copy(), c, 3.0, data_mean, 0.9, 0.1, 0.2, 2, True, fit_alpha, 123, 3,
                        0.0, 1.0)
    np.testing.assert_array_equal(got[2][0], ref[0])
    np.testing.assert_allclose(got[2][1], ref[1], rtol=rel, atol=rel)
    assert got[2][2][0] == pytest.approx(ref[2], rel=rel)  # alpha (its softplus sums per block)
    if fit_alpha:
        assert ref[2] != 3.0


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_threaded_model_sampler_matches_the_numpy_reference_and_one_thread(dtype):
    """Step 1 of Algorithm 1 (``sample_model``, a standard RBM: block Gibbs): on 2 threads by
    blocks of chains, the draws of one thread and of the NumPy reference."""
    from boltzlab.engine.kernels import frankwolfe as fwk
    from tests.engine.test_frankwolfe import ref_gibbs_step

    chains0, W, b, c, _ = _eq10_problem(dtype, False)
    assert fwk.chain_blocks(chains0.shape[0]) == 4
    got = {}
    for n_threads in THREADS:
        chains = chains0.copy()
        with threads.using(n_threads):
            assert fwk.sample_model(chains, W, b, c, np.ones(W.shape[1]), True, 3, 77) == 3 * chains.shape[0]
        got[n_threads] = chains
    ref, stream = chains0.astype(np.float64), Stream(77)
    for _ in range(3):
        ref = ref_gibbs_step(ref, W.astype(np.float64), b, c, stream)
    np.testing.assert_array_equal(got[1], got[2])
    np.testing.assert_array_equal(got[2], ref)
    assert 0.2 < ref.mean() < 0.8  # the chains moved: both values drawn


@pytest.mark.parametrize("use_bias", [True, False])
def test_threaded_inner_objective_matches_the_numpy_reference_and_one_thread(use_bias):
    from boltzlab.engine.kernels import frankwolfe as fwk
    from tests.engine.test_frankwolfe import random_binary, ref_inner_objective

    rng = np.random.default_rng(4)
    n_model = fwk.INNER_BLOCK + 5
    n_data = 2 * fwk.INNER_BLOCK + 3
    assert fwk.inner_blocks(n_model + n_data) == 4  # several blocks of rows, uneven
    Vm, Vd = random_binary(n_model, 9, 1), random_binary(n_data, 9, 2)
    a = rng.random(n_model)
    a /= a.sum()
    theta = rng.normal(0, 1.5, 10)
    indptr, indices = fwk.to_csr(np.vstack([Vm, Vd]))
    weights = np.concatenate([a, np.full(n_data, -1 / n_data)])
    got = {}
    for n_threads in THREADS:
        with threads.using(n_threads):
            got[n_threads] = fwk.inner_objective(indptr, indices, weights, theta, 0.3, 9, use_bias)
    f_ref, g_ref = ref_inner_objective(theta, Vm, a, Vd, 0.3, use_bias)
    for f, g in got.values():
        assert f == pytest.approx(f_ref, rel=1e-11, abs=1e-13)
        np.testing.assert_allclose(g, g_ref, rtol=1e-10, atol=1e-13)
    # one thread sums the rows in order, two the blocks' sums: rounding apart, never more
    assert got[1][0] == pytest.approx(got[2][0], rel=1e-13, abs=1e-15)


@pytest.mark.parametrize("n_threads", THREADS)
def test_threaded_ais_matches_the_numpy_reference_draw_for_draw(n_threads):
    from tests.engine.test_rbm_kernels import ref_ais_log_weights, small_rbm

    model = small_rbm(6, 4, 3)
    base = np.random.default_rng(0).normal(0, 1, 6)
    betas = np.linspace(0, 1, 20)
    n_runs = 2 * rbm_kernels.ROW_BLOCK + 7  # three blocks of runs
    with threads.using(n_threads):
        got = rbm_kernels.ais_log_weights(model.W, model.b_vis, model.b_hid, base, betas, n_runs, 77)
    want = ref_ais_log_weights(model.W, model.b_vis, model.b_hid, base, betas, n_runs, Stream(77))
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11)
    with threads.using(1):
        one = rbm_kernels.ais_log_weights(model.W, model.b_vis, model.b_hid, base, betas, n_runs, 77)
    np.testing.assert_array_equal(got, one)


def test_fair_share_splits_the_cores_between_playing_runs(tmp_path, monkeypatch):
    import os
    import time

    monkeypatch.setenv("BOLTZLAB_PLAYERS_DIR", str(tmp_path))
    a, b, c = threads.Player("a"), threads.Player("b"), threads.Player("c")
    assert threads.share("a", cores=2) == 2  # alone: every core
    with a:
        assert threads.players() == ["a"]
        assert threads.share("b", cores=2) == 1  # a second run: one each
        with b:
            assert threads.share("a", cores=2) == threads.share("b", cores=2) == 1
            assert [threads.share(k, cores=8) for k in "ab"] == [4, 4]
            with c:
                assert [threads.share(k, cores=8) for k in "abc"] == [3, 3, 2]  # never more than 8 in all
                assert [threads.share(k, cores=2) for k in "abc"] == [1, 1, 1]  # at least one each
    # between two batches a run still counts for GRACE_SECONDS, then gives its cores back
    assert threads.players() == ["a", "b", "c"]
    assert threads.players(now=time.time() + 2 * threads.GRACE_SECONDS) == []
    b.close()
    assert not os.path.exists(b.path)
    old = time.time() - 100 * threads.GRACE_SECONDS
    os.utime(a.path, (old, old))
    assert threads.players() == ["c"] and not os.path.exists(a.path)  # a stale claim is removed


def test_fair_share_sets_the_calling_threads_count_and_restores_it(tmp_path, monkeypatch):
    monkeypatch.setenv("BOLTZLAB_PLAYERS_DIR", str(tmp_path))
    before = threads.threads()
    with threads.fair_share(threads.Player("solo")) as n:
        # alone: every idle core (the others' load decides how many are idle)
        assert n == threads.threads() == threads.share("solo") and 1 <= n <= threads.available()
    assert threads.threads() == before


def test_idle_cores_count_other_processes_work_not_ours(monkeypatch):
    readings = iter([(0.0, 0.0, 0.0), (150.0, 200.0, 0.0), (300.0, 400.0, 140.0)])
    monkeypatch.setattr(threads, "_cpu_counters", lambda: next(readings))
    monkeypatch.setattr(threads, "_IDLE", {})
    monkeypatch.setattr(threads, "IDLE_SAMPLE_SECONDS", 0.0)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 4)
    assert threads.idle_cores(4) == 4  # first reading: no history, every core
    assert threads.idle_cores(4) == 1  # 3 of 4 cores busy with other processes
    assert threads.idle_cores(4) == 4  # as busy, but with our own work (0.2 cores of others): all ours


def test_benches_measure_one_and_n_threads_in_the_same_run():
    from boltzlab.engine.experiments import bench_fvbm, bench_rbm, bench_tap

    rows = bench_tap.run(hidden=(6,), K=5, n_sweeps=2, repeats=1, threads=2)["rows"]
    assert [r["threads"] for r in rows] == [1, 2]
    assert rows[0]["speedup_float32"] == 1.0 and rows[1]["speedup_float32"] > 0
    for r in rows:
        assert r["sgemm_gflops"] == pytest.approx(max(r["blas_sgemm_gflops"], r["blocked_sgemm_gflops"]))
    rows = bench_rbm.run(hidden=(20,), repeats=1, ais_runs=2, ais_schedule="live", threads=2)["rows"]
    assert [r["threads"] for r in rows] == [1, 2] and "ais_seconds" in rows[0] and "ais_seconds" not in rows[1]
    for r in rows:
        assert r["sgemm_floor_seconds"] == min(r["blas_sgemm_floor_seconds"], r["blocked_sgemm_floor_seconds"])
        assert r["float32_floor_fraction"] == pytest.approx(r["sgemm_floor_seconds"] / r["engine_float32_seconds"])
    assert "threads vs 1" in bench_rbm.format_table({"rows": rows})
    result = bench_fvbm.run(n=400, d=4, min_seconds=0.01, threads=2)
    assert [r["threads"] for r in result["thread_rows"]] == [1, 2] and result["thread_rows"][0]["speedup"] == 1.0
