"""TAP inference, free energy, likelihood, gradients, unique solutions and the trainer
(engine.tap, engine.kernels.tap) against plain-NumPy references and exact oracles.

The references below are written from the paper (Algorithm 1, eqs. 33-36, 39-42) in
NumPy, independently of the kernels; exact log Z comes from enumeration.
"""

import itertools
import math

import numpy as np
import pytest
import scipy.special
from hypothesis import given, settings, strategies as st

from boltzlab.engine import rbm as R
from boltzlab.engine import tap as T
from boltzlab.engine.images import digits
from boltzlab.engine.kernels import tap as kernels
from boltzlab.engine.stepping import Trainer
from tests.states import through_npz

# ------------------------------------------------------------------ references


def ref_moments(kind, B, A, U, V=None, rho=None, lo=0.0, hi=1.0):
    """(f_a, f_c) of a layer in NumPy (the truncated kinds via the prior kernel, tested on its own)."""
    if kind == "bernoulli":
        a = scipy.special.expit(U + B - 0.5 * A)
        return a, a * (1 - a)
    if kind == "spin":
        a = np.tanh(U + B)
        return a, 1 - a * a
    code = T.PRIOR_CODES[kind]
    fa = np.empty_like(B)
    fc = np.empty_like(B)
    for idx in np.ndindex(B.shape):
        j = idx[-1]
        _, fa[idx], fc[idx] = kernels.prior_moments(code, B[idx], A[idx], U[idx] if np.ndim(U) == 2 else U[j],
                                                    V[j], rho[j], lo, hi)
    return fa, fc


def ref_log_z(kind, B, A, U, V=None, rho=None, lo=0.0, hi=1.0):
    if kind == "bernoulli":
        return np.logaddexp(0.0, U + B - 0.5 * A)
    if kind == "spin":
        return np.logaddexp(U + B, -(U + B)) - 0.5 * A
    code = T.PRIOR_CODES[kind]
    out = np.empty_like(B)
    for idx in np.ndindex(B.shape):
        j = idx[-1]
        out[idx] = kernels.prior_moments(code, B[idx], A[idx], U[idx] if np.ndim(U) == 2 else U[j], V[j], rho[j], lo, hi)[0]
    return out


class Layer:
    def __init__(self, kind, U, V=None, rho=None, lo=0.0, hi=1.0):
        n = len(U)
        self.kind, self.U, self.lo, self.hi = kind, np.asarray(U, float), lo, hi
        self.V = np.ones(n) if V is None else np.asarray(V, float)
        self.rho = np.full(n, 0.5) if rho is None else np.asarray(rho, float)

    def prior(self):
        return T.Prior(self.kind, self.V, self.rho, (self.lo, self.hi))

    def moments(self, B, A, field=None):
        U = self.U if field is None else self.U + field
        return ref_moments(self.kind, B, A, U, self.V, self.rho, self.lo, self.hi)

    def log_z(self, B, A, field=None):
        U = self.U if field is None else self.U + field
        return ref_log_z(self.kind, B, A, U, self.V, self.rho, self.lo, self.hi)


def ref_algorithm1(W, vis, hid, av, cv, field=None, damping=0.0, tol=0.0, max_iter=10):
    """Algorithm 1 chain by chain, each chain stopping at its own convergence."""
    K = av.shape[0]
    out = [np.empty_like(av), np.empty_like(cv), np.empty((K, W.shape[1])), np.empty((K, W.shape[1]))]
    iters = np.zeros(K, int)
    conv = np.zeros(K, bool)
    for k in range(K):
        a_v, c_v = av[k:k + 1].copy(), cv[k:k + 1].copy()
        a_h, c_h = np.zeros((1, W.shape[1])), np.zeros((1, W.shape[1]))
        f = None if field is None else field[k:k + 1]
        for t in range(1, max_iter + 1):
            A_h = -c_v @ (W**2)
            B_h = A_h * a_h + a_v @ W
            na, nc = hid.moments(B_h, A_h)
            na, nc = (1 - damping) * na + damping * a_h, (1 - damping) * nc + damping * c_h
            change = np.sum((na - a_h) ** 2)
            a_h, c_h = na, nc
            A_v = -c_h @ (W**2).T
            B_v = A_v * a_v + a_h @ W.T
            na, nc = vis.moments(B_v, A_v, f)
            na, nc = (1 - damping) * na + damping * a_v, (1 - damping) * nc + damping * c_v
            change += np.sum((na - a_v) ** 2)
            a_v, c_v = na, nc
            iters[k] = t
            if change / (W.shape[0] + W.shape[1]) < tol:
                conv[k] = True
                break
        for arr, val in zip(out, (a_v, c_v, a_h, c_h)):
            arr[k] = val[0]
    return (*out, iters, conv)


def ref_free_energy(W, vis, hid, av, cv, ah, ch, field=None):
    """F = -(eq. 36) with (B, A) from eqs. 33-34."""
    W2 = W**2
    A_h = -cv @ W2
    B_h = A_h * ah + av @ W
    A_v = -ch @ W2.T
    B_v = A_v * av + ah @ W.T
    neg = (vis.log_z(B_v, A_v, field) - B_v * av + 0.5 * A_v * (av**2 + cv)).sum(1)
    neg += (hid.log_z(B_h, A_h) - B_h * ah + 0.5 * A_h * (ah**2 + ch)).sum(1)
    neg += np.einsum("ki,ij,kj->k", av, W, ah) + 0.5 * np.einsum("ki,ij,kj->k", cv, W2, ch)
    return -neg


