"""The app behind a real nginx under ``/lab/`` (issue 22, item 4), in Chromium.

``boltzlab serve --prefix /lab --use-xheaders`` with a login and the admin page, and Debian's
nginx started by the test on the loopback with the ``location /lab/`` block of
docs/serving.md (only the app's port changed), so the documented configuration is the tested
one. Everything the browser does goes through nginx: the login, the page, the websocket,
▶ Play, a CSV upload, a checkpoint download and ``/lab/admin``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from playwright.sync_api import Page, expect

from test_browser_fvbm import open_lab, points, sweep_text
from test_browser_upload import GOOD_CSV, GOOD_ROWS, upload
from tests.serving import free_port, server_output, start_server, stop_server
from tests.waiting import wait_for, wait_until

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
SERVING_DOC = ROOT / "docs" / "serving.md"
DOCUMENTED_UPSTREAM = "http://127.0.0.1:5006/lab/"
USER, PASSWORD = "ada", "lovelace-1815"

NGINX_CONF = """\
worker_processes 1;
{user}
pid {tmp}/nginx.pid;
error_log {tmp}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {tmp}/access.log;
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    server {{
        listen 127.0.0.1:{port};
        server_name localhost;
{location}
    }}
}}
"""


def documented_location(app_port: int) -> str:
    """The ``location /lab/ { ... }`` block of docs/serving.md, proxying to ``app_port``."""
    match = re.search(r"^( *)location /lab/ \{\n.*?^\1\}$", SERVING_DOC.read_text(encoding="utf-8"), re.M | re.S)
    assert match, "docs/serving.md has no `location /lab/ { ... }` block"
    block = match.group(0)
    assert DOCUMENTED_UPSTREAM in block, f"the documented block no longer proxies to {DOCUMENTED_UPSTREAM}"
    return block.replace(DOCUMENTED_UPSTREAM, f"http://127.0.0.1:{app_port}/lab/")


def nginx_binary() -> str:
    """Debian's nginx; the test fails (never skips) without it."""
    found = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)
    if found is None:
        pytest.fail("nginx is not installed (the README's test command installs Debian's nginx)")
    return found


def status(url: str, cookie: str | None = None) -> tuple[int, str]:
    """The status of a GET and the path it redirects to (resolved: Panel's are relative),
    redirects not followed."""
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    request = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})
    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=30) as response:
            return response.status, ""
    except urllib.error.HTTPError as exc:
        location = exc.headers.get("Location")
        return exc.code, urllib.parse.urlparse(urllib.parse.urljoin(url, location)).path if location else ""
    except OSError:
        return 0, ""


