"""Compare runs in a real Chromium (issue 47 items 1 and 6): in every lab, at 1440×900 and in
presentation mode at 1280×720, pin a run, change a setting, play the new run, pin until four
pins are kept; then the first screen holds the pinned and the live lines (legend entries and
glyphs counted in the visible plots), every figure inside the viewport, no text clipped
(``tests/browser/test_layout.py``'s checks).  Screenshots: test-artifacts/pins-*.png."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from boltzlab.dashboard.labs import LABS
from boltzlab.dashboard.pins import MAX_PINS
from tests.browser.painting import plots, screenshot
from tests.browser.test_browser_fvbm import pause_or_ended
from tests.browser.test_layout import SIZES, check_first_screen, playing_page
from tests.waiting import wait_for, wait_until

pytestmark = pytest.mark.browser

#: per lab, a setting the test changes between the first pin and the next run: (label, value)
CHANGE = {"fvbm": ("Variables d", "8"), "tap": ("Solutions K", "50"),
          "frankwolfe": ("Regularization λ", "0.2"), "bound": ("Regularization λ", "0.05")}

# in the visible plots: the pin slots drawn (a line with points, its legend entry shown), and
# the live lines with points
JS_PINS = """() => {
  const out = {pinned: 0, entries: [], live: 0, plots: 0};
  function walk(v) {
    if (!v) return;
    if (v.frame && v.model && v.model.renderers) {
      const el = v.canvas_view ? v.canvas_view.el : v.el;
      if (el.isConnected && el.checkVisibility({checkVisibilityCSS: true})) {
        out.plots += 1;
        for (const g of v.model.renderers) {
          if (!g.visible || !g.data_source) continue;
          const data = g.data_source.data;
          if ((g.name || '').startsWith('pin ')) {
            if (data.xs && data.xs.length && data.xs.some(x => x.length > 0)) out.pinned += 1;
          } else if (g.glyph && g.glyph.type === 'Line' && data.x && data.x.length > 1) {
            out.live += 1;
          }
        }
        const panels = [].concat(v.model.below || [], v.model.center || []);
        for (const p of panels)
          if (p.type === 'Legend' && p.name === 'pins' && p.visible)
            for (const item of p.items) if (item.visible) out.entries.push(JSON.stringify(item.label));
      }
    }
    for (const c of (v.child_views || [])) walk(c);
  }
  for (const v of Bokeh.index) walk(v);
  return out;
}"""


def pin(page: Page) -> None:
    page.locator(".bk-btn-group").filter(has_text="📌 Pin").get_by_role("button", name="📌 Pin").click()


def rows(page: Page) -> int:
    """The points the visible plots hold (a step adds some)."""
    return sum(p["rows"] for p in plots(page))


def step(page: Page, present: bool) -> None:
    """One step (Next step in presentation mode), and its Records drawn (the plots grew)."""
    before = rows(page)
    page.get_by_role("button", name="Next step ▶" if present else "Step", exact=True).click()
    wait_until(lambda: rows(page) > before, timeout=180)


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("lab", [cls.key for cls in LABS])
def test_pinned_and_live_runs_share_the_first_screen(browser, app_url, lab, size):
    width, height, present = SIZES[size]
    with playing_page(browser, app_url, lab, size) as page:
        play = page.get_by_role("button", name="▶ Play")
        pause_or_ended(page)
        if play.is_enabled():  # (not ended) two steps more: a pin of one point draws no line
            step(page, present)
            step(page, present)
        pin(page)
        assert wait_for(lambda: page.evaluate(JS_PINS)["pinned"] >= 1, timeout=120), page.evaluate(JS_PINS)
        # a change of setting makes a new run; the pin stays and its legend says what differs
        label, value = CHANGE[lab]
        box = page.get_by_label(label, exact=True)
        box.fill(value)
        box.press("Enter")
        assert wait_for(lambda: any(label.split()[0] in e or "→" in e for e in page.evaluate(JS_PINS)["entries"]),
                        timeout=120), page.evaluate(JS_PINS)
        expect(play).to_be_enabled(timeout=120_000)
        before = rows(page)
        play.click()
        # a few steps of the new run (a pin of one point draws no line)
        wait_until(lambda: rows(page) > before + 6, timeout=180)
        pause_or_ended(page)
        if play.is_enabled():  # (as before the first pin)
            step(page, present)
            step(page, present)
        for _ in range(MAX_PINS - 1):  # four pins, a step between each
            pin(page)
            if play.is_enabled():
                step(page, present)
        seen = wait_for(lambda: (s := page.evaluate(JS_PINS))["entries"] and
                        len(set(s["entries"])) == MAX_PINS and s, timeout=120)
        assert seen, page.evaluate(JS_PINS)
        assert seen["live"] >= 1 and seen["pinned"] >= MAX_PINS, seen
        assert any("→" in entry for entry in seen["entries"]), seen  # the first pin's differences
        check_first_screen(page, width, height, f"{lab} {size} with {MAX_PINS} pins")
        screenshot(page, f"test-artifacts/pins-{lab}-{size}.png", f"{lab} {size} with {MAX_PINS} pins")


#: per lab, a sweep: the setting's label and three values
SWEEP = {"fvbm": ("Step μ (gradient ascent)", "0.5, 1, 2.5"), "tap": ("Step γ", "0.01, 0.05, 0.1"),
         "frankwolfe": ("Regularization λ", "0.05, 0.1, 0.2"), "bound": ("Regularization λ", "0.01, 0.1, 1")}

# the visible plots' sweep lines with points (a line per run of a value, its own source)
JS_SWEEP = """() => {
  const out = {sweep: 0};
  function walk(v) {
    if (!v) return;
    if (v.frame && v.model && v.model.renderers) {
      const el = v.canvas_view ? v.canvas_view.el : v.el;
      if (el.isConnected && el.checkVisibility({checkVisibilityCSS: true}))
        for (const g of v.model.renderers)
          if (g.visible && (g.name || '').startsWith('sweep ') && g.data_source.data.x && g.data_source.data.x.length > 1)
            out.sweep += 1;
    }
    for (const c of (v.child_views || [])) walk(c);
  }
  for (const v of Bokeh.index) walk(v);
  return out;
}"""


def table_rows(page: Page) -> int:
    """The body rows of the sweep's table (one per run)."""
    return page.locator(".sweep-table tbody tr").count()


