"""nats-server configuration files as :class:`natserver.Options`.

``options_from_file("nats.conf")`` reads a file with the parser in ``conf.py`` and maps
nats-server's keys (``server/opts.go`` ``processConfigFileLine`` in v2.9.10) onto Options:

* keys are matched case-insensitively, as nats-server does (``PORT: 4222`` is ``port``);
* the blocks natserver implements (``authorization``, ``accounts``, ``tls``, ``jetstream``,
  ``cluster``, ``leafnodes``, ``websocket``, ``streaming``, ``nsq``, operators and resolvers...)
  become Options; a member of them natserver does not act on is handled as a key below;
* keys nats-server knows whose absence is harmless (:data:`UNSUPPORTED_KEYS`:
  ``syslog``, ``jetstream { limits }``...) are accepted, kept in ``Options.extra`` and listed by
  :func:`unsupported_warnings` so that the server logs one warning line per key;
* keys whose absence would mislead (:data:`REFUSED_KEYS`: ``gateway``, ``mqtt``, ``https``...;
  security members of ``leafnodes``, ``websocket`` and ``cluster`` natserver does not apply)
  are errors: ``-t`` fails and the server does not start, with one line naming the key;
* a key nats-server does not know is an error ``<file>:<line>:<col>: unknown field "foo"``
  (unless the key is used as a ``$variable``, as nats-server allows), collected together with
  the other errors of the file, exactly as nats-server reports them (``processConfigErr``);
* a few values are warnings rather than errors, as in nats-server (a duration written as a
  bare number of seconds): they come back in :class:`ConfigFileError` too, because ``-t`` and
  reloads fail on them, while a normal start prints them and goes on (``exc.options``).

Positions follow nats-server's token positions: the line is 1-based, and so is the column,
except on the first line of a file, where nats-server's lexer counts from 0. We reproduce
that quirk so that error lines are byte-for-byte the same.

natserver extensions: ``max_closed_clients`` (nats-server 2.9.10 only has it as a Go option),
``busy_poll`` (a duration: how long the server polls before sleeping, natserver.server.busypoll),
the ``streaming {}`` block (nats-streaming-server's keys) and ``nsq {}``. Every key nats-server
knows is acted on, warned about or refused: none is dropped silently.
"""

from __future__ import annotations

import os
import re

from ..auth import jwt
from ..auth.nkeys import is_valid_public_key
from ..auth.tls import TLSConfigError, client_context, parse_tls_block, server_context
from ..auth.users import NkeyUser, Permissions, User
from ..protocol import const
from ..protocol.gotext import go_duration, go_duration_error, go_type_name, parse_duration
from ..routing.accounts import CHUNKED, SINGLETON, STREAMED, AccountConfig, ExportConfig, ImportConfig, check_accounts
from ..routing.sublist import is_valid_literal_subject, is_valid_subject
from ..routing.transform import MapDest, MappingError, SubjectMappings
from . import compression, conf

# ConfigFileError and apply_baseline live in options.py, which the command line imports
# without this module when there is no config file; they are still importable from here.
from .options import ConfigFileError, Options, WebsocketOptions, apply_baseline
from .stan import StanConfigError, StanOptions

__all__ = [
    "ConfigFileError",
    "options_from_file",
    "options_from_dict",
    "parse_config_file",
    "unsupported_warnings",
    "apply_baseline",
    "go_duration",
]

_INT32_MAX = 2**31 - 1


# -- where each key was written ---------------------------------------------------------------


class _Locations:
    """Positions of the keys of every map the parser built, and the keys used as variables."""

    def __init__(self) -> None:
        self.keys: dict[int, dict[str, tuple[str, int, int]]] = {}
        self.used: set[tuple[int, str]] = set()
        self._alive: list = []  # keeps the maps alive so that their ids stay theirs

    def record(self, mapping: dict, key: str, where: tuple[str, int, int]) -> None:
        table = self.keys.get(id(mapping))
        if table is None:
            table = self.keys[id(mapping)] = {}
            self._alive.append(mapping)
        table[key] = where

    def merge(self, into: dict, source: dict) -> None:
        table = self.keys.get(id(source))
        if table:
            for key, where in table.items():
                self.record(into, key, where)
        for map_id, key in list(self.used):
            if map_id == id(source):
                self.used.add((id(into), key))

    def where(self, mapping: dict, key: str) -> tuple[str, int, int] | None:
        return self.keys.get(id(mapping), {}).get(key)

    def is_used_variable(self, mapping: dict, key: str) -> bool:
        return (id(mapping), key) in self.used


class _LocatingParser(conf._Parser):
    """The configuration parser, also recording where each key is and which are variables."""

    def __init__(self, text: str, *, locations: _Locations, **kwargs) -> None:
        super().__init__(text, **kwargs)
        self.locations = locations

    def _parse_entry(self, target: dict, *, top_level: bool) -> str:
        start = self.pos
        quoted = self._peek() in ("'", '"')
        key = super()._parse_entry(target, top_level=top_level)
        if not (not quoted and key.lower() == "include" and key not in target):
            line, column = self._location(start)
            self.locations.record(target, key, (self.path or "config", line, column))
        return key

    def _resolve_variable(self, name: str, pos: int):
        for scope in reversed(self.scopes):
            if name in scope:
                self.locations.used.add((id(scope), name))
                break
        return super()._resolve_variable(name, pos)

    def _included_parser(self, text: str, file_path: str, include_chain: tuple) -> _LocatingParser:
        return _LocatingParser(
            text, locations=self.locations, path=file_path, env=self.env, include_chain=include_chain, env_chain=()
        )

    def _merge_included(self, target: dict, entries: dict) -> None:
        target.update(entries)
        self.locations.merge(target, entries)


def parse_config_file(path) -> tuple[dict, _Locations]:
    """Parse a file; return the values and where each key is. Raises ConfigError."""
    path = os.fspath(path)
    try:
        text = conf._read_config_text(path)
    except OSError as exc:
        # nats-server: "open nats.conf: no such file or directory" (Go's error text).
        reason = exc.strerror or str(exc)
        reason = reason[:1].lower() + reason[1:]
        raise ConfigFileError([f"open {path}: {reason}"]) from exc
    locations = _Locations()
    parser = _LocatingParser(
        text,
        locations=locations,
        path=path,
        env=os.environ,
        include_chain=(os.path.realpath(path),),
        env_chain=(),
    )
    return parser.parse_document(), locations


# -- values ------------------------------------------------------------------------------------


class _Bad(Exception):
    """A value nats-server rejects; the message goes after "<file>:<line>:<col>: "."""


class _BadAt(_Bad):
    """A value inside a block rejected at its own key's place (``where``)."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(message)
        self.where = where


_type_name = go_type_name


def _expect(value, kind: type, key: str):
    # nats-server's v.(int64) / v.(string) / v.(bool) type assertions; the Go panic text is
    # "interface conversion: interface {} is string, not int64": we say it in plainer words.
    want = {int: "int64", str: "string", bool: "bool", dict: "map[string]interface {}", list: "[]interface {}"}[kind]
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not ok:
        shown = f'"{value}"' if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else repr(value)
        raise _Bad(f"error parsing {key}: expected {want}, got {_type_name(value)} {shown}")
    return value


def _duration(value, key: str, warnings: list, where: str) -> float:
    """opts.go parseDuration: a Go duration string, or (with a warning) a number of seconds."""
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except ValueError:
            raise _Bad(f"error parsing {key}: {go_duration_error(value)}") from None
    _expect(value, int, key)
    warnings.append(f'{where}: invalid use of field "{key}": {key} should be converted to a duration')
    return float(value)


def _strict_duration(value, key: str) -> float:
    """lame_duck_*: time.ParseDuration(v.(string)), no number-of-seconds form."""
    _expect(value, str, key)
    try:
        return parse_duration(value)
    except ValueError:
        raise _Bad(f"error parsing {key}: {go_duration_error(value)}") from None


def _listen(value) -> tuple[str, int]:
    """opts.go parseListen: a port, or "host:port" split as Go's net.SplitHostPort does."""
    if isinstance(value, int) and not isinstance(value, bool):
        return "", value
    if isinstance(value, str):
        host, port = _split_host_port(value)
        if host is None:
            raise _Bad(f'could not parse address string "{value}"')
        if not re.fullmatch(r"[+-]?[0-9]+", port):
            raise _Bad(f'could not parse port "{port}"')
        return host, int(port)
    raise _Bad(f"expected port or host:port, got {_type_name(value)}")


