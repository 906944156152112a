"""Numba helpers shared by the kernel families (RBM, TAP, Frank-Wolfe, bound): scalar float64
functions, the vectorisable float32 / float64 exp and sigmoid of the RBM and TAP rows, and
BLAS products on blocks of matrices.

Imported as ``boltzlab.engine.kernels.common``; numba caches the compiled functions on disk
(beside this file, or under ``NUMBA_CACHE_DIR``) and reuses them while this file is unchanged.
A kernel module's cache does not notice a change here (numba keys a cache entry on its own
file): clear the caches after editing this file (``find . -name "*.nbi" -o -name "*.nbc"``).

Conventions:

* Scalars: :func:`sigmoid`, :func:`softplus`, :func:`logaddexp` take and return float64 and
  never overflow (each branches on a sign; for rows, use the branch-free vector forms).
* Rows: :func:`exp_nonpositive` (float64 arrays, y <= 0) and :func:`exp_nonpositive32`,
  :func:`sigmoid32` (float32 scalars inside fused loops) avoid a libm call per element so
  LLVM vectorises the loops around them.  No ``fastmath`` anywhere here: the polynomial and
  the bit tricks rely on IEEE rounding and evaluation order (a reassociated Cody-Waite
  reduction loses the low bits of r), and a NaN must stay a NaN.
* Matrices are row-major (C order) 2-d arrays or views of them; :func:`matmul` also takes
  views with strided rows (a block of columns ``W[:, j0:j1]``) and transposed views
  (``L[:, i0:i1].T``): any 2-d view with one unit stride.
* float32 and float64 only; a product runs in the dtype of its output, which its operands
  share.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.linalg import ensure_blas

# exp on arrays without a libm call per element (numba has no SVML here): Cody-Waite
# reduction y = k ln 2 + r, |r| <= ln2/2, a degree-13 Taylor polynomial (error < 5e-18),
# and 2^k assembled in the exponent bits; LLVM vectorises every step (AVX2: 4 at a time)
LOG2E = 1.4426950408889634
LN2_HI = 0.6931471803691238
LN2_LO = 1.9082149292705877e-10
EXP_MAGIC = 6755399441055744.0  # 1.5 * 2^52: y log2(e) + EXP_MAGIC holds round(k) in its low bits
EXP_MAGIC_BITS = np.int64(0x4338000000000000)
EXP_FLOOR = -708.0  # keeps 2^k normal; exp(-708) = 3e-308 stands in for anything smaller
_E = [1.0 / math.factorial(k) for k in range(14)]
E0, E1, E2, E3, E4, E5, E6, E7, E8, E9, E10, E11, E12, E13 = _E
# the same in float32 (sigmoids of float32 RBM / TAP rows): Cody-Waite with a 9-bit ln2_hi
# (k ln2_hi exact for |k| <= 126), a degree-7 Taylor polynomial (truncation < 6e-9 relative
# on |r| <= ln2/2, below half a float32 ulp), everything in float32 so a vector holds twice
# the lanes; total error measured < 2 ulp (tests/engine/test_tap_dtype.py)
F32 = np.float32
LOG2E_32 = F32(LOG2E)
LN2_HI_32 = F32(0.693359375)
LN2_LO_32 = F32(math.log(2.0) - 0.693359375)
EXP_MAGIC_32 = F32(12582912.0)  # 1.5 * 2^23
EXP_BIAS_32 = 127 - 0x4B400000  # bits of (t = k + EXP_MAGIC_32) - 0x4B400000 + 127: 2^k's exponent field
EXP_FLOOR_32 = F32(-87.0)  # keeps 2^k normal in float32 (exp(-87) = 1.6e-38)
ZERO_32 = F32(0.0)
ONE_32 = F32(1.0)
HALF_32 = F32(0.5)
_F = [F32(1.0 / math.factorial(k)) for k in range(8)]
F0, F1, F2, F3, F4, F5, F6, F7 = _F


@njit(cache=True, nogil=True)
def logaddexp(x, y):
    """log(e^x + e^y) without overflow, for x, y in [-inf, inf)."""
    if x == -math.inf:
        return y
    if y == -math.inf:
        return x
    if x > y:
        return x + math.log1p(math.exp(y - x))
    return y + math.log1p(math.exp(x - y))


@njit(cache=True, nogil=True)
def exp_nonpositive(y, out, work):
    """out[j] = exp(y[j]) for y[j] <= 0 (relative error < 3e-16; y below EXP_FLOOR gives
    exp(EXP_FLOOR)).  ``work`` is scratch of the same length; loops vectorise."""
    n = y.shape[0]
    for j in range(n):
        v = max(y[j], EXP_FLOOR)
        t = v * LOG2E + EXP_MAGIC
        k = t - EXP_MAGIC
        r = (v - k * LN2_HI) - k * LN2_LO
        p = E13
        p = p * r + E12
        p = p * r + E11
        p = p * r + E10
        p = p * r + E9
        p = p * r + E8
        p = p * r + E7
        p = p * r + E6
        p = p * r + E5
        p = p * r + E4
        p = p * r + E3
        p = p * r + E2
        p = p * r + E1
        p = p * r + E0
        out[j] = p
        work[j] = t
    bits = work.view(np.int64)
    for j in range(n):
        bits[j] = (bits[j] - EXP_MAGIC_BITS + 1023) << 52
    scale = bits.view(np.float64)
    for j in range(n):
        out[j] *= scale[j]


@intrinsic
def _f32_bits(typingctx, x):
    """The bits of a float32 as an int32 (a register bitcast; vectorises)."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(types.float32), codegen


