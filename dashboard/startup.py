"""A server start that talks and serves at once.

On a fresh install numba must compile the engine's kernels before a lab can train: about
2.5 CPU-minutes on this kind of machine.  ``boltzlab serve`` used to do that before it
listened, silently.  Now :class:`Startup` compiles the kernel groups
(:data:`boltzlab.engine.warmup.GROUPS`) in parallel processes, one per core, into numba's on-disk
cache, and loads each group into this process as it is ready, all in a thread of its own,
while the server already answers ``/liveness`` and pages.  It says what it does on stderr
(``compiling kernels k of n``).  A lab whose groups (:attr:`Lab.kernels`) are not ready yet
shows "preparing… first start only" and opens by itself when they are
(:func:`boltzlab.dashboard.app.create_app`).  With a warm cache the whole preparation takes a few
seconds.  The worker processes load the kernels from the same cache (on first use, and all
of them through the warm-up worker plugin once everything is compiled).
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Iterable

from .recycling import say
from ..engine.warmup import GROUPS, compile_kernels, warm_group

#: the compiling processes run at this niceness: the server answers first
COMPILE_NICENESS = 10


def default_worker_count() -> int:
    """How many worker processes ``serve`` starts by default: one per CPU this process may use,
    ``dask.system.CPU_COUNT`` (the least of the machine's CPUs, the process's CPU affinity and
    its cgroup's CPU quota, read once at Dask's import).  ``os.cpu_count()`` counts the host's:
    a container limited to 2 CPUs on a 64-core node would start 64 workers (issue 49)."""
    import dask.system

    return max(1, int(dask.system.CPU_COUNT))


class Startup:
    """What this server process has prepared: the kernel groups loaded here (thread-safe).

    Before :meth:`start` every group counts as ready (tests, notebooks and scripts compile
    on first use, as numba does).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started = False
        self._ready: set[str] = set(GROUPS)
        self._compiled = 0
        self._first_done = True
        self.error: str | None = None
        self.finished = threading.Event()
        self.finished.set()
        self.stopping = False  # set by stop(): what fails from then on is the stop's doing
        self._stop = threading.Event()  # stop()'s, for compile_kernels: no compilation starts after it

    def ready(self, groups: Iterable[str] | None) -> bool:
        """Whether every group of ``groups`` (``None``: all) is loaded in this process, and
        what :meth:`run` does first (e.g. the worker processes) is done."""
        with self._lock:
            return self._first_done and all(g in self._ready for g in (GROUPS if groups is None else groups))

    def progress(self) -> str:
        """A short phrase for a waiting page: "compiling kernels 3 of 7"."""
        with self._lock:
            if self.error is not None:
                return f"preparing failed: {self.error}"
            if self._compiled == len(GROUPS) and not self._first_done:
                return "starting the worker processes"
            return f"compiling kernels {self._compiled} of {len(GROUPS)}"

    def _reset(self) -> None:
        with self._lock:
            self._started, self._ready, self._compiled, self.error = True, set(), 0, None
            self._first_done, self.stopping = False, False
            self._stop.clear()
            self.finished.clear()

    def stop(self) -> None:
        """The server is stopping: a start still under way is cut short by it (the worker
        processes or the kernels' loading fail as the loop and the cluster close), and that is
        not said as a failure.  The kernels' compile processes are ended now: a first start's
        compilations would otherwise hold the server's exit for minutes."""
        from ..engine.warmup import stop_compiling

        self.stopping = True
        self._stop.set()
        stop_compiling()

    def _failed(self, what: str) -> None:
        if not self.stopping:
            say(f"{what} failed: {self.error}")

    def _loaded(self, group: str) -> None:
        with self._lock:
            self._ready.add(group)

    def run(self, processes: int | None = None, *, first: Iterable[Callable[[], None]] = (),
            when: Iterable[tuple[tuple[str, ...], Callable[[], None]]] = (),
            then: Iterable[Callable[[], None]] = (), _reset: bool = True) -> None:
        """Compile every group in ``processes`` parallel processes (``None``: one per core)
        and load each here as it is done; blocks.  ``first``: called in a thread of their
        own meanwhile (e.g. start the worker processes), no lab is ready before they are
        done; ``when``: ``(groups, f)`` pairs, ``f()`` called as soon as those groups are
        loaded, before they count as ready (e.g. a lab's default data); ``then``: called once
        everything is loaded (e.g. warm the workers).  Progress goes to stderr; a failure is
        kept in :attr:`error` and re-raised."""
        if _reset:  # (not from start(), which reset already: a stop() since then must stand)
            self._reset()
        t0 = time.perf_counter()
        failed: list[BaseException] = []

        def run_first(steps: list[Callable[[], None]]) -> None:
            try:
                for step in steps:
                    step()
            except BaseException as exc:  # noqa: BLE001 - kept, said, raised by run
                failed.append(exc)
                with self._lock:
                    self.error = f"{type(exc).__name__}: {exc}"
                self._failed("starting")
            else:
                with self._lock:
                    self._first_done = True

        starter = threading.Thread(target=run_first, args=(list(first),), name="boltzlab-start-first", daemon=True)
        starter.start()
        hooks = list(when)
        loaded: set[str] = set()

        def done(group: str, seconds: float, k: int, n: int) -> None:
            with self._lock:
                self._compiled = k
            warm_group(group)  # from numba's cache, now: well under a second
            loaded.add(group)
            for hook in [h for h in hooks if set(h[0]) <= loaded]:
                hooks.remove(hook)
                hook[1]()
            self._loaded(group)
            say(f"compiled kernels {k} of {n} ({group}, {seconds:.0f} s)")

        try:
            say(f"preparing the numerical kernels ({len(GROUPS)} groups): a first start compiles them "
                f"(a minute or two), later starts load them in seconds")
            compile_kernels(processes=processes, niceness=COMPILE_NICENESS, on_done=done, stop=self._stop)
            starter.join()
            if failed:
                raise failed[0]
            for step in then:
                step()
            say(f"ready ({time.perf_counter() - t0:.0f} s)")
        except BaseException as exc:
            with self._lock:
                self.error = f"{type(exc).__name__}: {exc}"
            self._failed("preparing the kernels")
            raise
        finally:
            self.finished.set()

    def start(self, processes: int | None = None, **kwargs) -> threading.Thread:
        """:meth:`run` in a daemon thread (the server answers meanwhile); the thread."""
        self._reset()

        def run() -> None:
            try:
                self.run(processes, _reset=False, **kwargs)
            except BaseException:  # noqa: BLE001 - already said and kept in self.error
                pass

        thread = threading.Thread(target=run, name="boltzlab-startup", daemon=True)
        thread.start()
        return thread


#: this server process's start (see :func:`boltzlab.dashboard.app.serve`)
STARTUP = Startup()
