"""``natserver``: the command line, a drop-in for nats-server's (v2.9.10, ``server/opts.go``
``ConfigureOptions`` and ``main.go``).

nats-server uses Go's flag package, so ``-p 4222``, ``-p=4222``, ``--port 4222`` and ``-port 4222``
all mean the same and booleans take ``-D`` or ``-D=false``. argparse cannot express that (nor
multi-letter single-dash names like ``-DV``), so the flags are a small table parsed here, with
Go's rules and error texts. Differences, on purpose:

* a bad command line prints one line and exits 1 (nats-server prints the usage and exits 0);
* nats-server flags for features natserver does not have (clustering, syslog, profiling, ...)
  are accepted and ignored with a warning, as their config keys are;
* a few natserver extensions (limits and lame duck timings) have flags, for tests and wrappers.

Order of work, as nats-server: ``-v``/``-h``, commands, ``-sl``, the config file, then the
flags on top of it; ``-t`` stops after reading the config file.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import re
import signal
import sys
from dataclasses import dataclass

import trio

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

from . import _const as const
from ._options import Options
from ._version import __version__

log = logging.getLogger("natserver")

USAGE = f"""\
Usage: natserver [options]

Server Options:
    -a, --addr, --net <host>         Bind to host address (default: {const.DEFAULT_HOST})
    -p, --port <port>                Use port for clients (default: {const.DEFAULT_PORT}, -1 for random)
    -n, --name
        --server_name <server_name>  Server name (default: auto)
    -P, --pid <file>                 File to store PID
    -m, --http_port <port>           Use port for http monitoring (-1 for random)
    -c, --config <file>              Configuration file
    -t                               Test configuration and exit
    -sl,--signal <signal>[=<pid>]    Send signal to natserver process (ldm, stop, quit, term, reopen, reload)
                                     <pid> can be either a PID (e.g. 1) or the path to a PID file (e.g. /var/run/natserver.pid)
        --ports_file_dir <dir>       Creates a ports file in the specified directory (<executable_name>_<pid>.ports).

Logging Options:
    -l, --log <file>                 File to redirect log output
    -T, --logtime                    Timestamp log entries (default: true)
    -D, --debug                      Enable debugging output
    -V, --trace                      Trace the raw protocol
    -VV                              Verbose trace (same as -V in natserver)
    -DV                              Debug and trace
    -DVV                             Debug and verbose trace

JetStream Options:
    -js, --jetstream                 Enable JetStream-shaped persisted streams
    -sd, --store_dir <dir>           Set the storage directory

Streaming Options (NATS Streaming on natserver, see natserver/stan):
        --stan                       Enable NATS Streaming (any flag below enables it too)
    -cid, --cluster_id <string>      Cluster ID (default: test-cluster)
    -st,  --store <string>           Store type: MEMORY|FILE (default: MEMORY)
          --dir <string>             Directory of the file store
    -mc,  --max_channels <int>       Max number of channels (0 for unlimited)
    -msu, --max_subs <int>           Max number of subscriptions per channel (0 for unlimited)
    -mm,  --max_msgs <int>           Max number of messages per channel (0 for unlimited)
    -mb,  --max_bytes <size>         Max messages total size per channel (0 for unlimited)
    -ma,  --max_age <duration>       Max duration a message can be stored ("0s" for unlimited)
    -mi,  --max_inactivity <dur>     Delete a channel idle (no message, no subscription) that long
    -sc,  --stan_config <file>       Streaming server configuration file (its streaming {{}} block, or its top level)
    -hbi, --hb_interval <duration>   Interval at which server sends heartbeat to a client
    -hbt, --hb_timeout <duration>    How long server waits for a heartbeat response
    -hbf, --hb_fail_count <int>      Number of failed heartbeats before server closes the client connection
    -SD,  --stan_debug               Enable STAN debugging output
    -SV,  --stan_trace               Trace the raw STAN protocol
    -SDV                             Debug and trace STAN

Authorization Options:
        --user <user>                User required for connections
        --pass <password>            Password required for connections
        --auth <token>               Authorization token required for connections

