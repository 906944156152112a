"""`boltzlab serve`'s allow-lists: ``--allow-user NAME`` / ``--allow-users-file FILE`` (who may
use the server at all, whatever the login: ``--basic-auth`` or ``--oauth-provider``) and
``--admin-user NAME`` (who may open the ``--admin`` page).

A login says who someone is; with OAuth that is anyone with an account at the provider (every
GitHub user, with ``--oauth-provider github``).  The lists say who gets in.  They are enforced
through Panel's ``authorize_callback`` (``pn.config.authorize_callback``), which Panel 1.9.4
calls on every page's ``GET`` before a session is made (``DocHandler.get`` in
``panel/io/server.py``): a refused user gets status 403 and :data:`REFUSED_PAGE`, which says so
and nothing else, and no session is built.  Panel does not call it for a page's other ways in
(``<app>/autoload.js`` and ``<app>/ws``, which make or open a session too), so
:class:`boltzlab.dashboard.app.GatedApplication` refuses those in ``process_request``, which Bokeh and Panel call on
every way a session is made or opened (:func:`refuse_outsiders`).

A name is the one the login sets as Panel's user (``pn.state.user``): the ``--basic-auth``
file's user name, or the provider's user field (a GitHub login, an e-mail address for
``generic``...).  Names are compared without regard to case (GitHub logins and e-mail
addresses are case-insensitive).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Iterable

#: what a user not on the list sees (a Jinja template, as Panel's ``auth_template``): no app,
#: no data, no third-party font; a way to log out and in as someone else
REFUSED_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Boltzmann Lab: not on the list</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body style="font-family: system-ui, sans-serif; max-width: 40em; margin: 4em auto;">
<h1>Not on this server's list of users</h1>
<p id="refused">{{ error_msg }}</p>
<p>This server lets in only the users its operator named. Ask them to add you, or
<a id="logout" href="logout">log out</a> and log in as another user.</p>
</body></html>
"""


def add_arguments(serve: argparse.ArgumentParser) -> None:
    """``serve``'s allow-list options."""
    serve.add_argument("--allow-user", action="append", metavar="NAME", default=None,
                       help="with a login (--basic-auth or --oauth-provider): let only this user in "
                            "(repeatable); others get a page saying they are not on the list")
    serve.add_argument("--allow-users-file", metavar="FILE", default=None,
                       help="with a login: let only the users named in FILE in (one name a line, # "
                            "starts a comment); with --allow-user, the users of both")
    serve.add_argument("--admin-user", action="append", metavar="NAME", default=None,
                       help="with --admin: only this user may open the admin page (repeatable; default: "
                            "every user who can log in)")


