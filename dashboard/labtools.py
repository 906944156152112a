"""What every lab offers besides training: share, preset, save, load, export, present.

A lab hands :class:`LabTools` its settings (``param`` parameters) and presets; the tools then provide

* **a shareable URL**: the lab's settings (seeds included) live in the query string
  (``?page=0&fvbm.d=12&fvbm.init_seed=3``), kept current as the user changes them, so a
  link reproduces the same run; "Copy link" puts it on the clipboard;
* **presets**: named settings that load at once ("μ > 1 diverges", ...);
* **checkpoints**: every trainer's ``state_dict()`` plus the settings and the metrics
  history as one ``.npz`` (no pickles; loaded with ``allow_pickle=False``, validated, and
  rolled back on any error), so a loaded run continues exactly where it was saved;
* **exports**: the metrics history as CSV, the plots as a standalone HTML page (each plot's
  toolbar also saves it as PNG);
* **presentation mode**: a large "Next step" button that steps once and says what changed.

The lab side is :class:`boltzlab.dashboard.labs.base.Lab` (``key``, ``title``, ``runner``,
``setting_names()``, ``settings_values()``, ``parse_settings()``, ``check_settings()``,
``presets``, ``apply_settings()``, ``redraw()``, ``next_step()``,
``refresh_status()``); the base owns one ``LabTools`` and places its widgets.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import panel as pn
import param

from .panel_compat import explicit_values
from .pins import MAX_PINS, Pin
from .runner import History
from .views import StatusBadge
from .views.browser_code import in_browser
from ..engine.archive import ArchiveSpec, Member, NotAnArchive, read_npz
from ..engine.stepping import MAX_CHECKPOINT_BYTES

CHECKPOINT_VERSION = 1
MAX_TEXT = 200  # characters in a text setting read from a URL or a checkpoint
PRESET_PLACEHOLDER = "Choose a preset…"


@dataclass(frozen=True)
class Preset:
    """Named settings of a lab, with a line on what to watch for."""

    title: str
    settings: Mapping[str, Any]
    note: str = ""


PRESENT_FONT_SCALE = 1.3
FONT_PROPERTIES = ("text_font_size", "axis_label_text_font_size", "major_label_text_font_size",
                   "label_text_font_size", "title_text_font_size")


def scale_plot_fonts(root: pn.viewable.Viewable, factor: float,
                     originals: dict[str, dict[str, Any]]) -> None:
    """Scale every font of the Bokeh plots under ``root`` (titles, axes, ticks, legends,
    labels) by ``factor`` relative to their original sizes, kept in ``originals``."""
    import re

    from bokeh.models import CategoricalAxis, Title

    for pane in root.select(pn.pane.Bokeh):
        if pane.object is None:
            continue
        for model in pane.object.references():
            for prop in FONT_PROPERTIES:
                if prop not in model.properties():
                    continue
                if isinstance(model, Title) or (prop == "major_label_text_font_size"
                                                and isinstance(model, CategoricalAxis)):
                    continue  # titles fill their plots' width; a heatmap's names fit already
                saved = originals.setdefault(model.id, {})
                if prop not in saved:
                    # a size the design's theme gives (in em) is scaled from Bokeh's own default
                    # instead: a ?present=1 link scales plots before the theme reaches them, the
                    # header switch after, and both must give the same sizes
                    explicit = explicit_values(model)  # set in code; a theme's values are not in it
                    base = explicit[prop] if prop in explicit else model.lookup(prop).class_default(type(model))
                    saved[prop] = (getattr(model, prop), base)
                restore, size = saved[prop]
                text = size.get("value") if isinstance(size, dict) else size
                match = re.fullmatch(r"([\d.]+)(px|pt|em)", str(text or ""))
                if match is None:
                    continue  # a field- or unset size: left alone
                value = f"{float(match.group(1)) * factor:.3g}{match.group(2)}"
                setattr(model, prop, restore if factor == 1.0 else value)


# ---------------------------------------------------------------------- settings <-> text
# A lab's settings are its ``param`` parameters (dashboard.labs.base.Lab); a link and a
# checkpoint carry them as text.  These three functions are the whole translation: what a
# value looks like as text, what text means for a parameter, and the one sentence a value
# that is not allowed gets, whether it came from a link, a checkpoint, a preset or Python.
def setting_error(name: str, allowed: str, got: Any) -> ValueError:
    """The sentence for a value a setting does not allow: ``got`` as the user gave it."""
    return ValueError(f"The '{name}' setting must be {allowed}. Got {got!r}.")


def setting_text(value: Any) -> str:
    """A setting's value as URL / checkpoint text: numbers in short form, booleans as 0/1."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return format(value, ".12g")
    return str(value)


