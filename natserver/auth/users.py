"""Authentication and publish/subscribe permissions, as nats-server v2.9.10 does them.

Who may connect (:class:`Authenticator`, nats-server's ``processClientOrLeafAuthentication``),
in this order:

* operator mode (``operator`` + ``resolver``): a user JWT signed by an account the operator
  trusts, and the INFO nonce signed with the user's nkey (see ``auth/jwt.py``);
* nkey users (``authorization { users: [{nkey: U...}] }``): the INFO carries a nonce, the
  client signs it with its Ed25519 key and sends ``nkey`` and ``sig``;
* users with passwords (plain or bcrypt ``$2a$...``), possibly in ``accounts {}``; with
  ``tls { verify_and_map: true }`` the client certificate names the user instead;
  ``no_auth_user`` names the user a client without credentials becomes;
* a token (``--auth``, ``authorization { token }``), or one user/password (``--user/--pass``).

Secrets are compared in constant time (``hmac.compare_digest``, bcrypt) and never logged.

Permission lists are matched with a :class:`Sublist`, exactly as nats-server matches them with
its own sublist (client.go setPermissions/canSubscribe/pubAllowed): the subject a client asks
for is looked up *as a literal* in the allow list and the deny list. So with ``subscribe:
["bar.*"]`` a ``SUB bar.>`` is allowed (``>`` is one token that ``*`` matches) while ``SUB >`` is
not. A wildcard subscription that overlaps a deny entry is allowed, and a per-client filter
then keeps the denied subjects from being delivered to it. ``allow_responses`` lets a client
publish to the reply subject of a message it received (once, within 2 minutes, by default).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import os
import re
from dataclasses import dataclass, field
from typing import Sequence

import trio

from .. import clock
from ..protocol import errors
from ..protocol.errors import ProtocolError
from ..protocol.gotext import go_duration_error, parse_duration
from ..routing.subjects import is_subset_match_tokens
from ..routing.sublist import Sublist
from . import nkeys
from .tls import peer_certificate_identities

# Everything in __all__ gets re-exported as part of natserver's public API.
__all__ = ["Permissions", "User", "NkeyUser", "check_password"]

log = logging.getLogger("natserver")

# client.go maxPermCacheSize / pruneSize: the per-client cache of publish decisions.
MAX_PERM_CACHE_SIZE = 128
PERM_CACHE_PRUNE_TO = 96
# const.go DEFAULT_ALLOW_RESPONSE_MAX_MSGS / _EXPIRATION; client.go replyPermLimit.
DEFAULT_ALLOW_RESPONSE_MAX_MSGS = 1
DEFAULT_ALLOW_RESPONSE_EXPIRATION = 120.0
REPLY_PERM_LIMIT = 4096
# Longest credential we look at: anything longer cannot match and is refused before hashing.
MAX_SECRET_LEN = 64 * 1024
# nkey.go: the INFO nonce, 11 random bytes in unpadded base64url (15 characters).
NONCE_RAW_LEN = 11


class _Entry:
    """A permission entry stored in a Sublist (which wants ``subject`` and ``queue``)."""

    __slots__ = ("subject", "queue")

    def __init__(self, subject: bytes, queue: bytes | None = None) -> None:
        self.subject = subject
        self.queue = queue


def _sublist_of(subjects: list[str], with_queues: bool) -> Sublist:
    sublist = Sublist()
    for text in subjects:
        parts = text.split()
        subject = parts[0].encode() if parts else b""
        queue = parts[1].encode() if with_queues and len(parts) == 2 else None
        sublist.insert(_Entry(subject, queue))
    return sublist


def _allow_deny(spec) -> tuple[list[str] | None, list[str] | None]:
    """``publish: ["a", "b"]`` means allow; ``publish: {allow: [...], deny: [...]}``."""
    if spec is None:
        return None, None
    if isinstance(spec, str):
        return [spec], None
    if isinstance(spec, list):
        return [str(s) for s in spec], None
    if isinstance(spec, dict):
        lowered = {str(k).lower(): v for k, v in spec.items()}
        allow = lowered.get("allow")
        deny = lowered.get("deny")
        if isinstance(allow, str):
            allow = [allow]
        if isinstance(deny, str):
            deny = [deny]
        return (None if allow is None else [str(s) for s in allow]), (None if deny is None else [str(s) for s in deny])
    raise ValueError(f"permissions must be a list or a map with allow/deny, not {type(spec).__name__}")


def _response_spec(value) -> tuple[int, float] | None:
    """``allow_responses: true`` or ``{max: n, expires: "1m"}`` -> (max messages, seconds)."""
    if value is None or value is False:
        return None
    if value is True:
        return DEFAULT_ALLOW_RESPONSE_MAX_MSGS, DEFAULT_ALLOW_RESPONSE_EXPIRATION
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return int(value[0]), float(value[1])
    if not isinstance(value, dict):
        raise ValueError("error parsing response permissions, expected a boolean or a map")
    max_msgs, expires = DEFAULT_ALLOW_RESPONSE_MAX_MSGS, DEFAULT_ALLOW_RESPONSE_EXPIRATION
    for key, item in value.items():
        name = str(key).lower()
        if name in ("max", "max_msgs", "max_messages", "max_responses"):
            if isinstance(item, bool) or not isinstance(item, int):
                raise ValueError(f"error parsing response permissions: {key} must be an integer")
            if item != 0:  # negative: no limit; 0: the default
                max_msgs = item
        elif name in ("expires", "expiration", "ttl"):
            if isinstance(item, (int, float)) and not isinstance(item, bool):
                seconds = float(item)  # natserver extension: seconds
            elif isinstance(item, str):
                try:
                    seconds = parse_duration(item)
                except ValueError:
                    raise ValueError(f"error parsing expires: {go_duration_error(item)}") from None
            else:
                raise ValueError("error parsing expires, not a duration string")
            if seconds != 0:
                expires = seconds
        else:
            raise ValueError(f'Unknown field "{key}" parsing permissions')
    return max_msgs, expires


def _queue_matches(queue: bytes, groups: Sequence[list]) -> bool:
    for group in groups:
        pattern = group[0].queue
        if b"*" not in pattern.split(b".") and b">" not in pattern.split(b"."):
            if queue == pattern:
                return True
        elif is_subset_match_tokens(queue.split(b"."), pattern.split(b".")):
            return True
    return False


class Permissions:
    """One user's publish and subscribe permissions (shared by all its connections).

    ``spec`` is the configuration map: ``publish``/``pub``, ``subscribe``/``sub`` (a list of
    allowed subjects, or ``{allow: [...], deny: [...]}``) and ``allow_responses``.
    """

    def __init__(self, spec: dict | None = None) -> None:
        spec = {str(k).lower(): v for k, v in (spec or {}).items()}
        self.spec = spec
        publish = spec.get("publish", spec.get("pub", spec.get("import")))
        subscribe = spec.get("subscribe", spec.get("sub", spec.get("export")))
        pub_allow, pub_deny = _allow_deny(publish)
        sub_allow, sub_deny = _allow_deny(subscribe)
        self.subject_lists = (pub_allow, pub_deny, sub_allow, sub_deny)  # as configured, for public()
        responses = spec.get("allow_responses", spec.get("publish_allow_responses"))
        self.responses = _response_spec(responses)
        if self.responses is not None and pub_allow is None:
            # validateResponsePermissions: responses turn off the blanket publish allow.
            pub_allow = []
        # nats-server: an empty publish allow list still exists (and allows nothing); an empty
        # subscribe allow list is no list at all.
        self.pub_allow = _sublist_of(pub_allow, False) if pub_allow is not None else None
        self.pub_deny = _sublist_of(pub_deny, False) if pub_deny else None
        self.sub_allow = _sublist_of(sub_allow, True) if sub_allow else None
        self.sub_deny = _sublist_of(sub_deny, True) if sub_deny else None
        self.sub_deny_subjects = [s.split()[0].encode() for s in (sub_deny or []) if s.split()]
        self.checks_publish = self.pub_allow is not None or self.pub_deny is not None

    def __eq__(self, other) -> bool:
        return isinstance(other, Permissions) and self.spec == other.spec

    __hash__ = None  # type: ignore[assignment]  # equal by value and mutable in place: unhashable

    def __repr__(self) -> str:
        return f"Permissions({self.spec!r})"

    def public(self) -> dict:
        """client.go publicPermissions: the lists as $SYS.REQ.USER.INFO shows them (an empty
        list is left out, as Go's omitempty does; responses' ttl in nanoseconds)."""
        pub_allow, pub_deny, sub_allow, sub_deny = self.subject_lists
        out: dict = {"publish": {}, "subscribe": {}}
        for kind, allow, deny in (("publish", pub_allow, pub_deny), ("subscribe", sub_allow, sub_deny)):
            if allow:
                out[kind]["allow"] = list(allow)
            if deny:
                out[kind]["deny"] = list(deny)
        if self.responses is not None:
            out["responses"] = {"max": self.responses[0], "ttl": int(self.responses[1] * 1_000_000_000)}
        return out

    def for_client(self):
        """What a connection holds: these permissions, or (with allow_responses) a per-client
        view that also tracks the reply subjects the client may answer."""
        return _ClientPermissions(self) if self.responses is not None else self

    def publish_allowed(self, subject: bytes) -> bool:
        allowed = True
        if self.pub_allow is not None:
            allowed = bool(self.pub_allow.match(subject).psubs)
        if allowed and self.pub_deny is not None:
            allowed = not self.pub_deny.match(subject).psubs
        return allowed

    def can_publish(self, subject: bytes, cache: dict) -> bool:
        """pubAllowed, with the per-client decision cache nats-server keeps."""
        allowed = cache.get(subject)
        if allowed is not None:
            return allowed
        allowed = self.publish_allowed(subject)
        _remember(cache, subject, allowed)
        return allowed

    def can_subscribe(self, subject: bytes, queue: bytes | None) -> bool:
        """canSubscribe: allow list (with queue entries), then deny list."""
        allowed = True
        if self.sub_allow is not None:
            result = self.sub_allow.match(subject)
            allowed = bool(result.psubs)
            if queue is not None and result.qsubs:
                allowed = _queue_matches(queue, result.qsubs)
        if allowed and self.sub_deny is not None:
            result = self.sub_deny.match(subject)
            allowed = not result.psubs
            if queue is not None and result.qsubs:
                allowed = not _queue_matches(queue, result.qsubs)
        return allowed

    def needs_delivery_filter(self, subject: bytes) -> bool:
        """A wildcard subscription overlapping a deny entry: filter what is delivered to it."""
        tokens = subject.split(b".")
        if b"*" not in tokens and b">" not in tokens:
            return False
        return any(is_subset_match_tokens(deny.split(b"."), tokens) for deny in self.sub_deny_subjects)

    def delivery_denied(self, subject: bytes, reply: bytes | None = None) -> bool:
        return self.sub_deny is not None and bool(self.sub_deny.match(subject).psubs)


def _remember(cache: dict, subject: bytes, allowed: bool) -> None:
    if len(cache) >= MAX_PERM_CACHE_SIZE:
        for key in list(cache)[: MAX_PERM_CACHE_SIZE - PERM_CACHE_PRUNE_TO]:
            del cache[key]
    cache[subject] = allowed


class _ClientPermissions:
    """Permissions with ``allow_responses`` for one connection: the reply subjects of the
    messages delivered to it may be published to (``max`` times each, within ``expires``).
    It is the client's delivery filter too, which is how it sees those reply subjects."""

    def __init__(self, base: Permissions) -> None:
        self.base = base
        self.spec = base.spec
        responses = base.responses
        assert responses is not None  # made only for allow_responses (Permissions.for_client)
        self.responses = responses
        self.checks_publish = True
        self.sub_deny = base.sub_deny
        self.sub_deny_subjects = base.sub_deny_subjects
        self.replies: dict[bytes, list] = {}  # reply subject -> [when delivered, responses sent]

    def for_client(self):
        return self.base.for_client()

    def can_publish(self, subject: bytes, cache: dict) -> bool:
        allowed = cache.get(subject)
        if allowed:
            return True
        if allowed is None and self.base.publish_allowed(subject):
            _remember(cache, subject, True)
            return True
        # Denied: maybe a response (never cached, as nats-server's pubAllowedFullCheck).
        entry = self.replies.get(subject)
        if entry is None:
            return False
        max_msgs, expires = self.responses
        entry[1] += 1
        if max_msgs > 0 and entry[1] > max_msgs:
            del self.replies[subject]
            return False
        if expires > 0 and clock.monotonic() - entry[0] > expires:
            del self.replies[subject]
            return False
        return True

    def can_subscribe(self, subject: bytes, queue: bytes | None) -> bool:
        return self.base.can_subscribe(subject, queue)

    def needs_delivery_filter(self, subject: bytes) -> bool:
        return self.base.needs_delivery_filter(subject)

    def delivery_denied(self, subject: bytes, reply: bytes | None = None) -> bool:
        if self.sub_deny is not None and self.sub_deny.match(subject).psubs:
            return True
        if reply:
            self.replies[bytes(reply)] = [clock.monotonic(), 0]
            if len(self.replies) > REPLY_PERM_LIMIT:
                self._prune()
        return False

    def _prune(self) -> None:
        max_msgs, expires = self.responses
        now = clock.monotonic()
        for key, (when, sent) in list(self.replies.items()):
            if (max_msgs > 0 and sent >= max_msgs) or (expires > 0 and now - when > expires):
                del self.replies[key]


