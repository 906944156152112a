"""Numba kernels for binary restricted Boltzmann machines.

Conventions shared by every kernel here:

* v in {0, 1}^Nv and h in {0, 1}^Nh are stored as float64 rows (so products go to BLAS);
  a batch of visibles ``V`` is (n, Nv), of hiddens ``H`` is (n, Nh), C-contiguous.
* ``W`` is (Nv, Nh), ``b_vis`` (Nv,), ``b_hid`` (Nh,); ``WT`` is ``W.T`` made contiguous.
* Energy E(v, h) = -v^T W h - b_vis^T v - b_hid^T h; free energy
  F(v) = -b_vis^T v - sum_j softplus(b_hid_j + (v^T W)_j).
* Random numbers come from a splitmix64 generator (Steele, Lea & Flood 2014) whose one
  uint64 word of state is set from each kernel's ``seed`` argument: the same seed gives
  the same numbers, and it is ~7x faster than numba's Mersenne Twister per draw.
  A layer's draws are counter-based: row r of an (n, m) sample uses draws r m + 1 ..
  (r + 1) m after the stream's state, so rows can be drawn on any thread in any order and
  give the numbers one sequential pass would.
* Threads (:mod:`boltzlab.engine.threads`): :func:`train_batches` runs each mini-batch's
  products and elementwise passes on fixed blocks (:func:`~boltzlab.engine.kernels.common.col_blocks`
  of each pass's output columns, :func:`weight_blocks` of W's rows for the gradient and the
  update) in parallel, every block calling single-threaded BLAS on its slice.  Blocks are set
  by the shapes, never by the thread count, and a block owns its columns' sums (row order),
  so a seed gives the same model on 2 or n threads, and one thread's to rounding.
"""

from __future__ import annotations

import math

import numpy as np
from numba import get_num_threads, njit, prange

from .common import (F32, _fdiv, col_block, col_blocks, exp_nonpositive, matmul, sigmoid,
                     sigmoid32, softplus)

LOG2 = math.log(2.0)
GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # splitmix64's increment
MIX1 = np.uint64(0xBF58476D1CE4E5B9)
MIX2 = np.uint64(0x94D049BB133111EB)
RECON_ROWS = 20  # PCD: reconstruction error on this many rows of each batch (an extra product)


@njit(cache=True, nogil=True, inline="always")
def _uniform(state):
    """Next U[0, 1) double of the splitmix64 stream in state[0] (a uint64 array of one)."""
    z = state[0] + GOLDEN
    state[0] = z
    z = (z ^ (z >> np.uint64(30))) * MIX1
    z = (z ^ (z >> np.uint64(27))) * MIX2
    z = z ^ (z >> np.uint64(31))
    return np.float64(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True, nogil=True)
def new_state(seed):
    """Generator state for ``seed`` (an int >= 0)."""
    state = np.empty(1, np.uint64)
    state[0] = np.uint64(seed)
    _uniform(state)
    return state


@njit(cache=True, nogil=True)
def uniforms(n, seed):
    """n U[0, 1) draws of the generator seeded with ``seed`` (for tests)."""
    state = new_state(seed)
    out = np.empty(n)
    for i in range(n):
        out[i] = _uniform(state)
    return out


@njit(cache=True, nogil=True)
def scratch(m):
    """Scratch rows for :func:`_sigmoid_row` of rows up to m long (allocate once, reuse)."""
    return np.empty((4, m))


@njit(cache=True, nogil=True)
def _sigmoid_row(x, bias, p, S):
    """p[j] = sigmoid(x[j] + bias[j]) for one row (p may be x), in vectorisable passes.

    float64 p: sigmoid(t) = 1 / (1 + e) for t >= 0 and e / (1 + e) below, e = exp(-|t|),
    with the polynomial exp of :func:`boltzlab.engine.kernels.common.exp_nonpositive` (float64,
    relative error < 3e-16) and a select instead of a branch: a branch on the sign of a
    random field is mispredicted half the time, which cost more than the exp itself.
    float32 p: the same formula in float32 (:func:`boltzlab.engine.kernels.common.sigmoid32`, error
    < 3 ulp), t = x + bias rounded to float32, in one fused loop.
    """
    m = x.shape[0]
    if p.itemsize == 4:
        if p.ctypes.data == x.ctypes.data:  # in place: one pointer, so no overlap check
            for j in range(m):
                p[j] = sigmoid32(F32(p[j] + bias[j]))
        else:
            for j in range(m):
                p[j] = sigmoid32(F32(x[j] + bias[j]))
        return
    t = S[0, :m]
    y = S[1, :m]
    e = S[2, :m]
    work = S[3, :m]
    for j in range(m):
        t[j] = x[j] + bias[j]
        y[j] = -abs(t[j])
    exp_nonpositive(y, e, work)
    for j in range(m):
        inv = _fdiv(1.0, 1.0 + e[j])
        p[j] = inv if t[j] >= 0.0 else e[j] * inv


