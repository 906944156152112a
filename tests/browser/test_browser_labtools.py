"""Sharing and saving in a real Chromium (issue 7), on the FVBM lab: a link reproduces a
run; save -> reload -> load -> continue gives the uninterrupted run's numbers; a bad
checkpoint is reported and changes nothing."""

from __future__ import annotations

import urllib.parse

import pytest
from playwright.sync_api import Page, expect

from test_browser_fvbm import open_lab, points, sweep_text, wait_until

pytestmark = pytest.mark.browser

LOAD_INPUT = ".fvbm-load-checkpoint input[type=file]"


def step(page: Page, expected_sweep: int) -> None:
    page.get_by_role("button", name="Step", exact=True).click()
    wait_until(lambda: sweep_text(page) == f"Sweep {expected_sweep}"
               and len(points(page)["x"]) == expected_sweep)


def query(url: str) -> dict[str, str]:
    return {k: v[-1] for k, v in urllib.parse.parse_qs(urllib.parse.urlparse(url).query).items()}


def test_a_link_reproduces_the_settings_and_the_first_records(page: Page, app_url, shot):
    link = f"{app_url}/?fvbm.d=6&fvbm.data_seed=5&fvbm.init=random&fvbm.init_seed=3"
    open_lab(page, link)
    expect(page.get_by_text("d = 6 variables")).to_be_visible()
    expect(page.get_by_text("Settings loaded from the link.")).to_be_visible()
    step(page, 1)
    step(page, 2)
    first = points(page)["y"]
    # the address bar now holds every setting of the lab (seeds included)
    wait_until(lambda: query(page.url).get("fvbm.tol") == "1e-05")
    shared = query(page.url)
    assert shared["fvbm.d"] == "6" and shared["fvbm.init_seed"] == "3"
    assert shared["fvbm.init"] == "random"

    # "Copy link" puts the same address on the clipboard
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.get_by_role("button", name="Copy link").first.click()
    expect(page.get_by_role("button", name="✓ Link copied").first).to_be_visible()
    copied = page.evaluate("navigator.clipboard.readText()")
    assert query(copied) == query(page.url)
    shot("labtools-link")

    other = page.context.new_page()  # a new page is a new session with its own runner
    open_lab(other, copied)
    expect(other.get_by_text("d = 6 variables")).to_be_visible()
    step(other, 1)
    step(other, 2)
    assert points(other)["y"] == first
    other.close()


def test_save_reload_load_and_continue_exactly(page: Page, app_url, tmp_path, shot):
    open_lab(page, app_url)
    for k in (1, 2, 3):
        step(page, k)
    saved = points(page)["y"]
    with page.expect_download(timeout=120_000) as download:
        page.get_by_role("button", name="Save checkpoint").first.click()
    path = tmp_path / "fvbm.npz"
    download.value.save_as(path)
    expect(page.get_by_text("Saved a checkpoint after 3 step(s)")).to_be_visible()
    step(page, 4)
    uninterrupted = points(page)["y"]

    page.reload()
    open_lab(page, app_url)
    assert points(page)["x"] == []
    page.locator(LOAD_INPUT).set_input_files(str(path))
    expect(page.get_by_text("Loaded fvbm.npz: 3 step(s) restored")).to_be_visible(timeout=120_000)
    wait_until(lambda: sweep_text(page) == "Sweep 3")
    assert points(page)["y"] == saved  # the curves come back with the model
    step(page, 4)
    assert points(page)["y"] == uninterrupted
    shot("labtools-loaded")


def test_a_bad_checkpoint_is_reported_and_changes_nothing(page: Page, app_url, shot):
    open_lab(page, app_url)
    step(page, 1)
    step(page, 2)
    before = points(page)["y"]
    page.locator(LOAD_INPUT).set_input_files(
        files=[{"name": "model.npz", "mimeType": "application/octet-stream",
                "buffer": b"this is not an npz archive"}])
    expect(page.get_by_text("Could not load model.npz")).to_be_visible(timeout=120_000)
    expect(page.get_by_text("The current run is unchanged.")).to_be_visible()
    assert sweep_text(page) == "Sweep 2" and points(page)["y"] == before
    step(page, 3)  # and it still trains
    shot("labtools-bad-checkpoint")