@dataclass
class User:
    """A user from ``authorization { users: [...] }``, an account's ``users``, or --user/--pass.
    ``account`` is the name of the account it belongs to (None: the global account)."""

    username: str
    password: str = ""
    permissions: Permissions | None = None
    extra: dict = field(default_factory=dict)
    account: str | None = None
    connection_types: frozenset | None = None


@dataclass
class NkeyUser:
    """A user known by its public nkey (``{nkey: "U..."}``); it proves it owns the key by
    signing the INFO nonce."""

    nkey: str
    permissions: Permissions | None = None
    account: str | None = None
    connection_types: frozenset | None = None


# auth.go validBcryptPrefix
_BCRYPT_RE = re.compile(r"^\$2[abxy]\$\d{2}\$")


def is_bcrypt(stored: str) -> bool:
    return stored.startswith("$") and bool(_BCRYPT_RE.match(stored))


def check_password(given: str, stored: str) -> bool:
    """Constant-time comparison; ``$2a$``-style stored passwords are bcrypt hashes."""
    if not isinstance(given, str) or len(given) > MAX_SECRET_LEN:
        # Still spend the comparison, so that the length is all a refusal reveals.
        hmac.compare_digest(stored.encode(), stored.encode())
        return False
    secret = given.encode("utf-8", "surrogatepass")
    if is_bcrypt(stored):
        import bcrypt  # only needed when a config uses hashes

        try:
            return bcrypt.checkpw(secret, stored.encode())
        except ValueError:
            return False
    return hmac.compare_digest(secret, stored.encode("utf-8", "surrogatepass"))


