"""The page's "Run for several values" card (issue 47 item 3): choose a numeric setting and 2
to 4 values, run them side by side (``Lab.sweep``), and read each run's latest headline number
in a small table; in labs whose views draw one run's details, the other values' curves are
drawn beside the first value's in every time-series figure (:class:`SweepLines`).

The lab side is :class:`boltzlab.dashboard.labs.base.Lab` (``sweep``, ``sweeping``,
``sweepable``, ``headline``, ``pin_lines``, ``runner``); the base owns one ``CompareTools``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import panel as pn

from boltzlab.dashboard.labtools import setting_text
from boltzlab.dashboard.pins import Pin
from boltzlab.dashboard.runner import History
from boltzlab.dashboard.views import StatusBadge
from boltzlab.dashboard.views.text import TABLE_CSS, LiveHTML, html_table

SWEEP_SECONDS = 1.0  # the other values' curves are redrawn at most once a second while playing


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
        self._drawn = 0.0  # when the other values' curves were last drawn
        self.stale = False  # Records came that they do not show yet

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

    def lines(self, force: bool = False) -> None:
        """The other values' curves (labs whose views draw the first value's runs): their
        Records drawn as a pin's are (``Lab.pin_lines``), in the figures' sweep layers."""
        lab = self.lab
        layers = lab.sweep_layers()
        if not layers:
            return
        sweep = lab.sweeping
        shown = []
        if sweep is not None and not lab.sweep_views:
            now = time.monotonic()
            if not force and lab.runner.playing and now - self._drawn < SWEEP_SECONDS:
                self.stale = True  # drawn at a later tick, playing or not
                return
            self._drawn, self.stale = now, False
            setting, values = sweep
            history = lab.runner.copy_history()
            settings = lab.run_settings()
            for value in values[1:]:
                head = f"{setting}={setting_text(value)}"
                part = History()
                for name, rows in history.rows.items():
                    if name == head or name.startswith(head + " · "):
                        alone = name[len(head) + 3:] if name != head else name
                        part.rows[alone] = rows
                shown.append((head, lab.pin_lines(Pin(head, {**settings, setting: value}, part))))
        for name, layer in layers.items():
            layer.show([(text, lines.get(name, [])) for text, lines in shown])
