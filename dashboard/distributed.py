"""Run the Trainers on a Dask distributed cluster (``boltzlab serve --dask-scheduler``).

The runner's hook :data:`dashboard.runner.BACKEND` passes every ``{name: trainer}`` a
factory builds through a :class:`DaskBackend`: each trainer is shipped (pickled) to a
worker and held there by a :class:`TrainerActor` (a Dask actor); the runner gets
:class:`RemoteTrainer` stand-ins that forward ``step()``, ``steps(k)``,
``state_dict()``, ``load_state_dict()`` and attribute reads, and the Records stream back
as plain :class:`~engine.stepping.Record` objects.  The runner's thread, its buffer and
the Panel wiring stay in the server process; only the numerics move.

The workers must be able to import the same ``boltzlab`` (``engine`` and ``dashboard``):
trainers are pickled by reference to their classes.

``distributed`` is imported lazily, so the app runs without it unless this is used.
"""

from __future__ import annotations

import asyncio
import gc
import types
import weakref
from typing import Any, Callable, Mapping

from engine.stepping import Record, Trainer

#: ``(done, status, message)``; ``status``/``message`` are ``None`` when the trainer has
#: no such attribute (the runner then uses its own defaults, as for a local trainer).
Status = tuple[bool, str | None, str | None]


class DaskUnavailable(RuntimeError):
    """The Dask scheduler cannot be reached, or ``dask.distributed`` is not installed."""


def _status(trainer: Any) -> Status:
    status = getattr(trainer, "status", None)
    message = getattr(trainer, "message", None)
    return (bool(getattr(trainer, "done", False)), None if status is None else str(status),
            None if message is None else str(message))


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

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        from distributed import get_worker

        try:
            executor = get_worker().executors["default"]
        except (ValueError, KeyError):  # not inside a worker (plain use in tests)
            executor = None
        async with self._lock:
            return await asyncio.get_running_loop().run_in_executor(executor, fn, *args)

    async def step(self) -> tuple[Record, Status]:
        """One ``step()`` and the trainer's status after it (one round trip)."""
        return await self._run(lambda: (self.trainer.step(), _status(self.trainer)))

    async def steps(self, k: int) -> tuple[list[Record], Status]:
        """``steps(k)`` and the trainer's status after it."""
        return await self._run(lambda: (list(self.trainer.steps(k)), _status(self.trainer)))

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


class RemoteTrainer:
    """The runner's stand-in for a trainer held by a :class:`TrainerActor`.

    Calls block until the worker answers.  ``done``/``status``/``message`` come from the
    reply of the last call (no extra round trip per step); any other public attribute is
    read from the remote trainer on each access.  ``isinstance`` sees a RemoteTrainer
    (the wrapped class is :attr:`trainer_class`); ``steps`` exists only when the wrapped
    trainer has it (see :class:`RemoteBatchTrainer`), so ``hasattr`` answers as locally.

    Dropping the last reference releases the actor (and the trainer on the worker).
    """

    def __init__(self, actor: Any, future: Any, trainer: Trainer) -> None:
        self._actor = actor
        self._future = future  # with the actor handle, keeps the actor alive
        self.trainer_class: type = type(trainer)
        self._remember(_status(trainer))  # the shipped trainer is an exact copy

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
        """Call the actor's ``method`` and wait for its reply (remote errors re-raise here)."""
        if self._actor is None:
            raise RuntimeError(f"This RemoteTrainer ({self.trainer_class.__name__}) was released.")
        return getattr(self._actor, method)(*args).result()

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
    """``BACKEND`` for :mod:`dashboard.runner`: trainers as actors on a Dask cluster.

    Parameters
    ----------
    address
        The scheduler, e.g. ``"tcp://10.0.0.5:8786"``.
    timeout
        Seconds to wait for the scheduler, and for the actors of one ``__call__`` to be
        created (which needs a worker).  ``None``: Dask's connect timeout
        (``distributed.comm.timeouts.connect``, 30 s unless configured).

    Raises
    ------
    DaskUnavailable
        If ``distributed`` is missing or the scheduler does not answer within ``timeout``.
    """

    def __init__(self, address: str, timeout: float | None = None) -> None:
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
            self.client = Client(address, timeout=self.timeout, set_as_default=False)
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

    def __call__(self, trainers: Mapping[str, Trainer]) -> dict[str, RemoteTrainer]:
        """Ship ``trainers`` to a worker; their stand-ins, by name.

        ``pure=False`` everywhere: two sessions with identical settings must get two
        actors, not share one through Dask's content-hashed keys.
        """
        trainers = dict(trainers)
        if not trainers:
            return {}
        try:
            # one piece, so objects the trainers share stay shared on the worker
            [bundle] = self.client.scatter([trainers], hash=False, timeout=self.timeout)
            futures = {name: self.client.submit(TrainerActor, bundle, name, actor=True, pure=False)
                       for name in trainers}
            with self.client.as_current():  # the actor handles attach to this (non-default) client
                actors = {name: future.result(timeout=self.timeout) for name, future in futures.items()}
        except Exception as exc:
            raise DaskUnavailable(f"Could not start the trainers on the Dask cluster at {self.address!r}: "
                                  f"{type(exc).__name__}: {exc}") from exc
        del bundle  # the actors hold their trainers; the worker may drop the shipped copy
        remotes = {}
        for name, trainer in trainers.items():
            cls = RemoteBatchTrainer if hasattr(trainer, "steps") else RemoteTrainer
            remotes[name] = remote = cls(actors[name], futures[name], trainer)
            self._remotes.add(remote)
        return remotes

    def close(self) -> None:
        """Release every actor handed out and disconnect."""
        for remote in list(self._remotes):
            remote.release()
        self.client.close()


def use_dask(address: str, timeout: float | None = None) -> DaskBackend:
    """Connect to the scheduler at ``address`` and make every Runner use it.

    Sets :data:`dashboard.runner.BACKEND`; ``dashboard.runner.BACKEND = None`` (after
    ``backend.close()``) goes back to the local thread.
    """
    from dashboard import runner

    backend = DaskBackend(address, timeout)
    runner.BACKEND = backend
    return backend
