"""nsqd- and nsqlookupd-compatible command lines, so tools and test suites that start
``nsqd``/``nsqlookupd`` (gnsq's, for one) can run natserver's NSQ front-end instead:

    python -m natserver.nsq [nsqd] --tcp-address 127.0.0.1:4150 --http-address 127.0.0.1:4151
    python -m natserver.nsq nsqlookupd --tcp-address 127.0.0.1:4160 --http-address 127.0.0.1:4161

(also installed as ``natserver-nsqd`` and ``natserver-nsqlookupd``). Flags are nsqd's (Go
syntax: ``-flag value``, ``--flag=value``); log lines go to stderr in nsqd's format
(``[nsqd] 2006/01/02 15:04:05.000000 INFO: TCP: listening on 127.0.0.1:4150``). The NSQ
front-end runs alone here: no NATS listener, no bridge (use ``natserver --nsq_port`` for those).
"""

from __future__ import annotations

import logging
import signal
import sys
import time

import trio

from .._version import __version__
from .config import VERSION, NsqOptions, duration_seconds, parse_nsq_options
from .lookupd import serve_lookupd
from .tcp import serve_nsq

# Everything in __all__ gets re-exported as part of natserver.nsq's API.
__all__ = ["nsqd_main", "nsqlookupd_main", "main"]

log = logging.getLogger("natserver")

# nsqd flag -> (NsqOptions field, kind); kinds: addr (host:port -> port), str, int, bool, duration, list
_NSQD_FLAGS = {
    "tcp-address": ("port", "addr"), "http-address": ("http_port", "addr"), "https-address": ("https_port", "addr"),
    "broadcast-address": ("broadcast_address", "str"), "data-path": ("data_path", "str"),
    "mem-queue-size": ("mem_queue_size", "int"), "max-msg-size": ("max_msg_size", "int"),
    "max-body-size": ("max_body_size", "int"), "max-rdy-count": ("max_rdy_count", "int"),
    "msg-timeout": ("msg_timeout", "duration"), "max-msg-timeout": ("max_msg_timeout", "duration"),
    "max-req-timeout": ("max_req_timeout", "duration"), "client-timeout": ("client_timeout", "duration"),
    "max-heartbeat-interval": ("max_heartbeat_interval", "duration"),
    "max-output-buffer-size": ("max_output_buffer_size", "int"),
    "max-output-buffer-timeout": ("max_output_buffer_timeout", "duration"),
    "min-output-buffer-timeout": ("min_output_buffer_timeout", "duration"),
    "output-buffer-timeout": ("output_buffer_timeout", "duration"),
    "queue-scan-interval": ("queue_scan_interval", "duration"), "max-bytes-per-file": ("max_bytes_per_file", "int"),
    "snappy": ("snappy", "bool"), "deflate": ("deflate", "bool"), "max-deflate-level": ("max_deflate_level", "int"),
    "tls-cert": ("tls_cert", "str"), "tls-key": ("tls_key", "str"),
    "lookupd-tcp-address": ("lookupd_tcp_addresses", "list"), "node-id": ("node_id", "int"),
    "auth-http-address": ("auth_http_addresses", "list"),
    "log-level": (None, "str"), "log-prefix": (None, "str"), "verbose": (None, "bool"),
}
_LOOKUPD_FLAGS = {
    "tcp-address": ("tcp", "addr"), "http-address": ("http", "addr"), "broadcast-address": ("broadcast", "str"),
    "log-level": (None, "str"), "log-prefix": (None, "str"), "verbose": (None, "bool"),
    "inactive-producer-timeout": (None, "duration"), "tombstone-lifetime": (None, "duration"),
}


# nsqd flags whose absence would mislead: refused with a reason instead of "not defined".
_REFUSED_FLAGS = {
    "tls-required": "TLS is offered in IDENTIFY but never required",
    "auth-http-request-method": "the auth server is queried with GET",
    "tls-client-auth-policy": "client certificates are not checked",
    "tls-root-ca-file": "client certificates are not checked",
}


class UsageError(Exception):
    pass


