"""Numba helpers shared by the kernel families (RBM, TAP, Frank-Wolfe, bound).

Imported as ``boltzlab.engine.kernels.common``; numba caches the compiled functions on disk
(beside this file, or under ``NUMBA_CACHE_DIR``) and reuses them while this file is unchanged.

Conventions:

* Matrices are row-major (C order) 2-d arrays or views of them; :func:`matmul` also takes
  views with strided rows (a block of columns ``W[:, j0:j1]``) and transposed views
  (``L[:, i0:i1].T``): any 2-d view with one unit stride.
* float32 and float64 only; a product runs in the dtype of its output, which its operands
  share.
"""

from __future__ import annotations

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.linalg import ensure_blas

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
