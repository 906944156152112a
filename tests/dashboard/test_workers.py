"""``boltzlab serve``'s local Dask cluster (``--workers N``): worker processes on this machine.

Two worker processes (each a nanny-supervised process, as ``serve`` starts them), two or
more Runners standing for browser sessions.  Everything waits on conditions with generous
timeouts (a busy 2-core machine): no test counts what happens in a time window.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import distributed  # noqa: E402, F401 - core dependencies of boltzlab serve: missing means a broken install
import psutil  # noqa: E402

from boltzlab.dashboard import jobs  # noqa: E402
from boltzlab.dashboard import runner as runner_module  # noqa: E402
from boltzlab.dashboard.cluster import start_local_cluster  # noqa: E402
from boltzlab.dashboard.distributed import (  # noqa: E402
    THREADS_PER_WORKER,
    DaskBackend,
    WorkerLost,
    install,
)
from boltzlab.dashboard.runner import Runner  # noqa: E402
from boltzlab.engine.stepping import Record  # noqa: E402
from fakes import FakeTrainer  # noqa: E402
from tests.serving import server_output, start_server, stop_server  # noqa: E402
from tests.waiting import wait_for  # noqa: E402

LOST = "The worker process running this trainer stopped"


# --------------------------------------------------------------- trainers (pickled to workers)


class PidTrainer(FakeTrainer):
    """A FakeTrainer whose Records say which process stepped them."""

    def step(self) -> Record:
        record = super().step()
        record.scalars["pid"] = os.getpid()
        return record


class GatedTrainer(FakeTrainer):
    """Each step touches ``started``, then sleeps until ``release`` exists (at most 5 minutes):
    a long step that the test can see running and can end."""

    def __init__(self, started: str, release: str) -> None:
        super().__init__()
        self.started, self.release = started, release

    def step(self) -> Record:
        Path(self.started).touch()
        deadline = time.monotonic() + 300
        while not Path(self.release).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return super().step()


class NiceTrainer(FakeTrainer):
    """A FakeTrainer with ``steps(k)`` whose Records say the niceness of the thread that ran them."""

    def step(self) -> Record:
        record = super().step()
        record.scalars["nice"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        return record

    def steps(self, k: int) -> list[Record]:
        return [self.step() for _ in range(max(1, int(k)))]


class RaisesOnce(FakeTrainer):
    """The first step raises ``error`` (an OSError kind, like the rpc failures), then it steps."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def step(self) -> Record:
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        return super().step()


def hold_the_worker(started: str) -> None:
    """A task that touches ``started``, then keeps its worker process busy for a minute."""
    Path(started).touch()
    time.sleep(60)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def local():
    cluster, backend = start_local_cluster(2)
    yield cluster, backend
    backend.close()
    cluster.close()


def _niceness_of_every_thread() -> list[int]:
    return [os.getpriority(os.PRIO_PROCESS, int(tid)) for tid in os.listdir("/proc/self/task")]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="per-thread priorities are Linux's")
def test_local_workers_run_below_the_servers_priority(local):
    from boltzlab.dashboard.distributed import WORKER_NICENESS

    base = os.getpriority(os.PRIO_PROCESS, 0)  # the suite may itself run under nice
    nice = local[1].client.run(_niceness_of_every_thread)
    assert nice and all(min(values) >= max(base, WORKER_NICENESS) for values in nice.values()), nice
    assert max(_niceness_of_every_thread()) == base  # the server itself is not reniced


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="per-thread priorities are Linux's")
def test_a_step_click_runs_above_playing_runs(make_runner):
    from boltzlab.dashboard.distributed import PLAY_NICENESS, WORKER_NICENESS

    run = make_runner(lambda: {"nice": NiceTrainer()})
    run.step_once()
    assert run.wait_idle(120.0)
    [(_, clicked)] = run.drain()
    run.play()
    assert wait_for(lambda: run.states["nice"].steps >= 3, timeout=120)
    run.pause()
    assert run.wait_idle(120.0)
    played = [record["nice"] for _, record in run.drain()]
    base = os.getpriority(os.PRIO_PROCESS, 0)  # the suite may itself run under nice (then so do workers)
    # a click runs at the workers' niceness (or the suite's own, if that is already higher); a
    # played step runs at PLAY_NICENESS, which is never below the click's.  Under `nice -n 19`
    # both are 19: a niceness already at the top cannot go higher, so strictly-below is only
    # asserted when there is room for it.
    assert clicked["nice"] == max(base, WORKER_NICENESS), (clicked, base)
    assert clicked["nice"] <= PLAY_NICENESS
    if max(base, WORKER_NICENESS) < PLAY_NICENESS:
        assert clicked["nice"] < PLAY_NICENESS
    assert played and set(played) == {max(base, PLAY_NICENESS)}, played


