"""Numba kernels of TAP machines (Tramel, Gabrié, Manoel, Caltagirone & Krzakala 2018).

Imported as ``boltzlab.engine.kernels.tap``; numba caches the compiled functions on disk
(beside this file, or under ``NUMBA_CACHE_DIR``) and reuses them while this file is unchanged.

Conventions (the paper's symbols).  Each unit carries a prior measure mu_theta and a
Gaussian "field" (B, A); everything about a unit follows from

    log Z(B, A; theta) = log int mu_theta(dx) exp(B x - A x^2 / 2)             (eq. 32)
    f_a = d log Z / dB = <x>,    f_c = d^2 log Z / dB^2 = <x^2> - <x>^2       (eq. 35)

with the sign of A of Appendix C and Algorithm 1 (eq. 32 prints exp(A x^2/2 - B x); with
A = -sum W^2 c <= 0 (eq. 33) only exp(B x - A x^2/2) reproduces the binary TAP equations of
Gabrié et al. 2015).  The priors are *unnormalised* exponential families, so the bias U is
part of the measure and log Z of the whole RBM, not of a normalised GRBM:

    code 0  Bernoulli      x in {0, 1},    mu = e^{U x}              (C.3; x^2 = x, so A shifts
                                                                    the field: U + B - A/2)
    code 1  spin           x in {-1, +1},  mu = e^{U x}              (x^2 = 1: A is a constant)
    code 2  truncated      x in [lo, hi],  mu = e^{U x - V x^2/2} dx (C.1; any sign of A + V)
            Gaussian
    code 3  truncated      mu = (1 - rho) delta_0 + rho e^{U x - V x^2/2} 1[lo, hi] dx     (C.2,
            Gauss-Bernoulli                                                            eq. 94)

Normalising a prior only subtracts log Z(0, 0; theta), which leaves f_a, f_c unchanged and
cancels between the data term and log Z in the log-likelihood (eq. 39).

Truncated Gaussian numerics (C.1, C.1.2).  With x = lo + L u, L = hi - lo, the integral is
L e^{const} int_0^1 exp(g u - p u^2/2) du with g = L (B + U - (A + V) lo), p = (A + V) L^2.
Instead of Erf / Erfi differences d_+, d_- (which cancel when |B + U| / |A + V| >> |lo|, |hi|,
C.1.2's case, and overflow for large arguments) the interval is split at the extremum of the
exponent into monotone pieces, each integrated from its maximum where nothing cancels:

* gentle pieces (slope and curvature <= GENTLE): Gauss-Legendre quadrature;
* steep, nearly exponential pieces (|p| <= SERIES_EPS slope^2): a power series in p around
  the truncated exponential (the analogue of the paper's series safeguard, eq. 92);
* steep concave pieces (A + V > 0): Mills ratios (erfc / continued fraction);
* steep convex pieces (A + V < 0): Dawson's function D(y) = sqrt(pi)/2 e^{-y^2} Erfi(y),
  i.e. the paper's Erfi with its e^{y^2} carried in log space.  (Eq. 78's Erfi branch has
  the sign of e^{h_alpha^2} - e^{h_omega^2} reversed; the tests check the corrected form.)

Accuracy against a 110-digit reference over |B + U|, |A + V| up to 1e9: log Z to ~1e-15
relative, f_a to ~1e-14 of the interval, f_c to ~1e-10 relative (worst in the A + V < 0
branch, whose moments come from identities that divide by A + V).

Every kernel is ``@njit(cache=True, nogil=True)``; layer updates use one BLAS product per
matrix for all the chains at once.  Threads (:mod:`boltzlab.engine.threads`):
:func:`tap_iterate_blocks` is :func:`tap_iterate` on one thread; on more it splits each
half-step into fixed blocks of the layer's columns (:func:`col_blocks`, set by the layer's
size alone) run in parallel, each block multiplying all chains by its columns of the
weights in place (single-threaded BLAS, nothing copied); results are the same on any
n >= 2 threads and differ from one thread's at rounding level in float32 only.  On
OpenBLAS's AVX-512 cores a small float32 model's products run in pieces of rows that fit the
BLAS's small-matrix kernel (:func:`_dot_rows`, :func:`boltzlab.engine.threads.small_gemm_rows`).
"""

from __future__ import annotations

import math

import numpy as np
from numba import get_num_threads, njit, prange

from .common import (COL_BLOCK, COL_UNIT, F32, HALF_32, ONE_32, ZERO_32, _fdiv,  # noqa: F401
                     col_block, col_blocks, even_blocks, exp_nonpositive, exp_nonpositive32, logaddexp,
                     matmul, sigmoid32)
from ..threads import small_gemm_rows

BERNOULLI = 0
SPIN = 1
TRUNC_GAUSS = 2
TRUNC_GAUSS_BERNOULLI = 3

GENTLE = 4.0  # |slope|, |curvature| of a piece below which quadrature is exact to rounding
SERIES_EPS = 2e-3  # |p| / slope^2 below which the series around the exponential is used
SERIES_TERMS = 12  # its terms shrink like (2 SERIES_EPS)^n (2n)!/n!: < 1e-17 after 10
MILLS_CF_FROM = 2.0  # Mills ratios by continued fraction from this argument on
MILLS_CF_DEPTH = 90
DAWSON_SERIES_TO = 6.5  # Dawson's function: Erfi series below, asymptotic series above
SQRT_HALF_PI = math.sqrt(0.5 * math.pi)
SQRT2 = math.sqrt(2.0)
_GL_X, _GL_W = np.polynomial.legendre.leggauss(24)
GL_NODES = 0.5 * (_GL_X + 1.0)  # Gauss-Legendre on [0, 1]
GL_WEIGHTS = 0.5 * _GL_W


# ------------------------------------------------------------------ scalar helpers


