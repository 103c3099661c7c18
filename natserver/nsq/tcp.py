"""The NSQ TCP listener (protocol V2) and the front-end object that serve_nsq returns.

One task reads and executes a client's commands (many per receive, with no checkpoint
between them), one writer task sends its output, one task sends heartbeats. Message frames
are buffered as nsqd does (flushed at output_buffer_size, after output_buffer_timeout, or at
once when the client cannot take more); responses and errors go out at once.
"""

from __future__ import annotations

import logging
import math
import socket
import ssl

import orjson
import trio

from .. import clock
from ..auth.tls import PrefixedStream
from .auth import AuthError, query_any_authd
from .bridge import Bridge
from .codecs import DeflateCodec, SnappyCodec
from .config import OUTPUT_BUFFER_SIZE, VERSION, NsqOptions, parse_nsq_options
from .engine import Consumer, Engine, Message
from .errors import NsqError
from .http import NsqHttp, listen_label, summary
from .lookupd import LookupPeer
from .protocol import (
    HEARTBEAT,
    MSG_ID_LENGTH,
    NEED_DATA,
    OK,
    OK_FRAME,
    V2Parser,
    encode_message,
    error_frame,
    go_quote,
    is_valid_name,
    parse_base10,
    response,
)

# Everything in __all__ gets re-exported as part of natserver.nsq's API.
__all__ = ["NsqServer", "NsqClient", "serve_nsq"]

log = logging.getLogger("natserver")

RECEIVE_SIZE = 64 * 1024  # bytes read at once
# A client whose unsent output exceeds this is not read from until it drains: one that
# pipelines commands without reading its answers stalls itself, never the server's memory
# (natserver's bound; nsqd blocks the same way on its buffered writer).
MAX_PENDING_OUTPUT = 4 * 1024 * 1024
TLS_HANDSHAKE_TIMEOUT = 5.0  # seconds; bounds the IDENTIFY tls_v1 upgrade
ACCEPT_RETRY = 0.1  # seconds to wait when accept fails for lack of resources (trio's serve_listeners)
_INIT, _SUBSCRIBED, _CLOSING = "init", "subscribed", "closing"
_CLOSE_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError, trio.TooSlowError, ssl.SSLError)


class _Closed(Exception):
    pass


