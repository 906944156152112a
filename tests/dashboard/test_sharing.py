"""Follow the teacher (issue 48 item 1), headless: ``lab.share()`` gives a code; a lab that
follows it draws the teacher's Records (the same numbers, not recomputed), takes a new run's
settings, sees the pins; ``make_mine()`` forks the run, which then trains on its own exactly as
the teacher's would; ``unshare()`` tells followers and leaves the last state to fork."""

from __future__ import annotations

import numpy as np
import pytest

from boltzlab.dashboard import sharing
from boltzlab.dashboard.labs import FVBMLab, TAPLab
from boltzlab.dashboard.runner import Runner
from tests.waiting import wait_until

SMALL = {"d": 6, "n": 500, "init": "random", "init_seed": 3}


def ticks_until(lab, condition, timeout=120):
    """Tick ``lab`` (as its page's periodic callback would) until ``condition()``."""
    def ticked():
        lab.tick()
        lab.jobs.poll()
        return condition()
    wait_until(ticked, timeout=timeout)


def drawn(lab, run, key):
    """The values of ``key`` the lab's figures drew for ``run`` (its history, as the page has)."""
    return [row[key] for row in lab.runner.history.rows.get(run, []) if key in row]


def teacher_and_follower(make_lab):
    """A teacher's FVBM lab two steps into its run, shared, and a page that follows it."""
    teacher = make_lab(FVBMLab, **SMALL)
    teacher.run(steps=2)
    follower = make_lab(FVBMLab, **SMALL)
    follower.panel()
    follower.follow(teacher.share())
    return teacher, follower


def test_a_code_is_long_random_and_a_bad_one_is_refused(make_lab):
    teacher = make_lab(FVBMLab, **SMALL)
    code = teacher.share()
    assert teacher.share() == code and teacher.shared == code
    assert len(code) >= 16 and code in sharing.SHARES  # 96 bits, URL-safe
    other = make_lab(FVBMLab, **SMALL)
    assert other.share() != code
    follower = make_lab(FVBMLab, **SMALL)
    with pytest.raises(ValueError, match="No live run is shared under this code"):
        follower.follow("x" * 16)
    with pytest.raises(ValueError, match="another lab"):
        make_lab(TAPLab, data="digits").follow(code)
    teacher.unshare()
    assert code not in sharing.SHARES
    with pytest.raises(ValueError, match="No live run is shared under this code"):
        follower.follow(code)


def test_a_follower_draws_the_teachers_records_and_new_runs(make_lab):
    teacher = make_lab(FVBMLab, **SMALL)
    teacher.run(steps=3)
    code = teacher.share()
    follower = make_lab(FVBMLab)  # other settings: it takes the teacher's
    follower.panel()
    follower.follow(code)
    assert follower.following == code and teacher.followers == 1
    assert follower.d == 6 and follower.run_settings() == teacher.run_settings()
    assert drawn(follower, "BSLM", "log_pl") == drawn(teacher, "BSLM", "log_pl")  # joined late: replayed
    assert follower._left.objects == [follower._follow_card] and follower.play_button.disabled
    teacher.runner.step_once()
    ticks_until(teacher, lambda: teacher.runner.states["BSLM"].steps == 4)
    teacher.tick()  # the step may have ended between the last tick and the check: drain (and share) it
    ticks_until(follower, lambda: len(drawn(follower, "BSLM", "log_pl")) == 4)
    assert drawn(follower, "BSLM", "log_pl") == drawn(teacher, "BSLM", "log_pl")
    assert follower.counter() == teacher.counter()
    # a new run at the teacher: the follower takes its settings and starts over
    teacher.apply_settings({"d": 5})
    teacher.run(steps=2)
    teacher.tick()
    teacher.pin("five")
    ticks_until(follower, lambda: follower.d == 5 and len(drawn(follower, "BSLM", "log_pl")) == 2)
    assert drawn(follower, "BSLM", "log_pl") == drawn(teacher, "BSLM", "log_pl")
    ticks_until(follower, lambda: list(follower.pins) == ["five"])


@pytest.fixture
def dask_like_jobs(monkeypatch):
    """Jobs sent as a Dask cluster gets them (pickled: a job must not need this process's
    objects unless it runs ``here``)."""
    import pickle
    from concurrent.futures import ThreadPoolExecutor

    from boltzlab.dashboard import jobs

    pool = ThreadPoolExecutor(max_workers=2)
    monkeypatch.setattr(jobs, "EXECUTOR", lambda fn, *args: pool.submit(pickle.loads(pickle.dumps(fn)),
                                                                        *pickle.loads(pickle.dumps(args))))
    yield
    pool.shutdown()


def test_make_it_mine_forks_the_run_which_trains_on_as_the_teachers(make_lab, dask_like_jobs):
    teacher, follower = teacher_and_follower(make_lab)
    follower.make_mine()
    assert follower.jobs.wait()
    assert follower.following is None and teacher.followers == 0
    assert isinstance(follower.runner, Runner) and not follower.play_button.disabled
    assert follower._left.objects != [follower._follow_card]
    follower.run(steps=3)
    teacher.run(steps=3)  # the teacher's run, on from the same state: the same numbers
    np.testing.assert_array_equal(follower.records["BSLM"]["log_pl"], teacher.records["BSLM"]["log_pl"])