@njit(cache=True, nogil=True)
def mills_moments(z):
    """Raw moments m_k = int_0^inf t^k exp(-z t - t^2/2) dt, k = 0, 1, 2, for z >= 0.

    m_0 is the Mills ratio.  For z >= MILLS_CF_FROM, m_1 = 1 - z m_0 and m_2 = m_0 - z m_1
    would cancel; Laplace's continued fraction m_0 = 1 / D_0, D_k = z + (k + 1) / D_{k+1}
    gives them without cancellation: m_1 = m_0 / D_1, m_2 = 2 m_0 / (D_1 D_2).
    """
    if z < MILLS_CF_FROM:
        m0 = SQRT_HALF_PI * math.exp(0.5 * z * z) * math.erfc(z / SQRT2)
        m1 = 1.0 - z * m0
        return m0, m1, m0 - z * m1
    d = z
    for k in range(MILLS_CF_DEPTH, 2, -1):
        d = z + k / d
    d2 = d  # D_2 = z + 3 / D_3
    d1 = z + 2.0 / d2
    d0 = z + 1.0 / d1
    m0 = 1.0 / d0
    return m0, m0 / d1, 2.0 * m0 / (d1 * d2)


@njit(cache=True, nogil=True)
def dawson(y):
    """Dawson's function D(y) = e^{-y^2} int_0^y e^{t^2} dt = sqrt(pi)/2 e^{-y^2} Erfi(y)."""
    a = abs(y)
    if a == 0.0 or a != a:
        return y
    if a < DAWSON_SERIES_TO:
        # e^{-y^2} sum_n y^{2n+1} / (n! (2n + 1)): positive terms, no cancellation
        y2 = a * a
        term = a
        total = a
        n = 0
        while True:
            n += 1
            term *= y2 / n
            add = term / (2 * n + 1)
            total += add
            if add <= 1e-17 * total:
                break
        out = math.exp(-y2) * total
    else:
        # asymptotic: sum_k (2k-1)!! / (2^{k+1} y^{2k+1}), error ~ e^{-y^2}
        inv = 1.0 / (2.0 * a * a)
        term = 0.5 / a
        total = term
        k = 0
        while True:
            k += 1
            nxt = term * (2 * k - 1) * inv
            if nxt > term or nxt < 1e-17 * total:
                break
            term = nxt
            total += term
        out = total
    return out if y >= 0.0 else -out


# ------------------------------------------------ monotone pieces of int exp(quadratic)


@njit(cache=True, nogil=True)
def _piece_unit(sig, pi_):
    """int_0^1 v^k exp(-sig v - pi_ v^2 / 2) dv for k = 0, 1, 2, as (log I0, E[v], E[v^2]).

    Requires sig >= 0 and sig + pi_ >= 0 (the exponent decreases on [0, 1], so its maximum,
    0, is at v = 0).  Branches as in the module docstring.
    """
    if sig <= GENTLE and abs(pi_) <= GENTLE:
        i0 = 0.0
        i1 = 0.0
        i2 = 0.0
        for n in range(GL_NODES.shape[0]):
            v = GL_NODES[n]
            e = GL_WEIGHTS[n] * math.exp(-sig * v - 0.5 * pi_ * v * v)
            i0 += e
            i1 += e * v
            i2 += e * v * v
        return math.log(i0), i1 / i0, i2 / i0
    if abs(pi_) <= SERIES_EPS * sig * sig:
        # exp(-pi v^2/2) = sum_n (-pi/2)^n v^{2n} / n!, and J_m = int_0^1 v^m e^{-sig v} dv
        # by the recurrence J_m = (m J_{m-1} - e^{-sig}) / sig (sig > GENTLE here)
        es = math.exp(-sig)
        j0 = -math.expm1(-sig) / sig  # J_0, then J_m walked forward three at a time
        i0 = 0.0
        i1 = 0.0
        i2 = 0.0
        coef = 1.0
        m = 0
        for n in range(SERIES_TERMS):
            j1 = ((m + 1) * j0 - es) / sig
            j2 = ((m + 2) * j1 - es) / sig
            i0 += coef * j0
            i1 += coef * j1
            i2 += coef * j2
            coef *= -0.5 * pi_ / (n + 1)
            m += 2
            j0 = j2
        return math.log(i0), i1 / i0, i2 / i0
    if pi_ > 0.0:
        # concave: t = sqrt(pi) v, int_0^T = int_0^inf - e^{-zT - T^2/2} int_0^inf(shifted)
        rt = math.sqrt(pi_)
        z = sig / rt
        a0, a1, a2 = mills_moments(z)
        b0, b1, b2 = mills_moments(z + rt)
        e = math.exp(-sig - 0.5 * pi_)
        s0 = a0 - e * b0
        s1 = a1 - e * (rt * b0 + b1)
        s2 = a2 - e * (rt * rt * b0 + 2.0 * rt * b1 + b2)
        return math.log(s0) - math.log(rt), s1 / (s0 * rt), s2 / (s0 * pi_)
    # convex (q = -pi_ > 0, SERIES_EPS sig^2 < q <= sig): Dawson for I0, then the identities
    # int phi' e^phi = e^phi(1) - 1 and int v phi' e^phi = e^phi(1) - I0, phi = -sig v + q v^2/2
    q = -pi_
    rq = math.sqrt(2.0 * q)
    e1 = math.exp(-sig + 0.5 * q)
    i0 = (2.0 / rq) * (dawson(sig / rq) - e1 * dawson((sig - q) / rq))
    i1 = (sig * i0 - 1.0 + e1) / q
    i2 = (sig * i1 - i0 + e1) / q
    return math.log(i0), i1 / i0, i2 / i0


@njit(cache=True, nogil=True)
def _piece(s, p, width):
    """int_0^width w^k exp(-s w - p w^2 / 2) dw as (log I0, E[w], E[w^2]); s, s + p width >= 0."""
    lg, e1, e2 = _piece_unit(s * width, p * width * width)
    return lg + math.log(width), e1 * width, e2 * width * width


