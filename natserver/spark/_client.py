"""A small synchronous NATS client over a plain socket, for Spark's driver and Python workers.

Spark runs a data source's ``read()`` and ``write()`` in Python worker processes, one call
per partition, with no event loop of ours: this client is blocking, pure Python and
dependency-free (``cryptography`` only for credentials files and nkeys, via natserver's own
nkeys module), and pipelines requests so one connection moves tens of thousands of messages
per second.

Only what the data source needs: connect (TLS, user/password, token, nkey, credentials
file), one inbox subscription, requests (one at a time or pipelined), publishes with
JetStream acknowledgements, and the JetStream calls to read a stream by sequence
(``STREAM.INFO``, ``STREAM.NAMES``, ``STREAM.MSG.GET``, ``DIRECT.GET`` with batches where
the server has them: nats-server >= 2.11 and natserver; nats-server 2.9 answers one message
per request).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterator, NamedTuple
from urllib.parse import unquote, urlsplit

from ._errors import (
    ConnectError,
    JetStreamError,
    JetStreamNotEnabled,
    NatsSparkError,
    NatsTimeout,
    OptionError,
    PublishError,
    StreamNotFound,
)

DEFAULT_URL = "nats://127.0.0.1:4222"
DEFAULT_TIMEOUT = 10.0
CLIENT_VERSION = "0.1.0"

_CRLF = b"\r\n"
# Headers nats-server adds to a DIRECT.GET answer; not part of the stored message.
_DIRECT_HEADERS = frozenset(
    ("Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp", "Nats-Num-Pending", "Nats-Last-Sequence")
)


# -- addresses and credentials -----------------------------------------------------------------


@dataclass(frozen=True)
class ServerAddr:
    scheme: str  # "nats" or "tls"
    host: str
    port: int
    user: str | None = None  # nats://user:password@host
    password: str | None = None
    token: str | None = None  # nats://token@host

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def parse_servers(text: str) -> list[ServerAddr]:
    """``"nats://a:4222, tls://u:p@b:4443, c"`` -> addresses. Raises OptionError."""
    if text is None or not str(text).strip():
        raise OptionError("option 'servers' is empty: give one or more nats://host:port URLs separated by commas")
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        url = part if "://" in part else "nats://" + part
        try:
            u = urlsplit(url)
            port = u.port
        except ValueError as exc:
            raise OptionError(f"option 'servers': bad URL {part!r} ({exc})") from None
        scheme = u.scheme.lower()
        if scheme not in ("nats", "tls"):
            raise OptionError(f"option 'servers': bad URL {part!r}: the scheme must be nats:// or tls://")
        if not u.hostname:
            raise OptionError(f"option 'servers': bad URL {part!r}: no host")
        if u.path not in ("", "/") or u.query or u.fragment:
            raise OptionError(f"option 'servers': bad URL {part!r}: only scheme://[user:password@]host:port")
        user = unquote(u.username) if u.username is not None else None
        password = unquote(u.password) if u.password is not None else None
        token = None
        if user is not None and password is None:  # nats://token@host
            user, token = None, user
        out.append(ServerAddr(scheme, u.hostname, port or 4222, user, password, token))
    if not out:
        raise OptionError("option 'servers' is empty: give one or more nats://host:port URLs separated by commas")
    return out


def read_credentials(path: str) -> tuple[str, str]:
    """The (JWT, nkey seed) of a NATS credentials file (``nsc`` format). Raises OptionError."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise OptionError(f"option 'credentials': cannot read {path!r}: {exc.strerror or exc}") from None
    jwt = seed = None
    lines = [line.strip() for line in text.splitlines()]
    for i, line in enumerate(lines):
        if line.startswith("-----BEGIN"):
            value = next((c for c in lines[i + 1 :] if c and not c.startswith("---")), None)
            if "JWT" in line:
                jwt = value
            elif "SEED" in line.upper():
                seed = value
    if not jwt or not seed:
        raise OptionError(f"option 'credentials': {path!r} is not a NATS credentials file (no JWT and seed blocks)")
    return jwt, seed


def _sign(seed: str, nonce: str) -> tuple[str, str]:
    """(public key, base64url signature of the nonce) for an nkey seed."""
    from natserver.auth import nkeys as _nkeys  # cryptography, imported only when needed

    try:
        kp = _nkeys.from_seed(seed.encode())
    except ValueError as exc:
        raise OptionError(f"bad nkey seed: {exc}") from None
    sig = base64.urlsafe_b64encode(kp.sign(nonce.encode())).rstrip(b"=").decode()
    return kp.public_key.decode(), sig


