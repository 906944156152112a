"""The TAP lab: a TAP machine trains live; watch its TAP solutions multiply and spread.

Paper: Tramel, Gabrié, Manoel, Caltagirone & Krzakala (2018), "Deterministic and
generalized framework for unsupervised learning with restricted Boltzmann machines".

The views draw from Records only.  What takes longer than a few milliseconds -- the
Isomap of the solutions (Fig. 6), the data Isomap (Fig. 7) and the denoising (Fig. 8) --
runs as analysis jobs (:mod:`boltzlab.dashboard.jobs`, functions of :mod:`boltzlab.dashboard.labs.tap_setup`)
and is drawn on a later tick; the views say "Computing…" meanwhile.
"""

from __future__ import annotations

import collections

import functools
import math
import time
from typing import Any

import numpy as np
import panel as pn
import param
from bokeh.models import ColumnDataSource, HoverTool, LassoSelectTool, TapTool
from bokeh.plotting import figure

from .base import RADIO, Lab, held, label, speed_setting
from .image_data import UPLOAD, ImageData, ImageUploads, image_width_setting
from .tap_setup import (DATASETS, EXACT_LIMIT, SAMPLE_CHAINS, SAMPLE_SWEEPS, History,
                        check_work, data_embedding, denoise_curve,
                        denoise_digit, describe_images, isomap_rows,
                        solution_embedding)