def _split_host_port(value: str) -> tuple[str | None, str]:
    if value.startswith("["):
        end = value.find("]")
        if end < 0 or value[end + 1 : end + 2] != ":":
            return None, ""
        return value[1:end], value[end + 2 :]
    host, sep, port = value.rpartition(":")
    if not sep or ":" in host or "[" in host or "]" in host:
        return None, ""
    return host, port


# -- the keys ----------------------------------------------------------------------------------

# Keys nats-server v2.9.10 knows (opts.go processConfigFileLine) that natserver accepts without
# acting on them, because going on without them is harmless: they are kept in Options.extra and
# named in a warning at start and under -t.
UNSUPPORTED_KEYS = frozenset(
    """
    client_advertise trace_verbose disable_sublist_cache no_sublist_cache
    logfile_size_limit log_size_limit syslog remote_syslog prof_port
    max_sub_tokens max_subscription_tokens
    connect_error_reports
    reconnect_error_reports default_js_domain
    """.split()
)
# Keys whose absence would mislead: a listener that would not exist, security that would not be
# applied, messages that would go elsewhere. natserver refuses such a file (-t fails, the server
# does not start), naming the key in one line.
REFUSED_KEYS = {
    "mqtt": "MQTT listener",
    "gateway": "gateway listener",
    "https": "HTTPS monitoring listener", "https_port": "HTTPS monitoring listener",
    "http_base_path": "monitoring base path", "ocsp": "OCSP stapling",
    "resolver_tls": "account resolver TLS", "resolver_pinned_accounts": "resolver pinned accounts",
}
# leafnodes {} members whose absence would mislead (``tls``, a remote's ``credentials``,
# ``deny_imports`` and ``deny_exports`` and the listener's ``authorization`` are applied):
# refused.
_LEAF_SECURITY_KEYS = frozenset({"credentials", "nkey", "users", "ws_compression"})
# jetstream {} members: natserver acts on store_dir, the limits, enabled, domain, cipher and key,
# and (an extension: nats-server 2.10's name, 2.9.10 refuses it) sync_interval. These only warn:
# clustered JetStream's settings natserver does not act on yet (no bound on catch-ups in
# flight, no cluster-wide limits).
UNSUPPORTED_JETSTREAM_KEYS = frozenset({"max_outstanding_catchup", "limits"})
# jetstream { cipher } spellings nats-server accepts (opts.go parseJetStream), to the cipher used.
JETSTREAM_CIPHERS = {"chacha": "chacha", "chachapoly": "chacha", "aes": "aes"}


def refused_text(key: str, what: str) -> str:
    return f'"{key}" ({what}) is not supported by natserver: refusing to run without it'


# Security keys (see auth/tls.py, auth/users.py, routing/accounts.py, jwt.py).
_OPERATOR_KEYS = frozenset({"operator", "operators", "roots", "root", "root_operators", "root_operator"})
_RESOLVER_KEYS = frozenset({"resolver", "account_resolver", "accounts_resolver"})
# Keys nats-server does not act on either way, or that only feed another key: no warning.
_QUIET_EXTRA_KEYS = frozenset({"system_account", "system", "connect_error_reports", "reconnect_error_reports"})

# authorization {} members nats-server knows that we do not act on yet.
_UNSUPPORTED_AUTH_KEYS: frozenset[str] = frozenset()


