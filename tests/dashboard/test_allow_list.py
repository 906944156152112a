"""`boltzlab serve --allow-user/--allow-users-file/--admin-user` (issue 49): a login lets in only
the users on the list, the admin page only its users; everyone else gets a page that says so and
nothing else.  Served for real on 127.0.0.1, with --basic-auth and with a fake OAuth provider
(Panel's ``generic`` provider pointed at a token endpoint in this process)."""

from __future__ import annotations

import base64
import http.cookiejar
import http.cookies
import http.server
import json
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from types import SimpleNamespace

import pytest

from boltzlab.dashboard.allow_list import Gate, read_users_file, refuse_outsiders
from tests.serving import free_port, start_server, stop_server

SECRET = "test-secret-0123456789"
PASSWORDS = {"ada": "lovelace-1815", "eve": "eavesdrop-1984", "root": "admin-password-1"}


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def _opener(jar: http.cookiejar.CookieJar, follow: bool = True) -> urllib.request.OpenerDirector:
    handlers = [urllib.request.HTTPCookieProcessor(jar)] + ([] if follow else [_NoRedirect])
    return urllib.request.build_opener(*handlers)


def _get(opener, url: str, timeout: float = 120) -> tuple[int, str]:
    """Status and body of a GET, errors included."""
    try:
        with opener.open(url, timeout=timeout) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")


def _assert_refused(status: int, body: str, user: str) -> None:
    """The refusal page: 403, says so and names the user, and carries no app (no Bokeh, no
    session token, no template)."""
    assert status == 403, (status, body[:300])
    assert "Not on this server's list of users" in body and user in body
    lowered = body.lower()
    for trace in ("bokeh", "session_id", "token", "fastlisttemplate", "<script"):
        assert trace not in lowered, trace


# ------------------------------------------------------------------ checked before the start

def _serve(*options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "boltzlab", "serve", "--workers", "0", *options],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def users_json(tmp_path):
    path = tmp_path / "users.json"
    path.write_text(json.dumps(PASSWORDS))
    return str(path)


def test_a_missing_users_file_is_refused_at_start_with_exit_code_2(tmp_path, users_json):
    out = _serve("--basic-auth", users_json, "--allow-users-file", str(tmp_path / "nope.txt"))
    assert out.returncode == 2
    assert "--allow-users-file: cannot read" in out.stderr and "nope.txt" in out.stderr


@pytest.mark.parametrize("options, message", [
    (["--allow-user", "ada"], "--allow-user: the lists name users of a login; give --basic-auth or --oauth-provider"),
    (["--allow-users-file", "whatever.txt"], "--allow-users-file: the lists name users of a login"),
    (["--admin-user", "root"], "--admin-user: the lists name users of a login"),
])
def test_allow_lists_without_a_login_are_refused_at_start(options, message):
    out = _serve(*options)
    assert out.returncode == 2 and message in out.stderr, out.stderr


def test_admin_user_needs_admin_and_to_be_on_the_list(users_json):
    out = _serve("--basic-auth", users_json, "--admin-user", "root")
    assert out.returncode == 2 and "--admin-user: for the admin page; give --admin too." in out.stderr
    out = _serve("--basic-auth", users_json, "--admin", "--allow-user", "ada", "--admin-user", "root")
    assert out.returncode == 2 and "--admin-user root: not on the list of users" in out.stderr


def test_users_file_one_name_a_line_with_comments(tmp_path, users_json):
    path = tmp_path / "users.txt"
    path.write_text("# the group\nada  # PI\n\n  alan\n#eve\n", encoding="utf-8")
    assert read_users_file(str(path)) == ["ada", "alan"]
    (tmp_path / "empty.txt").write_text("# nobody yet\n")
    out = _serve("--basic-auth", users_json, "--allow-users-file", str(tmp_path / "empty.txt"))
    assert out.returncode == 2 and "names nobody, so nobody would get in" in out.stderr


def test_the_gate_lets_in_listed_users_and_admins_only():
    gate = Gate(allowed={"Ada", "root"}, admins={"root"}, prefix="/lab")
    assert gate.lets_in("ada", "/lab/") and gate.lets_in("ADA", "/lab/fvbm")
    assert not gate.lets_in("eve", "/lab/") and not gate.lets_in(None, "/lab/")
    assert not gate.lets_in("ada", "/lab/admin") and gate.lets_in("root", "/lab/admin/")
    everyone = Gate(admins={"root"})  # no list of users: only the admin page is kept
    assert everyone.lets_in("eve", "/") and not everyone.lets_in("eve", "/admin")


def test_the_websocket_and_autoload_of_a_refused_user_are_refused(monkeypatch):
    from panel.config import config
    from tornado.web import HTTPError, create_signed_value

    from boltzlab.dashboard import allow_list

    monkeypatch.setattr(allow_list, "GATE", Gate(allowed={"ada"}))
    monkeypatch.setattr(config, "cookie_secret", SECRET)

    def request(path: str, user: str | None):
        cookies = http.cookies.SimpleCookie()
        if user is not None:
            cookies["user"] = create_signed_value(SECRET, "user", user).decode()
        return SimpleNamespace(path=path, cookies=cookies)

    for path in ("/ws", "/fvbm/ws", "/fvbm/autoload.js"):
        with pytest.raises(HTTPError) as err:
            refuse_outsiders(request(path, "eve"))
        assert err.value.status_code == 403
        refuse_outsiders(request(path, "ada"))  # no exception
    refuse_outsiders(request("/", "eve"))  # the page's GET: Panel's authorize_callback refuses it, with its page