def _choices(parameter: param.Parameter) -> dict[str, Any]:
    """A selector's values by their labels (the labels are the values' text if it has none)."""
    objects = parameter.objects
    return dict(objects) if isinstance(objects, dict) else {setting_text(v): v for v in objects}


def check_setting(parameter: param.Parameter, value: Any, *, bounds: tuple | None = None,
                  text: str | None = None) -> Any:
    """``value`` if ``parameter`` allows it (within ``bounds``, its own by default), else
    :func:`setting_error` (showing ``text``, what the user wrote, or the value's text)."""
    name = parameter.name
    got = setting_text(value) if text is None else text
    if isinstance(parameter, param.Selector):
        choices = _choices(parameter)
        if any(value == v and isinstance(value, bool) == isinstance(v, bool) for v in choices.values()):
            return value
        raise setting_error(name, f"one of {[setting_text(v) for v in choices.values()]}", got)
    if isinstance(parameter, param.Boolean):
        if isinstance(value, bool):
            return value
        raise setting_error(name, "0 or 1", got)
    if isinstance(parameter, param.String):
        if not isinstance(value, str):
            raise ValueError(f"The '{name}' setting must be text. Got {value!r}.")
        if len(value) > MAX_TEXT:
            raise ValueError(f"The '{name}' setting must be at most {MAX_TEXT} characters. Got {len(value)}.")
        return value
    if isinstance(parameter, param.Integer):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise setting_error(name, "an int", got)
        value = int(value)
    else:  # param.Number
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise setting_error(name, "a number", got)
        if not math.isfinite(value):
            raise setting_error(name, "a finite number", got)
        value = float(value)
    start, end = (parameter.bounds or (None, None)) if bounds is None else bounds
    if (start is not None and value < start) or (end is not None and value > end):
        allowed = (f"in [{start}, {end}]" if start is not None and end is not None
                   else f"at least {start}" if start is not None else f"at most {end}")
        raise setting_error(name, allowed, got)
    return value


def parse_setting(parameter: param.Parameter, text: Any, *, bounds: tuple | None = None) -> Any:
    """The value URL / checkpoint ``text`` gives ``parameter``; :func:`setting_error` if
    it is not allowed.

    ``text`` may also be a URL argument as the server gives it: bytes, or the list of every
    value a repeated key had (one value, or the same value repeated, is fine; different ones
    are refused rather than silently taking the last)."""
    name = parameter.name
    if isinstance(text, list):
        texts = list(dict.fromkeys(t.decode("utf-8", "replace") if isinstance(t, bytes) else t
                                   for t in text))
        if len(texts) != 1:
            raise ValueError(f"The link gives the '{name}' setting {len(texts)} different values "
                             f"({', '.join(map(repr, texts[:3]))}); give it once.")
        text = texts[0]
    if isinstance(text, bytes):  # not UTF-8 (e.g. %ff): replaced characters, refused below
        text = text.decode("utf-8", "replace")
    if not isinstance(text, str):
        raise ValueError(f"The '{name}' setting must be text. Got {text!r}.")
    value: Any = text
    if isinstance(parameter, param.Selector):
        choices = _choices(parameter)
        by_text = {setting_text(v): v for v in choices.values()}
        value = by_text.get(text, choices.get(text, text))
    elif isinstance(parameter, param.Boolean):
        value = {"1": True, "true": True, "yes": True, "on": True,
                 "0": False, "false": False, "no": False, "off": False}.get(text.lower(), text)
    elif isinstance(parameter, param.Integer):
        try:
            value = int(text)
        except ValueError:
            pass  # refused by check_setting as not an int
    elif isinstance(parameter, param.Number):
        try:
            value = float(text)
        except ValueError:
            pass
    return check_setting(parameter, value, bounds=bounds, text=text)


# ---------------------------------------------------------------------- checkpoint files
@dataclass
class Checkpoint:
    """What a lab checkpoint holds (see :func:`write_checkpoint`)."""

    lab: str
    settings: dict[str, str]
    states: dict[str, dict[str, Any]]
    history: History = field(default_factory=History)
    #: (SHA-256, name) of the data the runs were trained on, for labs whose data a user may
    #: bring (``Lab.data_identity``); None for the other labs and for older checkpoints
    data: tuple[str, str] | None = None
    #: the lab's pinned runs (:mod:`boltzlab.dashboard.pins`), their settings as text; none in
    #: checkpoints written before pins
    pins: list[Pin] = field(default_factory=list)
    #: the sweep the runs are (``Lab.sweep``): ``(setting, [value texts])``, or None
    sweep: tuple[str, list[str]] | None = None