class NsqClient(Consumer):
    """One V2 connection (a producer, a consumer or both)."""

    def __init__(self, front: "NsqServer", stream, cid: int, ip: str, port: int) -> None:
        options = front.options
        super().__init__(cid, msg_timeout=options.msg_timeout)
        self.front = front
        self.engine = front.engine
        self.stream = stream
        self.raw_stream = stream
        self.ip, self.port = ip, port
        self.state = _INIT
        self.parser = V2Parser(max_msg_size=options.max_msg_size, max_body_size=options.max_body_size,
                               max_req_timeout_ms=int(options.max_req_timeout * 1000))
        self.heartbeat_interval = options.client_timeout / 2  # nsqd: client timeout / 2
        self.output_buffer_size = OUTPUT_BUFFER_SIZE
        self.output_buffer_timeout = options.output_buffer_timeout
        self.client_id = ip
        self.hostname = ip
        self.user_agent = ""
        self.tls = False
        self.deflate = False
        self.deflate_level = 0
        self.snappy = False
        self.codec: SnappyCodec | DeflateCodec | None = None
        self.connect_time = clock.now()
        self.ready_count = 0
        self.pub_counts: dict[str, int] = {}
        self.out = bytearray()
        self._urgent = False
        self._buffered_since = 0.0
        self._wake = trio.Event()
        self._send_lock = trio.Lock()
        self._nursery: trio.Nursery | None = None
        self._hb_scope: trio.CancelScope | None = None
        self.closed = False
        self.topic_name = ""
        self.channel_name = ""
        self.auth = None  # natserver.nsq.auth.AuthState once AUTH succeeded

    # -- output -----------------------------------------------------------------------------

    def deliver(self, message: Message) -> None:
        if not self.out:
            self._buffered_since = trio.current_time()
        self.out += encode_message(message.id, message.timestamp, message.attempts, message.body)
        self._wake.set()

    def send_response(self, data: bytes) -> None:
        self.out += response(data)
        self._urgent = True
        self._wake.set()

    def send_error(self, error: NsqError) -> None:
        self.out += error_frame(error)
        self._urgent = True
        self._wake.set()

    def close_by_server(self) -> None:
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def _should_flush(self) -> bool:
        if self._urgent or self.output_buffer_timeout <= 0 or len(self.out) >= self.output_buffer_size:
            return True
        # nsqd flushes at once when the client cannot be sent more (messagePump)
        return self.state != _SUBSCRIBED or self.in_flight >= self.rdy or self.channel is None

    async def _writer(self) -> None:
        while True:
            if not self.out:
                await self._wake.wait()
                self._wake = trio.Event()
                continue
            if not self._should_flush():
                deadline = self._buffered_since + self.output_buffer_timeout
                if trio.current_time() < deadline:
                    with trio.move_on_at(deadline):
                        await self._wake.wait()
                    self._wake = trio.Event()
                    if trio.current_time() < deadline and not self._should_flush():
                        continue
            await self.flush_now()

    async def flush_now(self) -> None:
        async with self._send_lock:
            await self._send_pending()

    async def _send_pending(self) -> None:
        if not self.out:
            return
        data = bytes(self.out)
        self.out.clear()
        self._urgent = False
        if self.codec is not None:
            data = self.codec.encode(data)
        # nsqd's write deadline is the heartbeat interval (protocol_v2.go Send)
        timeout = self.heartbeat_interval if self.heartbeat_interval > 0 else self.front.options.client_timeout
        try:
            with trio.fail_after(timeout):
                await self.stream.send_all(data)
        except _CLOSE_ERRORS:
            self.close()
            raise _Closed() from None

    async def _heartbeats(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as scope:
            self._hb_scope = scope
            task_status.started()
            interval = self.heartbeat_interval
            if interval <= 0:
                await trio.sleep_forever()
            while True:
                await trio.sleep(interval)
                self.send_response(HEARTBEAT)

    # -- input ------------------------------------------------------------------------------

    async def run(self) -> None:
        label = f"{self.ip}:{self.port}"
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._writer_task)
                await nursery.start(self._heartbeats)
                try:
                    await self._read_loop()
                finally:
                    with trio.CancelScope(shield=True), trio.move_on_after(1):
                        try:
                            await self.flush_now()
                        except _Closed:
                            pass
                    nursery.cancel_scope.cancel()
        except _Closed:
            pass
        except Exception:  # a bug must cost one connection, never the server
            log.exception("NSQ: %s - internal error; closing the connection", label)
        finally:
            self.closed = True
            if self.channel is not None:
                self.channel.remove_client(self)
            self.front.client_closed(self)
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self.stream)

    async def _writer_task(self) -> None:
        try:
            await self._writer()
        except _Closed:
            pass

    async def _read_loop(self) -> None:
        parser = self.parser
        while True:
            if len(self.out) > MAX_PENDING_OUTPUT:
                try:
                    await self.flush_now()
                except _Closed:
                    return
            timeout = self.heartbeat_interval * 2 if self.heartbeat_interval > 0 else math.inf
            data = b""
            with trio.move_on_after(timeout) as scope:
                try:
                    data = await self.stream.receive_some(RECEIVE_SIZE)
                except _CLOSE_ERRORS:
                    return
            if scope.cancelled_caught:
                log.error("NSQ: [%s:%d] - failed to read command - i/o timeout", self.ip, self.port)
                return
            if not data:
                return
            try:
                if self.codec is None:
                    parser.feed(data)
                    if not await self._execute_all():
                        return
                else:
                    for part in self.codec.decode(data):
                        parser.feed(part)
                        if not await self._execute_all():
                            return
            except NsqError as exc:  # a broken compressed stream
                log.error("NSQ: [%s:%d] - %s", self.ip, self.port, exc.logged)
                return

    async def _execute_all(self) -> bool:
        """Run every complete command; False when the connection must close."""
        parser = self.parser
        engine = self.engine
        now = trio.current_time()
        try:
            while True:
                try:
                    command = parser.next_command()
                    if command is NEED_DATA:
                        return True
                    verb = command.verb
                    if verb == b"IDENTIFY":
                        await self._identify(command.body or b"")  # (the parser read one: never None)
                        now = trio.current_time()
                    elif verb == b"AUTH":
                        await self._auth(command.body or b"")
                        now = trio.current_time()
                    else:
                        if self.auth is not None and verb in _AUTH_CHECKED and self.auth.expired(now):
                            await self._refresh_auth()
                            now = trio.current_time()
                        self._execute(command, now)
                except NsqError as exc:
                    if exc.code is None:
                        log.error("NSQ: [%s:%d] - %s", self.ip, self.port, exc.logged)
                        return False
                    log.error("NSQ: [%s:%d] - %s", self.ip, self.port, exc.logged)
                    self.send_error(exc)
                    if exc.fatal:
                        return False
        finally:
            engine.flush()
            self.front.after_batch()

    def _execute(self, command, now: float) -> None:
        verb = command.verb
        params = command.params
        front = self.front
        if verb == b"PUB":
            topic = params[0].decode()
            if front.auth_enabled:
                self._check_auth("PUB", topic, "")
            front.publish(topic, [command.body], now, client=self)
            self.out += OK_FRAME
            self._urgent = True
            self._wake.set()
        elif verb == b"FIN":
            channel = self._message_command("FIN", params, 1)
            msg_id = params[0]
            reason = channel.finish(self, msg_id, now)
            if reason is not None:
                raise NsqError("E_FIN_FAILED", f"FIN {msg_id.decode('latin-1')} failed {reason}", fatal=False)
        elif verb == b"RDY":
            self._rdy(params, now)
        elif verb == b"MPUB":
            if front.auth_enabled:
                self._check_auth("MPUB", params[0].decode(), "")
            front.publish(params[0].decode(), list(command.bodies), now, client=self)
            self.send_response(OK)
        elif verb == b"REQ":
            channel = self._message_command("REQ", params, 2)
            msg_id = params[0]
            timeout = parse_base10(params[1])
            if timeout is None:
                raise NsqError("E_INVALID", f"REQ could not parse timeout {params[1].decode('utf-8', 'surrogateescape')}")
            if timeout >= 1 << 63:
                timeout -= 1 << 64
            delay = min(max(timeout / 1000.0, 0.0), self.front.options.max_req_timeout)
            reason = channel.requeue(self, msg_id, delay, now)
            if reason is not None:
                raise NsqError("E_REQ_FAILED", f"REQ {msg_id.decode('latin-1')} failed {reason}", fatal=False)
        elif verb == b"DPUB":
            if front.auth_enabled:
                self._check_auth("DPUB", params[0].decode(), "")
            delay = (parse_base10(params[1]) or 0) / 1000.0  # (the parser checked it: never None)
            front.publish(params[0].decode(), [command.body], now, client=self, defer=delay)
            self.send_response(OK)
        elif verb == b"NOP":
            pass
        elif verb == b"TOUCH":
            channel = self._message_command("TOUCH", params, 1)
            msg_id = params[0]
            reason = channel.touch(self, msg_id, now)
            if reason is not None:
                raise NsqError("E_TOUCH_FAILED", f"TOUCH {msg_id.decode('latin-1')} failed {reason}", fatal=False)
        elif verb == b"SUB":
            self._sub(params, now)
        elif verb == b"CLS":
            if self.state != _SUBSCRIBED:
                raise NsqError("E_INVALID", "cannot CLS in current state")
            self.state = _CLOSING
            self.start_close()
            self.send_response(b"CLOSE_WAIT")
        else:
            raise NsqError("E_INVALID", f"invalid command {verb.decode('utf-8', 'surrogateescape')}")

    def _message_command(self, name: str, params: tuple, arity: int):
        if self.state not in (_SUBSCRIBED, _CLOSING):
            raise NsqError("E_INVALID", f"cannot {name} in current state")
        if len(params) < arity:
            raise NsqError("E_INVALID", f"{name} insufficient number of params")
        if len(params[0]) != MSG_ID_LENGTH:
            raise NsqError("E_INVALID", "invalid message ID")
        return self.channel

    def _rdy(self, params: tuple, now: float) -> None:
        if self.state == _CLOSING:
            return  # nsqd ignores RDY after CLS
        if self.state != _SUBSCRIBED:
            raise NsqError("E_INVALID", "cannot RDY in current state")
        count = 1
        if params:
            value = parse_base10(params[0])
            if value is None:
                raise NsqError("E_INVALID", f"RDY could not parse count {params[0].decode('utf-8', 'surrogateescape')}")
            count = value - (1 << 64) if value >= 1 << 63 else value
        max_rdy = self.front.options.max_rdy_count
        if count < 0 or count > max_rdy:
            raise NsqError("E_INVALID", f"RDY count {count} out of range 0-{max_rdy}")
        self.ready_count = count
        self.set_rdy(count, now)

    def _sub(self, params: tuple, now: float) -> None:
        if self.state != _INIT:
            raise NsqError("E_INVALID", "cannot SUB in current state")
        if self.heartbeat_interval <= 0:
            raise NsqError("E_INVALID", "cannot SUB with heartbeats disabled")
        if len(params) < 2:
            raise NsqError("E_INVALID", "SUB insufficient number of parameters")
        if not is_valid_name(params[0]):
            raise NsqError("E_BAD_TOPIC", f"SUB topic name {go_quote(params[0])} is not valid")
        if not is_valid_name(params[1]):
            raise NsqError("E_BAD_CHANNEL", f"SUB channel name {go_quote(params[1])} is not valid")
        if self.front.auth_enabled:
            self._check_auth("SUB", params[0].decode(), params[1].decode())
        self.topic_name, self.channel_name = params[0].decode(), params[1].decode()
        topic = self.front.get_topic(self.topic_name)
        channel = topic.get_channel(self.channel_name, now)
        self.state = _SUBSCRIBED
        self.parser.subscribed = True
        channel.add_client(self, now)
        self.send_response(OK)

    # -- AUTH -------------------------------------------------------------------------------

    def _check_auth(self, command: str, topic: str, channel: str) -> None:
        """nsqd CheckAuth (protocol_v2.go): fatal errors."""
        if self.auth is None:
            raise NsqError("E_AUTH_FIRST", f"AUTH required before {command}")
        if not self.auth.is_allowed(topic, channel):
            raise NsqError("E_UNAUTHORIZED",
                           f"AUTH failed for {command} on {go_quote(topic.encode())} {go_quote(channel.encode())}")

    async def _query_auth(self, secret: str):
        try:
            return await query_any_authd(self.front.options.auth_http_addresses, self.ip, self.tls, "", secret)
        except AuthError as exc:
            log.error("NSQ: [%s:%d] - auth: %s", self.ip, self.port, exc)
            raise NsqError("E_AUTH_FAILED", "AUTH failed") from None

    async def _auth(self, body: bytes) -> None:
        if self.auth is not None:
            raise NsqError("E_INVALID", "AUTH already set")
        if not self.front.auth_enabled:
            raise NsqError("E_AUTH_DISABLED", "AUTH disabled")
        self._auth_secret = body.decode("utf-8", "surrogateescape")
        state = await self._query_auth(self._auth_secret)
        self.auth = state
        if not state.authorizations:
            raise NsqError("E_UNAUTHORIZED", "AUTH no authorizations found")
        self.send_response(orjson.dumps({"identity": state.identity, "identity_url": state.identity_url,
                                         "permission_count": len(state.authorizations)}))

    async def _refresh_auth(self) -> None:
        """An expired auth state is queried again (nsqd IsAuthorized)."""
        self.auth = await self._query_auth(self._auth_secret)

    # -- IDENTIFY ---------------------------------------------------------------------------

    async def _identify(self, body: bytes) -> None:
        options = self.front.options
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            raise NsqError("E_BAD_BODY", "IDENTIFY failed to decode JSON body")
        fields = _identify_fields(data)
        self.client_id = fields["client_id"]
        self.hostname = fields["hostname"]
        self.user_agent = fields["user_agent"]
        # client_v2.go Identify: heartbeat, output buffer, sample rate, msg timeout, in order
        interval = fields["heartbeat_interval"]
        if interval == -1:
            heartbeat = 0.0
        elif interval == 0:
            heartbeat = self.heartbeat_interval
        elif 1000 <= interval <= int(options.max_heartbeat_interval * 1000):
            heartbeat = interval / 1000.0
        else:
            raise NsqError("E_BAD_BODY", f"IDENTIFY heartbeat interval ({interval}) is invalid")
        if heartbeat != self.heartbeat_interval:
            self.heartbeat_interval = heartbeat
            if self._hb_scope is not None:
                self._hb_scope.cancel()
                assert self._nursery is not None  # run() opened it before reading IDENTIFY
                await self._nursery.start(self._heartbeats)
        size, timeout = fields["output_buffer_size"], fields["output_buffer_timeout"]
        if timeout == -1:
            self.output_buffer_timeout = 0.0
        elif timeout == 0:
            pass
        elif int(options.min_output_buffer_timeout * 1000) <= timeout <= int(options.max_output_buffer_timeout * 1000):
            self.output_buffer_timeout = timeout / 1000.0
        else:
            raise NsqError("E_BAD_BODY", f"IDENTIFY output buffer timeout ({timeout}) is invalid")
        if size == -1:
            self.output_buffer_size, self.output_buffer_timeout = 1, 0.0
        elif size == 0:
            pass
        elif 64 <= size <= options.max_output_buffer_size:
            self.output_buffer_size = size
        else:
            raise NsqError("E_BAD_BODY", f"IDENTIFY output buffer size ({size}) is invalid")
        sample_rate = fields["sample_rate"]
        if not 0 <= sample_rate <= 99:
            raise NsqError("E_BAD_BODY", f"IDENTIFY sample rate ({sample_rate}) is invalid")
        self.sample_rate = sample_rate
        msg_timeout = fields["msg_timeout"]
        if msg_timeout == 0:
            pass
        elif 1000 <= msg_timeout <= int(options.max_msg_timeout * 1000):
            self.msg_timeout = msg_timeout / 1000.0
        else:
            raise NsqError("E_BAD_BODY", f"IDENTIFY msg timeout ({msg_timeout}) is invalid")
        if not fields["feature_negotiation"]:
            self.send_response(OK)
            return
        # A repeated IDENTIFY never upgrades an upgraded connection a second time.
        tls = self.front.ssl_context is not None and fields["tls_v1"] and not self.tls
        deflate = options.deflate and fields["deflate"] and self.codec is None
        level = 6
        if deflate and fields["deflate_level"] > 0:
            level = fields["deflate_level"]
        level = min(level, options.max_deflate_level)
        snappy = options.snappy and fields["snappy"] and self.codec is None
        if deflate and snappy:
            raise NsqError("E_IDENTIFY_FAILED", "cannot enable both deflate and snappy compression")
        answer = {
            "max_rdy_count": options.max_rdy_count,
            "version": VERSION,
            "max_msg_timeout": int(options.max_msg_timeout * 1000),
            "msg_timeout": int(self.msg_timeout * 1000),
            "tls_v1": tls,
            "deflate": deflate,
            "deflate_level": level,
            "max_deflate_level": options.max_deflate_level,
            "snappy": snappy,
            "sample_rate": self.sample_rate,
            "auth_required": self.front.auth_enabled,
            "output_buffer_size": self.output_buffer_size,
            "output_buffer_timeout": int(self.output_buffer_timeout * 1000),
            "topology_region": "",
            "topology_zone": "",
        }
        self.send_response(orjson.dumps(answer))
        if not (tls or deflate or snappy):
            return
        async with self._send_lock:
            await self._send_pending()
            if tls:
                await self._upgrade_tls()
                self.send_response(OK)
                await self._send_pending()
            if snappy or deflate:
                self.codec = SnappyCodec() if snappy else DeflateCodec(level)
                self.snappy, self.deflate = snappy, deflate
                self.front.upgrades["snappy" if snappy else "deflate"] += 1
                self.deflate_level = level if deflate else 0
                leftover = self.parser.take_unread()
                self.send_response(OK)
                await self._send_pending()
                for part in self.codec.decode(leftover) if leftover else ():
                    self.parser.feed(part)

    async def _upgrade_tls(self) -> None:
        leftover = self.parser.take_unread()
        stream = self.stream
        if leftover:  # a client that did not wait for the IDENTIFY answer
            stream = PrefixedStream(stream, leftover)
        context = self.front.ssl_context
        assert context is not None  # IDENTIFY offers tls_v1 only with one
        ssl_stream = trio.SSLStream(stream, context, server_side=True)
        try:
            with trio.fail_after(TLS_HANDSHAKE_TIMEOUT):
                await ssl_stream.do_handshake()
        except _CLOSE_ERRORS as exc:
            log.error("NSQ: [%s:%d] - TLS handshake failed: %s", self.ip, self.port, exc)
            self.close()
            raise _Closed() from None
        self.stream = ssl_stream
        self.tls = True
        self.front.upgrades["tls"] += 1


