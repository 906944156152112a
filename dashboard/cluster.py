"""The worker cluster ``boltzlab serve`` runs its trainers on: a remote Dask scheduler
(:func:`use_dask`, closed by TLS unless ``--dask-insecure``: :func:`scheduler_security`) or
a local cluster of worker processes on this machine (:func:`use_local_cluster`, closed
too: :func:`closed_cluster_config`), with the plugins that renice its workers, warm their
kernels and report their deaths.  What runs on the workers (actors, remote trainers, the
backend the runner uses) is :mod:`boltzlab.dashboard.distributed`.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from .distributed import (RECYCLING, THREADS_PER_WORKER, WORKER_NICENESS, DaskBackend, DaskUnavailable,  # noqa: F401
                          install, renice_process)

#: the Dask backend's one log, this module's and distributed.py's (what an operator's filters name)
log = logging.getLogger("boltzlab.dashboard.distributed")


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
        log.warning(
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
            log.error(
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
    log.info("Stopped the %d worker process%s in %.1f s", n, "" if n == 1 else "es",
                                     time.perf_counter() - t0)


def use_local_cluster(n_workers: int | None = None, **kwargs: Any) -> tuple[Any, DaskBackend]:
    """:func:`start_local_cluster` (``None``: one worker per CPU this process may use) and :func:`install` it."""
    from .startup import default_worker_count

    cluster, backend = start_local_cluster(default_worker_count() if n_workers is None else n_workers, **kwargs)
    install(backend)
    return cluster, backend