@intrinsic
def _f32_from_bits(typingctx, i):
    """The float32 whose bits are the low 32 bits of the integer i."""
    if not isinstance(i, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        v = args[0]
        if i.bitwidth > 32:
            v = builder.trunc(v, ir.IntType(32))
        elif i.bitwidth < 32:
            v = builder.sext(v, ir.IntType(32))
        return builder.bitcast(v, ir.FloatType())

    return types.float32(i), codegen


@intrinsic
def _fdiv(typingctx, a, b):
    """a / b of two floats of one type as the bare IEEE division (numba's ``/`` adds a check
    for b == 0 that raises, a branch that keeps a loop from vectorising; the callers divide
    by 1 + e >= 1)."""
    if not (isinstance(a, types.Float) and a == b):
        return None

    def codegen(context, builder, signature, args):
        return builder.fdiv(args[0], args[1])

    return a(a, b), codegen


@njit(cache=True, nogil=True)
def exp_nonpositive32(y):
    """exp(y) of a float32 y <= 0 in float32 (error < 2 ulp; y below -87 gives exp(-87)).

    A scalar function for fused, vectorisable loops: :func:`exp_nonpositive` in single
    precision, with 2^k assembled by bit casts in registers instead of a pass over memory.
    """
    v = max(F32(y), EXP_FLOOR_32)
    t = v * LOG2E_32 + EXP_MAGIC_32
    k = t - EXP_MAGIC_32
    r = (v - k * LN2_HI_32) - k * LN2_LO_32
    p = F7
    p = p * r + F6
    p = p * r + F5
    p = p * r + F4
    p = p * r + F3
    p = p * r + F2
    p = p * r + F1
    p = p * r + F0
    return p * _f32_from_bits((_f32_bits(t) + EXP_BIAS_32) << 23)


@njit(cache=True, nogil=True)
def sigmoid32(x):
    """1 / (1 + e^-x) of a float32 x in float32: e = exp(-|x|), 1 / (1 + e) or e / (1 + e)
    branch-free (max(e, [x >= 0]) picks the numerator), so loops of it vectorise."""
    x = F32(x)
    e = exp_nonpositive32(-abs(x))
    inv = _fdiv(ONE_32, ONE_32 + e)
    return max(e, F32(x >= ZERO_32)) * inv  # inv for x >= 0 (max(e, 1) = 1), e inv below


@njit(cache=True, nogil=True)
def sigmoid(x):
    """1 / (1 + e^-x) without overflow."""
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


@njit(cache=True, nogil=True)
def softplus(x):
    """log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|)."""
    if x > 0.0:
        return x + math.log1p(math.exp(-x))
    return math.log1p(math.exp(x))


# ------------------------------------------------------------------ BLAS on blocks

_CHAR = ir.IntType(8)
_VOIDP = ir.IntType(8).as_pointer()
_NOTRANS = 110  # ord("n")
_TRANS = 116  # ord("t")


@intrinsic
def _xxgemm(typingctx, transa, transb, m, n, k, a, lda, b, ldb, c, ldc):
    """Column-major C (m x n) = op(A) op(B) (alpha 1, beta 0) through numba's own BLAS entry
    point ``numba_xxgemm`` (the one ``np.dot`` calls: scipy's BLAS), with explicit leading
    dimensions, so sub-blocks of larger matrices are multiplied in place without copies.
    Returns BLAS's status (0)."""
    if not (isinstance(c, types.Array) and c.dtype in (types.float32, types.float64)
            and isinstance(a, types.Array) and isinstance(b, types.Array)
            and a.dtype == c.dtype and b.dtype == c.dtype):
        return None
    ensure_blas()
    dtype = c.dtype
    sig = types.int32(transa, transb, m, n, k, a, lda, b, ldb, c, ldc)

    def codegen(context, builder, signature, args):
        intp = context.get_value_type(types.intp)
        fnty = ir.FunctionType(ir.IntType(32), [_CHAR, _CHAR, _CHAR, intp, intp, intp, _VOIDP, _VOIDP, intp,
                                                _VOIDP, intp, _VOIDP, _VOIDP, intp])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "numba_xxgemm")
        alpha = cgutils.alloca_once_value(builder, context.get_constant(dtype, 1.0))
        beta = cgutils.alloca_once_value(builder, context.get_constant(dtype, 0.0))
        ty = signature.args

        def data(i):
            return builder.bitcast(context.make_array(ty[i])(context, builder, args[i]).data, _VOIDP)

        def integer(i):
            return context.cast(builder, args[i], ty[i], types.intp)

        kind = ir.Constant(_CHAR, ord("s" if dtype == types.float32 else "d"))
        return builder.call(fn, (kind, builder.trunc(integer(0), _CHAR), builder.trunc(integer(1), _CHAR),
                                 integer(2), integer(3), integer(4), builder.bitcast(alpha, _VOIDP), data(5),
                                 integer(6), data(7), integer(8), builder.bitcast(beta, _VOIDP), data(9),
                                 integer(10)))

    return sig, codegen


