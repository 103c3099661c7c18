"""STAN settings: :class:`StanOptions`, with nats-streaming-server's (v0.25.6) defaults as named
constants, built from a ``streaming {}`` configuration block or the command line flags.

The configuration block takes nats-streaming-server's keys (``cluster_id``/``id``, ``store``,
``dir``, ``sd``/``debug``, ``sv``/``trace``, ``hb_interval``, ``hb_timeout``, ``hb_fail_count``,
``discover_prefix``, ``store_limits { max_channels, max_msgs, max_bytes, max_age, max_subs,
max_inactivity, channels { "name": {...} } }``); the limits may also be written directly in the
block. ``nats_server_url``/``ns`` (with ``credentials``, ``nkey_seed_file``, ``username``,
``password``, ``token``, ``secure`` and ``tls { client_cert, client_key, client_ca, server_name,
skip_verify }``) makes the engine a client of that NATS server, as ``-ns`` does. Keys
nats-streaming-server knows that natserver does not act on (clustering, partitioning, fault
tolerance, SQL, encryption...) are refused when they would change storage or safety
(``cluster``, ``ft_group``, ``partitioning``, ``sql_options``, ``store: sql``) and warned about
otherwise.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from ..protocol.gotext import parse_duration
from .conf import ConfigError, parse_file, to_int

# server.go clientIDRegEx: client ids, and the cluster id, follow it.
CLIENT_ID_RE = re.compile(r"[A-Za-z0-9_-]+")

__all__ = ["StanOptions", "ChannelLimits", "StanConfigError"]

DEFAULT_CLUSTER_ID = "test-cluster"  # server.go DefaultClusterID
DEFAULT_DISCOVER_PREFIX = "_STAN.discover"  # server.go DefaultDiscoverPrefix
DEFAULT_STORE = "memory"  # server.go DefaultStoreType (stores.TypeMemory)
# stores/store.go DefaultStoreLimits
DEFAULT_MAX_CHANNELS = 100
DEFAULT_MAX_MSGS = 1_000_000
DEFAULT_MAX_BYTES = 1_000_000 * 1024
DEFAULT_MAX_AGE = 0.0  # seconds; 0: unlimited
DEFAULT_MAX_SUBS = 1000
DEFAULT_MAX_INACTIVITY = 0.0  # seconds; 0: channels are never deleted for inactivity
# server.go heartbeats to clients
DEFAULT_HB_INTERVAL = 30.0  # DefaultHeartBeatInterval
DEFAULT_HB_TIMEOUT = 10.0  # DefaultClientHBTimeout
DEFAULT_HB_FAIL_COUNT = 10  # DefaultMaxFailedHeartBeats = 5 min / 30 s
DUP_CLIENT_ID_TIMEOUT = 0.5  # server.go defaultCheckDupCIDTimeout
# natserver's bound on registered clients (nats-streaming-server has none; each client costs a
# heartbeat task): nats-server's default max_connections, as one connection per client is usual
DEFAULT_MAX_CLIENTS = 64 * 1024
# natserver's bound on the messages one event (a publish, an ack, a subscribe) sends to one
# subscription or queue group, so that a huge maxInFlight cannot stall the server in one go;
# the rest follows with the next event (an ack, a publish, a redelivery).
MAX_DELIVERIES_PER_EVENT = 65536


_LIMIT_KEYS = ("max_msgs", "max_bytes", "max_age", "max_subs", "max_inactivity")


def _channel_matches(pattern: str, channel: str) -> bool:
    """NATS subject matching: ``*`` one token, ``>`` the rest (at least one token)."""
    p, c = pattern.split("."), channel.split(".")
    for i, token in enumerate(p):
        if token == ">":
            return len(c) > i
        if i >= len(c) or (token != "*" and token != c[i]):
            return False
    return len(p) == len(c)


class StanConfigError(ValueError):
    """A streaming setting that cannot be used (the server does not start)."""


@dataclass
class ChannelLimits:
    """Limits of one channel (0 = unlimited), as stores.ChannelLimits."""

    max_msgs: int = DEFAULT_MAX_MSGS
    max_bytes: int = DEFAULT_MAX_BYTES
    max_age: float = DEFAULT_MAX_AGE
    max_subs: int = DEFAULT_MAX_SUBS
    max_inactivity: float = DEFAULT_MAX_INACTIVITY


@dataclass
class StanOptions:
    """Settings of the streaming layer. ``limits`` applies to every channel; ``channels`` maps a
    channel name to its own limits (values left at 0 there inherit the global ones, as
    nats-streaming-server does)."""

    cluster_id: str = DEFAULT_CLUSTER_ID
    discover_prefix: str = DEFAULT_DISCOVER_PREFIX
    store: str = DEFAULT_STORE  # "memory" or "file"
    dir: str = ""  # required with store "file"
    max_channels: int = DEFAULT_MAX_CHANNELS
    max_clients: int = DEFAULT_MAX_CLIENTS  # natserver extension; 0: unlimited
    limits: ChannelLimits = field(default_factory=ChannelLimits)
    channels: dict = field(default_factory=dict)  # name -> ChannelLimits
    hb_interval: float = DEFAULT_HB_INTERVAL
    hb_timeout: float = DEFAULT_HB_TIMEOUT
    hb_fail_count: int = DEFAULT_HB_FAIL_COUNT
    dup_client_id_timeout: float = DUP_CLIENT_ID_TIMEOUT
    debug: bool = False
    trace: bool = False
    warnings: list = field(default_factory=list)  # settings accepted but not acted on
    # The external NATS server the engine is a client of (nats-streaming-server -ns, server.go
    # buildServerURLs and createNatsClientConn); empty: natserver's own. The core's --user,
    # --pass and --auth come first, as nats-streaming-server's command line does.
    nats_server_url: str = ""  # -ns: "nats://host:port", a comma-separated list, user:pass@ allowed
    credentials: str = ""  # a .creds file (JWT and nkey seed)
    nkey_seed_file: str = ""
    username: str = ""
    password: str = ""
    token: str = ""
    secure: bool = False  # -secure: TLS to the NATS server without verification
    tls_client_cert: str = ""  # -tls_client_cert / tls { client_cert }
    tls_client_key: str = ""  # -tls_client_key / tls { client_key }
    tls_client_ca: str = ""  # -tls_client_cacert / tls { client_ca }
    tls_server_name: str = ""  # tls { server_name }
    tls_skip_verify: bool = False  # tls { skip_verify }

    def copy(self, **changes) -> "StanOptions":
        return dataclasses.replace(self, **changes)

    def validate(self) -> None:
        if not self.cluster_id or not CLIENT_ID_RE.fullmatch(self.cluster_id):
            # nats-streaming-server: the cluster id follows the client id rule
            raise StanConfigError(f"invalid cluster name {self.cluster_id!r}, only alphanumeric and `-` or `_` "
                                  "characters allowed")
        if self.store not in ("memory", "file"):
            raise StanConfigError(f"unsupported store type {self.store!r} (natserver has memory and file)")
        if self.store == "file" and not self.dir:
            raise StanConfigError("for file store type, the directory must be specified with --dir")
        for value, name in ((self.hb_interval, "hb_interval"), (self.hb_timeout, "hb_timeout")):
            if value <= 0:
                raise StanConfigError(f"{name} must be positive")
        if self.hb_fail_count < 1:
            raise StanConfigError("hb_fail_count must be at least 1")
        for name, limits in (("", self.limits), *self.channels.items()):
            for key in ("max_msgs", "max_bytes", "max_age", "max_subs", "max_inactivity"):
                if getattr(limits, key) < 0:
                    where = f"channel {name!r}: " if name else ""
                    raise StanConfigError(f"{where}{key} can't be negative")
        if self.max_channels < 0:
            raise StanConfigError("max_channels can't be negative")
        if self.max_clients < 0:
            raise StanConfigError("max_clients can't be negative")
        if bool(self.tls_client_cert) != bool(self.tls_client_key):
            raise StanConfigError("a TLS client certificate needs its key (tls_client_cert and tls_client_key)")

    def limits_for(self, channel: str) -> ChannelLimits:
        """The channel's limits: the global ones, overridden by every per-channel entry whose
        name (literal, or with ``*``/``>`` wildcards) matches it, the least specific first, a
        literal last; zeros inherit, as stores.StoreLimits.Build does."""
        matching = [(name, lim) for name, lim in self.channels.items() if _channel_matches(name, channel)]
        if not matching:
            return self.limits
        matching.sort(key=lambda item: (item[0] == channel, item[0].count("."), -item[0].count("*")))
        values = {key: getattr(self.limits, key) for key in _LIMIT_KEYS}
        for _, lim in matching:
            for key in _LIMIT_KEYS:
                if getattr(lim, key):
                    values[key] = getattr(lim, key)
        return ChannelLimits(**values)

    # -- configuration file -------------------------------------------------------------------

    @classmethod
    def from_config(cls, block: dict) -> "StanOptions":
        """From a parsed ``streaming {}`` block; raises StanConfigError."""
        if not isinstance(block, dict):
            raise StanConfigError("streaming: expected a map")
        options = cls()
        for key, value in block.items():
            options._apply(key.lower(), key, value)
        options.validate()
        return options

    def _apply(self, name: str, key: str, value) -> None:
        if name in ("id", "cluster_id", "cid"):
            self.cluster_id = _str(value, key)
        elif name == "discover_prefix":
            self.discover_prefix = _str(value, key)
        elif name in ("store", "store_type"):
            self.store = _str(value, key).lower()
        elif name in ("dir", "datastore"):
            self.dir = _str(value, key)
        elif name in ("sd", "debug", "stan_debug"):
            self.debug = _bool(value, key)
        elif name in ("sv", "trace", "stan_trace"):
            self.trace = _bool(value, key)
        elif name in ("hb_interval", "hb_i"):
            self.hb_interval = _duration(value, key)
        elif name in ("hb_timeout", "hb_t"):
            self.hb_timeout = _duration(value, key)
        elif name in ("hb_fail_count", "hb_f"):
            self.hb_fail_count = _int(value, key)
        elif name == "max_clients":
            self.max_clients = _int(value, key)
        elif name in ("store_limits", "limits"):
            if not isinstance(value, dict):
                raise StanConfigError(f"{key}: expected a map")
            for k, v in value.items():
                self._apply_limit(k.lower(), k, v)
        elif name in ("max_channels", "mc", "max_msgs", "mm", "max_bytes", "mb", "max_age", "ma", "max_subs",
                      "max_subscriptions", "msu", "max_inactivity", "mi", "channels"):
            self._apply_limit(name, key, value)
        elif name in ("cluster", "clustering", "ft_group", "partitioning", "sql", "sql_options"):
            raise StanConfigError(f"streaming: {key!r} (clustering, fault tolerance, partitioning, SQL) is not "
                                  "supported by natserver")
        elif name in ("ns", "nats_server", "nats_server_url"):  # conf.go ProcessConfigFile
            self.nats_server_url = _str(value, key)
        elif name == "credentials":
            self.credentials = _str(value, key)
        elif name == "nkey_seed_file":
            self.nkey_seed_file = _str(value, key)
        elif name in ("username", "user"):
            self.username = _str(value, key)
        elif name in ("password", "pass"):
            self.password = _str(value, key)
        elif name == "token":
            self.token = _str(value, key)
        elif name == "secure":
            self.secure = _bool(value, key)
        elif name == "tls":
            self._apply_tls(key, value)
        elif name in ("file", "file_options", "encrypt", "encryption_cipher", "encryption_key",
                      "replace_durable", "ack_subs_pool_size", "client_hb_interval", "syslog_name"):
            self.warnings.append(f'Streaming option "{key}" is not supported by natserver and is ignored')
        else:
            raise StanConfigError(f'streaming: unknown field "{key}"')

    def _apply_tls(self, key: str, block) -> None:
        """conf.go parseTLS: the TLS settings of the connection to the NATS server."""
        if not isinstance(block, dict):
            raise StanConfigError(f"expected TLS to be a map/struct, got {block!r}")
        for k, v in block.items():
            name = k.lower()
            if name == "client_cert":
                self.tls_client_cert = _str(v, k)
            elif name == "client_key":
                self.tls_client_key = _str(v, k)
            elif name in ("client_ca", "client_cacert"):
                self.tls_client_ca = _str(v, k)
            elif name in ("server_name", "server_hostname"):
                self.tls_server_name = _str(v, k)
            elif name in ("skip_verify", "insecure"):
                self.tls_skip_verify = _bool(v, k)
            else:
                raise StanConfigError(f'streaming {key}: unknown field "{k}"')

    def _apply_limit(self, name: str, key: str, value) -> None:
        if name in ("max_channels", "mc"):
            self.max_channels = _int(value, key)
        elif name == "channels":
            if not isinstance(value, dict):
                raise StanConfigError(f"{key}: expected a map of channel names to limits")
            for channel, spec in value.items():
                if not isinstance(spec, dict):
                    raise StanConfigError(f"{key}.{channel}: expected a map")
                limits = ChannelLimits(0, 0, 0.0, 0, 0.0)
                for k, v in spec.items():
                    _set_limit(limits, k.lower(), k, v)
                self.channels[channel] = limits
        else:
            _set_limit(self.limits, name, key, value)


def _set_limit(limits: ChannelLimits, name: str, key: str, value) -> None:
    if name in ("max_msgs", "mm"):
        limits.max_msgs = _int(value, key)
    elif name in ("max_bytes", "mb"):
        limits.max_bytes = _int(value, key)
    elif name in ("max_age", "ma"):
        limits.max_age = _duration(value, key)
    elif name in ("max_subs", "max_subscriptions", "msu"):
        limits.max_subs = _int(value, key)
    elif name in ("max_inactivity", "mi"):
        limits.max_inactivity = _duration(value, key)
    else:
        raise StanConfigError(f'streaming limits: unknown field "{key}"')


def _str(value, key: str) -> str:
    if not isinstance(value, str):
        raise StanConfigError(f"{key}: expected a string, got {value!r}")
    return value


def _bool(value, key: str) -> bool:
    if not isinstance(value, bool):
        raise StanConfigError(f"{key}: expected true or false, got {value!r}")
    return value


def _int(value, key: str) -> int:
    try:
        return to_int(value)
    except ValueError as exc:
        raise StanConfigError(f"{key}: {exc}") from None


def _duration(value, key: str) -> float:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise StanConfigError(f"{key}: {exc}") from None


def from_file(path: str) -> StanOptions:
    """nats-streaming-server's ``-sc`` file: its ``streaming {}`` block, or, without one, its
    top-level keys."""
    try:
        conf = parse_file(path)
    except (ConfigError, OSError) as exc:
        raise StanConfigError(f"streaming configuration file {path!r}: {exc}") from None
    for key, value in conf.items():
        if key.lower() == "streaming":
            return StanOptions.from_config(value)
    return StanOptions.from_config(conf)


def apply_flags(base: StanOptions | None, flags: dict) -> StanOptions | None:
    """nats-streaming-server's command line flags over the ``streaming {}`` block (or the
    defaults). Any streaming flag enables streaming except ``--stan=false``, which turns it off."""
    if flags.get("enable") is False:
        return None
    if flags.get("config_file"):
        base = from_file(flags["config_file"])
    options = (base or StanOptions()).copy(limits=dataclasses.replace((base or StanOptions()).limits))
    for name, value in flags.items():
        if name in ("enable", "config_file"):
            continue
        if name == "debug_trace":
            options.debug = options.trace = value
        elif name == "store":
            options.store = value.lower()
        elif name in ("cluster_id", "dir", "debug", "trace", "hb_interval", "hb_timeout", "hb_fail_count",
                      "max_channels", "nats_server_url", "secure", "tls_client_cert", "tls_client_key",
                      "tls_client_ca"):
            setattr(options, name, value)
        else:
            setattr(options.limits, name, value)
    options.validate()
    return options