def read_users_file(path: str) -> list[str]:
    """The names in an ``--allow-users-file``: one a line, ``#`` to the end of a line a comment,
    blank lines skipped; ``ValueError`` with a sentence for a file that cannot be read."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ValueError(f"--allow-users-file: cannot read {path} ({reason}).") from None
    names = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    return [name for name in names if name]


def allow_list_options(args: argparse.Namespace) -> dict:
    """``serve``'s keyword arguments for the allow-lists (``allowed_users``, ``admin_users``:
    sets of names, or absent), checked; ``ValueError`` with a sentence otherwise."""
    users = list(getattr(args, "allow_user", None) or [])
    given = bool(users) or getattr(args, "allow_users_file", None) is not None
    admins = list(getattr(args, "admin_user", None) or [])
    login = args.basic_auth is not None or args.oauth_provider is not None
    if (given or admins) and not login:
        flags = [flag for flag, on in (("--allow-user", args.allow_user), ("--allow-users-file", args.allow_users_file),
                                       ("--admin-user", admins)) if on]
        raise ValueError(f"{', '.join(flags)}: the lists name users of a login; give --basic-auth or "
                         "--oauth-provider too (without a login nobody has a name, so nobody would get in).")
    if admins and not args.admin:
        raise ValueError("--admin-user: for the admin page; give --admin too.")
    if args.allow_users_file is not None:
        users += read_users_file(args.allow_users_file)
    blank = [name for name in users + admins if not name.strip()]
    if blank:
        raise ValueError("--allow-user and --admin-user take a user's name, not an empty one.")
    options: dict = {}
    if given:
        if not users:
            raise ValueError(f"--allow-users-file: {args.allow_users_file} names nobody, so nobody would get in.")
        options["allowed_users"] = frozenset(_key(name) for name in users)
    if admins:
        outside = [name for name in admins if given and _key(name) not in options["allowed_users"]]
        if outside:
            raise ValueError(f"--admin-user {outside[0]}: not on the list of users (--allow-user, "
                             "--allow-users-file), so could not log in to open the admin page.")
        options["admin_users"] = frozenset(_key(name) for name in admins)
    return options


def _key(name: str) -> str:
    return name.strip().casefold()


class Gate:
    """Who may open what: ``allowed`` (``None``: every logged-in user) and, of them,
    ``admins`` for the admin page at ``prefix + "/admin"`` (``None``: all of them)."""

    def __init__(self, allowed: Iterable[str] | None = None, admins: Iterable[str] | None = None,
                 prefix: str = "") -> None:
        self.allowed = None if allowed is None else frozenset(map(_key, allowed))
        self.admins = None if admins is None else frozenset(map(_key, admins))
        self.admin_path = (prefix or "").rstrip("/") + "/admin"

    def lets_in(self, user: str | None, path: str) -> bool:
        """Whether ``user`` (``None``: nobody logged in) may open the page at ``path``."""
        if user is None:
            return self.allowed is None and self.admins is None
        if self.allowed is not None and _key(user) not in self.allowed:
            return False
        is_admin_page = path.rstrip("/") == self.admin_path or path.startswith(self.admin_path + "/")
        return not is_admin_page or self.admins is None or _key(user) in self.admins

    def authorize(self, user_info: Any, path: str) -> bool:
        """Panel's ``authorize_callback`` (two arguments: Panel passes the requested path)."""
        import panel as pn

        return self.lets_in(pn.state.user, path)


#: the gate of this server process (:func:`install`); ``None``: no allow-list
GATE: Gate | None = None


def install(allowed: Iterable[str] | None, admins: Iterable[str] | None, prefix: str = "") -> Gate | None:
    """Enforce the lists in this process from now on (Panel's ``authorize_callback`` and
    ``auth_template``, and :func:`refuse_outsiders`); ``None`` if there are none."""
    global GATE
    import atexit
    import shutil
    import tempfile

    import panel as pn

    if allowed is None and admins is None:
        return None
    GATE = Gate(allowed, admins, prefix)
    pn.config.authorize_callback = GATE.authorize
    # Panel reads the template from a file at every refusal
    folder = tempfile.mkdtemp(prefix="boltzlab-refused-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    page = Path(folder) / "refused.html"
    page.write_text(REFUSED_PAGE, encoding="utf-8")
    pn.config.auth_template = str(page)
    return GATE


def request_user(request: Any) -> str | None:
    """The user a request's signed login cookie names (as Panel's ``state.user`` reads it)."""
    from panel.config import config
    from tornado.web import decode_signed_value

    morsel = request.cookies.get("user") if getattr(request, "cookies", None) is not None else None
    if morsel is None or config.cookie_secret is None:
        return None
    value = decode_signed_value(config.cookie_secret, "user", morsel.value)
    return None if value is None else value.decode("utf-8")


def refuse_outsiders(request: Any) -> None:
    """In an application's ``process_request`` (:class:`boltzlab.dashboard.app.GatedApplication`):
    ``tornado.web.HTTPError`` 403 for a session made or opened through ``autoload.js`` or the
    websocket by a user the :data:`GATE` keeps out.  Panel's ``authorize_callback`` guards only
    a page's ``GET`` (and refuses it with its page itself, so that path is let through here)."""
    gate = GATE
    path = getattr(request, "path", "") or ""
    if gate is not None and path.endswith(("/autoload.js", "/ws")):
        page = path.rsplit("/", 1)[0] or "/"
        if not gate.lets_in(request_user(request), page):
            from tornado.web import HTTPError

            raise HTTPError(403, reason="Not on this server's list of users")
