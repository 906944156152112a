"""What a lesson is once read (:class:`Lesson`, :class:`LessonStep`: plain, checked data) and
the lessons a server offers (:data:`CATALOGUE`: the built-in ones and a teacher's own).

Neither imports a lab: the labs import this module (``Lab.lesson`` finds a lesson by name
here), and :mod:`boltzlab.dashboard.lessons`, which reads and checks lesson files against the
lab classes, fills the catalogue.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

#: what a step may do after its settings, besides switching the stage's tab
ACTIONS = ("play", "next", "pin", "sweep")


@dataclass(frozen=True)
class LessonStep:
    """One click of a lesson: settings (a preset's, then its own), a stage tab, one action,
    and what to say.

    ``settings`` holds the values as the lab takes them (checked when the file was read);
    ``action`` is one of :data:`ACTIONS` or None: ``play`` steps the runs ``steps`` times,
    ``next`` is presentation mode's *Next step* (one step, and what it changed is said),
    ``pin`` keeps the run as pin ``pin`` (None: the lab's next label), ``sweep`` is
    ``(setting, values)``.  ``line``: where the step begins in its file."""

    narration: str
    question: str = ""
    preset: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    tab: str | None = None
    action: str | None = None
    steps: int = 0
    pin: str | None = None
    sweep: tuple[str, tuple] | None = None
    line: int = 0

    def describe(self) -> str:
        """What the step does, in a few words (for a list of steps, a log)."""
        parts = []
        if self.preset:
            parts.append(f"preset {self.preset!r}")
        if self.settings:
            parts.append(", ".join(f"{k} = {v}" for k, v in self.settings.items()))
        if self.tab:
            parts.append(f"tab {self.tab!r}")
        if self.action == "play":
            parts.append(f"play {self.steps} step{'s' if self.steps != 1 else ''}")
        elif self.action == "next":
            parts.append("next step")
        elif self.action == "pin":
            parts.append(f"pin as {self.pin!r}" if self.pin else "pin")
        elif self.action == "sweep" and self.sweep is not None:
            parts.append(f"sweep {self.sweep[0]} over {', '.join(map(str, self.sweep[1]))}")
        return "; ".join(parts) or "narration only"


@dataclass(frozen=True)
class Lesson:
    """A lesson: ordered steps on one lab (``lab``: its key, e.g. ``"fvbm"``).  ``name`` is the
    file's name without ``.yaml``, ``about`` a line shown when it is chosen, ``path`` the file
    it was read from."""

    name: str
    title: str
    lab: str
    steps: tuple[LessonStep, ...]
    about: str = ""
    path: str = ""

    def __len__(self) -> int:
        return len(self.steps)


class Catalogue:
    """The lessons this process offers: the built-in ones (read on first use, by the reader
    :mod:`boltzlab.dashboard.lessons` registers) and a teacher's own (``boltzlab serve --lessons``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reader: Callable[[], list[Lesson]] | None = None
        self._builtin: list[Lesson] | None = None
        self._added: list[Lesson] = []

    def set_reader(self, reader: Callable[[], list[Lesson]]) -> None:
        self._reader = reader

    def builtin(self) -> list[Lesson]:
        with self._lock:
            if self._builtin is None:
                self._builtin = list(self._reader()) if self._reader is not None else []
            return list(self._builtin)

    def add(self, lessons: list[Lesson]) -> None:
        """Offer ``lessons`` too (a teacher's: each already checked), in place of any added before."""
        with self._lock:
            self._added = list(lessons)

    def added(self) -> list[Lesson]:
        with self._lock:
            return list(self._added)

    def all(self) -> list[Lesson]:
        return self.builtin() + self.added()

    def for_lab(self, key: str) -> list[Lesson]:
        """The lessons of the lab ``key``: the built-in ones first, then the teacher's."""
        return [lesson for lesson in self.all() if lesson.lab == key]

    def find(self, key: str, name: str) -> Lesson:
        """The lesson of lab ``key`` named ``name`` (its file's name or its title);
        ``ValueError`` naming the lab's lessons otherwise."""
        lessons = self.for_lab(key)
        for lesson in lessons:
            if name in (lesson.name, lesson.title):
                return lesson
        raise ValueError(f"The lab {key!r} has no lesson {name!r}; its lessons: "
                         f"{[lesson.name for lesson in lessons]}.")


#: the lessons this process offers (filled by :mod:`boltzlab.dashboard.lessons`)
CATALOGUE = Catalogue()
