"""Drive Trainers in a worker thread and hand their Records to the UI.

The core, :class:`Runner`, is a plain class (a thread, a lock and a bounded buffer) so it
can be unit-tested without a server.  The Panel wiring (a per-session tick that drains what
is new and draws it inside ``pn.io.hold()``, a session-destroyed hook that stops the
thread) is the Lab base's (``boltzlab.dashboard.labs.base.Lab.start``).

Several trainers can share one runner ("race mode"): the worker steps them round-robin
and each one stops on its own when it is done, fails or diverges.

Records reach the UI through two channels.  The scalar stream is a bounded buffer that
may be thinned under load (the oldest Records go first, counted in :attr:`Runner.dropped`);
besides it, each run's newest Record and its newest Record carrying arrays are kept
aside, so :meth:`Runner.drain` always delivers them: whatever was dropped, nothing shown
is stale (a run that converged keeps its final heatmap while the others stream on).
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..engine.stepping import ACTIVE_STATUSES, Record, Trainer

TrainerFactory = Callable[[], Mapping[str, Trainer]]


@dataclass(frozen=True)
class Build:
    """A factory whose runs' names are known now and whose trainers the runner's own thread
    builds: building takes tens of milliseconds (data, initial weights), which a click or
    a page being built on the server's event loop must not wait for.  Under a
    :data:`BACKEND` with ``build`` it is built on a worker instead, so ``build`` should load
    a bundled data set itself, not capture its arrays (they would be pickled to go there).

    ``build()`` returns ``{name: trainer}`` with exactly ``names``; a plain callable given
    to the :class:`Runner` instead is called at once, by its caller.
    """

    names: tuple[str, ...]
    build: TrainerFactory

    def __call__(self) -> Mapping[str, Trainer]:
        trainers = self.build()
        if tuple(trainers) != tuple(self.names):
            raise ValueError(f"The factory built the runs {list(trainers)}; it declared {list(self.names)}.")
        return trainers


class BuildRefused(Exception):
    """Raised by a :data:`BACKEND`'s ``build`` when the :class:`Build` itself raised where it
    ran (a bad setting the lab's checks let through): the runner refuses it as it refuses a
    Build that raised on its own thread.  ``error`` is the Build's exception."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error


class ServerBusy(RuntimeError):
    """Raised by :meth:`Runner.play` when the server's cap on training runs is reached."""


class TrainingSlots:
    """A server-wide cap on the runners that train at once (``boltzlab serve --max-training``).

    A runner holds a slot while it plays; pausing, finishing, resetting or closing (the
    session ending) frees it.  ``limit = None`` means no cap.  Single steps are not counted.
    """

    def __init__(self, limit: int | None = None) -> None:
        self._lock = threading.Lock()
        self._holders: set[int] = set()
        self.limit = limit

    def set_limit(self, limit: int | None) -> None:
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise ValueError(f"The training-session cap must be an int >= 1 or None. Got {limit!r}.")
        self.limit = limit

    def acquire(self, key: int) -> bool:
        with self._lock:
            if key in self._holders:
                return True
            if self.limit is not None and len(self._holders) >= self.limit:
                return False
            self._holders.add(key)
            return True

    def release(self, key: int) -> None:
        with self._lock:
            self._holders.discard(key)

    @property
    def in_use(self) -> int:
        with self._lock:
            return len(self._holders)


#: The process-wide slots every Runner uses.
SLOTS = TrainingSlots()

#: Where trainers run.  ``None``: in the runner's own thread (the default).  Otherwise a
#: callable that takes the factory's ``{name: trainer}`` and the runner's owner and returns
#: stand-ins with the same interface (``boltzlab serve --dask-scheduler``: proxies to Dask actors on a cluster).
#: If it also has ``build(build, owner)``, a :class:`Build` is handed to that instead, to be
#: built where its trainers will step (:meth:`Runner._build_remotely`).
BACKEND: Callable[[Mapping[str, Trainer], str], Mapping[str, Trainer]] | None = None


class History:
    """Every scalar each trainer reported since the last reset, in bounded memory.

    Rows are kept in full up to ``limit`` per trainer; beyond it every second one of the
    older half is dropped, so an hour-long run keeps its whole shape at a coarser
    resolution (what the CSV export and a checkpoint's plots need) and memory stays bounded.
    The newest Record's arrays are kept too, so a loaded checkpoint can redraw its images.
    """

    def __init__(self, limit: int = 5_000) -> None:
        self.limit = limit
        self.rows: dict[str, list[dict[str, Any]]] = {}
        self.arrays: dict[str, dict[str, Any]] = {}
        self.counts: dict[str, int] = {}  # steps seen per trainer (rows may be decimated)

    def add(self, name: str, record: Record) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1
        rows = self.rows.setdefault(name, [])
        rows.append(dict(record.scalars))
        if record.arrays:
            self.arrays[name] = dict(record.arrays)
        if len(rows) > self.limit:
            half = len(rows) // 2
            rows[:half] = rows[:half:2]

    def copy(self) -> "History":
        other = History(self.limit)
        other.rows = {n: [dict(r) for r in rows] for n, rows in self.rows.items()}
        other.arrays = {n: dict(a) for n, a in self.arrays.items()}
        other.counts = dict(self.counts)
        return other

    def records(self) -> list[tuple[str, Record]]:
        """The history as Records, trainer by trainer, the newest arrays on each last one."""
        out = []
        for name, rows in self.rows.items():
            for i, row in enumerate(rows):
                arrays = self.arrays.get(name, {}) if i == len(rows) - 1 else {}
                out.append((name, Record(dict(row), dict(arrays))))
        return out


@dataclass
class TrainerState:
    """What the UI needs to know about one trainer besides its Records."""

    status: str = "ready"  # one of engine.stepping.STATUSES
    message: str = ""
    steps: int = 0

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_STATUSES


class Runner:
    """Steps one or several Trainers in a background thread.

    When playing without a speed limit, a trainer that offers ``steps(k)`` is called with
    a batch size adapted so each call takes about :attr:`call_seconds`: a fast step that
    returned to Python every millisecond would fight the UI thread for the GIL.

    Parameters
    ----------
    factory
        Builds the trainers, ``{name: trainer}``; called now and on every :meth:`reset`, by
        the runner's thread when it is a :class:`Build` (see :meth:`reset`), by the caller
        otherwise.
    buffer_size
        Maximum number of Records kept between two :meth:`drain` calls; older ones are
        dropped (and counted in :attr:`dropped`), so memory stays bounded.  Each run's
        newest Record and newest Record with arrays are kept besides, never dropped.
    watch
        Optional scalar name (e.g. ``"log_pl"``); a non-finite value stops that trainer
        with status ``"diverged"``.
    owner
        Who the runs belong to, handed to :data:`BACKEND` with the trainers (the server's
        log names it if a worker process holding them dies).
    """

    call_seconds = 0.05
    max_batch = 1024

    def __init__(self, factory: TrainerFactory, *, buffer_size: int = 2000,
                 watch: str | None = None, owner: str = "") -> None:
        self._factory = factory
        self._watch = watch
        self.owner = owner
        self._cond = threading.Condition()
        # (sequence number, name, record); numbers rise by one per published Record
        self._buffer: deque[tuple[int, str, Record]] = deque(maxlen=buffer_size)
        self._seq = 0  # the number of the newest published Record
        self._drained = 0  # every Record numbered up to this was delivered or discarded
        self._latest: dict[str, tuple[int, Record]] = {}  # per run: its newest Record
        self._latest_arrays: dict[str, tuple[int, Record]] = {}  # ... its newest with arrays
        self._playing = False
        self._pending = 0  # single steps requested while paused
        self._speed: float | None = None  # rounds per second, None = as fast as possible
        self._closed = False
        self._busy = False
        self._held = 0  # peek()s waiting for the round in flight: no new round starts meanwhile
        self._generation = 0
        self.dropped = 0  # Records evicted before any drain saw them (exact after each drain)
        self._batch: dict[str, int] = {}
        # (generation, trainers to ship or None: still to build, the Build): the thread's next job
        self._shipping: tuple[int, dict[str, Trainer] | None, Build | None] | None = None
        # the runs a Build in flight replaces: back in place if it cannot build (trainers, states, history)
        self._previous: tuple[dict[str, Trainer], dict[str, TrainerState], History] | None = None
        self._refused: BaseException | None = None  # why the newest Build could not build
        self._trainers: dict[str, Trainer] = {}
        self._names: tuple[str, ...] = ()
        self.states: dict[str, TrainerState] = {}
        self.history = History()
        self._install(factory if isinstance(factory, Build) else factory())
        self._thread = threading.Thread(target=self._work, name="boltzlab-runner", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ controls
    @property
    def playing(self) -> bool:
        return self._playing

    @property
    def names(self) -> list[str]:
        """The current runs' names, known before their trainers are built (never waits)."""
        return list(self._names)

    @property
    def trainers(self) -> dict[str, Trainer]:
        """The current runs' trainers (or their stand-ins on a worker); while the runner's
        thread is building new ones, waits for that (:meth:`wait_built`): code on the event
        loop asks for :attr:`names` instead."""
        self.wait_built()
        with self._cond:
            return self._trainers

    @property
    def building(self) -> bool:
        """True while the runner's thread builds a :class:`Build`'s trainers."""
        with self._cond:
            return self._building()

    def _building(self) -> bool:
        return self._shipping is not None and self._shipping[1] is None

    def wait_built(self, timeout: float = 60.0) -> bool:
        """Block until no build is in flight (False on timeout)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._building() and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def take_refusal(self) -> BaseException | None:
        """Why the newest :class:`Build` could not build (once; None if it did); the runs it
        was to replace are back in place (their trainers, states and history)."""
        with self._cond:
            refused, self._refused = self._refused, None
            return refused

    @property
    def generation(self) -> int:
        """Rises by one with every new set of runs (a reset or a restore)."""
        return self._generation

    @property
    def speed(self) -> float | None:
        return self._speed

    @property
    def active(self) -> bool:
        """True while at least one trainer can still step."""
        return any(s.active for s in self.states.values())

    def play(self) -> None:
        """Train until paused or done; raises :class:`ServerBusy` when the server's cap on
        training runs (:data:`SLOTS`) is reached."""
        with self._cond:
            if self._closed or not self.active:
                return
            if not SLOTS.acquire(id(self)):
                raise ServerBusy(
                    f"The server is busy: {SLOTS.limit} training run(s) at once is its limit. Try again in a "
                    "little while, or use Step.")
            self._playing = True
            self._cond.notify_all()

    def _stop_playing(self) -> None:
        """Not playing any more (the caller holds the lock): free the server-wide slot."""
        self._playing = False
        SLOTS.release(id(self))

    def pause(self) -> None:
        with self._cond:
            self._stop_playing()
            self._pending = 0
            self._cond.notify_all()

    def step_once(self) -> None:
        """Step every active trainer exactly once (pauses first if playing)."""
        with self._cond:
            if self._closed:
                return
            self._stop_playing()
            self._pending += 1
            self._cond.notify_all()

    def set_speed(self, steps_per_second: float | None) -> None:
        """Limit to ``steps_per_second`` rounds per second; ``None`` means no limit."""
        if steps_per_second is not None and not steps_per_second > 0:
            raise ValueError(
                f"The 'steps_per_second' parameter of Runner must be a float > 0 or None. "
                f"Got {steps_per_second!r}."
            )
        with self._cond:
            self._speed = steps_per_second
            self._cond.notify_all()

    def reset(self, factory: TrainerFactory | None = None) -> None:
        """Pause, drop everything buffered and start fresh trainers.

        A :class:`Build` returns at once: its runs are in place by name (``"starting"``)
        and the runner's thread builds them; if that raises, the runs it replaced come back
        (generation raised again, history kept) and :meth:`take_refusal` says why.  Any
        other factory is called here, and whatever it raises leaves the old trainers in place.
        """
        self.pause()
        factory = factory or self._factory
        made = factory if isinstance(factory, Build) else factory()
        with self._cond:
            self._factory = factory
            self._refused = None
            if isinstance(made, Build) and self._previous is None and self._trainers:
                self._previous = (self._trainers, self.states, self.history)
            elif not isinstance(made, Build):
                self._previous = None
            self._install(made)
            self._cond.notify_all()

    def snapshot(self) -> tuple[dict[str, dict[str, Any]], History, dict[str, TrainerState]]:
        """Pause, wait for the step in flight, and copy every trainer's ``state_dict()``,
        the history and the states: what a checkpoint holds."""
        self.pause()
        self.wait_idle(30.0)
        with self._cond:
            states = {n: {k: (v.copy() if hasattr(v, "copy") else v)
                          for k, v in t.state_dict().items()} for n, t in self._trainers.items()}
            return states, self.history.copy(), {n: TrainerState(s.status, s.message, s.steps)
                                                for n, s in self.states.items()}

    def peek(self, timeout: float = 30.0) -> tuple[dict[str, dict[str, Any]], History, dict[str, TrainerState]]:
        """What :meth:`snapshot` copies, without pausing: taken between two rounds (the
        worker holds off its next round meanwhile).  A follower forks a teacher's run with
        it (:mod:`boltzlab.dashboard.sharing`) while the teacher's run plays on.
        ``TimeoutError`` when no round ended within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._held += 1
            try:
                while self._busy or self._shipping is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise TimeoutError(f"The run was busy for {timeout:.0f} s; try again.")
                    self._cond.wait(remaining)
                states = {n: {k: (v.copy() if hasattr(v, "copy") else v)
                              for k, v in t.state_dict().items()} for n, t in self._trainers.items()}
                return states, self.history.copy(), {n: TrainerState(s.status, s.message, s.steps)
                                                    for n, s in self.states.items()}
            finally:
                self._held -= 1
                self._cond.notify_all()

    def restore(self, states: Mapping[str, Mapping[str, Any]], history: History | None = None) -> None:
        """Load each trainer's state (names must match the current trainers) and the history.

        The trainers continue exactly where the saved ones stopped.  Raises ``ValueError``
        on a mismatch; a trainer whose ``load_state_dict`` fails raises its own error and
        the caller decides what to restore (see ``boltzlab.dashboard.labtools``).
        """
        self.pause()
        self.wait_idle(30.0)
        with self._cond:
            if set(states) != set(self._trainers):
                raise ValueError(f"The checkpoint holds the runs {sorted(states)}; these settings "
                                 f"make the runs {sorted(self._names)}.")
            for name, trainer in self._trainers.items():
                trainer.load_state_dict(states[name])
            self._generation += 1
            self._clear_buffer()
            self._batch = {}
            self.history = history.copy() if history is not None else History()
            self.states = {}
            for name, trainer in self._trainers.items():
                self.states[name] = TrainerState(steps=self.history.counts.get(name, 0))
                if getattr(trainer, "done", False):
                    self._finish(name, trainer)
            self._cond.notify_all()

    def copy_history(self) -> History:
        """A copy of :attr:`history`, taken under the lock (safe while the runs play)."""
        with self._cond:
            return self.history.copy()

    def drawn_history(self) -> History:
        """A copy of :attr:`history` without the Records not drained yet: what the lab has
        drawn (a shared run's followers start from it and get the rest as the lab draws it)."""
        with self._cond:
            history = self.history.copy()
            undrained = Counter(name for _, name, _ in self._buffer)
        for name, k in undrained.items():
            rows = history.rows.get(name, [])
            del rows[max(0, len(rows) - k):]
            history.counts[name] = history.counts.get(name, 0) - k
        return history

    def history_since(self, seen: Mapping[str, tuple[int, int]],
                      names: Any = None) -> tuple[History, dict[str, tuple[tuple[int, int], list, bool]]]:
        """The history rows of runs ``names`` (default: every run) that came after those seen
        by an earlier call, taken under the lock: O(new rows), not O(history).

        ``seen[run]`` is the ``(count, length)`` an earlier call returned for ``run``.  Returns
        the :class:`History` they come from (a new one after a reset or a restore: what was
        drawn from the old one is to go) and ``{run: ((count, length), rows, whole)}``:
        ``whole`` when ``rows`` are the run's whole history (no earlier call saw it, or its
        older rows were thinned since, see :class:`History`), else the rows after those seen."""
        with self._cond:
            history = self.history
            out = {}
            for name in history.rows if names is None else names:
                rows = history.rows.get(name)
                if rows is None:
                    continue
                count, length = history.counts.get(name, len(rows)), len(rows)
                before = seen.get(name)
                # thinning removes rows: the rows grew by exactly the Records that came, or not
                if before is not None and length >= before[1] and count - before[0] == length - before[1]:
                    out[name] = ((count, length), rows[before[1]:], False)
                else:
                    out[name] = ((count, length), list(rows), True)
            return history, out

    def close(self, timeout: float = 2.0) -> None:
        """Stop the worker thread (idempotent)."""
        with self._cond:
            self._closed = True
            self._stop_playing()
            self._cond.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    @property
    def closed(self) -> bool:
        return self._closed

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Block until the worker has no step in flight and nothing to do."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._busy or self._shipping is not None or self._pending or (self._playing and self.active):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def wait_started(self, timeout: float = 60.0) -> bool:
        """Block until the runs are where they step (under :data:`BACKEND`: on a worker)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._shipping is not None and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def drain(self) -> list[tuple[str, Record]]:
        """What was produced since the previous call, oldest first.

        Under load the buffer keeps only the newest ``buffer_size`` Records, but for every
        run that produced anything since the previous call its newest Record and its newest
        Record with arrays are always included (each once, in order).
        """
        with self._cond:
            items = list(self._buffer)
            self._buffer.clear()
            # the buffer holds the newest Records without gaps: a Record numbered below its
            # oldest, and not delivered yet, was evicted; bring back the ones kept aside
            first = items[0][0] if items else self._seq + 1
            rescued = {seq: (seq, name, record)
                       for slot in (self._latest, self._latest_arrays)
                       for name, (seq, record) in slot.items() if self._drained < seq < first}
            self.dropped -= len(rescued)  # counted when evicted, delivered after all
            self._drained = self._seq
        items = sorted(list(rescued.values()) + items, key=lambda item: item[0])
        return [(name, record) for _, name, record in items]

    def latest(self, name: str) -> Record | None:
        """The newest Record of run ``name`` since the last reset (drained or not), or None."""
        with self._cond:
            entry = self._latest.get(name)
        return None if entry is None else entry[1]

    # ------------------------------------------------------------------ worker
    def _clear_buffer(self) -> None:
        """Discard everything not yet drained (the caller holds the lock): a new generation."""
        self._buffer.clear()
        self._latest.clear()
        self._latest_arrays.clear()
        self._drained = self._seq

    def _install(self, made: Mapping[str, Trainer] | Build) -> None:
        """A new generation of runs (the caller holds the lock, or the thread has not started).

        Two things must not block the caller (a click, or a page being built, on the event
        loop), so the runner's thread does them (:meth:`_ship`): building a :class:`Build`'s
        trainers, and under :data:`BACKEND` shipping them to a worker process (a network round
        trip).  Meanwhile the runs say ``"starting"`` and a Play or Step waits for them.
        """
        self._generation += 1
        self._clear_buffer()
        self._stop_playing()
        self._pending = 0
        building = isinstance(made, Build)
        self._names = tuple(made.names if building else made)
        self._trainers = {} if building else dict(made)
        self.history = History(self.history.limit)
        self._batch = {}
        if building or BACKEND is not None:
            self._shipping = (self._generation, None if building else self._trainers, made if building else None)
            self.states = {name: TrainerState(status="starting") for name in self._names}
        else:
            self._shipping = None
            self._installed()

    def _installed(self) -> None:
        """The trainers are where they step: every run ready (or done already)."""
        self.states = {name: TrainerState() for name in self._trainers}
        for name, trainer in self._trainers.items():
            if getattr(trainer, "done", False):
                self._finish(name, trainer)

    def _ship(self, generation: int, trainers: dict[str, Trainer] | None, build: Build | None) -> None:
        """Build the trainers (a :class:`Build`), then hand them to :data:`BACKEND`, and put
        its stand-ins in their place (called by the runner's thread, lock not held), unless
        a newer generation came meanwhile."""
        if trainers is None and getattr(BACKEND, "build", None) is not None:
            self._build_remotely(generation, build)
            return
        if trainers is None:
            try:
                trainers, error = dict(build()), None
            except Exception as exc:  # a bad setting the lab's checks let through: said, not raised
                trainers, error = None, exc
            with self._cond:
                if generation != self._generation:
                    return
                if error is not None:
                    self._refused = error
                    self._take_back(f"{type(error).__name__}: {error}")
                    return
                self._previous = None
                self._trainers = trainers
                if BACKEND is None:
                    self._shipping = None
                    self._installed()
                    return
                self._shipping = (generation, trainers, None)
                self._cond.notify_all()  # wake a wait for the trainers
        try:
            remote, error = BACKEND(trainers, self.owner), None
        except Exception as exc:  # e.g. DaskUnavailable: the runs say why, the app lives on
            remote, error = None, f"{type(exc).__name__}: {exc}"
        with self._cond:
            if generation != self._generation:
                return  # superseded; the stand-ins go with their last reference
            if error is not None:
                self._failed(error)
                return
            self._shipping = None
            self._trainers = dict(remote)
            self._installed()

    def _build_remotely(self, generation: int, build: Build) -> None:
        """Under a :data:`BACKEND` that builds where the trainers step (``BACKEND.build``: a
        Dask worker, which loads a bundled data set itself), only the Build travels, never
        the trainers with their data; its stand-ins take their place as after :meth:`_ship`.
        Called by the runner's thread, lock not held; a Build that raises there is refused
        as on this thread (:meth:`take_refusal`)."""
        refused: BaseException | None = None
        error: str | None = None
        try:
            remote = dict(BACKEND.build(build, self.owner))
        except BuildRefused as exc:
            refused = exc.error
        except Exception as exc:  # e.g. DaskUnavailable: the runs say why, the app lives on
            error = f"{type(exc).__name__}: {exc}"
        with self._cond:
            if generation != self._generation:
                return  # superseded; the stand-ins go with their last reference
            if refused is not None:
                self._refused = refused
                self._take_back(f"{type(refused).__name__}: {refused}")
                return
            self._previous = None
            if error is not None:
                self._failed(error)
                return
            self._shipping = None
            self._trainers = remote
            self._installed()

    def _take_back(self, error: str) -> None:
        """A Build could not build (the caller holds the lock): the runs it replaced come
        back as they were (a new generation: the views draw them again), or, for the first
        runs, each says why."""
        if self._previous is None:
            self._failed(error)
            return
        self._trainers, self.states, self.history = self._previous
        self._names = tuple(self._trainers)
        self._previous = None
        self._shipping = None
        self._generation += 1
        self._clear_buffer()

    def _failed(self, error: str) -> None:
        """The runs could not start (the caller holds the lock): each says why."""
        self._shipping = None
        self.states = {name: TrainerState(status="error", message=error) for name in self._names}
        self._stop_playing()

    def _has_work(self) -> bool:
        return self._shipping is None and (self._playing or self._pending > 0) and self.active

    def _work(self) -> None:
        next_round = 0.0
        while True:
            ship = None
            with self._cond:
                # (a peek() holds off rounds, not the shipping of new runs it waits for)
                while not self._closed and self._shipping is None and (self._held or not self._has_work()):
                    if not self._held:
                        self._pending = 0
                    self._cond.notify_all()  # wake wait_idle
                    self._cond.wait()
                if self._closed:
                    return
                if self._shipping is not None:  # new runs first: nothing steps before they are in place
                    ship = self._shipping
                else:
                    # honour the speed limit; pause/reset/close wake us early
                    delay = next_round - time.monotonic()
                    if self._playing and self._speed is not None and delay > 0:
                        self._cond.wait(delay)
                        continue
                    single = not self._playing
                    if single:
                        self._pending -= 1
                    generation = self._generation
                    todo = [(n, t) for n, t in self._trainers.items() if self.states[n].active]
                self._busy = True
            try:
                if ship is not None:
                    self._ship(*ship)
                else:
                    self._round(todo, generation, single)
            finally:
                ship, todo = None, []  # do not pin replaced trainers (e.g. remote actors) while idle
                with self._cond:
                    self._busy = False
                    if not self.active:
                        self._stop_playing()
                    self._cond.notify_all()
            if self._speed is not None:
                next_round = time.monotonic() + 1.0 / self._speed

    def _round(self, todo: list[tuple[str, Trainer]], generation: int, single: bool) -> None:
        batch = not single and self._speed is None
        for name, trainer in todo:
            with self._cond:
                stale = generation != self._generation
                if self._closed or stale or (not single and not self._playing):
                    return
            k = self._batch.get(name, 1) if batch else 1
            t0 = time.perf_counter()
            try:
                # playing goes through steps() (a worker runs those below single steps'
                # priority, dashboard/distributed.py); one step, a Step click, through step()
                if not single and hasattr(trainer, "steps"):
                    records = _steps_fairly(self, name, trainer, k)
                else:
                    records = [trainer.step()]
            except Exception as exc:  # a failing step stops this trainer, not the app
                with self._cond:
                    if generation == self._generation:
                        state = self.states[name]
                        state.status, state.message = "error", f"{type(exc).__name__}: {exc}"
                continue
            if batch and hasattr(trainer, "steps"):
                self._batch[name] = self._next_batch(k, len(records), time.perf_counter() - t0)
            with self._cond:
                if generation != self._generation:
                    return
                self._publish(name, trainer, records)

    def _next_batch(self, k: int, ran: int, seconds: float) -> int:
        """Aim at ``call_seconds`` per call into the trainer (see docs/architecture.md: the GIL)."""
        per_step = seconds / max(ran, 1)
        if per_step <= 0:
            return min(2 * k, self.max_batch)
        target = int(self.call_seconds / per_step)
        return max(1, min(self.max_batch, target, 2 * k))

    def _publish(self, name: str, trainer: Trainer, records: list[Record]) -> None:
        state = self.states[name]
        for record in records:
            if len(self._buffer) == self._buffer.maxlen:
                self.dropped += 1
            self._seq += 1
            self._buffer.append((self._seq, name, record))
            self._latest[name] = (self._seq, record)
            if record.arrays:
                self._latest_arrays[name] = (self._seq, record)
            self.history.add(name, record)
            state.steps += 1
            state.status = "running"
            if self._diverged(record):
                state.status = "diverged"
                state.message = f"{self._watch} became non-finite at step {state.steps}"
        if getattr(trainer, "done", False):
            self._finish(name, trainer)

    def _diverged(self, record: Record) -> bool:
        if self._watch is None or self._watch not in record:
            return False
        value: Any = record[self._watch]
        try:
            return not math.isfinite(float(value))
        except (TypeError, ValueError):
            return False

    def _finish(self, name: str, trainer: Trainer) -> None:
        state = self.states[name]
        status = getattr(trainer, "status", "done")
        state.status = status if status not in ACTIVE_STATUSES else "done"
        state.message = getattr(trainer, "message", "") or state.message


def _steps_fairly(runner: Runner, name: str, trainer: Trainer, k: int) -> list[Record]:
    """``trainer.steps(k)`` of a playing run: a trainer in this process (``--workers 0``, a
    notebook) runs on its fair share of the machine's idle cores (issue 25,
    :func:`boltzlab.engine.threads.fair_share`); a remote stand-in's actor does the same in
    its worker."""
    if getattr(trainer, "_actor", None) is not None or type(trainer).__name__.startswith("Remote"):
        return list(trainer.steps(k))
    from ..engine import threads as engine_threads

    players = runner.__dict__.setdefault("_players", {})
    player = players.get(name)
    if player is None:
        player = players[name] = engine_threads.Player()
    with engine_threads.fair_share(player):
        return list(trainer.steps(k))


def play_or_tell(runner: Runner) -> str | None:
    """``runner.play()``; when the server is busy, say so in a notification (if the page has
    them) and return the message instead of raising."""
    try:
        runner.play()
        return None
    except ServerBusy as exc:
        import panel as pn

        from .views.text import escape

        if pn.state.notifications is not None:  # a notification renders HTML
            pn.state.notifications.warning(escape(exc), duration=8000)
        return str(exc)