@dataclass(frozen=True)
class Auth:
    """How to authenticate; ``servers`` URLs may carry user:password or a token too."""

    user: str | None = None
    password: str | None = None
    token: str | None = None
    credentials: str | None = None  # path of a .creds file
    nkey_seed: str | None = None


# -- messages -----------------------------------------------------------------------------------


class StoredMsg(NamedTuple):
    """One message of a stream as the data source returns it."""

    subject: str
    seq: int
    headers: dict | None  # {name: [values]} of the stored message, None if it had none
    data: bytes
    time_us: int  # microseconds since the epoch (UTC)


def parse_headers(block: bytes) -> tuple[int, str, dict]:
    """``NATS/1.0 404 Not Found\\r\\nK: V\\r\\n\\r\\n`` -> (404, "Not Found", {"K": ["V"]})."""
    text = block.decode("utf-8", "replace")
    lines = text.split("\r\n")
    first = lines[0]
    status, desc = 0, ""
    rest = first[8:].strip() if first.startswith("NATS/1.0") else ""
    if rest:
        code, _, desc = rest.partition(" ")
        if code.isdigit():
            status = int(code)
        desc = desc.strip()
    headers: dict = {}
    for line in lines[1:]:
        if not line:
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if key:
            headers.setdefault(key, []).append(value.strip())
    return status, desc, headers


def encode_headers(headers) -> bytes:
    """{name: value or [values]} or [(name, value)] -> a NATS/1.0 header block."""
    items = headers.items() if isinstance(headers, dict) else headers
    out = [b"NATS/1.0\r\n"]
    for key, value in items:
        values = value if isinstance(value, (list, tuple)) else [value]
        key_b = str(key).encode()
        if not key_b or any(c in key_b for c in b" \t\r\n:"):
            raise PublishError(f"bad header name {key!r}: no spaces, colons or line breaks")
        for v in values:
            if v is None:
                continue
            vb = str(v).encode()
            if b"\r" in vb or b"\n" in vb:
                raise PublishError(f"bad value of header {key!r}: no line breaks")
            out.append(key_b + b": " + vb + _CRLF)
    out.append(_CRLF)
    return b"".join(out)


_EPOCH_ORD = datetime(1970, 1, 1).toordinal()
_MINUTES: dict[str, int] = {}  # "2026-11-21T13:16" -> seconds since the epoch


def _minute_seconds(prefix: str) -> int:
    secs = _MINUTES.get(prefix)
    if secs is None:
        y, mo, d = int(prefix[0:4]), int(prefix[5:7]), int(prefix[8:10])
        h, mi = int(prefix[11:13]), int(prefix[14:16])
        if prefix[4] != "-" or prefix[7] != "-" or prefix[10] not in "Tt" or prefix[13] != ":":
            raise ValueError(prefix)
        secs = (datetime(y, mo, d).toordinal() - _EPOCH_ORD) * 86400 + h * 3600 + mi * 60
        if len(_MINUTES) > 4096:
            _MINUTES.clear()
        _MINUTES[prefix] = secs
    return secs


def rfc3339_to_micros(text: str) -> int:
    """``2026-11-21T13:16:35.312677776Z`` (or with an offset) -> microseconds since the epoch."""
    try:
        base = _minute_seconds(text[:16]) + int(text[17:19])
        n = len(text)
        i = 19
        frac = 0
        if n > 19 and text[19] == ".":
            j = 20
            while j < n and text[j].isdigit():
                j += 1
            digits = text[20:j]
            frac = int(digits[:6].ljust(6, "0")) if digits else 0
            i = j
        if i < n and text[i] not in "Zz":
            tz = text[i:]
            sign = -1 if tz[0] == "-" else 1
            base -= sign * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60)
        return base * 1_000_000 + frac
    except (ValueError, IndexError):
        raise NatsSparkError(f"bad timestamp from the server: {text!r}") from None