def all_states(m, values=(0.0, 1.0)):
    return np.array(list(itertools.product(values, repeat=m))).reshape(-1, m)


def binary_rbm(n_vis, n_hid, seed, scale):
    rng = np.random.default_rng(seed)
    return rng.normal(0, scale, (n_vis, n_hid)), rng.normal(0, 0.5, n_vis), rng.normal(0, 0.5, n_hid)


def tgb_setup(seed, n_vis=5, n_hid=3, scale=0.6):
    rng = np.random.default_rng(seed)
    W = rng.normal(0, scale, (n_vis, n_hid))
    vis = Layer("truncated_gauss_bernoulli", rng.normal(0, 1, n_vis), rng.uniform(-1, 4, n_vis),
                rng.uniform(0.2, 0.8, n_vis), 0.0, 1.0)
    hid = Layer("bernoulli", rng.normal(0, 0.5, n_hid))
    X = rng.random((9, n_vis)) * (rng.random((9, n_vis)) < 0.6)
    return W, vis, hid, X


# ------------------------------------------------------------ elementwise kernels


def test_vectorised_exp_matches_numpy():
    rng = np.random.default_rng(0)
    y = -np.abs(np.concatenate([rng.normal(0, 3, 20000), rng.uniform(-708, 0, 5000), [0.0, -1e-300, -708.0]]))
    out, work = np.empty_like(y), np.empty_like(y)
    kernels.exp_nonpositive(y, out, work)
    np.testing.assert_allclose(out, np.exp(y), rtol=4e-16, atol=0)
    # below the floor it returns exp(-708), i.e. 0 to within 3e-308
    tail = np.array([-709.0, -1000.0, -np.inf])
    out, work = np.empty(3), np.empty(3)
    kernels.exp_nonpositive(tail, out, work)
    assert np.all(out == out[0]) and out[0] == pytest.approx(math.exp(-708.0), rel=4e-16)


def test_bench_reference_agrees_with_the_engine():
    """The NumPy implementation the benchmark races against computes the same sweeps."""
    from boltzlab.engine.experiments.bench_tap import numpy_tap_sweeps

    W, b_vis, b_hid = binary_rbm(30, 12, 4, 0.5)
    init = (np.random.default_rng(1).random((9, 30)) < 0.4).astype(float)
    av, cv, ah, ch, change = numpy_tap_sweeps(W, b_vis, b_hid, init, 7)
    res = T.tap_fixed_points(W, b_vis, b_hid, init, tol=0.0, max_iter=7)
    for got, want in zip((res.a_vis, res.c_vis, res.a_hid, res.c_hid), (av, cv, ah, ch)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    ref = ref_algorithm1(W, Layer("bernoulli", b_vis), Layer("bernoulli", b_hid), init, np.zeros_like(init), max_iter=7)
    np.testing.assert_allclose(av, ref[0], rtol=1e-12, atol=1e-15)


def test_bench_run_reports_rates_for_each_layer_size():
    from boltzlab.engine.experiments.bench_tap import run

    out = run(hidden=(6,), K=5, n_sweeps=3, repeats=1, threads=1)
    (row,) = out["rows"]
    assert row["n_hidden"] == 6 and row["n_visible"] == 784 and row["K"] == 5
    for key in ("engine_sweeps_per_s", "numpy_sweeps_per_s", "ratio", "matmul_gflops", "fraction_of_matmul"):
        assert math.isfinite(row[key]) and row[key] > 0, key
    assert row["max_abs_difference"] < 1e-12


# ------------------------------------------------------------ Algorithm 1 kernel


@pytest.mark.parametrize("kinds", [("bernoulli", "bernoulli"), ("spin", "spin"),
                                   ("truncated_gauss_bernoulli", "bernoulli"), ("truncated_gaussian", "truncated_gaussian")])
@pytest.mark.parametrize("damping", [0.0, 0.3])
def test_tap_iterate_matches_numpy_reference_sweep_for_sweep(kinds, damping):
    """tol = 0: every chain runs max_iter sweeps; moments must agree with the NumPy loop."""
    rng = np.random.default_rng(1)
    n_vis, n_hid, K = 7, 4, 5
    W = rng.normal(0, 0.7, (n_vis, n_hid))
    vis = Layer(kinds[0], rng.normal(0, 1, n_vis), rng.uniform(-2, 3, n_vis), rng.uniform(0.1, 0.9, n_vis), -0.5, 1.0)
    hid = Layer(kinds[1], rng.normal(0, 1, n_hid), rng.uniform(-2, 3, n_hid), rng.uniform(0.1, 0.9, n_hid), -0.5, 1.0)
    init = rng.uniform(-0.5, 1.0, (K, n_vis))
    field = rng.normal(0, 1, (K, n_vis))
    res = T.tap_fixed_points(W, vis.U, hid.U, init, prior_vis=vis.prior(), prior_hid=hid.prior(), field_vis=field,
                             damping=damping, tol=0.0, max_iter=6)
    ref = ref_algorithm1(W, vis, hid, init, np.zeros_like(init), field, damping, 0.0, 6)
    for got, want in zip((res.a_vis, res.c_vis, res.a_hid, res.c_hid), ref[:4]):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert np.all(res.iterations == 6) and not res.converged.any()


def test_each_chain_stops_at_its_own_convergence():
    """Retired chains keep the moments of the sweep where they converged, as if run alone."""
    W, b_vis, b_hid = binary_rbm(9, 6, 3, 0.8)
    rng = np.random.default_rng(4)
    init = (rng.random((12, 9)) < 0.5).astype(float)
    res = T.tap_fixed_points(W, b_vis, b_hid, init, tol=1e-10, max_iter=200)
    ref = ref_algorithm1(W, Layer("bernoulli", b_vis), Layer("bernoulli", b_hid), init, np.zeros_like(init),
                         tol=1e-10, max_iter=200)
    np.testing.assert_array_equal(res.iterations, ref[4])
    np.testing.assert_array_equal(res.converged, ref[5])
    assert res.converged.all() and len(set(res.iterations)) > 1  # chains retire at different sweeps
    for got, want in zip((res.a_vis, res.c_vis, res.a_hid, res.c_hid), ref[:4]):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    # one chain alone gives the same result as inside the batch
    alone = T.tap_fixed_points(W, b_vis, b_hid, init[5:6], tol=1e-10, max_iter=200)
    np.testing.assert_allclose(alone.a_vis[0], res.a_vis[5], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kinds", [("bernoulli", "bernoulli"), ("spin", "spin"), ("truncated_gauss_bernoulli", "bernoulli"),
                                   ("truncated_gaussian", "spin")])
