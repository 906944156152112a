"""Unit priors of TAP machines (engine.kernels.tap, Appendix C) against independent oracles.

log Z(B, A) = log int mu(dx) exp(B x - A x^2/2) (eq. 32, Appendix C's sign of A), and
f_a = d log Z/dB, f_c = d^2 log Z/dB^2 (eq. 35), checked against

* explicit sums over {0, 1} and {-1, +1};
* scipy.integrate.quad for the truncated Gaussian and Gauss-Bernoulli priors, with break
  points placed at geometric distances from the exponent's maxima so that peaks of width
  1e-12 are resolved (extreme B and A included);
* the paper's closed forms with Erf / Erfi (eqs. 75, 78, 81) where they are well
  conditioned, including the A + V < 0 case;
* finite differences of log Z in B (f_a, f_c) and in A (d log Z/dA = -<x^2>/2).
"""

import math

import numpy as np
import pytest
import scipy.integrate
import scipy.special
from hypothesis import given, strategies as st

from boltzlab.engine import tap as T
from boltzlab.engine.kernels import tap as kernels

# ----------------------------------------------------------------------- strategies


def signed_magnitudes(lo_exp, hi_exp):
    """Floats whose magnitudes spread log-uniformly over [10^lo_exp, 10^hi_exp], either sign, or 0."""
    mags = st.floats(lo_exp, hi_exp).map(lambda e: 10.0**e)
    return st.one_of(st.just(0.0), st.tuples(mags, st.sampled_from([-1.0, 1.0])).map(lambda t: t[0] * t[1]))


fields = st.one_of(st.floats(-10, 10), signed_magnitudes(-9, 6))
bounds = st.sampled_from([(0.0, 1.0), (-1.0, 1.0), (-0.5, 2.0), (0.25, 0.75), (-3.0, -1.0)])


# ------------------------------------------------------------------ references


def ref_discrete(values, B, A, U):
    """(log Z, mean, variance) by summation over the unit's values."""
    x = np.asarray(values, dtype=float)
    # weights relative to the first value, differenced before rounding: for spins
    # x^2 - x0^2 = 0 exactly, so a huge A cannot blur the relative weights
    rel = (U + B) * (x - x[0]) - 0.5 * A * (x * x - x[0] ** 2)
    top = rel.max()
    w = np.exp(rel - top)
    lz = (U + B) * x[0] - 0.5 * A * x[0] ** 2 + top + math.log(w.sum())
    p = w / w.sum()
    # variance as sum_{a<b} p_a p_b (x_a - x_b)^2: no cancellation when one value dominates
    var = 0.5 * float(np.sum(p[:, None] * p[None, :] * (x[:, None] - x[None, :]) ** 2))
    return lz, float(p @ x), var


def ref_trunc_gauss(m, prec, lo, hi):
    """(log int_lo^hi exp(m x - prec x^2/2) dx, mean, variance) by scipy.integrate.quad.

    The integrand is divided by its maximum (the exponent differenced without cancellation);
    quad runs on the pieces between break points
    at the exponent's extremum and at distances 10^-k (hi - lo), k = 1..13, from each of its
    maxima, so steep edges and sharp interior peaks are resolved piece by piece.
    """
    psi = lambda x: m * x - 0.5 * prec * x * x
    width = hi - lo
    maxima = [lo, hi]
    if prec != 0.0 and lo < m / prec < hi:
        maxima.append(m / prec)
    best = max(maxima, key=psi)
    top = psi(best)
    points = {lo, hi, *maxima}
    for c in maxima:
        for k in range(1, 14):
            for x in (c - 10.0**-k * width, c + 10.0**-k * width):
                if lo < x < hi:
                    points.add(x)
    points = sorted(points)

    def integral(fn):
        total = 0.0
        for a, b in zip(points[:-1], points[1:]):
            total += scipy.integrate.quad(fn, a, b, epsabs=0.0, epsrel=1e-13, limit=200)[0]
        return total

    # psi(x) - psi(best) = (x - best)(m - prec (x + best)/2): no cancellation of two large psi
    f = lambda x: math.exp((x - best) * (m - 0.5 * prec * (x + best)))
    z = integral(f)
    mean = integral(lambda x: x * f(x)) / z
    var = integral(lambda x: (x - mean) ** 2 * f(x)) / z
    return top + math.log(z), mean, var