class _Builder:
    def __init__(self, options: Options, locations: _Locations | None, path: str | None) -> None:
        self.options = options
        self.changes: dict = {}
        self.extra = dict(options.extra)
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self.locations = locations
        self.path = path or "config"
        # Users from authorization {} and from accounts {}, checked together at the end.
        self.auth_users: list | None = None
        self.auth_nkeys: list = []
        self.account_users: list = []
        self.account_nkeys: list = []
        self.security_where = self.path

    def where(self, mapping: dict, key: str, fallback: str | None = None) -> str:
        location = self.locations.where(mapping, key) if self.locations is not None else None
        if location is None:
            return fallback or self.path
        path, line, column = location
        # nats-server's lexer counts columns from 0 on the first line of a file only.
        return f"{path}:{line}:{column - 1 if line == 1 else column}"

    def used_as_variable(self, mapping: dict, key: str) -> bool:
        return self.locations is not None and self.locations.is_used_variable(mapping, key)

    def apply(self, conf: dict) -> None:
        for key, value in conf.items():
            where = self.where(conf, key)
            try:
                self.apply_key(conf, key, key.lower(), value, where)
            except _Bad as exc:
                self.errors.append(f"{where}: {exc}")

    def apply_key(self, conf: dict, key: str, name: str, value, where: str) -> None:
        c = self.changes
        if name == "listen":
            host, port = _listen(value)
            c["host"] = host
            c["port"] = port
        elif name == "port":
            c["port"] = _expect(value, int, key)
        elif name == "server_name":
            c["server_name"] = _expect(value, str, key)
        elif name == "server_tags":
            # opts.go: one tag or a list of them (JetStream placement's tags, in the STATSZ)
            tags = [value] if isinstance(value, str) else _expect(value, list, key)
            c["server_tags"] = [_expect(tag, str, key) for tag in tags]
        elif name in ("host", "net"):
            c["host"] = _expect(value, str, key)
        elif name in ("debug", "trace", "logtime", "trace_headers"):
            c[name] = _expect(value, bool, key)
        elif name == "max_traced_msg_len":
            c[name] = _expect(value, int, key)
        elif name == "authorization":
            self.apply_authorization(key, value, where)
        elif name == "http":
            host, port = _listen(value)
            c["http_host"] = host
            c["http_port"] = port
        elif name in ("http_port", "monitor_port"):
            c["http_port"] = _expect(value, int, key)
        elif name in ("logfile", "log_file"):
            c["log_file"] = _expect(value, str, key)
        elif name in ("pidfile", "pid_file"):
            c["pid_file"] = _expect(value, str, key)
        elif name == "ports_file_dir":
            c["ports_file_dir"] = _expect(value, str, key)
        elif name in ("max_control_line", "max_payload"):
            if _expect(value, int, key) > _INT32_MAX:
                raise _Bad(f"{key} value is too big")
            c[name] = value
        elif name == "max_pending":
            c["max_pending"] = _expect(value, int, key)
        elif name in ("max_connections", "max_conn"):
            c["max_connections"] = _expect(value, int, key)
        elif name in ("max_subscriptions", "max_subs"):
            c["max_subscriptions"] = _expect(value, int, key)
        elif name == "ping_interval":
            c["ping_interval"] = _duration(value, "ping_interval", self.warnings, where)
        elif name == "ping_max":
            c["ping_max"] = _expect(value, int, key)
        elif name == "write_deadline":
            c["write_deadline"] = _duration(value, "write_deadline", self.warnings, where)
        elif name == "lame_duck_duration":
            duration = _strict_duration(value, "lame_duck_duration")
            if duration < 30:
                raise _Bad(f"invalid lame_duck_duration of {go_duration(duration)}, minimum is 30 seconds")
            c["lame_duck_duration"] = duration
        elif name == "lame_duck_grace_period":
            grace = _strict_duration(value, "lame_duck_grace_period")
            if grace < 0:
                raise _Bad("invalid lame_duck_grace_period, needs to be positive")
            c["lame_duck_grace_period"] = grace
        elif name == "no_header_support":
            c["headers"] = not _expect(value, bool, key)
        elif name == "max_closed_clients":  # natserver extension (a Go-only option in nats-server)
            c["max_closed_clients"] = _expect(value, int, key)
        elif name == "busy_poll":  # natserver extension (natserver.server.busypoll)
            c["busy_poll"] = _strict_duration(value, "busy_poll")
        elif name == "jetstream":
            self.apply_jetstream(key, value, where)
        elif name == "streaming":  # NATS Streaming (natserver.stan): the block enables it
            try:
                c["stan"] = StanOptions.from_config(value)
            except StanConfigError as exc:
                raise _Bad(str(exc)) from None
        elif name == "cluster":
            self.apply_cluster(key, value, where)
        elif name in ("leafnodes", "leaf") and isinstance(value, dict):
            self.apply_leaf_remotes(key, value, where)
        elif name in ("store_dir", "storedir"):
            c["store_dir"] = _expect(value, str, key)
        elif name == "tls":
            self.apply_tls(key, value, where)
        elif name == "nsq":  # natserver.nsq's front-end; checked by natserver.nsq.config
            c["nsq"] = dict(_expect(value, dict, key))
        elif name == "allow_non_tls":
            c["allow_non_tls"] = _expect(value, bool, key)
        elif name == "no_auth_user":
            c["no_auth_user"] = _expect(value, str, key)
        elif name == "accounts":
            self.apply_accounts(key, value, where)
        elif name in _OPERATOR_KEYS:
            c["trusted_operators"] = self.operators(value, key)
        elif name in _RESOLVER_KEYS:
            c["resolver"] = _resolver(value)
        elif name == "resolver_preload":
            c["resolver_preload"] = _preload(value)
        elif name in ("mappings", "maps"):
            c["mappings"] = self.mappings(value, where)
        elif name in ("websocket", "ws"):
            c["websocket"] = self.websocket(value, where)
        elif name in ("no_system_account", "no_system", "no_sys_acc"):
            c["no_system_account"] = _expect(value, bool, key)
        elif name in ("system_account", "system"):
            c["system_account"] = _expect(value, str, key)
        elif name in ("trusted", "trusted_keys"):
            c["trusted_keys"] = _trusted_keys(value)
        elif name in REFUSED_KEYS:
            self.errors.append(f"{where}: {refused_text(key, REFUSED_KEYS[name])}")
        elif name in UNSUPPORTED_KEYS:
            self.extra[key] = value
            if name == "trace_verbose":
                c["trace"] = _expect(value, bool, key)
        elif not self.used_as_variable(conf, key):
            self.errors.append(f'{where}: unknown field "{key}"')

    def websocket(self, value, where: str) -> WebsocketOptions:
        """opts.go parseWebsocket. Websocket-specific authentication (authorization,
        no_auth_user, jwt_cookie) would be security not applied: refused; ``advertise`` only
        feeds cluster gossip natserver does not send: a warning."""
        if not isinstance(value, dict):
            raise _Bad(f"Expected websocket to be a map, got {_go_type(value)}")
        ws = WebsocketOptions()
        for member, item in value.items():
            member_where = self.where(value, member, where)
            lowered = str(member).lower()
            try:
                if lowered == "listen":
                    ws.host, ws.port = _listen(item)
                elif lowered == "port":
                    ws.port = _expect(item, int, member)
                elif lowered in ("host", "net"):
                    ws.host = _expect(item, str, member)
                elif lowered == "advertise":
                    ws.advertise = _expect(item, str, member)
                    self.extra.setdefault("websocket_options", []).append(member)
                elif lowered == "no_tls":
                    ws.no_tls = _expect(item, bool, member)
                elif lowered == "tls":
                    if not isinstance(item, dict):
                        raise _Bad(f"error parsing tls config, expected a map, got {_type_name(item)}")
                    try:
                        ws.tls, warnings = parse_tls_block(item)
                        server_context(ws.tls)
                    except TLSConfigError as exc:
                        raise _Bad(str(exc)) from None
                    self.extra.setdefault("security_warnings", []).extend(warnings)
                elif lowered == "same_origin":
                    ws.same_origin = _expect(item, bool, member)
                elif lowered in ("allowed_origins", "allowed_origin", "allow_origins", "allow_origin", "origins", "origin"):
                    items = item if isinstance(item, list) else [item]
                    ws.allowed_origins = [_expect(origin, str, member) for origin in items]
                elif lowered == "handshake_timeout":
                    if isinstance(item, str):
                        try:
                            ws.handshake_timeout = parse_duration(item)
                        except ValueError:
                            raise _Bad(go_duration_error(item)) from None
                    elif isinstance(item, int) and not isinstance(item, bool):
                        ws.handshake_timeout = float(item)
                    else:
                        raise _Bad(f"error parsing handshake timeout: unsupported type {_go_type(item)}")
                elif lowered in ("compress", "compression"):
                    ws.compression = _expect(item, bool, member)
                elif lowered in ("authorization", "authentication", "no_auth_user", "jwt_cookie"):
                    self.errors.append(f"{member_where}: {refused_text('websocket.' + member, 'websocket authentication')}")
                elif not self.used_as_variable(value, member):
                    self.errors.append(f'{member_where}: unknown field "{member}"')
            except _Bad as exc:
                self.errors.append(f"{member_where}: {exc}")
        return ws

    def mappings(self, value, where: str) -> list:
        """``mappings { source: dest | {dest, weight, cluster} | [{...}, ...] }`` at the top
        level or in an account (opts.go parseAccountMappings, parseAccountMapDest). Every bad
        entry is reported, with nats-server's text; the good ones are kept, in order."""
        if not isinstance(value, dict):
            raise _Bad(f"Expected mappings to be a map/struct, got {value}")
        out = []
        for source, dest in value.items():
            entry_where = self.where(value, source, where)
            try:
                out.append((source, _mapping_entry(source, dest)))
            except _Bad as exc:
                self.errors.append(f"{entry_where}: {exc}")
        return out

    def apply_cluster(self, key: str, value, where: str) -> None:
        """``cluster { name, listen | host/port, routes [...], authorization { user, password },
        no_advertise, connect_retries, pool_size, accounts, compression, ... }`` (opts.go
        parseCluster)."""
        c = self.changes
        if not isinstance(value, dict):
            raise _Bad(f"error parsing {key}: expected a map, got {_type_name(value)}")
        for member, item in value.items():
            name = member.lower()
            try:
                if name == "name":
                    c["cluster_name"] = _expect(item, str, member)
                elif name == "listen":
                    # (opts.go parseCluster: parseListen; -1 is a random port, as for clients:
                    # test harnesses such as nats.js's write "127.0.0.1:-1")
                    host, _, port = str(item).rpartition(":")
                    if not port.lstrip("-").isdigit():
                        raise _Bad(f"could not parse address string {item!r}")
                    c["cluster_host"] = host or const.DEFAULT_HOST
                    c["cluster_port"] = int(port)
                elif name in ("host", "net"):
                    c["cluster_host"] = _expect(item, str, member)
                elif name == "port":
                    c["cluster_port"] = _expect(item, int, member)
                elif name == "routes":
                    routes = item if isinstance(item, list) else [item]
                    c["routes"] = [_expect(route, str, member) for route in routes]
                elif name == "authorization":
                    auth = _expect(item, dict, member)
                    for auth_key, auth_value in auth.items():
                        lowered = auth_key.lower()
                        if lowered in ("user", "username"):
                            c["cluster_username"] = str(auth_value)
                        elif lowered in ("pass", "password"):
                            c["cluster_password"] = str(auth_value)
                        elif lowered == "timeout":
                            self.extra.setdefault(key, {})[f"authorization.{auth_key}"] = auth_value
                        else:  # users, permissions...: security natserver's routes do not apply
                            self.errors.append(f"{self.where(value, member, where)}: "
                                               f"{refused_text(f'cluster authorization {auth_key}', 'route security')}")
                elif name == "no_advertise":
                    c["cluster_no_advertise"] = _expect(item, bool, member)
                elif name == "connect_retries":
                    c["cluster_connect_retries"] = _expect(item, int, member)
                elif name == "tls":
                    # opts.go getTLSConfig: routes always verify the peer's certificate, both ways.
                    config = self.peer_tls(item, "cluster", self.where(value, member, where), server=True, client=True)
                    if config is not None:
                        c["cluster_tls"] = config.copy(verify=True)
                elif name == "permissions":  # security natserver's routes do not apply
                    self.errors.append(f"{self.where(value, member, where)}: "
                                       f"{refused_text(f'cluster {member}', 'route security')}")
                elif name == "pool_size":
                    c["cluster_pool_size"] = _expect(item, int, member)
                elif name == "accounts":
                    accounts = item if isinstance(item, list) else [item]
                    c["cluster_accounts"] = [_expect(account, str, member) for account in accounts]
                elif name == "compression":
                    opts = self.compression_value(item, compression.ROUTE_ON, self.where(value, member, where))
                    if opts is not None:
                        c["cluster_compression"] = opts
                elif name in ("advertise", "cluster_advertise"):
                    # accepted, not acted on
                    self.extra.setdefault(key, {})[member] = item
                elif not self.used_as_variable(value, member):
                    self.errors.append(f'{self.where(value, member, where)}: unknown field "{member}"')
            except _Bad as exc:
                self.errors.append(f"{self.where(value, member, where)}: {exc}")

    def apply_leaf_remotes(self, key: str, value: dict, where: str) -> None:
        """``leafnodes { remotes [{url | urls, account, credentials, tls, deny_imports,
        deny_exports, compression}] }`` (opts.go parseRemoteLeafNodes): the hubs natserver
        dials, and ``listen``/``host``/``port``, ``authorization``, ``tls``, ``reconnect`` and
        ``compression`` for leaves.
        Security members natserver does not apply (_LEAF_SECURITY_KEYS) refuse the file; other
        members are kept and named in a warning."""
        rest = {}
        for member, item in value.items():
            lowered_member = member.lower()
            if lowered_member == "listen":
                host, _, port = str(item).rpartition(":")
                if not port.lstrip("-").isdigit():
                    self.errors.append(f"{where}: could not parse address string {item!r}")
                    continue
                self.changes["leafnode_host"] = host or const.DEFAULT_HOST
                self.changes["leafnode_port"] = int(port)
                continue
            if lowered_member in ("host", "net"):
                self.changes["leafnode_host"] = str(item)
                continue
            if lowered_member == "port" and isinstance(item, int) and not isinstance(item, bool):
                self.changes["leafnode_port"] = item
                continue
            if lowered_member == "authorization":
                self.apply_leaf_authorization(item, self.where(value, member, where))
                continue
            if lowered_member in ("reconnect", "reconnect_delay", "reconnect_interval"):
                if not isinstance(item, int) or isinstance(item, bool):  # opts.go: whole seconds only
                    self.errors.append(f"{self.where(value, member, where)}: expected a number of seconds for "
                                       f'"{member}", got {item!r}')
                    continue
                self.changes["leafnode_reconnect"] = float(item)
                continue
            if lowered_member == "tls":
                config = self.peer_tls(item, "leafnodes", self.where(value, member, where), server=True, client=False)
                if config is not None:
                    self.changes["leafnode_tls"] = config
                continue
            if lowered_member == "compression":
                opts = self.compression_value(item, compression.LEAF_ON, self.where(value, member, where))
                if opts is not None:
                    self.changes["leafnode_compression"] = opts
                continue
            if lowered_member != "remotes":
                rest[member] = item
                continue
            remotes = []
            for remote in item if isinstance(item, list) else [item]:
                if not isinstance(remote, dict):
                    self.errors.append(f"{where}: error parsing remote leafnode: expected a map")
                    continue
                urls: list = []
                account = credentials = ""
                tls = None
                remote_compression = None
                deny: dict = {}
                for field_name, field_value in remote.items():
                    lowered = field_name.lower()
                    if lowered == "url":
                        urls.append(str(field_value))
                    elif lowered == "urls":
                        urls += [str(u) for u in (field_value if isinstance(field_value, list) else [field_value])]
                    elif lowered in ("account", "local"):
                        account = str(field_value)
                    elif lowered == "credentials":
                        credentials = str(field_value)
                    elif lowered == "tls":
                        tls = self.peer_tls(field_value, "leafnodes remotes", self.where(remote, field_name, where),
                                            server=False, client=True)
                    elif lowered == "compression":
                        remote_compression = self.compression_value(field_value, compression.LEAF_ON,
                                                                    self.where(remote, field_name, where))
                    elif lowered in ("deny_imports", "deny_import", "deny_exports", "deny_export"):
                        # opts.go parsePermSubjects: a subject or a list of them, each valid
                        subjects = field_value if isinstance(field_value, list) else [field_value]
                        bad = [str(x) for x in subjects if not is_valid_subject(str(x).encode())]
                        if bad:
                            self.errors.append(f"{self.where(remote, field_name, where)}: "
                                               f'subject "{bad[0]}" is not a valid subject')
                        deny["imports" if "import" in lowered else "exports"] = [str(x) for x in subjects]
                    else:
                        rest[f"remotes.{field_name}"] = field_value
                entry: dict = {"urls": urls, "account": account}
                for kind, subjects in deny.items():
                    entry[f"deny_{kind}"] = subjects
                if credentials:
                    entry["credentials"] = credentials
                if tls is not None:
                    entry["tls"] = tls
                if remote_compression is not None:
                    entry["compression"] = remote_compression
                remotes.append(entry)
            self.changes["leafnode_remotes"] = remotes
        for member in list(rest):
            if member.split(".")[-1].lower() in _LEAF_SECURITY_KEYS:
                self.errors.append(f"{where}: {refused_text(f'leafnodes {member}', 'leaf node security')}")
                del rest[member]
        if rest:
            self.extra[key] = rest

    def compression_value(self, value, chosen_for_on: str, where: str) -> compression.CompressionOpts | None:
        """A ``compression`` member (opts.go parseCompression; the mode is checked at startup,
        Options.validate); None after an error, reported at the place nats-server names."""
        try:
            return compression.parse(value, chosen_for_on, parse_duration)
        except compression.CompressionError as exc:
            at = self.where(value, exc.key, where) if exc.key is not None and isinstance(value, dict) else where
            self.errors.append(f"{at}: {exc}")
            return None

    def apply_leaf_authorization(self, value, where: str) -> None:
        """``leafnodes { authorization { user, password, account, timeout, users [{user,
        password, account}] } }`` (opts.go parseLeafAuthorization, parseLeafUsers and
        leafnode.go validateLeafNodeAuthOptions). Any other member is an unknown field there."""
        if not isinstance(value, dict):
            self.errors.append(f"{where}: error parsing leafnode authorization: expected a map, got {_type_name(value)}")
            return
        c = self.changes
        for member, item in value.items():
            lowered = member.lower()
            if lowered in ("user", "username"):
                c["leafnode_username"] = str(item)
            elif lowered in ("pass", "password"):
                c["leafnode_password"] = str(item)
            elif lowered == "account":
                c["leafnode_account"] = str(item)
            elif lowered == "timeout":
                c["leafnode_auth_timeout"] = float(item) if isinstance(item, (int, float)) and not isinstance(
                    item, bool) else 1.0  # opts.go: a timeout of another type is 1 s
            elif lowered == "users":
                if not isinstance(item, list):
                    self.errors.append(f"{where}: Expected users field to be an array, got {item}")
                    continue
                users = []
                for entry in item:
                    if not isinstance(entry, dict):
                        self.errors.append(f"{where}: Expected user entry to be a map/struct, got {entry}")
                        continue
                    user = User("")
                    for field_name, field_value in entry.items():
                        name = field_name.lower()
                        if name in ("user", "username"):
                            user.username = str(field_value)
                        elif name in ("pass", "password"):
                            user.password = str(field_value)
                        elif name == "account":
                            user.account = str(field_value)
                        elif not self.used_as_variable(entry, field_name):
                            self.errors.append(f'{self.where(entry, field_name, where)}: unknown field "{field_name}"')
                    users.append(user)
                c["leafnode_users"] = users
            elif not self.used_as_variable(value, member):
                self.errors.append(f'{self.where(value, member, where)}: unknown field "{member}"')
        users = c.get("leafnode_users") or []
        if users and c.get("leafnode_username"):
            self.errors.append(f"{where}: can not have a single user/pass and a users array")
        seen: set = set()
        for user in users:
            if user.username in seen:
                self.errors.append(f'{where}: duplicate user "{user.username}" detected in leafnode authorization')
            seen.add(user.username)

    def apply_jetstream(self, key: str, value, where: str) -> None:
        """``jetstream: enabled|true|false`` or ``jetstream { store_dir, max_memory_store,
        max_file_store, domain, ... }`` (opts.go parseJetStream)."""
        c = self.changes
        if isinstance(value, bool):
            c["jetstream"] = value
            return
        if isinstance(value, str):
            lowered = value.lower()
            if lowered in ("enabled", "enable", "true", "yes", "on"):
                c["jetstream"] = True
                return
            if lowered in ("disabled", "disable", "false", "no", "off"):
                c["jetstream"] = False
                return
            raise _Bad(f"Expected 'enabled' or 'disabled' for string value, got '{value}'")
        if not isinstance(value, dict):
            raise _Bad(f"error parsing {key}: expected a map or a boolean, got {_type_name(value)}")
        c["jetstream"] = True
        for member, item in value.items():
            name = member.lower()
            member_where = self.where(value, member, where)
            try:
                if name in ("store_dir", "storedir", "store"):
                    c["store_dir"] = _expect(item, str, member)
                elif name in ("max_memory_store", "max_mem_store", "max_mem"):
                    c["max_memory_store"] = _expect(item, int, member)
                elif name in ("max_file_store", "max_file"):
                    c["max_file_store"] = _expect(item, int, member)
                elif name == "enabled":
                    c["jetstream"] = _expect(item, bool, member)
                elif name == "domain":
                    c["jetstream_domain"] = _expect(item, str, member)
                elif name == "cipher":
                    cipher = JETSTREAM_CIPHERS.get(_expect(item, str, member).lower())
                    if cipher is None:
                        raise _Bad(f'Unknown cipher type: "{item}"')
                    c["jetstream_cipher"] = cipher
                elif name in ("key", "ek", "jetstream_key"):
                    c["jetstream_key"] = _expect(item, str, member)
                elif name == "unique_tag":
                    c["jetstream_unique_tag"] = _expect(item, str, member).strip().lower()
                elif name == "sync_interval" or name in UNSUPPORTED_JETSTREAM_KEYS:
                    self.extra.setdefault(key, {})[member] = item
                elif not self.used_as_variable(value, member):
                    self.errors.append(f'{member_where}: unknown field "{member}"')
            except _Bad as exc:
                self.errors.append(f"{member_where}: {exc}")

    def apply_authorization(self, key: str, value, where: str) -> None:
        if not isinstance(value, dict):
            raise _Bad(f"error parsing {key}: expected a map, got {_type_name(value)}")
        user = password = token = ""
        timeout = 0.0
        unsupported: dict = {}
        users_spec = None
        default_permissions = None
        for member, item in value.items():
            member_where = self.where(value, member, where)
            name = member.lower()
            try:
                if name in ("user", "username"):
                    user = _expect(item, str, member)
                elif name in ("pass", "password"):
                    password = _expect(item, str, member)
                elif name == "token":
                    token = _expect(item, str, member)
                elif name == "timeout":
                    # auth.go: an int or a float of seconds; anything else counts as 1 second.
                    if isinstance(item, (int, float)) and not isinstance(item, bool):
                        timeout = float(item)
                    else:
                        timeout = 1.0
                elif name == "users":
                    if not isinstance(item, list):
                        raise _Bad(f"error parsing users: expected an array, got {_type_name(item)}")
                    users_spec = item
                elif name in ("permissions", "default_permissions", "default_permission"):
                    if not isinstance(item, dict):
                        raise _Bad(f"error parsing {member}: expected a map, got {_type_name(item)}")
                    default_permissions = item
                elif name in _UNSUPPORTED_AUTH_KEYS:
                    unsupported[member] = item
                elif not self.used_as_variable(value, member):
                    self.errors.append(f'{member_where}: unknown field "{member}"')
            except _Bad as exc:
                self.errors.append(f"{member_where}: {exc}")
        if (user or password) and token:
            raise _Bad("Cannot have a user/pass and token")
        users, nkeys = _users_from(users_spec or [], default_permissions) if users_spec is not None else ([], [])
        from_accounts = self.account_users or self.account_nkeys
        if users_spec is not None or from_accounts:
            if user:
                raise _Bad("Can not have a single user/pass and a users array")
            if token:
                raise _Bad("Can not have a token and a users array")
        seen = {u.username for u in self.account_users} | {u.nkey for u in self.account_nkeys}
        for entry in users:
            if entry.username in seen:
                raise _Bad(f'Duplicate user "{entry.username}" detected')
            seen.add(entry.username)
        for entry in nkeys:
            if entry.nkey in seen:
                raise _Bad(f'Duplicate nkey "{entry.nkey}" detected')
            seen.add(entry.nkey)
        if user and default_permissions is not None:
            # As nats-server: (default) permissions are for the users array, not a single user.
            self.extra.setdefault("security_warnings", []).append(
                "authorization permissions apply to the users array only: the single user has no permissions"
            )
        self.auth_users = users
        self.auth_nkeys = nkeys
        self.security_where = where
        self.changes.update(username=user, password=password, authorization=token, auth_timeout=timeout)
        if unsupported:
            self.extra[key] = unsupported

    def peer_tls(self, value, what: str, where: str, *, server: bool, client: bool):
        """A route's or a leaf node's ``tls {}`` (opts.go parseTLS + GenTLSConfig): the
        certificates are loaded now, for the side(s) this block serves. ``verify_and_map``
        (users from certificates) is refused: natserver does not map leaf or route users."""
        if not isinstance(value, dict):
            self.errors.append(f"{where}: error parsing tls config, expected a map, got {_type_name(value)}")
            return None
        try:
            config, warnings = parse_tls_block(value)
            if config.verify_and_map:
                self.errors.append(f"{where}: {refused_text(f'{what} tls verify_and_map', 'certificate user mapping')}")
                return None
            if server:
                server_context(config)
            if client:
                client_context(config)
        except TLSConfigError as exc:
            self.errors.append(f"{where}: {exc}")
            return None
        self.extra.setdefault("security_warnings", []).extend(warnings)
        return config

    def apply_tls(self, key: str, value, where: str) -> None:
        """opts.go parseTLS + GenTLSConfig: the certificates are loaded now, so that a missing
        file is a configuration error, as in nats-server."""
        if not isinstance(value, dict):
            raise _Bad(f"error parsing tls config, expected a map, got {_type_name(value)}")
        try:
            config, warnings = parse_tls_block(value)
            server_context(config)
        except TLSConfigError as exc:
            raise _Bad(str(exc)) from None
        self.changes["tls"] = config
        for line in warnings:
            self.extra.setdefault("security_warnings", []).append(line)

    def operators(self, value, key: str) -> list:
        """operator: a file with the operator JWT (or the JWT inline), or a list of them."""
        items = value if isinstance(value, list) else [value]
        out = []
        for item in items:
            if not isinstance(item, str):
                raise _Bad(f"error parsing operators: unsupported type {_go_type(item)}")
            try:
                out.append(jwt.read_operator_jwt(item))
            except (OSError, jwt.JWTError) as exc:
                reason = exc.strerror.lower() if isinstance(exc, OSError) and exc.strerror else str(exc)
                if isinstance(exc, OSError):
                    reason = f"open {item}: {reason}"
                raise _Bad(f"error parsing operator JWT: {reason}") from None
        return out

    def apply_accounts(self, key: str, value, where: str) -> None:
        """opts.go parseAccounts: a list of names, or a map of account blocks."""
        configs = []
        if isinstance(value, list):
            seen = set()
            for name in value:
                if not isinstance(name, str):
                    raise _Bad(f"error parsing accounts: expected a name, got {_type_name(name)}")
                if name == "$G":
                    self.errors.append(f'{where}: "{name}" is a Reserved Account')
                    continue
                if name in seen:
                    self.errors.append(f"{where}: Duplicate Account Entry: {name}")
                    continue
                seen.add(name)
                configs.append(AccountConfig(name))
            self.changes["accounts"] = configs
            return
        if not isinstance(value, dict):
            raise _Bad(f"error parsing accounts: expected a map or an array, got {_type_name(value)}")
        for name, block in value.items():
            account_where = self.where(value, name, where)
            if self.used_as_variable(value, name):
                continue
            if not isinstance(block, dict):
                self.errors.append(f"{account_where}: Expected map entries for accounts")
                continue
            if name == "$G":
                self.errors.append(f'{account_where}: "{name}" is a Reserved Account')
                continue
            try:
                config, users, nkeys, users_where = self.account_block(name, block, account_where)
            except _Bad as exc:
                self.errors.append(f"{account_where}: {exc}")
                continue
            configs.append(config)
            if users or nkeys:
                if self.changes.get("username"):
                    self.errors.append(f"{users_where}: Can not have a single user/pass and accounts")
                    continue
                if self.changes.get("authorization"):
                    self.errors.append(f"{users_where}: Can not have a token and accounts")
                    continue
            seen = ({u.username for u in self.account_users + (self.auth_users or [])}
                    | {u.nkey for u in self.account_nkeys + self.auth_nkeys})
            for user in nkeys:
                if user.nkey in seen:
                    self.errors.append(f'{users_where}: Duplicate nkey "{user.nkey}" detected')
                    continue
                seen.add(user.nkey)
                self.account_nkeys.append(user)
            for user in users:
                if user.username in seen:
                    self.errors.append(f'{users_where}: Duplicate user "{user.username}" detected')
                    continue
                seen.add(user.username)
                self.account_users.append(user)
        if not self.errors:
            for error in check_accounts(configs):
                self.errors.append(f"{where}: {error}")
        self.changes["accounts"] = configs

    def account_block(self, name: str, block: dict, where: str):
        config = AccountConfig(name)
        users_spec = None
        default_permissions = None
        users_where = where
        for member, item in block.items():
            member_where = self.where(block, member, where)
            lowered = member.lower()
            try:
                if lowered == "nkey":
                    if not isinstance(item, str) or not is_valid_public_key(item, "A"):
                        raise _Bad(f'Not a valid public nkey for an account: "{item}"')
                    config.nkey = item
                elif lowered == "users":
                    if not isinstance(item, list):
                        raise _Bad(f"Expected users field to be an array, got {item}")
                    users_spec = item
                    users_where = member_where
                elif lowered == "default_permissions":
                    if not isinstance(item, dict):
                        raise _Bad(f"Expected permissions to be a map/struct, got {item}")
                    default_permissions = item
                elif lowered == "exports":
                    config.exports = _exports(item)
                elif lowered == "imports":
                    config.imports = _imports(item)
                elif lowered == "limits":
                    _account_limits(config, item)
                elif lowered in ("mappings", "maps"):
                    config.mappings = self.mappings(item, member_where)
                elif lowered == "jetstream":
                    config.jetstream = _account_jetstream(item)
                    if isinstance(item, dict):
                        config.jetstream_limits = _account_jetstream_limits(item)
                elif lowered in ("msg_trace", "trace_dest"):
                    _account_msg_trace(config, member, item,
                                       lambda name, _item=item, _at=member_where: self.where(_item, name, _at))
                    if config.trace_dest and not config.trace_sampling:
                        config.trace_sampling = 100
                    elif config.trace_sampling and not config.trace_dest:
                        self.warnings.append(f"{member_where}: Trace destination sampling ignored since no "
                                             "destination was set")
                        config.trace_sampling = 0
                elif not self.used_as_variable(block, member):
                    self.errors.append(f'{member_where}: unknown field "{member}"')
            except _Bad as exc:
                self.errors.append(f"{getattr(exc, 'where', member_where)}: {exc}")
        users, nkeys = _users_from(users_spec or [], default_permissions, account=name)
        return config, users, nkeys, users_where

    def finish_security(self) -> None:
        """The users of authorization {} and of accounts {} together."""
        c = self.changes
        users = self.account_users + (self.auth_users or [])
        nkeys = self.account_nkeys + self.auth_nkeys
        if self.auth_users is not None or users or nkeys:
            c["users"] = users
            c["nkeys"] = nkeys

    def result(self) -> Options:
        if "auth_timeout" not in self.changes and "tls" in self.changes:
            self.changes["auth_timeout"] = 0.0  # the default: the TLS timeout + 1 s
        options = self.options.copy(**self.changes, extra=self.extra)
        return apply_baseline(options, http_host=False)


