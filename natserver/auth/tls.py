"""TLS for client connections, as nats-server v2.9.10 does it.

* Configuration: the ``tls {}`` block (``cert_file``, ``key_file``, ``ca_file``, ``verify``,
  ``verify_and_map``, ``timeout``, ``pinned_certs``, ``insecure``, ``cipher_suites``,
  ``curve_preferences``) or the ``--tls``, ``--tlscert``, ``--tlskey``, ``--tlsverify``,
  ``--tlscacert`` flags. TLS 1.2 is the minimum, as nats-server's GenTLSConfig.
* The wire: nats-server sends its INFO **in plain text** first (with ``tls_required`` and,
  with ``verify``, ``tls_verify``), then performs the server side of the TLS handshake; a
  client reads the INFO and upgrades (nats clients do this). The handshake must finish within
  ``timeout`` (2 s by default). A plain-text client gets the INFO, then the connection is
  closed as soon as its first bytes are seen not to be a TLS handshake (or at the timeout).
* ``allow_non_tls: true``: INFO says ``tls_available`` instead of ``tls_required`` and the
  first byte the client sends decides (0x16, a TLS handshake record, or plain text).
* With ``verify`` a client certificate signed by ``ca_file`` is required; ``verify_and_map``
  also maps the certificate (e-mail, DNS names, URIs, then the subject) to a user.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import re
import ssl
from dataclasses import dataclass, field

import trio

from ..protocol.gotext import go_duration_error, go_type_name, parse_duration

__all__ = ["TLSConfig", "TLSConfigError", "server_context", "client_context", "client_handshake", "handshake",
           "peer_certificate_identities", "PrefixedStream"]

log = logging.getLogger("natserver")

DEFAULT_TLS_TIMEOUT = 2.0  # const.go TLS_TIMEOUT
# const.go DEFAULT_TLS_HANDSHAKE_FIRST_FALLBACK_DELAY (2.10+): with handshake_first "auto", how
# long the server waits for a client's TLS handshake before sending INFO in plain text.
DEFAULT_TLS_HANDSHAKE_FIRST_FALLBACK_DELAY = 0.050
_PINNED_RE = re.compile(r"^[a-f0-9]{64}$")


class TLSConfigError(ValueError):
    """A TLS configuration nats-server refuses (its message, without the file position)."""


@dataclass
class TLSConfig:
    """The client ``tls {}`` block. ``context`` is built by :func:`server_context` (cached)."""

    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""
    verify: bool = False
    verify_and_map: bool = False  # nats-server's TLSMap: the client certificate names the user
    insecure: bool = False
    timeout: float = DEFAULT_TLS_TIMEOUT
    pinned_certs: frozenset = frozenset()  # hex SHA-256 of the client's SubjectPublicKeyInfo
    cipher_suites: tuple = ()  # accepted; Python's OpenSSL picks its own (warned about)
    curve_preferences: tuple = ()
    # opts.go HandshakeFirst/FallbackDelay (2.10+): the TLS handshake comes before INFO; with a
    # fallback delay, a client that sends nothing by then gets INFO first after all.
    handshake_first: bool = False
    fallback_delay: float = 0.0
    context: ssl.SSLContext | None = field(default=None, compare=False, repr=False)

    def copy(self, **changes) -> "TLSConfig":
        return dataclasses.replace(self, context=None, **changes)


def _load_ca(context: ssl.SSLContext, ca_file: str) -> None:
    """Trust ``ca_file``'s certificates, failing with nats-server's words."""
    if not os.path.exists(ca_file):
        raise TLSConfigError(f"open {ca_file}: no such file or directory")
    try:
        context.load_verify_locations(cafile=ca_file)
    except (ssl.SSLError, OSError, ValueError):
        raise TLSConfigError("failed to parse root ca certificate") from None


def server_context(config: TLSConfig) -> ssl.SSLContext:
    """The server-side SSLContext for ``config`` (built once, then cached on it).

    Raises TLSConfigError with nats-server's messages (GenTLSConfig)."""
    if config.context is not None:
        return config.context
    if config.cert_file and not config.key_file:
        raise TLSConfigError("missing 'key_file' in TLS configuration")
    if config.key_file and not config.cert_file:
        raise TLSConfigError("missing 'cert_file' in TLS configuration")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION
    if config.cert_file:
        for path in (config.cert_file, config.key_file):
            if not os.path.exists(path):
                raise TLSConfigError(f"error parsing X509 certificate/key pair: open {path}: no such file or directory")
        try:
            context.load_cert_chain(config.cert_file, config.key_file)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise TLSConfigError(f"error parsing X509 certificate/key pair: {_reason(exc)}") from None
    if config.verify or config.verify_and_map:
        context.verify_mode = ssl.CERT_REQUIRED
        if not config.ca_file:
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    if config.ca_file:
        _load_ca(context, config.ca_file)
    config.context = context
    return context