@njit(cache=True, nogil=True)
def quadratic_moments(g, p):
    """log J, E[u], Var[u] for the density proportional to exp(g u - p u^2 / 2) on [0, 1].

    The interval is split at the extremum u = g / p when it lies inside; each monotone piece
    is integrated from its maximum (:func:`_piece`).  Moments are accumulated about the start
    of the heaviest piece, so a variance far below the squared mean does not cancel.
    """
    cut = 2.0  # no interior extremum
    if p != 0.0:
        cut = g / p
    if not 0.0 < cut < 1.0:
        start, sign, lg, e1, e2 = _oriented_piece(g, p, 0.0, 1.0)
        return g * start - 0.5 * p * start * start + lg, start + sign * e1, max(e2 - e1 * e1, 0.0)
    sa, ga, la, a1, a2 = _oriented_piece(g, p, 0.0, cut)
    sb, gb, lb, b1, b2 = _oriented_piece(g, p, cut, 1.0)
    # piece weights relative to psi(sa): psi(sb) - psi(sa) = (sb - sa)(g - p (sa + sb) / 2) does
    # not cancel, while psi itself can be ~1e8 and would leave the weights only ~1e-8 accurate
    lb += (sb - sa) * (g - 0.5 * p * (sa + sb))
    log_rel = logaddexp(la, lb)
    wa = math.exp(la - log_rel)
    wb = math.exp(lb - log_rel)
    log_j = g * sa - 0.5 * p * sa * sa + log_rel
    ref = sa if la >= lb else sb
    oa = sa - ref
    ob = sb - ref
    mean_d = wa * (oa + ga * a1) + wb * (ob + gb * b1)
    sq_d = wa * (oa * oa + 2.0 * oa * ga * a1 + a2) + wb * (ob * ob + 2.0 * ob * gb * b1 + b2)
    return log_j, ref + mean_d, max(sq_d - mean_d * mean_d, 0.0)


@njit(cache=True, nogil=True)
def _oriented_piece(g, p, lo, hi):
    """The piece [lo, hi] of exp(g u - p u^2/2), monotone there, integrated from its maximum.

    Returns (start, sign, log I0, E[w], E[w^2]) with u = start + sign w, w >= 0.
    """
    mid = 0.5 * (lo + hi)
    if g - p * mid <= 0.0:  # decreasing: start at lo, u = lo + w, slope -psi'(lo)
        start, sign, s = lo, 1.0, p * lo - g
    else:  # increasing: start at hi, u = hi - w, slope psi'(hi)
        start, sign, s = hi, -1.0, g - p * hi
    lg, e1, e2 = _piece(max(s, 0.0), p, hi - lo)  # max: rounding at the extremum
    return start, sign, lg, e1, e2


@njit(cache=True, nogil=True)
def trunc_gauss(m, prec, lo, hi):
    """log int_lo^hi exp(m x - prec x^2 / 2) dx with the mean and variance of x (C.1, eqs. 75-81).

    m = B + U and prec = A + V of any sign (prec < 0 is the paper's Erfi case).
    """
    width = hi - lo
    g = width * (m - prec * lo)
    p = prec * width * width
    log_j, mu, var = quadratic_moments(g, p)
    return m * lo - 0.5 * prec * lo * lo + math.log(width) + log_j, lo + width * mu, width * width * var


# ------------------------------------------------------------------- unit priors


@njit(cache=True, nogil=True)
def prior_moments(code, B, A, U, V, rho, lo, hi):
    """(log Z, f_a, f_c) of one unit with prior ``code`` under the field (B, A) (eqs. 32, 35)."""
    if code == BERNOULLI:
        x = U + B - 0.5 * A  # x^2 = x: the quadratic field is a linear one
        e = math.exp(-abs(x))  # one exp for all three; f_c = e / (1 + e)^2 does not cancel
        inv = 1.0 / (1.0 + e)
        fa = inv if x >= 0.0 else e * inv
        return max(x, 0.0) + math.log1p(e), fa, e * inv * inv
    if code == SPIN:
        x = U + B
        ax = abs(x)
        fa = math.tanh(x)
        # log(e^x + e^-x) - A/2, and 1 - tanh^2 = 4 e^{-2|x|} / (1 + e^{-2|x|})^2 without cancellation
        e = math.exp(-2.0 * ax)
        return ax + math.log1p(e) - 0.5 * A, fa, 4.0 * e / ((1.0 + e) * (1.0 + e))
    lz, mu, var = trunc_gauss(U + B, V + A, lo, hi)
    if code == TRUNC_GAUSS:
        return lz, mu, var
    # Gauss-Bernoulli (C.2): Z = (1 - rho) + rho Z_TG, P[x != 0] = rho Z_TG / Z (eqs. 95-98)
    l_slab = math.log(rho) + lz
    l_spike = math.log1p(-rho)
    lzq = logaddexp(l_spike, l_slab)
    nz = math.exp(l_slab - lzq)
    fa = nz * mu
    return lzq, fa, nz * var + nz * (1.0 - nz) * mu * mu


@njit(cache=True, nogil=True)
def prior_nonzero(code, B, A, U, V, rho, lo, hi):
    """P_Q[x != 0] of a Gauss-Bernoulli unit under (B, A) (eq. 95); 1 for other priors."""
    if code != TRUNC_GAUSS_BERNOULLI:
        return 1.0
    lz, mu, var = trunc_gauss(U + B, V + A, lo, hi)
    l_slab = math.log(rho) + lz
    return math.exp(l_slab - logaddexp(math.log1p(-rho), l_slab))


@njit(cache=True, nogil=True)
def prior_eval(code, B, A, U, V, rho, lo, hi):
    """Elementwise :func:`prior_moments` over equal-length 1-d arrays B, A, U, V, rho."""
    n = B.shape[0]
    lz = np.empty(n)
    fa = np.empty(n)
    fc = np.empty(n)
    for i in range(n):
        lz[i], fa[i], fc[i] = prior_moments(code, B[i], A[i], U[i], V[i], rho[i], lo, hi)
    return lz, fa, fc


@njit(cache=True, nogil=True)
def log_base_density(code, x, U, V, rho, lo, hi):
    """log of the prior measure's density at x (w.r.t. counting / Lebesgue / delta_0 + Lebesgue)."""
    if code == BERNOULLI or code == SPIN:
        return U * x
    if x < lo or x > hi:
        return -math.inf
    if code == TRUNC_GAUSS:
        return U * x - 0.5 * V * x * x
    if x == 0.0:
        return math.log1p(-rho)
    return math.log(rho) + U * x - 0.5 * V * x * x


