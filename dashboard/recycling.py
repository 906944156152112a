"""serve's process recycling: a fresh server process takes over when an idle one has grown.

A server process does not give all its memory back when its sessions close: CPython hands an
arena of small objects back only when it is wholly empty, and glibc's heap keeps what it
cannot trim.  After 16 TAP users had left, the server kept +195 MB with nothing of theirs
alive (docs/serving.md).  So ``boltzlab serve`` (one server process, the default) runs as two
processes:

- the **supervisor** (:func:`supervise`, what the command itself runs): it binds the web
  port, starts the server as a child process that inherits the listening sockets, and imports
  no Panel, Bokeh or Dask;
- the **server** (:class:`Child`, in :func:`boltzlab.dashboard.app.serve`): it serves on those
  sockets.  When nobody has used it for a while (``Visitors.when_idle``) and its RSS is more than
  ``--recycle-mb`` above what it was when it was ready, it asks for a successor.  The supervisor
  starts one on the same sockets and, once that one is ready, tells the old one to retire: it
  stops accepting connections and exits when its last session (one that came meanwhile) has
  left.  The old one and the new one accept on the same socket meanwhile, which Bokeh allows (a
  session's websocket may reach another process than its page: Bokeh makes the session
  there, as with ``--num-procs``); neither drops a connection.

The control channel is a socket pair: the server writes ``ready`` and ``recycle <MB>``, the
supervisor writes ``retire``.  A server whose supervisor is gone (the pair's other end closed:
the supervisor was killed) stops itself.  Stopping the supervisor (SIGTERM, SIGINT, Ctrl-C)
stops its servers the orderly way (SIGTERM) and waits for them.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Callable

#: the environment of a server run by the supervisor: its listening sockets' file descriptors
#: (comma-separated), its end of the control pair, and whether it takes over from another
ENV_SOCKETS = "BOLTZLAB_SERVE_SOCKETS"
ENV_CONTROL = "BOLTZLAB_SERVE_CONTROL"
ENV_SUCCESSOR = "BOLTZLAB_SERVE_SUCCESSOR"

#: after a successor failed to start, the supervisor ignores requests for this long (s)
RETRY_AFTER_SECONDS = 300.0
#: a stopping server gets this long to stop its workers and exit before it is killed (s)
STOP_SECONDS = 90.0


def say(message: str) -> None:
    """One line of serve's on stderr (before logging is set up, and always shown)."""
    sys.stderr.write(f"boltzlab serve: {message}\n")  # one write: threads' lines do not interleave
    sys.stderr.flush()


# -- the supervisor ----------------------------------------------------------------------------

