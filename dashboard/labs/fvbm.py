"""The FVBM lab: watch BSLM (and gradient ascent) maximise the pseudo-likelihood live.

Paper: Nguyen & Wood (2016), "A block successive lower-bound maximization algorithm for
the maximum pseudo-likelihood estimation of fully visible Boltzmann machines".
"""

from __future__ import annotations

import functools
import time

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource

from dashboard.labs.fvbm_setup import (BOUND_LABEL, DEFAULT_DATA, LBFGS_LABEL, SQUAREM_LABEL, DataSet,
                                       load_data, monotone_guaranteed, parse_mus,
                                       trainer_factory)
from dashboard.labtools import LabTools, Preset, intro_card
from dashboard.runner import Runner, attach, play_or_tell
from dashboard.views import Heatmap, LiveCurve, StatusBadge

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#bcbd22"]
# the race's bound MM and L-BFGS keep their colours whatever the number of μ values
FIXED_COLORS = {BOUND_LABEL: "#17becf", SQUAREM_LABEL: "#0b6e7a", LBFGS_LABEL: "#7f7f7f"}
RADIO = dict(color="primary", variant="outline")
SPEEDS = {"1 sweep/s": 1.0, "5 sweeps/s": 5.0, "20 sweeps/s": 20.0, "100 sweeps/s": 100.0,
          "1000 sweeps/s": 1000.0, "as fast as possible": None}

INTRO = """
A **fully visible Boltzmann machine** (FVBM) is a distribution over ±1 vectors with
biases **b** and symmetric couplings **M**. Its likelihood needs a sum over all 2<sup>d</sup>
states, so it is fitted by maximising the **log-pseudo-likelihood** P<sub>n</sub>(θ) (eq. 2.1)
instead. The **BSLM** algorithm (Nguyen & Wood, 2016) updates one parameter at a time by
maximising a quadratic lower bound (eqs. 2.3, 2.6), which gives the closed-form updates
(2.4) and (2.7): P<sub>n</sub> can *never decrease*. **Gradient ascent** with step μ
(eqs. 4.1, 4.2) is BSLM for μ = 1 and is only guaranteed to increase for μ ≤ 1. The race
also runs two methods that update **all** parameters at once (one step = one iteration):
the **quadratic bound** of Jebara & Choromanska (2012) on every term of eq. 2.1, monotone
too, with a curvature tanh(u)/u that adapts to the fields u where BSLM's bound keeps the
fixed maximum 1 (also with SQUAREM extrapolation, kept only when it improves, so still
monotone); and **L-BFGS**, fast but without a monotonicity guarantee.
"""

EQUATIONS = r"""
$$P_n(\theta) = \sum_{i=1}^{n} \sum_{j=1}^{d} \Big[ x_{ij} (m_j^\top x_i + b_j) - \log\cosh(m_j^\top x_i + b_j) - \log 2 \Big] \qquad (2.1)$$

$$b_j \leftarrow b_j + \frac{\mu}{n} \frac{\partial P_n}{\partial b_j}, \qquad m_{jk} \leftarrow m_{jk} + \frac{\mu}{2n} \frac{\partial P_n}{\partial m_{jk}} \qquad \text{(2.4, 2.7: BSLM is } \mu = 1\text{; 4.1, 4.2: gradient ascent)}$$
"""

WATCH = """
Press **▶ Play** and watch the log-PL curve rise without a single dip (the badge checks
every sweep). Then choose the preset *μ > 1 overshoots, μ = 20 diverges*: large μ is faster
until it overshoots (a red ✗ marks its first decrease) or diverges. In presentation mode,
**Next step** outlines the coupling that moved most in the estimate M̂.
"""

