"""`boltzlab serve --basic-auth FILE`: no app and no data without a login; the app after one."""

from __future__ import annotations

import http.cookiejar
import json
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

import pytest

from boltzlab.dashboard.cli import check_basic_auth_file
from tests.serving import start_server, stop_server


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory):
    users = tmp_path_factory.mktemp("auth") / "users.json"
    users.write_text(json.dumps({"ada": "lovelace-1815"}))
    proc, base = start_server("--basic-auth", str(users), "--cookie-secret", "test-secret-0123456789",
                              ready="/login")
    yield base
    stop_server(proc)


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
    out = subprocess.run([sys.executable, "-m", "boltzlab", "serve", "--basic-auth", str(tmp_path / "nope.json")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "is not a file" in out.stderr

