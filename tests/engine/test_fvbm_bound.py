"""The quadratic-bound MPLE (engine.fvbm_bound): the closed form against Algorithm 1, the
majorization, monotone MM, the MPLE it reaches, the kernel against plain NumPy, input
validation and checkpoints."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from boltzlab.engine import bound as B
from boltzlab.engine.fvbm import (
    FVBM, FVBMTrainer, _hessian, log_pl_gradient, log_pseudo_likelihood, mple, pack_theta,
    unpack_theta,
)
from boltzlab.engine.fvbm_bound import (
    BoundMPLETrainer, LBFGSMPLETrainer, bound_curvature, curvature_matrix, warm_up_fvbm_bound,
)
from boltzlab.engine import fvbm_bound
from boltzlab.engine.kernels import fvbm_bound as kernels
from boltzlab.engine.stepping import Trainer, load_state, save_state


@pytest.fixture(scope="module", autouse=True)
def _warm():
    warm_up_fvbm_bound()


# ------------------------------------------------------------ plain-NumPy references


def term_features(x: np.ndarray, i: int) -> np.ndarray:
    """a_ni in the packed theta = (b, triu(M)) order: u_i = a^T theta."""
    d = x.shape[0]
    q = d + d * (d - 1) // 2
    a = np.zeros(q)
    a[i] = 1.0
    iu = np.triu_indices(d, 1)
    for p, (j, k) in enumerate(zip(*iu)):
        if j == i:
            a[d + p] = x[k]
        elif k == i:
            a[d + p] = x[j]
    return a


def ref_curvature_matrix(X, b, M, w):
    """Sigma = sum_n w_n sum_i c(u_ni) a_ni a_ni^T, term by term, c(u) = tanh(u) / u."""
    n, d = X.shape
    q = d + d * (d - 1) // 2
    U = X @ M + b
    Sigma = np.zeros((q, q))
    for r in range(n):
        for i in range(d):
            u = U[r, i]
            c = 1.0 if u == 0 else math.tanh(u) / u
            a = term_features(X[r], i)
            Sigma += w[r] * c * np.outer(a, a)
    return Sigma


def neg_log_pl(X, theta, w=None):
    """-P_n (eq. 2.1) in plain NumPy."""
    d = X.shape[1]
    b, M = unpack_theta(theta, d)
    U = X @ M + b
    terms = np.sum(X * U - np.logaddexp(U, -U), axis=1)
    return -float(terms.sum() if w is None else w @ terms)


@st.composite
def fvbm_data(draw, max_d=6, max_n=300):
    d = draw(st.integers(2, max_d))
    n = draw(st.integers(5, max_n))
    seed = draw(st.integers(0, 10_000))
    variance = draw(st.sampled_from([0.1, 0.5, 2.0]))
    return FVBM.random(d, seed, variance).sample(n, seed + 1), seed


def random_theta(rng, q, scale):
    return rng.normal(0.0, scale, q)


# ------------------------------------------------------------ closed form vs Algorithm 1


@given(st.one_of(st.just(0.0), st.floats(-1e-6, 1e-6), st.floats(-3.0, 3.0),
                 st.floats(-400.0, 400.0), st.sampled_from([1e-300, -5e-5, 2e-4, 30.0, -700.0])))
@settings(max_examples=120)
def test_closed_form_curvature_equals_compute_bound_scalar(u):
    """Two states f = -1, +1 (log Z = log 2 cosh u): Algorithm 1's Sigma is tanh(u)/u."""
    for F in (np.array([[-1.0], [1.0]]), np.array([[1.0], [-1.0]])):
        log_z, mu, Sigma = B.compute_bound(np.array([u]), F)
        assert Sigma[0, 0] == pytest.approx(bound_curvature(u), rel=1e-12, abs=1e-300)
        assert mu[0] == pytest.approx(math.tanh(u), rel=1e-12, abs=1e-15)
        assert log_z == pytest.approx(float(np.logaddexp(u, -u)), rel=1e-13)
    assert bound_curvature(0.0) == 1.0  # footnote 3's limit: 1/4 * |f2 - f1|^2 = 1