class _Server:
    """One server process as the supervisor sees it."""

    def __init__(self, argv: list[str], sockets: list[socket.socket], successor: bool,
                 env: dict[str, str]) -> None:
        self.control, theirs = socket.socketpair()
        fds = [s.fileno() for s in sockets]
        env = {**os.environ, **env, ENV_SOCKETS: ",".join(map(str, fds)), ENV_CONTROL: str(theirs.fileno())}
        if successor:
            env[ENV_SUCCESSOR] = "1"
        # its own process group: a Ctrl-C reaches the supervisor, which stops it in order
        self.proc = subprocess.Popen([sys.executable, "-m", "boltzlab", *argv], env=env,
                                     pass_fds=[*fds, theirs.fileno()], process_group=0)
        theirs.close()
        self._buffer = b""

    def messages(self) -> list[str]:
        """What it wrote since the last call (whole lines); ``[]`` at its end."""
        try:
            data = self.control.recv(4096)
        except OSError:
            data = b""
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        return [line.decode(errors="replace").strip() for line in lines]

    def tell(self, message: str) -> None:
        try:
            self.control.sendall(message.encode() + b"\n")
        except OSError:  # it is gone: its exit is seen by the loop
            pass

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, seconds: float) -> int:
        try:
            return self.proc.wait(seconds)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def supervise(argv: list[str], port: int, address: str | None, env: dict[str, str] | None = None) -> int:
    """Bind ``address:port``, run ``boltzlab *argv`` (a ``serve`` command) on it as a child
    process and replace it with a fresh one when it asks (see the module's docstring); returns
    the server's exit code once it ends or the supervisor is stopped.  ``env``: more
    environment for the servers (e.g. a cookie secret every one of them must share)."""
    from tornado.netutil import bind_sockets

    try:
        sockets = bind_sockets(port, address)
    except OSError as exc:
        say(f"cannot listen on {address or 'localhost'}:{port}: {exc.strerror or exc}")
        return 1
    stopping: list[int] = []

    def on_stop(signum, frame) -> None:
        stopping.append(signum)

    previous = {sig: signal.signal(sig, on_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    servers: list[_Server] = []
    try:
        current = _Server(argv, sockets, successor=False, env=env or {})
        servers.append(current)
        successor: _Server | None = None
        retry_at = 0.0
        while not stopping:
            readable, _, _ = select.select([s.control for s in servers], [], [], 0.5)
            for server in [s for s in servers if s.control in readable]:
                for message in server.messages():
                    if message.startswith("recycle") and server is current and successor is None \
                            and time.monotonic() >= retry_at:
                        say(f"recycling the server process (pid {current.proc.pid}): idle, "
                            f"{message.partition(' ')[2] or 'its memory grew'}; a fresh one takes over")
                        successor = _Server(argv, sockets, successor=True, env=env or {})
                        servers.append(successor)
                    elif message == "ready" and server is successor:
                        current.tell("retire")
                        current, successor = successor, None
                        say(f"the fresh server process (pid {current.proc.pid}) took over")
            for server in [s for s in servers if s.proc.poll() is not None]:
                servers.remove(server)
                server.control.close()
                if server is successor:
                    successor, retry_at = None, time.monotonic() + RETRY_AFTER_SECONDS
                    say(f"the fresh server process failed to start (exit code {server.proc.returncode}); "
                        "the running one goes on")
                elif server is current:  # it ended on its own: so does the service
                    for other in servers:
                        other.stop()
                    for other in servers:
                        other.wait(STOP_SECONDS)
                    return server.proc.returncode
        for server in servers:
            server.stop()
        codes = [server.wait(STOP_SECONDS) for server in servers]
        return codes[servers.index(current)] if current in servers else 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sock in sockets:
            sock.close()


# -- the server's side -------------------------------------------------------------------------

def rss_mb() -> float:
    """This process's resident memory (MB), from /proc (0 where there is none)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


class Child:
    """This server process when a supervisor runs it (:meth:`from_environment`)."""

    def __init__(self, fds: list[int], control: int, successor: bool) -> None:
        self.fds = fds
        self.control = socket.socket(fileno=control)
        self.successor = successor
        self.start_mb: float | None = None
        self.retiring = False
        self.on_retire: Callable[[], None] | None = None

    @classmethod
    def from_environment(cls) -> "Child | None":
        sockets, control = os.environ.get(ENV_SOCKETS), os.environ.get(ENV_CONTROL)
        if not sockets or not control:
            return None
        successor = os.environ.pop(ENV_SUCCESSOR, None) == "1"
        del os.environ[ENV_SOCKETS], os.environ[ENV_CONTROL]  # not for the processes it starts
        fds = [int(fd) for fd in sockets.split(",")]
        for fd in (*fds, int(control)):  # nor their descriptors: the pair's end tells the supervisor
            os.set_inheritable(fd, False)  # this process is gone, and only the supervisor binds the port
        return cls(fds, int(control), successor)

    def sockets(self) -> tuple[list[socket.socket], int]:
        """The listening sockets the supervisor made, and their port (as Bokeh's ``bind_sockets``)."""
        socks = [socket.socket(fileno=fd) for fd in self.fds]
        for sock in socks:
            sock.setblocking(False)
        return socks, socks[0].getsockname()[1]

    def use_sockets(self) -> None:
        """Make Bokeh's server listen on :meth:`sockets` (it has no parameter for sockets bound
        elsewhere: it calls ``bind_sockets`` itself)."""
        from bokeh.server import server as bokeh_server

        bokeh_server.bind_sockets = lambda address, port: self.sockets()

    def listen(self) -> None:
        """Read the supervisor's messages in a daemon thread: ``retire`` calls :attr:`on_retire`,
        the supervisor's end stops this process (SIGTERM, the orderly stop)."""
        def read() -> None:
            buffer = b""
            while True:
                try:
                    data = self.control.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    os.kill(os.getpid(), signal.SIGTERM)
                    return
                buffer += data
                *lines, buffer = buffer.split(b"\n")
                if b"retire" in lines and self.on_retire is not None:
                    self.retiring = True
                    self.on_retire()

        threading.Thread(target=read, name="boltzlab-supervisor", daemon=True).start()

    def ready(self) -> None:
        """Everything is prepared: take this RSS as the start's, and tell the supervisor."""
        self.start_mb = rss_mb()
        self._tell("ready")

    def grown(self, limit_mb: float) -> float | None:
        """By how much (MB) this process's RSS is above its start's, if that is more than
        ``limit_mb``; ``None`` otherwise (or before :meth:`ready`)."""
        if self.start_mb is None:
            return None
        grown = rss_mb() - self.start_mb
        return grown if grown > limit_mb else None

    def ask_recycle(self, grown_mb: float) -> None:
        """Ask the supervisor for a successor.  Asked at every idle spell: the supervisor starts
        one at a time and, after one failed to start, none for :data:`RETRY_AFTER_SECONDS`;
        asked once only, a server whose successor failed would have kept its memory for good."""
        self._tell(f"recycle {rss_mb():.0f} MB, {grown_mb:.0f} MB above its start")

    def _tell(self, message: str) -> None:
        try:
            self.control.sendall(message.encode() + b"\n")
        except OSError:
            pass