TLS Options:
        --tls                        Enable TLS, do not verify clients (default: false)
        --tlscert <file>             Server certificate file
        --tlskey <file>              Private key for server certificate
        --tlsverify                  Enable TLS, verify client certificates
        --tlscacert <file>           Client certificate CA for verification

natserver extensions (same names as the config keys):
        --max_payload <size>         Maximum message payload (default: 1MB)
        --max_pending <size>         Maximum pending bytes per client (default: 64MB)
        --max_connections <n>        Maximum client connections (default: 65536)
        --max_control_line <size>    Maximum control line (default: 4096)
        --lame_duck_duration <dur>   Lame duck duration, no 30s minimum (default: 2m0s)
        --lame_duck_grace_period <dur> Lame duck grace period (default: 10s)

Accepted and ignored (natserver has no clustering, syslog or profiling):
    -ms, --https_port, --client_advertise, -s, --syslog, -r, --remote_syslog, --log_size_limit,
    --max_traced_msg_len, --routes, --cluster, --cluster_listen, --cluster_name,
    --no_advertise, --cluster_advertise, --connect_retries, --profile

Common Options:
    -h, --help                       Show this message
    -v, --version                    Show version
        --help_tls                   TLS help
"""


TLS_USAGE = """
TLS configuration is specified in the tls section of a configuration file:

e.g.

    tls {
        cert_file:      "./certs/server-cert.pem"
        key_file:       "./certs/server-key.pem"
        ca_file:        "./certs/ca.pem"
        verify:         true
        verify_and_map: true
        timeout:        2
    }

