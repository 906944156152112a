"""The Bound lab: bound majorization racing first- and second-order optimizers, and the
quadratic bound on the partition function hugging log Z.

Paper: Jebara & Choromanska (2012), "Majorization for CRFs and latent likelihoods" (NIPS).

Two heavy computations run as jobs (:mod:`boltzlab.dashboard.jobs`), never on the UI thread: the
race's reference optimum J* (:func:`~dashboard.labs.bound_setup.race_reference`; the race
plays without it and its J − J* curves are drawn, from the Records kept meanwhile, once it
has arrived) and the tightness views' exact log Z and bounds over a line and a 2-D slice
(:func:`~dashboard.labs.bound_setup.tightness`).  The race's trainers are built by the
runner's thread, as every lab's (a :class:`~dashboard.runner.Build`:
:func:`~dashboard.labs.bound_setup.build_race`), so a new problem or a Reset returns at once
too.
"""

from __future__ import annotations

import functools
import html
import math
import types
from typing import Any

import numpy as np
import panel as pn
import param
from bokeh.events import Tap
from bokeh.models import ColorBar, ColumnDataSource, HoverTool, Label, LegendItem, LogColorMapper, Range1d, Span
from bokeh.plotting import figure
from matplotlib import colormaps
from matplotlib.colors import to_hex

from .. import budget
from . import bound_setup as setup
from .base import Lab, by_run, speed_setting
from ..labtools import Preset
from ..views import StatusBadge
from ..views.beside import PIN_TITLE, Beside, Figure
from ..views.pinned import PinLayer
from ..views.text import TABLE_CSS, LiveHTML, escape, html_table
from ...engine import majorize

#: Table 1 live: (title, alignment) of each column
TABLE_COLUMNS = [("method", ""), ("steps", "right"), ("J − J*", "right"), ("‖∇J‖", "right"),
                 ("iterations to ε", "right"), ("seconds to ε", "right"), ("J monotone", "center"), ("status", "")]
VIRIDIS = [to_hex(c) for c in colormaps["viridis"](np.linspace(0, 1, 256))]
EXTRA_COLORS = ["#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]
MAIN_COLOR = "#d62728"
GAP_FLOOR = 1e-4  # the log colour scale of the gap map starts here
RACE_COLORS = {"Bound majorization": "#d62728", "L-BFGS": "#1f77b4", "CG": "#2ca02c",
               "Steepest descent": "#9467bd", "Newton": "#ff7f0e"}
RACE_EPSILON = 1e-4  # Table 1: within 1e-4 of the optimum J* (absolute, on the summed J)
RACE_FLOOR = 1e-12  # J - J* below this is drawn at the floor (rounding)
# rounds per second (each method takes one step per round); the small problems converge in
# well under a second at full speed, too fast to watch
RACE_SPEEDS = {"10 steps/s": 10.0, "30 steps/s": 30.0, "as fast as possible": None}
TIGHTNESS_SETTINGS = frozenset({"model", "scale", "plane_seed", "radius", "s_tilde", "r_tilde", "extra",
                                "taylor"})
PLAY_HINT = "Press ▶ Play to start the race"
# short: it must fit the half-width race plot at 1280x720 (a busy server computes J* for a while)
REFERENCE_HINT = "Computing J*… (the curves follow)"

INTRO = """
For a log-linear model p(y | θ) = h(y) exp(θᵀf(y)) / Z(θ) over a finite Ω, **Algorithm 1**
of Jebara & Choromanska (2012) computes, in one pass over Ω, a *quadratic upper bound* on the
log-partition function that touches it at any expansion point θ̃ (**Theorem 1**). Unlike the
second-order Taylor expansion, whose curvature is right only at θ̃, the bound's curvature Σ is
large enough everywhere, so minimizing the bound can never make the objective worse. Starting
from z → 0⁺, μ = 0, Σ = zI, the pass ends with z = Z(θ̃) and μ = ∇log Z(θ̃).

The race minimizes J, the regularized negative conditional log-likelihood summed over the t
training pairs. Each step of **bound majorization** builds Algorithm 1's bound for every pair
at the current θ̃ (the junction tree of **Algorithm 3** for chain CRFs) and jumps to the
minimum of their sum, so J can never increase. L-BFGS, nonlinear CG, steepest descent (each
with a line search) and Newton start from the same θ = 0 on exactly the same J. The plots show
J − J* on a log scale (J* a tightly converged reference: scipy L-BFGS-B polished by Newton),
per iteration and per second of each method's own compute; the dotted line is Table 1's ε.
"""

EQUATIONS = r"""
$$\log Z(\theta) \le \log z + (\theta-\tilde\theta)^\top \mu + \frac{1}{2}(\theta-\tilde\theta)^\top \Sigma (\theta-\tilde\theta) \quad \text{for every } \theta \qquad \text{(Theorem 1)}$$

$$\text{for each } y \in \Omega: \quad \alpha = h(y) e^{\tilde\theta^\top f(y)}, \quad l = f(y) - \mu, \quad \Sigma \mathrel{+}= \frac{\tanh(\frac{1}{2}\log(\alpha/z))}{2\log(\alpha/z)} l l^\top, \quad \mu \mathrel{+}= \frac{\alpha}{z+\alpha} l, \quad z \mathrel{+}= \alpha \qquad \text{(Algorithm 1)}$$

$$J(\theta) = \sum_{j=1}^{t} \Big[ \log Z_{x_j}(\theta) - \theta^\top f_{x_j}(y_j) \Big] + \frac{t\lambda}{2} \lVert\theta\rVert^2 \qquad \text{(the negative of eq. 1)}$$

$$\tilde\theta \leftarrow \tilde\theta - \Big( \sum_{j=1}^{t} \Sigma_j + t\lambda I \Big)^{-1} \nabla J(\tilde\theta) \qquad \text{(Algorithm 2, step 3, without constraints)}$$
"""

WATCH = """
The bound's thick red curve never rises (the badge checks every step), but its Σ is larger
than the Hessian, so it needs more steps than L-BFGS or Newton: Table 1's claim that it is
the fastest is not reproduced here (see the README). With strong regularization (preset
*λ = 1: the bound ties L-BFGS*) tλI dominates Σ and the bound keeps pace. In presentation mode,
**Next step** rings each method's newest point. On the *Tightness* tab, move θ̃ with the sliders
(in the sidebar) or **click the gap map**: the gap bound − log Z stays ≥ 0 everywhere and touches 0 at θ̃, while
the dashed Taylor expansion's gap dips below 0: it is not a bound (preset *Taylor is not a
bound*).
"""

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
           "Tightness tab: the bound on a 4-node, 3-state chain over its 81 labelings. Race: a linear-chain "
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
           "short of it at the 1,000-step cap (it needs about 1,200). Tightness tab, on 8 spins: the bounds "
           "leave log Z steeply away from θ̃."),
]


