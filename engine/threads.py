"""Threads of the engine: how many the parallel kernels use, and the BLAS they call.

The threading model (docs/architecture.md, "Threads"):

* One pool: numba's.  The parallel kernels (``parallel=True``, ``prange``) split their work
  into **blocks fixed by the problem's shape, never by the thread count** (chains, rows of a
  batch, columns of a weight matrix), and each block calls BLAS on its own slice.  A block's
  arithmetic is therefore the same on 1 or n threads: results are bit-identical whatever the
  thread count.  (A product's rounding depends on how BLAS tiles it: one product split in
  two differs in the last bits from the product whole, and OpenBLAS on 2 threads already
  differs from itself on 1.)
* Every BLAS in the process runs single-threaded once the engine runs (:func:`single_blas`):
  numba's ``np.dot`` calls scipy's OpenBLAS, and two pools (OpenBLAS's spinning threads
  beside numba's) on the same cores fight; on this 2-core machine shared with other work
  OpenBLAS's own two threads multiplied 5-8 GFLOP/s where one thread did 33-37.  numpy's
  own copy (what a trainer's NumPy ``@`` calls) is limited too: its idle threads spin for
  ~0.1 s after every product, on the core numba's next fork needs.
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
_BLAS_BEFORE: dict = {}  # each BLAS's thread count before the engine limited it (restore_blas)
_STEPPING = [0]  # blocks inside fair_share in this process now (restore_blas waits for none)


def available() -> int:
    """The most threads a kernel can use in this process (numba's NUMBA_NUM_THREADS, the cores)."""
    return int(numba.config.NUMBA_NUM_THREADS)


def threads() -> int:
    """The threads the calling thread's parallel kernels use."""
    return int(numba.get_num_threads())


def set_threads(n: int) -> int:
    """Let the calling thread's parallel kernels use ``n`` threads (clipped to 1..available()).

    Returns the count set.  Also makes every BLAS in the process single-threaded (:func:`single_blas`).
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


def _blas_libraries() -> list:
    """threadpoolctl controllers of every BLAS loaded in the process, once (scipy's
    OpenBLAS, which numba's ``np.dot`` calls, loaded first; numpy's own copy)."""
    global _BLAS
    if _BLAS is None:
        try:
            import scipy.linalg.cython_blas  # noqa: F401 -- the BLAS numba's np.dot calls, loaded
            from threadpoolctl import ThreadpoolController

            _BLAS = [lib for lib in ThreadpoolController().lib_controllers if lib.user_api == "blas"]
            _BLAS_BEFORE.update({lib.filepath: lib.get_num_threads() for lib in _BLAS})
        except Exception:  # no threadpoolctl / scipy: nothing to limit
            _BLAS = []
    return _BLAS


def _blas_controllers() -> list:
    """The BLAS numba's ``np.dot`` calls: scipy's, not numpy's own copy (numpy.libs/...openblas64_...)."""
    return [lib for lib in _blas_libraries() if "numpy" not in os.path.dirname(lib.filepath)]


def single_blas() -> None:
    """Make every BLAS in the process single-threaded: numba's pool is the only pool.

    Cheap after the first call (one ctypes call per library); the engine calls it before
    every parallel kernel and in :func:`set_threads`, so a ``threadpool_limits`` around
    engine code cannot put two pools on the same cores.  numpy's own OpenBLAS is limited
    too: left at a thread per core, its idle threads spin for ~0.1 s after each product
    (a float64 product followed by a 0.5 s sleep cost the process 0.1 s of CPU), and the
    NumPy products between two kernels (the Frank-Wolfe gap's softplus means, for one)
    left a spinner on the core numba's second thread needed: an
    insertion's eq.-10 loop ran 1.3x faster on two threads instead of 1.9x.  So a process
    that runs the engine does its NumPy products on one thread (``threadpool_limits``
    raises that for a block of the caller's own).
    """
    for lib in _blas_libraries():
        if lib.get_num_threads() != 1:
            lib.set_num_threads(1)


def restore_blas() -> bool:
    """Give every BLAS back the threads it had before the engine limited it
    (:func:`single_blas`), unless a run of this process is stepping now; True if restored.

    For a notebook, where the user's own NumPy work shares the process: a lab that pauses
    or closes there calls it (issue 46), and the engine limits the BLAS again at its next
    step (:func:`set_threads`), before any product of the step."""
    if _STEPPING[0]:
        return False
    for lib in _blas_libraries():
        before = _BLAS_BEFORE.get(lib.filepath)
        if before is not None and lib.get_num_threads() != before:
            lib.set_num_threads(before)
    return True


#: OpenBLAS's cores with "small matrix" SGEMM kernels (SMALL_MATRIX_OPT, AVX-512): a product
#: of at most SMALL_GEMM multiply-adds (M N K) runs there without packing its operands.  The
#: other cores' builds pack every call, where splitting a product only adds packings.
SMALL_GEMM_CORES = ("skylakex", "cooperlake", "sapphirerapids")
SMALL_GEMM = 100 * 100 * 100
SMALL_GEMM_MIN_ROWS = 4  # fewer rows per product than this: the product whole is no slower


def small_gemm_rows(k: int, n: int, itemsize: int) -> int:
    """Rows per product for products (rows, k) x (k, n) of ``itemsize``-byte floats that run
    in the BLAS's small-matrix kernel, or 0: multiply whole.

    Measured here (scipy's OpenBLAS 0.3.30, SkylakeX, one thread, k = 784, n = 100): whole,
    16-50 rows ran at 56-90 GFLOP/s, where 12-row pieces ran at 94-135 (the small kernel's
    limit is M N K <= 10^6: 12 rows); at 100 rows both ran alike.  A run of Algorithm 1
    passes through every row count as its chains converge, and on two threads each block
    of chains starts at half of them.  Float32 only (float64 results are compared with
    exact answers and keep their one product); 0 off OpenBLAS's AVX-512 cores.
    """
    if itemsize != 4 or k * n <= 0:
        return 0
    rows = SMALL_GEMM // (k * n)
    if rows < SMALL_GEMM_MIN_ROWS or not _small_gemm_blas():
        return 0
    return rows


def _small_gemm_blas() -> bool:
    libs = _blas_controllers()
    return bool(libs) and all(lib.internal_api == "openblas"
                              and str(getattr(lib, "architecture", "")).lower() in SMALL_GEMM_CORES
                              for lib in libs)


# ------------------------------------------------------------------ fair share between runs

#: A run counts as playing while it steps and for this long after (the round trip between
#: two batches of a playing run must not hand its threads to the others and back).
GRACE_SECONDS = 1.0


def _registry() -> str:
    """The machine-wide directory of playing runs (one per user: serve's workers and a
    notebook of the same user share the cores, so they share the count);
    ``BOLTZLAB_PLAYERS_DIR`` overrides it."""
    import tempfile

    if os.environ.get("BOLTZLAB_PLAYERS_DIR"):
        path = os.environ["BOLTZLAB_PLAYERS_DIR"]
        os.makedirs(path, exist_ok=True)
        return path
    root = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    path = os.path.join(root, f"boltzlab-players-{os.getuid() if hasattr(os, 'getuid') else 0}")
    os.makedirs(path, exist_ok=True)
    return path


class Player:
    """One playing run's claim on the machine's cores (see :func:`fair_share`).

    A file per run in :func:`_registry`, locked (``flock``) while the run steps and touched
    after, so a crashed process's claims die with it and a run between two batches still
    counts for :data:`GRACE_SECONDS`.
    """

    def __init__(self, key: str | None = None) -> None:
        import threading
        import uuid

        self.key = key or f"{os.getpid()}-{threading.get_ident()}-{uuid.uuid4().hex[:8]}"
        self.path = os.path.join(_registry(), self.key)
        self._fd: int | None = None

    def __enter__(self) -> "Player":
        import fcntl

        self._fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        import fcntl

        if self._fd is not None:
            try:
                os.utime(self.path)
            except OSError:
                pass
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        """Give the claim back at once (a paused or closed run)."""
        self.__exit__()
        try:
            os.unlink(self.path)
        except OSError:
            pass


def players(now: float | None = None) -> list[str]:
    """The keys of the runs playing on this machine, sorted (stale claims are removed)."""
    import fcntl
    import time

    now = time.time() if now is None else now
    root = _registry()
    alive = []
    for name in os.listdir(root):
        path = os.path.join(root, name)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                alive.append(name)  # locked: stepping now
                continue
            fcntl.flock(fd, fcntl.LOCK_UN)
            try:
                recent = now - os.stat(path).st_mtime <= GRACE_SECONDS
            except OSError:
                continue
            if recent:
                alive.append(name)
            elif now - os.stat(path).st_mtime > 60 * GRACE_SECONDS:
                os.unlink(path)  # long idle or left by a dead process
        except OSError:
            pass
        finally:
            os.close(fd)
    return sorted(alive)


#: Seconds between two readings of the machine's CPU counters (:func:`idle_cores`).
IDLE_SAMPLE_SECONDS = 0.5
_IDLE: dict = {}


def _cpu_counters() -> tuple[float, float, float] | None:
    """(busy, total) jiffies of the machine and this process's own jiffies, or None off Linux."""
    try:
        with open("/proc/stat") as f:
            fields = [float(x) for x in f.readline().split()[1:]]
        with open("/proc/self/stat") as f:
            own = f.read().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return None
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal
    idle = fields[3] + fields[4]
    return total - idle, total, float(own[11]) + float(own[12])  # utime + stime


def idle_cores(cores: int | None = None) -> int:
    """The cores not busy with other processes, at least 1, from the CPU counters' change
    since the previous reading (at most every :data:`IDLE_SAMPLE_SECONDS`; this process's
    own work counts as idle: it is what is being shared).  Off Linux: every core."""
    import time

    cores = available() if cores is None else int(cores)
    now = time.monotonic()
    last = _IDLE.get("sample")
    if last is not None and now - last[0] < IDLE_SAMPLE_SECONDS:
        return min(cores, _IDLE.get("idle", cores))
    counters = _cpu_counters()
    if counters is None:
        return cores
    _IDLE["sample"] = (now, counters)
    if last is None:
        _IDLE["idle"] = cores
        return cores
    busy, total, own = (a - b for a, b in zip(counters, last[1]))
    if total <= 0:
        return min(cores, _IDLE.get("idle", cores))
    machine = os.cpu_count() or cores
    others = max(0.0, busy - own) / total * machine  # cores' worth of other processes' work
    _IDLE["idle"] = max(1, min(cores, int(cores - others + 0.25)))
    return _IDLE["idle"]


def share(key: str, cores: int | None = None) -> int:
    """Threads for the playing run ``key``: the idle cores (:func:`idle_cores`, all of them
    when ``cores`` is given) split evenly between the playing runs (the first ``cores % n``
    of them in key order get one more), at least 1: never more threads than cores in total
    while there are no more runs than cores."""
    cores = idle_cores() if cores is None else int(cores)
    keys = players()
    if key not in keys:
        keys = sorted(keys + [key])
    n = len(keys)
    base, extra = divmod(cores, n)
    return max(1, base + (1 if keys.index(key) < extra else 0))


@contextmanager
def fair_share(player: Player) -> Iterator[int]:
    """``with fair_share(player): trainer.steps(k)`` claims the run's place among the playing
    runs and runs the block on its share of the cores (:func:`share`), restoring the calling
    thread's count after."""
    old = threads()
    with player:
        _STEPPING[0] += 1
        try:
            yield set_threads(share(player.key))
        finally:
            _STEPPING[0] -= 1
            numba.set_num_threads(old)
