"""Bound majorization (engine.majorize, engine.kernels.majorize) and the baseline optimizers
(engine.optimizers) against plain-NumPy references, finite differences, exact enumeration
and scipy's L-BFGS-B (Jebara & Choromanska 2012, §§2, 3, 5, 6, Table 1).

The references below are written in NumPy from the definitions, independently of the engine:
J(theta) = sum_j [log Z_j - theta^T f(x_j, y_j)] + (t lambda / 2) |theta|^2 with log Z by an
explicit sum over Omega_j (classes, spin states, or every labeling of a short chain).
"""

import itertools
import math
import pathlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from boltzlab.engine import bound as B
from boltzlab.engine import majorize as M
from boltzlab.engine import optimizers as O
from boltzlab.engine.fvbm import FVBM, exact_log_likelihood
from boltzlab.engine.kernels import majorize as K
from tests.states import through_npz

# ------------------------------------------------------------------ references


def ref_multinomial_J(X, y, n_classes, reg, theta):
    """J by explicit loops: bias appended, theta class-major."""
    Xb = np.hstack([X, np.ones((X.shape[0], 1))])
    W = theta.reshape(n_classes, Xb.shape[1])
    J = 0.0
    for x, label in zip(Xb, y):
        scores = [float(W[c] @ x) for c in range(n_classes)]
        top = max(scores)
        J += top + math.log(sum(math.exp(s - top) for s in scores)) - scores[label]
    return J + 0.5 * X.shape[0] * reg * float(theta @ theta)


def ref_fvbm_J(S, reg, theta):
    """n log Z - sum_i (b^T x_i + sum_{i<j} M_ij x_i x_j) + (n lambda / 2) |theta|^2, Z by enumeration."""
    n, d = S.shape
    b = theta[:d]
    pairs = list(itertools.combinations(range(d), 2))
    Mv = theta[d:]

    def energy(x):
        return float(b @ x) + sum(Mv[p] * x[i] * x[j] for p, (i, j) in enumerate(pairs))

    energies = [energy(np.array(s, dtype=float)) for s in itertools.product([-1, 1], repeat=d)]
    top = max(energies)
    log_z = top + math.log(sum(math.exp(e - top) for e in energies))
    return n * log_z - sum(energy(x) for x in S) + 0.5 * n * reg * float(theta @ theta)


def ref_chain_J(sequences, labels, k, reg, theta):
    """Sum over sequences of log sum_y exp(score(y)) - score(y_s), by enumerating k^L labelings."""
    p = sequences[0].shape[1]
    W = theta[: k * p].reshape(k, p)
    T = theta[k * p:].reshape(k, k)

    def score(X, y):
        return sum(float(W[y[t]] @ X[t]) for t in range(len(y))) + sum(T[y[t], y[t + 1]] for t in range(len(y) - 1))

    J = 0.0
    for X, lab in zip(sequences, labels):
        scores = [score(X, y) for y in itertools.product(range(k), repeat=X.shape[0])]
        top = max(scores)
        J += top + math.log(sum(math.exp(s - top) for s in scores)) - score(X, lab)
    return J + 0.5 * len(sequences) * reg * float(theta @ theta)


def fd_gradient(f, theta, h=1e-6):
    return np.array([(f(theta + h * e) - f(theta - h * e)) / (2 * h) for e in np.eye(theta.size)])


# -------------------------------------------------------------------- problems


