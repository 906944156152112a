"""The Frank-Wolfe lab: an RBM that grows one hidden unit at a time.

Paper: Ping, Liu & Ihler (2016), "Learning Infinite RBMs with Frank-Wolfe" (NIPS).
"""

from __future__ import annotations

import functools
import inspect
import time

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, CustomJSHover, HoverTool, Label, Span

from dashboard.labs.frankwolfe_setup import (
    CD_EPOCHS, CD_K, DATASETS, DEFAULTS, EVALUATIONS, cd_factory, fw_curves, fw_factory, log_likelihood_of,
)
from dashboard.labs.tap_setup import load_images
from dashboard.labtools import LabTools, Preset, intro_card
from dashboard.runner import Runner, attach, play_or_tell
from dashboard.views import LiveCurve, StatusBadge
from dashboard.views.image_grid import ImageGrid

RADIO = dict(color="primary", variant="outline")
SPEEDS = {"1 unit/s": 1.0, "2 units/s": 2.0, "5 units/s": 5.0, "as fast as possible": None}
DEFAULT_DATA = "mnist"
FIELDS_PER_SECOND = 2.0  # receptive-field grid redraws at most this often while playing
OUTLINE = "#f0a000"  # the receptive-field grid outlines the newest unit in this colour

INTRO = """
Ping, Liu & Ihler (2016) give an RBM a *distribution* q(w) over hidden-unit weights (eq. 5);
the penalized likelihood (eq. 6) is then **concave in q**, and Frank-Wolfe (Algorithm 1)
solves it by **inserting one hidden unit per iteration**: draw S samples from the current
model, find the new unit w* by L-BFGS on eq. 9, mix it in with step 1/t (with α<sub>t</sub> = t
the model *is* a standard RBM with t units, Prop. 3.1), then move the visible biases
(eq. 10). **Train CD from here** forks the model into CD-10 beside a random start of the same
size (§4, Fig. 1).
"""

EQUATIONS = r"""
$$\log p(v \mid q, \vartheta) = \alpha \mathbb{E}_{q(w)} \big[ \log(1 + e^{w^\top v}) \big] + b^\top v - \log Z(q, \vartheta) \qquad (5)$$

$$w_t^{\ast} = \arg\min_w \frac{\lambda}{2} \lVert w \rVert^2 + \frac{1}{S} \sum_{s=1}^{S} \log(1 + e^{w^\top v_s}) - \frac{1}{N} \sum_{n=1}^{N} \log(1 + e^{w^\top v_n}) \qquad (9)$$

$$q_t = \Big(1 - \frac{1}{t}\Big) q_{t-1} + \frac{1}{t} \delta_{w_t^{\ast}}, \quad \alpha_t = t, \qquad b \leftarrow b + \eta \Big( \frac{1}{N} \sum_{n} v_n - \frac{1}{M} \sum_{m} v_m \Big) \qquad \text{(Alg. 1; 10)}$$
"""

WATCH = """
Press **▶ Play**: the hidden units (dashed) grow by one per iteration, each new receptive
field appears outlined in orange, and the test log-likelihood climbs and levels off; the
§4 stopping rule marks the selected size once the train/validation gap grows. J(w*) of
eq. 9 stays ≤ 0 (w = 0 is feasible) and nears 0 as new units help less. Compare the
presets *small λ* (units so large that the likelihood falls) and *large λ*. In presentation
mode, **Next step** names the unit it inserted and circles its point on the curves.
"""

