"""Follow the teacher (issue 48 item 1): a lab's run shared live with the other sessions of
the same server process.

A teacher's lab opens a :class:`Share` (``Lab.share()``); its tick publishes what it drew:
the runner's Records (not recomputed by anyone), the runs' states, the stage tab in view,
the narration caption and the counter.  A follower's lab (``?follow=<code>``,
``Lab.follow(code)``) reads them through a :class:`Mirror`, which stands in for its runner:
the lab's own views draw the teacher's Records as they draw their own.  A new run at the
teacher (settings, Reset, a loaded checkpoint) starts a new *generation*: followers take the
settings and replay the history.  "Make it mine" forks: :meth:`Share.checkpoint_bytes`
copies the teacher's trainers between two rounds (``Runner.peek``, the teacher plays on)
into a checkpoint, which the follower loads as any other (settings, states, history, pins).

A code is 96 random bits (``secrets``), valid while its share lasts; the registry
(:data:`SHARES`) is per process: a follower must reach the teacher's process (docs/serving.md).
Plain data and threads, no Panel: the labs' code is in ``dashboard/labs/following.py``.
"""

from __future__ import annotations

import secrets
import threading
from collections import deque
from typing import Any, Mapping

from .labtools import Checkpoint, write_checkpoint
from .runner import History, TrainerState
from ..engine.stepping import Record

CODE_BYTES = 12  # a code's random bytes: 96 bits, 16 URL-safe characters
MAX_LOG = 4_000  # Records kept for followers that lag (one that lags more replays the history)
MAX_SHARES = 64  # shares open at once in one process

#: the open shares of this process, by code
SHARES: dict[str, "Share"] = {}
_REGISTRY = threading.Lock()


class Share:
    """One teacher's run as its followers see it (see the module's docstring)."""

    def __init__(self, lab_key: str) -> None:
        self.code = secrets.token_urlsafe(CODE_BYTES)
        self.lab_key = lab_key
        self._lock = threading.Lock()
        self.generation = 0  # a new run at the teacher: followers start over
        self.settings: dict[str, str] = {}  # the run's settings as link text
        self.sweep: tuple[str, list[str]] | None = None  # (setting, value texts)
        self.names: list[str] = []
        self.history = History()  # the run's Records so far (for a follower that joins late)
        self._log: deque[tuple[int, str, Record]] = deque(maxlen=MAX_LOG)
        self.seq = 0  # the number of the newest Record published
        self.states: dict[str, TrainerState] = {}
        self.playing = False
        self.view: dict[str, Any] = {}  # "tab", "caption", "counter": what the teacher's page shows
        self.pins: list = []
        self.pins_version = 0
        self.ended = False
        self.final: bytes | None = None  # the run's checkpoint when the share ended (a fork's)
        self._followers: set[int] = set()
        self._source: Any = None  # the teacher's runner (forks peek into it)
        self._data: tuple[str, str] | None = None

    # ------------------------------------------------------------------ the teacher's side
    def restart(self, *, settings: Mapping[str, str], sweep: tuple[str, list[str]] | None, names: list[str],
                history: History, runner: Any, data: tuple[str, str] | None = None) -> None:
        """A new run (or the first): its settings and its history so far."""
        with self._lock:
            self.generation += 1
            self.settings, self.sweep, self.names = dict(settings), sweep, list(names)
            self.history = history.copy()
            self._log.clear()
            self._source, self._data = runner, data

    def publish(self, records: list[tuple[str, Record]], *, states: Mapping[str, TrainerState], playing: bool,
                view: Mapping[str, Any]) -> None:
        """What the teacher's tick drew: its new Records, the runs' states, the page's view."""
        with self._lock:
            for name, record in records:
                self.seq += 1
                self._log.append((self.seq, name, record))
                self.history.add(name, record)
            self.states = {n: TrainerState(s.status, s.message, s.steps) for n, s in states.items()}
            self.playing = playing
            self.view = dict(view)

    def set_pins(self, pins: list) -> None:
        with self._lock:
            self.pins = list(pins)
            self.pins_version += 1

    def withdraw(self) -> None:
        """No new follower: the code is taken out of the registry (followers stay)."""
        with _REGISTRY:
            SHARES.pop(self.code, None)

    def end(self, final: bytes | None = None) -> None:
        """The teacher stopped sharing (or left): followers are told and keep ``final``, the
        run's last state, to fork."""
        self.withdraw()
        with self._lock:
            self.ended, self.final, self._source = True, final, None

    @property
    def followers(self) -> int:
        return len(self._followers)

    # ------------------------------------------------------------------ the followers' side
    def join(self, key: int) -> None:
        with self._lock:
            self._followers.add(key)

    def leave(self, key: int) -> None:
        with self._lock:
            self._followers.discard(key)

    def start(self) -> tuple[int, int, History, list[str]]:
        """``(generation, seq, history, names)``: where a follower starts (or starts over)."""
        with self._lock:
            return self.generation, self.seq, self.history.copy(), list(self.names)

    def since(self, generation: int, seq: int) -> list[tuple[int, str, Record]] | None:
        """The Records after number ``seq`` of ``generation``; None when the follower must
        start over (a new run, or it lagged past what is kept)."""
        with self._lock:
            if generation != self.generation or (self._log and self._log[0][0] > seq + 1 and seq < self.seq):
                return None
            return [item for item in self._log if item[0] > seq]

    def checkpoint_bytes(self, lab_key: str) -> bytes:
        """The teacher's run now as checkpoint bytes (blocks: call it in a job).  After the
        share ended: its last state.  ``ValueError`` when there is nothing to fork."""
        with self._lock:
            source, final = self._source, self.final
            settings, sweep, pins, data = dict(self.settings), self.sweep, list(self.pins), self._data
        if source is None:
            if final is None:
                raise ValueError("The shared run ended before its state could be kept: nothing to fork.")
            return final
        states, history, _ = source.peek()
        return write_checkpoint(Checkpoint(lab_key, settings, states, history, data, pins, sweep))


