"""Accounts: isolated subject spaces, and the streams and services they share.

Every client belongs to one account, and an account is a subject space of its own (its own
:class:`Sublist`): a message published in account A reaches subscribers in A only. Users
without an account are in the global account ``$G`` (the server's own sublist). Accounts
come from the ``accounts {}`` block (or, in operator mode, from account JWTs)::

    accounts {
      A: { users: [{user: a, password: a}]
           exports: [{stream: "news.>"}, {service: "help.>", accounts: [B]}] }
      B: { users: [{user: b, password: b}]
           imports: [{stream: {account: A, subject: "news.>"}, prefix: "a"}
                     {service: {account: A, subject: "help.me"}, to: "help"}] }
    }

* A **stream** import makes A's messages on the exported subjects appear in B (under
  ``prefix.`` + subject, or the ``to`` subject): the server holds an internal subscription in
  A whose callback publishes the message again in B, as nats-server's shadow subscriptions do.
* A **service** import lets B's requests on ``to`` reach A's responders on the exported
  subject: as nats-server, an internal subscription in B forwards the request into A with a
  new ``_R_.`` reply subject (and a ``Nats-Request-Info`` header naming the requesting
  account); the response to that reply is routed back to the requester's own reply subject,
  once for ``response: single`` (the default), for 2 minutes for ``stream``/``chunked``.
* Exports may be public or restricted to a list of accounts; an import of something not
  exported to the importing account is a configuration error, with nats-server's message.

Per-account ``limits`` (max_connections, max_subscriptions, max_payload) are enforced.
Checking an account costs nothing per message: a client just routes in its account's sublist.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

import orjson

from .. import clock
from .subjects import has_wildcard, subject_tokens, subjects_collide, subset_match
from .sublist import Sublist, is_valid_subject
from .transform import SubjectMappings

__all__ = ["AccountConfig", "Account", "Accounts", "GLOBAL_ACCOUNT", "SYSTEM_ACCOUNT"]

log = logging.getLogger("natserver")

GLOBAL_ACCOUNT = "$G"
SYSTEM_ACCOUNT = "$SYS"
SINGLETON, STREAMED, CHUNKED = "Singleton", "Stream", "Chunked"
# accounts.go DEFAULT_SERVICE_EXPORT_RESPONSE_THRESHOLD: how long a response route lives.
RESPONSE_THRESHOLD = 120.0
REQUEST_INFO_HEADER = "Nats-Request-Info"
MAX_IMPORT_DEPTH = 8  # chained imports followed for one message (cycles are cut here)
_DIGITS = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


@dataclass
class ExportConfig:
    subject: str
    service: bool
    accounts: list | None = None  # None: public
    response_type: str = SINGLETON
    threshold: float = RESPONSE_THRESHOLD
    token_position: int = 0


@dataclass
class ImportConfig:
    account: str
    subject: str  # in the exporting account
    service: bool
    to: str = ""  # in the importing account ("" = subject, or prefix + subject)
    prefix: str = ""
    share: bool = False


@dataclass
class AccountConfig:
    """One entry of ``accounts {}`` (or an account JWT's contents)."""

    name: str
    exports: list = field(default_factory=list)
    imports: list = field(default_factory=list)
    max_connections: int = -1
    max_subscriptions: int = -1
    max_payload: int = -1
    nkey: str = ""
    jwt: object = None  # natserver.auth.jwt.AccountClaims in operator mode
    mappings: list = field(default_factory=list)  # [(source, [transform.MapDest])], in order
    jetstream: bool = False  # jetstream: enabled, or limits, or a JWT's limits (natserver.jetstream)
    # jetstream { max_mem, max_file, max_streams, max_consumers, ... } (or a JWT's) as
    # $JS.API.INFO names them: max_memory, max_storage, max_streams, max_consumers, ... (absent: no limit)
    jetstream_limits: dict = field(default_factory=dict)
    # msg_trace { dest, sampling } (2.11, server/msgtrace.py): where W3C traceparent messages
    # are traced to, and the percentage of them traced ("": none).
    trace_dest: str = ""
    trace_sampling: int = 0
    extra: dict = field(default_factory=dict)


# -- subjects ---------------------------------------------------------------------------------


class Transform:
    """A stream import's subject mapping: ``from`` with wildcards onto ``to`` (the ``*``/``>``
    tokens, ``$1``/``{{wildcard(1)}}`` references, in order)."""

    def __init__(self, source: str, dest: str) -> None:
        self.source = subject_tokens(source)
        self.dest = subject_tokens(dest)
        self.wildcards = [i for i, t in enumerate(self.source) if t in ("*", ">")]

    def apply(self, subject: str) -> str:
        tokens = subject_tokens(subject)
        values = []
        for i in self.wildcards:
            if self.source[i] == ">":
                values.append(".".join(tokens[i:]))
            else:
                values.append(tokens[i] if i < len(tokens) else "")
        out = []
        n = 0
        for token in self.dest:
            ref = _wildcard_ref(token)
            if ref is not None:
                out.append(values[ref - 1] if 0 < ref <= len(values) else token)
            elif token in ("*", ">"):
                out.append(values[n] if n < len(values) else token)
                n += 1
            else:
                out.append(token)
        return ".".join(out)


def _wildcard_ref(token: str) -> int | None:
    if token.startswith("$") and token[1:].isdigit():
        return int(token[1:])
    lowered = token.replace(" ", "").lower()
    if lowered.startswith("{{wildcard(") and lowered.endswith(")}}") and lowered[11:-3].isdigit():
        return int(lowered[11:-3])
    return None


# -- configuration checks (parseAccounts' second half) ----------------------------------------


def _approved(export: ExportConfig, importer: str, subject: str) -> bool:
    if export.token_position > 0:
        tokens = subject_tokens(subject)
        return export.token_position <= len(tokens) and tokens[export.token_position - 1] == importer
    if export.accounts is None:
        return True
    return importer in export.accounts


def find_export(exporter: AccountConfig, subject: str, service: bool) -> ExportConfig | None:
    """checkStreamExportApproved/checkServiceExportApproved: an exact subject first, then an
    export the import's subject is a subset of."""
    candidates = [e for e in exporter.exports if e.service == service]
    for export in candidates:
        if export.subject == subject:
            return export
    for export in candidates:
        if subset_match(subject, export.subject):
            return export
    return None


def import_error(configs: dict[str, AccountConfig], importer: AccountConfig, imp: ImportConfig) -> str | None:
    """Why an import is refused (nats-server's words), or None."""
    exporter = configs.get(imp.account)
    kind = "service" if imp.service else "stream"
    if exporter is None:
        return f'"{imp.account}" account not defined for {kind} import'
    if imp.service:
        to = imp.to or imp.subject
        if not is_valid_subject(imp.subject.encode()) or not is_valid_subject(to.encode()):
            return f'Error adding service import "{imp.subject}": invalid subject'
        export = find_export(exporter, imp.subject, True)
        if export is None or not _approved(export, importer.name, imp.subject):
            return f'Error adding service import "{imp.subject}": service import not authorized'
        return None
    if not is_valid_subject(imp.subject.encode()):
        return f'Error adding stream import "{imp.subject}": stream import not authorized'
    export = find_export(exporter, imp.subject, False)
    if export is None or not _approved(export, importer.name, imp.subject):
        return f'Error adding stream import "{imp.subject}": stream import not authorized'
    if imp.prefix and has_wildcard(imp.prefix):
        return f'Error adding stream import "{imp.subject}": stream import prefix can not contain wildcard tokens'
    return None


def check_accounts(configs: list[AccountConfig]) -> list[str]:
    """Every import is of something exported to its account; exports name known accounts."""
    by_name = {c.name: c for c in configs}
    errors = []
    for config in configs:
        for export in config.exports:
            kind = "service" if export.service else "stream"
            for name in export.accounts or ():
                if name not in by_name:
                    errors.append(f'"{name}" account not defined for {kind} export')
            if export.token_position:
                tokens = subject_tokens(export.subject)
                if len(tokens) < export.token_position or tokens[export.token_position - 1] != "*":
                    errors.append(f'Error adding {kind} export "{export.subject}": invalid subject')
    if errors:
        return errors
    # Stream imports first, then services, as parseAccounts; each checked against the imports
    # already added for cycles (accounts.go checkStreamImportsForCycles/...ServiceImports...).
    streams: dict[str, list] = {c.name: [] for c in configs}  # account -> [(exporter, local subject)]
    services: dict[str, list] = {c.name: [] for c in configs}  # account -> [(exporter, local, remote)]
    for service in (False, True):
        for config in configs:
            seen = set()
            for imp in config.imports:
                if imp.service != service:
                    continue
                error = import_error(by_name, config, imp)
                if error is None and not imp.service:
                    key = (imp.account, imp.subject)
                    if key in seen:
                        error = f'Error adding stream import "{imp.subject}": stream import already exists'
                    seen.add(key)
                if error is None:
                    local = _local_subject(imp)
                    if service and _service_cycle(services, by_name, imp.account, local, {config.name}):
                        error = f'Error adding service import "{imp.subject}": import forms a cycle'
                    elif not service and _stream_cycle(streams, by_name, imp.account, local, {config.name}):
                        error = f'Error adding stream import "{imp.subject}": import forms a cycle'
                if error:
                    errors.append(error)
                    continue
                if service:
                    services[config.name].append((imp.account, _local_subject(imp), imp.subject))
                else:
                    streams[config.name].append((imp.account, _local_subject(imp)))
    return errors


def _local_subject(imp: ImportConfig) -> str:
    if imp.service:
        return imp.to or imp.subject
    if imp.prefix:
        return (imp.prefix if imp.prefix.endswith(".") else imp.prefix + ".") + imp.subject
    return imp.to or imp.subject


def _stream_cycle(streams: dict, configs: dict, account: str, to: str, visited: set, depth: int = 0) -> bool:
    config = configs.get(account)
    if config is None or depth > 1024:
        return depth > 1024
    if not any(not e.service and subset_match(to, e.subject) for e in config.exports):
        return False
    for source, local in streams.get(account, ()):
        if subjects_collide(to, local):
            if source in visited:
                return True
            visited.add(account)
            if subset_match(local, to):
                to = local
            if _stream_cycle(streams, configs, source, to, visited, depth + 1):
                return True
    return False


def _service_cycle(services: dict, configs: dict, account: str, local_from: str, visited: set, depth: int = 0) -> bool:
    if depth > 1024:
        return True
    for source, local, remote in services.get(account, ()):
        if subjects_collide(local_from, remote):
            if source in visited:
                return True
            visited.add(account)
            if subset_match(local, local_from):
                local_from = local
            if _service_cycle(services, configs, source, local_from, visited, depth + 1):
                return True
    return False


# -- running accounts -------------------------------------------------------------------------


class Account:
    """An account of a running server: its subject space and its share of other accounts'."""

    def __init__(self, server, name: str, sublist: Sublist | None = None) -> None:
        self.server = server
        self.name = name
        self.sublist = sublist if sublist is not None else Sublist()
        self.config: AccountConfig | None = None
        self.clients: set = set()
        self._internal: Any = None  # the server's internal client (natserver.server, a layer up)
        self._import_subs: list = []  # (owner account, subscription) of our imports
        self._responses: dict[bytes, list] = {}  # _R_ reply -> [requester account, reply, type, deadline]
        self._response_prefix: bytes | None = None
        self._response_sub = None
        self.expired = False

    def __repr__(self) -> str:
        return f"<Account {self.name}>"

    @property
    def max_connections(self) -> int:
        return self.config.max_connections if self.config is not None else -1

    @property
    def max_subscriptions(self) -> int:
        return self.config.max_subscriptions if self.config is not None else -1

    @property
    def max_payload(self) -> int:
        return self.config.max_payload if self.config is not None else -1

    @property
    def internal(self):
        """This account's connection-less client: it owns the import subscriptions and
        publishes what they bring into this account."""
        if self._internal is None:
            self._internal = self.server.make_internal_client(self.sublist)
            self._internal.account = self
        return self._internal

    def subscribe(self, subject: str, callback, queue: str | None = None):
        """An internal subscription in this account's subject space (in ``queue``'s group)."""
        server = self.server
        server._internal_sids += 1
        return self.internal.subscribe_callback(subject.encode(), callback, b"i%d" % server._internal_sids,
                                                queue.encode() if queue else None)

    def unsubscribe(self, sub) -> None:
        if self._internal is not None:
            self._internal.remove_subscription(sub)

    def publish(self, subject: bytes, reply: bytes | None, headers: bytes | None, body: bytes,
                routes: bool = True) -> bool:
        """Publish into this account (from an import); says whether anybody took it.
        ``routes`` False: not to routes (a stream import's copy: see add_stream_import)."""
        server = self.server
        if server._import_depth >= MAX_IMPORT_DEPTH:
            return False  # an import cycle: stop here
        payload = (headers or b"") + body
        header_size = len(headers) if headers else -1
        sizes = f"{len(headers)} {len(payload)}".encode() if headers else str(len(payload)).encode()
        server._import_depth += 1
        delivering, server.delivering = server.delivering, None  # a publish, not a delivery
        internal = self.internal
        to_routes, internal.forwards_to_routes = internal.forwards_to_routes, routes and internal.forwards_to_routes
        try:
            return internal.publish(subject, reply, header_size, sizes, payload)
        finally:
            server._import_depth -= 1
            server.delivering = delivering
            internal.forwards_to_routes = to_routes

    def deliver_as(self, match_subject: bytes, subject: bytes, reply: bytes | None, headers: bytes | None,
                   body: bytes) -> int:
        """Deliver into this account by ``match_subject`` a message showing ``subject`` (a
        push consumer's delivery that came through a stream import, as nats-server does);
        says how many took it. Not to routes, as a stream import's publish."""
        server = self.server
        if server._import_depth >= MAX_IMPORT_DEPTH:
            return 0  # an import cycle: stop here
        server._import_depth += 1
        internal = self.internal
        to_routes, internal.forwards_to_routes = internal.forwards_to_routes, False
        try:
            return internal.deliver_as(match_subject, subject, reply, headers, body)
        finally:
            server._import_depth -= 1
            internal.forwards_to_routes = to_routes

    def has_interest(self, subject: bytes) -> bool:
        """Whether anyone listens on ``subject`` in this account (its imports followed)."""
        server = self.server
        if server._import_depth >= MAX_IMPORT_DEPTH:
            return False  # an import cycle: stop here
        server._import_depth += 1
        try:
            return self.internal.has_interest(subject)
        finally:
            server._import_depth -= 1

    # -- imports ----------------------------------------------------------------------------

    def clear_imports(self) -> None:
        for owner, sub in self._import_subs:
            owner.unsubscribe(sub)
        self._import_subs = []

    def add_stream_import(self, source: "Account", imp: ImportConfig) -> None:
        """Messages on ``imp.subject`` in ``source`` are published here, mapped."""
        to = imp.to
        if imp.prefix:
            prefix = imp.prefix if imp.prefix.endswith(".") else imp.prefix + "."
            to = prefix + imp.subject
        if not to:
            to = imp.subject
        if to == imp.subject:
            mapper = None
        elif has_wildcard(imp.subject):
            mapper = Transform(imp.subject, to).apply
        else:
            mapper = None

        literal_to = to.encode()
        target = self

        def mapped(subject: bytes) -> bytes:
            if mapper is not None:
                return mapper(subject.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
            return subject if has_wildcard(imp.subject) else literal_to

        def deliver(subject: bytes, reply: bytes | None, headers: bytes | None, body: bytes) -> bool:
            delivering = target.server.delivering
            if delivering is not None:
                # A JetStream push delivery: routed by its deliver subject (mapped like any
                # subject of the import), still showing the stored message's subject. It was
                # delivered only if someone here took it (the consumer takes it back if not).
                return target.deliver_as(mapped(delivering), subject, reply, headers, body) > 0
            # Not to routes: every server with this import republishes what reaches it in the
            # exporting account (a route brings it there), so a copy sent on would arrive twice
            # (nats-server: shadow subscriptions in the exporting account, no copy in this one).
            return target.publish(mapped(subject), reply, headers, body, routes=False)

        # The exporting account has interest in a subject through this import only while this
        # account has (nats-server's shadow subscriptions): a push consumer whose deliver
        # subject is imported waits for its subscriber instead of delivering into nothing.
        deliver.interest = lambda subject: target.has_interest(mapped(subject))  # type: ignore[attr-defined]
        # Message tracing (server/msgtrace.py): the importing account and the subject there.
        deliver.msg_trace_export = lambda subject: (target.name, mapped(subject))  # type: ignore[attr-defined]
        self._import_subs.append((source, source.subscribe(imp.subject, deliver)))

    def add_service_import(self, dest: "Account", imp: ImportConfig, export: ExportConfig | None) -> None:
        """Requests on ``imp.to`` here go to ``imp.subject`` in ``dest``; replies come back."""
        local = imp.to or imp.subject
        remote = imp.subject
        if local == remote:
            mapper = None
        elif has_wildcard(remote):
            mapper = Transform(local, remote).apply
        else:
            mapper = None
        response_type = export.response_type if export is not None else SINGLETON
        threshold = export.threshold if export is not None else RESPONSE_THRESHOLD
        requester = self
        literal_remote = remote.encode()

        def mapped(subject: bytes) -> bytes:
            if mapper is not None:
                return mapper(subject.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
            return subject if has_wildcard(remote) else literal_remote

        def forward(subject: bytes, reply: bytes | None, headers: bytes | None, body: bytes,
                    trace_disabled: bool = False) -> bool:
            # nats-server 2.10+ (client.go processServiceImport): the import counts as a
            # delivery only if the exporting account delivered it, else the requester gets 503.
            # A traced message (server/msgtrace.py) goes on with its tracing turned off.
            server = requester.server
            to = mapped(subject)
            new_reply = None
            if reply:
                new_reply = dest.new_response(requester, reply, response_type, threshold)
            publisher = getattr(server, "callback_publisher", None)
            rtt = getattr(publisher, "rtt", None) if publisher is not None else None
            info: dict[str, str | int] = {"acc": requester.name}
            if rtt:
                info["rtt"] = int(rtt * 1e9)
            headers = set_header(headers, REQUEST_INFO_HEADER, orjson.dumps(info).decode())
            if trace_disabled:
                headers = set_header(headers, TRACE_DEST_HEADER, TRACE_DEST_DISABLED)
            return dest.publish(to, new_reply, headers, body)

        # Message tracing (server/msgtrace.py): the exporting account and the subject there.
        forward.msg_trace_import = lambda subject: (dest.name, mapped(subject))  # type: ignore[attr-defined]
        # Routes are not told of this subscription (every server has the import, and takes a
        # request here itself); leaf nodes are, as nats-server tells them of service imports.
        forward.route_interest = False  # type: ignore[attr-defined]
        self._import_subs.append((self, self.subscribe(local, forward)))

    # -- service responses (in the exporting account) ---------------------------------------

    def new_response(self, requester: "Account", reply: bytes, response_type: str, threshold: float) -> bytes:
        if self._response_prefix is None:
            rand = int.from_bytes(os.urandom(8), "little")
            prefix = bytearray(b"_R_.")
            for _ in range(6):
                prefix.append(_DIGITS[rand % 62])
                rand //= 62
            self._response_prefix = bytes(prefix) + b"."
            self._response_sub = self.subscribe(self._response_prefix.decode() + ">", self._respond)
        now = clock.monotonic()
        if len(self._responses) > 1024:
            for key, entry in list(self._responses.items()):
                if entry[3] < now:
                    del self._responses[key]
        rand = int.from_bytes(os.urandom(8), "little")
        token = bytearray()
        for _ in range(6):  # accounts.go replyLen
            token.append(_DIGITS[rand % 62])
            rand //= 62
        new_reply = self._response_prefix + bytes(token)
        self._responses[new_reply] = [requester, bytes(reply), response_type, now + threshold]
        return new_reply

    def response_route(self, reply: bytes) -> tuple[Account, bytes] | None:
        """Where a response to ``reply`` (one of this account's ``_R_.`` subjects) goes: the
        requesting account and its own reply subject (None: not a live response subject)."""
        entry = self._responses.get(bytes(reply))
        if entry is None or entry[3] < clock.monotonic():
            return None
        return entry[0], entry[1]

    def _respond(self, subject: bytes, reply: bytes | None, headers: bytes | None, body: bytes) -> bool:
        # A JetStream delivery to a pull request's reply shows the stored message's subject:
        # it is routed by the reply (server.delivering), and keeps its ack reply subject.
        delivering = self.server.delivering
        key = bytes(delivering if delivering is not None else subject)
        entry = self._responses.get(key)
        if entry is None:
            return False
        requester, original, response_type, deadline = entry
        if deadline < clock.monotonic():
            del self._responses[key]
            return False
        if response_type == SINGLETON:
            del self._responses[key]
        if delivering is not None:
            return requester.deliver_as(original, subject, reply, headers, body) > 0
        return requester.publish(original, None, headers, body)


# Message tracing's header (nats-server 2.11, server/msgtrace.py), and its value that turns
# tracing off (msgtrace.go MsgTraceDestDisabled: not a valid subject).
TRACE_DEST_HEADER = "Nats-Trace-Dest"
TRACE_DEST_DISABLED = "trace disabled"


def set_header(headers: bytes | None, key: str, value: str) -> bytes:
    """client.go setHeader: add ``key: value`` to a NATS/1.0 header block, replacing it."""
    line = f"{key}: {value}\r\n".encode()
    if not headers or len(headers) <= 2:
        return b"NATS/1.0\r\n" + line + b"\r\n"
    block = headers[:-2]  # without the blank line
    lines = block.split(b"\r\n")
    kept = [lines[0]] + [ln for ln in lines[1:] if ln and not ln.lower().startswith(key.lower().encode() + b":")]
    return b"\r\n".join(kept) + b"\r\n" + line + b"\r\n"


class Accounts:
    """The accounts of a running server (the global account always exists)."""

    def __init__(self, server) -> None:
        self.server = server
        self.global_account = Account(server, GLOBAL_ACCOUNT, server.sublist)
        self.by_name: dict[str, Account] = {GLOBAL_ACCOUNT: self.global_account}
        self.configs: dict[str, AccountConfig] = {}
        # Whether an account has msg_trace { dest }: only then may a W3C traceparent a peer
        # server sends start a trace here (server/msgtrace.py; a route's messages are looked
        # at for it only then).
        self.trace_parents = False

    def get(self, name: str | None) -> Account | None:
        return self.by_name.get(name or GLOBAL_ACCOUNT)

    def configure(self, configs: list[AccountConfig]) -> None:
        """Create or update the accounts and (re)wire every import. Existing accounts keep
        their subject space, so their clients and subscriptions stay."""
        self.configs = {c.name: c for c in configs}
        self.trace_parents = any(c.trace_dest for c in configs)
        for known in self.by_name.values():
            known.clear_imports()
        for config in configs:
            account = self.by_name.get(config.name)
            if account is None:
                account = self.by_name[config.name] = Account(self.server, config.name)
            account.config = config
        for config in configs:
            self.wire_imports(self.by_name[config.name])

    def configure_mappings(self, global_mappings: list, cluster: str = "") -> None:
        """Give every account's subject space its subject mappings (the global account's come
        from the top level of the configuration); clients apply them to what they publish.
        Raises MappingError for one nats-server would refuse (configs are checked earlier)."""
        for account in self.by_name.values():
            config = account.config
            entries = config.mappings if config is not None else []
            if account is self.global_account:
                entries = [*global_mappings, *entries]
            account.sublist.mappings = SubjectMappings(entries, cluster) if entries else None

    def wire_imports(self, account: Account) -> None:
        config = account.config
        if config is None:
            return
        for imp in config.imports:
            source = self.by_name.get(imp.account)
            if source is None or source.config is None:
                log.warning("Account %s: %s import from unknown account %s ignored", account.name,
                            "service" if imp.service else "stream", imp.account)
                continue
            error = import_error(self.configs, config, imp)
            if error is not None:
                log.warning("Account %s: %s", account.name, error)
                continue
            if imp.service:
                account.add_service_import(source, imp, find_export(source.config, imp.subject, True))
            else:
                account.add_stream_import(source, imp)

    def add(self, config: AccountConfig) -> Account:
        """Add (or replace) one account, e.g. from a JWT, and wire imports both ways."""
        self.configs[config.name] = config
        self.trace_parents = self.trace_parents or bool(config.trace_dest)
        account = self.by_name.get(config.name)
        if account is None:
            account = self.by_name[config.name] = Account(self.server, config.name)
        account.config = config
        account.clear_imports()
        self.wire_imports(account)
        # Accounts that import from this one may now be satisfied.
        for other in self.by_name.values():
            if other is not account and other.config is not None and any(
                i.account == config.name for i in other.config.imports
            ):
                other.clear_imports()
                self.wire_imports(other)
        return account

    def add_empty(self, name: str) -> Account:
        """An account with no configuration (nats-server's automatic $SYS)."""
        account = self.by_name.get(name)
        if account is None:
            account = self.by_name[name] = Account(self.server, name)
        return account

    def register(self, client, name: str | None) -> bool:
        """Move ``client`` into account ``name`` (its subscriptions move with it). False when
        the account is at its max_connections."""
        account = self.by_name.get(name or GLOBAL_ACCOUNT)
        if account is None:
            account = self.global_account
        current = getattr(client, "account", None)
        if current is account:
            return True
        if account.max_connections >= 0 and len(account.clients) >= account.max_connections:
            return False
        if current is not None:
            current.clients.discard(client)
        account.clients.add(client)
        client.account = account
        if client.sublist is not account.sublist:
            for sub in client.subs.values():
                client.sublist.remove(sub)
                account.sublist.insert(sub)
            client.sublist = account.sublist
        return True

    def unregister(self, client) -> None:
        account = getattr(client, "account", None)
        if account is not None:
            account.clients.discard(client)


def system_account_name(options, server=None) -> str:
    """The system account's name: the configured one, the operator's, or ``$SYS``."""
    operator = getattr(server, "operator", None) if server is not None else None
    return options.system_account or getattr(operator, "system_account", "") or SYSTEM_ACCOUNT
