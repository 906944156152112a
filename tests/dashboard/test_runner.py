"""Runner semantics without a browser or a server."""

from __future__ import annotations

import threading
import time

import pytest

from boltzlab.dashboard.runner import Runner
from boltzlab.engine.stepping import Record
from fakes import BatchTrainer, DivergingTrainer, FakeTrainer
from tests.waiting import wait_for


def sweeps(records, name="a"):
    return [r["sweep"] for n, r in records if n == name]


def test_starts_paused_and_step_advances_exactly_one(make_runner):
    trainer = FakeTrainer()
    runner = make_runner(lambda: {"a": trainer})
    time.sleep(0.1)
    assert trainer.calls == 0 and runner.drain() == []
    runner.step_once()
    assert runner.wait_idle()
    assert sweeps(runner.drain()) == [1]
    runner.step_once()
    runner.step_once()
    assert runner.wait_idle()
    assert sweeps(runner.drain()) == [2, 3]
    assert runner.states["a"].steps == 3
    assert not runner.playing


def test_play_runs_in_worker_thread_and_pause_stops(make_runner):
    trainer = FakeTrainer(delay=0.001)
    runner = make_runner(lambda: {"a": trainer})
    runner.play()
    assert wait_for(lambda: trainer.sweep >= 20)
    assert threading.get_ident() not in trainer.thread_ids
    runner.pause()
    assert runner.wait_idle(1.0)
    stopped = trainer.sweep
    time.sleep(0.2)
    assert trainer.sweep == stopped
    got = sweeps(runner.drain())
    assert got == list(range(1, stopped + 1))


def test_pause_takes_effect_after_the_step_in_flight(make_runner):
    """Counted in steps, not seconds (a busy machine may take any time): after Pause at most
    the one step already running finishes, and nothing steps while paused."""
    trainer = FakeTrainer(delay=0.05)  # a slow step: one is usually in flight at the pause
    runner = make_runner(lambda: {"a": trainer})
    runner.play()
    assert wait_for(lambda: trainer.sweep >= 2)
    at_pause = trainer.calls
    runner.pause()
    assert runner.wait_idle(60)
    assert trainer.calls <= at_pause + 1
    calls = trainer.calls
    runner.step_once()  # the runner still answers: one step, then idle again
    assert runner.wait_idle(60) and trainer.calls == calls + 1 and not runner.playing


def test_step_while_playing_pauses_then_steps_once(make_runner):
    trainer = FakeTrainer(delay=0.002)
    runner = make_runner(lambda: {"a": trainer})
    runner.play()
    assert wait_for(lambda: trainer.sweep >= 3)
    runner.step_once()
    assert runner.wait_idle()
    assert not runner.playing
    before = trainer.sweep
    runner.step_once()
    assert runner.wait_idle()
    assert trainer.sweep == before + 1


def test_speed_limit_and_validation(make_runner):
    trainer = FakeTrainer()
    runner = make_runner(lambda: {"a": trainer})
    runner.set_speed(5.0)
    t0 = time.monotonic()
    runner.play()
    assert wait_for(lambda: trainer.sweep >= 3, timeout=60)
    runner.pause()
    assert runner.wait_idle(60)
    elapsed = time.monotonic() - t0
    # a limit bounds the rate from above whatever the load: at 5/s no more than 1 + 5 t steps
    # (unlimited, this trainer makes thousands in the time the three took)
    assert 3 <= trainer.sweep <= 2 + 5 * elapsed
    with pytest.raises(ValueError, match="steps_per_second"):
        runner.set_speed(0)
    runner.set_speed(None)
    assert runner.speed is None


def test_reset_builds_fresh_trainers_and_clears_buffer(make_runner):
    built = []

    def factory():
        built.append(FakeTrainer(delay=0.001))
        return {"a": built[-1]}

    runner = make_runner(factory)
    runner.play()
    assert wait_for(lambda: built[0].sweep >= 5)
    runner.reset()
    assert len(built) == 2 and runner.trainers["a"] is built[1]
    assert not runner.playing
    runner.wait_idle()
    assert runner.drain() == []
    assert runner.states["a"].steps == 0
    runner.step_once()
    runner.wait_idle()
    assert sweeps(runner.drain()) == [1]


