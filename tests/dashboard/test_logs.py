"""Closing a tab logs no ERROR; every other error keeps its level and traceback."""

from __future__ import annotations

import logging

import pytest
from tornado.iostream import StreamClosedError
from tornado.websocket import WebSocketClosedError

from boltzlab.dashboard.logs import LOGGERS, quiet_closed_connections


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


@pytest.fixture(autouse=True)
def listening():
    """The loggers pass every record: another test's setup may have raised their level or
    disabled them (a Dask LocalCluster silences logs)."""
    loggers = [logging.getLogger(name) for name in LOGGERS]
    saved = [(logger.level, logger.disabled) for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.DEBUG)
        logger.disabled = False
    yield
    for logger, (level, disabled) in zip(loggers, saved):
        logger.setLevel(level)
        logger.disabled = disabled


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
    loggers, records = logged
    log_error(loggers[0], exc)  # asyncio's
    [record] = records
    assert (record.levelno, record.getMessage(), record.exc_info) == (
        logging.INFO, "a message to a closed tab was dropped", None)


def test_a_message_after_the_session_ended_is_one_info_line(logged):
    loggers, records = logged
    for logger in loggers:
        try:
            Connection().send()
        except AssertionError:
            logger.error("error handling message", exc_info=True)
    assert len(records) == len(LOGGERS)
    for record in records:
        assert record.levelno == logging.INFO and record.exc_info is None
        assert "after its session ended" in record.getMessage()


def test_bokehs_warning_of_a_closed_connection_is_info():
    quiet_closed_connections()
    handler = Records()
    logger = logging.getLogger("bokeh.server.views.ws")
    logger.addHandler(handler)
    try:
        logger.warning("Failed sending message as connection was closed")
        logger.warning("Some other warning")
    finally:
        logger.removeHandler(handler)
    assert [r.levelno for r in handler.records] == [logging.INFO, logging.WARNING]


@pytest.mark.parametrize("exc", [ValueError("a real bug"), AssertionError("another check")])
def test_other_errors_keep_their_level_and_traceback(logged, exc):
    for logger in logged[0]:
        log_error(logger, exc)
    records = logged[1]
    assert len(records) == len(LOGGERS)
    for record in records:
        assert record.levelno == logging.ERROR
        assert record.exc_info is not None and record.exc_info[1] is exc
