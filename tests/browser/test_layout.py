"""Every figure on the first screen: each lab at 1440×900 and, in presentation mode, at
1280×720, after ▶ Play and after one step.

Checked in a real Chromium: every visible plot canvas lies inside the viewport; no title,
label, button or select overflows its box (scrollWidth > clientWidth; a badge cut with "…"
on purpose, whose whole text is its hover title, excepted); no text drawn on a plot's canvas
is cut by the canvas's edge (a title, an axis label, a legend: measured by BokehJS's own views,
since canvas text is not in the DOM), nor a placeholder in the plot area by that area's edge;
nothing in the sidebar (a widget, its label, its help icon) reaches past the sidebar's right
edge, which would cut it; every tab of the lab's stage can be brought into view, and its plots
are drawn whole inside the viewport and painted (a tab's plots are sent to the browser when
it is clicked, so a canvas can have its box before it has drawn anything).  Screenshots of every state go to
test-artifacts/layout-*.png.  Every wait is on a condition, never on the clock.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import pytest
from playwright.sync_api import Page, expect

from boltzlab.dashboard.labs import LABS
from tests.browser.painting import JS_TABLES, plots, screenshot
from tests.waiting import ACTION_TIMEOUT_MS, wait_for, wait_until

pytestmark = pytest.mark.browser

SIZES = {"1440x900": (1440, 900, False), "1280x720-present": (1280, 720, True)}


# visible text whose box is too narrow for it (pierces shadow roots)
JS_OVERFLOW = """() => {
  const out = [];
  const tags = new Set(['BUTTON', 'SELECT', 'LABEL', 'H1', 'H2', 'H3', 'H4', 'P', 'SPAN', 'DIV', 'LI']);
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.shadowRoot) walk(el.shadowRoot);
      if (!tags.has(el.tagName) || !el.checkVisibility({checkVisibilityCSS: true})) continue;
      if ((el.tagName === 'DIV' || el.tagName === 'SPAN') && (el.childElementCount || !el.textContent.trim())) continue;
      const style = getComputedStyle(el);
      if (style.textOverflow === 'ellipsis' || ['auto', 'scroll'].includes(style.overflowX)) continue;
      if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1)
        out.push(`${el.tagName} "${el.textContent.trim().slice(0, 50)}" ${el.scrollWidth} > ${el.clientWidth}`);
    }
  };
  walk(document);
  return out;
}"""

# a one-line status badge whose text the page cut with "…" (its whole text is only on hover):
# what a lab says in one line must fit it, on a projector too
JS_CUT_BADGES = """() => {
  const out = [];
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.shadowRoot) walk(el.shadowRoot);
      if (el.classList && el.classList.contains('status-badge') && el.checkVisibility({checkVisibilityCSS: true})
          && el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1)
        out.push(`"${el.textContent.trim().slice(0, 80)}" ${el.scrollWidth} > ${el.clientWidth}`);
    }
  };
  walk(document);
  return out;
}"""

# text drawn on a visible plot's canvas that the canvas's edge cuts: a title (its text box, as
# BokehJS laid it out), an axis label (its length, measured as BokehJS measures it, centred on
# its axis) or a legend (its box); and a label in the plot area ("Press ▶ Play to start", "Computing
# the Isomap…"), which the plot area's edge cuts.  Canvas text is not in the DOM, so JS_OVERFLOW
# cannot see it.
JS_CLIPPED = """() => {
  const out = [];
  function walk(v) {
    if (!v) return;
    if (v.frame && v.model && v.model.renderers) {
      const el = v.canvas_view ? v.canvas_view.el : v.el;
      if (el.isConnected && el.checkVisibility({checkVisibilityCSS: true})) {
        const W = v.canvas_view.bbox.width, H = v.canvas_view.bbox.height;
        const plot = v.model.title ? String(v.model.title.text) : '';
        const say = (what, text, lo, hi, limit) => out.push(`${plot}: ${what} "${text}" spans ${Math.round(lo)}..${Math.round(hi)} of 0..${Math.round(limit)}`);
        for (const r of (v.all_renderer_views || v.computed_renderer_views || [])) {
          const type = r.model && r.model.type;
          if (!type || !r.model.visible) continue;
          if (type === 'Title' && r._rect && String(r.model.text).trim()) {
            const {sx, width} = r._rect;
            if (sx < -1 || sx + width > W + 1) say('title', r.model.text, sx, sx + width, W);
          } else if (r._axis_label_view && r.model.axis_label && r.bbox) {
            const g = r._axis_label_view.graphics();
            g.visuals = r.visuals.axis_label_text.values();
            g.angle = 0;
            g.base_font_size = v.base_font_size;
            const length = g.size().width;
            const horizontal = r.dimension == 0;
            const centre = horizontal ? r.bbox.hcenter : r.bbox.vcenter;
            const limit = horizontal ? W : H;
            if (centre - length / 2 < -1 || centre + length / 2 > limit + 1)
              say('axis label', r.model.axis_label, centre - length / 2, centre + length / 2, limit);
          } else if (type === 'Label' && r._rect && String(r.model.text).trim()) {
            // a placeholder or a hint written in the plot area, which clips it
            const {sx, width, anchor} = r._rect;
            const left = sx - (anchor ? anchor.x : 0) * width, f = v.frame.bbox;
            if (left < f.left - 1 || left + width > f.right + 1)
              out.push(`${plot}: label "${r.model.text}" spans ${Math.round(left)}..${Math.round(left + width)} ` +
                       `of the plot area ${Math.round(f.left)}..${Math.round(f.right)}`);
          } else if (type === 'Legend' && r.bbox && r.model.items.length) {
            const b = r.bbox;
            if (b.width > 0 && (b.left < -1 || b.right > W + 1)) say('legend', '', b.left, b.right, W);
            if (b.height > 0 && (b.top < -1 || b.bottom > H + 1)) say('legend (vertically)', '', b.top, b.bottom, H);
          }
        }
      }
    }
    for (const c of (v.child_views || [])) walk(c);
  }
  for (const v of Bokeh.index) walk(v);
  return out;
}"""

# what of the sidebar (the lab's controls, a column that scrolls on its own) reaches past its
# right edge, where the column cuts it: a widget, its label, its help icon
JS_SIDEBAR = """() => {
  const out = [];
  const hosts = [];
  const find = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.classList && el.classList.contains('lab-controls') && el.checkVisibility({checkVisibilityCSS: true}))
        hosts.push(el);
      if (el.shadowRoot) find(el.shadowRoot);
    }
  };
  find(document);
  for (const host of hosts) {
    const right = host.getBoundingClientRect().left + host.clientLeft + host.clientWidth;  // inside its scroll bar
    const walk = (root) => {
      for (const el of root.querySelectorAll('*')) {
        if (el.shadowRoot) walk(el.shadowRoot);
        if (!el.checkVisibility({checkVisibilityCSS: true})) continue;
        const r = el.getBoundingClientRect();
        if (r.width > 0 && r.height > 0 && r.right > right + 1)
          out.push(`${el.tagName}.${Array.from(el.classList).join('.')} "${(el.textContent || '').trim().slice(0, 40)}" ` +
                   `ends at ${Math.round(r.right)}, the sidebar at ${Math.round(right)}`);
      }
    };
    walk(host.shadowRoot || host);
  }
  return out;
}"""

# the stage's tab headers: label and right edge
JS_TABS = """(stage) => {
  const out = [];
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.shadowRoot) walk(el.shadowRoot);
      if (el.classList && el.classList.contains('bk-tab') && el.checkVisibility({checkVisibilityCSS: true})) {
        const r = el.getBoundingClientRect();
        out.push({text: el.textContent.trim(), right: r.right, bottom: r.bottom});
      }
    }
  };
  walk(document);
  return out;
}"""


# what the caption says (its Bokeh model's text)
JS_CAPTION = """() => {
  for (const doc of Bokeh.documents)
    for (const m of doc.all_models)
      if (m.css_classes && m.css_classes.includes('lab-caption')) return String(m.text || '');
  return null;
}"""


def outside(page: Page, width: int, height: int) -> list[dict]:
    return [p for p in plots(page) if p["x"] < -1 or p["y"] < -1 or p["x"] + p["w"] > width + 1
            or p["y"] + p["h"] > height + 1]


def check_first_screen(page: Page, width: int, height: int, where: str, tables: bool = False) -> list[dict]:
    """The visible plots, once there are some and all of them lie inside the viewport (the
    layout may still be settling when a tab was just shown); no text overflows, none is cut
    by its canvas, nothing reaches past the sidebar's edge.  ``tables``: a stage tab that
    may hold a table and no plot."""
    if tables:
        seen: list = [None]

        def settled():
            now = (plots(page), page.evaluate(JS_TABLES))
            same, seen[0] = now == seen[0], now
            return same and (now[0] or now[1]) and not outside(page, width, height)

        assert wait_for(settled, timeout=120), f"{where}: nothing shown, or plots outside {width}x{height}"
        shown = plots(page)
    else:
        shown = wait_for(lambda: (p := plots(page)) and not outside(page, width, height) and p, timeout=120)
        assert shown, f"{where}: plots outside {width}x{height}: {outside(page, width, height)}"
    assert all(p["w"] >= 120 and p["h"] >= 120 for p in shown), (where, shown)
    assert page.evaluate(JS_OVERFLOW) == [], where
    assert page.evaluate(JS_CUT_BADGES) == [], where
    assert page.evaluate(JS_SIDEBAR) == [], where
    # (a plot just shown may still be laying its text out)
    assert wait_for(lambda: page.evaluate(JS_CLIPPED) == [], timeout=30), (where, page.evaluate(JS_CLIPPED))
    tabs = page.evaluate(JS_TABS)
    assert all(t["right"] <= width + 1 and t["bottom"] <= height for t in tabs), (where, tabs)
    return shown


@contextlib.contextmanager
def playing_page(browser, app_url: str, lab: str, size: str, query: str = "") -> Iterator[Page]:
    """Lab ``lab``'s page in a browser window of ``size`` (``SIZES``; presentation mode with
    it), ▶ Play pressed and the first tab's plots filling with the run's Records; closed after."""
    width, height, present = SIZES[size]
    context = browser.new_context(viewport={"width": width, "height": height})
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    page = context.new_page()
    try:
        args = [a for a in (query, "present=1" if present else "") if a]
        page.goto(f"{app_url}/{lab}" + ("?" + "&".join(args) if args else ""), timeout=120_000)
        play = page.get_by_role("button", name="▶ Play")
        expect(play).to_be_enabled(timeout=120_000)
        play.click()
        wait_until(lambda: any(p["rows"] > 2 for p in plots(page)), timeout=180)
        yield page
    finally:
        context.close()


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("lab", [cls.key for cls in LABS])
def test_every_figure_is_on_the_first_screen(browser, app_url, lab, size):
    width, height, present = SIZES[size]
    cls = next(c for c in LABS if c.key == lab)
    with playing_page(browser, app_url, lab, size) as page:
        play = page.get_by_role("button", name="▶ Play")
        check_first_screen(page, width, height, f"{lab} {size} after Play")
        # paused before the screenshot: on a playing page its wait for two equal looks can
        # outlast a short run (Bound's ended first on an idle machine, and Pause was disabled)
        page.get_by_role("button", name="❚❚ Pause").click()
        expect(play).to_be_enabled(timeout=120_000)
        screenshot(page, f"test-artifacts/layout-{lab}-{size}-play.png", f"{lab} {size} after Play")
        if present:  # Next step narrates in the caption, which never moves a figure
            before = plots(page)
            page.get_by_role("button", name="Next step ▶").click()
            said = wait_for(lambda: (text := page.evaluate(JS_CAPTION)) and "Computing" not in text and text,
                            timeout=120)
            assert said, "Next step said nothing"
            after = check_first_screen(page, width, height, f"{lab} {size} after Next step")
            assert [(p["x"], p["y"]) for p in after] == [(p["x"], p["y"]) for p in before]
        else:
            page.get_by_role("button", name="Step", exact=True).click()
            expect(play).to_be_enabled(timeout=120_000)
            check_first_screen(page, width, height, f"{lab} {size} after Step")
        screenshot(page, f"test-artifacts/layout-{lab}-{size}-step.png", f"{lab} {size} after a step")
        # every figure is one click away, drawn whole on the first screen
        labels = [t["text"] for t in page.evaluate(JS_TABS) if t["text"] != cls.title]
        assert len(labels) >= 2, labels
        for index, label in enumerate(labels):
            # what the tab in view shows; a click swaps it once the server has sent the tab
            # clicked, so until then the checks below would look at the old tab
            before = ([p["title"] for p in plots(page)], page.evaluate(JS_TABLES))
            page.locator(".bk-tab").filter(has_text=label).first.click()
            if index:  # (the first is the tab already in view)
                assert wait_for(lambda: ([p["title"] for p in plots(page)], page.evaluate(JS_TABLES)) != before,
                                timeout=120), f"{lab} {size}: tab {label!r} never came into view"
            check_first_screen(page, width, height, f"{lab} {size} stage tab {label!r}", tables=True)
            screenshot(page, f"test-artifacts/layout-{lab}-{size}-tab{index}.png", f"{lab} {size} stage tab {label!r}")


# every plot font size the page's Bokeh models hold (axis labels, ticks, legends, titles)
JS_FONTS = """() => {
  const props = ['axis_label_text_font_size', 'major_label_text_font_size', 'label_text_font_size', 'text_font_size'];
  const out = [];
  for (const doc of Bokeh.documents)
    for (const m of doc.all_models)
      for (const p of props)
        if (typeof m[p] === 'string') out.push(`${m.type || m.constructor.name}.${p}=${m[p]}`);
  return out.sort();
}"""


JS_PRESENT_VAR = "document.documentElement.style.getPropertyValue('--bokeh-font-size')"


def test_the_presentation_link_and_switch_give_the_same_plot_fonts(browser, app_url):
    """``?present=1`` scales the plots before the design's theme reaches them, the header switch
    after: both must end with the same sizes (the switch once gave 1.62em, the link 16.9px)."""
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    page = context.new_page()
    try:
        page.goto(f"{app_url}/fvbm?present=1", timeout=120_000)
        expect(page.get_by_role("button", name="Next step ▶")).to_be_visible(timeout=120_000)
        linked = wait_for(lambda: (f := page.evaluate(JS_FONTS)) and f, timeout=60)
        page.goto(f"{app_url}/fvbm", timeout=120_000)
        expect(page.get_by_role("button", name="▶ Play")).to_be_enabled(timeout=120_000)
        plain = page.evaluate(JS_FONTS)
        page.get_by_role("button", name="Presentation mode").click()
        expect(page.get_by_role("button", name="Next step ▶")).to_be_visible(timeout=60_000)
        switched = wait_for(lambda: (f := page.evaluate(JS_FONTS)) != plain and f, timeout=60)
        assert switched == linked
        assert switched != plain  # the plots' fonts did grow
        # the switch's own browser code (views.browser_code.in_browser) set the page's sizes
        assert page.evaluate(JS_PRESENT_VAR) == "17px"
        page.get_by_role("button", name="Presentation mode: on").click()
        assert wait_for(lambda: page.evaluate(JS_PRESENT_VAR) == "", timeout=60)
    finally:
        context.close()