def options_from_dict(
    conf: dict, base: Options | None = None, path=None, *, locations: _Locations | None = None
) -> Options:
    """Options from parsed configuration values, on top of ``base`` (default: Options()).

    Raises :class:`ConfigFileError` when nats-server would report errors or warnings (the
    options built despite warnings are ``exc.options``).
    """
    path = os.fspath(path) if path is not None else None
    base = base if base is not None else Options()
    if path is not None:
        base = base.copy(config_file=path)
    builder = _Builder(base, locations, path)
    builder.apply(conf)
    builder.finish_security()
    if builder.errors:
        raise ConfigFileError(builder.errors, builder.warnings)
    options = builder.result()
    if builder.warnings:
        raise ConfigFileError([], builder.warnings, options)
    return options


def options_from_file(path, base: Options | None = None) -> Options:
    """Options from a nats-server configuration file (see the module docstring).

    Raises ConfigError for syntax errors (file:line:col) and ConfigFileError for what
    nats-server reports while applying the values (unknown fields, bad values, warnings).
    """
    values, locations = parse_config_file(path)
    digest = conf.config_digest(values)
    base = (base if base is not None else Options()).copy(config_digest=digest)
    try:
        return options_from_dict(values, base, path, locations=locations)
    except ConfigFileError as exc:
        if exc.options is not None:
            exc.options = exc.options.copy(config_digest=digest)
        raise


