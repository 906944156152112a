"""The Bound lab: the quadratic bound on the partition function hugging log Z, and bound
majorization racing first- and second-order optimizers.

Paper: Jebara & Choromanska (2012), "Majorization for CRFs and latent likelihoods" (NIPS).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import panel as pn
from bokeh.events import Tap
from bokeh.models import ColorBar, ColumnDataSource, HoverTool, Label, LegendItem, LogColorMapper, Range1d, Span
from bokeh.plotting import figure
from matplotlib import colormaps
from matplotlib.colors import to_hex

from dashboard.labs import bound_setup as setup
from dashboard.runner import Runner, attach, play_or_tell
from dashboard.views import StatusBadge

VIRIDIS = [to_hex(c) for c in colormaps["viridis"](np.linspace(0, 1, 256))]
EXTRA_COLORS = ["#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]
MAIN_COLOR = "#d62728"
GAP_FLOOR = 1e-4  # the log colour scale of the gap map starts here

INTRO = r"""
### The quadratic bound: log Z from above, touching at θ̃

For a log-linear model p(y | θ) = h(y) exp(θᵀf(y)) / Z(θ) over an enumerable Ω, Jebara &
Choromanska (2012, Algorithm 1) compute in one pass over Ω a *quadratic upper bound* on the
log-partition function that touches it at any expansion point θ̃ (Theorem 1):

$$\log Z(\theta) \le \log z + (\theta-\tilde\theta)^\top \mu + \frac{1}{2}(\theta-\tilde\theta)^\top \Sigma (\theta-\tilde\theta), \quad z = Z(\tilde\theta), \quad \mu = \nabla \log Z(\tilde\theta)$$

Unlike the second-order Taylor expansion (dashed), whose curvature is right only at θ̃, Σ is
large enough everywhere, so minimizing the bound never makes the objective worse. Move the
expansion point with the sliders or **click the gap map**: the gap (bound − log Z) must stay
≥ 0 and touch 0 at θ̃, while the Taylor expansion's gap dips below 0 — it is not a bound.
"""


def _held(method):
    """Run a UI handler inside one ``pn.io.hold`` (see dashboard.labs.fvbm._held)."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with pn.io.hold(freeze=True):
            return method(self, *args, **kwargs)
    return wrapper


def _figure(title: str, x_label: str, y_label: str, **kw):
    fig = figure(title=title, x_axis_label=x_label, y_axis_label=y_label, tools="pan,wheel_zoom,box_zoom,reset,save",
                 toolbar_location="right", **kw)
    fig.title.text_font_size = "13pt"
    return fig


