"""How many plots lie on the first screen: each lab at 1280×720 with ``?present=1`` and at
1440×900, ▶ Play pressed, then every visible Bokeh plot canvas counted, and how many of them
lie wholly inside the viewport.  A measurement for people (the table in issue 23's note), not a
test: ``tests/browser/test_layout.py`` is the test.

    boltzlab serve --port 5006 --address 127.0.0.1 &
    python -m tests.browser.first_screen http://127.0.0.1:5006 [--seconds 25]
"""

from __future__ import annotations

import argparse
import time

from playwright.sync_api import sync_playwright

from boltzlab.dashboard.labs import LABS
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS

# every visible plot canvas (one box per plot), piercing shadow roots
JS_CANVASES = """() => {
  const out = new Set();
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.shadowRoot) walk(el.shadowRoot);
      if (el.tagName === 'CANVAS' && el.checkVisibility({checkVisibilityCSS: true})) {
        const r = el.getBoundingClientRect();
        if (r.width > 20 && r.height > 20) out.add([r.x, r.y, r.width, r.height].map(Math.round).join(','));
      }
    }
  };
  walk(document);
  return Array.from(out, s => s.split(',').map(Number));
}"""


def count(base: str, lab: str, width: int, height: int, present: bool, seconds: float) -> tuple[int, int]:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": width, "height": height})
        page.goto(f"{base}/{lab}" + ("?present=1" if present else ""), timeout=120_000)
        play = page.get_by_role("button", name="▶ Play")
        play.wait_for(timeout=120_000)
        play.click()
        time.sleep(seconds)  # a measurement of what a person sees after a while, not a test
        boxes = page.evaluate(JS_CANVASES)
        browser.close()
    inside = [b for b in boxes if b[0] >= 0 and b[1] >= 0 and b[0] + b[2] <= width + 1 and b[1] + b[3] <= height + 1]
    return len(inside), len(boxes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="the served app, e.g. http://127.0.0.1:5006")
    parser.add_argument("--seconds", type=float, default=25.0, help="how long to play before counting")
    args = parser.parse_args()
    print("| lab | 1280×720, `?present=1` | 1440×900 |\n|---|---|---|")
    for cls in LABS:
        cells = [count(args.base, cls.key, w, h, present, args.seconds)
                 for w, h, present in ((1280, 720, True), (1440, 900, False))]
        print(f"| {cls.title} | " + " | ".join(f"{a} of {b} plots on the first screen" for a, b in cells) + " |")


if __name__ == "__main__":
    main()