def _users_from(spec: list, default_permissions: dict | None, account: str | None = None) -> tuple[list, list]:
    """users: [ {user, password, permissions}, {nkey, permissions}, ... ] (opts.go parseUsers);
    returns (users, nkey users)."""
    users, nkeys = [], []
    defaults = _permissions_from(default_permissions) if default_permissions is not None else None
    for entry in spec:
        if not isinstance(entry, dict):
            raise _Bad(f"Expected user entry to be a map/struct, got {entry}")
        name = password = nkey = ""
        permissions = None
        connection_types = None
        for key, value in entry.items():
            lowered = str(key).lower()
            if lowered == "nkey":
                nkey = _expect(value, str, key)
            elif lowered in ("user", "username"):
                name = _expect(value, str, key)
            elif lowered in ("pass", "password"):
                password = _expect(value, str, key)
            elif lowered in ("permission", "permissions", "authorization"):
                permissions = _permissions_from(value)
            elif lowered in ("allowed_connection_types", "connection_types", "clients"):
                connection_types = _connection_types(value)
            else:
                raise _Bad(f'unknown field "{key}"')
        if permissions is None:
            permissions = defaults
        if not nkey and not name:
            raise _Bad("User entry requires a user")
        if nkey:
            if not is_valid_public_key(nkey, "U"):
                raise _Bad("Not a valid public nkey for a user")
            if name or password:
                raise _Bad("Nkey users do not take usernames or passwords")
            nkeys.append(NkeyUser(nkey, permissions, account, connection_types))
        else:
            users.append(User(name, password, permissions, account=account, connection_types=connection_types))
    return users, nkeys


