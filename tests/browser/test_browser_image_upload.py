"""Your own images in the TAP and Frank-Wolfe labs, in a real Chromium: choose "Upload", a bad
file is refused and changes nothing, a good one (10 x 12 images; a CSV once its width is given)
trains when Play is pressed and its receptive fields are drawn in its shape."""

from __future__ import annotations

import io

import numpy as np
import pytest
from playwright.sync_api import Page, expect

from tests.browser.test_browser_fvbm import pause_or_ended, points, tab_header, wait_until
from tests.browser.test_browser_tap import JS_IMAGE, JS_TEXT, open_tap

pytestmark = pytest.mark.browser

HEIGHT, WIDTH = 10, 12


def npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def bars() -> np.ndarray:
    rng = np.random.default_rng(0)
    X = (rng.random((80, HEIGHT, WIDTH)) < 0.1).astype(np.uint8)
    X[np.arange(80), rng.integers(0, HEIGHT, 80), :] = 1  # a bar in each image
    return X


def good_images() -> bytes:
    return npz(X=bars())


def csv_rows(X: np.ndarray) -> bytes:
    """One image a row (its pixels row by row), under a header row."""
    flat = X.reshape(len(X), -1)
    header = ",".join(f"px{j}" for j in range(flat.shape[1]))
    return (header + "\n" + "\n".join(",".join(map(str, row)) for row in flat) + "\n").encode()


#: the (height, width) of every tile an ImageGrid's hover rectangles say it drew
JS_TILES = """(name) => {
  let found = null;
  for (const doc of Bokeh.documents)
    for (const m of doc.all_models)
      if (m.name === name && m.data && m.data.w)
        found = Array.from(m.data.w).map((w, i) => [m.data.h[i], w]);
  return found;
}"""


def upload(page: Page, name: str, content: bytes) -> None:
    page.locator("input[type=file][accept='.npz,.csv']").set_input_files(
        files=[{"name": name, "mimeType": "application/octet-stream", "buffer": content}])


def test_tap_trains_on_uploaded_images(page: Page, app_url, shot):
    open_tap(page, app_url)
    page.get_by_role("button", name="Upload", exact=True).click()
    expect(page.get_by_text("Choose an .npz or CSV file of images to upload")).to_be_visible(timeout=30_000)
    expect(page.locator("input[type=file][accept='.npz,.csv']")).to_be_attached()

    upload(page, "grey.npz", npz(X=np.full((30, HEIGHT, WIDTH), 7.0)))  # values outside [0, 1]
    expect(page.get_by_text("Could not use grey.npz")).to_be_visible(timeout=60_000)
    expect(page.get_by_text("Still training on: binarised MNIST 5k")).to_be_visible()

    upload(page, "bars.npz", good_images())
    expect(page.get_by_text("(your upload, SHA-256")).to_be_visible(timeout=60_000)
    expect(page.get_by_text("10×12 binary pixels (height×width)")).to_be_visible()
    play = page.get_by_role("button", name="▶ Play")
    expect(play).to_be_enabled(timeout=60_000)
    play.click()
    wait_until(lambda: len(points(page, "tap-ll:ll")["x"]) >= 3, timeout=120)
    # the receptive fields of the 16 hidden units, tiled 4 x 4 in the images' own shape (on
    # their tab of the stage: only the tab in view is in the browser's document)
    tab_header(page, "Fields (Fig. 4)").click()
    wait_until(lambda: (page.evaluate(JS_IMAGE, "fields") or 0) >= 16 * HEIGHT * WIDTH, timeout=60)
    pause_or_ended(page)  # 80 images: an epoch is one mini-batch, and the run may end first
    shot("tap-upload-training")


def test_frankwolfe_trains_on_an_uploaded_csv_once_its_width_is_given(page: Page, app_url, shot):
    """The Frank-Wolfe lab: a CSV of 10 x 12 images (120 pixels a row, no square) waits for its
    width; given it, ▶ Play inserts hidden units trained on it, drawn 10 x 12."""
    page.goto(app_url, timeout=120_000)  # a first session builds every lab: slow on a loaded machine
    tab_header(page, "Frank-Wolfe").click()
    expect(page.get_by_role("button", name="▶ Play")).to_have_count(1, timeout=60_000)  # the visible lab's
    page.get_by_role("button", name="Upload", exact=True).click()
    expect(page.get_by_text("Choose an .npz or CSV file of images to upload")).to_be_visible(timeout=30_000)

    upload(page, "bars.csv", csv_rows(bars()))
    expect(page.get_by_text("Read bars.csv: 80 images of 120 pixels, which is no square")).to_be_visible(
        timeout=60_000)
    expect(page.get_by_text("The images have 120 pixels, which is no square: set their width")).to_be_visible()
    expect(page.get_by_text("(your upload, SHA-256").filter(visible=True)).to_have_count(0)  # nothing trains on it yet

    width = page.get_by_label("Image width (pixels)")
    width.fill(str(WIDTH))
    width.press("Enter")
    expect(page.get_by_text("bars.csv (your upload, SHA-256")).to_be_visible(timeout=60_000)
    expect(page.get_by_text("10×12 binary pixels (height×width)")).to_be_visible()
    expect(page.get_by_text("Read bars.csv: 80 images of 120 pixels.", exact=True)).to_be_visible()
    expect(page.get_by_text("which is no square").filter(visible=True)).to_have_count(0)  # neither message asks now
    wait_until(lambda: page.evaluate(JS_TEXT, "Hidden units: ") == "Hidden units: 0", timeout=60)
    play = page.get_by_role("button", name="▶ Play")
    expect(play).to_be_enabled(timeout=60_000)
    play.click()
    wait_until(lambda: len(points(page, "fw-ll:units")["x"]) >= 3, timeout=120)
    wait_until(lambda: len(points(page, "fw-ll:test")["x"]) >= 1, timeout=120)  # scored on its test images
    tab_header(page, "Receptive fields").click()  # only the tab in view is in the browser's document
    wait_until(lambda: len(page.evaluate(JS_TILES, "fw-fields-tiles") or []) >= 3, timeout=60)
    assert {tuple(t) for t in page.evaluate(JS_TILES, "fw-fields-tiles")} == {(HEIGHT, WIDTH)}
    pause_or_ended(page)  # 80 images: the 60 units may all be in first
    shot("fw-upload-training")