def decode_signature(sig: str) -> bytes | None:
    """The ``sig`` of CONNECT: unpadded base64url, or standard base64 (auth.go)."""
    if not isinstance(sig, str) or not sig or len(sig) > 1024:
        return None
    text = sig.replace("\r", "").replace("\n", "")  # Go's base64 decoders skip new lines
    if "=" not in text and len(text) % 4 != 1 and re.fullmatch(r"[A-Za-z0-9_-]*", text):
        try:
            return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (binascii.Error, ValueError):
            pass
    if len(text) % 4 == 0 and re.fullmatch(r"[A-Za-z0-9+/]*={0,2}", text):
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            return None
    return None


# client.go's connection types (a user's allowed_connection_types names them).
STANDARD = "STANDARD"
LEAFNODE = "LEAFNODE"


def new_nonce() -> bytes:
    return base64.urlsafe_b64encode(os.urandom(NONCE_RAW_LEN)).rstrip(b"=")


class Authenticator:
    """Everything a server needs to decide who a CONNECT is; rebuilt on reload."""

    def __init__(self, options, accounts=None, operator=None) -> None:
        self.options = options
        self.accounts = accounts  # natserver.routing.accounts.Accounts (None: only the global account)
        self.operator = operator  # natserver.auth.jwt.OperatorMode in operator mode
        self.users: dict[str, User] = {u.username: u for u in options.users}
        self.nkeys: dict[str, NkeyUser] = {u.nkey: u for u in getattr(options, "nkeys", [])}
        self.token = options.authorization
        self.username = options.username
        self.password = options.password
        self.no_auth_user = getattr(options, "no_auth_user", "")
        tls = getattr(options, "tls", None)
        self.tls_map = bool(tls is not None and tls.verify_and_map)
        self.required = bool(operator is not None or self.nkeys or self.users or self.username or self.token)
        self.nonce_required = bool(operator is not None or self.nkeys)

    # -- INFO -----------------------------------------------------------------------------------

    @property
    def info_auth_required(self) -> bool:
        """auth_required in INFO: a valid no_auth_user hides it (server.go createClient)."""
        if not self.required:
            return False
        return not (self.no_auth_user and (self.no_auth_user in self.users or self.no_auth_user in self.nkeys))

    def no_auth_user_record(self) -> User | NkeyUser | None:
        if self.no_auth_user and self.users and self.no_auth_user in self.users:
            return self.users[self.no_auth_user]
        if self.no_auth_user and self.nkeys:
            return self.nkeys.get(self.no_auth_user)
        return None

    # -- CONNECT --------------------------------------------------------------------------------

    def authenticate(self, client, opts: dict) -> bool:
        if not self.required:
            return True
        if self.operator is not None:
            return self.operator.authenticate(client, opts)
        nkey = opts.get("nkey") or ""
        if (self.nkeys and not nkey and self.no_auth_user in self.nkeys and not opts.get("user")
                and not opts.get("pass") and not opts.get("auth_token")):
            nkey = self.no_auth_user  # auth.go (2.10+): no_auth_user may name an nkey
        if self.nkeys and nkey:
            nkey_user = self.nkeys.get(nkey) if isinstance(nkey, str) else None
            if nkey_user is None or not _type_allowed(client, nkey_user.connection_types):
                return False
            if nkey != self.no_auth_user and not self._signed_nonce(client, nkey, opts.get("sig")):
                return False
            register(client, nkey, nkey_user.permissions, nkey_user.account, self.accounts)
            client.nkey = nkey
            return True
        if self.users:
            user = None
            if self.tls_map:
                user = self._user_from_certificate(client)
                if user is None:
                    return False
                register(client, user.username, user.permissions, user.account, self.accounts)
                return True
            username = opts.get("user") or ""
            password = opts.get("pass") or ""
            token = opts.get("auth_token") or ""
            if self.no_auth_user and not username and not password and not token:
                fallback = self.users.get(self.no_auth_user)
                if fallback is not None:
                    username, password = fallback.username, fallback.password
            if username:
                user = self.users.get(username) if isinstance(username, str) else None
                if user is None or not _type_allowed(client, user.connection_types):
                    check_password("", "")  # the same work as a wrong password, more or less
                    return False
                if not check_password(password, user.password):
                    return False
                register(client, user.username, user.permissions, user.account, self.accounts)
                return True
        if self.token:
            token = opts.get("auth_token") or ""
            return check_password(token, self.token)
        if self.username:
            username = opts.get("user") or ""
            password = opts.get("pass") or ""
            ok_user = hmac.compare_digest(str(username).encode("utf-8", "surrogatepass"), self.username.encode())
            ok_pass = check_password(password, self.password)
            if ok_user and ok_pass:
                client.user = self.username
                return True
        return False

    def authenticate_leaf(self, client, opts: dict, default_account: str | None) -> bool:
        """auth.go processClientOrLeafAuthentication for a leaf node's CONNECT (``client``
        is a stand-in whose connection_type is LEAFNODE): a user JWT, an nkey or a user of
        this server is checked as for a client and binds the leaf to its account. A CONNECT
        naming none of them, to a server with users, a token or a single user, is bound to
        ``default_account`` (leafnodes { authorization { account } }): nats-server 2.9.10
        does not ask a leaf for the clients' token or single user."""
        if not self.required or self.operator is not None:
            return self.authenticate(client, opts)
        nkey = opts.get("nkey") or ""
        username = opts.get("user") or ""
        if (self.nkeys and nkey) or (self.users and (self.tls_map or username or self.no_auth_user_record())):
            return self.authenticate(client, opts)
        register(client, "", None, default_account, self.accounts)
        return True

    def use_no_auth_user(self, client) -> bool:
        """parser.go: with no_auth_user, a first op other than CONNECT makes the client that
        user (telnet demos). Returns False when there is no such user."""
        user = self.no_auth_user_record()
        if user is None:
            return False
        if isinstance(user, NkeyUser):
            register(client, user.nkey, user.permissions, user.account, self.accounts)
            client.nkey = user.nkey
        else:
            register(client, user.username, user.permissions, user.account, self.accounts)
        return True

    @staticmethod
    def _signed_nonce(client, public_key: str, sig) -> bool:
        if not sig:
            log.debug("%s - Signature missing", client_label(client))
            return False
        raw = decode_signature(sig)
        if raw is None:
            log.debug("%s - Signature not valid base64", client_label(client))
            return False
        if not nkeys.verify(public_key, client.nonce or b"", raw):
            log.debug("%s - Signature not verified", client_label(client))
            return False
        return True

    def _user_from_certificate(self, client) -> User | None:
        for name in peer_certificate_identities(getattr(client, "tls_stream", None)):
            user = self.users.get(name)
            if user is not None:
                return user
        return None

    def failure_detail(self, opts: dict) -> str:
        """client.go authViolation's log line (no secrets)."""
        if self.operator is not None:
            return "authentication error"
        if self.nkeys:
            return f'authentication error - Nkey "{_printable(opts.get("nkey"))}"'
        if self.users:
            return f'authentication error - User "{_printable(opts.get("user"))}"'
        return "authentication error"