PRESETS = [
    Preset("The paper's MNIST run (λ = 0.3, S = 500, up to 100 units)",
           {"data": "mnist", **DEFAULTS["mnist"], "evaluate": "auto", "seed": 0, "away": False,
            "cd_epochs": CD_EPOCHS, "speed": "as fast as possible"},
           "Algorithm 1 on the bundled 3,500 MNIST digits with the lab's λ = 0.3 (the paper picks λ "
           "from a grid): the test log-likelihood climbs from about −208 nats at 10 units to about "
           "−165 at 100 (exact while cheap, then AIS), one receptive field per iteration."),
    Preset("Quick: 8×8 digits, exact log-likelihood at every unit",
           {"data": "digits", "reg": 0.2, "bias_lr": 0.05, "samples": 500, "max_hidden": 20,
            "evaluate": "exact", "eval_every": 1, "seed": 0, "away": False, "cd_epochs": CD_EPOCHS,
            "speed": "2 units/s"},
           "20 units in about 10 s, each scored with the exact log Z (up to 2²⁰ hidden states): the "
           "test log-likelihood rises from −25.16 to about −24.5 nats, at nearly every insertion."),
    Preset("Small λ = 0.12: big units overshoot (digits)",
           {"data": "digits", "reg": 0.12, "bias_lr": 0.05, "samples": 500, "max_hidden": 40,
            "evaluate": "auto", "eval_every": 1, "seed": 0, "away": False, "cd_epochs": CD_EPOCHS,
            "speed": "5 units/s"},
           "w* of eq. 9 grows like 1/λ and enters at full strength (αₜ = t): after three good units "
           "the test log-likelihood falls by several nats (−24.8 → below −28). Compare with λ = 0.2."),
    Preset("Large λ = 0.5: tiny units, a flat curve (digits)",
           {"data": "digits", "reg": 0.5, "bias_lr": 0.05, "samples": 500, "max_hidden": 40,
            "evaluate": "auto", "eval_every": 1, "seed": 0, "away": False, "cd_epochs": CD_EPOCHS,
            "speed": "5 units/s"},
           "The penalty (λ/2)‖w‖² of eq. 9 keeps w* near 0: faint receptive fields, J(w*) ≈ 0 and a "
           "log-likelihood that barely moves (−25.156 → −25.148 over 25 units)."),
    Preset("Away steps on MNIST (§3.2): harmful units removed",
           {"data": "mnist", **DEFAULTS["mnist"], "evaluate": "auto", "eval_every": 1, "seed": 0,
            "away": True, "cd_epochs": CD_EPOCHS, "speed": "2 units/s"},
           "The model grows to 4 units, then every insertion at full strength makes some unit "
           "harmful (its eq. 9 value J(w_i) exceeds −J(w*)) and the next iteration removes it: the "
           "dashed unit count saws between 3 and 4, a sparse model (Next step names the unit removed)."),
]

UNIT_HOVER_JS = """
const g = geom.data;
if (!g.n.length || g.n[0] < 1) { return "–"; }
const tw = g.tw[0], th = g.th[0], nc = g.nc[0], h = g.h[0], n = g.n[0];
const c = Math.floor(special_vars.x / (tw + 1)), r = Math.floor((h - special_vars.y) / (th + 1));
const k = r * nc + c;
if (c < 0 || c >= nc || r < 0 || k >= n) { return "–"; }
return "#" + (k + 1) + " of " + n + (k == g.newest[0] ? " (the newest, outlined)" : "");
"""


