"""The numba FVBM kernels against plain-NumPy references written here."""

import numpy as np
import pytest

from boltzlab.engine.fvbm import FVBM, FVBMTrainer, exact_log_likelihood, log_pl_gradient, log_pseudo_likelihood
from boltzlab.engine.kernels import fvbm as kernels


def reference_log_pl(X, b, M):
    """Eq. 2.1 written out: sum_ij x_ij u_ij - log cosh u_ij - log 2."""
    U = X @ M + b
    return float(np.sum(X * U - np.log(np.cosh(U)) - np.log(2.0)))


def reference_sweep(X, b, M, mu):
    """One sweep of eqs. 2.4/2.7 (or 4.1/4.2), fields recomputed from scratch each time."""
    n, d = X.shape
    b, M = b.copy(), M.copy()
    for j in range(d):
        u = X @ M[:, j] + b[j]
        b[j] += mu / n * np.sum(X[:, j] - np.tanh(u))
    for j in range(d):
        for k in range(j + 1, d):
            uj = X @ M[:, j] + b[j]
            uk = X @ M[:, k] + b[k]
            grad = 2 * np.sum(X[:, j] * X[:, k]) - np.sum(X[:, k] * np.tanh(uj)) - np.sum(X[:, j] * np.tanh(uk))
            M[j, k] += mu / (2 * n) * grad
            M[k, j] = M[j, k]
    return b, M


def reference_log_partition(b, M):
    d = b.size
    states = np.array([[1.0 if (s >> j) & 1 else -1.0 for j in range(d)] for s in range(2**d)])
    energies = 0.5 * np.einsum("sj,jk,sk->s", states, M, states) + states @ b
    top = energies.max()
    return top + np.log(np.sum(np.exp(energies - top))), energies


@pytest.fixture(params=[(3, 50, 0), (6, 400, 1), (9, 1000, 2)])
def problem(request):
    d, n, seed = request.param
    truth = FVBM.random(d, seed)
    X = truth.sample(n, seed + 10)
    return X, FVBM.random(d, seed + 100)


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("mu", [1.0, 0.5, 2.5])
def test_sweeps_match_numpy_reference(problem, mu, compress):
    X, start = problem
    trainer = FVBMTrainer(X, algorithm="ga", mu=mu, tol=0, max_sweeps=5, init="random", seed=0, compress=compress)
    trainer._set_state(start.b, start.M, sweep=0, elapsed=0, first_decrease=-1, status="running", message="")
    b, M = start.b, start.M
    for _ in range(5):
        record = trainer.step()
        b, M = reference_sweep(X, b, M, mu)
        np.testing.assert_allclose(trainer.b, b, rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(trainer.M, M, rtol=1e-9, atol=1e-11)
        assert record["log_pl"] == pytest.approx(reference_log_pl(X, b, M), rel=1e-11, abs=1e-9)


def test_refresh_schedule_does_not_change_iterates(problem):
    """The incremental tanh and the from-scratch tanh give the same sweeps."""
    X, start = problem
    XT = np.ascontiguousarray(X.T)
    runs = []
    for refresh_every in (1, 1000):
        b, M, T = start.b.copy(), start.M.copy(), np.empty_like(XT)
        w = np.ones(XT.shape[1])
        previous = kernels.log_pl_and_fields(XT, w, True, b, M, T, True)
        out = np.empty(20)
        kernels.run_sweeps(XT, w, True, b, M, T, 1.0, 1, 20, 0.0, refresh_every, previous, out)
        runs.append((b, M, out))
    np.testing.assert_allclose(runs[0][0], runs[1][0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(runs[0][1], runs[1][1], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(runs[0][2], runs[1][2], rtol=1e-12)


def test_log_pl_and_gradient_match_reference(problem):
    X, model = problem
    assert log_pseudo_likelihood(X, model.b, model.M) == pytest.approx(reference_log_pl(X, model.b, model.M), rel=1e-12)
    grad_b, grad_M = log_pl_gradient(X, model.b, model.M)
    eps = 1e-6
    for j in range(model.d):
        e = np.zeros(model.d)
        e[j] = eps
        numeric = (reference_log_pl(X, model.b + e, model.M) - reference_log_pl(X, model.b - e, model.M)) / (2 * eps)
        assert grad_b[j] == pytest.approx(numeric, rel=1e-5, abs=1e-5)
    j, k = 0, model.d - 1
    E = np.zeros((model.d, model.d))
    E[j, k] = E[k, j] = eps
    numeric = (reference_log_pl(X, model.b, model.M + E) - reference_log_pl(X, model.b, model.M - E)) / (2 * eps)
    assert grad_M[j, k] == pytest.approx(numeric, rel=1e-5, abs=1e-5)


def test_log_pl_is_finite_for_huge_fields():
    X = np.array([[1.0, -1.0], [1.0, 1.0]])
    M = np.array([[0.0, 800.0], [800.0, 0.0]])
    value = log_pseudo_likelihood(X, np.zeros(2), M)
    # rows: (1,-1): u = (-800, 800): margins -800 each -> -2*1600; (1,1): margins +800 -> ~0
    assert value == pytest.approx(-3200.0, rel=1e-12)


@pytest.mark.parametrize("d", [1, 4, 8, 12])
def test_log_partition_gray_code_matches_enumeration(d):
    model = FVBM.random(d, seed=d, variance=2.0)
    expected, energies = reference_log_partition(model.b, model.M)
    assert kernels.log_partition_exact(model.b, model.M) == pytest.approx(expected, rel=1e-12)
    np.testing.assert_allclose(kernels.state_energies(model.b, model.M), energies, rtol=1e-12, atol=1e-12)


def test_exact_log_likelihood_matches_enumeration():
    model = FVBM.random(7, seed=3)
    X = model.sample(300, seed=4)
    log_z, _ = reference_log_partition(model.b, model.M)
    expected = np.sum(0.5 * np.einsum("ij,jk,ik->i", X, model.M, X) + X @ model.b) - 300 * log_z
    assert exact_log_likelihood(X, model.b, model.M) == pytest.approx(expected, rel=1e-12)