def _figure(title: str, x_label: str, y_label: str, **kw):
    fig = figure(title=title, x_axis_label=x_label, y_axis_label=y_label, tools="pan,wheel_zoom,box_zoom,reset,save",
                 toolbar_location="right", **kw)
    fig.title.text_font_size = "13pt"
    return fig


def _legend_below(fig, *, ncols: int, pad: int):
    """Move ``fig``'s legend under the plot in ``ncols`` columns (inside, it hid the curves, and
    on the step view the title too); the legend."""
    legend = fig.legend[0]
    fig.center.remove(legend)
    fig.add_layout(legend, "below")
    legend.orientation, legend.ncols, legend.border_line_alpha = "horizontal", ncols, 0
    legend.padding = legend.margin = pad
    return legend


class TightnessView:
    """The tightness part's widgets and plots: log Z and its bounds along a line, the gap,
    and the gap over a 2-D slice.  It computes nothing: it draws a result of
    :func:`~dashboard.labs.bound_setup.tightness` (the lab runs that as a job)."""

    def __init__(self, settings: param.Parameterized, widgets: dict[str, Any]) -> None:
        """``settings``: the lab, whose parameters hold the values (read from there: in a batch
        of changes a widget may not have caught up yet); ``widgets``: its widgets, by name."""
        self.settings = settings
        self.model, self.scale, self.seed = widgets["model"], widgets["scale"], widgets["plane_seed"]
        self.radius, self.s_tilde, self.r_tilde = widgets["radius"], widgets["s_tilde"], widgets["r_tilde"]
        self.extra, self.show_taylor = widgets["extra"], widgets["taylor"]
        self.message = StatusBadge("", "idle", name="bound-check")
        self.model_info = pn.pane.Markdown("", styles={"font-size": "0.9em"}, width=300)
        self._drawn: tuple | None = None  # (job arguments, Taylor shown) of what the plots show

        self.line_src = ColumnDataSource(data={"s": [], "log_z": []}, name="bound-line")
        self.main_src = ColumnDataSource(data={"s": [], "bound": [], "taylor": [], "gap": [], "taylor_gap": []},
                                         name="bound-main")
        self.extra_srcs = [ColumnDataSource(data={"s": [], "bound": [], "gap": []}) for _ in EXTRA_COLORS]
        self.touch_src = ColumnDataSource(data={"s": [], "log_z": [], "color": []})
        self._build_figures()

    def _build_figures(self) -> None:
        line = _figure("log Z and its bounds along a line", "s: position along the line (θ units)",
                       "log Z(θ) (nats)", height=380, sizing_mode="stretch_width", y_range=Range1d(0, 1))
        curves = [line.line("s", "log_z", source=self.line_src, color="black", line_width=3,
                            legend_label="log Z (exact)", name="log Z (exact)"),
                  line.line("s", "bound", source=self.main_src, color=MAIN_COLOR, line_width=2,
                            legend_label="bound at θ̃", name="bound at θ̃")]
        self.taylor_line = line.line("s", "taylor", source=self.main_src, color=MAIN_COLOR, line_width=2,
                                     line_dash="dashed", legend_label="Taylor (not a bound)",
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
                      "gap (nats)", height=380, sizing_mode="stretch_width", y_range=Range1d(0, 1))
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
        # beside the line's plot it gets half the stage (at 1280x720 in presentation mode, 455 px
        # with its colour bar): a short title and axis labels
        sl = figure(title="Gap map (click: move θ̃)", x_axis_label="s: along the line",
                    y_axis_label="r: across the line", height=380, width=440, tools="tap,save,reset",
                    toolbar_location="right", match_aspect=True, name="bound-slice-figure")
        sl.title.text_font_size = "13pt"
        image = sl.image("image", "x", "y", "dw", "dh", source=self.slice_src, color_mapper=self.mapper)
        sl.add_tools(HoverTool(renderers=[image], tooltips=[("s", "$x{0.00}"), ("r", "$y{0.00}"),
                                                            ("bound − log Z (nats)", "@image{0.000e}")]))
        self.slice_bar = ColorBar(color_mapper=self.mapper, width=12, title="gap (nats)")
        sl.add_layout(self.slice_bar, "right")
        sl.scatter("s", "r", source=self.tilde_src, marker="x", size=16, line_width=3, color="white")
        self.line_marker = Span(location=0, dimension="width", line_color="white", line_dash="dashed", line_width=1.5)
        sl.add_layout(self.line_marker)
        sl.grid.visible = False
        self.slice_fig = sl
        # a pin's gap map beside it (issue 47), in its colour scale (one mapper: the larger top)
        self.pin_slice_src = ColumnDataSource(data={"image": [], "x": [], "y": [], "dw": [], "dh": []},
                                              name="bound-slice-pin")
        self.pin_tilde_src = ColumnDataSource(data={"s": [], "r": []}, name="bound-tilde-pin")
        # one colour bar for the pair, under the pin's map (the maps are as wide as they can be)
        twin = figure(title=PIN_TITLE, x_axis_label="s: along the line", y_axis_label="r: across the line",
                      height=380, width=300, tools="save,reset",
                      toolbar_location="right", match_aspect=True, name="bound-slice-pin-figure")
        twin.add_layout(ColorBar(color_mapper=self.mapper, height=10, orientation="horizontal",
                                 title="gap (nats)", major_label_text_font_size="9pt"), "below")
        twin.title.text_font_size = "13pt"
        pinned = twin.image("image", "x", "y", "dw", "dh", source=self.pin_slice_src, color_mapper=self.mapper)
        twin.add_tools(HoverTool(renderers=[pinned], tooltips=[("s", "$x{0.00}"), ("r", "$y{0.00}"),
                                                               ("bound − log Z (nats)", "@image{0.000e}")]))
        twin.scatter("s", "r", source=self.pin_tilde_src, marker="x", size=16, line_width=3, color="white")
        twin.grid.visible = False
        self.slice_beside = Beside(Figure(sl), Figure(twin), width=300, short="Gap map: live")
        self._pin_high = 0.0  # the pin's gap map's largest gap (0: none shown)

    # ------------------------------------------------------------------ settings
    def fit_sliders(self) -> None:
        """θ̃'s sliders span the plotted range [-R, R] (values outside are clipped)."""
        R = float(self.settings.radius)
        for name, slider in (("s_tilde", self.s_tilde), ("r_tilde", self.r_tilde)):
            if (slider.start, slider.end) != (-R, R):
                slider.start, slider.end = -R, R
            value = float(getattr(self.settings, name))
            clipped = float(np.clip(value, -R, R))
            if clipped != value:
                setattr(self.settings, name, clipped)

    def job_args(self, settings: Any = None) -> tuple:
        """The arguments of :func:`~dashboard.labs.bound_setup.tightness` for the current
        settings (or ``settings``, e.g. a pin's); ``ValueError`` for settings that cannot be drawn."""
        v = self.settings if settings is None else settings
        R = float(v.radius)
        extra = tuple(setup.parse_points(v.extra, R))
        return (v.model, float(v.scale), int(v.plane_seed), R, float(v.s_tilde), float(v.r_tilde), extra)

    # ------------------------------------------------------------------ drawing
    def show_tilde(self) -> None:
        """Mark θ̃ on the map at once (the curves follow when they are computed)."""
        s_t, r_t = float(self.settings.s_tilde), float(self.settings.r_tilde)
        if self.tilde_src.data["s"] != [s_t] or self.tilde_src.data["r"] != [r_t]:
            self.tilde_src.data = {"s": [s_t], "r": [r_t]}
        self.line_marker.location = r_t

    def computing(self) -> None:
        self._drawn = None
        self.message.set("info", "Computing log Z and the bounds…")

    def fail(self, text: str) -> None:
        self._drawn = None
        self.message.set("error", f"**Cannot draw:** {text}")

    def draw(self, args: tuple, result: dict) -> None:
        """Draw a result of ``tightness(*args)``, with the Taylor expansion if it is chosen."""
        show_taylor = bool(self.settings.taylor)
        if self._drawn == (args, show_taylor):
            return
        self._drawn = (args, show_taylor)
        _, _, _, R, s_t, r_t, extra = args
        s, log_z, upper, taylor = result["s"], result["log_z"], result["bound"], result["taylor"]
        self.model_info.object = f"**{result['d']} parameters.** {result['description']}."
        self.line_src.data = {"s": s, "log_z": log_z}
        self.main_src.data = {"s": s, "bound": upper, "taylor": taylor, "gap": upper - log_z,
                              "taylor_gap": taylor - log_z}
        self.taylor_line.visible = self.taylor_gap.visible = show_taylor
        touches = {"s": [s_t], "log_z": [result["log_z_tilde"]], "color": [MAIN_COLOR]}
        gaps = [upper - log_z]
        for i, src in enumerate(self.extra_srcs):
            self.extra_lines[i].name = self.extra_gaps[i].name = (
                f"bound at s̃ = {extra[i]:g}" if i < len(extra) else f"extra bound {i + 1}")
            if i < len(extra):
                e = result["extra_bound"][i]
                src.data = {"s": s, "bound": e, "gap": e - log_z}
                gaps.append(e - log_z)
                touches["s"].append(extra[i])
                touches["log_z"].append(result["extra_log_z"][i])
                touches["color"].append(EXTRA_COLORS[i])
            else:
                src.data = {"s": [], "bound": [], "gap": []}
        self.touch_src.data = touches
        # an entry per expansion point up to two; more share one (the legend, one column inside
        # the plot, must fit its height at 1280x720 in presentation mode; hover names each curve)
        if len(extra) <= 2:
            items = [LegendItem(label=f"bound at s̃ = {x:g}", renderers=[self.extra_lines[i]])
                     for i, x in enumerate(extra)]
        else:
            items = [LegendItem(label=f"{len(extra)} more bounds (at the dots)",
                                renderers=self.extra_lines[:len(extra)])]
        self.line_fig.legend[0].items = self._fixed_items + items
        # frame log Z: the bounds leave the window upwards far from their θ̃ (zoom out to follow)
        lo, hi = float(np.min(log_z)), float(np.max(log_z))
        span = max(hi - lo, 1.0)
        bottom = min(lo, float(np.min(taylor)) if show_taylor else lo)
        self.line_fig.y_range.update(start=bottom - 0.08 * span, end=hi + 1.2 * span)
        taylor_min = float(np.min(taylor - log_z))
        gap_top = min(max(float(np.max(g)) for g in gaps), 1.2 * span)
        gap_bottom = min(0.0, taylor_min) if show_taylor else 0.0
        self.gap_fig.y_range.update(start=gap_bottom - 0.05 * gap_top, end=1.1 * gap_top)
        # the 2-D slice of the main expansion's gap
        grid, gap2 = result["grid"], result["gap2"]
        step = grid[1] - grid[0]
        self.slice_src.data = {"image": [np.maximum(gap2, GAP_FLOOR)], "x": [-R - step / 2], "y": [-R - step / 2],
                               "dw": [2 * R + step], "dh": [2 * R + step]}
        self.mapper.high = max(float(np.max(gap2)), 10 * GAP_FLOOR, self._pin_high)
        self.tilde_src.data = {"s": [s_t], "r": [r_t]}
        self.line_marker.location = r_t
        min_gap = min(min(float(np.min(g)) for g in gaps), float(np.min(gap2)))
        if min_gap >= 0:
            shown = f"{min_gap:.2e}"
        elif min_gap >= -1e-9:
            shown = f"0 ({min_gap:.0e} is rounding)"
        else:
            shown = f"{min_gap:.3g}"
        text = (f"Min of bound − log Z over the line and the slice: **{shown}** "
                f"({'≥ 0: the bound holds' if min_gap >= -1e-9 else 'NEGATIVE: the bound fails'}); "
                f"at θ̃ the bound equals log Z = {result['log_z_tilde']:.4f} and |μ − ∇log Z(θ̃)| = "
                f"{result['grad_error']:.1e}. "
                + (f"The Taylor expansion falls {-taylor_min:.3f} nats below log Z: not a bound."
                   if taylor_min < -1e-9 else "The Taylor expansion stays above log Z on this line."))
        self.message.set("ok" if min_gap >= -1e-9 else "error", text)

    def draw_pin(self, args: tuple, result: dict) -> None:
        """A pin's gap map (a result of ``tightness(*args)`` for its settings) beside the live
        one, in one colour scale."""
        R, s_t, r_t = args[3:6]
        grid, gap2 = result["grid"], result["gap2"]
        step = grid[1] - grid[0]
        self.pin_slice_src.data = {"image": [np.maximum(gap2, GAP_FLOOR)], "x": [-R - step / 2],
                                   "y": [-R - step / 2], "dw": [2 * R + step], "dh": [2 * R + step]}
        self.pin_tilde_src.data = {"s": [s_t], "r": [r_t]}
        self._pin_high = float(np.max(gap2))
        self.mapper.high = max(self.mapper.high, self._pin_high)

    def clear_pin(self) -> None:
        """No pin's gap map: the colour scale is the live map's again."""
        self.pin_slice_src.data = {"image": [], "x": [], "y": [], "dw": [], "dh": []}
        self.pin_tilde_src.data = {"s": [], "r": []}
        self._pin_high = 0.0
        live = self.slice_src.data["image"]
        if len(live):
            self.mapper.high = max(float(np.max(live[0])), 10 * GAP_FLOOR)

    def controls(self) -> pn.viewable.Viewable:
        """The views' settings, a card of the sidebar (beside the figures they took a third of
        the stage's width, and the three figures were too small for their text at 1280x720)."""
        return pn.Card(self.model, self.model_info, self.scale, self.seed, self.radius, self.s_tilde,
                       self.r_tilde, self.extra, self.show_taylor, title="Tightness views (Theorem 1)",
                       collapsible=False, sizing_mode="stretch_width")

    def views(self) -> dict[str, pn.viewable.Viewable]:
        """Two tabs of the stage: log Z with its bounds beside the gap map (a click on the map
        moves θ̃, and the curves follow beside it), and the gap along the line."""
        tightness = pn.Column(self.message.pane,
                              pn.Row(pn.pane.Bokeh(self.line_fig, sizing_mode="stretch_width"),
                                     self.slice_beside.view, sizing_mode="stretch_width"),
                              sizing_mode="stretch_width")
        return {"Tightness (Theorem 1)": tightness,
                "Gap along the line": pn.pane.Bokeh(self.gap_fig, sizing_mode="stretch_width")}


