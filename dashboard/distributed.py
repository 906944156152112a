"""Run the Trainers on a Dask distributed cluster (``boltzlab serve --dask-scheduler``).

The runner's hook :data:`boltzlab.dashboard.runner.BACKEND` passes every factory through a
:class:`DaskBackend`: a lab's :class:`~boltzlab.dashboard.runner.Build` is built on a worker
(:meth:`DaskBackend.build`: only its settings travel), a plain ``{name: trainer}`` is shipped
(pickled) to one, and each trainer is held there by a :class:`TrainerActor` (a Dask actor); the runner gets
:class:`RemoteTrainer` stand-ins that forward ``step()``, ``steps(k)``,
``state_dict()``, ``load_state_dict()`` and attribute reads, and the Records stream back
as plain :class:`~engine.stepping.Record` objects.  The runner's thread, its buffer and
the Panel wiring stay in the server process; only the numerics move.

The workers must be able to import the same ``boltzlab`` (``engine`` and ``dashboard``):
trainers are pickled by reference to their classes.

``boltzlab serve`` uses the same path for its default deployment: :func:`use_local_cluster`
starts a :class:`distributed.LocalCluster` of worker processes on this machine (``--workers
N``) and connects a DaskBackend to it, so the local and the scaled-out server differ only in
where the scheduler lives.  :func:`install` also points :data:`boltzlab.dashboard.jobs.EXECUTOR` at
the cluster, so the labs' analysis jobs run there too.

A worker process that dies takes its actors with it: a call into one of them raises
:class:`WorkerLost` (the runner shows it as that run's error; ↺ Reset builds fresh trainers
on a surviving or restarted worker).  See :meth:`RemoteTrainer._call` for how a dead worker
is told from a slow step.

``distributed`` is imported lazily, so ``--workers 0`` does not load it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import logging
import os
import threading
import time
import types
import weakref
from typing import Any, Callable, Mapping

from boltzlab.dashboard.runner import Build, BuildRefused
from boltzlab.engine.stepping import Record, Trainer

#: ``(done, status, message)``; ``status``/``message`` are ``None`` when the trainer has
#: no such attribute (the runner then uses its own defaults, as for a local trainer).
Status = tuple[bool, str | None, str | None]


class DaskUnavailable(RuntimeError):
    """The Dask scheduler cannot be reached, or ``dask.distributed`` is not installed."""


class WorkerLost(RuntimeError):
    """The worker process holding a trainer died (or cannot be reached any more)."""


#: Seconds a recycle of the worker processes may take (each nanny restarts its worker),
#: and that new work waits for it before it is refused.
RECYCLE_TIMEOUT = 120.0
#: Seconds a Build may take on a worker (:meth:`DaskBackend.build`): it waits for a free
#: task thread there, and a worker's first TAP or Frank-Wolfe build loads MNIST
BUILD_SECONDS = 120.0
#: a server stopped while the workers warm up waits this long for the warm-up to finish
#: (loading the kernels from numba's cache takes seconds) before it closes the cluster
WARM_UP_WAIT_SECONDS = 30.0


def _after(event: threading.Event, work: Callable[[], Any]) -> Any:
    """A ``concurrent.futures`` future of ``work()``, run on a thread of its own once
    ``event`` is set (or at once after :data:`RECYCLE_TIMEOUT`: ``work`` then says why it fails)."""
    from concurrent.futures import Future

    future: Future = Future()

    def run() -> None:
        event.wait(RECYCLE_TIMEOUT)
        if not future.set_running_or_notify_cancel():  # cancelled meanwhile: superseded
            return
        try:
            future.set_result(work())
        except BaseException as exc:  # noqa: BLE001 - handed to whoever polls the future
            future.set_exception(exc)

    threading.Thread(target=run, name="boltzlab-after-recycle", daemon=True).start()
    return future


class Fetched(concurrent.futures.Future):
    """A job's Dask future whose result is fetched into this process as soon as the task
    ends, by Dask's callback thread: done here means the result is here.

    A Dask future is done once its task finished *on the worker*; its ``result()`` then
    fetches the value over the network, and :meth:`boltzlab.dashboard.jobs.Jobs.poll` called
    it on the event loop, which waited for a round trip to a worker busy at niceness 10 (seen
    in py-spy profiles of the server with 16 TAP sessions).  :attr:`remote` is the Dask future.
    """

    def __init__(self, remote: Any) -> None:
        super().__init__()
        self.remote = remote
        remote.add_done_callback(self._fetch)

    def cancel(self) -> bool:
        cancelled = super().cancel()  # first: the remote's cancellation calls _fetch at once
        # A task that has finished is not cancelled on the cluster, only dropped here: its
        # result may be on its way (_fetch gathers it), and a key cancelled under a gather
        # made the scheduler log "ERROR - Couldn't gather keys: ... 'forgotten'" for a job
        # that was merely superseded (seen when a closing page cancelled its lab's jobs).
        # The scheduler forgets it once the last reference (this future's) is released.
        if not self.remote.done():
            self.remote.cancel()
        return cancelled

    def _fetch(self, remote: Any) -> None:
        try:
            result = remote.result()
        except BaseException as exc:  # noqa: BLE001 - handed to whoever polls the future
            outcome, value = self.set_exception, exc
        else:
            outcome, value = self.set_result, result
        try:
            outcome(value)
        except concurrent.futures.InvalidStateError:  # cancelled meanwhile: superseded
            pass


#: How often a call that has not answered yet asks the scheduler whether the actor's worker
#: is still there (seconds).  Only a check: a slow step on a live worker is waited for as
#: long as it takes.
ALIVE_CHECK_SECONDS = 2.0

#: The text :class:`Actor` raises when the rpc to its worker failed.
_UNREACHABLE = "Unable to contact Actor's worker"


def _status(trainer: Any) -> Status:
    status = getattr(trainer, "status", None)
    message = getattr(trainer, "message", None)
    return (bool(getattr(trainer, "done", False)), None if status is None else str(status),
            None if message is None else str(message))


def _about(trainer: Any) -> tuple[type, Status, bool]:
    """What a :class:`RemoteTrainer` knows of its trainer without asking: its class, its
    status, and whether it has ``steps(k)``."""
    return type(trainer), _status(trainer), hasattr(trainer, "steps")


def _built(build: Callable[[], Mapping[str, Trainer]]) -> dict[str, Trainer]:
    """A Build's trainers, built on the worker this task runs on (:meth:`DaskBackend.build`)."""
    return dict(build())


