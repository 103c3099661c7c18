"""nsqd's HTTP API (and nsqlookupd's read API) on h11.

nsqd routes (nsqd/http.go): ``/ping``, ``/info``, ``/stats``, ``/pub``, ``/mpub``,
``/topic/{create,delete,empty,pause,unpause}``, ``/channel/{create,delete,empty,pause,unpause}``.
Answers are nsqd's "V1" responses: a 200 with the body (plain ``OK``, empty, or JSON), or
``{"message": "<ERROR>"}`` with the status, and ``X-NSQ-Content-Type: nsq; version=1.0``.

nsqlookupd's read routes (``/lookup``, ``/topics``, ``/channels``, ``/nodes``) answer on the
same port with this server as the one producer, so consumers configured with
``lookupd_http_addresses`` find it.
"""

from __future__ import annotations

import logging
import time
import urllib.parse

import h11
import orjson
import trio

from .. import clock
from .config import VERSION
from .errors import HttpError
from .protocol import LENGTH_PREFIX, is_valid_name

# Everything in __all__ gets re-exported as part of natserver.nsq's API.
__all__ = ["NsqHttp", "HttpApi", "stats", "summary", "listen_label"]

log = logging.getLogger("natserver")

MAX_REQUEST_HEAD = 64 * 1024  # request line + headers (h11's default is 16 KiB; Go allows 1 MiB)
IDLE_TIMEOUT = 120.0  # seconds a keep-alive connection may sit idle
WRITE_TIMEOUT = 10.0  # seconds to send one response
READ_SIZE = 64 * 1024
LINGER_TIME = 1.0  # seconds spent discarding a refused request body before closing
MAX_HTTP_CONNECTIONS = 1000  # natserver's bound on concurrent API connections
JSON = "application/json; charset=utf-8"
TEXT = "text/plain; charset=utf-8"
_BOOL_PARAMS = {"true": True, "1": True, "false": False, "0": False}  # nsqd http.go boolParams
_REASONS = {200: b"OK", 400: b"Bad Request", 404: b"Not Found", 405: b"Method Not Allowed",
            413: b"Request Entity Too Large", 500: b"Internal Server Error", 503: b"Service Unavailable"}
_POST_ROUTES = {"/pub", "/mpub", "/topic/create", "/topic/delete", "/topic/empty", "/topic/pause",
                "/topic/unpause", "/channel/create", "/channel/delete", "/channel/empty", "/channel/pause",
                "/channel/unpause"}
_GET_ROUTES = {"/ping", "/info", "/stats", "/lookup", "/topics", "/channels", "/nodes", "/nsqz"}


def _e2e() -> dict:
    return {"count": 0, "percentiles": None}


def client_stats(client, topic: str = "") -> dict:
    """nsqd ClientV2Stats for one connection (pub_counts only for ``topic`` when given)."""
    stats = {
        "client_id": client.client_id, "hostname": client.hostname, "version": "V2",
        "remote_address": f"{client.ip}:{client.port}", "state": {"init": 0, "subscribed": 3, "closing": 4}[client.state],
        "ready_count": client.ready_count, "in_flight_count": client.in_flight, "message_count": client.message_count,
        "finish_count": client.finish_count, "requeue_count": client.requeue_count,
        "connect_ts": int(client.connect_time), "sample_rate": client.sample_rate, "deflate": client.deflate,
        "snappy": client.snappy, "user_agent": client.user_agent,
    }
    pub_counts = [{"topic": t, "count": n} for t, n in client.pub_counts.items() if not topic or t == topic]
    if pub_counts:
        stats["pub_counts"] = pub_counts
    stats.update({"tls": client.tls, "tls_cipher_suite": "", "tls_version": "", "tls_negotiated_protocol": "",
                  "tls_negotiated_protocol_is_mutual": False})
    return stats