@njit(cache=True, nogil=True, inline="always")
def _draw(base, j, p):
    """1.0 if the (j + 1)-th draw after ``base`` of the splitmix64 stream is below p (float64)."""
    z = base + np.uint64(j + 1) * GOLDEN
    z = (z ^ (z >> np.uint64(30))) * MIX1
    z = (z ^ (z >> np.uint64(27))) * MIX2
    z = z ^ (z >> np.uint64(31))
    u = np.float64(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)
    return np.float64(u < p)


@njit(cache=True, nogil=True, inline="always")
def _advance(base, count):
    """The stream position ``count`` draws after ``base``."""
    return base + np.uint64(count) * GOLDEN


@njit(cache=True, nogil=True)
def _draw_row_at(p, base, out):
    """:func:`_draw_row` from the stream position ``base`` (the state is not advanced)."""
    m = p.shape[0]
    if out.ctypes.data == p.ctypes.data:
        for j in range(m):
            out[j] = _draw(base, j, np.float64(out[j]))
    else:
        for j in range(m):
            out[j] = _draw(base, j, np.float64(p[j]))


@njit(cache=True, nogil=True)
def _draw_row(p, state, out):
    """out[j] = 1 if u_j < p[j] else 0 with u_j the next draws of the stream (out may be p).

    The same draws as m calls of :func:`_uniform` (splitmix64 draw j mixes state + (j + 1)
    GOLDEN), computed independently so the loop has no carried dependency and no branch.
    The float64 draw is compared with p promoted to float64 (exact for float32 p).  In
    place (out is p) the loop goes through one pointer: LLVM vectorises a loop over two
    possibly overlapping arrays only after a runtime overlap check, which fails when they
    are the same array and leaves the scalar loop.
    """
    _draw_row_at(p, state[0], out)
    state[0] = _advance(state[0], p.shape[0])


@njit(cache=True, nogil=True)
def _sigmoid_rows(X, bias, S):
    """X <- sigmoid(X + bias) in place, row by row (X in its own dtype)."""
    for r in range(X.shape[0]):
        _sigmoid_row(X[r], bias, X[r], S)


@njit(cache=True, nogil=True)
def _layer_probabilities(A, B, bias):
    """sigmoid(A @ B + bias) row by row: the conditional of one layer given the other."""
    X = np.dot(A, B)
    _sigmoid_rows(X, bias, scratch(X.shape[1]))
    return X


@njit(cache=True, nogil=True)
def hidden_probabilities(V, W, b_hid):
    """P(h_j = 1 | v) = sigmoid(b_hid_j + (v^T W)_j) for every row of V, (n, Nh)."""
    return _layer_probabilities(V, W, b_hid)


@njit(cache=True, nogil=True)
def visible_probabilities(H, WT, b_vis):
    """P(v_i = 1 | h) = sigmoid(b_vis_i + (W h)_i) for every row of H, (n, Nv)."""
    return _layer_probabilities(H, WT, b_vis)


@njit(cache=True, nogil=True)
def _bernoulli_into(P, state, out):
    """out <- a 0/1 sample of independent Bernoulli(P) entries (out may be P).

    The float64 draw u is compared with P's entry promoted to float64 (exact for float32 P),
    so both precisions consume the same stream the same way."""
    for r in range(P.shape[0]):
        _draw_row(P[r], state, out[r])


@njit(cache=True, nogil=True)
def _sample_row_at(x, bias, base, out, S):
    """:func:`_sample_row` from the stream position ``base`` (the state is not advanced)."""
    if out.itemsize == 4:
        m = x.shape[0]
        if out.ctypes.data == x.ctypes.data:  # in place: one pointer (see _draw_row)
            for j in range(m):
                out[j] = _draw(base, j, np.float64(sigmoid32(F32(out[j] + bias[j]))))
        else:
            for j in range(m):
                out[j] = _draw(base, j, np.float64(sigmoid32(F32(x[j] + bias[j]))))
        return
    _sigmoid_row(x, bias, out, S)
    _draw_row_at(out, base, out)