PRESETS = [
    Preset("BSLM on the paper's simulation (d = 10, n = 16,000)",
           {"source": "simulated", "d": 10, "n": 16000, "data_seed": 1, "mode": "Single run",
            "algorithm": "bslm", "tol": 1e-5, "init": "zeros", "speed": "20 sweeps/s"},
           "The §5 design: watch the log-PL rise monotonically to the MPLE (dashed)."),
    Preset("μ > 1 overshoots, μ = 20 diverges",
           {"source": "simulated", "d": 10, "n": 16000, "data_seed": 1, "mode": "Race",
            "race_mus": "0.5, 2.5, 8, 20", "tol": 1e-5, "init": "zeros",
            "speed": "5 sweeps/s"},
           "Gradient ascent with μ = 2.5 is faster than BSLM; μ = 8 overshoots (✗) and "
           "μ = 20 diverges, while BSLM and the bound never decrease."),
    Preset("Gradient ascent with μ = 1 is BSLM",
           {"source": "simulated", "d": 10, "n": 16000, "data_seed": 1, "mode": "Race",
            "race_mus": "1", "tol": 1e-5, "init": "zeros", "speed": "5 sweeps/s"},
           "Eqs. 4.1, 4.2 with μ = 1 are eqs. 2.4, 2.7: the BSLM and GA μ=1 curves coincide."),
    Preset("Senate votes: a real data set",
           {"source": "senate", "mode": "Race", "race_mus": "0.5, 2.5", "tol": 1e-5,
            "init": "zeros", "speed": "20 sweeps/s"},
           "147 divisions × 9 parties: the MPLE of real data, no true parameters to compare."),
    Preset("Random start, larger model (d = 20)",
           {"source": "simulated", "d": 20, "n": 16000, "data_seed": 2, "mode": "Single run",
            "algorithm": "bslm", "tol": 1e-5, "init": "random", "init_seed": 3,
            "speed": "as fast as possible"},
           "d = 20 is still small enough for the exact log-likelihood (right plot)."),
]



def _held(method):
    """Run a UI handler inside one ``pn.io.hold`` so all its changes go out together.

    In a served session Panel writes a held batch to the browser at once, while changes
    made outside a hold are queued and written after it.  A handler that changed some
    models before entering a hold (e.g. emptied a heatmap) and refilled them inside one
    therefore left the browser with the stale, earlier state.
    """
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with pn.io.hold(freeze=True):
            return method(self, *args, **kwargs)
    return wrapper


def _label(text: str) -> pn.pane.Markdown:
    return pn.pane.Markdown(f"**{text}**", margin=(6, 10, -8, 10))