natserver uses Python's OpenSSL (TLS 1.2 and later, its own cipher suites and curves):
cipher_suites and curve_preferences are accepted and ignored.
"""


class UsageError(Exception):
    """A bad command line (or a failed -sl): reported in one line, exit code 1."""


@dataclass
class _Flag:
    dest: str
    kind: str  # "str", "int", "size", "duration", "bool"


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
_flag("l log", "log_file")
_flag("T logtime", "logtime", "bool")
_flag("D debug", "debug", "bool")
_flag("V trace", "trace", "bool")
_flag("VV", "trace_verbose", "bool")
_flag("DV", "debug_trace", "bool")
_flag("DVV", "debug_trace_verbose", "bool")
_flag("user", "username")
_flag("pass", "password")
_flag("auth", "authorization")
_flag("h help", "help", "bool")
_flag("v version", "version", "bool")
_flag("help_tls", "help_tls", "bool")
_flag("tls", "tls_enable", "bool")
_flag("tlscert", "tls_cert")
_flag("tlskey", "tls_key")
_flag("tlsverify", "tls_verify", "bool")
_flag("tlscacert", "tls_ca_cert")
_flag("js jetstream", "jetstream", "bool")
_flag("sd store_dir", "store_dir")
# NATS Streaming (nats-streaming-server's flags): collected under given["stan_flags"]
_flag("stan", "stan:enable", "bool")
_flag("cid cluster_id", "stan:cluster_id")
_flag("st store", "stan:store")
_flag("dir", "stan:dir")
_flag("mc max_channels", "stan:max_channels", "int")
_flag("msu max_subs", "stan:max_subs", "int")
_flag("mm max_msgs", "stan:max_msgs", "size")
_flag("mb max_bytes", "stan:max_bytes", "size")
_flag("ma max_age", "stan:max_age", "duration")
_flag("mi max_inactivity", "stan:max_inactivity", "duration")
_flag("sc stan_config", "stan:config_file")
_flag("hbi hb_i hb_interval", "stan:hb_interval", "duration")
_flag("hbt hb_t hb_timeout", "stan:hb_timeout", "duration")
_flag("hbf hb_f hb_fail_count", "stan:hb_fail_count", "int")
_flag("SD stan_debug", "stan:debug", "bool")
_flag("SV stan_trace", "stan:trace", "bool")
_flag("SDV", "stan:debug_trace", "bool")
# natserver extensions
_flag("max_payload", "max_payload", "size")
_flag("max_pending", "max_pending", "size")
_flag("max_connections", "max_connections", "int")
_flag("max_control_line", "max_control_line", "size")
_flag("lame_duck_duration", "lame_duck_duration", "duration")
_flag("lame_duck_grace_period", "lame_duck_grace_period", "duration")
# nats-server flags for features natserver does not have: accepted, kept, warned about.
for _name, _kind in (
    ("ms", "int"), ("https_port", "int"), ("client_advertise", "str"), ("s", "bool"),
    ("syslog", "bool"), ("r", "str"), ("remote_syslog", "str"), ("log_size_limit", "int"),
    ("max_traced_msg_len", "int"), ("routes", "str"), ("cluster", "str"),
    ("cluster_listen", "str"), ("cluster_name", "str"), ("no_advertise", "bool"),
    ("cluster_advertise", "str"), ("connect_retries", "int"), ("profile", "int"),
):  # fmt: skip
    _FLAGS[_name] = _Flag("unsupported:" + _name, _kind)

_GO_INT_RE = re.compile(r"[+-]?(0[xX][0-9a-fA-F_]+|0[oO][0-7_]+|0[bB][01_]+|0[0-7_]*|[1-9][0-9]*)")
_INT64 = 2**63


def _go_int(raw: str) -> int:
    """strconv.ParseInt(raw, 0, 64), as Go's flag.IntVar; ValueError("parse error" or
    "value out of range")."""
    if not _GO_INT_RE.fullmatch(raw):
        raise ValueError("parse error")
    sign = -1 if raw[0] == "-" else 1
    digits = raw.lstrip("+-")
    try:
        if digits[:2].lower() in ("0x", "0o", "0b"):
            value = int(digits, 0)
        elif len(digits) > 1 and digits[0] == "0":
            octal = digits[1:]
            value = int(octal[1:] if octal.startswith("_") else octal, 8)
        else:
            value = int(digits, 10)
    except ValueError:
        raise ValueError("parse error") from None
    value *= sign
    if not -_INT64 <= value < _INT64:
        raise ValueError("value out of range")
    return value


_GO_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_GO_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def _convert(name: str, flag: _Flag, raw: str):
    if flag.kind == "bool":
        if raw in _GO_TRUE:
            return True
        if raw in _GO_FALSE:
            return False
        raise UsageError(f'invalid boolean value "{raw}" for -{name}: parse error')
    if flag.kind == "int":
        try:
            return _go_int(raw)
        except ValueError as exc:
            raise UsageError(f'invalid value "{raw}" for flag -{name}: {exc}') from None
    if flag.kind == "size":
        from ._conf import to_int

        try:
            return to_int(raw)
        except (ValueError, TypeError):
            raise UsageError(f'invalid value "{raw}" for flag -{name}: parse error') from None
    if flag.kind == "duration":
        from ._conf import parse_duration

        try:
            return parse_duration(raw)
        except ValueError:
            raise UsageError(f'invalid value "{raw}" for flag -{name}: parse error') from None
    return raw


def parse_args(argv: list[str]) -> dict:
    """Go-flag-style parsing; returns {dest: value} for the flags given, in order.

    Arguments after the flags are commands, as for nats-server: ``version`` and ``help``
    (returned as ``{"version": True}``/``{"help": True}``); anything else is an error.
    """
    given: dict = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if len(arg) < 2 or arg[0] != "-":
            break  # the first non-flag argument ends the flags
        i += 1
        if arg == "--":
            break
        name = arg[2:] if arg.startswith("--") else arg[1:]
        if not name or name[0] in "-=":
            raise UsageError(f"bad flag syntax: {arg}")
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
        converted = _convert(name, flag, value)
        if flag.dest.startswith("unsupported:"):
            given.setdefault("unsupported", {})[name] = converted
        elif flag.dest.startswith("stan:"):
            given.setdefault("stan_flags", {})[flag.dest[5:]] = converted
        else:
            given[flag.dest] = converted
    for command in argv[i:]:
        # opts.go ProcessCommandLineArgs
        if command == "version":
            given["version"] = True
        elif command == "help":
            given["help"] = True
        else:
            raise UsageError(f'unrecognized command: "{command}"')
        break
    if "debug_trace" in given:
        value = given.pop("debug_trace")
        given["debug"] = given["trace"] = value
    if "debug_trace_verbose" in given:
        value = given.pop("debug_trace_verbose")
        given["debug"] = given["trace"] = value
    if "trace_verbose" in given:
        given["trace"] = given.pop("trace_verbose")
    return given


_OPTION_FIELDS = set(Options.__dataclass_fields__)


def build_options(given: dict, *, on_warnings=None) -> Options:
    """Options from the config file (if any), then the flags on top, as nats-server does.

    Raises ConfigError (syntax) or ConfigFileError (what nats-server reports while applying
    the file). A file with only warnings raises too unless ``on_warnings`` is given: it is
    called with the ConfigFileError and the options read despite the warnings are used.
    Options are not validated here (nats-server validates when the server is created).
    """
    from ._config import ConfigFileError, apply_baseline, options_from_file

    options = Options(auth_timeout=0.0)  # 0: the default (2 s, or the TLS timeout + 1 s)
    config_file = given.get("config_file")
    if config_file:
        try:
            options = options_from_file(config_file)
        except ConfigFileError as exc:
            if exc.errors or exc.options is None or on_warnings is None:
                raise
            on_warnings(exc)
            options = exc.options
    changes = {k: v for k, v in given.items() if k in _OPTION_FIELDS}
    if given.get("unsupported"):
        extra = dict(options.extra)
        extra["cli"] = dict(given["unsupported"])
        changes["extra"] = extra
    options = options.copy(**changes)
    options = _override_tls(options, given)
    if given.get("stan_flags"):  # streaming flags over the streaming {} block (natserver.stan)
        from .stan.config import StanConfigError, apply_flags

        try:
            options = options.copy(stan=apply_flags(options.stan, given["stan_flags"]))
        except StanConfigError as exc:
            raise UsageError(str(exc)) from None
    return apply_baseline(options)


_TLS_FLAGS = ("tls_enable", "tls_cert", "tls_key", "tls_verify", "tls_ca_cert")


def _override_tls(options: Options, given: dict) -> Options:
    """opts.go overrideTLS: any --tls* flag replaces the tls {} block (``--tls=false`` removes
    it); the TLS timeout of the file stays."""
    from ._tls import TLSConfig, TLSConfigError, server_context

    if not any(flag in given for flag in _TLS_FLAGS):
        return options
    if given.get("tls_enable") is False:
        return options.copy(tls=None)
    cert, key = given.get("tls_cert", ""), given.get("tls_key", "")
    if not cert:
        raise UsageError("TLS Server certificate must be present and valid")
    if not key:
        raise UsageError("TLS Server private key must be present and valid")
    timeout = options.tls.timeout if options.tls is not None else const.DEFAULT_TLS_TIMEOUT
    config = TLSConfig(cert_file=cert, key_file=key, ca_file=given.get("tls_ca_cert", ""),
                       verify=bool(given.get("tls_verify")), timeout=timeout)
    try:
        server_context(config)
    except TLSConfigError as exc:
        raise UsageError(str(exc)) from None
    return options.copy(tls=config)


def validate(options: Options) -> None:
    """server.go validateOptions, with nats-server's messages; ValueError."""
    from ._config import go_duration

    if options.lame_duck_duration > 0 and options.lame_duck_grace_period >= options.lame_duck_duration:
        raise ValueError(
            f"lame duck grace period ({go_duration(options.lame_duck_grace_period)}) should be strictly "
            f"lower than lame duck duration ({go_duration(options.lame_duck_duration)})"
        )
    options.validate()


