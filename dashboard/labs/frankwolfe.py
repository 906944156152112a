"""The Frank-Wolfe lab: an RBM that grows one hidden unit at a time.

Paper: Ping, Liu & Ihler (2016), "Learning Infinite RBMs with Frank-Wolfe" (NIPS).

Besides the Frank-Wolfe run (the base's runner) the lab owns a second runner, the CD pair
forked from the grown model ("Train CD from here", §4): drained on the base's tick
(:meth:`FrankWolfeLab.on_tick`), not part of a checkpoint, reset by a checkpoint that loads
(:class:`FrankWolfeTools`).  The Frank-Wolfe model's log-likelihood at the fork, when its
Record was not evaluated, is an analysis job (``frankwolfe_setup.train_log_likelihood``).
"""

from __future__ import annotations

import contextlib
import functools
import time
from typing import Any

import numpy as np
import panel as pn
import param
from bokeh.models import ColumnDataSource, Label, Span

from .. import budget
from .base import RADIO, Lab, held, label, speed_setting
from .frankwolfe_setup import (CD_EPOCHS, CD_K, DATASETS, DEFAULTS, EVALUATIONS, SAMPLE_CHAINS,
                               cd_factory,
                               fw_curves, fw_factory, log_likelihood_of, train_log_likelihood)
from .image_data import ImageData, ImageUploads, describe_images, image_width_setting
from ..labtools import Preset
from ..runner import Runner, play_or_tell
from ..views import LiveCurve, StatusBadge
from ..views.beside import PIN_TITLE, Beside
from ..views.image_grid import ImageGrid
from ...engine.stepping import Record

SPEEDS = {"1 unit/s": 1.0, "2 units/s": 2.0, "5 units/s": 5.0, "as fast as possible": None}
DEFAULT_DATA = "mnist"
FIELDS_SECONDS = 0.5  # while playing, the receptive-field grid redraws at most this often
OUTLINE = "#f0a000"  # the receptive-field grid outlines the newest unit in this colour
FW = "FW"  # the Frank-Wolfe run
CD_FROM_FW = "CD (FW init)"  # the fork's runs (frankwolfe_setup.cd_factory)
CD_IDLE = "Pause, then press “Train CD from here” to compare with CD"

INTRO = """
Ping, Liu & Ihler (2016) give an RBM a *distribution* q(w) over hidden-unit weights (eq. 5);
the penalized likelihood (eq. 6) is then **concave in q**, and Frank-Wolfe (Algorithm 1)
solves it by **inserting one hidden unit per iteration**: draw S samples from the current
model, find the new unit w* by L-BFGS on eq. 9, mix it in with step 1/t (with α<sub>t</sub> = t
the model *is* a standard RBM with t units, Prop. 3.1), then move the visible biases by
eq. 10 **until** the model's pixel means match the data's (Algorithm 1's "repeat … until";
the status shows how many updates it took). **Train CD from here** forks the model into CD-10 beside a random start of the same
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
presets *eq. 10 cut off* (the biases left behind: the likelihood falls) and *small λ* (units so
large that it falls even so); a large λ such as 0.5 keeps the units near zero and the curve flat. In presentation
mode, **Next step** names the unit it inserted and circles its point on the curves.
"""