def write_checkpoint(ckpt: Checkpoint) -> bytes:
    """``.npz`` bytes: ``lab``, ``settings`` (JSON text), ``runs``, ``data_sha256`` and
    ``data_name`` (when the lab reports its data, see :class:`Checkpoint`), then per run ``i``
    ``state/i/<key>``, ``history/i/<column>`` (+ ``.present`` masks: a Record need not
    carry every column), ``count/i`` and the newest arrays ``arrays/i/<key>``.  Pins: ``pins``
    (JSON text: each pin's label, settings, runs, data and sweep) and, for pin ``j``, the same
    history entries under ``pin/j/``."""
    runs = list(ckpt.states)
    out: dict[str, np.ndarray] = {
        "boltzlab_checkpoint": np.asarray(CHECKPOINT_VERSION),
        "lab": np.asarray(ckpt.lab),
        "settings": np.asarray(json.dumps(ckpt.settings)),
        "runs": np.asarray(runs, dtype=str),
    }
    if ckpt.data is not None:
        out["data_sha256"], out["data_name"] = np.asarray(ckpt.data[0]), np.asarray(ckpt.data[1][:MAX_TEXT])
    for i, name in enumerate(runs):
        for key, value in ckpt.states[name].items():
            array = np.asarray(value)
            if array.dtype == object:
                raise ValueError(f"The state of run {name!r} holds a non-array entry {key!r}.")
            out[f"state/{i}/{key}"] = array
    out.update(_history_entries(ckpt.history, runs))
    if ckpt.sweep is not None:
        out["sweep"] = np.asarray(json.dumps({"setting": ckpt.sweep[0], "values": list(ckpt.sweep[1])}))
    if ckpt.pins:
        out["pins"] = np.asarray(json.dumps([
            {"label": pin.label, "settings": {k: setting_text(v) for k, v in pin.settings.items()},
             "runs": pin.runs, "data": list(pin.data) if pin.data is not None else None,
             "sweep": ({"setting": pin.sweep[0], "values": [setting_text(v) for v in pin.sweep[1]]}
                       if pin.sweep is not None else None)}
            for pin in ckpt.pins]))
        for j, pin in enumerate(ckpt.pins):
            out.update(_history_entries(pin.history, pin.runs, f"pin/{j}/"))
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **out)
    return buffer.getvalue()


def _history_entries(history: History, runs: list[str], prefix: str = "") -> dict[str, np.ndarray]:
    """A history's archive entries (see :func:`write_checkpoint`), under ``prefix``."""
    out: dict[str, np.ndarray] = {}
    for i, name in enumerate(runs):
        rows = history.rows.get(name, [])
        for column in sorted({k for row in rows for k in row}):
            out[f"{prefix}history/{i}/{column}"] = np.array([float(row.get(column, np.nan)) for row in rows],
                                                            dtype=float)
            out[f"{prefix}history/{i}/{column}.present"] = np.array([column in row for row in rows])
        out[f"{prefix}count/{i}"] = np.asarray(history.counts.get(name, len(rows)))
        for key, value in history.arrays.get(name, {}).items():
            array = np.asarray(value)
            if array.dtype != object:
                out[f"{prefix}arrays/{i}/{key}"] = array
    return out


def _read_history(files: Mapping[str, np.ndarray], runs: list[str], prefix: str = "") -> History:
    """The history written by :func:`_history_entries` under ``prefix``."""
    history = History()
    columns: dict[int, dict[str, np.ndarray]] = {}
    for key, value in files.items():
        if not key.startswith(prefix):
            continue
        kind, _, rest = key[len(prefix):].partition("/")
        if kind not in ("history", "count", "arrays"):
            continue
        index_text, _, item = rest.partition("/")
        try:
            index = int(index_text)
            name = runs[index]
        except (ValueError, IndexError):
            raise ValueError(f"The checkpoint entry {key!r} names no run.") from None
        if kind == "history":
            columns.setdefault(index, {})[item] = value
        elif kind == "count":
            history.counts[name] = int(value)
        else:
            history.arrays.setdefault(name, {})[item] = value
    for index, cols in columns.items():
        name = runs[index]
        names = [c for c in cols if not c.endswith(".present")]
        lengths = {len(cols[c]) for c in cols}
        if len(lengths) > 1:
            raise ValueError(f"The history of run {name!r} has columns of different lengths.")
        n = lengths.pop() if lengths else 0
        rows = []
        for j in range(n):
            row = {}
            for c in names:
                mask = cols.get(f"{c}.present")
                if mask is None or bool(mask[j]):
                    row[c] = float(cols[c][j])
            rows.append(row)
        history.rows[name] = rows
    for name in runs:  # a pinned run that had no Record column is still a run
        history.rows.setdefault(name, [])
    return history