def test_fixed_points_satisfy_the_self_consistency_equations(kinds):
    """At convergence a = f_a(B, A), c = f_c(B, A) with A, B from eqs. 33-34 (eq. 35)."""
    rng = np.random.default_rng(7)
    n_vis, n_hid = 12, 8
    W = rng.normal(0, 0.4, (n_vis, n_hid))
    vis = Layer(kinds[0], rng.normal(0, 1, n_vis), rng.uniform(-1, 3, n_vis), rng.uniform(0.2, 0.8, n_vis), -1.0, 1.0)
    hid = Layer(kinds[1], rng.normal(0, 1, n_hid), rng.uniform(-1, 3, n_hid), rng.uniform(0.2, 0.8, n_hid), -1.0, 1.0)
    init = T.random_init(10, n_vis, 3, vis.prior())
    res = T.tap_fixed_points(W, vis.U, hid.U, init, prior_vis=vis.prior(), prior_hid=hid.prior(), tol=1e-24, max_iter=5000)
    assert res.converged.all()
    A_h = -res.c_vis @ W**2
    B_h = A_h * res.a_hid + res.a_vis @ W
    A_v = -res.c_hid @ (W**2).T
    B_v = A_v * res.a_vis + res.a_hid @ W.T
    for (a, c), (B, A, layer) in (((res.a_hid, res.c_hid), (B_h, A_h, hid)), ((res.a_vis, res.c_vis), (B_v, A_v, vis))):
        fa, fc = layer.moments(B, A)
        np.testing.assert_allclose(a, fa, atol=1e-10)
        np.testing.assert_allclose(c, fc, atol=1e-10)


def test_field_vis_acts_as_a_shift_of_the_visible_bias():
    """A visible field D (eq. 47's D_i) gives the fixed point and free energy of the RBM with U + D."""
    W, b_vis, b_hid = binary_rbm(8, 5, 2, 0.6)
    D = np.random.default_rng(0).normal(0, 2, 8)
    init = (np.random.default_rng(1).random((4, 8)) < 0.5).astype(float)
    with_field = T.tap_fixed_points(W, b_vis, b_hid, init, field_vis=np.tile(D, (4, 1)), tol=1e-20)
    shifted = T.tap_fixed_points(W, b_vis + D, b_hid, init, tol=1e-20)
    np.testing.assert_allclose(with_field.a_vis, shifted.a_vis, rtol=1e-12, atol=1e-13)
    F1 = T.tap_free_energy(W, b_vis, b_hid, with_field, field_vis=np.tile(D, (4, 1)))
    F2 = T.tap_free_energy(W, b_vis + D, b_hid, shifted)
    np.testing.assert_allclose(F1, F2, rtol=1e-12)


# ------------------------------------------------------------ free energy, log Z


@pytest.mark.parametrize("kinds", [("bernoulli", "bernoulli"), ("spin", "bernoulli"), ("truncated_gauss_bernoulli", "bernoulli"),
                                   ("truncated_gaussian", "truncated_gauss_bernoulli")])
def test_free_energy_kernel_matches_numpy_eq36(kinds):
    """Any moments (not only fixed points): the kernel evaluates eq. 36 as written."""
    rng = np.random.default_rng(2)
    n_vis, n_hid, K = 6, 4, 7
    W = rng.normal(0, 0.8, (n_vis, n_hid))
    vis = Layer(kinds[0], rng.normal(0, 1, n_vis), rng.uniform(-1, 3, n_vis), rng.uniform(0.2, 0.8, n_vis), -1.0, 1.0)
    hid = Layer(kinds[1], rng.normal(0, 1, n_hid), rng.uniform(-1, 3, n_hid), rng.uniform(0.2, 0.8, n_hid), -1.0, 1.0)
    av, ah = rng.uniform(-0.9, 0.9, (K, n_vis)), rng.uniform(-0.9, 0.9, (K, n_hid))
    cv, ch = rng.uniform(0, 0.3, (K, n_vis)), rng.uniform(0, 0.3, (K, n_hid))
    field = rng.normal(0, 1, (K, n_vis))
    res = T.TAPResult(av, cv, ah, ch, np.ones(K, int), np.ones(K, bool))
    got = T.tap_free_energy(W, vis.U, hid.U, res, prior_vis=vis.prior(), prior_hid=hid.prior(), field_vis=field)
    np.testing.assert_allclose(got, ref_free_energy(W, vis, hid, av, cv, ah, ch, field), rtol=1e-12)