def stats(front, topic_name: str = "", channel_name: str = "", include_clients: bool = True) -> dict:
    """nsqd GetStats: ``topics`` is null when the topic filter matches nothing and a topic
    without the filtered channel is left out; ``clients``/``producers`` are null when
    there are none or clients are not included (Go's nil slices)."""
    engine = front.engine
    if topic_name and topic_name not in engine.topics:
        return {"topics": None, "producers": None}
    topics = []
    for topic in sorted(engine.topics.values(), key=lambda t: t.name):
        if topic_name and topic.name != topic_name:
            continue
        if channel_name and channel_name not in topic.channels:
            continue
        channels = []
        for channel in sorted(topic.channels.values(), key=lambda c: c.name):
            if channel_name and channel.name != channel_name:
                continue
            clients = [client_stats(c, topic_name) for c in channel.clients.values()] if include_clients else None
            channels.append({
                "channel_name": channel.name, "depth": channel.depth, "backend_depth": channel.queue.backend_depth,
                "in_flight_count": len(channel.in_flight), "deferred_count": len(channel.deferred),
                "message_count": channel.message_count, "requeue_count": channel.requeue_count,
                "timeout_count": channel.timeout_count, "client_count": len(channel.clients), "clients": clients,
                "paused": channel.paused, "e2e_processing_latency": _e2e(),
            })
        topics.append({
            "topic_name": topic.name, "channels": channels, "depth": topic.depth,
            "backend_depth": topic.queue.backend_depth, "message_count": topic.message_count,
            "message_bytes": topic.message_bytes, "paused": topic.paused, "e2e_processing_latency": _e2e(),
        })
    producers = None
    if include_clients:
        producers = [client_stats(c, topic_name) for c in front.clients.values() if c.pub_counts] or None
    return {"topics": topics, "producers": producers}


def _stats_text(front, data: dict) -> bytes:
    """nsqd printStats' text layout (memory statistics left out: there is no Go heap)."""
    uptime = clock.now() - front.start_time
    lines = [f"nsqd v{VERSION} (built w/natserver)",
             "start_time " + time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(front.start_time)),
             f"uptime {uptime:.3f}s", "", "Health: OK"]
    topics = data["topics"] or []
    lines.append("\nTopics: None" if not topics else "\nTopics:")
    text = "\n".join(lines)
    for t in topics:
        prefix = "*P " if t["paused"] else "   "
        text += (f"\n{prefix}[{t['topic_name']:<15}] depth: {t['depth']:<5} be-depth: {t['backend_depth']:<5} "
                 f"msgs: {t['message_count']:<8} e2e%: \n")
        for c in t["channels"]:
            prefix = "   *P " if c["paused"] else "      "
            text += (f"{prefix}[{c['channel_name']:<25}] depth: {c['depth']:<5} be-depth: {c['backend_depth']:<5} "
                     f"inflt: {c['in_flight_count']:<4} def: {c['deferred_count']:<4} re-q: {c['requeue_count']:<5} "
                     f"timeout: {c['timeout_count']:<5} msgs: {c['message_count']:<8} e2e%: \n")
            for client in c["clients"] or []:
                text += f"        [V2 {client['client_id']:<15}] state: {client['state']} inflt: " \
                        f"{client['in_flight_count']:<4} rdy: {client['ready_count']:<4} fin: " \
                        f"{client['finish_count']:<8} re-q: {client['requeue_count']:<8} msgs: " \
                        f"{client['message_count']:<8} connected: {int(clock.now() - client['connect_ts'])}s\n"
    producers = data["producers"] or []
    text += "\nProducers: None\n" if not producers else "\nProducers:\n" + "".join(
        f"   [V2 {p['client_id']:<15}] msgs: {sum(x['count'] for x in p.get('pub_counts', []))}\n" for p in producers)
    return text.encode()


async def _linger(stream) -> None:
    """Half-close and discard what the client is still sending (briefly), so that closing
    with unread data does not reset the connection before it reads our answer (Go's
    server does the same after refusing a body)."""
    try:
        await stream.send_eof()
        with trio.move_on_after(LINGER_TIME):
            while await stream.receive_some(READ_SIZE):
                pass
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass


def listen_label(listener) -> str:
    """HOST:PORT of a listener as nsqd logs it ("TCP: listening on 127.0.0.1:4150")."""
    host, port = listener.socket.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def summary(front) -> dict:
    """/nsqz: connections, upgrades, topic and channel counts, the bridge's counters, and the
    /stats topics (on the NSQ HTTP port and on natserver's monitoring port)."""
    engine = front.engine
    bridge = front.bridge
    return {"version": VERSION, "tcp_port": front.tcp_port, "http_port": front.http_port,
            "clients": len(front.clients), "total_connections": front.total_connections,
            "upgrades": dict(front.upgrades), "topic_count": len(engine.topics),
            "channel_count": sum(len(t.channels) for t in engine.topics.values()),
            "bridge": None if bridge is None else {
                "prefix": bridge.prefix, "to_nats": bridge.to_nats_count,
                "from_nats": bridge.from_nats_count, "dropped": bridge.dropped},
            **stats(front)}


