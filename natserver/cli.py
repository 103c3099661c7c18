"""``natserver``, the command: a drop-in for nats-server's ``main.go``. Reads the command line
and the config file into Options (natserver.config), then runs the server until a signal stops
it: pid and ports files, SIGINT/SIGTERM, and the signals the running server handles itself
(reload, reopen, lame duck). ``-sl`` sends those signals to a running natserver.

The top of the package: it may import every layer; nothing imports it.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys

import trio

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

from ._version import __version__
from .app import build_server, check_options
from .config.flags import TLS_USAGE, USAGE, UsageError, build_options, parse_args, validate
from .config.options import ConfigError, ConfigFileError, Options
from .protocol import const
from .protocol.gotext import go_errno_text
from .server.files import remove_ports_file, write_pid_file, write_ports_file
from .server.listen import ListenError
from .server.log import configure_logging
from .server.server import Server
from .server.signals import stop_work_at_once

log = logging.getLogger("natserver")


# Go's names for the signals, as in nats-server's `Trapped "hangup" signal` debug line.
_SIGNAL_NAMES: dict[int, str] = {
    signal.SIGINT: "interrupt",
    signal.SIGTERM: "terminated",
    signal.SIGHUP: "hangup",
    signal.SIGUSR1: "user defined signal 1",
    signal.SIGUSR2: "user defined signal 2",
}


class CommandLine:
    """What the running server needs from the command line (reload, ports file)."""

    def __init__(self, flags: dict) -> None:
        self.flags = dict(flags)
        self.monitor = None
        self.ports_file: str | None = None


async def run_server(options: Options, flags: dict | None = None, listening: list | None = None,
                     greeter=None) -> int:
    """Run until stopped (SIGINT, SIGTERM, lame duck); return the exit code (nats-server: 1
    after SIGTERM, 0 otherwise). Writes the pid and ports files; SIGHUP, SIGUSR1 and SIGUSR2
    go to ``Server.on_signal``. ``listening``: client sockets already listening (launch.py)."""
    server = build_server(options)
    server.default_busy_poll = const.DEFAULT_BUSY_POLL  # the process is the server's (see const)
    server.listening_sockets = listening
    if greeter is not None:
        server.adopt_early(greeter)
    command_line = CommandLine(flags or {})
    server.command_line = command_line
    configure_logging(options)
    server._logging_configured = True
    _tune_gc()
    for line in _unsupported_warnings(options):
        log.warning("%s", line)
    exit_code = 0
    signals_wanted = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
    with trio.open_signal_receiver(*signals_wanted) as signals:
        stop_work_at_once(server, (signal.SIGINT, signal.SIGTERM))  # restored with trio's handlers
        async with trio.open_nursery() as nursery:

            async def serve(task_status=trio.TASK_STATUS_IGNORED):
                try:
                    await server.run(task_status=task_status)
                finally:
                    nursery.cancel_scope.cancel()

            # The pid file comes before "Server is ready" (nats-server logPid in Start), so a
            # launcher that waits for that line can signal through the pid file at once.
            if options.pid_file:
                write_pid_file(options.pid_file)
            def before_ready(server: Server) -> None:
                command_line.monitor = server.monitor  # started by the server, before its listener
                # Before "Server is ready", as nats-server's Start writes it: a wrapper that saw
                # the line reads the file at once.
                if options.ports_file_dir:
                    command_line.ports_file = write_ports_file(options, server, command_line.monitor)

            server.before_ready = before_ready
            await nursery.start(serve)
            try:
                async for signum in signals:
                    log.debug('Trapped "%s" signal', _SIGNAL_NAMES.get(signum, signum))
                    if signum == signal.SIGINT:
                        break
                    if signum == signal.SIGTERM:
                        if server.lame_duck:
                            continue  # nats-server lets lame duck mode finish
                        # nats-streaming-server exits 143 (server/signal.go): its wrappers check
                        exit_code = 143 if options.stan is not None else 1
                        break
                    try:
                        await server.on_signal(signum, nursery)
                    except Exception:  # a failed reload/reopen must not take the server down
                        log.exception("Error handling signal %s", _SIGNAL_NAMES.get(signum, signum))
            finally:
                if not server.shutting_down:
                    log.info("Initiating Shutdown...")
                server.stop()
                nursery.cancel_scope.cancel()
    if command_line.ports_file:
        remove_ports_file(command_line.ports_file)
    return exit_code


def _unsupported_warnings(options: Options) -> list[str]:
    """config.mapping's unsupported_warnings, which reads only ``options.extra`` (the keys and
    flags natserver accepts but ignores): a start with nothing there does not import the
    config file mapping for it."""
    if not options.extra:
        return []
    from .config.mapping import unsupported_warnings

    return unsupported_warnings(options)


def _tune_gc() -> None:
    """The binary owns its process: collect less often (see GC_GEN0_THRESHOLD) and move the
    objects made at start (modules, functions, configuration) out of the collector's way, so
    the full collections that still happen walk only what the server made since. The collector
    is on from here: natserver.launch turns it off for the imports and the build."""
    _gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(const.GC_GEN0_THRESHOLD, gen1, gen2)
    gc.freeze()
    gc.enable()
    if log.isEnabledFor(logging.DEBUG):  # counting the frozen objects walks them all (~4 ms)
        threshold, frozen = gc.get_threshold()[0], gc.get_freeze_count()
        log.debug("Garbage collection: generation 0 threshold %d, %d objects frozen", threshold, frozen)


# -- -sl ---------------------------------------------------------------------------------------

_SIGNALS = {
    "stop": signal.SIGKILL,
    "quit": signal.SIGINT,
    "term": signal.SIGTERM,
    "reopen": signal.SIGUSR1,
    "reload": signal.SIGHUP,
    "ldm": signal.SIGUSR2,
}


def _is_natserver(cmdline: list[str]) -> bool:
    if not cmdline:
        return False
    if os.path.basename(cmdline[0]) in ("natserver",):
        return True
    if "python" in os.path.basename(cmdline[0]):
        for i, arg in enumerate(cmdline[1:], start=1):
            if arg == "-m" and i + 1 < len(cmdline) and cmdline[i + 1] == "natserver":
                return True
            if not arg.startswith("-"):
                return os.path.basename(arg) == "natserver"
    return False


def resolve_pids() -> list[int]:
    """The pids of running natserver processes (nats-server uses ``pgrep nats-server``;
    ``python -m natserver`` is not found that way, so we read /proc)."""
    pids = []
    me = os.getpid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        raise UsageError("unable to resolve pid, try providing one") from None
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = [part.decode(errors="replace") for part in f.read().split(b"\0") if part]
        except OSError:
            continue
        if _is_natserver(cmdline):
            pids.append(int(entry))
    return sorted(pids)


def send_signal(spec: str) -> None:
    """``-sl <signal>[=<pid or pid file>]``, as nats-server (opts.go processSignal)."""
    parts = spec.split("=")
    if len(parts) > 2:
        raise UsageError(f"invalid signal parameters: [{' '.join(parts[2:])}]")
    command = parts[0]
    target = parts[1] if len(parts) == 2 else ""
    if target:
        # maybeReadPidFile: the contents of the file if it can be read, else the text itself.
        try:
            with open(target) as f:
                target = f.read().strip()
        except OSError:
            pass
        try:
            pid = int(target, 10)
        except ValueError:
            raise UsageError(f"invalid pid: {target}") from None
    else:
        pids = resolve_pids()
        if not pids:
            raise UsageError("no natserver processes running")
        if len(pids) > 1:
            raise UsageError("multiple natserver processes running:\n" + "\n".join(map(str, pids)))
        pid = pids[0]
    if command not in _SIGNALS:
        raise UsageError(f'unknown signal "{command}"')
    try:
        os.kill(pid, _SIGNALS[command])
    except OSError as exc:
        raise UsageError(go_errno_text(exc)) from None


# -- main --------------------------------------------------------------------------------------


def _early_sockets(early, options: Options, greeter=None) -> list | None:
    """The sockets launch.py bound before the imports, if the options listen just there; else
    close them (the server binds as usual), and whatever the greeter took."""
    if early is None:
        return None
    address, sockets = early
    host = None if options.host in ("", "0.0.0.0") else options.host
    if address == (host, 0 if options.port == const.RANDOM_PORT else options.port):
        return sockets
    if greeter is not None:
        greeter.close()
    for sock in sockets:
        sock.close()
    return None


def main(argv: list[str] | None = None, early=None, greeter=None) -> int:
    """The command line; ``early``: (address, sockets) bound by natserver.launch, and
    ``greeter`` the thread greeting clients on them meanwhile (server/early.py)."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        return _main(argv, early, greeter)
    finally:
        if greeter is not None:
            greeter.close()
        if early is not None:
            for sock in early[1]:  # whatever the server did not take (closing twice is harmless)
                if sock.fileno() >= 0:
                    sock.close()


