"""Waiting on a condition in a test: poll it, generously, never count on the clock.

``from tests.waiting import wait_for`` (``tests/`` is a namespace package under the
repository root, which pyproject puts on ``sys.path``).
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")

#: every Playwright action in the browser tests (a click, a screenshot, a navigation) waits up
#: to this long (ms) instead of Playwright's 30 s: under a load average of 18 a screenshot took longer
ACTION_TIMEOUT_MS = 120_000


def wait_for(predicate: Callable[[], T], timeout: float = 60.0, interval: float = 0.05) -> T:
    """Call ``predicate`` every ``interval`` s until it returns something truthy, and return that;
    after ``timeout`` s, return its last (falsy) answer, for ``assert wait_for(...)``.

    The timeout is only how long a failing test takes to say so: it is generous because the
    machine may be busy, and a condition that holds returns at once.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()


def wait_until(predicate: Callable[[], T], timeout: float = 90.0, interval: float = 0.1) -> T:
    """``wait_for`` that raises ``AssertionError`` instead of returning a falsy answer."""
    value = wait_for(predicate, timeout, interval)
    if not value:
        raise AssertionError(f"condition not met within {timeout} s")
    return value


def settled(read: Callable[[], T], quiet: float = 1.5, timeout: float = 120.0, interval: float = 0.1) -> T:
    """``read()`` once it has given the same answer for ``quiet`` seconds on end (e.g. a count
    after Pause, when the last tick may still be on its way); ``AssertionError`` if it keeps
    changing for ``timeout`` s (e.g. a pause that does not stop the run)."""
    deadline = time.monotonic() + timeout
    value, since = read(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(interval)
        now = read()
        if now != value:
            value, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return value
    raise AssertionError(f"still changing after {timeout} s: last {value!r}")


def in_own_thread(fn: Callable[[], T], timeout: float = 600.0) -> T:
    """``fn()`` in a thread of its own, its result returned (its exception raised here).

    For code that must run without an asyncio loop or start one (``asyncio.run``): in a full
    run the browser tests' Playwright keeps an event loop running in the main thread."""
    import threading

    out: dict[str, object] = {}

    def target() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            out["error"] = exc

    thread = threading.Thread(target=target, name="test-own-thread", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise AssertionError(f"still running after {timeout} s")
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    return out["value"]  # type: ignore[return-value]


def tick(lab) -> None:
    """One tick of a page's periodic callback, once the lab's runner has built the run a
    change or reset asked for (its thread builds it; the page's next ticks would show it)."""
    assert lab.runner.wait_built(120), "the runner's thread did not build the new run in 120 s"
    lab.on_records(lab.runner.drain())
