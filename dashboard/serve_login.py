"""`boltzlab serve`'s login and proxy options, checked before anything starts: ``--basic-auth``,
the ``--oauth-*`` options, ``--cookie-secret``, ``--admin``, ``--prefix`` (moved here from
:mod:`boltzlab.dashboard.cli`, which imports them, to keep that module a readable size).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path


def check_basic_auth_file(path: str) -> str:
    """Validate a ``--basic-auth`` file: a JSON object of user -> password (non-empty strings).

    Checked here because Panel treats any string that is not a file as the master password:
    a mistyped path would silently become the password.
    """
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"--basic-auth: {path} is not a file (it must be a JSON file of user -> password).")
    try:
        users = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"--basic-auth: {path} is not valid JSON ({exc}).") from None
    if not isinstance(users, dict) or not users:
        raise ValueError(f"--basic-auth: {path} must hold a non-empty JSON object of user -> password.")
    bad = [u for u, pw in users.items() if not (isinstance(u, str) and u and isinstance(pw, str) and pw)]
    if bad:
        raise ValueError(f"--basic-auth: every user and password in {path} must be a non-empty string; "
                         f"check the entries {bad[:3]}.")
    return str(file.resolve())


_URL_PREFIX = re.compile(r"/?[A-Za-z0-9._~-]+(/[A-Za-z0-9._~-]+)*/?")


def _url_prefix(text: str) -> str:
    """An argparse type: ``--prefix``, a URL path such as ``/lab``, returned as ``/lab``."""
    if not _URL_PREFIX.fullmatch(text) or any(part in (".", "..") for part in text.split("/")):
        raise argparse.ArgumentTypeError(f"must be a URL path such as /lab (letters, digits, . _ ~ - "
                                         f"and /), got {text!r}")
    return "/" + text.strip("/")


#: Panel's environment variables for the login's id and secrets (Panel reads them itself, and
#: they keep a secret out of the process list, which every local user can read).
LOGIN_ENV = {"oauth_key": "PANEL_OAUTH_KEY", "oauth_secret": "PANEL_OAUTH_SECRET",
              "oauth_encryption_key": "PANEL_OAUTH_ENCRYPTION", "cookie_secret": "PANEL_COOKIE_SECRET"}


def _login_options(args: argparse.Namespace) -> dict:
    """The keyword arguments of ``serve`` for ``--basic-auth``, ``--oauth-*``, ``--cookie-secret``
    and ``--admin``, checked; ``ValueError`` with a sentence for the user otherwise.

    No message names a secret's value (``--oauth-secret``, ``--oauth-encryption-key``,
    ``--cookie-secret``, ``--oauth-extra-params``).
    """
    import os

    env = {name: os.environ.get(var) or None for name, var in LOGIN_ENV.items()}
    for name, var in LOGIN_ENV.items():
        if getattr(args, name) is not None and env[name] is not None:
            raise ValueError(f"--{name.replace('_', '-')} is given both as a flag and as {var} in the "
                             "environment: give one (Panel would use the environment's).")
    value = {name: getattr(args, name) or env[name] for name in LOGIN_ENV}
    oauth_flags = [f"--{name.replace('_', '-')}" for name in ("oauth_key", "oauth_secret", "oauth_extra_params",
                                                              "oauth_redirect_uri", "oauth_encryption_key")
                   if getattr(args, name) is not None]
    options: dict = {}
    notes: list[str] = []
    if args.basic_auth is not None and args.oauth_provider is not None:
        raise ValueError("--basic-auth and --oauth-provider are two different logins: give one.")
    if args.oauth_provider is None and oauth_flags:
        raise ValueError(f"{', '.join(oauth_flags)}: for a login through an OAuth provider; give "
                         "--oauth-provider too.")
    if args.admin and args.basic_auth is None and args.oauth_provider is None:
        raise ValueError("--admin needs a login (--basic-auth or --oauth-provider): Panel's /admin page "
                         "shows every session (when, with which browser, its callbacks) and the server's "
                         "logs, and without a login anyone who can reach the server would see them.")
    if args.basic_auth is not None:
        options["basic_auth"] = check_basic_auth_file(args.basic_auth)
    if args.oauth_provider is not None:
        from panel.auth import AUTH_PROVIDERS

        if args.oauth_provider not in AUTH_PROVIDERS:
            raise ValueError(f"--oauth-provider must be one of Panel's providers: "
                             f"{', '.join(sorted(AUTH_PROVIDERS))}; got {args.oauth_provider!r}.")
        options["oauth_provider"] = args.oauth_provider
        if args.oauth_provider != "pam":  # PAM checks the server's own accounts
            missing = [f"--oauth-{name} (or {LOGIN_ENV['oauth_' + name]})" for name in ("key", "secret")
                       if value["oauth_" + name] is None]
            if missing:
                raise ValueError(f"--oauth-provider {args.oauth_provider} needs {' and '.join(missing)}: the "
                                 "client id and secret this server has at the provider.")
        if args.oauth_key is not None:
            options["oauth_key"] = args.oauth_key
        if args.oauth_secret is not None:
            options["oauth_secret"] = args.oauth_secret
        if args.oauth_extra_params is not None:
            try:
                extra = json.loads(args.oauth_extra_params)
            except json.JSONDecodeError as exc:  # the message gives a position, never the text
                raise ValueError(f"--oauth-extra-params must be a JSON object such as "
                                 f"'{{\"tenant\": \"my-org\"}}' ({exc.msg} at character {exc.pos}).") from None
            if not isinstance(extra, dict):
                raise ValueError("--oauth-extra-params must be a JSON object such as '{\"tenant\": \"my-org\"}', "
                                 f"not a JSON {type(extra).__name__}.")
            options["oauth_extra_params"] = extra
        if args.oauth_redirect_uri is not None:
            if not re.fullmatch(r"https?://[^\s/?#]+[^\s]*", args.oauth_redirect_uri):
                raise ValueError("--oauth-redirect-uri must be an http:// or https:// URL, e.g. "
                                 f"https://lab.example.org/lab; got {args.oauth_redirect_uri!r}.")
            options["oauth_redirect_uri"] = args.oauth_redirect_uri
        if value["oauth_encryption_key"] is not None:
            from cryptography.fernet import Fernet

            try:
                Fernet(value["oauth_encryption_key"])
            except (ValueError, TypeError):
                source = ("--oauth-encryption-key" if args.oauth_encryption_key is not None
                          else LOGIN_ENV["oauth_encryption_key"])
                raise ValueError(f"{source} is not a Fernet key (32 bytes in URL-safe base64, 44 characters); "
                                 "make one with: python -c 'from cryptography.fernet import Fernet; "
                                 "print(Fernet.generate_key().decode())'") from None
            options["oauth_encryption_key"] = value["oauth_encryption_key"]  # see _encrypt_oauth_tokens
        else:
            notes.append("warning: no --oauth-encryption-key given, so the provider's tokens are stored "
                         "unencrypted in the users' cookies.")
    cookie_secret = args.cookie_secret
    if args.basic_auth is not None or args.oauth_provider is not None:
        if value["cookie_secret"] is None:
            if args.num_procs != 1:
                login = "--basic-auth" if args.basic_auth is not None else "--oauth-provider"
                raise ValueError(f"{login} with --num-procs > 1 needs --cookie-secret (every process must "
                                 "sign the login cookie with the same secret).")
            import secrets

            cookie_secret = secrets.token_urlsafe(32)
            notes.append("no --cookie-secret given; using a random one, so logins last until the server "
                         "restarts.")
    if cookie_secret is not None:
        options["cookie_secret"] = cookie_secret
    if args.admin:
        options["admin"] = True
    for note in notes if not _serving_for_supervisor() else ():  # once everything is checked (and said)
        print(f"boltzlab serve: {note}", file=sys.stderr)
    return options


def _encrypt_oauth_tokens(key: str) -> None:
    """What ``panel serve --oauth-encryption-key`` does and Panel 1.9.4's ``pn.serve`` does not
    (it takes ``oauth_encryption_key`` and ignores it, even from PANEL_OAUTH_ENCRYPTION): encrypt
    the provider's tokens in the users' cookies with this Fernet key."""
    from cryptography.fernet import Fernet
    from panel.config import config
    from panel.io.state import state

    config.oauth_encryption_key = key.encode("ascii")
    state.encryption = Fernet(key)


def _login_pages_under(prefix: str) -> None:
    """Panel's login pages send the browser on to ``state.base_url`` after a login begun at the
    login page itself, and build the OAuth provider's default return address from it;
    ``pn.serve(prefix=...)`` leaves it at ``/``, outside the app.  Set it to the prefix, as
    Panel's own ``--root-path`` does for a proxy that strips one."""
    from panel.io.state import state
    from panel.util import edit_readonly

    with edit_readonly(state):
        state.base_url = prefix + "/"


def _serving_for_supervisor() -> bool:
    """Whether this ``serve`` is the server a supervisor started (its options were checked and
    its notes said there: :mod:`boltzlab.dashboard.recycling`)."""
    import os

    from .recycling import ENV_SOCKETS

    return bool(os.environ.get(ENV_SOCKETS))
