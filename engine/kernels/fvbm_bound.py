"""Numba kernels of the quadratic-bound MPLE for FVBMs (Jebara & Choromanska 2012 on eq. 2.1).

Conventions (shared with :mod:`boltzlab.engine.kernels.fvbm`, but row-major here):

* ``X`` (m, d) holds the distinct observations (entries +-1), ``XT`` its transpose (d, m),
  both C-contiguous; ``w`` (m,) how often each occurs (n = sum w).
* theta = (b, upper triangle of M) packed as :func:`boltzlab.engine.fvbm.pack_theta` does:
  q = d + d(d-1)/2 entries; ``pidx[i, k]`` is the position in theta of the parameter that
  multiplies x_k in the local field u_i = b_i + sum_k m_ik x_k (``pidx[i, i]`` = i, b_i).
* ``U`` (m, d): the local fields u_ni; ``R`` (m, d): w_n (x_ni - tanh u_ni); ``C`` (m, d):
  the curvature weights w_n c(u_ni); ``P``: :func:`pair_products` of X, or 0 rows.

The majorizer.  Eq. 2.1 is a sum of two-state terms x u - log(2 cosh u) with u = a^T theta
linear in theta.  Algorithm 1 (ComputeBound) on the two states x = -1, +1 (features -a,
+a) at theta_tilde: the first state meets z = 0+ (c = 0, mu = -a), the second has
log(alpha/z) = 2 u_tilde and l = 2a, so

    Sigma = tanh(u_tilde) / (2 * 2 u_tilde) * (2a)(2a)^T = c(u_tilde) a a^T,
    c(u) = tanh(u) / u            (c(0) = 1: footnote 3's limit 1/4 times |l|^2 / |a|^2 = 4),

i.e. log(2 cosh u) <= log(2 cosh u~) + tanh(u~)(u - u~) + c(u~)/2 (u - u~)^2 for all u
(the Jaakkola-Jordan bound; tanh(u~)/(2 u~) is the coefficient of (u - u~)^2).  Summing
over rows n and coordinates i, -P_n(theta) is majorized by a quadratic with Hessian

    Sigma = sum_n w_n sum_i c(u_ni) a_ni a_ni^T,                              (*)

where a_ni has a 1 at b_i and x_nk at m_ik (k != i).  sech^2(u) <= c(u) <= 1: the bound's
curvature lies between the true Hessian's and the fixed one BSLM uses per coordinate.

Speed of (*): term i touches only b_i and the row m_i., so its block is
F_i^T diag(s_i) F_i with F_i = [1, x_-i] and s_ni = w_n c(u_ni).  All d blocks come from
one product S^T [X, X (x) X] (S = (s_ni), and the pair products x_nj x_nk, j < k): O(m d^3)
flops in BLAS, then an O(d^3) scatter into the (q, q) matrix.  The products are computed
once and kept when small (the trainers: up to 32 MB), else formed in row blocks of
``BLOCK`` on every call, so no (m, d^2) array is held.

All kernels are ``@njit(cache=True, nogil=True)``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

#: |u| below which c(u) = tanh(u)/u is evaluated by its series 1 - u^2/3 + 2u^4/15.
SERIES_U = 1e-4
#: Rows per BLAS block in the curvature accumulation.
BLOCK = 256
#: Factors (2 + expm1(-2|u|)) in [1, 2] multiplied before one log is taken (2^64 < 1e20).
LOG_BATCH = 64


@njit(cache=True, nogil=True)
def bound_curvature(u):
    """c(u) = tanh(u) / u: the curvature of Algorithm 1's bound on log(2 cosh u) at u.

    Even, in (0, 1], decreasing in |u|; c(0) = 1 (the limit) and c(u) ~ 1/|u| for large
    |u| (tanh saturates, nothing overflows).
    """
    a = abs(u)
    if a < SERIES_U:
        a2 = a * a
        return 1.0 - a2 / 3.0 + 2.0 * a2 * a2 / 15.0
    return math.tanh(a) / a


@njit(cache=True, nogil=True)
def parameter_index(d):
    """pidx (d, d): pidx[i, i] = i (b_i), pidx[i, k] = d + pair(min, max) (m_ik = m_ki).

    Pairs j < k are numbered row by row, as ``np.triu_indices(d, 1)`` orders them.
    """
    pidx = np.empty((d, d), dtype=np.int64)
    p = d
    for j in range(d):
        pidx[j, j] = j
        for k in range(j + 1, d):
            pidx[j, k] = p
            pidx[k, j] = p
            p += 1
    return pidx


@njit(cache=True, nogil=True)
def log_pl_and_gradient(X, XT, w, b, M, U, R, C, grad):
    """Eq. 2.1 at theta = (b, M) and its gradient (packed into ``grad``, length q).

    Fills U with the local fields, R with w_n (x_ni - tanh u_ni) and C with the bound's
    curvature weights w_n c(u_ni) (see :func:`bound_curvature`).  With f = exp(-2|u|):
    log(2 cosh u) = |u| + log(1 + f) and tanh|u| = (1 - f) / (1 + f) (1 - f by expm1 for
    |u| < 1/4, no cancellation), one exponential per term and one log per row (of the
    product of the factors 1 + f in [1, 2]), no overflow.  The rows are summed with Neumaier
    compensation (monotonicity is checked on totals of order n d).
    Gradient: dP/db_i = sum_n R_ni; dP/dm_jk = sum_n (x_nk R_nj + x_nj R_nk).
    """
    m, d = X.shape
    np.dot(X, M, U)
    total = 0.0
    comp = 0.0
    for r in range(m):
        row = 0.0
        wr = w[r]
        prod = 1.0  # prod of (2 + e) in [1, 2]: one log per LOG_BATCH terms, no overflow
        for i in range(d):
            u = U[r, i] + b[i]
            U[r, i] = u
            x = X[r, i]
            a = abs(u)
            if a < 0.25:  # 1 - exp(-2a) by expm1: no cancellation
                one_minus = -math.expm1(-2.0 * a)
                one_plus = 2.0 - one_minus
            else:
                f = math.exp(-2.0 * a)
                one_minus = 1.0 - f
                one_plus = 1.0 + f
            row += x * u - a
            prod *= one_plus
            if (i + 1) % LOG_BATCH == 0:
                row -= math.log(prod)
                prod = 1.0
            th = one_minus / one_plus  # tanh |u|
            R[r, i] = wr * (x - (th if u >= 0.0 else -th))
            if a < SERIES_U:
                a2 = a * a
                C[r, i] = wr * (1.0 - a2 / 3.0 + 2.0 * a2 * a2 / 15.0)
            else:
                C[r, i] = wr * (th / a)
        row -= math.log(prod)
        row *= wr
        t = total + row
        if abs(total) >= abs(row):
            comp += (total - t) + row
        else:
            comp += (row - t) + total
        total = t
    G = np.dot(XT, R)  # G[j, k] = sum_n x_nj R_nk
    for i in range(d):
        s = 0.0
        for r in range(m):
            s += R[r, i]
        grad[i] = s
    p = d
    for j in range(d):
        for k in range(j + 1, d):
            grad[p] = G[k, j] + G[j, k]
            p += 1
    return total + comp


@njit(cache=True, nogil=True)
def pair_products(X):
    """P (m, d + d(d-1)/2): the columns x_k, then x_j x_k for j < k (triu order)."""
    m, d = X.shape
    P = np.empty((m, d + d * (d - 1) // 2))
    for r in range(m):
        p = d
        for j in range(d):
            xj = X[r, j]
            P[r, j] = xj
            for k in range(j + 1, d):
                P[r, p] = xj * X[r, k]
                p += 1
    return P


@njit(cache=True, nogil=True)
def bound_curvature_matrix(X, C, P, pidx, Sigma):
    """Sigma of (*) (module docstring): sum_n w_n sum_i c(u_ni) a_ni a_ni^T, (q, q).

    C (m, d) holds s_ni = w_n c(u_ni) (from :func:`log_pl_and_gradient`).  If P holds
    :func:`pair_products` of X (m rows), Q = C^T P in one BLAS product; otherwise (P with
    0 rows: too large to keep) per row block:
    S_b = C_b^T (d, B) and P_b (B, d + d(d-1)/2) holding x_bk and the pair products
    x_bj x_bk (j < k); Q += S_b P_b (one BLAS product).  Then block i of Sigma (rows and
    columns b_i, m_i.) is read off Q[i]: (b_i, b_i) and (m_ik, m_ik) get sum_n s_ni
    (x^2 = 1), (b_i, m_ik) gets Q[i, k], and (m_ij, m_ik) gets Q[i, pair(j, k)], j, k != i.
    """
    m, d = X.shape
    width = d + d * (d - 1) // 2
    t = np.zeros(d)
    if P.shape[0] == m:  # the products are cached: one BLAS product
        Q = np.dot(C.T, P)
        for r in range(m):
            for j in range(d):
                t[j] += C[r, j]
        _scatter_blocks(Q, t, pidx, Sigma)
        return
    B = min(BLOCK, m)
    Sb = np.empty((d, B))
    Pb = np.empty((B, width))
    Q = np.zeros((d, width))
    start = 0
    while start < m:
        nb = min(B, m - start)
        if nb < B:
            Sb[:, :] = 0.0  # the tail block: zero weights in the unused rows
        for r in range(nb):
            row = start + r
            p = d
            for j in range(d):
                xj = X[row, j]
                Pb[r, j] = xj
                s = C[row, j]
                Sb[j, r] = s
                t[j] += s
                for k in range(j + 1, d):
                    Pb[r, p] = xj * X[row, k]
                    p += 1
        Q += np.dot(Sb, Pb)
        start += nb
    _scatter_blocks(Q, t, pidx, Sigma)


@njit(cache=True, nogil=True)
def _scatter_blocks(Q, t, pidx, Sigma):
    """Sigma from Q = S^T [X, pair products] and t = column sums of S (see above)."""
    d = t.shape[0]
    Sigma[:, :] = 0.0
    for i in range(d):
        ti = t[i]
        Sigma[i, i] += ti
        for k in range(d):
            if k == i:
                continue
            pk = pidx[i, k]
            Sigma[i, pk] += Q[i, k]
            Sigma[pk, i] += Q[i, k]
            Sigma[pk, pk] += ti
        p = d
        for j in range(d):
            for k in range(j + 1, d):
                if j != i and k != i:
                    pj = pidx[i, j]
                    pk = pidx[i, k]
                    Sigma[pj, pk] += Q[i, p]
                    Sigma[pk, pj] += Q[i, p]
                p += 1


@njit(cache=True, nogil=True)
def cholesky_solve(A, g, out):
    """out = A^{-1} g for a symmetric positive definite A, by Cholesky (LAPACK).

    If A is not numerically positive definite (e.g. Sigma is singular because the data
    leave a parameter undetermined), a ridge of 1e-12, 1e-10, ... times the largest
    diagonal entry is added: a larger curvature still majorizes, so monotonicity holds.
    Returns the ridge used (0.0 normally).
    """
    q = A.shape[0]
    scale = 0.0
    for i in range(q):
        scale = max(scale, A[i, i])
    if not scale > 0.0:
        scale = 1.0
    ridge = 0.0
    Aw = A.copy()
    for attempt in range(8):
        ok = True
        try:
            L = np.linalg.cholesky(Aw)
        except Exception:  # not positive definite
            ok = False
        if ok:
            # forward: L y = g
            y = np.empty(q)
            for i in range(q):
                s = g[i]
                for k in range(i):
                    s -= L[i, k] * y[k]
                y[i] = s / L[i, i]
            # back: L^T x = y
            for i in range(q - 1, -1, -1):
                s = y[i]
                for k in range(i + 1, q):
                    s -= L[k, i] * out[k]
                out[i] = s / L[i, i]
            return ridge
        ridge = scale * 10.0 ** (-12 + 2 * attempt)
        Aw = A.copy()
        for i in range(q):
            Aw[i, i] += ridge
    out[:] = 0.0
    return -1.0


@njit(cache=True, nogil=True)
def add_packed(b, M, pidx, delta, step):
    """(b, M) += step * delta for a packed delta (M kept symmetric, zero diagonal)."""
    d = b.shape[0]
    for i in range(d):
        b[i] += step * delta[i]
    for j in range(d):
        for k in range(j + 1, d):
            M[j, k] += step * delta[pidx[j, k]]
            M[k, j] = M[j, k]


@njit(cache=True, nogil=True)
def _norm(v):
    s = 0.0
    for i in range(v.shape[0]):
        s += v[i] * v[i]
    return math.sqrt(s)


@njit(cache=True, nogil=True)
def bound_mm_steps(X, XT, P, w, pidx, b, M, U, R, C, grad, Sigma, delta, log_pl, n_steps,
                   tol, grad_stop, out_log_pl, out_grad_norm):
    """Up to ``n_steps`` majorization-minimization updates in one call (nogil loop).

    Each: Sigma of (*) at the current fields (U must hold them, ``grad`` the gradient and
    ``log_pl`` eq. 2.1 there), then theta <- theta + Sigma^{-1} grad, the maximizer of the
    quadratic minorizer of eq. 2.1, then eq. 2.1, U, R and grad at the new theta.
    out_log_pl[s], out_grad_norm[s]: after the s-th update of this call.  Stops early once
    |increase| < tol (tol <= 0: never), |grad| <= grad_stop, or eq. 2.1 is not finite.
    Returns the number of updates made.
    """
    for s in range(n_steps):
        bound_curvature_matrix(X, C, P, pidx, Sigma)
        cholesky_solve(Sigma, grad, delta)
        add_packed(b, M, pidx, delta, 1.0)
        current = log_pl_and_gradient(X, XT, w, b, M, U, R, C, grad)
        out_log_pl[s] = current
        gn = _norm(grad)
        out_grad_norm[s] = gn
        if not math.isfinite(current):
            return s + 1
        if tol > 0.0 and abs(current - log_pl) < tol:
            return s + 1
        if gn <= grad_stop:
            return s + 1
        log_pl = current
    return n_steps


@njit(cache=True, nogil=True)
def _pack(b, M, theta):
    d = b.shape[0]
    for i in range(d):
        theta[i] = b[i]
    p = d
    for j in range(d):
        for k in range(j + 1, d):
            theta[p] = M[j, k]
            p += 1


@njit(cache=True, nogil=True)
def _unpack(theta, b, M):
    d = b.shape[0]
    for i in range(d):
        b[i] = theta[i]
        M[i, i] = 0.0
    p = d
    for j in range(d):
        for k in range(j + 1, d):
            M[j, k] = theta[p]
            M[k, j] = theta[p]
            p += 1


@njit(cache=True, nogil=True)
def squarem_steps(X, XT, P, w, pidx, b, M, U, R, C, grad, Sigma, delta, log_pl, n_steps,
                  tol, grad_stop, out_log_pl, out_grad_norm, out_evals):
    """Up to ``n_steps`` SQUAREM cycles (Varadhan & Roland 2008, scheme S3) of the MM map.

    With F the MM update of :func:`bound_mm_steps`: theta_1 = F(theta), theta_2 = F(theta_1),
    r = theta_1 - theta, v = theta_2 - theta_1 - r, alpha = min(-|r| / |v|, -1) and the
    extrapolation theta' = theta - 2 alpha r + alpha^2 v, kept only if
    P_n(theta') >= P_n(theta_2) (else theta_2).  Two majorizations per cycle; monotone,
    since P_n(theta_2) >= P_n(theta_1) >= P_n(theta).  out_evals[s]: eq. 2.1 evaluations.
    """
    q = grad.shape[0]
    theta0 = np.empty(q)
    r = np.empty(q)
    v = np.empty(q)
    theta2 = np.empty(q)
    for s in range(n_steps):
        _pack(b, M, theta0)
        # theta_1 = F(theta): U, C, grad hold theta's fields
        bound_curvature_matrix(X, C, P, pidx, Sigma)
        cholesky_solve(Sigma, grad, r)
        add_packed(b, M, pidx, r, 1.0)
        p1 = log_pl_and_gradient(X, XT, w, b, M, U, R, C, grad)
        evals = 1
        if not math.isfinite(p1):
            out_log_pl[s] = p1
            out_grad_norm[s] = _norm(grad)
            out_evals[s] = evals
            return s + 1
        # theta_2 = F(theta_1)
        bound_curvature_matrix(X, C, P, pidx, Sigma)
        cholesky_solve(Sigma, grad, delta)
        add_packed(b, M, pidx, delta, 1.0)
        _pack(b, M, theta2)
        p2 = log_pl_and_gradient(X, XT, w, b, M, U, R, C, grad)
        evals += 1
        current = p2
        rr = 0.0
        vv = 0.0
        for i in range(q):
            v[i] = delta[i] - r[i]
            rr += r[i] * r[i]
            vv += v[i] * v[i]
        if vv > 0.0 and math.isfinite(p2):
            alpha = min(-math.sqrt(rr / vv), -1.0)
            for i in range(q):
                delta[i] = theta0[i] - 2.0 * alpha * r[i] + alpha * alpha * v[i]
            _unpack(delta, b, M)
            pe = log_pl_and_gradient(X, XT, w, b, M, U, R, C, grad)
            evals += 1
            if math.isfinite(pe) and pe >= p2:
                current = pe
            else:  # back to theta_2 (its fields, curvature weights and gradient)
                _unpack(theta2, b, M)
                log_pl_and_gradient(X, XT, w, b, M, U, R, C, grad)
                evals += 1
        out_log_pl[s] = current
        gn = _norm(grad)
        out_grad_norm[s] = gn
        out_evals[s] = evals
        if not math.isfinite(current):
            return s + 1
        if tol > 0.0 and abs(current - log_pl) < tol:
            return s + 1
        if gn <= grad_stop:
            return s + 1
        log_pl = current
    return n_steps


# --------------------------------------------------------------------------- L-BFGS


@njit(cache=True, nogil=True)
def lbfgs_direction(grad, S, Y, rho, head, count, gamma, p):
    """p = -H grad by the two-loop recursion over the ``count`` newest pairs.

    S, Y (memory, q): circular buffers of s = theta_{k+1} - theta_k and y = g_{k+1} - g_k of
    the objective being minimized (here -P_n); ``head`` is the slot of the newest pair;
    H_0 = gamma I.
    """
    mem = S.shape[0]
    q = grad.shape[0]
    alpha = np.empty(mem)
    for i in range(q):
        p[i] = -grad[i]
    for t in range(count):
        slot = (head - t) % mem
        a = 0.0
        for i in range(q):
            a += S[slot, i] * p[i]
        a *= rho[slot]
        alpha[slot] = a
        for i in range(q):
            p[i] -= a * Y[slot, i]
    for i in range(q):
        p[i] *= gamma
    for t in range(count - 1, -1, -1):
        slot = (head - t) % mem
        bcoef = 0.0
        for i in range(q):
            bcoef += Y[slot, i] * p[i]
        bcoef *= rho[slot]
        for i in range(q):
            p[i] += (alpha[slot] - bcoef) * S[slot, i]


@njit(cache=True, nogil=True)
def lbfgs_steps(X, XT, w, pidx, b, M, U, R, C, grad, S, Y, rho, state, log_pl, n_steps, tol,
                grad_stop, out_log_pl, out_grad_norm, out_evals):
    """Up to ``n_steps`` L-BFGS iterations on -P_n (eq. 2.1) in one call (nogil loop).

    ``state`` (float64[4]) = (head, count, gamma, last step length) of the memory.  Each
    iteration: p from the two-loop recursion (steepest ascent if it is not an ascent
    direction), then backtracking from t = 1 (halving) until the Armijo condition
    P_n(theta + t p) >= P_n(theta) + 1e-4 t grad^T p holds; the pair (s, y) enters the
    memory if s^T y > 0 (always, eq. 2.1 being concave, except in rounding).
    A failed line search (40 halvings) leaves theta unchanged and reports evals < 0.
    Stops early like :func:`bound_mm_steps`.  Returns the number of iterations made.
    """
    mem = S.shape[0]
    q = grad.shape[0]
    d = b.shape[0]
    p = np.empty(q)
    g_old = np.empty(q)  # gradient of -P_n
    b0 = b.copy()
    M0 = M.copy()
    for s in range(n_steps):
        head = int(state[0])
        count = int(state[1])
        gamma = state[2]
        for i in range(q):
            g_old[i] = -grad[i]
        lbfgs_direction(g_old, S, Y, rho, head, count, gamma, p)  # p = -H g: ascent on P_n
        slope = 0.0
        for i in range(q):
            slope += grad[i] * p[i]
        if not slope > 0.0:  # not an ascent direction: forget the memory, steepest ascent
            count = 0
            gn = _norm(grad)
            for i in range(q):
                p[i] = grad[i] / max(gn, 1e-300)
            slope = gn
        b0[:] = b
        M0[:, :] = M
        step = 1.0
        evals = 0
        accepted = False
        current = log_pl
        for _ in range(40):
            b[:] = b0
            M[:, :] = M0
            add_packed(b, M, pidx, p, step)
            current = log_pl_and_gradient(X, XT, w, b, M, U, R, C, grad)
            evals += 1
            if math.isfinite(current) and current >= log_pl + 1e-4 * step * slope:
                accepted = True
                break
            step *= 0.5
        if not accepted:  # back to the last iterate (its fields and gradient)
            b[:] = b0
            M[:, :] = M0
            log_pl_and_gradient(X, XT, w, b, M, U, R, C, grad)
            out_log_pl[s] = log_pl
            out_grad_norm[s] = _norm(grad)
            out_evals[s] = -evals
            state[3] = 0.0
            return s + 1
        # memory update with s = step p, y = g_new - g_old (gradients of -P_n)
        slot = (head + 1) % mem
        sy = 0.0
        yy = 0.0
        for i in range(q):
            si = step * p[i]
            yi = -grad[i] - g_old[i]
            S[slot, i] = si
            Y[slot, i] = yi
            sy += si * yi
            yy += yi * yi
        if sy > 1e-300 and yy > 0.0:
            rho[slot] = 1.0 / sy
            state[0] = slot
            state[1] = min(count + 1, mem)
            state[2] = sy / yy
        else:
            state[1] = count
        state[3] = step
        out_log_pl[s] = current
        gn = _norm(grad)
        out_grad_norm[s] = gn
        out_evals[s] = evals
        increase = current - log_pl
        log_pl = current
        if tol > 0.0 and abs(increase) < tol:
            return s + 1
        if gn <= grad_stop:
            return s + 1
    return n_steps