def test_tap_log_partition_is_exact_for_zero_weights_and_close_for_small_ones():
    W, b_vis, b_hid = binary_rbm(10, 7, 5, 1.0)
    init = (np.random.default_rng(0).random((8, 10)) < 0.5).astype(float)
    exact0 = R.log_partition_exact(np.zeros_like(W), b_vis, b_hid)
    assert T.tap_log_partition(np.zeros_like(W), b_vis, b_hid, init) == pytest.approx(exact0, abs=1e-12)
    small = 0.01 * W
    assert abs(T.tap_log_partition(small, b_vis, b_hid, init) - R.log_partition_exact(small, b_vis, b_hid)) < 1e-6


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tap_log_z_error_falls_like_the_cube_of_the_weight_scale(seed):
    """TAP is the second-order Plefka expansion, so |log Z_TAP - log Z| = O(s^3) for W = s W0.

    The s^3 coefficient is a sum over edges of W_ij^3 times third cumulants of both units;
    with positive-mean weights and biases (units mostly on) it cannot cancel, so the s^4
    terms cannot mask it.  Fit the slope of log error vs log s over s in [0.005, 0.05].
    """
    rng = np.random.default_rng(seed)
    W0, b_vis, b_hid = rng.normal(0.5, 1, (9, 6)), rng.normal(1.0, 0.5, 9), rng.normal(1.0, 0.5, 6)
    init = (rng.random((6, 9)) < 0.5).astype(float)
    scales = np.geomspace(0.005, 0.05, 6)
    errors = [abs(T.tap_log_partition(s * W0, b_vis, b_hid, init) - R.log_partition_exact(s * W0, b_vis, b_hid))
              for s in scales]
    slope = np.polyfit(np.log(scales), np.log(errors), 1)[0]
    assert 2.85 < slope < 3.2, (slope, errors)


def test_spin_tap_log_z_against_enumeration():
    """The same cube law for {-1, +1} units (an independent check of the spin prior)."""
    rng = np.random.default_rng(3)
    W0, b, c = rng.normal(0.5, 1, (5, 4)), rng.normal(0.7, 0.3, 5), rng.normal(0.7, 0.3, 4)
    Xs, Hs = all_states(5, (-1.0, 1.0)), all_states(4, (-1.0, 1.0))
    errors = []
    scales = np.geomspace(0.005, 0.05, 5)
    for s in scales:
        neg = Xs @ (s * W0) @ Hs.T + (Xs @ b)[:, None] + (Hs @ c)[None, :]
        exact = scipy.special.logsumexp(neg)
        res = T.tap_fixed_points(s * W0, b, c, T.random_init(4, 5, 0, "spin"), prior_vis="spin", prior_hid="spin", tol=1e-28)
        u = T.unique_solutions(s * W0, b, c, res, prior_vis="spin", prior_hid="spin")
        errors.append(abs(u.log_partition - exact))
    slope = np.polyfit(np.log(scales), np.log(errors), 1)[0]
    assert 2.85 < slope < 3.2, (slope, errors)


# -------------------------------------------------------- likelihood and gradient


def test_fields_and_nonzero_kernels_match_numpy():
    """eqs. 33-34 for (B, A) of both layers, and P_Q[x != 0] (eq. 95) layer-wide."""
    W, vis, hid, X = tgb_setup(4)
    rng = np.random.default_rng(0)
    av, cv, ah, ch = rng.random((3, 5)), 0.1 * rng.random((3, 5)), rng.random((3, 3)), 0.2 * rng.random((3, 3))
    Bv, Av, Bh, Ah = kernels.tap_fields(W, av, cv, ah, ch)
    np.testing.assert_allclose(Ah, -cv @ W**2, rtol=1e-13)
    np.testing.assert_allclose(Bh, Ah * ah + av @ W, rtol=1e-13)
    np.testing.assert_allclose(Av, -ch @ (W**2).T, rtol=1e-13)
    np.testing.assert_allclose(Bv, Av * av + ah @ W.T, rtol=1e-13)
    nz = kernels.layer_nonzero(T.PRIOR_CODES[vis.kind], Bv, Av, vis.U, vis.V, vis.rho, vis.lo, vis.hi)
    code = T.PRIOR_CODES[vis.kind]
    for k, i in np.ndindex(nz.shape):
        lz, mu, _ = kernels.trunc_gauss(Bv[k, i] + vis.U[i], Av[k, i] + vis.V[i], vis.lo, vis.hi)
        slab = vis.rho[i] * math.exp(lz)
        assert nz[k, i] == pytest.approx(slab / (1 - vis.rho[i] + slab), rel=1e-12)
        # and the Gauss-Bernoulli mean is P[x != 0] times the slab's mean (eq. 97)
        fa = kernels.prior_moments(code, Bv[k, i], Av[k, i], vis.U[i], vis.V[i], vis.rho[i], vis.lo, vis.hi)[1]
        assert fa == pytest.approx(nz[k, i] * mu, rel=1e-12)