def _read_pins(files: Mapping[str, np.ndarray]) -> list[Pin]:
    """The pins of a checkpoint (none before pins existed)."""
    if "pins" not in files:
        return []
    try:
        described = json.loads(str(files["pins"].item()))
        pins = []
        for j, entry in enumerate(described[:MAX_PINS]):
            label, settings, runs = entry["label"], entry["settings"], entry["runs"]
            data, sweep = entry.get("data"), entry.get("sweep")  # no sweep in files before pinned sweeps
            if sweep is not None:
                sweep = (sweep["setting"], sweep["values"])
                if not isinstance(sweep[0], str) or not (isinstance(sweep[1], list)
                                                         and all(isinstance(v, str) for v in sweep[1])):
                    raise ValueError("malformed")
            if (not isinstance(label, str) or not isinstance(settings, dict)
                    or not all(isinstance(k, str) and isinstance(v, str) for k, v in settings.items())
                    or not isinstance(runs, list) or not all(isinstance(r, str) for r in runs)
                    or not (data is None or (isinstance(data, list) and len(data) == 2
                                             and all(isinstance(x, str) for x in data)))):
                raise ValueError("malformed")
            pins.append(Pin(label[:MAX_TEXT], dict(settings), _read_history(files, runs, f"pin/{j}/"),
                            tuple(data) if data is not None else None,
                            (sweep[0], tuple(sweep[1])) if sweep is not None else None))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"The checkpoint's pins are unreadable ({exc}): the file is damaged.") from None
    return pins


#: the largest array a lab writes: the Frank-Wolfe lab's persistent chains, S = 20,000
#: samples of 784 MNIST pixels in float64 (120 MiB); FVBM's tanh-fields at n = 200,000,
#: d = 30 take 46 MiB, TAP's W at 784 x 1000 6 MiB
MAX_CHECKPOINT_ARRAY = 128 * 2**20
#: a metrics column: a History keeps about 5,000 rows per run (40 kB); 200x that
MAX_HISTORY_COLUMN = 8 * 2**20


def checkpoint_spec(limit: int = MAX_CHECKPOINT_BYTES) -> ArchiveSpec:
    """What a checkpoint may hold (see :func:`write_checkpoint`), for :func:`read_npz`:
    at most 4x ``limit`` decompressed in all."""
    return ArchiveSpec(
        members=(
            Member("boltzlab_checkpoint", kinds="iu", max_ndim=0),
            Member("lab", kinds="U", max_ndim=0, max_bytes=4 * MAX_TEXT),
            Member("settings", kinds="U", max_ndim=0, max_bytes=2**20),
            Member("runs", kinds="U", max_ndim=1, max_bytes=2**16),
            Member("data_sha256", kinds="U", max_ndim=0, max_bytes=4 * 64),
            Member("data_name", kinds="U", max_ndim=0, max_bytes=4 * MAX_TEXT),
            Member(r"state/\d+/.+", kinds="biufU", max_ndim=3, max_bytes=MAX_CHECKPOINT_ARRAY),
            Member(r"history/\d+/.+", kinds="bf", max_ndim=1, max_bytes=MAX_HISTORY_COLUMN),
            Member(r"count/\d+", kinds="iu", max_ndim=0),
            Member(r"arrays/\d+/.+", kinds="biufU", max_ndim=3, max_bytes=MAX_CHECKPOINT_ARRAY),
            Member("pins", kinds="U", max_ndim=0, max_bytes=2**20),
            Member("sweep", kinds="U", max_ndim=0, max_bytes=2**12),
            Member(r"pin/[0-3]/history/\d+/.+", kinds="bf", max_ndim=1, max_bytes=MAX_HISTORY_COLUMN),
            Member(r"pin/[0-3]/count/\d+", kinds="iu", max_ndim=0),
            Member(r"pin/[0-3]/arrays/\d+/.+", kinds="biufU", max_ndim=3, max_bytes=MAX_CHECKPOINT_ARRAY),
        ),
        max_members=4096,  # a 10-run FVBM race writes about 400
        max_total_bytes=4 * limit,
        required=("boltzlab_checkpoint", "lab"),
        missing="The file is an .npz archive but not a Boltzmann Lab checkpoint.",
        what="a Boltzmann Lab checkpoint",
    )


