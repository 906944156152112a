"""serve recycles its worker processes only once no visitor has been left for a while."""

from __future__ import annotations

from boltzlab.dashboard.app import Visitors


def test_idle_only_after_the_last_visitor_left_and_nobody_came_back():
    calls = []
    visitors = Visitors(idle_seconds=0.0)
    visitors.when_idle = lambda: calls.append(1)
    visitors.arrived(1)
    visitors.arrived(2)
    visitors.left(1)
    visitors._check()  # the check a departure schedules (here: one visitor is still there)
    assert calls == []
    visitors.left(2)
    visitors.arrived(3)  # came back before the check
    visitors._check()
    assert calls == []
    visitors.left(3)
    visitors._check()
    assert calls == [1]


def test_a_check_too_early_for_the_latest_departure_waits_for_that_ones():
    calls = []
    visitors = Visitors(idle_seconds=3600.0)
    visitors.when_idle = lambda: calls.append(1)
    visitors.arrived(1)
    visitors.left(1)
    visitors._check()  # an hour has not passed since the departure
    assert calls == []