def _abouts(trainers: Mapping[str, Trainer]) -> dict[str, tuple[type, Status, bool]]:
    return {name: _about(trainer) for name, trainer in trainers.items()}


def bind_actor(actor: Any, client: Any, future: Any) -> None:
    """Attach Dask's actor handle to ``client`` (and its task's ``future``) if it is not.

    A handle binds itself to the client ``get_client()`` finds, when it is made and again at
    each call; this backend's client is not the default one, so in a thread where none is
    current (a runner's, a loaded machine's late deserialization) the handle stays unbound,
    and its first call fails inside a property whose AttributeError Dask's ``__getattr__``
    then reports as "type object 'TrainerActor' has no attribute '_io_loop'" (seen once, a
    Bound lab's run in the browser tests beside a load test).
    """
    if getattr(actor, "_client", None) is None and getattr(actor, "_worker", None) is None:
        actor._client, actor._future = client, future


class TrainerActor:
    """Holds one trainer on a Dask worker (created with ``client.submit(..., actor=True)``).

    Every method is a coroutine so that Dask runs it on the worker's event loop instead of
    its single actor thread (shared by *all* actors of a worker: it would run one trainer
    at a time).  The work itself goes to the worker's task thread pool, so a worker with
    ``--nthreads N`` steps up to N trainers at once; a per-actor lock keeps the calls into
    one trainer in order, as the runner's single thread does locally.

    Parameters
    ----------
    trainers
        The session's trainers as the factory built them (scattered to the worker in one
        piece, so objects they share stay shared, as in the local runner).
    name
        Which of them this actor holds.
    """

    def __init__(self, trainers: Mapping[str, Trainer], name: str) -> None:
        self.trainer = trainers[name]
        self._lock = asyncio.Lock()  # binds to the worker's loop on first use
        self._player: Any = None  # this run's claim on the machine's idle cores, made when it plays

    async def _run(self, fn: Callable[..., Any], *args: Any, playing: bool = False) -> Any:
        from distributed import get_worker

        try:
            worker = get_worker()
        except ValueError:  # not inside a worker (plain use in tests)
            executor = None
        else:
            executor = _play_pool() if playing else worker.executors["default"]
        async with self._lock:
            return await asyncio.get_running_loop().run_in_executor(executor, fn, *args)

    async def step(self) -> tuple[Record, Status]:
        """One ``step()`` and the trainer's status after it (one round trip)."""
        return await self._run(lambda: (self.trainer.step(), _status(self.trainer)))

    async def steps(self, k: int) -> tuple[list[Record], Status]:
        """``steps(k)`` and the trainer's status after it: a playing run's batch, run in the
        worker's play threads, below a Step click's priority (:data:`PLAY_NICENESS`)."""
        return await self._run(lambda: _steps_fairly(self, k), playing=True)

    async def state_dict(self) -> dict[str, Any]:
        return await self._run(self.trainer.state_dict)

    async def load_state_dict(self, state: Mapping[str, Any]) -> Status:
        """Load ``state``; the status after it (a loaded trainer may be done)."""

        def load() -> Status:
            self.trainer.load_state_dict(state)
            return _status(self.trainer)

        return await self._run(load)

    async def status(self) -> Status:
        """``(done, status, message)`` in one round trip."""
        return await self._run(_status, self.trainer)

    async def get(self, name: str) -> tuple[bool, Any]:
        """``(True, trainer.<name>)``, or ``(False, None)`` if it has no such attribute.

        Not behind the lock: like a read from the UI thread of a local trainer, it does
        not wait for a step in flight (the labs read parameters to draw them).
        """
        try:
            value = getattr(self.trainer, name)
        except AttributeError:
            return False, None
        if isinstance(value, (types.MethodType, types.BuiltinMethodType)):  # would run on a *copy*
            raise TypeError(f"{type(self.trainer).__name__}.{name} is a method; a RemoteTrainer forwards "
                            "only step, steps, state_dict, load_state_dict and attribute reads.")
        return True, value


#: Names a RemoteTrainer answers itself (never a round trip, even when missing).
_LOCAL = frozenset({"done", "status", "message", "steps", "trainer_class"})


def _steps_fairly(actor: TrainerActor, k: int) -> tuple[list[Record], Status]:
    """A playing batch on the run's fair share of the machine's cores (issue 25:
    :func:`boltzlab.engine.threads.fair_share`, counted over every worker process)."""
    from boltzlab.engine import threads as engine_threads

    if actor._player is None:
        actor._player = engine_threads.Player()
    with engine_threads.fair_share(actor._player):
        return list(actor.trainer.steps(k)), _status(actor.trainer)


