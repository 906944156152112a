"""No request leaves the server's origin: every request a page makes (documents, scripts,
stylesheets, fonts, images, XHR/fetch, websockets, workers) while each lab loads and trains
goes to the served host and port, so the app works offline and tells no third party about
its visitors (issue 17: Panel's Fast design asked fonts.googleapis.com on every page).

Requests to any other origin are recorded and aborted (the test never waits on a network it
may not have), and the test fails naming them.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Page, expect

from tests.waiting import wait_until

pytestmark = pytest.mark.browser

LOCAL_SCHEMES = {"data", "blob", "about"}  # no network: inline data, object URLs, about:blank
TRAIN_SECONDS = 3.0  # how long each lab trains while its requests are recorded (not asserted)


def origin(url: str) -> tuple[str, int | None]:
    """(host, port) of an http(s) or ws(s) URL; a websocket to the same host and port is the
    same origin for this test (Bokeh's session socket)."""
    parts = urlsplit(url)
    default = {"http": 80, "ws": 80, "https": 443, "wss": 443}.get(parts.scheme)
    return (parts.hostname or "", parts.port or default)


class Requests:
    """Every URL the browser context asks for, and those not to the served origin."""

    def __init__(self, base: str):
        self.home = origin(base)
        self.seen: list[str] = []
        self.foreign: list[str] = []
        self.frames = 0  # websocket messages the pages received (the plots' updates)

    def local(self, url: str) -> bool:
        scheme = urlsplit(url).scheme
        return scheme in LOCAL_SCHEMES or (scheme in ("http", "https", "ws", "wss") and origin(url) == self.home)

    def record(self, url: str) -> None:
        self.seen.append(url)
        if not self.local(url) and url not in self.foreign:
            self.foreign.append(url)

    def attach(self, page: Page) -> None:
        context = page.context

        def route(r):  # every request the context would send to the network
            self.record(r.request.url)
            if self.local(r.request.url):
                r.continue_()
            else:
                r.abort()

        def websocket(ws):
            self.record(ws.url)
            ws.on("framereceived", lambda _: setattr(self, "frames", self.frames + 1))

        context.route("**/*", route)
        context.on("request", lambda request: self.record(request.url))
        context.on("page", lambda p: p.on("websocket", websocket))
        page.on("websocket", websocket)


@pytest.mark.parametrize("path", ["/fvbm", "/tap", "/frankwolfe", "/bound"])
def test_a_training_lab_asks_nothing_outside_its_origin(page: Page, app_url, path):
    requests = Requests(app_url)
    requests.attach(page)
    page.set_default_navigation_timeout(120_000)  # a busy machine builds a lab slowly
    page.goto(app_url + path)
    play = page.get_by_role("button", name="▶ Play")
    expect(play).to_have_count(1, timeout=90_000)
    expect(play).to_be_enabled(timeout=90_000)
    before = requests.frames
    play.click()
    # it trains: the server streams updates over the session's websocket (to this origin)
    # (Playwright's sync API delivers events only while it is called: wait through it)
    wait_until(lambda: page.wait_for_timeout(100) or requests.frames >= before + 5, timeout=120)
    page.wait_for_timeout(TRAIN_SECONDS * 1000)  # let the plots stream (and anything they load, load)
    assert any(urlsplit(u).scheme in ("ws", "wss") for u in requests.seen), requests.seen
    assert requests.foreign == [], f"{path} asked outside {app_url}: {requests.foreign}"


def test_the_whole_app_and_its_about_page_ask_nothing_outside_its_origin(page: Page, app_url):
    requests = Requests(app_url)
    requests.attach(page)
    page.set_default_navigation_timeout(120_000)
    page.goto(app_url + "/")
    expect(page.get_by_role("button", name="▶ Play")).to_have_count(1, timeout=90_000)
    page.locator(".bk-tab").filter(has_text="About").first.click()
    expect(page.get_by_text("About Boltzmann Lab").first).to_be_visible(timeout=60_000)
    page.wait_for_timeout(1000)  # anything the About page loads
    assert requests.foreign == [], f"/ asked outside {app_url}: {requests.foreign}"