_CONNECTION_TYPES = {"STANDARD", "WEBSOCKET", "LEAFNODE", "LEAFNODE_WS", "MQTT", "MQTT_WS"}


def _connection_types(value) -> frozenset:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise _Bad(f"error parsing allowed connection types: unsupported type {_go_type(items)}")
    types = set()
    for item in items:
        if not isinstance(item, str):
            raise _Bad(f"error parsing allowed connection types: unsupported type in array {_go_type(item)}")
        if item.upper() not in _CONNECTION_TYPES:
            raise _Bad(f'unknown connection type "{item}"')
        types.add(item.upper())
    return frozenset(types)


def _go_type(value) -> str:
    return {str: "string", bool: "bool", int: "int64", float: "float64", dict: "map[string]interface {}",
            list: "[]interface {}"}.get(type(value), type(value).__name__)


def _permissions_from(spec):
    """opts.go parseUserPermissions, with its checks; a natserver.auth.users.Permissions."""
    if not isinstance(spec, dict):
        raise _Bad(f"Expected permissions to be a map/struct, got {spec}")

    def subjects(value) -> list:
        if isinstance(value, str):
            items = [value]
        elif isinstance(value, list):
            items = value
        else:
            raise _Bad(f"Expected subject permissions to be a subject, or array of subjects, got {_go_type(value)}")
        for item in items:
            if not isinstance(item, str):
                raise _Bad("Subject in permissions array cannot be cast to string")
            if not is_valid_subject(item.encode()):
                parts = item.split()
                if len(parts) != 2:
                    raise _Bad(f'subject "{item}" is not a valid subject')
                if not is_valid_subject(parts[0].encode()):
                    raise _Bad(f'subject "{parts[0]}" is not a valid subject')
        return items

    for key, value in spec.items():
        lowered = str(key).lower()
        if lowered in ("pub", "publish", "import", "sub", "subscribe", "export"):
            if isinstance(value, dict):
                for member, item in value.items():
                    if str(member).lower() not in ("allow", "deny"):
                        raise _Bad(
                            f'Unknown field name "{member}" parsing subject permissions, only \'allow\' or '
                            f"\'deny\' are permitted"
                        )
                    subjects(item)
            else:
                subjects(value)
        elif lowered in ("publish_allow_responses", "allow_responses"):
            if not isinstance(value, (bool, dict)):
                raise _Bad("error parsing response permissions, expected a boolean or a map")
        else:
            raise _Bad(f'Unknown field "{key}" parsing permissions')
    try:
        return Permissions(spec)
    except ValueError as exc:
        raise _Bad(str(exc)) from None