class TightnessView:
    """log Z and its bounds along a line, the gap, and the gap over a 2-D slice."""

    def __init__(self) -> None:
        w = pn.widgets
        self.model = w.Select(label="Model", options=setup.MODELS, value=setup.DEFAULT_MODEL, width=300)
        self.scale = w.FloatSlider(label="Spread of the base point θ₀ (std)", start=0.0, end=2.0, step=0.1,
                                   value=0.5, width=300)
        self.seed = w.IntInput(label="Seed (θ₀ and directions)", value=0, start=0, width=140)
        self.radius = w.FloatSlider(label="Range R of the plotted plane", start=1.0, end=10.0, step=0.5, value=3.0,
                                    width=300)
        self.s_tilde = w.FloatSlider(label="θ̃ along the line: s̃", start=-3.0, end=3.0, step=0.05, value=0.0, width=300)
        self.r_tilde = w.FloatSlider(label="θ̃ across the line: r̃", start=-3.0, end=3.0, step=0.05, value=0.0, width=300)
        self.extra = w.TextInput(label="More expansion points s̃ on the line", value="-2, 1.5", width=300)
        self.show_taylor = w.Checkbox(label="Show the Taylor expansion at θ̃ (not a bound)", value=True)
        self.message = StatusBadge("", "idle", name="bound-check")
        self.model_info = pn.pane.Markdown("", styles={"font-size": "0.9em"}, width=300)

        self.line_src = ColumnDataSource(data={"s": [], "log_z": []}, name="bound-line")
        self.main_src = ColumnDataSource(data={"s": [], "bound": [], "taylor": [], "gap": [], "taylor_gap": []},
                                         name="bound-main")
        self.extra_srcs = [ColumnDataSource(data={"s": [], "bound": [], "gap": []}) for _ in EXTRA_COLORS]
        self.touch_src = ColumnDataSource(data={"s": [], "log_z": [], "color": []})
        self._build_figures()
        for widget in (self.model, self.scale, self.seed, self.radius):
            widget.param.watch(lambda e: self.refresh(full=True), "value")
        for widget in (self.s_tilde, self.r_tilde, self.extra, self.show_taylor):
            widget.param.watch(lambda e: self.refresh(), "value")
        self.refresh(full=True)

    def _build_figures(self) -> None:
        line = _figure("log Z and quadratic bounds along a line through θ̃", "s: position along the line (θ units)",
                       "log Z(θ) (nats)", height=380, sizing_mode="stretch_width", y_range=Range1d(0, 1))
        line.line("s", "log_z", source=self.line_src, color="black", line_width=3, legend_label="log Z (exact)")
        line.line("s", "bound", source=self.main_src, color=MAIN_COLOR, line_width=2, legend_label="bound at θ̃")
        self.taylor_line = line.line("s", "taylor", source=self.main_src, color=MAIN_COLOR, line_width=2,
                                     line_dash="dashed", legend_label="Taylor at θ̃ (not a bound)")
        self.extra_lines = [line.line("s", "bound", source=src, color=color, line_width=1.5, line_alpha=0.9)
                            for src, color in zip(self.extra_srcs, EXTRA_COLORS)]
        line.scatter("s", "log_z", source=self.touch_src, color="color", size=9, line_color="black")
        line.legend.location = "top_left"
        self._fixed_items = list(line.legend.items)
        line.legend.background_fill_alpha = 0.7
        line.add_tools(HoverTool(tooltips=[("s", "@s{0.00}"), ("value", "$y{0.000}")]))
        self.line_fig = line

        gap = _figure("Gap: bound − log Z (≥ 0, zero at θ̃)", "s: position along the line (θ units)",
                      "gap (nats)", height=300, sizing_mode="stretch_width", y_range=Range1d(0, 1))
        gap.add_layout(Span(location=0, dimension="width", line_color="black", line_width=1))
        gap.line("s", "gap", source=self.main_src, color=MAIN_COLOR, line_width=2, legend_label="bound at θ̃")
        self.taylor_gap = gap.line("s", "taylor_gap", source=self.main_src, color=MAIN_COLOR, line_dash="dashed",
                                   line_width=2, legend_label="Taylor at θ̃")
        for src, color in zip(self.extra_srcs, EXTRA_COLORS):
            gap.line("s", "gap", source=src, color=color, line_width=1.5)
        gap.legend.location = "top_left"
        gap.legend.background_fill_alpha = 0.7
        gap.add_tools(HoverTool(tooltips=[("s", "@s{0.00}"), ("gap", "$y{0.0000}")]))
        self.gap_fig = gap

        self.mapper = LogColorMapper(palette=VIRIDIS, low=GAP_FLOOR, high=1.0)
        self.slice_src = ColumnDataSource(data={"image": [], "x": [], "y": [], "dw": [], "dh": []}, name="bound-slice")
        self.tilde_src = ColumnDataSource(data={"s": [], "r": []}, name="bound-tilde")
        sl = figure(title="Gap over a 2-D slice (click to move θ̃)", x_axis_label="s (along the line)",
                    y_axis_label="r (across the line)", height=380, width=440, tools="tap,save,reset",
                    toolbar_location="right", match_aspect=True, name="bound-slice-figure")
        sl.title.text_font_size = "13pt"
        sl.image("image", "x", "y", "dw", "dh", source=self.slice_src, color_mapper=self.mapper)
        sl.add_layout(ColorBar(color_mapper=self.mapper, width=12, title="bound − log Z (log scale)"), "right")
        sl.scatter("s", "r", source=self.tilde_src, marker="x", size=16, line_width=3, color="white")
        self.line_marker = Span(location=0, dimension="width", line_color="white", line_dash="dashed", line_width=1.5)
        sl.add_layout(self.line_marker)
        sl.grid.visible = False
        sl.on_event(Tap, self._on_tap)
        self.slice_fig = sl

    # ------------------------------------------------------------------ updates
    def _on_tap(self, event) -> None:
        if event.x is None or event.y is None:
            return
        R = self.radius.value
        with pn.io.hold(freeze=True):
            self._tapping = True
            try:
                self.s_tilde.value = float(np.clip(round(event.x / 0.05) * 0.05, -R, R))
                self.r_tilde.value = float(np.clip(round(event.y / 0.05) * 0.05, -R, R))
            finally:
                self._tapping = False
            self.refresh()

    def refresh(self, full: bool = False) -> None:
        if getattr(self, "_tapping", False):
            return
        with pn.io.hold(freeze=True):
            try:
                self._refresh(full)
            except ValueError as exc:
                self.message.set("error", f"**Cannot draw:** {exc}")

    def _refresh(self, full: bool) -> None:
        key, scale, seed, R = self.model.value, float(self.scale.value), int(self.seed.value), float(self.radius.value)
        if full:
            for slider in (self.s_tilde, self.r_tilde):
                slider.start, slider.end = -R, R
                slider.value = float(np.clip(slider.value, -R, R))
        extra = setup.parse_points(self.extra.value, R)
        model = setup.make_model(key, scale, seed)
        self.model_info.object = f"**{model.d} parameters.** {model.description}."
        s_t, r_t = float(self.s_tilde.value), float(self.r_tilde.value)
        s, log_z = setup.log_z_line(key, scale, seed, r_t, R)
        main = setup.expand(model, s_t, r_t, s)
        self.line_src.data = {"s": s, "log_z": log_z}
        self.main_src.data = {"s": s, "bound": main.bound, "taylor": main.taylor, "gap": main.bound - log_z,
                              "taylor_gap": main.taylor - log_z}
        self.taylor_line.visible = self.taylor_gap.visible = bool(self.show_taylor.value)
        touches = {"s": [s_t], "log_z": [main.log_z], "color": [MAIN_COLOR]}
        min_gap = float(np.min(main.bound - log_z))
        for i, src in enumerate(self.extra_srcs):
            if i < len(extra):
                e = setup.expand(model, extra[i], r_t, s)
                src.data = {"s": s, "bound": e.bound, "gap": e.bound - log_z}
                touches["s"].append(extra[i])
                touches["log_z"].append(e.log_z)
                touches["color"].append(EXTRA_COLORS[i])
                min_gap = min(min_gap, float(np.min(e.bound - log_z)))
            else:
                src.data = {"s": [], "bound": [], "gap": []}
        self.touch_src.data = touches
        legend = self.line_fig.legend[0]
        legend.items = self._fixed_items + [
            LegendItem(label=f"bound at s̃ = {x:g}", renderers=[self.extra_lines[i]]) for i, x in enumerate(extra)]
        # frame log Z: the bounds leave the window upwards far from their θ̃ (zoom out to follow)
        lo, hi = float(np.min(log_z)), float(np.max(log_z))
        span = max(hi - lo, 1.0)
        bottom = min(lo, float(np.min(main.taylor)) if self.show_taylor.value else lo)
        self.line_fig.y_range.update(start=bottom - 0.08 * span, end=hi + 1.2 * span)
        gaps = [main.bound - log_z] + [src.data["gap"] for src in self.extra_srcs[:len(extra)]]
        gap_top = min(float(np.max([np.max(g) for g in gaps])), 1.2 * span)
        gap_bottom = min(0.0, float(np.min(main.taylor - log_z)) if self.show_taylor.value else 0.0)
        self.gap_fig.y_range.update(start=gap_bottom - 0.05 * gap_top, end=1.1 * gap_top)
        # the 2-D slice of the main expansion's gap
        grid, log_z2 = setup.log_z_slice(key, scale, seed, R)
        gap2 = setup.gap_slice(model, grid, log_z2, s_t, r_t)
        step = grid[1] - grid[0]
        self.slice_src.data = {"image": [np.maximum(gap2, GAP_FLOOR)], "x": [-R - step / 2], "y": [-R - step / 2],
                               "dw": [2 * R + step], "dh": [2 * R + step]}
        self.mapper.high = max(float(np.max(gap2)), 10 * GAP_FLOOR)
        self.tilde_src.data = {"s": [s_t], "r": [r_t]}
        self.line_marker.location = r_t
        min_gap = min(min_gap, float(np.min(gap2)))
        taylor_min = float(np.min(main.taylor - log_z))
        if min_gap >= 0:
            shown = f"{min_gap:.2e}"
        elif min_gap >= -1e-9:
            shown = f"0 ({min_gap:.0e} is rounding)"
        else:
            shown = f"{min_gap:.3g}"
        text = (f"Min of bound − log Z over the line and the slice: **{shown}** "
                f"({'≥ 0: the bound holds' if min_gap >= -1e-9 else 'NEGATIVE: the bound fails'}); "
                f"at θ̃ the bound equals log Z = {main.log_z:.4f} and |μ − ∇log Z(θ̃)| = {main.grad_error:.1e}. "
                + (f"The Taylor expansion falls {-taylor_min:.3f} nats below log Z: not a bound."
                   if taylor_min < -1e-9 else "The Taylor expansion stays above log Z on this line."))
        self.message.set("ok" if min_gap >= -1e-9 else "error", text)

    def panel(self) -> pn.viewable.Viewable:
        controls = pn.Card(self.model, self.model_info, self.scale, self.seed, self.radius, self.s_tilde, self.r_tilde,
                           self.extra, self.show_taylor, title="Model and expansion point θ̃", collapsible=False,
                           width=340)
        plots = pn.Column(self.message.pane,
                          pn.Row(pn.pane.Bokeh(self.line_fig, sizing_mode="stretch_width"),
                                 pn.pane.Bokeh(self.slice_fig), sizing_mode="stretch_width"),
                          pn.pane.Bokeh(self.gap_fig, sizing_mode="stretch_width"), sizing_mode="stretch_width")
        return pn.Row(controls, plots, sizing_mode="stretch_width")