@njit(cache=True, nogil=True)
def layer_nonzero(code, B, A, U, V, rho, lo, hi):
    """P_Q[x != 0] (eq. 95) of every unit of a layer under its fields, (n, N)."""
    n, m = B.shape
    out = np.empty((n, m))
    for r in range(n):
        for j in range(m):
            out[r, j] = prior_nonzero(code, B[r, j], A[r, j], U[j], V[j], rho[j], lo, hi)
    return out


# ------------------------------------------------------------- TAP inference


@njit(cache=True, nogil=True)
def _sum(v):
    """Sum with four accumulators (an add chain would be latency-bound)."""
    n = v.shape[0]
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    j = 0
    while j + 4 <= n:
        s0 += v[j]
        s1 += v[j + 1]
        s2 += v[j + 2]
        s3 += v[j + 3]
        j += 4
    while j < n:
        s0 += v[j]
        j += 1
    return (s0 + s1) + (s2 + s3)


@njit(cache=True, nogil=True)
def _half_step(code, G, S, a, c, U, V, rho, lo, hi, field, has_field, damping, diff, scratch, n, j0, j1):
    """One side of Algorithm 1 for the first n rows and the columns [j0, j1), in place.

    A = -S (S = c_other W^2, eq. 33), B = A a_old + G (G = a_other W, eq. 34), then
    (a, c) <- (1 - damping) (f_a, f_c)(B, A) + damping (a, c); diff[r] += sum (a_new - a_old)^2.
    The Bernoulli case (the common one) runs as vectorisable passes per row with
    :func:`exp_nonpositive`; the others call :func:`prior_moments` per unit.  G, S, a, c are
    float32 or float64 (the products' precision); a float32 Bernoulli layer runs its
    elementwise work in float32 too (one fused loop per row, :func:`exp_nonpositive32`),
    the other priors in float64.  ``scratch`` is (5, >= j1) float64, reused every sweep.
    diff[r] gets the sum over the columns [j0, j1) only (a column block's part).
    """
    take = 1.0 - damping
    m = j1 - j0
    u_ = U[j0:j1]
    if code == BERNOULLI and G.itemsize == 4:
        # float32: the same, fused into one loop per row in float32 (exp_nonpositive32); the
        # squared changes go to a float32 scratch row and are summed in float64
        sq32 = scratch[4].view(np.float32)[j0:j1]
        take32 = F32(take)
        damp32 = F32(damping)
        for r in range(n):
            # row views of the block's columns: indices from 0 (no negative-index checks) and
            # contiguous rows, so the loop vectorises
            g = G[r, j0:j1]
            s = S[r, j0:j1]
            ar = a[r, j0:j1]
            cr = c[r, j0:j1]
            fr = field[r, j0:j1] if has_field else field[0, :0]
            for j in range(m):
                xj = F32(u_[j]) + g[j] - s[j] * (ar[j] - HALF_32)
                if has_field:
                    xj = F32(xj + fr[j])
                e = exp_nonpositive32(-abs(xj))
                inv = _fdiv(ONE_32, ONE_32 + e)
                fa = max(e, F32(xj >= ZERO_32)) * inv
                fc = e * inv * inv
                old = ar[j]
                if damping > 0.0:
                    fa = take32 * fa + damp32 * old
                    fc = take32 * fc + damp32 * cr[j]
                cr[j] = fc
                ar[j] = fa
                sq32[j] = (fa - old) * (fa - old)
            diff[r] += _sum(sq32)
        return
    if code == BERNOULLI:
        # x = U + B - A/2 = U + G + A (a_old - 1/2); f_a = sigmoid(x), f_c = e/(1 + e)^2 with
        # e = exp(-|x|), in vectorisable passes over each row
        x = scratch[0, j0:j1]
        y = scratch[1, j0:j1]
        e = scratch[2, j0:j1]
        work = scratch[3, j0:j1]
        sq = scratch[4, j0:j1]
        for r in range(n):
            g = G[r, j0:j1]
            s = S[r, j0:j1]
            ar = a[r, j0:j1]
            cr = c[r, j0:j1]
            for j in range(m):
                x[j] = u_[j] + g[j] - s[j] * (ar[j] - 0.5)
            if has_field:
                fr = field[r, j0:j1]
                for j in range(m):
                    x[j] += fr[j]
            for j in range(m):
                y[j] = -abs(x[j])
            exp_nonpositive(y, e, work)
            if damping > 0.0:
                for j in range(m):
                    inv = _fdiv(1.0, 1.0 + e[j])
                    fa = inv if x[j] >= 0.0 else e[j] * inv
                    old = ar[j]
                    new = take * fa + damping * old
                    cr[j] = take * (e[j] * inv * inv) + damping * cr[j]
                    ar[j] = new
                    sq[j] = (new - old) * (new - old)
            else:
                for j in range(m):
                    inv = _fdiv(1.0, 1.0 + e[j])
                    fa = inv if x[j] >= 0.0 else e[j] * inv
                    old = ar[j]
                    cr[j] = e[j] * inv * inv
                    ar[j] = fa
                    sq[j] = (fa - old) * (fa - old)
            diff[r] += _sum(sq)
        return
    for r in range(n):
        acc = 0.0
        for j in range(j0, j1):
            A = -np.float64(S[r, j])
            old = np.float64(a[r, j])
            u = U[j] + field[r, j] if has_field else U[j]
            lz, fa, fc = prior_moments(code, A * old + G[r, j], A, u, V[j], rho[j], lo, hi)
            if damping > 0.0:
                fa = take * fa + damping * old
                fc = take * fc + damping * c[r, j]
            a[r, j] = fa
            c[r, j] = fc
            acc += (fa - old) * (fa - old)
        diff[r] += acc


@njit(cache=True, nogil=True, parallel=True)
def _layer_blocks(code, X, Y, Wm, W2m, G, S, a, c, U, V, rho, lo, hi, field, has_field, damping, n, part, scratch):
    """One half-step of Algorithm 1 on the first n chains by blocks of the layer's columns, in
    parallel: per block G = X Wm and S = Y W2m on its columns (BLAS on the blocks of Wm and
    W2m in place: nothing copied, each block packs only its share of the matrices), then
    :func:`_half_step` on those columns, its squared changes summed into part[block]."""
    m = G.shape[1]
    nb = col_blocks(m)
    for b in prange(nb):
        j0, j1 = col_block(m, nb, b)
        matmul(X[:n], Wm[:, j0:j1], G[:n, j0:j1])
        matmul(Y[:n], W2m[:, j0:j1], S[:n, j0:j1])
        d = part[b]
        d[:n] = 0.0
        _half_step(code, G, S, a, c, U, V, rho, lo, hi, field, has_field, damping, d, scratch, n, j0, j1)


