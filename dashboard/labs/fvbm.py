"""The FVBM lab: watch BSLM (and gradient ascent) maximise the pseudo-likelihood live.

Paper: Nguyen & Wood (2016), "A block successive lower-bound maximization algorithm for
the maximum pseudo-likelihood estimation of fully visible Boltzmann machines".
"""

from __future__ import annotations

from typing import Any

import math

import numpy as np
import panel as pn
import param
from bokeh.models import ColumnDataSource

from .base import RADIO, Lab, NotReady, by_run, held, label, speed_setting
from .fvbm_setup import (BOUND_LABEL, DEFAULT_DATA, LBFGS_LABEL, SQUAREM_LABEL, DataSet, check_work,
                         guaranteed_by_label, load_data, parse_mus, simulated_data,
                         trainer_factory, uploaded_data)
from ..labtools import Preset
from ..views import Heatmap, LiveCurve, StatusBadge
from ..views.beside import PIN_TITLE, Beside
from ..views.text import TABLE_CSS, LiveHTML, escape, html_table

SUMMARY_COLUMNS = [("run", ""), ("sweep", ""), ("log-PL", ""), ("gap to MPLE", ""), ("status", "")]  # "Who won"
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#bcbd22"]
# the race's bound MM and L-BFGS keep their colours whatever the number of μ values
FIXED_COLORS = {BOUND_LABEL: "#17becf", SQUAREM_LABEL: "#0b6e7a", LBFGS_LABEL: "#7f7f7f"}
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



DATA_SETTINGS = {"source", "d", "n", "data_seed"}
SLOW_DATA = 16_000 * 10 * 10  # n·d² of the default data set: larger ones are simulated as a job