@pytest.fixture
def make_runner(local, monkeypatch, make_runner):
    """Runners on the local cluster: the shared ``make_runner`` (conftest) with ``BACKEND`` set
    for the test (restored after its runners are closed)."""
    monkeypatch.setattr(runner_module, "BACKEND", local[1])
    return make_runner


def worker_of(runner: Runner, name: str) -> str:
    assert runner.wait_started(120)
    return runner.trainers[name]._actor._address


def n_workers(backend: DaskBackend) -> int:
    return len(backend.client.run(os.getpid))


# ------------------------------------------------------------------------------ tests


def test_the_local_cluster_is_warm_worker_processes_without_a_web_dashboard(local):
    cluster, backend = local
    assert cluster.scheduler_address.startswith("tls://127.0.0.1:")  # closed: tests/dashboard/test_closed_cluster.py
    # no Dask web dashboard (a Bokeh app of its own); its health endpoint on a free port, not 8787
    http = f"http://127.0.0.1:{cluster.scheduler.http_server.port}"
    assert cluster.scheduler.http_server.port != 8787
    assert urllib.request.urlopen(http + "/health", timeout=30).read() == b"ok"
    with pytest.raises(urllib.error.HTTPError, match="404"):
        urllib.request.urlopen(http + "/status", timeout=30)
    pids = backend.client.run(os.getpid)
    assert len(pids) == 2 and os.getpid() not in pids.values() and len(set(pids.values())) == 2

    def inspect(dask_worker):
        from boltzlab.engine.kernels import fvbm

        return dask_worker.state.nthreads, "boltzlab-warm-up" in dask_worker.plugins, len(fvbm.run_sweeps.signatures)

    for nthreads, warm, compiled in backend.client.run(inspect).values():
        assert nthreads == THREADS_PER_WORKER and warm and compiled >= 1  # kernels loaded before any work


def test_install_sends_runners_and_jobs_to_the_cluster_and_close_undoes_it(local, monkeypatch):
    monkeypatch.setattr(runner_module, "BACKEND", None)
    monkeypatch.setattr(jobs, "EXECUTOR", None)
    cluster, main = local
    backend = install(DaskBackend(cluster.scheduler_address, timeout=60, security=cluster.security))
    try:
        assert runner_module.BACKEND is backend and jobs.EXECUTOR == backend.submit
        results = []
        pending = jobs.Jobs()
        pending.submit("pid", os.getpid, then=results.append)
        assert pending.wait(120.0)
        assert results and results[0] in main.client.run(os.getpid).values()  # ran in a worker process
    finally:
        backend.close()
    assert runner_module.BACKEND is None and jobs.EXECUTOR is None


def _keys_held(dask_scheduler=None) -> list:
    return list(dask_scheduler.tasks)


def _refuse(text: str) -> None:
    raise ValueError(text)


def _crash(text: str) -> None:
    raise RuntimeError(text)