def read_checkpoint(content: bytes, *, lab: str, limit: int = MAX_CHECKPOINT_BYTES) -> Checkpoint:
    """Parse and validate checkpoint bytes for ``lab`` with :func:`boltzlab.engine.archive.read_npz`
    (:func:`checkpoint_spec`: names, dtypes and sizes checked before anything is
    decompressed; no pickles).

    Raises ``ValueError`` with a sentence a user can act on: too large (compressed, or
    decompressed past 4x ``limit``), not an ``.npz``, not a Boltzmann Lab checkpoint, a
    checkpoint of another lab, malformed contents, or NaN/inf in a run's state arrays.
    """
    if len(content) > limit:
        raise ValueError(f"The file is {len(content) / 2**20:.1f} MB; checkpoints of at most "
                         f"{limit / 2**20:.0f} MB are allowed.")
    not_npz = ValueError("The file is not a .npz checkpoint saved by Boltzmann Lab "
                         "(it could not be read as an .npz archive).")
    if not content.startswith(b"PK"):
        raise not_npz
    try:  # names, dtypes and sizes are checked before anything is decompressed
        files = read_npz(content, checkpoint_spec(limit))
    except NotAnArchive:
        raise not_npz from None
    version = files["boltzlab_checkpoint"].item()
    if version != CHECKPOINT_VERSION:
        raise ValueError(f"The checkpoint has format version {version}; this app reads "
                         f"version {CHECKPOINT_VERSION}.")
    saved_lab = str(files["lab"].item())
    if saved_lab != lab:
        raise ValueError(f"The checkpoint was saved in the {saved_lab!r} lab; this is the "
                         f"{lab!r} lab. Open that lab's page to load it.")
    try:
        settings = json.loads(str(files["settings"].item()))
        runs = [str(r) for r in files["runs"].tolist()]
    except (KeyError, ValueError) as exc:
        raise ValueError(f"The checkpoint's settings are unreadable: {exc}") from None
    if not isinstance(settings, dict) or not all(isinstance(v, str) for v in settings.values()):
        raise ValueError("The checkpoint's settings must map names to text.")
    states: dict[str, dict[str, Any]] = {name: {} for name in runs}
    for key, value in files.items():
        kind, _, rest = key.partition("/")
        if kind != "state":
            continue
        index_text, _, item = rest.partition("/")
        try:
            states[runs[int(index_text)]][item] = value
        except (ValueError, IndexError):
            raise ValueError(f"The checkpoint entry {key!r} names no run.") from None
    history = _read_history(files, runs)
    history.rows = {name: rows for name, rows in history.rows.items() if rows}  # as the runner keeps it
    for name in runs:
        if not states[name]:
            raise ValueError(f"The checkpoint holds no state for run {name!r}.")
        _refuse_non_finite(name, states[name])
    data = None
    if "data_sha256" in files:
        sha = str(files["data_sha256"].item())
        if not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise ValueError("The checkpoint's data hash is not a SHA-256: the file is damaged.")
        data = (sha, str(files["data_name"].item()) if "data_name" in files else "")
    return Checkpoint(saved_lab, settings, states, history, data, _read_pins(files), _read_sweep(files))


def _read_sweep(files: Mapping[str, np.ndarray]) -> tuple[str, list[str]] | None:
    """The sweep a checkpoint's runs are, if any."""
    if "sweep" not in files:
        return None
    try:
        sweep = json.loads(str(files["sweep"].item()))
        setting, values = sweep["setting"], sweep["values"]
        if not isinstance(setting, str) or not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise ValueError("malformed")
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"The checkpoint's sweep is unreadable ({exc}): the file is damaged.") from None
    return setting, values


def check_same_data(saved: tuple[str, str] | None, now: tuple[str, str] | None) -> None:
    """Refuse (``ValueError``) to load a checkpoint trained on other data than the lab's run
    now has; a checkpoint or a lab that does not say what its data are is not checked."""
    if saved is None or now is None or saved[0] == now[0]:
        return
    raise ValueError(f"The checkpoint was trained on other data ({saved[1] or 'unnamed'}, SHA-256 "
                     f"{saved[0][:12]}…) than this lab has now ({now[1]}, SHA-256 {now[0][:12]}…). "
                     "Choose or upload the images it was trained on, then load it again.")


def _refuse_non_finite(run: str, state: Mapping[str, np.ndarray]) -> None:
    """NaN or inf in a state array (parameters, velocities, chains, ...) is refused before
    the lab is touched: some trainers would take it and train on NaN.  Only a run saved as
    diverged has them by right (its trainer decides); scalars may be NaN (e.g. no value yet)."""
    if str(state.get("status", "")) == "diverged":
        return
    for key, value in state.items():
        if value.ndim >= 1 and value.dtype.kind == "f" and not np.all(np.isfinite(value)):
            raise ValueError(f"The checkpoint's {key!r} of run {run!r} holds NaN or inf values though the "
                             "run did not diverge: the file is damaged.")


