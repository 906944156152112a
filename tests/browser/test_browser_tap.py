"""The TAP lab in a real headless Chromium: open it, train on MNIST and on the 8x8 digits,
watch the solution counts, free energies, Isomap scatter and receptive fields appear."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.test_browser_fvbm import points, tab_header, wait_until

pytestmark = pytest.mark.browser

JS_IMAGE = """(name) => {
  let found = null;
  for (const doc of Bokeh.documents)
    for (const m of doc.all_models)
      if (m.name === name && m.data && m.data.image) {
        const img = m.data.image[0];
        found = img ? (img.length || (img.shape ? img.shape[0] * img.shape[1] : 0)) : 0;
      }
  return found;
}"""
JS_TEXT = """(prefix) => {
  for (const doc of Bokeh.documents)
    for (const m of doc.all_models)
      if (typeof m.text === 'string' && m.text.startsWith(prefix)) return m.text;
  return null;
}"""


def open_tap(page: Page, url: str):
    page.goto(url)
    tab_header(page, "TAP").click()
    lab = page.locator(".bk-panel-models-layout-Column").filter(has_text="TAP machines").first
    play = page.get_by_role("button", name="▶ Play")
    expect(play).to_have_count(1, timeout=60_000)  # only the visible lab's buttons count
    expect(play).to_be_enabled()
    return lab


def test_tap_lab_trains_and_shows_solutions(page: Page, app_url, shot):
    open_tap(page, app_url)
    assert points(page, "tap-ll:ll")["x"] == []
    shot("tap-before-play")
    # MNIST (the default): the per-unit TAP log-likelihood and the solution counts stream in
    page.get_by_role("button", name="▶ Play").click()
    wait_until(lambda: len(points(page, "tap-ll:ll")["x"]) >= 10, timeout=90)
    wait_until(lambda: len(points(page, "tap-ll:count")["x"]) >= 10)
    assert all(c >= 1 for c in points(page, "tap-ll:count")["y"])
    # every solution's free energy, and the Helmholtz estimate
    wait_until(lambda: len(points(page, "fe-points")["x"]) >= 10)
    # receptive fields and, after the first whole epoch, the Isomap views (each on its tab of
    # the stage: only the tab in view is in the browser's document)
    tab_header(page, "Fields (Fig. 4)").click()
    wait_until(lambda: (page.evaluate(JS_IMAGE, "fields") or 0) > 28 * 28, timeout=60)
    tab_header(page, "Isomap").click()
    wait_until(lambda: len(points(page, "isomap")["x"]) >= 1, timeout=120)
    wait_until(lambda: len(points(page, "isomap-data")["x"]) >= 100, timeout=120)
    shot("tap-training")
    tab_header(page, "Figs. 3 · 5").click()
    page.get_by_role("button", name="❚❚ Pause").click()
    expect(page.get_by_role("button", name="▶ Play")).to_be_enabled(timeout=120_000)
    epoch_text = page.evaluate(JS_TEXT, "Epoch ")
    assert epoch_text and float(epoch_text.split()[1]) > 0

    # the 8x8 digits: a 16-unit model, small enough for the ground-truth panel
    page.get_by_role("button", name="8×8 digits", exact=True).click()
    wait_until(lambda: points(page, "tap-ll:ll")["x"] == [], timeout=30)
    page.get_by_role("button", name="▶ Play").click()
    tab_header(page, "Histograms").click()
    wait_until(lambda: len(points(page, "truth:exact")["x"]) >= 5, timeout=90)
    wait_until(lambda: len(points(page, "truth:ais")["x"]) >= 5)
    tab_header(page, "Isomap").click()
    wait_until(lambda: len(points(page, "isomap")["x"]) >= 1, timeout=120)
    page.get_by_role("button", name="❚❚ Pause").click()
    expect(page.get_by_role("button", name="▶ Play")).to_be_enabled(timeout=120_000)
    # denoising: a digit through the current model, then the MCC curve (on their tab of the stage)
    tab_header(page, "Denoising").click()
    page.get_by_role("button", name="Compute MCC vs p").click()
    wait_until(lambda: len(points(page, "mcc:tap")["x"]) == 7, timeout=60)
    ope = points(page, "mcc:ope")["y"]
    assert ope[0] == pytest.approx(1.0) and all(-1 <= v <= 1 for v in ope)
    shot("tap-digits-paused")


JS_BOXES = """(name) => {
  let found = null;
  for (const doc of Bokeh.documents)
    for (const m of doc.all_models)
      if (m.name === name && m.data && m.data.left) found = m.data.left.length;
  return found;
}"""


def test_tap_presentation_mode_explains_each_step_and_outlines_a_unit(page: Page, app_url, shot):
    page.goto(f"{app_url}/?present=1", timeout=120_000)  # a busy machine builds the four labs slowly
    tab_header(page, "TAP").click()
    next_step = page.get_by_role("button", name="Next step ▶")
    expect(next_step).to_have_count(1, timeout=60_000)  # only the visible lab's
    next_step.click()
    # the first step has no earlier weights to compare with: it outlines the strongest unit
    expect(page.get_by_text("has the strongest weights after this first step")).to_be_visible(timeout=60_000)
    tab_header(page, "Fields (Fig. 4)").click()  # the outline is drawn on the fields' tab
    wait_until(lambda: page.evaluate(JS_BOXES, "fields-box") == 1, timeout=30)
    next_step.click()
    # the second step compares with the first: the count of solutions before → after, the unit that moved most
    expect(page.get_by_text(re.compile(r"solutions \d+ → \d+ of K = 100"))).to_be_visible(timeout=60_000)
    expect(page.get_by_text("weights moved most (by")).to_be_visible(timeout=60_000)
    wait_until(lambda: page.evaluate(JS_BOXES, "fields-box") == 1, timeout=30)
    shot("tap-presenting")
    # playing clears the outline (presentation mode's one step button is Next step)
    page.get_by_role("button", name="▶ Play").click()
    wait_until(lambda: page.evaluate(JS_BOXES, "fields-box") == 0, timeout=30)
    page.get_by_role("button", name="❚❚ Pause").click()
