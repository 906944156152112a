"""Jobs: a newer job under a key supersedes the older one, even when both finished."""

from __future__ import annotations

from concurrent.futures import Future

from boltzlab.dashboard import jobs


def finished(value: object) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


def test_a_job_superseded_by_an_earlier_callback_of_the_same_poll_is_dropped(monkeypatch):
    """Two jobs finish before a tick; the first's ``then`` submits a newer job under the
    second's key (the TAP lab: a finished Isomap fit submits the data map again).  The second
    must be dropped, and the newer job kept: poll once handed the second over after its
    supersede had cancelled it (on Dask: a FutureCancelledError drawn as "Could not compute
    this") and deleted the newer job's entry (its view said "Computing…" for ever)."""
    results = iter(["fit", "old map", "new map"])
    monkeypatch.setattr(jobs, "submit", lambda fn, *args: finished(next(results)))
    drawn: list[str] = []
    errors: list[BaseException] = []
    pending = jobs.Jobs()

    def fitted(result: str) -> None:
        drawn.append(result)
        pending.submit("map", str, then=drawn.append, error=errors.append)

    pending.submit("fit", str, then=fitted, error=errors.append)
    pending.submit("map", str, then=drawn.append, error=errors.append)
    assert pending.poll() == 1  # the fit; the old map was superseded in its callback
    assert drawn == ["fit"] and not errors and pending.running("map")
    assert pending.poll() == 1
    assert drawn == ["fit", "new map"] and not errors and not pending.running()
