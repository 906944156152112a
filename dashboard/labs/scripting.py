"""What a lab offers a script or a notebook (docs/python.md), and its run as a script:
``run``, ``runs``, ``statuses``, ``records``, ``records_frame``, ``latest``, ``save_figure``,
``python_script`` ("Copy as Python": every setting the script's own construction would not
give, :meth:`Scripting.script_settings`).

A mixin of :class:`boltzlab.dashboard.labs.base.Lab`, which holds the runner, the pins and
the settings it reads; kept apart so that the lab base stays a readable size.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import panel as pn
import param

from ..panel_compat import extension_loaded
from ..pins import history_columns
from ..runner import History
from ...engine.checks import check_int
from ...engine.stepping import Record

UPLOADED = "upload"  # the value of a data setting that means a user's file (FVBM's source, TAP's data)


class Scripting:
    """The scripted API of a lab (see the module's docstring)."""

    @property
    def runs(self) -> list[str]:
        """The names of the current runs (one, or several in a race), e.g. ``["BSLM"]``."""
        return self.runner.names

    @property
    def statuses(self) -> dict[str, str]:
        """Each run's status (``engine.stepping.STATUS_MEANINGS``), e.g. ``{"BSLM": "converged"}``."""
        return {name: state.status for name, state in self.runner.states.items()}

    def run(self, steps: int = 1, *, timeout: float | None = None) -> None:
        """Step every active run ``steps`` times, now, and draw the result: for scripts
        and notebooks, no server needed.

        Blocks until the Records of the ``steps`` steps are in (a run that stops first,
        converged or failed, steps fewer times) and the analyses they started are done;
        then the lab's figures show them, as after ▶ Play and a tick.  Pauses a playing
        lab first.  In a race every run steps once per step.

        Parameters
        ----------
        steps
            How many steps (an int >= 1): a sweep, an iteration, a mini-batch, ... as the
            lab's counter counts them.
        timeout
            Seconds to wait at most (``None``: as long as it takes); ``TimeoutError`` after.
        """
        steps = check_int("steps", steps, f"{type(self).__name__}.run", 1)
        if timeout is not None and not timeout > 0:
            raise ValueError(f"The 'timeout' parameter of {type(self).__name__}.run must be a float > 0 "
                             f"or None. Got {timeout!r}.")
        self.runner.pause()
        for _ in range(steps):
            self.runner.step_once()
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        while not self.runner.wait_idle(min(60.0, max(0.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{type(self).__name__}.run: {steps} step(s) not done in {timeout} s.")
        self._draw_now(deadline)

    def _draw_now(self, deadline: float = math.inf) -> None:
        """What a tick does, now: draw what is new, wait for the analyses it started and
        hand them over (their results are drawn too)."""
        self._adopt_build(wait=True)
        with self._batch():
            self.on_records(self.runner.drain())
        if not self.jobs.wait(max(0.0, min(deadline - time.monotonic(), 3600.0))):
            raise TimeoutError(f"{type(self).__name__}: the analyses did not finish in time.")
        with self._batch():
            self.on_records(self.runner.drain())
            self.refresh_status()

    def _history(self) -> History:
        return self.runner.copy_history()

    @property
    def records(self) -> dict[str, dict[str, np.ndarray]]:
        """Every run's scalars since the last reset, as arrays: ``{run: {name: array}}``,
        one entry per Record, oldest first (``lab.records["BSLM"]["log_pl"]``).

        A scalar some Records lack is NaN there.  Beyond 5,000 Records per run the older
        half is thinned to every second one (``boltzlab.dashboard.runner.History``), as
        the app's CSV export is; :meth:`latest` has the newest arrays."""
        return history_columns(self._history())

    def records_frame(self) -> Any:
        """:attr:`records` as one pandas ``DataFrame``: a row per Record, the columns ``run``
        and ``pin`` first ("" for the live runs, the pin's label for pinned ones, after the
        live rows), then every scalar (NaN where a Record lacks it); the same numbers as the
        app's "Metrics (CSV)" export.  pandas comes with Panel; without it this raises
        ``ImportError`` and :attr:`records` gives the same as arrays."""
        try:
            import pandas as pd
        except ImportError as exc:  # pragma: no cover - pandas is a dependency of Panel
            raise ImportError("records_frame() needs pandas; lab.records has the same numbers as "
                              "numpy arrays.") from exc
        rows = [{"run": name, "pin": pin, **row} for pin, history in self._histories()
                for name, rows in history.rows.items() for row in rows]
        return pd.DataFrame(rows, columns=["run", "pin", *dict.fromkeys(k for r in rows for k in r
                                                                        if k not in ("run", "pin"))])

    def _histories(self) -> list[tuple[str, History]]:
        """The live runs' history (label "") and every pin's, oldest pin first."""
        return [("", self._history()), *((pin.label, pin.history) for pin in self._pins)]


    def python_script(self, steps: int | None = None) -> str:
        """A short script over the public Python API that makes this run again, headless:
        the same lab, the settings that differ from the defaults (seeds included), the same
        number of steps, its Records saved to a CSV ("Copy as Python" in the page).

        ``steps``: how many to run (default: as many as the runs have taken, at least 1).
        A run on uploaded data reads the file again from beside the script (:meth:`script_data`).
        The lab's pins come first, oldest first, each made again in the one lab (its settings,
        its sweep, its steps, ``lab.pin(label)``), then the settings of the run; a pin the
        script cannot make again (one trained on uploaded data) is a comment saying why.
        """
        cls = type(self).__name__
        if steps is None:
            steps = max([s.steps for s in self.runner.states.values()] + [1])
        steps = check_int("steps", steps, f"{cls}.python_script", 1)
        data = self.script_data()
        pinned = [(pin, self.unscriptable(pin)) for pin in self._pins]
        made = sum(why is None for _, why in pinned)
        what = f"{made} pinned run(s) made again, then " if pinned else ""
        lines = [f'"""Boltzmann Lab, the {self.title} lab\'s run as a script ("Copy as Python"): '
                 f'{what}{steps} step(s), headless."""',
                 *(["from pathlib import Path", ""] if data else []),
                 f"from boltzlab.dashboard.labs import {cls}", ""]
        now: _Run | None = None  # the run the script's lab holds so far
        for pin, why in pinned:
            if why is not None:
                lines.append(f"# {pin.label!r} is not made again: {why}")
                continue
            run = _Run(dict(pin.settings), pin.sweep, max(pin.history.counts.values()))
            lines += self._script_reach(now, run, [])
            lines.append(f"lab.pin({pin.label!r})")
            now = run
        lines += self._script_reach(now, _Run(self.run_settings(), self._sweep, steps), data)
        out = f"boltzlab-{self.key}-records.csv"
        if pinned:
            lines += ["frame = lab.records_frame()  # one row per Record, the columns 'run' and 'pin' first "
                      "(the pins' rows after the run's)",
                      f"frame.to_csv({out!r}, index=False)",
                      "print(frame.groupby(['pin', 'run']).tail(1).to_string())"]
        else:
            lines += ["frame = lab.records_frame()  # one row per Record, the column 'run' first",
                      f"frame.to_csv({out!r}, index=False)",
                      "print(frame.groupby('run').tail(1).to_string())"]
        lines += ["lab.close()", ""]
        return "\n".join(lines)

    def _script_reach(self, now: "_Run | None", run: "_Run", data: list[str]) -> list[str]:
        """Lines of :meth:`python_script` that take the script's lab from the run ``now``
        (None: no lab yet) to ``run`` and step it to ``run.steps``: a new lab, or the new
        settings applied (each change a new run, as in the page), or the same run stepped on."""
        if now is None:
            settings = self.script_settings(run.settings)
            arguments = ", ".join(f"{name}={value!r}" for name, value in settings.items())
            if data:
                lines = [f"lab = {type(self).__name__}()", *data, f"lab.apply_settings({settings!r})"]
            else:
                lines = [f"lab = {type(self).__name__}({arguments})"]
            if run.sweep is not None:
                lines.append(f"lab.sweep({run.sweep[0]!r}, {list(run.sweep[1])!r})  # one run per value, "
                             "stepping together")
            return [*lines, f"lab.run(steps={run.steps})"]
        lines, new = [], False
        if now.sweep is not None and now.sweep != run.sweep:
            lines.append("lab.sweep(None)  # the sweep ends: one run again")
            new = True
        values = self.script_changes(now.settings, run.settings)
        if run.sweep is not None and run.sweep != now.sweep and not self.implied({run.sweep[0]: run.sweep[1][0]},
                                                                                   fresh=True):
            values.pop(run.sweep[0], None)  # lab.sweep sets it to its first value
        if data:
            lines += data
        if values:
            lines.append(f"lab.apply_settings({values!r})")
            new = new or any(name not in self.view_settings for name in values)
        if run.sweep is not None and run.sweep != now.sweep:
            lines.append(f"lab.sweep({run.sweep[0]!r}, {list(run.sweep[1])!r})  # one run per value, "
                         "stepping together")
            new = True
        steps = run.steps
        if not new and not data:
            if steps >= now.steps:  # the same run goes on (a new one would make the same Records)
                steps -= now.steps
            else:
                lines.append(f"lab.apply_settings({self._restart(run)!r}, fresh=True)  # the same settings: "
                             "a new run, from its first step")
        if steps:
            lines.append(f"lab.run(steps={steps})")
        return lines

    def script_changes(self, before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
        """The settings ``lab.apply_settings`` is given to go from the run settings ``before``
        to ``after``: those that differ, and those the changes would imply otherwise (a new data
        set's defaults: ``after`` keeps 100 hidden units where the digits' would make 16)."""
        changed = {name: value for name, value in after.items() if not _same_value(before.get(name), value)}
        return self._closed(changed, after)

    def _closed(self, values: dict[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` and every setting they may imply (:meth:`implied`, as a new lab would:
        at least what a lab in any run would) at another value than ``after``'s, in the lab's
        order."""
        values = dict(values)
        while True:
            implied = self.implied(values, fresh=True)
            extra = {k: after[k] for k, v in implied.items()
                     if k in after and k not in values and not _same_value(v, after[k])}
            if not extra:
                break
            values.update(extra)
        order = list(self.controls())
        return dict(sorted(values.items(), key=lambda item: order.index(item[0]) if item[0] in order else len(order)))

    def _restart(self, run: "_Run") -> dict[str, Any]:
        """The fewest settings (at their values) that make ``apply_settings(..., fresh=True)``
        start ``run``'s settings again from the first step: one setting of the run, and what it
        would imply otherwise."""
        swept = run.sweep[0] if run.sweep is not None else None
        names = [n for n in run.settings if n not in self.view_settings and n != swept]
        # rather a number of the model than a choice or the data (which prepare() loads again)
        options = [(len(values), bool(self.implied(values, fresh=True)) or n in self.data_settings,
                    isinstance(self.param[n], param.Selector), i, values)
                   for i, n in enumerate(names) for values in [self._closed({n: run.settings[n]}, run.settings)]]
        return min(options)[-1]

    def unscriptable(self, pin: Any) -> str | None:
        """Why :meth:`python_script` cannot make pin ``pin`` again from code, or None when it
        can: trained on data a user uploaded (not in the settings), settings or a sweep this lab
        does not take as they are (a checkpoint's, from another version), no Record."""
        names = set(self.controls())
        if set(pin.settings) != names:
            return "its settings are not this lab's (a checkpoint of another version)."
        try:
            checked = self.check_settings(pin.settings)
        except ValueError as exc:
            return f"its settings are not this lab's ({exc})."
        if not all(_same_value(checked[k], v) for k, v in pin.settings.items()):
            return "its settings are not this lab's (a checkpoint of another version)."
        if any(isinstance(self.param[k], param.Selector) and v == UPLOADED for k, v in pin.settings.items()):
            name = f" ({pin.data[1]})" if pin.data is not None else ""  # bundled data have an identity too
            return f"it trained on data you uploaded{name}, which its settings do not say."
        if not pin.history.counts or max(pin.history.counts.values()) < 1:
            return "it has no Record."
        if pin.sweep is not None:
            setting, values = pin.sweep
            try:
                checked = [self.check_settings({setting: v})[setting] for v in values]
            except ValueError as exc:
                return f"its sweep is not one this lab makes ({exc})."
            if setting not in self.sweepable() or not all(_same_value(a, b) for a, b in zip(checked, values)):
                return f"its sweep of {setting!r} is not one this lab makes."
        elif all(any(run.startswith(f"{s}=") for s in self.sweepable()) for run in pin.runs):
            return "it was a sweep whose values the checkpoint it came from did not keep."
        return None

    def constructed(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The run settings a new lab built with keyword ``values`` has (``Lab(**values)``, or
        ``Lab()`` then ``apply_settings(values)``): the class defaults, then what ``values``
        imply (a data set's defaults), then ``values`` themselves."""
        made = {name: self.param[name].default for name in self.controls()}
        implied = self.implied(values, fresh=True)
        made.update({k: v for k, v in implied.items() if k in made and k not in values})
        made.update({k: v for k, v in values.items() if k in made})
        return made

    def run_settings(self) -> dict[str, Any]:
        """The settings of the run the lab holds, by name (the speed aside): those it was
        built from, and the view settings as they are.  A refused change leaves its value in
        the lab's settings (and widgets) but not here: the run stayed as it was."""
        built = self._built
        return {name: built[name] if name in built else getattr(self, name) for name in self.controls()}

    def script_settings(self, settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The settings :meth:`python_script` names: those of :meth:`run_settings` that the
        script's own construction (:meth:`constructed`) would not give by itself, in the order
        the lab declares them.  A setting equal to its class default is named all the same
        when another named one implies a different value for it: ``TAPLab(data="digits",
        n_hidden=100)`` must say ``n_hidden=100``, which the digits' defaults would make 16.

        Found by starting from every setting and dropping, in the lab's order, each one the
        construction from the others gives anyway.  ``settings``: those of another run (a
        pin's) instead of :meth:`run_settings`."""
        current = self.run_settings() if settings is None else dict(settings)

        def makes_current(values: Mapping[str, Any]) -> bool:
            made = self.constructed(values)
            return all(_same_value(made[k], v) for k, v in current.items())

        given = dict(current)  # every setting makes the run; drop those the others imply anyway
        for name in current:
            rest = {k: v for k, v in given.items() if k != name}
            if makes_current(rest):
                given = rest
        return given

    def script_data(self) -> list[str]:
        """Lines of :meth:`python_script` that give the lab data the settings alone do not
        (an uploaded file); none by default."""
        return []

    def latest(self, run: str | None = None) -> Record | None:
        """Run ``run``'s newest Record: its scalars and the newest arrays it reported
        (weights, receptive fields, ...); ``None`` before its first step.  ``run`` may be
        left out when the lab has one run."""
        history = self._history()
        names = self.runs
        if run is None:
            if len(names) != 1:
                raise ValueError(f"The 'run' parameter of {type(self).__name__}.latest must name one of the "
                                 f"runs {names} (this lab races several). Got None.")
            run = names[0]
        elif run not in names:
            raise ValueError(f"The 'run' parameter of {type(self).__name__}.latest must be one of {names}. "
                             f"Got {run!r}.")
        rows = history.rows.get(run)
        return Record(dict(rows[-1]), dict(history.arrays.get(run, {}))) if rows else None

    def figures_html(self) -> str:
        """The lab's figures as one standalone HTML page (Bokeh's, with its JavaScript
        inline: it opens offline); what the app's "Plots (HTML)" export downloads."""
        from bokeh.embed import file_html
        from bokeh.layouts import column
        from bokeh.resources import INLINE

        figures = [p.object for p in self.panel().select(pn.pane.Bokeh) if p.object is not None and p.visible]
        if not figures:
            return "<p>No plots to export.</p>"
        # a document of its own (Panel's save does the same): the figures may already be in a
        # session's or a notebook's document, and must stay there
        return file_html(column(*figures), INLINE, title=f"Boltzmann Lab: {self.title}", _always_new=True)

    def save_figure(self, path: str | Path) -> Path:
        """Save the lab's figures, as they are now, to ``path`` (``.html``: a standalone
        page, see :meth:`figures_html`) and return the path.  Call :meth:`run` first in a
        script: without a tick nothing else draws.  A PNG would need a browser (Bokeh's
        export); for a static image plot :meth:`records_frame` with matplotlib."""
        path = Path(path)
        if path.suffix.lower() not in (".html", ".htm"):
            raise ValueError(f"The 'path' parameter of {type(self).__name__}.save_figure must end in .html "
                             f"(a PNG needs a browser). Got {str(path)!r}.")
        path.write_text(self.figures_html(), encoding="utf-8")
        return path

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Any:
        """Shown as a notebook cell's output: load Panel's notebook extension first if the
        notebook has not (``pn.extension()``), then render; the tick starts (:class:`Page`)."""
        if not extension_loaded():
            pn.extension()
        return super()._repr_mimebundle_(include, exclude)


@dataclass(frozen=True)
class _Run:
    """A run :meth:`Scripting.python_script` makes: its settings, its sweep, its steps."""

    settings: dict[str, Any]
    sweep: tuple[str, tuple] | None
    steps: int


def _same_value(a: Any, b: Any) -> bool:
    """Two setting values are the same value (and the same kind: ``True`` is not ``1``)."""
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b