from .tap_setup import trainer_factory as build_trainers
from ..labtools import Preset
from ..views import LiveCurve, StatusBadge
from ..views.histogram import HistogramSlices
from ..views.beside import PIN_TITLE, Beside
from ..views.image_grid import ImageGrid
from ..views.pinned import PinLayer
from ..views.scatter import EmbeddingScatter
from ...engine import tap_analysis

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
# A user's images (at most 20,000, often a few hundred) start as the small digits do: 16
# hidden units keep the exact answer when the images have few pixels.
DEFAULTS = {"mnist": dict(n_hidden=100, gamma=0.05, batch=100),
            "digits": dict(n_hidden=16, gamma=0.05, batch=20),
            UPLOAD: dict(n_hidden=16, gamma=0.05, batch=20)}
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
solutions (green) starts at 1 and grows; their free energies spread into bands (Fig. 5) and
the solutions spread over the data in the Isomap views (Figs. 6–7). Each count solves from K
fresh random starts, so it jumps between points (light, dashed): read its running mean (solid).
When more than half of the K starts end in distinct solutions the badge turns orange: a
spin-glass warning sign (§VII.3). The paper reports under 10 % distinct solutions at Nh = 100
with Table 1's step γ = 0.005; the lab's default γ = 0.05 grows the weights ten times faster,
and the count grows with their variance (§V), so 10–20 % (16 % was seen at epoch 13) is what
this setting shows, not a contradiction of the paper. In presentation mode, **Next step** says how
the count and the log-likelihood moved and outlines the hidden unit whose weights moved most.
"""

#: the points of the running mean drawn over the raw solution counts
COUNT_WINDOW = 8

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

RANK_ROWS = 1000  # training digits behind "rank by mean activation" (a 1000 x Nv x Nh product: ~5-8 ms on MNIST)
FIELDS_SECONDS = 1.0  # images re-layout parts of the page in the browser: at most once a second while playing
# the stage tabs whose image grids are drawn only in view while playing (Lab.in_view)
ISOMAP_TAB, FIELDS_TAB, SAMPLES_TAB, HISTOGRAMS_TAB = "Isomap", "Fields (Fig. 4)", "Samples", "Histograms"
EMBED_SECONDS = 5.0  # while training, the solutions' Isomap (~3 s on MNIST) is refitted at most this often
COMPUTING = "Computing…"
# Figs. 6-7 once the run has started, until their first Isomap is drawn: the TAP solutions come
# with the first step, their Isomap (seconds on MNIST, a minute on a busy machine) as a job on a
# worker after it.  In the plots two short lines (a third of the stage is narrow at 1280x720 in
# presentation mode: the plot area cuts a label), beside the slider the sentence.
PLAY_TEXT = "Press ▶ Play\nto start"
ISOMAP_WAITING = "Isomap after\nstep 1…"
ISOMAP_COMPUTING = "Computing\ntheir Isomap…"
ISOMAP_WAITING_NOTE = "The first step is finding the TAP solutions; their Isomap follows."
ISOMAP_COMPUTING_NOTE = "Computing the Isomap of the TAP solutions (Fig. 6) and of the data (Fig. 7)…"
SOLUTIONS_SHOWN = 36  # TAP solutions drawn as images at most (the lowest free energies, or the selected)
ACTIVE_UNITS = 5  # hidden units outlined in the receptive fields: the most active in the solutions selected
FIELDS_TITLE = "Receptive fields, the columns of W (Fig. 4)"


class TAPLab(ImageUploads, Lab):
    """A TAP machine trained live, with its TAP solutions counted, histogrammed and mapped."""

    key = "tap"
    kernels = ("rbm", "tap")
    title = "TAP"
    heading = "TAP machines: an RBM trained through its TAP free energy, live"
    summary = ("A TAP machine trains an RBM by ascending its TAP log-likelihood (eq. 39): watch the number of "
               "TAP solutions grow from 1 and their free energies spread as the weights grow.")
    intro, equations, watch = INTRO, EQUATIONS, WATCH
    presets = PRESETS
    speeds = SPEEDS
    watch_scalar = "tap_log_likelihood"
    counter_width = 150
    headline = ("tap_log_likelihood", "TAP log-lik.")
    pictures_beside = True
    short_labels = {"n_hidden": "Nh", "gamma": "γ", "eps": "ε", "eta": "η", "batch": "M", "prior_hid": "prior"}

    # ------------------------------------------------------------------ settings (URL keys)
    data = param.Selector(default=DEFAULT_DATA, objects=DATASETS, label="Data",
                          doc="The bundled binary digits (the paper's MNIST, or 8×8 digits small enough for exact "
                              "answers), or your own images (an .npz or CSV upload).")
    image_width = image_width_setting()
    n_hidden = param.Integer(DEFAULTS[DEFAULT_DATA]["n_hidden"], bounds=(1, 1000), label="Hidden units Nh",
                             doc="Hidden units of the RBM.")
    prior_hid = param.Selector(default="bernoulli", objects={"Bernoulli {0,1}": "bernoulli", "Spin {−1,+1}": "spin"},
                               label="Hidden prior", doc="The hidden units' prior (§IV): {0,1} or {−1,+1}.")
    gamma = param.Number(DEFAULTS[DEFAULT_DATA]["gamma"], bounds=(1e-5, 1.0), step=0.001, label="Step γ",
                         doc="The learning rate of Algorithm 2 (Table 1: 0.005).")
    eps = param.Number(0.001, bounds=(0.0, 1.0), step=0.001, label="ℓ₂ strength ε", doc="Weight decay (Table 1).")
    eta = param.Number(0.5, bounds=(0.0, 0.99), step=0.05, label="Momentum η", doc="Momentum (Table 1).")
    batch = param.Integer(DEFAULTS[DEFAULT_DATA]["batch"], bounds=(1, 5000), label="Mini-batch M",
                          doc="Training rows per gradient step.")
    K = param.Integer(100, bounds=(1, 2000), label="Solutions K",
                      doc="TAP chains: random starts whose fixed points are the TAP solutions (eqs. 37–38).")
    damping = param.Number(0.0, bounds=(0.0, 0.95), step=0.05, label="Damping",
                           doc="Damping of the TAP iterations (Algorithm 1).")
    seed = param.Integer(0, bounds=(0, None), label="Seed", doc="Seeds the weights, mini-batches and chains.")
    speed = speed_setting(SPEEDS, "as fast as possible")
    widget_options = {"data": dict(type=pn.widgets.RadioButtonGroup, **RADIO),
                      "prior_hid": dict(type=pn.widgets.RadioButtonGroup, **RADIO),
                      "image_width": dict(width=160),
                      # two to a row, as in the Frank-Wolfe lab: three 100 px inputs to a row
                      # left "Momentum η"'s help icon cut at the sidebar's edge (1440x900)
                      **{k: dict(width=140) for k in
                         ("n_hidden", "seed", "gamma", "eps", "eta", "batch", "K", "damping")},
                      "speed": dict(width=190)}

    def build_controls(self) -> None:
        self.data_info = pn.pane.HTML("", styles={"font-size": "0.9em"})  # describe_images: the name escaped
        self.uploads = ImageData(self)  # "Upload": the upload widget, its job, the run's data hash
        self._prepared: tuple[tuple, Any] | None = None  # the data chosen: ((data, hash, shape), ImageSet)
        self._run_prepared: tuple[tuple, Any] | None = None  # ... and the current run's (trainer_factory)
        self._data_key: str | None = None  # ... and the current run's data setting (set by clear())
        self._data_ref: Any = None  # ... and what its jobs get (image_setup.DataRef)
        self.images = None

    def controls_panel(self) -> pn.viewable.Viewable:
        w = self.widgets
        data_card = pn.Card(label("Data"), w["data"], *self.uploads.widgets(), w["image_width"], self.data_info,
                            title="1. Data", collapsible=False, sizing_mode="stretch_width")
        model_card = pn.Card(pn.Row(w["n_hidden"], w["seed"]), label("Hidden prior"), w["prior_hid"],
                             pn.Row(w["gamma"], w["eps"]), pn.Row(w["eta"], w["batch"]), pn.Row(w["K"], w["damping"]),
                             title="2. Model and training (Table 1)", collapsible=False,
                             sizing_mode="stretch_width")
        return pn.Column(data_card, model_card, sizing_mode="stretch_width", margin=0)

    def prepare(self, changed: set[str], strict: bool = False) -> None:
        """Load the data set when it changed: a bundled set, or the uploaded images in the
        shape ``image_width`` gives them (the views follow once the new run is installed, in
        :meth:`clear`: a refused setting keeps the old run, drawn on its own data)."""
        self.uploads.update_visibility()
        images = self.uploads.chosen()  # NotReady before a file is uploaded
        # an upload: its hash and shape (and whether the shape is a guessed square)
        key = (self.data, images.meta.get("sha256"), images.image_shape, bool(images.meta.get("square_guess")))
        if self._prepared is not None and self._prepared[0] == key:
            return
        self._prepared = (key, images)
        self.data_info.object = describe_images(images)

    def implied(self, values, *, fresh: bool = False) -> dict[str, Any]:
        """A change of data set brings that set's default model settings."""
        data = values.get("data")
        if data is None or (not fresh and data == self._data_key):  # the data set of the current run
            return {}
        return dict(DEFAULTS.get(data, {}))

    def check_work(self) -> None:
        images = self.uploads.for_budget()
        if images is None:
            return  # nothing uploaded yet: prepare says so
        check_work(images, n_hidden=self.n_hidden, n_chains=self.K, batch_size=self.batch,
                   prior_hid=self.prior_hid)

    def build_refused(self) -> None:
        self._run_prepared = self._kept_run
        self.uploads.set_run(self._run_prepared[1])

    def trainer_factory(self):
        if not (hasattr(self, "runner") and self.runner.building):  # a refused build brings it back
            self._kept_run = getattr(self, "_run_prepared", self._prepared)
        self._run_prepared = self._prepared  # the run's data: the views' and the checkpoint's
        images = self._prepared[1]
        self.uploads.set_run(images)
        return build_trainers(self.uploads.ref(images), n_hidden=self.n_hidden, prior_hid=self.prior_hid,
                              learning_rate=self.gamma, weight_decay=self.eps, momentum=self.eta,
                              batch_size=self.batch, n_chains=self.K, damping=self.damping,
                              seed=self.seed)

    # ------------------------------------------------------------------ views
    def build_views(self) -> None:
        self._highlight: int | None = None  # presentation mode: the hidden unit outlined
        self._last: dict[str, Any] = {}  # the newest Record's arrays, epoch, solutions count and damping
        self._idle_text: dict[Any, str] = {}  # a view's "empty" text while it says "Computing…"
        self._quiet = False  # set while the lab itself moves its sliders
        self.history = History()
        self.ll_curve = LiveCurve("TAP log-likelihood (Fig. 3)", "epoch",
                                  "TAP log-lik. per unit (nats)", y2_label="unique solutions",
                                  name="tap-ll", height=330)
        # short legend entries: the title and the axes say "TAP" and "unique" (at 1280x720 in
        # presentation mode the two long ones ran 7 px past the half-width plot's edge)
        self.ll_curve.add_line("ll", "TAP log-likelihood", "#1f77b4", legend="log-likelihood")
        # each count solves from K fresh random starts, so it jumps from point to point: the
        # raw counts faint, their running mean (the trend) solid
        # (one legend entry for both: three entries overflowed the half-width plot at 1280x720)
        self.ll_curve.add_line("count", "unique solutions", "#98df8a", axis="right", dash="dashed", width=1.2,
                               legend="solutions")
        self.ll_curve.add_line("count_trend", f"solutions, mean of {COUNT_WINDOW}", "#2ca02c", axis="right",
                               legend="solutions")
        # Figure 5, top: every solution's free energy per epoch, the Helmholtz estimate
        self.fe_points = ColumnDataSource({"x": [], "y": []}, name="fe-points")
        self.fe_line = ColumnDataSource({"x": [], "y": []}, name="fe-helmholtz")
        fig = figure(title="TAP free energies (Fig. 5)", height=330,
                     sizing_mode="stretch_width", x_axis_label="epoch", y_axis_label="TAP free energy F_TAP (nats)",
                     tools="pan,wheel_zoom,box_zoom,reset,save")
        dots = fig.scatter("x", "y", source=self.fe_points, size=4, alpha=0.25, color="#1f77b4",
                           legend_label="one solution")
        mean = fig.line("x", "y", source=self.fe_line, color="#d62728", line_width=2,
                        legend_label="Helmholtz (mean)")
        fig.add_tools(HoverTool(renderers=[dots], tooltips=[("solution at epoch", "@x{0.00}"),
                                                            ("F_TAP (nats)", "@y{0,0.00}")]))
        fig.add_tools(HoverTool(renderers=[mean], mode="vline", tooltips=[("epoch", "@x{0.00}"),
                                                                          ("Helmholtz estimate (nats)", "@y{0,0.00}")]))
        # the legend under the plot, never over the points, in Fig. 3's style (level with it)
        legend = fig.legend[0]
        fig.center.remove(legend)
        legend.update(orientation="horizontal", location="left", label_text_font_size="9pt",
                      glyph_width=20, glyph_height=12, label_height=12, spacing=12, padding=2, margin=2,
                      border_line_alpha=0.0, background_fill_alpha=0.0)
        fig.add_layout(legend, "below")
        fig.title.text_font_size = "11pt"
        self.fe_figure = fig
        self.fe_pane = pn.pane.Bokeh(fig, sizing_mode="stretch_width")
        self.hist = HistogramSlices("Free energies at four epochs (Fig. 5, bottom)",
                                    x_label="TAP free energy F_TAP (nats)", y_label="density (per nat)",
                                    name="fe-hist")
        self.embedding = EmbeddingScatter("TAP solutions (Fig. 6)", color_label="F_TAP (nats)",
                                          name="isomap", empty_text=PLAY_TEXT)
        # select solutions in Fig. 6 (tap: one, shift-tap: more; lasso: a region) to draw them as images
        self.embedding.figure.add_tools(TapTool(), LassoSelectTool())
        self.embedding.source.selected.on_change("indices", self._on_select)
        self._scatter_rows = np.zeros(0, dtype=int)  # the snapshot's solution behind each point of Fig. 6
        self._selection: np.ndarray | None = None  # the solutions selected there (None: none)
        self._active: np.ndarray | None = None  # the hidden units most active in them (outlined in the fields)
        self._isomap_text = ""  # what Fig. 6's fit was: said beside the slider
        self._isomap_pending = ""  # ... and before the first fit, once the run has started: what it waits for
        # two lines high whatever it says (or not), lower than the slider beside it: what it says
        # never moves the figures under it
        self.isomap_note = pn.pane.Markdown("", styles={"font-size": "0.9em", "line-height": "1.3",
                                                        "height": "2.6em", "overflow": "hidden"},
                                            sizing_mode="stretch_width", margin=(0, 10), css_classes=["isomap-note"])
        self.data_embedding = EmbeddingScatter("Data and solutions (Fig. 7)", color_label="digit",
                                               overlay_label="TAP solutions", name="isomap-data",
                                               empty_text=PLAY_TEXT)
        self.fields = ImageGrid(FIELDS_TITLE, name="fields", height=620, width=700,
                                tile_label="hidden unit")
        self.truth = LiveCurve("Ground truth (Nh ≤ 20): exact vs estimates", "epoch",
                               "log-likelihood per digit (nats)", name="truth", height=330, legend_cols=2)
        for key, text, color, dash in (("exact", "exact", "#000000", "solid"), ("tap", "TAP (eq. 39)", "#1f77b4", "solid"),
                                       ("ais", "AIS (20 runs)", "#ff7f0e", "dashed"),
                                       ("pl", "pseudo-likelihood", "#2ca02c", "dotted")):
            self.truth.add_line(key, text, color, dash=dash)
        # pinned runs (issue 47): the TAP log-likelihood, the Helmholtz estimate, the exact one
        self._pin_layers = {"ll": self.ll_curve.add_pins(), "helmholtz": PinLayer(self.fe_figure),
                            "exact": self.truth.add_pins()}
        # a look inside (issue 26): what the model generates, and its TAP solutions as images
        self.samples_grid = ImageGrid(f"Model samples: {SAMPLE_CHAINS} persistent Gibbs chains, "
                                      f"{SAMPLE_SWEEPS} sweeps a step (white 0, black 1)", kind="pixels",
                                      name="tap-samples", height=560, width=560, tile_label="chain")
        self.solutions_grid = ImageGrid("TAP solutions as images (a_v)", kind="pixels", name="tap-solution-images",
                                        height=360, width=300, tile_label="solution")
        # a pin's pictures beside the live ones (issue 47): half the width each
        self.fields_beside = Beside(self.fields, ImageGrid(PIN_TITLE, name="fields-pin", height=620, width=350,
                                                           tile_label="hidden unit"), width=350)
        self.samples_beside = Beside(self.samples_grid, ImageGrid(PIN_TITLE, kind="pixels", name="tap-samples-pin",
                                                                  height=560, width=400, tile_label="chain"), width=400)
        self.solutions_beside = Beside(self.solutions_grid, ImageGrid(PIN_TITLE, kind="pixels", name="tap-solutions-pin",
                                                                      height=360, width=150, tile_label="solution"),
                                       width=150, short="live")
        self.denoise_grid = ImageGrid("clean · noisy · TAP · OPE · 1-NN", kind="pixels", name="denoise",
                                      height=170, empty_text="", tile_label="image")
        self.mcc_curve = LiveCurve("Denoising: MCC vs flip probability p (Fig. 8)", "flip probability p",
                                   "Matthews correlation (MCC)", name="mcc", height=300, legend_cols=3,
                                   empty_text="Press Compute MCC vs p")  # its own button, not ▶ Play
        for key, text, color in (("tap", "TAP", "#1f77b4"), ("ope", "OPE (eq. 46)", "#444444"),
                                 ("nn", "1-NN", "#ff7f0e")):
            self.mcc_curve.add_line(key, text, color)
        for curve in (self.ll_curve, self.truth, self.mcc_curve):  # half-width plots: titles that fit
            curve.figure.title.text_font_size = "11pt"
        self.solutions_status = StatusBadge("No TAP solutions yet", "idle", name="tap-solutions", one_line=True)
        self.denoise_note = pn.pane.Markdown("", styles={"font-size": "0.9em"})

        w = pn.widgets
        self.rank_by = w.RadioButtonGroup(label="Rank", options={"by spread (ℓ₀.₁, most localized first)": "spread",
                                                                 "by mean activation": "activation"},
                                          value="spread", **RADIO)
        self.rank_by.param.watch(lambda e: (self._show_fields(), self.redraw_beside()), "value")
        # an IntSlider over snapshots: a DiscreteSlider whose options grow every epoch
        # froze Chromium for seconds on each update (measured)
        self.epoch_slider = w.IntSlider(label="Snapshot shown (0 = first epoch; the right end follows training)",
                                        start=0, end=1, value=0, width=420)
        self.epoch_slider.param.watch(self._on_epoch_slider, "value")
        self.denoise_index = w.IntSlider(label="Held-out digit", start=0, end=10, value=0, width=220)
        self.denoise_p = w.FloatSlider(label="Flip probability p", start=0.0, end=0.5, step=0.05, value=0.1, width=220)
        self.denoise_curve_button = w.Button(label="Compute MCC vs p", color="primary", width=210)
        for widget in (self.denoise_index, self.denoise_p):
            widget.param.watch(lambda e: None if self._quiet else self._show_denoising(), "value")
        self.denoise_curve_button.on_click(lambda e: self._denoise_curve())

    def main_view(self) -> pn.viewable.Viewable:
        return pn.Row(self.ll_curve.view, self.fe_pane, sizing_mode="stretch_width")

    def stage(self) -> dict[str, pn.viewable.Viewable]:
        embed = pn.Column(pn.Row(self.epoch_slider, self.isomap_note, sizing_mode="stretch_width"),
                          pn.Row(self.embedding.view, self.solutions_beside.view, self.data_embedding.view,
                                 sizing_mode="stretch_width"),
                          sizing_mode="stretch_width")
        fields = pn.Column(self.rank_by, self.fields_beside.view, sizing_mode="stretch_width")
        denoise = pn.Column(pn.Row(self.denoise_index, self.denoise_p, self.denoise_curve_button),
                            self.denoise_note, pn.Row(self.denoise_grid.view, self.mcc_curve.view,
                                                      sizing_mode="stretch_width"),
                            sizing_mode="stretch_width")
        return {"Figs. 3 · 5": self.main_view(),
                HISTOGRAMS_TAB: pn.Row(self.hist.view, self.truth.view, sizing_mode="stretch_width"),
                ISOMAP_TAB: embed, FIELDS_TAB: fields, "Denoising": denoise, SAMPLES_TAB: self.samples_beside.view}

    def badges(self) -> list:
        return [self.solutions_status.pane]

    def _show_data(self) -> None:
        """Point the data-dependent views at the data set of the run just installed."""
        key, images = self._run_prepared  # not self._prepared: a refused change prepared data it never ran on
        self._data_key = key[0]
        self._data_ref = self.uploads.ref(images)
        if images is self.images:
            return
        self.images = images
        self._rank_rows = images.X_train[:RANK_ROWS]
        for grid in (self.fields, self.denoise_grid, self.samples_grid, self.solutions_grid):
            grid.image_shape = images.image_shape
        end = max(0, min(len(images.X_test), DENOISE_ROWS) - 1)
        self._quiet = True  # no denoising of the previous model on the new data
        try:
            self.denoise_index.param.update(end=end, value=min(self.denoise_index.value, end))
        finally:
            self._quiet = False

    def clear(self) -> None:
        self._show_data()
        self.history = History()
        self._counts: collections.deque[float] = collections.deque(maxlen=COUNT_WINDOW)
        self._last = {}
        self._highlight = None
        self._epoch_now = 0.0
        self._fit: tuple[list, list, int] | None = None  # the newest Fig. 6 job: (snapshots, coords, fit index)
        self._embedding_dirty = False  # new snapshots since the last Isomap job was submitted
        self._embed_time = -math.inf
        self._fields_stale = False  # newer weights than the receptive fields drawn
        self._fields_time = -math.inf
        self._solutions_stale = False  # newer TAP solutions than the images drawn
        self._histograms_stale = False  # a newer snapshot than the histograms drawn
        self._scatter_rows = np.zeros(0, dtype=int)
        self._selection = None
        self._active = None
        self._isomap_text = ""
        self._isomap_pending = ""
        self.isomap_note.object = ""
        self.fields.figure.title.text = FIELDS_TITLE
        self.ll_curve.clear()
        self.truth.clear()
        self.mcc_curve.clear()
        self.fe_points.data = {"x": [], "y": []}
        self.fe_line.data = {"x": [], "y": []}
        # exact answers need {0,1} units on both sides and a small hidden layer (see tap_setup)
        self.truth.view.visible = self.n_hidden <= EXACT_LIMIT and self.prior_hid == "bernoulli"
        self._quiet = True
        try:
            self.epoch_slider.param.update(end=1, value=0)
        finally:
            self._quiet = False
        for view, text in self._idle_text.items():
            view.placeholder.reset(text)
        self.hist.update({})
        self.embedding.update(None)
        self.data_embedding.update(None)
        self.fields.update(None)
        self.samples_grid.update(None)
        self.solutions_grid.update(None)
        self.denoise_grid.update(None)
        self.denoise_note.object = "Train a little, then pick a digit and a flip probability."

    def _computing(self, view: Any, *, always: bool = True, text: str = COMPUTING) -> None:
        """Say ``text`` ("Computing…") in ``view`` until a job's result replaces it: over what
        it shows (``always``: the user asked for something new), or only while it shows
        nothing (a live refit keeps the previous picture unlabelled)."""
        if not always and len(view.source.data["x"]):
            return
        self._idle_text.setdefault(view, view.placeholder.text)
        view.placeholder.say(text)

    def on_steps_asked(self) -> None:
        """Play or Step: until the first step's TAP solutions are in, Figs. 6-7 say that their
        Isomap follows it ("Press ▶ Play to start" would be stale for seconds on MNIST)."""
        if not self.history.snapshots:
            for view in (self.embedding, self.data_embedding):
                self._computing(view, always=False, text=ISOMAP_WAITING)
            self._isomap_pending = ISOMAP_WAITING_NOTE
            self._show_isomap_note()

    def _failed(self, view: Any, exc: BaseException) -> None:
        """A job's error, said in the view that waited for it (instead of failing the tick)."""
        self._idle_text.setdefault(view, view.placeholder.text)
        view.placeholder.say(f"Could not compute this: {type(exc).__name__}: {exc}"[:120])

    def pin_layers(self) -> dict:
        return self._pin_layers

    def sweep_legends(self) -> list:
        """In a sweep, the live TAP log-likelihood, Helmholtz estimate and exact log-likelihood
        name the first value (the other values' lines draw those three)."""
        helmholtz = next((item for item in self.fe_figure.legend[0].items
                          if getattr(item.label, "value", None) == "Helmholtz (mean)"), None)
        return [(self.ll_curve.legend_item("log-likelihood"), "TAP", "{run}"),
                (helmholtz, "TAP", "Helmholtz {run}"), (self.truth.legend_item("exact"), "TAP", "exact {run}")]

    def pin_lines(self, pin) -> dict:
        """A pinned run's TAP log-likelihood, Helmholtz estimate and exact log-likelihood per
        epoch, where its Records carried them (as the live lines)."""
        out: dict[str, list] = {}
        for columns in pin.records.values():
            epoch = columns.get("epoch")
            for layer, key in (("ll", "tap_log_likelihood"), ("helmholtz", "helmholtz_free_energy"),
                               ("exact", "ll_exact")):
                if epoch is not None and key in columns:
                    y = np.asarray(columns[key], dtype=float)
                    keep = np.isfinite(y)
                    if keep.any():
                        out.setdefault(layer, []).append((epoch[keep], y[keep]))
        return out

    # ------------------------------------------------------------------ live updates
    def draw_records(self, records) -> None:
        recs = [r for name, r in records if name == "TAP"]
        if not recs:
            return
        ll = [(r.scalars["epoch"], r.scalars["tap_log_likelihood"]) for r in recs if "tap_log_likelihood" in r.scalars]
        if ll:
            xs, ys = zip(*ll)
            self.ll_curve.stream("ll", xs, ys)
        counts = [(r.scalars["epoch"], r.scalars["n_solutions"]) for r in recs if "n_solutions" in r.scalars]
        if counts:
            xs, ys = zip(*counts)
            self.ll_curve.stream("count", xs, ys)
            trend = []
            for y in ys:
                self._counts.append(float(y))
                trend.append(sum(self._counts) / len(self._counts))
            self.ll_curve.stream("count_trend", xs, trend)
        new_snapshot = False
        for r in recs:
            s = r.scalars
            if "solution_free_energies" in r.arrays:
                fe = np.asarray(r.arrays["solution_free_energies"], dtype=float)
                _append(self.fe_points, {"x": np.full(fe.size, s["epoch"]), "y": fe}, 20_000)
                new_snapshot |= self.history.add(r)
            # the Helmholtz estimate is a scalar: a loaded checkpoint's history redraws all of it
            if "helmholtz_free_energy" in s:
                _append(self.fe_line, {"x": [s["epoch"]], "y": [s["helmholtz_free_energy"]]}, 5000)
            if "ll_exact" in s:
                for key, name in (("exact", "ll_exact"), ("tap", "ll_tap"), ("ais", "ll_ais"),
                                  ("pl", "pseudo_likelihood")):
                    if name in s:
                        self.truth.stream(key, [s["epoch"]], [s[name]])
            if "W" in r.arrays:
                self._last = {**r.arrays, "epoch": s["epoch"], "n_solutions": s.get("n_solutions"),
                              "damping": s.get("damping")}
                self._fields_stale = True
        self._epoch_now = float(recs[-1].scalars["epoch"])
        if new_snapshot:
            self._update_epoch_widgets()
            self._embedding_dirty = True
            self._solutions_stale = True

    def on_tick(self) -> None:
        """Draw the receptive fields, samples and solutions when due (at most once a second
        while playing, and only when their tab is in view: :meth:`in_view`; at once when
        paused, e.g. after ``lab.run``), the histograms as their tab comes into view; start
        the Isomap jobs when due."""
        playing = self.runner.playing
        due = not playing or time.monotonic() - self._fields_time >= FIELDS_SECONDS
        if (self._fields_stale or self._solutions_stale) and due:
            if self._fields_stale and (not playing or self.in_view(FIELDS_TAB, SAMPLES_TAB)):
                self._show_fields()
                self._show_samples()
            if self._solutions_stale and (not playing or self.in_view(ISOMAP_TAB)):
                self._show_solutions()
        if self._histograms_stale and (not playing or self.in_view(HISTOGRAMS_TAB)):
            self._show_histograms()
        self._submit_embedding()

    def on_stage_shown(self, label: str) -> None:
        if label in (FIELDS_TAB, SAMPLES_TAB, ISOMAP_TAB):
            self._fields_time = -math.inf  # drawn at the next tick (a follower's Isomap fitted then)

    def busy(self) -> bool:
        return self._embedding_dirty or self._fields_stale or self._solutions_stale or self._histograms_stale

    def _update_epoch_widgets(self) -> None:
        self._quiet = True
        try:
            last = len(self.history.snapshots) - 1
            slider = self.epoch_slider
            follow = slider.value >= slider.end - 1 or slider.value == 0 and last <= 1
            slider.param.update(end=max(1, last),  # a slider needs end > start
                                value=last if follow else min(slider.value, last))
        finally:
            self._quiet = False
        # Fig. 5's histograms (four full redraws: bins, KDEs) while playing only in view:
        # hidden, they were most of a TAP tick's drawing and of its message (py-spy, 24
        # followers of one TAP run: 22 % of the event loop)
        self._histograms_stale = True
        if not self.runner.playing or self.in_view(HISTOGRAMS_TAB):
            self._show_histograms()

    def _show_histograms(self) -> None:
        """Figure 5's slices: the first snapshot, two in between and the latest."""
        self._histograms_stale = False
        snaps = self.history.snapshots
        picks = sorted({round(f * (len(snaps) - 1)) for f in (0.0, 1 / 3, 2 / 3, 1.0)}) if snaps else []
        self.hist.update({f"epoch {snaps[i].epoch:.2f}": snaps[i].free_energies for i in picks})

    # ------------------------------------------------------------------ Isomap views (jobs)
    def _shown_snapshot(self) -> int:
        return min(self.epoch_slider.value, len(self.history.snapshots) - 1)

    def _submit_embedding(self) -> None:
        """Start the Isomap jobs of Figs. 6-7 for the newest snapshots: at once when paused,
        every EMBED_SECONDS while training (each fit takes seconds and shares the cores
        with training), never two fits of Fig. 6 at a time.  A page that follows a shared run
        fits only while its Isomap tab is in view (a class of followers would each fit the same
        snapshots; the teacher's page fits as any page does)."""
        if not self._embedding_dirty or self.jobs.running("isomap"):
            return
        if self._following is not None and not self.in_view(ISOMAP_TAB):
            return  # still dirty: fitted when the tab comes into view
        snaps = self.history.snapshots
        if not snaps:
            self._embedding_dirty = False
            return
        now = time.monotonic()
        if self.runner.playing and now - self._embed_time < EMBED_SECONDS:
            return
        self._embedding_dirty = False
        self._embed_time = now
        rows = [isomap_rows(len(s.free_energies)) for s in snaps]  # at most the server's cap per snapshot
        shown = [(s.epoch, s.free_energies[r], r, len(s.free_energies)) for s, r in zip(snaps, rows)]
        solutions = [np.hstack([s.solutions_vis[r], s.solutions_hid[r]]) for s, r in zip(snaps, rows)]
        self._computing(self.embedding, always=False, text=ISOMAP_COMPUTING)
        if self._fit is None:
            self._isomap_pending = ISOMAP_COMPUTING_NOTE
            self._show_isomap_note()
        self.jobs.submit("isomap", solution_embedding, solutions, then=functools.partial(self._draw_embedding, shown),
                         error=self._isomap_failed)
        self._submit_data_embedding(always=False)

    def _isomap_failed(self, exc: BaseException) -> None:
        """Fig. 6's job failed: its view says why, the note stops saying it is computing."""
        self._isomap_pending = ""
        self._show_isomap_note()
        self._failed(self.embedding, exc)

    def _submit_data_embedding(self, always: bool = True) -> None:
        snaps = self.history.snapshots
        if not snaps:
            return
        self._computing(self.data_embedding, always=always, text=ISOMAP_COMPUTING)
        solutions_vis = snaps[self._shown_snapshot()].solutions_vis
        solutions_vis = solutions_vis[isomap_rows(len(solutions_vis))]
        self.jobs.submit("isomap-data", data_embedding, self._data_ref, solutions_vis,
                         then=self._draw_data_embedding, error=functools.partial(self._failed, self.data_embedding))

    def _draw_embedding(self, shown: list, result: tuple[list, int]) -> None:
        coords, fit_index = result
        self._fit = (shown, coords, fit_index)
        self._draw_fit()
        self._submit_embedding()  # snapshots that came in while it was computed

    def _draw_fit(self) -> None:
        shown, coords, fit_index = self._fit
        index = min(self.epoch_slider.value, len(shown) - 1)
        epoch, free_energies, rows, total = shown[index]
        self._scatter_rows = np.asarray(rows, dtype=int)
        self._selection = None
        self.embedding.source.selected.indices = []  # new points: the old selection means nothing
        self.embedding.update(coords[index], free_energies, labels=[f"solution {i}" for i in rows])
        some = f" ({len(rows):,} of {total:,} solutions shown)" if len(rows) < total else ""
        # the title and axis fit a third of the stage at 1280x720; the rest is said beside the slider
        self.embedding.figure.title.text = f"Fig. 6 at epoch {epoch:.2f}"
        self._isomap_text = f"Isomap fitted at epoch {shown[fit_index][0]:.2f}{some}."
        self._show_isomap_note()

    def _draw_data_embedding(self, result: dict) -> None:
        digits = result["digits"]
        labels = ([f"digit {d}" for d in digits] if digits is not None
                  else [f"training image {i}" for i in result.get("rows", range(len(result["data_coords"])))])
        self.data_embedding.update(result["data_coords"], digits, labels=labels,
                                   overlay_xy=result["solution_coords"])

    @held
    def _on_epoch_slider(self, event) -> None:
        if self._quiet or not self.history.snapshots:
            return
        if self._fit is None:
            self._embedding_dirty = True
            self._submit_embedding()
            return
        self._draw_fit()
        self._show_solutions()
        self._submit_data_embedding()

    # ------------------------------------------------------------------ receptive fields
    def _field_order(self, W: np.ndarray, b_hid: np.ndarray | None) -> tuple[np.ndarray, str]:
        """The hidden units in the order drawn (rank_by), and how they are ranked."""
        if self.rank_by.value == "activation" and b_hid is not None:
            # measured ~5-8 ms for 1000 MNIST digits and 100 units: cheap enough for the UI thread
            means = (1.0 / (1.0 + np.exp(-(self._rank_rows @ W + b_hid)))).mean(0)
            order, _ = tap_analysis.rank_receptive_fields(W, hidden_means=means, by="activation")
            return np.asarray(order), "by mean activation"
        order, _ = tap_analysis.rank_receptive_fields(W, by="spread")
        return np.asarray(order), "by spread"

    def _show_fields(self, W: np.ndarray | None = None, b_hid: np.ndarray | None = None) -> None:
        """Draw the receptive fields (the newest Record's, or ``W``), ranked, the
        presentation-mode unit outlined."""
        self._fields_stale = False
        self._fields_time = time.monotonic()
        if W is None:
            W, b_hid = self._last.get("W"), self._last.get("b_hid")
        if W is None:
            return
        W = np.asarray(W, dtype=float)
        order, what = self._field_order(W, b_hid)
        rank = np.empty(len(order), dtype=int)
        rank[order] = np.arange(len(order))
        labels = [f"hidden unit {j}, rank {rank[j] + 1} {what}" for j in range(W.shape[1])]
        highlight = self._highlight if self._highlight is not None and self._highlight < W.shape[1] else None
        self.fields.update(W, order=order, limit=FIELDS_SHOWN, highlight=highlight, labels=labels,
                           outline=self._active)

    def draw_beside(self, pin) -> None:
        """A pin's newest receptive fields (ranked as the live ones), samples and TAP solutions
        (lowest F first) beside the live ones."""
        for pair in (self.fields_beside, self.samples_beside, self.solutions_beside):
            pair.show(None if pin is None else pin.label)
        arrays = {} if pin is None else next(iter(pin.arrays.values()), {})
        if "W" in arrays:
            W = np.asarray(arrays["W"], dtype=float)
            order, what = self._field_order(W, arrays.get("b_hid"))
            self.fields_beside.draw_tiles(W, order=order, limit=FIELDS_SHOWN,
                                          labels=[f"{pin.label}: hidden unit {j} ({what})" for j in range(W.shape[1])])
        if "samples" in arrays:
            self.samples_beside.draw_tiles(np.asarray(arrays["samples"], dtype=float).T,
                                           labels=[f"{pin.label}: chain {i}" for i in range(len(arrays["samples"]))])
        if "solutions_vis" in arrays:
            fe = np.asarray(arrays["solution_free_energies"], dtype=float)
            self.solutions_beside.draw_tiles(np.clip(np.asarray(arrays["solutions_vis"], dtype=float), 0.0, 1.0).T,
                                             order=np.argsort(fe, kind="stable")[:SOLUTIONS_SHOWN],
                                             labels=[f"{pin.label}: F_TAP = {f:.2f}" for f in fe])

    # ------------------------------------------------------------------ a look inside
    def _show_samples(self) -> None:
        """Draw the newest Record's model samples (persistent Gibbs chains run in the trainer's
        step, in the worker: :class:`boltzlab.engine.tap.TAPTrainer`'s ``n_samples``)."""
        samples = self._last.get("samples")
        if samples is None:
            return
        samples = np.asarray(samples, dtype=float)  # the lab's visibles are {0, 1} (Bernoulli prior)
        epoch = self._last.get("epoch", 0.0)
        self.samples_grid.update(samples.T, labels=[f"chain {i}, epoch {epoch:.2f}" for i in range(len(samples))])

    @held
    def _on_select(self, attr, old, new) -> None:
        """Points selected in Fig. 6 (tap or lasso): draw those solutions and outline, in the
        receptive fields, the hidden units most active in them (cheap: a tiling, a mean over
        at most K x Nh magnetizations, and the outlines' boxes)."""
        rows = self._scatter_rows
        picked = [i for i in new if 0 <= i < len(rows)]
        self._selection = rows[picked] if picked else None
        self._active = None
        snaps = self.history.snapshots
        if self._selection is not None and snaps:
            self._active = most_active_units(snaps[self._shown_snapshot()].solutions_hid[self._selection])
        self.fields.set_outline(self._active)
        self.fields.figure.title.text = (FIELDS_TITLE if self._active is None else
                                         "Receptive fields (Fig. 4); green: most active in the selection")
        self._show_isomap_note()
        self._show_solutions()

    def _show_isomap_note(self) -> None:
        """Beside the slider: what Fig. 6's map was fitted on, and what a selection outlines
        (short: it shares a row with the slider at 1280x720)."""
        if self._active is not None:
            n = len(self._selection)
            units = ", ".join(str(j) for j in self._active)
            text = (f"{n} selected; most active hidden unit{'s' if len(self._active) != 1 else ''}: {units} "
                    "(outlined in Fields).")
        else:
            text = (f"{self._isomap_text} Tap or lasso points to select." if self._isomap_text
                    else self._isomap_pending)
        self.isomap_note.object = text

    def _show_solutions(self) -> None:
        """The TAP solutions of the snapshot the slider shows, drawn as images: their visible
        magnetizations a_v (the fixed points of eqs. 37-38), lowest free energy (eq. 36) first,
        at most SOLUTIONS_SHOWN; the ones selected in Fig. 6 instead when there are some."""
        self._solutions_stale = False
        chosen = self._selection
        snaps = self.history.snapshots
        if not snaps:
            self.solutions_grid.update(None)
            return
        snap = snaps[self._shown_snapshot()]
        fe = snap.free_energies
        if chosen is None:
            order = np.argsort(fe, kind="stable")[:SOLUTIONS_SHOWN]
            what = f"{len(order)} of {len(fe)}, lowest F first"
        else:
            order = np.asarray(chosen, dtype=int)[:SOLUTIONS_SHOWN]
            what = f"{len(order)} selected of {len(fe)}"
        labels = [f"solution {i} at epoch {snap.epoch:.2f}, F_TAP = {fe[i]:.2f}" for i in range(len(fe))]
        self.solutions_grid.update(np.clip(snap.solutions_vis, 0.0, 1.0).T, order=order, labels=labels)
        self.solutions_beside.set_title(f"Solutions a_v: {what}")  # fits the 300 px grid

    # ------------------------------------------------------------------ denoising (jobs)
    def _model(self) -> tuple:
        """The newest Record's model, and the damping the denoiser uses."""
        return self._last["W"], self._last["b_vis"], self._last["b_hid"], max(0.5, self.damping)

    @held
    def _show_denoising(self) -> None:
        if "W" not in self._last:
            self.denoise_note.object = "Train a little first: the denoiser is the current model."
            return
        index, p = self.denoise_index.value, float(self.denoise_p.value)
        self._computing(self.denoise_grid)
        self.denoise_note.object = f"Denoising held-out digit {index} with p = {p:g}: computing…"
        self.jobs.submit("denoise", denoise_digit, self._data_ref, index, p, *self._model(),
                         then=functools.partial(self._draw_denoising, p),
                         error=functools.partial(self._failed, self.denoise_grid))

    def _draw_denoising(self, p: float, result: dict) -> None:
        self.denoise_grid.update(result["tiles"], n_cols=5, labels=[
            "clean test digit", f"noisy: pixels flipped with p = {p:g}", "TAP posterior mean",
            "optimal pointwise estimator (eq. 46)", "nearest training digit (1-NN)"])
        what = f"Digit {result['digit']}" if result["digit"] is not None else f"Test image {self.denoise_index.value}"
        self.denoise_note.object = (f"{what} with p = {p:g}: posterior means ⟨x⟩ (white 0, black 1) "
                                    "of the TAP machine with the channel field added to the visible prior, of the "
                                    "optimal pointwise estimator, and the nearest training digit.")

    @held
    def _denoise_curve(self) -> None:
        if "W" not in self._last:
            self.denoise_note.object = "Train a little first: the denoiser is the current model."
            return
        rows = min(len(self.images.X_test), DENOISE_ROWS)
        self._computing(self.mcc_curve)
        self.jobs.submit("denoise-curve", denoise_curve, self._data_ref, rows, list(DENOISE_PS), *self._model(),
                         then=functools.partial(self._draw_mcc, rows, self._last["epoch"]),
                         error=functools.partial(self._failed, self.mcc_curve))

    def _draw_mcc(self, rows: int, epoch: float, curve: dict) -> None:
        # replace (not stream): a clear and a stream in one hold reached the browser as an append
        for key, name in (("tap", "mcc_tap"), ("ope", "mcc_ope"), ("nn", "mcc_1nn")):
            self.mcc_curve.sources[key].data = {"x": list(curve["p"]), "y": list(curve[name])}
        self.mcc_curve.placeholder.hide()
        self.mcc_curve.figure.title.text = f"MCC vs p, {rows} test digits, epoch {epoch:.2f} (Fig. 8)"
        self._show_denoising()

    # ------------------------------------------------------------------ status
    def counter(self) -> str:
        return f"Epoch {self._epoch_now:.2f}"

    def refresh_badges(self) -> None:
        snaps = self.history.snapshots
        if not snaps:
            self.solutions_status.set("idle", "No TAP solutions yet")
            return
        n = len(snaps[-1].free_energies)
        k = self.K
        frac = n / max(1, k)
        damping = self._last.get("damping")
        raised = (f"; damping raised to {damping:.2f} so the TAP iterations converge"
                  if damping is not None and damping > self.damping + 1e-9 else "")
        self.solutions_status.set("warn" if frac > 0.5 else "ok",
                                  f"{n} unique TAP solution{'s' if n != 1 else ''} from {k} starts ({frac:.0%})"
                                  + (": many distinct solutions, a spin-glass warning sign" if frac > 0.5 else "")
                                  + raised)

    # ------------------------------------------------------------------ presentation
    def describe_change(self, name, before, after, before_arrays, after_arrays) -> str | None:
        """What one step did in the paper's terms: the TAP log-likelihood (eq. 39), the
        unique TAP solutions, and the hidden unit whose weights (a column of W, eq. 40)
        moved most (on the first step, with no earlier Record: the strongest one)."""
        if "epoch" not in after:
            return None
        batches = int(after.get("iteration", 0) - before.get("iteration", 0))
        parts = [f"<b>Epoch {before.get('epoch', 0.0):.2f} → {after['epoch']:.2f}</b> "
                 f"({batches} mini-batch{'es' if batches != 1 else ''} of M = {self.batch})"]
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
            k = self.K
            if "n_solutions" in before:
                m = int(before["n_solutions"])
                verb = "appeared" if n > m else "merged away" if n < m else ""
                text = f"unique TAP solutions {m} → <b>{n}</b> of K = {k}"
                if verb:
                    text += f" ({abs(n - m)} {verb})"
            else:
                text = f"<b>{n}</b> unique TAP solution{'s' if n != 1 else ''} from K = {k} starts"
            parts.append(text)
        head, *rest = parts
        text = f"{head}: " + "; ".join(rest) + "." if rest else f"{head}."
        moved = _moved_unit(before_arrays, after_arrays)
        if moved is None:
            return text
        j, size, compared = moved
        order, _ = self._field_order(np.asarray(after_arrays["W"], dtype=float), after_arrays.get("b_hid"))
        where = ("outlined in orange in the receptive fields" if j in set(order[:FIELDS_SHOWN].tolist())
                 else f"not among the {FIELDS_SHOWN} fields drawn")
        if compared:
            unit = f"Hidden unit {j}'s weights moved most (by {size:.3g} in ℓ₂ norm; {where})."
        else:
            unit = f"Hidden unit {j} has the strongest weights after this first step (ℓ₂ norm {size:.3g}; {where})."
        return f"{text}<br>{unit}"

    def highlight(self, name, before, after, before_arrays, after_arrays) -> None:
        """Outline, in the receptive fields, the hidden unit :meth:`describe_change` names."""
        moved = _moved_unit(before_arrays, after_arrays)
        if moved is not None:
            self._highlight = moved[0]
            self._show_fields(after_arrays["W"], after_arrays.get("b_hid"))

    def clear_highlight(self) -> None:
        if self._highlight is not None:
            self._highlight = None
            self._show_fields()


