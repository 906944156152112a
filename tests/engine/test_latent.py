"""boltzlab.engine.latent: the latent conditional likelihood of Jebara & Choromanska (2012) §4, its
bound majorization (Jensen on the numerator, Algorithm 1 on the denominator), and the EM
baseline.  References are written from the definitions in NumPy, independently of the engine."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from boltzlab.engine import bound as B
from boltzlab.engine import latent as L
from boltzlab.engine.majorize import MultinomialLogistic


def ref_J(X, y, K, M, reg, theta):
    """-sum_j log [sum_m exp(s_{y_j m}) / sum_{y,m} exp(s_{y m})] + t reg/2 |theta|^2 by loops."""
    Xb = np.hstack([X, np.ones((len(X), 1))])
    W = theta.reshape(K, M, Xb.shape[1])
    J = 0.0
    for x, label in zip(Xb, y):
        s = [[float(W[c, k] @ x) for k in range(M)] for c in range(K)]
        top = max(max(r) for r in s)
        den = sum(math.exp(v - top) for r in s for v in r)
        num = sum(math.exp(v - top) for v in s[label])
        J -= math.log(num / den)
    return J + 0.5 * len(X) * reg * float(theta @ theta)


def problem(seed, t=25, p=3, K=3, M=2, reg=0.05):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((t, p))
    y = rng.integers(0, K, t)
    y[:K] = np.arange(K)
    return X, y, L.LatentConditional(X, y, K, M, reg), rng


def test_value_matches_reference_and_gradient_hessian_match_finite_differences():
    X, y, ob, rng = problem(0)
    theta = rng.standard_normal(ob.dim)
    v, g = ob.value_and_gradient(theta)
    assert v == pytest.approx(ref_J(X, y, 3, 2, 0.05, theta), rel=1e-12)
    eps = 1e-6
    E = np.eye(ob.dim)
    fd = np.array([(ob.value(theta + eps * e) - ob.value(theta - eps * e)) / (2 * eps) for e in E])
    np.testing.assert_allclose(g, fd, atol=1e-6 * max(1.0, np.abs(g).max()))
    fdH = np.array([(ob.gradient(theta + eps * e) - ob.gradient(theta - eps * e)) / (2 * eps) for e in E])
    np.testing.assert_allclose(ob.hessian(theta), fdH, atol=1e-5)


def test_bound_is_algorithm1_on_explicit_rows_and_majorizes():
    X, y, ob, rng = problem(1)
    theta = rng.standard_normal(ob.dim)
    parts = ob.bound_parts(theta)
    lz, mu, S = 0.0, np.zeros(ob.dim), np.zeros((ob.dim, ob.dim))
    for j in range(len(y)):
        a, b, c = B.compute_bound(theta, ob.features_of(j))
        lz, mu, S = lz + a, mu + b, S + c
    assert parts["log_z"] == pytest.approx(lz, rel=1e-12)
    np.testing.assert_allclose(parts["mu"], mu, atol=1e-10)
    np.testing.assert_allclose(parts["Sigma"], S, atol=1e-10)
    assert ob.upper_bound(theta, theta, parts) == pytest.approx(ob.value(theta), rel=1e-12)
    Sigma, g = ob.bound(theta)
    np.testing.assert_allclose(g, ob.gradient(theta), atol=1e-9)
    for _ in range(20):
        other = theta + rng.standard_normal(ob.dim) * rng.uniform(0.01, 3)
        assert ob.upper_bound(other, theta, parts) >= ob.value(other) - 1e-9


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), K=st.integers(2, 3), M=st.integers(1, 3), reg=st.sampled_from([0.0, 1e-3, 0.1]),
       scale=st.sampled_from([0.1, 1.0, 5.0]))
def test_majorization_never_increases_J(seed, K, M, reg, scale):
    X, y, ob, rng = problem(seed, t=12, p=2, K=K, M=M, reg=reg)
    theta = scale * rng.standard_normal(ob.dim)
    J = ob.value(theta)
    for _ in range(5):
        theta_new = ob.majorize_step(theta)
        J_new = ob.value(theta_new)
        assert J_new <= J + 1e-10 * max(1.0, abs(J))
        theta, J = theta_new, J_new


def test_bound_trainer_records_and_monotone():
    _, _, ob, rng = problem(2)
    tr = L.LatentBoundTrainer(ob, theta0=0.5 * rng.standard_normal(ob.dim), max_iter=40)
    recs = tr.run()
    for key in ("iteration", "objective", "grad_norm", "wall_time", "elapsed", "monotone"):
        assert key in recs[-1]
    assert tr.monotone and all(r["monotone"] for r in recs)
    objs = [r["objective"] for r in recs]
    assert all(b <= a + 1e-10 * abs(a) for a, b in zip(objs, objs[1:]))


def test_m1_reduces_to_multinomial_logistic():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((30, 4))
    y = rng.integers(0, 3, 30)
    ob = L.LatentConditional(X, y, 3, 1, 0.02)
    ml = MultinomialLogistic(X, y, 3, 0.02)
    assert ob.dim == ml.dim
    for _ in range(3):
        theta = rng.standard_normal(ob.dim)
        assert ob.value(theta) == pytest.approx(ml.value(theta), rel=1e-12)
        np.testing.assert_allclose(ob.gradient(theta), ml.gradient(theta), atol=1e-10)
        np.testing.assert_allclose(ob.hessian(theta), ml.hessian(theta), atol=1e-10)
        np.testing.assert_allclose(ob.bound(theta)[0], ml.bound(theta)[0], atol=1e-10)
        np.testing.assert_allclose(ob.majorize_step(theta), theta - np.linalg.solve(
            ml.bound(theta)[0] + ml.ridge * np.eye(ml.dim), ml.gradient(theta)), atol=1e-8)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_em_joint_likelihood_never_decreases_and_maps_to_conditional(seed):
    X, y = L.make_toy(seed, scale=0.3)
    X = (X - X.mean(0)) / X.std(0)
    ob = L.LatentConditional(X, y, 2, 2, 0.0)
    em = L.EMTrainer(X, y, 2, 2, seed=seed, objective=ob, max_iter=60)
    G = [em.joint_log_likelihood()]
    for rec in em.run():
        G.append(rec["joint_log_likelihood"])
        assert np.isfinite(rec["conditional"])
    assert all(b >= a - 1e-9 * abs(a) for a, b in zip(G, G[1:])) and em.monotone
    # the conditional of the joint model equals the LatentConditional family at to_theta()
    lp = em.params.component_log_densities(X)  # (t, K, M)
    joint = np.logaddexp.reduce(lp, axis=2)
    cond = joint - np.logaddexp.reduce(joint, axis=1, keepdims=True)
    np.testing.assert_allclose(ob.probabilities(em.theta), np.exp(cond), atol=1e-10)


def test_toy_layout():
    X, y = L.make_toy(0)
    assert X.shape == (int(L.TOY_SIZES.sum()), 2) and set(np.unique(y)) == {0, 1}
    assert len(L.TOY_CENTRES) == 8
    X2, _ = L.make_toy(0)
    np.testing.assert_array_equal(X, X2)