RACE_COLORS = {"Bound majorization": "#d62728", "L-BFGS": "#1f77b4", "CG": "#2ca02c",
               "Steepest descent": "#9467bd", "Newton": "#ff7f0e"}
RACE_EPSILON = 1e-4  # Table 1: within 1e-4 of the optimum J* (absolute, on the summed J)
RACE_FLOOR = 1e-12  # J - J* below this is drawn at the floor (rounding)
# rounds per second (each method takes one step per round); the small problems converge in
# well under a second at full speed, too fast to watch
RACE_SPEEDS = {"10 steps/s": 10.0, "30 steps/s": 30.0, "as fast as possible": None}

RACE_INTRO = """
#### Race: bound majorization against first- and second-order optimizers (Algorithm 2, Table 1)

Each step of **bound majorization** solves θ ← θ − (Σ + tλI)⁻¹ ∇J(θ), with Σ from the bound at
the current θ: the objective J (regularized negative conditional log-likelihood, summed over
the training pairs) can never increase. L-BFGS, nonlinear CG, steepest descent (each with a
line search) and Newton start from the same θ = 0 on exactly the same J. The plots show
J − J* on a log scale, J* being a tightly converged reference (scipy L-BFGS-B polished by
Newton steps), per iteration and per second of each method's own compute.
"""


