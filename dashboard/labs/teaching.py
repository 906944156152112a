"""Lessons on a lab (issue 48 item 2): ``lab.lesson(name)`` chooses one of the lab's lessons
(:mod:`boltzlab.dashboard.lessons`), ``lab.next_lesson_step()`` applies its next step: the
settings (a preset's, then the step's own), the stage tab, one action (play N steps, presentation
mode's *Next step*, pin, sweep), and the narration and question in the lesson's caption.

In the page (presentation mode) the sidebar's lesson box does the same: a lesson to choose,
*Lesson ▸*, and the narration in large type above the controls, where it never moves a figure.
A click never waits: the step's settings start their run as a widget's change does, and its
action is done by the refresh tick once the run is in place and the steps before it are done
(:meth:`LessonTools.tick`).  From Python, ``next_lesson_step()`` waits for all of it, as
``run`` does, and raises ``ValueError`` when the lab refuses the step.

A mixin (:class:`Teaching`) and the page's part (:class:`LessonTools`) of
:class:`boltzlab.dashboard.labs.base.Lab`, kept apart so that the lab base stays a readable size.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Mapping

import panel as pn

from ..lessons.model import CATALOGUE, Lesson, LessonStep
from ..views.text import LiveHTML, escape, text_html

PLACEHOLDER = "Choose a lesson…"
NEXT_LABEL = "Lesson ▸"
AGAIN_LABEL = "Lesson ↺"
PREPARE = "prepare"  # the lab's job key of a slow preparation (base.PREPARE)
CAPTION_STYLE = {"font-size": "1.25em", "line-height": "1.35", "overflow-wrap": "anywhere"}


@dataclass
class _Due:
    """A step clicked and not yet done: its settings are applied first (``begun``), then, once
    the run is in place and idle, its tab and action."""

    step: LessonStep
    number: int
    begun: bool = False
    changed_settings: bool = False


class Teaching:
    """The lesson API of a lab (see the module's docstring)."""

    @property
    def lessons(self) -> list[Lesson]:
        """The lessons of this lab: the built-in ones, then a teacher's (``boltzlab serve --lessons``)."""
        return CATALOGUE.for_lab(self.key)

    @property
    def current_lesson(self) -> Lesson | None:
        """The lesson chosen with :meth:`lesson` (or in the page), or None."""
        return self.lesson_tools.lesson

    @property
    def lesson_steps_done(self) -> int:
        """How many steps of the current lesson have been applied (0 before the first)."""
        return self.lesson_tools.done

    def lesson(self, lesson: Lesson | str | None) -> Lesson | None:
        """Choose ``lesson`` (a :class:`~boltzlab.dashboard.lessons.Lesson`, e.g. from
        ``lessons.load(path)``, or the name or title of one of :attr:`lessons`) and stand before
        its first step; ``None`` ends the lesson.  Returns the lesson.  ``ValueError`` for a
        lesson of another lab or a name this lab has no lesson by."""
        if lesson is None:
            self.lesson_tools.start(None)
            return None
        if isinstance(lesson, str):
            lesson = CATALOGUE.find(self.key, lesson)
        elif not isinstance(lesson, Lesson):
            raise ValueError(f"The 'lesson' parameter of {type(self).__name__}.lesson must be a Lesson, a "
                             f"lesson's name or None. Got {lesson!r}.")
        if lesson.lab != self.key:
            raise ValueError(f"The lesson {lesson.title!r} is for the {lesson.lab!r} lab, not {self.key!r}.")
        self.lesson_tools.start(lesson)
        return lesson

    def next_lesson_step(self, *, wait: bool = True, timeout: float | None = None) -> LessonStep | None:
        """Apply the current lesson's next step and return it (None once every step is done).

        ``wait`` (from Python): return once its settings' run is in place, its action done
        and drawn (a ``play`` action's steps in, as :meth:`run`); ``ValueError`` when the lab
        refuses the step (a setting its data does not allow, a pin of a run with no Record,
        ...), ``TimeoutError`` after ``timeout`` seconds.  ``wait=False`` (the page): apply
        what can be applied now and leave the rest to the refresh tick."""
        tools = self.lesson_tools
        if tools.lesson is None:
            raise ValueError(f"{type(self).__name__}.next_lesson_step: no lesson chosen; call lesson(name) "
                             f"first (this lab's: {[lesson.name for lesson in self.lessons]}).")
        step = tools.click(again=False)
        if wait and step is not None:
            tools.finish(timeout)
        return step

    # ------------------------------------------------------------------ what a step does
    def _apply_quietly(self, values: Mapping[str, Any], fresh: bool) -> None:
        """Set ``values`` as one batch, as a widget's change does: the run is rebuilt by the
        runner's thread (a slow preparation as a job), nothing waited for; a refusal is said
        under the controls and kept in ``_refused`` (then or on a later tick).  ``fresh``: a
        new run even when nothing changed (a preset starts its run from the beginning)."""
        values = self.check_settings(values)
        generation = self.runner.generation
        extra = {k: v for k, v in self.implied(values).items() if k not in values}
        self._refused = None
        self._given = set(extra) | set(values)  # named values win over what the batch implies
        try:
            self.param.update({**extra, **values})
        finally:
            self._given = set()
        if (self._refused is None and self.runner.generation == generation and not self.jobs.running(PREPARE)
                and (self._built != self._run_inputs()  # unchanged values, but the run is from before a refusal
                     or (fresh and set(values) - self.view_settings - {"speed"}))):
            self.rebuild(set(values))

    def _sweep_quietly(self, setting: str, values: tuple) -> None:
        """:meth:`sweep` without waiting for the runs: one run per value, built by the runner's thread."""
        before = self._sweep
        self._sweep, self._sweeping = (setting, tuple(values)), True
        try:
            generation = self.runner.generation
            self._refused = None
            self.param.update({setting: values[0]})
            if self._refused is None and self.runner.generation == generation:
                self.rebuild({setting})
        finally:
            self._sweeping = False
        if self._refused is not None:
            self._sweep = before

    def _show_tab(self, label: str) -> None:
        tabs = getattr(self, "stage_tabs", None)
        if tabs is not None and label in self._stage_labels:
            tabs.active = self._stage_labels.index(label)


class LessonTools:
    """The lesson box of one lab's sidebar and the steps clicked and not yet done."""

    def __init__(self, lab: Any) -> None:
        self.lab = lab
        self.lesson: Lesson | None = None
        self.done = 0  # steps begun
        self.queue: list[_Due] = []
        self.error = ""  # why the newest step could not be done ("" if it could)
        self._presenting = False
        w = pn.widgets
        self.choose = w.Select(options=self._options(), value="", width=190, margin=(5, 5), css_classes=[f"{lab.key}-lesson-choice"])
        self.next = w.Button(label=NEXT_LABEL, color="success", width=105, margin=(5, 5), disabled=True,
                             css_classes=[f"{lab.key}-lesson-next"])
        self.caption = LiveHTML("", width=310, margin=(0, 5, 5, 8), name=f"{lab.key}-lesson-caption",
                                css_classes=["lesson-caption"], styles=CAPTION_STYLE)
        self.box = pn.Column(pn.Row(self.choose, self.next, margin=0), self.caption, width=325, margin=(0, 0, 5, 0),
                             visible=False, css_classes=["lesson-box"])
        self.choose.param.watch(self._on_choose, "value")
        self.next.on_click(lambda event: self.click(again=True))

    def _options(self) -> dict[str, str]:
        lessons = [*self.lab.lessons, *([self.lesson] if self.lesson is not None and self.lesson not in
                                        self.lab.lessons else [])]
        return {PLACEHOLDER: "", **{lesson.title: lesson.name for lesson in lessons}}

    def panel(self) -> pn.viewable.Viewable:
        return self.box

    def set_presenting(self, on: bool) -> None:
        self._presenting = on
        self._refresh()

    @property
    def pending(self) -> bool:
        """A step clicked and not yet done (the tick looks often meanwhile)."""
        return bool(self.queue)

    # -------------------------------------------------------------- choosing, clicking
    def _on_choose(self, event: Any) -> None:
        if event.new == (self.lesson.name if self.lesson is not None else ""):
            return
        self.lab.lesson(event.new or None)

    def start(self, lesson: Lesson | None) -> None:
        """Stand before the first step of ``lesson`` (None: no lesson)."""
        self.lesson, self.done, self.queue, self.error = lesson, 0, [], ""
        options = self._options()
        if self.choose.options != options:
            self.choose.options = options
        self.choose.value = lesson.name if lesson is not None else ""
        self._refresh()

    def click(self, again: bool) -> LessonStep | None:
        """The next step, applied now as far as it can be without waiting (the tick does the
        rest); after the last one, the first again if ``again`` (the page), else None."""
        lesson = self.lesson
        if lesson is None:
            return None
        number = self.queue[-1].number if self.queue else self.done  # steps clicked so far
        if number >= len(lesson.steps):
            if not again or self.queue:
                return None
            self.start(lesson)
            number = 0
        step = lesson.steps[number]
        if self.lab.runner.playing:  # a lesson narrates single steps, as Next step does
            self.lab._pause()
        self.queue.append(_Due(step, number + 1))
        self.tick()
        self._refresh()
        return step

    # -------------------------------------------------------------- the tick's part
    def _settled(self) -> bool:
        lab = self.lab
        return (not lab.jobs.running(PREPARE) and lab._explaining is None and not lab.runner.building
                and lab.runner.wait_idle(0))

    def tick(self) -> None:
        """Do what the steps clicked can do now: a step's settings once the steps before it are
        done, its tab and action once its run is in place and idle.  Never waits."""
        while self.queue and self._settled():
            due = self.queue[0]
            if not due.begun:
                self._begin(due)
                continue
            if due.changed_settings and self.lab._refused is None and self.lab._built != self.lab._run_inputs():
                return  # a build refused just now: the old run is back, the refusal said right after
            self.queue.pop(0)
            self._act(due)
            self._refresh()

    def _begin(self, due: _Due) -> None:
        lab, step = self.lab, due.step
        due.begun = True
        self.done, self.error = due.number, ""
        values: dict[str, Any] = {}
        if step.preset is not None:
            preset = next(p for p in lab.presets if p.title == step.preset)
            values.update(preset.settings)
            lab.tools.show("info", f"**{preset.title}.** {preset.note}")
        values.update(step.settings)
        if values:
            lab._quiet_caption()
            due.changed_settings = True
            try:
                lab._apply_quietly(values, fresh=step.preset is not None)
            except ValueError as exc:
                lab._refused = exc
        self._refresh()

    def _act(self, due: _Due) -> None:
        lab, step = self.lab, due.step
        refused = lab._refused if due.changed_settings else None
        if refused is not None:
            self.fail(f"Step {due.number}'s settings were refused: {getattr(refused, 'link', None) or refused}")
            return
        if step.tab is not None:
            lab._show_tab(step.tab)
        try:
            if step.action == "play":
                lab._quiet_caption()
                for _ in range(step.steps):
                    lab.runner.step_once()
                if lab.runner.active:
                    lab.on_steps_asked()
                lab.refresh_status()
            elif step.action == "next":
                lab.next_step()
            elif step.action == "pin":
                if step.pin is not None and step.pin in lab.pins:  # the lesson again: its pin anew
                    lab.unpin(step.pin)
                lab.pin(step.pin)
            elif step.action == "sweep":
                lab._sweep_quietly(*step.sweep)
                if lab._refused is not None:
                    raise ValueError(getattr(lab._refused, "link", None) or str(lab._refused))
        except ValueError as exc:
            self.fail(f"Step {due.number} could not be done: {exc}")

    def fail(self, text: str) -> None:
        self.error = text
        self.queue = []  # the steps clicked after it were meant to follow it
        self._refresh()

    def finish(self, timeout: float | None) -> None:
        """Wait (from Python) until every step clicked is done and drawn, as ``run`` does;
        ``ValueError`` if one could not be done."""
        lab = self.lab
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{type(lab).__name__}.next_lesson_step: not done in {timeout} s.")
            if lab.jobs.running(PREPARE):
                lab.jobs.wait(min(left, 3600.0))
            if not lab.runner.wait_idle(min(60.0, left)):
                continue
            lab._draw_now(deadline)
            if self.error:
                raise ValueError(self.error)
            if not self.queue and not lab.jobs.running(PREPARE) and lab.runner.wait_idle(0):
                return

    # -------------------------------------------------------------- what the box shows
    def _refresh(self) -> None:
        lesson = self.lesson
        self.box.visible = self._presenting or lesson is not None
        total = len(lesson.steps) if lesson is not None else 0
        self.next.disabled = lesson is None
        self.next.label = AGAIN_LABEL if lesson is not None and self.done >= total and not self.queue else NEXT_LABEL
        self.caption.object = self.text()

    def text(self) -> str:
        """The caption's HTML: the lesson's place, the step's narration and question (escaped)."""
        lesson = self.lesson
        if lesson is None:
            return ('<div style="font-size:0.8em;color:#5f6368">Choose a lesson, then press '
                    f"<b>{NEXT_LABEL}</b> for each step.</div>")
        total = len(lesson.steps)
        head = (f'<div class="lesson-head" style="font-size:0.75em;color:#5f6368">'
                f"{escape(lesson.title)} · step {min(self.done, total)} of {total}</div>")
        if self.done == 0:
            about = f"<div>{text_html(lesson.about)}</div>" if lesson.about else ""
            return (f"{head}{about}<div style=\"font-size:0.8em;color:#5f6368\">Press <b>{NEXT_LABEL}</b> "
                    f"for step 1.</div>")
        step = lesson.steps[self.done - 1]
        parts = [head, f'<div class="lesson-narration">{text_html(step.narration)}</div>']
        if step.question:
            parts.append(f'<div class="lesson-question" style="margin-top:6px;color:#174ea6">'
                         f"<b>Question:</b> {text_html(step.question)}</div>")
        if self.error:
            parts.append(f'<div class="lesson-error" style="margin-top:6px;font-size:0.8em;color:#8c1d18">'
                         f"{text_html(self.error)}</div>")
        return "".join(parts)