def ref_gauss_bernoulli(m, prec, rho, lo, hi):
    """Spike (1 - rho) at 0 plus slab rho exp(m x - prec x^2/2) on [lo, hi] (eq. 94), by quad."""
    lz, mu, var = ref_trunc_gauss(m, prec, lo, hi)
    l_slab = math.log(rho) + lz
    total = np.logaddexp(math.log1p(-rho), l_slab)
    nz = math.exp(l_slab - total)
    # law of total variance over {spike, slab}: no cancellation of <x^2> - <x>^2 when nz ~ 1
    return total, nz * mu, nz * var + nz * (1.0 - nz) * mu * mu


def engine_one(kind, B, A, U=0.0, V=1.0, rho=0.5, bounds=(0.0, 1.0)):
    code = T.PRIOR_CODES[kind]
    return kernels.prior_moments(code, B, A, U, V, rho, bounds[0], bounds[1])


def assert_close(got, want, lo, hi, *, rel_lz=1e-10, abs_fa=1e-9, rel_fc=1e-6):
    """log Z relative to max(1, |log Z|); f_a absolute on the interval's scale; f_c relative."""
    width = hi - lo
    assert abs(got[0] - want[0]) <= rel_lz * max(1.0, abs(want[0])), (got, want)
    assert abs(got[1] - want[1]) <= abs_fa * width, (got, want)
    assert abs(got[2] - want[2]) <= rel_fc * want[2] + 1e-300, (got, want)


# ------------------------------------------------------------- discrete priors


@given(B=fields, A=fields, U=st.floats(-20, 20))
def test_bernoulli_prior_matches_summation(B, A, U):
    """x in {0, 1}: x^2 = x, so A acts as the linear field -A/2 (f_a = sigmoid(U + B - A/2), C.3)."""
    got = engine_one("bernoulli", B, A, U)
    want = ref_discrete([0.0, 1.0], B, A, U)
    assert got[0] == pytest.approx(want[0], rel=1e-12, abs=1e-12)
    assert got[1] == pytest.approx(want[1], rel=1e-12, abs=1e-300)
    assert got[2] == pytest.approx(want[2], rel=1e-12, abs=1e-300)
    assert got[1] == pytest.approx(scipy.special.expit(U + B - 0.5 * A), rel=1e-12, abs=1e-300)


@given(B=fields, A=fields, U=st.floats(-20, 20))
def test_spin_prior_matches_summation(B, A, U):
    """x in {-1, +1}: x^2 = 1, so A only shifts log Z by -A/2 and leaves the moments alone."""
    got = engine_one("spin", B, A, U)
    want = ref_discrete([-1.0, 1.0], B, A, U)
    assert got[0] == pytest.approx(want[0], rel=1e-12, abs=1e-12)
    assert got[1] == pytest.approx(want[1], rel=1e-12, abs=1e-15)  # the sum cancels near 0
    assert got[2] == pytest.approx(want[2], rel=1e-12, abs=1e-300)
    assert got[1] == pytest.approx(math.tanh(U + B), rel=1e-12, abs=1e-300)


# -------------------------------------------------------- truncated Gaussian


@given(B=fields, A=fields, U=st.floats(-5, 5), V=st.floats(-5, 20), lims=bounds)
def test_truncated_gaussian_matches_quadrature(B, A, U, V, lims):
    lo, hi = lims
    assert_close(engine_one("truncated_gaussian", B, A, U, V, bounds=lims), ref_trunc_gauss(B + U, A + V, lo, hi), lo, hi)