#: One sentence over the race: what it shows, and why the paper's Table 1 is not reproduced.
RACE_NOTE = ("The bound never lets J rise (Theorem 1), but its curvature Σ is far above the Hessian, so its "
             "steps are short: Table 1's “converges faster” is not reproduced (docs/bound.md).")


class BoundLab(Lab):
    """The majorization race (the runner's five trainers) and the bound's tightness views
    (not a trainer: their state is their settings, which only redraw)."""

    key = "bound"
    kernels = ("fvbm", "bound", "majorize")
    title = "Bound"
    heading = "Bound majorization (Jebara & Choromanska, 2012)"
    summary = ("Minimizing a quadratic upper bound on log Z can never make the objective worse: race bound "
               "majorization against L-BFGS, CG, steepest descent and Newton, and watch the bound hug log Z "
               "from above.")
    intro, equations, watch = INTRO, EQUATIONS, WATCH
    presets = PRESETS
    speeds = RACE_SPEEDS
    watch_scalar = "objective"
    view_settings = TIGHTNESS_SETTINGS

    # ------------------------------------------------------------------ settings (URL keys)
    model = param.Selector(default=setup.DEFAULT_MODEL, objects=setup.MODELS, label="Model",
                           doc="The model whose log Z the tightness views bound.")
    scale = param.Number(0.5, bounds=(0.0, 2.0), step=0.1, label="Spread of the base point θ₀ (std)",
                         doc="The standard deviation of the plotted plane's base point θ₀.")
    plane_seed = param.Integer(0, bounds=(0, None), label="Seed (θ₀ and directions)",
                               doc="Seeds θ₀ and the plane's two directions.")
    radius = param.Number(3.0, bounds=(1.0, 10.0), step=0.5, label="Range R of the plotted plane",
                          doc="The plane is drawn over [−R, R]²; θ̃ stays inside it.")
    s_tilde = param.Number(0.0, softbounds=(-3.0, 3.0), step=0.05, label="θ̃ along the line: s̃",
                           doc="The expansion point θ̃ along the line, in [−R, R].")
    r_tilde = param.Number(0.0, softbounds=(-3.0, 3.0), step=0.05, label="θ̃ across the line: r̃",
                           doc="The expansion point θ̃ across the line, in [−R, R].")
    extra = param.String("-2, 1.5", label="More expansion points s̃ on the line",
                         doc="More bounds, expanded at these points of the line (numbers separated by commas).")
    taylor = param.Boolean(True, label="Show the Taylor expansion at θ̃ (not a bound)",
                           doc="Draw the second-order Taylor expansion at θ̃ beside the bound.")
    problem = param.Selector(default="wine", objects=setup.RACE_PROBLEMS, label="Problem",
                             doc="The race's problem (Table 1's data sets, a chain CRF, an FVBM).")
    reg = param.Number(majorize.DEFAULT_REG["wine"], bounds=(0.0, None), step=0.01, label="Regularization λ",
                       doc="λ of the race's objective J (each problem brings its own).")
    race_seed = param.Integer(0, bounds=(0, None), label="Data seed", doc="Seeds the simulated problems.")
    headline = ("objective", "J")
    sweep_runs = len(majorize.RACE_METHODS)  # each value of a sweep races every method
    pictures_beside = True
    short_labels = {"reg": "λ", "race_seed": "data seed"}
    speed = speed_setting(RACE_SPEEDS, "30 steps/s")
    widget_options = {"model": dict(width=300), "problem": dict(width=300), "extra": dict(width=300),
                      "plane_seed": dict(width=140), "reg": dict(width=140), "race_seed": dict(width=140, visible=False),
                      **{k: dict(type=pn.widgets.FloatSlider, width=300) for k in ("scale", "radius", "s_tilde", "r_tilde")},
                      "speed": dict(width=190)}

    def setting_bounds(self, name: str, values) -> tuple | None:
        """θ̃ (s_tilde, r_tilde) lies in [-R, R] for the range R the same settings give: a
        link with R = 5 and s̃ = 4 is valid even while this lab's R is still 3."""
        if name in ("s_tilde", "r_tilde"):
            radius = float(values.get("radius", self.radius))
            return (-radius, radius)
        return None

    # ------------------------------------------------------------------ controls
    def build_controls(self) -> None:
        self._sizes: dict[tuple, dict] = {}  # the races' sizes by race_key
        self.race_info = pn.pane.Markdown("", styles={"font-size": "0.9em"}, width=300)
        self.tightness = TightnessView(self, self.widgets)

    def controls_panel(self) -> pn.viewable.Viewable:
        w = self.widgets
        race = pn.Card(w["problem"], self.race_info, pn.Row(w["reg"], w["race_seed"]), title="Race problem",
                       collapsible=False, sizing_mode="stretch_width")
        return pn.Column(race, self.tightness.controls(), sizing_mode="stretch_width", margin=0)

    def prepare(self, changed: set[str], strict: bool = False) -> None:
        self.widgets["race_seed"].visible = self.problem in setup.SEEDED_PROBLEMS

    def implied(self, values, *, fresh: bool = False) -> dict[str, Any]:
        """A problem comes with its own λ unless the values name one."""
        if "problem" in values and "reg" not in values and values["problem"] in majorize.DEFAULT_REG:
            return {"reg": majorize.DEFAULT_REG[values["problem"]]}
        return {}

    def check_work(self) -> None:
        """The work budget: a step of the race is its five methods once each."""
        problem = self.problem
        if problem in budget.BOUND_PROBLEMS:  # else race_key says what is wrong
            dim, n, _ = budget.BOUND_PROBLEMS[problem]
            budget.require(lambda s: budget.bound_step(problem), [],
                           f"the {problem.replace('_', ' ')} race: {dim} parameters, {n:,} examples",
                           ["choose a smaller problem"])

    def trainer_factory(self):
        """The race's five trainers, built by the runner's thread (``bound_setup.build_race``);
        the settings are checked now."""
        self._race_key = setup.race_key(self.problem, self.reg, self.race_seed)
        return setup.build_race(self._race_key)

    def _show_size(self) -> None:
        """The race's size (its objective is built by a job the first time)."""
        key, size = self._race_key, self._sizes.get(self._race_key)
        problem = key[0]
        if size is None:
            self.race_info.object = f"{setup.RACE_DESCRIPTIONS[problem]} (its size: computing…)"
            self.jobs.submit("race-size", setup.race_size, *key, then=functools.partial(self._size_arrived, key),
                             error=lambda exc: None)  # the J* job says what went wrong
            return
        self.race_info.object = (f"**d = {size['dim']} parameters**, {size['n_examples']:,} training "
                                 f"{'sequences' if problem == 'chain' else 'examples'}. "
                                 f"{setup.RACE_DESCRIPTIONS[problem]}")

    def _size_arrived(self, key: tuple, size: dict) -> None:
        self._sizes[key] = size
        if key == self._race_key:
            self._show_size()

    def apply_settings(self, values, *, fresh: bool = False, sweep: Any = False) -> None:
        """The base's, and tightness settings the views cannot draw (e.g. extra points that
        are not numbers) are an error too, raised after the race was rebuilt: a link or a
        preset names them."""
        errors = []
        try:
            super().apply_settings(values, fresh=fresh, sweep=sweep)
        except ValueError as exc:
            errors.append(str(exc))
        if set(values) & self.view_settings and self._tightness_error:
            errors.append(self._tightness_error)
        if errors:
            raise ValueError(" ".join(errors))

    # ------------------------------------------------------------------ views
    def build_views(self) -> None:
        self.sources: dict[str, dict[str, ColumnDataSource]] = {}
        self.newest: dict[str, ColumnDataSource] = {}  # presentation mode: rings around the newest points
        self._hints: list[Label] = []
        self.by_iteration = self._race_figure("J − J* per iteration", "iteration", "by-iteration")
        self.by_time = self._race_figure("J − J* per second of compute", "seconds (each method's own compute)",
                                         "by-time")
        self.monotone = StatusBadge("Bound majorization: no step yet", "idle", name="race-monotone", one_line=True)
        self._build_step_view()
        self.table = LiveHTML("", sizing_mode="stretch_width", name="race-table", stylesheets=[TABLE_CSS])
        # pinned races (issue 47): each method's J − J* faded under the live ones
        self._pin_layers = {"by-iteration": PinLayer(self.by_iteration), "by-time": PinLayer(self.by_time)}
        self.tightness.slice_fig.on_event(Tap, self._on_tap)
        self.J_star: float | None = None  # the current race's reference optimum, once computed
        self._references: dict[tuple, float] = {}  # J* by race_key: Reset and going back keep it
        self._reference_error = ""
        self._reference_wanted: tuple | None = None  # the race_key of the J* job in flight
        self._raw: dict[str, dict[str, list]] = {}  # per method: iterations, seconds, J (drawn once J* is known)
        self._stats: dict[str, dict] = {}
        self._rings: dict[str, tuple[float, float, float]] = {}  # method -> (iteration, seconds, J)
        self._unexplained: list[tuple] = []  # Next step explained before J* was known
        self._tightness_wanted: tuple | None = None  # the arguments of the tightness job in flight
        self._tightness_result: tuple | None = None  # (arguments, result) of the newest drawn
        self._tightness_failed: tuple | None = None
        self._tightness_error: str | None = None  # why the current tightness settings cannot be drawn

    def _build_step_view(self) -> None:
        """Majorization you can watch: at each bound-majorization step, J and the quadratic
        bound Q built at the current θ along the step, and Q's minimiser, the next iterate."""
        fig = _figure("The bound at this step", "s along the step: 0 = θₜ, 1 = θₜ₊₁",
                      "J (nats)", height=400, sizing_mode="stretch_width")
        self.step_src = ColumnDataSource({"s": [], "J": [], "Q": []}, name="race-step")
        self.step_marks = ColumnDataSource({"s": [], "y": [], "color": []}, name="race-step-marks")
        fig.line("s", "J", source=self.step_src, color="#222", line_width=2.5, legend_label="J (exact)")
        fig.line("s", "Q", source=self.step_src, color=RACE_COLORS["Bound majorization"], line_width=2,
                 line_dash="dashed", legend_label="Q: bound built at θₜ")
        fig.scatter("s", "y", source=self.step_marks, color="color", size=11, legend_label="θₜ; Q's minimiser θₜ₊₁")
        _legend_below(fig, ncols=2, pad=2)
        self.step_hint = Label(x=10, y=10, x_units="screen", y_units="screen", text=PLAY_HINT, text_color="#777",
                               text_font_size="12pt")
        fig.add_layout(self.step_hint)
        self.step_fig = fig

    def _draw_step(self, record) -> None:
        s, J, Q = (np.asarray(record[k], dtype=float) for k in ("step_s", "step_J", "step_Q"))
        self.step_src.data = {"s": s, "J": J, "Q": Q}
        i0, i1 = int(np.argmin(np.abs(s))), int(np.argmin(np.abs(s - 1.0)))
        self.step_marks.data = {"s": [s[i0], s[i1]], "y": [J[i0], Q[i1]], "color": ["#222", "#d62728"]}
        # short: at 1280x720 in presentation mode the title has ~300 px (Theorem 1 is in the caption)
        self.step_fig.title.text = f"The bound at step {int(record['iteration']):,}"
        self.step_hint.visible = False

    def _race_figure(self, title: str, x_label: str, key: str):
        fig = _figure(title, x_label, "J − J* (nats)", height=400, sizing_mode="stretch_width",
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
        _legend_below(fig, ncols=3, pad=4).click_policy = "hide"
        # a decade per tick overlapped on a projector once the pins' legend rows shortened the plot
        fig.yaxis[0].ticker.desired_num_ticks = 4
        x_tip = ("iteration", "@x{0}") if key == "by-iteration" else ("seconds", "@x{0.000}")
        fig.add_tools(HoverTool(renderers=lines, tooltips=[("method", "$name"), x_tip, ("J − J*", "@y{0.000e}")]))
        hint = Label(x=10, y=10, x_units="screen", y_units="screen", text=PLAY_HINT, text_color="#777",
                     text_font_size="11pt")
        fig.add_layout(hint)
        self._hints.append(hint)
        return fig

    def main_view(self) -> pn.viewable.Viewable:
        return pn.pane.Bokeh(self.by_iteration, sizing_mode="stretch_width")

    def set_presenting(self, on: bool) -> None:
        super().set_presenting(on)
        # on a projector the race's note gives its two lines to the plots (whose legends grow
        # two rows with four pins); the caption narrates each step instead
        self.race_note.visible = not on

    def stage(self) -> dict[str, pn.viewable.Viewable]:
        self.race_note = pn.pane.Markdown(RACE_NOTE, sizing_mode="stretch_width", margin=(0, 10),
                                          styles={"font-size": "0.85em"})
        race = pn.Column(self.race_note,
                         pn.Row(self.main_view(), pn.pane.Bokeh(self.step_fig, sizing_mode="stretch_width"),
                                sizing_mode="stretch_width"), sizing_mode="stretch_width")
        # the per-second race and the live table on tabs of their own: under the table the plot
        # was too short for its text at 1280x720 (and beside it the table too narrow)
        return {"Race · this step's bound": race,
                "Per second": pn.pane.Bokeh(self.by_time, sizing_mode="stretch_width"),
                "Table 1 live": self.table, **self.tightness.views()}

    def badges(self) -> list:
        return [self.monotone.pane]

    def clear(self) -> None:
        names = self.view_runs
        self.step_src.data = {"s": [], "J": [], "Q": []}
        self.step_marks.data = {"s": [], "y": [], "color": []}
        self.step_fig.title.text = "The bound at this step"
        self.step_hint.visible = True
        self._raw = {n: {"x": [], "t": [], "J": []} for n in names}
        self._stats = {n: {"steps": 0, "J": math.nan, "grad": math.nan, "hit": None, "monotone": True}
                       for n in names}
        for srcs in self.sources.values():
            for src in srcs.values():
                src.data = {"x": [], "y": []}
        self.table.object = ""
        self.monotone.set("idle", "Bound majorization: no step yet")
        self._show_size()
        self._want_reference()
        self._want_sweep_references()
        self._show_hints()
        self._request_tightness()  # the base's reset cancels every job, this one included

    # ------------------------------------------------------------------ J*, a job
    def _want_reference(self) -> None:
        """J* of the current race: known, or computed off the UI thread (the race plays meanwhile)."""
        key = self._race_key
        self.J_star = self._references.get(key)
        if self.J_star is None and not (self._reference_wanted == key and self.jobs.running("reference")):
            self._reference_error, self._reference_wanted = "", key
            self.jobs.submit("reference", setup.race_reference, *key,
                             then=functools.partial(self._reference_arrived, key),
                             error=functools.partial(self._reference_failed, key))

    def _want_sweep_references(self) -> None:
        """J* of each other value of a sweep (its curves are J − J* of its own problem)."""
        sweep = self.sweeping
        if sweep is None:
            return
        setting, values = sweep
        settings = self.run_settings()
        for value in values[1:]:
            race = {**settings, setting: value}
            key = setup.race_key(race["problem"], race["reg"], race["race_seed"])
            job = f"reference {key}"
            if key not in self._references and not self.jobs.running(job):
                self.jobs.submit(job, setup.race_reference, *key,
                                 then=functools.partial(self._reference_arrived, key), error=lambda exc: None)

    def _reference_arrived(self, key: tuple, result: dict) -> None:
        self._references[key] = result["value"]
        self.draw_pins()  # a pinned race of this problem can be drawn now
        if self.sweeping is not None:
            self.compare.lines(force=True)  # ... and a sweep's other value
        if key != self._race_key:
            return
        self.J_star = result["value"]
        for name in self._raw:  # the Records kept meanwhile, now as J − J*
            self._draw_race(name, 0, replace=True)
        self._draw_rings()
        if self._unexplained:  # a Next step explained without J*: say it again with it
            parts, self._unexplained = self._unexplained, []
            self.tools.changed.object = "<br>".join(self.describe_change(*p) or "" for p in parts)
        self._show_hints()
        self.refresh_badges()

    def _reference_failed(self, key: tuple, exc: BaseException) -> None:
        if key == self._race_key:
            self._reference_error = f"{type(exc).__name__}: {exc}"
            self._show_hints()
            self.refresh_badges()

    # ------------------------------------------------------------------ live updates
    def draw_records(self, records) -> None:
        """Keep every method's raw J (Records only); draw J − J* when J* is known; draw the
        newest bound-majorization step's bound."""
        for name, recs in by_run(records).items():
            traced = [r for r in recs if "step_s" in r.arrays]
            if traced:
                self._draw_step(traced[-1])
            raw = self._raw.get(name)
            if raw is None:
                continue
            start = len(raw["x"])
            raw["x"].extend(r.scalars["iteration"] for r in recs)
            raw["t"].extend(r.scalars["elapsed"] for r in recs)
            raw["J"].extend(r.scalars["objective"] for r in recs)
            last = recs[-1].scalars
            self._stats[name].update(steps=int(last["iteration"]), J=float(last["objective"]),
                                     grad=float(last["grad_norm"]), monotone=bool(last["monotone"]))
            if self.J_star is not None:
                self._draw_race(name, start)
        self._show_hints()

    def pin_layers(self) -> dict:
        return self._pin_layers

    def sweep_legends(self) -> list:
        """In a sweep, each method's live lines name the first value's run (``reg=0.3 · Newton``)."""
        return [(item, item.label.value, "{run}") for fig in (self.by_iteration, self.by_time)
                for legend in fig.legend for item in legend.items
                if getattr(item.label, "value", None) in RACE_COLORS]

    def pin_lines(self, pin) -> dict:
        """A pinned race's J − J* per iteration and per second, each method a line, against
        its own J* (the optimum of its problem, once this lab has computed it)."""
        try:
            key = setup.race_key(pin.settings.get("problem"), pin.settings.get("reg"), pin.settings.get("race_seed"))
        except (TypeError, ValueError):
            return {}
        J_star = self._references.get(key)
        if J_star is None:
            return {}
        out: dict[str, list] = {"by-iteration": [], "by-time": []}
        for columns in pin.records.values():
            if not {"iteration", "elapsed", "objective"} <= set(columns):
                continue
            gaps = np.maximum(np.asarray(columns["objective"], dtype=float) - J_star, RACE_FLOOR)
            out["by-iteration"].append((columns["iteration"], gaps))
            out["by-time"].append((columns["elapsed"], gaps))
        return out

    def _draw_race(self, name: str, start: int, replace: bool = False) -> None:
        """Draw method ``name``'s points from ``start`` on as J − J*; note when it first came
        within Table 1's ε."""
        raw, stats, J_star = self._raw[name], self._stats[name], self.J_star
        xs, ts, Js = raw["x"][start:], raw["t"][start:], raw["J"][start:]
        gaps = [max(J - J_star, RACE_FLOOR) for J in Js]
        srcs = self.sources[name]
        if replace:
            srcs["by-iteration"].data = {"x": xs, "y": gaps}
            srcs["by-time"].data = {"x": ts, "y": list(gaps)}  # its own list: streams extend in place
        elif xs:
            srcs["by-iteration"].stream({"x": xs, "y": gaps})
            srcs["by-time"].stream({"x": ts, "y": gaps})
        if stats["hit"] is None:
            for x, t, J in zip(xs, ts, Js):
                if J - J_star <= RACE_EPSILON:
                    stats["hit"] = (int(x), float(t))
                    break

    def _show_hints(self) -> None:
        started = any(raw["x"] for raw in self._raw.values())
        if not started:
            text = PLAY_HINT
        elif self.J_star is None:
            text = (f"J* could not be computed: {self._reference_error}" if self._reference_error
                    else REFERENCE_HINT)
        else:
            text = ""
        for hint in self._hints:
            hint.text = text or hint.text
            hint.visible = bool(text)

    # ------------------------------------------------------------------ status
    def counter(self) -> str:
        return f"Step {max((s['steps'] for s in self._stats.values()), default=0)}"

    def refresh_badges(self) -> None:
        st = self._stats.get("Bound majorization")
        if st and st["steps"]:
            if st["monotone"]:
                # short enough for one line on a projector (1280x720) at 100+ steps: the rest on hover
                self.monotone.set("ok", f"Majorization: **monotone so far** ({st['steps']} steps)",
                                  details=f"J never increased in {st['steps']} steps: Theorem 1 at work.")
            else:
                self.monotone.set("error", "Bound majorization: **J INCREASED**",
                                  details="The bound failed to majorize J: a step raised it.")
        else:
            self.monotone.set("idle", "Bound majorization: no step yet")
        if any(s["steps"] for s in self._stats.values()):
            self.table.object = self._table()

    def _table(self) -> str:
        J_star = self.J_star
        rows = []
        for name, st in self._stats.items():
            state = self.runner.states.get(name)
            hit = st["hit"]
            gap = "–" if J_star is None or not st["steps"] else f"{st['J'] - J_star:.2e}"
            pending = "…" if J_star is None else "–"
            rows.append((name, st["steps"], gap, f"{st['grad']:.1e}", pending if hit is None else hit[0],
                         pending if hit is None else f"{hit[1]:.3f}", "yes" if st["monotone"] else "no",
                         state.status if state else ""))
        shown = (f"{J_star:.8g}" if J_star is not None else
                 f"not computed ({self._reference_error})" if self._reference_error else "computing…")
        caption = (f"<b>Table 1 live</b> (ε = {RACE_EPSILON:g}, absolute, on the summed J; "
                   f"J* = {html.escape(shown)}):")
        return html_table(TABLE_COLUMNS, rows, caption)

    # ------------------------------------------------------------------ the tightness views, a job
    def on_view_setting(self, name: str) -> None:
        self._request_tightness()

    def _request_tightness(self) -> None:
        """Compute (off the UI thread) and draw the tightness views for the current settings;
        settings that cannot be drawn say why at once."""
        view = self.tightness
        view.fit_sliders()  # a θ̃ clipped to a smaller R comes back through here first
        view.show_tilde()
        try:
            args = view.job_args()
        except ValueError as exc:
            self.jobs.cancel("tightness")
            self._tightness_wanted, self._tightness_error = None, str(exc)
            view.fail(str(exc))
            return
        self._tightness_error = None
        if self._tightness_result is not None and self._tightness_result[0] == args:
            self.jobs.cancel("tightness")
            self._tightness_wanted = None
            view.draw(*self._tightness_result)  # e.g. the Taylor toggle: nothing to compute
            return
        if args == self._tightness_wanted and self.jobs.running("tightness"):
            return  # already being computed (a preset sets several of these settings)
        if args == self._tightness_failed:
            return  # failed in the job already; its error is shown
        self._tightness_wanted = args
        view.computing()
        self.jobs.submit("tightness", setup.tightness, *args, then=functools.partial(self._tightness_arrived, args),
                         error=functools.partial(self._tightness_job_failed, args))

    def _tightness_arrived(self, args: tuple, result: dict) -> None:
        self._tightness_wanted, self._tightness_failed = None, None
        self._tightness_result = (args, result)
        self.tightness.draw(args, result)

    def _tightness_job_failed(self, args: tuple, exc: BaseException) -> None:
        self._tightness_wanted, self._tightness_failed = None, args
        self._tightness_error = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
        self.tightness.fail(self._tightness_error)

    def draw_beside(self, pin) -> None:
        """A pin's gap map beside the live one: computed for the pin's tightness settings (a
        job, as the live one), same colour scale."""
        view = self.tightness
        view.slice_beside.show(None if pin is None else pin.label)
        view.slice_bar.visible = pin is None  # the pair's one colour bar is under the pin's map
        self.jobs.cancel("tightness-pin")
        if pin is None:
            view.clear_pin()
            return
        values = {**{k: getattr(self, k) for k in TIGHTNESS_SETTINGS},
                  **{k: v for k, v in pin.settings.items() if k in TIGHTNESS_SETTINGS}}
        try:
            args = view.job_args(types.SimpleNamespace(**values))
        except (ValueError, TypeError) as exc:  # a pin's setting read back as text from a checkpoint
            view.slice_beside.show(f"{pin.label}: cannot draw")
            self.tools.show("warn", f"The gap map of {pin.label!r} cannot be drawn: {exc}")
            return
        if self._tightness_result is not None and self._tightness_result[0] == args:
            view.draw_pin(*self._tightness_result)
            return
        self.jobs.submit("tightness-pin", setup.tightness, *args,
                         then=lambda result: view.draw_pin(args, result), error=lambda exc: None)

    def _on_tap(self, event) -> None:
        """A click on the gap map moves θ̃ there (to the sliders' step)."""
        if event.x is None or event.y is None:
            return
        R = float(self.radius)
        with pn.io.hold(freeze=True):  # one batch: the tightness views are requested once
            self.param.update(s_tilde=float(np.clip(round(event.x / 0.05) * 0.05, -R, R)),
                              r_tilde=float(np.clip(round(event.y / 0.05) * 0.05, -R, R)))

    # ------------------------------------------------------------------ presentation
    def describe_change(self, name, before, after, before_arrays, after_arrays) -> str | None:
        """One iteration of method ``name`` in the paper's terms: how far J − J* fell and
        whether J stayed monotone (said with J alone until J* is known, then again with it)."""
        if "objective" not in after:
            return None
        J1 = after["objective"]
        J0 = before.get("objective", J1 - after.get("increase", 0.0))  # the first step: J(θ₀)
        rose = after.get("increase", 0.0) > 1e-12 * max(1.0, abs(J0))
        ok = bool(after.get("monotone", 1.0)) and not rose
        mono = "monotone ✓" if ok else "<b style='color:#c62828'>J rose ✗</b>"
        head = f"<b style='color:{RACE_COLORS.get(name, 'black')}'>{escape(name)}</b> step {int(after['iteration'])}: "
        if self.J_star is None:
            self._unexplained.append((name, before, after, before_arrays, after_arrays))
            return head + f"J {J0:.8g} → <b>{J1:.8g}</b>, {mono} (J* still computing…)"
        g0, g1 = J0 - self.J_star, J1 - self.J_star
        decades = math.log10(max(g0, RACE_FLOOR) / max(g1, RACE_FLOOR))
        if g1 <= RACE_FLOOR:
            change = "at J*, to rounding"
        elif decades >= 0:
            change = f"▼ {decades:.2f} decades"
        else:
            change = f"▲ {-decades:.2f} decades"
        return head + f"J − J* {g0:.3g} → <b>{g1:.3g}</b> ({change}), {mono}"

    def highlight(self, name, before, after, before_arrays, after_arrays) -> None:
        """Ring method ``name``'s newest point in both plots (once J* places it)."""
        if "objective" in after:
            self._rings[name] = (after["iteration"], after.get("elapsed", math.nan), after["objective"])
            self._draw_rings()

    def _draw_rings(self) -> None:
        if self.J_star is None:
            return
        for key, column in (("by-iteration", 0), ("by-time", 1)):
            names = list(self._rings)
            self.newest[key].data = {"x": [self._rings[n][column] for n in names],
                                     "y": [max(self._rings[n][2] - self.J_star, RACE_FLOOR) for n in names],
                                     "color": [RACE_COLORS.get(n, "black") for n in names], "method": names}

    def clear_highlight(self) -> None:
        self._rings = {}
        self._unexplained = []
        for src in self.newest.values():
            src.data = {"x": [], "y": [], "color": [], "method": []}
