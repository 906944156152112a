"""The Frank-Wolfe lab: an RBM that grows one hidden unit at a time.

Paper: Ping, Liu & Ihler (2016), "Learning Infinite RBMs with Frank-Wolfe" (NIPS).
"""

from __future__ import annotations

import functools
import time

import numpy as np
import panel as pn
from bokeh.models import Label, Span

from dashboard.labs.frankwolfe_setup import (
    CD_EPOCHS, CD_K, DATASETS, DEFAULTS, EVALUATIONS, cd_factory, fw_curves, fw_factory, log_likelihood_of, splits,
)
from dashboard.labs.tap_setup import load_images
from dashboard.runner import Runner, attach, play_or_tell
from dashboard.views import LiveCurve, StatusBadge
from dashboard.views.image_grid import ImageGrid

RADIO = dict(color="primary", variant="outline")
SPEEDS = {"1 unit/s": 1.0, "as fast as possible": None}
DEFAULT_DATA = "mnist"
FIELDS_PER_SECOND = 2.0  # receptive-field grid redraws at most this often while playing

INTRO = """
### Frank-Wolfe: an RBM that grows one hidden unit at a time

Ping, Liu & Ihler (2016) let an RBM have a *distribution* q(w) over hidden-unit weights
(eq. 5); its penalized likelihood (eq. 6) is then **concave in q**, and Frank-Wolfe solves it
by **inserting one hidden unit per iteration**: draw samples from the current model, find
the new unit's weights w* by L-BFGS on eq. 9, mix it in with step 1/t (with α = t the model
*is* a standard RBM with t units), then move the visible biases (eq. 10). Press **▶ Play** and
watch the hidden layer grow, each new unit's receptive field appear (outlined), and the test
log-likelihood climb and level off; the stopping rule of §4 marks the selected size when the
train/validation gap grows. **Train CD from here** forks the current model into CD-10 beside
a randomly initialised CD-10 run of the same size (Fig. 1).
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


class FrankWolfeLab:
    """Controls + live views around two runners: Frank-Wolfe, and the CD pair forked from it."""

    title = "Frank-Wolfe"

    def __init__(self) -> None:
        self._build_widgets()
        self._build_views()
        self.runner = Runner(self._factory(), watch="inner_objective")
        self.runner.set_speed(SPEEDS[self.speed.value])
        self.cd_runner: Runner | None = None
        self._callbacks: list = []
        self._last: dict = {}
        self._fields_time = 0.0
        self._fields_dirty = False
        self._status_time = 0.0
        self._fork: dict | None = None
        self._on_data()

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

        self.data.param.watch(lambda e: self._on_data(), "value")
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
        self.ll_curve = LiveCurve("Log-likelihood as units are inserted (Fig. 1)", "Frank-Wolfe iteration t",
                                  "mean log-likelihood per digit (nats)", y2_label="hidden units (dashed)",
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
        self.inner_curve = LiveCurve("The inner problem per insertion (eq. 9)", "Frank-Wolfe iteration t",
                                     "eq. 9 at the new unit w*", y2_label="‖Δb‖ of the bias steps (dashed)",
                                     name="fw-inner", height=340)
        self.inner_curve.add_line("inner", "eq. 9 at w* (lower: a more useful unit)", "#9467bd")
        self.inner_curve.add_line("bias", "bias change ‖Δb‖", "#8c564b", axis="right", dash="dashed")
        self.fields = ImageGrid("Receptive fields in insertion order; the newest unit outlined", name="fw-fields",
                                height=600, width=680)
        self.cd_curve = LiveCurve(f"CD-{CD_K} after the fork (§4)", "CD epoch",
                                  "train log-likelihood per digit (nats)", name="fw-cd", height=340)
        self.cd_curve.add_line("fw", "CD from Frank-Wolfe", "#1f77b4")
        self.cd_curve.add_line("random", "CD from random", "#d62728")
        self.fork_line = self.cd_curve.add_hline(None, color="#555", text="Frank-Wolfe at the fork")
        self.counter = pn.pane.HTML("Hidden units: 0", name="fw-counter",
                                    styles={"font-size": "1.4em", "font-weight": "bold"}, width=200)
        self.run_status = StatusBadge("Ready: press ▶ Play to grow the RBM", "idle", width=330)
        self.select_status = StatusBadge("Stopping rule (§4): not fired yet", "idle", width=430)
        self.cd_status = StatusBadge("Pause, then press “Train CD from here” to compare with CD", "idle")
        self.data_info = pn.pane.Markdown("", styles={"font-size": "0.9em"})

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
        right = pn.Column(bar, badges, pn.Row(self.ll_curve.view, self.inner_curve.view, sizing_mode="stretch_width"),
                          pn.Row(self.fields.view, self.cd_curve.view, sizing_mode="stretch_width"),
                          sizing_mode="stretch_width")
        return pn.Column(pn.pane.Markdown(INTRO, sizing_mode="stretch_width"),
                         pn.Row(controls, right, sizing_mode="stretch_width"),
                         sizing_mode="stretch_width", name=self.title)

    def start(self) -> None:
        if not self._callbacks:
            self._callbacks.append(attach(self.runner, self.on_records, 200))

    # ------------------------------------------------------------------ settings
    def _factory(self):
        return fw_factory(self.data.value, reg=self.reg.value, bias_lr=self.bias_lr.value, samples=self.samples.value,
                          max_hidden=self.max_hidden.value, evaluate=self.evaluate.value,
                          eval_every=self.eval_every.value, away_steps=self.away.value, seed=self.seed.value)

    @_held
    def _on_data(self) -> None:
        self._applying = True  # one rebuild for all the default settings
        try:
            for name, value in DEFAULTS[self.data.value].items():
                getattr(self, name).value = value
        finally:
            self._applying = False
        images = load_images(self.data.value)
        n, v, t = images.split_sizes
        shape = images.image_shape
        self.data_info.object = (f"**{images.name}**: {n:,} training, {v:,} validation (the stopping rule) and "
                                 f"{t:,} test digits of {shape[0]}×{shape[1]} binary pixels.")
        self.fields.image_shape = shape
        self._rebuild()

    @_held
    def _rebuild(self) -> None:
        if getattr(self, "_applying", False):
            return
        try:
            factory = self._factory()
            self.runner.reset(factory)
        except ValueError as exc:
            self.settings_msg.set("error", f"**Invalid setting:** {exc}")
            self.settings_msg.pane.visible = True
            return
        self.settings_msg.pane.visible = False
        self._clear()

    def _clear(self) -> None:
        self._last = {}
        self.ll_curve.clear()
        self.inner_curve.clear()
        self.selected_span.visible = self.selected_label.visible = False
        self.fields.update(None)
        self._stop_cd()
        self.cd_curve.clear()
        self.fork_line.visible = False
        self._refresh_status()

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
        self._fork = {"n_hidden": n_hidden, "iteration": self._last.get("iteration")}
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
        self._last = {**self._last, **keep, "iteration": s["iteration"], "n_hidden": s["n_hidden"],
                      "removed": s.get("removed_unit", -1), "away": bool(s.get("away_step", False))}
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
            self.fields.update(None)
            return
        newest = None if self._last.get("away") else W.shape[1] - 1
        self.fields.update(W, highlight=newest)

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
