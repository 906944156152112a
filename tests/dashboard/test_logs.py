"""Closing a tab logs no ERROR; every other error keeps its level and traceback."""

from __future__ import annotations

import logging

import pytest
from tornado.iostream import StreamClosedError
from tornado.websocket import WebSocketClosedError

from dashboard.logs import LOGGERS, quiet_closed_connections


class Connection:  # the shape of bokeh.server.connection.ServerConnection's check
    _session = None

    def send(self):
        assert self._session is not None


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def logged():
    quiet_closed_connections()
    quiet_closed_connections()  # installing twice adds one filter
    handler = Records()
    loggers = [logging.getLogger(name) for name in LOGGERS]
    for logger in loggers:
        assert sum(type(f).__name__ == "ClosedConnectionFilter" for f in logger.filters) == 1
        logger.addHandler(handler)
    yield loggers, handler.records
    for logger in loggers:
        logger.removeHandler(handler)


def log_error(logger: logging.Logger, exc: BaseException) -> None:
    try:
        raise exc
    except BaseException:
        logger.error("Task exception was never retrieved", exc_info=True)


@pytest.mark.parametrize("exc", [WebSocketClosedError(), StreamClosedError()])
def test_a_write_to_a_closed_tab_is_one_info_line(logged, exc):
    (asyncio_logger, _), records = logged
    log_error(asyncio_logger, exc)
    [record] = records
    assert (record.levelno, record.getMessage(), record.exc_info) == (
        logging.INFO, "a message to a closed tab was dropped", None)


def test_a_message_after_the_session_ended_is_one_info_line(logged):
    (_, ws_logger), records = logged
    try:
        Connection().send()
    except AssertionError:
        ws_logger.error("Handler or its work threw an exception", exc_info=True)
    [record] = records
    assert record.levelno == logging.INFO
    assert "after its session ended" in record.getMessage()


@pytest.mark.parametrize("exc", [ValueError("a real bug"), AssertionError("another check")])
def test_other_errors_keep_their_level_and_traceback(logged, exc):
    for logger in logged[0]:
        log_error(logger, exc)
    records = logged[1]
    assert len(records) == 2
    for record in records:
        assert record.levelno == logging.ERROR
        assert record.exc_info is not None and record.exc_info[1] is exc
