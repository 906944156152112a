"""The Lab every page of the app is: what the four labs share, defined once.

A lab module declares only what is its own (see ``docs/architecture.md``, "Labs"):

* metadata: ``key``, ``title``, ``summary`` (the one sentence shown first), ``intro`` /
  ``equations`` / ``watch`` (behind "more"), ``presets``, ``speeds``, ``watch_scalar``;
* settings: ``param`` parameters of the lab class (name = URL key, with label, bounds or
  choices, and doc), ``speed`` among them (:func:`speed_setting`); ``widget_options`` gives a
  widget's type and looks, the base makes every widget from its parameter (``self.widgets``).
  A change rebuilds the run, except the names in ``view_settings``, which only redraw;
  ``build_controls()`` makes the lab's other widgets, ``controls_panel()`` lays them out;
* ``trainer_factory()``: a builder of ``{name: trainer}`` (the runner builds them, once per
  change; a bad setting raises ``ValueError`` there); ``prepare(changed)`` loads what the factory needs (data);
  ``check_work()`` refuses settings over the server's work budget (:mod:`boltzlab.dashboard.budget`);
* ``build_views()``, ``main_view()`` (the plot that must be on the first screen),
  ``more_views()``; ``clear()`` empties them for a new run; ``draw_records(records)`` draws
  new Records (views read Records, never trainers; ``show()`` is Panel's);
* optionally ``counter()``, ``refresh_badges()``, ``on_steps_asked()`` (views that wait for an
  analysis of the first Records say so), and ``describe_change(...)``, ``highlight(...)`` /
  ``clear_highlight()`` for presentation mode's *Next step*.

What a script or notebook calls (``run``, ``records``, ``python_script``, ...) is in
:mod:`.scripting`, ``play()``, ``with`` and the read-only parameters in :mod:`.in_python`,
pins and sweeps in :mod:`.comparing`, ``held`` in :mod:`.holding`: mixins
and helpers of the one ``Lab`` class, kept apart so that each file stays a readable size.

The base owns the runner, the transport bar and its handlers, the status line, keyword
construction (``TAPLab(data="digits", n_hidden=16)``), one watcher on every setting, settings
<-> URL, presets and checkpoints (through :class:`~dashboard.labtools.LabTools`), the refresh
tick (drain the runner, hand finished analysis jobs over, redraw the status), rebuild on a
settings change, the non-blocking *Next step*, and the page skeleton.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterator, Mapping

import panel as pn
import param

from ..jobs import Jobs
from .compare import CompareTools
from .comparing import Comparing
from .following import Following
from .holding import graph_frozen, held  # noqa: F401 - the labs import them from here
from .in_python import PREPARE, READ_ONLY, InPython, served
from .page import Page, fill, loop_running
from ..panel_compat import notebook_held, refresh_callback  # noqa: F401 - refresh_callback: the app's too
from .scripting import Scripting
from .teaching import LessonTools, Teaching
from ..labtools import LabTools, Preset, check_setting, parse_setting
from ..pins import Pins
from ..runner import Runner, play_or_tell
from ..views import StatusBadge
from ..views.text import LiveHTML, StaticMarkdown, escape
from ...engine.stepping import Record

RADIO = dict(color="primary", variant="outline")
UPLOAD_JOB = "upload"  # the job key of reading an uploaded file (kept when a new run starts)
IDLE_REFRESH_SECONDS = 1.0  # an idle lab (nothing new, nothing in flight) redraws once a second
FOLLOWER_PERIOD_MS = 200  # a follower draws at most 5 times a second (Lab.period)
STATUS_SECONDS = 0.3  # text panes re-layout the page: at most ~3 times a second while training
# the stage fills the viewport below what stands above it (the page header, the lab's one
# sentence, the transport bar, the caption, the status line): presentation mode sets the
# offset for its own sizes (dashboard.app.PRESENT_VARS); tests/browser/test_layout.py checks it
STAGE_OFFSET = "360px"
STAGE_HEIGHT = f"calc(100vh - var(--boltzlab-stage-offset, {STAGE_OFFSET}))"
SIDEBAR_HEIGHT = "calc(100vh - var(--boltzlab-sidebar-offset, 200px))"


def label(text: str) -> pn.pane.Markdown:
    """A bold caption above a button group (radio groups have no label of their own)."""
    return StaticMarkdown(f"**{text}**", margin=(6, 10, -8, 10))


def by_run(records: list[tuple[str, Record]]) -> dict[str, list[Record]]:
    """Records grouped by run name, each run's in order."""
    out: dict[str, list[Record]] = {}
    for name, record in records:
        out.setdefault(name, []).append(record)
    return out


def speed_setting(speeds: Mapping[str, float | None], default: str) -> param.Selector:
    """A lab's ``speed`` setting: one of its named speeds (``Lab.speeds``)."""
    return param.Selector(default=default, objects=list(speeds), label="Speed",
                          doc="How fast ▶ Play steps the runs (a limit, not a promise).")


class NotReady(ValueError):
    """Raised by ``prepare`` when the settings need something the user has still to give
    (e.g. a file to upload): said as information, not as an error; the old run stays.
    ``link`` is the error a link or checkpoint with these settings gets instead."""

    def __init__(self, message: str, link: str = "") -> None:
        super().__init__(message)
        self.link = link or message


