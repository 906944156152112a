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
import time
from typing import Callable, Iterable

import numpy as np

#: kernel group -> the function (module, name) that runs each of its kernels once.  The
#: order is the order of compilation: the groups of the app's first lab (FVBM) first.
GROUPS: dict[str, tuple[str, str]] = {
    "fvbm": ("engine.warmup", "warm_up_fvbm"),
    "fvbm_bound": ("engine.fvbm_bound", "warm_up_fvbm_bound"),
    "rbm": ("engine.rbm", "warm_up_rbm"),
    "tap": ("engine.tap", "warm_up_tap"),
    "frankwolfe": ("engine.frankwolfe", "warm_up_frankwolfe"),
    "bound": ("engine.bound", "warm_up_bound"),
    "majorize": ("engine.majorize", "warm_up_majorize"),
}


def warm_up_fvbm() -> None:
    """Run the FVBM kernels once on a tiny problem."""
    from engine.fvbm import FVBM, FVBMTrainer, exact_log_likelihood
    from engine.kernels import fvbm as kernels

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
    return time.perf_counter() - t0


def warm_up(groups: Iterable[str] | None = None) -> None:
    """Run each numba kernel (of ``groups``; ``None``: all) once on a tiny problem, so no
    user or test waits for a compile."""
    for name in GROUPS if groups is None else groups:
        warm_group(name)


def _compile_child(name: str, niceness: int) -> tuple[str, float]:
    """In a pool process: warm one group (numba writes it to its cache)."""
    if niceness:
        try:
            os.nice(niceness)
        except OSError:
            pass
    return name, warm_group(name)


def compile_kernels(groups: Iterable[str] | None = None, processes: int | None = None, *,
                    niceness: int = 0,
                    on_done: Callable[[str, float, int, int], None] | None = None) -> dict[str, float]:
    """Compile the kernel groups into numba's cache in ``processes`` parallel processes
    (``None``: one per core, at most one per group), first groups first; returns the
    seconds each took.  ``on_done(group, seconds, k, n)`` is called in this process as the
    k-th of n groups is done.  The processes are spawned (never forked: the caller may hold
    threads and sockets) and run at ``niceness`` above this process.

    With a warm cache each group only loads (a second or so, mostly the processes' start).
    A group that fails raises here, with the child's exception.
    """
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    names = list(GROUPS if groups is None else groups)
    for name in names:
        if name not in GROUPS:
            raise ValueError(f"No kernel group {name!r}; the groups are {', '.join(GROUPS)}.")
    if not names:
        return {}
    processes = max(1, min(processes or os.cpu_count() or 1, len(names)))
    seconds: dict[str, float] = {}
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(processes, mp_context=context) as pool:
        pending = {pool.submit(_compile_child, name, niceness) for name in names}  # FIFO: first groups first
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                name, taken = future.result()
                seconds[name] = taken
                if on_done is not None:
                    on_done(name, taken, len(seconds), len(names))
    return seconds


def cache_location() -> str:
    """Where numba keeps its cache of the kernels (for messages)."""
    from numba.core.config import CACHE_DIR

    return CACHE_DIR or "__pycache__ folders beside the installed engine's modules"
