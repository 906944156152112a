"""What a long headless run says as it goes: lines, and units done of a total where it knows them.

An experiment takes ``progress``, any callable of one string (``print``, ``list.append``, the
CLI's terminal bar).  If that object also has ``advance(done, total)`` the run reports how far
it is with it; the CLI draws a bar from that (boltzlab.dashboard.progress), a list ignores it.
"""

from __future__ import annotations

from typing import Callable


class Reporter:
    """``say(message)`` and ``say.advance(done, total)`` over any ``progress`` (or None)."""

    def __init__(self, progress: Callable[[str], None] | None = None) -> None:
        self._say = progress if progress is not None else (lambda message: None)
        self._advance = getattr(progress, "advance", None)
        self.done, self.total = 0, 0

    def expect(self, total: int) -> None:
        """The run will take ``total`` units (it may say so again as it learns more)."""
        self.total = max(int(total), self.done)
        self.advance(self.done, self.total)

    def unit(self) -> None:
        """One more unit done (of :meth:`expect`'s total)."""
        self.done += 1
        self.advance(self.done, max(self.total, self.done))

    def __call__(self, message: str) -> None:
        self._say(message)

    def advance(self, done: int, total: int) -> None:
        if self._advance is not None:
            self._advance(done, total)


def advancer(print_fn: Callable[[str], None]) -> Callable[[int, int], None]:
    """``print_fn.advance`` if the caller's printer counts units, else a no-op."""
    return getattr(print_fn, "advance", None) or (lambda done, total: None)