class HttpApi:
    """An nsqd-style HTTP/1.1 server on h11: subclasses give ``respond(method, target,
    body) -> (status, content type, body)`` (synchronous) and the body limits."""

    max_body_size = 5 * 1024 * 1024
    max_pub_size = None  # /pub's own limit (nsqd: max_msg_size), when there is a /pub
    ssl_context = None  # HTTPS: the listener's connections are wrapped in TLS

    def __init__(self) -> None:
        self.connections = 0

    def respond(self, method: str, target: str, body: bytes) -> tuple[int, str | None, bytes]:
        raise NotImplementedError

    # -- serving ----------------------------------------------------------------------------

    async def accept_loop(self, listener, nursery: trio.Nursery) -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                log.error("NSQ HTTP: accept error: %s", exc)
                await trio.sleep(0.1)
                continue
            except trio.ClosedResourceError:
                return
            if self.connections >= MAX_HTTP_CONNECTIONS:
                await trio.aclose_forcefully(stream)
                continue
            nursery.start_soon(self.handle_stream, stream)

    async def handle_stream(self, stream) -> None:
        self.connections += 1
        if self.ssl_context is not None:
            stream = trio.SSLStream(stream, self.ssl_context, server_side=True)
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST_HEAD)
        try:
            while True:
                request, body = await self._read_request(conn, stream)
                if request is None:
                    return
                if body is None:  # refused from Content-Length or while reading (nsqd doPUB/doMPUB)
                    too_big = "MSG_TOO_BIG" if request.target.split(b"?")[0] == b"/pub" else "BODY_TOO_BIG"
                    await self._send(conn, stream, 413, JSON, orjson.dumps({"message": too_big}), close=True)
                    await _linger(stream)
                    return
                status, ctype, payload = self.respond(request.method.decode(), request.target.decode("latin-1"), body)
                await self._send(conn, stream, status, ctype, payload, head=request.method == b"HEAD")
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except h11.RemoteProtocolError as exc:
            if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                try:
                    await self._send(conn, stream, exc.error_status_hint, TEXT, b"Bad Request", close=True)
                except (h11.LocalProtocolError, trio.BrokenResourceError, trio.ClosedResourceError, OSError, trio.TooSlowError):
                    pass
        except (h11.LocalProtocolError, trio.BrokenResourceError, trio.ClosedResourceError, OSError, trio.TooSlowError):
            pass
        except Exception:  # a bug (or a failed TLS handshake) costs one HTTP connection, never the server
            log.exception("NSQ HTTP: internal error; closing this connection")
        finally:
            self.connections -= 1
            await trio.aclose_forcefully(stream)

    async def _read_request(self, conn, stream):
        """(request, body) — body None when it is larger than max_body_size allows."""
        request = None
        chunks = []
        size = 0
        limit = self.max_body_size + 1
        with trio.move_on_after(IDLE_TIMEOUT):
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    if conn.they_are_waiting_for_100_continue:
                        await self._send_raw(conn, stream, h11.InformationalResponse(status_code=100, headers=[]))
                    conn.receive_data(await stream.receive_some(READ_SIZE))
                    continue
                kind = type(event)
                if kind is h11.Request:
                    request = event
                    if self.max_pub_size is not None and request.target.split(b"?")[0] == b"/pub":
                        limit = self.max_pub_size + 1
                    declared = dict(request.headers).get(b"content-length")
                    if declared is not None and declared.isdigit() and int(declared) >= limit:
                        return request, None
                elif kind is h11.Data:
                    size += len(event.data)
                    if size > limit:
                        return request, None
                    chunks.append(bytes(event.data))
                elif kind is h11.EndOfMessage:
                    return request, b"".join(chunks)
                else:
                    return None, b""
        return None, b""

    async def _send_raw(self, conn, stream, *events) -> None:
        data = b"".join(conn.send(event) or b"" for event in events)
        with trio.fail_after(WRITE_TIMEOUT):
            await stream.send_all(data)

    async def _send(self, conn, stream, status: int, ctype: str | None, body: bytes, *, head: bool = False,
                    close: bool = False) -> None:
        headers = []
        if ctype:
            headers.append(("Content-Type", ctype))
        headers.append(("X-NSQ-Content-Type", "nsq; version=1.0"))
        headers.append(("Content-Length", str(len(body))))
        if close:
            headers.append(("Connection", "close"))
        events: list[h11.Response | h11.Data | h11.EndOfMessage] = [
            h11.Response(status_code=status, headers=headers, reason=_REASONS.get(status, b""))]
        if body and not head:
            events.append(h11.Data(data=body))
        events.append(h11.EndOfMessage())
        await self._send_raw(conn, stream, *events)



