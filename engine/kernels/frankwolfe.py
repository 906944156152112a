"""Numba kernels for the Frank-Wolfe infinite RBM (Ping, Liu & Ihler 2016).

Conventions (those of :mod:`boltzlab.engine.kernels.rbm`, whose generator, softplus, sigmoid and
block Gibbs sampler are reused here):

* a model has ``n`` hidden units with weights ``W`` (Nv, n), hidden biases ``b_hid`` (n,)
  (the weight of the paper's dummy always-on visible unit), visible biases ``b_vis`` (Nv,)
  and per-unit coefficients ``coef`` (n,): the *fractional RBM* of eq. 11,

      log p(v) = b_vis^T v + sum_i coef_i softplus(w_i^T v + b_hid_i) - log Z,

  which is the standard RBM of eq. 3 when every coef_i = 1 (Proposition 3.1: alpha q(w)
  = sum_i coef_i delta(w = w_i), here coef_i = alpha / n).
* binary data are passed as compressed sparse rows of their ones (``indptr``, ``indices``)
  where a kernel only needs fields w^T v of one unit: on MNIST about 19 % of pixels are on,
  so a fused gather/scatter pass over the ones costs a fifth of a dense mat-vec.
* random numbers come from the splitmix64 stream of :mod:`boltzlab.engine.kernels.rbm`, consumed in
  the order each docstring states (the tests' NumPy references consume it the same way).
* threads: the standard sampler of :func:`sample_model` (step 1 of Algorithm 1) and of
  :func:`bias_alpha_updates` (eq. 10's loop) runs each Gibbs step, and the alpha step's
  softplus sums, on fixed blocks of the S chains in parallel (:func:`chain_blocks`,
  :func:`_gibbs_step_means_blocks`): the same draws, sums added per block in block order,
  so a seed gives the same bits on 2 or n threads.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from .common import even_blocks
from .rbm import (_advance, _draw_row, _draw_row_at, _sample_fields_into, _sample_row_at, _sigmoid_row,
                  _uniform, gibbs_chains, log_partition_weighted, new_state, parallel_here, sigmoid, softplus)


@njit(cache=True, nogil=True)
def to_csr(V):
    """(indptr, indices) of the ones of a 0/1 float matrix V (n, d), row by row (int64)."""
    n, d = V.shape
    indptr = np.zeros(n + 1, np.int64)
    count = 0
    for r in range(n):
        for i in range(d):
            if V[r, i] != 0.0:
                count += 1
        indptr[r + 1] = count
    indices = np.empty(count, np.int64)
    k = 0
    for r in range(n):
        for i in range(d):
            if V[r, i] != 0.0:
                indices[k] = i
                k += 1
    return indptr, indices


def inner_objective(indptr, indices, weights, theta, lam, n_vis, use_bias):
    """Eq. 9 and its gradient at theta = (w, c), fused in one pass over the rows' ones.

        f(w, c) = lam/2 (||w||^2 + c^2) + sum_k a_k softplus(w^T v_k + c)
        grad_w  = lam w + sum_k a_k sigmoid(w^T v_k + c) v_k,   grad_c = lam c + sum_k a_k sigmoid(...)

    The rows v_k stack the model samples (weights a_k = +1/S, or +p(v) for exact
    expectations) over the training data (a_k = -1/N), so f is eq. 9 with a hidden bias c
    for the paper's dummy always-on visible unit (regularised like every weight).
    ``theta`` has n_vis + 1 entries; with ``use_bias`` False c is held at 0 (its gradient
    entry is 0).  Returns (f, grad).  On the calling thread's numba threads: one thread sums
    the rows in order; more sum :func:`inner_blocks` of rows in parallel, then the blocks in
    block order (the same bits on 2 or n threads, one thread's to rounding).
    """
    return _inner_objective(indptr, indices, weights, theta, lam, n_vis, use_bias, parallel_here())


INNER_BLOCK = 1024  # rows of eq. 9's sum per parallel block, about


@njit(cache=True, nogil=True)
def inner_blocks(n):
    """Blocks eq. 9's n rows are summed in: :func:`even_blocks` of INNER_BLOCK rows."""
    return even_blocks(n, INNER_BLOCK)


@njit(cache=True, nogil=True)
def _inner_rows(indptr, indices, weights, theta, c, n_vis, lo, hi, f, grad):
    """f + sum_k a_k softplus(w^T v_k + c) over rows [lo, hi) in order, the sigmoid terms
    added into grad."""
    for r in range(lo, hi):
        a = weights[r]
        x = c
        for k in range(indptr[r], indptr[r + 1]):
            x += theta[indices[k]]
        f += a * softplus(x)
        s = a * sigmoid(x)
        grad[n_vis] += s
        for k in range(indptr[r], indptr[r + 1]):
            grad[indices[k]] += s
    return f


@njit(cache=True, nogil=True, parallel=True)
def _inner_blocks(indptr, indices, weights, theta, c, n_vis, f_part, g_part):
    n = indptr.shape[0] - 1
    nb = f_part.shape[0]
    for b in prange(nb):
        g_part[b, :] = 0.0
        f_part[b] = _inner_rows(indptr, indices, weights, theta, c, n_vis, b * n // nb, (b + 1) * n // nb, 0.0,
                                g_part[b])


@njit(cache=True, nogil=True)
def _inner_objective(indptr, indices, weights, theta, lam, n_vis, use_bias, parallel):
    c = theta[n_vis] if use_bias else 0.0
    grad = np.zeros(n_vis + 1)
    f = 0.0
    for i in range(n_vis):
        f += theta[i] * theta[i]
    f += c * c
    f *= 0.5 * lam
    n = indptr.shape[0] - 1
    if parallel:
        nb = inner_blocks(n)
        f_part = np.empty(nb)
        g_part = np.empty((nb, n_vis + 1))
        _inner_blocks(indptr, indices, weights, theta, c, n_vis, f_part, g_part)
        for b in range(nb):
            f += f_part[b]
            for i in range(n_vis + 1):
                grad[i] += g_part[b, i]
    else:
        f = _inner_rows(indptr, indices, weights, theta, c, n_vis, 0, n, f, grad)
    for i in range(n_vis):
        grad[i] += lam * theta[i]
    if use_bias:
        grad[n_vis] += lam * c
    else:
        grad[n_vis] = 0.0
    return f, grad


@njit(cache=True, nogil=True)
def unit_softplus(indptr, indices, w, c):
    """softplus(w^T v_r + c) for every row r of a CSR 0/1 matrix, (n,)."""
    n = indptr.shape[0] - 1
    out = np.empty(n)
    for r in range(n):
        x = c
        for k in range(indptr[r], indptr[r + 1]):
            x += w[indices[k]]
        out[r] = softplus(x)
    return out


@njit(cache=True, nogil=True)
def fractional_free_energy(V, W, b_vis, b_hid, coef):
    """F(v) = -b_vis^T v - sum_i coef_i softplus(w_i^T v + b_hid_i) (eq. 11), every row of V, (n,)."""
    X = np.dot(V, W)
    n, m = X.shape
    out = np.empty(n)
    for r in range(n):
        s = 0.0
        for i in range(V.shape[1]):
            s += b_vis[i] * V[r, i]
        for j in range(m):
            s += coef[j] * softplus(X[r, j] + b_hid[j])
        out[r] = -s
    return out


@njit(cache=True, nogil=True)
def fractional_log_partition(W, b_vis, b_hid, coef):
    """log Z of eq. 11: log sum_v exp(b_vis^T v + sum_i coef_i softplus(w_i^T v + b_hid_i)),
    the 2^Nv visible states visited in Gray-code order
    (:func:`boltzlab.engine.kernels.rbm.log_partition_weighted`)."""
    return log_partition_weighted(W, b_vis, b_hid, coef)


@njit(cache=True, nogil=True)
def _mh_sweeps(V, X, W, b_hid, coef, lin_vis, k, state):
    """k Metropolis-Hastings steps of §3.3 on every chain; V (S, Nv), X = V W + b_hid updated in place.

    Target (per chain): log p*(v) = lin_vis^T v + sum_i coef_i softplus(x_i), x = W^T v + b_hid.
    Proposal: one block Gibbs step v -> h -> v' of the standard RBM of eq. 12, whose
    softplus terms are softplus(coef_i x_i), i.e. weights coef_i w_i, hidden biases
    coef_i b_hid_i and visible biases lin_vis.  That step is reversible for eq. 12, so
    A(v -> v') = [p(v') p~(v)] / [p(v) p~(v')] (§3.3), in logs
    sum_i [coef_i softplus(x'_i) - softplus(coef_i x'_i)] - [the same at x].
    Per step the stream gives: the (S, n) hidden uniforms row by row, then the (S, Nv)
    visible uniforms row by row, then S acceptance uniforms.  Returns the accepted count.
    """
    S, n_vis = V.shape
    n = W.shape[1]
    WsT = np.empty((n, n_vis), W.dtype)  # (coef_i w_i) as rows: the proposal RBM's W^T
    for j in range(n):
        for i in range(n_vis):
            WsT[j, i] = coef[j] * W[i, j]
    H = np.empty((S, n), V.dtype)  # buffers in the chains' precision (V and W share it)
    Vp = np.empty((S, n_vis), V.dtype)
    accepted = 0
    for _ in range(k):
        for r in range(S):
            for j in range(n):
                H[r, j] = 1.0 if _uniform(state) < sigmoid(coef[j] * X[r, j]) else 0.0
        Y = np.dot(H, WsT)
        for r in range(S):
            for i in range(n_vis):
                Vp[r, i] = 1.0 if _uniform(state) < sigmoid(Y[r, i] + lin_vis[i]) else 0.0
        Xp = np.dot(Vp, W)
        for r in range(S):
            log_a = 0.0
            for j in range(n):
                xp = Xp[r, j] + b_hid[j]
                x = X[r, j]
                log_a += coef[j] * softplus(xp) - softplus(coef[j] * xp) - coef[j] * softplus(x) + softplus(coef[j] * x)
            u = _uniform(state)
            if u < math.exp(min(log_a, 0.0)):
                accepted += 1
                for i in range(n_vis):
                    V[r, i] = Vp[r, i]
                for j in range(n):
                    X[r, j] = Xp[r, j] + b_hid[j]
    return accepted


@njit(cache=True, nogil=True)
def _fields(V, W, b_hid):
    X = np.dot(V, W)
    for r in range(X.shape[0]):
        for j in range(X.shape[1]):
            X[r, j] += b_hid[j]
    return X


@njit(cache=True, nogil=True)
def mh_chains(V, W, b_vis, b_hid, coef, k, seed):
    """k Metropolis-Hastings steps (§3.3) for the fractional RBM of eq. 11 on every row of V.

    V is updated in place; see :func:`_mh_sweeps` for the proposal, the acceptance ratio
    and the order of the random stream (seeded with ``seed``).  Returns the number of
    accepted proposals (out of k S).
    """
    state = new_state(seed)
    X = _fields(V, W, b_hid)
    return _mh_sweeps(V, X, W, b_hid, coef, b_vis, k, state)


@njit(cache=True, nogil=True)
def _gibbs_step_means(V, X, H, Y, W, WT, b_vis, b_hid, state, m_sum, m_sq, S):
    """One block Gibbs step v -> h -> v on every chain (V in place; X, H, Y are reused
    buffers of shapes (S, n), (S, n), (S, Nv); S: scratch rows), adding each chain's
    P(v_i = 1 | h) to m_sum[i] and its square to m_sq[i]: the Rao-Blackwellised estimate of
    E[v] and its spread.  The draws are those of :func:`boltzlab.engine.kernels.rbm.gibbs_chains`
    (hidden row by row, then visible), with its vectorised rows."""
    np.dot(V, W, X)
    _sample_fields_into(X, b_hid, state, H, S)
    np.dot(H, WT, Y)
    for r in range(Y.shape[0]):
        _sigmoid_row(Y[r], b_vis, Y[r], S)
        for i in range(Y.shape[1]):
            p = np.float64(Y[r, i])
            m_sum[i] += p
            m_sq[i] += p * p
        _draw_row(Y[r], state, V[r])


CHAIN_BLOCK = 512  # chains per parallel block of the eq.-10 sampler, about


@njit(cache=True, nogil=True)
def chain_blocks(S):
    """Blocks the S chains are split into: :func:`even_blocks` of CHAIN_BLOCK chains.  Large
    blocks: every block multiplies its chains by all of W, so each packs W once (blocks of
    64 chains packed W 32 times a step for S = 2000, and two threads ran an insertion 1.05x
    faster than one)."""
    return even_blocks(S, CHAIN_BLOCK)


@njit(cache=True, nogil=True, parallel=True)
def _gibbs_step_means_blocks(V, X, H, Y, W, WT, b_vis, b_hid, base, m_part, sq_part, Sb, nb, fields_ready):
    """:func:`_gibbs_step_means` on :func:`chain_blocks` of the chains in parallel, one fork
    per step: each block runs both half-steps on its rows with its own single-threaded
    products (the first one skipped if ``fields_ready``: X already holds V W).  The draws
    are the same numbers (counter-based: the hidden draws of row r are r n + 1 .. after
    ``base``, the visible ones S n + r Nv + 1 ..); block b's sums go to m_part[b],
    sq_part[b] (added in block order by the caller), so the result does not depend on the
    thread count.  Returns the stream position after the step."""
    S, n_vis = V.shape
    n = W.shape[1]
    base_v = _advance(base, S * n)
    for b in prange(nb):
        lo = b * S // nb
        hi = (b + 1) * S // nb
        if not fields_ready:
            np.dot(V[lo:hi], W, X[lo:hi])
        for r in range(lo, hi):
            _sample_row_at(X[r], b_hid, _advance(base, r * n), H[r], Sb[b])
        np.dot(H[lo:hi], WT, Y[lo:hi])
        ms = m_part[b]
        mq = sq_part[b]
        ms[:] = 0.0
        mq[:] = 0.0
        for r in range(lo, hi):
            _sigmoid_row(Y[r], b_vis, Y[r], Sb[b])
            for i in range(n_vis):
                p = np.float64(Y[r, i])
                ms[i] += p
                mq[i] += p * p
            _draw_row_at(Y[r], _advance(base_v, r * n_vis), V[r])
    return _advance(base_v, S * n_vis)


def sample_model(V, W, b_vis, b_hid, coef, standard, k, seed):
    """k sampler steps on the chains V (in place): block Gibbs (``standard``: every coef = 1,
    :func:`boltzlab.engine.kernels.rbm.gibbs_chains`) or Metropolis-Hastings (:func:`mh_chains`).
    Returns the accepted count (k S for Gibbs).  On the calling thread's numba threads: with
    more than one, the Gibbs steps run on :func:`chain_blocks` of the chains in parallel,
    with the same draws (the Metropolis-Hastings sampler runs on one)."""
    return _sample_model(V, W, b_vis, b_hid, coef, standard, k, seed, parallel_here())


@njit(cache=True, nogil=True)
def _sample_model(V, W, b_vis, b_hid, coef, standard, k, seed, parallel):
    """:func:`sample_model`; ``parallel``: by chain blocks (:func:`parallel_here`)."""
    if not standard:
        return mh_chains(V, W, b_vis, b_hid, coef, k, seed)
    WT = np.ascontiguousarray(W.T)
    if not parallel:  # one thread: whole products
        gibbs_chains(V, W, WT, b_vis, b_hid, k, seed)
        return k * V.shape[0]
    S, n_vis = V.shape
    n = W.shape[1]
    nb = chain_blocks(S)
    X = np.empty((S, n), V.dtype)
    H = np.empty((S, n), V.dtype)
    Y = np.empty((S, n_vis), V.dtype)
    m_part = np.empty((nb, n_vis))  # the steps' means, unused here
    sq_part = np.empty((nb, n_vis))
    Sb = np.empty((nb, 4, max(n, n_vis)))
    position = new_state(seed)[0]
    for _ in range(k):
        position = _gibbs_step_means_blocks(V, X, H, Y, W, WT, b_vis, b_hid, position, m_part, sq_part, Sb, nb,
                                            False)
    return k * S


@njit(cache=True, nogil=True, parallel=True)
def _softplus_sums_blocks(V, W, b_hid, X, part, nb):
    """X = V W on the :func:`chain_blocks` in parallel, and part[b] = the sum over block b's
    rows r and units j of softplus(X[r, j] + b_hid[j]) (row order within a block)."""
    S = V.shape[0]
    n = W.shape[1]
    for b in prange(nb):
        lo = b * S // nb
        hi = (b + 1) * S // nb
        np.dot(V[lo:hi], W, X[lo:hi])
        s = 0.0
        for r in range(lo, hi):
            for j in range(n):
                s += softplus(X[r, j] + b_hid[j])
        part[b] = s


def bias_alpha_updates(V, W, b_vis, b_hid, alpha, data_mean, alpha_data, eta, alpha_lr, alpha_min, k,
                       standard, fit_alpha, seed, max_steps, tol, z):
    """:func:`_bias_alpha_updates` on the calling thread's numba threads (one: whole products)."""
    return _bias_alpha_updates(V, W, b_vis, b_hid, alpha, data_mean, alpha_data, eta, alpha_lr, alpha_min, k,
                               standard, fit_alpha, seed, max_steps, tol, z, parallel_here())


@njit(cache=True, nogil=True)
def _bias_alpha_updates(V, W, b_vis, b_hid, alpha, data_mean, alpha_data, eta, alpha_lr, alpha_min, k,
                        standard, fit_alpha, seed, max_steps, tol, z, parallel):
    """Algorithm 1's inner "repeat ... until" loop: eq. 10 until the model's visible means match the data's.

    Each step advances the chains k sampler steps (one stream seeded with ``seed``), estimates
    m = E_model[v] from them, then

        b_vis <- b_vis + eta (data_mean - m)                                       (eq. 10)

    and, with ``fit_alpha``, on the same samples a gradient step on alpha (appendix):

        alpha <- max(alpha_min, alpha + alpha_lr (alpha_data - (1/n) sum_i mean_s softplus(x_si)))

    where alpha_data = (1/n) sum_i [mean_data softplus(x_ni) - lam/2 ||(w_i, c_i)||^2] (see
    engine.frankwolfe); the coefficients are alpha / n.  For a standard RBM m is the
    Rao-Blackwellised mean over chains of P(v | h) of the last Gibbs step (unbiased, with
    less noise than the chains' 0/1 values); for the Metropolis-Hastings sampler it is the
    chains' mean.  "Until": the loop stops *before* updating when every visible unit has

        |data_mean_i - m_i| <= tol + z se_i,

    se_i the standard error of m_i over the S chains (so the test asks for a mismatch that
    the samples can resolve), or after ``max_steps`` updates.  Chains V (S, Nv) and b_vis
    are updated in place.  Returns (alpha, accepted, proposed, updates, largest |data_mean -
    m| at the last test, converged).
    """
    S, n_vis = V.shape
    n = W.shape[1]
    WT = np.ascontiguousarray(W.T)
    X = np.empty((S, n), V.dtype)
    H = np.empty((S, n), V.dtype)
    Y = np.empty((S, n_vis), V.dtype)
    m_sum = np.zeros(n_vis)
    m_sq = np.zeros(n_vis)
    n_blocks = chain_blocks(S) if parallel else 1  # 1 on one thread: whole products
    m_part = np.empty((n_blocks, n_vis))  # per-block sums, one row each: no false sharing
    sq_part = np.empty((n_blocks, n_vis))
    Sb = np.empty((n_blocks, 4, max(n, n_vis)))
    coef = np.empty(n)
    state = new_state(seed)
    accepted = 0
    proposed = 0
    mismatch = np.inf
    updates = 0
    converged = False
    s_part = np.empty(n_blocks)
    fields_ready = False  # X holds V W: the alpha step's product is the next Gibbs step's first
    while True:
        for j in range(n):
            coef[j] = alpha / n
        m_sum[:] = 0.0
        m_sq[:] = 0.0
        if standard:
            for _ in range(k):
                state[0] = _gibbs_step_means_blocks(V, X, H, Y, W, WT, b_vis, b_hid, state[0], m_part, sq_part, Sb,
                                                    n_blocks, fields_ready)
                fields_ready = False
            for b in range(n_blocks):  # the last step's sums, in block order
                for i in range(n_vis):
                    m_sum[i] += m_part[b, i]
                    m_sq[i] += sq_part[b, i]
            accepted += k * S
        else:
            Xf = _fields(V, W, b_hid)
            accepted += _mh_sweeps(V, Xf, W, b_hid, coef, b_vis, k, state)
            for r in range(S):
                for i in range(n_vis):
                    m_sum[i] += V[r, i]
                    m_sq[i] += V[r, i]
        proposed += k * S
        mismatch = 0.0
        worst = -np.inf
        for i in range(n_vis):
            m = m_sum[i] / S
            var = max(m_sq[i] / S - m * m, 0.0)
            gap = abs(data_mean[i] - m)
            mismatch = max(mismatch, gap)
            worst = max(worst, gap - z * math.sqrt(var / S))
        if worst <= tol:
            converged = True
            break
        if updates == max_steps:
            break
        for i in range(n_vis):
            b_vis[i] += eta * (data_mean[i] - m_sum[i] / S)
        if fit_alpha:
            # V W of the chains as they are now: W and b_hid stay fixed in this loop, so the
            # standard sampler's next step starts from these fields instead of a new product
            _softplus_sums_blocks(V, W, b_hid, X, s_part, n_blocks)
            fields_ready = standard
            s = 0.0
            for b in range(n_blocks):
                s += s_part[b]
            alpha = max(alpha_min, alpha + alpha_lr * (alpha_data - s / (S * n)))
        updates += 1
    return alpha, accepted, proposed, updates, mismatch, converged


@njit(cache=True, nogil=True)
def fractional_ais_log_weights(W, b_vis, b_hid, coef, base_vis, betas, n_runs, seed):
    """Log AIS weights for the fractional RBM of eq. 11 along the geometric path, (n_runs,).

        log p*_beta(v) = (1 - beta) base_vis^T v + beta [b_vis^T v + sum_i coef_i softplus(x_i)],

    from independent visibles with biases base_vis (beta = 0, log Z_0 = sum_i
    softplus(base_vis_i)) to eq. 11 (beta = 1).  p_beta is itself a fractional RBM with
    coefficients beta coef_i and visible biases (1 - beta) base_vis + beta b_vis, so each
    transition is one Metropolis-Hastings step of §3.3 (:func:`_mh_sweeps`), which leaves
    p_beta invariant.  Runs start from exact base samples (the stream's first n_runs Nv
    uniforms, row by row); at each beta_k the weights gain (beta_k - beta_{k-1})
    [(b_vis - base_vis)^T v + sum_i coef_i softplus(x_i)], then the chains move.
    """
    state = new_state(seed)
    n_vis, n = W.shape
    V = np.empty((n_runs, n_vis))
    for r in range(n_runs):
        for i in range(n_vis):
            V[r, i] = 1.0 if _uniform(state) < sigmoid(base_vis[i]) else 0.0
    X = _fields(V, W, b_hid)
    logw = np.zeros(n_runs)
    lin = np.empty(n_vis)
    cb = np.empty(n)
    for kk in range(1, betas.shape[0]):
        d_beta = betas[kk] - betas[kk - 1]
        beta = betas[kk]
        for r in range(n_runs):
            s = 0.0
            for i in range(n_vis):
                s += (b_vis[i] - base_vis[i]) * V[r, i]
            for j in range(n):
                s += coef[j] * softplus(X[r, j])
            logw[r] += d_beta * s
        if kk == betas.shape[0] - 1:
            break
        for i in range(n_vis):
            lin[i] = (1.0 - beta) * base_vis[i] + beta * b_vis[i]
        for j in range(n):
            cb[j] = beta * coef[j]
        _mh_sweeps(V, X, W, b_hid, cb, lin, 1, state)
    return logw


@njit(cache=True, nogil=True)
def _set_fields(x, W, b_vis, h):
    """x = b_vis + W h (fresh, to bound the drift of the Gray-code updates)."""
    for i in range(x.shape[0]):
        s = b_vis[i]
        for j in range(h.shape[0]):
            if h[j] != 0.0:
                s += W[i, j]
        x[i] = s


@njit(cache=True, nogil=True)
def hidden_enumeration(W, b_vis, b_hid):
    """Exact log Z and E[v] of a standard RBM (eq. 3) by enumerating its 2^n hidden states.

    States are visited in Gray-code order (state g = g ^ (g >> 1), bit j = h_j), so each
    step flips one unit and updates the visible fields x = b_vis + W h in O(Nv):
    log p*(h) = b_hid^T h + sum_i softplus(x_i), E[v] = sum_h p(h) sigmoid(x), both in one
    pass (the sums are rescaled whenever log p* reaches a new maximum).  Returns
    (log p*(h) over the Gray-code order, (2^n,); log Z; E[v], (Nv,)).
    """
    n_vis, n = W.shape
    N = 1 << n
    x = np.empty(n_vis)
    sig = np.empty(n_vis)
    h = np.zeros(n)
    logp = np.empty(N)
    means = np.zeros(n_vis)
    acc = 0.0
    top = -np.inf
    lin = 0.0
    _set_fields(x, W, b_vis, h)
    for g in range(N):
        if g > 0:
            j = 0
            while (g >> j) & 1 == 0:
                j += 1
            sign = 1.0 if h[j] == 0.0 else -1.0
            h[j] = 1.0 - h[j]
            lin += sign * b_hid[j]
            if g % 4096 == 0:
                _set_fields(x, W, b_vis, h)
            else:
                for i in range(n_vis):
                    x[i] += sign * W[i, j]
        s = lin
        for i in range(n_vis):
            e = math.exp(-abs(x[i]))
            if x[i] > 0.0:
                s += x[i] + math.log1p(e)
                sig[i] = 1.0 / (1.0 + e)
            else:
                s += math.log1p(e)
                sig[i] = e / (1.0 + e)
        logp[g] = s
        if s > top:
            scale = math.exp(top - s)
            acc *= scale
            for i in range(n_vis):
                means[i] *= scale
            top = s
        w = math.exp(s - top)
        acc += w
        for i in range(n_vis):
            means[i] += w * sig[i]
    for i in range(n_vis):
        means[i] /= acc
    return logp, top + math.log(acc), means