def test_data_term_is_minus_the_rbm_free_energy_for_binary_units():
    W, b_vis, b_hid = binary_rbm(8, 5, 1, 1.0)
    X = (np.random.default_rng(2).random((20, 8)) < 0.5).astype(float)
    vis, hid = T._layer("bernoulli", b_vis, "v", "t"), T._layer("bernoulli", b_hid, "h", "t")
    logp, Ha, Hc, Hnz = kernels.data_terms(X, W, *vis, *hid)
    np.testing.assert_allclose(logp, -R.RBM(W, b_vis, b_hid).free_energy(X), rtol=1e-12)
    np.testing.assert_allclose(Ha, scipy.special.expit(X @ W + b_hid), rtol=1e-12)
    np.testing.assert_allclose(Hc, Ha * (1 - Ha), rtol=1e-10)
    assert np.all(Hnz == 1.0)


def test_data_term_for_gauss_bernoulli_visibles():
    W, vis, hid, X = tgb_setup(0)
    logp = kernels.data_terms(X, W, *T._layer(vis.prior(), vis.U, "v", "t"), *T._layer(hid.prior(), hid.U, "h", "t"))[0]
    dens = np.where(X == 0, np.log1p(-vis.rho), np.log(vis.rho) + vis.U * X - 0.5 * vis.V * X**2).sum(1)
    np.testing.assert_allclose(logp, dens + np.logaddexp(0, X @ W + hid.U).sum(1), rtol=1e-12)


def test_tap_log_likelihood_is_data_term_plus_mean_free_energy():
    W, b_vis, b_hid = binary_rbm(8, 5, 1, 0.7)
    X = (np.random.default_rng(2).random((20, 8)) < 0.5).astype(float)
    u = T.unique_solutions(W, b_vis, b_hid, T.tap_fixed_points(W, b_vis, b_hid, X, tol=1e-20))
    want = np.mean(-R.RBM(W, b_vis, b_hid).free_energy(X)) + np.mean(u.free_energies)
    assert T.tap_log_likelihood(W, b_vis, b_hid, X, u) == pytest.approx(want, rel=1e-12)


def test_gradient_kernel_matches_numpy_eqs_40_42():
    rng = np.random.default_rng(5)
    M, S, n_vis, n_hid = 11, 4, 6, 3
    X = rng.random((M, n_vis)) * (rng.random((M, n_vis)) < 0.5)
    Ha, Hc, Hnz = rng.random((M, n_hid)), rng.random((M, n_hid)) * 0.2, rng.random((M, n_hid))
    av, cv, ah, ch = rng.random((S, n_vis)), rng.random((S, n_vis)) * 0.2, rng.random((S, n_hid)), rng.random((S, n_hid)) * 0.2
    nzv, nzh = rng.random((S, n_vis)), rng.random((S, n_hid))
    W, Rv, Rh = rng.normal(0, 1, (n_vis, n_hid)), rng.uniform(0.1, 0.9, n_vis), rng.uniform(0.1, 0.9, n_hid)
    got = kernels.tap_gradient(X, Ha, Hc, Hnz, av, cv, ah, ch, nzv, nzh, W, Rv, Rh)
    want = (X.T @ Ha / M - (av.T @ ah + W * (cv.T @ ch)) / S,
            X.mean(0) - av.mean(0), -0.5 * ((X**2).mean(0) - (cv + av**2).mean(0)),
            ((X != 0).mean(0) - nzv.mean(0)) / (Rv * (1 - Rv)),
            Ha.mean(0) - ah.mean(0), -0.5 * ((Hc + Ha**2).mean(0) - (ch + ah**2).mean(0)),
            (Hnz.mean(0) - nzh.mean(0)) / (Rh * (1 - Rh)))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


def _tap_ll(W, vis, hid, X, init):
    res = T.tap_fixed_points(W, vis.U, hid.U, init, prior_vis=vis.prior(), prior_hid=hid.prior(), tol=1e-28, max_iter=20000)
    assert res.converged.all()
    u = T.unique_solutions(W, vis.U, hid.U, res, prior_vis=vis.prior(), prior_hid=hid.prior())
    return T.tap_log_likelihood(W, vis.U, hid.U, X, u, prior_vis=vis.prior(), prior_hid=hid.prior()), u


@pytest.mark.parametrize("case", ["binary", "gauss_bernoulli"])
def test_tap_gradient_matches_finite_differences_of_the_tap_log_likelihood(case):
    """Eqs. 40-42: the TAP free energy is stationary at the fixed point, so the explicit
    derivatives are the total ones; checked by central differences (solutions re-solved)."""
    if case == "binary":
        W, b_vis, b_hid = binary_rbm(7, 4, 8, 0.6)
        vis, hid = Layer("bernoulli", b_vis), Layer("bernoulli", b_hid)
        X = (np.random.default_rng(1).random((15, 7)) < 0.5).astype(float)
    else:
        W, vis, hid, X = tgb_setup(3)
    init = X[:5]
    _, u = _tap_ll(W, vis, hid, X, init)
    g = T.tap_gradient(W, vis.U, hid.U, X, u, prior_vis=vis.prior(), prior_hid=hid.prior())
    h = 1e-5
    rng = np.random.default_rng(0)
    targets = [("W", (int(i), int(j))) for i, j in zip(rng.integers(0, W.shape[0], 4), rng.integers(0, W.shape[1], 4))]
    targets += [("b_vis", (1,)), ("b_hid", (2,))]
    if case == "gauss_bernoulli":
        targets += [("precision_vis", (0,)), ("precision_vis", (3,)), ("rho_vis", (2,)), ("rho_vis", (4,))]
    for name, idx in targets:
        values = []
        for sign in (1, -1):
            W2, v2, h2 = W.copy(), Layer(vis.kind, vis.U.copy(), vis.V.copy(), vis.rho.copy(), vis.lo, vis.hi), hid
            arr = {"W": W2, "b_vis": v2.U, "b_hid": None, "precision_vis": v2.V, "rho_vis": v2.rho}[name]
            if name == "b_hid":
                h2 = Layer(hid.kind, hid.U.copy())
                arr = h2.U
            arr[idx] += sign * h
            values.append(_tap_ll(W2, v2, h2, X, init)[0])
        fd = (values[0] - values[1]) / (2 * h)
        assert g[name][idx] == pytest.approx(fd, rel=1e-5, abs=1e-7), (name, idx)