PRESETS = [
    Preset("MNIST: λ = 0.1, eq. 10 converged, up to 100 units",
           {"data": "mnist", **DEFAULTS["mnist"], "evaluate": "auto", "seed": 0, "away": False,
            "cd_epochs": CD_EPOCHS, "speed": "as fast as possible"},
           "Algorithm 1 on the bundled 3,500 MNIST digits with λ = 0.1 from the paper's grid, the bias loop "
           "of eq. 10 run until the model's pixel means match the data's: the test log-likelihood climbs "
           "from about −181 nats at 10 units to about −140 at 100 (30 s headless), one receptive "
           "field per iteration."),
    Preset("Quick: 8×8 digits, exact log-likelihood at every unit",
           {"data": "digits", "reg": 0.05, "bias_lr": 0.5, "samples": 2000, "bias_steps": 200, "max_hidden": 20,
            "evaluate": "exact", "eval_every": 1, "seed": 0, "away": False, "cd_epochs": CD_EPOCHS,
            "speed": "2 units/s"},
           "20 units, each scored with the exact log Z (up to 2²⁰ hidden states): the test log-likelihood "
           "rises from −25.16 to about −22.4 nats at 5 units and −20.7 at 20, at every insertion."),
    Preset("Eq. 10 cut off after 10 updates (digits)",
           {"data": "digits", "reg": 0.05, "bias_lr": 0.05, "samples": 500, "bias_steps": 10, "max_hidden": 40,
            "evaluate": "auto", "eval_every": 1, "seed": 0, "away": False, "cd_epochs": CD_EPOCHS,
            "speed": "5 units/s"},
           "The lab's old schedule: 10 bias updates of η = 0.05 per unit leave the pixel means far from "
           "the data's (the status says the cap was hit), and the same λ = 0.05 that climbs to −20.7 with "
           "eq. 10 converged falls to about −49 nats at 10 units and −88 at 20. Compare with the quick preset."),
    Preset("Small λ = 0.01: units too large (digits)",
           {"data": "digits", "reg": 0.01, "bias_lr": 0.5, "samples": 2000, "bias_steps": 200, "max_hidden": 40,
            "evaluate": "auto", "eval_every": 1, "seed": 0, "away": False, "cd_epochs": CD_EPOCHS,
            "speed": "5 units/s"},
           "w* of eq. 9 grows like 1/λ and enters at full strength (αₜ = t): even with eq. 10 converged "
           "the test log-likelihood falls, from about −28.4 at 5 units to −33 at 20. Frank-Wolfe with "
           "exact expectations falls too (−39.4 at 20), so this is the algorithm, not the sampler."),
    Preset("Away steps on MNIST (§3.2): harmful units removed",
           {"data": "mnist", **DEFAULTS["mnist"], "evaluate": "auto", "eval_every": 1, "seed": 0,
            "away": True, "cd_epochs": CD_EPOCHS, "speed": "2 units/s"},
           "Insertions at full strength now and then make an earlier unit harmful (its eq. 9 value J(w_i) "
           "exceeds −J(w*)) and the next iteration removes it instead of inserting: after 10 iterations "
           "the model has about 8 units, for the next 20 the dashed unit count saws between 7 and 8, "
           "then it grows again (12 units at 40 iterations) — a sparse model (Next step names the unit "
           "removed)."),
]


