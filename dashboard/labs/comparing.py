"""Compare runs (issue 47): a lab's pins (``pin``, ``pins``, ``unpin``, drawn in every figure
that shows them) and its sweep (``sweep``: one run per value of a setting, stepping together).

A mixin of :class:`boltzlab.dashboard.labs.base.Lab`; the data are in
:mod:`boltzlab.dashboard.pins` and :mod:`boltzlab.dashboard.sweeps`, the page's sweep card in
:mod:`boltzlab.dashboard.labs.compare`, the pinned lines in :mod:`boltzlab.dashboard.views.pinned`.
"""

from __future__ import annotations

from typing import Any, Callable

import param

from .. import budget
from .holding import held
from ..labtools import setting_text
from ..pins import MAX_PINS, Pin, settings_difference
from ..sweeps import MAX_VALUES, MIN_VALUES, combined


class Comparing:
    """Pins and sweeps of a lab (see the module's docstring)."""

    #: the lab has image figures that show a pin's pictures beside the live ones (:meth:`beside`)
    pictures_beside = False

    @property
    def pins(self) -> dict[str, Pin]:
        """The pinned runs by label, oldest first: each has ``.settings`` (the values it was
        made with), ``.records`` (``{run: {scalar: array}}``, as :attr:`records`) and
        ``.arrays`` (each run's newest arrays).  See :meth:`pin`."""
        return self._pins.as_dict()

    def pin(self, label: str | None = None) -> str:
        """Keep the current run (every run of a race) as a pinned run to compare new runs
        with; return its label (default "pin 1", "pin 2", ...).  At most four are kept: a
        fifth drops the oldest.  Pins stay through changes of settings, Reset and a new data
        set; :meth:`unpin` drops them.  ``ValueError`` for a label in use or a run with no
        Record yet."""
        owner = f"{type(self).__name__}.pin"
        label = self._pins.label(label, owner)
        self._adopt_build(wait=True)
        history = self._history()
        if not any(history.rows.values()):
            raise ValueError(f"{owner}: the current run has no Record yet; step it first (▶ Play, Step or run()).")
        dropped = self._pins.add(Pin(label, self.run_settings(), history, self.data_identity(), self._sweep))
        self.on_pins_changed()
        note = f" (at most {MAX_PINS}: {dropped.label!r} was dropped)" if dropped is not None else ""
        self.tools.show("info", f"Pinned the run as {label!r}{note}.")
        return label

    def unpin(self, label: str | None = None) -> None:
        """Drop the pin ``label``, or every pin (``None``)."""
        self._pins.remove(label, f"{type(self).__name__}.unpin")
        self.on_pins_changed()

    # ------------------------------------------------------------------ pictures side by side
    @property
    def beside_pin(self) -> str | None:
        """The label of the pin whose pictures are shown beside the live ones (None: none)."""
        return self._beside

    def beside(self, label: str | None = None) -> None:
        """Show pin ``label``'s newest pictures (receptive fields, samples, TAP solutions, M̂,
        the gap map: the lab's image figures) beside the live ones, in the same colour scale;
        ``None`` shows the live pictures alone.  ``ValueError`` for a label no pin has."""
        if label is not None and label not in self._pins.as_dict():
            raise ValueError(f"The 'label' parameter of {type(self).__name__}.beside must be one of "
                             f"{list(self._pins.as_dict())} or None. Got {label!r}.")
        self._beside = label
        self.redraw_beside()
        self._pin_menu()

    def redraw_beside(self) -> None:
        """Draw the chosen pin's pictures beside the live ones (or hide them): once per change
        of the choice, of the pins or of the live run, never per tick."""
        pin = self._pins.as_dict().get(self._beside) if self._beside is not None else None
        self._beside = None if pin is None else pin.label  # an unpinned pin is shown no more
        self.draw_beside(pin)

    def draw_beside(self, pin: Pin | None) -> None:
        """Draw ``pin``'s newest arrays in the twins of the lab's image figures
        (:class:`~boltzlab.dashboard.views.beside.Beside`), in the live pictures' colour scale,
        titled :meth:`pin_legend`; ``None`` hides the twins."""

    def load_pins(self, pins: list[Pin]) -> None:
        """Hold exactly ``pins`` (a loaded checkpoint's, their settings as text: read back as
        values where this lab allows them, kept as text where not)."""
        names, out = self.setting_names(), []
        for pin in pins:
            values, _ = self.parse_settings({k: v for k, v in pin.settings.items() if k in names})
            out.append(Pin(pin.label, {k: values.get(k, text) for k, text in pin.settings.items()},
                           pin.history, pin.data, self._pinned_sweep(pin.sweep)))
        self._pins.replace(out)
        self.on_pins_changed()

    def _pinned_sweep(self, sweep: tuple[str, tuple] | None) -> tuple[str, tuple] | None:
        """A loaded pin's sweep, its value texts read as the setting's values (kept as text
        when this lab does not allow them: "Copy as Python" then says the pin cannot be made)."""
        if sweep is None:
            return None
        setting, texts = sweep
        parsed = [self.parse_settings({setting: text}) for text in texts]
        if any(errors or setting not in values for values, errors in parsed):
            return setting, tuple(texts)
        return setting, tuple(values[setting] for values, _ in parsed)

    # ------------------------------------------------------------------ sweeps (issue 47)
    def sweepable(self) -> list[str]:
        """The settings a sweep may vary: the numeric settings that make the run, but those
        of its data (``data_settings``: each run of a sweep trains on the lab's one data set)."""
        return [name for name in self.controls() if name not in self.view_settings
                and name not in self.data_settings and isinstance(self.param[name], param.Number)]

    @property
    def sweeping(self) -> tuple[str, tuple] | None:
        """``(setting, values)`` of the sweep the lab runs, or None."""
        return self._sweep

    def sweep(self, setting: str | None, values: Any = ()) -> None:
        """Run one run per value of numeric ``setting`` (2 to 4 values) side by side, stepping
        together, each named ``"setting=value"`` (``lab.runs``); :meth:`run` steps them all.
        Each run is the run a lab with that value alone makes (same seeds, same Records).
        The work budget counts the runs' steps together.  ``sweep(None)`` ends the sweep (the
        setting keeps the first value); so does choosing one value for the setting.
        ``ValueError`` names a setting that cannot be swept, a bad count of values, or a value
        its setting does not allow (the sentence a link's bad value gets)."""
        owner = f"{type(self).__name__}.sweep"
        if setting is None:
            if self._sweep is not None:
                self._sweep = None
                self.rebuild(strict=True)
            return
        allowed = self.sweepable()
        if setting not in allowed:
            raise ValueError(f"The 'setting' parameter of {owner} must be one of {allowed} (a numeric "
                             f"setting of the run). Got {setting!r}.")
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            raise ValueError(f"The 'values' parameter of {owner} must be a list of {MIN_VALUES} to "
                             f"{MAX_VALUES} values. Got {values!r}.")
        values = list(values)
        if not MIN_VALUES <= len(values) <= MAX_VALUES:
            raise ValueError(f"The 'values' parameter of {owner} must hold {MIN_VALUES} to {MAX_VALUES} "
                             f"values. Got {len(values)}.")
        checked = list(self.check_settings({setting: v})[setting] for v in values)
        if len(set(checked)) != len(checked):
            raise ValueError(f"The 'values' parameter of {owner} must hold different values. Got {values!r}.")
        before = self._sweep
        self._sweep, self._sweeping = (setting, tuple(checked)), True
        try:
            self.apply_settings({setting: checked[0]}, fresh=True)
        except ValueError:
            self._sweep = before
            raise
        finally:
            self._sweeping = False

    def _with_value(self, setting: str, value: Any, fn: Callable[[], Any]) -> Any:
        """``fn()`` with ``setting`` set to ``value`` quietly (no watcher hears it)."""
        with param.parameterized.discard_events(self):
            setattr(self, setting, value)
        return fn()

    def _run_factory(self) -> Any:
        """What the runner builds: the lab's runs, or one set per value of a sweep
        (:func:`boltzlab.dashboard.sweeps.combined`)."""
        if self._sweep is None:
            return self.trainer_factory()
        setting, values = self._sweep
        first = getattr(self, setting)
        parts = []
        self._alone_name = None
        try:  # the first value last: what the factory recorded about the run is the first run's
            for value in reversed(values):
                parts.append((setting_text(value), self._with_value(setting, value, self.trainer_factory)))
        finally:
            with param.parameterized.discard_events(self):
                setattr(self, setting, first)
        factory = parts[-1][1]  # the first value's: a one-run lab's run name, for its views
        names = getattr(factory, "names", None)
        self._alone_name = names[0] if names is not None and len(names) == 1 else None
        return combined(setting, parts[::-1])

    @property
    def view_runs(self) -> list[str]:
        """The runs' names as the lab's views see them: the runner's, or in a sweep of a lab
        whose views draw one run's details (``sweep_views`` False) the first value's runs
        under the names a lab with that value alone would give them."""
        views = self._view_names()
        return self.runner.names if views is None else list(views.values())

    def _view_names(self) -> dict[str, str] | None:
        """``{sweep run: its name alone}`` for the first value of a sweep the views show in
        part; None when the views see every run as it is named."""
        if self._sweep is None or self.sweep_views:
            return None
        setting, values = self._sweep
        head = f"{setting}={setting_text(values[0])}"
        out = {}
        for name in self.runner.names:
            if name == head:
                out[name] = self._alone_name or name
            elif name.startswith(head + " · "):
                out[name] = name[len(head) + 3:]
        return out

    def _check_work(self) -> None:
        """The work budget (:meth:`check_work`); a sweep of k runs gives each run a k-th of a
        step's seconds, so that together they fit one step."""
        if self._sweep is None:
            self.check_work()
            return
        setting, values = self._sweep
        first = getattr(self, setting)
        try:
            with budget.shared(len(values)):
                for value in values:
                    try:
                        self._with_value(setting, value, self.check_work)
                    except budget.TooMuchWork as exc:
                        raise budget.TooMuchWork(
                            f"A sweep of {len(values)} runs steps them together, so each run gets a "
                            f"{len(values)}-th of a step's time; at {setting} = {setting_text(value)}: {exc}") from None
        finally:
            with param.parameterized.discard_events(self):
                setattr(self, setting, first)

    def on_pins_changed(self) -> None:
        """The pins changed (pinned, unpinned, loaded): redraw what shows them."""
        self.draw_pins()
        self.redraw_beside()
        if self._share is not None:  # followers see the same pins
            self._share.set_pins(list(self._pins))

    def pin_layers(self) -> dict[str, Any]:
        """The lab's figures that draw pinned runs, by name: a ``PinLayer`` each (made at build
        time: ``LiveCurve.add_pins()`` or ``views.pinned.PinLayer(figure)``)."""
        return {}

    def pin_lines(self, pin: Pin) -> dict[str, list[tuple[Any, Any]]]:
        """The lines pinned run ``pin`` draws, by the name of the figure's layer
        (:meth:`pin_layers`): ``(x, y)`` pairs, one per run of the pin, from ``pin.records``
        as the live lines are drawn from Records (same metric, same axes)."""
        return {}

    def sweep_layers(self) -> dict[str, Any]:
        """The layers a sweep's other runs are drawn in, by the names of :meth:`pin_layers`."""
        return self._sweep_layers

    def sweep_legends(self) -> list[tuple[Any, str, str]]:
        """The legend entries of the live lines that a sweep's other values are drawn against
        (labs whose views draw the first value's runs), asked once, at build time:
        ``(LegendItem, run, text)``, ``run`` the run the line draws as the views name it,
        ``text`` what the entry says in a sweep, ``{run}`` standing for the run's name there
        (``sweeps.run_name``: ``"n_hidden=16"``, a race's ``"reg=0.3 · Newton"``)."""
        return []

    def pin_legend(self, pin: Pin) -> str:
        """A pin's legend entry: its label and what differs from the live run's settings
        (``short_labels`` name them), and a note when it trained on other data."""
        pinned = {k: v for k, v in pin.settings.items() if k not in self.view_settings}  # the run's own
        text = settings_difference(pinned, self.run_settings(), self.short_labels)
        if pin.data is not None and pin.data != self.data_identity():
            text += f", other data ({pin.data[1]})"
        return f"{pin.label}: {text}"

    def draw_pins(self) -> None:
        """Draw every pin in every figure that shows pins (once per change of the pins or of
        the live run's settings, never per tick)."""
        self._pin_menu()
        layers = self.pin_layers()
        if not layers:
            return
        pins = list(self._pins)
        drawn = [(self.pin_legend(pin), self.pin_lines(pin)) for pin in pins]
        for name, layer in layers.items():
            layer.show([(text, lines.get(name, [])) for text, lines in drawn])

    def _pin_menu(self) -> None:
        """The pin button's menu: unpin each pin, or all."""
        menu = getattr(self, "pin_button", None)
        if menu is None:
            return
        labels = list(self._pins.as_dict())
        items = [(f"Unpin {self.pin_legend(pin)}", f"unpin:{pin.label}") for pin in self._pins]
        if len(labels) > 1:
            items.append(("Unpin all", "unpin-all"))
        if labels and self.pictures_beside:
            items += [(f"🖼 Pictures of {label} beside the live ones", f"beside:{label}")
                      for label in labels if label != self._beside]
            if self._beside is not None:
                items.append(("🖼 Live pictures alone", "beside-none"))
        menu.items = items or [("No pins yet: 📌 Pin keeps the current run", "none")]

    @held
    def _on_pin_menu(self, event: Any) -> None:
        choice = event.new
        try:
            if choice == self.pin_button.label:
                self.pin()
            elif choice == "unpin-all":
                self.unpin()
                self.tools.show("info", "Unpinned every run.")
            elif choice == "beside-none":
                self.beside(None)
            elif isinstance(choice, str) and choice.startswith("beside:"):
                self.beside(choice[len("beside:"):])
                self.tools.show("info", f"The pictures of {choice[len('beside:'):]!r} are beside the live ones.")
            elif isinstance(choice, str) and choice.startswith("unpin:"):
                self.unpin(choice[len("unpin:"):])
                self.tools.show("info", f"Unpinned {choice[len('unpin:'):]!r}.")
        except ValueError as exc:
            self.tools.show("warn", str(exc))