def _exports(value) -> list:
    """opts.go parseAccountExports / parseExportStreamOrService."""
    if not isinstance(value, list):
        raise _Bad(f"Exports should be an array, got {_go_type(value)}")
    out = []
    for item in value:
        if not isinstance(item, dict):
            raise _Bad(f"Export Items should be a map with type entry, got {_go_type(item)}")
        stream = service = None
        accounts = None
        response = SINGLETON
        threshold = None
        position = 0
        for key, v in item.items():
            lowered = str(key).lower()
            if lowered == "stream":
                if service is not None:
                    raise _Bad(f'Detected stream "{v}" but already saw a service')
                if not isinstance(v, str):
                    raise _Bad(f"Expected stream name to be string, got {_go_type(v)}")
                stream = v
            elif lowered == "service":
                if stream is not None:
                    raise _Bad(f'Detected service "{v}" but already saw a stream')
                if not isinstance(v, str):
                    raise _Bad(f"Expected service name to be string, got {_go_type(v)}")
                service = v
            elif lowered in ("response", "response_type"):
                if not isinstance(v, str):
                    raise _Bad(f"Expected response type to be string, got {_go_type(v)}")
                kinds = {"single": SINGLETON, "singleton": SINGLETON, "stream": STREAMED, "chunk": CHUNKED,
                         "chunked": CHUNKED}
                if v.lower() not in kinds:
                    raise _Bad(f'Unknown response type: "{v}"')
                response = kinds[v.lower()]
            elif lowered in ("threshold", "response_threshold", "response_max_time", "response_time"):
                if not isinstance(v, str):
                    raise _Bad(f"Expected response threshold to be a parseable time duration, got {_go_type(v)}")
                try:
                    threshold = parse_duration(v)
                except ValueError:
                    raise _Bad(f'Expected response threshold to be a parseable time duration, got "{v}"') from None
            elif lowered == "accounts":
                if not isinstance(v, list) or not all(isinstance(a, str) for a in v):
                    raise _Bad("error parsing export accounts: expected an array of account names")
                accounts = list(v)
            elif lowered == "account_token_position":
                position = _expect(v, int, key)
            elif lowered == "latency":
                pass  # service latency tracking needs a system account: accepted, not reported
            else:
                raise _Bad(f'unknown field "{key}"')
        if stream is not None and (response != SINGLETON or threshold is not None):
            raise _Bad("Detected response directive on non-service")
        if stream is not None:
            subject = stream
        elif service is not None:
            subject = service
        else:
            continue
        out.append(ExportConfig(subject, service is not None, accounts, response,
                                threshold if threshold is not None else 120.0, position))
    return out


def _imports(value) -> list:
    """opts.go parseAccountImports / parseImportStreamOrService."""
    if not isinstance(value, list):
        raise _Bad(f"Imports should be an array, got {_go_type(value)}")
    out = []
    service_subjects: dict = {}
    for item in value:
        if not isinstance(item, dict):
            raise _Bad(f"Import Items should be a map with type entry, got {_go_type(item)}")
        kind = None
        account = subject = to = prefix = ""
        share = False
        for key, v in item.items():
            lowered = str(key).lower()
            if lowered in ("stream", "service"):
                if kind is not None:
                    raise _Bad(f"Detected {lowered} but already saw a {kind}")
                if not isinstance(v, dict):
                    raise _Bad(f"{lowered.capitalize()} entry should be an account map, got {_go_type(v)}")
                kind = lowered
                for member, mv in v.items():
                    if str(member).lower() == "account":
                        account = _expect(mv, str, member)
                    elif str(member).lower() == "subject":
                        subject = _expect(mv, str, member)
                    else:
                        raise _Bad(f'unknown field "{member}"')
                if not account or not subject:
                    raise _Bad("Expect an account name and a subject")
            elif lowered == "prefix":
                prefix = _expect(v, str, key)
            elif lowered == "to":
                to = _expect(v, str, key)
            elif lowered == "share":
                share = _expect(v, bool, key)
            else:
                raise _Bad(f'unknown field "{key}"')
        if kind == "stream" and prefix and to:
            raise _Bad("Stream import can not have a 'prefix' and a 'to' property")
        if kind is None:
            continue
        imp = ImportConfig(account, subject, kind == "service", to, prefix if kind == "stream" else "", share)
        if imp.service:
            local = to or subject
            if local in service_subjects:
                prev = service_subjects[local]
                raise _Bad(
                    f'Duplicate service import subject "{local}", previously used in import for account '
                    f'"{prev.account}", subject "{prev.subject}"'
                )
            service_subjects[local] = imp
        out.append(imp)
    return out


def _mapping_entry(source: str, dest) -> list:
    """One mapping's destinations, checked as nats-server's AddWeightedMappings does."""
    if not is_valid_subject(source.encode()) or any(c in source for c in " \t\r\n\f"):
        raise _Bad(f'Subject "{source}" is not a valid subject')
    if isinstance(dest, str):
        dests = [MapDest(dest, 100)]
    elif isinstance(dest, list):
        dests = [_map_dest(item) for item in dest]
    else:
        dests = [_map_dest(dest)]
    try:
        SubjectMappings([(source, dests)])
    except MappingError as exc:
        if not isinstance(dest, str):
            # nats-server 2.9.10 names the destination as if it were a string, and fails on that.
            kind = "[]interface {}" if isinstance(dest, list) else "map[string]interface {}"
            raise _Bad(f"interface conversion: interface {{}} is {kind}, not string") from exc
        raise _Bad(f'Error adding mapping for "{source}" to "{dest}" : {exc}') from exc
    return dests


def _map_dest(value) -> MapDest:
    """opts.go parseAccountMapDest: {dest | destination, weight (N or "N%"), cluster}."""
    if not isinstance(value, dict):
        raise _Bad("Expected an entry for the mapping destination")
    subject, weight, cluster = "", None, ""
    for key, v in value.items():
        lowered = str(key).lower()
        if lowered in ("dest", "destination"):
            subject = _expect(v, str, key)
        elif lowered == "weight":
            if isinstance(v, str):
                text = v.removesuffix("%")
                try:
                    weight = int(text)
                except ValueError:
                    raise _Bad(f'Invalid weight "{text}" for mapping destination') from None
            elif isinstance(v, int) and not isinstance(v, bool):
                weight = v
            else:
                raise _Bad(f"Unknown entry type for weight of {v}\n")
            if not 0 <= weight <= 100:
                raise _Bad(f"Invalid weight {weight} for mapping destination")
        elif lowered == "cluster":
            cluster = _expect(v, str, key)
        else:
            raise _Bad(f'Unknown field "{key}" for mapping destination')
    if weight is None:
        raise _Bad(f'Missing weight for mapping destination "{subject}"')
    return MapDest(subject, weight, cluster)


