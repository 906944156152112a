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
from dashboard.labtools import LabTools, Preset, decode_value, intro_card
from dashboard.runner import Runner, attach, play_or_tell
from dashboard.views import StatusBadge

VIRIDIS = [to_hex(c) for c in colormaps["viridis"](np.linspace(0, 1, 256))]
EXTRA_COLORS = ["#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]
MAIN_COLOR = "#d62728"
GAP_FLOOR = 1e-4  # the log colour scale of the gap map starts here

INTRO = """
For a log-linear model p(y | θ) = h(y) exp(θᵀf(y)) / Z(θ) over a finite Ω, **Algorithm 1**
of Jebara & Choromanska (2012) computes, in one pass over Ω, a *quadratic upper bound* on the
log-partition function that touches it at any expansion point θ̃ (**Theorem 1**). Unlike the
second-order Taylor expansion, whose curvature is right only at θ̃, the bound's curvature Σ is
large enough everywhere, so minimizing the bound can never make the objective worse. Starting
from z → 0⁺, μ = 0, Σ = zI, the pass ends with z = Z(θ̃) and μ = ∇log Z(θ̃).
"""

EQUATIONS = r"""
$$\log Z(\theta) \le \log z + (\theta-\tilde\theta)^\top \mu + \frac{1}{2}(\theta-\tilde\theta)^\top \Sigma (\theta-\tilde\theta) \quad \text{for every } \theta \qquad \text{(Theorem 1)}$$

$$\text{for each } y \in \Omega: \quad \alpha = h(y) e^{\tilde\theta^\top f(y)}, \quad l = f(y) - \mu, \quad \Sigma \mathrel{+}= \frac{\tanh(\frac{1}{2}\log(\alpha/z))}{2\log(\alpha/z)} l l^\top, \quad \mu \mathrel{+}= \frac{\alpha}{z+\alpha} l, \quad z \mathrel{+}= \alpha \qquad \text{(Algorithm 1)}$$
"""

WATCH = """
Move θ̃ with the sliders or **click the gap map**: the gap bound − log Z (middle plot) stays
≥ 0 everywhere and touches 0 at θ̃, while the dashed Taylor expansion's gap dips below 0: it is
not a bound. The badge checks the smallest gap over the line and the whole slice. The preset
*Taylor is not a bound* shows it most clearly.
"""

TITLE = "The quadratic bound: log Z from above, touching at θ̃ (Jebara & Choromanska, 2012)"


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
        self._applying = False  # BoundLab.apply_settings sets many widgets, then redraws once
        self._tapping = False
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
        line = _figure("log Z and its bounds along a line", "s: position along the line (θ units)",
                       "log Z(θ) (nats)", height=380, sizing_mode="stretch_width", y_range=Range1d(0, 1))
        curves = [line.line("s", "log_z", source=self.line_src, color="black", line_width=3,
                            legend_label="log Z (exact)", name="log Z (exact)"),
                  line.line("s", "bound", source=self.main_src, color=MAIN_COLOR, line_width=2,
                            legend_label="bound at θ̃", name="bound at θ̃")]
        self.taylor_line = line.line("s", "taylor", source=self.main_src, color=MAIN_COLOR, line_width=2,
                                     line_dash="dashed", legend_label="Taylor at θ̃ (not a bound)",
                                     name="Taylor at θ̃ (not a bound)")
        self.extra_lines = [line.line("s", "bound", source=src, color=color, line_width=1.5, line_alpha=0.9,
                                      name=f"extra bound {i + 1}")
                            for i, (src, color) in enumerate(zip(self.extra_srcs, EXTRA_COLORS))]
        line.scatter("s", "log_z", source=self.touch_src, color="color", size=9, line_color="black")
        line.legend.location = "top_left"
        self._fixed_items = list(line.legend.items)
        line.legend.background_fill_alpha = 0.7
        line.add_tools(HoverTool(renderers=[*curves, self.taylor_line, *self.extra_lines],
                                 tooltips=[("curve", "$name"), ("s", "@s{0.00}"), ("value (nats)", "$y{0.000}")]))
        self.line_fig = line

        gap = _figure("Gap: bound − log Z (≥ 0, zero at θ̃)", "s: position along the line (θ units)",
                      "gap (nats)", height=300, sizing_mode="stretch_width", y_range=Range1d(0, 1))
        gap.add_layout(Span(location=0, dimension="width", line_color="black", line_width=1))
        gaps = [gap.line("s", "gap", source=self.main_src, color=MAIN_COLOR, line_width=2,
                         legend_label="bound at θ̃", name="bound at θ̃")]
        self.taylor_gap = gap.line("s", "taylor_gap", source=self.main_src, color=MAIN_COLOR, line_dash="dashed",
                                   line_width=2, legend_label="Taylor at θ̃", name="Taylor at θ̃ (not a bound)")
        self.extra_gaps = [gap.line("s", "gap", source=src, color=color, line_width=1.5, name=f"extra bound {i + 1}")
                           for i, (src, color) in enumerate(zip(self.extra_srcs, EXTRA_COLORS))]
        gap.legend.location = "top_left"
        gap.legend.background_fill_alpha = 0.7
        gap.add_tools(HoverTool(renderers=[*gaps, self.taylor_gap, *self.extra_gaps],
                                tooltips=[("curve", "$name"), ("s", "@s{0.00}"), ("gap (nats)", "$y{0.0000}")]))
        self.gap_fig = gap

        self.mapper = LogColorMapper(palette=VIRIDIS, low=GAP_FLOOR, high=1.0)
        self.slice_src = ColumnDataSource(data={"image": [], "x": [], "y": [], "dw": [], "dh": []}, name="bound-slice")
        self.tilde_src = ColumnDataSource(data={"s": [], "r": []}, name="bound-tilde")
        sl = figure(title="Gap over a 2-D slice (click to move θ̃)", x_axis_label="s: along the line (θ units)",
                    y_axis_label="r: across the line (θ units)", height=380, width=440, tools="tap,save,reset",
                    toolbar_location="right", match_aspect=True, name="bound-slice-figure")
        sl.title.text_font_size = "13pt"
        image = sl.image("image", "x", "y", "dw", "dh", source=self.slice_src, color_mapper=self.mapper)
        sl.add_tools(HoverTool(renderers=[image], tooltips=[("s", "$x{0.00}"), ("r", "$y{0.00}"),
                                                            ("bound − log Z (nats)", "@image{0.000e}")]))
        sl.add_layout(ColorBar(color_mapper=self.mapper, width=12, title="gap (nats)"), "right")
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

    def refresh(self, full: bool = False, strict: bool = False) -> None:
        """Redraw every view; a bad setting shows an error (and raises if ``strict``)."""
        if self._tapping or self._applying:
            return
        with pn.io.hold(freeze=True):
            try:
                self._refresh(full)
            except ValueError as exc:
                self.message.set("error", f"**Cannot draw:** {exc}")
                if strict:
                    raise

    def set_radius(self, radius: float) -> None:
        """The plotted range R; θ̃'s sliders span [-R, R]."""
        self.radius.value = radius
        for slider in (self.s_tilde, self.r_tilde):
            slider.start, slider.end = -radius, radius

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
            self.extra_lines[i].name = self.extra_gaps[i].name = (
                f"bound at s̃ = {extra[i]:g}" if i < len(extra) else f"extra bound {i + 1}")
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
SEEDED_PROBLEMS = ("chain", "fvbm")  # synthetic data: the race's data seed matters

RACE_INTRO = """
The race minimizes J, the regularized negative conditional log-likelihood summed over the t
training pairs. Each step of **bound majorization** builds Algorithm 1's bound for every pair
at the current θ̃ (the junction tree of **Algorithm 3** for chain CRFs) and jumps to the
minimum of their sum, so J can never increase. L-BFGS, nonlinear CG, steepest descent (each
with a line search) and Newton start from the same θ = 0 on exactly the same J. The plots show
J − J* on a log scale (J* a tightly converged reference: scipy L-BFGS-B polished by Newton),
per iteration and per second of each method's own compute; the dotted line is Table 1's ε.
"""

RACE_EQUATIONS = r"""
$$J(\theta) = \sum_{j=1}^{t} \Big[ \log Z_{x_j}(\theta) - \theta^\top f_{x_j}(y_j) \Big] + \frac{t\lambda}{2} \lVert\theta\rVert^2 \qquad \text{(the negative of eq. 1)}$$

$$\tilde\theta \leftarrow \tilde\theta - \Big( \sum_{j=1}^{t} \Sigma_j + t\lambda I \Big)^{-1} \nabla J(\tilde\theta) \qquad \text{(Algorithm 2, step 3, without constraints)}$$
"""

RACE_WATCH = """
The bound's thick red curve never rises (the badge checks every step), but its Σ is larger
than the Hessian, so it needs more steps than L-BFGS or Newton: Table 1's claim that it is
the fastest is not reproduced here (see the README). With strong regularization (preset
*λ = 1: the bound ties L-BFGS*) tλI dominates Σ and the bound keeps pace. In presentation mode,
**Next step** rings each method's newest point.
"""

RACE_TITLE = "Race: bound majorization against L-BFGS, CG, steepest descent and Newton (Algorithm 2, Table 1)"


class RaceView:
    """Five optimizers on one problem, streaming J - J* live."""

    def __init__(self) -> None:
        from engine import majorize

        self._majorize = majorize
        self._applying = False  # BoundLab.apply_settings sets many widgets, then rebuilds once
        w = pn.widgets
        self.problem = w.Select(label="Problem", options=setup.RACE_PROBLEMS, value="wine", width=300)
        self.reg = w.FloatInput(label="Regularization λ", value=majorize.DEFAULT_REG["wine"], start=0.0, step=0.01,
                                width=140)
        self.seed = w.IntInput(label="Data seed", value=0, start=0, width=140, visible=False)
        self.play = w.Button(label="▶ Play", color="success", width=90)
        self.pause = w.Button(label="❚❚ Pause", color="warning", width=100, disabled=True)
        self.step = w.Button(label="Step", color="primary", width=80)
        self.reset = w.Button(label="↺ Reset", color="default", width=90)
        self.speed = w.Select(label="Speed", options=list(RACE_SPEEDS), value="30 steps/s", width=170)
        self.status = StatusBadge("Ready: press ▶ Play to start the race", "idle", name="race-status")
        self.monotone = StatusBadge("Bound majorization: no step yet", "idle", name="race-monotone")
        self.table = pn.pane.Markdown("", sizing_mode="stretch_width", name="race-table")
        self.info = pn.pane.Markdown("", styles={"font-size": "0.9em"}, width=300)
        self.sources: dict[str, dict[str, ColumnDataSource]] = {}
        # presentation mode: a ring around each method's newest point (see BoundLab.describe_change)
        self.newest: dict[str, ColumnDataSource] = {}
        self.by_iteration = self._race_figure("J − J* per iteration", "iteration", "by-iteration")
        self.by_time = self._race_figure("J − J* per second of compute", "seconds (each method's own compute)",
                                         "by-time")
        self._reference = None
        self._J0 = math.nan
        self._stats: dict[str, dict] = {}
        self.problem.param.watch(self._on_problem, "value")
        self.reg.param.watch(lambda e: self._rebuild(), "value")
        self.seed.param.watch(lambda e: self._rebuild(), "value")
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
        fig = _figure(title, x_label, "J − J* (nats, log scale)", height=400, sizing_mode="stretch_width",
                      y_axis_type="log")
        lines = []
        for name, color in RACE_COLORS.items():
            src = ColumnDataSource(data={"x": [], "y": []}, name=f"race-{key}:{name}")
            self.sources.setdefault(name, {})[key] = src
            lines.append(fig.line("x", "y", source=src, color=color,
                                  line_width=2.5 if name == "Bound majorization" else 1.8,
                                  legend_label=name, name=name))
        fig.add_layout(Span(location=RACE_EPSILON, dimension="width", line_color="#555", line_dash="dotted"))
        newest = ColumnDataSource(data={"x": [], "y": [], "color": [], "method": []}, name=f"race-newest-{key}")
        fig.scatter("x", "y", source=newest, marker="circle", size=18, fill_alpha=0.0, line_color="color",
                    line_width=3)
        self.newest[key] = newest
        legend = fig.legend[0]
        fig.center.remove(legend)
        fig.add_layout(legend, "below")  # inside, it hid the curves falling from top left to bottom right
        legend.orientation = "horizontal"
        legend.ncols = 3
        legend.click_policy = "hide"
        legend.margin = 4
        legend.padding = 4
        legend.border_line_alpha = 0
        x_tip = ("iteration", "@x{0}") if key == "by-iteration" else ("seconds", "@x{0.000}")
        fig.add_tools(HoverTool(renderers=lines, tooltips=[("method", "$name"), x_tip, ("J − J*", "@y{0.000e}")]))
        hint = Label(x=10, y=10, x_units="screen", y_units="screen", text="Press ▶ Play to start the race",
                     text_color="#777", text_font_size="11pt")
        fig.add_layout(hint)
        self._hints = getattr(self, "_hints", []) + [hint]
        return fig

    # ------------------------------------------------------------------ settings
    def _factory(self):
        problem, reg, seed = self.problem.value, float(self.reg.value), int(self.seed.value)
        race = self._majorize.make_race(problem, reg=reg, seed=seed, max_iter=setup.RACE_MAX_ITER)  # validates now
        objective = race["L-BFGS"].objective
        self.info.object = (f"**d = {objective.dim} parameters**, {objective.n_examples:,} training "
                            f"{'sequences' if problem == 'chain' else 'examples'}. {setup.RACE_DESCRIPTIONS[problem]}")
        self._objective = objective
        return lambda: self._majorize.make_race(problem, reg=reg, seed=seed, max_iter=setup.RACE_MAX_ITER,
                                                objective=objective)

    def _update_visibility(self) -> None:
        self.seed.visible = self.problem.value in SEEDED_PROBLEMS

    def _on_problem(self, event) -> None:
        if self._applying:
            return
        self._applying = True
        try:
            self.reg.value = self._majorize.DEFAULT_REG[event.new]
        finally:
            self._applying = False
        self._update_visibility()
        self._rebuild()

    @_held
    def _rebuild(self, strict: bool = False) -> None:
        """A fresh race from the widgets' settings; a bad setting shows an error (raised if ``strict``)
        and keeps the current race."""
        if self._applying:
            return
        try:
            factory = self._factory()
        except ValueError as exc:
            self.status.set("error", f"**Invalid setting:** {exc}")
            if strict:
                raise
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
        self.clear_highlight()
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

    # ------------------------------------------------------------------ presentation
    def highlight(self, name: str, iteration: float, seconds: float, gap: float) -> None:
        """Ring the newest point of method ``name`` in both plots."""
        for key, x in (("by-iteration", iteration), ("by-time", seconds)):
            src = self.newest[key]
            data = {k: list(v) for k, v in src.data.items()}
            if name in data["method"]:
                i = data["method"].index(name)
                data["x"][i], data["y"][i] = x, gap
            else:
                for k, v in (("x", x), ("y", gap), ("color", RACE_COLORS.get(name, "black")), ("method", name)):
                    data[k].append(v)
            src.data = data

    def clear_highlight(self) -> None:
        for src in self.newest.values():
            src.data = {"x": [], "y": [], "color": [], "method": []}

    # ------------------------------------------------------------------ buttons
    @_held
    def _play(self) -> None:
        self._ensure_reference()
        self.clear_highlight()
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
            if name not in self._stats:
                continue
            stats = self._stats[name]
            its = [r.scalars["iteration"] for r in recs]
            secs = [r.scalars["elapsed"] for r in recs]
            gaps = [max(r.scalars["objective"] - J_star, RACE_FLOOR) for r in recs]
            self.sources[name]["by-iteration"].stream({"x": its, "y": gaps})
            self.sources[name]["by-time"].stream({"x": secs, "y": gaps})
            for hint in self._hints:
                hint.visible = False
            for r in recs:
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

    def panel(self, presenter: pn.viewable.Viewable | None = None) -> pn.viewable.Viewable:
        controls = pn.Card(self.problem, self.info, pn.Row(self.reg, self.seed), title="Problem",
                           collapsible=False, width=340)
        bar = pn.Row(self.play, self.pause, self.step, self.reset, self.speed, align="center")
        plots = pn.Column(bar, *([presenter] if presenter is not None else []),
                          pn.Row(self.status.pane, self.monotone.pane, sizing_mode="stretch_width"),
                          pn.Row(pn.pane.Bokeh(self.by_iteration, sizing_mode="stretch_width"),
                                 pn.pane.Bokeh(self.by_time, sizing_mode="stretch_width"), sizing_mode="stretch_width"),
                          self.table, sizing_mode="stretch_width")
        return pn.Column(intro_card(RACE_TITLE, RACE_INTRO, RACE_EQUATIONS, RACE_WATCH),
                         pn.Row(controls, plots, sizing_mode="stretch_width"), sizing_mode="stretch_width")


# ---------------------------------------------------------------------------- presets
PRESETS = [
    Preset("Taylor is not a bound",
           {"model": "loglinear", "scale": 0.5, "plane_seed": 0, "radius": 3.0, "s_tilde": 2.5,
            "r_tilde": 0.0, "extra": "-2", "taylor": True},
           "A 6-outcome log-linear model (d = 2: the plane is all of θ). At s̃ = 2.5 one outcome "
           "dominates, so the Taylor expansion's curvature (the covariance at θ̃) is small: its dashed "
           "gap falls about 1.4 nats below 0 on the far side, while the bounds at s̃ = 2.5 and −2 stay "
           "above log Z and touch it at their θ̃ (Theorem 1)."),
    Preset("The chain CRF (Algorithm 3)",
           {"model": "chain", "scale": 0.5, "plane_seed": 0, "radius": 3.0, "s_tilde": 0.0, "r_tilde": 0.0,
            "extra": "-2, 1.5", "taylor": True, "problem": "chain", "reg": 0.1, "race_seed": 0,
            "speed": "30 steps/s"},
           "Above: the bound on a 4-node, 3-state chain over its 81 labelings. Below: a linear-chain "
           "CRF on 100 sequences, each bound from the junction tree (Algorithm 3): J never rises, but "
           "the bound needs about 190 steps to ε where L-BFGS needs about 20."),
    Preset("Table 1: the digits race",
           {"problem": "digits", "reg": 0.1, "speed": "30 steps/s"},
           "Multinomial logistic regression on 8×8 digits (650 parameters, 1,797 images), as in "
           "Table 1. Watch the iterations to ε in the live table: Newton ~5, L-BFGS ~12, the bound "
           "~68: the paper's claim that the bound is fastest is not reproduced (README), though its "
           "curve never rises."),
    Preset("λ = 1: the bound ties L-BFGS",
           {"problem": "wine", "reg": 1.0, "speed": "10 steps/s"},
           "Wine with strong regularization: tλI dominates the bound's curvature Σ, so its excess "
           "over the Hessian matters little. The bound reaches ε in 6 iterations, like L-BFGS "
           "(at λ = 0.01 it needs 89 against 13)."),
    Preset("FVBM: a loose bound crawls",
           {"model": "fvbm8", "scale": 0.5, "plane_seed": 0, "radius": 3.0, "s_tilde": 0.0, "r_tilde": 0.0,
            "extra": "-2, 1.5", "taylor": True, "problem": "fvbm", "reg": 1.0, "race_seed": 0,
            "speed": "as fast as possible"},
           "Exact maximum likelihood of a 10-spin FVBM (1,024 states in one partition function): "
           "Σ is about 88× the Hessian, so L-BFGS reaches ε in 9 iterations while the bound is still "
           "short of it at the 1,000-step cap (it needs about 1,200). Above, on 8 spins: the bounds "
           "leave log Z steeply away from θ̃."),
]


class BoundTools(LabTools):
    """:class:`LabTools`, with θ̃'s sliders checked against the plotted range R that the same
    settings give (the sliders span [-R, R]; a link with R = 5 and s̃ = 4 is valid even in a
    lab whose R is still 3)."""

    def decode(self, texts, *, strict):
        texts = dict(texts)
        tilde = {k: texts.pop(k) for k in ("s_tilde", "r_tilde") if k in texts}
        values, errors = super().decode(texts, strict=False)
        radius = float(values.get("radius", self.lab.tightness.radius.value))
        stand_in = pn.widgets.FloatSlider(start=-radius, end=radius, value=0.0)
        for name, text in tilde.items():
            try:
                values[name] = decode_value(name, stand_in, text)
            except ValueError as exc:
                errors.append(str(exc))
        if strict and errors:
            raise ValueError(" ".join(errors))
        return values, errors


class BoundLab:
    """The Bound lab: tightness views, then the majorization race.

    The :class:`LabTools` contract: the settings cover both parts; the runner, the
    checkpoint and presentation mode's steps are the race's (the tightness view is not a
    trainer: its state is its settings).
    """

    title = "Bound"
    key = "bound"
    presets = PRESETS

    def __init__(self) -> None:
        self._applying = False
        self.tightness = TightnessView()
        self.race = RaceView()
        self.tools = BoundTools(self)

    @property
    def runner(self) -> Runner:
        return self.race.runner

    def on_records(self, records) -> None:
        self.race.on_records(records)

    # ------------------------------------------------------------------ LabTools contract
    def settings(self) -> dict:
        """The widgets whose values define the lab's state (URL, presets, checkpoints)."""
        t, r = self.tightness, self.race
        return {"model": t.model, "scale": t.scale, "plane_seed": t.seed, "radius": t.radius,
                "s_tilde": t.s_tilde, "r_tilde": t.r_tilde, "extra": t.extra, "taylor": t.show_taylor,
                "problem": r.problem, "reg": r.reg, "race_seed": r.seed, "speed": r.speed}

    @_held
    def apply_settings(self, values: dict) -> None:
        """Set the widgets with their handlers silenced, then redraw the tightness views and
        rebuild the race once; ``ValueError`` if the values make no valid run (the widgets
        keep the new values, the race its old trainers)."""
        widgets = self.settings()
        unknown = sorted(set(values) - set(widgets))
        if unknown:
            raise ValueError(f"The Bound lab has no setting {unknown[0]!r}.")
        t, r = self.tightness, self.race
        self._applying = t._applying = r._applying = True
        try:
            if "radius" in values:  # first: θ̃'s sliders span [-R, R]
                t.set_radius(values["radius"])
            for name, value in values.items():
                widgets[name].value = value
            if "problem" in values and "reg" not in values:
                r.reg.value = self.race._majorize.DEFAULT_REG[values["problem"]]
        finally:
            self._applying = t._applying = r._applying = False
        r._update_visibility()
        errors = []
        for rebuild in (lambda: r._rebuild(strict=True), lambda: t.refresh(full=True, strict=True)):
            try:
                rebuild()
            except ValueError as exc:
                errors.append(str(exc))
        if errors:
            raise ValueError(" ".join(errors))

    @_held
    def redraw(self, records) -> None:
        """Clear the race's plots and replay ``records`` (a loaded checkpoint's history);
        J* is recomputed for the current problem (it is deterministic)."""
        race = self.race
        race._clear()
        if records:
            race._ensure_reference()
        race.on_records(list(records))

    def step_once(self) -> None:
        self.race._step()

    def refresh_status(self) -> None:
        self.race._refresh_status()

    def describe_change(self, name, before, after, before_arrays, after_arrays) -> str | None:
        """Presentation mode: one iteration of method ``name`` in the paper's terms (how far
        J − J* fell, whether J stayed monotone); its newest point is ringed in both plots."""
        race = self.race
        if race._reference is None or "objective" not in after:
            return None
        J_star = race._reference.value
        old = before.get("objective", race._J0)
        g0, g1 = old - J_star, after["objective"] - J_star
        shown0, shown1 = max(g0, RACE_FLOOR), max(g1, RACE_FLOOR)
        decades = math.log10(shown0 / shown1)
        if g1 <= RACE_FLOOR:
            change = "at J*, to rounding"
        elif decades >= 0:
            change = f"▼ {decades:.2f} decades"
        else:
            change = f"▲ {-decades:.2f} decades"
        rose = after.get("increase", 0.0) > 1e-12 * max(1.0, abs(old))
        ok = bool(after.get("monotone", 1.0)) and not rose
        mono = "monotone ✓" if ok else "<b style='color:#c62828'>J rose ✗</b>"
        race.highlight(name, after["iteration"], after.get("elapsed", math.nan), shown1)
        color = RACE_COLORS.get(name, "black")
        return (f"<b style='color:{color}'>{name}</b> step {int(after['iteration'])}: "
                f"J − J* {g0:.3g} → <b>{g1:.3g}</b> ({change}), {mono}")

    # ------------------------------------------------------------------ layout
    def panel(self) -> pn.viewable.Viewable:
        page = pn.Column(intro_card(TITLE, INTRO, EQUATIONS, WATCH), self.tools.panel(), self.tightness.panel(),
                         self.race.panel(self.tools.presenter()), sizing_mode="stretch_width", name=self.title)
        self.tools.root = page
        return page

    def start(self) -> None:
        self.race.start()