@njit(cache=True, nogil=True)
def _sample_row(x, bias, state, out, S):
    """out <- a 0/1 sample of Bernoulli(sigmoid(x + bias)) for one row (out may be x).

    :func:`_sigmoid_row` then :func:`_draw_row`; in float32 fused into one loop (the
    probability stays in a register, promoted to float64 for the comparison as there)."""
    _sample_row_at(x, bias, state[0], out, S)
    state[0] = _advance(state[0], x.shape[0])


@njit(cache=True, nogil=True)
def _sample_fields_into(X, bias, state, out, S):
    """out <- a 0/1 sample of Bernoulli(sigmoid(X + bias)) entries (out may be X); S: scratch."""
    for r in range(X.shape[0]):
        _sample_row(X[r], bias, state, out[r], S)


@njit(cache=True, nogil=True)
def free_energy(V, W, b_vis, b_hid):
    """F(v) = -b_vis^T v - sum_j softplus(b_hid_j + (v^T W)_j) for every row of V, (n,)."""
    X = np.dot(V, W)
    n, m = X.shape
    out = np.empty(n)
    for r in range(n):
        s = 0.0
        for i in range(V.shape[1]):
            s += b_vis[i] * V[r, i]
        for j in range(m):
            s += softplus(X[r, j] + b_hid[j])
        out[r] = -s
    return out


@njit(cache=True, nogil=True)
def gibbs_chains(V, W, WT, b_vis, b_hid, k, seed):
    """k steps of block Gibbs sampling h ~ P(h|v), v ~ P(v|h) on every chain (row of V).

    V is updated in place (one chain per row); returns the last hidden sample (n, Nh).
    Runs in the dtype of V, W and WT (all float64 or all float32, C-contiguous); the
    biases may be either.  Two buffers serve all k steps.
    """
    state = new_state(seed)
    H = np.zeros((V.shape[0], W.shape[1]), V.dtype)
    S = scratch(max(W.shape[0], W.shape[1]))
    for _ in range(k):
        np.dot(V, W, H)
        _sample_fields_into(H, b_hid, state, H, S)
        np.dot(H, WT, V)
        _sample_fields_into(V, b_vis, state, V, S)
    return H


@njit(cache=True, nogil=True)
def log_partition_weighted(A, a, c, coef):
    """log sum_x exp(a^T x + sum_j coef_j softplus(c_j + (x^T A)_j)) over x in {0, 1}^m.

    With the smaller layer as x: A = W (x = v, a = b_vis, c = b_hid) or A = W^T (x = h,
    a = b_hid, c = b_vis); the other layer is summed out analytically.  The 2^m states are
    visited in Gray-code order, so one flip of x_k moves the field f = c + x^T A by
    +-A[k] in O(n): O(2^m n) in all.  The field is recomputed from scratch every 4096
    flips so rounding drift cannot accumulate; streaming log-sum-exp with a running
    maximum keeps everything finite.
    """
    m, n = A.shape
    x = np.zeros(m)
    f = c.copy()
    lin = 0.0
    value = 0.0
    for j in range(n):
        value += coef[j] * softplus(f[j])
    shift = value
    acc = 1.0
    for step in range(1, 2**m):
        k = 0
        while not (step >> k) & 1:
            k += 1
        s = 1.0 - 2.0 * x[k]  # +1 when x_k goes 0 -> 1
        x[k] += s
        lin += s * a[k]
        if step % 4096 == 0:
            for j in range(n):
                f[j] = c[j]
            for l in range(m):
                if x[l] != 0.0:
                    for j in range(n):
                        f[j] += A[l, j]
            value = lin
            for j in range(n):
                value += coef[j] * softplus(f[j])
        else:
            value = lin
            for j in range(n):
                f[j] += s * A[k, j]
                value += coef[j] * softplus(f[j])
        if value > shift:
            acc = acc * math.exp(shift - value) + 1.0
            shift = value
        else:
            acc += math.exp(value - shift)
    return shift + math.log(acc)


@njit(cache=True, nogil=True)
def log_partition_sum_over(A, a, c):
    """log sum_x exp(a^T x + sum_j softplus(c_j + (x^T A)_j)) over x in {0, 1}^m: an RBM's
    log Z with the other layer summed out (:func:`log_partition_weighted` with every
    coef_j = 1, which multiplies exactly: the same bits as a loop without it)."""
    return log_partition_weighted(A, a, c, np.ones(A.shape[1]))


