"""SIGTERM stops `boltzlab serve`, its worker processes and any kernel compilation at once, a
first start included (issue 49): before, a SIGTERM while the kernels compiled left the server
and its compile processes running for about two more minutes (a ``systemctl stop`` or
``docker stop`` then ended in SIGKILL).

The issue asks for 5 s.  The bound here is 15 s, for a busy 2-core CI machine; each test
prints the time it measured (``pytest -s``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.serving import ROOT, free_port
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

#: the issue's bound is 5 s; this one allows for a busy CI machine and still proves the point
#: (the compilations alone take minutes)
STOP_BOUND_SECONDS = 15.0


#: an environment variable with a value of the test's own: the server's processes carry it
MARK = "BOLTZLAB_TEST_SIGTERM"


def _serve(log, env: dict[str, str], *options: str) -> subprocess.Popen:
    env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.Popen([sys.executable, "-m", "boltzlab", "serve", "--port", str(free_port()),
                             "--address", "127.0.0.1", *options],
                            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)


class _Tree:
    """Every process seen below (and including) a root, kept even once reparented, and every
    process whose environment carries ``mark`` (the server's and all it starts inherit it: a
    process started after the last look is found too)."""

    def __init__(self, pid: int, mark: str) -> None:
        self.root = psutil.Process(pid)
        self.mark = mark
        self.seen: dict[int, psutil.Process] = {}

    def look(self, everywhere: bool = False) -> list[psutil.Process]:
        try:
            found = [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:
            found = []
        if everywhere:
            for process in psutil.process_iter():
                try:
                    if process.environ().get(MARK) == self.mark:
                        found.append(process)
                except psutil.Error:
                    pass
        for process in found:
            self.seen.setdefault(process.pid, process)
        return found

    def alive(self, everywhere: bool = False) -> list[str]:
        self.look(everywhere)
        left = []
        for process in self.seen.values():
            try:
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    left.append(f"{process.pid} {' '.join(process.cmdline())[:100]}")
            except psutil.NoSuchProcess:
                pass
        return left


def _stop_and_time(proc: subprocess.Popen, tree: _Tree, sig: int = signal.SIGTERM) -> tuple[float, list[str]]:
    tree.look()
    t0 = time.monotonic()
    proc.send_signal(sig)
    gone = wait_for(lambda: not tree.alive(), timeout=180.0, interval=0.05)
    took = time.monotonic() - t0
    return took, (tree.alive(everywhere=True) if gone else tree.alive())


def _said(path, text: str) -> bool:
    return text in path.read_text(errors="replace")


@pytest.mark.parametrize("moment", ["compiling", "compiling, workers up"])
def test_sigterm_while_the_kernels_compile_stops_everything(tmp_path, moment):
    log_path = tmp_path / "serve.log"
    cache = tmp_path / "numba-cache"  # empty: this start compiles every kernel group
    cache.mkdir()
    with open(log_path, "wb") as log:
        proc = _serve(log, {"NUMBA_CACHE_DIR": str(cache), MARK: str(tmp_path)}, "--workers", "1")
        tree = _Tree(proc.pid, str(tmp_path))
        try:
            # compiling: the server said so, and its compile processes run (the supervisor, the
            # server, the compile pool's processes and its resource tracker)
            said = "the worker processes are up" if "workers up" in moment else "preparing the numerical kernels"
            assert wait_for(lambda: _said(log_path, said) and len(tree.look()) >= 5,
                            timeout=240.0), log_path.read_text(errors="replace")[-3000:]
            assert not _said(log_path, "compiled kernels 7 of 7")
            took, left = _stop_and_time(proc, tree)
        finally:
            if proc.poll() is None:
                proc.kill()
            for process in tree.seen.values():  # (only when the test failed)
                try:
                    process.kill()
                except psutil.Error:
                    pass
    print(f"\nSIGTERM during the first start ({moment}): every process gone in {took:.2f} s "
          f"({len(tree.seen)} processes)")
    assert not left, f"still running {took:.0f} s after SIGTERM: {left}"
    assert took < STOP_BOUND_SECONDS, f"took {took:.1f} s"
    assert proc.returncode is not None
    assert not _said(log_path, "Traceback"), log_path.read_text(errors="replace")[-3000:]


def test_sigterm_on_a_warm_server_stops_everything(tmp_path):
    """The kernels in numba's cache already (the suite's warm-up put them there)."""
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as log:
        proc = _serve(log, {MARK: str(tmp_path)}, "--workers", "1")
        tree = _Tree(proc.pid, str(tmp_path))
        try:
            assert wait_for(lambda: _said(log_path, "boltzlab serve: ready"), timeout=240.0), \
                log_path.read_text(errors="replace")[-3000:]
            took, left = _stop_and_time(proc, tree)
        finally:
            if proc.poll() is None:
                proc.kill()
            for process in tree.seen.values():
                try:
                    process.kill()
                except psutil.Error:
                    pass
    print(f"\nSIGTERM on a warm server: every process gone in {took:.2f} s ({len(tree.seen)} processes)")
    assert not left, f"still running {took:.0f} s after SIGTERM: {left}"
    assert took < STOP_BOUND_SECONDS, f"took {took:.1f} s"


def test_stop_compiling_ends_a_compilation_under_way(tmp_path, monkeypatch):
    """In one process: ``compile_kernels`` (a fresh cache, so it compiles) raises soon after
    ``stop_compiling``, its processes gone, instead of returning minutes later."""
    import threading

    from boltzlab.engine import warmup

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))  # the spawned compile processes read it
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["seconds"] = warmup.compile_kernels(["tap", "frankwolfe"], processes=2, skip_cached=False)
        except BaseException as exc:  # noqa: BLE001 - what the test looks at
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def pool_up() -> bool:  # its two processes (this process may have other children: a suite's servers)
        pools = list(warmup._COMPILING)
        return len(pools) == 1 and len(getattr(pools[0], "_processes", None) or {}) >= 2

    assert wait_for(pool_up, timeout=120.0)
    compilers = [psutil.Process(pid) for pid in list(next(iter(warmup._COMPILING))._processes)]
    t0 = time.monotonic()
    assert warmup.stop_compiling() == 2
    thread.join(60.0)
    took = time.monotonic() - t0
    assert not thread.is_alive() and "error" in outcome and "seconds" not in outcome
    assert wait_for(lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in compilers),
                    timeout=60.0)
    assert not warmup._COMPILING
    print(f"\ncompile_kernels returned {took:.2f} s after stop_compiling ({type(outcome['error']).__name__})")
    assert took < STOP_BOUND_SECONDS


def test_a_stop_before_the_pool_starts_no_compilation(tmp_path, monkeypatch):
    """A SIGTERM in a first start's first second, before the compile processes exist: the
    start's stop event makes compile_kernels end its pool as soon as it has one."""
    import threading

    from boltzlab.engine import warmup

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    stop = threading.Event()
    stop.set()
    t0 = time.monotonic()
    with pytest.raises(Exception) as err:
        warmup.compile_kernels(["tap", "frankwolfe"], processes=2, skip_cached=False, stop=stop)
    assert time.monotonic() - t0 < STOP_BOUND_SECONDS and not warmup._COMPILING
    print(f"\ncompile_kernels with its stop already set: {type(err.value).__name__} "
          f"after {time.monotonic() - t0:.2f} s")