def client_context(config: TLSConfig | None) -> ssl.SSLContext:
    """The context for the connections this server dials (leaf node remotes, routes), as
    nats-server's GenTLSConfig with RootCAs: its certificate (if any) is offered to the peer,
    whose certificate is verified against ``ca_file`` (default: the system's roots) unless
    ``insecure``. No config (a hub asked for TLS): TLS 1.2 or later against the system's roots.
    Raises TLSConfigError with nats-server's messages."""
    config = config if config is not None else TLSConfig()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION
    if config.cert_file and not config.key_file:
        raise TLSConfigError("missing 'key_file' in TLS configuration")
    if config.key_file and not config.cert_file:
        raise TLSConfigError("missing 'cert_file' in TLS configuration")
    if config.cert_file:
        try:
            context.load_cert_chain(config.cert_file, config.key_file)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise TLSConfigError(f"error parsing X509 certificate/key pair: {_reason(exc)}") from None
    if config.ca_file:
        _load_ca(context, config.ca_file)
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if config.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


async def client_handshake(stream: trio.abc.Stream, config: TLSConfig | None,
                           server_hostname: str) -> tuple[trio.SSLStream | None, str]:
    """The client side of the handshake (client.go doTLSClientHandshake), bounded by the
    config's timeout; ``server_hostname`` is the dialled URL's host (an IP is checked against
    the certificate's IP addresses, as Go does). Returns (the TLS stream, "") or (None, why)."""
    try:
        context = client_context(config)
    except TLSConfigError as exc:
        return None, str(exc)
    timeout = config.timeout if config is not None and config.timeout > 0 else DEFAULT_TLS_TIMEOUT
    ssl_stream = trio.SSLStream(stream, context, server_hostname=server_hostname)
    error = await _do_handshake(ssl_stream, timeout, _client_handshake_error)
    if error:
        return None, error
    if config is not None and config.pinned_certs and not _matches_pinned(ssl_stream, config.pinned_certs):
        return None, "certificate not pinned"
    return ssl_stream, ""


def _client_handshake_error(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return "x509: " + (exc.verify_message or str(exc))
    if isinstance(exc, ssl.SSLError):
        return "tls: " + ((exc.reason or "").lower().replace("_", " ") or str(exc))
    if isinstance(exc, (ConnectionResetError, BrokenPipeError)):
        return "connection reset by peer"
    return str(exc) or "EOF"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return exc.reason.lower().replace("_", " ")
    return str(exc)


class PrefixedStream(trio.abc.Stream):
    """A stream that first gives back bytes already read from it (nats-server's tlsMixConn)."""

    def __init__(self, stream: trio.SocketStream, prefix: bytes) -> None:
        self.transport_stream = stream
        self._prefix = prefix

    @property
    def socket(self):
        return self.transport_stream.socket

    async def receive_some(self, max_bytes=None) -> bytes | bytearray:
        if self._prefix:
            if max_bytes is None or max_bytes >= len(self._prefix):
                data, self._prefix = self._prefix, b""
            else:
                data, self._prefix = self._prefix[:max_bytes], self._prefix[max_bytes:]
            await trio.lowlevel.checkpoint()
            return data
        return await self.transport_stream.receive_some(max_bytes)

    async def send_all(self, data) -> None:
        await self.transport_stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.transport_stream.aclose()


async def read_prefix(stream: trio.abc.Stream, timeout: float) -> bytes:
    """allow_non_tls: up to 4 bytes (what nats-server reads to tell TLS from plain text)."""
    data = b""
    with trio.move_on_after(timeout):
        while len(data) < 4:
            try:
                chunk = await stream.receive_some(4 - len(data))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                break
            if not chunk:
                break
            data += chunk
            if data[:1] != b"\x16":
                break  # plain text: no need to wait for more
    return data


async def _do_handshake(ssl_stream: trio.SSLStream, timeout: float, describe) -> str:
    """Run a handshake bounded by ``timeout``: "" when it worked, else why not ("i/o timeout",
    or ``describe(ssl error)`` in nats-server's words)."""
    error = ""
    with trio.move_on_after(timeout) as scope:
        try:
            await ssl_stream.do_handshake()
        except trio.BrokenResourceError as exc:
            cause = exc.__cause__
            error = describe(cause) if cause is not None else "EOF"
        except (trio.ClosedResourceError, OSError) as exc:
            error = str(exc) or "EOF"
    return "i/o timeout" if scope.cancelled_caught else error


async def handshake(stream: trio.abc.Stream, config: TLSConfig) -> tuple[trio.SSLStream | None, str]:
    """The server side of the handshake, bounded by ``config.timeout``.

    Returns (the TLS stream, "") or (None, why it failed, in nats-server's words)."""
    ssl_stream = trio.SSLStream(stream, server_context(config), server_side=True)
    error = await _do_handshake(ssl_stream, config.timeout if config.timeout > 0 else DEFAULT_TLS_TIMEOUT,
                                _handshake_error)
    if error == "i/o timeout":
        return None, error
    if error:
        if "first record does not look like" not in error:
            await _send_alert(ssl_stream, stream)
        return None, error
    if config.pinned_certs and not _matches_pinned(ssl_stream, config.pinned_certs):
        return None, "certificate not pinned"
    return ssl_stream, ""


async def _send_alert(ssl_stream: trio.SSLStream, stream: trio.abc.Stream) -> None:
    """Go sends the TLS alert of a failed handshake (e.g. "certificate required") before it
    closes; trio leaves OpenSSL's alert in its outgoing buffer: send it."""
    outgoing = getattr(ssl_stream, "_outgoing", None)
    if outgoing is None or not outgoing.pending:
        return
    with trio.move_on_after(0.5):
        try:
            await stream.send_all(outgoing.read())
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError, OSError):
            pass