class FVBMLab:
    """Controls + live views around one :class:`Runner` (one per browser session)."""

    title = "FVBM"
    key = "fvbm"
    presets = PRESETS

    def __init__(self) -> None:
        self._applying = False  # apply_settings sets many widgets, then rebuilds once
        self._build_widgets()
        self.data: DataSet = load_data("simulated", d=self.d.value, n=self.n.value,
                                       seed=self.data_seed.value)
        self.runner = Runner(self._factory(), watch="log_pl")
        self.runner.set_speed(SPEEDS[self.speed.value])
        self._build_views()
        self._callback = None
        self._on_new_data()
        self.tools = LabTools(self)

    # ------------------------------------------------------------------ LabTools contract
    def settings(self) -> dict:
        """The widgets whose values define a run (URL, presets, checkpoints)."""
        return {"source": self.source, "d": self.d, "n": self.n, "data_seed": self.data_seed,
                "mode": self.mode, "algorithm": self.algorithm, "mu": self.mu,
                "race_mus": self.race_mus, "tol": self.tol, "init": self.init,
                "init_seed": self.init_seed, "speed": self.speed}

    @_held
    def apply_settings(self, values: dict) -> None:
        """Set many widgets, then rebuild the data and the run once; ``ValueError`` if the
        values make no valid run (the widgets keep the new values, the run the old ones)."""
        widgets = self.settings()
        if values.get("source") == "upload" and self.source.value != "upload":
            raise ValueError("These settings use an uploaded CSV, which a link or checkpoint "
                             "does not contain: upload the file first, then load again.")
        self._applying = True
        try:
            for name, value in values.items():
                widgets[name].value = value
        finally:
            self._applying = False
        self._update_visibility()
        if self.source.value != "upload":
            data = load_data(self.source.value, d=self.d.value, n=self.n.value,
                             seed=self.data_seed.value)
            self.runner.pause()
            self.data = data
            self.data_msg.pane.visible = False
        self._on_new_data(strict=True)

    @_held
    def redraw(self, records) -> None:
        """Clear the views and replay ``records`` (a loaded checkpoint's history)."""
        self._setup_lines()
        self.on_records(records)
        self._status_time = 0.0
        self.on_records([])

    def step_once(self) -> None:
        self._step()

    def refresh_status(self) -> None:
        self._refresh_status()

    def describe_change(self, name, before, after, before_arrays, after_arrays) -> str | None:
        """Presentation mode: one sweep's gain, and the coupling that moved most (outlined)."""
        if "log_pl" not in after:
            return None
        gain = after["log_pl"] - before["log_pl"] if "log_pl" in before else None
        text = f"<b>{name}</b>, sweep {int(after['sweep'])}: log-PL {after['log_pl']:,.4f}"
        if gain is not None:
            text += f" ({'▲' if gain >= 0 else '▼'} {abs(gain):.3g})"
        M0, M1 = before_arrays.get("M"), after_arrays.get("M")
        if M0 is not None and M1 is not None and np.shape(M0) == np.shape(M1):
            delta = np.abs(np.asarray(M1) - np.asarray(M0))
            if np.all(np.isfinite(delta)) and delta.max() > 0:
                i, j = np.unravel_index(int(np.argmax(delta)), delta.shape)
                text += (f"; the coupling that moved most: m<sub>{i + 1},{j + 1}</sub> "
                         f"{M0[i, j]:+.4f} → {M1[i, j]:+.4f} (outlined in M̂)")
                if name == self.heat_pick.value:
                    self.heat_est.mark([(i, j), (j, i)])
        return text

    # ------------------------------------------------------------------ widgets
    def _build_widgets(self) -> None:
        w = pn.widgets
        self.source = w.RadioButtonGroup(
            label="Data", options={"Simulated": "simulated", "Senate votes": "senate",
                                  "Upload CSV": "upload"}, value="simulated",
            **RADIO)
        self.d = w.IntInput(label="Variables d", value=DEFAULT_DATA["d"], start=2, end=30, width=90)
        self.n = w.IntInput(label="Rows n", value=DEFAULT_DATA["n"], start=10, end=200_000, step=1000,
                            width=100)
        self.data_seed = w.IntInput(label="Data seed", value=DEFAULT_DATA["seed"], start=0, width=90)
        self.upload = w.FileInput(accept=".csv", multiple=False, visible=False)
        self.upload_help = pn.pane.Markdown(
            "A CSV with a header row and one column per variable; values ±1 (or 0/1). "
            "Rows with missing values are dropped.", visible=False,
            styles={"font-size": "0.85em", "color": "#555"})
        self.data_info = pn.pane.Markdown("", styles={"font-size": "0.9em"})
        self.data_msg = StatusBadge("", "info", visible=False)

        self.mode = w.RadioButtonGroup(label="Mode", options=["Single run", "Race"],
                                       value="Single run", **RADIO)
        self.algorithm = w.RadioButtonGroup(
            label="Algorithm", options={"BSLM": "bslm", "Gradient ascent": "ga"},
            value="bslm", **RADIO)
        self.mu = w.FloatInput(label="Step μ (gradient ascent)", value=1.5, start=0.01,
                               end=10.0, step=0.1, visible=False)
        self.race_mus = w.TextInput(label="Race BSLM, bound, L-BFGS and GA with μ =",
                                    value="0.5, 2.5, 8, 20", visible=False)
        self.tol = w.Select(label="Stop when the increase is below τ =",
                            options={"1e-2": 1e-2, "1e-3": 1e-3, "1e-4": 1e-4, "1e-5": 1e-5,
                                     "1e-6": 1e-6, "1e-8": 1e-8}, value=1e-5)
        self.init = w.RadioButtonGroup(label="Initial parameters",
                                       options={"Zeros": "zeros", "Random N(0, 0.5)": "random"},
                                       value="zeros", **RADIO)
        self.init_seed = w.IntInput(label="Initialisation seed", value=0, start=0, width=120)
        self.algo_msg = StatusBadge("", "warn", visible=False)

        self.play = w.Button(label="▶ Play", color="success", width=90)
        self.pause = w.Button(label="❚❚ Pause", color="warning", width=100, disabled=True)
        self.step = w.Button(label="Step", color="primary", width=80)
        self.reset = w.Button(label="↺ Reset", color="default", width=90)
        self.speed = w.Select(label="Speed", options=list(SPEEDS), value="20 sweeps/s",
                              width=170)

        self.source.param.watch(self._on_source, "value")
        for widget in (self.d, self.n, self.data_seed):
            widget.param.watch(lambda e: self._change_data(), "value")
        self.upload.param.watch(self._on_upload, "value")
        for widget in (self.mode, self.algorithm, self.mu, self.race_mus, self.tol, self.init,
                       self.init_seed):
            widget.param.watch(self._on_algorithm, "value")
        self.play.on_click(lambda e: self._play())
        self.pause.on_click(lambda e: self._pause())
        self.step.on_click(lambda e: self._step())
        self.reset.on_click(lambda e: self._reset())
        self.speed.param.watch(lambda e: self.runner.set_speed(SPEEDS[e.new]), "value")
        for widget in (self.play, self.pause, self.reset):
            widget.on_click(lambda e: self.heat_est.mark([]))

    # ------------------------------------------------------------------ views
    def _build_views(self) -> None:
        # 3 legend columns: a race's long names ("Bound (Jebara–Choromanska)") fit the
        # half-width plots (4 pushed the last column past the right edge)
        self.logpl = LiveCurve("Log-pseudo-likelihood per sweep", "sweep",
                               "log-pseudo-likelihood Pₙ(θ), nats (solid)", y2_label="log₁₀ increase per sweep (dashed)",
                               name="logpl", height=400, plain_ticks=True, legend_cols=3)
        self.logpl.add_target("MPLE (target)")
        self.tol_span = self.logpl.add_hline(None, color="#999", dash="dotted", axis="right",
                                              text="τ: stop below this increase")
        self.decrease_source = ColumnDataSource({"x": [], "y": []}, name="decreases")
        self.logpl.figure.scatter("x", "y", source=self.decrease_source, marker="x",
                                  size=14, line_width=3, color="#d62728",
                                  legend_label="first decrease")
        # listed only once a decrease has been marked
        self.decrease_item = self.logpl.legend_item("first decrease")
        self.decrease_item.visible = False
        self.loglik = LiveCurve("Exact log-likelihood per sweep (d ≤ 20)", "sweep",
                                "log-likelihood (nats)", name="loglik", height=400, plain_ticks=True,
                                legend_cols=3)
        self.loglik.add_target("at the MPLE")
        self.mse = LiveCurve("Mean squared error of (b, M) against the true parameters",
                             "sweep", "MSE", name="mse", height=300, legend_cols=8)
        labels = self.data.columns
        self.heat_est = Heatmap("M̂: current estimate", labels, value_label="M̂", name="M_hat")
        self.heat_true = Heatmap("M₀: true couplings", labels, value_label="M₀", name="M_true")
        self.heat_diff = Heatmap("M̂ − M₀: error", labels, value_label="M̂ − M₀",
                                 name="M_diff")
        self.heat_pick = pn.widgets.Select(label="Show the estimate of", options=[], width=200)
        self.heat_pick.param.watch(lambda e: self._show_matrices(), "value")

        self.sweep_counter = pn.pane.HTML("Sweep 0", name="sweep-counter",
                                          styles={"font-size": "1.4em", "font-weight": "bold"},
                                          css_classes=["sweep-counter"], width=130)
        self.run_status = StatusBadge("Ready: press ▶ Play", "idle", width=330)
        self.monotone = StatusBadge("Monotone: no sweeps yet", "idle", width=360)
        self.summary = pn.pane.Markdown("", sizing_mode="stretch_width")
        self._sweeps: dict[str, int] = {}
        self._last_logpl: dict[str, float] = {}
        self._last_arrays: dict[str, dict] = {}
        self._first_decrease: dict[str, int] = {}
        self._status_key: tuple = ()
        self._status_time = 0.0
        self._matrices_stale = False
        self._line_names: list[str] = []

    def _setup_lines(self) -> None:
        """(Re)build the lines for the current trainers (one model-graph update)."""
        with pn.io.hold(freeze=True):
            self._rebuild_lines()

    def _rebuild_lines(self) -> None:
        names = list(self.runner.trainers)
        if names != self._line_names:  # Reset keeps the same runs: keep their lines
            self._add_lines(names)
        self.logpl.clear()
        self.loglik.clear()
        self.mse.clear()
        self.decrease_source.data = {"x": [], "y": []}
        self.decrease_item.visible = False
        self.heat_pick.options = names
        self.heat_pick.value = names[0] if names else None
        self.heat_pick.visible = len(names) > 1
        self._sweeps = {n: 0 for n in names}
        self._last_logpl = {}
        # the heatmaps start from the initial parameters, not from an empty plot
        self._last_arrays = {n: {"M": np.asarray(t.M)} for n, t in self.runner.trainers.items()
                             if getattr(t, "M", None) is not None}
        self._first_decrease = {}
        self.tol_span.location = float(np.log10(self.tol.value))
        self.tol_span.visible = True
        self._show_matrices()
        self._refresh_status()
        if self._callback is not None and self._callback.period != self.period_ms():
            self._callback.period = self.period_ms()

    def _add_lines(self, names: list[str]) -> None:
        for curve in (self.logpl, self.loglik, self.mse):
            curve.remove_lines()
        others = iter(COLORS * (1 + len(names) // len(COLORS)))
        for name in names:
            color = FIXED_COLORS.get(name) or next(others)
            self.logpl.add_line(f"{name}/log_pl", name, color)
            self.logpl.add_line(f"{name}/inc", f"{name}: log₁₀ increase", color, axis="right",
                                dash="dashed", width=1.2, legend=name)  # hidden together
            self.loglik.add_line(f"{name}/log_lik", name, color)
            self.mse.add_line(f"{name}/mse", name, color)
        self._line_names = names

    # ------------------------------------------------------------------ layout
    def panel(self) -> pn.viewable.Viewable:
        data_card = pn.Card(_label("Source"), self.source, pn.Row(self.d, self.n, self.data_seed),
                            self.upload, self.upload_help, self.data_msg.pane, self.data_info,
                            title="1. Data", collapsible=False, sizing_mode="stretch_width")
        algo_card = pn.Card(_label("Mode"), self.mode, _label("Algorithm"), self.algorithm,
                            self.mu, self.race_mus, self.tol,
                            _label("Initial parameters"),
                            self.init, self.init_seed, self.algo_msg.pane, title="2. Algorithm",
                            collapsible=False, sizing_mode="stretch_width")
        controls = pn.Column(data_card, algo_card, width=340)
        bar = pn.Row(self.play, self.pause, self.step, self.reset, self.speed,
                     self.sweep_counter, align="center")
        badges = pn.Row(self.run_status.pane, self.monotone.pane, sizing_mode="stretch_width")
        curves = pn.Row(self.logpl.view, self.loglik.view, sizing_mode="stretch_width")
        # the heatmaps scale down together so the row fits (see views.heatmap)
        heat = pn.Column(self.heat_pick, pn.Row(self.heat_est.view, self.heat_true.view,
                                                self.heat_diff.view, sizing_mode="stretch_width"),
                         sizing_mode="stretch_width")
        right = pn.Column(bar, self.tools.presenter(), badges, self.summary, curves,
                          self.mse.view, heat, sizing_mode="stretch_width")
        page = pn.Column(
            intro_card("Fully visible Boltzmann machine: maximum pseudo-likelihood, live",
                       INTRO, EQUATIONS, WATCH),
            self.tools.panel(), pn.Row(controls, right, sizing_mode="stretch_width"),
            sizing_mode="stretch_width", name=self.title)
        self.tools.root = page
        return page

    def start(self) -> None:
        """Attach the runner to the current session (periodic drain + cleanup)."""
        if self._callback is None:
            self._callback = attach(self.runner, self.on_records, self.period_ms())

    def period_ms(self) -> int:
        """Time between two plot updates: 10 Hz, slower when racing many trainers.

        Every line costs the browser work on each repaint; measured in headless
        Chromium on 2 cores, 5 racing trainers at 10 Hz made the page unresponsive.
        """
        return int(100 * max(1.0, len(self.runner.trainers) / 2))

    # ------------------------------------------------------------------ data
    @_held
    def _on_source(self, event) -> None:
        if self._applying:
            return
        self._update_visibility()
        if event.new != "upload":
            self._change_data()

    def _update_visibility(self) -> None:
        source = self.source.value
        for widget in (self.d, self.n, self.data_seed):
            widget.visible = source == "simulated"
        self.upload.visible = self.upload_help.visible = source == "upload"
        race = self.mode.value == "Race"
        self.algorithm.visible = not race
        self.mu.visible = not race and self.algorithm.value == "ga"
        self.race_mus.visible = race

    @_held
    def _on_upload(self, event) -> None:
        if event.new:
            self._change_data(content=event.new, filename=self.upload.filename or "upload.csv")

    @_held
    def _change_data(self, content: bytes | None = None, filename: str = "") -> None:
        if self._applying:
            return
        try:
            data = load_data(self.source.value, d=self.d.value, n=self.n.value,
                             seed=self.data_seed.value, content=content, filename=filename)
        except ValueError as exc:
            self.data_msg.set("error", f"**Could not use this data:** {exc}  \n"
                                       f"Still using: {self.data.data.name}.")
            self.data_msg.pane.visible = True
            return
        if self.source.value == "upload" and content is None:
            return  # wait for a file
        self.runner.pause()
        self.data = data
        self.data_msg.pane.visible = False
        self._on_new_data()

    @_held
    def _on_new_data(self, strict: bool = False) -> None:
        data = self.data
        labels = data.columns
        for heat in (self.heat_est, self.heat_true, self.heat_diff):
            heat.set_labels(labels)
        has_truth = data.data.truth is not None
        self.heat_true.view.visible = self.heat_diff.view.visible = has_truth
        self.mse.view.visible = has_truth
        self.loglik.view.visible = data.exact_every > 0
        self.data_info.object = data.describe()
        if data.warning:
            self.data_msg.set("warn", data.warning, data.warning_detail)
            self.data_msg.pane.visible = True
        self.logpl.set_target(data.mple_logpl)
        self.loglik.set_target(data.mple_loglik)
        self._rebuild(strict)

    # ------------------------------------------------------------------ algorithm
    @_held
    def _on_algorithm(self, event) -> None:
        if self._applying:
            return
        self._update_visibility()
        self._rebuild()

    def _factory(self):
        mus = parse_mus(self.race_mus.value) if self.mode.value == "Race" else None
        return trainer_factory(self.data, algorithm=self.algorithm.value, mu=self.mu.value,
                               tol=self.tol.value, init=self.init.value,
                               seed=self.init_seed.value, race_mus=mus)

    def _rebuild(self, strict: bool = False) -> None:
        try:
            factory = self._factory()
            self.runner.reset(factory)
        except ValueError as exc:
            self.algo_msg.set("error", f"**Invalid setting:** {exc}")
            self.algo_msg.pane.visible = True
            if strict:
                raise
            return
        self.algo_msg.pane.visible = False
        self._setup_lines()

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
        self._setup_lines()

    # ------------------------------------------------------------------ live updates
    def on_records(self, records) -> None:
        """Push what the worker produced since the last tick into the views."""
        by_name: dict[str, list] = {}
        for name, record in records:
            by_name.setdefault(name, []).append(record)
        for name, recs in by_name.items():
            if name not in self._sweeps:
                continue  # from trainers replaced by a reset
            self._stream(name, recs)
        # text panes re-layout the page in the browser: refresh them at most ~3 times a
        # second, or at once when the run state changes
        key = (self.runner.playing, tuple(s.status for s in self.runner.states.values()))
        now = time.monotonic()
        if key != self._status_key or now - self._status_time > 0.3:
            if any(r.arrays for r in by_name.get(self.heat_pick.value, ())) or \
                    self._matrices_stale:
                self._show_matrices()
            self._refresh_status()
            self._status_key, self._status_time = key, now
        elif by_name:
            self._matrices_stale = True

    def _stream(self, name: str, recs: list) -> None:
        sweep = np.array([r.scalars["sweep"] for r in recs], dtype=float)
        log_pl = np.array([r.scalars["log_pl"] for r in recs], dtype=float)
        inc = np.array([r.scalars.get("increase", np.nan) for r in recs], dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            log_inc = np.where(inc > 0, np.log10(inc), np.nan)
        self.logpl.stream(f"{name}/log_pl", sweep, log_pl)
        self.logpl.stream(f"{name}/inc", sweep, log_inc)
        # a batch of sweeps carries the MSE / exact log-likelihood only where computed
        for curve, key in ((self.mse, "mse"), (self.loglik, "log_lik")):
            points = [(r.scalars["sweep"], r.scalars[key]) for r in recs if key in r.scalars]
            if points and curve.pane.visible:
                xs, ys = zip(*points)
                curve.stream(f"{name}/{key}", xs, ys)
        if name not in self._first_decrease:
            first = self._find_decrease(recs)
            if first is not None:
                self._first_decrease[name] = first
                y = log_pl[sweep == first]
                self.decrease_source.stream({"x": [first], "y": [float(y[0]) if len(y)
                                                                 else np.nan]})
                self.decrease_item.visible = True
        self._sweeps[name] = int(sweep[-1])
        self._last_logpl[name] = float(log_pl[-1])
        with_arrays = [r for r in recs if r.arrays]
        if with_arrays:
            self._last_arrays[name] = with_arrays[-1].arrays

    @staticmethod
    def _find_decrease(recs) -> int | None:
        for r in recs:
            s = r.scalars
            if "first_decrease" in s and s["first_decrease"] >= 0:
                return int(s["first_decrease"])
            if "monotone" not in s and s.get("increase", 0) < 0:
                return int(s["sweep"])
        return None

    @_held
    def _show_matrices(self) -> None:
        self._matrices_stale = False
        arrays = self._last_arrays.get(self.heat_pick.value)
        truth = self.data.data.truth
        m_hat = None if arrays is None else arrays.get("M")
        if truth is not None:
            vmax = float(np.abs(truth.M).max())
            if m_hat is not None and np.all(np.isfinite(m_hat)):
                vmax = max(vmax, float(np.abs(m_hat).max()))
            self.heat_true.update(truth.M, vmax)
            self.heat_est.update(m_hat, vmax)
            self.heat_diff.update(None if m_hat is None else m_hat - truth.M)
        else:
            self.heat_est.update(m_hat)
        label = self.heat_pick.value or ""
        self.heat_est.figure.title.text = f"M̂: current estimate ({label})"

    def _refresh_status(self) -> None:
        runner = self.runner
        playing = runner.playing
        self.play.disabled = playing or not runner.active
        self.pause.disabled = not playing
        names = list(runner.trainers)
        first = names[0] if names else None
        self.sweep_counter.object = f"Sweep {self._sweeps.get(first, 0)}"
        states = runner.states
        failed = {n: s for n, s in states.items() if s.status in ("diverged", "error")}
        if failed:
            text = "; ".join(f"**{n}**: {s.message or s.status}" for n, s in failed.items())
            self.run_status.set("error", text + (" (others keep running)" if runner.active
                                                 else ""))
        elif playing:
            self.run_status.set("info", "Training…")
        elif not runner.active and names:
            msgs = {s.message or s.status for s in states.values()}
            self.run_status.set("ok", "Finished: " + "; ".join(sorted(msgs)))
        elif any(self._sweeps.values()):
            self.run_status.set("idle", "Paused")
        else:
            self.run_status.set("idle", "Ready: press ▶ Play")
        # a decrease is a failure only for a run that guarantees monotonicity (BSLM, GA
        # with μ ≤ 1, the bound); GA with μ > 1 and L-BFGS are allowed to decrease
        broken = {n: k for n, k in self._first_decrease.items()
                  if n in runner.trainers and monotone_guaranteed(runner.trainers[n])}
        allowed = {n: k for n, k in self._first_decrease.items() if n not in broken}
        if broken:
            text = "; ".join(f"{n} decreased at sweep {k}" for n, k in broken.items())
            self.monotone.set("error", f"✗ Not monotone: {text}")
        elif allowed:
            text = "; ".join(f"{n} at sweep {k}" for n, k in allowed.items())
            self.monotone.set("warn", f"✓ Guaranteed runs monotone. Decreased (no guarantee): {text}")
        elif any(self._sweeps.values()):
            self.monotone.set("ok", "✓ Monotone so far: log-PL never decreased")
        else:
            self.monotone.set("idle", "Monotone: no sweeps yet")
        self.summary.object = self._summary_table(names, states)

    def _summary_table(self, names, states) -> str:
        target = self.data.mple_logpl
        rows = ["| run | sweep | log-PL | gap to MPLE | status |", "|---|---|---|---|---|"]
        for n in names:
            value = self._last_logpl.get(n)
            gap = "–" if value is None or target is None else f"{target - value:.3g}"
            shown = "–" if value is None else f"{value:,.4f}"
            rows.append(f"| {n} | {self._sweeps.get(n, 0)} | {shown} | {gap} | "
                        f"{states[n].status} |")
        return "\n".join(rows)