# ------------------------------------------------------------ unique solutions


def ref_components(X, tol):
    """Connected components (max-abs distance <= tol) by breadth-first search over all pairs."""
    n = len(X)
    D = np.abs(X[:, None, :] - X[None, :, :]).max(-1) <= tol
    label = -np.ones(n, int)
    for s in range(n):
        if label[s] >= 0:
            continue
        label[s] = s
        stack = [s]
        while stack:
            i = stack.pop()
            for j in np.flatnonzero(D[i] & (label < 0)):
                label[j] = s
                stack.append(j)
    return label


@given(st.integers(1, 6), st.integers(1, 40), st.integers(0, 10**6), st.floats(1e-4, 0.3))
def test_cluster_roots_matches_breadth_first_search(n_centres, n_rows, seed, spread):
    rng = np.random.default_rng(seed)
    centres = rng.random((n_centres, 5))
    X = centres[rng.integers(0, n_centres, n_rows)] + rng.normal(0, spread, (n_rows, 5))
    got = kernels.cluster_roots(np.ascontiguousarray(X), 0.1)
    want = ref_components(X, 0.1)
    # same partition: equal labels exactly where the reference has equal labels
    np.testing.assert_array_equal(got[:, None] == got[None, :], want[:, None] == want[None, :])


@given(st.integers(1, 5), st.integers(0, 10**6))
@settings(max_examples=15)
def test_unique_solution_count_is_invariant_to_chain_order_and_duplicates(n_solutions, seed):
    """Shuffling the chains or repeating some changes neither the solutions nor their count."""
    rng = np.random.default_rng(seed)
    W, b_vis, b_hid = binary_rbm(6, 4, seed % 97, 1.0)
    K = 12
    centres = rng.random((n_solutions, 10))
    pick = rng.integers(0, n_solutions, K)
    X = centres[pick] + rng.uniform(-1e-3, 1e-3, (K, 10))  # well inside DEFAULT_UNIQUE_TOL of a centre
    conv = rng.random(K) < 0.8
    conv[0] = True

    def make(rows):
        return T.TAPResult(X[rows, :6], 0.2 * X[rows, :6], X[rows, 6:], 0.1 * X[rows, 6:], np.ones(len(rows), int), conv[rows])

    base = T.unique_solutions(W, b_vis, b_hid, make(np.arange(K)))
    assert base.count == len(set(pick[conv]))
    perm = rng.permutation(K)
    dup = np.concatenate([perm, rng.integers(0, K, 7)])
    for rows in (perm, dup):
        other = T.unique_solutions(W, b_vis, b_hid, make(rows))
        assert other.count == base.count
        np.testing.assert_array_equal(other.free_energies, base.free_energies)
        np.testing.assert_array_equal(other.a_vis, base.a_vis)
        # every chain keeps its solution
        for pos, row in enumerate(rows):
            assert other.labels[pos] == base.labels[row]
    assert base.unique_fraction == base.count / K
    assert base.helmholtz_free_energy == pytest.approx(np.mean(base.free_energies))
    assert base.counts.sum() == conv.sum()


def test_unique_solutions_skip_unconverged_and_non_finite_chains():
    W, b_vis, b_hid = binary_rbm(6, 4, 0, 0.5)
    res = T.tap_fixed_points(W, b_vis, b_hid, T.random_init(5, 6, 0), tol=1e-20)
    a_vis = res.a_vis.copy()
    a_vis[1, 2] = np.nan
    conv = res.converged.copy()
    conv[3] = False
    u = T.unique_solutions(W, b_vis, b_hid, T.TAPResult(a_vis, res.c_vis, res.a_hid, res.c_hid, res.iterations, conv))
    assert u.n_converged == 3 and u.count == 1
    np.testing.assert_array_equal(u.labels, [0, -1, 0, -1, 0])
    assert np.all(np.isfinite(u.free_energies))


def test_unique_solutions_of_a_strongly_coupled_rbm_are_distinct_fixed_points():
    """A Mattis RBM (W = beta s_v s_h^T, biases making it symmetric under x -> 1 - x) has two
    TAP solutions, the pattern and its mirror image: each converged chain is within tol of
    its representative, representatives are farther apart than tol."""
    rng = np.random.default_rng(0)
    sv, sh = rng.choice([-1.0, 1.0], 12), rng.choice([-1.0, 1.0], 8)
    W = 0.8 * np.outer(sv, sh)
    b_vis, b_hid = -0.5 * W.sum(1), -0.5 * W.sum(0)
    init = T.random_init(60, 12, 1)
    res = T.tap_fixed_points(W, b_vis, b_hid, init, tol=1e-14, max_iter=5000)
    u = T.unique_solutions(W, b_vis, b_hid, res)
    assert u.count == 2 and u.counts.min() > 10
    np.testing.assert_allclose(u.a_vis[0], 1 - u.a_vis[1], atol=1e-6)
    assert u.free_energies[0] == pytest.approx(u.free_energies[1], rel=1e-9)
    reps = np.hstack([u.a_vis, u.a_hid])
    chains = np.hstack([res.a_vis, res.a_hid])
    for k in np.flatnonzero(u.labels >= 0):
        assert np.abs(chains[k] - reps[u.labels[k]]).max() <= 1e-6
    gaps = [np.abs(reps[i] - reps[j]).max() for i in range(u.count) for j in range(i)]
    assert min(gaps) > u.tol
    assert np.all(np.diff(u.free_energies) >= 0)