@given(st.integers(2, 6), st.integers(0, 10_000), st.sampled_from([0.0, 0.1, 1.0, 5.0, 60.0]))
@settings(max_examples=60)
def test_closed_form_curvature_equals_compute_bound_on_fvbm_terms(d, seed, scale):
    """One term of eq. 2.1, log(2 cosh a^T theta), as a two-state log-linear model with
    features -a, +a: compute_bound's Sigma is c(a^T theta) a a^T, and at theta = 0
    (u = 0) exactly a a^T.  Large |theta| (u in the hundreds) included."""
    rng = np.random.default_rng(seed)
    x = rng.choice([-1.0, 1.0], d)
    i = int(rng.integers(d))
    a = term_features(x, i)
    theta = random_theta(rng, a.size, scale)
    u = float(a @ theta)
    _, mu, Sigma = B.compute_bound(theta, np.stack([-a, a]))
    np.testing.assert_allclose(Sigma, bound_curvature(u) * np.outer(a, a), rtol=1e-11, atol=1e-300)
    np.testing.assert_allclose(mu, math.tanh(u) * a, rtol=1e-11, atol=1e-15)


def test_curvature_lies_between_the_hessian_and_bslm_bound():
    u = np.concatenate([[0.0, 1e-12, -1e-5], np.linspace(-50, 50, 1001), [-800.0, 1e6]])
    c = bound_curvature(u)
    assert np.all(c <= 1.0) and np.all(c > 0)
    assert np.all(c >= 1.0 / np.cosh(np.clip(u, -300, 300)) ** 2 - 1e-15)
    assert np.all(np.diff(bound_curvature(np.linspace(0, 50, 501))) < 0)  # decreasing in |u|


# ------------------------------------------------------------ the majorization


@given(fvbm_data(max_d=5, max_n=40), st.sampled_from([0.0, 0.3, 2.0, 20.0]), st.floats(0.01, 30.0))
@settings(max_examples=40)
def test_quadratic_majorizes_each_row_and_the_sum(data, scale_tilde, scale_step):
    """-log PL of each row, and of the data, lies below the quadratic built at theta~."""
    X, seed = data
    rng = np.random.default_rng(seed)
    d = X.shape[1]
    q = d + d * (d - 1) // 2
    tilde = random_theta(rng, q, scale_tilde)
    b, M = unpack_theta(tilde, d)
    total_bound = np.zeros(8)
    points = [tilde + random_theta(rng, q, scale_step) for _ in range(8)]
    totals = np.array([neg_log_pl(X, p) for p in points])
    for r in range(min(X.shape[0], 12)):
        row = X[r : r + 1]
        Sigma = curvature_matrix(row, b, M)
        grad = pack_theta(*log_pl_gradient(row, b, M))
        f0 = neg_log_pl(row, tilde)
        for k, p in enumerate(points):
            delta = p - tilde
            quad = f0 - grad @ delta + 0.5 * delta @ Sigma @ delta
            assert neg_log_pl(row, p) <= quad + 1e-9 * (1 + abs(quad))
    Sigma = curvature_matrix(X, b, M)
    grad = pack_theta(*log_pl_gradient(X, b, M))
    f0 = neg_log_pl(X, tilde)
    for k, p in enumerate(points):
        delta = p - tilde
        total_bound[k] = f0 - grad @ delta + 0.5 * delta @ Sigma @ delta
    assert np.all(totals <= total_bound + 1e-9 * (1 + np.abs(total_bound)))


def test_sigma_dominates_the_hessian():
    X = FVBM.random(5, 2, 0.5).sample(300, 3)
    b, M = unpack_theta(np.random.default_rng(0).normal(0, 0.7, 15), 5)
    S = curvature_matrix(X, b, M)
    H = -_hessian(X, np.ones(len(X)), b, M)
    assert np.linalg.eigvalsh(S - H).min() >= -1e-9 * np.abs(S).max()
    assert np.linalg.eigvalsh(S).min() > 0


# ------------------------------------------------------------ kernel vs plain NumPy