def _type_allowed(client, types) -> bool:
    """client.go connectionTypeAllowed: a client connection is STANDARD unless it says
    otherwise (a leaf node connection's stand-in says LEAFNODE)."""
    return not types or getattr(client, "connection_type", STANDARD) in types


def plaintext_password_warning(options) -> bool:
    """auth.go checkAuthforWarnings: passwords that are not bcrypt hashes."""
    if options.password and not is_bcrypt(options.password):
        return True
    tls = getattr(options, "tls", None)
    for user in options.users:
        if not user.password and tls is not None and tls.verify_and_map:
            continue
        if not is_bcrypt(user.password):
            return True
    return False


def _printable(value) -> str:
    text = value if isinstance(value, str) else ""
    return text[:256].encode("unicode_escape").decode("ascii").replace('"', '\\"')


def client_label(client) -> str:
    return f"{client.ip}:{client.port} - cid:{client.cid}"


class AccountLimitError(Exception):
    """The account has as many connections as its limits allow."""


def authenticate_connect(client, opts: dict) -> None:
    """CONNECT when authentication is required: raises ProtocolError (Authorization Violation,
    or the account's connection limit) and logs why, as nats-server does; then applies the
    limits and the expiry of what the client authenticated as."""
    server = client.server
    client._auth_error = None
    client.auth_expires = None
    client.account_expires = None
    ok = server.authenticate(client, opts)
    if client._auth_error is not None:
        log.error("%s - %s", client_label(client), client._auth_error.text)
        raise ProtocolError(client._auth_error, client._auth_error.text)
    if not ok:
        log.error("%s - %s", client_label(client), server.auth.failure_detail(opts))
        raise ProtocolError(errors.AUTH_VIOLATION, "authentication failed")
    apply_limits(client)
    watch_expiry(client)


