"""Compile (or load from numba's on-disk cache) every kernel on tiny problems.

The kernels come in groups, one per engine module (:data:`GROUPS`).  On a fresh install
numba compiles each group once (about 2.5 CPU-minutes in all on this kind of machine) and
writes the machine code to its cache; any later process loads a group in well under a
second.  :func:`compile_kernels` compiles the groups in parallel processes, so that every
process (the app's, each worker's) can then load them from the cache instead of compiling
them again; :func:`warm_up` warms them in this process.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

#: kernel group -> the function (module, name) that runs each of its kernels once.  The
#: order is the order of compilation: the groups of the app's first lab (FVBM) first.
GROUPS: dict[str, tuple[str, str]] = {
    "fvbm": ("boltzlab.engine.warmup", "warm_up_fvbm"),
    "fvbm_bound": ("boltzlab.engine.fvbm_bound", "warm_up_fvbm_bound"),
    "rbm": ("boltzlab.engine.rbm", "warm_up_rbm"),
    "tap": ("boltzlab.engine.tap", "warm_up_tap"),
    "frankwolfe": ("boltzlab.engine.frankwolfe", "warm_up_frankwolfe"),
    "bound": ("boltzlab.engine.bound", "warm_up_bound"),
    "majorize": ("boltzlab.engine.majorize", "warm_up_majorize"),
}


def warm_up_fvbm() -> None:
    """Run the FVBM kernels once on a tiny problem."""
    from .fvbm import FVBM, FVBMTrainer, exact_log_likelihood
    from .kernels import fvbm as kernels

    model = FVBM.random(3, 0)
    X = model.sample(16, 1)
    FVBMTrainer(X, tol=0, max_sweeps=2, exact_every=1).run()
    exact_log_likelihood(X, model.b, model.M)
    kernels.gibbs_sample(model.b, model.M, 2, 1, 1, 0)
    np.asarray(model.probabilities())


def warm_group(name: str) -> float:
    """Warm the kernel group ``name`` (a key of :data:`GROUPS`) in this process; seconds taken."""
    if name not in GROUPS:
        raise ValueError(f"No kernel group {name!r}; the groups are {', '.join(GROUPS)}.")
    module, function = GROUPS[name]
    t0 = time.perf_counter()
    getattr(importlib.import_module(module), function)()
    seconds = time.perf_counter() - t0
    marker = _marker(name)
    if marker is not None and not os.path.exists(marker):
        try:
            Path(marker).touch()
        except OSError:  # a read-only cache: every start compiles (numba says so itself)
            pass
    return seconds


def warm_up(groups: Iterable[str] | None = None) -> None:
    """Run each numba kernel (of ``groups``; ``None``: all) once on a tiny problem, so no
    user or test waits for a compile."""
    for name in GROUPS if groups is None else groups:
        warm_group(name)


def _marker(name: str) -> str | None:
    """The file that says group ``name`` was warmed with this numba's cache: it sits in the
    cache's own folder (gone with it), named for the kernels' sources, numba and Python (a
    change of any of them makes a new name); ``None`` if numba's internals are not as known."""
    import hashlib
    import sys

    import numba
    from numba.core.caching import FunctionCache
    from numba.core.registry import CPUDispatcher

    try:
        module = importlib.import_module(f"boltzlab.engine.kernels.{name}")
        kernel = next(v for v in vars(module).values()
                      if isinstance(v, CPUDispatcher) and isinstance(v._cache, FunctionCache))
        folder = kernel._cache._cache_path
    except (ImportError, AttributeError, StopIteration):
        return None
    digest = hashlib.sha256(f"{numba.__version__} {sys.version}".encode())
    for source in sorted(Path(module.__file__).parent.glob("*.py")):
        digest.update(source.read_bytes())
    return os.path.join(folder, f"boltzlab-warm-{name}-{digest.hexdigest()[:16]}")


def is_cached(name: str) -> bool:
    """Whether group ``name`` was warmed before with this cache, these kernels, this numba."""
    marker = _marker(name)
    return marker is not None and os.path.exists(marker)


