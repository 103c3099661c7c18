"""``natserver``: the command line, a drop-in for nats-server's common flags.

nats-server uses Go's flag package, so ``-p 4222``, ``-p=4222``, ``--port 4222`` and ``-port 4222``
all mean the same and booleans take ``-D`` or ``-D=false``. argparse cannot express that (nor
multi-letter single-dash names like ``-DV``), so the flags are a small table parsed here.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from dataclasses import dataclass

import trio

from . import _const as const
from ._options import Options
from ._version import __version__

USAGE = f"""\
Usage: natserver [options]

Server Options:
    -a, --addr, --net <host>         Bind to host address (default: {const.DEFAULT_HOST})
    -p, --port <port>                Use port for clients (default: {const.DEFAULT_PORT}, -1 for random)
    -n, --name, --server_name <name> Server name (default: auto)
    -P, --pid <file>                 File to store PID
    -m, --http_port <port>           Use port for http monitoring
    -c, --config <file>              Configuration file
    -t                               Test configuration and exit
    -sl,--signal <signal>[=<pid>]    Send signal to natserver process (ldm, stop, quit, term, reopen, reload)
        --ports_file_dir <dir>       Creates a ports file in the specified directory (<executable_name>_<pid>.ports)

Logging Options:
    -l, --log <file>                 File to redirect log output
    -T, --logtime                    Timestamp log entries (default: true)
    -D, --debug                      Enable debugging output
    -V, --trace                      Trace the raw protocol
    -DV                              Debug and trace

Authorization Options:
        --user <user>                User required for connections
        --pass <password>            Password required for connections
        --auth <token>               Authorization token required for connections

Limits (natserver extensions, same names as the config keys):
        --max_payload <size>         Maximum message payload (default: 1MB)
        --max_pending <size>         Maximum pending bytes per client (default: 64MB)
        --max_connections <n>        Maximum client connections (default: 65536)
        --max_control_line <size>    Maximum control line (default: 4096)

Common Options:
    -h, --help                       Show this message
    -v, --version                    Show version
