"""The app served by the real CLI in a subprocess, for tests that talk to it over HTTP.

``proc, base = start_server("--workers", "1")`` runs
``python -m boltzlab serve --port P --address 127.0.0.1 --workers 1`` from the
repository root on a free port P and returns once ``base + "/liveness"`` answers;
``stop_server(proc)`` ends it.  The server's output (stdout and stderr) goes to a log file,
never to a pipe that nobody reads (a full pipe would block a chatty server);
``server_output(proc)`` is its tail, for a failure message.

``from tests.serving import start_server`` (``tests/`` is a namespace package under the
repository root, which pyproject puts on ``sys.path``).
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def answers(url: str) -> bool:
    """``url`` answers with a 2xx or 3xx status (redirects are followed)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            response.read()
            return 200 <= response.status < 400
    except urllib.error.HTTPError as exc:
        return 300 <= exc.code < 400
    except (OSError, http.client.HTTPException):  # not listening yet, reset, timed out
        return False


def server_output(proc: subprocess.Popen, chars: int = 2000) -> str:
    """The last ``chars`` characters the server wrote (stdout and stderr)."""
    try:
        return proc.server_log.read_bytes().decode(errors="replace")[-chars:]
    except OSError:
        return ""


#: what serve says once its kernels are loaded and its worker processes are up (dashboard.startup)
READY_LINE = "boltzlab serve: ready"


def _said(proc: subprocess.Popen, line: str | None) -> bool:
    if line is None:
        return True
    try:
        return line.encode() in proc.server_log.read_bytes()
    except OSError:
        return False


def start_server(*options: str, ready: str = "/liveness", timeout: float = 240.0,
                 env: dict[str, str] | None = None, log: Path | None = None,
                 ready_line: str | None = READY_LINE) -> tuple[subprocess.Popen, str]:
    """``boltzlab serve --port P --address 127.0.0.1 *options`` on a free port; the process and
    its base URL (``http://127.0.0.1:P``) once ``ready`` answers with a 2xx/3xx status and the
    server has said ``ready_line`` (by default: everything prepared; ``None``: do not wait).

    ``timeout``: seconds to wait for that (the server warms the numba kernels first, and a
    first run on a busy machine compiles them).  ``env``: the server's environment (default
    ``os.environ``; the repository root is put first on its ``PYTHONPATH``).  ``log``: the file
    its output goes to (default: a temporary file, removed by ``stop_server``).  If the server
    exits or does not answer in time, it is killed and the test fails with its output's tail.
    """
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    temporary = log is None
    if temporary:
        fd, name = tempfile.mkstemp(prefix="boltzlab-serve-", suffix=".log")
        os.close(fd)
        log = Path(name)
    log = Path(log)
    log.parent.mkdir(parents=True, exist_ok=True)
    out = open(log, "wb")
    proc = subprocess.Popen([sys.executable, "-m", "boltzlab", "serve", "--port", str(port),
                             "--address", "127.0.0.1", *options],
                            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env)
    proc.server_log, proc._server_log_file, proc._server_log_temporary = log, out, temporary
    deadline = time.monotonic() + timeout
    while not (answers(base + ready) and _said(proc, ready_line)):
        if proc.poll() is not None or time.monotonic() > deadline:
            exited = proc.poll()
            proc.kill()
            proc.wait(timeout=30)
            tail = server_output(proc)
            stop_server(proc)
            why = (f"exited with code {exited}" if exited is not None else
                   f"did not answer {ready} and say {ready_line!r} in {timeout:.0f} s")
            pytest.fail(f"server did not start ({why}): {tail}")
        time.sleep(0.5)
    return proc, base


def stop_server(proc: subprocess.Popen, timeout: float = 30.0) -> None:
    """End a server of ``start_server`` (SIGTERM, then SIGKILL after ``timeout`` s) unless it
    has ended already, and close its log (a temporary one is removed).  Safe to call again."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)
    proc._server_log_file.close()
    if proc._server_log_temporary:
        proc.server_log.unlink(missing_ok=True)
