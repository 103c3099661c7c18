"""log_fast (server/log.py): the lines of a storm of clients (the parser ERROR line) written by
the server's own handler without a logging record, the same line the logging module writes;
through the logging module whenever anything else may want the record."""

from __future__ import annotations

import io
import logging
import re

import pytest

from natserver.server.log import NatsFormatter, log_fast

LINE = re.compile(r"^\[(\d+)\] (\d{4}/\d\d/\d\d \d\d:\d\d:\d\d)\.(\d{6}) \[ERR\] (.*)$")
FMT = "%s - Client parser ERROR, state=%d, i=%d: proto='%s...'"
ARGS = ("127.0.0.1:5000 - cid:7", 0, 3, '"FOO\\r"')
TEXT = FMT % ARGS


@pytest.fixture
def own_logger():
    """A logger set up as configure_logging sets up "natserver": the server's handler alone."""
    logger = logging.getLogger("natserver.test_log_fast")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler._natserver = True  # type: ignore[attr-defined]
    handler.setFormatter(NatsFormatter(True))
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    yield logger, handler, stream
    logger.removeHandler(handler)
    logger.propagate = True
    logger.setLevel(logging.NOTSET)


def _no_records(logger: logging.Logger, monkeypatch) -> None:
    # pytest 9 captures non-propagating loggers too, with handlers of its own added for each
    # test phase: taken off for this one, so that the server's handler is the only one again
    # (with them, log_fast rightly goes through the logging module).
    for other in [h for h in logger.handlers if not getattr(h, "_natserver", False)]:
        logger.removeHandler(other)  # (pytest's own removal at the phase's end is then a no-op)

    def refuse(*args, **kwargs):
        raise AssertionError("a logging record was made")

    monkeypatch.setattr(logger, "makeRecord", refuse)


def test_the_fast_line_is_the_logging_modules_line(own_logger, monkeypatch):
    logger, handler, stream = own_logger
    logger.error(FMT, *ARGS)
    _no_records(logger, monkeypatch)
    log_fast(logger, logging.ERROR, FMT, *ARGS)
    slow, fast = stream.getvalue().splitlines()
    slow_match, fast_match = LINE.match(slow), LINE.match(fast)
    assert slow_match and fast_match
    assert slow_match.group(4) == fast_match.group(4) == TEXT
    assert fast_match.group(1) == slow_match.group(1)
    # The same instant gives the same line either way (the date cached per second too).
    formatter = handler.formatter
    assert isinstance(formatter, NatsFormatter)
    for created in (1_764_300_000.25, 1_764_300_000.75, 1_764_300_001.000001, 1_764_300_000.5):
        record = logging.LogRecord("natserver", logging.ERROR, __file__, 1, FMT, ARGS, None)
        record.created = created
        assert formatter.line(logging.ERROR, TEXT, created) == formatter.format(record)


def test_without_logtime(own_logger, monkeypatch):
    logger, handler, stream = own_logger
    handler.setFormatter(NatsFormatter(False))
    _no_records(logger, monkeypatch)
    log_fast(logger, logging.ERROR, FMT, *ARGS)
    assert re.fullmatch(r"\[\d+\] \[ERR\] " + re.escape(TEXT) + "\n", stream.getvalue())


def test_a_level_below_the_loggers_writes_nothing(own_logger, monkeypatch):
    logger, _, stream = own_logger
    _no_records(logger, monkeypatch)
    log_fast(logger, logging.DEBUG, FMT, *ARGS)
    assert stream.getvalue() == ""


@pytest.mark.parametrize("setup", ["filter", "propagate", "second handler", "foreign handler"])
def test_anything_else_goes_through_the_logging_module(own_logger, monkeypatch, setup):
    logger, handler, stream = own_logger
    made: list[logging.LogRecord] = []
    make_record = logger.makeRecord

    def spy(*args, **kwargs):
        made.append(make_record(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(logger, "makeRecord", spy)
    extra = logging.NullHandler()
    if setup == "filter":
        handler.addFilter(lambda record: True)
    elif setup == "propagate":  # an in-process server: the application's logging sees records
        logger.propagate = True
        logging.getLogger("natserver").addHandler(extra)
    elif setup == "second handler":
        logger.addHandler(extra)
    else:
        del handler._natserver  # type: ignore[attr-defined]
    try:
        log_fast(logger, logging.ERROR, FMT, *ARGS)
    finally:
        logger.removeHandler(extra)
        logging.getLogger("natserver").removeHandler(extra)
    assert [record.getMessage() for record in made] == [TEXT]
    match = LINE.match(stream.getvalue().rstrip("\n"))
    assert match and match.group(4) == TEXT