def test_a_job_that_refuses_its_input_is_no_failed_task_on_the_cluster(local, monkeypatch):
    """A user's bad file is refused with a ValueError in a job: the lab gets the error, but
    the Dask task ends normally, so no worker logs "Compute Failed" with a traceback (read as
    a server fault).  Any other exception is still a failed task."""
    backend = local[1]
    submitted = []

    def execute(fn, *args):
        future = backend.submit(fn, *args)
        submitted.append(future.remote)  # the Dask future behind the result fetched here
        return future

    monkeypatch.setattr(jobs, "EXECUTOR", execute)
    errors: list[BaseException] = []
    pending = jobs.Jobs()
    pending.submit("refuse", _refuse, "Line 3 holds 7", then=errors.append, error=errors.append)
    pending.submit("crash", _crash, "a bug", then=errors.append, error=errors.append)
    assert pending.wait(120.0)
    assert sorted((type(e).__name__, str(e)) for e in errors) == [("RuntimeError", "a bug"),
                                                                   ("ValueError", "Line 3 holds 7")]
    refused, crashed = submitted
    assert refused.status == "finished" and crashed.status == "error"
    keys = {future.key for future in submitted}
    for future in submitted:  # forgotten by the cluster before the next test recycles its workers
        future.release()
    # (only these: an earlier test's actors may still be on their way out)
    assert wait_for(lambda: not keys & set(backend.client.run_on_scheduler(_keys_held)), timeout=60)


def test_a_jobs_result_is_here_once_it_is_done_so_polling_never_waits_for_a_worker(local):
    """Jobs.poll runs on the event loop: a job that says it is done must hand over its result
    without a round trip to the worker (a Dask future's own result() is one)."""
    backend = local[1]
    job = backend.submit(os.getpid)
    assert wait_for(job.done, timeout=120)

    def fetch_again(*args, **kwargs):
        raise AssertionError("result() went to the worker after done()")

    job.remote.result = fetch_again
    assert job.result(timeout=0) in set(backend.client.run(os.getpid).values())
    superseded = backend.submit(time.sleep, 30)
    assert superseded.cancel() and superseded.cancelled()
    assert wait_for(lambda: superseded.remote.status == "cancelled", timeout=60)


def test_a_trainers_own_oserror_or_timeout_is_its_error_not_a_lost_worker(make_runner):
    runner = make_runner(lambda: {"timeout": RaisesOnce(TimeoutError("slow disk")),
                                  "oserror": RaisesOnce(FileNotFoundError("no such file: x.csv"))})
    runner.step_once()
    assert runner.wait_idle(60.0)
    assert runner.states["timeout"].status == "error"
    assert runner.states["timeout"].message == "TimeoutError: slow disk"
    assert runner.states["oserror"].message == "FileNotFoundError: no such file: x.csv"
    # the actors are alive: the same stand-ins keep stepping
    for trainer in runner.trainers.values():
        assert trainer.step()["sweep"] == 1


def test_a_new_sessions_step_is_not_queued_behind_other_sessions_long_steps(local, make_runner, tmp_path):
    """Every worker runs THREADS_PER_WORKER - 1 long steps of other sessions; a new session's
    Step still finishes while they all go on."""
    backend = local[1]
    release = tmp_path / "release"
    per_worker: dict[str, int] = {}
    long_runs: list[tuple[Runner, Path]] = []
    try:
        for attempt in range(40):
            if len(per_worker) == 2 and all(n == THREADS_PER_WORKER - 1 for n in per_worker.values()):
                break
            started = tmp_path / f"started-{attempt}"
            run = make_runner(lambda s=started: {"long": GatedTrainer(str(s), str(release))})
            address = worker_of(run, "long")
            if per_worker.get(address, 0) >= THREADS_PER_WORKER - 1:
                run.close()  # that worker is full already: never stepped
                continue
            per_worker[address] = per_worker.get(address, 0) + 1
            long_runs.append((run, started))
        assert len(per_worker) == 2 and all(n == THREADS_PER_WORKER - 1 for n in per_worker.values()), per_worker
        for run, _ in long_runs:
            run.step_once()
        assert wait_for(lambda: all(started.exists() for _, started in long_runs), timeout=120)
        # every long step is running on its worker now; a new session steps anyway
        session = make_runner(lambda: {"quick": PidTrainer()})
        session.step_once()
        assert session.wait_idle(120.0)
        [(name, record)] = session.drain()
        assert name == "quick" and record["sweep"] == 1
        assert not release.exists() and all(not run.wait_idle(0.0) for run, _ in long_runs)  # still going
    finally:
        release.touch()
    for run, _ in long_runs:
        assert run.wait_idle(120.0)
        assert run.states["long"].steps == 1
    assert n_workers(backend) == 2