def test_reset_with_bad_factory_keeps_old_trainers(make_runner):
    trainer = FakeTrainer()
    runner = make_runner(lambda: {"a": trainer})

    def bad():
        raise ValueError("The 'mu' parameter must be > 0. Got -1.")

    with pytest.raises(ValueError, match="mu"):
        runner.reset(bad)
    assert runner.trainers["a"] is trainer
    runner.step_once()
    runner.wait_idle()
    assert trainer.sweep == 1


def test_buffer_is_bounded(make_runner):
    trainer = FakeTrainer(max_sweeps=500)
    runner = make_runner(lambda: {"a": trainer}, buffer_size=50)
    runner.play()
    assert wait_for(lambda: not runner.active)
    records = runner.drain()
    assert len(records) == 50
    assert sweeps(records) == list(range(451, 501))  # the newest are kept
    assert runner.dropped == 450


def test_worker_stops_when_trainer_done(make_runner):
    trainer = FakeTrainer(max_sweeps=7)
    runner = make_runner(lambda: {"a": trainer})
    runner.play()
    assert wait_for(lambda: not runner.playing)
    time.sleep(0.1)
    assert trainer.calls == 7
    assert runner.states["a"].status == "max_sweeps"
    assert runner.states["a"].message == "stopped at max_sweeps"
    runner.play()  # nothing left to do: play is refused
    assert not runner.playing
    runner.step_once()
    runner.wait_idle()
    assert trainer.calls == 7


def test_failing_step_surfaces_as_message(make_runner):
    trainer = FakeTrainer(fail_at=4)
    runner = make_runner(lambda: {"a": trainer})
    runner.play()
    assert wait_for(lambda: not runner.active)
    state = runner.states["a"]
    assert state.status == "error"
    assert "RuntimeError" in state.message and "kernel exploded" in state.message
    assert sweeps(runner.drain()) == [1, 2, 3]
    assert not runner.playing
    assert runner._thread.is_alive()  # the worker survives; reset works
    runner.reset(lambda: {"a": FakeTrainer()})
    runner.step_once()
    runner.wait_idle()
    assert sweeps(runner.drain()) == [1]


def test_race_round_robin_and_independent_divergence(make_runner):
    trainers = {"bslm": FakeTrainer(max_sweeps=30), "ga 2.5": DivergingTrainer(diverge_at=5),
                "ga nan": FakeTrainer(diverge_at=8)}
    runner = make_runner(lambda: trainers, watch="log_pl")
    runner.step_once()
    runner.wait_idle()
    assert sorted(n for n, _ in runner.drain()) == sorted(trainers)  # one step each
    runner.play()
    assert wait_for(lambda: not runner.active)
    assert runner.states["ga 2.5"].status == "diverged"
    assert runner.states["ga 2.5"].message == "parameters exploded"
    assert runner.states["ga nan"].status == "diverged"
    assert "non-finite" in runner.states["ga nan"].message
    assert trainers["ga 2.5"].calls == 5
    assert trainers["ga nan"].calls == 8
    assert trainers["bslm"].sweep == 30  # kept running after the others stopped
    assert runner.states["bslm"].status == "max_sweeps"


def test_close_stops_thread(make_runner):
    trainer = FakeTrainer(delay=0.001)
    runner = make_runner(lambda: {"a": trainer})
    runner.play()
    assert wait_for(lambda: trainer.sweep > 2)
    runner.close()
    assert not runner._thread.is_alive()
    calls = trainer.calls
    time.sleep(0.1)
    assert trainer.calls == calls
    runner.play()
    assert not runner.playing


def test_batches_grow_while_playing_and_single_steps_stay_single(make_runner):
    trainer = BatchTrainer(delay=0.0005)
    runner = make_runner(lambda: {"a": trainer})
    runner.step_once()
    runner.wait_idle()
    assert trainer.calls == 1 and trainer.batches == []  # a single step is a step()
    runner.play()
    assert wait_for(lambda: trainer.sweep >= 300)
    runner.pause()
    runner.wait_idle()
    assert max(trainer.batches) > 1
    assert max(trainer.batches) <= runner.max_batch
    got = sweeps(runner.drain())
    assert got == list(range(1, trainer.sweep + 1))  # nothing lost or repeated


