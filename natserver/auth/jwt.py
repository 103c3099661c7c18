"""NATS JWTs and operator mode (decentralised authentication) with the memory resolver.

A NATS JWT is ``base64url(header).base64url(claims).base64url(signature)``; the header is
``{"typ":"JWT","alg":"ed25519-nkey"}`` and the signature is Ed25519 by the issuer's nkey
(``iss``) over the first two parts. Three kinds form a chain of trust:

* the **operator** JWT (``operator: op.jwt`` in the config), self-signed; its key and its
  ``signing_keys`` are the trusted keys;
* **account** JWTs, issued by a trusted key, found by the **resolver** (``resolver: MEMORY``
  with ``resolver_preload: {<account public key>: <account JWT>}``); they carry limits,
  exports and imports, signing keys, revocations and default permissions;
* **user** JWTs, issued by an account (or one of its signing keys, then naming the account in
  ``issuer_account``), sent in CONNECT's ``jwt`` with ``sig``, the INFO nonce signed by the
  user's nkey (a ``bearer_token`` user needs no signature).

Verified: signatures and issuers all the way up, expiry (``exp``) and ``nbf`` of every JWT,
revocations, ``src`` networks, ``times`` windows, allowed connection types, scoped signing
keys (their template replaces the user's permissions and limits). Enforced limits: account
``conn``, ``subs``, ``payload``, ``imports``, ``exports``, ``wildcards``; user ``subs``,
``payload``. A user JWT that expires while connected is disconnected ("User Authentication
Expired"), and so are an account's clients when its account JWT expires ("Account
Authentication Expired"). What natserver does not support is refused with a clear error: URL or directory
resolvers are a configuration error. An account's subject ``mappings`` apply as in a
configuration file. An account JWT's JetStream limits (``mem_storage``, ``disk_storage``,
``streams``, ``consumer``, ``max_ack_pending``, ``mem_max_stream_bytes``,
``disk_max_stream_bytes``, ``max_bytes_required``, or a ``tiered_limits`` ``R1`` tier) enable
JetStream for the account, as nats-server's ``IsJSEnabled``, and are its JetStream account
limits (natserver.jetstream). Leaf node limits are ignored (logged once).

``encode()`` and ``OperatorTree`` build JWTs too, for tests and tools.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import hashlib
import ipaddress
import logging
import zoneinfo
from dataclasses import dataclass, field
from typing import Any

import orjson

from .. import clock
from ..routing.accounts import CHUNKED, SINGLETON, STREAMED, AccountConfig, ExportConfig, ImportConfig, find_export
from ..routing.subjects import is_subset_match
from ..routing.sublist import is_valid_subject
from ..routing.transform import MapDest, MappingError, SubjectMappings
from . import nkeys
from .users import Permissions, client_label, decode_signature, register

__all__ = ["Claims", "JWTError", "decode", "encode", "OperatorMode", "read_operator_jwt"]

log = logging.getLogger("natserver")

JWT_PREFIX = "eyJ"
ALG_V2 = "ed25519-nkey"
ALG_V1 = "ed25519"
MAX_JWT_LEN = 1 << 20
CONNECTION_TYPES = {"STANDARD", "WEBSOCKET", "LEAFNODE", "LEAFNODE_WS", "MQTT", "MQTT_WS"}


class JWTError(ValueError):
    """A JWT that does not decode or verify."""


def _b64decode(part: str) -> bytes:
    if "=" in part:
        raise JWTError("illegal base64 data")
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise JWTError("illegal base64 data") from None


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class Claims:
    """A decoded, signature-checked JWT."""

    raw: dict
    token: str
    version: int = 2

    @property
    def subject(self) -> str:
        return self.raw.get("sub") or ""

    @property
    def issuer(self) -> str:
        return self.raw.get("iss") or ""

    @property
    def name(self) -> str:
        return self.raw.get("name") or ""

    @property
    def issued_at(self) -> int:
        return int(self.raw.get("iat") or 0)

    @property
    def expires(self) -> int:
        return int(self.raw.get("exp") or 0)

    @property
    def not_before(self) -> int:
        return int(self.raw.get("nbf") or 0)

    @property
    def nats(self) -> dict:
        value = self.raw.get("nats")
        return value if isinstance(value, dict) else {}

    @property
    def type(self) -> str:
        return str(self.nats.get("type") or self.raw.get("type") or "")

    def time_error(self, now: float | None = None) -> str | None:
        """jwt ClaimsData.Validate: expired or not yet valid."""
        now = clock.now() if now is None else now
        if self.expires and now > self.expires:
            return "claim is expired"
        if self.not_before and now < self.not_before:
            return "claim is not yet valid"
        return None


_ISSUER_KIND = {"operator": "O", "account": "O", "user": "A", "activation": "A"}


def decode(token: str, expect: str | None = None) -> Claims:
    """Decode and verify a JWT (signature by its issuer, issuer of the right kind).

    ``expect``: "operator", "account", "user" or "activation". Raises JWTError."""
    if not isinstance(token, str) or not token:
        raise JWTError("expected a JWT")
    if len(token) > MAX_JWT_LEN:
        raise JWTError("JWT too long")
    token = token.strip()
    parts = token.split(".")
    if len(parts) != 3:
        raise JWTError("expected 3 chunks")
    try:
        header = orjson.loads(_b64decode(parts[0]))
        raw = orjson.loads(_b64decode(parts[1]))
    except orjson.JSONDecodeError:
        raise JWTError("invalid JSON") from None
    if not isinstance(header, dict) or not isinstance(raw, dict):
        raise JWTError("invalid JWT")
    if str(header.get("typ", "")).upper() != "JWT":
        raise JWTError(f"not supported type {header.get('typ')!r}")
    alg = str(header.get("alg", "")).lower()
    if alg not in (ALG_V2, ALG_V1):  # jwt parseHeaders: either algorithm, whatever the version
        raise JWTError(f"unexpected {header.get('alg')!r} algorithm")
    raw, version = _claims_version(raw)
    signature = _b64decode(parts[2])
    claims = Claims(raw, token, max(version, 1))
    issuer = claims.issuer
    # jwt Decode: a version 1 claim signs the payload chunk only, version 2 "header.payload".
    signed = parts[1] if version <= 1 else parts[0] + "." + parts[1]
    if not isinstance(issuer, str) or not nkeys.verify(issuer, signed.encode(), signature):
        raise JWTError(f"claim failed V{2 if version > 1 else 1} signature verification")
    kind = claims.type
    if expect is not None:
        if kind != expect:
            raise JWTError(f"not {'an' if expect[0] in 'aeiou' else 'a'} {expect} claim")
        kind = expect
    letter = _ISSUER_KIND.get(kind)
    if letter is not None and not nkeys.is_valid_public_key(issuer, letter):
        raise JWTError(f"{kind} claims issuer is not a valid {'operator' if letter == 'O' else 'account'} key")
    subject_letter = {"operator": "O", "account": "A", "user": "U"}.get(kind)
    if subject_letter is not None and not nkeys.is_valid_public_key(claims.subject, subject_letter):
        raise JWTError(f"subject is not a valid {kind} public key")
    return claims


_KNOWN_KINDS = ("operator", "account", "user", "activation")
_LIB_VERSION = 2  # nats-io/jwt v2's libVersion


def _claims_version(raw: dict) -> tuple[dict, int]:
    """nats-io/jwt's loadClaims: the version comes from the claims, not the header. A top-level
    ``type`` is a version 1 claim, otherwise ``nats.version``. A version 1 claim is returned in
    version 2's shape (``type``, ``tags`` and ``issuer_account`` moved under ``nats``; an
    activation's import type from ``nats.type`` to ``nats.kind``), so the rest reads one shape.
    A claim of no known kind is generic: version -1, verified as version 1 is."""
    nats = raw.get("nats")
    nats = dict(nats) if isinstance(nats, dict) else {}
    top_type = raw.get("type")
    kind: Any  # from the JSON: anything, checked against _KNOWN_KINDS below
    if isinstance(top_type, str) and top_type:
        kind, version = top_type, 1
    else:
        kind = nats.get("type")
        version = nats.get("version", 0)
        if not isinstance(version, int) or isinstance(version, bool):
            raise JWTError("invalid JSON")  # Go refuses a non-integer version while decoding
    if version > _LIB_VERSION:
        raise JWTError("JWT was generated by a newer version ")
    if kind not in _KNOWN_KINDS:
        if kind in ("cluster", "server"):
            raise JWTError(f"{kind.capitalize()}Claims are not supported")
        return raw, -1
    if version not in (1, 2):
        raise JWTError(f"library supports version {_LIB_VERSION} or less - received {version}")
    if version == 1:
        raw = dict(raw)
        if kind == "activation":
            nats["kind"] = nats.pop("type", "")
        nats["type"] = kind
        nats["version"] = 1
        for moved in ("tags", "issuer_account"):
            if moved in raw:
                nats[moved] = raw.pop(moved)
        raw.pop("type", None)
        raw["nats"] = nats
    return raw, version


def encode(claims: dict, signer: nkeys.KeyPair) -> str:
    """Sign ``claims`` (iss, iat and jti are filled in) as nats-io/jwt v2 does."""
    body = dict(claims)
    body.setdefault("iat", int(clock.now()))
    body["iss"] = signer.public_key.decode()
    body["jti"] = ""
    digest = hashlib.sha256(orjson.dumps(body)).digest()
    body["jti"] = base64.b32encode(digest).decode().rstrip("=")
    header = _b64encode(orjson.dumps({"typ": "JWT", "alg": ALG_V2}))
    payload = _b64encode(orjson.dumps(body))
    signature = _b64encode(signer.sign(f"{header}.{payload}".encode()))
    return f"{header}.{payload}.{signature}"


def parse_decorated(text: str) -> str:
    """The JWT of a decorated (creds-style) file, or the text itself."""
    lines = [line.strip() for line in text.splitlines()]
    for i, line in enumerate(lines):
        if line.startswith("-----BEGIN") and "JWT" in line:
            for candidate in lines[i + 1 :]:
                if candidate and not candidate.startswith("---"):
                    return candidate
    return text.strip()


def read_operator_jwt(path_or_jwt: str) -> Claims:
    """jwt.go readOperatorJWT: a file (maybe decorated), or the JWT inline."""
    try:
        with open(path_or_jwt) as f:
            text = f.read()
    except OSError:
        if not path_or_jwt.startswith(JWT_PREFIX):
            raise
        text = path_or_jwt
    return decode(parse_decorated(text), expect="operator")


# -- operator mode ----------------------------------------------------------------------------


def _subject_list(value) -> list[str]:
    if not value:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value if isinstance(v, str)]


def jwt_permissions(spec: dict | None) -> dict | None:
    """accounts.go buildPermissionsFromJwt: a natserver permissions spec, or None."""
    if not isinstance(spec, dict):
        return None
    out: dict = {}
    pub = spec.get("pub") or {}
    sub = spec.get("sub") or {}
    if isinstance(pub, dict) and (pub.get("allow") or pub.get("deny")):
        out["publish"] = {k: _subject_list(pub.get(k)) for k in ("allow", "deny") if pub.get(k)}
    if isinstance(sub, dict) and (sub.get("allow") or sub.get("deny")):
        out["subscribe"] = {k: _subject_list(sub.get(k)) for k in ("allow", "deny") if sub.get(k)}
    resp = spec.get("resp")
    if isinstance(resp, dict):
        max_msgs = int(resp.get("max") or 0)
        ttl = float(resp.get("ttl") or 0) / 1e9  # a Go duration: nanoseconds
        out["allow_responses"] = {"max": max_msgs, "expires": ttl}
    return out or None


def _template(values: list[str], user: Claims, account: "JWTAccount") -> list[str]:
    """auth.go processUserPermissionsTemplate (name, subject, account-name, account-subject,
    tag and account-tag); subjects that come out invalid are dropped."""
    out = []
    for subject in values:
        tokens = subject.split(".")
        choices: list[list[str]] = []
        for token in tokens:
            if token.startswith("{{") and token.endswith("}}"):
                op = token[2:-2].strip().lower()
                if op == "name()":
                    choices.append([user.name])
                elif op == "subject()":
                    choices.append([user.subject])
                elif op == "account-name()":
                    choices.append([account.claims.name])
                elif op == "account-subject()":
                    choices.append([account.name])
                elif (op.startswith("tag(") or op.startswith("account-tag(")) and op.endswith(")"):
                    tags = account.claims.raw.get("tags") if op.startswith("account-") else user.raw.get("tags")
                    key = op[op.index("(") + 1 : -1] + ":"
                    found = [t[len(key):] for t in (tags or []) if isinstance(t, str) and t.lower().startswith(key)]
                    choices.append(found or [""])
                else:
                    choices.append([" "])
            else:
                choices.append([token])
        combos: list[list[str]] = [[]]
        for options in choices:
            combos = [c + [o] for c in combos for o in options]
        for combo in combos:
            result = ".".join(combo)
            if is_valid_subject(result.encode()) and " " not in result:
                out.append(result)
    return out


@dataclass
class JWTAccount:
    """An account JWT the resolver holds, verified."""

    name: str  # the account's public key
    claims: Claims
    signing_keys: dict = field(default_factory=dict)  # key -> None or a user scope dict
    error: str = ""  # why it cannot be used (clients of it are refused)

    @property
    def nats(self) -> dict:
        return self.claims.nats


# A standalone server's streams have one replica: of tiered JetStream limits, this tier applies.
JETSTREAM_TIER = "R1"


def jetstream_limits(name: str, limits: dict) -> dict | None:
    """An account JWT's JetStream limits as natserver.jetstream's account limits, or None when
    they do not enable JetStream (jwt's IsJSEnabled: memory or disk storage not 0, or tiered
    limits). As nats-server's updateAccountClaims: storage limits as given (-1: unlimited, 0:
    none), per-stream byte limits and max_ack_pending unlimited unless positive."""
    tiers = limits.get("tiered_limits") or {}
    tier = ""
    if limits.get("mem_storage", 0) or limits.get("disk_storage", 0):
        source = limits
    elif isinstance(tiers, dict) and tiers:
        tier = JETSTREAM_TIER
        tier_limits = tiers.get(JETSTREAM_TIER)
        if not isinstance(tier_limits, dict):
            log.warning("Account %s: no %s tier in its JetStream tiered limits: it can store nothing",
                        name, JETSTREAM_TIER)
            tier_limits = {}
        source = tier_limits
    else:
        return None

    def number(key: str) -> int:
        value = source.get(key, 0)
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0

    def unlimited_unless_positive(key: str) -> int:
        return number(key) if number(key) > 0 else -1

    return {
        "max_memory": number("mem_storage"),
        "max_storage": number("disk_storage"),
        "max_streams": number("streams"),
        "max_consumers": number("consumer"),
        "max_ack_pending": unlimited_unless_positive("max_ack_pending"),
        "memory_max_stream_bytes": unlimited_unless_positive("mem_max_stream_bytes"),
        "storage_max_stream_bytes": unlimited_unless_positive("disk_max_stream_bytes"),
        "max_bytes_required": source.get("max_bytes_required") is True,
        **({"tier": tier} if tier else {}),  # reported as a tier (account info's "tiers")
    }


class OperatorMode:
    """Trusted operators, the memory resolver and the user JWT check of CONNECT."""

    def __init__(self, server, options) -> None:
        self.server = server
        self.options = options
        self.operators: list[Claims] = [
            o if isinstance(o, Claims) else read_operator_jwt(o) for o in options.trusted_operators
        ]
        keys = list(options.trusted_keys)
        for operator in self.operators:
            nats = operator.nats
            if not nats.get("strict_signing_key_usage"):
                keys.append(operator.subject)
            keys += [k for k in nats.get("signing_keys") or [] if isinstance(k, str)]
        self.trusted_keys = set(keys)
        self.system_account = options.system_account or next(
            (o.nats.get("system_account") for o in self.operators if o.nats.get("system_account")), ""
        )
        self.accounts: dict[str, JWTAccount] = {}
        for name, token in options.resolver_preload.items():
            self.accounts[name] = self._load_account(name, token)

    def _load_account(self, name: str, token: str) -> JWTAccount:
        try:
            claims = decode(token, expect="account")
        except JWTError as exc:
            account = JWTAccount(name, Claims({}, token), error=f"invalid account JWT: {exc}")
            log.error("Account %s: %s", name, account.error)
            return account
        account = JWTAccount(name, claims)
        for entry in claims.nats.get("signing_keys") or []:
            if isinstance(entry, str):
                account.signing_keys[entry] = None
            elif isinstance(entry, dict) and isinstance(entry.get("key"), str):
                account.signing_keys[entry["key"]] = entry
        if claims.subject != name:
            account.error = "account JWT subject does not match the resolver key"
        elif claims.issuer not in self.trusted_keys:
            account.error = "Account JWT not signed by trusted operator"
        if account.error:
            log.error("Account %s: %s", name, account.error)
        ignored = [k for k in ("data", "leaf") if (claims.nats.get("limits") or {}).get(k, -1) not in (-1, 0, None)]
        if ignored:
            log.warning("Account %s: limits %s are not enforced by natserver", name, ", ".join(ignored))
        return account

    # -- accounts -----------------------------------------------------------------------------

    def configure_accounts(self) -> None:
        """Accounts from the preloaded JWTs, with their exports, imports and limits."""
        configs = []
        for name, account in self.accounts.items():
            if account.error:
                continue
            nats = account.nats
            limits = nats.get("limits") or {}
            config = AccountConfig(name, jwt=account)
            config.max_connections = int(limits.get("conn", -1))
            config.max_subscriptions = int(limits.get("subs", -1))
            config.max_payload = int(limits.get("payload", -1))
            js_limits = jetstream_limits(name, limits)
            if js_limits is not None:
                config.jetstream, config.jetstream_limits = True, js_limits
            wildcards = limits.get("wildcards", True) is not False
            max_exports = int(limits.get("exports", -1))
            max_imports = int(limits.get("imports", -1))
            kinds = {"singleton": SINGLETON, "stream": STREAMED, "chunked": CHUNKED}
            for export in nats.get("exports") or []:
                if not isinstance(export, dict) or not isinstance(export.get("subject"), str):
                    continue
                subject = export["subject"]
                if not wildcards and any(t in ("*", ">") for t in subject.split(".")):
                    log.error("Account %s: export %s refused: wildcard exports are not allowed", name, subject)
                    continue
                if max_exports >= 0 and len(config.exports) >= max_exports:
                    log.error("Account %s: export %s refused: over the exports limit", name, subject)
                    continue
                service = export.get("type") == "service"
                threshold = export.get("response_threshold")
                config.exports.append(ExportConfig(
                    subject, service, [] if export.get("token_req") else None,
                    kinds.get(str(export.get("response_type", "Singleton")).lower(), SINGLETON),
                    float(threshold) / 1e9 if threshold else 120.0,
                    int(export.get("account_token_position") or 0),
                ))
                config.extra.setdefault("revocations", {})[subject] = export.get("revocations") or {}
            mappings = nats.get("mappings")
            for source, dests in (mappings.items() if isinstance(mappings, dict) else ()):
                # jwt WeightedMapping: a weight of 0 (unset) means 100.
                entries = [MapDest(str(d.get("subject") or ""), int(d.get("weight") or 100), str(d.get("cluster") or ""))
                           for d in (dests if isinstance(dests, list) else []) if isinstance(d, dict)]
                try:
                    SubjectMappings([(source, entries)])
                except (MappingError, ValueError) as exc:
                    # nats-server skips a mapping it cannot add (updateAccountClaims).
                    log.error("Account %s: mapping %s refused: %s", name, source, exc)
                    continue
                config.mappings.append((source, entries))
            for imp in nats.get("imports") or []:
                if not isinstance(imp, dict) or not isinstance(imp.get("subject"), str):
                    continue
                if max_imports >= 0 and len(config.imports) >= max_imports:
                    log.error("Account %s: import %s refused: over the imports limit", name, imp["subject"])
                    continue
                source = imp.get("account") or ""
                service = imp.get("type") == "service"
                to = imp.get("local_subject") or imp.get("to") or ""
                prefix = ""
                if not service and imp.get("to") and not imp.get("local_subject"):
                    prefix, to = imp["to"], ""  # a v2 stream import's "to" is a prefix
                config.imports.append(ImportConfig(source, imp["subject"], service, to, prefix, bool(imp.get("share"))))
                if imp.get("token"):
                    config.extra.setdefault("tokens", {})[(source, imp["subject"])] = imp["token"]
            configs.append(config)
        # Exports that need an activation token: approve the importers whose token checks out.
        by_name = {c.name: c for c in configs}
        for config in configs:
            for imp in config.imports:
                exporter = by_name.get(imp.account)
                export = find_export(exporter, imp.subject, imp.service) if exporter is not None else None
                if export is None or export.accounts is None or config.name in export.accounts:
                    continue
                token = config.extra.get("tokens", {}).get((imp.account, imp.subject))
                if token and self._activation_ok(token, exporter, config.name, imp.subject):
                    export.accounts = [*export.accounts, config.name]
        self.server.accounts.configure(configs)

    def _activation_ok(self, token: str, exporter, importer: str, subject: str) -> bool:
        try:
            claims = decode(token, expect="activation")
        except JWTError as exc:
            log.error("Account %s: activation token invalid: %s", importer, exc)
            return False
        account = self.accounts.get(exporter.name)
        issuer_ok = claims.issuer == exporter.name or (account is not None and claims.issuer in account.signing_keys)
        subject_ok = isinstance(claims.nats.get("subject"), str) and (
            claims.nats["subject"] == subject or _subset(subject, claims.nats["subject"])
        )
        if not issuer_ok or claims.subject != importer or not subject_ok or claims.time_error():
            log.error("Account %s: activation token for %s not valid", importer, subject)
            return False
        return True

    # -- CONNECT ------------------------------------------------------------------------------

    def authenticate(self, client, opts: dict) -> bool:
        label = client_label(client)

        def refuse(why: str) -> bool:
            log.debug("%s - %s", label, why)
            return False

        token = opts.get("jwt")
        if not token:
            return refuse("Authentication requires a user JWT")
        try:
            user = decode(token, expect="user")
        except JWTError as exc:
            return refuse(f"User JWT not valid: {exc}")
        problem = user.time_error() or _user_claims_error(user)
        if problem:
            return refuse(f"User JWT no longer valid: {problem}")
        nats = user.nats
        types = {str(t).upper() for t in nats.get("allowed_connection_types") or []}
        if types and getattr(client, "connection_type", "STANDARD") not in types:
            return refuse("Connection type not allowed")
        issuer = nats.get("issuer_account") or user.issuer
        account = self.accounts.get(issuer)
        if account is None:
            return refuse(f"Account JWT lookup error: account {issuer} not found")
        if account.error:
            log.error("%s - Account %s refused: %s", label, issuer, account.error)
            return False
        if account.claims.issuer not in self.trusted_keys:
            return refuse("Account JWT not signed by trusted operator")
        if user.issuer != account.name and user.issuer not in account.signing_keys:
            return refuse("User JWT issuer is not known")
        scope = account.signing_keys.get(user.issuer) if user.issuer != account.name else None
        source = nats
        if scope is not None and scope.get("kind") == "user_scope":
            if any(nats.get(k) for k in ("pub", "sub", "resp", "src", "times")) or any(
                nats.get(k, -1) not in (-1, None) for k in ("subs", "data", "payload")
            ):
                return refuse("User JWT is not valid: scoped users require no permissions or limits set")
            source = dict(scope.get("template") or {})
            for kind in ("pub", "sub"):
                spec = source.get(kind) or {}
                if isinstance(spec, dict):
                    templated: dict[str, list[str]] = {}
                    for k in ("allow", "deny"):
                        values = _subject_list(spec.get(k))
                        result = _template(values, user, account)
                        if k == "allow" and values and not result:
                            templated.setdefault("deny", []).append(">")
                        elif result:
                            templated.setdefault(k, []).extend(result)
                    source[kind] = templated
        problem = account.claims.time_error()
        if problem:
            return refuse("Account JWT has expired")
        if nats.get("bearer_token") or source.get("bearer_token"):
            pass  # no nonce signature for bearer tokens
        else:
            sig = opts.get("sig")
            if not sig:
                return refuse("Signature missing")
            raw = decode_signature(sig)
            if raw is None:
                return refuse("Signature not valid base64")
            if not nkeys.verify(user.subject, client.nonce or b"", raw):
                return refuse("Signature not verified")
        revocations = account.nats.get("revocations") or {}
        for key in (user.subject, "*"):
            revoked_at = revocations.get(key)
            if isinstance(revoked_at, (int, float)) and user.issued_at <= revoked_at:
                return refuse("User authentication revoked")
        if not _source_allowed(source.get("src"), client.ip):
            log.error("%s - Bad src Ip %s", label, client.ip)
            return False
        allowed, valid_for = _within_times(source.get("times"), source.get("times_location"))
        if not allowed:
            log.error("%s - Outside connect times", label)
            return False
        spec = jwt_permissions(source)
        if spec is None:
            spec = jwt_permissions(account.nats.get("default_permissions"))
        permissions = Permissions(spec) if spec is not None else None
        register(client, user.subject, permissions, account.name, self.server.accounts)
        client.user_max_subs = int(source.get("subs", -1) if source.get("subs") is not None else -1)
        client.user_max_payload = int(source.get("payload", -1) if source.get("payload") is not None else -1)
        client.nkey = user.subject
        expires = []
        if user.expires:
            expires.append(float(user.expires))
        if valid_for is not None:
            expires.append(clock.now() + valid_for)
        client.auth_expires = min(expires) if expires else None
        # accounts.go checkExpiration: the account's clients are cut off when its JWT expires.
        client.account_expires = float(account.claims.expires) if account.claims.expires else None
        log.debug('%s - Authenticated JWT: Client "%s" (claim-name: "%s") signed with "%s" by Account "%s"',
                  label, user.subject, user.name, user.issuer, account.name)
        return True


def _subset(subject: str, test: str) -> bool:
    return is_subset_match(subject, test)


def _cidr_list(value) -> list[str]:
    """jwt CIDRList: a list, or (version 1's form) one string of comma-separated networks."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return _subject_list(value)


def _user_claims_error(user: Claims) -> str | None:
    """jwt UserClaims.Validate: malformed src networks and time windows are blocking."""
    nats = user.nats
    for cidr in _cidr_list(nats.get("src")):
        try:
            ipaddress.ip_network(cidr.strip(), strict=False)
        except ValueError:
            return f"invalid src {cidr!r}"
    for window in nats.get("times") or []:
        if not isinstance(window, dict) or _clock(window.get("start")) is None or _clock(window.get("end")) is None:
            return "invalid time range"
    location = nats.get("times_location")
    if location:
        try:
            zoneinfo.ZoneInfo(location)
        except Exception:
            return f"could not parse iana time zone by name: {location}"
    return None


def _source_allowed(src, ip: str) -> bool:
    """jwt.go validateSrc."""
    networks = _cidr_list(src)
    if not networks:
        return True
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return False
    for cidr in networks:
        try:
            if address in ipaddress.ip_network(cidr.strip(), strict=False):
                return True
        except ValueError:
            return False
    return False


def _clock(text) -> int | None:
    if not isinstance(text, str):
        return None
    try:
        h, m, s = (int(x) for x in text.split(":"))
    except ValueError:
        return None
    if not (0 <= h < 24 and 0 <= m < 60 and 0 <= s < 60):
        return None
    return h * 3600 + m * 60 + s


def _within_times(windows, location) -> tuple[bool, float | None]:
    """jwt.go validateTimes: (allowed now, seconds until the window closes)."""
    if not windows:
        return True, None
    tz = None
    if location:
        tz = zoneinfo.ZoneInfo(location)
    now = datetime.datetime.fromtimestamp(clock.now(), tz)
    seconds = now.hour * 3600 + now.minute * 60 + now.second
    for window in windows:
        start, end = _clock(window.get("start")), _clock(window.get("end"))
        if start is None or end is None:
            return False, None
        if start <= end:
            if start <= seconds < end:
                return True, float(end - seconds)
        elif seconds >= start:  # over midnight
            return True, float(86400 - seconds + end)
        elif seconds < end:
            return True, float(end - seconds)
    return False, None


# -- building JWTs (tests, tools) -------------------------------------------------------------


class OperatorTree:
    """An operator with accounts and users, for tests: ``tree.config()`` is the server
    configuration, ``tree.user(...)`` a (JWT, seed) pair for CONNECT or a creds file."""

    def __init__(self, name: str = "OP", **operator_fields) -> None:
        self.operator = nkeys.create_operator()
        self.name = name
        self.operator_fields = operator_fields
        self.accounts: dict[str, tuple] = {}  # name -> (keypair, claims dict)

    @property
    def operator_jwt(self) -> str:
        nats = {"type": "operator", "version": 2, **self.operator_fields}
        return encode({"sub": self.operator.public_key.decode(), "name": self.name, "nats": nats}, self.operator)

    def account(self, name: str, signer: nkeys.KeyPair | None = None, **nats_fields) -> nkeys.KeyPair:
        key = self.accounts[name][0] if name in self.accounts else nkeys.create_account()
        self.accounts[name] = (key, {"name": name, "nats": nats_fields}, signer)
        return key

    def account_jwt(self, name: str, **overrides) -> str:
        key, claims, signer = self.accounts[name]
        nats = {"type": "account", "version": 2, "limits": {"subs": -1, "conn": -1, "payload": -1, "imports": -1,
                                                              "exports": -1, "wildcards": True, "data": -1,
                                                              "leaf": -1}}
        nats.update(claims["nats"])
        body = {"sub": key.public_key.decode(), "name": claims["name"], "nats": nats}
        body.update(overrides)
        return encode(body, signer or self.operator)

    def user(self, account: str, name: str = "user", signer: nkeys.KeyPair | None = None,
             **nats_fields) -> tuple[str, nkeys.KeyPair]:
        key = nkeys.create_user()
        account_key = self.accounts[account][0]
        overrides: dict[str, Any] = {k: nats_fields.pop(k) for k in ("exp", "nbf", "iat") if k in nats_fields}
        nats: dict[str, Any] = {"type": "user", "version": 2, "pub": {}, "sub": {}, "subs": -1, "data": -1,
                                "payload": -1}
        if signer is not None:
            nats["issuer_account"] = account_key.public_key.decode()
        nats.update(nats_fields)
        body = {"sub": key.public_key.decode(), "name": name, "nats": nats, **overrides}
        return encode(body, signer or account_key), key

    def preload(self) -> dict:
        return {key.public_key.decode(): self.account_jwt(name) for name, (key, _, _) in self.accounts.items()}

    def config(self, operator_file: str | None = None) -> str:
        """A config file body: operator, MEMORY resolver, preloaded accounts."""
        lines = [f'operator: "{operator_file or self.operator_jwt}"', "resolver: MEMORY", "resolver_preload: {"]
        for key, token in self.preload().items():
            lines.append(f"  {key}: {token}")
        lines.append("}")
        return "\n".join(lines) + "\n"


def creds(jwt_token: str, seed: bytes) -> str:
    """A .creds file body, as nsc writes it."""
    return (
        "-----BEGIN NATS USER JWT-----\n" + jwt_token + "\n------END NATS USER JWT------\n\n"
        "************************* IMPORTANT *************************\n\n"
        "-----BEGIN USER NKEY SEED-----\n" + seed.decode() + "\n------END USER NKEY SEED------\n\n"
        "*************************************************************\n"
    )