@pytest.fixture(scope="module")
def proxied(tmp_path_factory):
    """The app (``--prefix /lab --use-xheaders``, a login, ``--admin``) behind nginx; the
    nginx address (``http://127.0.0.1:P/lab``), its folder and the app's process."""
    nginx = nginx_binary()
    tmp = tmp_path_factory.mktemp("nginx")
    users = tmp / "users.json"
    users.write_text(json.dumps({USER: PASSWORD}))
    proxy_port = free_port()
    proc, direct = start_server(
        "--prefix", "/lab", "--use-xheaders", "--workers", "0",
        "--allow-websocket-origin", f"127.0.0.1:{proxy_port}",
        "--basic-auth", str(users), "--cookie-secret", "proxy-test-secret-0123456789", "--admin",
        ready="/lab/liveness", timeout=300, log=ARTIFACTS / "proxy-server.log")
    app_port = int(direct.rsplit(":", 1)[1])
    user = "user root;" if os.geteuid() == 0 else ""  # workers must reach the temporary folder
    location = "\n".join("        " + line.strip() if line.strip() else "" for line in
                         documented_location(app_port).splitlines())
    (tmp / "nginx.conf").write_text(NGINX_CONF.format(tmp=tmp, port=proxy_port, user=user, location=location))
    out = open(tmp / "nginx.out", "wb")
    nginx_proc = subprocess.Popen([nginx, "-p", str(tmp), "-c", str(tmp / "nginx.conf"), "-e", str(tmp / "error.log"),
                                   "-g", "daemon off;"], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{proxy_port}/lab"

    def logs() -> str:
        return "".join(f"\n--- {name}:\n" + (tmp / name).read_text(errors="replace")[-2000:]
                       for name in ("nginx.out", "error.log") if (tmp / name).exists())

    try:
        answered = wait_for(lambda: nginx_proc.poll() is not None or status(url + "/liveness")[0] == 200, timeout=60)
        if nginx_proc.poll() is not None or not answered:
            pytest.fail(f"nginx did not proxy {url}/liveness (exit code {nginx_proc.poll()}):{logs()}")
        yield SimpleNamespace(url=url, tmp=tmp, proxy_port=proxy_port, app=proc, logs=logs)
    finally:
        if nginx_proc.poll() is None:
            nginx_proc.terminate()
            try:
                nginx_proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                nginx_proc.kill()
                nginx_proc.wait(timeout=30)
        out.close()
        stop_server(proc)


def test_admin_page_needs_the_login_through_the_proxy(proxied):
    code, location = status(proxied.url + "/admin")
    assert code in (302, 303) and location == "/lab/login", (code, location)
    code, location = status(proxied.url + "/")
    assert code in (302, 303) and location == "/lab/login", (code, location)
    # nginx sends the bare prefix on to the app's folder
    code, location = status(proxied.url)
    assert code == 301 and location == "/lab/", (code, location)


def test_a_lab_through_nginx(page: Page, proxied, tmp_path, shot):
    sockets: list[str] = []
    page.on("websocket", lambda ws: sockets.append(ws.url))
    # the login, under the prefix
    page.goto(proxied.url + "/", timeout=120_000)
    expect(page.locator("input[type=password]")).to_be_visible()
    assert urllib.parse.urlparse(page.url).path == "/lab/login"
    page.locator("input[name=username]").fill(USER)
    page.locator("input[type=password]").fill(PASSWORD)
    page.locator("input[type=password]").press("Enter")
    expect(page.locator(".bk-tab").filter(has_text="FVBM").first).to_be_visible(timeout=120_000)
    assert urllib.parse.urlparse(page.url).path == "/lab/"

    # the page and its websocket, through nginx
    open_lab(page, proxied.url + "/")
    ws = f"ws://127.0.0.1:{proxied.proxy_port}/lab/ws"
    assert any(url.startswith(ws) for url in sockets), (sockets, proxied.logs())

    # ▶ Play: the plot grows (every update comes over the proxied websocket)
    page.get_by_role("button", name="▶ Play").click()
    wait_until(lambda: len(points(page)["x"]) >= 5)
    page.get_by_role("button", name="❚❚ Pause").click()
    expect(page.get_by_role("button", name="▶ Play")).to_be_enabled()
    shot("proxy-playing")

    # an upload
    page.get_by_role("button", name="Upload", exact=True).click()
    expect(page.locator("input[type=file][accept='.csv']")).to_be_attached()
    upload(page, "votes.csv", GOOD_CSV)
    expect(page.get_by_text(f"n = {len(GOOD_ROWS)} rows, d = 3 variables")).to_be_visible(timeout=120_000)
    page.get_by_role("button", name="Step", exact=True).click()
    wait_until(lambda: sweep_text(page) == "Sweep 1")

    # a download
    with page.expect_download(timeout=120_000) as download:
        page.get_by_role("button", name="Save checkpoint").first.click()
    path = tmp_path / "checkpoint.npz"
    download.value.save_as(path)
    expect(page.get_by_text("Saved a checkpoint after 1 step(s)")).to_be_visible()
    assert zipfile.is_zipfile(path) and zipfile.ZipFile(path).namelist()
    shot("proxy-saved")

    # the admin page, with the login
    page.goto(proxied.url + "/admin", timeout=120_000)
    expect(page.locator(".bk-tab").filter(has_text="Overview").first).to_be_visible(timeout=120_000)
    shot("proxy-admin")

    # nginx saw it all (a websocket is logged when it closes)
    page.goto("about:blank")
    access = proxied.tmp / "access.log"
    assert wait_for(lambda: re.search(r'"GET /lab/ws\S* HTTP/1\.1" 101 ', access.read_text()), timeout=90), \
        access.read_text()[-3000:]
    assert '"GET /lab/ HTTP/1.1" 200 ' in access.read_text()
    assert proxied.app.poll() is None, server_output(proxied.app)