class FrankWolfeLab(ImageUploads, Lab):
    """Algorithm 1 live, and the CD pair forked from the grown model (one per browser session)."""

    key = "frankwolfe"
    kernels = ("rbm", "frankwolfe")
    title = "Frank-Wolfe"
    heading = "Frank-Wolfe: an RBM that grows one hidden unit at a time"
    summary = ("Algorithm 1 of Ping, Liu & Ihler (2016) inserts the best new hidden unit at every "
               "iteration and the log-likelihood climbs as the RBM grows; pause, then train CD from the "
               "grown model to compare.")
    intro, equations, watch = INTRO, EQUATIONS, WATCH
    presets = PRESETS
    speeds = SPEEDS
    watch_scalar = "inner_objective"
    headline = ("test_log_likelihood", "test log-lik.")
    pictures_beside = True
    short_labels = {"reg": "λ", "bias_lr": "η", "samples": "S", "max_hidden": "T", "bias_steps": "eq.10 steps",
                    "eval_every": "every"}
    view_settings = frozenset({"cd_epochs"})  # the length of the next CD fork: the run stays
    counter_width = 200

    CD_NOTE = ("The CD comparison (card 3) is not part of a checkpoint: press “Train CD from here” "
               "to fork it again from the loaded model.")

    @contextlib.contextmanager
    def loading(self):
        """A checkpoint holds the Frank-Wolfe run only; the CD pair is a fork of it, cheap to
        make again: a load that succeeds resets the fork (and says so), a load that fails
        leaves it running (``clear()`` keeps it while ``_loading``)."""
        self._loading = True
        try:
            with super().loading() as outcome:
                outcome.note = self.CD_NOTE  # added to the message of a load that succeeds
                yield outcome
        finally:
            self._loading = False
        if outcome.ok:
            self._reset_cd(self.CD_NOTE)

    # ------------------------------------------------------------------ settings (URL keys)
    _d = DEFAULTS[DEFAULT_DATA]
    data = param.Selector(default=DEFAULT_DATA, objects=DATASETS, label="Data",
                          doc="The bundled binary digits or your own images, an .npz or CSV upload (train, "
                              "validation for the §4 stopping rule, test).")
    image_width = image_width_setting()
    reg = param.Number(_d["reg"], bounds=(0.0, 100.0), step=0.01, label="Regularization λ",
                       doc="λ of eq. 9: the penalty on a new unit's weights.")
    bias_lr = param.Number(_d["bias_lr"], bounds=(0.0, 10.0), step=0.005, label="Bias step η",
                           doc="η of eq. 10, the visible biases' update.")
    samples = param.Integer(_d["samples"], bounds=(1, 20000), label="Samples S",
                            doc="Samples from the model per iteration (eq. 9).")
    bias_steps = param.Integer(_d["bias_steps"], bounds=(0, 5000), label="Eq. 10 updates ≤",
                               doc="The cap on eq. 10's updates per iteration.")
    max_hidden = param.Integer(_d["max_hidden"], bounds=(2, 2000), label="Max hidden units T",
                               doc="Iterations: one hidden unit inserted per iteration.")
    evaluate = param.Selector(default="auto", objects=EVALUATIONS, label="Log-likelihood",
                              doc="How the log-likelihood is computed: exact log Z, AIS, or not at all.")
    eval_every = param.Integer(_d["eval_every"], bounds=(1, 1000), label="Evaluate every",
                               doc="Iterations between two evaluations.")
    seed = param.Integer(0, bounds=(0, None), label="Seed", doc="Seeds the samples and the optimizer's start.")
    away = param.Boolean(False, label="Away steps (may remove a harmful unit, §3.2)",
                         doc="Let an iteration remove a unit that has become harmful instead of inserting one.")
    cd_epochs = param.Integer(CD_EPOCHS, bounds=(1, 500), label="CD epochs",
                              doc="The length of the next CD fork (the run stays).")
    speed = speed_setting(SPEEDS, "as fast as possible")
    del _d
    widget_options = {"data": dict(type=pn.widgets.RadioButtonGroup, **RADIO), "evaluate": dict(width=290),
                      "image_width": dict(width=160),
                      "cd_epochs": dict(width=100), "speed": dict(width=190),
                      **{k: dict(width=140) for k in ("reg", "bias_lr", "samples", "bias_steps", "max_hidden",
                                                      "eval_every", "seed")}}

    def build_controls(self) -> None:
        self._loading = False  # a checkpoint load in progress: the CD fork stays until it succeeds
        self._run_settings: dict[str, Any] = {}  # data (+ its images, ref), seed, evaluate, eval_every of the run
        self._kept_run: dict[str, Any] = {}  # ... of the run a build in flight replaces (back if refused)
        self.uploads = ImageData(self)  # "Upload": the upload widget, its job, the run's data hash
        self._images = None  # the images the settings choose (prepare)
        self._fork: dict[str, Any] | None = None
        self.cd_runner: Runner | None = None
        self.data_info = pn.pane.HTML("", styles={"font-size": "0.9em"})  # describe_images: the name escaped
        self._described: tuple | None = None  # the data set data_info describes
        self.fork = pn.widgets.Button(label="Train CD from here", color="primary", width=180, disabled=True)
        self.cd_status = StatusBadge(CD_IDLE, "idle")
        self.fork.on_click(lambda e: self._fork_cd())

    def controls_panel(self) -> pn.viewable.Viewable:
        w = self.widgets
        data_card = pn.Card(label("Data"), w["data"], *self.uploads.widgets(), w["image_width"], self.data_info,
                            title="1. Data", collapsible=False, sizing_mode="stretch_width")
        model_card = pn.Card(pn.Row(w["reg"], w["bias_lr"]), pn.Row(w["samples"], w["bias_steps"]),
                             pn.Row(w["max_hidden"], w["seed"]), w["evaluate"], w["eval_every"], w["away"],
                             title="2. Frank-Wolfe (Algorithm 1)", collapsible=False, sizing_mode="stretch_width")
        return pn.Column(data_card, model_card, sizing_mode="stretch_width", margin=0)

    def prepare(self, changed: set[str], strict: bool = False) -> None:
        """The chosen data set (bundled, loaded once per process; or the uploaded images in
        the shape ``image_width`` gives them), described."""
        self.uploads.update_visibility()
        images = self.uploads.chosen()  # NotReady before a file is uploaded
        self._images = images
        key = (self.data, images.meta.get("sha256"), images.image_shape, bool(images.meta.get("square_guess")))
        if self._described == key:
            return
        self._described = key
        self.data_info.object = describe_images(images, "validation (the stopping rule)")

    def implied(self, values, *, fresh: bool = False) -> dict[str, Any]:
        """A change of data set brings that set's default settings (the given values win)."""
        data = values.get("data")
        if data is None or (not fresh and data == self._run_settings.get("data")):
            return {}
        return dict(DEFAULTS.get(data, {}))

    def check_work(self) -> None:
        """The work budget, on the slowest step: the last, with T units, always evaluated."""
        images = self.uploads.for_budget()
        if images is None:
            return  # nothing uploaded yet: prepare says so
        rows, n_visible = images.X_train.shape
        evaluate = self.evaluate
        if evaluate == "exact" and min(n_visible, self.max_hidden) > budget.EXACT_UNITS:
            return  # not enumerable at all: the trainer factory says so

        def seconds(s, evaluate: str = evaluate) -> float:
            return budget.frankwolfe_step(n_visible=n_visible, rows=rows, samples=s["samples"],
                                          max_hidden=s["max_hidden"], evaluate=evaluate,
                                          bias_lr=self.bias_lr, bias_steps=s.get("bias_steps", self.bias_steps))

        T, S = self.max_hidden, self.samples
        extra = []
        if evaluate != "none" and seconds({"samples": S, "max_hidden": T}, "none") <= budget.LIMITS.step_seconds:
            extra.append("choose “none” for the log-likelihood")
        budget.require(seconds, [budget.Knob("max_hidden", "max hidden units T", T, 2),
                                 budget.Knob("samples", "samples S", S, 1),
                                 budget.Knob("bias_steps", "eq. 10 updates at most", self.bias_steps, 0)],
                       f"T = {T:,} hidden units at the last step, S = {S:,} samples, log-likelihood: {evaluate}",
                       extra)

    def trainer_factory(self):
        images = self._images
        ref = self.uploads.ref(images)
        factory = fw_factory(ref, reg=self.reg, bias_lr=self.bias_lr,
                             samples=self.samples, max_hidden=self.max_hidden,
                             bias_steps=self.bias_steps, evaluate=self.evaluate, eval_every=self.eval_every,
                             away_steps=self.away, seed=self.seed)
        # these settings make the run (a refused change leaves the widgets, not the run, moved;
        # a trainer that refuses them brings the run before back: build_refused)
        if not (hasattr(self, "runner") and self.runner.building):
            self._kept_run = self._run_settings
        self._run_settings = {"data": self.data, "images": images, "ref": ref, "seed": self.seed,
                              "evaluate": self.evaluate, "eval_every": self.eval_every}
        self.uploads.set_run(images)
        return factory

    def build_refused(self) -> None:
        self._run_settings = self._kept_run
        self.uploads.set_run(self._run_settings.get("images"))

    # ------------------------------------------------------------------ views
    def build_views(self) -> None:
        # short titles and labels: the two curves share the width beside the controls (at 1280x720
        # presentation mode's 'this step' entry made a 4-column legend and the longer label overrun it;
        # with two rows of pins under the plot "log-lik. per digit (nats)" ran 6 px over its top)
        self.ll_curve = LiveCurve("Log-likelihood vs. units (Fig. 1)", "Frank-Wolfe iteration t",
                                  "log-lik./digit (nats)", y2_label="units (dashed)",
                                  name="fw-ll", height=340, legend_cols=3)
        for key, text, color in (("train", "train", "#1f77b4"), ("valid", "validation", "#ff7f0e"),
                                 ("test", "test", "#2ca02c")):
            self.ll_curve.add_line(key, text, color)
        self.ll_curve.add_line("units", "hidden units", "#555555", axis="right", dash="dashed")
        self.selected_span = Span(location=0, dimension="height", line_color="#d62728", line_dash="dashed",
                                  line_width=2, visible=False)
        self.selected_label = Label(x=0, y=10, y_units="screen", text="", text_color="#d62728",
                                    text_font_size="10pt", x_offset=4, visible=False)
        self.ll_curve.figure.add_layout(self.selected_span)
        self.ll_curve.figure.add_layout(self.selected_label)
        self.inner_curve = LiveCurve("New unit's problem (eq. 9)", "Frank-Wolfe iteration t",
                                     "J(w*) of eq. 9 (nats)", y2_label="‖Δb‖ (dashed)",
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
        self._fields_shown: tuple | None = None
        # a look inside (issue 26): the persistent chains the trainer samples eq. 9 and eq. 10 with
        self.samples_grid = ImageGrid(f"Model samples: {SAMPLE_CHAINS} of the S persistent Gibbs chains "
                                      "(Algorithm 1, step 1; white 0, black 1)", kind="pixels",
                                      name="fw-samples", height=560, width=560, tile_label="chain")
        # a pin's pictures beside the live ones (issue 47): half the width each
        self.fields_beside = Beside(self.fields, ImageGrid(PIN_TITLE, name="fw-fields-pin", height=600, width=340), width=340)
        self.samples_beside = Beside(self.samples_grid, ImageGrid(PIN_TITLE, kind="pixels", name="fw-samples-pin", height=560,
                                                                  width=400, tile_label="chain"), width=400)
        self.cd_curve = LiveCurve(f"CD-{CD_K} after the fork (§4)", "CD epoch",
                                  "train log-lik. per digit (nats)", name="fw-cd", height=340)
        self.cd_curve.add_line("fw", "CD from Frank-Wolfe", "#1f77b4")
        self.cd_curve.add_line("random", "CD from random", "#d62728")
        for curve in (self.ll_curve, self.inner_curve):  # pinned runs: test log-lik., eq. 9's J(w*)
            curve.add_pins()
        self.fork_line = self.cd_curve.add_hline(None, color="#555", text="Frank-Wolfe at the fork")
        self.cd_curve.placeholder.reset("Pause, then “Train CD from here”")  # not ▶ Play: CD waits for a fork
        self.select_status = StatusBadge("Stopping rule (§4): not fired yet", "idle", one_line=True)

    def main_view(self) -> pn.viewable.Viewable:
        """The log-likelihood (train / validation / test) and the units against the iteration,
        beside the new unit's eq. 9 objective."""
        return pn.Row(self.ll_curve.view, self.inner_curve.view, sizing_mode="stretch_width")

    def stage(self) -> dict[str, pn.viewable.Viewable]:
        fork = pn.Column(pn.Row(self.fork, self.widgets["cd_epochs"], self.cd_status.pane, sizing_mode="stretch_width"),
                         self.cd_curve.view, sizing_mode="stretch_width")
        return {"Log-likelihood · eq. 9": self.main_view(), "Receptive fields": self.fields_beside.view,
                "CD fork (§4)": fork, "Samples": self.samples_beside.view}

    def badges(self) -> list:
        return [self.select_status.pane]

    def clear(self) -> None:
        self._last: dict[str, Any] = {}  # the newest numbers and arrays (W, b_vis, b_hid) the Records carried
        self._tests: list[tuple[int, float]] = []  # (iteration, test log-likelihood): the last two evaluations
        self._fields_dirty = False
        self._fields_time = 0.0
        self.ll_curve.clear()
        self.inner_curve.clear()
        self.selected_span.visible = self.selected_label.visible = False
        self._mark(None)
        self.fields.image_shape = self._run_settings["images"].image_shape
        self.samples_grid.image_shape = self.fields.image_shape
        self._draw_fields(None, None)
        self.samples_grid.update(None)
        if not self._loading:  # a checkpoint load resets the fork only once it has succeeded
            self._reset_cd()

    # ------------------------------------------------------------------ live updates
    def draw_records(self, records) -> None:
        recs = [r for name, r in records if name == FW]
        if not recs:
            return
        curves = [fw_curves(r) for r in recs]
        self.ll_curve.stream("units", [c["iteration"] for c in curves], [c["n_hidden"] for c in curves])
        for split in ("train", "valid", "test"):
            self._stream(self.ll_curve, split, [(c["iteration"], c[split]) for c in curves if split in c])
        if not len(self.ll_curve.sources["train"].data["x"]):  # only the units line yet: say when
            every = self._run_settings["eval_every"]
            self.ll_curve.say("log-likelihood not evaluated" if self._run_settings["evaluate"] == "none"
                              else f"log-likelihood at t = {every}, {2 * every}, …")
        self._stream(self.inner_curve, "inner", [(c["iteration"], c["inner"]) for c in curves
                                                 if c["inner"] is not None and np.isfinite(c["inner"])])
        self._stream(self.inner_curve, "bias", [(c["iteration"], c["bias_change"]) for c in curves
                                                if c["bias_change"] is not None])
        s = recs[-1].scalars
        # int(): a checkpoint's history carries every scalar as a float
        self._last.update(iteration=int(s["iteration"]), n_hidden=int(s["n_hidden"]),
                          removed=int(s.get("removed_unit", -1)), away=bool(s.get("away_step", False)))
        with_arrays = [r for r in recs if "W" in r.arrays]
        if with_arrays:  # the model to draw and to fork: the newest the Records carried
            newest = with_arrays[-1]
            self._last.update({k: newest.arrays[k] for k in ("W", "b_vis", "b_hid", "samples") if k in newest.arrays})
            self._last["arrays_iteration"] = int(newest.scalars["iteration"])
        for c in curves:
            if "train" in c:
                self._last["train"] = (int(c["iteration"]), c["train"])
            if "test" in c:
                self._tests = [*self._tests[-1:], (int(c["iteration"]), c["test"])]
        for r in recs:
            sel = r.scalars.get("selected_hidden", -1)
            if sel is not None and sel >= 0 and not self.selected_span.visible:
                self.selected_span.location = r.scalars["iteration"]
                self.selected_label.x = r.scalars["iteration"]
                self.selected_label.text = f"selected: {int(sel)} units"
                self.selected_span.visible = self.selected_label.visible = True
                self._last["selected"] = (int(sel), int(r.scalars["iteration"]))
        self._fields_dirty = True

    def pin_layers(self) -> dict:
        return {"test": self.ll_curve.pin_layer, "inner": self.inner_curve.pin_layer}

    def sweep_legends(self) -> list:
        """In a sweep, the live test log-likelihood and J(w*) name the first value (the other
        values' lines draw those two)."""
        run = self.view_runs[0] if self.view_runs else ""
        return [(self.ll_curve.legend_item("test"), run, "test {run}"),
                (self.inner_curve.legend_item("J(w*), eq. 9"), run, "{run}")]

    def pin_lines(self, pin) -> dict:
        """A pinned run's test log-likelihood (the headline of Fig. 1) and eq. 9's J(w*) per
        iteration, as the live lines draw them."""
        out: dict[str, list] = {}
        for rows in pin.history.rows.values():
            curves = [fw_curves(Record(row)) for row in rows]
            for key, layer in (("test", "test"), ("inner", "inner")):
                points = [(c["iteration"], c[key]) for c in curves
                          if c.get(key) is not None and np.isfinite(c[key])]
                if points:
                    xs, ys = zip(*points)
                    out.setdefault(layer, []).append((xs, ys))
        return out

    @staticmethod
    def _stream(curve: LiveCurve, key: str, points: list) -> None:
        if points:
            xs, ys = zip(*points)
            curve.stream(key, xs, ys)

    def on_tick(self) -> None:
        """Draw the receptive fields when due; drain the CD fork's runner; start its job again
        if a failed checkpoint load cancelled it."""
        playing = self.runner.playing
        if self._fields_dirty and (not playing or time.monotonic() - self._fields_time >= FIELDS_SECONDS):
            self._show_fields()
        if self.cd_runner is not None:
            self.on_cd_records(self.cd_runner.drain())
        fork = self._fork
        if fork is not None and fork["ll"] is None and not self._loading and not self.jobs.running("fork-ll"):
            self._submit_fork_ll()

    def busy(self) -> bool:
        cd = self.cd_runner
        fork = self._fork
        unsummarised = fork is not None and not fork["finished"] and cd is not None and not cd.active
        return self._fields_dirty or (cd is not None and cd.playing) or unsummarised

    def _show_fields(self) -> None:
        self._fields_dirty = False
        self._fields_time = time.monotonic()
        W = self._last.get("W")
        newest = None if W is None or self._last.get("away") else W.shape[1] - 1
        self._draw_fields(W, newest)
        self._show_samples()

    def _show_samples(self) -> None:
        """Draw the newest Record's model samples: the first persistent chains, as the trainer
        left them after its iteration (in the worker; no sampling here)."""
        samples = self._last.get("samples")
        if samples is None:
            return
        t = self._last.get("arrays_iteration", 0)
        self.samples_grid.update(np.asarray(samples, dtype=float).T,
                                 labels=[f"chain {i} after iteration {t}" for i in range(len(samples))])

    def _draw_fields(self, W: np.ndarray | None, newest: int | None) -> None:
        shown = self._fields_shown
        if W is not None and shown is not None and shown[0] is W and shown[1] == newest:
            return  # already drawn (a Next step's highlight after the tick drew the same model)
        self._fields_shown = None if W is None else (W, newest)
        if W is None or not np.size(W):
            self.fields.update(None)
            return
        n = W.shape[1]
        labels = [f"hidden unit #{j + 1} of {n}" + (" (the newest, outlined)" if j == newest else "")
                  for j in range(n)]
        self.fields.update(W, highlight=newest, labels=labels)

    def draw_beside(self, pin) -> None:
        """A pin's newest receptive fields (in insertion order, its newest unit outlined) and
        samples beside the live ones."""
        for pair in (self.fields_beside, self.samples_beside):
            pair.show(None if pin is None else pin.label)
        arrays = {} if pin is None else next(iter(pin.arrays.values()), {})
        if "W" in arrays and np.size(arrays["W"]):
            W = np.asarray(arrays["W"], dtype=float)
            n = W.shape[1]
            self.fields_beside.draw_tiles(W, highlight=n - 1,
                                          labels=[f"{pin.label}: hidden unit #{j + 1} of {n}" for j in range(n)])
        if "samples" in arrays:
            self.samples_beside.draw_tiles(np.asarray(arrays["samples"], dtype=float).T,
                                           labels=[f"{pin.label}: chain {i}" for i in range(len(arrays["samples"]))])

    # ------------------------------------------------------------------ status
    def counter(self) -> str:
        return f"Hidden units: {self._last.get('n_hidden', 0)}"

    def refresh_badges(self) -> None:
        self.fork.disabled = self.runner.playing or self._last.get("n_hidden", 0) < 1
        if "selected" in self._last:
            sel, it = self._last["selected"]
            # one line on a projector (1280x720): the rest on hover
            self.select_status.set("ok", f"Stopping rule (§4) fired: **{sel} hidden units**",
                                   details=f"At iteration {it} the train/validation gap grew: "
                                           f"the model of {sel} hidden units is selected.")
        else:
            self.select_status.set("idle", "Stopping rule (§4): not fired yet",
                                   details="It fires when the train/validation gap grows.")

    # ------------------------------------------------------------------ the CD fork (§4)
    @held
    def _fork_cd(self) -> None:
        """Fork the current model (the newest Record's W, b) into CD-10 beside a random start
        of the same size."""
        W = self._last.get("W")
        if W is None or W.shape[1] == 0:
            self.cd_status.set("warn", "Grow at least one hidden unit first.")
            return
        self.runner.pause()
        run = self._run_settings
        params = (W, self._last["b_vis"], self._last["b_hid"])
        epochs = self.cd_epochs
        try:
            rows, n_visible = run["images"].X_train.shape
            budget.require(lambda s: budget.cd_epoch(n_visible=n_visible, n_hidden=s["n_hidden"], rows=rows, k=CD_K),
                           [budget.Knob("n_hidden", "hidden units", W.shape[1], 1,
                                        "fork a model of ≤ {value:,} hidden units (earlier in a run)")],
                           f"two CD-{CD_K} epochs of {W.shape[1]:,} hidden units on {rows:,} digits")
            factory = cd_factory(run["ref"], params, epochs=epochs, seed=run["seed"])
        except ValueError as exc:
            self.cd_status.set("error", f"**Cannot start CD:** {exc}")
            return
        self._stop_cd()
        self.cd_curve.clear()
        self.cd_runner = Runner(factory, owner=self.owner)  # cheap: the runner's thread builds the trainers
        # one epoch per call: RBMTrainer.steps(k) evaluates only its last epoch, and the
        # comparison needs the likelihood of every epoch (an epoch is long enough anyway)
        self.cd_runner.max_batch = 1
        iteration = self._last.get("arrays_iteration", self._last.get("iteration", 0))
        fork = {"n_hidden": W.shape[1], "iteration": iteration, "epochs": epochs, "epoch": 0, "data": run["ref"],
                "evaluate": run["evaluate"], "seed": run["seed"], "params": params, "ll": None, "finished": False,
                "busy": None}
        self._fork = fork
        train = self._last.get("train")
        if train is not None and train[0] == iteration:  # this iteration was evaluated: its Record says
            self._show_fork_ll(fork, {"value": train[1], "from_record": True})
        else:
            self.fork_line.visible = False
            self._submit_fork_ll()
        fork["busy"] = play_or_tell(self.cd_runner)
        self._refresh_cd_status()
        self.refresh_status()

    def _submit_fork_ll(self) -> None:
        """Job: the forked model's training log-likelihood (its Record was not evaluated)."""
        fork = self._fork
        W, b_vis, b_hid = fork["params"]
        self.jobs.submit("fork-ll", train_log_likelihood, fork["data"], W, b_vis, b_hid, fork["evaluate"],
                         fork["seed"], then=functools.partial(self._show_fork_ll, fork),
                         error=functools.partial(self._fork_ll_failed, fork))
        self._refresh_cd_status()

    def _show_fork_ll(self, fork: dict, result: dict) -> None:
        if fork is not self._fork:  # a newer fork, or none
            return
        fork["ll"] = result
        self.fork_line.location = result["value"]
        self.fork_line.visible = True
        self._refresh_cd_status()

    def _fork_ll_failed(self, fork: dict, exc: BaseException) -> None:
        if fork is self._fork:
            fork["ll"] = {"error": f"{type(exc).__name__}: {exc}"}
            self._refresh_cd_status()

    def on_cd_records(self, records) -> None:
        """Draw the CD pair's Records; once both runs stop, say how they ended."""
        fork, runner = self._fork, self.cd_runner
        for name, r in records:
            if fork is not None:
                fork["epoch"] = max(fork["epoch"], int(round(r.scalars.get("epoch", 0))))
            ll = log_likelihood_of(r)
            if ll is not None:
                self.cd_curve.stream("fw" if name == CD_FROM_FW else "random", [r.scalars["epoch"]], [ll])
        if fork is None or runner is None:
            return
        if not runner.active and (records or not fork["finished"]):
            # (again when Records come after the summary: drained after it, published before the stop)
            fork["finished"] = True
            self._refresh_cd_status()
        elif records:
            self._refresh_cd_status()

    def _refresh_cd_status(self, note: str | None = None) -> None:
        fork, runner = self._fork, self.cd_runner
        if fork is None or runner is None:
            self.cd_status.set("idle", note or CD_IDLE)
            return
        failed = {n: s for n, s in runner.states.items() if s.status in ("error", "diverged")}
        if failed:
            text = "; ".join(f"{n}: {s.message or s.status}" for n, s in failed.items())
            self.cd_status.set("error", f"**CD stopped:** {text}")
        elif fork["finished"]:
            self.cd_status.set("ok", self._cd_summary() + self._fork_ll_text())
        elif fork["busy"] and not runner.playing:
            self.cd_status.set("warn", fork["busy"])
        else:
            self.cd_status.set("info", f"CD-{CD_K} with {fork['n_hidden']} hidden units: from the Frank-Wolfe "
                                       f"model (iteration {fork['iteration']}) and from a random start, epoch "
                                       f"{fork['epoch']} of {fork['epochs']}…" + self._fork_ll_text())

    def _fork_ll_text(self) -> str:
        ll = self._fork["ll"]
        if ll is None:
            return " Frank-Wolfe at the fork: computing its log-likelihood…"
        if "error" in ll:
            return f" Frank-Wolfe at the fork: its log-likelihood could not be computed ({ll['error']})."
        return f" Frank-Wolfe at the fork: {ll['value']:.2f} (dashed)."

    def _cd_summary(self) -> str:
        ends = {}
        for key, text in (("fw", "from Frank-Wolfe"), ("random", "from random")):
            ys = self.cd_curve.sources[key].data["y"]
            if len(ys):
                ends[text] = float(ys[-1])
        text = f"CD-{CD_K} done ({self._fork['n_hidden']} units). Final training log-likelihood: " + ", ".join(
            f"{k} {v:.2f}" for k, v in ends.items()) + "."
        if len(ends) == 2:
            better = "Frank-Wolfe" if ends["from Frank-Wolfe"] > ends["from random"] else "random"
            text += f" The {better} start ends higher."
        return text

    def _stop_cd(self) -> None:
        if self.cd_runner is not None:
            self.cd_runner.close(timeout=0)  # never waits: a step in flight ends in its own thread
            self.cd_runner = None

    def _reset_cd(self, note: str | None = None) -> None:
        self._stop_cd()
        self.jobs.cancel("fork-ll")
        self.cd_curve.clear()
        self.fork_line.visible = False
        self._fork = None
        self._refresh_cd_status(note)

    def close(self, wait: float = 0.5) -> None:
        self._stop_cd()
        super().close(wait)

    # ------------------------------------------------------------------ presentation
    def describe_change(self, name, before, after, before_arrays, after_arrays) -> str | None:
        """The unit this iteration inserted (outlined in the grid, circled on the curves) or
        removed, its eq. 9 objective, the eq. 10 bias change, the log-likelihood."""
        if name != FW or "iteration" not in after:
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
            text += f"; eq. 10 moved the visible biases by ‖Δb‖ = {after['bias_change']:.3g}"
        if after.get("bias_updates") is not None:
            updates, mismatch = int(after["bias_updates"]), float(after.get("bias_mismatch", np.nan))
            text += (f" in {updates} updates, until the pixel means matched the data's (largest gap {mismatch:.3f})"
                     if after.get("bias_converged") else
                     f" in {updates} updates, <b>its cap: stopped before the pixel means matched</b> "
                     f"(largest gap {mismatch:.3f})")
        ll = after.get("test_log_likelihood")
        if ll is not None and np.isfinite(ll):
            previous = [v for it, v in self._tests if it < t]
            if not previous:
                text += f"; test log-likelihood <b>{ll:.3f}</b> nats"
            else:
                gain = ll - previous[-1]
                text += (f"; test log-likelihood {previous[-1]:.3f} → <b>{ll:.3f}</b> nats "
                         f"({'▲' if gain >= 0 else '▼'} {abs(gain):.3g})")
        else:
            text += f"; log-likelihood not evaluated this step (every {self._run_settings['eval_every']})"
        if after.get("selected_hidden", -1) >= 0 and before.get("selected_hidden", -1) < 0:
            text += f"; the §4 stopping rule fired: selected size {int(after['selected_hidden'])} units"
        return text + "."

    def highlight(self, name, before, after, before_arrays, after_arrays) -> None:
        """Outline the inserted unit's tile in the grid (none after a removal) and circle this
        iteration's points on the eq. 9 curve and the test log-likelihood."""
        if name != FW or "iteration" not in after:
            return
        W = after_arrays.get("W")
        removed = int(after.get("removed_unit", -1)) >= 0
        if W is not None:
            self._draw_fields(W, None if removed else np.shape(W)[1] - 1)
        ll = after.get("test_log_likelihood")
        self._mark(int(after["iteration"]), float(after.get("inner_objective", np.nan)),
                   ll if ll is not None and np.isfinite(ll) else None)

    def clear_highlight(self) -> None:
        self._mark(None)

    def _mark(self, t: float | None, inner: float | None = None, ll: float | None = None) -> None:
        """Circle iteration ``t`` on the eq. 9 curve and the test log-likelihood (None: clear)."""
        ok = t is not None and inner is not None and np.isfinite(inner)
        self.mark_inner.data = {"x": [t] if ok else [], "y": [inner] if ok else []}
        self.mark_ll.data = {"x": [t] if t is not None and ll is not None else [], "y": [ll] if ll is not None else []}
        for item, source in ((self.mark_inner_item, self.mark_inner), (self.mark_ll_item, self.mark_ll)):
            if item is not None:
                item.visible = bool(len(source.data["x"]))