def open_share(lab_key: str) -> Share:
    """A new share, registered under its code."""
    with _REGISTRY:
        if len(SHARES) >= MAX_SHARES:
            raise ValueError(f"This server holds {MAX_SHARES} live shares already; end one first.")
        share = Share(lab_key)
        SHARES[share.code] = share
        return share


def find(code: Any, lab_key: str) -> Share:
    """The open share ``code`` of lab ``lab_key``; ``ValueError`` saying why not."""
    with _REGISTRY:
        share = SHARES.get(code) if isinstance(code, str) else None
    if share is None:
        raise ValueError("No live run is shared under this code: the share has ended, or the link is "
                         "mistyped. Ask for a new link.")
    if share.lab_key != lab_key:
        raise ValueError(f"This code shares a run of another lab ({share.lab_key}).")
    return share


class Mirror:
    """Stands in for a follower's runner (``Lab.runner``): its Records, states and history
    are the teacher's (:class:`Share`); everything else (the runs the follower's views are
    built for, their builds) is the follower's own runner, ``own``, which never steps."""

    def __init__(self, own: Any, share: Share) -> None:
        self.own, self.share = own, share
        self.generation_seen = -1  # the share's generation this follower drew (-1: none yet)
        self.seq = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.own, name)

    @property
    def names(self) -> list[str]:
        return list(self.share.names) or self.own.names

    @property
    def states(self) -> dict[str, TrainerState]:
        return dict(self.share.states) or self.own.states

    @property
    def playing(self) -> bool:
        return self.share.playing and not self.share.ended

    @property
    def active(self) -> bool:
        return False  # read-only: nothing to play here

    @property
    def history(self) -> History:
        return self.share.history

    def copy_history(self) -> History:
        return self.share.start()[2]

    def drain(self) -> list[tuple[str, Record]]:
        items = self.share.since(self.generation_seen, self.seq)
        if not items:
            return []
        self.seq = items[-1][0]
        return [(name, record) for _, name, record in items]

    def play(self) -> None:
        """Read-only: the teacher plays."""

    def pause(self) -> None:
        """Read-only: the teacher pauses."""

    def step_once(self) -> None:
        """Read-only: the teacher steps."""

    def snapshot(self) -> tuple[dict, History, dict]:
        """What a checkpoint of the follower's page saves: the teacher's run now."""
        source = self.share._source
        if source is None:
            raise ValueError("The shared run has ended: press Make it mine to keep it.")
        return source.peek()
