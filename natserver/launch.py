"""The ``natserver`` command's first milliseconds: open the client listener, then import.

Harnesses that start a server per test (nats.py's, node-nats-streaming's) probe the port soon
after exec, and importing trio and the server takes 150-300 ms here (issue #17: 350-430 ms from
exec to a connection accepted, nats-server 9-13 ms). So, as socket activation does, the
listening socket is opened first, with the standard library only, and handed to the server
once it is built: a client that connects meanwhile waits in the kernel's accept queue and gets
its INFO as soon as the server runs. Measured with ``benchmarks/bench_startup.py --cli``.

Only a plain command line is bound early (the port and address flags and a few that cannot
change where the server listens); anything else (a config file, ``-sl``, ``-t``, an unknown
flag, a value that does not parse) leaves it all to the full command line parser, and so do
errors: a port in use is reported by the server as usual. ``cli`` binds again when the options
it builds listen elsewhere than the early socket.
"""

from __future__ import annotations

import gc
import re
import socket
import sys

from .protocol import const
from .server.binding import LISTEN_BACKLOG as SERVER_LISTEN_BACKLOG
from .server.binding import bind_sockets

# Flags an early bind allows, with a value / without one (Go's flag package: -x v, -x=v, --x v).
# nats-streaming-server's flags are plain too (node-nats-streaming's harness starts
# ``-p PORT -SDV -log FILE [--store FILE --dir D]``), but not -ns, which listens nowhere, nor -sc,
# a file.
_VALUE_FLAGS = frozenset(
    "p port a addr net n name server_name P pid m http_port l log ports_file_dir sd store_dir "
    "max_payload max_pending max_connections max_control_line max_traced_msg_len "
    "cid cluster_id st store dir mc max_channels msu max_subs mm max_msgs mb max_bytes ma max_age "
    "mi max_inactivity hbi hb_i hb_interval hbt hb_t hb_timeout hbf hb_f hb_fail_count".split()
)
_BOOL_FLAGS = frozenset("D debug V trace VV DV DVV T logtime js jetstream stan SD stan_debug SV stan_trace SDV".split())
_PORT_FLAGS = frozenset(("p", "port"))
_HOST_FLAGS = frozenset(("a", "addr", "net"))
# The server's own backlog, so an early listener queues as many connections as the one the
# server would open itself.
LISTEN_BACKLOG = SERVER_LISTEN_BACKLOG
_PORT_VALUE = re.compile(r"-1|0|[1-9][0-9]{0,4}")


def early_address(argv: list[str]) -> tuple[str | None, int] | None:
    """(host, port) to bind for this command line, as Server.run would (host None: every
    address), or None when the command line is not a plain one."""
    host, port = const.DEFAULT_HOST, const.DEFAULT_PORT
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if len(arg) < 2 or arg[0] != "-" or arg == "--":
            return None  # commands (version, help) or the end of the flags
        name = arg[2:] if arg.startswith("--") else arg[1:]
        value = None
        if "=" in name:
            name, value = name.split("=", 1)
        if name in _BOOL_FLAGS:
            if value is not None and value not in ("true", "false"):
                return None
            continue
        if name not in _VALUE_FLAGS:
            return None
        if value is None:
            if i >= len(argv):
                return None
            value = argv[i]
            i += 1
        if name in _PORT_FLAGS:
            # Decimal only: Go reads "010" as octal and "0x10" as hex; -p 0 is the default port.
            if not _PORT_VALUE.fullmatch(value):
                return None
            port = int(value) or const.DEFAULT_PORT
        elif name in _HOST_FLAGS:
            host = value
    if port > 65535:
        return None
    return (None if host in ("", "0.0.0.0") else host), (0 if port == const.RANDOM_PORT else port)


def bind_early(argv: list[str]) -> tuple[tuple[str | None, int], list[socket.socket]] | None:
    """Listening sockets for a plain command line, exactly as the server would open them
    (natserver.server.listen.bind_sockets: one dual-stack socket for every address), or None."""
    address = early_address(argv)
    if address is None:
        return None
    host, port = address
    try:
        sockets = bind_sockets(host, port, LISTEN_BACKLOG)
    except OSError:
        # A port in use, an address not here: the server reports it in its own words.
        return None
    return (address, sockets) if sockets else None


def main(argv: list[str] | None = None) -> int:
    """The ``natserver`` command (and ``python -m natserver``)."""
    argv = sys.argv[1:] if argv is None else argv
    early = bind_early(argv)
    # No cyclic garbage collection while the server is imported and built: the imports make
    # few cycles, and collecting them cost ~10 % of exec -> INFO (issue #33: ~60 generation-0
    # and 5 generation-1 collections). cli._tune_gc turns it back on once the start-up objects
    # are frozen, before the server runs; the finally covers the commands that stop earlier.
    collecting = gc.isenabled()
    gc.disable()
    try:
        # Imported here on purpose, after the bind: this import is the 150-300 ms being hidden.
        from .cli import main as cli_main

        return cli_main(argv, early=early)
    finally:
        if collecting:
            gc.enable()
