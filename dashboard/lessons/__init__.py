"""Lessons: small YAML files of ordered steps that walk a class through a paper's phenomenon
on one lab (issue 48 item 2).  docs/teaching.md has the format and a class plan.

* :data:`LESSONS`: the built-in lessons, one per paper (the ``*.yaml`` files beside this module,
  read and checked on first use);
* :func:`load`: one lesson file, checked against its lab; ``ValueError`` naming the file, the
  line and the reason;
* :func:`load_dir`, :func:`add` and :func:`use_folder`: a teacher's own (``boltzlab serve --lessons
  DIR``), all or none;
* :func:`for_lab`: the lessons a lab offers (built-in first).

On a lab: ``lab.lesson(name)`` chooses one, ``lab.next_lesson_step()`` applies its next step
(:mod:`boltzlab.dashboard.labs.teaching`); in presentation mode the sidebar's *Lesson ▸* does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .model import CATALOGUE, Lesson, LessonStep
from .reading import TABS, LessonError, load, load_dir

__all__ = ["LESSONS", "Lesson", "LessonError", "LessonStep", "TABS", "add", "builtin_folder", "for_lab", "load",
           "load_dir", "use_folder"]


def builtin_folder() -> Path:
    """Where the built-in lesson files are (package data)."""
    return Path(__file__).resolve().parent


def _read_builtin() -> list[Lesson]:
    return load_dir(builtin_folder())


CATALOGUE.set_reader(_read_builtin)


def add(lessons: list[Lesson]) -> None:
    """Offer ``lessons`` (from :func:`load_dir`) beside the built-in ones in this process, in
    place of any added before."""
    CATALOGUE.add(lessons)


def use_folder(folder: str | Path) -> list[Lesson]:
    """``boltzlab serve --lessons DIR``: read every lesson file in ``folder`` and offer them
    (:func:`add`); all or none: ``ValueError`` from :func:`load_dir`, and nothing is added."""
    found = load_dir(folder, CATALOGUE.builtin())
    add(found)
    return found


def for_lab(key: str) -> list[Lesson]:
    """The lessons of the lab ``key`` (``"fvbm"``, ``"tap"``, ...): built-in first, then a teacher's."""
    return CATALOGUE.for_lab(key)


def __getattr__(name: str) -> Any:
    if name == "LESSONS":  # read when first asked for: the files are checked against the lab classes
        return tuple(CATALOGUE.builtin())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
