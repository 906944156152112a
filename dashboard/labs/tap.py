"""The TAP lab: a TAP machine trains live; watch its TAP solutions multiply and spread.

Paper: Tramel, Gabrié, Manoel, Caltagirone & Krzakala (2018), "Deterministic and
generalized framework for unsupervised learning with restricted Boltzmann machines".
"""

from __future__ import annotations

import functools
import math
import time

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, HoverTool
from bokeh.plotting import figure

from dashboard.labs.tap_setup import DATASETS, EXACT_LIMIT, History, isomap_of_history, load_images, trainer_factory
from dashboard.labtools import LabTools, Preset, intro_card
from dashboard.runner import Runner, attach, play_or_tell
from dashboard.views import LiveCurve, StatusBadge
from dashboard.views.histogram import HistogramSlices
from dashboard.views.image_grid import ImageGrid
from dashboard.views.scatter import EmbeddingScatter
from engine import tap_analysis

RADIO = dict(color="primary", variant="outline")
# one step trains a few mini-batches (about 1/8 of an epoch) and then evaluates
SPEEDS = {"1 step/s": 1.0, "5 steps/s": 5.0, "as fast as possible": None}
FIELDS_SHOWN = 100  # receptive fields drawn at most
DENOISE_PS = [0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5]
DENOISE_ROWS = 200  # held-out digits in the live MCC curve
# Per data set starting settings.  Table 1's gamma = 0.005, M = 100 took the paper 100 epochs
# of 600 updates on 60,000 digits; with 1,259 8x8 digits (13 updates an epoch) the weights
# would barely leave W ~ N(0, 0.001^2) in a minute, so the small set starts with more
# updates (M = 20) and a larger step.
# MNIST (the paper's data) is the default: its TAP solutions multiply within a minute of
# training at gamma = 0.05 (10x Table 1, as `boltzlab reproduce tap`; at Table 1's 0.005 the
# weights barely move in the first minutes).  The 8x8 digits are small enough for exact
# answers (the ground-truth panel) but their 16-unit models reach only a few solutions.
DEFAULTS = {"mnist": dict(n_hidden=100, gamma=0.05, batch=100),
            "digits": dict(n_hidden=16, gamma=0.05, batch=20)}
DEFAULT_DATA = "mnist"

INTRO = """
An RBM's likelihood needs its log-partition function ln Z. A **TAP machine** (Tramel et al.,
2018) replaces −ln Z by the **TAP free energy** F<sub>RBM</sub> (eq. 36), a second-order
expansion in the weights, evaluated at the fixed points of the TAP equations (Algorithm 1)
reached from K data rows (eqs. 37–38). Each distinct fixed point is a **TAP solution**.
Training ascends the resulting **TAP log-likelihood** (eq. 39) by the gradient (40) with
momentum η and ℓ₂ decay ε (Algorithm 2, Table 1). On MNIST (the paper's data) the solutions
multiply after a few minutes; the small **8×8 digits** add a ground-truth panel, the exact
log-likelihood beside the TAP and AIS estimates.
"""

EQUATIONS = r"""
$$\ln P(\mathbf{x}) \approx \sum_i \ln P_i(x_i) + \sum_j \ln Z^h_j\Big(\sum_i W_{ij} x_i, 0\Big) + \frac{1}{K} \sum_{k=1}^{K} F_{RBM}(\mathbf{a}_k, \mathbf{c}_k) \qquad (39)$$

$$-F_{RBM} = \sum_i \Big[\ln Z^v_i - B^v_i a^v_i + \frac{A^v_i}{2} \big((a^v_i)^2 + c^v_i\big)\Big] + \sum_j \Big[\text{the same, hidden}\Big] + \sum_{i,j} \Big[W_{ij} a^v_i a^h_j + \frac{1}{2} W_{ij}^2 c^v_i c^h_j\Big] \qquad (36)$$

$$\Delta W_{ij} \approx \frac{1}{M} \sum_{m=1}^{M} x_i^{(m)} f^h_a\Big(\sum_l W_{lj} x_l^{(m)}, 0\Big) - \frac{1}{K} \sum_{k=1}^{K} \Big(a^v_{i,k} a^h_{j,k} + W_{ij} c^v_{i,k} c^h_{j,k}\Big) \qquad (40)$$
"""

WATCH = """
Press **▶ Play**: the TAP log-likelihood (blue) rises while the number of unique TAP
solutions (green, dashed) starts at 1 and grows; their free energies spread into bands (Fig.
5) and the solutions spread over the data in the Isomap views (Figs. 6–7). When more than half
of the K starts end in distinct solutions the badge turns orange: a spin-glass warning sign
(§VII.3; the paper stays below 10 % at Nh = 100). In presentation mode, **Next step** says how
the count and the log-likelihood moved and outlines the hidden unit whose weights moved most.
"""