@njit(cache=True, nogil=True)
def tap_iterate(W, code_v, Uv, Vv, Rv, lo_v, hi_v, code_h, Uh, Vh, Rh, lo_h, hi_h, field, has_field,
                av, cv, ah, ch, damping, tol, max_iter, iters, converged):
    """Algorithm 1 for K chains at once: hidden then visible half-steps until convergence.

    av, cv (K, Nv) and ah, ch (K, Nh) hold the initial moments (eqs. 37-38: a_v = data,
    c_v = 0; a_h, c_h only enter through B_h = A_h a_h + ..., with A_h = 0 at the start)
    and receive the final ones.  A chain has converged when the mean squared change of its
    magnetizations (a_v and a_h, over Nv + Nh units) in one sweep is below ``tol``; it is
    then retired, so its result does not depend on the other chains, and the remaining
    ones are compacted so every sweep is four BLAS products on the active rows only.
    ``iters[k]`` gets the sweeps chain k used, ``converged[k]`` whether it converged within
    ``max_iter``.  ``field`` (K, Nv) is an extra visible field per chain (used if has_field).

    Precision: the products and the moments run in the dtype of W (av, cv, ah, ch share it:
    float32 products run about twice as fast); every buffer is allocated once per call.
    """
    _iterate(W, code_v, Uv, Vv, Rv, lo_v, hi_v, code_h, Uh, Vh, Rh, lo_h, hi_h, field, has_field,
             av, cv, ah, ch, damping, tol, max_iter, iters, converged, False, 0)


#: a model with at most this many hidden units runs Algorithm 1 and eq. 36 on several threads
#: by blocks of chains (:func:`chain_blocks`), a larger one by blocks of columns
CHAIN_SPLIT_MAX_HIDDEN = 256
CHAIN_BLOCK = 64  # chains per block, about


@njit(cache=True, nogil=True)
def chain_blocks(K):
    """The number of blocks K chains are split into on several threads (``even_blocks`` of
    CHAIN_BLOCK: set by K alone)."""
    return even_blocks(K, CHAIN_BLOCK)


def by_chains(K, Nh):
    """Whether a problem of K chains and Nh hidden units is split by chains on several threads:
    with few hidden units a column block is too thin to pay for its fork (at Nh = 100 the TAP
    lab's Algorithm 1 ran 1.0x on two threads by columns), while K / 2 chains keep each
    block's products whole."""
    return Nh <= CHAIN_SPLIT_MAX_HIDDEN and chain_blocks(K) > 1


@njit(cache=True, nogil=True, parallel=True)
def _iterate_chain_blocks(W, code_v, Uv, Vv, Rv, lo_v, hi_v, code_h, Uh, Vh, Rh, lo_h, hi_h, field, has_field,
                          av, cv, ah, ch, damping, tol, max_iter, iters, converged, rows):
    """:func:`tap_iterate` on each of the :func:`chain_blocks` of the chains, in parallel
    (a chain's sweeps never look at another chain: each block is Algorithm 1 on its rows)."""
    K = av.shape[0]
    nb = chain_blocks(K)
    for b in prange(nb):
        r0 = K * b // nb
        r1 = K * (b + 1) // nb
        f = field[r0:r1] if has_field else field[0:1]
        _iterate(W, code_v, Uv, Vv, Rv, lo_v, hi_v, code_h, Uh, Vh, Rh, lo_h, hi_h, f, has_field,
                 av[r0:r1], cv[r0:r1], ah[r0:r1], ch[r0:r1], damping, tol, max_iter, iters[r0:r1],
                 converged[r0:r1], False, rows)


def tap_iterate_blocks(W, code_v, Uv, Vv, Rv, lo_v, hi_v, code_h, Uh, Vh, Rh, lo_h, hi_h, field, has_field,
                       av, cv, ah, ch, damping, tol, max_iter, iters, converged):
    """:func:`tap_iterate` on the calling thread's numba threads (:mod:`boltzlab.engine.threads`).

    On one thread it is :func:`tap_iterate` itself: one product per matrix, no fork.  On
    more, a model with few hidden units (:func:`by_chains`) runs :func:`tap_iterate` on
    blocks of chains in parallel (:func:`chain_blocks`, one fork per call); a larger one
    splits each half-step into blocks of columns (:func:`col_blocks` of the layer:
    hidden units for the hidden half-step, visible units for the visible one) run in
    parallel: two forks per sweep, every block multiplying all active chains by its columns
    of W (or W^T, W^2, (W^2)^T) in place, so each thread packs only its share of the matrices.

    What the thread count changes: blocks are set by the shapes alone, so on 2, 3, ... threads
    the moments, iteration counts and convergence flags are the same bits.  Against one
    thread, the float32 products round differently in the last bits (scipy's OpenBLAS SGEMM
    rounds a block of columns differently from the same columns of the whole product; its
    DGEMM does not: float64 moments are the same bits on any thread count), and a chain's
    squared change is summed per column block, which can move a convergence decision when
    it lands within rounding of ``tol``.  Blocks of chains change only how many rows each
    product has (the same blocks on any n >= 2 threads).

    Row pieces: on OpenBLAS's AVX-512 cores a float32 model of few weights (TAP lab: 784 x
    100) multiplies its chains in pieces of :func:`~boltzlab.engine.threads.small_gemm_rows`
    rows, on any thread count: products of 16-50 rows ran at 56-90 GFLOP/s there, pieces of
    12 at 94-135.  It made Algorithm 1 in the TAP lab's first 1,000 batches 1.1x faster on one
    thread and 1.35x on two.  Pieces change a float32 product's rounding only.
    """
    parallel = get_num_threads() > 1  # read in Python: a kernel that asked could not be cached
    rows = small_gemm_rows(W.shape[0], W.shape[1], W.itemsize)
    if parallel and by_chains(av.shape[0], ah.shape[1]):
        _iterate_chain_blocks(W, code_v, Uv, Vv, Rv, lo_v, hi_v, code_h, Uh, Vh, Rh, lo_h, hi_h, field, has_field,
                              av, cv, ah, ch, damping, tol, max_iter, iters, converged, rows)
        return
    _iterate(W, code_v, Uv, Vv, Rv, lo_v, hi_v, code_h, Uh, Vh, Rh, lo_h, hi_h, field, has_field,
             av, cv, ah, ch, damping, tol, max_iter, iters, converged, parallel, rows)