@given(B=fields, A=fields, U=st.floats(-5, 5), V=st.floats(-5, 20), rho=st.floats(1e-6, 1 - 1e-6), lims=bounds)
def test_truncated_gauss_bernoulli_matches_quadrature(B, A, U, V, rho, lims):
    lo, hi = lims
    got = engine_one("truncated_gauss_bernoulli", B, A, U, V, rho, lims)
    assert_close(got, ref_gauss_bernoulli(B + U, A + V, rho, lo, hi), lo, hi)
    # P[x != 0] (eq. 95) is the slab's share
    nz = kernels.prior_nonzero(T.PRIOR_CODES["truncated_gauss_bernoulli"], B, A, U, V, rho, lo, hi)
    slab = math.log(rho) + ref_trunc_gauss(B + U, A + V, lo, hi)[0]
    assert nz == pytest.approx(math.exp(slab - np.logaddexp(math.log1p(-rho), slab)), rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("m,prec", [
    (1e5, 1.0), (-1e5, 1.0), (3e3, 1e-9), (50.0, -1e-8),  # |m / prec| >> |lo|, |hi| (C.1.2)
    (1e8, 1e9), (4e8, 1e9), (-2e6, -1e6),  # sharp interior peak, a peak just inside, A + V << 0
    (0.0, -2e4), (1e4, -2e4), (0.0, 0.0), (1e-300, 1e-300),  # mass at both ends, flat
])
def test_truncated_gaussian_extremes_stay_finite_and_accurate(m, prec):
    """The cases where the Erf/Erfi differences d_+- of eqs. 75-81 are 0/0 or overflow."""
    got = engine_one("truncated_gaussian", m, prec, 0.0, 0.0)
    assert all(math.isfinite(v) for v in got) and got[2] >= 0.0
    assert_close(got, ref_trunc_gauss(m, prec, 0.0, 1.0), 0.0, 1.0)


def paper_closed_form(B, A, U, V, lo, hi):
    """Eqs. 75, 78, 81 (unnormalised: without 1/Z_TG), Erf for A + V > 0, Erfi below."""
    s, t = A + V, B + U
    h = lambda x: math.sqrt(abs(s) / 2.0) * (x - t / s)
    ha, hw = h(lo), h(hi)
    if s > 0:
        d = math.erf(hw) - math.erf(ha)
        ea, ew = math.exp(-ha * ha), math.exp(-hw * hw)
    else:
        d = scipy.special.erfi(hw) - scipy.special.erfi(ha)
        ea, ew = math.exp(ha * ha), math.exp(hw * hw)
    lz = 0.5 * math.log(math.pi / (2 * abs(s))) + t * t / (2 * s) + math.log(d)
    # eq. 78 prints (e^{h_a^2} - e^{h_w^2}) / d_- for A + V < 0; completing the square gives
    # E[y] = (e^{h_w^2} - e^{h_a^2}) / (sqrt(pi) d_-), the opposite sign (a typo: the printed
    # form puts the mean outside [lo, hi]).  Eq. 81 is right as printed.
    sign = 1.0 if s > 0 else -1.0
    fa = t / s + sign * math.sqrt(2 / (math.pi * abs(s))) * (ea - ew) / d
    fc = 1 / s - (fa - t / s) ** 2 + 2 / (math.sqrt(math.pi) * s) * (ha * ea - hw * ew) / d
    return lz, fa, fc


@pytest.mark.parametrize("B,A", [(0.3, 1.0), (-1.0, 4.0), (2.0, -0.5), (0.5, -3.0), (-2.0, -6.0), (6.0, 9.0)])
@pytest.mark.parametrize("lims", [(0.0, 1.0), (-1.0, 2.0)])
def test_truncated_gaussian_matches_the_papers_erf_and_erfi_formulas(B, A, lims):
    """Where they are well conditioned, eqs. 75/78/81 (with the Erfi branch for A + V < 0) agree,
    once the sign of eq. 78's Erfi branch is corrected (see paper_closed_form)."""
    U, V = 0.2, 1.5
    lo, hi = lims
    got = engine_one("truncated_gaussian", B, A, U, V, bounds=lims)
    want = paper_closed_form(B, A, U, V, lo, hi)
    assert got[0] == pytest.approx(want[0], rel=1e-11, abs=1e-11)
    assert got[1] == pytest.approx(want[1], rel=1e-10, abs=1e-11)
    assert got[2] == pytest.approx(want[2], rel=1e-8)


# -------------------------------------------------------- finite differences


@pytest.mark.parametrize("kind", T.PRIOR_KINDS)
@given(B=st.floats(-200, 200), A=st.floats(-200, 200), U=st.floats(-3, 3), V=st.floats(-3, 10),
       rho=st.floats(0.01, 0.99))
def test_moments_are_derivatives_of_log_z(kind, B, A, U, V, rho):
    """f_a = dlogZ/dB and f_c = df_a/dB by central differences; dlogZ/dA = -(f_c + f_a^2)/2."""
    lims = (-0.5, 1.5)
    f = lambda b, a: engine_one(kind, b, a, U, V, rho, lims)
    lz, fa, fc = f(B, A)
    h = 1e-5
    noise = 4e-16 * max(1.0, abs(lz)) / h  # rounding of log Z amplified by the difference
    d_b = (f(B + h, A)[0] - f(B - h, A)[0]) / (2 * h)
    assert abs(d_b - fa) <= 1e-7 + noise
    d2_b = (f(B + h, A)[1] - f(B - h, A)[1]) / (2 * h)
    assert abs(d2_b - fc) <= 1e-6 * max(1.0, fc) + 4e-16 / h
    d_a = (f(B, A + h)[0] - f(B, A - h)[0]) / (2 * h)
    assert abs(d_a + 0.5 * (fc + fa * fa)) <= 1e-7 + noise


# --------------------------------------------------------------- public wrapper


def test_prior_log_partition_broadcasts_and_matches_the_kernel():
    B = np.linspace(-3, 3, 7)[:, None]
    A = np.array([-2.0, 0.0, 5.0])[None, :]
    for kind in T.PRIOR_KINDS:
        prior = T.Prior(kind, precision=2.0, rho=0.3, bounds=(-1.0, 1.0))
        lz, fa, fc = T.prior_log_partition(prior, B, A, U=0.4)
        assert lz.shape == fa.shape == fc.shape == (7, 3)
        for i in range(7):
            for j in range(3):
                want = engine_one(kind, B[i, 0], A[0, j], 0.4, 2.0, 0.3, (-1.0, 1.0))
                assert (lz[i, j], fa[i, j], fc[i, j]) == want


@pytest.mark.parametrize("prior,match", [
    ("gaussian", "prior_vis|kind"), (T.Prior("truncated_gaussian", bounds=(1.0, 0.0)), "bounds"),
    (T.Prior("truncated_gauss_bernoulli", rho=1.0), "rho"), (T.Prior("truncated_gaussian", precision=np.nan), "precision"),
])
def test_bad_priors_are_rejected_with_the_argument_named(prior, match):
    with pytest.raises(ValueError, match=match):
        T.prior_log_partition(prior, 0.0, 0.0)


def test_dawson_and_mills_helpers_match_scipy():
    ys = np.concatenate([-np.logspace(-8, 3, 40), [0.0], np.logspace(-8, 3, 40)])
    for y in ys:
        assert kernels.dawson(y) == pytest.approx(scipy.special.dawsn(y), rel=1e-13, abs=1e-300)
    for z in np.concatenate([[0.0], np.logspace(-6, 4, 60)]):
        m0, m1, m2 = kernels.mills_moments(z)
        # m_0 = sqrt(pi/2) erfcx(z / sqrt 2); m_1, m_2 by quad of t^k exp(-z t - t^2/2)
        assert m0 == pytest.approx(math.sqrt(math.pi / 2) * scipy.special.erfcx(z / math.sqrt(2)), rel=1e-13)
        for k, got in ((1, m1), (2, m2)):
            scale = 1.0 / max(z, 1.0)
            want = scipy.integrate.quad(lambda t: t**k * math.exp(-z * t - 0.5 * t * t), 0, 60 * scale,
                                        points=[scale, 10 * scale], epsabs=0, epsrel=1e-13, limit=200)[0]
            assert got == pytest.approx(want, rel=1e-11)
