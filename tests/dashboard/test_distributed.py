"""Trainers as Dask actors (``boltzlab serve --dask-scheduler``), against a LocalCluster.

The cluster has one worker *process* (not threads): then a trainer really is pickled to
another interpreter and Records really come back over TCP, as on a real cluster.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import os
import subprocess
import sys
import time
import urllib.request

import distributed  # a core dependency (pyproject.toml): imported, never skipped
import numpy as np
import pytest

from boltzlab import engine
from boltzlab.dashboard import runner as runner_module
from boltzlab.dashboard.cluster import use_dask
from boltzlab.dashboard.distributed import DaskBackend, DaskUnavailable, Fetched, RemoteTrainer
from boltzlab.dashboard.labs.fvbm_setup import load_data, monotone_guaranteed, trainer_factory
from boltzlab.engine.fvbm import FVBMTrainer
from boltzlab.engine.stepping import Record, Trainer
from fakes import FakeTrainer
from tests.serving import start_server, stop_server
from tests.waiting import in_own_thread, tick, wait_for

WALL_TIME_KEYS = {"wall_time", "elapsed"}


@pytest.fixture(scope="module")
def cluster():
    engine.warm_up()  # the local side builds the trainers (numba); the worker reuses the on-disk cache
    # an external cluster as docs/serving.md asks for it: mutual TLS (here with made-up credentials)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  protocol="tls://", security=distributed.Security.temporary(),
                                  dashboard_address=None) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def backend(cluster):
    backend = DaskBackend(cluster.scheduler_address, timeout=60, security=cluster.security)
    yield backend
    backend.close()


@pytest.fixture
def dask_runners(backend, monkeypatch, make_runner):
    """``make_runner`` (conftest) with ``BACKEND`` set to the Dask backend for one test
    (monkeypatch restores None once the runners are closed)."""
    monkeypatch.setattr(runner_module, "BACKEND", backend)
    return make_runner


def small_factory(**kwargs):
    """An FVBM (d = 5) on simulated data, the way the FVBM lab builds it."""
    data = load_data("simulated", d=5, n=500, seed=1)
    return trainer_factory(data, **kwargs)


def assert_same(remote: Record, local: Record) -> None:
    assert isinstance(remote, Record)
    keys = set(local.scalars) - WALL_TIME_KEYS
    assert keys == set(remote.scalars) - WALL_TIME_KEYS
    assert {k: remote.scalars[k] for k in keys} == {k: local.scalars[k] for k in keys}
    assert set(remote.arrays) == set(local.arrays)
    for key, value in local.arrays.items():
        assert isinstance(remote.arrays[key], np.ndarray)
        np.testing.assert_array_equal(remote.arrays[key], value)


def n_actors(backend: DaskBackend) -> int:
    return sum(backend.client.run(lambda dask_worker: len(dask_worker.state.actors)).values())


def test_remote_fvbm_gives_exactly_the_local_records(backend):
    build = small_factory(tol=1e-6)
    local = build()["BSLM"]
    remote = backend(build())["BSLM"]
    assert isinstance(remote, RemoteTrainer) and remote.trainer_class is FVBMTrainer
    for _ in range(3):
        assert_same(remote.step(), local.step())
    for k in (1, 4, 16):
        got, want = remote.steps(k), local.steps(k)
        assert len(got) == len(want) == k
        for g, w in zip(got, want):
            assert_same(g, w)
    while not local.done:  # to the stopping rule: done/status/message follow without a round trip
        got, want = remote.steps(64), local.steps(64)
        assert [r.scalars["sweep"] for r in got] == [r.scalars["sweep"] for r in want]
        assert_same(got[-1], want[-1])
        assert (remote.done, remote.status, remote.message) == (local.done, local.status, local.message)
    assert remote.done and remote.status == "converged"
    with pytest.raises(RuntimeError, match="is done"):  # the worker's exception, re-raised here
        remote.step()


def test_an_actor_handle_made_where_no_client_is_current_is_bound_to_the_backends(backend):
    """The backend's client is not Dask's default: a handle made in a thread where no client is
    current is unbound, and its calls failed ("type object 'TrainerActor' has no attribute
    '_io_loop'"); ``bind_actor`` attaches it to the backend's client."""
    from concurrent.futures import ThreadPoolExecutor

    from distributed.actor import Actor

    from boltzlab.dashboard.distributed import TrainerActor, bind_actor

    build = small_factory(tol=1e-6)
    local, remote = build()["BSLM"], backend(build())["BSLM"]

    def in_a_fresh_thread():
        handle = Actor(TrainerActor, remote._actor._address, remote._actor.key)
        assert handle._client is None and handle._worker is None  # unbound, as in the failure
        bind_actor(handle, backend.client, remote._future)
        remote._actor = handle
        return remote.step()

    with ThreadPoolExecutor(1) as pool:
        assert_same(pool.submit(in_a_fresh_thread).result(timeout=120), local.step())


def test_state_dict_round_trip_continues_exactly(backend):
    build = small_factory(tol=1e-6, init="random", seed=3)
    remote = backend(build())["BSLM"]
    remote.steps(5)
    state = remote.state_dict()
    assert int(state["sweep"]) == 5 and isinstance(state["M"], np.ndarray)
    ahead = [remote.step() for _ in range(3)]
    # the same state loaded into a fresh actor and into a local trainer continues identically
    other = backend(build())["BSLM"]
    local = build()["BSLM"]
    other.load_state_dict(state)
    local.load_state_dict(state)
    for want in ahead:
        assert_same(other.step(), want)
        assert_same(local.step(), want)
    # loading a finished run's state makes the stand-in done without asking
    finished = build()["BSLM"]
    finished.run()
    other.load_state_dict(finished.state_dict())
    assert other.done and other.status == finished.status and other.message == finished.message


def test_attribute_reads_as_the_fvbm_lab_does_them(backend):
    build = small_factory(race_mus=[0.5, 8.0])
    local = build()
    remote = backend(build())
    assert list(remote) == list(local)
    for name in local:
        assert isinstance(remote[name], Trainer)  # the runtime protocol: done, step, state_dicts
        np.testing.assert_array_equal(remote[name].M, local[name].M)
        assert monotone_guaranteed(remote[name]) == monotone_guaranteed(local[name])
        assert hasattr(remote[name], "steps")
    assert [monotone_guaranteed(t) for t in remote.values()] == [True, True, False, True, True, False]
    bslm = remote["BSLM"]
    assert bslm.algorithm == "bslm" and bslm.mu == 1.0 and bslm.d == 5 and bslm.label == "BSLM"
    assert getattr(bslm, "no_such_attribute", 7) == 7
    with pytest.raises(AttributeError, match="no_such_attribute"):
        bslm.no_such_attribute
    with pytest.raises(TypeError, match="is a method"):  # would run on a local copy: refused
        bslm.run
    # a trainer without steps(k) gets a stand-in without it, so the runner does not batch it
    plain = backend({"fake": FakeTrainer()})["fake"]
    assert not hasattr(plain, "steps") and plain.step()["sweep"] == 1 and plain.sweep == 1


def test_a_build_is_built_on_a_worker_and_only_the_build_travels(backend):
    def build():
        trainer = FakeTrainer()
        trainer.built_in = os.getpid()
        return {"a": trainer}

    remote = backend.build(runner_module.Build(("a",), build))["a"]
    assert isinstance(remote, RemoteTrainer) and remote.trainer_class is FakeTrainer
    assert not hasattr(remote, "steps") and (remote.done, remote.status) == (False, "running")
    assert remote.built_in != os.getpid() and remote.built_in in backend.client.run(os.getpid).values()
    assert remote.step()["sweep"] == 1 and remote.sweep == 1


@pytest.mark.parametrize("lab", ["TAP", "Frank-Wolfe"])
def test_an_image_labs_build_carries_a_bundled_sets_key_not_its_rows(lab):
    """What :meth:`DaskBackend.build` sends: MNIST's training rows alone pickle to 22 MB."""
    import cloudpickle

    from boltzlab.dashboard.labs import frankwolfe_setup, tap_setup

    if lab == "TAP":
        build = tap_setup.trainer_factory("mnist", n_hidden=50)
    else:
        build = frankwolfe_setup.fw_factory("mnist", reg=1e-3, bias_lr=0.1, samples=100, max_hidden=20)
    assert len(cloudpickle.dumps(build)) < 100_000
    assert set(build()) == set(build.names)  # and it still builds, loading the set itself


def test_a_build_that_raises_on_the_worker_is_refused_as_on_the_runners_thread(dask_runners):
    runner = dask_runners(lambda: {"a": FakeTrainer()})
    runner.step_once()
    assert runner.wait_idle(60)
    old, generation = runner.trainers["a"], runner.generation

    def build():
        raise ValueError("The 'mu' parameter must be > 0. Got -1.")

    runner.reset(runner_module.Build(("b",), build))
    assert runner.wait_started(120)
    refused = runner.take_refusal()
    assert isinstance(refused, ValueError) and "mu" in str(refused)
    assert runner.names == ["a"] and runner.trainers["a"] is old and runner.generation == generation + 2
    assert runner.states["a"].steps == 1
    runner.step_once()
    assert runner.wait_idle(60)
    assert [(n, r["sweep"]) for n, r in runner.drain()] == [("a", 2)]


def test_runner_plays_pauses_steps_and_resets_on_the_cluster(backend, dask_runners):
    build = small_factory(tol=0.0, race_mus=[0.5])
    runner = dask_runners(lambda: {n: t for n, t in build().items() if n in ("BSLM", "GA μ=0.5")})
    assert runner.wait_started(120)  # the runner's thread ships them, not the caller
    assert all(isinstance(t, RemoteTrainer) for t in runner.trainers.values())
    runner.play()
    assert wait_for(lambda: all(s.steps >= 20 for s in runner.states.values()))
    runner.pause()
    assert runner.wait_idle(10.0)
    records = runner.drain()
    counts = {n: runner.states[n].steps for n in runner.trainers}
    # a fast machine can outrun the bounded buffer: the oldest Records may be dropped (and
    # counted), never the newest, and nothing is lost without being counted
    assert len(records) + runner.dropped == sum(counts.values())
    assert all(isinstance(r, Record) for _, r in records)
    for name, count in counts.items():
        sweeps = [r.scalars["sweep"] for n, r in records if n == name]
        assert sweeps == list(range(count - len(sweeps) + 1, count + 1)), name
    time.sleep(0.2)
    assert runner.drain() == []  # paused means paused
    runner.step_once()
    assert runner.wait_idle(10.0)
    once = runner.drain()
    assert sorted((n, r.scalars["sweep"]) for n, r in once) == sorted((n, c + 1) for n, c in counts.items())
    # a checkpoint through the actors resumes exactly
    states, history, _ = runner.snapshot()
    runner.step_once()
    runner.wait_idle(10.0)
    after = {n: r for n, r in runner.drain()}
    runner.restore(states, history)
    runner.step_once()
    runner.wait_idle(10.0)
    for name, record in runner.drain():
        assert_same(record, after[name])
    # reset: fresh actors, and the replaced ones are released on the worker
    gc.collect()  # the actors of earlier tests are gone too: only this runner's two are left
    assert wait_for(lambda: n_actors(backend) == 2), n_actors(backend)
    before = 2
    old = dict(runner.trainers)
    for _ in range(3):
        runner.reset()
    assert runner.wait_started(120)
    assert all(t not in old.values() for t in runner.trainers.values())
    assert runner.drain() == [] and all(s.steps == 0 for s in runner.states.values())
    del old
    gc.collect()
    # at most the generation stepped last is still pinned (by the runner thread's last round)
    assert wait_for(lambda: n_actors(backend) <= before + 2), n_actors(backend)
    runner.step_once()
    assert runner.wait_idle(10.0)
    assert sorted(r.scalars["sweep"] for _, r in runner.drain()) == [1, 1]
    gc.collect()
    assert wait_for(lambda: n_actors(backend) == before), (n_actors(backend), before)


def test_a_failing_remote_step_stops_only_that_trainer(dask_runners):
    runner = dask_runners(lambda: {"bad": FakeTrainer(fail_at=2), "good": FakeTrainer(max_sweeps=3)})
    for _ in range(3):
        runner.step_once()
        assert runner.wait_idle(10.0)
    assert runner.states["bad"].status == "error" and "kernel exploded" in runner.states["bad"].message
    # the good one stopped by its own rule, read from the cached status of its last reply
    assert runner.states["good"].status == "max_sweeps" and runner.states["good"].message == "stopped at max_sweeps"


class _RemoteJob:
    """Stands in for a job's Dask future: finished or not, and whether it was cancelled."""

    def __init__(self, finished: bool) -> None:
        self.finished, self.cancelled, self.callbacks = finished, False, []

    def done(self) -> bool:
        return self.finished or self.cancelled

    def add_done_callback(self, callback) -> None:
        self.callbacks.append(callback)

    def result(self):
        if self.cancelled:
            raise concurrent.futures.CancelledError()
        return 42

    def cancel(self) -> None:
        self.cancelled = True


@pytest.mark.parametrize("finished", [False, True])
def test_a_superseded_job_is_cancelled_on_the_cluster_only_while_it_runs(finished):
    """A job still running is cancelled on the cluster; one that has finished is only dropped
    here: cancelling its key while its result was being gathered made the scheduler log an
    ERROR ("Couldn't gather keys ... forgotten") for a routine supersession."""
    remote = _RemoteJob(finished)
    job = Fetched(remote)
    assert job.cancel() and job.cancelled()
    assert remote.cancelled is (not finished)
    for callback in remote.callbacks:  # the fetch that was under way finds the job dropped
        callback(remote)
    assert job.cancelled()


def test_the_fvbm_lab_steps_and_draws_on_the_cluster(dask_runners):
    from boltzlab.dashboard.labs.fvbm import FVBMLab

    lab = FVBMLab()
    try:
        assert lab.runner.wait_started(120)
        assert all(isinstance(t, RemoteTrainer) for t in lab.runner.trainers.values())
        lab._step()
        assert lab.runner.wait_idle(20.0)
        tick(lab)
        lab._status_time = 0.0
        lab.on_records([])
        assert lab.logpl.n_points("BSLM/log_pl") == 1
        assert lab.counter_pane.object == "Sweep 1"
        assert lab._last_arrays["BSLM"]["M"].shape == (10, 10) and lab._sweeps["BSLM"] == 1
        lab.widgets["race_mus"].value = "0.5, 8"
        lab.widgets["mode"].value = "Race"
        assert lab.runner.wait_started(120)
        trainers = lab.runner.trainers
        assert len(trainers) == 6 and all(isinstance(t, RemoteTrainer) for t in trainers.values())
        assert [monotone_guaranteed(trainers[n]) for n in trainers] == [True, True, False, True, True, False]
        lab._first_decrease = {"GA μ=8": 2}
        lab._sweeps = {n: 5 for n in trainers}
        lab.refresh_status()
        assert lab.monotone.level == "warn" and "GA μ=8 at sweep 2" in lab.monotone.details  # (which run: on hover)
    finally:
        lab.runner.close()


def test_use_dask_sets_the_backend(cluster, monkeypatch):
    from boltzlab.dashboard import jobs

    monkeypatch.setattr(runner_module, "BACKEND", None)
    monkeypatch.setattr(jobs, "EXECUTOR", None)
    backend = use_dask(cluster.scheduler_address, timeout=30, security=cluster.security)
    try:
        assert runner_module.BACKEND is backend
        assert jobs.EXECUTOR == backend.submit  # the labs' analysis jobs run on the cluster too
        assert jobs.submit(os.getpid).result(timeout=60) != os.getpid()
        # the workers were warmed (and every worker joining later will be)
        assert all(backend.client.run(lambda dask_worker: "boltzlab-warm-up" in dask_worker.plugins).values())
    finally:
        backend.close()
    assert runner_module.BACKEND is None and jobs.EXECUTOR is None  # closing undoes it


def test_an_unreachable_scheduler_is_a_clear_error():
    with pytest.raises(DaskUnavailable, match=r"tcp://127\.0\.0\.1:1.* within 1 s"):
        DaskBackend("tcp://127.0.0.1:1", timeout=1)
    with pytest.raises(DaskUnavailable, match="not a Dask scheduler address"):
        DaskBackend("no-port-here", timeout=1)


def _serve(*args: str, env_extra: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "boltzlab", "serve", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_serve_with_an_unreachable_scheduler_exits_with_a_message_not_a_traceback():
    # Dask's own connect-timeout setting keeps this short
    # (the web port a free one: serve's supervisor listens before its server connects)
    out = _serve("--dask-scheduler", "tcp://127.0.0.1:1", "--dask-insecure", "--port", "0",
                 env_extra={"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "1s"})
    assert out.returncode == 2
    assert "Cannot reach the Dask scheduler at 'tcp://127.0.0.1:1' within 1 s" in out.stderr
    assert "Traceback" not in out.stderr
    # without --dask-insecure a plain tcp:// scheduler is refused before anything connects
    out = _serve("--dask-scheduler", "tcp://127.0.0.1:1", "--port", "0")
    assert out.returncode == 2 and "--dask-insecure" in out.stderr and "Traceback" not in out.stderr
    out = _serve("--dask-tls-cert", "x.pem", "--port", "0")
    assert out.returncode == 2 and "external cluster" in out.stderr and "Traceback" not in out.stderr
    out = _serve("--dask-scheduler", "tcp://127.0.0.1:1", "--num-procs", "2")
    assert out.returncode == 2 and "--num-procs 1" in out.stderr and "Traceback" not in out.stderr
    assert "--dask-scheduler" in _serve("--help").stdout


@pytest.mark.slow
def test_a_served_app_trains_its_sessions_on_the_cluster(cluster, backend, tmp_path):
    tls = []  # the cluster's credentials as the PEM files an administrator hands serve
    for flag, text in (("--dask-tls-ca-file", cluster.security.tls_ca_file),
                       ("--dask-tls-cert", cluster.security.tls_client_cert),
                       ("--dask-tls-key", cluster.security.tls_client_key)):
        path = tmp_path / (flag.rsplit("-", 1)[1] + ".pem")
        path.write_text(text)
        tls += [flag, str(path)]
    proc, base = start_server("--dask-scheduler", cluster.scheduler_address, *tls,
                              env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    try:
        before = n_actors(backend)
        page = urllib.request.urlopen(base + "/", timeout=240).read().decode()
        assert "Boltzmann Lab" in page  # a page nobody opens builds no lab

        async def opened_session_trains_on_the_cluster() -> bool:
            from tests.load.loadtest import LABS as LOAD_LABS
            from tests.load.protocol import User

            user = User(base, "/", LOAD_LABS["FVBM"].plot + ":")  # a browser's session, minus drawing
            try:
                await user.open()  # the page's lab is built once the browser has the page
                # the session's trainers now live on the worker
                return await asyncio.to_thread(wait_for, lambda: n_actors(backend) > before, 60)
            finally:
                await user.close()

        # (in a thread of its own: Playwright may hold this thread's event loop)
        assert in_own_thread(lambda: asyncio.run(opened_session_trains_on_the_cluster()))
    finally:
        stop_server(proc)
