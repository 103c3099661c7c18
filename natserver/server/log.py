"""Log lines in nats-server's format: ``[pid] 2026/11/21 12:19:31.555216 [INF] text``.

Wrappers and test harnesses scrape these (e.g. "Listening for client connections on" and
"Server is ready"), so the shape matters, not just the words.
"""

from __future__ import annotations

import logging
import os
import sys
import time

# Everything in __all__ gets re-exported as part of natserver's public API.
__all__ = ["configure_logging", "reopen_log_file"]  # configure_library_logging: internal

_LEVELS = {
    logging.DEBUG: "DBG",
    logging.INFO: "INF",
    logging.WARNING: "WRN",
    logging.ERROR: "ERR",
    logging.CRITICAL: "FTL",
}
TRACE = 5  # below DEBUG: protocol tracing (-V)
logging.addLevelName(TRACE, "TRC")
_LEVELS[TRACE] = "TRC"


class NatsFormatter(logging.Formatter):
    def __init__(self, logtime: bool = True) -> None:
        super().__init__()
        self.logtime = logtime
        self.pid = os.getpid()
        self._second = -1  # the second _date is the date and time of (strftime: 4 us a line)
        self._date = ""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        return self.line(record.levelno, message, record.created)

    def line(self, levelno: int, message: str, created: float) -> str:
        """The line of a record of level ``levelno`` made at ``created`` (seconds since the
        epoch, as a LogRecord's)."""
        level = _LEVELS.get(levelno, "INF")
        if self.logtime:
            second = int(created)
            if second != self._second:
                self._date = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(created))
                self._second = second
            return f"[{self.pid}] {self._date}.{int((created % 1) * 1e6):06d} [{level}] {message}"
        return f"[{self.pid}] [{level}] {message}"


def log_fast(logger: logging.Logger, levelno: int, fmt: str, *args) -> None:
    """``logger.log(levelno, fmt, *args)`` for the lines a storm of clients makes (the parser
    ERROR line of every malformed connection): when the server's own handler is the logger's
    only one (the command line's stderr or -l file, no filters), the line is formatted and
    written here, the same bytes, without the logging module's record (caller lookup, record
    attributes, handler chain): 26 -> 6 us a line. Anything else (an in-process server's
    records for the application's logging, a filter) goes through ``logger.log``."""
    if not logger.isEnabledFor(levelno):
        return
    handlers = logger.handlers
    if len(handlers) == 1 and not logger.propagate and not logger.filters:
        handler = handlers[0]
        formatter = handler.formatter
        if (getattr(handler, "_natserver", False) and not handler.filters and levelno >= handler.level
                and isinstance(handler, logging.StreamHandler) and isinstance(formatter, NatsFormatter)):
            # The wall clock, as the logging module stamps its records (natserver.clock would
            # put the test double's jumps into these lines alone).
            line = formatter.line(levelno, fmt % args if args else fmt, time.time())
            handler.acquire()
            try:
                stream = handler.stream
                if stream is not None:  # (a file handler between close and reopen has none)
                    stream.write(line + handler.terminator)
                    stream.flush()
                    return
            except Exception:
                pass  # the logging module's own path reports it (handleError)
            finally:
                handler.release()
    logger.log(levelno, fmt, *args)


class _ReopenableFileHandler(logging.FileHandler):
    """``-l FILE``: appends, as nats-server's file logger; ``reopen()`` after log rotation
    (SIGUSR1) starts a new file at the same path."""

    def reopen(self) -> None:
        self.acquire()
        try:
            if self.stream:
                self.stream.close()
            self.stream = self._open()
        finally:
            self.release()


def configure_logging(options) -> logging.Handler | None:
    """Route the "natserver" logger as nats-server would: stderr, or -l FILE."""
    logger = logging.getLogger("natserver")
    for ours in list(logger.handlers):
        if getattr(ours, "_natserver", False):
            logger.removeHandler(ours)
            ours.close()
    if options.quiet:
        logger.setLevel(logging.CRITICAL + 1)
        return None
    if options.log_file:
        handler: logging.Handler = _ReopenableFileHandler(options.log_file)
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler._natserver = True  # type: ignore[attr-defined]
    handler.setFormatter(NatsFormatter(options.logtime))
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(TRACE if options.trace else logging.DEBUG if options.debug else logging.INFO)
    if options.trace and not options.debug:
        handler.addFilter(_not_debug)  # -V alone: trace lines but no debug lines (nats-server)
    return handler


def _not_debug(record: logging.LogRecord) -> bool:
    return record.levelno != logging.DEBUG


def reopen_log_file() -> bool:
    """SIGUSR1: reopen the log file (after it was renamed by a log rotator). False when the
    server is not logging to a file."""
    logger = logging.getLogger("natserver")
    reopened = False
    for handler in logger.handlers:
        if getattr(handler, "_natserver", False) and isinstance(handler, _ReopenableFileHandler):
            handler.reopen()
            reopened = True
    return reopened


def configure_library_logging(options) -> None:
    """An in-process server (the library) only logs: no handler on the "natserver" logger and
    propagation left on, so the application's logging and pytest's caplog see its records.
    ``debug``/``trace`` lower the logger's level so those records are made at all; ``-l FILE``
    is an explicit request, so it gets its file handler (propagation still on)."""
    logger = logging.getLogger("natserver")
    if options.trace or options.debug:
        level = TRACE if options.trace else logging.DEBUG
        if logger.getEffectiveLevel() > level:
            logger.setLevel(level)
    if options.log_file and not any(getattr(h, "_natserver", False) for h in logger.handlers):
        handler = _ReopenableFileHandler(options.log_file)
        handler._natserver = True  # type: ignore[attr-defined]
        handler.setFormatter(NatsFormatter(options.logtime))
        logger.addHandler(handler)
