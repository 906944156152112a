"""Uploading a CSV in a real Chromium: a bad file is reported and changes nothing."""

from __future__ import annotations

import itertools

import pytest
from playwright.sync_api import Page, expect

from test_browser_fvbm import heat_cells, open_lab, sweep_text, tab_header, wait_until

pytestmark = pytest.mark.browser

BAD_CSV = b"a,b\n1,-1\n7,1\n-1,1\n"  # line 3, column 1 holds a 7
# every ±1 pattern of three votes (so the MPLE exists), p and q agreeing more often
GOOD_ROWS = [row for row in itertools.product([-1, 1], repeat=3)
             for _ in range(2 + 4 * (row[0] == row[1]) + (row[1] == row[2]))]
GOOD_CSV = ("p,q,r\n" + "\n".join(",".join(map(str, row)) for row in GOOD_ROWS)
            + "\n").encode()


def upload(page: Page, name: str, content: bytes) -> None:
    page.locator("input[type=file][accept='.csv']").set_input_files(
        files=[{"name": name, "mimeType": "text/csv", "buffer": content}])


def test_upload_bad_then_good_csv(page: Page, app_url, shot):
    open_lab(page, app_url)
    before = page.get_by_text("n = 16,000 rows, d = 10 variables")
    expect(before).to_be_visible()

    page.get_by_role("button", name="Upload", exact=True).click()
    expect(page.locator("input[type=file][accept='.csv']")).to_be_attached()
    upload(page, "bad.csv", BAD_CSV)
    message = page.get_by_text("Could not use this data")
    expect(message).to_be_visible(timeout=15_000)
    expect(page.get_by_text("Line 3, column 1 ('a')")).to_be_visible()
    expect(page.get_by_text("Still using: simulated d=10")).to_be_visible()
    expect(before).to_be_visible()  # the previous data (and its description) are kept
    page.get_by_role("button", name="Step").click()  # ... and the run on them
    tab_header(page, "Couplings M").click()  # only the tab in view is in the browser's document
    wait_until(lambda: heat_cells(page) == 100)
    shot("fvbm-upload-bad")

    upload(page, "good.csv", GOOD_CSV)
    expect(page.get_by_text(f"n = {len(GOOD_ROWS)} rows, d = 3 variables")).to_be_visible(
        timeout=15_000)
    # the data panel names the file (exact: the hidden "Reading good.csv…" badge also holds it)
    expect(page.get_by_text("good.csv", exact=True)).to_be_visible()
    expect(message).to_be_hidden()
    expect(before).to_be_hidden()
    page.get_by_role("button", name="Step").click()
    wait_until(lambda: sweep_text(page) == "Sweep 1")
    wait_until(lambda: heat_cells(page) == 9)
    shot("fvbm-upload-good")
