"""After sessions close, the server collects and trims once the burst is over
(``app.collect_when_quiet``, ``app.release_memory``)."""

from __future__ import annotations

import asyncio
import time

from boltzlab.dashboard import app
from tests.waiting import in_own_thread


def test_panels_collection_waits_for_a_quiet_moment(monkeypatch):
    from panel.io import document

    monkeypatch.setattr(document, "GC_DEBOUNCE", document.GC_DEBOUNCE)
    app.collect_when_quiet()
    assert document.GC_DEBOUNCE == app.GC_QUIET_SECONDS >= 30
    assert app.TRIM_DELAY > app.GC_QUIET_SECONDS  # the heap is trimmed after the collection


def test_the_heap_is_trimmed_once_after_the_last_of_a_burst_of_closes(monkeypatch):
    delay = 0.3
    trims: list[float] = []
    monkeypatch.setattr(app, "TRIM_DELAY", delay)
    monkeypatch.setattr(app, "_trim_pending", False)
    monkeypatch.setattr(app, "_trim", lambda: trims.append(time.monotonic()) or
                        monkeypatch.setattr(app, "_trim_pending", False))

    async def burst() -> float:
        closes = []
        for _ in range(3):  # sessions closing one after another, each within the delay
            app.release_memory(None)
            closes.append(time.monotonic())
            await asyncio.sleep(delay / 2)
        deadline = time.monotonic() + 60
        while not trims and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(2 * delay)  # a second trim would have come by now
        return closes[-1]

    last = in_own_thread(lambda: asyncio.run(burst()))  # Playwright may hold this thread's loop
    assert len(trims) == 1
    assert trims[0] - last >= delay - 0.01  # never before the burst was over
