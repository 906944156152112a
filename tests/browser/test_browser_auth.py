"""`boltzlab serve --basic-auth FILE` in Chromium: only the login form without credentials."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def auth_url(tmp_path_factory):
    users = tmp_path_factory.mktemp("auth") / "users.json"
    users.write_text(json.dumps({"ada": "lovelace-1815"}))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "dashboard.cli", "serve", "--port", str(port), "--address",
                             "127.0.0.1", "--basic-auth", str(users), "--cookie-secret", "test-secret-0123456789"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 240  # the server warms the numba kernels first
    while True:
        try:
            urllib.request.urlopen(base + "/login", timeout=5).read()
            break
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"server did not start: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(1)
    yield base
    proc.terminate()
    proc.wait(timeout=30)


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
    expect(page.get_by_text("Invalid username or password")).to_be_visible(timeout=30_000)
    assert page.locator(".bk-tab").count() == 0
    page.locator("input[name=username]").fill("ada")
    page.locator("input[type=password]").fill("lovelace-1815")
    page.locator("input[type=password]").press("Enter")
    expect(page.locator(".bk-tab").filter(has_text="FVBM").first).to_be_visible(timeout=120_000)
