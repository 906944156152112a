"""`boltzlab serve --basic-auth FILE`: no app and no data without a login; the app after one."""

from __future__ import annotations

import http.cookiejar
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from dashboard.cli import check_basic_auth_file


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory):
    users = tmp_path_factory.mktemp("auth") / "users.json"
    users.write_text(json.dumps({"ada": "lovelace-1815"}))
    port = _free_port()
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


def test_without_a_login_there_is_no_app_and_no_data(auth_server):
    opener = urllib.request.build_opener(_NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as err:
        opener.open(auth_server + "/", timeout=30)
    assert err.value.code in (302, 303) and "login" in err.value.headers["Location"]
    body = err.value.read().decode(errors="replace")
    assert "Boltzmann Lab" not in body and "bokeh" not in body.lower()
    # a wrong password does not get in either
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    form = urllib.parse.urlencode({"username": "ada", "password": "wrong"}).encode()
    page = opener.open(auth_server + "/login", data=form, timeout=30).read().decode()
    assert "Invalid username or password" in page and not any(c.name == "user" for c in jar)


def test_with_a_login_the_app_is_served(auth_server):
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    form = urllib.parse.urlencode({"username": "ada", "password": "lovelace-1815"}).encode()
    opener.open(auth_server + "/login", data=form, timeout=60).read()
    assert any(c.name == "user" for c in jar)
    page = opener.open(auth_server + "/", timeout=120).read().decode()
    assert "Boltzmann Lab" in page


@pytest.mark.parametrize("content, message", [
    (None, "is not a file"),
    ("{not json", "not valid JSON"),
    ("[]", "non-empty JSON object"),
    ('{"ada": ""}', "non-empty string"),
])
def test_bad_basic_auth_files_are_refused(tmp_path, content, message):
    path = tmp_path / "users.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=message):
        check_basic_auth_file(str(path))


def test_serve_refuses_a_missing_auth_file_with_exit_code_2(tmp_path):
    out = subprocess.run([sys.executable, "-m", "dashboard.cli", "serve", "--basic-auth", str(tmp_path / "nope.json")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "is not a file" in out.stderr


@pytest.mark.browser
def test_a_browser_without_credentials_gets_the_login_form_only(auth_server):
    """In Chromium: no app, no Bokeh document, no data until the form is filled in."""
    import os

    from playwright.sync_api import expect, sync_playwright

    chromium = "/usr/bin/chromium"
    if not os.path.exists(chromium):
        if os.environ.get("CI"):
            pytest.fail(f"{chromium} is not installed (the README's test command installs it)")
        pytest.skip(f"{chromium} is not installed")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=[
            "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"])
        try:
            page = browser.new_page()
            page.goto(auth_server + "/?fvbm.d=6", timeout=120_000)
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
        finally:
            browser.close()
