"""Server options: every setting with nats-server's name and default (see protocol/const.py), the
baseline that turns zero values into defaults (apply_baseline), and the two errors of reading a
configuration (ConfigError, ConfigFileError: raised by conf.py and mapping.py, which the command
line imports only for a config file)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..protocol import const
from ..protocol.gotext import go_duration
from .compression import LEAF_DEFAULT, LEAF_ON, ROUTE_DEFAULT, ROUTE_ON, CompressionOpts, normalize

if TYPE_CHECKING:
    from ..auth.tls import TLSConfig
    from .stan import StanOptions

# Everything in __all__ gets re-exported as part of natserver's public API.
__all__ = ["Options"]


@dataclass
class Options:
    """Settings of one server. Field names follow nats-server's config keys."""

    host: str = const.DEFAULT_HOST
    port: int = const.DEFAULT_PORT  # -1: a random free port (nats-server RANDOM_PORT)
    server_name: str = ""  # empty: the server id, as nats-server does
    max_payload: int = const.MAX_PAYLOAD_SIZE
    max_control_line: int = const.MAX_CONTROL_LINE_SIZE
    max_pending: int = const.MAX_PENDING_SIZE
    max_connections: int = const.DEFAULT_MAX_CONNECTIONS
    max_subscriptions: int = const.DEFAULT_MAX_SUBSCRIPTIONS  # 0: unlimited
    ping_interval: float = const.DEFAULT_PING_INTERVAL  # seconds
    ping_max: int = const.DEFAULT_PING_MAX_OUT
    write_deadline: float = const.DEFAULT_WRITE_DEADLINE  # seconds
    auth_timeout: float = const.DEFAULT_AUTH_TIMEOUT  # seconds
    headers: bool = True  # config: no_header_support (inverted)
    lame_duck_duration: float = const.DEFAULT_LAME_DUCK_DURATION
    lame_duck_grace_period: float = const.DEFAULT_LAME_DUCK_GRACE_PERIOD
    max_closed_clients: int = const.DEFAULT_MAX_CLOSED_CLIENTS
    # Seconds the server polls its sockets before sleeping after client messages (0: never;
    # None: the binary's const.DEFAULT_BUSY_POLL, off in-process). natserver's own key.
    busy_poll: float | None = None
    # Monitoring HTTP (0 = off; -1 = random port)
    http_host: str = ""
    http_port: int = 0
    # Authentication (see auth/users.py): one user, a token, or users (with passwords or nkeys)
    username: str = ""
    password: str = ""
    authorization: str = ""  # token
    users: list = field(default_factory=list)  # natserver.auth.users.User, from authorization.users
    nkeys: list = field(default_factory=list)  # natserver.auth.users.NkeyUser
    no_auth_user: str = ""  # the user a client without credentials becomes
    accounts: list = field(default_factory=list)  # natserver.routing.accounts.AccountConfig
    # Top-level subject mappings, for the global account: [(source, [routing.transform.MapDest])]
    mappings: list = field(default_factory=list)
    # Operator mode (decentralised JWT auth, see auth/jwt.py): operator JWTs (or files), the
    # resolver (only "MEMORY") and its preloaded account JWTs {account public key: JWT}
    trusted_operators: list = field(default_factory=list)
    trusted_keys: list = field(default_factory=list)
    resolver: str = ""
    resolver_preload: dict = field(default_factory=dict)
    system_account: str = ""  # empty: "$SYS" (or the operator JWT's system account)
    no_system_account: bool = False  # no system account: no $SYS events or requests
    # TLS for client connections (natserver.auth.tls.TLSConfig); allow_non_tls lets clients choose
    tls: TLSConfig | None = None
    allow_non_tls: bool = False
    # JetStream-shaped persisted streams (natserver.jetstream)
    jetstream: bool = False
    store_dir: str = ""  # empty: a "jetstream" directory under the system temp dir
    max_memory_store: int = -1  # -1: no limit (nats-server: 75 % of RAM)
    max_file_store: int = -1  # -1: no limit (nats-server: 1 TB or the disk)
    jetstream_domain: str = ""  # jetstream { domain }: $JS.<domain>.API.> is served too
    # jetstream { unique_tag }: a clustered stream's replicas go to servers with different values
    # of the server tag with this prefix (opts.go JetStreamUniqueTag, lower-cased, trimmed)
    jetstream_unique_tag: str = ""
    # server_tags: this server's tags (placement { tags }, lower-cased as nats-server keeps them)
    server_tags: list = field(default_factory=list)
    jetstream_cipher: str = ""  # jetstream { cipher }: "chacha" (the default with a key) or "aes"
    jetstream_key: str = ""  # jetstream { key }: encryption at rest (natserver.jetstream.crypto)
    # NATS Streaming (natserver.config.stan.StanOptions; None: off): --stan or a streaming {} block
    stan: StanOptions | None = None
    # The nsqd-compatible front-end (natserver.nsq): the nsq {} block; None: off
    nsq: dict | None = None
    # Clustering (natserver.cluster): the cluster {} block and --cluster/--routes flags. Routes
    # listen on cluster_host:cluster_port (0: no cluster; -1: a random port) and dial ``routes``
    # (nats-route://[user:pass@]host:port URLs).
    cluster_name: str = ""  # empty: one is made up, as nats-server does (a random id)
    cluster_host: str = const.DEFAULT_HOST
    cluster_port: int = 0
    routes: list = field(default_factory=list)
    cluster_no_advertise: bool = False  # do not tell clients about the other servers
    cluster_username: str = ""  # cluster { authorization { user, password } }
    cluster_password: str = ""
    cluster_connect_retries: int = 0  # 0: explicit routes are retried forever
    # cluster { pool_size }: route connections to each peer (0: the default, const.go
    # DEFAULT_ROUTE_POOL_SIZE; -1: no pooling, one route per peer as nats-server 2.9 has)
    cluster_pool_size: int = 0
    # cluster { accounts [...] }: accounts with a dedicated route to each peer (with pooling on,
    # the system account is added, as opts.go setBaselineOptions does)
    cluster_accounts: list = field(default_factory=list)
    # cluster { tls {} } (natserver.auth.tls.TLSConfig, verify forced on): every route is TLS,
    # the handshake first, each side checking the other's certificate against ca_file
    cluster_tls: TLSConfig | None = None
    # cluster { compression } (natserver.config.compression): how routes negotiate S2
    # compression (opts.go setBaselineOptions: "accept")
    cluster_compression: CompressionOpts = ROUTE_DEFAULT
    # The WebSocket listener (natserver.websocket): the websocket {} block; None: off
    websocket: "WebsocketOptions | None" = None
    # Leaf node remotes (natserver dials these hubs): [{"urls": [...], "account": "A"}]
    leafnode_remotes: list = field(default_factory=list)
    # Leaf nodes that dial us: leafnodes { listen } (0: none; -1: a random port)
    leafnode_host: str = const.DEFAULT_HOST
    leafnode_port: int = 0
    # leafnodes { reconnect }: seconds between a leaf's attempts to reach its hub
    leafnode_reconnect: float = const.DEFAULT_LEAF_NODE_RECONNECT
    # leafnodes { authorization { user, password, account, timeout, users [...] } }: what a leaf
    # that dials us must send, and the account it is then bound to. With neither a user nor
    # users, the server's own client authorization applies (auth.go isLeafNodeAuthorized).
    leafnode_username: str = ""
    leafnode_password: str = ""
    leafnode_account: str = ""  # empty: the global account
    leafnode_users: list = field(default_factory=list)  # natserver.auth.users.User (no permissions)
    leafnode_auth_timeout: float = 0.0  # seconds; 0: the auth timeout default (2 s; with TLS its timeout + 1 s)
    # leafnodes { tls {} } (natserver.auth.tls.TLSConfig): leaves that dial us get INFO, then TLS.
    # A remote's own tls {} is its dict's "tls".
    leafnode_tls: TLSConfig | None = None
    # leafnodes { compression }: what leaves that dial us negotiate (opts.go: "s2_auto"); a
    # remote's own is its dict's "compression" (the same default)
    leafnode_compression: CompressionOpts = LEAF_DEFAULT
    # Logging
    debug: bool = False
    trace: bool = False
    max_traced_msg_len: int = 0  # opts.go MaxTracedMsgLen: 0 traces whole payloads
    trace_headers: bool = False  # opts.go TraceHeaders (2.11+): trace only a message's headers
    logtime: bool = True
    log_file: str = ""
    quiet: bool = False  # no log output at all (in-process test servers)
    pid_file: str = ""
    ports_file_dir: str = ""
    config_file: str = ""
    # conf/parse.go configDigest (2.10+): "sha256:<hex>" of the parsed file, shown by -t, the
    # startup log and /varz config_digest; "" without a configuration file.
    config_digest: str = ""
    extra: dict = field(default_factory=dict)  # config keys we accept but do not act on

    @property
    def operator_mode(self) -> bool:
        """Trusted operators or keys: accounts and users come from JWTs (operator mode)."""
        return bool(self.trusted_operators or self.trusted_keys)

    @property
    def clustered(self) -> bool:
        """Routes are configured: a cluster listener or routes to dial."""
        return bool(self.cluster_port or self.routes)

    def copy(self, **changes) -> "Options":
        return dataclasses.replace(self, **changes)

    def validate(self) -> None:
        """Startup checks nats-server makes (server.go validateOptions)."""
        if self.max_payload > self.max_pending:
            raise ValueError(
                f"max_payload ({self.max_payload}) cannot be higher than max_pending ({self.max_pending})"
            )
        if self.port < -1 or self.port > 65535:
            raise ValueError(f"invalid port {self.port}")
        if self.lame_duck_grace_period >= self.lame_duck_duration and self.lame_duck_duration > 0:
            raise ValueError("lame duck grace period must be less than lame duck duration")
        if self.jetstream and self.clustered:
            # jetstream.go validateJetStreamOptions
            if not self.server_name:
                raise ValueError("jetstream cluster requires `server_name` to be set")
            if not self.cluster_name:
                raise ValueError("jetstream cluster requires `cluster.name` to be set")
        if self.websocket is not None and self.websocket.port and self.websocket.tls is None and not self.websocket.no_tls:
            raise ValueError("websocket requires TLS configuration")  # websocket.go validateWebsocketOptions
        if self.busy_poll is not None and not 0 <= self.busy_poll <= const.MAX_BUSY_POLL:
            raise ValueError(f"invalid busy_poll of {go_duration(self.busy_poll)}: from 0s to {go_duration(const.MAX_BUSY_POLL)}")
        if self.cluster_port < -1 or self.cluster_port > 65535:
            raise ValueError(f"invalid cluster port {self.cluster_port}")
        self.validate_security()
        self.validate_leafnodes()
        # server.go validateAndNormalizeCompressionOption (cluster, leafnodes, each remote)
        normalize(self.cluster_compression, ROUTE_ON)
        for opts in (self.leafnode_compression, *(r.get("compression") or LEAF_DEFAULT for r in self.leafnode_remotes)):
            normalize(opts, LEAF_ON)

    def validate_leafnodes(self) -> None:
        """leafnode.go validateLeafNode: the accounts leaf authorization binds to exist."""
        if self.trusted_operators:
            if self.leafnode_users:
                raise ValueError("operator mode does not allow specifying user in leafnode config")
            return
        known = {"$G", "$SYS", *(getattr(a, "name", "") for a in self.accounts)}
        if self.system_account:
            known.add(self.system_account)
        for name in (self.leafnode_account, *(u.account for u in self.leafnode_users)):
            if name and name not in known:
                raise ValueError(f'cannot find local account "{name}" specified in leafnode authorization')

    def validate_security(self) -> None:
        """auth.go validateAuth / validateNoAuthUser, jwt.go validateTrustedOperators."""
        if self.no_auth_user:
            if self.trusted_operators:
                raise ValueError("no_auth_user not compatible with Trusted Operator")
            # auth.go validateNoAuthUser (2.10+): a user or an nkey.
            if not self.users and not self.nkeys:
                raise ValueError(f'no_auth_user: "{self.no_auth_user}" present, but users/nkeys are not defined')
            if not any(u.username == self.no_auth_user for u in self.users) and not any(
                    n.nkey == self.no_auth_user for n in self.nkeys):
                raise ValueError(
                    f'no_auth_user: "{self.no_auth_user}" not present as user or nkey in authorization block or '
                    "account configuration"
                )
        if self.trusted_operators:
            if not self.resolver:
                raise ValueError("operators require an account resolver to be configured")
            if self.accounts:
                raise ValueError("operators do not allow Accounts to be configured directly")
            if self.users or self.nkeys:
                raise ValueError("operators do not allow users to be configured directly")
            if self.trusted_keys:
                raise ValueError("conflicting options for 'TrustedKeys' and 'TrustedOperators'")


