"""Threads of the engine: how many the parallel kernels use, and the BLAS they call.

The threading model (docs/architecture.md, "Threads"):

* One pool: numba's.  The parallel kernels (``parallel=True``, ``prange``) split their work
  into **blocks fixed by the problem's shape, never by the thread count** (chains, rows of a
  batch, columns of a weight matrix), and each block calls BLAS on its own slice.  A block's
  arithmetic is therefore the same on 1 or n threads: results are bit-identical whatever the
  thread count.  (A product's rounding depends on how BLAS tiles it: one product split in
  two differs in the last bits from the product whole, and OpenBLAS on 2 threads already
  differs from itself on 1.)
* BLAS runs single-threaded inside the kernels (:func:`single_blas`): numba's ``np.dot``
  calls scipy's OpenBLAS, and two pools (OpenBLAS's spinning threads beside numba's) on
  the same cores fight; on this 2-core machine shared with other work OpenBLAS's own two
  threads multiplied 5-8 GFLOP/s where one thread did 33-37.
* :func:`set_threads` / :func:`threads` act on the calling thread only (numba's thread
  count is thread-local), so a session's runner thread sets its share without touching
  the others'.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

import numba

_BLAS = None  # threadpoolctl controllers of the BLAS numba calls (scipy's OpenBLAS), once


def available() -> int:
    """The most threads a kernel can use in this process (numba's NUMBA_NUM_THREADS, the cores)."""
    return int(numba.config.NUMBA_NUM_THREADS)


def threads() -> int:
    """The threads the calling thread's parallel kernels use."""
    return int(numba.get_num_threads())


def set_threads(n: int) -> int:
    """Let the calling thread's parallel kernels use ``n`` threads (clipped to 1..available()).

    Returns the count set.  Also makes the BLAS numba calls single-threaded (:func:`single_blas`).
    """
    n = max(1, min(int(n), available()))
    numba.set_num_threads(n)
    single_blas()
    return n


@contextmanager
def using(n: int) -> Iterator[int]:
    """``with using(2): ...`` runs the block's kernels on 2 threads, then restores the count."""
    old = threads()
    try:
        yield set_threads(n)
    finally:
        numba.set_num_threads(old)


def _blas_controllers() -> list:
    global _BLAS
    if _BLAS is None:
        try:
            import scipy.linalg.cython_blas  # noqa: F401 -- the BLAS numba's np.dot calls, loaded
            from threadpoolctl import ThreadpoolController

            ctl = ThreadpoolController()
            # scipy's BLAS, not numpy's own copy (numpy.libs/...openblas64_...)
            _BLAS = [lib for lib in ctl.lib_controllers
                     if lib.user_api == "blas" and "numpy" not in os.path.dirname(lib.filepath)]
        except Exception:  # no threadpoolctl / scipy: nothing to limit
            _BLAS = []
    return _BLAS


def single_blas() -> None:
    """Make the BLAS that numba's ``np.dot`` calls (scipy's OpenBLAS) single-threaded.

    Cheap after the first call (one ctypes call per library); the engine calls it before
    every parallel kernel, so a ``threadpool_limits`` around engine code cannot put two
    pools on the same cores.  numpy's own OpenBLAS (a separate library) is left alone.
    """
    for lib in _blas_controllers():
        if lib.get_num_threads() != 1:
            lib.set_num_threads(1)