# ------------------------------------------------------------------ served: --basic-auth

@pytest.fixture(scope="module")
def basic_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("allow")
    (folder / "users.json").write_text(json.dumps(PASSWORDS))
    (folder / "allowed.txt").write_text("# who may use the lab\nroot\n")
    proc, base = start_server("--workers", "0", "--basic-auth", str(folder / "users.json"), "--cookie-secret", SECRET,
                              "--allow-user", "ada", "--allow-users-file", str(folder / "allowed.txt"),
                              "--admin", "--admin-user", "root", ready="/login")
    yield base
    stop_server(proc)


def _basic_login(base: str, user: str) -> urllib.request.OpenerDirector:
    jar = http.cookiejar.CookieJar()
    form = urllib.parse.urlencode({"username": user, "password": PASSWORDS[user]}).encode()
    with pytest.raises(urllib.error.HTTPError) as err:  # logged in: sent on to the app
        _opener(jar, follow=False).open(base + "/login", data=form, timeout=120)
    assert err.value.code in (302, 303)
    assert any(c.name == "user" for c in jar), f"{user} was not logged in"
    return _opener(jar)


def test_basic_auth_a_user_not_on_the_list_gets_only_the_refusal(basic_server):
    eve = _basic_login(basic_server, "eve")  # her password is right: the login knows her
    for path in ("/", "/fvbm", "/admin"):
        _assert_refused(*_get(eve, basic_server + path), "eve")
    status, body = _get(eve, basic_server + "/fvbm/autoload.js?bokeh-autoload-element=x")
    assert status == 403 and "bokeh" not in body.lower()


def test_basic_auth_listed_users_get_the_app_and_only_admins_the_admin_page(basic_server):
    ada = _basic_login(basic_server, "ada")
    status, body = _get(ada, basic_server + "/")
    assert status == 200 and "Boltzmann Lab" in body
    status, body = _get(ada, basic_server + "/admin")
    assert status == 403 and "Not on this server's list of users" in body and "bokeh" not in body.lower()
    root = _basic_login(basic_server, "root")  # from the users file
    assert _get(root, basic_server + "/")[0] == 200
    status, body = _get(root, basic_server + "/admin")
    assert status == 200 and "bokeh" in body.lower()


# ------------------------------------------------------------------ served: a fake OAuth provider

class _FakeProvider(http.server.BaseHTTPRequestHandler):
    """The token endpoint of an OAuth provider: the code is the user's name, and the id token
    (an unsigned JWT, as Panel reads it) gives ``<code>@example.org`` as the e-mail."""

    def do_POST(self):  # noqa: N802 - http.server's name
        length = int(self.headers.get("Content-Length", 0))
        form = urllib.parse.parse_qs(self.rfile.read(length).decode())
        code = form["code"][0]

        def part(obj: dict) -> str:
            return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

        id_token = f"{part({'alg': 'none'})}.{part({'email': code + '@example.org'})}.signature"
        body = json.dumps({"access_token": f"token-{code}", "id_token": id_token, "expires_in": 3600}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def oauth_server():
    provider = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _FakeProvider)
    thread = threading.Thread(target=provider.serve_forever, daemon=True)
    thread.start()
    at = f"http://127.0.0.1:{provider.server_address[1]}"
    extra = {"AUTHORIZE_URL": at + "/authorize", "TOKEN_URL": at + "/token", "USER_URL": at + "/user"}
    proc, base = start_server("--workers", "0", "--oauth-provider", "generic", "--oauth-key", "client-id",
                              "--oauth-secret", "client-secret", "--oauth-extra-params", json.dumps(extra),
                              "--cookie-secret", SECRET, "--allow-user", "Ada@Example.org", ready="/liveness")
    yield base, at
    stop_server(proc)
    provider.shutdown()


def _oauth_login(base: str, provider: str, name: str) -> urllib.request.OpenerDirector:
    """Through Panel's login: to the provider's authorize address, back with a code."""
    jar = http.cookiejar.CookieJar()
    opener = _opener(jar, follow=False)
    with pytest.raises(urllib.error.HTTPError) as err:
        opener.open(base + "/login", timeout=120)
    location = err.value.headers["Location"]
    assert location.startswith(provider + "/authorize")
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(location).query)
    # the provider sends the browser back with a code (by default to the app's root, which
    # passes it on to /login in its "next")
    url = query["redirect_uri"][0] + "?" + urllib.parse.urlencode({"code": name, "state": query["state"][0]})
    for _ in range(4):
        with pytest.raises(urllib.error.HTTPError) as err:
            opener.open(url, timeout=120)
        assert err.value.code in (302, 303), err.value.read()[:300]
        if any(c.name == "user" for c in jar):  # logged in: sent on to the app
            return _opener(jar)
        url = urllib.parse.urljoin(base + "/", err.value.headers["Location"])
    raise AssertionError(f"{name} was not logged in")


def test_oauth_a_user_not_on_the_list_gets_only_the_refusal(oauth_server):
    base, provider = oauth_server
    eve = _oauth_login(base, provider, "eve")
    for path in ("/", "/tap"):
        _assert_refused(*_get(eve, base + path), "eve@example.org")


def test_oauth_a_listed_user_gets_the_app(oauth_server):
    base, provider = oauth_server
    ada = _oauth_login(base, provider, "ada")  # listed as Ada@Example.org: names compare without case
    status, body = _get(ada, base + "/")
    assert status == 200 and "Boltzmann Lab" in body