def die_with_parent(parent: int) -> None:
    """In a pool process, first thing: ask Linux to end this process when its parent dies.

    ``serve`` stopped during a first start (SIGTERM, SIGKILL) left its compile processes
    behind for half an hour (seen after the install test: 0.7 GB and a tenth of a core). No-op
    where ``prctl`` is missing; a parent already gone ends the child at once."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(0)


def _compile_child(name: str, niceness: int) -> tuple[str, float]:
    """In a pool process: warm one group (numba writes it to its cache)."""
    if niceness:
        try:
            os.nice(niceness)
        except OSError:
            pass
    return name, warm_group(name)


#: the process pools of :func:`compile_kernels` now compiling (:func:`stop_compiling` ends them)
_COMPILING: set = set()


def stop_compiling() -> int:
    """End the processes of every :func:`compile_kernels` now running in this process (the
    server is stopping); how many.  That ``compile_kernels`` then raises (the pool is broken)
    and returns within a second or so instead of waiting for the compilations to finish.

    A stop of ``serve`` during a first start used to wait for the compilations: measured
    (issue 49), the server and its compile processes ran on for 91.8 s after a SIGTERM, until
    the supervisor's SIGKILL.  A group cut short leaves no half-written cache entry that
    counts: numba writes each entry to a temporary file and renames it (``_open_for_write`` in
    numba/core/caching.py), and the group's marker (:func:`is_cached`) is written only after
    the whole group is done."""
    ended = 0
    for pool in list(_COMPILING):
        ended += _end(pool)
    return ended


def _end(pool) -> int:
    """End a compile pool's processes (:func:`stop_compiling`); how many were running."""
    ended = 0
    # the pool's processes: the standard library's ProcessPoolExecutor keeps them in _processes
    # (pid -> multiprocessing.Process; read in CPython 3.11's concurrent/futures/process.py),
    # with no public way to end them there; were it missing, they would still end with this
    # process (die_with_parent)
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        if process.is_alive():
            process.terminate()  # SIGTERM: a compile process has Python's default, to end at once
            ended += 1
    pool.shutdown(wait=False, cancel_futures=True)
    return ended


def compile_kernels(groups: Iterable[str] | None = None, processes: int | None = None, *,
                    niceness: int = 0, skip_cached: bool = True,
                    on_done: Callable[[str, float, int, int], None] | None = None,
                    stop: threading.Event | None = None) -> dict[str, float]:
    """Compile the kernel groups into numba's cache in ``processes`` parallel processes
    (``None``: one per usable CPU, :func:`usable_cpus`, at most one per group), first groups
    first; returns the seconds each took.  ``on_done(group, seconds, k, n)`` is called in
    this process as the k-th of n groups is done.  ``stop`` set (before or while this runs,
    then with :func:`stop_compiling`): the processes are ended and this raises.  The processes are spawned (never forked: the caller may hold
    threads and sockets) and run at ``niceness`` above this process.

    A group already in the cache (:func:`is_cached`; unless ``skip_cached=False``) starts
    no process and is reported at once, with 0 seconds.  A group that fails raises here,
    with the child's exception.
    """
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    names = list(GROUPS if groups is None else groups)
    for name in names:
        if name not in GROUPS:
            raise ValueError(f"No kernel group {name!r}; the groups are {', '.join(GROUPS)}.")
    seconds: dict[str, float] = {}
    for name in [n for n in names if skip_cached and is_cached(n)]:  # nothing to compile: no process
        names.remove(name)
        seconds[name] = 0.0
        if on_done is not None:
            on_done(name, 0.0, len(seconds), len(seconds) + len(names))
    if not names:
        return seconds
    total = len(seconds) + len(names)
    processes = max(1, min(processes or usable_cpus(), len(names)))
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(processes, mp_context=context, initializer=die_with_parent,
                             initargs=(os.getpid(),)) as pool:
        _COMPILING.add(pool)
        try:
            if stop is not None and stop.is_set():  # (a stop that came before the pool)
                _end(pool)
            pending = {pool.submit(_compile_child, name, niceness) for name in names}  # FIFO: first groups first
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    name, taken = future.result()  # (stop_compiling: BrokenProcessPool or CancelledError)
                    seconds[name] = taken
                    if on_done is not None:
                        on_done(name, taken, len(seconds), total)
        finally:
            _COMPILING.discard(pool)
    return seconds


def usable_cpus() -> int:
    """The CPUs this process may use: ``dask.system.CPU_COUNT`` (the machine's, its affinity's
    and its cgroup's quota, the least), else ``os.cpu_count()``: a container given 2 CPUs on a
    64-core node compiles in 2 processes, not 7."""
    try:
        import dask.system
    except ImportError:  # (dask is a dependency of boltzlab, not of every use of the engine)
        return os.cpu_count() or 1
    return max(1, int(dask.system.CPU_COUNT))


def cache_location() -> str:
    """Where numba keeps its cache of the kernels (for messages)."""
    from numba.core.config import CACHE_DIR

    return CACHE_DIR or "__pycache__ folders beside the installed engine's modules"