def test_a_killed_worker_stops_only_its_sessions_which_can_reset(local, make_runner, caplog):
    backend = local[1]
    a = make_runner(lambda: {"a": PidTrainer(delay=0.02)}, owner="session 7 (Test lab)")
    b = make_runner(lambda: {"b": PidTrainer(delay=0.02)})
    for _ in range(10):  # sessions land on the workers in turn: have them on different ones
        if worker_of(a, "a") != worker_of(b, "b"):
            break
        a.reset()
    dead_address = worker_of(a, "a")
    assert dead_address != worker_of(b, "b")
    a.play()
    b.play()
    assert wait_for(lambda: a.states["a"].steps >= 3 and b.states["b"].steps >= 3, timeout=120)
    pid = a.drain()[-1][1]["pid"]
    assert pid == backend.client.run(os.getpid)[dead_address] != b.drain()[-1][1]["pid"]

    caplog.set_level(logging.INFO, logger="boltzlab.dashboard.distributed")
    os.kill(pid, signal.SIGKILL)  # mid-step: A plays without a pause between steps
    assert wait_for(lambda: a.states["a"].status == "error", timeout=120), a.states
    # the server's log says so at ERROR, naming the session whose run was lost (and only it)
    assert wait_for(lambda: any("stopped unexpectedly" in r.getMessage() for r in caplog.records), timeout=120)
    [death] = [r for r in caplog.records if "stopped unexpectedly" in r.getMessage()]
    assert death.levelno == logging.ERROR and dead_address in death.getMessage()
    assert re.search(r"session 7 \(Test lab\): a[;.]", death.getMessage()) and ": b" not in death.getMessage()
    message = a.states["a"].message
    assert message.startswith(f"WorkerLost: {LOST}") and "Press ↺ Reset to start again." in message
    assert not a.playing
    # the other session keeps training
    seen = b.states["b"].steps
    assert wait_for(lambda: b.states["b"].steps >= seen + 10, timeout=120)
    assert b.states["b"].status == "running" and b.playing

    # a further call into the dead actor fails at once instead of hanging the runner's thread
    errors: list[BaseException] = []

    def call() -> None:
        try:
            a.trainers["a"].step()
        except BaseException as exc:  # noqa: BLE001 - inspected below
            errors.append(exc)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    caller.join(120)
    assert not caller.is_alive() and len(errors) == 1 and isinstance(errors[0], WorkerLost)
    assert LOST in str(errors[0])

    # Reset builds fresh trainers on a live worker (the survivor, or the one the nanny restarted)
    a.reset()
    assert worker_of(a, "a") != dead_address and a.states["a"].status == "ready"
    a.step_once()
    assert a.wait_idle(120.0)
    [(name, record)] = a.drain()
    assert name == "a" and record["sweep"] == 1 and record["pid"] != pid
    a.play()
    assert wait_for(lambda: a.states["a"].steps >= 5, timeout=120) and a.states["a"].status == "running"
    assert b.states["b"].status == "running"
    a.pause()
    b.pause()
    # the nanny restarts the dead worker, warm
    assert wait_for(lambda: n_workers(backend) == 2, timeout=180)
    assert all(backend.client.run(lambda dask_worker: "boltzlab-warm-up" in dask_worker.plugins).values())
    assert pid not in backend.client.run(os.getpid).values()


