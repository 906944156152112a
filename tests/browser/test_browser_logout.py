"""With a login, the page's header shows the user and a "Log out" link (issue 49 item 3), which
ends the login: the app then sends the browser back to the login form.  Without a login there
is no link (the other browser tests' servers have none)."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Page, expect

from tests.serving import start_server, stop_server

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def login_url(tmp_path_factory):
    users = tmp_path_factory.mktemp("logout") / "users.json"
    users.write_text(json.dumps({"ada": "lovelace-1815"}))
    proc, base = start_server("--workers", "0", "--basic-auth", str(users), "--cookie-secret", "test-secret-0123456789",
                              ready="/login")
    yield base
    stop_server(proc)


def test_the_logout_link_ends_the_login(page: Page, login_url):
    page.goto(login_url + "/", timeout=120_000)
    page.locator("input[name=username]").fill("ada")
    page.locator("input[type=password]").fill("lovelace-1815")
    page.locator("input[type=password]").press("Enter")
    expect(page.locator(".bk-tab").filter(has_text="FVBM").first).to_be_visible(timeout=120_000)
    link = page.locator("a.boltzlab-logout")
    expect(link).to_be_visible(timeout=120_000)
    expect(link).to_contain_text("ada")
    expect(link).to_contain_text("Log out")
    link.click()
    page.wait_for_url("**/logout", timeout=120_000)
    assert not any(c["name"] == "user" for c in page.context.cookies())
    page.goto(login_url + "/", timeout=120_000)  # logged out: the login form again, no app
    assert "/login" in page.url
    expect(page.locator("input[type=password]")).to_be_visible()
    assert page.locator(".bk-tab").count() == 0


def test_no_logout_link_without_a_login(page: Page):
    proc, base = start_server("--workers", "0", "--recycle-mb", "0")
    try:
        page.goto(base + "/", timeout=120_000)
        expect(page.locator(".bk-tab").filter(has_text="FVBM").first).to_be_visible(timeout=120_000)
        assert page.locator("a.boltzlab-logout").count() == 0
    finally:
        stop_server(proc)