@njit(cache=True, nogil=True, inline="always")
def _operand(X):
    """(trans, leading dimension) of a row-major view X as a column-major BLAS operand."""
    size = X.itemsize
    if X.strides[1] == size or X.shape[1] == 1:
        return _NOTRANS, max(1, X.strides[0] // size, X.shape[1])
    return _TRANS, max(1, X.strides[1] // size, X.shape[0])


@njit(cache=True, nogil=True)
def matmul(A, B, C):
    """C = A B for 2-d float32/float64 views, one BLAS call, no copies.

    A (m, k), B (k, n) and C (m, n) may be blocks of larger matrices (strided rows) and A, B
    transposed views; C's rows must be contiguous.  The same BLAS routine as ``np.dot``
    on whole contiguous arrays (bit for bit there); on a block of columns the result may
    differ from the same columns of the whole product in the last bits (BLAS tiles it
    differently; scipy's OpenBLAS float64 happens not to, float32 does).
    """
    m, k = A.shape
    n = B.shape[1]
    if m == 0 or n == 0:
        return
    if k == 0:
        C[:, :] = 0.0
        return
    ta, lda = _operand(A)
    tb, ldb = _operand(B)
    ldc = max(1, C.strides[0] // C.itemsize, n)
    # row-major C = A B is column-major C^T = B^T A^T: B's role first
    _xxgemm(tb, ta, n, m, k, B, ldb, A, lda, C, ldc)


# ------------------------------------------------------------------ column blocks

COL_UNIT = 16  # column blocks start at multiples of this (whole SIMD / GEMM micro-tiles)
COL_BLOCK = 256  # columns of W per parallel block, about


@njit(cache=True, nogil=True)
def even_blocks(n, size):
    """The number of blocks n items are split into: ceil(n / size) made even (two threads
    get equal shares), at least 1 and at most n -- set by n alone, never by the thread count."""
    nb = (n + size - 1) // size
    nb += nb % 2
    return max(1, min(nb, n))


@njit(cache=True, nogil=True)
def col_blocks(m):
    """The number of blocks m columns are split into: :func:`even_blocks` of COL_BLOCK
    columns, at most one per COL_UNIT columns -- set by m alone."""
    units = (m + COL_UNIT - 1) // COL_UNIT
    return max(1, min(even_blocks(m, COL_BLOCK), units))


@njit(cache=True, nogil=True, inline="always")
def col_block(m, nb, b):
    """Columns [j0, j1) of block b of :func:`col_blocks` (whole COL_UNITs, as equal as possible)."""
    units = (m + COL_UNIT - 1) // COL_UNIT
    return min(m, COL_UNIT * (b * units // nb)), min(m, COL_UNIT * ((b + 1) * units // nb))