@njit(cache=True, nogil=True)
def _dot_rows(A, B, C, n, rows):
    """C[:n] = A[:n] B, in pieces of ``rows`` rows when 0 < rows < n (products small enough
    for the BLAS's small-matrix kernel, :func:`boltzlab.engine.threads.small_gemm_rows`),
    else one product.  Each row of C is still its own row of A times B."""
    if rows <= 0 or rows >= n:
        np.dot(A[:n], B, C[:n])
        return
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        np.dot(A[r0:r1], B, C[r0:r1])


@njit(cache=True, nogil=True)
def _iterate(W, code_v, Uv, Vv, Rv, lo_v, hi_v, code_h, Uh, Vh, Rh, lo_h, hi_h, field, has_field,
             av, cv, ah, ch, damping, tol, max_iter, iters, converged, blocks, rows):
    """:func:`tap_iterate` (``blocks`` False: one product per matrix, in pieces of ``rows``
    rows when 0 < rows < active chains, :func:`_dot_rows`) or :func:`tap_iterate_blocks`
    (True: column blocks in parallel)."""
    K, Nv = av.shape
    Nh = ah.shape[1]
    dt = W.dtype
    WT = np.ascontiguousarray(W.T)
    W2 = W * W
    W2T = np.ascontiguousarray(W2.T)
    idx = np.arange(K)
    xav = av.copy()
    xcv = cv.copy()
    xah = ah.copy()
    xch = ch.copy()
    xf = field.copy()
    Gh = np.empty((K, Nh), dt)
    Sh = np.empty((K, Nh), dt)
    Gv = np.empty((K, Nv), dt)
    Sv = np.empty((K, Nv), dt)
    scratch = np.empty((5, max(Nv, Nh)))  # column blocks use disjoint columns of it
    nbh = col_blocks(Nh)
    nbv = col_blocks(Nv)
    part_h = np.empty((nbh, K))
    part_v = np.empty((nbv, K))
    diff = np.empty(K)
    n = K
    t = 0
    scale = 1.0 / (Nv + Nh)
    while n > 0 and t < max_iter:
        t += 1
        if blocks:
            _layer_blocks(code_h, xav, xcv, W, W2, Gh, Sh, xah, xch, Uh, Vh, Rh, lo_h, hi_h, xf, False, damping, n,
                          part_h, scratch)
            _layer_blocks(code_v, xah, xch, WT, W2T, Gv, Sv, xav, xcv, Uv, Vv, Rv, lo_v, hi_v, xf, has_field,
                          damping, n, part_v, scratch)
            for r in range(n):
                total = 0.0
                for b in range(nbh):
                    total += part_h[b, r]
                for b in range(nbv):
                    total += part_v[b, r]
                diff[r] = total
        else:
            diff[:n] = 0.0
            _dot_rows(xav, W, Gh, n, rows)
            _dot_rows(xcv, W2, Sh, n, rows)
            _half_step(code_h, Gh, Sh, xah, xch, Uh, Vh, Rh, lo_h, hi_h, xf, False, damping, diff, scratch, n, 0, Nh)
            _dot_rows(xah, WT, Gv, n, rows)
            _dot_rows(xch, W2T, Sv, n, rows)
            _half_step(code_v, Gv, Sv, xav, xcv, Uv, Vv, Rv, lo_v, hi_v, xf, has_field, damping, diff, scratch, n, 0,
                       Nv)
        m = 0
        for r in range(n):
            if diff[r] * scale < tol:
                k = idx[r]
                av[k] = xav[r]
                cv[k] = xcv[r]
                ah[k] = xah[r]
                ch[k] = xch[r]
                iters[k] = t
                converged[k] = True
            else:
                if m != r:
                    xav[m] = xav[r]
                    xcv[m] = xcv[r]
                    xah[m] = xah[r]
                    xch[m] = xch[r]
                    if has_field:
                        xf[m] = xf[r]
                    idx[m] = idx[r]
                m += 1
        n = m
    for r in range(n):
        k = idx[r]
        av[k] = xav[r]
        cv[k] = xcv[r]
        ah[k] = xah[r]
        ch[k] = xch[r]
        iters[k] = t
        converged[k] = False


# -------------------------------------------------- free energy and likelihood


@njit(cache=True, nogil=True)
def tap_fields(W, av, cv, ah, ch):
    """(B_v, A_v, B_h, A_h) of eqs. 33-34 at the moments (at a fixed point, the fields of Alg. 1)."""
    W2 = W * W
    Ah = -np.dot(cv, W2)
    Bh = Ah * ah + np.dot(av, W)
    Av = -np.dot(ch, W2.T)
    Bv = Av * av + np.dot(ah, W.T)
    return Bv, Av, Bh, Ah


@njit(cache=True, nogil=True)
def _entropy_row(code, B, A, a, c, U, V, rho, lo, hi, field, has_field, r):
    """sum_i log Z_i(B, A) - B a + A (a^2 + c) / 2 over row r: its layer's part of eq. 36."""
    s = 0.0
    for i in range(B.shape[1]):
        u = U[i] + field[r, i] if has_field else U[i]
        lz, fa, fc = prior_moments(code, B[r, i], A[r, i], u, V[i], rho[i], lo, hi)
        s += lz - B[r, i] * a[r, i] + 0.5 * A[r, i] * (a[r, i] * a[r, i] + c[r, i])
    return s


@njit(cache=True, nogil=True, parallel=True)
def _layer_entropy_rows(code, B, A, a, c, U, V, rho, lo, hi, field, has_field, out):
    for r in prange(B.shape[0]):
        out[r] += _entropy_row(code, B, A, a, c, U, V, rho, lo, hi, field, has_field, r)