# ------------------------------------------------------------------------------- serve


def test_recycled_workers_are_new_processes_warm_and_below_the_server(local, make_runner, caplog):
    """serve recycles its workers once no visitor is left (dashboard.app.Visitors): new
    processes, which the plugins warm and renice before a new session steps on them.  The
    log says so in one INFO line, with none of the nannies' warnings (which read as crashes)
    and no worker death."""
    from boltzlab.dashboard.distributed import WORKER_NICENESS

    backend = local[1]
    before = set(backend.client.run(os.getpid).values())
    caplog.set_level(logging.INFO)
    # a generous timeout: new workers warm every kernel (from the cache) at nice 10 before
    # they count as back, which took over the default 120 s on a 2-core machine at load 10
    status = backend.recycle_workers(timeout=600)
    assert status and set(status.values()) == {"OK"}, status
    ours = [r for r in caplog.records if r.name == "boltzlab.dashboard.distributed"]
    assert [r.levelno for r in ours] == [logging.INFO]
    assert f"Recycled {len(status)} of {len(status)} worker processes" in ours[0].getMessage()
    assert not [r for r in caplog.records if r.name.startswith("distributed") and r.levelno >= logging.WARNING]
    assert wait_for(lambda: n_workers(backend) == 2, timeout=120)
    after = set(backend.client.run(os.getpid).values())
    assert not before & after, (before, after)
    nice = backend.client.run(_niceness_of_every_thread)
    assert all(min(values) >= WORKER_NICENESS for values in nice.values()), nice
    session = make_runner(lambda: {"quick": PidTrainer()})
    session.step_once()
    assert session.wait_idle(120.0)
    [(_, record)] = session.drain()
    assert record["pid"] in after


def _pid() -> int:
    return os.getpid()


def test_work_that_arrives_during_a_recycle_waits_for_the_new_workers(local, make_runner):
    """A visitor who comes while the workers are being recycled (serve recycles them once
    nobody has been there for a while) gets the new workers: a job and a session's trainers
    wait for them instead of landing on a worker about to be killed (the job came back
    "cancelled" and the page said "Could not compute this")."""
    backend = local[1]
    before = set(backend.client.run(os.getpid).values())
    results: list[dict] = []
    recycle = threading.Thread(target=lambda: results.append(backend.recycle_workers(timeout=600)), daemon=True)
    recycle.start()
    assert wait_for(lambda: not backend._open.is_set() or results, timeout=60) and not results
    job = backend.submit(_pid)  # on the event loop in serve: it must not block
    session = make_runner(lambda: {"quick": PidTrainer()})
    session.step_once()
    recycle.join(600)
    assert not recycle.is_alive() and set(results[0].values()) == {"OK"}, results
    assert job.result(timeout=120) not in before
    assert session.wait_idle(120.0)
    [(_, record)] = session.drain()
    assert record["pid"] not in before


def test_a_recycle_is_called_off_when_a_visitor_came(local):
    """``still_idle`` is asked once new work is held back: a visitor who came in the
    meantime keeps the workers (and their actors) as they are."""
    backend = local[1]
    before = set(backend.client.run(os.getpid).values())
    assert backend.recycle_workers(still_idle=lambda: False) == {}
    assert set(backend.client.run(os.getpid).values()) == before and backend._open.is_set()