# --------------------------------------------------------------------- trainer


@pytest.fixture(scope="module")
def digits_train():
    return digits().X_train.astype(np.float64)


def test_trainer_follows_the_protocol_and_records_what_it_promises(digits_train):
    tr = T.TAPTrainer(digits_train[:200], 12, batch_size=25, n_chains=25, max_epochs=1, seed=3)
    assert isinstance(tr, Trainer)
    rec = tr.step()
    for key in ("iteration", "epoch", "tap_log_likelihood", "n_solutions", "helmholtz_free_energy", "wall_time",
                "log_likelihood"):
        assert key in rec.scalars and isinstance(rec[key], (int, float)), key
    for key in ("W", "b_vis", "b_hid", "solution_free_energies", "solutions_vis", "solutions_hid"):
        assert isinstance(rec[key], np.ndarray), key
    assert rec["solutions_vis"].shape == (rec["n_solutions"], 64)
    assert rec["solutions_hid"].shape == (rec["n_solutions"], 12)
    assert rec["solution_free_energies"].shape == (rec["n_solutions"],)
    assert rec["iteration"] == 1 and rec["epoch"] == pytest.approx(1 / 8)
    # the exact log-likelihood is normalised like the TAP one: per unit, mean over eval rows
    W, b_vis, b_hid = rec["W"], rec["b_vis"], rec["b_hid"]
    ll = R.exact_log_likelihood(R.RBM(W, b_vis, b_hid), tr._V_eval) / (64 + 12)
    assert rec["log_likelihood"] == pytest.approx(ll, rel=1e-10)
    assert rec["helmholtz_free_energy"] == pytest.approx(np.mean(rec["solution_free_energies"]))
    records = tr.run()
    assert tr.done and tr.status == "max_epochs" and records[-1]["iteration"] == 8
    with pytest.raises(RuntimeError, match="done"):
        tr.step()


def test_trainer_epoch_steps_and_steps_k(digits_train):
    tr = T.TAPTrainer(digits_train[:120], 6, batch_size=50, n_chains=10, step_unit="epoch", max_epochs=3)
    recs = tr.steps(5)
    assert [r["iteration"] for r in recs] == [3, 6, 9] and tr.done


def test_trainer_state_dict_round_trip_resumes_bit_exactly(digits_train):
    kwargs = dict(batch_size=30, n_chains=40, learning_rate=0.05, init_scale=0.05, max_epochs=5, seed=9)
    V = digits_train[:150]
    straight = T.TAPTrainer(V, 10, **kwargs)
    straight.steps(7)
    resumed = T.TAPTrainer(V, 10, **kwargs)
    resumed.steps(3)
    state = through_npz(resumed)
    fresh = T.TAPTrainer(V, 10, **kwargs)
    fresh.load_state_dict(state)
    rec_fresh = fresh.steps(4)[-1]
    rec_straight_state = straight.state_dict()
    for key, value in fresh.state_dict().items():
        if key == "elapsed":
            continue
        np.testing.assert_array_equal(np.asarray(value), np.asarray(rec_straight_state[key]), err_msg=key)
    assert rec_fresh["iteration"] == 7
    other = T.TAPTrainer(V, 11, **kwargs)
    with pytest.raises(ValueError, match="n_hidden"):
        other.load_state_dict(straight.state_dict())


def test_batches_per_step_trains_the_same_batches_with_fewer_evaluations(digits_train):
    kwargs = dict(batch_size=20, n_chains=15, learning_rate=0.05, init_scale=0.05, max_epochs=1, seed=4)
    V = digits_train[:140]  # 7 batches per epoch
    one = T.TAPTrainer(V, 8, **kwargs)
    by_one = one.run()
    three = T.TAPTrainer(V, 8, batches_per_step=3, **kwargs)
    by_three = three.run()
    assert [r["iteration"] for r in by_three] == [3, 6, 7]  # the last step stops at the epoch limit
    for r in by_three:
        same = by_one[r["iteration"] - 1]
        np.testing.assert_array_equal(r["W"], same["W"])
        assert r["tap_log_likelihood"] == same["tap_log_likelihood"]
    with pytest.raises(ValueError, match="batches_per_step"):
        T.TAPTrainer(V, 8, batches_per_step=0)


