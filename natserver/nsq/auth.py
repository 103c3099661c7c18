"""nsqd's AUTH: the client's secret is checked by an HTTP auth server (``auth_http_addresses``,
nsqd ``--auth-http-address``), which answers the client's authorizations.

nsqd (internal/auth/authorizations.go) sends ``GET http://<address>/auth?remote_ip=&tls=
&secret=&common_name=`` and expects ``{"ttl": s, "identity": "", "identity_url": "",
"authorizations": [{"topic": re, "channels": [re...], "permissions": ["subscribe",
"publish"]}]}``. A topic or channel is allowed when a pattern *matches somewhere in it*
(Go's regexp.MatchString, unanchored); publishing checks the channel patterns against "".
The state expires after ``ttl`` seconds and is then queried again.
"""

from __future__ import annotations

import random
import re
import ssl
import urllib.parse

import h11
import orjson
import trio

# Everything in __all__ gets re-exported as part of natserver.nsq's API.
__all__ = ["AuthState", "AuthError", "query_any_authd"]

HTTP_CONNECT_TIMEOUT = 2.0  # seconds; nsqd --http-client-connect-timeout
HTTP_REQUEST_TIMEOUT = 5.0  # seconds; nsqd --http-client-request-timeout
MAX_AUTH_RESPONSE = 1024 * 1024  # natserver's bound on an auth server's answer


class AuthError(Exception):
    pass


class AuthState:
    """A validated auth server answer (sans-IO: ``now`` is passed in)."""

    def __init__(self, answer, now: float) -> None:
        if not isinstance(answer, dict):
            raise AuthError("invalid JSON answer")
        ttl = answer.get("ttl", 0)
        if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0:
            raise AuthError(f"invalid TTL {ttl} (must be >0)")
        self.identity = _string(answer.get("identity"))
        self.identity_url = _string(answer.get("identity_url"))
        self.authorizations = []
        for item in answer.get("authorizations") or []:
            if not isinstance(item, dict):
                raise AuthError("invalid authorization")
            permissions = item.get("permissions") or []
            for permission in permissions:
                if permission not in ("subscribe", "publish"):
                    raise AuthError(f"unknown permission {permission}")
            try:
                topic = re.compile(_string(item.get("topic")))
                channels = [re.compile(_string(c)) for c in item.get("channels") or []]
            except re.error as exc:
                raise AuthError(f"unable to compile pattern: {exc}") from None
            self.authorizations.append((topic, channels, frozenset(permissions)))
        self.expires = now + ttl

    def expired(self, now: float) -> bool:
        return self.expires < now

    def is_allowed(self, topic: str, channel: str) -> bool:
        needed = "subscribe" if channel else "publish"
        for topic_re, channel_res, permissions in self.authorizations:
            if needed in permissions and topic_re.search(topic) and any(c.search(channel) for c in channel_res):
                return True
        return False


def _string(value) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise AuthError("invalid JSON answer")
    return value


async def _http_get(url: str) -> bytes:
    parts = urllib.parse.urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname
    if host is None:
        raise ValueError(f"no host in {url!r}")  # (query_authd: a malformed address)
    stream: trio.abc.Stream
    try:
        with trio.fail_after(HTTP_CONNECT_TIMEOUT):
            stream = await trio.open_tcp_stream(host, port)
    except OSError as exc:
        raise AuthError(str(exc)) from None
    try:
        if parts.scheme == "https":
            stream = trio.SSLStream(stream, ssl.create_default_context(), server_hostname=host)
        conn = h11.Connection(h11.CLIENT)
        target = (parts.path or "/") + ("?" + parts.query if parts.query else "")
        request = h11.Request(method="GET", target=target, headers=[("Host", parts.netloc), ("Accept", "application/vnd.nsq; version=1.0")])
        with trio.fail_after(HTTP_REQUEST_TIMEOUT):
            await stream.send_all(conn.send(request) + conn.send(h11.EndOfMessage()))
            status, body = 0, bytearray()
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(bytes(await stream.receive_some(65536)))  # (the same object when bytes)
                    continue
                if isinstance(event, h11.Response):
                    status = event.status_code
                elif isinstance(event, h11.Data):
                    body += event.data
                    if len(body) > MAX_AUTH_RESPONSE:
                        raise AuthError("answer too large")
                elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                    break
        if status != 200:
            raise AuthError(f"got response {status} {bytes(body[:200]).decode('utf-8', 'replace')}")
        return bytes(body)
    except (h11.ProtocolError, trio.BrokenResourceError, OSError) as exc:
        raise AuthError(str(exc)) from None
    finally:
        await trio.aclose_forcefully(stream)


async def query_authd(address: str, remote_ip: str, tls: bool, common_name: str, secret: str) -> AuthState:
    query = urllib.parse.urlencode({"common_name": common_name, "remote_ip": remote_ip, "secret": secret,
                                    "tls": "true" if tls else "false"})
    url = f"{address}?{query}" if "://" in address else f"http://{address}/auth?{query}"
    try:
        body = await _http_get(url)
    except trio.TooSlowError:
        raise AuthError("timeout") from None
    except ValueError as exc:  # a malformed address
        raise AuthError(str(exc)) from None
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise AuthError("invalid JSON answer") from None
    return AuthState(answer, trio.current_time())


async def query_any_authd(addresses: list, remote_ip: str, tls: bool, common_name: str, secret: str) -> AuthState:
    """Each auth server in turn from a random start (nsqd QueryAnyAuthd) until one answers."""
    errors = []
    start = random.randrange(len(addresses))
    for i in range(len(addresses)):
        address = addresses[(start + i) % len(addresses)]
        try:
            return await query_authd(address, remote_ip, tls, common_name, secret)
        except AuthError as exc:
            errors.append(f"failed to auth against {address} - {exc}")
    raise AuthError("; ".join(errors))