class FVBMLab(Lab):
    """BSLM, gradient ascent and the race, drawn live (one per browser session)."""

    key = "fvbm"
    kernels = ("fvbm", "fvbm_bound")
    title = "FVBM"
    heading = "Fully visible Boltzmann machine: maximum pseudo-likelihood, live"
    summary = ("BSLM raises the log-pseudo-likelihood (eq. 2.1) one parameter at a time and can "
               "never decrease it; race it against gradient ascent, the quadratic bound and L-BFGS.")
    intro, equations, watch = INTRO, EQUATIONS, WATCH
    presets = PRESETS
    speeds = SPEEDS
    watch_scalar = "log_pl"
    period_ms = 100

    # ------------------------------------------------------------------ settings (URL keys)
    source = param.Selector(default="simulated", objects={"Simulated": "simulated", "Senate votes": "senate",
                                                          "Upload": "upload"}, label="Data",
                            doc="Simulated data (§5), the bundled senate votes, or a CSV of your own.")
    d = param.Integer(DEFAULT_DATA["d"], bounds=(2, 30), label="Variables d", doc="Simulated variables.")
    n = param.Integer(DEFAULT_DATA["n"], bounds=(10, 200_000), step=1000, label="Rows n", doc="Simulated rows.")
    data_seed = param.Integer(DEFAULT_DATA["seed"], bounds=(0, None), label="Data seed",
                              doc="Seeds the simulated data.")
    mode = param.Selector(default="Single run", objects=["Single run", "Race"], label="Mode",
                          doc="One algorithm, or the race of BSLM, gradient ascent, the bound and L-BFGS.")
    algorithm = param.Selector(default="bslm", objects={"BSLM": "bslm", "Gradient ascent": "ga"}, label="Algorithm",
                               doc="The single run's algorithm.")
    mu = param.Number(1.5, bounds=(0.01, 10.0), step=0.1, label="Step μ (gradient ascent)",
                      doc="Gradient ascent's step (eqs. 4.1, 4.2); μ = 1 is BSLM.")
    # a short label: in presentation mode's larger type a longer one ran past the sidebar's edge
    race_mus = param.String("0.5, 2.5", label="Race: GA steps μ =",
                            doc="The race runs BSLM, the bound, L-BFGS and gradient ascent with each of these steps: "
                                "1 to 6 steps μ > 0, separated by commas.")  # all converge: divergence has its preset
    tol = param.Selector(default=1e-5, objects={"1e-2": 1e-2, "1e-3": 1e-3, "1e-4": 1e-4, "1e-5": 1e-5,
                                                "1e-6": 1e-6, "1e-8": 1e-8},
                         label="Stop when the increase is below τ =", doc="The stopping rule (§5).")
    init = param.Selector(default="zeros", objects={"Zeros": "zeros", "Random N(0, 0.5)": "random"},
                          label="Initial parameters", doc="Where every run starts.")
    init_seed = param.Integer(0, bounds=(0, None), label="Initialisation seed", doc="Seeds a random start.")
    speed = speed_setting(SPEEDS, "20 sweeps/s")
    sweep_views = True  # its curves draw every run by name, as a race's
    data_settings = frozenset({"d", "n", "data_seed"})
    headline = ("log_pl", "log-PL")
    pictures_beside = True
    short_labels = {"mu": "μ", "race_mus": "race μ", "tol": "τ", "data_seed": "data seed",
                    "init_seed": "init seed"}
    widget_options = {**{k: dict(type=pn.widgets.RadioButtonGroup, **RADIO)
                         for k in ("source", "mode", "algorithm", "init")},
                      # two to a row: at 1280x720 in presentation mode "Data seed"'s help icon, third
                      # in a row, and "Upload CSV" were cut at the sidebar's edge
                      "d": dict(width=140), "n": dict(width=140), "data_seed": dict(width=140),
                      "init_seed": dict(width=120), "speed": dict(width=190)}

    def build_controls(self) -> None:
        self.upload = pn.widgets.FileInput(accept=".csv", multiple=False, visible=False)
        self.upload_help = pn.pane.Markdown(
            "A CSV with a header row and one column per variable; values ±1 (or 0/1). "
            "Rows with missing values are dropped.", visible=False,
            styles={"font-size": "0.85em", "color": "#555"})
        self.data_info = pn.pane.HTML("", styles={"font-size": "0.9em"})  # DataSet.describe: the name escaped
        self.data_msg = StatusBadge("", "info", visible=False)
        self._uploaded: DataSet | None = None
        self._uploaded_name: str | None = None  # its file name, for python_script
        self._ready: tuple | None = None  # (data settings, DataSet) a job prepared
        self.data: DataSet | None = None
        self._data_for: tuple | None = None  # the data settings self.data was made for
        self.upload.param.watch(self._on_upload, "value")

    def controls_panel(self) -> pn.viewable.Viewable:
        w = self.widgets
        data_card = pn.Card(label("Source"), w["source"], pn.Row(w["d"], w["n"]), w["data_seed"],
                            self.upload, self.upload_help, self.data_msg.pane, self.data_info,
                            title="1. Data", collapsible=False, sizing_mode="stretch_width")
        algo_card = pn.Card(label("Mode"), w["mode"], label("Algorithm"), w["algorithm"],
                            w["mu"], w["race_mus"], w["tol"], label("Initial parameters"),
                            w["init"], w["init_seed"], title="2. Algorithm",
                            collapsible=False, sizing_mode="stretch_width")
        return pn.Column(data_card, algo_card, sizing_mode="stretch_width", margin=0)

    def _update_visibility(self) -> None:
        w, source = self.widgets, self.source
        for name in ("d", "n", "data_seed"):
            w[name].visible = source == "simulated"
        self.upload.visible = self.upload_help.visible = source == "upload"
        race = self.mode == "Race"
        w["algorithm"].visible = not race
        w["mu"].visible = not race and self.algorithm == "ga"
        w["race_mus"].visible = race

    def prepare(self, changed: set[str], strict: bool = False) -> None:
        """The data set (and its MPLE target) after a data setting moved."""
        self._update_visibility()
        if self.data is not None and not changed & DATA_SETTINGS:
            return
        if self.source == "upload":
            if self._uploaded is None:
                raise NotReady("Choose a CSV file to upload; the current data stay until then.",
                               link="These settings use an uploaded CSV, which a link or checkpoint does "
                                    "not contain: upload the file first, then load again.")
            data = self._uploaded
        elif self._ready is not None and self._ready[0] == self._data_key():
            data = self._ready[1]  # simulated by a job (prepare_later)
        else:
            data = load_data(self.source, d=self.d, n=self.n, seed=self.data_seed)
        self._ready = None
        self.data = data
        self._data_for = self._data_key()
        self.data_msg.pane.visible = False
        self._show_data()

    def check_work(self) -> None:
        """The work budget, on the data the run would use: an upload, the bundled set, or
        simulated data once they are made (Lab.rebuild checks again after ``prepare``)."""
        source, key = self.source, self._data_key()
        if source == "upload":
            data = self._uploaded  # None: nothing to train on yet (prepare says so)
        elif key == self._data_for:
            data = self.data
        elif self._ready is not None and self._ready[0] == key:
            data = self._ready[1]
        else:
            data = load_data(source) if source == "senate" else None
        if data is not None:
            mus = parse_mus(self.race_mus) if self.mode == "Race" else None
            check_work(data, race_mus=mus, source=source)

    def _data_key(self) -> tuple:
        return (self.source, self.d, self.n, self.data_seed)

    def prepare_later(self, changed: set[str]):
        """Simulating a large data set and finding its MPLE takes seconds (d = 30, n = 200,000:
        about 8 s): a job, not a click.  The default size is ready at start."""
        d, n = self.d, self.n
        if not changed & DATA_SETTINGS or self.source != "simulated" or n * d * d <= SLOW_DATA:
            return None
        return (simulated_data, (d, n, self.data_seed),
                f"Simulating d = {d}, n = {n:,} and finding its MPLE (the target line)…")

    def prepared(self, result) -> None:
        key, data = result
        self._ready = (key, data)

    def _on_upload(self, event) -> None:
        if event.new is not None:  # an empty file too: the reader says it is empty
            self.use_upload(event.new, self.upload.filename or "upload.csv")

    def script_data(self) -> list[str]:
        """The uploaded CSV, read again from beside the script (it is not in the settings)."""
        if self.source != "upload" or self._uploaded_name is None:
            return []
        return [f"lab.use_upload(Path({self._uploaded_name!r}).read_bytes(), {self._uploaded_name!r})"
                "  # the file you uploaded, beside this script",
                "lab.jobs.wait()  # reading it and finding its MPLE"]

    def use_upload(self, content: bytes, filename: str) -> None:
        """Parse an uploaded CSV and find its MPLE (a job); when ready it becomes the data,
        else the reason is said and the current data stay."""
        self._uploaded_name = filename
        self.data_msg.set("info", f"Reading {filename} and finding its MPLE…")
        self.data_msg.pane.visible = True
        self.jobs.submit("upload", uploaded_data, content, filename, then=self._use_uploaded,
                         error=self._upload_failed)

    @held
    def _use_uploaded(self, data: DataSet) -> None:
        self._uploaded = data
        self.data_msg.pane.visible = False
        self.rebuild({"source"})

    @held
    def _upload_failed(self, exc: BaseException) -> None:
        name = self.data.data.name if self.data is not None else "nothing"
        text = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
        self.data_msg.set("error", f"**Could not use this data:** {text}  \nStill using: {name}.")
        self.data_msg.pane.visible = True

    def trainer_factory(self):
        mus = parse_mus(self.race_mus) if self.mode == "Race" else None
        return trainer_factory(self.data, algorithm=self.algorithm, mu=self.mu,
                               tol=self.tol, init=self.init,
                               seed=self.init_seed, race_mus=mus)

    def own_period(self) -> int:
        """Every line costs the browser work on each repaint; measured in headless Chromium
        on 2 cores, 5 racing trainers at 10 Hz made the page unresponsive."""
        return int(self.period_ms * max(1.0, len(self.runner.names) / 2))

    # ------------------------------------------------------------------ views
    def build_views(self) -> None:
        # 3 legend columns: a race's long names ("Bound (Jebara–Choromanska)") fit the
        # half-width plots (4 pushed the last column past the right edge)
        self.logpl = LiveCurve("Log-pseudo-likelihood per sweep", "sweep",
                               "log-PL Pₙ(θ), nats (solid)",
                               y2_label="log₁₀ increase (dashed)",
                               name="logpl", height=380, plain_ticks=True, legend_cols=3)
        self.logpl.add_target("MPLE (target)")
        self.tol_span = self.logpl.add_hline(None, color="#999", dash="dotted", axis="right",
                                             text="τ: stop below this increase")
        self.decrease_source = ColumnDataSource({"x": [], "y": []}, name="decreases")
        self.logpl.figure.scatter("x", "y", source=self.decrease_source, marker="x",
                                  size=14, line_width=3, color="#d62728", legend_label="first decrease")
        # listed only once a decrease has been marked
        self.decrease_item = self.logpl.legend_item("first decrease")
        self.decrease_item.visible = False
        self.loglik = LiveCurve("Exact log-likelihood (d ≤ 20)", "sweep",
                                "log-likelihood (nats)", name="loglik", height=380, plain_ticks=True,
                                legend_cols=3)
        self.loglik.add_target("at the MPLE")
        self.mse = LiveCurve("MSE of (b, M) against the truth",
                             "sweep", "MSE", name="mse", height=300, legend_cols=8)
        for curve in (self.logpl, self.loglik, self.mse):
            curve.add_pins()
        labels = self.data.columns
        self.heat_est = Heatmap("M̂: current estimate", labels, value_label="M̂", name="M_hat")
        self.heat_true = Heatmap("M₀: true couplings", labels, value_label="M₀", name="M_true")
        self.heat_diff = Heatmap("M̂ − M₀: error", labels, value_label="M̂ − M₀", name="M_diff")
        # a pin's M̂ beside the live one (issue 47), in the same colour scale
        self.heat_beside = Beside(self.heat_est, Heatmap(PIN_TITLE, labels, value_label="M̂", name="M_hat_pin"))
        self.heat_pick = pn.widgets.Select(label="Show the estimate of", options=[], width=200)
        self.heat_pick.param.watch(lambda e: self._show_matrices(), "value")
        self.monotone = StatusBadge("Monotone: no sweeps yet", "idle", one_line=True)
        self.summary_table = LiveHTML("", sizing_mode="stretch_width", stylesheets=[TABLE_CSS])
        self._line_names: list[str] = []
        self._show_data()

    def main_view(self) -> pn.viewable.Viewable:
        return pn.Row(self.logpl.view, self.loglik.view, sizing_mode="stretch_width")

    def stage(self) -> dict[str, pn.viewable.Viewable]:
        # the heatmaps scale down together so the row fits (see views.heatmap)
        heat = pn.Column(self.heat_pick, pn.Row(self.heat_est.view, self.heat_beside.twin.view, self.heat_true.view,
                                                self.heat_diff.view, sizing_mode="stretch_width"),
                         sizing_mode="stretch_width")
        return {"Log-PL · log-likelihood": self.main_view(),
                "Who won": pn.Column(self.summary_table, self.mse.view, sizing_mode="stretch_width"),
                "Couplings M": heat}

    def badges(self) -> list:
        return [self.monotone.pane]

    def pin_layers(self) -> dict:
        return {"log_pl": self.logpl.pin_layer, "log_lik": self.loglik.pin_layer, "mse": self.mse.pin_layer}

    def pin_lines(self, pin) -> dict:
        """Each pinned run's log-PL, exact log-likelihood and MSE per sweep, as the live ones."""
        out: dict[str, list] = {}
        for columns in pin.records.values():
            sweep = columns.get("sweep")
            for key in ("log_pl", "log_lik", "mse"):
                if sweep is not None and key in columns:
                    y = np.asarray(columns[key], dtype=float)
                    keep = np.isfinite(y) if key != "log_pl" else np.ones(len(y), bool)  # computed where they are
                    out.setdefault(key, []).append((sweep[keep], y[keep]))
        return out

    def _show_data(self) -> None:
        """Point the data-dependent views at the current data set."""
        if not hasattr(self, "logpl"):
            return
        data = self.data
        for heat in (self.heat_est, self.heat_true, self.heat_diff):
            heat.set_labels(data.columns)
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

    def clear(self) -> None:
        """New lines for the current runs (one model-graph update), all of them empty."""
        names = self.runner.names
        if names != self._line_names:  # Reset keeps the same runs: keep their lines
            self._add_lines(names)
        for curve in (self.logpl, self.loglik, self.mse):
            curve.clear()
        self.decrease_source.data = {"x": [], "y": []}
        self.decrease_item.visible = False
        self._sweeps = {n: 0 for n in names}
        self._first_logpl: dict[str, float] = {}
        self._lowest: dict[str, float] = {}
        self.logpl.figure.y_range.start = math.nan  # unset: the axis follows the data again
        self._last_logpl: dict[str, float] = {}
        self._last_arrays: dict[str, Any] = {}
        self._first_decrease: dict[str, int] = {}
        self._guaranteed = {n: guaranteed_by_label(n) for n in names}
        self._matrices_stale = False
        self.heat_pick.options = names
        self.heat_pick.value = names[0] if names else None
        self.heat_pick.visible = len(names) > 1
        self.tol_span.location = float(np.log10(self.tol))
        self.tol_span.visible = True
        self._show_matrices()
        self._retime()

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

    def start(self) -> None:
        super().start()
        self._retime()

    # ------------------------------------------------------------------ live updates
    def draw_records(self, records) -> None:
        runs = by_run(records)
        for name, recs in runs.items():
            self._stream(name, recs)
        if any(r.arrays for r in runs.get(self.heat_pick.value, ())):
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
                self.decrease_source.stream({"x": [first], "y": [float(y[0]) if len(y) else np.nan]})
                self.decrease_item.visible = True
        self._sweeps[name] = int(sweep[-1])
        self._last_logpl[name] = float(log_pl[-1])
        self._first_logpl.setdefault(name, float(log_pl[0]))
        lowest = float(np.nanmin(log_pl)) if np.isfinite(log_pl).any() else -math.inf
        self._lowest[name] = min(self._lowest.get(name, math.inf), lowest)
        self._keep_axis()
        with_arrays = [r for r in recs if r.arrays]
        if with_arrays:
            self._last_arrays[name] = with_arrays[-1].arrays

    def _keep_axis(self) -> None:
        """A run that falls far below where the monotone runs started (gradient ascent with a
        large μ diverging) would set the log-PL axis and squash the others into one line: the
        axis then stops a little below the lowest start of a run that cannot decrease (BSLM,
        the bound, GA with μ ≤ 1), and the diverging run leaves the plot (its first decrease is
        marked; the badge and the table say the rest)."""
        starts = [v for n, v in self._first_logpl.items() if self._guaranteed.get(n) and np.isfinite(v)]
        if not starts or len(self._first_logpl) < 2:
            return
        floor = min(starts)
        target = self.data.mple_logpl  # the MPLE's log-PL, where the converging runs go
        top = target if target is not None and np.isfinite(target) else max(starts)
        climb = max(top - floor, 1.0)
        far = floor - climb  # a run below this fell further than the monotone runs climb
        if all(v >= far for v in self._lowest.values()):
            return
        sane = min([v for v in self._lowest.values() if v >= far] + [floor])
        start = sane - 0.05 * (top - sane)
        if self.logpl.figure.y_range.start != start:  # once per run, not per tick
            self.logpl.figure.y_range.start = start

    @staticmethod
    def _find_decrease(recs) -> int | None:
        for r in recs:
            s = r.scalars
            if "first_decrease" in s and s["first_decrease"] >= 0:
                return int(s["first_decrease"])
            if "monotone" not in s and s.get("increase", 0) < 0:
                return int(s["sweep"])
        return None

    @held
    def _show_matrices(self) -> None:
        self._matrices_stale = False
        arrays = self._last_arrays.get(self.heat_pick.value)
        truth = self.data.data.truth
        m_hat = None if arrays is None else arrays.get("M")
        pinned = self._pinned_M()
        shown = [M for M in (m_hat, pinned, None if truth is None else truth.M)
                 if M is not None and np.all(np.isfinite(M))]
        vmax = max((float(np.abs(M).max()) for M in shown), default=None)  # one colour scale for all
        self.heat_est.update(m_hat, vmax)
        if pinned is not None:
            self.heat_beside.twin.update(pinned, vmax)
        if truth is not None:
            self.heat_true.update(truth.M, vmax)
            self.heat_diff.update(None if m_hat is None else m_hat - truth.M)
        self.heat_beside.set_title(f"M̂: current estimate ({self.heat_pick.value or ''})")
        if self.heat_beside.shown:  # four in a row: short titles
            self.heat_est.figure.title.text = f"M̂ ({self.heat_pick.value or ''})"

    def _pinned_M(self) -> np.ndarray | None:
        """M̂ of the pin shown beside (the run picked above, or its first), or None."""
        pin = self.pins.get(self.beside_pin) if self.beside_pin is not None else None
        if pin is None:
            return None
        arrays = pin.arrays
        run = self.heat_pick.value if "M" in arrays.get(self.heat_pick.value, {}) else next(
            (name for name, a in arrays.items() if "M" in a), None)
        return None if run is None else np.asarray(arrays[run]["M"], dtype=float)

    def draw_beside(self, pin) -> None:
        """A pin's newest M̂ beside the live one, in one colour scale (:meth:`_show_matrices`)."""
        self.heat_beside.show(None if pin is None else pin.label)
        for heat, full, short in ((self.heat_true, "M₀: true couplings", "M₀"),
                                  (self.heat_diff, "M̂ − M₀: error", "M̂ − M₀")):
            heat.figure.title.text = full if pin is None else short
        pinned = self._pinned_M()
        if pinned is not None:
            twin = self.heat_beside.twin
            labels = self.heat_est.labels if len(self.heat_est.labels) == len(pinned) else [
                f"x{i + 1}" for i in range(len(pinned))]  # a pin on other data: its own size
            if twin.labels != labels:
                twin.set_labels(labels)
        self._show_matrices()

    # ------------------------------------------------------------------ status
    def counter(self) -> str:
        names = self.runner.names
        return f"Sweep {self._sweeps.get(names[0], 0) if names else 0}"

    def refresh_badges(self) -> None:
        # a decrease is a failure only for a run that guarantees monotonicity (BSLM, GA
        # with μ ≤ 1, the bound); GA with μ > 1 and L-BFGS are allowed to decrease
        broken = {n: k for n, k in self._first_decrease.items() if self._guaranteed.get(n)}
        allowed = {n: k for n, k in self._first_decrease.items() if n not in broken}
        if broken:
            text = "; ".join(f"{n} decreased at sweep {k}" for n, k in broken.items())
            self.monotone.set("error", f"✗ Not monotone: {text}")
        elif allowed:
            # one line that fits a projector's status row (a race's names would be cut); which run
            # fell, and when, is in its hover text
            text = "; ".join(f"{n} at sweep {k}" for n, k in allowed.items())
            others = f"{len(allowed)} other{'s' if len(allowed) > 1 else ''} fell"
            self.monotone.set("warn", f"✓ Guaranteed runs monotone; {others}",
                              details=f"Decreased (no guarantee): {text}")
        elif any(self._sweeps.values()):
            self.monotone.set("ok", "✓ Monotone so far: log-PL never decreased")
        else:
            self.monotone.set("idle", "Monotone: no sweeps yet")
        self.summary_table.object = self._summary_table()
        if self._matrices_stale:  # images: redrawn with the status (~3 times a second)
            self._show_matrices()

    def _summary_table(self) -> str:
        target = self.data.mple_logpl
        states = self.runner.states
        rows = []
        for n in self.runner.names:
            value = self._last_logpl.get(n)
            gap = "–" if value is None or target is None else f"{target - value:.3g}"
            shown = "–" if value is None else f"{value:,.4f}"
            rows.append((n, self._sweeps.get(n, 0), shown, gap, states[n].status))
        return html_table(SUMMARY_COLUMNS, rows)

    # ------------------------------------------------------------------ presentation
    def describe_change(self, name, before, after, before_arrays, after_arrays) -> str | None:
        """One sweep's gain, and the coupling that moved most."""
        if "log_pl" not in after:
            return None
        gain = after["log_pl"] - before["log_pl"] if "log_pl" in before else None
        text = f"<b>{escape(name)}</b>, sweep {int(after['sweep'])}: log-PL {after['log_pl']:,.4f}"
        if gain is not None:
            text += f" ({'▲' if gain >= 0 else '▼'} {abs(gain):.3g})"
        moved = _most_moved(before_arrays.get("M"), after_arrays.get("M"))
        if moved is not None:
            i, j = moved
            M0, M1 = before_arrays["M"], after_arrays["M"]
            text += (f"; the coupling that moved most: m<sub>{i + 1},{j + 1}</sub> "
                     f"{M0[i, j]:+.4f} → {M1[i, j]:+.4f} (outlined in M̂)")
        return text

    def highlight(self, name, before, after, before_arrays, after_arrays) -> None:
        """Outline that coupling in M̂ (when M̂ shows this run)."""
        moved = _most_moved(before_arrays.get("M"), after_arrays.get("M"))
        if moved is not None and name == self.heat_pick.value:
            i, j = moved
            self.heat_est.mark([(i, j), (j, i)])

    def clear_highlight(self) -> None:
        self.heat_est.mark([])


def _most_moved(M0, M1) -> tuple[int, int] | None:
    """The (i, j) of the coupling that changed most between two estimates, if any did."""
    if M0 is None or M1 is None or np.shape(M0) != np.shape(M1):
        return None
    delta = np.abs(np.asarray(M1) - np.asarray(M0))
    if not np.all(np.isfinite(delta)) or delta.max() <= 0:
        return None
    i, j = np.unravel_index(int(np.argmax(delta)), delta.shape)
    return int(i), int(j)