# -- pid and ports files -----------------------------------------------------------------------


def write_pid_file(path: str) -> None:
    # server.go logPid: the pid without a new line, mode 0660; the file is left behind at exit.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o660)
    with os.fdopen(fd, "w") as f:
        f.write(str(os.getpid()))


def ports_file_path(directory: str) -> str:
    """server.go portFile: ``<dir>/<basename of argv[0]>_<pid>.ports``."""
    exe = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if exe in ("", "__main__.py", "-c", "-m"):
        exe = "natserver"  # python -m natserver
    return os.path.join(directory, f"{exe}_{os.getpid()}.ports")


def _url_host(host: str) -> str:
    if host in ("", "0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def write_ports_file(options: Options, server, monitor) -> str:
    """Write ``{"nats": [...], "monitoring": [...]}`` as nats-server does (server.go logPorts);
    atomically, so that a wrapper polling for the file never reads half of it."""
    path = ports_file_path(options.ports_file_dir)
    ports = {"nats": [f"nats://{_url_host(server.host)}:{server.port}"]}
    if monitor is not None:
        ports["monitoring"] = [f"http://{_url_host(options.http_host or server.host)}:{monitor.port}"]
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(ports, f, separators=(",", ":"))
    os.replace(tmp, path)
    return path


def remove_ports_file(path: str) -> None:
    try:
        os.unlink(path)
    except OSError as exc:
        log.error("Error cleaning up ports file %s: %s", path, exc)


# -- running -----------------------------------------------------------------------------------

# Go's names for the signals, as in nats-server's `Trapped "hangup" signal` debug line.
_SIGNAL_NAMES = {
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


async def run_server(options: Options, flags: dict | None = None) -> int:
    """Run until stopped (SIGINT, SIGTERM, lame duck); return the exit code (nats-server: 1
    after SIGTERM, 0 otherwise). Writes the pid and ports files; SIGHUP, SIGUSR1 and SIGUSR2
    go to ``Server.on_signal``."""
    from ._config import unsupported_warnings
    from ._log import configure_logging
    from ._server import Server

    server = Server(options)
    command_line = CommandLine(flags or {})
    server.command_line = command_line
    configure_logging(options)
    server._logging_configured = True
    _tune_gc()
    for line in unsupported_warnings(options):
        log.warning("%s", line)
    exit_code = 0
    signals_wanted = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
    with trio.open_signal_receiver(*signals_wanted) as signals:
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
            await nursery.start(serve)
            command_line.monitor = server.monitor  # started by the server, before its listener
            if options.ports_file_dir:
                command_line.ports_file = write_ports_file(options, server, command_line.monitor)
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
                        await _handle_signal(server, signum, nursery)
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


def _tune_gc() -> None:
    """The binary owns its process: collect less often (see GC_GEN0_THRESHOLD) and move the
    objects made at start (modules, functions, configuration) out of the collector's way, so
    the full collections that still happen walk only what the server made since."""
    _gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(const.GC_GEN0_THRESHOLD, gen1, gen2)
    gc.freeze()
    threshold, frozen = gc.get_threshold()[0], gc.get_freeze_count()
    log.debug("Garbage collection: generation 0 threshold %d, %d objects frozen", threshold, frozen)


async def _handle_signal(server, signum: int, nursery) -> None:
    handler = getattr(server, "on_signal", None)
    if handler is not None:
        await handler(signum, nursery)
    else:
        from ._signals import handle_signal

        await handle_signal(server, signum, nursery)


# -- -sl ---------------------------------------------------------------------------------------

_SIGNALS = {
    "stop": signal.SIGKILL,
    "quit": signal.SIGINT,
    "term": signal.SIGTERM,
    "reopen": signal.SIGUSR1,
    "reload": signal.SIGHUP,
    "ldm": signal.SIGUSR2,
}


def _go_errno_text(exc: OSError) -> str:
    text = exc.strerror or str(exc)
    return text[:1].lower() + text[1:]


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
        raise UsageError(_go_errno_text(exc)) from None


# -- main --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    from ._conf import ConfigError
    from ._config import ConfigFileError

    argv = sys.argv[1:] if argv is None else argv
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
            print(f"natserver: configuration file {options.config_file} is valid", file=sys.stderr)
            return 0
        validate(options)
    except (UsageError, ConfigError, ConfigFileError, ValueError) as exc:
        print(f"natserver: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"natserver: {exc}", file=sys.stderr)
        return 1
    try:
        return trio.run(run_server, options, given)
    except KeyboardInterrupt:
        return 0
    except OSError as exc:
        print(f"natserver: {exc}", file=sys.stderr)
        return 1
    except BaseExceptionGroup as group:  # noqa: F821 (3.11+, exceptiongroup on 3.10)
        # A listener that cannot be opened (port in use) fails the nursery.
        leaves = _leaves(group)
        if leaves and all(isinstance(exc, OSError) for exc in leaves):
            print(f"natserver: {leaves[0]}", file=sys.stderr)
            return 1
        raise


def _leaves(group) -> list:
    out = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])  # noqa: F821
    return out