PRESETS = [
    Preset("The paper's binary MNIST (Nh = 100, Table 1 with γ × 10)",
           {"data": "mnist", "n_hidden": 100, "prior_hid": "bernoulli", "gamma": 0.05, "eps": 0.001, "eta": 0.5,
            "batch": 100, "K": 100, "damping": 0.0, "seed": 0, "speed": "as fast as possible"},
           "Table 1's M = K = 100, ε = 0.001, η = 0.5; γ = 0.05 instead of 0.005 so the weights move within "
           "minutes on this machine. Watch the TAP log-likelihood rise (Fig. 3) and the unique solutions "
           "grow from 1 while staying a small fraction of K (§VII.3)."),
    Preset("More TAP solutions, sooner: momentum η = 0.9, no weight decay",
           {"data": "mnist", "n_hidden": 100, "prior_hid": "bernoulli", "gamma": 0.1, "eps": 0.0, "eta": 0.9,
            "batch": 100, "K": 100, "damping": 0.0, "seed": 0, "speed": "as fast as possible"},
           "The weights grow about ten times faster than in Table 1's setting, and the number of TAP solutions "
           "grows with their variance (§V): within two minutes the count climbs from 1 to about 10 of K = 100, the "
           "free energies spread, and each step takes longer as the TAP iterations need more sweeps to settle. "
           "An explosion to more than half of K (orange badge: a spin-glass phase, §VII.3) needs far longer "
           "training than a live demo."),
    Preset("Quick 8×8 digits with the exact answer",
           {"data": "digits", "n_hidden": 16, "prior_hid": "bernoulli", "gamma": 0.05, "eps": 0.001, "eta": 0.5,
            "batch": 20, "K": 100, "damping": 0.0, "seed": 0, "speed": "as fast as possible"},
           "16 hidden units: small enough for the exact log-likelihood. Watch the TAP estimate (blue) track the "
           "exact value (black) in the ground-truth panel, with AIS and the pseudo-likelihood beside them; "
           "pause and press Compute MCC vs p to denoise (Fig. 8)."),
    Preset("Spin hidden units {−1, +1}, one step a second (for a class)",
           {"data": "digits", "n_hidden": 16, "prior_hid": "spin", "gamma": 0.05, "eps": 0.001, "eta": 0.5,
            "batch": 20, "K": 100, "damping": 0.5, "seed": 0, "speed": "1 step/s"},
           "The general unit priors of §IV: the 8×8 digits model with ±1 hidden units (no exact answer here: it "
           "needs {0,1} units on both sides). One step a second, so each solution that appears and each "
           "receptive field that changes can be pointed at; damping 0.5 keeps the TAP iterations converging."),
]