def _handshake_error(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        reason = (exc.reason or "").upper()
        if reason in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "HTTPS_PROXY_REQUEST", "UNKNOWN_PROTOCOL",
                      "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG", "UNEXPECTED_RECORD", "RECORD_TOO_LARGE",
                      "UNSUPPORTED_PROTOCOL", "VERSION_TOO_LOW"):
            return "tls: first record does not look like a TLS handshake"
        if "CERTIFICATE" in reason and ("NO" in reason or "REQUIRED" in reason):
            return "tls: client didn't provide a certificate"
        if "CERTIFICATE" in reason:
            return "tls: failed to verify client certificate: " + reason.lower().replace("_", " ")
        return "tls: " + (reason.lower().replace("_", " ") or str(exc))
    if isinstance(exc, (ConnectionResetError, BrokenPipeError)):
        return "connection reset by peer"
    return str(exc) or "EOF"


def _peer_der(ssl_stream: trio.SSLStream) -> bytes | None:
    try:
        return ssl_stream.getpeercert(binary_form=True)
    except (ValueError, AttributeError, ssl.SSLError):
        return None


def _matches_pinned(ssl_stream: trio.SSLStream, pinned: frozenset) -> bool:
    der = _peer_der(ssl_stream)
    if not der:
        return False
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    cert = x509.load_der_x509_certificate(der)
    spki = cert.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(spki).hexdigest() in pinned


def peer_certificate_identities(ssl_stream) -> list[str]:
    """The names a verified client certificate offers for verify_and_map, in nats-server's
    order (checkClientTLSCertSubject): e-mail addresses, DNS names, URIs, then the subject
    as an RFC 2253 string (with and without domain components)."""
    der = _peer_der(ssl_stream) if ssl_stream is not None else None
    if not der:
        return []
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    cert = x509.load_der_x509_certificate(der)
    names: list[str] = []
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        san = None
    if san is not None:
        names += san.get_values_for_type(x509.RFC822Name)
        names += san.get_values_for_type(x509.DNSName)
        names += san.get_values_for_type(x509.UniformResourceIdentifier)
    subject = cert.subject
    without_dc = x509.Name([rdn for rdn in subject.rdns if all(a.oid != NameOID.DOMAIN_COMPONENT for a in rdn)])
    rdn = without_dc.rfc4514_string()
    dcs = [a.value for a in subject if a.oid == NameOID.DOMAIN_COMPONENT and isinstance(a.value, str)]
    if dcs:
        names.append(rdn + "," + ",".join("DC=" + dc for dc in dcs))
    names.append(rdn)
    names.append(subject.rfc4514_string())
    return names


