"""`boltzlab serve`'s options for a lab's IT (issue 22, item 4): --prefix, --use-xheaders,
Panel's OAuth options and --admin reach ``serve``, and what cannot work is refused (exit 2,
one sentence) without ever printing a secret.  ``boltzlab.dashboard.app.serve`` is replaced by a
recorder; tests/browser/test_behind_proxy.py serves the real thing behind nginx."""

from __future__ import annotations

import base64
import json
import os

import pytest
from cryptography.fernet import Fernet
from panel.config import config
from panel.io.state import state
from panel.util import edit_readonly

from boltzlab.dashboard import app, cli, recycling

CLIENT_SECRET = "client-SECRET-4f1d9a"
COOKIE_SECRET = "cookie-SECRET-77c0b3"
# a Fernet key that begins with "-", as 1 in 64 of Fernet.generate_key()'s do: argparse took
# such a value for an option (a random key here failed this file's tests once in CI)
KEY = base64.urlsafe_b64encode(bytes([0xFB, *range(31)])).decode()
assert KEY.startswith("-") and Fernet(KEY)
SECRETS = (CLIENT_SECRET, COOKIE_SECRET, KEY)
OAUTH = ["--oauth-provider", "github", "--oauth-key", "client-id", "--oauth-secret", CLIENT_SECRET]


@pytest.fixture
def served(monkeypatch, tmp_path):
    """The keyword arguments ``cmd_serve`` passed to ``boltzlab.dashboard.app.serve`` (empty: not
    called); Panel's global state that ``cmd_serve`` sets is restored afterwards."""
    calls: list[dict] = []
    monkeypatch.setattr(app, "serve", lambda **kwargs: calls.append(kwargs))

    def supervise(argv, port, address, env=None):  # the server's command line, run here
        monkeypatch.setenv(recycling.ENV_SOCKETS, "-1")
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        return cli.main(argv)

    monkeypatch.setattr(recycling, "supervise", supervise)
    for var in cli.LOGIN_ENV.values():
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(state, "encryption", None)
    monkeypatch.setattr(config, "_oauth_encryption_key", None)
    base_url = state.base_url
    users = tmp_path / "users.json"
    users.write_text(json.dumps({"ada": "lovelace-1815"}))
    yield calls, str(users)
    with edit_readonly(state):
        state.base_url = base_url