def test_speed_limit_disables_batching(make_runner):
    trainer = BatchTrainer()
    runner = make_runner(lambda: {"a": trainer})
    runner.set_speed(50.0)
    runner.play()
    assert wait_for(lambda: trainer.sweep >= 3)
    runner.pause()
    runner.wait_idle()
    assert trainer.batches and set(trainer.batches) == {1}  # playing: steps(1), never more


def test_the_server_wide_cap_refuses_a_further_play_and_frees_slots_on_pause_finish_and_close():
    from boltzlab.dashboard.runner import SLOTS, ServerBusy, play_or_tell

    SLOTS.set_limit(2)
    runners = [Runner(lambda: {"t": FakeTrainer(delay=0.001)}) for _ in range(3)]
    try:
        runners[0].play()
        runners[1].play()
        runners[1].play()  # playing again does not take a second slot
        assert SLOTS.in_use == 2
        with pytest.raises(ServerBusy, match="server is busy"):
            runners[2].play()
        assert not runners[2].playing
        assert "server is busy" in play_or_tell(runners[2])
        runners[2].step_once()  # single steps are not capped
        assert runners[2].wait_idle()
        runners[0].pause()
        assert SLOTS.in_use == 1
        assert play_or_tell(runners[2]) is None and runners[2].playing
        runners[1].close()
        runners[2].reset()
        assert SLOTS.in_use == 0
    finally:
        for r in runners:
            r.close()
        SLOTS.set_limit(None)
    with pytest.raises(ValueError, match="cap"):
        SLOTS.set_limit(0)


def test_a_finished_run_frees_its_slot():
    from boltzlab.dashboard.runner import SLOTS

    SLOTS.set_limit(1)
    runner = Runner(lambda: {"t": FakeTrainer(max_sweeps=3)})
    other = Runner(lambda: {"t": FakeTrainer(max_sweeps=3)})
    try:
        runner.play()
        assert runner.wait_idle()  # runs to its limit, then stops playing
        assert SLOTS.in_use == 0
        other.play()
    finally:
        runner.close()
        other.close()
        SLOTS.set_limit(None)


