"""`boltzlab serve --basic-auth FILE` in Chromium: only the login form without credentials."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Page, expect

from tests.serving import start_server, stop_server

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def auth_url(tmp_path_factory):
    users = tmp_path_factory.mktemp("auth") / "users.json"
    users.write_text(json.dumps({"ada": "lovelace-1815"}))
    proc, base = start_server("--basic-auth", str(users), "--cookie-secret", "test-secret-0123456789",
                              ready="/login")
    yield base
    stop_server(proc)


def test_without_credentials_only_the_login_form(page: Page, auth_url):
    """No app, no Bokeh document, no data until the form is filled in correctly."""
    page.goto(auth_url + "/?fvbm.d=6", timeout=120_000)
    assert "/login" in page.url
    expect(page.locator("input[type=password]")).to_be_visible()
    assert page.locator(".bk-tab").count() == 0
    assert page.evaluate("typeof Bokeh === 'undefined' || Bokeh.documents.length === 0")
    page.locator("input[name=username]").fill("ada")
    page.locator("input[type=password]").fill("wrong")
    page.locator("input[type=password]").press("Enter")
    expect(page.get_by_text("Invalid username or password")).to_be_visible(timeout=120_000)
    assert page.locator(".bk-tab").count() == 0
    page.locator("input[name=username]").fill("ada")
    page.locator("input[type=password]").fill("lovelace-1815")
    page.locator("input[type=password]").press("Enter")
    expect(page.locator(".bk-tab").filter(has_text="FVBM").first).to_be_visible(timeout=120_000)