def test_a_warm_up_waits_for_a_recycle_in_progress(local, monkeypatch):
    """The warm-up plugin's registration is sent to every worker; sent while a recycle restarts
    them, it failed (a loaded load test: "broadcast to ... failed").  It waits for the recycle
    (and a recycle for a registration in progress).  Here the restart is held and both calls
    are recorded, the real ones not made."""
    backend = local[1]
    calls: list[str] = []
    restarting, release = threading.Event(), threading.Event()

    def restart_workers(workers, **kwargs):
        restarting.set()
        assert release.wait(120)
        calls.append("restart")
        return {w: "OK" for w in workers}

    monkeypatch.setattr(backend.client, "restart_workers", restart_workers)
    monkeypatch.setattr(backend.client, "register_plugin", lambda plugin: calls.append("plugin"))
    recycle = threading.Thread(target=backend.recycle_workers, daemon=True)
    recycle.start()
    assert restarting.wait(60)
    warm = threading.Thread(target=backend.warm_workers, daemon=True)
    warm.start()
    warm.join(2.0)  # time to register, were it not held back (the old code did, at once)
    assert calls == [] and warm.is_alive()
    release.set()
    recycle.join(120)
    warm.join(120)
    assert calls == ["restart", "plugin"] and backend._open.is_set()


def _dasks_lost_worker_seconds() -> float:
    """Dask's own ``distributed.deploy.lost-worker-timeout`` (15 s), from its defaults file:
    start_local_cluster sets this process's value for good."""
    import yaml
    from dask.utils import parse_timedelta

    with open(Path(distributed.__file__).with_name("distributed.yaml")) as f:
        return parse_timedelta(yaml.safe_load(f)["distributed"]["deploy"]["lost-worker-timeout"])


def _spawned_children(me: psutil.Process, but: set[int]) -> list[psutil.Process]:
    found = []
    for child in me.children():
        try:
            if child.pid not in but and "spawn_main" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:  # gone meanwhile
            pass
    return found


def test_a_worker_slow_to_come_back_keeps_its_nanny():
    """A worker process restarted by its nanny may take longer than Dask's lost-worker timeout
    (15 s) to join: a new process at niceness 10 on a busy machine.  Dask's cluster object
    then closed that nanny, and the worker was lost for good (a recycle under load waited out
    its 600 s for it; a server would run on fewer workers, or none).  Here the new process is
    held stopped for longer than that timeout; once it goes on, it joins."""
    cluster, backend = start_local_cluster(1, warm=False)
    me = psutil.Process()
    held: list[psutil.Process] = []
    try:
        [old] = backend.client.run(os.getpid).values()
        [nanny] = cluster.workers.values()
        before = {child.pid for child in me.children()}
        os.kill(old, signal.SIGKILL)
        new = wait_for(lambda: _spawned_children(me, before), timeout=120, interval=0.002)
        assert new, "the nanny started no new worker process"
        for child in new:
            child.suspend()
            held.append(child)
        assert not cluster.scheduler.workers, "the new worker joined before it could be held"
        lost_after = _dasks_lost_worker_seconds()
        closed = wait_for(lambda: nanny.status.name in ("closing", "closed"), timeout=lost_after + 10)
        assert not closed, f"the cluster closed the nanny {lost_after:g} s after its worker left"
        for child in held:
            child.resume()
        held.clear()
        assert wait_for(lambda: len(cluster.scheduler.workers) == 1, timeout=300)
        assert set(backend.client.run(os.getpid).values()) == {child.pid for child in new}
    finally:
        for child in held:
            child.resume()
        backend.close()
        cluster.close()