def _held(method):
    """Run a UI handler inside one ``pn.io.hold`` (see dashboard.labs.fvbm._held)."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with pn.io.hold(freeze=True):
            return method(self, *args, **kwargs)
    return wrapper


def _label(text: str) -> pn.pane.Markdown:
    return pn.pane.Markdown(f"**{text}**", margin=(8, 10, 0, 10))


class FrankWolfeTools(LabTools):
    """:class:`LabTools` that also says what a load does to the CD comparison.

    A checkpoint holds the Frank-Wolfe run only (``runner.snapshot()``); the CD pair of
    card 3 is a fork of it, cheap to make again: a load that succeeds resets the fork (a
    new fork from the loaded model with the same seed and epochs gives the same CD runs),
    a load that fails leaves it running.
    """

    CD_NOTE = ("The CD comparison (card 3) is not part of a checkpoint: press “Train CD from here” "
               "to fork it again from the loaded model.")

    def load_bytes(self, content: bytes, filename: str = "checkpoint.npz") -> bool:
        self.lab._loading = True
        try:
            ok = super().load_bytes(content, filename)
        finally:
            self.lab._loading = False
        if ok:
            self.lab._reset_cd(self.CD_NOTE)
            self.show("ok", f"{self.message.text}  \n{self.CD_NOTE}")
        return ok


class FrankWolfeLab:
    """Controls + live views around two runners: Frank-Wolfe, and the CD pair forked from it."""

    title = "Frank-Wolfe"
    key = "frankwolfe"
    presets = PRESETS

    def __init__(self) -> None:
        self._applying = False  # apply_settings sets many widgets, then rebuilds once
        self._loading = False  # a checkpoint load in progress: keep the CD fork until it succeeds
        self._callbacks: list = []
        self._last: dict = {}
        self._fields_time = 0.0
        self._fields_dirty = False
        self._status_time = 0.0
        self._fork: dict | None = None
        self.cd_runner: Runner | None = None
        self._build_widgets()
        self._build_views()
        self.runner = Runner(self._factory(), watch="inner_objective")
        self.runner.set_speed(SPEEDS[self.speed.value])
        self._on_data()
        self.tools = FrankWolfeTools(self)

    # ------------------------------------------------------------------ LabTools contract
    def settings(self) -> dict:
        """The widgets whose values define a run (URL, presets, checkpoints): the data, every
        Frank-Wolfe setting with its seed, the CD fork's epochs and the speed."""
        return {"data": self.data, "reg": self.reg, "bias_lr": self.bias_lr, "samples": self.samples,
                "max_hidden": self.max_hidden, "evaluate": self.evaluate, "eval_every": self.eval_every,
                "seed": self.seed, "away": self.away, "cd_epochs": self.cd_epochs, "speed": self.speed}

    @_held
    def apply_settings(self, values: dict) -> None:
        """Set many widgets, then rebuild the run once; ``ValueError`` if the values make no
        valid run (the widgets keep the new values, the runner the old run).

        A change of data set first applies that set's defaults (as choosing it does), then
        the given values.
        """
        widgets = self.settings()
        unknown = sorted(set(values) - set(widgets))
        if unknown:
            raise ValueError(f"The Frank-Wolfe lab has no settings {unknown}.")
        self._applying = True
        try:
            data = values.get("data", self.data.value)
            if data != self.data.value:
                self.data.value = data
                for name, value in DEFAULTS[data].items():
                    widgets[name].value = value
            for name, value in values.items():
                widgets[name].value = value
        finally:
            self._applying = False
        self._show_data()
        self._rebuild(strict=True)

    @_held
    def redraw(self, records) -> None:
        """Clear the views and replay ``records`` (a loaded checkpoint's history: scalars,
        and the newest W, b on the last record)."""
        self._clear()
        self.on_records(records)
        self._show_fields()
        self._status_time = 0.0
        self._refresh_status()

    def step_once(self) -> None:
        self._step()

    def refresh_status(self) -> None:
        self._refresh_status()

    def describe_change(self, name, before, after, before_arrays, after_arrays) -> str | None:
        """Presentation mode: the unit this iteration inserted (outlined in the grid, circled on
        the curves) or removed, its eq. 9 objective, the eq. 10 bias change, the log-likelihood."""
        if name != "FW" or "iteration" not in after:
            return None
        t = int(after["iteration"])
        n = int(after["n_hidden"])
        j_star = float(after.get("inner_objective", np.nan))
        removed = int(after.get("removed_unit", -1))
        if removed >= 0:
            text = (f"<b>Iteration {t}: away step (§3.2)</b>: hidden unit <b>#{removed + 1} removed</b>, "
                    f"it hurt more than the best new unit would help (eq. 9: J(w<sub>{removed + 1}</sub>) "
                    f"&gt; −J(w*) = {-j_star:.4g}); {n} units left")
        else:
            text = (f"<b>Iteration {t}</b>: hidden unit <b>#{n} inserted</b> (outlined in "
                    f"<span style='color:{OUTLINE}'>orange</span>, the last tile of the receptive "
                    f"fields), the minimiser w* of eq. 9 with J(w*) = <b>{j_star:.4g}</b> "
                    f"(lower: a more useful unit)")
        if after.get("bias_change") is not None:
            text += f"; the eq. 10 steps moved the visible biases by ‖Δb‖ = {after['bias_change']:.3g}"
        ll = after.get("test_log_likelihood")
        if ll is not None and np.isfinite(ll):
            previous = self._previous("test_log_likelihood")
            if previous is None:
                text += f"; test log-likelihood <b>{ll:.3f}</b> nats"
            else:
                gain = ll - previous
                text += (f"; test log-likelihood {previous:.3f} → <b>{ll:.3f}</b> nats "
                         f"({'▲' if gain >= 0 else '▼'} {abs(gain):.3g})")
        else:
            text += f"; log-likelihood not evaluated this step (every {self.eval_every.value})"
        if after.get("selected_hidden", -1) >= 0 and before.get("selected_hidden", -1) < 0:
            text += f"; the §4 stopping rule fired: selected size {int(after['selected_hidden'])} units"
        text += "."
        # the highlight: the new unit's tile in the grid, this step's points on the curves
        W = after_arrays.get("W")
        if W is not None:
            self._draw_fields(np.asarray(W), None if removed >= 0 else np.shape(W)[1] - 1)
        self._mark(t, j_star, ll if ll is not None and np.isfinite(ll) else None)
        return text

    def _previous(self, key: str) -> float | None:
        """The newest value of ``key`` before the last Record (an earlier evaluation)."""
        rows = self.runner.history.rows.get("FW", [])
        for row in reversed(rows[:-1]):
            value = row.get(key)
            if value is not None and np.isfinite(value):
                return float(value)
        return None

    def _mark(self, t: float | None, inner: float | None = None, ll: float | None = None) -> None:
        """Circle iteration ``t`` on the eq. 9 curve and the test log-likelihood (None: clear)."""
        ok = t is not None and inner is not None and np.isfinite(inner)
        self.mark_inner.data = {"x": [t] if ok else [], "y": [inner] if ok else []}
        self.mark_ll.data = {"x": [t] if t is not None and ll is not None else [], "y": [ll] if ll is not None else []}
        for item, source in ((self.mark_inner_item, self.mark_inner), (self.mark_ll_item, self.mark_ll)):
            if item is not None:
                item.visible = bool(len(source.data["x"]))

    # ------------------------------------------------------------------ widgets
    def _build_widgets(self) -> None:
        w = pn.widgets
        d = DEFAULTS[DEFAULT_DATA]
        self.data = w.RadioButtonGroup(label="Data", options=DATASETS, value=DEFAULT_DATA, **RADIO)
        self.reg = w.FloatInput(label="Regularization λ", value=d["reg"], start=0.0, end=100.0, step=0.01, width=140)
        self.bias_lr = w.FloatInput(label="Bias step η", value=d["bias_lr"], start=0.0, end=10.0, step=0.005, width=140)
        self.samples = w.IntInput(label="Samples S", value=d["samples"], start=1, end=20000, width=140)
        self.max_hidden = w.IntInput(label="Max hidden units T", value=d["max_hidden"], start=2, end=2000, width=140)
        self.evaluate = w.Select(label="Log-likelihood", options=EVALUATIONS, value="auto", width=290)
        self.eval_every = w.IntInput(label="Evaluate every", value=d["eval_every"], start=1, end=1000, width=140)
        self.seed = w.IntInput(label="Seed", value=0, start=0, width=140)
        self.away = w.Checkbox(label="Away steps (may remove a harmful unit, §3.2)", value=False)
        self.settings_msg = StatusBadge("", "error", visible=False)

        self.play = w.Button(label="▶ Play", color="success", width=90)
        self.pause = w.Button(label="❚❚ Pause", color="warning", width=90, disabled=True)
        self.step = w.Button(label="Step", color="primary", width=80)
        self.reset = w.Button(label="↺ Reset", color="default", width=90)
        self.speed = w.Select(label="Speed", options=list(SPEEDS), value="as fast as possible", width=170)
        self.fork = w.Button(label="Train CD from here", color="primary", width=190, disabled=True)
        self.cd_epochs = w.IntInput(label="CD epochs", value=CD_EPOCHS, start=1, end=500, width=110)

        self.data.param.watch(lambda e: self._on_data_widget(), "value")
        for widget in (self.reg, self.bias_lr, self.samples, self.max_hidden, self.evaluate, self.eval_every,
                       self.seed, self.away):
            widget.param.watch(lambda e: self._rebuild(), "value")
        self.play.on_click(lambda e: self._play())
        self.pause.on_click(lambda e: self._pause())
        self.step.on_click(lambda e: self._step())
        self.reset.on_click(lambda e: self._reset())
        self.fork.on_click(lambda e: self._fork_cd())
        self.speed.param.watch(lambda e: self.runner.set_speed(SPEEDS[e.new]), "value")

    # ------------------------------------------------------------------ views
    def _build_views(self) -> None:
        # short titles and labels: the two curves share the width beside the controls
        self.ll_curve = LiveCurve("Log-likelihood vs. units (Fig. 1)", "Frank-Wolfe iteration t",
                                  "log-likelihood per digit (nats)", y2_label="hidden units (dashed)",
                                  name="fw-ll", height=340, legend_cols=4)
        for key, label, color, dash in (("train", "train", "#1f77b4", "solid"), ("valid", "validation", "#ff7f0e", "solid"),
                                        ("test", "test", "#2ca02c", "solid")):
            self.ll_curve.add_line(key, label, color, dash=dash)
        self.ll_curve.add_line("units", "hidden units", "#555555", axis="right", dash="dashed")
        self.selected_span = Span(location=0, dimension="height", line_color="#d62728", line_dash="dashed",
                                  line_width=2, visible=False)
        self.selected_label = Label(x=0, y=10, y_units="screen", text="", text_color="#d62728",
                                    text_font_size="10pt", x_offset=4, visible=False)
        self.ll_curve.figure.add_layout(self.selected_span)
        self.ll_curve.figure.add_layout(self.selected_label)
        self.inner_curve = LiveCurve("The new unit's inner problem (eq. 9)", "Frank-Wolfe iteration t",
                                     "J(w*) of eq. 9 (nats)", y2_label="bias change ‖Δb‖ (dashed)",
                                     name="fw-inner", height=340)
        self.inner_curve.add_line("inner", "J(w*), eq. 9", "#9467bd")
        self.inner_curve.add_line("bias", "‖Δb‖, eq. 10", "#8c564b", axis="right", dash="dashed")
        # presentation mode's highlight: this step's points, circled (legend entry only while shown)
        self.mark_inner = ColumnDataSource({"x": [], "y": []}, name="fw-inner:mark")
        self.mark_ll = ColumnDataSource({"x": [], "y": []}, name="fw-ll:mark")
        for curve, source in ((self.inner_curve, self.mark_inner), (self.ll_curve, self.mark_ll)):
            curve.figure.scatter("x", "y", source=source, marker="circle", size=18, fill_alpha=0.0,
                                 line_color=OUTLINE, line_width=3, legend_label="this step")
        self.mark_inner_item = self.inner_curve.legend_item("this step")
        self.mark_ll_item = self.ll_curve.legend_item("this step")
        self._mark(None)
        self.fields = ImageGrid("Receptive fields in insertion order; the newest unit outlined", name="fw-fields",
                                height=600, width=680)
        self._add_fields_hover()
        self.cd_curve = LiveCurve(f"CD-{CD_K} after the fork (§4)", "CD epoch",
                                  "train log-likelihood per digit (nats)", name="fw-cd", height=340)
        self.cd_curve.add_line("fw", "CD from Frank-Wolfe", "#1f77b4")
        self.cd_curve.add_line("random", "CD from random", "#d62728")
        self.fork_line = self.cd_curve.add_hline(None, color="#555", text="Frank-Wolfe at the fork")
        self.cd_curve._empty.text = "Pause, then “Train CD from here”"  # not ▶ Play: a workaround,
        # LiveCurve has no public setter for its empty-plot text
        self.counter = pn.pane.HTML("Hidden units: 0", name="fw-counter",
                                    styles={"font-size": "1.4em", "font-weight": "bold"}, width=200)
        self.run_status = StatusBadge("Ready: press ▶ Play to grow the RBM", "idle", width=330)
        self.select_status = StatusBadge("Stopping rule (§4): not fired yet", "idle", width=430)
        self.cd_status = StatusBadge("Pause, then press “Train CD from here” to compare with CD", "idle")
        self.data_info = pn.pane.Markdown("", styles={"font-size": "0.9em"})

    def _add_fields_hover(self) -> None:
        """Hovering a tile names its hidden unit: through the grid's own hover (tile labels)
        where the view has one, else through a hover tool of this lab's own."""
        self._grid_labels = "labels" in inspect.signature(self.fields.update).parameters
        fig = self.fields.figure
        if any(isinstance(tool, HoverTool) for tool in fig.tools):
            return
        self.fields_geometry = ColumnDataSource({"tw": [1], "th": [1], "nc": [1], "h": [1], "n": [0], "newest": [-1]})
        image = next(r for r in fig.renderers if type(r.glyph).__name__ == "Image")
        unit = CustomJSHover(code=UNIT_HOVER_JS, args={"geom": self.fields_geometry})
        fig.add_tools(HoverTool(renderers=[image], tooltips=[("hidden unit", "$x{unit}"),
                                                             ("weight / max |w| of the unit", "@image{0.00}")],
                                formatters={"$x": unit}))

    def _draw_fields(self, W: np.ndarray | None, newest: int | None) -> None:
        if self._grid_labels and W is not None and np.size(W):
            n = W.shape[1]
            labels = [f"hidden unit #{j + 1} of {n}" + (" (the newest, outlined)" if j == newest else "")
                      for j in range(n)]
            self.fields.update(W, highlight=newest, labels=labels)
        else:
            self.fields.update(W, highlight=newest)
        geometry = getattr(self, "fields_geometry", None)
        if geometry is not None and W is not None and np.size(W):
            th, tw = self.fields._tile_shape(W.shape[0])
            geometry.data = {"tw": [tw], "th": [th], "nc": [self.fields.n_cols],
                             "h": [float(self.fields.source.data["dh"][0])], "n": [self.fields.n_tiles],
                             "newest": [-1 if newest is None else newest]}

    # ------------------------------------------------------------------ layout
    def panel(self) -> pn.viewable.Viewable:
        data_card = pn.Card(_label("Data"), self.data, self.data_info, title="1. Data", collapsible=False,
                            sizing_mode="stretch_width")
        model_card = pn.Card(pn.Row(self.reg, self.bias_lr), pn.Row(self.samples, self.max_hidden),
                             self.evaluate, pn.Row(self.eval_every, self.seed), self.away, self.settings_msg.pane,
                             title="2. Frank-Wolfe (Algorithm 1)", collapsible=False, sizing_mode="stretch_width")
        cd_card = pn.Card(pn.Row(self.fork, self.cd_epochs), self.cd_status.pane,
                          title="3. Compare with CD (§4)", collapsible=False, sizing_mode="stretch_width")
        controls = pn.Column(data_card, model_card, cd_card, width=360)
        bar = pn.Row(self.play, self.pause, self.step, self.reset, self.speed, self.counter, align="center")
        badges = pn.Row(self.run_status.pane, self.select_status.pane, sizing_mode="stretch_width")
        right = pn.Column(bar, self.tools.presenter(), badges,
                          pn.Row(self.ll_curve.view, self.inner_curve.view, sizing_mode="stretch_width"),
                          pn.Row(self.fields.view, self.cd_curve.view, sizing_mode="stretch_width"),
                          sizing_mode="stretch_width")
        page = pn.Column(
            intro_card("Frank-Wolfe: an RBM that grows one hidden unit at a time", INTRO, EQUATIONS, WATCH),
            self.tools.panel(), pn.Row(controls, right, sizing_mode="stretch_width"),
            sizing_mode="stretch_width", name=self.title)
        self.tools.root = page
        return page

    def start(self) -> None:
        if not self._callbacks:
            self._callbacks.append(attach(self.runner, self.on_records, 200))

    # ------------------------------------------------------------------ settings
    def _factory(self):
        return fw_factory(self.data.value, reg=self.reg.value, bias_lr=self.bias_lr.value, samples=self.samples.value,
                          max_hidden=self.max_hidden.value, evaluate=self.evaluate.value,
                          eval_every=self.eval_every.value, away_steps=self.away.value, seed=self.seed.value)

    def _on_data_widget(self) -> None:
        if not self._applying:
            self._on_data()

    @_held
    def _on_data(self) -> None:
        """A data set was chosen: its default settings, then one rebuild."""
        self._applying = True
        try:
            for name, value in DEFAULTS[self.data.value].items():
                getattr(self, name).value = value
        finally:
            self._applying = False
        self._show_data()
        self._rebuild()

    def _show_data(self) -> None:
        images = load_images(self.data.value)
        n, v, t = images.split_sizes
        shape = images.image_shape
        self.data_info.object = (f"**{images.name}**: {n:,} training, {v:,} validation (the stopping rule) and "
                                 f"{t:,} test digits of {shape[0]}×{shape[1]} binary pixels.")
        self.fields.image_shape = shape

    @_held
    def _rebuild(self, strict: bool = False) -> None:
        if self._applying:
            return
        try:
            factory = self._factory()
            self.runner.reset(factory)
        except ValueError as exc:
            self.settings_msg.set("error", f"**Invalid setting:** {exc}")
            self.settings_msg.pane.visible = True
            if strict:
                raise
            return
        self.settings_msg.pane.visible = False
        self._clear()

    def _clear(self) -> None:
        self._last = {}
        self.ll_curve.clear()
        self.inner_curve.clear()
        self.selected_span.visible = self.selected_label.visible = False
        self._mark(None)
        self._draw_fields(None, None)
        if not self._loading:  # a checkpoint load resets the fork only once it has succeeded
            self._reset_cd()
        self._refresh_status()

    def _reset_cd(self, note: str | None = None) -> None:
        self._stop_cd()
        self.cd_curve.clear()
        self.fork_line.visible = False
        self._fork = None
        self.cd_status.set("idle", note or "Pause, then press “Train CD from here” to compare with CD")

    # ------------------------------------------------------------------ buttons
    @_held
    def _play(self) -> None:
        self._mark(None)
        busy = play_or_tell(self.runner)
        self._refresh_status()
        if busy:
            self.run_status.set("warn", busy)

    @_held
    def _pause(self) -> None:
        self.runner.pause()
        self._refresh_status()

    @_held
    def _step(self) -> None:
        self._mark(None)
        self.runner.step_once()
        self._refresh_status()

    @_held
    def _reset(self) -> None:
        self.runner.reset()
        self._clear()

    @_held
    def _fork_cd(self) -> None:
        """Fork the current model into CD-10 beside a random start of the same size."""
        if "W" not in self._last or self._last["W"].shape[1] == 0:
            self.cd_status.set("warn", "Grow at least one hidden unit first.")
            return
        self.runner.pause()
        params = (self._last["W"], self._last["b_vis"], self._last["b_hid"])
        try:
            factory = cd_factory(self.data.value, params, epochs=self.cd_epochs.value, seed=self.seed.value)
        except ValueError as exc:
            self.cd_status.set("error", f"**Cannot start CD:** {exc}")
            return
        self._stop_cd()
        self.cd_curve.clear()
        self.cd_runner = Runner(factory)
        # one epoch per call: RBMTrainer.steps(k) evaluates only its last epoch, and the
        # comparison needs the likelihood of every epoch (an epoch is long enough anyway)
        self.cd_runner.max_batch = 1
        n_hidden = params[0].shape[1]
        train_ll = self._last.get("train")
        self.fork_line.location = train_ll
        self.fork_line.visible = train_ll is not None
        self._fork = {"n_hidden": n_hidden, "iteration": int(self._last.get("iteration", 0))}
        if pn.state.curdoc is not None and pn.state.curdoc.session_context is not None:
            self._callbacks.append(attach(self.cd_runner, self.on_cd_records, 300))
        busy = play_or_tell(self.cd_runner)
        if busy:
            self.cd_status.set("warn", busy)
        else:
            self.cd_status.set("info", f"CD-{CD_K} with {n_hidden} hidden units: from the Frank-Wolfe model "
                                       f"(iteration {self._fork['iteration']}) and from a random start…")
        self._refresh_status()

    def _stop_cd(self) -> None:
        if self.cd_runner is not None:
            self.cd_runner.close(timeout=0.5)
            self.cd_runner = None
            # the CD runner's periodic callback is left to drain an idle runner (cheap)

    # ------------------------------------------------------------------ live updates
    def on_records(self, records) -> None:
        recs = [r for name, r in records if name == "FW"]
        if recs:
            self._stream(recs)
        now = time.monotonic()
        if self._fields_dirty and (not self.runner.playing or now - self._fields_time >= 1.0 / FIELDS_PER_SECOND):
            self._show_fields()
        if recs or now - self._status_time > 1.0:
            self._refresh_status()
            self._status_time = now

    def _stream(self, recs) -> None:
        curves = [fw_curves(r) for r in recs]
        its = [c["iteration"] for c in curves]
        self.ll_curve.stream("units", its, [c["n_hidden"] for c in curves])
        for split in ("train", "valid", "test"):
            pts = [(c["iteration"], c[split]) for c in curves if split in c]
            if pts:
                xs, ys = zip(*pts)
                self.ll_curve.stream(split, xs, ys)
        inner = [(c["iteration"], c["inner"]) for c in curves if c["inner"] is not None and np.isfinite(c["inner"])]
        if inner:
            xs, ys = zip(*inner)
            self.inner_curve.stream("inner", xs, ys)
        bias = [(c["iteration"], c["bias_change"]) for c in curves if c["bias_change"] is not None]
        if bias:
            xs, ys = zip(*bias)
            self.inner_curve.stream("bias", xs, ys)
        last = recs[-1]
        s = last.scalars
        keep = {k: last.arrays[k] for k in ("W", "b_vis", "b_hid") if k in last.arrays}
        # int(): a checkpoint's history carries every scalar as a float
        self._last = {**self._last, **keep, "iteration": int(s["iteration"]), "n_hidden": int(s["n_hidden"]),
                      "removed": int(s.get("removed_unit", -1)), "away": bool(s.get("away_step", False))}
        for c in curves:
            if "train" in c:
                self._last["train"] = c["train"]
        for r in recs:
            sel = r.scalars.get("selected_hidden", -1)
            if sel is not None and sel >= 0 and not self.selected_span.visible:
                self.selected_span.location = r.scalars["iteration"]
                self.selected_label.x = r.scalars["iteration"]
                self.selected_label.text = f"selected: {int(sel)} units"
                self.selected_span.visible = self.selected_label.visible = True
                self._last["selected"] = (int(sel), int(r.scalars["iteration"]))
        self._fields_dirty = True

    def _show_fields(self) -> None:
        self._fields_dirty = False
        self._fields_time = time.monotonic()
        W = self._last.get("W")
        if W is None or W.shape[1] == 0:
            self._draw_fields(None, None)
            return
        newest = None if self._last.get("away") else W.shape[1] - 1
        self._draw_fields(W, newest)

    def on_cd_records(self, records) -> None:
        for name, r in records:
            ll = log_likelihood_of(r)
            if ll is None:
                continue
            key = "fw" if name == "CD (FW init)" else "random"
            self.cd_curve.stream(key, [r.scalars["epoch"]], [ll])
        runner = self.cd_runner
        if runner is not None and not runner.active and self._fork is not None:
            self.cd_status.set("ok", self._cd_summary())

    def _cd_summary(self) -> str:
        ends = {}
        for key, label in (("fw", "from Frank-Wolfe"), ("random", "from random")):
            ys = self.cd_curve.sources[key].data["y"]
            if len(ys):
                ends[label] = float(ys[-1])
        text = f"CD-{CD_K} done ({self._fork['n_hidden']} units). Final training log-likelihood: " + ", ".join(
            f"{k} {v:.2f}" for k, v in ends.items())
        if len(ends) == 2:
            better = "Frank-Wolfe" if ends["from Frank-Wolfe"] > ends["from random"] else "random"
            text += f". The {better} start ends higher."
        return text

    # ------------------------------------------------------------------ status
    def _refresh_status(self) -> None:
        runner = self.runner
        playing = runner.playing
        self.play.disabled = playing or not runner.active
        self.pause.disabled = not playing
        self.fork.disabled = playing or self._last.get("n_hidden", 0) < 1
        n = self._last.get("n_hidden", 0)
        self.counter.object = f"Hidden units: {n}"
        state = runner.states.get("FW")
        if state is not None and state.status in ("diverged", "error"):
            self.run_status.set("error", state.message or state.status)
        elif playing:
            self.run_status.set("info", "Growing…")
        elif state is not None and not runner.active:
            self.run_status.set("ok", f"Finished: {state.message or state.status}")
        elif self._last:
            self.run_status.set("idle", "Paused")
        else:
            self.run_status.set("idle", "Ready: press ▶ Play to grow the RBM")
        if "selected" in self._last:
            sel, it = self._last["selected"]
            self.select_status.set("ok", f"Stopping rule (§4) fired at iteration {it}: selected size {sel} hidden units")
        else:
            self.select_status.set("idle", "Stopping rule (§4): the train/validation gap has not grown yet")
