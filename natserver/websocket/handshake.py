"""The HTTP side of a WebSocket connection, sans I/O: read the upgrade request, check it as
nats-server 2.9.10 does (websocket.go wsUpgrade, RFC 6455 section 4.2.1) and give the bytes
to answer with.

``HandshakeReader`` is fed bytes until it returns a decision: an :class:`Upgrade` (send its
``response``, then speak WebSocket frames; ``extra`` is what came after the request) or a
:class:`Refusal` (send its ``response`` and close; ``reason`` is nats-server's log text).
h11 parses the request, so malformed HTTP is refused as Go's HTTP server refuses it.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import urllib.parse
from dataclasses import dataclass
from email.utils import formatdate

import h11

__all__ = ["HandshakeReader", "Upgrade", "Refusal", "OriginPolicy", "accept_key", "MAX_REQUEST_SIZE"]

# RFC 6455 section 1.3: appended to Sec-WebSocket-Key before hashing.
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
# Go's net/http DefaultMaxHeaderBytes (1 MiB) plus its 4 KiB slack.
MAX_REQUEST_SIZE = (1 << 20) + 4096
# websocket.go wsPMCFullResponse: compression without context takeover either way.
COMPRESSION_RESPONSE = b"Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover; client_no_context_takeover\r\n"
_STATUS_TEXT = {400: "Bad Request", 403: "Forbidden", 405: "Method Not Allowed"}


@dataclass(frozen=True)
class Upgrade:
    response: bytes
    compress: bool
    client_ip: str | None  # X-Forwarded-For, when it is an IP address
    extra: bytes  # bytes received after the request (none expected)


@dataclass(frozen=True)
class Refusal:
    response: bytes
    reason: str  # e.g. "origin not allowed: not same origin"


def accept_key(key: str) -> str:
    return base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()


def _http_error(status: int, reason: str) -> Refusal:
    """wsReturnHTTPError: Go's http.Error with the status text as the body."""
    text = _STATUS_TEXT[status]
    body = f"{text}\n".encode()
    head = (
        f"HTTP/1.1 {status} {text}\r\nContent-Type: text/plain; charset=utf-8\r\nSec-Websocket-Version: 13\r\n"
        f"X-Content-Type-Options: nosniff\r\nDate: {formatdate(usegmt=True)}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return Refusal(head.encode() + body, reason)


def _bad_http(detail: str = "") -> Refusal:
    """What Go's HTTP server answers to a request it cannot parse, before any handler."""
    text = f"400 Bad Request{': ' + detail if detail else ''}"
    return Refusal(f"HTTP/1.1 {text}\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n{text}".encode(),
                   f"malformed HTTP request{': ' + detail if detail else ''}")


def _host_and_port(tls: bool, hostport: str) -> tuple[str, str]:
    """websocket.go wsGetHostAndPort: the port defaults to the scheme's."""
    if hostport.startswith("["):
        end = hostport.find("]")
        host, rest = hostport[1:end], hostport[end + 1 :]
        port = rest[1:] if rest.startswith(":") else ""
    elif hostport.count(":") == 1:
        host, port = hostport.split(":")
    else:
        host, port = hostport, ""
    return host.lower(), port or ("443" if tls else "80")


class OriginPolicy:
    """websocket.go checkOrigin: ``same_origin`` and/or a list of allowed origins."""

    def __init__(self, same_origin: bool, allowed_origins: list[str]) -> None:
        self.same_origin = same_origin
        self.allowed: dict[str, tuple[str, str]] = {}
        for origin in allowed_origins:
            url = urllib.parse.urlsplit(origin)
            host, port = _host_and_port(url.scheme == "https", url.netloc)
            self.allowed[host] = (url.scheme, port)

    def check(self, origin: str, request_host: str, tls: bool) -> str | None:
        """None when allowed, else why not."""
        if not self.same_origin and not self.allowed:
            return None
        if not origin:
            return None  # RFC 6455 1.6: a non-browser client may send none; nats-server accepts
        url = urllib.parse.urlsplit(origin)
        if not url.scheme or not url.netloc:
            return f'parse "{origin}": invalid URI for request'
        host, port = _host_and_port(url.scheme == "https", url.netloc)
        if self.same_origin and (host, port) != _host_and_port(tls, request_host):
            return "not same origin"
        if self.allowed:
            allowed = self.allowed.get(host)
            if allowed is None or allowed != (url.scheme, port):
                return "not in the allowed list"
        return None


def _contains(headers: dict[str, list[str]], name: str, value: str) -> bool:
    """wsHeaderContains: a comma-separated token equal to ``value``, ignoring case."""
    return any(token.strip(" \t").lower() == value.lower() for line in headers.get(name, []) for token in line.split(","))


def _offers_compression(headers: dict[str, list[str]]) -> bool:
    """wsPMCExtensionSupport(checkPMCOnly): a permessage-deflate extension is offered."""
    return any(
        param.strip(" \t").lower() == "permessage-deflate"
        for line in headers.get("sec-websocket-extensions", [])
        for extension in line.split(",")
        for param in extension.split(";")
    )


class HandshakeReader:
    """Feed the bytes of an upgrade request; ``feed`` returns None until it can decide."""

    def __init__(self, origins: OriginPolicy, compression: bool, tls: bool) -> None:
        self.origins = origins
        self.compression = compression
        self.tls = tls
        self._http = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST_SIZE)

    def feed(self, data: bytes) -> Upgrade | Refusal | None:
        self._http.receive_data(data)
        try:
            event = self._http.next_event()
        except h11.RemoteProtocolError as exc:
            text = str(exc)
            if "Host" in text:
                return _bad_http("missing required Host header")
            return _bad_http()
        if event is h11.NEED_DATA:
            if not data:  # the peer closed before a whole request
                return Refusal(b"", "EOF")
            return None
        if not isinstance(event, h11.Request):
            return _bad_http()
        return self._decide(event)

    def _decide(self, request: h11.Request) -> Upgrade | Refusal:
        headers: dict[str, list[str]] = {}
        for name, value in request.headers:
            headers.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
        if request.method != b"GET":
            return _http_error(405, "request method must be GET")
        host = headers.get("host", [""])[0]
        if not host:
            return _http_error(400, "'Host' missing in request")
        if not _contains(headers, "upgrade", "websocket"):
            return _http_error(400, "invalid value for header 'Upgrade'")
        if not _contains(headers, "connection", "Upgrade"):
            return _http_error(400, "invalid value for header 'Connection'")
        key = headers.get("sec-websocket-key", [""])[0]
        if not key:
            return _http_error(400, "key missing")
        if not _contains(headers, "sec-websocket-version", "13"):
            return _http_error(400, "invalid version")
        origin = (headers.get("origin") or headers.get("sec-websocket-origin") or [""])[0]
        why = self.origins.check(origin, host, self.tls)
        if why is not None:
            return _http_error(403, f"origin not allowed: {why}")
        extra = self._http.trailing_data[0]
        if extra:
            return _http_error(400, "client sent data before handshake is complete")
        compress = self.compression and _offers_compression(headers)
        response = (
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: " + accept_key(key).encode() + b"\r\n"
            + (COMPRESSION_RESPONSE if compress else b"") + b"\r\n"
        )
        forwarded = (headers.get("x-forwarded-for") or [""])[0].strip()
        return Upgrade(response, compress, forwarded if _is_ip(forwarded) else None, b"")


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