_AUTH_CHECKED = frozenset({b"PUB", b"MPUB", b"DPUB", b"SUB"})
_IDENTIFY_TYPES = {  # client_v2.go identifyDataV2: Go's json refuses a value of another type
    "client_id": str, "hostname": str, "user_agent": str,
    "heartbeat_interval": int, "output_buffer_size": int, "output_buffer_timeout": int,
    "deflate_level": int, "sample_rate": int, "msg_timeout": int,
    "feature_negotiation": bool, "tls_v1": bool, "deflate": bool, "snappy": bool,
}
_INT_BOUNDS = {"sample_rate": 1 << 31}  # int32 in nsqd; the others are Go ints (64-bit)


def _identify_fields(data: dict) -> dict:
    fields = {}
    folded = None
    for key, kind in _IDENTIFY_TYPES.items():
        if key in data:
            value = data[key]
        else:  # Go's encoding/json also matches keys case-insensitively
            if folded is None:
                folded = {k.lower(): v for k, v in data.items() if isinstance(k, str)}
            value = folded.get(key)
        if value is None:  # absent or null: Go leaves the zero value
            fields[key] = kind()
            continue
        if kind is int:  # Go refuses 1.0 and 1e3 for an int field, as it refuses "1"
            if isinstance(value, bool) or not isinstance(value, int):
                raise NsqError("E_BAD_BODY", "IDENTIFY failed to decode JSON body")
            bound = _INT_BOUNDS.get(key, 1 << 63)
            if not -bound <= value < bound:
                raise NsqError("E_BAD_BODY", "IDENTIFY failed to decode JSON body")
        elif not isinstance(value, kind):
            raise NsqError("E_BAD_BODY", "IDENTIFY failed to decode JSON body")
        fields[key] = value
    return fields