def test_stopping_the_cluster_is_one_info_line_even_when_a_nanny_kills_its_worker(tmp_path, caplog):
    """serve's end (stop_local_cluster): a worker process still busy 4 s after its nanny asked
    it to exit is killed, with a WARNING that reads as a crash; routine at a stop, so dropped
    (the log's one line is INFO)."""
    from boltzlab.dashboard.cluster import stop_local_cluster

    class Seen(logging.Filter):  # first in line: what the nanny logged, before any filter
        def __init__(self) -> None:
            super().__init__()
            self.records: list[logging.LogRecord] = []

        def filter(self, record: logging.LogRecord) -> bool:
            self.records.append(record)
            return True

    class Passed(logging.Handler):  # what got through the filters: what the server log shows
        def __init__(self) -> None:
            super().__init__(logging.DEBUG)
            self.records: list[logging.LogRecord] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.records.append(record)

    cluster, backend = start_local_cluster(1, warm=False)
    nanny = logging.getLogger("distributed.nanny")
    seen, passed = Seen(), Passed()
    nanny.filters.insert(0, seen)
    nanny.addHandler(passed)
    try:
        started = tmp_path / "started"
        busy = backend.client.submit(hold_the_worker, str(started), pure=False)
        assert wait_for(started.exists, timeout=120), busy
        caplog.set_level(logging.INFO, logger="boltzlab.dashboard.distributed")
        stop_local_cluster(cluster, backend)
    finally:
        nanny.removeFilter(seen)
        nanny.removeHandler(passed)
    assert any("killing" in r.getMessage() for r in seen.records if r.levelno == logging.WARNING), \
        [r.getMessage() for r in seen.records]  # the nanny did kill it...
    assert not [r.getMessage() for r in passed.records if r.levelno >= logging.WARNING]  # ...and said nothing
    ours = [r for r in caplog.records if r.name == "boltzlab.dashboard.distributed"]
    assert [(r.levelno, r.getMessage().split(" in ")[0]) for r in ours] == [
        (logging.INFO, "Stopped the 1 worker process")]


def test_serve_checks_workers_before_starting_anything():
    from boltzlab.dashboard.app import serve

    with pytest.raises(ValueError, match="'workers' parameter of serve must be an int >= 0"):
        serve(workers=-1)
    with pytest.raises(ValueError, match="not both"):
        serve(workers=2, dask_scheduler="tcp://127.0.0.1:1")
    with pytest.raises(ValueError, match="num_procs > 1 needs workers=0"):
        serve(num_procs=2)  # default: one worker per core
    with pytest.raises(ValueError, match="num_procs > 1 needs workers=0"):
        serve(num_procs=2, workers=1)


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "boltzlab", "serve", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_the_workers_flag_is_validated_with_a_message():
    for bad in ("-1", "two", "1.5"):
        out = _cli("--workers", bad)
        assert out.returncode == 2 and "argument --workers" in out.stderr and "Traceback" not in out.stderr
    out = _cli("--workers", "1", "--dask-scheduler", "tcp://127.0.0.1:1")
    assert out.returncode == 2 and "give one of them" in out.stderr and "Traceback" not in out.stderr
    out = _cli("--num-procs", "2")
    assert out.returncode == 2 and "--workers 0" in out.stderr and "Traceback" not in out.stderr
    assert "--workers N" in _cli("--help").stdout


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
def test_a_server_stopped_while_it_starts_logs_no_error():
    """Stopped as soon as its worker process is up, i.e. while the warm-up plugin is being
    registered (or just before or after: each is a stop an operator may make), serve ends
    cleanly: no ERROR from the scheduler or the worker, no traceback, no "failed"."""
    proc, base = start_server("--workers", "1", env=dict(os.environ, OPENBLAS_NUM_THREADS="1"),
                              ready_line="boltzlab serve: the worker processes are up")
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, server_output(proc)
        said = server_output(proc, chars=100_000)
        for bad in ("ERROR", "Traceback", "failed", "exception"):
            assert bad not in said, said
    finally:
        stop_server(proc)


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_stopping_serve_takes_its_worker_processes_down(stop):
    # the server and its worker warm the numba kernels first
    proc, base = start_server("--workers", "1", env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
        workers = [c for c in children if "python" in c.name().lower()]
        assert workers, [c.cmdline() for c in children]
        if stop == signal.SIGTERM:  # with a session, i.e. actors on the worker
            page = urllib.request.urlopen(base + "/", timeout=240).read().decode()
            assert "Boltzmann Lab" in page
        proc.send_signal(stop)
        assert proc.wait(timeout=120) == 0, server_output(proc)  # an orderly stop
        assert wait_for(lambda: not any(_alive(c.pid) for c in children), timeout=60), \
            [(c.pid, c.cmdline()) for c in children if _alive(c.pid)]
    finally:
        stop_server(proc)
