"""boltzlab.engine.warmup: the kernel groups, compiled in parallel processes into numba's cache."""

from __future__ import annotations

import sys

import pytest

from boltzlab.engine import warmup


def test_every_group_names_a_function_that_exists():
    import importlib

    for name, (module, function) in warmup.GROUPS.items():
        assert callable(getattr(importlib.import_module(module), function)), name


def test_compile_kernels_reports_each_group_once_in_order_of_completion():
    calls = []
    seconds = warmup.compile_kernels(["fvbm", "bound"], processes=2, skip_cached=False,  # in processes
                                     on_done=lambda g, s, k, n: calls.append((g, k, n)))
    assert sorted(seconds) == ["bound", "fvbm"] and all(s > 0 for s in seconds.values())
    assert sorted(g for g, _, _ in calls) == ["bound", "fvbm"]
    assert [(k, n) for _, k, n in calls] == [(1, 2), (2, 2)]


def test_unknown_groups_are_refused_with_the_names_there_are():
    with pytest.raises(ValueError, match="No kernel group 'tapp'; the groups are fvbm, fvbm_bound"):
        warmup.compile_kernels(["tapp"])
    with pytest.raises(ValueError, match="No kernel group 'x'"):
        warmup.warm_group("x")


def test_warm_up_of_some_groups_runs_only_those(monkeypatch):
    ran = []
    monkeypatch.setattr(warmup, "warm_group", ran.append)
    warmup.warm_up(["tap", "rbm"])
    assert ran == ["tap", "rbm"]
    warmup.warm_up()
    assert ran[2:] == list(warmup.GROUPS)


def test_a_warmed_group_is_known_cached_and_an_empty_cache_is_not(tmp_path):
    import subprocess
    import sys

    warmup.warm_group("bound")
    assert warmup.is_cached("bound")
    code = "from boltzlab.engine import warmup; print(warmup.is_cached('bound'))"
    env = {**__import__("os").environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "False", out.stderr


def test_cached_groups_start_no_process(monkeypatch):
    import concurrent.futures

    monkeypatch.setattr(warmup, "is_cached", lambda name: True)
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", None)  # would fail if used
    calls = []
    assert warmup.compile_kernels(on_done=lambda g, s, k, n: calls.append((g, s, k, n))) == dict.fromkeys(warmup.GROUPS, 0.0)
    assert calls == [(g, 0.0, k, len(warmup.GROUPS)) for k, g in enumerate(warmup.GROUPS, 1)]


_PARENT = """
import multiprocessing, os, sys, time
from concurrent.futures import ProcessPoolExecutor
from boltzlab.engine.warmup import die_with_parent
pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=die_with_parent,
                           initargs=(os.getpid(),))
child = pool.submit(os.getpid).result()
pool.submit(time.sleep, 600)  # a compile that would outlive its parent
print(child, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl's parent-death signal is Linux's")
def test_compile_processes_end_when_their_parent_is_killed():
    # serve stopped during a first start must not leave its compile processes running
    import os
    import signal
    import subprocess

    from tests.waiting import wait_for

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, text=True, cwd=root)
    try:
        child = int(parent.stdout.readline())
        assert _alive(child)
    finally:
        parent.send_signal(signal.SIGKILL)  # no handler, no atexit: only the kernel can tell the child
        parent.wait(timeout=60)
    assert wait_for(lambda: not _alive(child), timeout=60, interval=0.2)  # with the signal: well under a second


def _alive(pid: int) -> bool:
    """Whether pid runs (a zombie waiting for its reaper counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
