"""Your own images in the TAP lab, in a real Chromium: choose "Upload", a bad file is
refused and changes nothing, a good one (10 x 12 images) trains when Play is pressed and its
receptive fields are drawn in its shape."""

from __future__ import annotations

import io

import numpy as np
import pytest
from playwright.sync_api import Page, expect

from tests.browser.test_browser_fvbm import points, wait_until
from tests.browser.test_browser_tap import JS_IMAGE, open_tap

pytestmark = pytest.mark.browser

HEIGHT, WIDTH = 10, 12


def npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def good_images() -> bytes:
    rng = np.random.default_rng(0)
    X = (rng.random((80, HEIGHT, WIDTH)) < 0.1).astype(np.uint8)
    X[np.arange(80), rng.integers(0, HEIGHT, 80), :] = 1  # a bar in each image
    return npz(X=X)


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
    # the receptive fields of the 16 hidden units, tiled 4 x 4 in the images' own shape
    wait_until(lambda: (page.evaluate(JS_IMAGE, "fields") or 0) >= 16 * HEIGHT * WIDTH, timeout=60)
    page.get_by_role("button", name="❚❚ Pause").click()
    expect(page.get_by_role("button", name="▶ Play")).to_be_enabled(timeout=120_000)
    shot("tap-upload-training")
