"""What the browser tests look at in a page: its visible Bokeh plots and tables, and a
screenshot taken once the plots are painted (``tests/browser/test_layout.py``; the other
tests' ``shot`` takes the page as it is: on a playing page the plots never look the same
twice, and a wait there would widen a test's races with its own run)."""

from __future__ import annotations

import io

from PIL import Image
from playwright.sync_api import Page

from tests.waiting import wait_for

# the visible Bokeh plots: their box on the page and how many rows their glyphs hold
JS_PLOTS = """() => {
  const out = [];
  function walk(v) {
    if (!v) return;
    if (v.frame && v.model && v.model.renderers) {
      const el = v.canvas_view ? v.canvas_view.el : v.el;
      if (el.isConnected && el.checkVisibility({checkVisibilityCSS: true})) {
        const r = el.getBoundingClientRect();
        let rows = 0;
        for (const g of v.model.renderers) {
          const data = g.visible && g.data_source ? g.data_source.data : null;
          const columns = data ? Object.values(data) : [];
          if (columns.length) rows += columns[0].length;
        }
        if (r.width > 0 && r.height > 0)
          out.push({title: v.model.title ? String(v.model.title.text) : '', x: r.x, y: r.y, w: r.width, h: r.height, rows});
      }
    }
    for (const c of (v.child_views || [])) walk(c);
  }
  for (const v of Bokeh.index) walk(v);
  return out;
}"""


# how many visible HTML tables (a race's "who won") the stage's tab in view shows
JS_TABLES = """() => {
  let n = 0;
  const count = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.shadowRoot) count(el.shadowRoot);
      if (el.tagName === 'TABLE' && el.checkVisibility({checkVisibilityCSS: true})) n += 1;
    }
  };
  // only the stage's tab in view: while a click swaps tabs, the old one's table lingers
  const find = (v) => {
    if (!v) return;
    if (v.model && String(v.model.type).endsWith('Tabs') && (v.model.css_classes || []).includes('lab-stage')) {
      const shown = v.child_views[v.model.active];
      if (shown) { if (shown.el.shadowRoot) count(shown.el.shadowRoot); count(shown.el); }
      return;
    }
    for (const c of (v.child_views || [])) find(c);
  };
  for (const v of Bokeh.index) find(v);
  return n;
}"""


def plots(page: Page) -> list[dict]:
    return page.evaluate(JS_PLOTS)


def painted_png(page: Page, timeout: float = 60.0) -> bytes | None:
    """A screenshot of the page on which every visible plot is painted: its box is not a
    single colour (a painted plot has at least its axes, a colour bar or a placeholder).  A
    plot's box can be laid out before its canvas is drawn, and a tab just shown may still be
    laid out again, so this waits for a screenshot taken between two equal looks at the
    plots; None if there was none within ``timeout`` seconds."""
    def painted() -> bytes | None:
        shown = plots(page)
        if not shown and not page.evaluate(JS_TABLES):  # (a tab between two renders)
            return None
        png = page.screenshot()
        image = Image.open(io.BytesIO(png)).convert("L")
        for p in shown:
            low, high = image.crop((int(p["x"]), int(p["y"]), int(p["x"] + p["w"]), int(p["y"] + p["h"]))).getextrema()
            if low == high:
                return None
        return png if plots(page) == shown else None

    return wait_for(painted, timeout=timeout)


def screenshot(page: Page, path: str, where: str) -> None:
    """Save :func:`painted_png` to ``path``; fails if the plots were never painted."""
    png = painted_png(page)
    assert png, f"{where}: plots not painted: {plots(page)}"
    with open(path, "wb") as f:
        f.write(png)