class RemoteTrainer:
    """The runner's stand-in for a trainer held by a :class:`TrainerActor`.

    Calls block until the worker answers.  ``done``/``status``/``message`` come from the
    reply of the last call (no extra round trip per step); any other public attribute is
    read from the remote trainer on each access.  ``isinstance`` sees a RemoteTrainer
    (the wrapped class is :attr:`trainer_class`); ``steps`` exists only when the wrapped
    trainer has it (see :class:`RemoteBatchTrainer`), so ``hasattr`` answers as locally.

    Dropping the last reference releases the actor (and the trainer on the worker).
    """

    def __init__(self, actor: Any, future: Any, trainer_class: type, status: Status) -> None:
        self._actor = actor
        self._future = future  # with the actor handle, keeps the actor alive
        self.trainer_class = trainer_class
        self._remember(status)  # the held trainer's, when it was shipped or built

    def _remember(self, status: Status) -> None:
        self._done, self._status, self._message = status

    @property
    def done(self) -> bool:
        return self._done

    @property
    def status(self) -> str:
        if self._status is None:
            raise AttributeError(f"{self.trainer_class.__name__} has no attribute 'status'")
        return self._status

    @property
    def message(self) -> str:
        if self._message is None:
            raise AttributeError(f"{self.trainer_class.__name__} has no attribute 'message'")
        return self._message

    def _call(self, method: str, *args: Any) -> Any:
        """Call the actor's ``method`` and wait for its reply (remote errors re-raise here).

        Raises :class:`WorkerLost` if the worker holding the actor died.  A bare
        ``.result()`` can wait forever then (Dask's actor retries by waiting for its task to
        be recomputed, which never happens for an actor built from scattered data), and a
        plain timeout would misfire on a slow step (a TAP step can take many seconds on a
        loaded machine).  So the reply is awaited in slices of :data:`ALIVE_CHECK_SECONDS`,
        and after each slice the scheduler is asked whether the actor is still held by its
        worker (:meth:`_gone`): a live worker is waited for as long as the step takes; a dead
        one ends the wait within a slice of the scheduler noticing (at once for a killed
        process: its connections close, and a nanny reports its exit).
        """
        actor = self._actor
        if actor is None:
            raise RuntimeError(f"This RemoteTrainer ({self.trainer_class.__name__}) was released.")
        try:
            reply = getattr(actor, method)(*args)
        except RuntimeError as exc:  # "Worker holding Actor was lost": its task erred
            raise self._lost(str(exc)) from None
        while True:
            try:
                return reply.result(timeout=ALIVE_CHECK_SECONDS)
            except TimeoutError:  # (before OSError: TimeoutError is one)
                if reply.done():  # answered just now, or the trainer raised TimeoutError itself
                    return reply.result()
                reason = self._gone()
                if reason is not None:
                    raise self._lost(reason) from None
            except OSError as exc:
                # the rpc to the worker failed; or the trainer raised an OSError of its own
                reason = f"worker {actor._address} did not answer" if str(exc) == _UNREACHABLE else self._gone()
                if reason is None:
                    raise
                raise self._lost(reason) from None

    def _gone(self) -> str | None:
        """Why the actor is gone (its worker died or left), or ``None`` while it is there."""
        future, actor = self._future, self._actor
        if future is None or actor is None:
            return "it was released"
        if future.status not in ("finished", "pending"):  # the scheduler told the client
            return f"its task is {future.status}"
        try:
            client = future.client
            holders = client.sync(client.scheduler.who_has, keys=[future.key],
                                  callback_timeout=ALIVE_CHECK_SECONDS * 5)
        except Exception as exc:  # noqa: BLE001 - the scheduler is the only one who can tell
            return f"the Dask scheduler did not answer: {type(exc).__name__}: {exc}"
        if actor._address not in holders.get(future.key, ()):
            return f"worker {actor._address} left the cluster"
        return None

    def _lost(self, reason: str) -> WorkerLost:
        return WorkerLost(f"The worker process running this trainer stopped ({reason}). "
                          "Press ↺ Reset to start again.")

    def step(self) -> Record:
        record, status = self._call("step")
        self._remember(status)
        return record

    def state_dict(self) -> dict[str, Any]:
        return self._call("state_dict")

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._remember(self._call("load_state_dict", dict(state)))

    def refresh(self) -> Status:
        """Fetch ``(done, status, message)`` from the worker (one round trip)."""
        status = self._call("status")
        self._remember(status)
        return status

    def release(self) -> None:
        """Let the worker drop the actor now (further calls fail)."""
        self._actor = self._future = None

    def __getattr__(self, name: str) -> Any:
        # only reached for names not found locally; private names are never forwarded
        # (copy/pickle probe dunders; and no recursion before __init__ has run)
        if name.startswith("_") or name in _LOCAL or "_actor" not in self.__dict__:
            raise AttributeError(name)
        found, value = self._call("get", name)
        if not found:
            raise AttributeError(f"{self.trainer_class.__name__} has no attribute {name!r}")
        return value

    def __repr__(self) -> str:
        return f"<RemoteTrainer {self.trainer_class.__name__} {'done' if self._done else 'active'}>"


class RemoteBatchTrainer(RemoteTrainer):
    """A :class:`RemoteTrainer` whose trainer has ``steps(k)`` (batches: one round trip)."""

    def steps(self, k: int) -> list[Record]:
        records, status = self._call("steps", k)
        self._remember(status)
        return records