@njit(cache=True, nogil=True)
def conditional_log_probs(V, W, b_vis, b_hid, units):
    """log P(v_i | v_-i) for every row of V and every unit i in ``units``, (n, len(units)).

    By free-energy differences: flipping v_i (s = 1 - 2 v_i) moves the hidden fields
    x = b_hid + v^T W by s W[i], and log P(v_i | v_-i) = -softplus(F(v) - F(v_flip)) with
    F(v_flip) - F(v) = -s b_i - sum_j (softplus(x_j + s W_ij) - softplus(x_j)).
    """
    X = np.dot(V, W)
    n, m = X.shape
    out = np.empty((n, units.shape[0]))
    for r in range(n):
        base = 0.0
        for j in range(m):
            X[r, j] += b_hid[j]
            base += softplus(X[r, j])
        for u in range(units.shape[0]):
            i = units[u]
            s = 1.0 - 2.0 * V[r, i]
            flipped = 0.0
            for j in range(m):
                flipped += softplus(X[r, j] + s * W[i, j])
            gap = s * b_vis[i] + flipped - base  # F(v) - F(v_flip)
            out[r, u] = -softplus(gap)
    return out


@njit(cache=True, nogil=True)
def gradient(V_pos, V_neg, W, b_vis, b_hid):
    """The CD/PCD estimate of d(mean log-likelihood)/d(W, b_vis, b_hid).

    Positive phase: mean over the rows of V_pos of v P(h|v)^T; negative phase: the same
    over the rows of V_neg (chain states after k Gibbs steps, or exact model samples).
    Returns (gW, g_vis, g_hid).
    """
    Hp = hidden_probabilities(V_pos, W, b_hid)
    Hn = hidden_probabilities(V_neg, W, b_hid)
    n_pos = V_pos.shape[0]
    n_neg = V_neg.shape[0]
    gW = np.dot(V_pos.T, Hp) / n_pos - np.dot(V_neg.T, Hn) / n_neg
    g_vis = np.empty(W.shape[0])
    g_hid = np.empty(W.shape[1])
    for i in range(W.shape[0]):
        sp = 0.0
        for r in range(n_pos):
            sp += V_pos[r, i]
        sn = 0.0
        for r in range(n_neg):
            sn += V_neg[r, i]
        g_vis[i] = sp / n_pos - sn / n_neg
    for j in range(W.shape[1]):
        sp = 0.0
        for r in range(n_pos):
            sp += Hp[r, j]
        sn = 0.0
        for r in range(n_neg):
            sn += Hn[r, j]
        g_hid[j] = sp / n_pos - sn / n_neg
    return gW, g_vis, g_hid


ROW_BLOCK = 64  # rows of a batch or of the chains per parallel block at most
WEIGHT_BLOCK = 256  # rows of W per block of the gradient product and the update at most