def _main(argv: list[str], early, greeter=None) -> int:
    try:
        given = parse_args(argv)
        if given.get("version"):
            print(f"natserver: v{__version__} (nats-server v{const.SERVER_VERSION} compatible)")
            return 0
        if given.get("help"):
            sys.stdout.write(USAGE)
            return 0
        if given.get("help_tls"):
            sys.stdout.write(TLS_USAGE)
            return 0
        if given.get("signal"):
            send_signal(given["signal"])
            return 0
        check = given.get("check_config")
        if check and not given.get("config_file"):
            raise UsageError("must specify [-c, --config] option to check configuration file syntax")
        # nats-server prints warnings as they are (no prefix) and carries on; -t fails on them.
        options = build_options(given, on_warnings=None if check else lambda exc: sys.stderr.write(str(exc)))
        if check:
            # Valid for nats-server, but name what natserver will not act on, as a start would.
            for line in _unsupported_warnings(options):
                print(f"natserver: warning: {line}", file=sys.stderr)
            digest = f" ({options.config_digest})" if options.config_digest else ""
            print(f"natserver: configuration file {options.config_file} is valid{digest}", file=sys.stderr)
            return 0
        validate(options)
        check_options(options)  # the subsystems' own blocks (nsq {}), before anything starts
    except (UsageError, ConfigError, ConfigFileError, ValueError) as exc:
        print(f"natserver: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"natserver: {exc}", file=sys.stderr)
        return 1
    try:
        listening = _early_sockets(early, options, greeter)
        return trio.run(run_server, options, given, listening, greeter if listening else None)
    except KeyboardInterrupt:
        return 0
    except ListenError:
        return 1  # logged once, as nats-server's [FTL] line
    except OSError as exc:
        print(f"natserver: {exc}", file=sys.stderr)
        return 1
    except BaseExceptionGroup as group:  # noqa: F821 (3.11+, exceptiongroup on 3.10)
        # A listener that cannot be opened (port in use) fails the nursery.
        leaves = _leaves(group)
        if leaves and all(isinstance(exc, ListenError) for exc in leaves):
            return 1  # logged once, as nats-server's [FTL] line
        if leaves and all(isinstance(exc, OSError) or getattr(exc, "fatal_startup", False) for exc in leaves):
            print(f"natserver: {leaves[0]}", file=sys.stderr)
            return 1
        raise


def _leaves(group) -> list:
    out = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])  # noqa: F821
    return out
