"""The one door to Panel's and Bokeh's internals (issue 49 item 1): every use of a name they
do not document as public lives here, with why it is needed and what it was measured against;
``tests/dashboard/test_panel_compat.py`` checks that each name still exists with the expected
shape, so an upgrade that moves one fails there, by name, not somewhere in a lab.

Today (Panel 1.9.4, Bokeh 3.9.2; ``constraints.txt``):

* :func:`reconnect_with_binary_arrays` — Bokeh's ``ServerSession._handle_pull`` (and its
  ``_needs_document_lock`` decorator).  A page whose websocket dropped reconnects to its
  session (``pn.config.reconnect``, issue 48) and pulls the document again; BokehJS 3.9.2
  then replaces its document from the JSON *without* the reply's binary buffers
  (``ClientConnection._repull_session_doc`` calls ``replace_with_json(doc_json)``), so any
  document with a NumPy column (every lab's plots) failed with "buffer for id=… not found"
  and the page stayed disconnected (seen in Chromium: tests/browser/test_browser_reconnect.py).
  Fixed upstream in bokeh/bokeh#15348 (issue #15347), not released in 3.9.2.  Our
  ``_handle_pull`` answers every pull after a session's first with the arrays inlined as
  base64 (``Document.to_json(deferred=False)``), which the client decodes without buffers;
  the first pull, the page load's, keeps the binary buffers.
* :func:`fresh_receiver_on_reconnect` — BokehJS's ``ClientConnection._receiver``.  A
  connection keeps one protocol ``Receiver`` (it assembles a message from its header,
  metadata, content and buffer frames) for its whole life, across reconnects.  A drop in the
  middle of a message (likely while a lab plays: a patch with arrays is five frames or more)
  left it expecting the rest of that message, so the new socket's ACK was read as its tail:
  "First message was not an ACK", closed, and every later attempt out of step the same way
  until the page gave up (the reconnect test failed so in CI, under load).  On every
  ``connection_lost`` event (sent before each reconnect attempt) the page now starts a fresh
  ``Receiver``.  Not reported upstream that we could find.
"""

from __future__ import annotations

from typing import Any

#: run by BokehJS on a document's ``connection_lost`` event (``cb_data`` is the event, whose
#: ``connection`` is a WeakRef to the ClientConnection): a new Receiver of the same class
FRESH_RECEIVER_JS = """
const connection = cb_data.connection?.deref?.()
if (connection != null && connection._receiver != null)
  connection._receiver = new connection._receiver.constructor()
"""

_PATCHED = False


def reconnect_with_binary_arrays() -> None:
    """Make a reconnecting page able to pull its document again (see the module's docstring);
    once per process, before serving."""
    global _PATCHED
    if _PATCHED:
        return
    from bokeh.protocol.messages.pull_doc_reply import PullDoc, pull_doc_reply
    from bokeh.server.session import ServerSession, _needs_document_lock

    first_pull = ServerSession._handle_pull

    @_needs_document_lock
    def _handle_pull(self: Any, message: Any, connection: Any) -> Any:
        if not getattr(self, "_boltzlab_pulled", False):  # the page's first pull: as Bokeh does
            self._boltzlab_pulled = True
            return first_pull.__wrapped__(self, message, connection)
        header = pull_doc_reply.create_header(request_id=message.header["msgid"])
        return pull_doc_reply(header, {}, PullDoc(doc=self.document.to_json(deferred=False)))

    ServerSession._handle_pull = _handle_pull
    _PATCHED = True


def fresh_receiver_on_reconnect(doc: Any) -> None:
    """Have the page of ``doc`` start each reconnect with a fresh protocol receiver (see the
    module's docstring); once per served document."""
    from bokeh.models import CustomJS

    doc.js_on_event("connection_lost", CustomJS(code=FRESH_RECEIVER_JS))
