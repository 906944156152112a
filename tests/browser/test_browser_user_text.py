"""User text stays text (issue 46 item 1), in a real Chromium: in every upload lab (TAP,
Frank-Wolfe, FVBM) a link, uploaded files (their names, a CSV's header and values) and
checkpoints (their file names, settings and data name) that carry HTML with an ``onerror``
script show as typed, and no script runs (``window.__xss`` stays undefined)."""

from __future__ import annotations

import itertools
import urllib.parse

import pytest
from playwright.sync_api import Page, expect

from boltzlab.dashboard.labtools import Checkpoint, write_checkpoint
from tests.browser.test_browser_fvbm import open_lab, tab_header
from tests.browser.test_browser_image_upload import bars, csv_rows, good_images

pytestmark = pytest.mark.browser

#: HTML that counts its runs in window.__xss, and a script element
XSS = '<img src=x onerror="window.__xss=(window.__xss||0)+1">'
SCRIPT = "<script>window.__xss=(window.__xss||0)+1</script>"
#: a file name as a browser sends it (no "/")
NAME = f"{XSS}<script>"
#: every ±1 pattern of three votes (so the MPLE exists)
ROWS = [row for row in itertools.product([-1, 1], repeat=3) for _ in range(2 + 3 * (row[0] == row[1]))]

#: an image whose load fails, appended after the page has shown the hostile text: once its
#: onerror ran, so had any the page's own broken images queued before it (a condition, not a clock)
JS_CANARY = """() => new Promise((resolve) => {
  const img = document.createElement("img");
  img.onerror = () => resolve(true);
  img.src = "x-canary-" + Date.now();
  document.body.appendChild(img);
})"""


def no_script_ran(page: Page) -> None:
    assert page.evaluate(JS_CANARY)
    assert page.evaluate("window.__xss") is None, "a script from user text ran"


def link(app_url: str, key: str, page_index: int, **values: str) -> str:
    """The app's address with ``key.name=value`` settings (and a name that is HTML) in the query."""
    query = {"page": str(page_index), **{f"{key}.{k}": v for k, v in values.items()}, f"{key}.{XSS}": "1"}
    return f"{app_url}/?{urllib.parse.urlencode(query)}"


def load_checkpoints(page: Page, key: str, data_name: bool) -> None:
    """Load hostile checkpoints (file name, settings; and the data name, for a lab that
    records its data): each is refused, its reason shown as typed."""
    loader = page.locator(f".{key}-load-checkpoint input[type=file]")
    files = [(f"{NAME}1.npz", Checkpoint(key, {"seed" if key != "fvbm" else "init_seed": XSS, SCRIPT: "1"}, {}))]
    if data_name:  # settings that load, trained on other data: the saved data's name is quoted
        files.append((f"{NAME}2.npz", Checkpoint(key, {}, {}, data=("0" * 64, f"{NAME}.npz"))))
    for filename, ckpt in files:
        loader.set_input_files(files=[{"name": filename, "mimeType": "application/octet-stream",
                                       "buffer": write_checkpoint(ckpt)}])
        expect(page.get_by_text(f"Could not load {filename}:")).to_be_visible(timeout=120_000)
    if data_name:
        expect(page.get_by_text(f"other data ({NAME}.npz, SHA-256 000000000000")).to_be_visible()
    else:
        expect(page.get_by_text(f"Got '{XSS}'")).to_be_visible()


def upload_images(page: Page, key: str, name: str, content: bytes) -> None:
    page.locator(f".{key}-upload input[type=file]").set_input_files(
        files=[{"name": name, "mimeType": "application/octet-stream", "buffer": content}])


@pytest.mark.parametrize("key, title, index", [("tap", "TAP", 1), ("frankwolfe", "Frank-Wolfe", 2)],
                         ids=["tap", "frankwolfe"])
def test_image_labs_show_user_text_as_typed(page: Page, app_url, key, title, index, shot):
    page.goto(link(app_url, key, index, seed=XSS), timeout=120_000)
    tab_header(page, title).click()
    expect(page.get_by_role("button", name="▶ Play")).to_have_count(1, timeout=120_000)  # the visible lab's
    expect(page.get_by_text("Some settings in the link were ignored")).to_be_visible(timeout=60_000)
    expect(page.get_by_text(f"Got '{XSS}'")).to_be_visible()
    page.get_by_role("button", name="Upload", exact=True).click()
    expect(page.get_by_text("Choose an .npz or CSV file of images to upload")).to_be_visible(timeout=60_000)

    upload_images(page, key, f"{NAME}.npz", good_images())
    expect(page.get_by_text(f"{NAME}.npz (your upload, SHA-256")).to_be_visible(timeout=120_000)
    # a CSV whose header is HTML, of 10 x 12 images (set their width: 120 pixels are no square),
    # in another order: other data (the same pixels would be the same data, still described so)
    header, rows = csv_rows(bars()[::-1]).split(b"\n", 1)
    header = ",".join([XSS, SCRIPT, *header.decode().split(",")[2:]])
    upload_images(page, key, f"{NAME}.csv", f"{header}\n".encode() + rows)
    expect(page.get_by_text(f"Read {NAME}.csv: 80 images of 120 pixels")).to_be_visible(timeout=120_000)
    width = page.get_by_label("Image width (pixels)")
    width.fill("12")
    width.press("Enter")
    expect(page.get_by_text(f"{NAME}.csv (your upload, SHA-256")).to_be_visible(timeout=120_000)

    load_checkpoints(page, key, data_name=True)
    expect(page.get_by_text(f"{NAME}.csv (your upload, SHA-256")).to_be_visible()  # the run stays
    no_script_ran(page)
    shot(f"{key}-user-text")


def test_fvbm_shows_user_text_as_typed(page: Page, app_url, shot):
    open_lab(page, link(app_url, "fvbm", 0, init_seed=XSS))
    expect(page.get_by_text("Some settings in the link were ignored")).to_be_visible()
    expect(page.get_by_text(f"Got '{XSS}'")).to_be_visible()
    page.get_by_role("button", name="Upload", exact=True).click()
    csv_input = page.locator("input[type=file][accept='.csv']")
    expect(csv_input).to_be_attached()

    def upload(name: str, content: bytes) -> None:
        csv_input.set_input_files(files=[{"name": name, "mimeType": "text/csv", "buffer": content}])

    upload(f"{NAME}bad.csv", f"a,{XSS}\n1,-1\n-1,{SCRIPT}\n".encode())  # a value that is HTML, quoted
    expect(page.get_by_text("Could not use this data")).to_be_visible(timeout=60_000)
    expect(page.get_by_text(f"({XSS!r}) of the data file holds {SCRIPT!r}")).to_be_visible()

    body = "\n".join(",".join(map(str, row)) for row in ROWS)
    upload(f"{NAME}.csv", f"{XSS},{SCRIPT},q\n{body}\n".encode())  # its header is HTML too
    expect(page.get_by_text(f"{NAME}.csv: n = {len(ROWS)} rows, d = 3 variables")).to_be_visible(timeout=60_000)

    load_checkpoints(page, "fvbm", data_name=False)
    expect(page.get_by_text(f"{NAME}.csv: n = {len(ROWS)} rows")).to_be_visible()
    no_script_ran(page)
    shot("fvbm-user-text")