"""


class UsageError(Exception):
    """A bad command line: reported in one line, exit code 1."""


@dataclass
class _Flag:
    dest: str
    kind: str  # "str", "int", "size", "bool"


_FLAGS: dict[str, _Flag] = {}


def _flag(names: str, dest: str, kind: str = "str") -> None:
    for name in names.split():
        _FLAGS[name] = _Flag(dest, kind)


_flag("a addr net", "host")
_flag("p port", "port", "int")
_flag("n name server_name", "server_name")
_flag("P pid", "pid_file")
_flag("m http_port", "http_port", "int")
_flag("c config", "config_file")
_flag("t", "check_config", "bool")
_flag("sl signal", "signal")
_flag("ports_file_dir", "ports_file_dir")
_flag("l log log_file", "log_file")
_flag("T logtime", "logtime", "bool")
_flag("D debug", "debug", "bool")
_flag("V trace", "trace", "bool")
_flag("DV", "debug_trace", "bool")
_flag("VV", "trace", "bool")
_flag("DVV", "debug_trace", "bool")
_flag("user", "username")
_flag("pass", "password")
_flag("auth", "authorization")
_flag("max_payload", "max_payload", "size")
_flag("max_pending", "max_pending", "size")
_flag("max_connections", "max_connections", "int")
_flag("max_control_line", "max_control_line", "size")
_flag("h help", "help", "bool")
_flag("v version", "version", "bool")


def _convert(name: str, flag: _Flag, raw: str):
    if flag.kind == "bool":
        lowered = raw.lower()
        if lowered in ("1", "t", "true"):
            return True
        if lowered in ("0", "f", "false"):
            return False
        raise UsageError(f'invalid boolean value "{raw}" for -{name}')
    if flag.kind == "int":
        try:
            return int(raw, 10)
        except ValueError:
            raise UsageError(f'invalid value "{raw}" for flag -{name}: parse error') from None
    if flag.kind == "size":
        from ._conf import to_int

        try:
            return to_int(raw)
        except (ValueError, TypeError):
            raise UsageError(f'invalid value "{raw}" for flag -{name}: parse error') from None
    return raw


def parse_args(argv: list[str]) -> dict:
    """Go-flag-style parsing; returns {dest: value} for the flags given."""
    given: dict = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            break
        if not arg.startswith("-") or arg == "-":
            raise UsageError(f"unexpected argument: {arg}")
        name = arg.lstrip("-")
        value = None
        if "=" in name:
            name, value = name.split("=", 1)
        flag = _FLAGS.get(name)
        if flag is None:
            raise UsageError(f"flag provided but not defined: -{name}")
        if value is None:
            if flag.kind == "bool":
                value = "true"
            else:
                if i >= len(argv):
                    raise UsageError(f"flag needs an argument: -{name}")
                value = argv[i]
                i += 1
        given[flag.dest] = _convert(name, flag, value)
    if given.pop("debug_trace", False):
        given["debug"] = True
        given["trace"] = True
    return given


_OPTION_FIELDS = set(Options.__dataclass_fields__)


def build_options(given: dict) -> Options:
    """Options from the config file (if any), then the flags on top, as nats-server does."""
    options = Options()
    config_file = given.get("config_file")
    if config_file:
        from ._config import options_from_file

        options = options_from_file(config_file)
    changes = {k: v for k, v in given.items() if k in _OPTION_FIELDS}
    if "http_port" in changes and not options.http_host:
        changes.setdefault("http_host", options.host if "host" not in changes else changes["host"])
    options = options.copy(**changes)
    options.validate()
    return options


def _write_ports_file(options: Options, server, monitor) -> str:
    exe = os.path.basename(sys.argv[0]) or "natserver"
    if exe in ("__main__.py", "-c"):
        exe = "natserver"
    path = os.path.join(options.ports_file_dir, f"{exe}_{os.getpid()}.ports")
    host = "127.0.0.1" if server.host in ("", "0.0.0.0", "::") else server.host
    ports = {"nats": [f"nats://{host}:{server.port}"]}
    if monitor is not None:
        ports["monitoring"] = [f"http://{host}:{monitor.port}"]
    with open(path, "w") as f:
        json.dump(ports, f)
    return path


async def run_server(options: Options) -> None:
    """Run until SIGINT/SIGTERM; write pid and ports files; react to the other signals."""
    from ._server import Server

    server = Server(options)
    cleanup: list[str] = []
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(server.run)
            monitor = None
            if options.http_port:
                from ._monitor import serve_monitor

                monitor = await nursery.start(serve_monitor, server)
            if options.pid_file:
                with open(options.pid_file, "w") as f:
                    f.write(str(os.getpid()))
                cleanup.append(options.pid_file)
            if options.ports_file_dir:
                cleanup.append(_write_ports_file(options, server, monitor))
            try:
                async for signum in signals:
                    if signum in (signal.SIGINT, signal.SIGTERM):
                        import logging

                        logging.getLogger("natserver").info("Trapped %r signal", signal.Signals(signum).name.lower()[3:])
                        break
                    await _handle_signal(server, signum, nursery)
            finally:
                server.stop()
                nursery.cancel_scope.cancel()
    for path in cleanup:
        try:
            os.unlink(path)
        except OSError:
            pass


async def _handle_signal(server, signum: int, nursery) -> None:
    handler = getattr(server, "on_signal", None)
    if handler is not None:
        await handler(signum, nursery)


_SIGNALS = {
    "stop": signal.SIGKILL,
    "quit": signal.SIGINT,
    "term": signal.SIGTERM,
    "reopen": signal.SIGUSR1,
    "reload": signal.SIGHUP,
    "ldm": signal.SIGUSR2,
}


def send_signal(spec: str) -> None:
    """``-sl <signal>[=<pid or pid file>]``, as nats-server."""
    command, _, target = spec.partition("=")
    if command not in _SIGNALS:
        raise UsageError(f"unknown signal {command!r}")
    if not target:
        raise UsageError("no pid or pid file given (use -sl <signal>=<pid|pidfile>)")
    if target.isdigit():
        pid = int(target)
    else:
        try:
            with open(target) as f:
                pid = int(f.read().strip())
        except (OSError, ValueError) as exc:
            raise UsageError(f"could not read pid from {target}: {exc}") from None
    try:
        os.kill(pid, _SIGNALS[command])
    except OSError as exc:
        raise UsageError(f"could not signal pid {pid}: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        given = parse_args(argv)
        if given.get("help"):
            sys.stdout.write(USAGE)
            return 0
        if given.get("version"):
            print(f"natserver: v{__version__} (nats-server v{const.SERVER_VERSION} compatible)")
            return 0
        if given.get("signal"):
            send_signal(given["signal"])
            return 0
        options = build_options(given)
        if given.get("check_config"):
            print(f"natserver: configuration file {options.config_file or '(none)'} test is successful")
            return 0
    except UsageError as exc:
        print(f"natserver: {exc}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as exc:
        print(f"natserver: {exc}", file=sys.stderr)
        return 1
    try:
        trio.run(run_server, options)
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        print(f"natserver: {exc}", file=sys.stderr)
        return 1
    return 0