class RaceView:
    """Five optimizers on one problem, streaming J - J* live."""

    def __init__(self) -> None:
        from engine import majorize

        self._majorize = majorize
        w = pn.widgets
        self.problem = w.Select(label="Problem", options=setup.RACE_PROBLEMS, value="wine", width=300)
        self.reg = w.FloatInput(label="Regularization λ", value=majorize.DEFAULT_REG["wine"], start=0.0, step=0.01,
                                width=140)
        self.play = w.Button(label="▶ Play", color="success", width=90)
        self.pause = w.Button(label="❚❚ Pause", color="warning", width=90, disabled=True)
        self.step = w.Button(label="Step", color="primary", width=80)
        self.reset = w.Button(label="↺ Reset", color="default", width=90)
        self.speed = w.Select(label="Speed", options=list(RACE_SPEEDS), value="30 steps/s", width=170)
        self.status = StatusBadge("Ready: press ▶ Play to start the race", "idle", name="race-status")
        self.monotone = StatusBadge("Bound majorization: no step yet", "idle", name="race-monotone")
        self.table = pn.pane.Markdown("", sizing_mode="stretch_width", name="race-table")
        self.info = pn.pane.Markdown("", styles={"font-size": "0.9em"}, width=300)
        self.sources: dict[str, dict[str, ColumnDataSource]] = {}
        self.by_iteration = self._race_figure("J − J* per iteration", "iteration", "by-iteration")
        self.by_time = self._race_figure("J − J* per second of compute", "seconds (each method's own time)", "by-time")
        self._reference = None
        self._stats: dict[str, dict] = {}
        self.problem.param.watch(self._on_problem, "value")
        self.reg.param.watch(lambda e: self._rebuild(), "value")
        self.play.on_click(lambda e: self._play())
        self.pause.on_click(lambda e: self._pause())
        self.step.on_click(lambda e: self._step())
        self.reset.on_click(lambda e: self._rebuild())
        self.runner = Runner(self._factory())
        self.runner.set_speed(RACE_SPEEDS[self.speed.value])
        self.speed.param.watch(lambda e: self.runner.set_speed(RACE_SPEEDS[e.new]), "value")
        self._callback = None
        self._clear()

    def _race_figure(self, title: str, x_label: str, key: str):
        fig = _figure(title, x_label, "J − J* (log scale)", height=340, sizing_mode="stretch_width",
                      y_axis_type="log")
        for name, color in RACE_COLORS.items():
            src = ColumnDataSource(data={"x": [], "y": []}, name=f"race-{key}:{name}")
            self.sources.setdefault(name, {})[key] = src
            fig.line("x", "y", source=src, color=color, line_width=2.5 if name == "Bound majorization" else 1.8,
                     legend_label=name)
        fig.add_layout(Span(location=RACE_EPSILON, dimension="width", line_color="#555", line_dash="dotted"))
        fig.legend.location = "top_right"
        fig.legend.background_fill_alpha = 0.7
        fig.legend.click_policy = "hide"
        fig.add_tools(HoverTool(tooltips=[("x", "@x{0.000}"), ("J − J*", "@y{0.000e}")]))
        hint = Label(x=10, y=10, x_units="screen", y_units="screen", text="Press ▶ Play to start the race",
                     text_color="#777", text_font_size="11pt")
        fig.add_layout(hint)
        self._hints = getattr(self, "_hints", []) + [hint]
        return fig

    # ------------------------------------------------------------------ settings
    def _factory(self):
        problem, reg = self.problem.value, float(self.reg.value)
        race = self._majorize.make_race(problem, reg=reg, max_iter=setup.RACE_MAX_ITER)  # validates now
        objective = race["L-BFGS"].objective
        self.info.object = (f"**d = {objective.dim} parameters**, {objective.n_examples:,} training "
                            f"{'sequences' if problem == 'chain' else 'examples'}. {setup.RACE_DESCRIPTIONS[problem]}")
        self._objective = objective
        return lambda: self._majorize.make_race(problem, reg=reg, max_iter=setup.RACE_MAX_ITER, objective=objective)

    def _on_problem(self, event) -> None:
        self._applying = True
        try:
            self.reg.value = self._majorize.DEFAULT_REG[event.new]
        finally:
            self._applying = False
        self._rebuild()

    @_held
    def _rebuild(self) -> None:
        if getattr(self, "_applying", False):
            return
        try:
            factory = self._factory()
        except ValueError as exc:
            self.status.set("error", f"**Invalid setting:** {exc}")
            return
        self.runner.reset(factory)
        self._clear()

    def _clear(self) -> None:
        self._reference = None
        self._stats = {name: {"steps": 0, "gap": math.nan, "grad": math.nan, "hit": None, "monotone": True}
                       for name in RACE_COLORS}
        for srcs in self.sources.values():
            for src in srcs.values():
                src.data = {"x": [], "y": []}
        self.table.object = ""
        for hint in self._hints:
            hint.visible = True
        self.monotone.set("idle", "Bound majorization: no step yet")
        self._refresh_status()

    def _ensure_reference(self) -> None:
        if self._reference is None:
            self.status.set("info", "Computing the reference optimum J* (scipy L-BFGS-B + Newton polish)…")
            self._reference = self._majorize.scipy_reference(self._objective)
            self._J0 = float(self._objective.value(np.zeros(self._objective.dim)))

    # ------------------------------------------------------------------ buttons
    @_held
    def _play(self) -> None:
        self._ensure_reference()
        busy = play_or_tell(self.runner)
        self._refresh_status()
        if busy:
            self.status.set("warn", busy)

    @_held
    def _pause(self) -> None:
        self.runner.pause()
        self._refresh_status()

    @_held
    def _step(self) -> None:
        self._ensure_reference()
        self.runner.step_once()
        self._refresh_status()

    def start(self) -> None:
        if self._callback is None:
            self._callback = attach(self.runner, self.on_records, 200)

    # ------------------------------------------------------------------ live updates
    def on_records(self, records) -> None:
        if self._reference is None or not records:
            if records is not None:
                self._refresh_status()
            return
        J_star = self._reference.value
        grouped: dict[str, list] = {}
        for name, r in records:
            grouped.setdefault(name, []).append(r)
        for name, recs in grouped.items():
            stats = self._stats[name]
            its = [r.scalars["iteration"] for r in recs]
            secs = [r.scalars["elapsed"] for r in recs]
            gaps = [max(r.scalars["objective"] - J_star, RACE_FLOOR) for r in recs]
            self.sources[name]["by-iteration"].stream({"x": its, "y": gaps})
            self.sources[name]["by-time"].stream({"x": secs, "y": gaps})
            for hint in self._hints:
                hint.visible = False
            for r, g in zip(recs, gaps):
                if stats["hit"] is None and r.scalars["objective"] - J_star <= RACE_EPSILON:
                    stats["hit"] = (int(r.scalars["iteration"]), float(r.scalars["elapsed"]))
            last = recs[-1].scalars
            stats.update(steps=int(last["iteration"]), gap=last["objective"] - J_star, grad=last["grad_norm"],
                         monotone=bool(last["monotone"]), seconds=float(last["elapsed"]))
        self._show_table()
        self._refresh_status()

    def _show_table(self) -> None:
        rows = ["| method | steps | J − J* | ‖∇J‖ | iterations to ε | seconds to ε | J monotone | status |",
                "|---|---:|---:|---:|---:|---:|:---:|---|"]
        for name in RACE_COLORS:
            st = self._stats[name]
            state = self.runner.states.get(name)
            hit = st["hit"]
            rows.append(
                f"| {name} | {st['steps']} | {st['gap']:.2e} | {st['grad']:.1e} | "
                f"{'–' if hit is None else hit[0]} | {'–' if hit is None else f'{hit[1]:.3f}'} | "
                f"{'yes' if st['monotone'] else 'no'} | {state.status if state else ''} |")
        self.table.object = (f"**Table 1 live** (ε = {RACE_EPSILON:g}, absolute, on the summed J; "
                             f"J* = {self._reference.value:.8g}):\n\n" + "\n".join(rows))
        st = self._stats["Bound majorization"]
        if st["steps"]:
            if st["monotone"]:
                self.monotone.set("ok", f"Bound majorization: **monotone so far** — J never increased in "
                                        f"{st['steps']} steps (Theorem 1 at work).")
            else:
                self.monotone.set("error", "Bound majorization: J INCREASED — the bound failed to majorize.")

    def _refresh_status(self) -> None:
        runner = self.runner
        playing = runner.playing
        self.play.disabled = playing or not runner.active
        self.pause.disabled = not playing
        self.step.disabled = playing or not runner.active
        if playing:
            self.status.set("info", "Racing…")
        elif not runner.active and self._stats["Bound majorization"]["steps"]:
            self.status.set("ok", "Every method has stopped (converged, stalled or at the iteration cap).")
        elif self._stats["Bound majorization"]["steps"]:
            self.status.set("idle", "Paused")
        else:
            self.status.set("idle", "Ready: press ▶ Play to start the race")

    def panel(self) -> pn.viewable.Viewable:
        controls = pn.Card(self.problem, self.info, self.reg, title="Problem", collapsible=False, width=340)
        bar = pn.Row(self.play, self.pause, self.step, self.reset, self.speed, align="center")
        plots = pn.Column(bar, pn.Row(self.status.pane, self.monotone.pane, sizing_mode="stretch_width"),
                          pn.Row(pn.pane.Bokeh(self.by_iteration, sizing_mode="stretch_width"),
                                 pn.pane.Bokeh(self.by_time, sizing_mode="stretch_width"), sizing_mode="stretch_width"),
                          self.table, sizing_mode="stretch_width")
        return pn.Column(pn.pane.Markdown(RACE_INTRO, sizing_mode="stretch_width"),
                         pn.Row(controls, plots, sizing_mode="stretch_width"), sizing_mode="stretch_width")


class BoundLab:
    """The Bound lab: tightness views, then the majorization race."""

    title = "Bound"

    def __init__(self) -> None:
        self.tightness = TightnessView()
        self.race = RaceView()

    def panel(self) -> pn.viewable.Viewable:
        return pn.Column(pn.pane.Markdown(INTRO, sizing_mode="stretch_width"), self.tightness.panel(),
                         self.race.panel(), sizing_mode="stretch_width", name=self.title)

    def start(self) -> None:
        self.race.start()
