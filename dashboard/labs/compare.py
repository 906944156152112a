"""The page's "Run for several values" card (issue 47 item 3): choose a numeric setting and 2
to 4 values, run them side by side (``Lab.sweep``), and read each run's latest headline number
in a small table; in labs whose views draw one run's details, the other values' curves are
drawn beside the first value's in every time-series figure
(:class:`~boltzlab.dashboard.views.pinned.SweepLayer`: each tick streams the runs' new points).

The lab side is :class:`boltzlab.dashboard.labs.base.Lab` (``sweep``, ``sweeping``,
``sweepable``, ``headline``, ``pin_lines``, ``runner``); the base owns one ``CompareTools``.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import panel as pn
from bokeh.core.properties import value as text_value

from ..labtools import setting_text
from ..pins import Pin
from ..runner import History
from ..sweeps import run_name
from ..views import StatusBadge
from ..views.text import TABLE_CSS, LiveHTML, html_table


class CompareTools:
    """The sweep card of one lab: its widgets, the headline table, the other values' curves."""

    def __init__(self, lab: Any) -> None:
        self.lab = lab
        w = pn.widgets
        names = lab.sweepable()
        labels = {lab.param[n].label or n: n for n in names}
        self.setting = w.Select(label="Setting", options=labels, width=300)
        self.values = w.TextInput(label="Values (2 to 4, separated by commas)", placeholder="e.g. 0.01, 0.05, 0.1",
                                  width=300)
        self.start = w.Button(label="▶ Run for these values", color="primary", width=190)
        self.stop = w.Button(label="End sweep", width=100, disabled=True)
        self.message = StatusBadge("", "info", visible=False, name=f"{lab.key}-sweep-message")
        self.table = LiveHTML("", sizing_mode="stretch_width", name=f"{lab.key}-sweep-table",
                              css_classes=["sweep-table"], stylesheets=[TABLE_CSS], visible=False)
        self.start.on_click(lambda event: self._start())
        self.stop.on_click(lambda event: self._stop())
        # the other values' curves: each run's (count, length) of history drawn, from which History
        self._seen: dict[str, tuple[int, int]] = {}
        self._history: History | None = None
        self._fresh = False  # the last drawing was whole (the next one is whole too)
        # the live lines' legend entries that name the first value in a sweep (Lab.sweep_legends)
        self._legends = [entry for entry in lab.sweep_legends() if entry[0] is not None]
        self._own_labels: dict[int, tuple[Any, Any]] = {}  # id(item): (item, its own label)

    def panel(self) -> pn.viewable.Viewable:
        body = pn.Column(self.setting, self.values, pn.Row(self.start, self.stop), self.message.pane, self.table,
                         margin=0)
        return pn.Card(body, title="Run for several values", collapsed=True, width=325, margin=(5, 5))

    # -------------------------------------------------------------- actions
    def _start(self) -> None:
        texts = [t.strip() for t in self.values.value.split(",") if t.strip()]
        setting = self.setting.value
        values, errors = [], []
        for text in texts:
            parsed, bad = self.lab.parse_settings({setting: text})
            errors += bad
            if setting in parsed:
                values.append(parsed[setting])
        try:
            if errors:
                raise ValueError(" ".join(errors))
            self.lab.sweep(setting, values)
        except ValueError as exc:
            self.say("error", str(exc))
            return
        self.say("info", f"{len(values)} runs side by side: press ▶ Play.")
        self.refresh()

    def _stop(self) -> None:
        try:
            self.lab.sweep(None)
        except ValueError as exc:
            self.say("error", str(exc))
            return
        self.say("info", "The sweep ended: one run again.")
        self.refresh()

    def say(self, level: str, text: str) -> None:
        self.message.set(level, text)
        self.message.pane.visible = True

    # -------------------------------------------------------------- drawing
    def refresh(self) -> None:
        """The buttons and the headline table (with the status line)."""
        sweep = self.lab.sweeping
        self.stop.disabled = sweep is None
        if sweep is None:
            if self.table.visible:
                self.table.visible = False
                self.table.object = ""
            return
        scalar, title = self.lab.headline
        history = self.lab.runner.history
        rows = []
        for name in self.lab.runs:
            # the newest Record that carries it (Frank-Wolfe evaluates every few steps)
            value = next((row[scalar] for row in reversed(history.rows.get(name) or [])
                          if scalar in row and np.isfinite(row[scalar])), None)
            state = self.lab.runner.states.get(name)
            rows.append([name, state.steps if state is not None else 0,
                         "—" if value is None or not np.isfinite(value) else f"{value:.6g}"])
        self.table.object = html_table([("run", ""), ("steps", "right"), (title, "right")], rows)
        self.table.visible = True

    def name_live_lines(self) -> None:
        """In a sweep of a lab whose views draw the first value's runs, the live lines' legend
        entries name that value (``"n_hidden=16"``, as the table and the other values' lines do);
        their own texts are back when the sweep ends."""
        lab, wanted = self.lab, {}
        sweep = lab.sweeping
        if sweep is not None and not lab.sweep_views:
            setting, values = sweep
            text, runs = setting_text(values[0]), len(lab.view_runs)
            for item, run, form in self._legends:
                wanted[id(item)] = (item, form.format(run=run_name(setting, text, run, runs)))
        for key, (item, label) in list(self._own_labels.items()):
            if key not in wanted:
                item.label = label
                del self._own_labels[key]
        for key, (item, text) in wanted.items():
            self._own_labels.setdefault(key, (item, item.label))
            if getattr(item.label, "value", item.label) != text:
                item.label = text_value(text)  # a text, not the name of a data column

    def lines(self, force: bool = False) -> None:
        """The other values' curves (labs whose views draw the first value's runs): their
        Records drawn as a pin's are (``Lab.pin_lines``), in the figures' sweep layers.

        Each tick streams only each run's new points (``Runner.history_since``); the lines are
        drawn whole when ``force`` (a new sweep, run or settings; Bound: a J* arrived), when
        the runner's history is a new one (a reset, a loaded checkpoint), or for a run whose
        older rows the history thinned (every few thousand Records)."""
        lab = self.lab
        if force:
            self.name_live_lines()
        layers = lab.sweep_layers()
        if not layers:
            return
        sweep = lab.sweeping
        if sweep is None or lab.sweep_views:
            if force or self._seen:
                self._seen, self._history = {}, None
                for layer in layers.values():
                    layer.settle([])
            return
        setting, values = sweep
        heads = [f"{setting}={setting_text(value)}" for value in values]
        places = {}  # each other value's run: (its value's slot, its line there, its name alone)
        for slot, head in enumerate(heads[1:]):
            runs = [name for name in lab.runner.names if name == head or name.startswith(head + " · ")]
            for line, name in enumerate(runs):
                places[name] = (slot, line, name[len(head) + 3:] if name != head else name)
        # just after a whole drawing, the runs with new rows whole again: the two drawings may be
        # in one held batch (see SweepLayer.draw)
        fresh = force or self._fresh
        names = list(places)
        history, tails = lab.runner.history_since({} if fresh else self._seen, names)
        whole = force
        if history is not self._history:  # a reset or a loaded checkpoint: every line anew
            if not fresh:
                history, tails = lab.runner.history_since({}, names)
            self._history, whole = history, True
        if whole:
            self._seen = {}
        settings = lab.run_settings()
        changed = whole
        for name, (seen, rows, all_rows) in tails.items():
            if not whole and self._seen.get(name) == seen:
                continue  # nothing new
            slot, line, alone = places[name]
            part = History()
            part.rows[alone] = rows
            lines = lab.pin_lines(Pin(heads[slot + 1], {**settings, setting: values[slot + 1]}, part))
            for key, layer in layers.items():
                x, y = _joined(lines.get(key, []))
                layer.draw(slot, line, x, y, whole=all_rows)
            self._seen[name] = seen
            changed = True
        if whole:  # the lines of no run with a Record (yet): nothing drawn
            done = {places[name][:2] for name in tails}
            for layer in layers.values():
                for slot, line in itertools.product(range(len(layer.sources)), range(layer.runs)):
                    if (slot, line) not in done:
                        layer.draw(slot, line, [], [], whole=True)
        self._fresh = force
        if changed:
            for layer in layers.values():
                layer.settle(heads[1:])


def _joined(lines: list) -> tuple[list, list]:
    """One run's ``(x, y)`` pieces (``Lab.pin_lines``: one per run and figure) as one line,
    pieces apart by a gap (a NaN)."""
    xs: list = []
    ys: list = []
    for x, y in lines:
        if xs:
            xs.append(xs[-1])
            ys.append(float("nan"))
        xs.extend(x)
        ys.extend(y)
    return xs, ys