@njit(cache=True, nogil=True)
def row_blocks(n):
    """Blocks n rows are split into, ceil(n / ROW_BLOCK), as equal as possible: fixed by n alone."""
    return max(1, (n + ROW_BLOCK - 1) // ROW_BLOCK)


@njit(cache=True, nogil=True)
def used_row_blocks(n, parallel):
    """:func:`row_blocks` of n rows for a ``parallel`` call, else 1: one thread multiplies
    whole matrices, as fast as the kernels before threads and with their numbers
    (docs/architecture.md, "Threads")."""
    return row_blocks(n) if parallel else 1


def parallel_here() -> bool:
    """Whether the calling thread's kernels run on more than one thread (numba's count is
    per calling thread; read in Python: a kernel that asked numba itself could not be cached)."""
    return get_num_threads() > 1


@njit(cache=True, nogil=True)
def weight_blocks(n):
    """Blocks W's n rows are split into for the gradient product, ceil(n / WEIGHT_BLOCK)."""
    return max(1, (n + WEIGHT_BLOCK - 1) // WEIGHT_BLOCK)


@njit(cache=True, nogil=True, inline="always")
def _block(n, nb, b):
    return b * n // nb, (b + 1) * n // nb


# Each pass of train_batches is a block body over the columns [j0, j1) of its output (W's rows
# for the gradient), run either once over all columns on the calling thread (one thread: the
# whole products and the loops of before, no fork) or on the fixed column blocks in parallel
# (_blocks below).  Columns, not rows: a block multiplies all rows by its slice of W, so each
# thread packs only its share of W (a split of a 100-row batch by rows had each thread pack
# all of W, and two threads ran a pass 1.1-1.3x faster than one; by columns 1.4-1.7x); and a
# block owns its columns' sums, added in row order as on one thread.
POSITIVE, PROBABILITY, SAMPLE, BERNOULLI, NEGATIVE = 0, 1, 2, 3, 4


@njit(cache=True, nogil=True)
def _pass_cols(kind, X, Wm, out, bias, base, nr, hs, scale, keep, persistent, acc, S, j0, j1):
    """One pass on the columns [j0, j1) of out (all its rows):

    * POSITIVE: out = P(h|X) = sigmoid(X Wm + bias), its column sums into ``acc``, samples of
      rows r < nr into hs (row r: draws r m + 1 .. after ``base``), then the rows scaled by
      ``scale``;
    * PROBABILITY: out = sigmoid(X Wm + bias);
    * SAMPLE: out = a 0/1 sample of Bernoulli(sigmoid(X Wm + bias)) (row r: draws r m + 1 ..
      after ``base``);
    * BERNOULLI: out = a 0/1 sample of Bernoulli(X) (no product), draws as SAMPLE;
    * NEGATIVE: out = P(h|X), copied into keep (PCD's chain_hid) if persistent, summed into
      ``acc``, then scaled by ``scale``.

    Column j of row r uses draw r m + j + 1 (counter-based), so a block of columns draws what
    the whole row would.  out may not be X; S is scratch (:func:`scratch`).
    """
    n, m = out.shape
    if kind != BERNOULLI:
        if j0 == 0 and j1 == m:
            np.dot(X[:n], Wm, out)
        else:
            matmul(X[:n], Wm[:, j0:j1], out[:, j0:j1])
    if kind == POSITIVE or kind == NEGATIVE:
        acc[j0:j1] = 0.0
    b = bias[j0:j1]
    for r in range(n):
        row = out[r, j0:j1]
        at = _advance(base, r * m + j0)
        if kind == SAMPLE:
            _sample_row_at(row, b, at, row, S)
            continue
        if kind == BERNOULLI:
            _draw_row_at(X[r, j0:j1], at, row)
            continue
        _sigmoid_row(row, b, row, S)
        if kind == PROBABILITY:
            continue
        if kind == NEGATIVE and persistent:
            keep[r, j0:j1] = row
        for j in range(j1 - j0):
            acc[j0 + j] += row[j]
        if kind == POSITIVE and r < nr:
            _draw_row_at(row, at, hs[r, j0:j1])
        for j in range(j1 - j0):
            row[j] = scale * row[j]


@njit(cache=True, nogil=True, parallel=True)
def _pass_blocks(kind, X, Wm, out, bias, base, nr, hs, scale, keep, persistent, acc, Sb):
    """:func:`_pass_cols` on the :func:`col_blocks` of out's columns in parallel (block b's
    scratch Sb[b])."""
    m = out.shape[1]
    nb = col_blocks(m)
    for b in prange(nb):
        j0, j1 = col_block(m, nb, b)
        _pass_cols(kind, X, Wm, out, bias, base, nr, hs, scale, keep, persistent, acc, Sb[b], j0, j1)


@njit(cache=True, nogil=True)
def _pass(kind, X, Wm, out, bias, base, nr, hs, scale, keep, persistent, Sb, parallel, sums):
    """:func:`_pass_cols` on all columns: in one piece on one thread, by blocks in parallel
    otherwise; the column sums (POSITIVE, NEGATIVE) into ``sums`` (float64, row order)."""
    if parallel:
        _pass_blocks(kind, X, Wm, out, bias, base, nr, hs, scale, keep, persistent, sums, Sb)
    else:
        _pass_cols(kind, X, Wm, out, bias, base, nr, hs, scale, keep, persistent, sums, Sb[0], 0, out.shape[1])


@njit(cache=True, nogil=True)
def _update_rows(G, W, vW, learning_rate, momentum, weight_decay, i0, i1):
    """vW = momentum vW + lr (G - weight_decay W), W += vW on W's rows [i0, i1)."""
    Wf = W[i0:i1].reshape(-1)  # flat views: one vectorised loop
    vWf = vW[i0:i1].reshape(-1)
    Gf = G[i0:i1].reshape(-1)
    for q in range(Wf.shape[0]):
        vWf[q] = momentum * vWf[q] + learning_rate * (Gf[q] - weight_decay * Wf[q])
        Wf[q] += vWf[q]


@njit(cache=True, nogil=True, parallel=True)
def _gradient_blocks(L, R, G, W, vW, learning_rate, momentum, weight_decay):
    """G = L^T R by :func:`weight_blocks` of W's rows in parallel (block [i0, i1): one product
    of L's columns [i0, i1) in place, nothing copied), then the update of those rows."""
    n_vis = W.shape[0]
    nb = weight_blocks(n_vis)
    for b in prange(nb):
        i0, i1 = _block(n_vis, nb, b)
        matmul(L[:, i0:i1].T, R, G[i0:i1])
        _update_rows(G, W, vW, learning_rate, momentum, weight_decay, i0, i1)


@njit(cache=True, nogil=True)
def _gradient_update(L, R, G, W, vW, learning_rate, momentum, weight_decay, parallel):
    """G = L^T R (both phases' gradient in one product), then the momentum update of W."""
    if parallel:
        _gradient_blocks(L, R, G, W, vW, learning_rate, momentum, weight_decay)
    else:
        np.dot(L.T, R, G)
        _update_rows(G, W, vW, learning_rate, momentum, weight_decay, 0, W.shape[0])


def train_batches(V, rows, bounds, seeds, W, b_vis, b_hid, vW, v_vis, v_hid, chains, chain_hid, persistent,
                  k, learning_rate, momentum, weight_decay, recon_out):
    """:func:`_train_batches` on the calling thread's numba threads (one: in one piece)."""
    _train_batches(V, rows, bounds, seeds, W, b_vis, b_hid, vW, v_vis, v_hid, chains, chain_hid, persistent,
                   k, learning_rate, momentum, weight_decay, recon_out, parallel_here())


@njit(cache=True, nogil=True)
def _train_batches(V, rows, bounds, seeds, W, b_vis, b_hid, vW, v_vis, v_hid, chains, chain_hid, persistent,
                   k, learning_rate, momentum, weight_decay, recon_out, parallel):
    """Mini-batch CD-k / PCD-k updates, several batches in one call (no return to Python).

    Batch t holds the data rows ``rows[bounds[t]:bounds[t+1]]`` and draws its random
    numbers from the generator seeded with ``seeds[t]``.  Per batch:

    * positive phase: P(h|v) on the batch;
    * negative phase: k block Gibbs steps from the batch (CD) or from the persistent
      chains (PCD, ``chains`` updated in place), then P(h|v) of the final states;
    * PCD keeps, beside the chains' visible states, their hidden probabilities
      ``chain_hid`` = P(h | chains) from the previous batch's negative phase (as
      scikit-learn's BernoulliRBM does): the chains' first hidden half-step samples from
      them instead of recomputing chains @ W, saving one of the five products per batch.
      That half-step uses the parameters of one update earlier; the chain is still a
      Gibbs chain of slowly moving parameters, which is all PCD asks of it;
    * gradient = mean_batch v P(h|v)^T - mean_chains v P(h|v)^T (and the same for biases);
    * momentum update: vel = momentum vel + lr (grad - weight_decay W) (no decay on
      biases), param += vel.

    ``recon_out[t]`` receives the reconstruction error of batch t: the mean over rows of
    sum_i (v_i - P(v_i = 1 | h))^2 with h ~ P(h|v) from the positive phase.  CD gets it
    for free (it is the first negative step); PCD computes it on the first RECON_ROWS
    rows of the (randomly ordered) batch only, an unbiased estimate at a fraction of a
    product's cost.

    Precision: everything runs in the dtype of W (float32 or float64; V, the parameters,
    velocities and chains share it).  The buffers are allocated once per call and reused
    by every batch; the products write into them (``np.dot(a, b, out)``).

    Threads: each pass runs on fixed blocks (module docstring) in parallel; the random
    numbers are those of a sequential pass (counter-based draws), the products' and the
    sums' rounding is set by the blocks, so the result is the same on any thread count.
    """
    n_vis, n_hid = W.shape
    dt = W.dtype
    nb_max = 0
    for t in range(seeds.shape[0]):
        nb_max = max(nb_max, bounds[t + 1] - bounds[t])
    n_chains = chains.shape[0] if persistent else nb_max
    # L = [batch; negative states] and R = [P(h|batch) / nb; -P(h|neg) / n_neg]: the gradient
    # of both phases is the one product L^T R; the batch and the CD chains live inside L, and
    # P(h|batch), P(h|neg) are computed in R and scaled there in place
    L = np.empty((nb_max + n_chains, n_vis), dt)
    R = np.empty((nb_max + n_chains, n_hid), dt)
    Hc = np.empty((n_chains, n_hid), dt)
    Hs = np.empty((min(nb_max, RECON_ROWS) if persistent else nb_max, n_hid), dt)
    Vr = np.empty((Hs.shape[0], n_vis), dt)
    G = np.empty((n_vis, n_hid), dt)
    sum_p = np.empty(n_hid)
    sum_n = np.empty(n_hid)
    sum_vp = np.empty(n_vis)
    sum_vn = np.empty(n_vis)
    # one thread: every pass in one piece (the whole products); more: fixed column blocks in
    # parallel, each with its scratch rows, allocated once (the most blocks a layer has)
    n_cb = col_blocks(max(n_vis, n_hid)) if parallel else 1
    Sb = np.empty((n_cb, 4, max(n_vis, n_hid)))
    WT = W.T
    for t in range(seeds.shape[0]):
        state = new_state(seeds[t])
        idx = rows[bounds[t]:bounds[t + 1]]
        nb = idx.shape[0]
        B = L[:nb]
        # gather the batch and its visible sums in one pass (sums of 0/1: exact in any order)
        sum_vp[:] = 0.0
        for r in range(nb):
            src = V[idx[r]]
            dst = B[r]
            for i in range(n_vis):
                x = src[i]
                dst[i] = x
                sum_vp[i] += x
        hp = R[:nb]
        # reconstruction error: all rows for CD (its first negative step), RECON_ROWS for PCD
        nr = min(nb, RECON_ROWS) if persistent else nb
        hs = Hs[:nr]
        # P(h|batch): sigmoid, hidden sums, the reconstruction's draws (rows < nr, counter-based:
        # the numbers of a pass in row order), then the scaling by 1 / nb
        cp = 1.0 / nb
        _pass(POSITIVE, B, W, hp, b_hid, state[0], nr, hs, cp, hs, False, Sb, parallel, sum_p)
        state[0] = _advance(state[0], nr * n_hid)
        vr = Vr[:nr]
        _pass(PROBABILITY, hs, WT, vr, b_vis, state[0], 0, hs, 1.0, vr, False, Sb, parallel, sum_p)
        err = 0.0
        for r in range(nr):
            for i in range(n_vis):
                d = B[r, i] - vr[r, i]
                err += d * d
        recon_out[t] = err / nr
        sum_vn[:] = 0.0
        if persistent:
            n_neg = n_chains
            neg = L[nb:nb + n_neg]
            for step in range(k):
                if step == 0:
                    _pass(BERNOULLI, chain_hid, W, Hc, b_hid, state[0], 0, Hc, 1.0, Hc, False, Sb, parallel,
                          sum_n)
                else:
                    _pass(SAMPLE, chains, W, Hc, b_hid, state[0], 0, Hc, 1.0, Hc, False, Sb, parallel, sum_n)
                state[0] = _advance(state[0], n_neg * n_hid)
                # the last visible half-step samples into L, then the chains' copy and sums
                _pass(SAMPLE, Hc, WT, neg if step == k - 1 else chains, b_vis, state[0], 0, Hc, 1.0, Hc, False,
                      Sb, parallel, sum_n)
                state[0] = _advance(state[0], n_neg * n_vis)
            for r in range(n_neg):
                row = neg[r]
                dst = chains[r]
                for i in range(n_vis):
                    x = row[i]
                    dst[i] = x
                    sum_vn[i] += x
        else:
            n_neg = nb
            neg = L[nb:nb + n_neg]
            hc = Hc[:nb]
            for step in range(k):
                if step == 0:
                    _pass(BERNOULLI, vr, WT, neg, b_vis, state[0], 0, hs, 1.0, hs, False, Sb, parallel, sum_n)
                    state[0] = _advance(state[0], n_neg * n_vis)
                else:
                    _pass(SAMPLE, neg, W, hc, b_hid, state[0], 0, hc, 1.0, hc, False, Sb, parallel, sum_n)
                    state[0] = _advance(state[0], n_neg * n_hid)
                    _pass(SAMPLE, hc, WT, neg, b_vis, state[0], 0, hc, 1.0, hc, False, Sb, parallel, sum_n)
                    state[0] = _advance(state[0], n_neg * n_vis)
            for r in range(n_neg):
                for i in range(n_vis):
                    sum_vn[i] += neg[r, i]
        hn = R[nb:nb + n_neg]
        cn = 1.0 / n_neg
        _pass(NEGATIVE, neg, W, hn, b_hid, state[0], 0, hn, -cn, chain_hid, persistent, Sb, parallel, sum_n)
        for j in range(n_hid):
            v_hid[j] = momentum * v_hid[j] + learning_rate * (sum_p[j] * cp - sum_n[j] * cn)
        m = nb + n_neg
        _gradient_update(L[:m], R[:m], G, W, vW, learning_rate, momentum, weight_decay, parallel)
        for i in range(n_vis):
            v_vis[i] = momentum * v_vis[i] + learning_rate * (sum_vp[i] * cp - sum_vn[i] * cn)
            b_vis[i] += v_vis[i]
        for j in range(n_hid):
            b_hid[j] += v_hid[j]


@njit(cache=True, nogil=True, inline="always")
def _uniform_at(base, q):
    """The (q + 1)-th U[0, 1) draw after the stream position ``base`` (as :func:`_uniform`)."""
    z = base + np.uint64(q + 1) * GOLDEN
    z = (z ^ (z >> np.uint64(30))) * MIX1
    z = (z ^ (z >> np.uint64(27))) * MIX2
    z = z ^ (z >> np.uint64(31))
    return np.float64(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)


def ais_log_weights(W, b_vis, b_hid, base_vis, betas, n_runs, seed):
    """:func:`_ais_log_weights` on the calling thread's numba threads (one: all runs in one block)."""
    return _ais_log_weights(W, b_vis, b_hid, base_vis, betas, n_runs, seed, parallel_here())


@njit(cache=True, nogil=True, parallel=True)
def _ais_log_weights(W, b_vis, b_hid, base_vis, betas, n_runs, seed, parallel):
    """Log importance weights of ``n_runs`` AIS runs (Salakhutdinov & Murray 2008), (n_runs,).

    Intermediate distributions over v with the hiddens summed out analytically:
    log p*_beta(v) = (1 - beta) base_vis^T v + beta b_vis^T v
                     + sum_j softplus(beta (b_hid_j + (v^T W)_j)),
    from the base-rate model (beta = 0: independent visibles with biases base_vis, the
    hiddens contributing 2^Nh) to the RBM (beta = 1).  Each run starts with an exact
    sample of the base model; at each beta_k it adds log p*_k(v) - log p*_{k-1}(v), then
    moves v by one Gibbs step h ~ p_k(h|v), v ~ p_k(v|h) that leaves p_k invariant.

    The runs of a block advance together (one BLAS product per half step); seeded
    splitmix64, one stream consumed as by all runs in order: the initial visibles run by
    run, then per beta the hidden draws run by run and the visible draws run by run.
    Threads: the runs never interact, so fixed blocks of runs (:func:`row_blocks`) each
    walk the whole schedule in parallel, taking their draws at their counter positions
    (the same numbers) -- one fork for the whole estimate; the weights do not depend on
    the thread count.
    """
    state = new_state(seed)
    base0 = state[0]
    n_vis, n_hid = W.shape
    WT = W.T
    V = np.empty((n_runs, n_vis))
    for r in range(n_runs):
        for i in range(n_vis):
            V[r, i] = 1.0 if _uniform(state) < sigmoid(base_vis[i]) else 0.0
    logw = np.zeros(n_runs)
    diff_vis = b_vis - base_vis
    H = np.empty((n_runs, n_hid))
    X = np.empty((n_runs, n_hid))
    Y = np.empty((n_runs, n_vis))
    first = _advance(base0, n_runs * n_vis)
    per_beta = n_runs * (n_hid + n_vis)
    n_betas = betas.shape[0]
    nb = used_row_blocks(n_runs, parallel)
    for b in prange(nb):
        lo, hi = _block(n_runs, nb, b)
        for kk in range(1, n_betas):
            b_prev = betas[kk - 1]
            b_now = betas[kk]
            base_h = _advance(first, (kk - 1) * per_beta)
            base_v = _advance(base_h, n_runs * n_hid)
            np.dot(V[lo:hi], W, X[lo:hi])
            for r in range(lo, hi):
                s = 0.0
                for i in range(n_vis):
                    s += diff_vis[i] * V[r, i]
                acc = (b_now - b_prev) * s
                for j in range(n_hid):
                    x = X[r, j] + b_hid[j]
                    y = b_now * x
                    e = math.exp(-abs(y))  # shared by softplus(y) and sigmoid(y)
                    acc += max(y, 0.0) + math.log1p(e) - softplus(b_prev * x)
                    p = 1.0 / (1.0 + e) if y >= 0.0 else e / (1.0 + e)
                    H[r, j] = 1.0 if _uniform_at(base_h, r * n_hid + j) < p else 0.0
                logw[r] += acc
            if kk == n_betas - 1:
                break  # the last transition would not change the weights
            np.dot(H[lo:hi], WT, Y[lo:hi])
            for r in range(lo, hi):
                for i in range(n_vis):
                    y = (1.0 - b_now) * base_vis[i] + b_now * (b_vis[i] + Y[r, i])
                    V[r, i] = 1.0 if _uniform_at(base_v, r * n_vis + i) < sigmoid(y) else 0.0
    return logw