def no_secret_in(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


def test_prefix_xheaders_and_admin_reach_serve(served, capsys):
    calls, users = served
    code = cli.main(["serve", "--workers", "0", "--prefix", "lab/", "--use-xheaders", "--basic-auth", users,
                     "--cookie-secret", COOKIE_SECRET, "--admin"])
    assert code == 0 and len(calls) == 1
    kwargs = calls[0]
    assert kwargs["prefix"] == "/lab" and kwargs["use_xheaders"] is True and kwargs["admin"] is True
    assert kwargs["basic_auth"].endswith("users.json") and kwargs["cookie_secret"] == COOKIE_SECRET
    # Panel's login pages send the browser on inside the prefix, not to /
    assert state.base_url == "/lab/"
    no_secret_in("".join(capsys.readouterr()))


def test_without_the_new_flags_nothing_changes(served):
    calls, _ = served
    assert cli.main(["serve", "--workers", "0"]) == 0
    assert not {"prefix", "use_xheaders", "admin", "oauth_provider", "cookie_secret"} & set(calls[0])


@pytest.mark.parametrize("given, prefix", [("/lab", "/lab"), ("lab", "/lab"), ("/lab/", "/lab"),
                                           ("/a/b-c.d_e~", "/a/b-c.d_e~")])
def test_prefixes_are_normalised(given, prefix):
    assert cli.build_parser().parse_args(["serve", "--prefix", given]).prefix == prefix


@pytest.mark.parametrize("bad", ["/lab?x=1", "/la b", "/lab#top", "/../etc", "//", "/", "", "/l%20ab"])
def test_bad_prefixes_are_refused_by_argparse(bad, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.build_parser().parse_args(["serve", "--prefix", bad])
    assert exit_.value.code == 2 and "must be a URL path such as /lab" in capsys.readouterr().err


def test_oauth_options_reach_serve_and_the_key_encrypts(served, capsys):
    calls, _ = served
    code = cli.main(["serve", "--workers", "0", *OAUTH, "--oauth-extra-params", '{"tenant": "my-org"}',
                     "--oauth-redirect-uri", "https://lab.example.org/lab", "--oauth-encryption-key", KEY,
                     "--cookie-secret", COOKIE_SECRET])
    assert code == 0
    kwargs = calls[0]
    assert (kwargs["oauth_provider"], kwargs["oauth_key"], kwargs["oauth_secret"]) == ("github", "client-id", CLIENT_SECRET)
    assert kwargs["oauth_extra_params"] == {"tenant": "my-org"}
    assert kwargs["oauth_redirect_uri"] == "https://lab.example.org/lab"
    assert kwargs["cookie_secret"] == COOKIE_SECRET
    # pn.serve ignores oauth_encryption_key (Panel 1.9.4): cmd_serve sets what `panel serve` sets
    assert "oauth_encryption_key" not in kwargs
    assert Fernet(KEY).decrypt(state.encryption.encrypt(b"token")) == b"token"
    assert config.oauth_encryption_key == KEY.encode()
    out, err = capsys.readouterr()
    no_secret_in(out + err)
    assert "warning" not in err


def test_oauth_without_encryption_key_or_cookie_secret_warns_and_draws_a_secret(served, capsys):
    calls, _ = served
    assert cli.main(["serve", "--workers", "0", *OAUTH]) == 0
    # drawn once by serve's supervisor and handed to its server processes in their environment,
    # where Panel reads it: a fresh server process keeps the logins (dashboard.recycling)
    assert "cookie_secret" not in calls[0]
    secret = os.environ["PANEL_COOKIE_SECRET"]
    assert len(secret) >= 32 and state.encryption is None
    err = capsys.readouterr().err
    assert "no --oauth-encryption-key given" in err and "using a random one" in err
    assert secret not in err and CLIENT_SECRET not in err


def test_secrets_can_come_from_panels_environment_variables(served, monkeypatch, capsys):
    calls, _ = served
    monkeypatch.setenv("PANEL_OAUTH_SECRET", CLIENT_SECRET)
    monkeypatch.setenv("PANEL_OAUTH_ENCRYPTION", KEY)
    monkeypatch.setenv("PANEL_COOKIE_SECRET", COOKIE_SECRET)
    assert cli.main(["serve", "--workers", "0", "--oauth-provider", "github", "--oauth-key", "client-id",
                     "--num-procs", "2"]) == 0
    kwargs = calls[0]
    # Panel reads them from the environment itself; they are not passed on (nor printed)
    assert "oauth_secret" not in kwargs and "cookie_secret" not in kwargs
    assert state.encryption is not None
    no_secret_in("".join(capsys.readouterr()))


def test_pam_needs_no_client_id(served):
    calls, _ = served
    assert cli.main(["serve", "--workers", "0", "--oauth-provider", "pam", "--cookie-secret", COOKIE_SECRET]) == 0
    assert calls[0]["oauth_provider"] == "pam"


@pytest.mark.parametrize("argv, message", [
    (["--admin"], "--admin needs a login (--basic-auth or --oauth-provider): Panel's /admin page"),
    (["--admin", "--prefix", "/lab", "--use-xheaders"], "--admin needs a login"),
    (["--admin", "--cookie-secret", COOKIE_SECRET], "--admin needs a login"),
    (["--oauth-key", "client-id", "--oauth-secret", CLIENT_SECRET], "--oauth-key, --oauth-secret: for a login "
                                                                    "through an OAuth provider; give --oauth-provider too"),
    (["--oauth-encryption-key", KEY], "give --oauth-provider too"),
    (["--oauth-provider", "myspace", "--oauth-key", "k", "--oauth-secret", CLIENT_SECRET],
     "--oauth-provider must be one of Panel's providers: "),
    (["--oauth-provider", "github"], "needs --oauth-key (or PANEL_OAUTH_KEY) and --oauth-secret (or PANEL_OAUTH_SECRET)"),
    (["--oauth-provider", "github", "--oauth-key", "k"], "needs --oauth-secret (or PANEL_OAUTH_SECRET): the client id"),
    ([*OAUTH, "--oauth-extra-params", "{tenant: " + CLIENT_SECRET], "--oauth-extra-params must be a JSON object such as"),
    ([*OAUTH, "--oauth-extra-params", '["' + CLIENT_SECRET + '"]'], "must be a JSON object such as '{\"tenant\": \"my-org\"}', not a JSON list"),
    ([*OAUTH, "--oauth-encryption-key", "S" + KEY[1:-4]], "--oauth-encryption-key is not a Fernet key (32 bytes"),
    ([*OAUTH, "--oauth-encryption-key", KEY[:-2] + "é="], "--oauth-encryption-key is not a Fernet key"),
    ([*OAUTH, "--oauth-redirect-uri", "lab.example.org/lab"], "--oauth-redirect-uri must be an http:// or https:// URL"),
    ([*OAUTH, "--basic-auth", "users.json"], "--basic-auth and --oauth-provider are two different logins"),
    ([*OAUTH, "--num-procs", "2"], "--oauth-provider with --num-procs > 1 needs --cookie-secret"),
])
def test_what_cannot_work_is_refused_in_one_sentence_without_secrets(served, capsys, argv, message):
    calls, _ = served
    assert cli.main(["serve", "--workers", "0", *argv]) == 2
    assert not calls and state.encryption is None
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("boltzlab: error:") and message in lines[0], err
    no_secret_in(out + err)
    assert "S" + KEY[1:-4] not in err


def test_a_secret_in_a_flag_and_the_environment_is_refused(served, monkeypatch, capsys):
    calls, _ = served
    monkeypatch.setenv("PANEL_OAUTH_SECRET", "another-" + CLIENT_SECRET)
    assert cli.main(["serve", "--workers", "0", *OAUTH]) == 2 and not calls
    err = capsys.readouterr().err
    assert "--oauth-secret is given both as a flag and as PANEL_OAUTH_SECRET" in err
    no_secret_in(err)


def test_help_names_every_new_flag():
    text = cli.build_parser()._subparsers._group_actions[0].choices["serve"].format_help()
    for flag in ("--prefix", "--use-xheaders", "--oauth-provider", "--oauth-key", "--oauth-secret",
                 "--oauth-extra-params", "--oauth-redirect-uri", "--oauth-encryption-key", "--admin"):
        assert flag in text


def test_a_served_oauth_login_under_a_prefix_trusts_the_proxys_headers(tmp_path):
    """The real server: the OAuth login under /lab sends the browser to the provider with a
    return address built from the proxy's X-Forwarded-Proto and Host and the prefix (no
    provider is contacted); /lab/admin asks for the login; no secret reaches the log."""
    import urllib.error
    import urllib.parse
    import urllib.request

    from tests.serving import start_server, stop_server

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    def redirect(url: str, headers: dict) -> str:
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.build_opener(NoRedirect).open(urllib.request.Request(url, headers=headers), timeout=60)
        assert err.value.code in (302, 303)
        return urllib.parse.urljoin(url, err.value.headers["Location"])

    proc, base = start_server("--workers", "0", "--prefix", "/lab", "--use-xheaders", *OAUTH,
                              "--oauth-encryption-key", KEY, "--cookie-secret", COOKIE_SECRET, "--admin",
                              ready="/lab/liveness", log=tmp_path / "server.log")
    try:
        to = urllib.parse.urlparse(redirect(base + "/lab/login", {"Host": "lab.example.org",
                                                                  "X-Forwarded-Proto": "https"}))
        query = urllib.parse.parse_qs(to.query)
        assert (to.netloc, to.path) == ("github.com", "/login/oauth/authorize")
        assert query["redirect_uri"] == ["https://lab.example.org/lab"] and query["client_id"] == ["client-id"]
        assert urllib.parse.urlparse(redirect(base + "/lab/admin", {})).path == "/lab/login"
    finally:
        stop_server(proc)
    no_secret_in((tmp_path / "server.log").read_text(errors="replace"))


def test_a_secret_that_begins_with_a_dash_is_a_value_not_an_option():
    assert cli._secrets_joined(["serve", "--oauth-secret", "-s3cret", "--cookie-secret", "-x", "--port", "5006"]) == \
        ["serve", "--oauth-secret=-s3cret", "--cookie-secret=-x", "--port", "5006"]
    # a missing value is still argparse's error, not the next option taken as the secret
    assert cli._secrets_joined(["serve", "--oauth-secret", "--port", "5006"]) == ["serve", "--oauth-secret", "--port", "5006"]
    assert cli._secrets_joined(["serve", "--oauth-encryption-key"]) == ["serve", "--oauth-encryption-key"]
