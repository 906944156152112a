"""The fair share of threads is used where playing runs step, not only computed (issue 46
item 5 (e)): a playing batch, in the server's process (runner) and in a worker
(distributed), runs inside its run's claim (the run is among ``threads.players()``) on the
thread count that ``threads.share`` gives it beside the other playing runs."""

from __future__ import annotations

import types

import numba
import pytest

from boltzlab.engine import threads
from fakes import FakeTrainer
from tests.waiting import wait_for


class CountingTrainer(FakeTrainer):
    """Records, inside each ``steps`` call, the calling thread's numba thread count and the
    playing runs of the machine."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[int, list[str]]] = []

    def steps(self, k: int):
        self.seen.append((numba.get_num_threads(), threads.players()))
        return [self.step() for _ in range(k)]


@pytest.fixture
def rival(tmp_path, monkeypatch):
    """Another run playing (its claim held) on a machine whose cores are all idle: the share
    is then half of them (the count is deterministic, not the machine's load)."""
    monkeypatch.setenv("BOLTZLAB_PLAYERS_DIR", str(tmp_path))
    monkeypatch.setattr(threads, "idle_cores", lambda cores=None: threads.available())
    with threads.Player("0-rival") as player:
        yield player


def expected_share(keys: list[str], key: str) -> int:
    """threads.share's rule, written out: the cores split evenly in key order, at least 1."""
    n, cores = len(keys), threads.available()
    return max(1, cores // n + (1 if sorted(keys).index(key) < cores % n else 0))


def check(seen: list[tuple[int, list[str]]]) -> None:
    assert seen
    for count, playing in seen:
        ours = [key for key in playing if key != "0-rival"]
        assert "0-rival" in playing and len(ours) == 1, playing  # our claim is held while stepping
        assert count == expected_share(playing, ours[0]), (count, playing)


def test_a_playing_run_steps_on_its_share_in_the_servers_process(rival, make_runner):
    trainer = CountingTrainer()
    run = make_runner(lambda: {"t": trainer})
    run.play()
    assert wait_for(lambda: len(trainer.seen) >= 3, timeout=120)
    run.pause()
    assert run.wait_idle(60.0)
    check(trainer.seen)


def test_a_playing_batch_on_a_worker_steps_on_its_share(rival):
    from boltzlab.dashboard import distributed

    base = threads.threads()
    trainer = CountingTrainer()
    actor = types.SimpleNamespace(_player=None, trainer=trainer)
    for _ in range(2):
        records, status = distributed._steps_fairly(actor, 2)
        assert len(records) == 2 and status[0] is False
    assert threads.threads() == base  # the worker thread's count is given back
    check(trainer.seen)
    actor._player.close()