class NsqServer:
    """The running NSQ front-end: ``.tcp_port``, ``.http_port``, ``.engine``, ``.clients``."""

    def __init__(self, server, options: NsqOptions) -> None:
        self.server = server
        self.options = options
        self.engine = Engine(options, node_id=options.node_id)
        self.clients: dict[int, NsqClient] = {}
        self.tcp_port: int | None = None
        self.http_port: int | None = None
        self.https_port: int | None = None
        self.host = options.host or (getattr(getattr(server, "options", None), "host", "") or "0.0.0.0")
        self.start_time = int(clock.now())
        self.hostname = socket.gethostname()
        self.broadcast_address = options.broadcast_address or self.hostname
        if options.snappy and not _have_cramjam():
            log.warning("NSQ: snappy is not offered: the cramjam package is not installed (natserver's nsq extra)")
            self.options = options = options.copy(snappy=False)
        self.ssl_context: ssl.SSLContext | None = None
        if options.tls_cert:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(options.tls_cert, options.tls_key)
            self.ssl_context = context
        self.bridge: Bridge | None = None
        self.auth_enabled = bool(options.auth_http_addresses)
        self.total_connections = 0
        self.upgrades = {"tls": 0, "deflate": 0, "snappy": 0}  # connections upgraded by IDENTIFY
        self._next_cid = 0
        self.listeners: list = []
        self.http: NsqHttp | None = None
        self._nursery: trio.Nursery | None = None

    # -- used by clients and the HTTP API ----------------------------------------------------

    def get_topic(self, name: str):
        return self.engine.get_topic(name)

    def publish(self, topic: str, bodies: list, now: float, *, client=None, defer: float = 0.0,
                from_bridge: bool = False) -> None:
        self.engine.publish(topic, bodies, now, defer)
        if client is not None:
            client.pub_counts[topic] = client.pub_counts.get(topic, 0) + len(bodies)
        if self.bridge is not None and not from_bridge:
            self.bridge.to_nats(topic, bodies)

    def after_batch(self) -> None:
        if self.bridge is not None:
            self.bridge.flush()

    def summary(self) -> dict:
        """What /nsqz reports (natserver's monitoring port asks for it by this name)."""
        return summary(self)

    def client_closed(self, client: NsqClient) -> None:
        self.clients.pop(client.cid, None)

    # -- serving ----------------------------------------------------------------------------

    async def _accept_loop(self, listener, nursery: trio.Nursery) -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                log.error("NSQ: accept error: %s", exc)
                await trio.sleep(ACCEPT_RETRY)
                continue
            except trio.ClosedResourceError:
                return
            nursery.start_soon(self._handle, stream)

    async def _handle(self, stream) -> None:
        self._next_cid += 1
        cid = self._next_cid
        self.total_connections += 1
        try:
            ip, port = stream.socket.getpeername()[:2]
        except (OSError, AttributeError):  # AttributeError: an in-memory stream
            ip, port = "memory", cid
        if len(self.clients) >= self.options.max_clients:
            log.error("NSQ: %s:%d - maximum connections exceeded", ip, port)
            await trio.aclose_forcefully(stream)
            return
        client = NsqClient(self, stream, cid, ip, port)
        self.clients[cid] = client
        await client.run()

    def connect_memory(self):
        """A client end of an in-memory connection served like a TCP one (tests, embedding;
        deterministic under trio's MockClock)."""
        import trio.testing

        client_end, server_end = trio.testing.memory_stream_pair()
        assert self._nursery is not None, "the NSQ front-end is not serving yet"
        self._nursery.start_soon(self._handle, server_end)
        return client_end

    async def _scanner(self) -> None:
        """nsqd's queue scan: in-flight timeouts and deferred messages, every interval."""
        interval = self.options.queue_scan_interval
        while True:
            await trio.sleep(interval)
            self.engine.process(trio.current_time())
            self.engine.flush()
            self.after_batch()


