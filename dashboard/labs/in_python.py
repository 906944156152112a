"""A lab as a Python object keeps Python's and Panel's conventions (issue 46 item 3):

* ``lab.play()`` / ``lab.pause()``, and read-only parameters the tick keeps current:
  ``steps`` (the newest run's step count, as its counter), ``status`` (the run's status; a
  race's as ``"name: status; ..."``) and ``playing`` — watchable like any ``param``
  (``lab.param.watch(fn, "steps")``);
* ``with TAPLab(...) as lab:`` closes the lab (its tick, runner and jobs) at the end;
* a setting set from Python (``lab.n_hidden = 5000``) that makes no run raises the
  ``ValueError`` a link gets instead of keeping the old run quietly (a widget's change, which
  comes with a Panel document, is refused on the page as before);
* in a notebook the BLAS gets its threads back when the lab pauses or closes (the engine
  limits them while it steps: ``boltzlab.engine.threads.restore_blas``), and a cell run again
  stops the labs its earlier run displayed (their page was replaced: nothing would draw them).

A mixin of :class:`boltzlab.dashboard.labs.base.Lab`, kept apart so that the base stays a
readable size.
"""

from __future__ import annotations

import weakref
from typing import Any

import panel as pn
import param

from ..panel_compat import from_a_widget
from ...engine import threads as engine_threads

PREPARE = "prepare"  # the job key of a slow preparation (Lab.prepare_later)

#: the lab's read-only parameters (not settings: no widget, link, preset or keyword)
READ_ONLY = ("steps", "status", "playing")


def served() -> bool:
    """Whether the caller runs for a page of a server (Panel's current document has a session)."""
    doc = pn.state.curdoc
    return doc is not None and doc.session_context is not None


class InPython(param.Parameterized):
    """The Python conventions of a lab (see the module's docstring)."""

    steps = param.Integer(default=0, constant=True, doc="""
        Steps the current run has made, as its counter counts them (a race's: its furthest
        run's); kept current by the refresh tick and by run().""")
    status = param.String(default="ready", constant=True, doc="""
        The current run's status (boltzlab.engine.stepping.STATUS_MEANINGS); a race's as
        "name: status; ...".""")
    playing = param.Boolean(default=False, constant=True, doc="""
        Whether the lab plays (lab.play(), the page's ▶ Play), until it pauses or its runs end.""")

    # ------------------------------------------------------------------ play, pause, with
    def play(self) -> None:
        """Play, as the page's ▶ Play: the runs step on their own until paused or done; the
        page (in a notebook, a server or ``lab.show()``) draws them as they come."""
        self._play()
        self._sync_read_only()

    def pause(self) -> None:
        """Pause, as the page's ❚❚ Pause (a step in flight finishes and is drawn)."""
        self._pause()
        self._sync_read_only()

    def __enter__(self) -> "InPython":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _sync_read_only(self) -> None:
        """Set ``steps``, ``status`` and ``playing`` from the runner (watchers fire on change only)."""
        states = self.runner.states
        steps = max((state.steps for state in states.values()), default=0)
        if len(states) == 1:
            status = next(iter(states.values())).status
        else:
            status = "; ".join(f"{name}: {state.status}" for name, state in states.items())
        playing = bool(self.runner.playing)
        if (steps, status, playing) != (self.steps, self.status, self.playing):
            with param.edit_constant(self):
                self.param.update(steps=steps, status=status, playing=playing)
        if not playing and not served():
            engine_threads.restore_blas()  # the notebook's own NumPy gets its threads back

    # ------------------------------------------------------------------ settings from Python
    def _from_python(self) -> bool:
        """Whether the settings moving now were set by Python code (``lab.n_hidden = 32``):
        the lab is built, no Panel document is involved (a widget's change comes with one, a
        served session's or a notebook comm's) and not through :meth:`apply_settings` (which
        raises by itself)."""
        return (bool(self.__dict__.get("_python_settings")) and pn.state.curdoc is None and not self._given
                and not from_a_widget())  # (a widget set from Python: a test standing in for a click)

    def _settled_from_python(self) -> None:
        """After a rebuild for settings set from Python: wait for the run, and raise the
        ``ValueError`` a link gets when the values make none (the settings keep the values,
        the lab the old run, as :meth:`apply_settings` does)."""
        if self.jobs.running(PREPARE):
            self.jobs.wait()
        self._adopt_build(wait=True)
        refused = self._refused
        if refused is not None:
            raise ValueError(getattr(refused, "link", "") or str(refused)) from refused

    def _python_api_ready(self) -> None:
        """The lab is built: from now on a setting set from Python that makes no run raises."""
        self.__dict__["_python_settings"] = True

    # ------------------------------------------------------------------ notebooks
    def _notebook_shown(self) -> None:
        """The lab's page was just rendered in a notebook: when the cell that showed it runs
        again, its output (this page) is replaced, and the lab closes."""
        cell = _CELLS.running()
        if cell is not None:
            _CELLS.hook()
            _CELLS.shown.setdefault(cell, weakref.WeakSet()).add(self)


class _Cells:
    """The labs each notebook cell displayed, closed when the cell runs again."""

    def __init__(self) -> None:
        self.shown: dict[str, weakref.WeakSet] = {}
        self.hooked = False

    @staticmethod
    def running() -> str | None:
        """The id of the notebook cell running now (the frontend's ``cellId``, as IPython's
        ``pre_run_cell`` gets it), or None outside a notebook."""
        try:
            from IPython import get_ipython
        except ImportError:  # pragma: no cover - IPython comes with Panel
            return None
        kernel = getattr(get_ipython(), "kernel", None)
        try:
            parent = kernel.get_parent() if kernel is not None else None
        except Exception:  # noqa: BLE001 - an older ipykernel: no cell to follow
            return None
        cell = ((parent or {}).get("metadata") or {}).get("cellId")
        return cell if isinstance(cell, str) else None

    def hook(self) -> None:
        """Follow IPython's cells (once)."""
        from IPython import get_ipython

        if not self.hooked:
            get_ipython().events.register("pre_run_cell", self._pre_run_cell)
            self.hooked = True

    def _pre_run_cell(self, info: Any) -> None:
        cell = getattr(info, "cell_id", None)
        for lab in list(self.shown.pop(cell, ())) if cell is not None else ():
            lab.close(wait=0)


_CELLS = _Cells()