class NsqHttp(HttpApi):
    """nsqd's HTTP API (and the one-node nsqlookupd read API) for one NSQ front-end."""

    def __init__(self, front, ssl_context=None) -> None:
        super().__init__()
        self.front = front
        self.max_body_size = front.options.max_body_size
        self.max_pub_size = front.options.max_msg_size
        self.ssl_context = ssl_context

    def respond(self, method: str, target: str, body: bytes) -> tuple[int, str | None, bytes]:
        path, _, query = target.partition("?")
        params = urllib.parse.parse_qs(query, keep_blank_values=True)
        if method == "HEAD":
            method = "GET"
        allowed = "POST" if path in _POST_ROUTES else "GET" if path in _GET_ROUTES else None
        try:
            if allowed is None:
                raise HttpError(404, "NOT_FOUND")
            if method != allowed:
                raise HttpError(405, "METHOD_NOT_ALLOWED")
            result = self._route(path, params, body)
        except HttpError as exc:
            return exc.status, JSON, orjson.dumps({"message": exc.message})
        if result is None:
            return 200, None, b""
        if isinstance(result, bytes):
            return 200, TEXT if path == "/ping" or result == b"OK" else None, result
        return 200, JSON, orjson.dumps(result)

    def _route(self, path: str, params: dict, body: bytes):
        front = self.front
        engine = front.engine
        now = trio.current_time()
        get = lambda key: params[key][0] if key in params else None  # noqa: E731
        if path == "/ping":
            return b"OK"
        if path == "/info":
            options = front.options
            return {
                "version": VERSION, "broadcast_address": front.broadcast_address, "hostname": front.hostname,
                "http_port": front.http_port, "tcp_port": front.tcp_port, "start_time": front.start_time,
                "max_heartbeat_interval": int(options.max_heartbeat_interval * 1e9),
                "max_output_buffer_size": options.max_output_buffer_size,
                "max_output_buffer_timeout": int(options.max_output_buffer_timeout * 1e9),
                "max_deflate_level": options.max_deflate_level,
            }
        if path == "/stats":
            include_clients = _BOOL_PARAMS.get(get("include_clients") or "", True)
            data = stats(front, get("topic") or "", get("channel") or "", include_clients)
            if get("format") != "json":
                return _stats_text(front, data)
            return {"version": VERSION, "health": "OK", "start_time": front.start_time, **data}
        if path == "/pub":
            if len(body) > front.options.max_msg_size:
                raise HttpError(413, "MSG_TOO_BIG")
            if not body:
                raise HttpError(400, "MSG_EMPTY")
            topic = self._topic_param(params)
            defer = 0.0
            if "defer" in params:
                try:
                    ms = int(params["defer"][0], 10)
                except ValueError:
                    raise HttpError(400, "INVALID_DEFER") from None
                if ms < 0 or ms > front.options.max_req_timeout * 1000:
                    raise HttpError(400, "INVALID_DEFER")
                defer = ms / 1000.0
            front.publish(topic, [body], now, defer=defer)
            front.after_batch()
            return b"OK"
        if path == "/mpub":
            topic = self._topic_param(params)
            binary = False
            if "binary" in params:
                binary = _BOOL_PARAMS.get(params["binary"][0], True)
            messages = self._mpub_binary(body) if binary else self._mpub_text(body)
            front.publish(topic, messages, now)
            front.after_batch()
            return b"OK"
        if path.startswith("/topic/"):
            action = path[len("/topic/"):]
            if action == "create":
                engine.get_topic(self._topic_param(params))
                return None
            name = get("topic")
            if name is None:
                raise HttpError(400, "MISSING_ARG_TOPIC")
            if action == "delete":
                if not engine.delete_topic(name):
                    raise HttpError(404, "TOPIC_NOT_FOUND")
                engine.save_metadata()
                return None
            if action == "empty" and not is_valid_name(name):
                raise HttpError(400, "INVALID_TOPIC")
            topic = engine.topics.get(name)
            if topic is None:
                raise HttpError(404, "TOPIC_NOT_FOUND")
            if action == "empty":
                topic.empty()
            elif action == "pause":
                topic.pause()
                engine.save_metadata()
            else:
                topic.unpause(now)
                engine.save_metadata()
            return None
        if path.startswith("/channel/"):
            action = path[len("/channel/"):]
            topic_name = get("topic")
            if topic_name is None:
                raise HttpError(400, "MISSING_ARG_TOPIC")
            if not is_valid_name(topic_name):
                raise HttpError(400, "INVALID_ARG_TOPIC")
            channel_name = get("channel")
            if channel_name is None:
                raise HttpError(400, "MISSING_ARG_CHANNEL")
            if not is_valid_name(channel_name):
                raise HttpError(400, "INVALID_ARG_CHANNEL")
            topic = engine.topics.get(topic_name)
            if topic is None:
                raise HttpError(404, "TOPIC_NOT_FOUND")
            if action == "create":
                topic.get_channel(channel_name, now)
                return None
            if action == "delete":
                if not topic.delete_channel(channel_name):
                    raise HttpError(404, "CHANNEL_NOT_FOUND")
                engine.save_metadata()
                return None
            channel = topic.channels.get(channel_name)
            if channel is None:
                raise HttpError(404, "CHANNEL_NOT_FOUND")
            if action == "empty":
                channel.empty()
                channel.pump(now)
            elif action == "pause":
                channel.pause()
                engine.save_metadata()
            else:
                channel.unpause(now)
                engine.save_metadata()
            return None
        return self._lookupd(path, params)

    def _topic_param(self, params: dict) -> str:
        if "topic" not in params:
            raise HttpError(400, "MISSING_ARG_TOPIC")
        name = params["topic"][0]
        if not is_valid_name(name):
            raise HttpError(400, "INVALID_TOPIC")
        return name

    def _mpub_text(self, body: bytes) -> list:
        limit = self.front.options.max_body_size
        if len(body) > limit:
            raise HttpError(413, "BODY_TOO_BIG")
        messages = [line for line in body.split(b"\n") if line]
        if any(len(m) > self.front.options.max_msg_size for m in messages):
            raise HttpError(413, "MSG_TOO_BIG")
        return messages

    def _mpub_binary(self, body: bytes) -> list:
        """nsqd readMPUB over the request body; its errors become 413 with the code less "E_"."""
        options = self.front.options
        if len(body) < 4:
            raise HttpError(413, "BAD_BODY")
        (count,) = LENGTH_PREFIX.unpack_from(body, 0)
        if count <= 0 or count > (options.max_body_size - 4) // 5:
            raise HttpError(413, "BAD_BODY")
        pos, messages = 4, []
        for _ in range(count):
            if len(body) - pos < 4:
                raise HttpError(413, "BAD_MESSAGE")
            (size,) = LENGTH_PREFIX.unpack_from(body, pos)
            pos += 4
            if size <= 0 or size > options.max_msg_size or len(body) - pos < size:
                raise HttpError(413, "BAD_MESSAGE")
            messages.append(body[pos : pos + size])
            pos += size
        return messages

    # -- nsqlookupd -------------------------------------------------------------------------

    def _producer(self) -> dict:
        front = self.front
        return {"remote_address": f"{front.broadcast_address}:{front.tcp_port}", "hostname": front.hostname,
                "broadcast_address": front.broadcast_address, "tcp_port": front.tcp_port,
                "http_port": front.http_port, "version": VERSION}

    def _lookupd(self, path: str, params: dict):
        engine = self.front.engine
        if path == "/lookup":
            name = params.get("topic", [None])[0]
            if name is None:
                raise HttpError(400, "MISSING_ARG_TOPIC")
            topic = engine.topics.get(name)
            if topic is None:
                raise HttpError(404, "TOPIC_NOT_FOUND")
            return {"channels": sorted(topic.channels), "producers": [self._producer()]}
        if path == "/topics":
            return {"topics": sorted(engine.topics)}
        if path == "/channels":
            name = params.get("topic", [None])[0]
            if name is None:
                raise HttpError(400, "MISSING_ARG_TOPIC")
            topic = engine.topics.get(name)
            return {"channels": sorted(topic.channels) if topic is not None else []}
        if path == "/nodes":
            producer = self._producer()
            producer["tombstones"] = [False] * len(engine.topics)
            producer["topics"] = sorted(engine.topics)
            return {"producers": [producer]}
        if path == "/nsqz":
            return summary(self.front)
        raise HttpError(404, "NOT_FOUND")