def _have_cramjam() -> bool:
    try:
        import cramjam  # noqa: F401
    except ImportError:
        return False
    return True


async def serve_nsq(server, nsq_options=None, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve NSQ's TCP and HTTP protocols beside ``server`` (a natserver Server, or None for
    a stand-alone nsqd); ``task_status.started(front)`` with ``.tcp_port``/``.http_port``."""
    options = parse_nsq_options(nsq_options)
    front = NsqServer(server, options)
    front.engine.lock_data_path()
    try:
        front.engine.load()
    except BaseException:
        front.engine.unlock_data_path()
        raise
    host = None if front.host in ("", "0.0.0.0") else front.host
    port = 0 if options.port == -1 else options.port
    http_port = 0 if options.http_port == -1 else options.http_port
    try:
        front.listeners = await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        log.error("NSQ: error listening on TCP port %s:%d, %r", front.host, options.port, exc)
        front.engine.unlock_data_path()
        raise
    front.tcp_port = front.listeners[0].socket.getsockname()[1]
    log.info("TCP: listening on %s", listen_label(front.listeners[0]))
    try:
        http_listeners = await trio.open_tcp_listeners(http_port, host=host)
    except OSError as exc:
        log.error("NSQ: error listening on HTTP port %s:%d, %r", front.host, options.http_port, exc)
        for listener in front.listeners:
            await listener.aclose()
        front.engine.unlock_data_path()
        raise
    front.http_port = http_listeners[0].socket.getsockname()[1]
    front.http = NsqHttp(front)
    log.info("HTTP: listening on %s", listen_label(http_listeners[0]))
    https_listeners = []
    if options.https_port is not None:
        try:
            https_listeners = await trio.open_tcp_listeners(0 if options.https_port == -1 else options.https_port,
                                                            host=host)
        except OSError:
            for listener in front.listeners + http_listeners:
                await listener.aclose()
            front.engine.unlock_data_path()
            raise
        front.https_port = https_listeners[0].socket.getsockname()[1]
        log.info("HTTPS: listening on %s", listen_label(https_listeners[0]))
    try:
        async with trio.open_nursery() as nursery:
            front._nursery = nursery
            for listener in front.listeners:
                nursery.start_soon(front._accept_loop, listener, nursery)
            for listener in http_listeners:
                nursery.start_soon(front.http.accept_loop, listener, nursery)
            if https_listeners:
                https = NsqHttp(front, ssl_context=front.ssl_context)
                for listener in https_listeners:
                    nursery.start_soon(https.accept_loop, listener, nursery)
            if options.lookupd_tcp_addresses:
                for address in options.lookupd_tcp_addresses:
                    peer = LookupPeer(front, address)
                    front.engine.watchers.append(peer.watch)
                    nursery.start_soon(peer.run)
            nursery.start_soon(front._scanner)
            if options.bridge and server is not None:
                front.bridge = Bridge(front, server, options.bridge_prefix)
                front.bridge.start()
            task_status.started(front)
    finally:
        with trio.CancelScope(shield=True):
            for listener in front.listeners + http_listeners + https_listeners:
                await listener.aclose()
            if front.bridge is not None:
                front.bridge.stop()
            try:
                front.engine.close()
            except OSError as exc:
                log.error("NSQ: saving queues to %s: %s", options.data_dir, exc)
            finally:
                front.engine.unlock_data_path()