def _account_jetstream(value) -> bool:
    """opts.go parseAccounts' jetstream: enabled/disabled (or true/false), or a map of limits
    (which enables it)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        lowered = value.lower()
        if lowered in ("enabled", "enable", "true"):
            return True
        if lowered in ("disabled", "disable", "false"):
            return False
        raise _Bad(f"Expected 'enabled' or 'disabled' for string value, got '{value}'")
    if isinstance(value, dict):
        return True
    raise _Bad(f"Expected map, bool or string to define JetStream, got {_go_type(value)}")


# opts.go parseJetStreamForAccount: the account block's keys -> natserver's limit names (those
# of $JS.API.INFO's limits).
_ACCOUNT_JETSTREAM_LIMITS = {
    "max_memory": "max_memory", "max_mem": "max_memory", "mem": "max_memory", "memory": "max_memory",
    "max_store": "max_storage", "max_file": "max_storage", "max_disk": "max_storage", "store": "max_storage",
    "disk": "max_storage", "max_streams": "max_streams", "streams": "max_streams",
    "max_consumers": "max_consumers", "consumers": "max_consumers",
    "max_bytes_required": "max_bytes_required", "max_stream_bytes": "max_bytes_required",
    "max_bytes": "max_bytes_required",
    "mem_max_stream_bytes": "memory_max_stream_bytes", "memory_max_stream_bytes": "memory_max_stream_bytes",
    "disk_max_stream_bytes": "storage_max_stream_bytes", "store_max_stream_bytes": "storage_max_stream_bytes",
    "max_ack_pending": "max_ack_pending",
}


def _account_jetstream_limits(value: dict) -> dict:
    limits = {}
    for key, item in value.items():
        name = _ACCOUNT_JETSTREAM_LIMITS.get(str(key).lower())
        if name is None:
            raise _Bad(f'unknown field "{key}"')
        if str(key).lower() in ("max_bytes_required", "max_stream_bytes", "max_bytes"):
            if not isinstance(item, bool):
                raise _Bad(f'Expected a parseable bool for "{key}", got {item}')
        elif not isinstance(item, int) or isinstance(item, bool):
            raise _Bad(f'Expected a parseable size for "{key}", got {item}')
        limits[name] = item
    return limits


def _account_limits(config, value) -> None:
    """opts.go parseAccountLimits: max_connections, max_subscriptions, max_payload, max_leafnodes."""
    if not isinstance(value, dict):
        raise _Bad(f"Expected account limits to be a map/struct, got {value}")
    for key, v in value.items():
        lowered = str(key).lower()
        if lowered in ("max_connections", "max_conn"):
            config.max_connections = _expect(v, int, key)
        elif lowered in ("max_subscriptions", "max_subs"):
            config.max_subscriptions = _expect(v, int, key)
        elif lowered in ("max_payload", "max_pay"):
            config.max_payload = _expect(v, int, key)
        elif lowered in ("max_leafnodes", "max_leafs"):
            _expect(v, int, key)
        else:
            raise _Bad(f'Unknown field "{key}" parsing account limits')


def _resolver(value) -> str:
    """resolver: MEMORY is supported; URL(...) and directory resolvers are not."""
    if isinstance(value, str):
        if re.search(r"(?i)(MEM|MEMORY)\s*", value):
            return "MEMORY"
        if re.match(r"(?i)\s*URL", value):
            raise _Bad("natserver supports only the MEMORY account resolver, not URL resolvers")
    elif isinstance(value, dict):
        raise _Bad("natserver supports only the MEMORY account resolver, not nats based (directory) resolvers")
    else:
        raise _Bad(f"error parsing operator resolver, wrong type {_go_type(value)}")
    raise _Bad('error parsing account resolver, should be MEM or  URL("url") or a map containing dir and type '
               "state=[FULL|CACHE])")


def _preload(value) -> dict:
    if not isinstance(value, dict):
        raise _Bad("preload should be a map of account_public_key:account_jwt")
    out = {}
    for key, item in value.items():
        if not isinstance(item, str):
            raise _Bad("preload map value should be a string JWT")
        try:
            jwt.decode(item, expect="account")
        except jwt.JWTError:
            raise _Bad("invalid account JWT") from None
        out[key] = item
    return out


def _trusted_keys(value) -> list:
    keys = [value] if isinstance(value, str) else value
    if not isinstance(keys, list):
        raise _Bad(f"error parsing trusted: unsupported type {_go_type(value)}")
    for key in keys:
        if not isinstance(key, str):
            raise _Bad(f"error parsing trusted: unsupported type in array {_go_type(key)}")
        if not is_valid_public_key(key, "O"):
            raise _Bad(f'trust key "{key}" required to be a valid public operator nkey')
    return list(keys)


def unsupported_warnings(options: Options) -> list[str]:
    """One line per configuration key that natserver accepts but does not act on."""
    lines = []
    for key, value in options.extra.items():
        name = key.lower()
        if name in _QUIET_EXTRA_KEYS or name in ("cli", "security_warnings", "websocket_options"):
            continue
        if name == "authorization":
            members = ", ".join(sorted(value)) if isinstance(value, dict) else ""
            lines.append(f"Config option authorization {{{members}}} is not supported by natserver and is ignored")
        elif name in UNSUPPORTED_KEYS:
            lines.append(f'Config option "{key}" is not supported by natserver and is ignored')
        elif name == "cluster" and isinstance(value, dict):
            for member in value:
                lines.append(f'Cluster option "{member}" is not supported by natserver and is ignored')
        elif name in ("leafnodes", "leaf") and isinstance(value, dict):
            for member in value:
                lines.append(f'Leaf node option "{member}" is not supported by natserver and is ignored')
        elif name == "jetstream" and isinstance(value, dict):
            for member in value:
                if member.lower() in UNSUPPORTED_JETSTREAM_KEYS:
                    lines.append(f'JetStream option "{member}" is not supported by natserver and is ignored')
    for flag in (options.extra.get("cli") or {}):
        lines.append(f"Command line flag -{flag} is not supported by natserver and is ignored")
    lines += options.extra.get("security_warnings", [])
    for name in options.extra.get("websocket_options", []):
        lines.append(f'Websocket option "{name}" is not supported by natserver and is ignored')
    return lines


def _account_msg_trace(config: AccountConfig, key: str, value, locate) -> None:
    """opts.go parseAccountMsgTrace: ``msg_trace: "<dest>"`` or ``msg_trace { dest, sampling }``
    (sampling 1-100, a number or ``"<n>%"``); its messages, typo included, each at the place
    of the key it is about (``locate(name)``)."""

    def dest(name: str, item, where: str | None) -> None:
        if not isinstance(item, str):
            message = f'Field "{name}" should be a string, got {go_type_name(item)}'
        elif not is_valid_subject(item.encode()) or not is_valid_literal_subject(item.encode()):
            message = f'Trace destination "{item}" is not valid'
        else:
            config.trace_dest = item
            return
        raise _BadAt(where, message) if where else _Bad(message)

    if isinstance(value, str):
        dest(key, value, None)
        return
    if not isinstance(value, dict):
        raise _Bad(f'Expected account message trace "{key}" to be a string or a map/struct, got {go_type_name(value)}')
    for name, item in value.items():
        lowered = str(name).lower()
        where = locate(name)
        if lowered == "dest":
            dest(name, item, where)
        elif lowered == "sampling":
            if isinstance(item, int) and not isinstance(item, bool):
                number = item
            elif isinstance(item, str):
                try:
                    number = int(item.removesuffix("%"))
                except ValueError:
                    raise _BadAt(where, f'Invalid trace destination sampling value "{item}"') from None
            else:
                raise _BadAt(where, f'Trace destination sampling field "{name}" should be an integer or a '
                                    f"percentage, got {go_type_name(item)}")
            if number <= 0 or number > 100:
                raise _BadAt(where, f"Ttrace destination sampling value {number} is invalid, needs to be [1..100]")
            config.trace_sampling = number
        else:
            raise _BadAt(where, f'Unknown field "{name}" parsing account message trace map/struct "{key}"')