@pytest.mark.parametrize("cached", [True, False])
@pytest.mark.parametrize("m, d, scale", [(7, 3, 0.5), (300, 5, 0.0), (600, 6, 1.5), (257, 4, 40.0)])
def test_curvature_kernel_matches_plain_numpy(m, d, scale, cached, monkeypatch):
    """Includes m > BLOCK (a tail block), weights, u = 0 everywhere, and large fields, with
    the pair products cached and formed block by block."""
    if not cached:
        monkeypatch.setattr(fvbm_bound, "MAX_CACHED_PRODUCTS", 0)
    rng = np.random.default_rng(m + d)
    X = rng.choice([-1.0, 1.0], (m, d))
    w = rng.integers(1, 5, m).astype(float)
    b, M = unpack_theta(random_theta(rng, d + d * (d - 1) // 2, scale), d)
    got = curvature_matrix(X, b, M, w)
    want = ref_curvature_matrix(X, b, M, w)
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-10 * np.abs(want).max())
    assert np.array_equal(got, got.T)


def test_objective_and_gradient_kernel_match_engine_fvbm():
    X = FVBM.random(6, 5, 0.5).sample(400, 6)
    b, M = unpack_theta(np.random.default_rng(1).normal(0, 2.0, 21), 6)
    tr = BoundMPLETrainer(X, init_params=(b, M))
    assert tr.log_pl == pytest.approx(log_pseudo_likelihood(X, b, M), rel=1e-13)
    np.testing.assert_allclose(tr.gradient, pack_theta(*log_pl_gradient(X, b, M)), rtol=1e-11, atol=1e-9)


def test_solve_falls_back_to_a_ridge_for_a_singular_matrix():
    A = np.ones((3, 3))
    out = np.empty(3)
    ridge = kernels.cholesky_solve(A, np.ones(3), out)
    assert ridge > 0 and np.all(np.isfinite(out))


# ------------------------------------------------------------ monotone MM


@given(fvbm_data(), st.sampled_from(["zeros", "random", "large"]), st.booleans())
@settings(max_examples=30)
def test_log_pl_never_decreases(data, init, accelerate):
    """Majorization-minimization: P_n(theta^(s)) is nondecreasing, also from parameters
    of size ~30 (fields in the hundreds) and with the SQUAREM extrapolation."""
    X, seed = data
    d = X.shape[1]
    kwargs = {}
    if init == "large":
        rng = np.random.default_rng(seed)
        kwargs["init_params"] = unpack_theta(rng.normal(0, 30.0, d + d * (d - 1) // 2), d)
    else:
        kwargs["init"] = init
    tr = BoundMPLETrainer(X, tol=0, max_sweeps=25, seed=seed, accelerate=accelerate, **kwargs)
    history = [tr.log_pl] + [r["log_pl"] for r in tr.run()]
    assert np.all(np.isfinite(history))
    assert np.all(np.diff(history) >= -1e-11 * np.abs(history[1:])), np.diff(history).min()
    assert tr.first_decrease == -1


def test_no_mple_data_still_ascend_monotonically():
    X = FVBM.random(4, 1, 0.3).sample(200, 2)
    X[:, 2] = 1.0  # a constant column: b_3 diverges, no MPLE
    tr = BoundMPLETrainer(X, tol=0, max_sweeps=60)
    history = [tr.log_pl] + [r["log_pl"] for r in tr.run()]
    assert np.all(np.diff(history) >= -1e-11 * np.abs(history[1:]))
    assert tr.status == "max_sweeps" and tr.b[2] > 3


# ------------------------------------------------------------ the MPLE


@pytest.mark.parametrize("d, seed", [(4, 3), (6, 11)])
def test_reaches_the_mple(d, seed):
    X = FVBM.random(d, seed, 0.3).sample(2000, seed + 1)
    target = mple(X)
    for tr in (BoundMPLETrainer(X, tol=0, grad_tol=1e-10, max_sweeps=20_000),
               BoundMPLETrainer(X, tol=0, grad_tol=1e-10, max_sweeps=20_000, accelerate=True),
               LBFGSMPLETrainer(X, tol=0, grad_tol=1e-10, max_sweeps=20_000)):
        tr.run()
        assert tr.status == "converged", tr.message
        np.testing.assert_allclose(tr.b, target.b, atol=1e-6)
        np.testing.assert_allclose(tr.M, target.M, atol=1e-6)
        assert tr.log_pl == pytest.approx(log_pseudo_likelihood(X, target.b, target.M), rel=1e-12)


def test_bound_needs_fewer_iterations_than_bslm():
    X = FVBM.random(6, 11, 0.3).sample(2000, 12)
    bslm = FVBMTrainer(X, tol=1e-8, max_sweeps=50_000)
    bslm.run()
    tr = BoundMPLETrainer(X, tol=1e-8, max_sweeps=50_000)
    tr.run()
    assert tr.log_pl >= bslm.log_pl - 1e-6
    assert tr.sweep < bslm.sweep


# ------------------------------------------------------------ Records, protocol, checkpoints


def test_records_have_the_keys_of_fvbm_trainer():
    X = FVBM.random(4, 0, 0.5).sample(100, 1)
    truth = FVBM.random(4, 0, 0.5)
    reference = FVBMTrainer(X, tol=0, max_sweeps=3, truth=truth, exact_every=1).steps(3)
    for cls in (BoundMPLETrainer, LBFGSMPLETrainer):
        tr = cls(X, tol=0, max_sweeps=3, truth=truth, exact_every=1)
        assert isinstance(tr, Trainer)
        recs = tr.steps(3)
        assert [r["sweep"] for r in recs] == [1, 2, 3] and tr.done and tr.status == "max_sweeps"
        for mine, ref in zip(recs, reference):
            assert set(ref.scalars) <= set(mine.scalars)
            assert set(ref.arrays) == set(mine.arrays)
        assert {"grad_norm", "evaluations"} <= set(recs[0].scalars)
        assert isinstance(tr.label, str) and tr.label


@pytest.mark.parametrize("cls, kwargs", [(BoundMPLETrainer, {}), (BoundMPLETrainer, {"accelerate": True}),
                                         (LBFGSMPLETrainer, {})])
def test_checkpoint_restores_bit_exactly(cls, kwargs):
    X = FVBM.random(5, 4, 0.5).sample(300, 5)
    a = cls(X, tol=0, max_sweeps=100, init="random", seed=3, **kwargs)
    a.steps(4)
    buffer = io.BytesIO()
    save_state(a, buffer)
    buffer.seek(0)
    b = cls(X, tol=0, max_sweeps=100, **kwargs)
    b.load_state_dict(load_state(buffer))
    ra, rb = a.steps(5), b.steps(5)
    assert [r["log_pl"] for r in ra] == [r["log_pl"] for r in rb]
    assert np.array_equal(a.M, b.M) and np.array_equal(a.b, b.b) and a.sweep == b.sweep == 9


def test_checkpoint_mismatch_is_rejected():
    X = FVBM.random(4, 0, 0.5).sample(100, 1)
    state = BoundMPLETrainer(X).state_dict()
    with pytest.raises(ValueError, match="LBFGSMPLETrainer|BoundMPLETrainer"):
        LBFGSMPLETrainer(X).load_state_dict(state)
    other = FVBM.random(5, 0, 0.5).sample(100, 1)
    with pytest.raises(ValueError, match="d = "):
        BoundMPLETrainer(other).load_state_dict(state)


# ------------------------------------------------------------ validation


@pytest.mark.parametrize("cls", [BoundMPLETrainer, LBFGSMPLETrainer])
@pytest.mark.parametrize("kwargs, name", [
    ({"tol": -1.0}, "tol"), ({"tol": float("nan")}, "tol"), ({"max_sweeps": 0}, "max_sweeps"),
    ({"init": "ones"}, "init"), ({"grad_tol": -1e-6}, "grad_tol"), ({"exact_every": -1}, "exact_every"),
    ({"truth": FVBM.random(3, 0)}, "truth"), ({"seed": 1.5}, "seed"),
    ({"init_params": (np.zeros(3), np.zeros((3, 3)))}, "init_params"), ({"init_params": 5}, "init_params"),
])
def test_bad_arguments_raise_naming_the_parameter(cls, kwargs, name):
    X = FVBM.random(4, 0, 0.5).sample(50, 1)
    with pytest.raises(ValueError, match=f"'{name}' parameter of {cls.__name__}"):
        cls(X, **kwargs)


def test_bad_data_and_method_options_raise():
    with pytest.raises(ValueError, match="'X' parameter of BoundMPLETrainer"):
        BoundMPLETrainer(np.array([[1.0, 0.0], [1.0, -1.0]]))
    with pytest.raises(ValueError, match="'X' parameter of LBFGSMPLETrainer"):
        LBFGSMPLETrainer(np.ones(5))
    X = FVBM.random(3, 0).sample(20, 1)
    with pytest.raises(ValueError, match="'accelerate' parameter of BoundMPLETrainer"):
        BoundMPLETrainer(X, accelerate="yes")
    with pytest.raises(ValueError, match="'memory' parameter of LBFGSMPLETrainer"):
        LBFGSMPLETrainer(X, memory=0)
    with pytest.raises(ValueError, match="'w' parameter of curvature_matrix"):
        curvature_matrix(X, np.zeros(3), np.zeros((3, 3)), w=np.ones(3))
    with pytest.raises(ValueError, match="'b' parameter of curvature_matrix"):
        curvature_matrix(X, np.zeros(4), np.zeros((4, 4)))


def test_race_to_mple_reports_every_method():
    X = FVBM.random(4, 3, 0.3).sample(500, 4)
    # an iteration cap, no wall-clock budget (issue 27): whether each method gets there no
    # longer depends on how busy the machine is (1,028 BSLM sweeps here, the most)
    rows = fvbm_bound.race_to_mple(X, grad_tol=1e-6, mus=(2.0,), max_seconds=math.inf, max_sweeps=20_000)
    assert [r["method"] for r in rows] == ["BSLM", "GA μ=2", fvbm_bound.BOUND_LABEL,
                                           fvbm_bound.SQUAREM_LABEL, fvbm_bound.LBFGS_LABEL]
    assert all(r["reached"] for r in rows), fvbm_bound.format_race(rows)
    by = {r["method"]: r["iterations"] for r in rows}
    # 1,028 > 495 > 131 > 2 x 16 (two majorizations per SQUAREM cycle); L-BFGS 37
    assert by["BSLM"] > by["GA μ=2"] > by[fvbm_bound.BOUND_LABEL] > 2 * by[fvbm_bound.SQUAREM_LABEL]
    assert by[fvbm_bound.LBFGS_LABEL] < by[fvbm_bound.BOUND_LABEL]
    assert all(r["monotone"] for r in rows if r["method"] in (fvbm_bound.BOUND_LABEL, fvbm_bound.SQUAREM_LABEL))
    assert "iterations" in fvbm_bound.format_race(rows)


def test_race_to_mple_rejects_a_bad_iteration_cap():
    with pytest.raises(ValueError, match="'max_sweeps' parameter of race_to_mple"):
        fvbm_bound.race_to_mple(FVBM.random(3, 0).sample(20, 1), max_sweeps=0)


# ------------------------------------------------------------ MM, SQUAREM and L-BFGS against NumPy
# (issue 27: they were checked only for monotonicity and convergence, so turning SQUAREM's
# extrapolation off, or L-BFGS's memory, still passed)


def ref_gradient(X, theta):
    """grad P_n (eq. 2.1), packed, in plain NumPy."""
    b, M = unpack_theta(theta, X.shape[1])
    R = X - np.tanh(X @ M + b)
    G = X.T @ R
    return pack_theta(R.sum(axis=0), G + G.T)


def ref_mm_update(X, theta):
    """One majorization-minimization update: theta + Sigma^{-1} grad P_n, Sigma term by term."""
    b, M = unpack_theta(theta, X.shape[1])
    Sigma = ref_curvature_matrix(X, b, M, np.ones(len(X)))
    return theta + np.linalg.solve(Sigma, ref_gradient(X, theta))


def ref_squarem_cycle(X, theta):
    """One SQUAREM (S3) cycle of the MM map; also whether its extrapolation was kept."""
    theta1 = ref_mm_update(X, theta)
    theta2 = ref_mm_update(X, theta1)
    r, v = theta1 - theta, theta2 - 2 * theta1 + theta
    alpha = min(-np.linalg.norm(r) / np.linalg.norm(v), -1.0)
    extrapolated = theta - 2 * alpha * r + alpha**2 * v
    if -neg_log_pl(X, extrapolated) >= -neg_log_pl(X, theta2):
        return extrapolated, True
    return theta2, False


def ref_lbfgs(X, theta, iterations, memory=10):
    """L-BFGS on -P_n as documented for LBFGSMPLETrainer: two-loop recursion over the newest
    ``memory`` pairs, H_0 = (s^T y / y^T y) I (a unit-length first step), Armijo backtracking
    (c1 = 1e-4) halving from t = 1; the iterates."""
    pairs, iterates = [], []
    grad = ref_gradient(X, theta)
    gamma = 1.0 / np.linalg.norm(grad)
    for _ in range(iterations):
        q = grad.copy()  # -H (-grad): an ascent direction on P_n
        alphas = []
        for s, y in reversed(pairs):
            a = (s @ q) / (s @ y)
            alphas.append(a)
            q = q - a * y
        p = gamma * q
        for (s, y), a in zip(pairs, reversed(alphas)):
            p = p + (a - (y @ p) / (s @ y)) * s
        assert grad @ p > 0
        value, t = -neg_log_pl(X, theta), 1.0
        while -neg_log_pl(X, theta + t * p) < value + 1e-4 * t * (grad @ p):
            t /= 2
        new = theta + t * p
        new_grad = ref_gradient(X, new)
        s, y = new - theta, grad - new_grad  # y: the change of the gradient of -P_n
        assert s @ y > 0  # -P_n is convex
        pairs = (pairs + [(s, y)])[-memory:]
        gamma = (s @ y) / (y @ y)
        theta, grad = new, new_grad
        iterates.append(theta)
    return iterates


def seeded_problem():
    X = FVBM.random(5, 7, 0.5).sample(300, 8)
    b0, M0 = FVBM.random(5, 9, 0.3).b, FVBM.random(5, 9, 0.3).M
    return X, b0, M0


def test_mm_update_matches_plain_numpy():
    X, b0, M0 = seeded_problem()
    theta = pack_theta(b0, M0)
    tr = BoundMPLETrainer(X, tol=0, max_sweeps=10, init_params=(b0, M0))
    for _ in range(3):
        tr.step()
        theta = ref_mm_update(X, theta)
        np.testing.assert_allclose(pack_theta(tr.b, tr.M), theta, rtol=1e-10, atol=1e-12)
    assert tr.log_pl == pytest.approx(-neg_log_pl(X, theta), rel=1e-12)


def test_squarem_cycle_matches_plain_numpy_and_extrapolates():
    X, b0, M0 = seeded_problem()
    theta = pack_theta(b0, M0)
    tr = BoundMPLETrainer(X, tol=0, max_sweeps=10, init_params=(b0, M0), accelerate=True)
    kept = []
    for _ in range(3):
        record = tr.step()
        theta, extrapolated = ref_squarem_cycle(X, theta)
        kept.append(extrapolated)
        np.testing.assert_allclose(pack_theta(tr.b, tr.M), theta, rtol=1e-9, atol=1e-11)
        assert record["evaluations"] == (3 if extrapolated else 4)
    # the extrapolation is taken on this problem: a cycle is not two plain MM updates
    assert kept[0]
    plain = ref_mm_update(X, ref_mm_update(X, pack_theta(b0, M0)))
    tr0 = BoundMPLETrainer(X, tol=0, max_sweeps=10, init_params=(b0, M0), accelerate=True)
    tr0.step()
    assert np.abs(pack_theta(tr0.b, tr0.M) - plain).max() > 1e-3


def test_lbfgs_iterates_match_plain_numpy():
    X, b0, M0 = seeded_problem()
    lb = LBFGSMPLETrainer(X, tol=0, max_sweeps=20, init_params=(b0, M0))
    iterates = ref_lbfgs(X, pack_theta(b0, M0), 8)
    for k, expected in enumerate(iterates):
        lb.step()
        np.testing.assert_allclose(pack_theta(lb.b, lb.M), expected, rtol=1e-8, atol=1e-10, err_msg=f"iteration {k + 1}")


def test_iterations_to_the_mple_on_a_fixed_problem():
    """Sweep counts on one seeded problem (d = 8, n = 3,000, |grad| <= 1e-8 n): the plain MM
    takes 286 majorizations, SQUAREM 27 cycles (54 majorizations), L-BFGS 85 iterations.  A
    SQUAREM without its extrapolation would need about 143 cycles, an L-BFGS without its
    memory (steepest ascent) hundreds; the ranges allow rounding to move a count a little."""
    X = FVBM.random(8, 4, 0.5).sample(3000, 5)
    counts = {}
    for name, tr in (("mm", BoundMPLETrainer(X, tol=0, grad_tol=1e-8, max_sweeps=5000)),
                     ("squarem", BoundMPLETrainer(X, tol=0, grad_tol=1e-8, max_sweeps=5000, accelerate=True)),
                     ("lbfgs", LBFGSMPLETrainer(X, tol=0, grad_tol=1e-8, max_sweeps=5000))):
        tr.run()
        assert tr.status == "converged", (name, tr.message)
        counts[name] = tr.sweep
    assert 270 <= counts["mm"] <= 300, counts
    assert 22 <= counts["squarem"] <= 32, counts
    assert 75 <= counts["lbfgs"] <= 95, counts
    assert 2 * counts["squarem"] < counts["mm"] / 4, counts

