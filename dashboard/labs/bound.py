"""The Bound lab: the quadratic bound on the partition function hugging log Z, and bound
majorization racing first- and second-order optimizers.

Paper: Jebara & Choromanska (2012), "Majorization for CRFs and latent likelihoods" (NIPS).
"""

from __future__ import annotations

import functools

import numpy as np
import panel as pn
from bokeh.events import Tap
from bokeh.models import ColorBar, ColumnDataSource, HoverTool, LegendItem, LogColorMapper, Range1d, Span
from bokeh.plotting import figure
from matplotlib import colormaps
from matplotlib.colors import to_hex

from dashboard.labs import bound_setup as setup
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


class BoundLab:
    """The Bound lab: tightness views and (below) the majorization race."""

    title = "Bound"

    def __init__(self) -> None:
        self.tightness = TightnessView()

    def panel(self) -> pn.viewable.Viewable:
        return pn.Column(pn.pane.Markdown(INTRO, sizing_mode="stretch_width"), self.tightness.panel(),
                         sizing_mode="stretch_width", name=self.title)

    def start(self) -> None:
        pass