class DaskBackend:
    """``BACKEND`` for :mod:`boltzlab.dashboard.runner`: trainers as actors on a Dask cluster.

    Parameters
    ----------
    address
        The scheduler, e.g. ``"tls://10.0.0.5:8786"``.
    timeout
        Seconds to wait for the scheduler, and for the actors of one ``__call__`` to be
        created (which needs a worker).  ``None``: Dask's connect timeout
        (``distributed.comm.timeouts.connect``, 30 s unless configured).
    security
        A :class:`distributed.Security` (TLS CA, certificate, key); ``None``: Dask's own
        configuration (``distributed.comm.tls.*``).  This class takes any address:
        :func:`use_dask` is where a plain ``tcp://`` scheduler is refused.

    Raises
    ------
    DaskUnavailable
        If ``distributed`` is missing or the scheduler does not answer within ``timeout``.
    """

    def __init__(self, address: str, timeout: float | None = None, security: Any = None) -> None:
        try:
            import dask
            from distributed import Client
        except ImportError as exc:
            raise DaskUnavailable("--dask-scheduler needs dask.distributed: pip install 'boltzlab[dask]' "
                                  f"({exc}).") from None
        if timeout is None:
            timeout = dask.utils.parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), "s")
        self.address = address
        self.timeout = float(timeout)
        try:
            self.client = Client(address, timeout=self.timeout, set_as_default=False, security=security)
        except ValueError as exc:  # e.g. no port
            error = f"{address!r} is not a Dask scheduler address such as tcp://host:8786 ({exc})."
        except Exception as exc:  # OSError/TimeoutError: nothing answers there
            error = (f"Cannot reach the Dask scheduler at {address!r} within {self.timeout:g} s: "
                     f"{type(exc).__name__}: {exc}")
        else:
            error = None
        if error is not None:
            # collect the half-started client now, while its loop still runs: left to the
            # exit, its __del__ waits 2 x timeout for a loop that is gone
            gc.collect()
            raise DaskUnavailable(error)
        # every stand-in handed out, to release them all on close (weak: a reset drops them)
        self._remotes: weakref.WeakSet[RemoteTrainer] = weakref.WeakSet()
        self.closing = False  # set by close(): workers leaving then are no news
        # set unless the workers are being recycled: work that arrives meanwhile waits for
        # the new workers (an actor or a task placed on a restarting worker is lost)
        self._open = threading.Event()
        self._open.set()
        # set unless the warm-up plugin is being registered (:meth:`warm_workers`)
        self._not_warming = threading.Event()
        self._not_warming.set()
        # held by a recycle and by the warm-up's registration: the registration is sent to
        # every worker, and one being restarted breaks it (the scheduler's ERROR "broadcast to
        # ... failed", and warm_workers raises); serve meets both when its first visitor
        # leaves while the kernels compile
        self._restarting = threading.Lock()

    def __call__(self, trainers: Mapping[str, Trainer], owner: str = "") -> dict[str, RemoteTrainer]:
        """Ship ``trainers`` to a worker; their stand-ins, by name (``owner``: whose runs
        they are, named in the log if the worker dies: :meth:`runs_on`).

        ``pure=False`` everywhere: two sessions with identical settings must get two
        actors, not share one through Dask's content-hashed keys.
        """
        trainers = dict(trainers)
        if not trainers:
            return {}
        self._wait_open()
        try:
            # one piece, so objects the trainers share stay shared on the worker
            [bundle] = self.client.scatter([trainers], hash=False, timeout=self.timeout)
        except Exception as exc:
            raise self._cannot_start(exc) from exc
        return self._hold(bundle, {name: _about(trainer) for name, trainer in trainers.items()}, owner)

    def build(self, build: Build, owner: str = "") -> dict[str, RemoteTrainer]:
        """Build ``build``'s trainers on a worker and hold them there; their stand-ins, by name.

        Only the Build travels: its settings, and a bundled data set by its key (a worker
        loads each set once per process, and its sessions share it).  Shipping the built
        trainers instead pickled a TAP lab's MNIST rows, 23 MB, in this process and sent
        them through the in-process scheduler over TLS: CPU the server's event loop then
        waited for.  Uploaded images travel inside the Build, as they must.

        The Build is scattered, not submitted as a task, so that a lost worker's actors are
        not quietly rebuilt elsewhere (see :meth:`RemoteTrainer._call`).  Raises
        :class:`boltzlab.dashboard.runner.BuildRefused` with the Build's own error if it
        raised on the worker, :class:`DaskUnavailable` if the cluster failed.
        """
        self._wait_open()
        try:
            [recipe] = self.client.scatter([build], hash=False, timeout=self.timeout)
            bundle = self.client.submit(_built, recipe, pure=False)
            error = bundle.exception(timeout=max(self.timeout, BUILD_SECONDS))  # waits; None if it built
        except Exception as exc:
            raise self._cannot_start(exc) from exc
        if error is not None and type(error).__module__.split(".")[0] == "distributed":  # KilledWorker, ...
            raise self._cannot_start(error)
        if error is not None:
            raise BuildRefused(error)
        try:
            about = self.client.submit(_abouts, bundle, pure=False).result(timeout=self.timeout)
        except Exception as exc:
            raise self._cannot_start(exc) from exc
        del recipe  # the worker may drop the Build now; the actors hold what it built
        return self._hold(bundle, about, owner)

    def _wait_open(self) -> None:
        if not self._open.wait(RECYCLE_TIMEOUT):  # on a runner's thread: it may wait
            raise DaskUnavailable(f"The Dask workers were not back from a recycle within {RECYCLE_TIMEOUT:g} s.")

    def _cannot_start(self, exc: BaseException) -> DaskUnavailable:
        return DaskUnavailable(f"Could not start the trainers on the Dask cluster at {self.address!r}: "
                               f"{type(exc).__name__}: {exc}")

    def _hold(self, bundle: Any, about: Mapping[str, tuple[type, Status, bool]], owner: str) -> dict[str, RemoteTrainer]:
        """An actor for each trainer of ``bundle`` (a future of ``{name: trainer}`` on a
        worker), and its stand-in made from ``about`` (:func:`_about`)."""
        try:
            futures = {name: self.client.submit(TrainerActor, bundle, name, actor=True, pure=False)
                       for name in about}
            with self.client.as_current():  # the actor handles attach to this (non-default) client
                actors = {name: future.result(timeout=self.timeout) for name, future in futures.items()}
        except Exception as exc:
            raise self._cannot_start(exc) from exc
        del bundle  # the actors hold their trainers; the worker may drop the shipped copy
        for name, actor in actors.items():
            bind_actor(actor, self.client, futures[name])
        remotes = {}
        for name, (trainer_class, status, batches) in about.items():
            cls = RemoteBatchTrainer if batches else RemoteTrainer
            remotes[name] = remote = cls(actors[name], futures[name], trainer_class, status)
            remote._owner, remote._run = owner, name  # private: never forwarded to the trainer
            self._remotes.add(remote)
        return remotes

    def runs_on(self, worker: str) -> dict[str, list[str]]:
        """The runs whose trainers the worker at address ``worker`` holds, by owner."""
        runs: dict[str, list[str]] = {}
        for remote in list(self._remotes):
            actor = remote._actor
            if actor is not None and actor._address == worker:
                runs.setdefault(remote._owner or "a session", []).append(remote._run)
        return runs

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` as a task on the cluster; its future (:data:`boltzlab.dashboard.jobs.EXECUTOR`).

        ``pure=False``: two sessions asking for the same analysis get two tasks (and a
        superseded job can be cancelled without cancelling another session's).
        """
        if self._open.is_set():
            return Fetched(self.client.submit(fn, *args, pure=False))
        # called on the event loop, which never waits: a thread submits it once the new
        # workers are up and passes its result on
        return _after(self._open, lambda: self.client.submit(fn, *args, pure=False).result())

    def warm_workers(self) -> None:
        """Load the numba kernels in every worker, now and in each worker that joins later.

        A worker plugin (:func:`boltzlab.engine.warm_up`): the scheduler runs it on the workers it
        has and on every worker that registers afterwards, e.g. one a nanny restarted after
        the old process died; such a worker takes tasks only once it is warm.  Raises
        :class:`DaskUnavailable` if a worker cannot run it (it cannot import ``engine``).
        """
        self._not_warming.clear()
        try:
            with self._restarting:  # after a recycle in progress: its new workers get it too
                self.client.register_plugin(_warm_up_plugin())
        except Exception as exc:
            if self.closing:  # the server stopped during the warm-up: nothing to say
                return
            raise DaskUnavailable(f"The Dask workers at {self.address!r} could not load the engine "
                                  f"(is boltzlab installed on them?): {type(exc).__name__}: {exc}") from exc
        finally:
            self._not_warming.set()

    def recycle_workers(self, timeout: float = RECYCLE_TIMEOUT, still_idle: Callable[[], bool] | None = None) -> dict:
        """Restart every worker process through its nanny: what the processes kept (data
        caches, the heap of finished runs) goes back to the OS.  The plugins warm and renice
        the new ones before they take work.  For a cluster of this server's own, when no
        session uses it (an actor or a job on a restarted worker is lost).  Returns the
        status of each worker (``"OK"``, ``"timed out"``: not back within ``timeout`` seconds, ...),
        or ``{}`` when ``still_idle()``, asked once new work is held back, says a session came.
        Trainers and jobs that arrive meanwhile wait for the new workers."""
        with self._restarting:  # after a warm-up being registered
            self._open.clear()
            try:
                if still_idle is not None and not still_idle():
                    return {}
                workers = list(self.client.scheduler_info()["workers"])
                t0 = time.perf_counter()
                with RECYCLING:  # the nannies' "killing" and "Restarting worker" warnings: routine here
                    status = self.client.restart_workers(workers, timeout=timeout, raise_for_error=False)
            finally:
                self._open.set()
        ok = sum(value == "OK" for value in status.values())
        logging.getLogger(__name__).info(
            "Recycled %d of %d worker processes (their memory back to the OS) in %.1f s%s", ok, len(status),
            time.perf_counter() - t0, "" if ok == len(status) else f": {status}")
        return status

    def recycle_soon(self, still_idle: Callable[[], bool] | None = None) -> None:
        """:meth:`recycle_workers` in a thread of its own (never on the server's event loop)."""
        def recycle() -> None:
            try:
                self.recycle_workers(still_idle=still_idle)
            except Exception as exc:  # noqa: BLE001 - a failed recycle leaves the workers as they were
                logging.getLogger(__name__).warning("Recycling the worker processes failed: %s: %s",
                                                    type(exc).__name__, exc)

        threading.Thread(target=recycle, name="boltzlab-recycle", daemon=True).start()

    def close(self) -> None:
        """Release every actor handed out and disconnect (and stop being the hooks' target)."""
        from boltzlab.dashboard import jobs, runner

        self.closing = True
        # a server stopped during its first seconds: let the warm-up in flight finish (a
        # few seconds from numba's cache), or the scheduler, the workers and asyncio log
        # its cancellation as ERRORs and tracebacks
        self._not_warming.wait(WARM_UP_WAIT_SECONDS)
        if runner.BACKEND is self:
            runner.BACKEND = None
        if getattr(jobs.EXECUTOR, "__self__", None) is self:
            jobs.EXECUTOR = None
        for remote in list(self._remotes):
            remote.release()
        self.client.close()


def _warm_up_plugin() -> Any:
    """A worker plugin running :func:`boltzlab.engine.warm_up` (built here: distributed is lazy)."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class BoltzlabWarmUp(WorkerPlugin):
        name = "boltzlab-warm-up"
        idempotent = True  # registered again (another server on the same cluster): not re-run

        async def setup(self, worker: Any) -> None:
            from boltzlab import engine

            # off the worker's event loop (a first compile takes a minute), but awaited: a
            # worker that joins runs its plugins before it takes tasks
            await asyncio.get_running_loop().run_in_executor(None, engine.warm_up)

    return BoltzlabWarmUp()


def install(backend: DaskBackend) -> DaskBackend:
    """Make every Runner (:data:`boltzlab.dashboard.runner.BACKEND`) and every analysis job
    (:data:`boltzlab.dashboard.jobs.EXECUTOR`) use ``backend``.  ``backend.close()`` undoes it."""
    from boltzlab.dashboard import jobs, runner

    runner.BACKEND = backend
    jobs.EXECUTOR = backend.submit
    return backend


class InsecureScheduler(DaskUnavailable):
    """A plain ``tcp://`` scheduler without ``insecure=True`` (``--dask-insecure``)."""


def scheduler_security(address: str, *, ca_file: str | None = None, cert: str | None = None,
                       key: str | None = None, insecure: bool = False) -> Any:
    """The :class:`distributed.Security` to reach the scheduler at ``address`` with.

    Whoever can open a connection to a Dask scheduler can run any code in its workers, as
    the workers' user (``Client.run``).  So a scheduler is reached over TLS with a client
    certificate its CA signed (mutual TLS: the scheduler admits only holders of such a
    certificate): ``ca_file``, ``cert`` and ``key`` (PEM files; ``cert`` may hold the key
    too), or, when none is given, Dask's own configuration (``distributed.comm.tls.ca-file``,
    ``distributed.comm.tls.client.cert`` / ``.key``, e.g. from ``DASK_DISTRIBUTED__COMM__TLS__…``).
    A plain ``tcp://`` address (or one with no protocol) raises :class:`InsecureScheduler`
    unless ``insecure``: then it is used, with a warning.
    """
    from distributed.comm.addressing import parse_address
    from distributed.security import Security

    try:
        protocol, _ = parse_address(address)
    except ValueError as exc:
        raise DaskUnavailable(f"{address!r} is not a Dask scheduler address such as tls://host:8786 "
                              f"({exc}).") from None
    given = {"tls_ca_file": ca_file, "tls_client_cert": cert, "tls_client_key": key}
    for flag, path in zip(("--dask-tls-ca-file", "--dask-tls-cert", "--dask-tls-key"), given.values()):
        if path is not None and not os.path.isfile(path):
            raise DaskUnavailable(f"{flag}: {path!r} is not a file.")
    if protocol != "tls":
        if not insecure:
            raise InsecureScheduler(
                f"Refusing the Dask scheduler at {address!r}: a plain {protocol}:// scheduler lets anyone who "
                "can reach it run code in its workers. Give a tls:// address with --dask-tls-ca-file, "
                "--dask-tls-cert and --dask-tls-key (or Dask's distributed.comm.tls configuration), or "
                "--dask-insecure to use it anyway on a network you trust.")
        if any(given.values()):
            raise DaskUnavailable(f"TLS settings were given for a plain {protocol}:// scheduler address "
                                  f"{address!r}: use tls://.")
        logging.getLogger(__name__).warning(
            "Using the Dask scheduler at %s without TLS (--dask-insecure): anyone who can reach it can run "
            "code in its workers.", address)
        return Security()
    if not any(given.values()):
        security = Security()  # Dask's configuration
    else:
        security = Security(require_encryption=True, **{k: v for k, v in given.items() if v is not None})
    if not (security.tls_ca_file and security.tls_client_cert):
        raise DaskUnavailable(f"The tls:// scheduler at {address!r} needs a CA file and a client certificate: "
                              "--dask-tls-ca-file and --dask-tls-cert (and --dask-tls-key unless the "
                              "certificate file holds the key), or Dask's distributed.comm.tls configuration.")
    return security


def use_dask(address: str, timeout: float | None = None, *, security: Any = None,
             insecure: bool = False) -> DaskBackend:
    """Connect to the scheduler at ``address``, warm its workers and make every Runner and
    every analysis job use it (:func:`install`).

    ``security``: a :class:`distributed.Security`; ``None``: :func:`scheduler_security`
    (Dask's TLS configuration; a plain ``tcp://`` address is refused unless ``insecure``).
    ``backend.close()`` goes back to this process's threads.
    """
    if security is None:
        security = scheduler_security(address, insecure=insecure)
    backend = DaskBackend(address, timeout, security)
    try:
        backend.warm_workers()
    except BaseException:
        backend.close()
        raise
    return install(backend)


#: Threads of each worker process of :func:`start_local_cluster`.
#:
#: An actor's calls, the creation of a session's actors and the analysis jobs all run in
#: their worker's thread pool, one per thread, first come first served.  A lab has at most
#: one call in flight (its runner steps its trainers one after the other and waits for
#: each), so a worker with T threads serves T busy labs without queueing anybody.  With 1
#: thread a new session's Step would wait behind whatever runs there: a batch is sized to
#: ~50 ms (Runner.call_seconds), which would be a short wait, but a single TAP step, an AIS
#: estimate or an Isomap fit takes seconds.  With 4, such calls share the worker's core
#: (every numba kernel is nogil, and the OS time-slices the threads), so a Step starts at
#: once and takes a little longer instead of waiting for the long call to end
#: (tests/dashboard/test_workers.py fills 3 threads of each worker with long steps and
#: steps a new session).  Past 4 busy labs per worker, a call waits for the next free
#: thread, typically one ~50 ms batch.  More threads than cores costs only context
#: switches: Dask's nanny limits BLAS/OpenMP to 1 thread per worker process, so nothing
#: multiplies further.
THREADS_PER_WORKER = 4

#: The routes of the HTTP server that every Dask scheduler and worker starts, for the local
#: cluster: only ``/health``.  Dask's defaults also show worker logs, call stacks and task
#: state (the scheduler's info and JSON pages), metrics, and with jupyter-server-proxy
#: installed a proxy to any port, to anyone on the machine, without credentials.
HTTP_ROUTES = ["distributed.http.health"]


#: Seconds the local cluster's processes (and the server's client) wait for a connection to
#: another of them.  Dask's default, 30 s, was overrun with 16 TAP sessions playing on 2 cores:
#: a TLS handshake with a worker at niceness 10 that has every core busy waits its turn, and a
#: new session's trainers failed to ship ("Timed out trying to connect ... after 30 s").  On
#: the loopback a slow connection is a busy peer, not a lost one: waiting is the right answer.
LOCAL_CONNECT_SECONDS = 180.0

#: Dask's cluster object closes a worker's nanny when no worker of that name is back
#: ``distributed.deploy.lost-worker-timeout`` (15 s) after one left (for clusters whose workers
#: a resource manager replaces).  Ours are restarted by their nanny; a restart slower than 15 s
#: (a new process at niceness 10 on a busy machine), or a recycle 15 s after another worker
#: left, then lost that worker for good: the recycle waited out its timeout and the server ran
#: on fewer workers, or none.  The nannies decide: the cluster never closes one itself.
LOCAL_LOST_WORKER_SECONDS = 365 * 24 * 3600.0


def closed_cluster_config() -> dict[str, Any]:
    """Dask configuration of the local cluster's processes (``dask.config.set`` keys)."""
    return {"distributed.scheduler.http.routes": HTTP_ROUTES, "distributed.worker.http.routes": HTTP_ROUTES}


#: Local workers run below the server's priority: they share the machine with the process
#: that answers and draws, and compute must never delay it.  Measured with 8 TAP sessions
#: on 2 cores at equal priority: /liveness took 8.4 s (median) and pages 18-74 s.
WORKER_NICENESS = 10


#: Playing runs' batches run in threads of their own at this niceness, below single Steps,
#: analyses and state transfers (the worker's task threads, at WORKER_NICENESS): a new
#: session's Step is served first, not time-sliced evenly with every run that plays.  (A
#: thread cannot lower its niceness again without privileges, hence a pool of its own.)
#: Measured with 8 TAP sessions playing: Step to plot median 1.9 s at equal niceness.
PLAY_NICENESS = 19

_PLAY_POOL: Any = None


def _play_pool() -> Any:
    """This worker's pool for playing runs (made on first use, THREADS_PER_WORKER threads)."""
    global _PLAY_POOL
    if _PLAY_POOL is None:
        from concurrent.futures import ThreadPoolExecutor

        _PLAY_POOL = ThreadPoolExecutor(THREADS_PER_WORKER, thread_name_prefix="boltzlab-play",
                                        initializer=renice_thread, initargs=(PLAY_NICENESS,))
    return _PLAY_POOL


def renice_thread(niceness: int) -> None:
    """Raise the calling thread to at least ``niceness`` (no-op where unsupported)."""
    try:
        tid = threading.get_native_id()
        if os.getpriority(os.PRIO_PROCESS, tid) < niceness:
            os.setpriority(os.PRIO_PROCESS, tid, niceness)
    except (OSError, AttributeError):
        pass


def renice_process(niceness: int) -> None:
    """Raise every thread of this process to at least ``niceness`` (Linux keeps a nice value
    per thread; threads started later inherit it from the thread that starts them)."""
    tasks = "/proc/self/task"
    tids = [int(t) for t in os.listdir(tasks)] if os.path.isdir(tasks) else [0]
    for tid in tids:
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) < niceness:
                os.setpriority(os.PRIO_PROCESS, tid, niceness)
        except OSError:  # the thread ended meanwhile, or no such call here
            pass


class Recycling:
    """Whether a routine recycle or stop of the worker processes is under way (a context
    manager; thread-safe).  Meanwhile the nannies' WARNINGs about it ("Worker process still
    alive after 4.0 seconds, killing", "Restarting worker"), which read as crashes, are dropped
    (:class:`RoutineNannyFilter`); :meth:`DaskBackend.recycle_workers` and
    :func:`stop_local_cluster` log one INFO line each."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0

    def __enter__(self) -> "Recycling":
        with self._lock:
            self._depth += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        with self._lock:
            self._depth -= 1

    @property
    def active(self) -> bool:
        return self._depth > 0


RECYCLING = Recycling()


class RoutineNannyFilter(logging.Filter):
    """Drops the nannies' records below ERROR while :data:`RECYCLING` (installed on the
    ``distributed.nanny`` logger by :func:`start_local_cluster`: the local cluster's nannies
    run in this process)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or not RECYCLING.active


def _deaths_plugin(backend: "DaskBackend") -> Any:
    """A scheduler plugin that logs a worker process which leaves the cluster outside a
    routine recycle (it died: killed, out of memory, crashed) as an ERROR naming the
    sessions whose runs it held (:meth:`DaskBackend.runs_on`)."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    class WorkerDeaths(SchedulerPlugin):
        name = "boltzlab-worker-deaths"

        def remove_worker(self, scheduler: Any, worker: str, *, stimulus_id: str, **kwargs: Any) -> None:
            if RECYCLING.active or backend.closing:
                return
            runs = backend.runs_on(worker)
            lost = "; ".join(f"{owner}: {', '.join(names)}" for owner, names in runs.items())
            logging.getLogger(__name__).error(
                "A worker process stopped unexpectedly (%s); its nanny starts a new one. %s", worker,
                f"Runs lost (those sessions show the error; Reset starts "
                                           f"them again): {lost}." if runs else "It held no session's runs.")

    return WorkerDeaths()


def _renice_plugin(niceness: int) -> Any:
    """A worker plugin running :func:`renice_process` (on restarted workers too)."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class BoltzlabNice(WorkerPlugin):
        name = "boltzlab-nice"
        idempotent = True

        def setup(self, worker: Any) -> None:
            renice_process(niceness)

    return BoltzlabNice()


def start_local_cluster(n_workers: int, *, threads_per_worker: int = THREADS_PER_WORKER,
                        timeout: float | None = None, warm: bool = True) -> tuple[Any, DaskBackend]:
    """Start a :class:`distributed.LocalCluster` of ``n_workers`` processes; it and a
    :class:`DaskBackend` connected to it, its workers warm (:meth:`DaskBackend.warm_workers`;
    ``warm=False``: the caller warms them later, e.g. once :mod:`boltzlab.dashboard.startup` has
    compiled the kernels into numba's cache: warmed at once from a cold cache, every worker
    would compile every kernel itself, all at the same time).

    The cluster is closed to every other process: its scheduler, nannies and workers speak
    mutual TLS only, with a key and self-signed certificate made at start
    (:meth:`distributed.Security.temporary`), kept in memory and never written to disk, so a
    client must present that certificate to connect (without it, any local account could run
    code in the workers as the server's user).  Their HTTP servers answer only ``/health``.

    The workers are nanny-supervised processes on 127.0.0.1: a worker that dies is
    restarted by its nanny, however long that takes (:data:`LOCAL_LOST_WORKER_SECONDS`), and
    warmed again before it takes work; the workers exit with this process, however it ends
    (a nanny's worker watches a pipe to its parent).  No Dask web dashboard (a second Bokeh
    server nobody reads, wanting port 8787); Dask's logs at WARNING and above only.  Its processes, the backend's client and this process's Dask
    (Dask's config is set for good here: the scheduler runs in this process) wait
    :data:`LOCAL_CONNECT_SECONDS` for a connection (``timeout`` overrides the client's).  The
    caller closes both: ``backend.close(); cluster.close()``.
    """
    if not isinstance(n_workers, int) or n_workers < 1:
        raise ValueError(f"A local Dask cluster needs n_workers >= 1. Got {n_workers!r}.")
    try:
        import dask
        from distributed import LocalCluster
    except ImportError as exc:
        raise DaskUnavailable(f"boltzlab serve --workers needs dask.distributed: pip install "
                              f"'dask[distributed]' ({exc}).") from None
    from distributed import Security

    # Closed: mutual TLS with a key and certificate made now, held in memory by this process
    # and handed to the worker processes it spawns; no other process can join the cluster or
    # submit work to it.  dashboard_address=None: no Dask web dashboard; the small HTTP servers
    # every scheduler and worker start anyway answer only /health (HTTP_ROUTES), on free ports
    security = Security.temporary()
    # for good, in this process (it runs the scheduler, which reads the connect timeout when it
    # connects to a worker, e.g. for a scatter, and the cluster object, which reads the
    # lost-worker timeout whenever a worker leaves) and so in the nannies, which copy its config
    dask.config.set({"distributed.comm.timeouts.connect": f"{LOCAL_CONNECT_SECONDS:g}s",
                     "distributed.deploy.lost-worker-timeout": f"{LOCAL_LOST_WORKER_SECONDS:g}s"})
    with dask.config.set(closed_cluster_config()):  # the nannies copy the config they start with
        cluster = LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker, processes=True,
                               host="127.0.0.1", protocol="tls://", security=security,
                               dashboard_address=None, silence_logs=logging.WARNING,
                               scheduler_kwargs={"dashboard_address": "127.0.0.1:0"})
    try:
        backend = DaskBackend(cluster.scheduler_address, LOCAL_CONNECT_SECONDS if timeout is None else timeout,
                              security)
        try:
            backend.client.register_plugin(_renice_plugin(WORKER_NICENESS))
            cluster.scheduler.add_plugin(_deaths_plugin(backend))  # the scheduler runs in this process
            nanny = logging.getLogger("distributed.nanny")
            if not any(isinstance(f, RoutineNannyFilter) for f in nanny.filters):
                nanny.addFilter(RoutineNannyFilter())
            if warm:
                backend.warm_workers()
        except BaseException:
            backend.close()
            raise
    except BaseException:
        cluster.close()
        raise
    return cluster, backend


def stop_local_cluster(cluster: Any, backend: DaskBackend) -> None:
    """Stop what :func:`start_local_cluster` started, at the server's end: the backend
    disconnects, then the cluster closes, and one INFO line says so.

    A nanny asks its worker process to exit and kills it if it still runs 4 s later, with the
    WARNING "Worker process still alive after 4.0 seconds, killing": a warm worker at nice 10
    on a busy machine often takes longer (two such lines at most stops of ``serve`` in the
    browser tests' server log).  Nothing is lost (the sessions are gone with the server), so
    they are dropped, as during a recycle (:data:`RECYCLING`); a worker that dies otherwise is
    still an ERROR (:func:`_deaths_plugin`)."""
    t0 = time.perf_counter()
    n = len(getattr(cluster, "workers", ()))
    try:
        backend.close()
    finally:
        with RECYCLING:
            cluster.close()
    logging.getLogger(__name__).info("Stopped the %d worker process%s in %.1f s", n, "" if n == 1 else "es",
                                     time.perf_counter() - t0)


def use_local_cluster(n_workers: int | None = None, **kwargs: Any) -> tuple[Any, DaskBackend]:
    """:func:`start_local_cluster` (``None``: one worker per CPU this process may use) and :func:`install` it."""
    from boltzlab.dashboard.startup import default_worker_count

    cluster, backend = start_local_cluster(default_worker_count() if n_workers is None else n_workers, **kwargs)
    install(backend)
    return cluster, backend
