"""A server's first start: pages answer while the kernels compile; each lab says
"Preparing… first start only" with ▶ Play not enabled, and opens by itself once its kernel
groups are loaded (dashboard.startup).  The compiling is gated by the test: the app is
served in this process with a Startup whose groups the test marks loaded."""

from __future__ import annotations

import panel as pn
import pytest
from playwright.sync_api import Page, expect

from boltzlab.engine.warmup import GROUPS
from tests.serving import answers, free_port
from tests.waiting import wait_for

pytestmark = pytest.mark.browser


@pytest.fixture
def gated(monkeypatch):
    """(the server's Startup, nothing loaded yet; the app's URL)."""
    from boltzlab.dashboard import startup
    from boltzlab.dashboard.app import applications

    gate = startup.Startup()
    gate._reset()  # as serve's start does: no group loaded
    gate._first_done = True  # no worker processes to wait for (the app's runs are threads here)
    monkeypatch.setattr(startup, "STARTUP", gate)
    port = free_port()
    server = pn.serve(applications(), port=port, address="127.0.0.1", show=False, threaded=True, liveness=True,
                      title="Boltzmann Lab")
    url = f"http://127.0.0.1:{port}"
    assert wait_for(lambda: answers(url + "/liveness"), timeout=120)
    yield gate, url
    server.stop()


def test_a_lab_waits_for_its_kernels_then_opens_by_itself(gated, page: Page):
    gate, url = gated
    page.goto(url + "/")
    expect(page.get_by_text("Preparing… first start only (compiling kernels 0 of 7).")).to_be_visible(timeout=120_000)
    play = page.get_by_role("button", name="▶ Play")
    expect(play).to_be_disabled()
    assert answers(url + "/liveness")  # the server answers meanwhile

    for group in ("fvbm", "fvbm_bound"):  # the FVBM lab's groups: it opens, Play enabled
        gate._loaded(group)
    expect(play).to_be_enabled(timeout=120_000)
    expect(page.get_by_text("Preparing…", exact=False)).to_have_count(0)

    page.locator(".bk-tab").filter(has_text="TAP").first.click()  # TAP's groups are not loaded yet
    expect(page.get_by_text("Preparing… first start only", exact=False)).to_be_visible(timeout=120_000)
    for group in GROUPS:
        gate._loaded(group)
    expect(page.get_by_text("Preparing…", exact=False)).to_have_count(0, timeout=120_000)
    expect(page.get_by_role("button", name="▶ Play")).to_be_enabled(timeout=120_000)  # the TAP tab's (FVBM's is hidden)
