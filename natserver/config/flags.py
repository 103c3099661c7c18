"""``natserver``: the command line, a drop-in for nats-server's (v2.9.10, ``server/opts.go``
``ConfigureOptions`` and ``main.go``).

nats-server uses Go's flag package, so ``-p 4222``, ``-p=4222``, ``--port 4222`` and ``-port 4222``
all mean the same and booleans take ``-D`` or ``-D=false``. argparse cannot express that (nor
multi-letter single-dash names like ``-DV``), so the flags are a small table parsed here, with
Go's rules and error texts. Differences, on purpose:

* a bad command line prints one line and exits 1 (nats-server prints the usage and exits 0);
* nats-server flags for features natserver does not have (syslog, profiling, ...) are
  accepted and ignored with a warning, as their config keys are;
* nats-streaming-server's flags (``--stan``, ``-cid``, ``-ns``...: natserver.config.stan) and
  the NSQ front-end's ports (``--nsq_port``, ``--nsq_http_port``) are natserver's too;
* a few natserver extensions (limits and lame duck timings) have flags, for tests and wrappers.

Order of work, as nats-server: ``-v``/``-h``, commands, ``-sl``, the config file, then the
flags on top of it; ``-t`` stops after reading the config file.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

from ..auth.tls import TLSConfig, TLSConfigError, server_context
from ..protocol import const
from ..protocol.gotext import go_duration, parse_duration
from .options import ConfigFileError, Options, apply_baseline

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
        --max_traced_msg_len <len>   Maximum printable length for traced messages (default: 0, unlimited)

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
    -ns,  --nats_server <url>        Serve streaming as a client of this NATS server (then no NATS listener here)
          --secure                   Use TLS to that NATS server, without verification
          --tls_client_key <file>    Client key for the connection to that NATS server
          --tls_client_cert <file>   Client certificate for the connection to that NATS server
          --tls_client_cacert <file> CA to verify that NATS server's certificate with

NSQ Options (an nsqd-compatible front-end, see natserver/nsq; or an nsq {{}} block):
        --nsq_port <port>            nsqd's TCP port for NSQ clients (-1 for random; nsqd: 4150)
        --nsq_http_port <port>       nsqd's HTTP API port (-1 for random; nsqd: 4151)

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
        --busy_poll <dur>            Poll this long before sleeping after messages, 0 never (default: 100us)

Cluster Options:
        --routes <rurl-1, rurl-2>    Routes to solicit and connect
        --cluster <cluster-url>      Cluster URL for solicited routes
        --cluster_listen <url>       Cluster URL for solicited routes
        --cluster_name <string>      Cluster Name, if not set one will be dynamically generated
        --no_advertise <bool>        Do not advertise known cluster information to clients

Accepted and ignored with a warning (natserver has no syslog or profiling):
    --client_advertise, -s, --syslog, -r, --remote_syslog, --log_size_limit,
    --cluster_advertise, --connect_retries, --profile
Refused (a listener natserver does not have): -ms, --https_port

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
_flag("max_traced_msg_len", "max_traced_msg_len", "int")
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
_flag("ns nats_server", "stan:nats_server_url")
_flag("secure", "stan:secure", "bool")
_flag("tls_client_key", "stan:tls_client_key")
_flag("tls_client_cert", "stan:tls_client_cert")
_flag("tls_client_cacert", "stan:tls_client_ca")
_flag("nsq_port", "nsq_port", "int")  # natserver.nsq: nsqd's TCP port (-1 for random)
_flag("nsq_http_port", "nsq_http_port", "int")  # natserver.nsq: nsqd's HTTP port
_flag("cluster cluster_listen", "cluster_url")
_flag("routes", "routes_flag")
_flag("cluster_name", "cluster_name")
_flag("no_advertise", "cluster_no_advertise", "bool")
# natserver extensions
_flag("max_payload", "max_payload", "size")
_flag("max_pending", "max_pending", "size")
_flag("max_connections", "max_connections", "int")
_flag("max_control_line", "max_control_line", "size")
_flag("lame_duck_duration", "lame_duck_duration", "duration")
_flag("lame_duck_grace_period", "lame_duck_grace_period", "duration")
_flag("busy_poll", "busy_poll", "duration")
# nats-server flags for features natserver does not have: accepted, kept, warned about.
for _name, _kind in (
    ("ms", "int"), ("https_port", "int"), ("client_advertise", "str"), ("s", "bool"),
    ("syslog", "bool"), ("r", "str"), ("remote_syslog", "str"), ("log_size_limit", "int"),
    ("cluster_advertise", "str"), ("connect_retries", "int"), ("profile", "int"),
):  # fmt: skip
    _FLAGS[_name] = _Flag("unsupported:" + _name, _kind)
# Of those, the ones whose absence would mislead (a listener that would not exist): refused.
_REFUSED_FLAGS = {
    "ms": "HTTPS monitoring listener", "https_port": "HTTPS monitoring listener",
}

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
        from .conf import to_int  # the config file's size syntax (1MB, 64k); see build_options

        try:
            return to_int(raw)
        except (ValueError, TypeError):
            raise UsageError(f'invalid value "{raw}" for flag -{name}: parse error') from None
    if flag.kind == "duration":
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
    options = Options(auth_timeout=0.0)  # 0: the default (2 s, or the TLS timeout + 1 s)
    config_file = given.get("config_file")
    if config_file:
        # Imported only for a config file: the mapping of every config key (auth, accounts,
        # JWTs, TLS blocks) is not needed by a start with flags alone.
        from .mapping import options_from_file

        try:
            options = options_from_file(config_file)
        except ConfigFileError as exc:
            if exc.errors or exc.options is None or on_warnings is None:
                raise
            on_warnings(exc)
            options = exc.options
    changes = {k: v for k, v in given.items() if k in _OPTION_FIELDS}
    for flag in given.get("unsupported") or {}:
        if flag in _REFUSED_FLAGS:
            raise UsageError(f"flag -{flag} ({_REFUSED_FLAGS[flag]}) is not supported by natserver: refusing to run "
                             "without it")
    if given.get("unsupported"):
        extra = dict(options.extra)
        extra["cli"] = dict(given["unsupported"])
        changes["extra"] = extra
    nsq_flags = {k[4:]: given[k] for k in ("nsq_port", "nsq_http_port") if k in given}
    if nsq_flags:  # the NSQ flags go into the nsq {} block, over the file's values
        changes["nsq"] = {**(options.nsq or {}), **nsq_flags}
    options = options.copy(**changes)
    options = _override_tls(options, given)
    if given.get("stan_flags"):  # streaming flags over the streaming {} block (natserver.stan)
        from .stan import StanConfigError, apply_flags

        try:
            options = options.copy(stan=apply_flags(options.stan, given["stan_flags"]))
        except StanConfigError as exc:
            raise UsageError(str(exc)) from None
    options = _override_cluster(options, given)
    return apply_baseline(options)


def _override_cluster(options: Options, given: dict) -> Options:
    """opts.go overrideCluster: --cluster nats://host:port (user:pass@ sets the route
    authorization) and --routes url,url replace the file's settings."""
    changes: dict = {}
    if given.get("cluster_url"):
        url = urllib.parse.urlsplit(given["cluster_url"])
        try:
            port = url.port
        except ValueError:
            raise UsageError(f"invalid cluster url {given['cluster_url']!r}") from None
        if not url.hostname or port is None:
            raise UsageError(f"invalid cluster url {given['cluster_url']!r}")
        changes.update(cluster_host=url.hostname, cluster_port=port)
        if url.username:
            changes.update(cluster_username=urllib.parse.unquote(url.username),
                           cluster_password=urllib.parse.unquote(url.password or ""))
    if given.get("routes_flag"):
        changes["routes"] = [r.strip() for r in given["routes_flag"].split(",") if r.strip()]
    return options.copy(**changes) if changes else options


_TLS_FLAGS = ("tls_enable", "tls_cert", "tls_key", "tls_verify", "tls_ca_cert")


def _override_tls(options: Options, given: dict) -> Options:
    """opts.go overrideTLS: any --tls* flag replaces the tls {} block (``--tls=false`` removes
    it); the TLS timeout of the file stays."""
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
    if options.lame_duck_duration > 0 and options.lame_duck_grace_period >= options.lame_duck_duration:
        raise ValueError(
            f"lame duck grace period ({go_duration(options.lame_duck_grace_period)}) should be strictly "
            f"lower than lame duck duration ({go_duration(options.lame_duck_duration)})"
        )
    options.validate()