def parse_flags(argv: list[str], table: dict) -> tuple[dict, str]:
    """Go flag parsing: returns ({field: value}, listen host) — the host of the last address flag."""
    values: dict = {}
    host = ""
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if not arg.startswith("-") or arg in ("-", "--"):
            raise UsageError(f"unexpected argument {arg!r}")
        name = arg.lstrip("-")
        value = None
        if "=" in name:
            name, value = name.split("=", 1)
        if name == "version":
            values["version"] = True
            continue
        if name in _REFUSED_FLAGS:
            raise UsageError(f"-{name} is not supported by natserver ({_REFUSED_FLAGS[name]})")
        if name not in table:
            raise UsageError(f"flag provided but not defined: -{name}")
        field, kind = table[name]
        if value is None:
            if kind == "bool":
                value = "true"
            elif i < len(argv):
                value = argv[i]
                i += 1
            else:
                raise UsageError(f"flag needs an argument: -{name}")
        converted: object
        try:
            if kind == "addr":
                address_host, _, port = value.rpartition(":")
                host = address_host or host
                converted = int(port)
                converted = -1 if converted == 0 else converted  # port 0: a free one
            elif kind == "int":
                converted = int(value, 0)
            elif kind == "bool":
                converted = {"true": True, "1": True, "false": False, "0": False}[value.lower()]
            elif kind == "duration":
                converted = duration_seconds(name, value)
            elif kind == "list":
                converted = values.get(field, []) + [value]
            else:
                converted = value
        except (ValueError, KeyError):
            raise UsageError(f'invalid value "{value}" for flag -{name}') from None
        if field is not None:
            values[field] = converted
    return values, host


def _log_to_stderr(prefix: str) -> None:
    class Formatter(logging.Formatter):
        LEVELS = {"DEBUG": "DEBUG", "INFO": "INFO", "WARNING": "WARN", "ERROR": "ERROR", "CRITICAL": "FATAL"}

        def format(self, record):
            stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(record.created))
            micros = int((record.created % 1) * 1e6)
            return f"[{prefix}] {stamp}.{micros:06d} {self.LEVELS.get(record.levelname, 'INFO')}: {record.getMessage()}"

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(Formatter())
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False


async def _run_until_signal(serve, *args) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(serve, *args)
            async for _ in signals:
                break
            nursery.cancel_scope.cancel()


def nsqd_main(argv: list[str] | None = None) -> int:
    try:
        values, host = parse_flags(list(sys.argv[1:] if argv is None else argv), _NSQD_FLAGS)
        if values.pop("version", False):
            print(f"nsqd v{VERSION} (built w/natserver-{__version__})")
            return 0
        options = parse_nsq_options(NsqOptions(host=host, **values))
        if options.https_port is not None and not options.tls_cert:
            raise UsageError("--https-address needs --tls-cert and --tls-key")
    except (UsageError, ValueError) as exc:
        print(f"nsqd: {exc}", file=sys.stderr)
        return 2
    _log_to_stderr("nsqd")
    log.info("nsqd v%s (natserver %s)", VERSION, __version__)
    try:
        trio.run(_run_until_signal, serve_nsq, None, options)
    except OSError as exc:
        log.critical("%s", exc)
        return 1
    return 0


def nsqlookupd_main(argv: list[str] | None = None) -> int:
    try:
        values, host = parse_flags(list(sys.argv[1:] if argv is None else argv), _LOOKUPD_FLAGS)
    except UsageError as exc:
        print(f"nsqlookupd: {exc}", file=sys.stderr)
        return 2
    if values.pop("version", False):
        print(f"nsqlookupd v{VERSION} (built w/natserver-{__version__})")
        return 0
    _log_to_stderr("nsqlookupd")
    log.info("nsqlookupd v%s (natserver %s)", VERSION, __version__)
    tcp = values.get("tcp", 4160)  # nsqlookupd --tcp-address 0.0.0.0:4160
    http = values.get("http", 4161)  # nsqlookupd --http-address 0.0.0.0:4161
    try:
        trio.run(_run_until_signal, serve_lookupd, host or None, 0 if tcp == -1 else tcp, 0 if http == -1 else http,
                 values.get("broadcast", ""))
    except OSError as exc:
        log.critical("%s", exc)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "nsqlookupd":
        return nsqlookupd_main(args[1:])
    if args and args[0] == "nsqd":
        args = args[1:]
    return nsqd_main(args)