def apply_limits(client) -> None:
    """Account (and user JWT) limits on payload size and subscriptions, within the server's."""
    options = client.server.options
    account = client.account
    max_payload = options.max_payload
    max_subs = options.max_subscriptions if options.max_subscriptions > 0 else None
    for limit in (account.max_payload if account is not None else -1, getattr(client, "user_max_payload", -1)):
        if limit is not None and limit >= 0:
            max_payload = min(max_payload, limit)
    for limit in (account.max_subscriptions if account is not None else -1, getattr(client, "user_max_subs", -1)):
        if limit is not None and limit >= 0:
            max_subs = limit if max_subs is None else min(max_subs, limit)
    client.parser.max_payload = max_payload
    client.max_subs = max_subs


def watch_expiry(client) -> None:
    """Cut the client off when what it authenticated as expires (``client.auth_expires``: its
    user JWT, its connect-time window; ``client.account_expires``: its account's JWT), as
    nats-server's timers do (client.go authExpired, accounts.go expiredTimeout). One task per
    client, started once: a reload that moves either time is followed."""
    if getattr(client, "_expiry_watched", False) or client._nursery is None:
        return
    if getattr(client, "auth_expires", None) is None and getattr(client, "account_expires", None) is None:
        return
    client._expiry_watched = True
    client._nursery.start_soon(_expire, client)