def small_multinomial(seed=0, n=9, p=3, k=3, reg=0.1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    y = np.arange(n) % k
    rng.shuffle(y)
    return M.MultinomialLogistic(X, y, k, reg)


def small_fvbm(seed=0, d=4, n=40, reg=0.05):
    return M.FVBMLikelihood(FVBM.random(d, seed).sample(n, seed + 1), reg)


def small_chain(seed=0, n_seq=4, length=4, k=3, p=2, reg=0.1, curvature="printed"):
    data = M.make_chain_data(n_seq, length, k, p, seed)
    return M.ChainCRF(data.sequences, data.labels, k, reg, curvature=curvature)


OBJECTIVES = {
    "multinomial": small_multinomial,
    "fvbm": small_fvbm,
    "chain": small_chain,
    "chain_shared": lambda seed=0: small_chain(seed, curvature="shared"),
}


# ---------------------------------------------------------- values and derivatives


def test_multinomial_value_matches_reference():
    obj = small_multinomial()
    theta = np.random.default_rng(1).normal(size=obj.dim)
    X, y = obj.X[:, :-1], obj.y
    assert obj.value(theta) == pytest.approx(ref_multinomial_J(X, y, 3, 0.1, theta), rel=1e-12)


def test_fvbm_value_matches_reference_and_engine_fvbm():
    obj = small_fvbm()
    theta = np.random.default_rng(2).normal(size=obj.dim)
    assert obj.value(theta) == pytest.approx(ref_fvbm_J(obj.S, 0.05, theta), rel=1e-12)
    b, Mx = obj.to_fvbm_params(theta)
    assert obj.log_likelihood(theta) == pytest.approx(exact_log_likelihood(obj.S, b, Mx), rel=1e-12)
    assert np.array_equal(obj.from_fvbm_params(b, Mx), theta)
    assert obj.log_partition(theta) == pytest.approx(FVBM(b, Mx).log_partition(), rel=1e-12)


def test_chain_value_and_gradient_match_enumeration():
    obj = small_chain()
    theta = np.random.default_rng(3).normal(size=obj.dim)
    assert obj.value(theta) == pytest.approx(
        ref_chain_J(obj.sequences, obj.labels, 3, 0.1, theta), rel=1e-12)
    # the gradient and Hessian from Algorithm-1-free enumeration: E_p[f] and Cov_p[f] per sequence
    grad = obj.ridge * theta - obj._observed
    hess = obj.ridge * np.eye(obj.dim)
    for s in range(obj.n_examples):
        _, F = obj.enumerate_sequence(s)
        a = F @ theta
        pr = np.exp(a - a.max())
        pr /= pr.sum()
        mean = pr @ F
        grad += mean
        hess += ((F - mean) * pr[:, None]).T @ (F - mean)
    np.testing.assert_allclose(obj.gradient(theta), grad, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(obj.hessian(theta), hess, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(obj.log_partitions(theta),
                               [B.log_partition(theta, obj.enumerate_sequence(s)[1]) for s in range(obj.n_examples)],
                               rtol=1e-12)


@pytest.mark.parametrize("name", list(OBJECTIVES))
def test_gradient_and_hessian_match_finite_differences(name):
    obj = OBJECTIVES[name](seed=4)
    theta = 0.7 * np.random.default_rng(5).normal(size=obj.dim)
    g = obj.gradient(theta)
    np.testing.assert_allclose(g, fd_gradient(obj.value, theta), rtol=1e-6, atol=1e-6 * max(1.0, np.abs(g).max()))
    H = obj.hessian(theta)
    H_fd = fd_gradient(obj.gradient, theta).T
    np.testing.assert_allclose(H, H_fd, rtol=1e-5, atol=1e-6 * max(1.0, np.abs(H).max()))
    np.testing.assert_array_equal(H, H.T)
    value, grad = obj.value_and_gradient(theta)
    assert value == obj.value(theta) and np.array_equal(grad, g)


# ----------------------------------------------------------- the bound's pieces


def test_multinomial_bound_is_the_sum_of_algorithm1_per_example():
    obj = small_multinomial(seed=6)
    theta = 2.0 * np.random.default_rng(7).normal(size=obj.dim)
    Sigma, g = obj.bound(theta)
    F, offsets = obj.kronecker_rows()
    S_ref, mu_ref, lz_ref = np.zeros_like(Sigma), np.zeros(obj.dim), 0.0
    for j in range(obj.n_examples):
        lz, mu, S = B.compute_bound(theta, F[offsets[j]:offsets[j + 1]])
        S_ref += S
        mu_ref += mu
        lz_ref += lz
    np.testing.assert_allclose(Sigma, S_ref, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(g, mu_ref - obj._observed + obj.ridge * theta, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(g, obj.gradient(theta), rtol=1e-10, atol=1e-10)
    log_z, mu_sum, Sigma2 = obj.bound_terms(theta)
    assert log_z == pytest.approx(lz_ref, rel=1e-12)
    # the generic ragged kernel on the explicit Kronecker rows
    lz_k, mu_k, S_k, _ = K.sum_compute_bounds(F, F @ theta, offsets, 4)
    np.testing.assert_allclose(S_k, S_ref, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(mu_k, mu_ref, rtol=1e-12, atol=1e-13)


def test_fvbm_bound_is_n_times_algorithm1_over_omega():
    obj = small_fvbm(seed=8)
    theta = np.random.default_rng(9).normal(size=obj.dim)
    Sigma, g = obj.bound(theta)
    _, mu, S = B.compute_bound(theta, obj.F)
    np.testing.assert_allclose(Sigma, obj.n_examples * S, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(g, obj.gradient(theta), rtol=1e-10, atol=1e-10)


def test_chain_bound_is_the_sum_of_chain_bound_per_sequence():
    obj = small_chain(seed=10)
    theta = np.random.default_rng(11).normal(size=obj.dim)
    Sigma, g = obj.bound(theta)
    S_ref = sum(B.chain_bound(theta, obj.clique_features(X))[2] for X in obj.sequences)
    np.testing.assert_allclose(Sigma, S_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(g, obj.gradient(theta), rtol=1e-10, atol=1e-10)
    # the shared-curvature variant: same z and mu, a curvature that is linear in the length
    shared = M.ChainCRF(obj.sequences, obj.labels, 3, 0.1, curvature="shared")
    S2, g2 = shared.bound(theta)
    np.testing.assert_allclose(g2, g, rtol=1e-10, atol=1e-10)
    lz, _, _, per = K.sum_chain_bounds_shared(obj.Fc, obj.Fc @ theta, obj.offsets)
    np.testing.assert_allclose(per, obj.log_partitions(theta), rtol=1e-12)


def test_low_rank_bound_accumulates_all_examples_in_one_low_rank_plus_diagonal():
    obj = small_multinomial(seed=12, n=6, p=2, k=3)
    theta = np.random.default_rng(13).normal(size=obj.dim)
    Sigma, g = obj.bound(theta)
    full, g_full = obj.bound_low_rank(theta, obj.dim)  # rank d: exact, nothing absorbed
    np.testing.assert_allclose(full.sigma(), Sigma, rtol=1e-10, atol=1e-12)
    assert full.D.max() <= 1e-12 * Sigma.max()
    np.testing.assert_allclose(g_full, g, rtol=1e-12, atol=1e-12)
    F, offsets = obj.kronecker_rows()
    for rank in (1, 3):
        lr, _ = obj.bound_low_rank(theta, rank)
        generic = K.sum_low_rank_bounds(F, F @ theta, offsets, rank)
        np.testing.assert_allclose(lr.V, generic[2], atol=1e-12)
        np.testing.assert_allclose(lr.D, generic[4], atol=1e-12)
        assert np.linalg.eigvalsh(lr.sigma() - Sigma).min() >= -1e-10  # Loewner: Sigma_LR >= Sigma
        b = np.random.default_rng(rank).normal(size=obj.dim)
        np.testing.assert_allclose(lr.solve(b, obj.ridge), np.linalg.solve(lr.sigma() + obj.ridge * np.eye(obj.dim), b),
                                   rtol=1e-8, atol=1e-10)


# --------------------------------------------------------- the bound majorizes J


def assert_majorizes(obj, theta_tilde, Sigma, g, rng, scale):
    J0 = obj.value(theta_tilde)
    np.testing.assert_allclose(g, obj.gradient(theta_tilde), rtol=1e-9, atol=1e-9 * max(1.0, abs(J0)))
    A = Sigma + obj.ridge * np.eye(obj.dim)
    for _ in range(20):
        delta = rng.normal(size=obj.dim) * scale * rng.uniform(0.01, 1.0)
        bound = J0 + g @ delta + 0.5 * delta @ A @ delta
        assert obj.value(theta_tilde + delta) <= bound + 1e-9 * max(1.0, abs(bound))


@settings(max_examples=15)
@given(name=st.sampled_from(list(OBJECTIVES)), seed=st.integers(0, 10_000),
       spread=st.sampled_from([0.1, 1.0, 5.0]), scale=st.sampled_from([0.3, 3.0, 30.0]))
def test_quadratic_bound_majorizes_objective(name, seed, spread, scale):
    """J(theta) <= J(theta~) + g^T delta + 1/2 delta^T (Sigma + t lambda I) delta everywhere."""
    obj = OBJECTIVES[name](seed=seed % 50)
    rng = np.random.default_rng(seed)
    theta_tilde = spread * rng.normal(size=obj.dim)
    Sigma, g = obj.bound(theta_tilde)
    assert_majorizes(obj, theta_tilde, Sigma, g, rng, scale)


@settings(max_examples=10)
@given(seed=st.integers(0, 10_000), rank=st.integers(1, 6), scale=st.sampled_from([0.3, 3.0, 30.0]))
def test_low_rank_bound_majorizes_objective(seed, rank, scale):
    obj = small_multinomial(seed=seed % 50)
    rng = np.random.default_rng(seed)
    theta_tilde = rng.normal(size=obj.dim)
    lr, g = obj.bound_low_rank(theta_tilde, rank)
    assert_majorizes(obj, theta_tilde, lr.sigma(), g, rng, scale)


# ------------------------------------------------------------- the majorizer


@settings(max_examples=12)
@given(name=st.sampled_from(["multinomial", "fvbm", "chain", "chain_shared"]), seed=st.integers(0, 10_000),
       start=st.sampled_from([0.0, 1.0, 20.0]), low_rank=st.sampled_from([None, 2]))
def test_majorizer_never_increases_objective(name, seed, start, low_rank):
    obj = OBJECTIVES[name](seed=seed % 50)
    if name != "multinomial":
        low_rank = None
    theta0 = start * np.random.default_rng(seed).normal(size=obj.dim)
    trainer = M.BoundMajorizer(obj, max_iter=25, tol=1e-9, theta0=theta0, low_rank=low_rank)
    values = [trainer.value] + [r["objective"] for r in trainer.run()]
    diffs = np.diff(values)
    assert np.all(diffs <= 1e-12 * np.maximum(1.0, np.abs(values[:-1])))
    assert trainer.monotone


def test_majorizer_reaches_the_scipy_optimum():
    obj = small_multinomial(seed=14, n=30, p=4, k=3, reg=0.05)
    ref = O.scipy_reference(obj)
    trainer = M.BoundMajorizer(obj, max_iter=2000, tol=1e-8)
    records = trainer.run()
    assert trainer.status == "converged"
    assert trainer.value == pytest.approx(ref.value, rel=1e-10, abs=1e-10)
    np.testing.assert_allclose(trainer.theta, ref.theta, atol=1e-6)
    assert all(r["monotone"] for r in records)
    hit = O.iterations_to_epsilon(records, ref.value, 1e-4)
    assert hit is not None and 1 <= hit.iterations <= trainer.iteration


@pytest.mark.parametrize("name", ["multinomial", "fvbm", "chain"])
@pytest.mark.parametrize("method", M.RACE_METHODS)
def test_every_method_reaches_the_same_optimum(name, method):
    obj = OBJECTIVES[name](seed=15)
    ref = O.scipy_reference(obj)
    trainer = M.make_race(name, objective=obj, max_iter=5000)[method]  # tol 1e-6 |grad J(0)|
    trainer.run()
    assert trainer.status == "converged", trainer.message
    assert trainer.value == pytest.approx(ref.value, rel=1e-10, abs=1e-10)
    # |theta - theta*| <= |grad J| / (smallest curvature) <= tol / (t lambda)
    np.testing.assert_allclose(trainer.theta, ref.theta, atol=2 * trainer.tol / obj.ridge)
    assert ref.grad_norm <= 1e-7


def test_record_keys_and_stopping():
    obj = small_multinomial(seed=16)
    for name, trainer in M.make_race("wine", objective=obj, max_iter=4, tol=1e-12).items():
        rec = trainer.step()
        assert len(trainer.steps(1)) == 1
        for key in ("iteration", "objective", "grad_norm", "wall_time", "elapsed", "monotone", "step_norm", "theta"):
            assert key in rec, (name, key)
        assert rec["iteration"] == 1 and rec["theta"].shape == (obj.dim,)
        assert isinstance(rec["monotone"], bool) and rec["wall_time"] >= 0
        while not trainer.done:
            trainer.step()
        assert trainer.status in ("max_iter", "converged", "stalled") and trainer.message
        with pytest.raises(RuntimeError):
            trainer.step()
        assert trainer.steps(5) == []
        assert trainer.initial_record()["objective"] == pytest.approx(obj.value(np.zeros(obj.dim)))


@pytest.mark.parametrize("method", M.RACE_METHODS)
def test_state_dict_round_trip_is_bit_exact(method):
    obj = small_chain(seed=17)
    race = M.make_race("chain", objective=obj, max_iter=50, tol=1e-12)
    trainer = race[method]
    for _ in range(3):
        trainer.step()
    state = through_npz(trainer)
    clone = M.make_race("chain", objective=obj, max_iter=50, tol=1e-12)[method]
    clone.load_state_dict(state)
    for _ in range(3):
        a, b = trainer.step(), clone.step()
        assert a["objective"] == b["objective"] and np.array_equal(a["theta"], b["theta"])
        assert a["iteration"] == b["iteration"]


# --------------------------------------------------------------- races, Table 1


def test_make_race_builds_five_trainers_from_the_same_start():
    race = M.make_race("wine", reg=0.05, max_iter=5)
    assert list(race) == ["Bound majorization", "L-BFGS", "CG", "Steepest descent", "Newton"]
    objectives = {id(t.objective) for t in race.values()}
    assert len(objectives) == 1
    for trainer in race.values():
        assert np.array_equal(trainer.theta, np.zeros(trainer.dim)) and trainer.objective.reg == 0.05
    values = {t.value for t in race.values()}
    assert len(values) == 1
    fv = M.make_race("fvbm", seed=3, d=5, n=60, max_iter=2)
    assert fv["Newton"].objective.dim == 15
    b, Mx = fv["Newton"].objective.to_fvbm_params(np.arange(15.0))
    assert b.shape == (5,) and np.array_equal(Mx, Mx.T)
    chain = M.make_race("chain", seed=1, n_sequences=3, length=3, n_states=2, n_features=2, curvature="printed")
    assert chain["CG"].objective.curvature == "printed"


def test_iterations_to_epsilon():
    from boltzlab.engine.stepping import Record

    records = [Record({"iteration": i + 1, "objective": v, "elapsed": 0.5 * (i + 1)})
               for i, v in enumerate([10.0, 5.0, 1.00011, 1.00005, 1.0])]
    assert O.iterations_to_epsilon(records, 1.0, 1e-4) == (4, 2.0)
    assert O.iterations_to_epsilon(records, 1.0, 1e-4, relative=True) == (4, 2.0)
    assert O.iterations_to_epsilon(records, 0.5, 1e-4) is None
    assert O.iterations_to_epsilon(records, 10.0, 1e-3, J0=10.0) == (0, 0.0)
    big = [Record({"iteration": 1, "objective": 1000.05, "elapsed": 1.0})]
    assert O.iterations_to_epsilon(big, 1000.0, 1e-4) is None
    assert O.iterations_to_epsilon(big, 1000.0, 1e-4, relative=True) == (1, 1.0)


def test_make_chain_data_is_seeded_and_valid():
    a = M.make_chain_data(5, 6, 3, 4, seed=21)
    b = M.make_chain_data(5, 6, 3, 4, seed=21)
    assert all(np.array_equal(x, y) for x, y in zip(a.sequences, b.sequences))
    assert all(np.array_equal(x, y) for x, y in zip(a.labels, b.labels))
    assert a.theta.shape == (3 * 4 + 9,) and all(l.min() >= 0 and l.max() < 3 for l in a.labels)
    c = M.make_chain_data(5, 6, 3, 4, seed=22)
    assert not np.array_equal(a.theta, c.theta)


def test_engine_does_not_import_ui_libraries():
    root = pathlib.Path(M.__file__).parent
    for path in (root / "majorize.py", root / "optimizers.py", root / "kernels" / "majorize.py"):
        text = path.read_text()
        for lib in ("panel", "bokeh", "holoviews"):
            assert f"import {lib}" not in text and f"from {lib}" not in text


# ------------------------------------------------------------------ bad inputs


X3 = np.zeros((3, 2))
BAD = [
    (lambda: M.MultinomialLogistic(np.zeros(3), [0, 1, 0], 2, 0.1), "X"),
    (lambda: M.MultinomialLogistic(np.array([[np.nan, 0.0]] * 3), [0, 1, 0], 2, 0.1), "X"),
    (lambda: M.MultinomialLogistic(X3, [0, 1, 2], 2, 0.1), "y"),
    (lambda: M.MultinomialLogistic(X3, [0, 1], 2, 0.1), "y"),
    (lambda: M.MultinomialLogistic(X3, [0.5, 1, 0], 2, 0.1), "y"),
    (lambda: M.MultinomialLogistic(X3, [0, 1, 0], 1, 0.1), "n_classes"),
    (lambda: M.MultinomialLogistic(X3, [0, 1, 0], 2, -1.0), "reg"),
    (lambda: M.MultinomialLogistic(X3, [0, 1, 0], 2, math.nan), "reg"),
    (lambda: M.FVBMLikelihood(np.array([[1.0, 0.0]]), 0.1), "S"),
    (lambda: M.FVBMLikelihood(np.ones((2, 17)), 0.1), "S"),
    (lambda: M.FVBMLikelihood(np.ones((2, 3)), "a"), "reg"),
    (lambda: M.ChainCRF([np.zeros((1, 2))], [np.zeros(1, int)], 2, 0.1), "sequences"),
    (lambda: M.ChainCRF([np.zeros((3, 2))], [np.array([0, 1, 5])], 2, 0.1), "labels"),
    (lambda: M.ChainCRF([np.zeros((3, 2))], [], 2, 0.1), "labels"),
    (lambda: M.ChainCRF([np.zeros((3, 2)), np.zeros((3, 3))], [np.zeros(3, int)] * 2, 2, 0.1), "sequences"),
    (lambda: M.ChainCRF([np.zeros((3, 2))], [np.zeros(3, int)], 1, 0.1), "n_states"),
    (lambda: M.ChainCRF([np.zeros((3, 2))], [np.zeros(3, int)], 2, 0.1, curvature="x"), "curvature"),
    (lambda: M.make_chain_data(0, 5, 2, 2, 0), "n_sequences"),
    (lambda: M.make_chain_data(3, 1, 2, 2, 0), "length"),
    (lambda: M.BoundMajorizer(small_multinomial(), max_iter=0), "max_iter"),
    (lambda: M.BoundMajorizer(small_multinomial(), tol=-1.0), "tol"),
    (lambda: M.BoundMajorizer(small_multinomial(), theta0=np.zeros(2)), "theta0"),
    (lambda: M.BoundMajorizer(small_multinomial(), reg=0.5), "reg"),
    (lambda: M.BoundMajorizer(small_multinomial(), low_rank=0), "low_rank"),
    (lambda: M.BoundMajorizer(small_fvbm(), low_rank=2), "low_rank"),
    (lambda: M.BoundMajorizer(small_multinomial(reg=0.0), low_rank=2), "low_rank"),
    (lambda: M.BoundMajorizer(object()), "objective"),
    (lambda: O.LBFGSTrainer(small_multinomial(), memory=0), "memory"),
    (lambda: O.ConjugateGradientTrainer(small_multinomial(), restart=0), "restart"),
    (lambda: O.SteepestDescentTrainer(small_multinomial(), theta0=[np.inf] * 12), "theta0"),
    (lambda: O.NewtonTrainer(small_multinomial(), max_iter=1.5), "max_iter"),
    (lambda: O.scipy_reference(small_multinomial(), tol=0.0), "tol"),
    (lambda: O.iterations_to_epsilon([], 0.0, eps=-1.0), "eps"),
    (lambda: small_multinomial().bound(np.zeros(3)), "theta_tilde"),
    (lambda: small_multinomial().bound_low_rank(np.zeros(12), 13), "rank"),
    (lambda: small_multinomial().value(np.zeros(5)), "theta"),
    (lambda: M.make_race("mnist"), "problem"),
    (lambda: M.make_race("wine", d=4), "d"),
    (lambda: M.make_race("fvbm", d=20), "d"),
    (lambda: M.make_race("fvbm", source="votes"), "source"),
    (lambda: M.load_problem("iris"), "name"),
]


@pytest.mark.parametrize("call, name", BAD)
def test_bad_inputs_raise_value_error_naming_the_parameter(call, name):
    with pytest.raises(ValueError, match=f"'{name}'"):
        call()


def test_bad_checkpoint_is_refused():
    trainer = O.LBFGSTrainer(small_multinomial())
    state = trainer.state_dict()
    with pytest.raises(ValueError, match="theta"):
        trainer.load_state_dict({**state, "theta": np.zeros(3)})
    with pytest.raises(ValueError, match="status"):
        trainer.load_state_dict({**state, "status": "flying"})
    with pytest.raises(ValueError, match="method"):
        O.ConjugateGradientTrainer(small_multinomial()).load_state_dict(state)
    with pytest.raises(ValueError, match="lacks"):
        trainer.load_state_dict({"theta": state["theta"]})


@pytest.mark.parametrize("problem", ["wine", "chain"])
def test_the_traced_step_is_the_majorizer_it_minimises(problem):
    """The Bound lab's step picture: along each step, Q built at theta_t lies above J (Theorem 1),
    touches it at s = 0, is the objective's own majorizer (Sigma formed explicitly), and its
    minimiser s = 1 is the next iterate (the Record's J)."""
    race = M.make_race(problem, trace=41)
    bm = race["Bound majorization"]
    objective = bm.objective
    previous = bm.value
    for _ in range(3):
        theta_t = bm.theta.copy()
        record = bm.step()
        s, J, Q = record["step_s"], record["step_J"], record["step_Q"]
        assert len(s) == 41 and np.all(Q >= J - 1e-9 * max(1.0, abs(previous)))
        zero, one = int(np.argmin(abs(s))), int(np.argmin(abs(s - 1)))
        assert s[zero] == pytest.approx(0.0, abs=1e-12) and s[one] == pytest.approx(1.0)
        assert Q[zero] == pytest.approx(previous, rel=1e-12) and J[zero] == pytest.approx(previous, rel=1e-12)
        assert int(np.argmin(Q)) == one and J[one] == pytest.approx(record["objective"], rel=1e-10)
        # the same quadratic as the objective's majorizer, at a point of the grid
        delta = theta_t - record["theta"]
        k = 5
        assert Q[k] == pytest.approx(objective.majorizer(theta_t - s[k] * delta, theta_t), rel=1e-8)
        previous = record["objective"]
    # off by default: the race's other uses carry no picture
    assert "step_s" not in M.make_race(problem)["Bound majorization"].step().arrays
