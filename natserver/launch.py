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

Waiting in the accept queue is not having the INFO, though, and Python and trio alone take
~250 ms. So when the command line says everything the INFO will say (``greeting_base``), a
thread greets the clients that connect meanwhile (server/early.py) with the INFO the server
will send, under the server identity it will have; the server then serves them as its own.
"""

from __future__ import annotations

import gc
import re
import socket
import sys

from .protocol import const
from .server.binding import LISTEN_BACKLOG as SERVER_LISTEN_BACKLOG
from .server.binding import bind_sockets
from .server.early import EarlyGreeter, info_base, make_identity

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
# Plain flags after which a client must not be greeted early: the connection limit (the
# server answers a connection over it with an error after the INFO), and the NATS Streaming
# flags (a front-end that may start slowly or not at all).
_GREETING_UNSAFE_FLAGS = frozenset("max_connections stan SD stan_debug SV stan_trace SDV cid cluster_id st store dir".split())


def _plain_flags(argv: list[str]) -> dict[str, str] | None:
    """The flags of a plain command line, by the name given (the last of each wins, as Go's
    flag package; a boolean flag maps to "true" or its value), or None when it is not one."""
    flags: dict[str, str] = {}
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
            flags[name] = value or "true"
            continue
        if name not in _VALUE_FLAGS:
            return None
        if value is None:
            if i >= len(argv):
                return None
            value = argv[i]
            i += 1
        flags[name] = value
    return flags


def _address(flags: dict[str, str]) -> tuple[str | None, int] | None:
    host, port = const.DEFAULT_HOST, const.DEFAULT_PORT
    for name, value in flags.items():
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


def early_address(argv: list[str]) -> tuple[str | None, int] | None:
    """(host, port) to bind for this command line, as Server.run would (host None: every
    address), or None when the command line is not a plain one."""
    flags = _plain_flags(argv)
    return None if flags is None else _address(flags)


def greeting_base(argv: list[str], server_id: str, port: int) -> dict | None:
    """The INFO fields (early.info_base) the server will send for this plain command line,
    listening on ``port``, or None when the greeting cannot know them (the flags that change
    INFO are the address, the server name, -js and a decimal --max_payload)."""
    flags = _plain_flags(argv)
    if flags is None:
        return None
    host = const.DEFAULT_HOST
    name = ""
    max_payload = const.MAX_PAYLOAD_SIZE
    jetstream = False
    for flag, value in flags.items():
        if flag in _HOST_FLAGS:
            host = value
        elif flag in ("n", "name", "server_name"):
            name = value
        elif flag == "max_payload":
            if not value.isdigit() or not 0 < int(value) <= const.MAX_PAYLOAD_MAX_SIZE:
                return None
            max_payload = int(value)
        elif flag in ("js", "jetstream"):
            jetstream = value == "true"
        elif flag in _GREETING_UNSAFE_FLAGS:
            return None
    return info_base(server_id, name or server_id, host, port, True, max_payload, jetstream)


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


def start_greeter(argv: list[str], sockets: list[socket.socket]) -> EarlyGreeter | None:
    """Greet clients on the early sockets while the server is imported (server/early.py), when
    the command line says everything the INFO will say; else None (they wait for the server)."""
    identity = make_identity()
    base = greeting_base(argv, identity.server_id, sockets[0].getsockname()[1])
    return None if base is None else EarlyGreeter(sockets, identity, base).start()


def main(argv: list[str] | None = None) -> int:
    """The ``natserver`` command (and ``python -m natserver``)."""
    argv = sys.argv[1:] if argv is None else argv
    early = bind_early(argv)
    greeter = start_greeter(argv, early[1]) if early is not None else None
    # No cyclic garbage collection while the server is imported and built: the imports make
    # few cycles, and collecting them cost ~10 % of exec -> INFO (issue #33: ~60 generation-0
    # and 5 generation-1 collections). cli._tune_gc turns it back on once the start-up objects
    # are frozen, before the server runs; the finally covers the commands that stop earlier.
    collecting = gc.isenabled()
    gc.disable()
    try:
        # Imported here on purpose, after the bind: this import is the 150-300 ms being hidden.
        from .cli import main as cli_main

        return cli_main(argv, early=early, greeter=greeter)
    finally:
        if greeter is not None:  # whatever the server did not take over
            greeter.close()
        if collecting:
            gc.enable()