def test_after_the_share_ends_the_follower_keeps_the_last_state_to_fork(make_lab):
    teacher, follower = teacher_and_follower(make_lab)
    teacher.unshare()
    ticks_until(follower, lambda: "ended the share" in follower.follow_status.text)
    follower.make_mine()
    assert follower.jobs.wait()
    assert follower.following is None
    np.testing.assert_array_equal(follower.records["BSLM"]["log_pl"], teacher.records["BSLM"]["log_pl"])


def test_peek_copies_a_playing_run_without_pausing_it(make_lab):
    lab = make_lab(FVBMLab, **SMALL)
    lab.runner.play()
    wait_until(lambda: lab.runner.states["BSLM"].steps >= 2, timeout=120)
    states, history, _ = lab.runner.peek()
    assert lab.runner.playing  # peek() did not pause
    assert set(states) == {"BSLM"} and history.counts["BSLM"] >= 2
    steps = lab.runner.states["BSLM"].steps
    wait_until(lambda: lab.runner.states["BSLM"].steps > steps, timeout=120)  # and it plays on
    lab.runner.pause()


def test_the_header_switch_shares_the_lab_in_view_and_counts_followers():
    from boltzlab.dashboard.app import create_app

    page = create_app("fvbm")
    lab = next(iter(page.labs.values()))
    try:
        share = page.share
        assert share.toggle.label == "Share live" and share.toggle in page.header.objects
        share.toggle.value = True
        code = lab.shared
        assert code and f"?follow={code}" in share.link.object
        assert share.toggle.label == "● Sharing live · 0 following"
        lab.shared and sharing.SHARES[code].join(1)
        lab.refresh_status()
        assert share.toggle.label == "● Sharing live · 1 following"
        shared = sharing.SHARES[code]
        share.toggle.value = False  # the click does not wait: the last state is copied in a thread
        assert lab.shared is None and code not in sharing.SHARES and share.toggle.label == "Share live"
        wait_until(lambda: shared.ended, timeout=120)
        assert shared.final  # the followers' last state, to fork
    finally:
        lab.close()


def test_records_the_teacher_has_not_drawn_yet_reach_a_follower_once(make_lab):
    teacher = make_lab(FVBMLab, **SMALL)
    teacher.runner.step_once()
    wait_until(lambda: teacher.runner.states["BSLM"].steps == 1, timeout=120)  # stepped, not drawn yet
    follower = make_lab(FVBMLab, **SMALL)
    follower.follow(teacher.share())
    teacher.tick()  # now drawn, and published
    ticks_until(follower, lambda: len(drawn(follower, "BSLM", "log_pl")) >= 1)
    for _ in range(3):
        follower.tick()
    assert drawn(follower, "BSLM", "log_pl") == drawn(teacher, "BSLM", "log_pl")
    assert len(follower.logpl.sources["BSLM/log_pl"].data["x"]) == 1  # drawn once, not twice


def test_a_follower_sees_the_teachers_lesson_step(make_lab):
    teacher = make_lab(FVBMLab)
    teacher.panel()
    teacher.lesson("fvbm-monotone")
    teacher.next_lesson_step()
    teacher.tick()
    follower = make_lab(FVBMLab)
    follower.panel()
    follower.follow(teacher.share())
    ticks_until(follower, lambda: teacher.tick() or follower.follow_lesson.visible)  # (an idle teacher: once a second)
    assert follower.follow_lesson.object == teacher.lesson_tools.caption.object != ""
    assert follower.follow_lesson in follower._left.objects[0].objects  # in the follower's sidebar card


def test_a_tap_follower_fits_the_isomap_only_while_its_tab_is_in_view(make_lab):
    teacher = make_lab(TAPLab, data="digits", n_hidden=16)
    teacher.run(steps=2)
    follower = make_lab(TAPLab, data="digits", n_hidden=16)
    follower.panel()
    follower.follow(teacher.share())
    follower.jobs.wait()
    assert follower._embedding_dirty and not follower.jobs.running("isomap")  # the first tab: no fit
    follower.stage_tabs.active = follower._stage_labels.index("Isomap")
    follower.tick()
    assert follower.jobs.running("isomap") or not follower._embedding_dirty


def test_a_run_on_a_built_in_data_set_of_an_image_lab_is_shared(make_lab):
    """TAP (and Frank-Wolfe) report the identity of a built-in data set too (for
    checkpoints): such a run is shared; only a run on an upload is refused."""
    teacher = make_lab(TAPLab, data="digits")
    assert teacher.data_identity() is not None
    code = teacher.share()
    follower = make_lab(TAPLab, data="digits")
    follower.follow(code)
    assert follower.following == code and teacher.followers == 1
    teacher.unshare()


def test_a_follower_draws_at_most_five_times_a_second_and_its_own_run_at_its_own_rate(make_lab):
    """An FVBM page ticks every 100 ms; following, every 200 ms (the Records of two of the
    teacher's ticks drawn together); its own run again at 100 ms."""
    from boltzlab.dashboard.labs.base import FOLLOWER_PERIOD_MS

    teacher, follower = teacher_and_follower(make_lab)
    assert teacher.period() == FVBMLab.period_ms == 100 < FOLLOWER_PERIOD_MS
    assert follower.period() == FOLLOWER_PERIOD_MS
    follower.unfollow()
    assert follower.period() == 100