def test_a_stalled_batch_is_redone_with_more_damping_when_allowed(digits_train):
    """Large weights make undamped TAP iterations oscillate (no chain converges in 200
    sweeps); with max_damping the trainer raises the damping and goes on, and a resumed
    trainer continues with the raised damping."""
    kwargs = dict(batch_size=20, n_chains=20, learning_rate=1e-6, init_scale=2.0, max_iter=200, max_epochs=1, seed=0)
    V = digits_train[:100]
    plain = T.TAPTrainer(V, 10, **kwargs)
    plain.step()
    assert plain.status == "stalled" and "damping" in plain.message
    rescued = T.TAPTrainer(V, 10, max_damping=0.95, **kwargs)
    rec = rescued.step()
    assert rescued.status == "running" and rec["n_solutions"] >= 1
    assert 0 < rec["damping"] <= 0.95 and rescued.damping_changes[-1] == (0, rec["damping"])
    assert [d for _, d in rescued.damping_changes] == sorted(d for _, d in rescued.damping_changes)
    resumed = T.TAPTrainer(V, 10, max_damping=0.95, **kwargs)
    resumed.load_state_dict(rescued.state_dict())
    assert resumed.damping == rescued.damping
    with pytest.raises(ValueError, match="max_damping"):
        T.TAPTrainer(V, 10, max_damping=1.5)


def test_tap_training_increases_the_tap_log_likelihood(digits_train):
    """Algorithm 2 on the 8x8 digits: after 6 epochs the per-unit TAP log-likelihood on the
    evaluation rows has risen well above its start (and the exact one with it: Nh = 16)."""
    tr = T.TAPTrainer(digits_train, 16, batch_size=20, n_chains=20, learning_rate=0.05, init_scale=0.01,
                      step_unit="epoch", max_epochs=6, n_eval=200, seed=0)
    first = tr.step()
    last = tr.run()[-1]
    assert last["tap_log_likelihood"] > first["tap_log_likelihood"] + 0.02
    assert last["log_likelihood"] > first["log_likelihood"] + 0.02


def test_trainer_learns_a_gauss_bernoulli_visible_prior():
    """Real-valued data in [0, 1] with exact zeros (like real-MNIST): the TGB prior's
    parameters move and the TAP log-likelihood rises."""
    from sklearn.datasets import load_digits

    X = load_digits().data[:400] / 16.0
    tr = T.TAPTrainer(X, 8, prior_vis="truncated_gauss_bernoulli", batch_size=40, n_chains=20, learning_rate=0.02,
                      init_scale=0.01, step_unit="epoch", max_epochs=4, n_eval=100, seed=1)
    first = tr.step()
    last = tr.run()[-1]
    assert "rho_vis" in last.arrays and "precision_vis" in last.arrays
    assert np.all((last["rho_vis"] > 0) & (last["rho_vis"] < 1))
    assert last["tap_log_likelihood"] > first["tap_log_likelihood"]


@pytest.mark.parametrize("kwargs,match", [
    (dict(n_hidden=0), "n_hidden"), (dict(prior_vis="gauss"), "prior_vis"), (dict(learning_rate=0.0), "learning_rate"),
    (dict(damping=1.0), "damping"), (dict(step_unit="sweep"), "step_unit"), (dict(init="zeros"), "init"),
    (dict(bounds=(1.0, 0.0)), "bounds"), (dict(n_chains=0), "n_chains"),
])
def test_trainer_rejects_bad_arguments_by_name(kwargs, match):
    V = (np.random.default_rng(0).random((20, 5)) < 0.5).astype(float)
    args = dict(n_hidden=3) | kwargs
    with pytest.raises(ValueError, match=match):
        T.TAPTrainer(V, args.pop("n_hidden"), **args)


def test_trainer_rejects_data_that_the_visible_prior_cannot_hold():
    X = np.random.default_rng(0).random((20, 5))
    with pytest.raises(ValueError, match="only 0 and 1"):
        T.TAPTrainer(X, 3)
    with pytest.raises(ValueError, match=r"values in \[0, 0.5\]"):
        T.TAPTrainer(X, 3, prior_vis="truncated_gaussian", bounds=(0.0, 0.5))
    with pytest.raises(ValueError, match="only -1 and \\+1"):
        T.TAPTrainer(np.zeros((4, 3)), 2, prior_vis="spin")


def test_inference_arguments_are_validated():
    W, b_vis, b_hid = binary_rbm(4, 3, 0, 1.0)
    with pytest.raises(ValueError, match="init_vis"):
        T.tap_fixed_points(W, b_vis, b_hid, np.zeros((2, 5)))
    with pytest.raises(ValueError, match="field_vis"):
        T.tap_fixed_points(W, b_vis, b_hid, np.zeros((2, 4)), field_vis=np.zeros((3, 4)))
    with pytest.raises(ValueError, match="tol"):
        T.tap_fixed_points(W, b_vis, b_hid, np.zeros((2, 4)), tol=-1.0)
    with pytest.raises(ValueError, match="b_vis"):
        T.tap_fixed_points(W, b_vis[:3], b_hid, np.zeros((2, 4)))


def test_random_init_is_seeded_and_in_range():
    a = T.random_init(30, 7, 4, "spin")
    np.testing.assert_array_equal(a, T.random_init(30, 7, 4, "spin"))
    assert a.min() >= -1 and a.max() <= 1 and a.min() < -0.5
    b = T.random_init(30, 7, 4, T.Prior("truncated_gaussian", bounds=(2.0, 3.0)))
    assert b.min() >= 2.0 and b.max() <= 3.0


def test_tap_log_partition_raises_when_nothing_converges():
    W, b_vis, b_hid = binary_rbm(12, 8, 11, 3.0)
    with pytest.raises(RuntimeError, match="converged"):
        T.tap_log_partition(W, b_vis, b_hid, T.random_init(5, 12, 0), max_iter=2)