def history_csv(history: History, pins: list[Pin] = ()) -> str:
    """The metrics history as CSV: one row per Record, ``run`` and ``pin`` first ("" for the
    live runs, then each pin's rows under its label), then every scalar."""
    histories = [("", history), *((pin.label, pin.history) for pin in pins)]
    columns = sorted({k for _, h in histories for rows in h.rows.values() for row in rows for k in row})
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["run", "pin", *columns])
    for label, h in histories:
        for name, rows in h.rows.items():
            for row in rows:
                writer.writerow([name, label, *(row.get(c, "") for c in columns)])
    return out.getvalue()


# ---------------------------------------------------------------------- the tools
COPY_LINK_JS = """
const url = window.location.href;
const done = () => { button.label = "✓ Link copied"; setTimeout(() => { button.label = label; }, 2000); };
if (navigator.clipboard && window.isSecureContext) {
  navigator.clipboard.writeText(url).then(done, () => window.prompt("Copy this link:", url));
} else {
  window.prompt("Copy this link:", url);
}
"""


class LabTools:
    """The share / preset / checkpoint / export / present controls of one lab."""

    def __init__(self, lab: Any) -> None:
        self.lab = lab
        w = pn.widgets
        titles = [p.title for p in lab.presets]
        self.preset = w.Select(label="Preset", options=[PRESET_PLACEHOLDER, *titles],
                               value=PRESET_PLACEHOLDER, width=300)
        self.copy_link = w.Button(label="Copy link", width=110, description=(
            "Copies the address: this lab's settings and seeds, which reproduce the run. "
            "Pins are not in links: Save checkpoint keeps them."))
        in_browser(self.copy_link, COPY_LINK_JS, "click", button=self.copy_link, label="Copy link")
        self.save = w.FileDownload(callback=self._checkpoint_file, filename=f"boltzlab-{lab.key}.npz",
                                   label="Save checkpoint", color="primary", width=170,
                                   embed=False)
        self.load = w.FileInput(accept=".npz", multiple=False, width=285,
                                css_classes=[f"{lab.key}-load-checkpoint"])
        self.export_csv = w.FileDownload(callback=self._csv_file, label="⬇ Metrics (CSV)",
                                         filename=f"boltzlab-{lab.key}-metrics.csv", width=135,
                                         embed=False)
        self.export_html = w.FileDownload(callback=self._html_file, label="⬇ Plots (HTML)",
                                          filename=f"boltzlab-{lab.key}-plots.html", width=135,
                                          embed=False)
        # "Copy as Python": the run as a script (Lab.python_script), shown to copy and on the
        # clipboard where the browser allows it (a secure context: https or localhost)
        self.copy_python = w.Button(label="Copy as Python", width=135)
        self.export_py = w.FileDownload(callback=self._python_file, label="⬇ Script (.py)",
                                        filename=f"boltzlab-{lab.key}-run.py", width=135, embed=False)
        self.script = w.TextAreaInput(value="", visible=False, width=300, height=180,
                                      css_classes=[f"{lab.key}-python-script"])
        in_browser(self.script, "if (navigator.clipboard && window.isSecureContext) "
                                "{ navigator.clipboard.writeText(cb_obj.value) }", "value")
        self.copy_python.on_click(lambda event: self.show_script())
        self.message = StatusBadge("", "info", visible=False, name=f"{lab.key}-tools-message")
        self.next_step = w.Button(label="Next step ▶", color="success", width=170, align="end",
                                  height=48, visible=False, stylesheets=[
                                      ":host .bk-btn { font-size: 1.3em; font-weight: bold; }"])
        # presentation mode's caption: a fixed height of two lines whatever it says (or not),
        # so the narration never moves a figure; Play, Step and Reset clear it
        self.changed = pn.pane.HTML("", visible=False, sizing_mode="stretch_width",
                                    name=f"{lab.key}-what-changed", css_classes=["lab-caption"],
                                    styles={"font-size": "1.1em", "line-height": "1.3", "height": "2.6em",
                                            "overflow": "hidden"}, margin=(0, 10))
        self.root: pn.viewable.Viewable | None = None  # the lab's page, for the HTML export
        self._fonts: dict[str, dict[str, Any]] = {}  # plot fonts before presentation mode
        self._presenting = False
        self._card_was_collapsed = False

        self.preset.param.watch(self._on_preset, "value")
        self.load.param.watch(self._on_load, "value")
        self.next_step.on_click(lambda e: self.lab.next_step())
        # one watcher on every setting: a batch of changes (a link, a preset) is one push
        lab.param.watch(lambda *events: self.push_url(), lab.setting_names())

    # -------------------------------------------------------------- layout
    def panel(self) -> pn.viewable.Viewable:
        help_icon = pn.widgets.TooltipIcon(value=(
            "Link: the address bar holds this lab's settings and seeds; a copied link "
            "reproduces the run (pins are not in links). Checkpoint: the trained model, settings, "
            "curves and pins as .npz; "
            "load it later (or on another machine) and press Play to continue exactly. "
            "Export: the curves' numbers as CSV, the plots as an HTML page (each plot's "
            "toolbar also saves a PNG). Copy as Python: a script that makes this run again "
            "headless and saves its numbers."), align="end")
        # rows of fixed widths that fit the card: a wrapping row let Bokeh place the file
        # input and the last button outside the card, over the plots (seen at 1440x900)
        body = pn.Column(pn.Row(self.copy_link, self.save),
                         pn.Row(pn.pane.Markdown("**Load checkpoint:**", margin=(0, 10)), help_icon),
                         self.load,
                         pn.Row(self.export_csv, self.export_html),
                         pn.Row(self.copy_python, self.export_py), self.script, margin=0)
        # under the controls, in the left column: the first screen's right side is the plot
        self._card = pn.Card(body, title="Share, save and export", collapsed=False,
                             width=325, margin=(5, 5))  # the controls column's width, folded or not
        return self._card

    def set_presenting(self, on: bool) -> None:
        """Presentation mode: the Next-step strip shows, the toolbar folds away, the plots'
        fonts grow."""
        card = getattr(self, "_card", None)
        if card is not None and on != self._presenting:
            if on:
                self._card_was_collapsed, card.collapsed = card.collapsed, True
            else:
                card.collapsed = self._card_was_collapsed
        self._presenting = on
        if self.root is not None:
            scale_plot_fonts(self.root, PRESENT_FONT_SCALE if on else 1.0, self._fonts)
        self.next_step.visible = on
        self.changed.visible = on

    # -------------------------------------------------------------- settings, URL
    def settings_text(self) -> dict[str, str]:
        """The lab's settings as text, by name (what a link and a checkpoint carry)."""
        return {name: setting_text(value) for name, value in self.lab.settings_values().items()}

    def decode(self, texts: Mapping[str, Any], *, strict: bool) -> tuple[dict[str, Any], list[str]]:
        """Setting texts as values (:meth:`Lab.parse_settings`); unknown names and bad
        values are errors (all reported, raised together if ``strict``)."""
        values, errors = self.lab.parse_settings(texts)
        if strict and errors:
            raise ValueError(" ".join(errors))
        return values, errors

    def query(self) -> dict[str, str]:
        return {f"{self.lab.key}.{k}": v for k, v in self.settings_text().items()}

    def push_url(self) -> None:
        """Keep the address bar's query string equal to the lab's settings."""
        location = pn.state.location
        if location is None:
            return
        query = self.query()
        doc = pn.state.curdoc
        if doc is not None and doc.session_context is not None:
            doc.add_next_tick_callback(lambda: location.update_query(**query))
        else:
            location.update_query(**query)

    def apply_query(self, args: Mapping[str, Any]) -> None:
        """Apply this lab's settings from URL arguments (``pn.state.session_args``).

        Bad values are ignored with a message naming them; the rest apply.
        """
        prefix = f"{self.lab.key}."
        texts = {}
        for key, raw in args.items():
            if key.startswith(prefix):
                # bytes or a list of every value of a repeated key: parse_setting checks them
                texts[key[len(prefix):]] = raw if isinstance(raw, (list, bytes)) else str(raw)
        if not texts:
            return
        values, errors = self.decode(texts, strict=False)
        try:
            self.lab.apply_settings(values)
        except ValueError as exc:
            errors.append(str(exc))
        # the address bar then names every setting, not only the link's (once the page is
        # up: a change made while the session is being created is overwritten by the browser)
        if pn.state.curdoc is not None and pn.state.curdoc.session_context is not None:
            pn.state.onload(self.push_url)
        else:
            self.push_url()
        if errors:
            self.show("warn", "**Some settings in the link were ignored:** " + " ".join(errors))
        else:
            self.show("info", "Settings loaded from the link.")

    # -------------------------------------------------------------- presets
    def _on_preset(self, event) -> None:
        if event.new == PRESET_PLACEHOLDER:
            return
        preset = next(p for p in self.lab.presets if p.title == event.new)
        self.apply_preset(preset)

    def apply_preset(self, preset: Preset) -> None:
        with pn.io.hold(freeze=True):
            try:
                self.lab.apply_settings(self.lab.check_settings(preset.settings), fresh=True)
            except ValueError as exc:
                self.show("error", f"**The preset could not be applied:** {exc}")
                return
            self.show("info", f"**{preset.title}.** {preset.note}")

    # -------------------------------------------------------------- checkpoints
    def checkpoint(self) -> Checkpoint:
        states, history, _ = self.lab.runner.snapshot()
        sweep = self.lab.sweeping
        return Checkpoint(self.lab.key, self.settings_text(), states, history, self.lab.data_identity(),
                          list(self.lab.pins.values()),
                          (sweep[0], [setting_text(v) for v in sweep[1]]) if sweep is not None else None)

    def _checkpoint_file(self) -> io.BytesIO:
        try:
            content = write_checkpoint(self.checkpoint())
        except ValueError as exc:
            self.show("error", f"**Could not save:** {exc}")
            return io.BytesIO()
        steps = sum(s.steps for s in self.lab.runner.states.values())
        self.show("ok", f"Saved a checkpoint after {steps} step(s) ({len(content) / 1024:.0f} kB). "
                        "Training is paused; press ▶ Play to go on.")
        self.lab.refresh_status()
        return io.BytesIO(content)

    def _on_load(self, event) -> None:
        if not event.new:
            return
        with pn.io.hold(freeze=True):
            self.load_bytes(event.new, filename=self.load.filename or "checkpoint.npz")

    def load_bytes(self, content: bytes, filename: str = "checkpoint.npz") -> bool:
        """Load a checkpoint; on any error keep (or restore) the current run and say why.
        The lab hears of it before and after (``Lab.loading``)."""
        with self.lab.loading() as outcome:
            outcome.ok = self._load_bytes(content, filename)
            if outcome.ok and outcome.note:
                self.show("ok", f"{self.message.text}  \n{outcome.note}")
        return outcome.ok

    def _load_bytes(self, content: bytes, filename: str) -> bool:
        try:
            ckpt = read_checkpoint(content, lab=self.lab.key)
            values, _ = self.decode(ckpt.settings, strict=True)
        except ValueError as exc:
            self.show("error", f"**Could not load {filename}:** {exc}  \nThe current run is unchanged.")
            return False
        backup = self.checkpoint()
        try:
            self.lab.apply_settings(values, sweep=self._sweep_values(ckpt.sweep))
            check_same_data(ckpt.data, self.lab.data_identity())  # before the states meet the trainers
            self.lab.runner.restore(ckpt.states, ckpt.history)
        except Exception as exc:  # a state that does not fit these trainers, ...
            self.lab.apply_settings(self.decode(backup.settings, strict=True)[0],
                                    sweep=self._sweep_values(backup.sweep))
            self.lab.runner.restore(backup.states, backup.history)
            self.lab.redraw(self.lab.runner.history.records())
            # a refused setting (ValueError, e.g. over the work budget) is its own sentence
            text = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
            self.show("error", f"**Could not load {filename}:** {text}  \n"
                               "The current run is unchanged.")
            return False
        self.lab.load_pins(ckpt.pins)
        self.lab.redraw(self.lab.runner.history.records())
        steps = sum(s.steps for s in self.lab.runner.states.values())
        pinned = f" and {len(ckpt.pins)} pin(s)" if ckpt.pins else ""
        self.show("ok", f"Loaded {filename}: {steps} step(s){pinned} restored. Press ▶ Play to continue.")
        return True

    def _sweep_values(self, sweep: tuple[str, list[str]] | None) -> tuple[str, tuple] | None:
        """A checkpoint's sweep with its values read as the setting's values (``ValueError``
        for a setting or value this lab does not allow)."""
        if sweep is None:
            return None
        setting, texts = sweep
        values = []
        for text in texts:
            parsed, errors = self.lab.parse_settings({setting: text})
            if errors:
                raise ValueError(f"The checkpoint's sweep: {' '.join(errors)}")
            values.append(parsed[setting])
        return setting, tuple(values)

    # -------------------------------------------------------------- exports
    def show_script(self) -> None:
        """Show the run as a Python script (and copy it, where the browser lets a page)."""
        self.script.value = self.lab.python_script()
        self.script.visible = True

    def _python_file(self) -> io.BytesIO:
        return io.BytesIO(self.lab.python_script().encode())

    def _csv_file(self) -> io.BytesIO:
        return io.BytesIO(history_csv(self.lab.runner.copy_history(), list(self.lab.pins.values())).encode())

    def _html_file(self) -> io.BytesIO:
        return io.BytesIO(self.lab.figures_html().encode())

    def show(self, level: str, text: str) -> None:
        self.message.set(level, text)
        self.message.pane.visible = True

