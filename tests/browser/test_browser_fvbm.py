"""The FVBM lab in a real headless Chromium: play, pause, step, reset, race."""

from __future__ import annotations


import pytest
from playwright.sync_api import Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from tests.browser.painting import plots
from tests.waiting import settled, wait_until  # the other browser tests import it from here

pytestmark = pytest.mark.browser

LOGPL = "logpl:BSLM/log_pl"
BOUND = "Bound (Jebara–Choromanska)"
LBFGS = "L-BFGS"

# read Bokeh model state (Panel renders into shadow DOM; models are the ground truth)
JS_SOURCE = """(name) => {
  let found = null;  // the newest model of that name (replaced ones may linger)
  for (const doc of Bokeh.documents)
    for (const m of doc.all_models)
      if (m.name === name && m.data) found = {x: Array.from(m.data.x), y: Array.from(m.data.y)};
  return found;
}"""
JS_TEXT = """(prefix) => {
  for (const doc of Bokeh.documents)
    for (const m of doc.all_models)
      if (typeof m.text === 'string' && m.text.startsWith(prefix)) return m.text;
  return null;
}"""


JS_HEAT = """(name) => {
  let found = null;
  for (const doc of Bokeh.documents)
    for (const m of doc.all_models)
      if (m.name === name && m.data && m.data.row)
        found = Math.min(m.data.row.length, m.data.col.length, m.data.value.length);
  return found;
}"""


def points(page: Page, name: str = LOGPL) -> dict:
    return page.evaluate(JS_SOURCE, name) or {"x": [], "y": []}


def heat_cells(page: Page, name: str = "M_hat") -> int | None:
    """Cells the browser can draw: rows, columns and values all have to be there."""
    return page.evaluate(JS_HEAT, name)


def sweep_text(page: Page) -> str:
    return page.evaluate(JS_TEXT, "Sweep ")


def tab_header(page: Page, title: str):
    return page.locator(".bk-tab").filter(has_text=title).first


def pause_or_ended(page: Page) -> None:
    """❚❚ Pause the visible lab's run, or accept that it ended on its own first (a short run on
    small data can: Pause is then disabled and there is nothing to pause); returns once the
    run is not playing."""
    pause = page.get_by_role("button", name="❚❚ Pause")
    for _ in range(12):  # a click on a busy page may take longer than one try; 2 minutes in all
        try:
            pause.click(timeout=10_000)
            break
        except PlaywrightTimeoutError:
            if pause.is_disabled():
                break  # the run ended
    expect(pause).to_be_disabled(timeout=120_000)


def open_lab(page: Page, url: str) -> None:
    page.goto(url)
    expect(page.get_by_role("button", name="▶ Play")).to_be_enabled(timeout=60_000)
    wait_until(lambda: points(page, LOGPL) is not None and sweep_text(page) == "Sweep 0")


def test_play_pause_step_reset(page: Page, app_url, shot):
    open_lab(page, app_url)
    assert points(page)["x"] == []
    shot("fvbm-before-play")

    page.get_by_role("button", name="▶ Play").click()
    wait_until(lambda: len(points(page)["x"]) >= 15)
    expect(page.get_by_text("Monotone so far")).to_be_visible()
    data = points(page)
    assert data["x"] == sorted(data["x"]) and data["x"][0] == 1
    assert all(b >= a for a, b in zip(data["y"], data["y"][1:]))  # BSLM never decreases
    shot("fvbm-playing")

    page.get_by_role("button", name="❚❚ Pause").click()
    expect(page.get_by_role("button", name="▶ Play")).to_be_enabled()
    # the step in flight at the pause may still arrive: wait until the page stops changing
    # (a pause that did not stop the run never settles and fails here)
    paused = settled(lambda: (len(points(page)["x"]), sweep_text(page)))[0]
    assert sweep_text(page) == f"Sweep {paused}"

    page.get_by_role("button", name="Step").click()
    assert settled(lambda: (len(points(page)["x"]), sweep_text(page))) == (paused + 1, f"Sweep {paused + 1}")

    page.get_by_role("button", name="↺ Reset").click()
    wait_until(lambda: points(page)["x"] == [] and sweep_text(page) == "Sweep 0")
    expect(page.get_by_text("Ready: press ▶ Play", exact=True)).to_be_visible()


def test_race_with_diverging_gradient_ascent(page: Page, app_url, shot):
    open_lab(page, app_url)
    page.get_by_role("button", name="Senate votes").click()
    page.get_by_role("button", name="Race").click()
    box = page.get_by_label("Race: GA steps μ =")
    box.fill("0.5, 50")
    box.press("Enter")
    wait_until(lambda: points(page, "logpl:GA μ=50/log_pl") is not None)
    page.get_by_role("button", name="▶ Play").click()
    expect(page.get_by_text("diverged").first).to_be_visible(timeout=120_000)
    # the others keep running after μ = 50 diverged (at sweep 1): μ = 0.5 creeps on past the
    # sweeps it had when the divergence showed (counted then, not later: near its own
    # convergence a late count could be its last; BSLM may already have converged)
    slow = len(points(page, "logpl:GA μ=0.5/log_pl")["x"])
    wait_until(lambda: len(points(page, "logpl:GA μ=0.5/log_pl")["x"]) >= max(10, slow + 1))
    # the estimate heatmap follows the data switch (8 senate parties: 8 x 8 cells; on its tab
    # of the stage: only the tab in view is in the browser's document)
    tab_header(page, "Couplings M").click()
    wait_until(lambda: heat_cells(page) == 64)
    tab_header(page, "Log-PL · log-likelihood").click()
    # the quadratic-bound MM and L-BFGS race too, and the bound never decreases
    for name in (BOUND, LBFGS):
        wait_until(lambda: len(points(page, f"logpl:{name}/log_pl")["x"]) >= 3)
    ys = points(page, f"logpl:{BOUND}/log_pl")["y"]
    assert all(b >= a - 1e-9 * abs(a) for a, b in zip(ys, ys[1:]))
    # the tab clicked back shows its two figures a moment later (the shot is of them)
    wait_until(lambda: len(plots(page)) >= 2)
    shot("fvbm-race")  # (no Pause click: the race may already be over, Pause then disabled)


def test_pages(page: Page, app_url, shot):
    open_lab(page, app_url)
    for tab, text in [("Bound", "Tightness (Theorem 1)"), ("TAP", "TAP machines: an RBM trained"),
                      ("Frank-Wolfe", "an RBM that grows one hidden unit at a time"),
                      ("About", "About Boltzmann Lab")]:
        tab_header(page, tab).click()
        expect(page.get_by_text(text).first).to_be_visible()
        shot(f"page-{tab.lower()}")
    tab_header(page, "FVBM").click()
    expect(page.get_by_role("button", name="▶ Play")).to_be_visible()