def _handshake_first(key: str, item) -> dict:
    """opts.go parseTLS handshake_first: a boolean, on/off, auto (the default fallback delay)
    or a duration (that fallback delay)."""
    if isinstance(item, bool):
        return {"handshake_first": item}
    if not isinstance(item, str):
        raise TLSConfigError(f'error parsing tls config, field "{key}" should be a boolean or a string, '
                             f"got {go_type_name(item)}")
    word = item.lower()
    if word in ("true", "on"):
        return {"handshake_first": True}
    if word in ("false", "off"):
        return {"handshake_first": False}
    if word in ("auto", "auto_fallback"):
        return {"handshake_first": True, "fallback_delay": DEFAULT_TLS_HANDSHAKE_FIRST_FALLBACK_DELAY}
    try:
        return {"handshake_first": True, "fallback_delay": parse_duration(item)}
    except ValueError:
        raise TLSConfigError(f'error parsing tls config, field "{key}"\'s value "{item}" is invalid') from None


def parse_tls_block(value: dict) -> tuple[TLSConfig, list[str]]:
    """opts.go parseTLS for the client block. Returns (config, warnings); raises
    TLSConfigError with nats-server's message for a bad entry."""
    config = TLSConfig()
    changes: dict = {}
    warnings: list[str] = []
    for key, item in value.items():
        name = key.lower()
        if name in ("cert_file", "key_file", "ca_file"):
            if not isinstance(item, str):
                what = {"cert_file": "cert_file", "key_file": "key_file", "ca_file": "ca_file"}[name]
                raise TLSConfigError(f"error parsing tls config, expected '{what}' to be filename")
            changes[name] = item
        elif name in ("insecure", "verify", "verify_and_map", "verify_cert_and_check_known_urls"):
            if not isinstance(item, bool):
                raise TLSConfigError(f"error parsing tls config, expected '{name}' to be a boolean")
            if name == "verify_cert_and_check_known_urls":
                if item:
                    raise TLSConfigError("verify_cert_and_check_known_urls not supported in this context")
            elif name == "verify_and_map":
                changes["verify_and_map"] = item
                if item:
                    changes["verify"] = True
            elif name == "verify":
                changes["verify"] = item or changes.get("verify_and_map", False)
            else:
                changes[name] = item
        elif name in ("cipher_suites", "curve_preferences"):
            if not isinstance(item, list) or not item:
                raise TLSConfigError(f"error parsing tls config, '{name}' cannot be empty")
            changes[name] = tuple(str(v) for v in item)
            warnings.append(f"TLS {name} are chosen by Python's OpenSSL in natserver: {name} is ignored")
        elif name == "timeout":
            if isinstance(item, bool):
                raise TLSConfigError("error parsing tls config, 'timeout' wrong type")
            if isinstance(item, (int, float)):
                changes["timeout"] = float(item)
            elif isinstance(item, str):
                try:
                    changes["timeout"] = parse_duration(item)
                except ValueError:
                    raise TLSConfigError(f"error parsing tls config, 'timeout' {go_duration_error(item)}") from None
            else:
                raise TLSConfigError("error parsing tls config, 'timeout' wrong type")
        elif name in ("handshake_first", "first", "immediate"):
            changes.update(_handshake_first(key, item))
        elif name == "connection_rate_limit":
            if isinstance(item, bool) or not isinstance(item, int):
                raise TLSConfigError("error parsing tls config, 'connection_rate_limit' wrong type")
            warnings.append("TLS connection_rate_limit is not supported by natserver and is ignored")
        elif name == "pinned_certs":
            if not isinstance(item, list):
                raise TLSConfigError(
                    "error parsing tls config, expected 'pinned_certs' to be a list of hex-encoded sha256 of DER "
                    "encoded SubjectPublicKeyInfo"
                )
            pins = set()
            for entry in item:
                entry = str(entry).lower()
                if not _PINNED_RE.match(entry):
                    raise TLSConfigError(
                        f"error parsing tls config, 'pinned_certs' key {entry} does not look like hex-encoded "
                        "sha256 of DER encoded SubjectPublicKeyInfo"
                    )
                pins.add(entry)
            changes["pinned_certs"] = frozenset(pins)
        else:
            raise TLSConfigError(f'error parsing tls config, unknown field ["{key}"]')
    if "timeout" not in changes:
        changes["timeout"] = DEFAULT_TLS_TIMEOUT
    return dataclasses.replace(config, **changes), warnings