@pytest.mark.parametrize("lab", [cls.key for cls in LABS])
def test_a_sweep_runs_three_values_side_by_side(browser, app_url, lab):
    width, height, _ = SIZES["1440x900"]
    cls = next(c for c in LABS if c.key == lab)
    # Frank-Wolfe on the 8x8 digits: three MNIST runs side by side take a while to insert units
    query = "frankwolfe.data=digits" if lab == "frankwolfe" else ""
    with playing_page(browser, app_url, lab, "1440x900", query) as page:
        play = page.get_by_role("button", name="▶ Play")
        pause_or_ended(page)  # a run first; the sweep replaces it
        page.get_by_text("Run for several values", exact=True).click()
        label, values = SWEEP[lab]
        page.get_by_label("Setting", exact=True).select_option(label=label)
        box = page.get_by_label("Values (2 to 4, separated by commas)")
        box.fill(values)
        box.press("Enter")
        page.get_by_role("button", name="▶ Run for these values").click()
        wait_until(lambda: table_rows(page) >= 3, timeout=120)
        expect(play).to_be_enabled(timeout=120_000)
        play.click()
        if cls.sweep_views:  # the lab's own curves draw every run (FVBM)
            wait_until(lambda: sum(p["rows"] for p in plots(page)) > 30, timeout=180)
        else:  # the first value's run in the lab's lines, the others in the sweep layers
            wait_until(lambda: page.evaluate(JS_SWEEP)["sweep"] >= 2, timeout=180)
        pause_or_ended(page)
        assert table_rows(page) >= 3  # one row per run of the table (a race's runs each)
        check_first_screen(page, width, height, f"{lab} sweep")
        screenshot(page, f"test-artifacts/sweep-{lab}.png", f"{lab} sweep of three values")


#: per lab, the stage tabs whose pictures get a pin's beside them
PICTURES = {"fvbm": ["Couplings M"], "tap": ["Fields (Fig. 4)", "Samples", "Isomap"],
            "frankwolfe": ["Receptive fields", "Samples"], "bound": ["Tightness (Theorem 1)"]}


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("lab", [cls.key for cls in LABS])
def test_a_pins_pictures_beside_the_live_ones(browser, app_url, lab, size):
    """Item 2: the pin menu's "Pictures of pin 1 beside the live ones" shows the pin's picture
    (titled with its label) beside the live one on the pictures' tab, both drawn, both on
    the first screen; "Live pictures alone" takes it away."""
    width, height, present = SIZES[size]
    with playing_page(browser, app_url, lab, size) as page:
        play = page.get_by_role("button", name="▶ Play")
        pause_or_ended(page)
        if play.is_enabled():
            step(page, present)
        pin(page)
        first, *others = PICTURES[lab]
        page.locator(".bk-tab").filter(has_text=first).first.click()
        alone = wait_for(lambda: (p := plots(page)) and all(q["rows"] for q in p) and p, timeout=120)
        assert alone, plots(page)
        menu = page.locator(".bk-btn-group").filter(has_text="📌 Pin")
        menu.locator("button").nth(1).click()  # the split button's caret opens the menu
        page.get_by_text("Pictures of pin 1 beside the live ones").click()
        for index, tab in enumerate(PICTURES[lab]):
            if index:
                page.locator(".bk-tab").filter(has_text=tab).first.click()
            pinned = wait_for(lambda: [p for p in plots(page) if p["title"] == "pin 1" and p["rows"]], timeout=120)
            assert pinned, (tab, plots(page))
            shown = check_first_screen(page, width, height, f"{lab} {size} {tab} with pin 1's pictures beside")
            assert any(p["title"].startswith("live") or p["title"].startswith("Gap map: live")
                       or p["title"].startswith("M̂ (") for p in shown), shown
            screenshot(page, f"test-artifacts/beside-{lab}-{size}-{index}.png", f"{lab} {size} {tab}, pin 1 beside")
        page.locator(".bk-tab").filter(has_text=first).first.click()
        assert wait_for(lambda: any(p["title"] == "pin 1" for p in plots(page)), timeout=120)
        shown = plots(page)
        assert len(shown) == len(alone) + 1, (alone, shown)
        menu.locator("button").nth(1).click()
        page.get_by_text("Live pictures alone").click()
        assert wait_for(lambda: len(plots(page)) == len(alone), timeout=120), plots(page)