# websocket.go: no handshake_timeout means no deadline in nats-server (http.Server ReadTimeout 0);
# natserver bounds the HTTP upgrade anyway, so a silent connection cannot hold a slot forever.
WEBSOCKET_HANDSHAKE_TIMEOUT = 10.0


@dataclass
class WebsocketOptions:
    """The websocket {} block (opts.go parseWebsocket): a listener for NATS over WebSocket."""

    host: str = const.DEFAULT_HOST
    port: int = 0  # 0: no listener; -1: a random port
    no_tls: bool = False  # nats-server refuses a websocket listener without TLS unless this is set
    tls: TLSConfig | None = None
    same_origin: bool = False
    allowed_origins: list = field(default_factory=list)
    handshake_timeout: float = 0.0  # 0: WEBSOCKET_HANDSHAKE_TIMEOUT
    compression: bool = False  # permessage-deflate when the client offers it
    advertise: str = ""


class ConfigError(Exception):
    """A configuration that cannot be read or parsed.

    ``line`` and ``column`` are 1-based; they are None only when the file
    itself could not be read. ``path`` is None for text given to :func:`parse`
    without a path.
    """

    def __init__(
        self,
        reason: str,
        *,
        path: str | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path = path
        self.line = line
        self.column = column

    def __str__(self) -> str:
        where = self.path if self.path is not None else "config"
        if self.line is None:
            return f"{where}: {self.reason}"
        return f"{where}:{self.line}:{self.column}: {self.reason}"

    def __reduce__(self):
        # Keep path/line/column when the error crosses a process boundary.
        return (self.__class__, (self.reason,), self.__dict__)


class ConfigFileError(ValueError):
    """Errors and warnings found while applying a configuration file (nats-server's
    ``processConfigErr``). ``str()`` is nats-server's text: warnings first, then errors,
    each followed by a new line. ``options`` holds the result when there are only warnings.
    """

    def __init__(self, errors: list[str], warnings: list[str] | None = None, options: Options | None = None):
        self.errors = list(errors)
        self.warnings = list(warnings or [])
        self.options = options
        super().__init__(str(self))

    def __str__(self) -> str:
        return "".join(line + "\n" for line in self.warnings + self.errors)


def apply_baseline(options: Options, *, http_host: bool = True) -> Options:
    """nats-server's setBaselineOptions: zero values mean the defaults; port 0 is 4222."""
    defaults = {
        "host": ("", const.DEFAULT_HOST),
        "port": (0, const.DEFAULT_PORT),
        "max_connections": (0, const.DEFAULT_MAX_CONNECTIONS),
        "ping_interval": (0, const.DEFAULT_PING_INTERVAL),
        "ping_max": (0, const.DEFAULT_PING_MAX_OUT),
        "auth_timeout": (0, const.DEFAULT_AUTH_TIMEOUT),
        "max_control_line": (0, const.MAX_CONTROL_LINE_SIZE),
        "max_payload": (0, const.MAX_PAYLOAD_SIZE),
        "max_pending": (0, const.MAX_PENDING_SIZE),
        "write_deadline": (0, const.DEFAULT_WRITE_DEADLINE),
        "max_closed_clients": (0, const.DEFAULT_MAX_CLOSED_CLIENTS),
        "lame_duck_duration": (0, const.DEFAULT_LAME_DUCK_DURATION),
        "lame_duck_grace_period": (0, const.DEFAULT_LAME_DUCK_GRACE_PERIOD),
    }
    changes = {name: default for name, (zero, default) in defaults.items() if getattr(options, name) == zero}
    if options.auth_timeout == 0 and options.tls is not None:
        # opts.go getDefaultAuthTimeout: with TLS, the TLS timeout plus one second.
        timeout = options.tls.timeout if options.tls.timeout > 0 else const.DEFAULT_TLS_TIMEOUT
        changes["auth_timeout"] = timeout + 1.0
    if http_host and not options.http_host:
        changes["http_host"] = changes.get("host", options.host)
    return options.copy(**changes) if changes else options
