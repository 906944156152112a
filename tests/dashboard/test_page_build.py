"""A served session's lab is built off the event loop (``app.build_off_the_loop``)."""

from __future__ import annotations

import threading

import panel as pn
from bokeh.document import Document
from bokeh.io.doc import patch_curdoc

from boltzlab.dashboard.app import build_off_the_loop


class _Session:
    """Stands in for a session's context: Panel's current document needs one."""


def test_the_build_runs_on_another_thread_against_a_scratch_document():
    """While the loop runs a session's callback Bokeh patches the current document for the
    whole process; a lab built meanwhile on the builder thread must not see (and hold or
    freeze) that session's document."""
    session_doc = Document()
    context = _Session()
    session_doc._session_context = lambda: context
    with patch_curdoc(session_doc):
        assert pn.state.curdoc is session_doc  # what the thread would see without its own
        thread, doc = build_off_the_loop(lambda: (threading.get_ident(), pn.state.curdoc)).result(timeout=60)
    assert thread != threading.get_ident()
    assert doc is not None and doc is not session_doc and doc.session_context is None


def test_a_failed_build_is_the_futures_exception():
    def fails():
        raise ValueError("no such data set")

    error = build_off_the_loop(fails).exception(timeout=60)
    assert isinstance(error, ValueError) and str(error) == "no such data set"
