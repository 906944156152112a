"""A lesson stepped in presentation mode at 1280×720 (issue 48 item 2): the sidebar's lesson box
chooses the FVBM lesson, each *Lesson ▸* applies the next step (a preset, 30 sweeps, a pin, new
settings and 30 more sweeps three times, the verdict), its narration and question show in the box, and
every figure stays where it was, whole on the first screen.  Screenshots: test-artifacts/lesson-*.png.
Every wait is on a condition, never on the clock."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from boltzlab.dashboard import lessons
from tests.browser.painting import screenshot
from tests.browser.test_layout import SIZES, check_first_screen, playing_page
from tests.waiting import wait_for, wait_until

pytestmark = pytest.mark.browser

# the text of the Bokeh model whose css classes hold ``cls`` (a caption, the step counter)
JS_TEXT = """(cls) => {
  for (const doc of Bokeh.documents)
    for (const m of doc.all_models)
      if (m.css_classes && m.css_classes.includes(cls)) return String(m.text || '');
  return null;
}"""


def test_a_lesson_steps_through_in_presentation_mode_and_no_figure_moves(browser, app_url):
    size = "1280x720-present"
    width, height, _ = SIZES[size]
    lesson = next(each for each in lessons.LESSONS if each.name == "fvbm-monotone")
    with playing_page(browser, app_url, "fvbm", size) as page:
        page.get_by_role("button", name="❚❚ Pause").click()
        expect(page.get_by_role("button", name="▶ Play")).to_be_enabled(timeout=120_000)
        choice = page.locator(".fvbm-lesson-choice select")
        expect(choice).to_be_visible()
        choice.select_option(label=lesson.title)
        step = page.get_by_role("button", name="Lesson ▸")
        expect(step).to_be_enabled()
        assert wait_for(lambda: "Press" in (page.evaluate(JS_TEXT, "lesson-caption") or ""), timeout=60)
        before = check_first_screen(page, width, height, "before the lesson")
        where = [(p["x"], p["y"]) for p in before]

        def click_and_wait(number: int, sweeps: int | None = None) -> str:
            step.click()
            said = wait_for(lambda: (text := page.evaluate(JS_TEXT, "lesson-caption") or "")
                            and f"step {number} of {len(lesson)}" in text and text, timeout=120)
            assert said, f"step {number} never shown: {page.evaluate(JS_TEXT, 'lesson-caption')!r}"
            if sweeps is not None:  # its sweeps done and drawn
                wait_until(lambda: f"Sweep {sweeps}<" in (page.evaluate(JS_TEXT, "sweep-counter") or "") + "<",
                           timeout=300)
            return said

        said = click_and_wait(1)
        assert "lower bound" in said and "Question:" in said  # the narration, its **bold**, the question
        said = click_and_wait(2, sweeps=30)
        assert "30 sweeps of BSLM" in said
        shown = check_first_screen(page, width, height, "lesson step 2")
        assert [(p["x"], p["y"]) for p in shown] == where  # the narration moved no figure
        screenshot(page, "test-artifacts/lesson-fvbm-step2.png", "lesson step 2")
        click_and_wait(3)  # pinned
        said = click_and_wait(4, sweeps=30)  # gradient ascent with μ = 2.5, against the pin
        assert "μ = 2.5" in said and "Question:" in said
        shown = check_first_screen(page, width, height, "lesson step 4")
        assert [(p["x"], p["y"]) for p in shown] == where
        assert any(p["rows"] >= 30 for p in shown)
        screenshot(page, "test-artifacts/lesson-fvbm-step4.png", "lesson step 4")
        click_and_wait(5, sweeps=30)
        said = click_and_wait(6, sweeps=30)  # μ = 1: on the pinned BSLM line
        assert "μ = 1" in said
        shown = check_first_screen(page, width, height, "lesson step 6")
        assert [(p["x"], p["y"]) for p in shown] == where
        screenshot(page, "test-artifacts/lesson-fvbm-step6.png", "lesson step 6")
        said = click_and_wait(7)  # the verdict and the last question
        assert "Question:" in said
        shown = check_first_screen(page, width, height, "lesson step 7")
        assert [(p["x"], p["y"]) for p in shown] == where
        screenshot(page, "test-artifacts/lesson-fvbm-step7.png", "lesson step 7")
        expect(page.get_by_role("button", name="Lesson ↺")).to_be_visible()
