"""serve's process recycling (boltzlab.dashboard.recycling): the supervisor holds the port, a
fresh server takes over from an idle one that grew, and nothing is left behind."""

from __future__ import annotations

import asyncio
import os
import signal
import socket

import psutil
import pytest

from boltzlab.dashboard.recycling import Child, rss_mb
from tests.load.loadtest import serving_pid
from tests.serving import _said, answers, server_output, start_server, stop_server
from tests.waiting import in_own_thread, wait_for

TOOK_OVER = "boltzlab serve: the fresh server process"


def _open_a_lab(base: str) -> None:
    """A browser's session of the FVBM lab, minus drawing: it opens, plays a moment, leaves."""
    from tests.load.loadtest import LABS
    from tests.load.protocol import User

    async def visit() -> None:
        user = User(base, "/fvbm", LABS["FVBM"].plot + ":")
        try:
            await user.open()
            await user.play()
            assert await user.wait_for(lambda: user.plot_changes >= 2, timeout=120), user.errors
        finally:
            await user.close()
        assert not user.errors, user.errors

    in_own_thread(lambda: asyncio.run(visit()))


def test_the_server_learns_its_growth_from_its_start(monkeypatch):
    a, b = socket.socketpair()
    child = Child([], b.fileno(), successor=False)
    assert child.grown(0.0) is None  # not ready: nothing to compare with
    sizes = iter([500.0, 540.0, 620.0, 620.0, 620.0])
    monkeypatch.setattr("boltzlab.dashboard.recycling.rss_mb", lambda: next(sizes))
    child.ready()
    assert a.recv(100) == b"ready\n"
    assert child.grown(50.0) is None  # +40 MB
    assert child.grown(50.0) == pytest.approx(120.0)
    child.ask_recycle(120.0)
    assert a.recv(100) == b"recycle 620 MB, 120 MB above its start\n"
    child.ask_recycle(120.0)  # at its next idle spell again: the supervisor decides
    assert a.recv(100) == b"recycle 620 MB, 120 MB above its start\n"
    a.close()
    assert 0 < rss_mb()


@pytest.mark.slow
def test_an_idle_server_that_grew_is_replaced_on_the_same_port():
    proc, base = start_server("--workers", "1", "--recycle-mb", "1",
                              env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    try:
        first = serving_pid(proc.pid)
        assert first != proc.pid  # the supervisor holds the port, a child serves
        _open_a_lab(base)
        # idle for Visitors.idle_seconds, grown by more than 1 MB: a successor takes over
        assert wait_for(lambda: _said(proc, TOOK_OVER), timeout=240), server_output(proc)
        assert wait_for(lambda: not psutil.pid_exists(first) or psutil.Process(first).status() == "zombie",
                        timeout=120), server_output(proc)
        second = serving_pid(proc.pid)
        assert second not in (first, proc.pid)
        assert answers(base + "/liveness")
        _open_a_lab(base)  # the fresh server serves labs, on the same port
        said = server_output(proc, chars=100_000)
        assert said.count("recycling the server process") >= 1
        for bad in ("ERROR", "Traceback", "failed"):
            assert bad not in said, said
        # one supervisor, one server (with its worker process): the old one left nothing
        servers = [c for c in psutil.Process(proc.pid).children() if c.is_running()]
        assert [c.pid for c in servers] == [serving_pid(proc.pid)], [c.cmdline() for c in servers]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, server_output(proc)
    finally:
        stop_server(proc)


@pytest.mark.slow
def test_a_server_whose_supervisor_was_killed_stops():
    proc, base = start_server("--workers", "0")
    try:
        server = psutil.Process(serving_pid(proc.pid))
        proc.kill()  # no orderly stop: the control pair's end closes
        proc.wait(timeout=30)
        server.wait(timeout=120)
        assert not answers(base + "/liveness")
    finally:
        stop_server(proc)


@pytest.mark.slow
def test_recycle_mb_0_serves_from_one_process():
    proc, base = start_server("--workers", "0", "--recycle-mb", "0")
    try:
        assert serving_pid(proc.pid) == proc.pid
        assert not [c for c in psutil.Process(proc.pid).children() if "serve" in " ".join(c.cmdline())]
    finally:
        stop_server(proc)
