"""The server log says what went wrong, not that a tab closed.

Closing a tab while its lab streams makes Tornado and Bokeh log two tracebacks at ERROR
level that are no fault of anyone's: a write to the closed websocket ("Task exception was
never retrieved ... WebSocketClosedError", from asyncio) and a message the page sent just
before closing, handled after Bokeh detached its session ("Handler or its work threw an
exception ... assert self._session is not None", also from the websocket's ``on_close``),
and Bokeh's WARNING "Failed sending message as connection was closed".  With 8 sessions
closing at once: 235 tracebacks and 501 warnings that buried real errors.
:func:`quiet_closed_connections` turns exactly these into one INFO line each; every other
error keeps its level and traceback.
"""

from __future__ import annotations

import logging
import traceback

_CLOSED = ("WebSocketClosedError", "StreamClosedError")


def closed_connection(record: logging.LogRecord) -> str | None:
    """What a record of a closed connection is about (one line), or ``None`` for any other."""
    if record.msg == "Failed sending message as connection was closed":  # Bokeh's WARNING
        return "a message to a closed tab was dropped"
    if not record.exc_info or record.exc_info[1] is None:
        return None
    exc = record.exc_info[1]
    if type(exc).__name__ in _CLOSED:
        return "a message to a closed tab was dropped"
    if isinstance(exc, AssertionError) and record.exc_info[2] is not None:
        frames = traceback.extract_tb(record.exc_info[2])
        if frames and "self._session is not None" in (frames[-1].line or ""):
            return "a message from a closed tab arrived after its session ended (ignored)"
    return None


class ClosedConnectionFilter(logging.Filter):
    """Rewrites a closed-connection error record as one INFO line (see the module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        what = closed_connection(record)
        if what is not None:
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.msg, record.args, record.exc_info, record.exc_text = what, (), None, None
        return True


#: the loggers they come from: asyncio's default exception handler, Bokeh's websocket and
#: message handlers, Tornado's uncaught exceptions (``on_close`` of the websocket handler)
LOGGERS = ("asyncio", "bokeh.server.views.ws", "bokeh.server.protocol_handler", "tornado.application")


def quiet_closed_connections() -> None:
    """Install :class:`ClosedConnectionFilter` on :data:`LOGGERS` (once)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, ClosedConnectionFilter) for f in logger.filters):
            logger.addFilter(ClosedConnectionFilter())