@dataclass
class LoadOutcome:
    """How a checkpoint load went (see :meth:`Lab.loading`)."""

    ok: bool = False
    note: str = ""


class Lab(Following, Comparing, Scripting, Teaching, InPython, pn.viewable.Viewer):
    """One lab page around one :class:`Runner` (one per browser session)."""

    key: ClassVar[str] = ""
    title: ClassVar[str] = ""
    heading: ClassVar[str] = ""  # the page's own title (defaults to ``title``)
    summary: ClassVar[str] = ""  # one sentence: what the lab shows
    intro: ClassVar[str] = ""  # what the algorithm does (Markdown)
    equations: ClassVar[str] = ""  # the key equations, ``$$...$$`` (KaTeX)
    watch: ClassVar[str] = ""  # what to watch for
    presets: ClassVar[list[Preset]] = []
    speeds: ClassVar[dict[str, float | None]] = {"as fast as possible": None}
    watch_scalar: ClassVar[str | None] = None  # non-finite -> that run "diverged"
    # the numba kernel groups (engine.warmup.GROUPS) its runs call: on a server's first start
    # the lab opens once these are compiled (dashboard.startup); None: every group
    kernels: ClassVar[tuple[str, ...] | None] = None
    view_settings: ClassVar[frozenset[str]] = frozenset()  # settings that only redraw
    widget_options: ClassVar[dict[str, dict[str, Any]]] = {}  # per setting: widget type and looks
    period_ms: ClassVar[int] = 200  # the refresh tick
    counter_width: ClassVar[int] = 130
    short_labels: ClassVar[dict[str, str]] = {}  # settings' names in a pin's legend ("mu": "μ")
    # whether the views draw any runs by their names (a race's); False: in a sweep they draw the
    # first value's runs, the others are in the Records (lab.records, the CSV)
    sweep_views: ClassVar[bool] = False
    sweep_runs: ClassVar[int] = 1  # the runs one value makes (a race's several): lines per value in a figure
    headline: ClassVar[tuple[str, str]] = ("", "")  # (scalar, title): the sweep table's number
    data_settings: ClassVar[frozenset[str]] = frozenset({"image_width"})  # what prepare() loads data from
    speed = speed_setting(speeds, "as fast as possible")  # each lab declares its own speeds
    owner = param.String(default="", doc="""
        Who this lab's runs belong to, for the server's log (e.g. "session 3 (TAP lab)":
        a worker process that dies is logged with the sessions whose runs it held).""")

    def __init__(self, **params: Any) -> None:
        names = self.setting_names()
        given = self.check_settings({k: params.pop(k) for k in list(params) if k in names})
        super().__init__(**params)
        self._refused: BaseException | None = None  # why the newest settings make no run
        self._given: set[str] = set()  # the names apply_settings is setting (not to be implied over)
        self._status_key: tuple = ()
        self._status_time = 0.0
        self._last_tick = 0.0
        self._callback: Any = None
        self._explaining: tuple[dict, dict] | None = None  # Next step in flight: the before
        self._page: pn.viewable.Viewable | None = None
        self._header: pn.viewable.Viewable | None = None
        self.jobs = Jobs()
        self._pins = Pins()  # earlier runs kept to compare with (issue 47)
        self._beside: str | None = None  # the pin whose pictures are shown beside the live ones
        self._share: Any = None  # the live share of this run (issue 48), or None
        self._following: Any = None  # the share this page follows, or None
        self._replaying = False  # a loaded or joined history is being drawn (not new: not shared)
        self._pins_seen = -1  # a follower: the share's pins it has drawn
        self._sweep: tuple[str, tuple] | None = None  # (setting, values): one run per value (sweep)
        self._sweeping = False  # sweep() is setting the swept setting (the sweep goes on)
        self._alone_name: str | None = None  # the run name of a one-run lab's factory (sweep views)
        self.widgets = self.make_widgets()
        self._build_transport()
        self._build_follow_card()
        self.settings_msg = StatusBadge("", "error", visible=False, name=f"{self.key}-settings-message")
        self.build_controls()
        if given:  # TAPLab(data="digits", n_hidden=16): the data set's defaults, then these
            self.param.update({**self.implied(given), **given})
            self.check_work()
        self.prepare(set(self.controls()), strict=True)
        self.build_views()
        # a sweep's other runs beside the first's, in every figure that shows pins (made now,
        # hidden: the page's model graph never changes while it is live)
        self._sweep_layers = ({} if self.sweep_views else
                              {name: layer.sweep_layer(self.sweep_runs) for name, layer in self.pin_layers().items()})
        self.runner = Runner(self._run_factory(), watch=self.watch_scalar, owner=self.owner)
        self._built = self._run_inputs()  # the settings the runner's run was made from
        self._kept = self._built  # ... the run a build in flight replaced (back if it is refused)
        if given:  # TAPLab(K=...) from Python: a setting only the trainer refuses raises here too
            self.runner.wait_built()
            refused = self.runner.take_refusal()
            if refused is not None:
                self.runner.close()
                raise ValueError(str(refused)) from refused
        self.runner.set_speed(self.speeds[self.speed])
        self.tools = LabTools(self)
        self.compare = CompareTools(self)
        self.lesson_tools = LessonTools(self)  # a lesson's steps and narration (issue 48)
        self._pin_menu()
        self.param.watch(self._on_settings, names)
        self.clear()
        self.refresh_status()
        self._python_api_ready()

    # ------------------------------------------------------------------ what a lab declares
    def build_controls(self) -> None:
        """Create the lab's widgets (attributes of ``self``)."""

    def controls(self) -> dict[str, Any]:
        """The widgets of the settings that define a run (all but the speed), by name."""
        return {name: w for name, w in self.widgets.items() if name != "speed"}

    def settings(self) -> dict[str, Any]:
        """The widget of every setting (the controls and the speed), by name."""
        return dict(self.widgets)

    def controls_panel(self) -> pn.viewable.Viewable:
        """The left column: the lab's controls laid out."""
        return pn.Column(*self.controls().values())

    def prepare(self, changed: set[str], strict: bool = False) -> None:
        """Load what the trainer factory needs after the settings in ``changed`` moved
        (e.g. the data set); raise ``ValueError`` to refuse them."""

    def check_work(self) -> None:
        """Raise ``ValueError`` (:class:`boltzlab.dashboard.budget.TooMuchWork`) when a step of the
        current settings would take longer than this server allows (:mod:`boltzlab.dashboard.budget`).
        Checked before anything is prepared (a refused run starts no slow preparation) and
        again after ``prepare``, when what depends on the prepared data is known."""

    def implied(self, values: Mapping[str, Any], *, fresh: bool = False) -> dict[str, Any]:
        """Settings implied by ``values`` (e.g. a data set's defaults) that ``values`` does
        not name; they are applied with ``values``.  ``fresh``: as a new lab built with
        ``values`` would imply them (no current run to compare with; see
        :meth:`script_settings`)."""
        return {}

    def trainer_factory(self) -> Callable[[], Mapping[str, Any]]:
        raise NotImplementedError

    def data_identity(self) -> tuple[str, str] | None:
        """``(sha256, name)`` of the data the current run trains on, for labs whose data a
        user may bring (a checkpoint records the hash and refuses to load onto other
        data); None: the settings alone say what the data are."""
        return None

    def build_views(self) -> None:
        """Create the lab's plots (attributes of ``self``)."""

    def main_view(self) -> pn.viewable.Viewable:
        """The figures the stage shows first."""
        raise NotImplementedError

    def more_views(self) -> pn.viewable.Viewable | None:
        """The other figures, on one more tab of the stage (labs name their tabs in ``stage``)."""
        return None

    def stage(self) -> dict[str, pn.viewable.Viewable]:
        """The lab's figures, by the label of their tab on the stage (first: ``main_view``).

        The stage fits the viewport: each tab, one to three plots side by side with their
        own controls above them, is seen whole on the first screen (at 1440×900, and at
        1280×720 in presentation mode); a figure not shown is one click away.  Only the tab in
        view is in the browser's document (:meth:`build_stage`); the tick keeps every figure's
        Python model current, so a tab brought into view shows the current state at once,
        except the views a lab draws only in view while playing (:meth:`in_view`), which are
        drawn when their tab is clicked.
        """
        more = self.more_views()
        return {"Figures": self.main_view(), **({"More": more} if more is not None else {})}

    def badges(self) -> list[pn.viewable.Viewable]:
        """Status badges of the lab's own, shown beside the run status."""
        return []

    def clear(self) -> None:
        """Empty the views for a new run."""

    def draw_records(self, records: list[tuple[str, Record]]) -> None:
        """Draw the Records produced since the last tick (``(run name, Record)``, oldest first)."""

    def on_view_setting(self, name: str) -> None:
        """A setting in ``view_settings`` changed: redraw."""

    def on_tick(self) -> None:
        """Called on every refresh tick after ``show`` (e.g. a second runner's records)."""

    def busy(self) -> bool:
        """True while the lab has something in flight besides the runner (faster ticks)."""
        return False

    def on_steps_asked(self) -> None:
        """▶ Play or Step (or Next step) has just asked the runs for steps; their Records come
        on later ticks.  A view that waits for more than the first Record (an analysis job
        on it) says so from now on, not "Press ▶ Play"."""

    @contextlib.contextmanager
    def loading(self) -> Iterator[LoadOutcome]:
        """Around a checkpoint load: the lab may hold back what ``clear()`` would discard
        until the load has succeeded (``outcome.ok``), and add a ``note`` to its message."""
        yield LoadOutcome()

    def counter(self) -> str:
        """The progress text beside the transport bar, e.g. ``"Sweep 12"``."""
        steps = max((s.steps for s in self.runner.states.values()), default=0)
        return f"Step {steps}"

    def refresh_badges(self) -> None:
        """Update the lab's own badges (called with the status line)."""

    def describe_change(self, name: str, before: Mapping[str, Any], after: Mapping[str, Any],
                        before_arrays: Mapping[str, Any], after_arrays: Mapping[str, Any]) -> str | None:
        """Presentation mode: one run's step in the paper's terms (HTML, built from escaped
        parts: ``escape(name)``), or ``None`` for the generic list of changed scalars."""
        return None

    def highlight(self, name: str, before: Mapping[str, Any], after: Mapping[str, Any],
                  before_arrays: Mapping[str, Any], after_arrays: Mapping[str, Any]) -> None:
        """Presentation mode: mark in the plots what the step changed."""

    def clear_highlight(self) -> None:
        """Remove what :meth:`highlight` marked."""

    # ------------------------------------------------------------------ settings
    @classmethod
    def setting_names(cls) -> list[str]:
        """The lab's settings: every parameter it declares (the names links, checkpoints,
        presets and keyword construction use), ``speed`` included."""
        return [name for name in cls.param if name not in ("name", "owner", *READ_ONLY)]

    def settings_values(self) -> dict[str, Any]:
        """The current value of every setting, by name."""
        return {name: getattr(self, name) for name in self.setting_names()}

    def setting_bounds(self, name: str, values: Mapping[str, Any]) -> tuple | None:
        """The range of numeric setting ``name`` when it comes with ``values`` (a link, a
        checkpoint); ``None``: its parameter's bounds.  A lab whose ranges depend on other
        settings says so here."""
        return None

    def check_settings(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` if every one is allowed, else one ``ValueError`` naming each that is not
        (the sentences a link's bad values get)."""
        names, out, errors = self.setting_names(), {}, []
        for name, value in values.items():
            if name not in names:
                errors.append(f"The lab has no setting {name!r}.")
                continue
            try:
                out[name] = check_setting(self.param[name], value, bounds=self.setting_bounds(name, values))
            except ValueError as exc:
                errors.append(str(exc))
        if errors:
            raise ValueError(" ".join(errors))
        return out

    def parse_settings(self, texts: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """Setting texts (a link's, a checkpoint's) as values, and the sentences of the
        ones that are not allowed."""
        names, values, errors, bad = self.setting_names(), {}, [], []
        for name, text in texts.items():
            if name not in names:
                errors.append(f"The lab has no setting {name!r}.")
                continue
            try:
                values[name] = parse_setting(self.param[name], text)
            except ValueError as exc:
                errors.append(str(exc))
                bad.append(name)
        for name in list(values):  # ranges that depend on the other values given
            bounds = self.setting_bounds(name, values)
            if bounds is not None:
                try:
                    values[name] = parse_setting(self.param[name], texts[name], bounds=bounds)
                except ValueError as exc:
                    del values[name]
                    errors.append(str(exc))
        return values, errors

    def make_widgets(self) -> dict[str, Any]:
        """A widget per setting, made from its parameter (label, bounds, choices) and linked
        to it both ways; ``widget_options[name]`` gives its type and looks."""
        defaults = {param.Boolean: pn.widgets.Checkbox, param.Selector: pn.widgets.Select,
                    param.Integer: pn.widgets.IntInput, param.Number: pn.widgets.FloatInput,
                    param.String: pn.widgets.TextInput}
        widgets = {}
        for name in self.setting_names():
            options = dict(self.widget_options.get(name, {}))
            kind = options.pop("type", None) or next(w for p, w in defaults.items()
                                                     if isinstance(self.param[name], p))
            widgets[name] = kind.from_param(self.param[name], **options)
        return widgets

    @held
    def _on_settings(self, *events: Any) -> None:
        """Settings moved (a widget, or one batch from :meth:`apply_settings`): the speed
        goes to the runner, view settings redraw, anything else rebuilds the run once."""
        changed = {e.name for e in events}
        if self._sweep is not None and self._sweep[0] in changed and not self._sweeping:
            self._sweep = None  # one value chosen for the swept setting: the sweep ends
        if "speed" in changed:
            self.runner.set_speed(self.speeds[self.speed])
        for name in sorted(changed & self.view_settings):
            self.on_view_setting(name)
        if not changed - self.view_settings - {"speed"}:
            return
        implied = self.implied({e.name: e.new for e in events}).items()
        extra = {k: v for k, v in implied if k not in changed | self._given and getattr(self, k) != v}
        python = self._from_python()  # lab.n_hidden = 32: raise if it makes no run
        if python:
            self._refused = None
        if extra:  # their own batch comes back through here and rebuilds for all
            self.param.update(extra)
        else:
            self.rebuild(changed)
        if python:
            self._settled_from_python()

    def apply_settings(self, values: Mapping[str, Any], *, fresh: bool = False, sweep: Any = False) -> None:
        """Set many settings at once (one batch of events: one rebuild); ``ValueError`` if a
        value is not allowed or the values make no valid run (the settings keep the new
        values, the run the old one).  ``fresh``: start a new run even when the values equal
        the current ones (a preset starts its run from the beginning), unless they are all
        view settings (those only redraw).  ``sweep``: the sweep the run is to be
        (``(setting, values)`` or None, a checkpoint's); by default the lab's stays."""
        values = self.check_settings(values)
        if sweep is not False and sweep != self._sweep:
            self._sweep = tuple(sweep) if sweep is not None else None
            fresh = True
            values = {**values, **({sweep[0]: sweep[1][0]} if sweep is not None else {})}
        generation = self.runner.generation
        extra = {k: v for k, v in self.implied(values).items() if k not in values}
        self._refused = None
        self._given = set(extra) | set(values)  # named values win over what the batch implies
        keep_sweep, self._sweeping = self._sweeping, self._sweeping or sweep is not False
        try:
            self.param.update({**extra, **values})
        finally:
            self._given = set()
            self._sweeping = keep_sweep
        if self._refused is None and self.jobs.running(PREPARE):
            self.jobs.wait()  # a link or checkpoint needs its run now (states are restored into it)
        self._adopt_build(wait=True)
        if self._refused is None and (self._built != self._run_inputs() or (
                fresh and self.runner.generation == generation and (set(values) - self.view_settings - {"speed"}
                                                                     or sweep is not False))):
            self.rebuild(set(values))  # unchanged values, but the run was made before a refused change
            self._adopt_build(wait=True)
        if self._refused is None:
            self._check_work()  # values equal to the current ones rebuild nothing: the budget holds all the same
        if self._refused is not None:
            refused = self._refused
            raise ValueError(refused.link if isinstance(refused, NotReady) else str(refused)) from refused

    def rebuild(self, changed: set[str] | None = None, strict: bool = False, *,
                prepared: bool = False) -> bool:
        """Prepare, validate and install a new run for the current settings; on a bad
        setting say so (and raise if ``strict``), keeping the old run.

        When the lab says the preparation is slow (:meth:`prepare_later`), it runs as a job
        and the run is rebuilt when it is ready; the old run stays until then.  The trainers
        are built once, by the runner (:meth:`trainer_factory` only checks and describes).
        """
        changed = set(self.controls()) if changed is None else set(changed)
        self._refused = None
        try:
            self._check_work()  # the work budget, whatever the source, before anything is prepared
        except ValueError as exc:
            return self._refuse(exc, strict)
        later = None if strict or prepared else self.prepare_later(changed)
        if later is not None:
            fn, args, note = later
            self.runner.pause()
            self.settings_msg.set("info", note)
            self.settings_msg.pane.visible = True
            self.jobs.submit(PREPARE, fn, *args, then=functools.partial(self._prepared, changed),
                             error=self._prepare_failed)
            self.refresh_status()
            return True
        try:
            self.prepare(changed, strict=strict)
            self._check_work()  # again on what was prepared (e.g. simulated data)
            self.runner.reset(self._run_factory())
        except ValueError as exc:
            return self._refuse(exc, strict)
        self._kept, self._built = self._built, self._run_inputs()
        self.settings_msg.pane.visible = False
        self._restart_views()
        self._adopt_build(wait=strict)
        return True

    def _adopt_build(self, wait: bool = False) -> None:
        """Say why the runner's thread could not build the newest run, if it could not: the
        run it replaced is back (drawn again from its history) and the settings stay moved.
        ``wait`` for a build in flight (from Python and links), else look on the next tick."""
        if wait:
            self.runner.wait_built()
        refused = self.runner.take_refusal()
        if refused is None:
            return
        self._built = self._kept
        self.build_refused()
        self._restart_views()
        self.on_records(self.runner.history.records())
        self._prepare_failed(refused)

    def _run_inputs(self) -> dict[str, Any]:
        """The settings a run is made from (not the speed, not the view settings)."""
        return {k: v for k, v in self.settings_values().items() if k != "speed" and k not in self.view_settings}

    def _refuse(self, exc: ValueError, strict: bool) -> bool:
        self._prepare_failed(exc)
        if strict:
            raise ValueError(exc.link) if isinstance(exc, NotReady) else exc
        return False

    def build_refused(self) -> None:
        """A trainer refused the newest settings and the run before is back: put back what
        :meth:`trainer_factory` recorded about the run (its data), if anything."""

    def prepare_later(self, changed: set[str]) -> tuple[Callable, tuple, str] | None:
        """``(fn, args, note)`` when preparing for ``changed`` is too slow for a click (more
        than a few ms): ``fn(*args)`` runs as a job, its result goes to :meth:`prepared`,
        ``note`` shows meanwhile.  ``None``: prepare at once."""
        return None

    def prepared(self, result: Any) -> None:
        """Take the result of :meth:`prepare_later`'s job (e.g. the new data set)."""

    @held
    def _prepared(self, changed: set[str], result: Any) -> None:
        self.prepared(result)
        self.rebuild(changed, prepared=True)

    def _prepare_failed(self, exc: BaseException) -> None:
        if isinstance(exc, ValueError):
            self._refused = exc
        if isinstance(exc, NotReady):
            self.settings_msg.set("info", str(exc))
        else:
            text = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
            self.settings_msg.set("error", f"**Invalid setting:** {text}")
        self.settings_msg.pane.visible = True

    def _restart_views(self) -> None:
        self._explaining = None
        self.jobs.cancel(keep=(PREPARE, UPLOAD_JOB))  # a data set being prepared or read is for the next run
        self.clear_highlight()
        self.tools.changed.object = ""
        self.clear()
        self.draw_pins()  # their legends say what differs from the new run
        self.redraw_beside()  # ... and so do the titles of their pictures
        self._share_restart()  # a new run: followers start over
        self.compare.lines(force=True)  # a new sweep's other runs, or none
        self.refresh_status()

    # ------------------------------------------------------------------ transport
    def _build_transport(self) -> None:
        w = pn.widgets
        self.play_button = w.Button(label="▶ Play", color="success", width=90)
        self.pause_button = w.Button(label="❚❚ Pause", color="warning", width=100, disabled=True)
        self.step = w.Button(label="Step", color="primary", width=80)
        self.reset = w.Button(label="↺ Reset", color="default", width=90)
        # keeps the current run to compare the next ones with (issue 47); its menu unpins
        self.pin_button = w.MenuButton(label="📌 Pin", items=[], split=True, width=95, margin=(4, 5),
                                       css_classes=[f"{self.key}-pin"])
        self.pin_button.on_click(self._on_pin_menu)
        self.counter_pane = LiveHTML("", name=f"{self.key}-counter", css_classes=["sweep-counter"],
                                     styles={"font-size": "1.4em", "font-weight": "bold"},
                                     width=self.counter_width, align="center")
        self.run_status = StatusBadge("Ready: press ▶ Play", "idle", name=f"{self.key}-run-status", one_line=True)
        self.play_button.on_click(lambda e: self._play())
        self.pause_button.on_click(lambda e: self._pause())
        self.step.on_click(lambda e: self._step())
        self.reset.on_click(lambda e: self._reset())

    def _quiet_caption(self) -> None:
        """Play and Step end a Next step's narration: its highlight, its pending text, the caption."""
        self.clear_highlight()
        self._explaining = None
        self.tools.changed.object = ""

    @held
    def _play(self) -> None:
        self._quiet_caption()  # the caption narrates single steps, not a playing run
        busy = play_or_tell(self.runner)
        if self.runner.playing:
            self.on_steps_asked()
        self.refresh_status()
        if busy:
            self.run_status.set("warn", busy)

    @held
    def _pause(self) -> None:
        self.runner.pause()
        self.refresh_status()

    @held
    def _step(self) -> None:
        self._quiet_caption()
        self.runner.step_once()
        if self.runner.active:
            self.on_steps_asked()
        self.refresh_status()

    @held
    def _reset(self) -> None:
        self.runner.reset()
        self._restart_views()

    # ------------------------------------------------------------------ presentation
    def next_step(self) -> None:
        """Presentation mode's *Next step*: step once now; what changed is said (and
        highlighted) on the tick after the step has come back.  Never waits."""
        history = self.runner.history
        before = {n: dict(rows[-1]) if rows else {} for n, rows in history.rows.items()}
        arrays = {n: dict(a) for n, a in history.arrays.items()}
        self._step()
        self._explaining = (before, arrays)
        self.tools.changed.object = "Computing this step…"

    def _explain(self) -> None:
        """If a *Next step* is in flight and the runner is idle again, say what it did."""
        if self._explaining is None or not self.runner.wait_idle(0):
            return
        before, before_arrays = self._explaining
        self._explaining = None
        history = self.runner.history.copy()
        parts = []
        for name, rows in history.rows.items():
            old = before.get(name, {})
            if not rows or rows[-1] == old:
                continue
            args = (name, old, rows[-1], before_arrays.get(name, {}), history.arrays.get(name, {}))
            parts.append(self.describe_change(*args) or _generic_change(name, old, rows[-1]))
            self.highlight(*args)
        self.tools.changed.object = ("<br>".join(parts) or
                                     "Nothing changed: the run has finished (↺ Reset to start again).")

    # ------------------------------------------------------------------ the refresh tick
    def start(self) -> None:
        """Attach the lab to the current session: a periodic tick, and clean-up when the
        session ends (the runner stops, its trainers are released).

        Called once, whoever calls first: ``create_app`` in a served session, or the page
        itself when it is rendered (:class:`Page`: a notebook cell, ``pn.serve(lab)``,
        ``lab.show()``); later calls do nothing, so a lab never ticks twice."""
        if self._callback is not None:
            return
        self._callback = refresh_callback(self.tick, self.period())
        if served():
            self._session_doc = pn.state.curdoc  # the one session this lab belongs to
            # not waiting for the runner's thread: on the server's event loop that wait was
            # up to 0.5 s per session (16 TAP sessions closing together held it 5 s)
            pn.state.on_session_destroyed(lambda context: self.close(wait=0))

    def _rendered(self, doc: Any, comm: Any) -> bool:
        """The page is being rendered into ``doc``: start the tick there, once.

        In a served session (``doc`` has a session context) the tick is that session's
        periodic callback and ends with it.  In a notebook (a comm, no session) it is a task
        on the kernel's asyncio loop, and it runs until :meth:`close`.  Elsewhere (a page
        saved to a file, a document made in a test without an event loop) nothing starts:
        :meth:`run` draws without a tick.

        False refuses the page to a second served session (``pn.serve(lab)`` serves one
        object to every tab): a lab is one session's, and ended with it."""
        mine = getattr(self, "_session_doc", None)
        if doc is not None and doc.session_context is not None and mine is not None and mine is not doc:
            return False
        if self._callback is not None or self.runner.closed:
            return True
        if doc is not None and doc.session_context is not None:
            from panel.io.state import set_curdoc

            with set_curdoc(doc):
                self.start()
        elif comm is not None and loop_running():
            self.start()
            self._notebook_shown()
        return True

    def close(self, wait: float = 0.5) -> None:
        """Stop the tick, the analyses and the runner (its thread, its trainers); wait at most
        ``wait`` seconds for the runner's thread to end (it ends by itself)."""
        if self._callback is not None:
            self._callback.stop()
        self.jobs.cancel()
        if self._share is not None:
            self.unshare()
        if self._following is not None:
            self._following.leave(id(self))
        self.runner.close(timeout=wait)
        self._sync_read_only()  # (in a notebook, the BLAS gets its threads back)

    def own_period(self) -> int:
        """The lab's tick period (ms) for its own run."""
        return self.period_ms

    def period(self) -> int:
        """The tick's period (ms): the lab's own; a follower's at least
        :data:`FOLLOWER_PERIOD_MS` (its Records drawn in batches: 24 followers of an FVBM run
        drawing all 9 of its updates a second held the event loop, /liveness p95 276 ms)."""
        own = self.own_period()
        return max(own, FOLLOWER_PERIOD_MS) if self._following is not None else own

    def _retime(self) -> None:
        if self._callback is not None and self._callback.period != self.period():
            self._callback.period = self.period()

    def tick(self) -> None:
        """Drain what is new and draw it in one held batch (one websocket message).

        An idle lab (nothing new, nothing in flight: most tabs of most sessions) redraws
        once a second, not five times: idle ticks competed for the GIL with the labs
        that were training."""
        self._adopt_build()
        if self._following is not None:
            with self._batch():  # a new run at the teacher redraws every view: one walk of the graph
                self._sync_follow()
        records = self.runner.drain()
        now = time.monotonic()
        active = (records or self.runner.playing or self.jobs.running() or self._explaining is not None
                  or self.busy() or self.lesson_tools.pending)
        if not active and now - self._last_tick < IDLE_REFRESH_SECONDS:
            return
        self._last_tick = now
        with self._batch():
            self.on_records(records)

    @contextlib.contextmanager
    def _batch(self) -> Iterator[None]:
        """All the changes made inside go to the browser as one message: in a served
        session Panel's hold; in a notebook (no session) the comm pushes are held back and
        the page's changes pushed once, at the end (``panel.io.notebook.push_notebook``)."""
        if pn.state.curdoc is not None:
            with pn.io.hold(), graph_frozen(pn.state.curdoc):
                yield
            return
        from panel.io.notebook import push_notebook

        with notebook_held() as already:
            yield
        if self._page is not None and not already:
            push_notebook(self._page)

    def on_records(self, records: list[tuple[str, Record]]) -> None:
        """One tick's work: draw the Records, hand finished jobs over, update the status."""
        names = set(self.runner.names)
        records = [(n, r) for n, r in records if n in names]  # from runs replaced by a reset
        drawn = records
        views = self._view_names()
        if views is not None:  # a sweep in a lab whose views draw one value's runs: the first value's
            records = [(views[n], r) for n, r in records if n in views]
        if records:
            self.draw_records(records)
        if self._sweep is not None and drawn:  # the other values' new points (streamed)
            self.compare.lines()
        self._share_publish(drawn)
        self.jobs.poll()
        self.on_tick()
        self._explain()
        self.lesson_tools.tick()  # a lesson's step clicked: its action once its run is in place
        key = (self.runner.playing, tuple(s.status for s in self.runner.states.values()))
        now = time.monotonic()
        if key != self._status_key or now - self._status_time > STATUS_SECONDS:
            self.refresh_status()
            self._status_key, self._status_time = key, now
        self._sync_read_only()

    def redraw(self, records: list[tuple[str, Record]]) -> None:
        """Clear the views and replay ``records`` (a loaded checkpoint's history)."""
        with pn.io.hold(freeze=True):
            self._restart_views()
            self._replaying = True  # (a shared run's followers start from its history)
            try:
                self.on_records(records)
            finally:
                self._replaying = False
            self.jobs.wait()
            self.refresh_status()

    # ------------------------------------------------------------------ status
    def refresh_status(self) -> None:
        runner = self.runner
        playing = runner.playing
        self.play_button.disabled = playing or not runner.active
        self.pause_button.disabled = not playing or self._following is not None  # a follower's is read-only
        if self._share is not None and self.share_listener is not None:
            self.share_listener(self)
        self.counter_pane.object = self.counter()
        if hasattr(self, "compare"):
            self.compare.refresh()
        states = runner.states
        single = len(states) == 1

        def named(n: str, text: str) -> str:
            return text if single else f"**{n}**: {text}"

        failed = {n: s for n, s in states.items() if s.status in ("diverged", "error")}
        if failed:
            text = "; ".join(named(n, s.message or s.status) for n, s in failed.items())
            others = " (others keep running)" if runner.active and not single else ""
            self.run_status.set("error", text + others + (" Press ↺ Reset to start again."
                                                        if not runner.active else ""))
        elif self._following is not None:
            self.run_status.set("info" if playing else "idle",
                                f"Following the teacher's run: {'training' if playing else 'paused'}")
        elif any(s.status == "starting" for s in states.values()):
            # one line on a projector (1280x720)
            self.run_status.set("info", "Starting… they play once a worker has them" if playing
                                else "Starting… (handing the runs to a worker)")
        elif playing:
            self.run_status.set("info", "Training…")
        elif not runner.active and states:
            msgs = sorted({s.message or s.status for s in states.values()})
            self.run_status.set("ok", "Finished: " + "; ".join(msgs))
        elif any(s.steps for s in states.values()):
            self.run_status.set("idle", "Paused")
        else:
            self.run_status.set("idle", "Ready: press ▶ Play")
        self.refresh_badges()

    # ------------------------------------------------------------------ the page
    def transport(self) -> pn.viewable.Viewable:
        """Play, Pause, Step, Reset, speed, progress (and presentation mode's Next step)."""
        return pn.Row(self.play_button, self.pause_button, self.step, self.reset, self.widgets["speed"], self.counter_pane,
                      self.tools.next_step, align="start", margin=0, sizing_mode="stretch_width",
                      styles={"flex-wrap": "wrap"})  # never wider than the page (projectors)

    def set_presenting(self, on: bool) -> None:
        """Presentation mode: larger everything, a Next step button, and the one-line
        explanation folded away so that the main plot fits a 1280×720 projector."""
        if self._header is not None:
            self._header.visible = not on
        self.step.visible = not on  # Next step steps and says what changed: one button, one row
        self.tools.set_presenting(on)
        self.lesson_tools.set_presenting(on)

    def header(self) -> pn.viewable.Viewable:
        """One sentence, and a *more* toggle that unfolds the explanation and equations."""
        more = StaticMarkdown(f"{self.intro.strip()}\n\n{self.equations.strip()}\n\n"
                               f"**What to watch for.** {self.watch.strip()}",
                               sizing_mode="stretch_width", visible=False, margin=(0, 10),
                               styles={"overflow-x": "auto"}, css_classes=["lab-intro"])
        toggle = pn.widgets.Toggle(label="more ▾", value=False, width=80, color="light",
                                   variant="outline", align="center", margin=(0, 5),
                                   css_classes=[f"{self.key}-more"])

        def flip(event: Any) -> None:
            more.visible = event.new
            toggle.label = "less ▴" if event.new else "more ▾"

        toggle.param.watch(flip, "value")
        line = StaticMarkdown(f"**{self.heading or self.title}.** {self.summary.strip()}",
                              sizing_mode="stretch_width", margin=(0, 10),
                              styles={"font-size": "1.05em"})
        self._header = pn.Column(pn.Row(line, toggle, sizing_mode="stretch_width"), more,
                                 sizing_mode="stretch_width", margin=(0, 0, 4, 0))
        return self._header

    def build_stage(self) -> pn.Tabs:
        """The stage: a tab per entry of :meth:`stage`, sized to the viewport (``STAGE_HEIGHT``).

        Its tabs' plots stretch both ways (:func:`fill`), so the stage does, and so does every
        layout that holds it, up to the page (:meth:`__panel__`): each says ``stretch_both``
        itself.  Declared ``stretch_width``, Panel made them ``stretch_both`` anyway, from their
        children, and logged a WARNING for each at every page open (issue 22).

        ``dynamic``: only the tab in view is in the page's document; a click sends the tab
        clicked (Panel keeps its models, so a second visit is only a swap).  A TAP page is 253
        Bokeh models instead of 873, its page opens about twice as fast and the hidden tabs'
        updates send nothing (docs/serving.md).  A tab comes up blank for the round trip, about
        a second on a quiet machine: the layout test waits for it and checks every tab's
        plots are painted."""
        tabs = [(label, fill(view)) for label, view in self.stage().items()]
        self.stage_tabs = pn.Tabs(*tabs, dynamic=True, sizing_mode="stretch_both", margin=0,
                                  name=f"{self.key}-stage", css_classes=["lab-stage"],
                                  styles={"height": STAGE_HEIGHT, "min-height": "260px"})
        self._stage_labels = [label for label, _ in tabs]
        self.stage_tabs.param.watch(lambda event: self.on_stage_shown(self._stage_labels[event.new]), "active")
        return self.stage_tabs

    def in_view(self, *labels: str) -> bool:
        """Whether the stage tab in view is one of ``labels`` (always, before the page is
        built: a lab run headless draws everything).  A view whose drawing costs the server
        (image grids: tiling, ranking) is drawn while playing only when in view, and at once
        when its tab is clicked (:meth:`on_stage_shown`): on the event loop that all sessions
        share, TAP's hidden receptive fields and samples took up to 0.3 s of a tick."""
        tabs = getattr(self, "stage_tabs", None)
        return tabs is None or self._stage_labels[tabs.active] in labels

    def on_stage_shown(self, label: str) -> None:
        """The stage tab ``label`` was clicked into view: draw what waited for it."""

    def __panel__(self) -> pn.viewable.Viewable:
        if self._page is None:
            # the controls scroll inside their own column; the stage never moves
            left = pn.Column(self.lesson_tools.panel(),  # presentation mode's lesson box, at the top
                             self.tools.preset, self.tools.message.pane, self.controls_panel(),
                             self.settings_msg.pane, self.compare.panel(), self.tools.panel(), width=340, scroll=True,
                             styles={"max-height": SIDEBAR_HEIGHT}, css_classes=["lab-controls"])
            # the pin button heads the status line: the transport bar is full at 1280x720
            status = pn.Row(self.pin_button, self.run_status.pane, *self.badges(), sizing_mode="stretch_width",
                            styles={"flex-wrap": "nowrap"}, margin=0)
            # the stage stretches both ways (see build_stage), and so does what holds it
            right = pn.Column(self.transport(), self.tools.changed, status, self.build_stage(),
                              sizing_mode="stretch_both")
            self._page = Page(self.header(), pn.Row(left, right, sizing_mode="stretch_both"),
                              sizing_mode="stretch_both", name=self.title)
            self._page.on_render = self._rendered
            self._left = left  # a follower's holds the follow card instead (Following)
            if self._following is not None:
                self._follow_view(True)
            self.tools.root = self._page
        return self._page

    def panel(self) -> pn.viewable.Viewable:
        """The lab's page (built once)."""
        return self.__panel__()


def _generic_change(name: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    changes = []
    for key, value in after.items():
        old = before.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or "time" in key or "elapsed" in key:
            continue
        if old is None or not isinstance(old, (int, float)) or old == value or not math.isfinite(value):
            continue
        changes.append(f"{key} {old:.5g} → <b>{value:.5g}</b>")
    return f"<b>{escape(name)}</b>: " + ("; ".join(changes[:4]) or "stepped")
