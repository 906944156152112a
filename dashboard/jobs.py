"""Analyses off the UI thread: submit now, draw the result on a later tick.

Anything a lab computes that can take more than a few milliseconds (an Isomap fit, a
denoising curve, a reference solve, an exact or AIS evaluation) is a *job*: a plain
function of plain arguments that returns plain numpy/Python values.  The lab submits it
with :meth:`Jobs.submit`; it runs on :data:`EXECUTOR` (a worker process of the Dask cluster
``boltzlab serve`` starts, or this process's thread pool with ``--workers 0``), and
``then(result)`` runs on the UI thread at the next refresh tick (:meth:`Jobs.poll`).  A
click handler therefore never waits.

Jobs have keys: a newer job under the same key supersedes the older one, whose result is
dropped (the same generation idea as the runner's), so a slider dragged across ten values
draws the last one, not ten in turn.  No Panel code here.

A job that refuses its input (a ``ValueError``: a user's file that is no data set, settings
that do not fit) returns the refusal as its result (:class:`Refused`) instead of raising it:
a raising task is logged by the Dask worker as an ERROR "Compute Failed" with its traceback,
which reads as a server fault; the lab's ``error`` callback gets the ``ValueError`` either way.
"""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

#: Where jobs run: a callable ``submit(fn, *args) -> future`` (``concurrent.futures`` or
#: ``distributed`` futures: ``done()``, ``result()``, ``cancel()``).  ``None``: this
#: process's thread pool.  ``boltzlab serve`` points it at its Dask cluster.
EXECUTOR: Callable[..., Any] | None = None

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


class Refused:
    """A job's ``ValueError``, carried back as its result (see the module's docstring)."""

    def __init__(self, error: ValueError) -> None:
        self.error = error


def _run(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, with a ``ValueError`` returned as :class:`Refused` (on the worker)."""
    try:
        return fn(*args)
    except ValueError as exc:
        return Refused(exc)


def submit(fn: Callable[..., Any], *args: Any, here: bool = False) -> Any:
    """Start ``fn(*args)`` on :data:`EXECUTOR` (or the local pool; ``here``: always the local
    pool, for a job that needs this process's objects, e.g. a runner); its future, whose
    result is a :class:`Refused` if ``fn`` raised a ``ValueError`` (:meth:`Jobs.poll` raises it again)."""
    global _POOL
    if EXECUTOR is not None and not here:
        return EXECUTOR(_run, fn, *args)
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="boltzlab-job")
    return _POOL.submit(_run, fn, *args)


@dataclass
class _Pending:
    future: Any
    then: Callable[[Any], None]
    error: Callable[[BaseException], None] | None
    generation: int


class Jobs:
    """One session's (or one lab's) jobs in flight.

    ``submit`` returns at once; ``poll`` (called on every refresh tick, on the UI thread)
    hands each finished job's result to its ``then``, or its exception to ``error`` (by
    default re-raised there, so the lab's tick shows it).
    """

    def __init__(self) -> None:
        self._pending: dict[str, _Pending] = {}
        self._counter = itertools.count()

    def submit(self, key: str, fn: Callable[..., Any], *args: Any,
               then: Callable[[Any], None],
               error: Callable[[BaseException], None] | None = None, here: bool = False) -> None:
        """Run ``fn(*args)`` away from the UI thread; ``then(result)`` on a later poll.

        A job already pending under ``key`` is superseded (cancelled if not started; its
        result is dropped either way).
        """
        old = self._pending.pop(key, None)
        if old is not None:
            old.future.cancel()
        future = submit(fn, *args, here=True) if here else submit(fn, *args)
        self._pending[key] = _Pending(future, then, error, next(self._counter))

    def running(self, key: str | None = None) -> bool:
        """True while a job (under ``key``, or any) has not been handed over yet."""
        return bool(self._pending) if key is None else key in self._pending

    def cancel(self, key: str | None = None, keep: tuple[str, ...] = ()) -> None:
        """Drop the job under ``key`` (or every job but those in ``keep``): its result will
        never be handed over."""
        keys = [k for k in self._pending if k not in keep] if key is None else [key]
        for each in keys:
            pending = self._pending.pop(each, None)
            if pending is not None:
                pending.future.cancel()

    def poll(self) -> int:
        """Hand every finished job to its callback (oldest first); how many were handed over."""
        done = sorted(((k, p) for k, p in self._pending.items() if p.future.done()),
                      key=lambda item: item[1].generation)
        handed = 0
        for key, pending in done:
            if self._pending.get(key) is not pending:
                continue  # superseded by an earlier callback of this poll: dropped, as promised
            del self._pending[key]
            handed += 1
            try:
                result = pending.future.result()
                if isinstance(result, Refused):
                    raise result.error
            except BaseException as exc:  # noqa: BLE001 - handed to the lab, not swallowed
                if pending.error is None:
                    raise
                pending.error(exc)
                continue
            pending.then(result)
        return handed

    def wait(self, timeout: float = 60.0) -> bool:
        """Block until every pending job finished (tests and headless use), then poll."""
        import time

        deadline = time.monotonic() + timeout
        while self._pending:
            if time.monotonic() > deadline:
                return False
            for pending in list(self._pending.values()):
                try:
                    pending.future.result(timeout=max(0.0, deadline - time.monotonic()))
                except BaseException:  # noqa: BLE001 - poll reports it
                    pass
            self.poll()
        return True
