"""Follow the teacher in Chromium (issue 48 item 1): the teacher switches "Share live" on and
the link shows in large type; a second browser opens it and follows read-only: the teacher's
steps reach the follower's counter and figures; the teacher sees one follower; "Make it mine"
forks the run, which then steps on its own while the teacher's stays; "Share live" off tells
the follower.  Screenshots: test-artifacts/follow-*.png."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.painting import plots, screenshot
from tests.browser.test_layout import ACTION_TIMEOUT_MS, SIZES, check_first_screen
from tests.waiting import wait_for, wait_until

pytestmark = pytest.mark.browser


def counter(page: Page) -> str:
    return page.locator(".sweep-counter").first.evaluate("e => e.shadowRoot ? e.shadowRoot.textContent : e.textContent")


def rows(page: Page) -> int:
    return sum(p["rows"] for p in plots(page))


def open_page(browser, url: str, size: str = "1440x900") -> Page:
    width, height, _ = SIZES[size]
    context = browser.new_context(viewport={"width": width, "height": height})
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    page = context.new_page()
    page.goto(url, timeout=120_000)
    return page


def stepped_teacher(browser, app_url: str) -> tuple[Page, object]:
    """The teacher's FVBM page one Step into its run, drawn; the page and its Step button."""
    teacher = open_page(browser, f"{app_url}/fvbm")
    step = teacher.get_by_role("button", name="Step", exact=True)
    expect(step).to_be_enabled(timeout=120_000)
    step.click()
    wait_until(lambda: rows(teacher) > 0, timeout=180)
    return teacher, step


def share_live(teacher: Page, shot: str | None = None) -> str:
    """Switch the teacher's Share live on; the link its panel shows in large type (the panel
    then closed, as a teacher closes it)."""
    teacher.get_by_role("button", name="Share live").click()
    link = teacher.locator("div").filter(has_text=re.compile(r"\?follow=[\w-]{16}$")).last
    expect(link).to_be_visible(timeout=60_000)
    url = re.search(r"\S+\?follow=[\w-]{16}", link.inner_text()).group(0)
    if shot:
        screenshot(teacher, shot, "the teacher's link")
    teacher.get_by_role("button", name="×").click()
    expect(teacher.locator("#pn-Modal")).to_be_hidden(timeout=60_000)
    return url


def test_a_student_follows_the_teachers_run_and_makes_it_theirs(browser, app_url):
    teacher, step = stepped_teacher(browser, app_url)
    student = None
    try:
        url = share_live(teacher, "test-artifacts/follow-teacher-link.png")
        student = open_page(browser, url)
        expect(student.get_by_role("button", name="Make it mine")).to_be_visible(timeout=120_000)
        # read-only: no Play of its own
        expect(student.get_by_role("button", name="▶ Play")).to_be_disabled()
        assert wait_for(lambda: counter(student) == counter(teacher), timeout=120), (counter(student), counter(teacher))
        expect(teacher.get_by_role("button", name=re.compile("Sharing live · 1 following"))).to_be_visible(
            timeout=60_000)
        # the teacher steps: the student's counter and figures follow
        for _ in range(2):
            before = counter(teacher)
            step.click()
            wait_until(lambda: counter(teacher) != before, timeout=180)
        assert wait_for(lambda: counter(student) == counter(teacher), timeout=120), (counter(student), counter(teacher))
        assert wait_for(lambda: rows(student) == rows(teacher), timeout=120), (plots(student), plots(teacher))
        check_first_screen(student, 1440, 900, "the follower's page")
        screenshot(student, "test-artifacts/follow-student.png", "the student following")
        # Make it mine: the student's own run, which steps on its own
        student.get_by_role("button", name="Make it mine").click()
        play = student.get_by_role("button", name="▶ Play")
        try:
            expect(play).to_be_enabled(timeout=120_000)
        except AssertionError:
            student.screenshot(path="test-artifacts/follow-student-mine-failed.png")
            raise
        mine, theirs = counter(student), counter(teacher)
        student.get_by_role("button", name="Step", exact=True).click()
        wait_until(lambda: counter(student) != mine, timeout=180)
        assert counter(teacher) == theirs  # the teacher's run did not move
        # the teacher ends the share
        teacher.get_by_role("button", name=re.compile("Sharing live")).click()
        expect(teacher.get_by_role("button", name="Share live")).to_be_visible(timeout=60_000)
    finally:
        teacher.context.close()
        if student is not None:
            student.context.close()


def test_the_follower_hears_when_the_share_ends(browser, app_url):
    teacher, _ = stepped_teacher(browser, app_url)
    student = None
    try:
        url = share_live(teacher)
        student = open_page(browser, url)
        expect(student.get_by_role("button", name="Make it mine")).to_be_visible(timeout=120_000)
        teacher.context.close()  # the teacher's tab goes
        expect(student.get_by_text("ended the share", exact=False)).to_be_visible(timeout=120_000)
        student.get_by_role("button", name="Make it mine").click()
        expect(student.get_by_role("button", name="▶ Play")).to_be_enabled(timeout=120_000)
    finally:
        if student is not None:
            student.context.close()


def test_a_class_follows_a_lesson_stepped_by_the_teacher(browser, app_url):
    """Issue 48's class: the teacher steps a lesson in presentation mode at 1280×720; one
    follower sees each step's narration in its sidebar card, and the teacher's figures."""
    from boltzlab.dashboard import lessons
    from tests.browser.test_browser_lessons import JS_TEXT

    lesson = next(each for each in lessons.LESSONS if each.name == "fvbm-monotone")
    teacher = open_page(browser, f"{app_url}/fvbm?present=1", "1280x720-present")
    student = None
    try:
        choice = teacher.locator(".fvbm-lesson-choice select")
        expect(choice).to_be_visible(timeout=120_000)
        choice.select_option(label=lesson.title)
        student = open_page(browser, share_live(teacher))
        expect(student.get_by_role("button", name="Make it mine")).to_be_visible(timeout=120_000)
        step = teacher.get_by_role("button", name="Lesson ▸")
        for number in (1, 2):
            step.click()
            said = wait_for(lambda: (text := teacher.evaluate(JS_TEXT, "lesson-caption") or "")
                            and f"step {number} of {len(lesson)}" in text and text, timeout=180)
            assert said, f"the teacher's step {number} never shown"
            seen = wait_for(lambda: f"step {number} of {len(lesson)}" in (student.evaluate(JS_TEXT, "fvbm-follow-lesson")
                                                                       or ""), timeout=120)
            assert seen, f"the follower never saw step {number}: {student.evaluate(JS_TEXT, 'fvbm-follow-lesson')!r}"
        # step 2 plays 30 sweeps: the follower's counter gets there with the teacher's
        assert wait_for(lambda: "Sweep 30" in counter(student), timeout=300), counter(student)
        check_first_screen(student, 1440, 900, "a follower during a lesson")
        screenshot(student, "test-artifacts/follow-lesson-student.png", "a follower during a lesson")
    finally:
        teacher.context.close()
        if student is not None:
            student.context.close()