@njit(cache=True, nogil=True)
def _layer_entropy(code, B, A, a, c, U, V, rho, lo, hi, field, has_field, out, parallel):
    """out[r] += a layer's part of eq. 36 (:func:`_entropy_row`) for every row; ``parallel``:
    rows on numba's threads (each row's sum is its own: the same bits on any thread count)."""
    if parallel:
        _layer_entropy_rows(code, B, A, a, c, U, V, rho, lo, hi, field, has_field, out)
        return
    for r in range(B.shape[0]):
        out[r] += _entropy_row(code, B, A, a, c, U, V, rho, lo, hi, field, has_field, r)


def tap_free_energy(W, code_v, Uv, Vv, Rv, lo_v, hi_v, code_h, Uh, Vh, Rh, lo_h, hi_h, field, has_field,
                    av, cv, ah, ch):
    """:func:`_tap_free_energy` on the calling thread's numba threads: its entropy rows, or
    with few hidden units (:func:`by_chains`) whole blocks of rows, products included (each
    row's value is its own either way)."""
    parallel = get_num_threads() > 1  # read in Python
    if parallel and by_chains(av.shape[0], ah.shape[1]):
        return _free_energy_chain_blocks(W, code_v, Uv, Vv, Rv, lo_v, hi_v, code_h, Uh, Vh, Rh, lo_h, hi_h, field,
                                         has_field, av, cv, ah, ch)
    return _tap_free_energy(W, code_v, Uv, Vv, Rv, lo_v, hi_v, code_h, Uh, Vh, Rh, lo_h, hi_h, field, has_field,
                            av, cv, ah, ch, parallel)


@njit(cache=True, nogil=True, parallel=True)
def _free_energy_chain_blocks(W, code_v, Uv, Vv, Rv, lo_v, hi_v, code_h, Uh, Vh, Rh, lo_h, hi_h, field, has_field,
                              av, cv, ah, ch):
    K = av.shape[0]
    out = np.empty(K)
    nb = chain_blocks(K)
    for b in prange(nb):
        r0 = K * b // nb
        r1 = K * (b + 1) // nb
        f = field[r0:r1] if has_field else field[0:1]
        out[r0:r1] = _tap_free_energy(W, code_v, Uv, Vv, Rv, lo_v, hi_v, code_h, Uh, Vh, Rh, lo_h, hi_h, f, has_field,
                                      av[r0:r1], cv[r0:r1], ah[r0:r1], ch[r0:r1], False)
    return out


@njit(cache=True, nogil=True)
def _tap_free_energy(W, code_v, Uv, Vv, Rv, lo_v, hi_v, code_h, Uh, Vh, Rh, lo_h, hi_h, field, has_field,
                     av, cv, ah, ch, parallel):
    """The TAP free energy F = -(eq. 36) of each row of moments, (K,).

    -F = sum_i [log Z_i^v(B_i, A_i) - B_i a_i + A_i (a_i^2 + c_i)/2] + (the same over j)
         + sum_ij (W_ij a_i a_j + W_ij^2 c_i c_j / 2),
    with (B, A) from eqs. 33-34 at the moments.  ``field`` enters as part of the visible
    prior (U + field), as in the denoising posterior of §VII.4.
    """
    K = av.shape[0]
    W2 = W * W
    Gh = np.dot(av, W)
    Sh = np.dot(cv, W2)
    Ah = -Sh
    Bh = Ah * ah + Gh
    Av = -np.dot(ch, W2.T)
    Bv = Av * av + np.dot(ah, W.T)
    neg = np.zeros(K)
    _layer_entropy(code_v, Bv, Av, av, cv, Uv, Vv, Rv, lo_v, hi_v, field, has_field, neg, parallel)
    _layer_entropy(code_h, Bh, Ah, ah, ch, Uh, Vh, Rh, lo_h, hi_h, field, False, neg, parallel)
    for k in range(K):
        s = 0.0
        for j in range(ah.shape[1]):
            s += ah[k, j] * Gh[k, j] + 0.5 * ch[k, j] * Sh[k, j]
        neg[k] += s
    return -neg


def data_terms(X, W, code_v, Uv, Vv, Rv, lo_v, hi_v, code_h, Uh, Vh, Rh, lo_h, hi_h):
    """The data part of eq. 39 per row, and the hidden moments it needs for eqs. 40-42.

    Returns (logp, Ha, Hc, Hnz): logp[r] = sum_i log mu_v(x_i) + sum_j log Z_j^h(B_j, 0)
    with B = x^T W (for binary units, -logp is the RBM's free energy F(x)), and f_a, f_c,
    P[h != 0] of the hidden units at (x^T W, 0).  The rows run on the calling thread's numba
    threads (each row its own: the same bits on any thread count).
    """
    n, Nh = X.shape[0], W.shape[1]
    Bh = _dot(X, W)
    Ha = np.empty((n, Nh), W.dtype)  # the dtype of the products that use them (eq. 40)
    Hc = np.empty((n, Nh), W.dtype)
    Hnz = np.empty((n, Nh), W.dtype)
    logp = np.empty(n)
    if get_num_threads() > 1:
        _data_rows_parallel(X, Bh, code_v, Uv, Vv, Rv, lo_v, hi_v, code_h, Uh, Vh, Rh, lo_h, hi_h, Ha, Hc, Hnz, logp)
    else:
        _data_rows(X, Bh, code_v, Uv, Vv, Rv, lo_v, hi_v, code_h, Uh, Vh, Rh, lo_h, hi_h, Ha, Hc, Hnz, logp)
    return logp, Ha, Hc, Hnz


@njit(cache=True, nogil=True)
def _dot(A, B):
    """A B through numba's BLAS (scipy's, single-threaded in the engine), as the kernels multiply."""
    return np.dot(A, B)