async def _expire(client) -> None:
    try:
        while not client.closed:
            user, account = getattr(client, "auth_expires", None), getattr(client, "account_expires", None)
            deadlines = [t for t in (user, account) if t is not None]
            if not deadlines:
                return  # a reload took the expiry away
            await trio.sleep(max(0.0, min(deadlines) - clock.now()))
            if client.closed:
                return
            now = clock.now()
            user, account = getattr(client, "auth_expires", None), getattr(client, "account_expires", None)
            if user is not None and now >= user:
                error = errors.AUTH_EXPIRED
            elif account is not None and now >= account:
                error = errors.ACCOUNT_AUTH_EXPIRED
                if client.account is not None:
                    client.account.expired = True
            else:
                continue  # moved by a reload
            log.debug("%s - %s", client_label(client), error.text)
            client.queue(error.wire)
            client.close(error.close_reason, flush=True)
            client.server.flush_touched()
            return
    finally:
        client._expiry_watched = False


def register(client, name: str, permissions, account: str | None, accounts) -> None:
    """RegisterUser: the client becomes ``name`` with these permissions, in this account."""
    if accounts is not None and not accounts.register(client, account):
        raise AccountLimitError(account)
    client.user = name
    perms = permissions.for_client() if permissions is not None else None
    if perms is not client.perms:
        client.perms = perms
        client._publish_allowed = {}
        client.deliver_filter = None
        if perms is not None and perms.responses is not None:
            # The delivery filter sees every message the client receives, with its reply.
            client.deliver_filter = perms
            for sub in client.subs.values():
                sub.limited = True
