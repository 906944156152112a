"""Progress of a long command on a terminal: a tqdm bar with the run's lines above it.

``bench`` and ``reproduce`` take a long time and say what they do on stderr.  On a terminal
:class:`TerminalProgress` draws a bar from the run's ``advance(done, total)`` and prints its
lines above the bar; when stderr is not a terminal (a log file, CI, a pipe) there is no bar and
the lines are printed as they come.  Standard output (tables, ``--json``) is never touched.
"""

from __future__ import annotations

import sys
from typing import TextIO

from tqdm import tqdm


class TerminalProgress:
    """A progress sink for :class:`boltzlab.engine.progress.Reporter`.

    Call it with a line; ``advance(done, total)`` moves the bar; use it as a context manager
    so the bar is removed at the end.
    """

    def __init__(self, description: str, stream: TextIO | None = None, *, quiet_lines: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.quiet_lines = quiet_lines  # bench: a bar on a terminal, nothing in a log
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.bar = tqdm(total=None, desc=description, file=self.stream, disable=not tty, leave=False,
                        dynamic_ncols=True, unit=" step")

    def __call__(self, message: str) -> None:
        if not self.bar.disable:
            self.bar.write(message.rstrip("\n") if message.strip() else "", file=self.stream)
        elif not self.quiet_lines:
            print(message, file=self.stream, flush=True)

    def advance(self, done: int, total: int) -> None:
        if self.bar.disable:
            return
        self.bar.total = max(int(total), 1)
        self.bar.n = min(int(done), self.bar.total)
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> "TerminalProgress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
