"""The default number of worker processes (and of kernel compile processes) follows the CPUs
this process may use, ``dask.system.CPU_COUNT`` (cgroup quota and CPU affinity included), not
the host's ``os.cpu_count()`` (issue 49: a 2-CPU container on a 64-core node would start 64)."""

from __future__ import annotations

import inspect

import dask.system

from boltzlab.dashboard import app, cluster
from boltzlab.dashboard.startup import default_worker_count
from boltzlab.engine import warmup


def test_default_worker_count_is_dasks_cpu_count(monkeypatch):
    monkeypatch.setattr(dask.system, "CPU_COUNT", 3)
    monkeypatch.setattr("os.cpu_count", lambda: 64)  # the host's, which must not count
    assert default_worker_count() == 3
    assert warmup.usable_cpus() == 3
    monkeypatch.setattr(dask.system, "CPU_COUNT", 0)  # (never fewer than one)
    assert default_worker_count() == 1


def test_the_local_cluster_starts_that_many_workers_by_default(monkeypatch):
    monkeypatch.setattr(dask.system, "CPU_COUNT", 2)
    monkeypatch.setattr("os.cpu_count", lambda: 64)
    started = []
    monkeypatch.setattr(cluster, "start_local_cluster", lambda n, **kwargs: (started.append(n), "backend"))
    monkeypatch.setattr(cluster, "install", lambda backend: None)
    cluster.use_local_cluster(None)
    cluster.use_local_cluster(5)
    assert started == [2, 5]
    # serve's default (workers=None) is the same count (serve itself starts a whole server)
    source = inspect.getsource(app.serve)
    assert "workers = default_worker_count()" in source and "cpu_count" not in source


def test_compile_processes_follow_the_usable_cpus(monkeypatch):
    seen = {}

    class Pool:  # records the process count compile_kernels asks for, compiles nothing
        def __init__(self, processes, **kwargs):
            seen["processes"] = processes

        def __enter__(self):
            raise RuntimeError("stop here")

        def __exit__(self, *exc):
            return False

    import concurrent.futures

    monkeypatch.setattr(dask.system, "CPU_COUNT", 2)
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", Pool)
    try:
        warmup.compile_kernels(skip_cached=False)
    except RuntimeError:
        pass
    assert seen["processes"] == 2
