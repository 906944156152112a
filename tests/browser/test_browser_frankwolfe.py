"""The Frank-Wolfe lab in a real headless Chromium: open it, grow a few units on the 8x8
digits, see the receptive-field grid grow and the log-likelihood curves fill, then fork CD."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.test_browser_fvbm import pause_or_ended, points, tab_header, wait_until
from tests.browser.test_browser_tap import JS_IMAGE, JS_TEXT

pytestmark = pytest.mark.browser


def test_frankwolfe_lab_grows_units_and_forks_cd(page: Page, app_url, shot):
    page.goto(app_url, timeout=120_000)  # a first session builds every lab: slow on a loaded machine
    tab_header(page, "Frank-Wolfe").click()
    play = page.get_by_role("button", name="▶ Play")
    expect(play).to_have_count(1, timeout=60_000)  # only the visible lab's buttons count
    page.get_by_role("button", name="8×8 digits", exact=True).click()
    wait_until(lambda: page.evaluate(JS_TEXT, "Hidden units: ") == "Hidden units: 0", timeout=30)
    shot("fw-before-play")
    page.get_by_role("button", name="▶ Play").click()
    wait_until(lambda: len(points(page, "fw-ll:units")["x"]) >= 8, timeout=90)
    wait_until(lambda: len(points(page, "fw-ll:test")["x"]) >= 8)
    wait_until(lambda: len(points(page, "fw-inner:inner")["x"]) >= 8)
    # the grid grows: at least 8 tiles of 8x8 pixels (on its tab of the stage: only the tab
    # in view is in the browser's document)
    tab_header(page, "Receptive fields").click()
    wait_until(lambda: (page.evaluate(JS_IMAGE, "fw-fields") or 0) >= 8 * 64, timeout=60)
    tab_header(page, "Log-likelihood · eq. 9").click()
    units = points(page, "fw-ll:units")["y"]
    assert units == sorted(units) and units[-1] >= 8  # one unit per iteration, no away steps
    shot("fw-growing")
    # the digits' 60 units take seconds of compute (29 of them were in at this point here): a
    # run that ended before the click has nothing left to pause, and the fork works from it too
    pause_or_ended(page)
    tab_header(page, "CD fork (§4)").click()  # the fork and its curve share a tab of the stage
    fork = page.get_by_role("button", name="Train CD from here")
    expect(fork).to_be_enabled(timeout=120_000)
    fork.click()
    wait_until(lambda: len(points(page, "fw-cd:fw")["x"]) >= 2, timeout=120)
    wait_until(lambda: len(points(page, "fw-cd:random")["x"]) >= 2, timeout=60)
    shot("fw-cd")


def test_a_link_in_presentation_mode_explains_each_inserted_unit(page: Page, app_url, shot):
    """A shared link (8x8 digits, exact log-likelihood) with ?present=1: Next step inserts one
    unit, names it and circles its point on the curves (the grid's outline: tests/dashboard)."""
    page.goto(f"{app_url}/?present=1&page=2&frankwolfe.data=digits&frankwolfe.reg=0.2&frankwolfe.max_hidden=20"
              "&frankwolfe.evaluate=exact&frankwolfe.eval_every=1&frankwolfe.samples=200", timeout=120_000)
    next_step = page.get_by_role("button", name="Next step ▶")
    expect(next_step).to_have_count(1, timeout=60_000)
    wait_until(lambda: page.evaluate(JS_TEXT, "Hidden units: ") == "Hidden units: 0", timeout=30)
    for k in (1, 2):
        next_step.click()
        expect(page.get_by_text(f"hidden unit #{k} inserted")).to_be_visible(timeout=120_000)
        wait_until(lambda: points(page, "fw-inner:mark")["x"] == [k])
    # the numbers the page names are those of the same run made headless here (same link
    # settings, same seed), not a number copied from an earlier output
    from boltzlab.dashboard.labs.frankwolfe import FrankWolfeLab

    lab = FrankWolfeLab(data="digits", reg=0.2, max_hidden=20, evaluate="exact", eval_every=1, samples=200)
    try:
        lab.run(steps=2)
        first, second = lab.records[lab.runs[0]]["test_log_likelihood"][-2:]
    finally:
        lab.close()
    expect(page.get_by_text(f"test log-likelihood {first:.3f} → {second:.3f} nats")).to_be_visible()
    wait_until(lambda: points(page, "fw-ll:units")["y"] == [1, 2])
    shot("fw-present")