def micros_to_datetime(us: int) -> datetime:
    return datetime.fromtimestamp(us // 1_000_000, timezone.utc).replace(microsecond=us % 1_000_000)


# -- the connection ------------------------------------------------------------------------------


def _reason(exc: BaseException) -> str:
    if isinstance(exc, socket.timeout):
        return "timed out"
    if isinstance(exc, ssl.SSLError):
        return f"TLS: {exc.reason or exc}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


class Connection:
    """One blocking NATS connection with an inbox subscription for replies."""

    def __init__(
        self,
        servers: list[ServerAddr] | str,
        auth: Auth | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        name: str = "natserver.spark",
        tls_ca_file: str | None = None,
    ) -> None:
        if isinstance(servers, str):
            servers = parse_servers(servers)
        self.auth = auth or Auth()
        self.timeout = timeout
        self.name = name
        self.tls_ca_file = tls_ca_file
        self.info: dict = {}
        self.url = ""
        self._sock: socket.socket | None = None
        self._buf = bytearray()
        self._out: list[bytes] = []
        self._counter = 0
        self.direct_batch: bool | None = None  # DIRECT.GET batches: unknown until tried
        failures = []
        for addr in servers:
            try:
                self._open(addr)
                break
            except ConnectError as exc:
                failures.append(str(exc).removeprefix("nats: "))
            except (OSError, ValueError) as exc:
                failures.append(f"{addr.url}: {_reason(exc)}")
            except BaseException:
                self._close_socket()
                raise
            self._close_socket()
        else:
            urls = ", ".join(a.url for a in servers)
            raise ConnectError(f"cannot connect to NATS server {urls}: " + "; ".join(failures))
        self.inbox = b"_INBOX." + os.urandom(9).hex().upper().encode() + b"."
        self._sendall(b"SUB " + self.inbox + b"* 1\r\n")

    # -- opening --------------------------------------------------------------------------------

    def _open(self, addr: ServerAddr) -> None:
        self.url = addr.url
        sock = socket.create_connection((addr.host, addr.port), timeout=self.timeout)
        self._sock = sock
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf.clear()
        line = self._read_line()
        if not line.startswith(b"INFO "):
            raise ConnectError(f"{addr.url}: not a NATS server (it said {bytes(line[:40])!r})")
        self.info = json.loads(line[5:])
        tls = addr.scheme == "tls" or self.info.get("tls_required")
        if tls:
            ctx = ssl.create_default_context(cafile=self.tls_ca_file)
            self._sock = ctx.wrap_socket(sock, server_hostname=addr.host)
        connect = {
            "verbose": False, "pedantic": False, "tls_required": bool(tls), "name": self.name,
            "lang": "python-natserver-spark", "version": CLIENT_VERSION, "protocol": 1,
            "headers": True, "no_responders": True,
        }
        auth = self.auth
        user = auth.user if auth.user is not None else addr.user
        password = auth.password if auth.password is not None else addr.password
        token = auth.token if auth.token is not None else addr.token
        if user is not None:
            connect["user"] = user
            connect["pass"] = password or ""
        if token is not None:
            connect["auth_token"] = token
        seed = auth.nkey_seed
        if auth.credentials:
            jwt, seed = read_credentials(auth.credentials)
            connect["jwt"] = jwt
        if seed:
            nonce = self.info.get("nonce")
            if not nonce:
                raise ConnectError(f"{addr.url}: the server sent no nonce to sign with the nkey")
            public, sig = _sign(seed, nonce)
            connect["sig"] = sig
            if "jwt" not in connect:
                connect["nkey"] = public
        self._sendall(b"CONNECT " + json.dumps(connect, separators=(",", ":")).encode() + b"\r\nPING\r\n")
        while True:
            line = self._read_line()
            if line == b"PONG":
                return
            if line.startswith(b"-ERR"):
                err = bytes(line[4:]).decode("utf-8", "replace").strip().strip("'")
                raise ConnectError(f"{addr.url}: the server refused the connection: {err}")
            if line == b"PING":
                self._sendall(b"PONG\r\n")
            # +OK, INFO: ignore

    # -- low level ---------------------------------------------------------------------------

    def _open_socket(self) -> socket.socket:
        sock = self._sock
        if sock is None:  # close() was called
            raise ConnectError(f"{self.url}: the connection is closed")
        return sock

    def _sendall(self, data: bytes) -> None:
        sock = self._open_socket()
        try:
            sock.sendall(data)
        except OSError as exc:
            raise ConnectError(f"{self.url}: connection lost: {_reason(exc)}") from None

    def _fill(self) -> None:
        sock = self._open_socket()
        try:
            data = sock.recv(1 << 20)
        except socket.timeout:
            raise NatsTimeout(f"{self.url}: no answer within {self.timeout:g} s") from None
        except OSError as exc:
            raise ConnectError(f"{self.url}: connection lost: {_reason(exc)}") from None
        if not data:
            raise ConnectError(f"{self.url}: the server closed the connection")
        self._buf += data

    def _read_line(self) -> bytes:
        while True:
            i = self._buf.find(_CRLF)
            if i >= 0:
                line = bytes(self._buf[:i])
                del self._buf[: i + 2]
                return line
            if len(self._buf) > 65536:
                raise ConnectError(f"{self.url}: protocol error: control line too long")
            self._fill()

    def _read_exact(self, n: int) -> bytes:
        while len(self._buf) < n + 2:
            self._fill()
        data = bytes(self._buf[:n])
        del self._buf[: n + 2]
        return data

    def settimeout(self, timeout: float) -> None:
        self.timeout = timeout
        if self._sock is not None:
            self._sock.settimeout(timeout)

    def next_msg(self) -> tuple[bytes, bytes | None, bytes | None, bytes]:
        """The next MSG/HMSG: (subject, reply, header block or None, payload). Answers PINGs."""
        while True:
            line = self._read_line()
            if line.startswith(b"MSG ") or line.startswith(b"HMSG "):
                parts = line.split()
                if parts[0] == b"MSG":
                    reply = parts[3] if len(parts) == 5 else None
                    data = self._read_exact(int(parts[-1]))
                    return parts[1], reply, None, data
                reply = parts[3] if len(parts) == 6 else None
                hlen, total = int(parts[-2]), int(parts[-1])
                raw = self._read_exact(total)
                return parts[1], reply, raw[:hlen], raw[hlen:]
            if line == b"PING":
                self._sendall(b"PONG\r\n")
            elif line.startswith(b"-ERR"):
                err = bytes(line[4:]).decode("utf-8", "replace").strip().strip("'")
                raise NatsSparkError(f"{self.url}: server error: {err}")
            # +OK, PONG, INFO: nothing to do

    def new_token(self) -> bytes:
        self._counter += 1
        return b"%x" % self._counter

    def send(self, subject: str | bytes, payload: bytes = b"", *, reply: bytes | None = None,
             headers: bytes | None = None) -> None:
        """Buffer a PUB/HPUB; :meth:`flush` sends."""
        subj = subject.encode() if isinstance(subject, str) else subject
        rep = b" " + reply if reply else b""
        if headers:
            self._out.append(b"HPUB %s%s %d %d\r\n" % (subj, rep, len(headers), len(headers) + len(payload)))
            self._out.append(headers)
        else:
            self._out.append(b"PUB %s%s %d\r\n" % (subj, rep, len(payload)))
        self._out.append(payload)
        self._out.append(_CRLF)

    def send_request(self, subject: str | bytes, payload: bytes = b"", headers: bytes | None = None) -> bytes:
        """Buffer a request; returns its token (the last token of the reply subject)."""
        token = self.new_token()
        self.send(subject, payload, reply=self.inbox + token, headers=headers)
        return token

    def flush(self) -> None:
        if self._out:
            data = b"".join(self._out)
            self._out.clear()
            self._sendall(data)

    def recv_reply(self) -> tuple[bytes, bytes | None, bytes]:
        """The next reply to one of our requests: (token, header block or None, payload)."""
        n = len(self.inbox)
        while True:
            subject, _reply, hdr, data = self.next_msg()
            if subject.startswith(self.inbox):
                return subject[n:], hdr, data

    def request(self, subject: str | bytes, payload: bytes = b"", headers: bytes | None = None,
                timeout: float | None = None) -> tuple[bytes | None, bytes]:
        """One request, one reply: (header block or None, payload)."""
        token = self.send_request(subject, payload, headers)
        self.flush()
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            got, hdr, data = self.recv_reply()
            if got == token:
                return hdr, data
            if time.monotonic() > deadline:
                raise NatsTimeout(f"{self.url}: no answer to a request on {subject!r}")

    def ping(self) -> None:
        """Round trip: every publish sent before has been processed by the server."""
        self.flush()
        self._sendall(b"PING\r\n")
        while True:
            line = self._read_line()
            if line == b"PONG":
                return
            if line == b"PING":
                self._sendall(b"PONG\r\n")
            elif line.startswith(b"-ERR"):
                err = bytes(line[4:]).decode("utf-8", "replace").strip().strip("'")
                raise NatsSparkError(f"{self.url}: server error: {err}")
            elif line.startswith(b"MSG ") or line.startswith(b"HMSG "):
                parts = line.split()
                self._read_exact(int(parts[-1]))  # a late reply: dropped

    def _close_socket(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None

    def close(self) -> None:
        if self._sock is not None:
            try:
                self.flush()
            except NatsSparkError:
                pass
        self._close_socket()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -- JetStream API ------------------------------------------------------------------------------


def _status(hdr: bytes | None) -> tuple[int, str]:
    if not hdr:
        return 0, ""
    # Fast path: only the first line matters here.
    first = hdr[: hdr.find(b"\r\n")] if b"\r\n" in hdr else hdr
    rest = first[8:].strip()
    if not rest:
        return 0, ""
    code, _, desc = rest.partition(b" ")
    return (int(code) if code.isdigit() else 0), desc.decode("utf-8", "replace").strip()


def _raise_api_error(err: dict, what: str) -> None:
    code = int(err.get("code") or 0)
    err_code = int(err.get("err_code") or 0)
    desc = err.get("description") or "unknown error"
    if err_code == 10059 or (code == 404 and desc == "stream not found"):
        raise StreamNotFound(f"{what}: stream not found", code, err_code)
    raise JetStreamError(f"{what}: {desc} (code {code}, err_code {err_code})", code, err_code)


def js_request(conn: Connection, api: str, body: dict | None = None, *, what: str = "") -> dict:
    """A JetStream API request: the JSON answer, or a JetStreamError."""
    payload = json.dumps(body, separators=(",", ":")).encode() if body is not None else b""
    hdr, data = conn.request("$JS.API." + api, payload)
    resp = _json_answer(hdr, data, what or api, conn.url)
    if isinstance(resp, dict) and resp.get("error"):
        _raise_api_error(resp["error"], what or api)
    return resp


def _json_answer(hdr: bytes | None, data: bytes, what: str, url: str):
    """The decoded JSON of a $JS.API answer; a 503 means no JetStream at all."""
    if _status(hdr)[0] == 503:
        raise JetStreamNotEnabled(f"{url}: JetStream is not enabled (no responders on $JS.API; run the server with -js)")
    try:
        return json.loads(data)
    except ValueError:
        raise JetStreamError(f"{what}: the server sent a response that is not JSON") from None


def stream_info(conn: Connection, stream: str) -> dict:
    return js_request(conn, "STREAM.INFO." + stream, what=f"stream {stream!r} on {conn.url}")


def stream_names(conn: Connection, subject: str | None = None) -> list[str]:
    names: list[str] = []
    offset = 0
    while True:
        body: dict = {"offset": offset}
        if subject:
            body["subject"] = subject
        resp = js_request(conn, "STREAM.NAMES", body, what=f"listing streams on {conn.url}")
        page = resp.get("streams") or []
        names.extend(page)
        offset += len(page)
        if not page or offset >= int(resp.get("total") or 0):
            return names


def stream_bounds(info: dict) -> tuple[int, int]:
    """(first_seq, last_seq) of a STREAM.INFO answer; an empty new stream is (1, 0)."""
    state = info.get("state") or {}
    first = int(state.get("first_seq") or 0)
    last = int(state.get("last_seq") or 0)
    return max(first, 1), last


# -- reading messages by sequence ------------------------------------------------------------


_DIRECT_KEYS = {k.encode(): k for k in _DIRECT_HEADERS}


def _decode_direct(hdr: bytes | None, data: bytes, what: str) -> tuple[StoredMsg | None, dict]:
    """A DIRECT.GET answer -> (message or None for 404, the Nats-* headers added)."""
    if not hdr:
        raise JetStreamError(f"{what}: DIRECT.GET answer without headers")
    lines = hdr.split(b"\r\n")
    first = lines[0]
    if len(first) > 8:  # a status: NATS/1.0 404 Message Not Found
        status, desc, status_headers = parse_headers(hdr)
        if status == 404:
            return None, {}
        if status == 204:
            return None, {"EOB": True, **{k: v[0] for k, v in status_headers.items() if k in _DIRECT_HEADERS}}
        if status:
            raise JetStreamError(f"{what}: {status} {desc}".strip(), status)
    meta: dict = {}
    headers: dict | None = None
    keys = _DIRECT_KEYS
    for line in lines[1:]:
        if not line:
            continue
        key, sep, value = line.partition(b":")
        if not sep:
            continue
        name = keys.get(key)
        if name is not None:
            meta[name] = value.strip().decode()
        else:
            k = key.strip().decode("utf-8", "replace")
            if k:
                if headers is None:
                    headers = {}
                headers.setdefault(k, []).append(value.strip().decode("utf-8", "replace"))
    try:
        msg = StoredMsg(
            meta["Nats-Subject"], int(meta["Nats-Sequence"]), headers, data, rfc3339_to_micros(meta["Nats-Time-Stamp"])
        )
    except KeyError as exc:
        raise JetStreamError(f"{what}: DIRECT.GET answer without the {exc.args[0]} header") from None
    return msg, meta


def _decode_msg_get(hdr: bytes | None, data: bytes, what: str, url: str) -> StoredMsg | None:
    resp = _json_answer(hdr, data, what, url)
    err = resp.get("error")
    if err:
        if int(err.get("err_code") or 0) == 10037 or err.get("code") == 404 and "stream" not in str(err.get("description")):
            return None
        _raise_api_error(err, what)
    m = resp["message"]
    hdrs = m.get("hdrs")
    headers = parse_headers(base64.b64decode(hdrs))[2] if hdrs else None
    data = base64.b64decode(m["data"]) if m.get("data") else b""
    return StoredMsg(m["subject"], int(m["seq"]), headers or None, data, rfc3339_to_micros(m["time"]))


def _get_one(conn: Connection, stream: str, seq: int, next_by_subj: str | None, direct: bool) -> StoredMsg | None:
    body: dict = {"seq": seq}
    if next_by_subj:
        body["next_by_subj"] = next_by_subj
    what = f"stream {stream!r}"
    payload = json.dumps(body, separators=(",", ":")).encode()
    if direct:
        hdr, data = conn.request("$JS.API.DIRECT.GET." + stream, payload)
        if _status(hdr)[0] == 503:
            raise StreamNotFound(f"{what}: stream not found (or not allow_direct) on {conn.url}")
        return _decode_direct(hdr, data, what)[0]
    hdr, data = conn.request("$JS.API.STREAM.MSG.GET." + stream, payload)
    return _decode_msg_get(hdr, data, what, conn.url)


def _fetch_each(conn: Connection, stream: str, start: int, end: int, direct: bool, window: int) -> Iterator[StoredMsg]:
    """Every message in [start, end), one request per sequence, ``window`` in flight; deleted
    sequences are skipped. Yields in sequence order."""
    what = f"stream {stream!r}"
    subject = ("$JS.API.DIRECT.GET." if direct else "$JS.API.STREAM.MSG.GET.") + stream
    subject_b = subject.encode()
    tokens: dict[bytes, int] = {}
    results: dict[int, StoredMsg | None] = {}
    next_send = next_yield = start
    while next_yield < end:
        if next_send - next_yield <= window // 2:  # refill in bulk: one write for many requests
            while next_send < end and next_send - next_yield < window:
                tokens[conn.send_request(subject_b, b'{"seq":%d}' % next_send)] = next_send
                next_send += 1
            conn.flush()
        while next_yield not in results:
            token, hdr, data = conn.recv_reply()
            seq = tokens.pop(token, None)
            if seq is None:
                continue  # a late answer to an earlier request
            if direct:
                if hdr and _status(hdr)[0] == 503:
                    raise StreamNotFound(f"{what}: stream not found on {conn.url}")
                results[seq] = _decode_direct(hdr, data, what)[0]
            else:
                results[seq] = _decode_msg_get(hdr, data, what, conn.url)
        while next_yield in results:
            msg = results.pop(next_yield)
            next_yield += 1
            if msg is not None:
                yield msg


def subject_matches(subject: str, pattern: str) -> bool:
    """Whether a literal subject matches a filter with ``*`` and ``>`` wildcards."""
    if subject == pattern:
        return True
    st, pt = subject.split("."), pattern.split(".")
    for i, p in enumerate(pt):
        if p == ">":
            return len(st) > i
        if i >= len(st) or (p != "*" and p != st[i]):
            return False
    return len(st) == len(pt)


DENSE_GAP = 4  # mean distance between matches at or under which one request per sequence wins
_PROBE_MATCHES = 32


def _fetch_next_by_subject(conn: Connection, stream: str, start: int, end: int, subject: str,
                           direct: bool, window: int) -> Iterator[StoredMsg]:
    """The messages on ``subject`` (wildcards allowed) in [start, end): one next_by_subj
    request per message while matches are sparse; once they prove dense (a mean gap of at
    most DENSE_GAP sequences), pipelined requests for every sequence, filtered here."""
    seq = start
    count = 0
    while seq < end:
        if count >= _PROBE_MATCHES and (seq - start) <= DENSE_GAP * count:
            for each in _fetch_each(conn, stream, seq, end, direct, window):
                if subject_matches(each.subject, subject):
                    yield each
            return
        msg = _get_one(conn, stream, seq, subject, direct)
        if msg is None or msg.seq >= end:
            return
        yield msg
        count += 1
        seq = msg.seq + 1


class _NoBatches(Exception):
    """The server answered a DIRECT.GET batch request with a single message (nats-server < 2.11)."""

    def __init__(self, msg: StoredMsg | None) -> None:
        self.msg = msg


def _fetch_batches(conn: Connection, stream: str, start: int, end: int, subject: str | None,
                   window: int, max_bytes: int) -> Iterator[StoredMsg]:
    """DIRECT.GET batches of up to ``window`` messages from ``start`` (next_by_subj for a
    filter), until ``end``. Raises _NoBatches on the first answer of a server without them."""
    what = f"stream {stream!r}"
    subj = ("$JS.API.DIRECT.GET." + stream).encode()
    seq = start
    first = conn.direct_batch is None
    while seq < end:
        body: dict = {"seq": seq, "batch": window if subject else min(window, end - seq), "max_bytes": max_bytes}
        if subject:
            body["next_by_subj"] = subject
        token = conn.send_request(subj, json.dumps(body, separators=(",", ":")).encode())
        conn.flush()
        last = None
        while True:
            got, hdr, data = conn.recv_reply()
            if got != token:
                continue
            if hdr and _status(hdr)[0] == 503:
                raise StreamNotFound(f"{what}: stream not found (or not allow_direct) on {conn.url}")
            msg, meta = _decode_direct(hdr, data, what)
            if msg is None:
                if meta.get("EOB"):
                    break
                if first:  # 404 to the probe: no batches, or nothing at/after seq
                    raise _NoBatches(None)
                return  # 404: nothing at or after seq
            if "Nats-Num-Pending" not in meta:
                raise _NoBatches(msg)
            if first:
                conn.direct_batch = True
                first = False
            last = msg.seq
            if msg.seq >= end:
                return
            yield msg
        if last is None:
            return
        if int(meta.get("Nats-Num-Pending", "0") or 0) == 0:
            return
        seq = last + 1


def fetch_range(conn: Connection, stream: str, start: int, end: int, *, subject: str | None = None,
                direct: bool = True, window: int = 1024, max_bytes: int = 4 << 20) -> Iterator[StoredMsg]:
    """Every message of ``stream`` with a sequence in [start, end) (on ``subject`` if given),
    in sequence order. Uses DIRECT.GET batches where the server has them, else pipelined
    DIRECT.GET or STREAM.MSG.GET requests (one per sequence), or one next_by_subj request
    per message with a subject filter."""
    if start >= end:
        return
    if subject in ("", ">"):
        subject = None
    seq = start
    if direct and conn.direct_batch is not False:
        try:
            yield from _fetch_batches(conn, stream, start, end, subject, window, max_bytes)
            return
        except _NoBatches as nb:
            conn.direct_batch = False
            msg = nb.msg
            if msg is not None:
                if msg.seq >= end:
                    return
                yield msg
                seq = msg.seq + 1
            elif subject:
                return  # next_by_subj found nothing at or after start
            else:
                seq = start + 1  # start itself is missing; the rest one by one
    if subject:
        yield from _fetch_next_by_subject(conn, stream, seq, end, subject, direct, window)
    else:
        yield from _fetch_each(conn, stream, seq, end, direct, window)


# -- publishing with acknowledgements -------------------------------------------------------------


class Publisher:
    """Publishes with a reply subject and checks every JetStream ack, ``window`` in flight.

    ``acks=False`` publishes plain messages (core NATS) and only makes sure the server has
    read them (PING/PONG) in :meth:`finish`.
    """

    def __init__(self, conn: Connection, *, window: int = 256, acks: bool = True,
                 expected_stream: str | None = None, ack_timeout: float | None = None) -> None:
        self.conn = conn
        self.window = max(1, window)
        self.acks = acks
        self.expected_stream = expected_stream
        self.ack_timeout = ack_timeout or conn.timeout
        self.max_payload = int(conn.info.get("max_payload") or 1 << 20)
        self.published = 0
        self.duplicates = 0
        self._pending: dict[bytes, str] = {}
        fixed = b"NATS/1.0\r\n"
        if expected_stream and acks:
            fixed += b"Nats-Expected-Stream: " + expected_stream.encode() + b"\r\n"
        self._fixed_headers = fixed + b"\r\n"

    def publish(self, subject: str, data: bytes, headers=None, msg_id: str | None = None) -> None:
        if headers:
            hdrs = list(headers.items()) if isinstance(headers, dict) else list(headers)
            if msg_id is not None:
                hdrs.append(("Nats-Msg-Id", msg_id))
            if self.expected_stream and self.acks:
                hdrs.append(("Nats-Expected-Stream", self.expected_stream))
            hblock = encode_headers(hdrs)
        elif msg_id is not None or (self.expected_stream and self.acks):
            # the common case, without the general encoder
            hblock = self._fixed_headers
            if msg_id is not None:
                mid = msg_id.encode()
                if b"\r" in mid or b"\n" in mid:
                    raise PublishError(f"bad message id {msg_id!r}: no line breaks")
                hblock = b"NATS/1.0\r\nNats-Msg-Id: " + mid + b"\r\n" + hblock[10:]
        else:
            hblock = None
        size = len(data) + (len(hblock) if hblock else 0)
        if size > self.max_payload:
            raise PublishError(f"message on {subject!r} has {size} bytes, over the server's max_payload {self.max_payload}")
        subj = subject.encode()
        if self.acks:
            token = self.conn.send_request(subj, data, hblock)
            self._pending[token] = subject
            if len(self._pending) >= self.window:
                self.conn.flush()
                self._collect(self.window // 2)
        else:
            self.conn.send(subj, data, headers=hblock)
            self.published += 1
            if len(self.conn._out) >= 4 * self.window:
                self.conn.flush()

    def _collect(self, keep: int) -> None:
        conn = self.conn
        old = conn.timeout
        conn.settimeout(self.ack_timeout)
        try:
            while len(self._pending) > keep:
                try:
                    token, hdr, data = conn.recv_reply()
                except NatsTimeout:
                    subj = next(iter(self._pending.values()))
                    raise PublishError(
                        f"no JetStream ack within {self.ack_timeout:g} s for a message on {subj!r} ({len(self._pending)} unacknowledged)"
                    ) from None
                subject = self._pending.pop(token, None)
                if subject is None:
                    continue
                self._check_ack(subject, hdr, data)
        finally:
            conn.settimeout(old)

    def _check_ack(self, subject: str, hdr: bytes | None, data: bytes) -> None:
        if hdr is not None:
            status, desc = _status(hdr)
            if status == 503:
                raise PublishError(f"no stream captures subject {subject!r} (no responders); create one or write with acks=false")
            if status:
                raise PublishError(f"publish to {subject!r} failed: {status} {desc}".strip())
        if data.startswith(b'{"stream":') and b'"error"' not in data and b'"duplicate"' not in data:
            self.published += 1  # a plain good ack: no JSON parse
            return
        try:
            ack = json.loads(data)
        except ValueError:
            raise PublishError(f"publish to {subject!r}: the ack is not JSON: {data[:60]!r}") from None
        err = ack.get("error") if isinstance(ack, dict) else None
        if err:
            raise PublishError(
                f"publish to {subject!r} refused: {err.get('description')} (code {err.get('code')}, err_code {err.get('err_code')})"
            )
        if not isinstance(ack, dict) or "seq" not in ack:
            raise PublishError(f"publish to {subject!r}: not a JetStream ack: {data[:60]!r}")
        self.published += 1
        if ack.get("duplicate"):
            self.duplicates += 1

    def finish(self) -> None:
        """Send everything and wait for every ack (or, without acks, a PONG)."""
        self.conn.flush()
        if self.acks:
            self._collect(0)
        else:
            self.conn.ping()