@njit(cache=True, nogil=True, inline="always")
def _data_row(X, Bh, code_v, Uv, Vv, Rv, lo_v, hi_v, code_h, Uh, Vh, Rh, lo_h, hi_h, Ha, Hc, Hnz, logp, r):
    s = 0.0
    for i in range(X.shape[1]):
        s += log_base_density(code_v, np.float64(X[r, i]), Uv[i], Vv[i], Rv[i], lo_v, hi_v)
    for j in range(Bh.shape[1]):
        b = np.float64(Bh[r, j])
        lz, fa, fc = prior_moments(code_h, b, 0.0, Uh[j], Vh[j], Rh[j], lo_h, hi_h)
        s += lz
        Ha[r, j] = fa
        Hc[r, j] = fc
        Hnz[r, j] = prior_nonzero(code_h, b, 0.0, Uh[j], Vh[j], Rh[j], lo_h, hi_h)
    logp[r] = s


@njit(cache=True, nogil=True)
def _data_rows(X, Bh, code_v, Uv, Vv, Rv, lo_v, hi_v, code_h, Uh, Vh, Rh, lo_h, hi_h, Ha, Hc, Hnz, logp):
    for r in range(X.shape[0]):
        _data_row(X, Bh, code_v, Uv, Vv, Rv, lo_v, hi_v, code_h, Uh, Vh, Rh, lo_h, hi_h, Ha, Hc, Hnz, logp, r)


@njit(cache=True, nogil=True, parallel=True)
def _data_rows_parallel(X, Bh, code_v, Uv, Vv, Rv, lo_v, hi_v, code_h, Uh, Vh, Rh, lo_h, hi_h, Ha, Hc, Hnz, logp):
    for r in prange(X.shape[0]):
        _data_row(X, Bh, code_v, Uv, Vv, Rv, lo_v, hi_v, code_h, Uh, Vh, Rh, lo_h, hi_h, Ha, Hc, Hnz, logp, r)


@njit(cache=True, nogil=True)
def tap_gradient(X, Ha, Hc, Hnz, av, cv, ah, ch, nzv, nzh, W, Rv, Rh):
    """Gradients of the mean TAP log-likelihood (eqs. 40-42, C.1.1, C.2) over rows of X.

    The solutions (rows of av, cv, ah, ch; nzv, nzh = P_Q[x != 0] there) are averaged
    uniformly.  Returns (gW, gU_v, gV_v, gR_v, gU_h, gV_h, gR_h); the V and rho entries are
    only meaningful for truncated Gaussian / Gauss-Bernoulli layers:
      dW = <x f_a^h(x^T W, 0)>_X - <a_v a_h^T + W c_v c_h^T>_sol         (eq. 40)
      dU = <x>_X - <a>_sol,  dV = -(<x^2>_X - <c + a^2>_sol) / 2        (eqs. 87-90, 117-118)
      drho = (<[x != 0]>_X - <P_Q[x != 0]>_sol) / (rho (1 - rho))        (eqs. 107-109)
    (Eq. 108 prints <delta(x_i)>_M, the indicator of x = 0; differentiating eq. 99 gives the
    indicator of x != 0, as here -- the finite-difference test of the gradient agrees.)
    """
    M, Nv = X.shape
    S = av.shape[0]
    Nh = W.shape[1]
    cm = 1.0 / M
    cs = 1.0 / S
    gW = np.dot(X.T, Ha) * cm - np.dot(av.T, ah) * cs
    cc = np.dot(cv.T, ch)
    for i in range(Nv):
        for j in range(Nh):
            gW[i, j] -= W[i, j] * cc[i, j] * cs
    gUv = np.zeros(Nv)
    gVv = np.zeros(Nv)
    gRv = np.zeros(Nv)
    for r in range(M):
        for i in range(Nv):
            x = X[r, i]
            gUv[i] += x * cm
            gVv[i] -= 0.5 * x * x * cm
            gRv[i] += cm if x != 0.0 else 0.0
    for r in range(S):
        for i in range(Nv):
            gUv[i] -= av[r, i] * cs
            gVv[i] += 0.5 * (cv[r, i] + av[r, i] * av[r, i]) * cs
            gRv[i] -= nzv[r, i] * cs
    gUh = np.zeros(Nh)
    gVh = np.zeros(Nh)
    gRh = np.zeros(Nh)
    for r in range(M):
        for j in range(Nh):
            gUh[j] += Ha[r, j] * cm
            gVh[j] -= 0.5 * (Hc[r, j] + Ha[r, j] * Ha[r, j]) * cm
            gRh[j] += Hnz[r, j] * cm
    for r in range(S):
        for j in range(Nh):
            gUh[j] -= ah[r, j] * cs
            gVh[j] += 0.5 * (ch[r, j] + ah[r, j] * ah[r, j]) * cs
            gRh[j] -= nzh[r, j] * cs
    for i in range(Nv):
        gRv[i] /= Rv[i] * (1.0 - Rv[i])
    for j in range(Nh):
        gRh[j] /= Rh[j] * (1.0 - Rh[j])
    return gW, gUv, gVv, gRv, gUh, gVh, gRh


# ---------------------------------------------------------- unique solutions


@njit(cache=True, nogil=True)
def _root(parent, i):
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


@njit(cache=True, nogil=True)
def cluster_roots(X, tol):
    """Connected components of the rows of X joined when max_k |X[i, k] - X[j, k]| <= tol.

    Returns, per row, the smallest row index of its component.  Single linkage over an
    exact, symmetric distance makes the partition independent of the row order, and a
    duplicated row always joins its twin.  Pairs are only compared when their row means
    differ by <= tol (a lower bound of the distance), after sorting by the mean.
    """
    n, d = X.shape
    means = np.empty(n)
    for i in range(n):
        s = 0.0
        for k in range(d):
            s += X[i, k]
        means[i] = s / d
    order = np.argsort(means, kind="mergesort")
    parent = np.arange(n)
    for a in range(n):
        i = order[a]
        for b in range(a + 1, n):
            j = order[b]
            if means[j] - means[i] > tol:
                break
            ri = _root(parent, i)
            rj = _root(parent, j)
            if ri == rj:
                continue
            close = True
            for k in range(d):
                if abs(X[i, k] - X[j, k]) > tol:
                    close = False
                    break
            if close:
                parent[max(ri, rj)] = min(ri, rj)
    out = np.empty(n, dtype=np.int64)
    smallest = np.full(n, n, dtype=np.int64)
    for i in range(n):
        r = _root(parent, i)
        if i < smallest[r]:
            smallest[r] = i
    for i in range(n):
        out[i] = smallest[_root(parent, i)]
    return out