def most_active_units(solutions_hid: np.ndarray, k: int = ACTIVE_UNITS) -> np.ndarray:
    """The ``k`` hidden units most active in some TAP solutions: the largest mean hidden
    magnetization a_h over those solutions (rows of ``solutions_hid``, (n, Nh)), most active
    first (ties: the lower unit first)."""
    mean = np.asarray(solutions_hid, dtype=float).mean(axis=0)
    return np.argsort(-mean, kind="stable")[:k]


def _moved_unit(before_arrays, after_arrays) -> tuple[int, float, bool] | None:
    """``(j, size, compared)``: the hidden unit whose weights moved most between two
    Records (ℓ₂ norm of its column's change, ``compared=True``), or, with no earlier weights
    (the first step), the unit with the largest weights (``compared=False``); None without W."""
    W1 = after_arrays.get("W")
    if W1 is None:
        return None
    W1 = np.asarray(W1, dtype=float)
    W0 = before_arrays.get("W")
    compared = W0 is not None and np.shape(W0) == W1.shape
    size = np.linalg.norm(W1 - np.asarray(W0, dtype=float) if compared else W1, axis=0)
    if size.size == 0 or not np.all(np.isfinite(size)) or size.max() <= 0:
        return None
    j = int(np.argmax(size))
    return j, float(size[j]), compared


def _append(source: ColumnDataSource, data: dict, rollover: int) -> None:
    """Stream ``data`` into ``source``; assign when it is empty (a clear and a stream in one
    held batch reached the browser as the old data plus the new, see LiveCurve.stream)."""
    if len(source.data["x"]) == 0:
        source.data = {k: np.asarray(v)[-rollover:] for k, v in data.items()}
    else:
        source.stream(data, rollover=rollover)