# --------------------------------------------------------------- nothing shown is stale
class SparseArraysTrainer(FakeTrainer):
    """Only every ``arrays_every``-th Record carries the arrays; the others are scalars."""

    def __init__(self, *, arrays_every: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.arrays_every = arrays_every

    def step(self) -> Record:
        record = super().step()
        return record if self.sweep % self.arrays_every == 0 else Record(dict(record.scalars))


def shown(records):
    """``[(name, sweep, carries M)]``: what a drain delivered, in its order."""
    return [(n, r["sweep"], "M" in r) for n, r in records]


def test_a_tiny_buffer_never_loses_a_runs_final_record_or_its_newest_arrays(make_runner):
    # "early" converges at sweep 5, its last Record carrying M; "long" streams 400 sweeps
    # (M every 30th) through a buffer of 3 and nobody drains until the race is over
    trainers = {"early": FakeTrainer(max_sweeps=5), "long": SparseArraysTrainer(arrays_every=30, max_sweeps=400)}
    runner = make_runner(lambda: trainers, buffer_size=3)
    runner.play()
    assert runner.wait_idle(60.0) and not runner.active
    records = runner.drain()
    assert shown(records) == [("early", 5, True), ("long", 390, True),  # kept aside, then the buffer
                              ("long", 398, False), ("long", 399, False), ("long", 400, False)]
    assert runner.latest("early")["M"][0, 0] == 5.0  # the converged run's heatmap is not stale
    assert runner.states["early"].status == runner.states["long"].status == "max_sweeps"
    assert runner.dropped == 405 - 5  # thinned scalars are counted, rescued Records are not
    assert runner.drain() == []  # delivered once


def test_each_drain_of_a_slow_consumer_has_every_runs_newest_record_and_arrays(make_runner):
    trainers = {"a": SparseArraysTrainer(arrays_every=20), "b": SparseArraysTrainer(arrays_every=1000),
                "c": FakeTrainer(max_sweeps=10)}
    runner = make_runner(lambda: trainers, buffer_size=4)
    expected = [  # oldest first; a run that produced nothing since the last drain is absent
        [("c", 10, True), ("a", 40, True), ("a", 49, False), ("b", 49, False), ("a", 50, False), ("b", 50, False)],
        [("a", 99, False), ("b", 99, False), ("a", 100, True), ("b", 100, False)],
        [("a", 140, True), ("a", 149, False), ("b", 149, False), ("a", 150, False), ("b", 150, False)],
    ]
    for want in expected:
        for _ in range(50):
            runner.step_once()  # one round of every active run each
        assert runner.wait_idle(60.0)
        assert shown(runner.drain()) == want
    assert runner.dropped == (110 - 6) + (100 - 4) + (100 - 5)
    assert runner.latest("a")["sweep"] == 150 and runner.latest("c")["sweep"] == 10
    assert runner.latest("nobody") is None
    runner.reset()  # a new generation: nothing of the old one is delivered or shown
    assert runner.drain() == [] and runner.latest("a") is None


def test_rescued_records_of_batched_steps_keep_their_order(make_runner):
    trainers = {"early": BatchTrainer(max_sweeps=3), "long": BatchTrainer(max_sweeps=2000)}
    runner = make_runner(lambda: trainers, buffer_size=2)
    runner.play()
    assert runner.wait_idle(60.0) and not runner.active
    records = runner.drain()
    assert [(n, r["sweep"]) for n, r in records] == [("early", 3), ("long", 1999), ("long", 2000)]
    assert all("M" in r for _, r in records)


def test_shipping_to_the_workers_happens_on_the_runners_thread_not_the_callers(make_runner, monkeypatch):
    """Under a BACKEND (boltzlab serve's worker processes) handing the trainers over is a
    network round trip: the runner's thread does it; the caller (a click on the event loop)
    returns at once, the runs say "starting", and a Play given meanwhile plays after."""
    from boltzlab.dashboard import runner as runner_module

    gate = threading.Event()
    shipped_on: list[int] = []

    def backend(trainers, owner):
        shipped_on.append(threading.get_ident())
        assert gate.wait(60)
        return dict(trainers)

    monkeypatch.setattr(runner_module, "BACKEND", backend)
    runner = make_runner(lambda: {"a": FakeTrainer()})
    assert [s.status for s in runner.states.values()] == ["starting"] and runner.active
    runner.play()  # allowed: it plays once the runs are in place
    assert not runner.wait_started(0.05) and runner.drain() == []
    gate.set()
    assert runner.wait_started(60)
    assert wait_for(lambda: runner.states["a"].steps >= 3)
    runner.pause()
    assert shipped_on and threading.get_ident() not in shipped_on
    # a reset while a shipment is in flight: the newer generation wins, the older one is dropped
    gate.clear()
    runner.reset(lambda: {"b": FakeTrainer()})
    runner.reset(lambda: {"c": FakeTrainer()})
    gate.set()
    assert runner.wait_started(60) and list(runner.trainers) == ["c"]
    runner.step_once()
    assert runner.wait_idle(60)
    assert [(n, r["sweep"]) for n, r in runner.drain()] == [("c", 1)]


def test_a_backend_that_cannot_take_the_runs_says_why_in_their_status(make_runner, monkeypatch):
    from boltzlab.dashboard import runner as runner_module

    def backend(trainers, owner):
        raise RuntimeError("no workers")

    monkeypatch.setattr(runner_module, "BACKEND", backend)
    runner = make_runner(lambda: {"a": FakeTrainer()})
    assert runner.wait_started(60)
    assert runner.states["a"].status == "error" and runner.states["a"].message == "RuntimeError: no workers"
    assert not runner.active and not runner.playing


# ---------------------------------------------------------------- Build: trainers built on the runner's thread
def gated_build(names, gate: threading.Event, built_on: list[int], fail: str | None = None):
    """A Build whose trainers wait for ``gate`` (a slow build) and record the building thread."""
    from boltzlab.dashboard.runner import Build

    def build():
        built_on.append(threading.get_ident())
        assert gate.wait(60)
        if fail:
            raise ValueError(fail)
        return {n: FakeTrainer() for n in names}

    return Build(tuple(names), build)


def test_a_builds_trainers_are_made_on_the_runners_thread_and_its_names_known_at_once(make_runner):
    gate, built_on = threading.Event(), []
    runner = make_runner(gated_build(["a", "b"], gate, built_on))
    # the first build: the runs exist by name, "starting", and a Step waits for them
    assert runner.names == ["a", "b"] and [s.status for s in runner.states.values()] == ["starting"] * 2
    assert runner.building
    runner.step_once()
    assert not runner.wait_built(0.05)
    gate.set()
    assert runner.wait_built(60) and not runner.building
    assert set(runner.trainers) == {"a", "b"}
    assert built_on and threading.get_ident() not in built_on
    assert runner.wait_idle(60)
    assert sorted((n, r["sweep"]) for n, r in runner.drain()) == [("a", 1), ("b", 1)]


def stepped_once(make_runner):
    """A runner whose one run ("a") has stepped once: (runner, its trainer, its generation)."""
    old = FakeTrainer()
    runner = make_runner(lambda: {"a": old})
    runner.step_once()
    assert runner.wait_idle(60)
    return runner, old, runner.generation


def test_a_reset_with_a_build_names_the_new_runs_at_once_and_steps_them_once_built(make_runner):
    runner, old, generation = stepped_once(make_runner)
    gate, built_on = threading.Event(), []
    runner.reset(gated_build(["b"], gate, built_on))  # returns at once
    assert runner.building and runner.names == ["b"] and runner.generation == generation + 1
    assert runner.states["b"].status == "starting" and runner.drain() == []
    runner.step_once()  # asked for while building: steps the new run once it is built
    gate.set()
    assert runner.wait_built(60) and runner.wait_idle(60)
    assert [(n, r["sweep"]) for n, r in runner.drain()] == [("b", 1)]
    assert old.sweep == 1 and threading.get_ident() not in built_on


def test_a_build_that_raises_brings_the_old_runs_back_and_says_why(make_runner):
    runner, old, generation = stepped_once(make_runner)
    gate, built_on = threading.Event(), []
    gate.set()
    runner.reset(gated_build(["b"], gate, built_on, fail="The 'mu' parameter must be > 0. Got -1."))
    assert runner.wait_built(60)
    refused = runner.take_refusal()
    assert isinstance(refused, ValueError) and "mu" in str(refused)
    assert runner.take_refusal() is None  # said once
    assert runner.names == ["a"] and runner.trainers["a"] is old and runner.generation == generation + 2
    assert runner.states["a"].steps == 1 and runner.history.counts == {"a": 1}  # as they were
    runner.step_once()
    assert runner.wait_idle(60) and old.sweep == 2
    assert [(n, r["sweep"]) for n, r in runner.drain()] == [("a", 2)]


def test_the_first_build_that_raises_says_why_in_the_runs_status(make_runner):
    gate, built_on = threading.Event(), []
    gate.set()
    runner = make_runner(gated_build(["b"], gate, built_on, fail="no good"))
    assert runner.wait_built(60)
    assert isinstance(runner.take_refusal(), ValueError)
    assert runner.states["b"].status == "error" and "no good" in runner.states["b"].message


def test_a_newer_reset_supersedes_a_build_in_flight(make_runner):
    runner = make_runner(lambda: {"a": FakeTrainer()})
    slow, built_on = threading.Event(), []
    runner.reset(gated_build(["b"], slow, built_on))
    assert wait_for(lambda: built_on)  # the thread is building "b"
    quick = threading.Event()
    quick.set()
    runner.reset(gated_build(["c"], quick, built_on))
    slow.set()
    assert runner.wait_built(60) and runner.wait_idle(60)
    assert runner.names == ["c"] and list(runner.trainers) == ["c"] and runner.take_refusal() is None