def _held(method):
    """Run a UI handler inside one ``pn.io.hold`` (see dashboard.labs.fvbm._held)."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with pn.io.hold(freeze=True):
            return method(self, *args, **kwargs)
    return wrapper


def _label(text: str) -> pn.pane.Markdown:
    return pn.pane.Markdown(f"**{text}**", margin=(6, 10, -8, 10))


class TAPLab:
    """Controls + live views around one :class:`Runner` (one per browser session)."""

    title = "TAP"
    key = "tap"
    presets = PRESETS

    def __init__(self) -> None:
        self._applying = False  # apply_settings sets many widgets, then rebuilds once
        self._highlight: int | None = None  # presentation mode: the hidden unit outlined
        self._data_key: str | None = None
        self._build_widgets()
        self._build_views()
        self.history = History()
        self.runner = Runner(self._factory(), watch="tap_log_likelihood")
        self.runner.set_speed(SPEEDS[self.speed.value])
        self._callback = None
        self._last: dict = {}
        self._status_time = 0.0
        self._status_key: tuple = ()
        self._embedding_dirty = False
        self._data_map = None
        self._fields_time = 0.0
        self._epoch_now = 0.0
        self._quiet = False  # set while the lab itself moves the epoch widgets
        self._prepare_data()
        self._rebuild()
        self.tools = LabTools(self)

    # ------------------------------------------------------------------ LabTools contract
    def settings(self) -> dict:
        """The widgets whose values define a run (URL, presets, checkpoints)."""
        return {"data": self.data, "n_hidden": self.n_hidden, "prior_hid": self.prior_hid, "gamma": self.gamma,
                "eps": self.eps, "eta": self.eta, "batch": self.batch, "K": self.K, "damping": self.damping,
                "seed": self.seed, "speed": self.speed}

    @_held
    def apply_settings(self, values: dict) -> None:
        """Set many widgets, then rebuild the run once; ``ValueError`` if the values make no
        valid run (the widgets keep the new values, the run the old one).  A change of data
        set brings that set's defaults for the settings ``values`` does not name."""
        widgets = self.settings()
        data = values.get("data", self.data.value)
        defaults = {k: v for k, v in DEFAULTS[data].items() if k not in values} if data != self.data.value else {}
        self._applying = True
        try:
            for name, value in {**defaults, **values}.items():
                widgets[name].value = value
        finally:
            self._applying = False
        self._prepare_data()
        self._rebuild(strict=True)

    @_held
    def redraw(self, records) -> None:
        """Clear the views and replay ``records`` (a loaded checkpoint's history: scalars on
        every row, the newest arrays on the last), then draw the analysis of that model."""
        self._clear()
        self.on_records(records)
        if self.history.snapshots:
            self._show_histograms()
            self._show_embedding()
        self._show_fields()
        self._status_time = 0.0
        self._refresh_status()

    def step_once(self) -> None:
        self._step()

    def refresh_status(self) -> None:
        self._refresh_status()

    def describe_change(self, name, before, after, before_arrays, after_arrays) -> str | None:
        """Presentation mode: what one step did in the paper's terms -- the TAP
        log-likelihood (eq. 39), the unique TAP solutions, and the hidden unit whose weights
        (a column of W, eq. 40) moved most, outlined in the receptive fields."""
        if "epoch" not in after:
            return None
        batches = int(after.get("iteration", 0) - before.get("iteration", 0))
        parts = [f"<b>Epoch {before.get('epoch', 0.0):.2f} → {after['epoch']:.2f}</b> "
                 f"({batches} mini-batch{'es' if batches != 1 else ''} of M = {self.batch.value})"]
        ll = after.get("tap_log_likelihood")
        if ll is not None and math.isfinite(ll):
            text = f"TAP log-likelihood {ll:.4f} per unit"
            old = before.get("tap_log_likelihood")
            if old is not None and math.isfinite(old):
                gain = ll - old
                text += f" ({'▲' if gain >= 0 else '▼'} {abs(gain):.2g})"
            parts.append(text)
        if "n_solutions" in after:
            n = int(after["n_solutions"])
            k = self.K.value
            if "n_solutions" in before:
                m = int(before["n_solutions"])
                verb = "appeared" if n > m else "merged away" if n < m else ""
                text = f"unique TAP solutions {m} → <b>{n}</b> of K = {k}"
                if verb:
                    text += f" ({abs(n - m)} {verb})"
            else:
                text = f"<b>{n}</b> unique TAP solution{'s' if n != 1 else ''} from K = {k} starts"
            parts.append(text)
        unit = ""
        W1 = after_arrays.get("W")
        W0 = before_arrays.get("W", self._initial_W)
        if W1 is not None and W0 is not None and np.shape(W0) == np.shape(W1):
            moved = np.linalg.norm(np.asarray(W1) - np.asarray(W0), axis=0)
            if np.all(np.isfinite(moved)) and moved.max() > 0:
                j = int(np.argmax(moved))
                self._highlight = j
                shown = self._show_fields(W1, after_arrays.get("b_hid"))
                where = ("outlined in orange in the receptive fields" if shown
                         else f"not among the {FIELDS_SHOWN} fields drawn")
                unit = f"Hidden unit {j}'s weights moved most (by {moved[j]:.3g} in ℓ₂ norm; {where})."
        head, *rest = parts
        text = f"{head}: " + "; ".join(rest) + "." if rest else f"{head}."
        return text + (f"<br>{unit}" if unit else "")

    # ------------------------------------------------------------------ widgets
    def _build_widgets(self) -> None:
        w = pn.widgets
        self.data = w.RadioButtonGroup(label="Data", options=DATASETS, value=DEFAULT_DATA, **RADIO)
        self.n_hidden = w.IntInput(label="Hidden units Nh", value=DEFAULTS[DEFAULT_DATA]["n_hidden"], start=1, end=1000, width=140)
        self.prior_hid = w.RadioButtonGroup(label="Hidden prior", options={"Bernoulli {0,1}": "bernoulli",
                                                                           "Spin {−1,+1}": "spin"},
                                            value="bernoulli", **RADIO)
        self.gamma = w.FloatInput(label="Step γ", value=DEFAULTS[DEFAULT_DATA]["gamma"], start=1e-5, end=1.0, step=0.001, width=100)
        self.eps = w.FloatInput(label="ℓ₂ strength ε", value=0.001, start=0.0, end=1.0, step=0.001, width=100)
        self.eta = w.FloatInput(label="Momentum η", value=0.5, start=0.0, end=0.99, step=0.05, width=100)
        self.batch = w.IntInput(label="Mini-batch M", value=DEFAULTS[DEFAULT_DATA]["batch"], start=1, end=5000, width=100)
        self.K = w.IntInput(label="Solutions K", value=100, start=1, end=2000, width=100)
        self.damping = w.FloatInput(label="Damping", value=0.0, start=0.0, end=0.95, step=0.05, width=100)
        self.seed = w.IntInput(label="Seed", value=0, start=0, width=100)
        self.settings_msg = StatusBadge("", "error", visible=False)

        self.play = w.Button(label="▶ Play", color="success", width=90)
        self.pause = w.Button(label="❚❚ Pause", color="warning", width=90, disabled=True)
        self.step = w.Button(label="Step", color="primary", width=80)
        self.reset = w.Button(label="↺ Reset", color="default", width=90)
        self.speed = w.Select(label="Speed", options=list(SPEEDS), value="as fast as possible", width=170)

        self.data.param.watch(lambda e: self._on_data(), "value")
        for widget in (self.n_hidden, self.prior_hid, self.gamma, self.eps, self.eta, self.batch, self.K,
                       self.damping, self.seed):
            widget.param.watch(lambda e: self._rebuild(), "value")
        # presentation mode's outline marks what the last Next step changed: gone on any other button
        for widget in (self.play, self.step, self.reset):
            widget.on_click(lambda e: self._clear_highlight())
        self.play.on_click(lambda e: self._play())
        self.pause.on_click(lambda e: self._pause())
        self.step.on_click(lambda e: self._step())
        self.reset.on_click(lambda e: self._reset())
        self.speed.param.watch(lambda e: self.runner.set_speed(SPEEDS[e.new]), "value")

        self.rank_by = w.RadioButtonGroup(label="Rank", options={"by spread (ℓ₀.₁, most localized first)": "spread",
                                                                 "by mean activation": "activation"},
                                          value="spread", **RADIO)
        self.rank_by.param.watch(lambda e: self._show_fields(), "value")
        # an IntSlider over snapshots: a DiscreteSlider whose options grow every epoch
        # froze Chromium for seconds on each update (measured)
        self.epoch_slider = w.IntSlider(label="Snapshot shown (0 = first epoch; the right end follows training)",
                                        start=0, end=1, value=0, width=420)
        self.epoch_slider.param.watch(lambda e: None if self._quiet else self._show_embedding(), "value")
        self.denoise_index = w.IntSlider(label="Held-out digit", start=0, end=10, value=0, width=220)
        self.denoise_p = w.FloatSlider(label="Flip probability p", start=0.0, end=0.5, step=0.05, value=0.1, width=220)
        self.denoise_curve_button = w.Button(label="Compute MCC vs p", color="primary", width=170)
        for widget in (self.denoise_index, self.denoise_p):
            widget.param.watch(lambda e: self._show_denoising(), "value")
        self.denoise_curve_button.on_click(lambda e: self._denoise_curve())

    # ------------------------------------------------------------------ views
    def _build_views(self) -> None:
        self.ll_curve = LiveCurve("TAP log-likelihood per unit (Fig. 3)", "epoch",
                                  "TAP log-likelihood per unit (nats)", y2_label="unique TAP solutions (dashed)",
                                  name="tap-ll", height=330)
        self.ll_curve.add_line("ll", "TAP log-likelihood / (Nv + Nh)", "#1f77b4")
        self.ll_curve.add_line("count", "unique solutions", "#2ca02c", axis="right", dash="dashed")
        # Figure 5, top: every solution's free energy per epoch, the Helmholtz estimate, the count
        self.fe_points = ColumnDataSource({"x": [], "y": []}, name="fe-points")
        self.fe_line = ColumnDataSource({"x": [], "y": []}, name="fe-helmholtz")
        fig = figure(title="Free energies of the TAP solutions (Fig. 5)", height=330,
                     sizing_mode="stretch_width", x_axis_label="epoch", y_axis_label="TAP free energy F_TAP (nats)",
                     tools="pan,wheel_zoom,box_zoom,reset,save")
        dots = fig.scatter("x", "y", source=self.fe_points, size=4, alpha=0.25, color="#1f77b4",
                           legend_label="one solution")
        mean = fig.line("x", "y", source=self.fe_line, color="#d62728", line_width=2,
                        legend_label="Helmholtz estimate (mean)")
        fig.add_tools(HoverTool(renderers=[dots], tooltips=[("solution at epoch", "@x{0.00}"),
                                                            ("F_TAP (nats)", "@y{0,0.00}")]))
        fig.add_tools(HoverTool(renderers=[mean], mode="vline", tooltips=[("epoch", "@x{0.00}"),
                                                                          ("Helmholtz estimate (nats)", "@y{0,0.00}")]))
        # the legend under the plot, never over the points (as in the other plots)
        legend = fig.legend[0]
        fig.center.remove(legend)
        legend.update(orientation="horizontal", location="left", label_text_font_size="9pt",
                      border_line_alpha=0.0, background_fill_alpha=0.0)
        fig.add_layout(legend, "below")
        fig.title.text_font_size = "11pt"
        self.fe_figure = fig
        self.fe_pane = pn.pane.Bokeh(fig, sizing_mode="stretch_width")
        self.hist = HistogramSlices("Free energies at four epochs (Fig. 5, bottom)",
                                    x_label="TAP free energy F_TAP (nats)", y_label="density (per nat)",
                                    name="fe-hist")
        self.embedding = EmbeddingScatter("Isomap of the TAP solutions (Fig. 6)", color_label="F_TAP (nats)",
                                          name="isomap")
        self.data_embedding = EmbeddingScatter("Data by digit, and TAP solutions (Fig. 7)",
                                               color_label="digit", overlay_label="TAP solutions", name="isomap-data")
        self.fields = ImageGrid("Receptive fields, the columns of W (Fig. 4)", name="fields", height=620, width=700,
                                tile_label="hidden unit")
        self.truth = LiveCurve("Ground truth (Nh ≤ 20): exact vs estimates", "epoch",
                               "log-likelihood per digit (nats)", name="truth", height=330, legend_cols=2)
        for key, label, color, dash in (("exact", "exact", "#000000", "solid"), ("tap", "TAP (eq. 39)", "#1f77b4", "solid"),
                                        ("ais", "AIS (20 runs, 1,001 βs)", "#ff7f0e", "dashed"),
                                        ("pl", "pseudo-likelihood", "#2ca02c", "dotted")):
            self.truth.add_line(key, label, color, dash=dash)
        self.denoise_grid = ImageGrid("clean · noisy · TAP · OPE · 1-NN", kind="pixels", name="denoise",
                                      height=170, empty_text="", tile_label="image")
        self.mcc_curve = LiveCurve("Denoising: MCC vs flip probability p (Fig. 8)", "flip probability p",
                                   "Matthews correlation (MCC)", name="mcc", height=300, legend_cols=3)
        for key, label, color in (("tap", "TAP", "#1f77b4"), ("ope", "OPE (eq. 46)", "#444444"),
                                  ("nn", "1-NN", "#ff7f0e")):
            self.mcc_curve.add_line(key, label, color)
        for curve in (self.ll_curve, self.truth, self.mcc_curve):  # half-width plots: titles that fit
            curve.figure.title.text_font_size = "11pt"
        self.counter = pn.pane.HTML("Epoch 0", name="epoch-counter", css_classes=["epoch-counter"],
                                    styles={"font-size": "1.4em", "font-weight": "bold"}, width=150)
        self.run_status = StatusBadge("Ready: press ▶ Play to train", "idle", width=330)
        self.solutions_status = StatusBadge("No TAP solutions yet", "idle", width=420)
        self.data_info = pn.pane.Markdown("", styles={"font-size": "0.9em"})
        self.denoise_note = pn.pane.Markdown("", styles={"font-size": "0.9em"})

    # ------------------------------------------------------------------ layout
    def panel(self) -> pn.viewable.Viewable:
        data_card = pn.Card(_label("Data"), self.data, self.data_info, title="1. Data", collapsible=False,
                            sizing_mode="stretch_width")
        model_card = pn.Card(pn.Row(self.n_hidden, self.seed), _label("Hidden prior"), self.prior_hid,
                             pn.Row(self.gamma, self.eps, self.eta), pn.Row(self.batch, self.K, self.damping),
                             self.settings_msg.pane, title="2. Model and training (Table 1)", collapsible=False,
                             sizing_mode="stretch_width")
        controls = pn.Column(data_card, model_card, width=360)
        bar = pn.Row(self.play, self.pause, self.step, self.reset, self.speed, self.counter, align="center")
        badges = pn.Row(self.run_status.pane, self.solutions_status.pane, sizing_mode="stretch_width")
        embed = pn.Column(self.epoch_slider, pn.Row(self.embedding.view, self.data_embedding.view,
                                                    sizing_mode="stretch_width"), sizing_mode="stretch_width")
        fields = pn.Column(self.rank_by, self.fields.view, sizing_mode="stretch_width")
        denoise = pn.Column(pn.pane.Markdown("#### Denoising a held-out digit (§VII.4)"),
                            pn.Row(self.denoise_index, self.denoise_p, self.denoise_curve_button),
                            self.denoise_note, pn.Row(self.denoise_grid.view, self.mcc_curve.view,
                                                      sizing_mode="stretch_width"),
                            sizing_mode="stretch_width")
        right = pn.Column(bar, self.tools.presenter(), badges,
                          pn.Row(self.ll_curve.view, self.fe_pane, sizing_mode="stretch_width"),
                          pn.Row(self.hist.view, self.truth.view, sizing_mode="stretch_width"),
                          embed, fields, denoise, sizing_mode="stretch_width")
        page = pn.Column(
            intro_card("TAP machines: an RBM trained through its TAP free energy, live", INTRO, EQUATIONS, WATCH),
            self.tools.panel(), pn.Row(controls, right, sizing_mode="stretch_width"),
            sizing_mode="stretch_width", name=self.title)
        self.tools.root = page
        return page

    def start(self) -> None:
        if self._callback is None:
            self._callback = attach(self.runner, self.on_records, 200)

    # ------------------------------------------------------------------ settings
    def _factory(self):
        return trainer_factory(self.data.value, n_hidden=self.n_hidden.value, prior_hid=self.prior_hid.value,
                               learning_rate=self.gamma.value, weight_decay=self.eps.value, momentum=self.eta.value,
                               batch_size=self.batch.value, n_chains=self.K.value, damping=self.damping.value,
                               seed=self.seed.value)

    @_held
    def _on_data(self) -> None:
        """The data set changed: its default model settings, then one rebuild."""
        if self._applying:
            return
        self._applying = True
        try:
            for name, value in DEFAULTS[self.data.value].items():
                getattr(self, name).value = value
        finally:
            self._applying = False
        self._prepare_data()
        self._rebuild()

    def _prepare_data(self) -> None:
        """Point the data-dependent views at the current data set (no retraining)."""
        key = self.data.value
        if key == self._data_key:
            return
        images = load_images(key)
        n, v, t = images.split_sizes
        shape = images.image_shape
        self.data_info.object = (f"**{images.name}**: {n:,} training, {v:,} validation and {t:,} test digits of "
                                 f"{shape[0]}×{shape[1]} binary pixels.")
        self.fields.image_shape = shape
        self._data_map = None
        self.denoise_grid.image_shape = shape
        self.denoise_index.end = max(0, min(len(images.X_test), DENOISE_ROWS) - 1)
        self._data_key = key

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
        self.history = History()
        self._last = {}
        self._highlight = None
        self._initial_W = self._trainer_W()
        self._epoch_now = 0.0
        self.ll_curve.clear()
        self.truth.clear()
        self.mcc_curve.clear()
        self.fe_points.data = {"x": [], "y": []}
        self.fe_line.data = {"x": [], "y": []}
        # exact answers need {0,1} units on both sides and a small hidden layer (see tap_setup)
        self.truth.view.visible = self.n_hidden.value <= EXACT_LIMIT and self.prior_hid.value == "bernoulli"
        self._quiet = True
        self.epoch_slider.param.update(end=1, value=0)
        self._quiet = False
        self.hist.update({})
        self.embedding.update(None)
        self.data_embedding.update(None)
        self.fields.update(None)
        self.denoise_grid.update(None)
        self.denoise_note.object = "Train a little, then pick a digit and a flip probability."
        self._refresh_status()

    def _trainer_W(self) -> np.ndarray | None:
        """The new trainer's initial weights (presentation mode compares the first step with
        them); read once after a reset, while the runner is idle."""
        try:
            return np.asarray(self.runner.trainers["TAP"].params[0])
        except Exception:  # e.g. a remote trainer without `params`
            return None

    def _clear_highlight(self) -> None:
        if self._highlight is not None:
            self._highlight = None
            self._show_fields()

    # ------------------------------------------------------------------ buttons
    @_held
    def _play(self) -> None:
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
        self.runner.step_once()
        self._refresh_status()

    @_held
    def _reset(self) -> None:
        self.runner.reset()
        self._clear()

    # ------------------------------------------------------------------ live updates
    def on_records(self, records) -> None:
        recs = [r for name, r in records if name == "TAP"]
        if recs:
            self._stream(recs)
        key = (self.runner.playing, tuple(s.status for s in self.runner.states.values()))
        now = time.monotonic()
        if key != self._status_key or now - self._status_time > 1.0:
            self._refresh_status()
            self._status_key, self._status_time = key, now

    def _stream(self, recs) -> None:
        epoch = np.array([r.scalars["epoch"] for r in recs], dtype=float)
        ll = [(r.scalars["epoch"], r.scalars["tap_log_likelihood"]) for r in recs if "tap_log_likelihood" in r.scalars]
        if ll:
            xs, ys = zip(*ll)
            self.ll_curve.stream("ll", xs, ys)
        counts = [(r.scalars["epoch"], r.scalars["n_solutions"]) for r in recs if "n_solutions" in r.scalars]
        if counts:
            xs, ys = zip(*counts)
            self.ll_curve.stream("count", xs, ys)
        new_epoch = False
        for r in recs:
            s = r.scalars
            if "solution_free_energies" in r.arrays:
                fe = np.asarray(r.arrays["solution_free_energies"], dtype=float)
                self.fe_points.stream({"x": np.full(fe.size, s["epoch"]), "y": fe}, rollover=20_000)
                new_epoch |= self.history.add(r)
            # the Helmholtz estimate is a scalar: a loaded checkpoint's history redraws all of it
            if "helmholtz_free_energy" in s:
                self.fe_line.stream({"x": [s["epoch"]], "y": [s["helmholtz_free_energy"]]}, rollover=5000)
            if "ll_exact" in s:
                for key, name in (("exact", "ll_exact"), ("tap", "ll_tap"), ("ais", "ll_ais"),
                                  ("pl", "pseudo_likelihood")):
                    if name in s:
                        self.truth.stream(key, [s["epoch"]], [s[name]])
            if "W" in r.arrays:
                self._last = {**r.arrays, "epoch": s["epoch"], "n_solutions": s.get("n_solutions"),
                              "damping": s.get("damping")}
        self._epoch_now = float(epoch[-1])
        if new_epoch:
            self._update_epoch_widgets()
            self._embedding_dirty = True
        # images and text re-layout parts of the page in the browser: at most once a second
        if "W" in self._last and time.monotonic() - self._fields_time > 1.0:
            self._show_fields()
        if self._embedding_dirty and (not self.runner.playing or time.monotonic() - getattr(self, "_embed_time", 0) > 5):
            self._show_embedding()

    def _update_epoch_widgets(self) -> None:
        self._quiet = True
        try:
            self._move_epoch_widgets()
        finally:
            self._quiet = False
        self._show_histograms()

    def _move_epoch_widgets(self) -> None:
        last = len(self.history.snapshots) - 1
        follow = self.epoch_slider.value >= self.epoch_slider.end - 1 or self.epoch_slider.value == 0 and last <= 1
        end = max(1, last)  # a slider needs end > start
        self.epoch_slider.param.update(end=end, value=last if follow else min(self.epoch_slider.value, last))

    def _show_histograms(self) -> None:
        """Figure 5's slices: the first snapshot, two in between and the latest."""
        snaps = self.history.snapshots
        picks = sorted({round(f * (len(snaps) - 1)) for f in (0.0, 1 / 3, 2 / 3, 1.0)}) if snaps else []
        self.hist.update({f"epoch {snaps[i].epoch:.2f}": snaps[i].free_energies for i in picks})

    def _show_embedding(self) -> None:
        self._embedding_dirty = False
        self._embed_time = time.monotonic()
        snaps = self.history.snapshots
        if not snaps:
            return
        index = min(self.epoch_slider.value, len(snaps) - 1)
        fitted = isomap_of_history(self.history)
        snap = snaps[index]
        self.embedding.update(fitted.coords[index], snap.free_energies,
                              labels=[f"solution {i}" for i in range(len(snap.free_energies))])
        self.embedding.figure.title.text = f"TAP solutions at epoch {snap.epoch:.2f} (Fig. 6)"
        self.embedding.figure.xaxis[0].axis_label = f"Isomap 1 (fitted at epoch {snaps[fitted.fit_epoch].epoch:.2f})"
        images = load_images(self.data.value)
        y = images.y_train[:1000]
        if self._data_map is None:  # fitted once per data set (the costly part)
            self._data_map = tap_analysis.DataMap(images.X_train[:1000])
        both = self._data_map.embed(snap.solutions_vis)
        self.data_embedding.update(both.data_coords, y[both.data_index], labels=[f"digit {d}" for d in y[both.data_index]],
                                   overlay_xy=both.solution_coords)

    def _show_fields(self, W: np.ndarray | None = None, b_hid: np.ndarray | None = None) -> bool:
        """Draw the receptive fields (the current model's, or ``W``), ranked, the
        presentation-mode unit outlined; True when that unit is among those drawn."""
        self._fields_time = time.monotonic()
        if W is None:
            W, b_hid = self._last.get("W"), self._last.get("b_hid")
        if W is None:
            return False
        W = np.asarray(W, dtype=float)
        images = load_images(self.data.value)
        by = self.rank_by.value
        if by == "activation" and b_hid is not None:
            means = (1.0 / (1.0 + np.exp(-(images.X_train[:1000] @ W + b_hid)))).mean(0)
            order, _ = tap_analysis.rank_receptive_fields(W, hidden_means=means, by="activation")
        else:
            order, _ = tap_analysis.rank_receptive_fields(W, by="spread")
        rank = np.empty(len(order), dtype=int)
        rank[np.asarray(order)] = np.arange(len(order))
        what = "by spread" if by == "spread" else "by mean activation"
        labels = [f"hidden unit {j}, rank {rank[j] + 1} {what}" for j in range(W.shape[1])]
        highlight = self._highlight if self._highlight is not None and self._highlight < W.shape[1] else None
        self.fields.update(W, order=order, limit=FIELDS_SHOWN, highlight=highlight, labels=labels)
        return highlight is not None and rank[highlight] < FIELDS_SHOWN

    # ------------------------------------------------------------------ denoising
    def _denoiser(self):
        W, b_vis, b_hid = self._last["W"], self._last["b_vis"], self._last["b_hid"]

        return tap_analysis.tap_denoiser(W, b_vis, b_hid, damping=max(0.5, self.damping.value))

    @_held
    def _show_denoising(self) -> None:
        if "W" not in self._last:
            self.denoise_note.object = "Train a little first: the denoiser is the current model."
            return
        images = load_images(self.data.value)
        x = images.X_test[self.denoise_index.value: self.denoise_index.value + 1]
        p = float(self.denoise_p.value)
        y = tap_analysis.binary_symmetric_channel(x, p, seed=self.denoise_index.value)
        m = images.X_train.mean(0)
        tap_est = self._denoiser()(y, p)
        ope = tap_analysis.ope_denoise(y, m, p)
        nn = tap_analysis.nearest_neighbour_denoise(y, images.X_train)
        tiles = np.vstack([x, y, tap_est, ope, nn]).T
        self.denoise_grid.update(tiles, n_cols=5, labels=["clean test digit", f"noisy: pixels flipped with p = {p:g}",
                                                          "TAP posterior mean", "optimal pointwise estimator (eq. 46)",
                                                          "nearest training digit (1-NN)"])
        self.denoise_note.object = (f"Digit {images.y_test[self.denoise_index.value]} with p = {p:g}: "
                                    "posterior means ⟨x⟩ (white 0, black 1) of the TAP machine with the channel field "
                                    "added to the visible prior, of the optimal pointwise estimator, and the nearest "
                                    "training digit.")

    @_held
    def _denoise_curve(self) -> None:
        if "W" not in self._last:
            self.denoise_note.object = "Train a little first: the denoiser is the current model."
            return
        images = load_images(self.data.value)
        X = images.X_test[:DENOISE_ROWS]
        curve = tap_analysis.denoising_curve(X, images.X_train, DENOISE_PS, seed=0, tap_denoiser=self._denoiser())
        # replace (not stream): a clear and a stream in one hold reached the browser as an append
        for key, name in (("tap", "mcc_tap"), ("ope", "mcc_ope"), ("nn", "mcc_1nn")):
            self.mcc_curve.sources[key].data = {"x": list(curve["p"]), "y": list(curve[name])}
        self.mcc_curve._empty.visible = False
        self.mcc_curve.figure.title.text = f"MCC vs p, {len(X)} test digits, epoch {self._last['epoch']:.2f} (Fig. 8)"
        self._show_denoising()

    # ------------------------------------------------------------------ status
    def _refresh_status(self) -> None:
        self.counter.object = f"Epoch {self._epoch_now:.2f}"
        runner = self.runner
        playing = runner.playing
        self.play.disabled = playing or not runner.active
        self.pause.disabled = not playing
        states = runner.states
        state = states.get("TAP")
        if state is not None and state.status in ("diverged", "error"):
            self.run_status.set("error", state.message or state.status)
        elif playing:
            self.run_status.set("info", "Training…")
        elif state is not None and not runner.active:
            self.run_status.set("ok", f"Finished: {state.message or state.status}")
        elif self.history.snapshots or self._last:
            self.run_status.set("idle", "Paused")
        else:
            self.run_status.set("idle", "Ready: press ▶ Play to train")
        snaps = self.history.snapshots
        if snaps:
            s = snaps[-1]
            n = len(s.free_energies)
            frac = n / max(1, self.K.value)
            level = "warn" if frac > 0.5 else "ok"
            damping = self._last.get("damping")
            raised = (f"; damping raised to {damping:.2f} so the TAP iterations converge"
                      if damping is not None and damping > self.damping.value + 1e-9 else "")
            self.solutions_status.set(level, f"{n} unique TAP solution{'s' if n != 1 else ''} from {self.K.value} starts ({frac:.0%})"
                                      + (": many distinct solutions, a spin-glass warning sign" if frac > 0.5 else "")
                                      + raised)
        else:
            self.solutions_status.set("idle", "No TAP solutions yet")
