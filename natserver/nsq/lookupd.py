"""nsqlookupd: the registration database, its TCP protocol V1 (what nsqd speaks to it) and
its HTTP API; plus :class:`LookupPeer`, nsqd's side of that protocol.

TCP V1 (nsqlookupd/lookup_protocol_v1.go): the magic ``"  V1"``, then lines ``PING``,
``IDENTIFY`` (with ``[int32 size][JSON]``), ``REGISTER topic [channel]``,
``UNREGISTER topic [channel]``; every answer is ``[int32 size][data]`` (``OK``, the
IDENTIFY JSON, or an error text; fatal errors close). When a peer goes, its registrations go.
"""

from __future__ import annotations

import logging
import socket
import struct
import urllib.parse

import orjson
import trio

from .. import clock
from .config import VERSION
from .errors import HttpError
from .http import JSON, TEXT, HttpApi, listen_label
from .protocol import is_valid_name

# Everything in __all__ gets re-exported as part of natserver.nsq's API.
__all__ = ["RegistrationDB", "Lookupd", "LookupPeer", "serve_lookupd"]

log = logging.getLogger("natserver")

INACTIVE_PRODUCER_TIMEOUT = 300.0  # seconds; nsqlookupd --inactive-producer-timeout
TOMBSTONE_LIFETIME = 45.0  # seconds; nsqlookupd --tombstone-lifetime
PEER_PING_INTERVAL = 15.0  # seconds; nsqd pings its lookupd peers this often (lookup.go)
PEER_RECONNECT = 1.0  # seconds between connection attempts to a lookupd peer (natserver)
MAX_LINE = 16 * 1024  # command line bound (nsqlookupd reads lines with bufio's default buffer)
MAX_IDENTIFY_BODY = 64 * 1024  # natserver's bound on an IDENTIFY body (nsqlookupd has none)
_LEN = struct.Struct(">i")


class Peer:
    """One nsqd known to the lookupd (nsqlookupd PeerInfo)."""

    def __init__(self, peer_id: str, remote_address: str, info: dict, now: float) -> None:
        self.id = peer_id
        self.remote_address = remote_address
        self.hostname = info.get("hostname", "")
        self.broadcast_address = info["broadcast_address"]
        self.tcp_port = info["tcp_port"]
        self.http_port = info["http_port"]
        self.version = info["version"]
        self.last_update = now
        self.tombstoned_at: dict[str, float] = {}  # topic -> when /topic/tombstone was called

    def info(self) -> dict:
        return {"remote_address": self.remote_address, "hostname": self.hostname,
                "broadcast_address": self.broadcast_address, "tcp_port": self.tcp_port,
                "http_port": self.http_port, "version": self.version}


class RegistrationDB:
    """(category, key, subkey) -> {peer id: Peer}; categories "client", "topic", "channel"
    (nsqlookupd registration_db.go). Sans-IO: times are passed in."""

    def __init__(self) -> None:
        self.registrations: dict[tuple, dict] = {}

    def add_registration(self, key: tuple) -> None:
        self.registrations.setdefault(key, {})

    def add_producer(self, key: tuple, peer: Peer) -> bool:
        producers = self.registrations.setdefault(key, {})
        if peer.id in producers:
            return False
        producers[peer.id] = peer
        return True

    def remove_producer(self, key: tuple, peer_id: str) -> tuple[bool, int]:
        producers = self.registrations.get(key)
        if producers is None:
            return False, 0
        removed = producers.pop(peer_id, None) is not None
        return removed, len(producers)

    def remove_registration(self, key: tuple) -> None:
        self.registrations.pop(key, None)

    def find(self, category: str, key: str = "*", subkey: str = "*") -> list[tuple]:
        return [k for k in self.registrations if k[0] == category and key in ("*", k[1]) and subkey in ("*", k[2])]

    def producers(self, category: str, key: str, subkey: str = "") -> list[Peer]:
        seen: dict[str, Peer] = {}
        for k in self.find(category, key, subkey):
            seen.update(self.registrations[k])
        return list(seen.values())

    def registrations_of(self, peer_id: str) -> list[tuple]:
        return [k for k, producers in self.registrations.items() if peer_id in producers]

    def remove_peer(self, peer_id: str) -> None:
        for key in self.registrations_of(peer_id):
            self.remove_producer(key, peer_id)

    # -- what the HTTP API answers ------------------------------------------------------------

    def active(self, peers: list[Peer], now: float, topic: str | None = None) -> list[Peer]:
        """nsqlookupd FilterByActive: recently seen, and not tombstoned for the topic."""
        out = []
        for peer in peers:
            if now - peer.last_update > INACTIVE_PRODUCER_TIMEOUT:
                continue
            if topic is not None and now - peer.tombstoned_at.get(topic, -1e18) < TOMBSTONE_LIFETIME:
                continue
            out.append(peer)
        return out


class _V1Connection:
    """One peer's TCP V1 session (sans-IO apart from the lookupd it updates)."""

    def __init__(self, lookupd: "Lookupd", remote_address: str) -> None:
        self.lookupd = lookupd
        self.remote_address = remote_address
        self.peer: Peer | None = None
        self.buf = bytearray()
        self.magic = False

    def feed(self, data: bytes) -> tuple[bytes, bool]:
        """Answers for every complete command, and whether to close afterwards."""
        self.buf += data
        out = bytearray()
        buf = self.buf
        if not self.magic:
            if len(buf) < 4:
                return b"", False
            if bytes(buf[:4]) != b"  V1":
                return _frame(b"E_BAD_PROTOCOL"), True
            del buf[:4]
            self.magic = True
        while True:
            end = buf.find(b"\n")
            if end < 0:
                return bytes(out), len(buf) > MAX_LINE
            params = bytes(buf[:end]).strip().decode("utf-8", "replace").split(" ")
            verb = params[0]
            consumed = end + 1
            body = None
            if verb == "IDENTIFY" and self.peer is None:
                if len(buf) < consumed + 4:
                    return bytes(out), False
                (size,) = _LEN.unpack_from(buf, consumed)
                if size < 0 or size > MAX_IDENTIFY_BODY:
                    return bytes(out) + _frame(b"E_BAD_BODY IDENTIFY failed to read body"), True
                if len(buf) < consumed + 4 + size:
                    return bytes(out), False
                body = bytes(buf[consumed + 4 : consumed + 4 + size])
                consumed += 4 + size
            del buf[:consumed]
            answer, fatal = self.execute(verb, params[1:], body)
            out += _frame(answer)
            if fatal:
                return bytes(out), True

    def execute(self, verb: str, params: list, body: bytes | None) -> tuple[bytes, bool]:
        db = self.lookupd.db
        now = self.lookupd.clock()
        if verb == "PING":
            if self.peer is not None:
                self.peer.last_update = now
            return b"OK", False
        if verb == "IDENTIFY":
            if self.peer is not None:
                return b"E_INVALID cannot IDENTIFY again", True
            try:
                info = orjson.loads(body or b"")  # (no body: decoding fails as for an empty one)
                if not isinstance(info, dict):
                    raise ValueError
            except (orjson.JSONDecodeError, ValueError):
                return b"E_BAD_BODY IDENTIFY failed to decode JSON body", True
            if not (info.get("broadcast_address") and info.get("tcp_port") and info.get("http_port")
                    and info.get("version")):
                return b"E_BAD_BODY IDENTIFY missing fields", True
            self.peer = Peer(self.remote_address, self.remote_address, info, now)
            db.add_producer(("client", "", ""), self.peer)
            log.info("nsqlookupd: peer %s identified (%s:%s)", self.remote_address, self.peer.broadcast_address,
                     self.peer.tcp_port)
            return orjson.dumps({"tcp_port": self.lookupd.tcp_port, "http_port": self.lookupd.http_port,
                                 "version": VERSION, "broadcast_address": self.lookupd.broadcast_address,
                                 "hostname": self.lookupd.hostname}), False
        if verb in ("REGISTER", "UNREGISTER"):
            if self.peer is None:
                return b"E_INVALID client must IDENTIFY", True
            if not params:
                return f"E_INVALID {verb} insufficient number of params".encode(), True
            topic, channel = params[0], params[1] if len(params) > 1 else ""
            if not is_valid_name(topic):
                return f"E_BAD_TOPIC {verb} topic name '{topic}' is not valid".encode(), True
            if channel and not is_valid_name(channel):
                return f"E_BAD_CHANNEL {verb} channel name '{channel}' is not valid".encode(), True
            if verb == "REGISTER":
                if channel:
                    db.add_producer(("channel", topic, channel), self.peer)
                db.add_producer(("topic", topic, ""), self.peer)
            elif channel:
                _, left = db.remove_producer(("channel", topic, channel), self.peer.id)
                if left == 0 and channel.endswith("#ephemeral"):
                    db.remove_registration(("channel", topic, channel))
            else:
                for key in db.find("channel", topic, "*"):
                    db.remove_producer(key, self.peer.id)
                _, left = db.remove_producer(("topic", topic, ""), self.peer.id)
                if left == 0 and topic.endswith("#ephemeral"):
                    db.remove_registration(("topic", topic, ""))
            return b"OK", False
        return f"E_INVALID invalid command {verb}".encode(), True

    def closed(self) -> None:
        if self.peer is not None:
            self.lookupd.db.remove_peer(self.peer.id)


def _frame(data: bytes) -> bytes:
    return _LEN.pack(len(data)) + data


class LookupdHttp(HttpApi):
    """nsqlookupd's HTTP API (nsqlookupd/http.go)."""

    _GET = {"/ping", "/info", "/debug", "/lookup", "/topics", "/channels", "/nodes"}
    _POST = {"/topic/create", "/topic/delete", "/channel/create", "/channel/delete", "/topic/tombstone"}

    def __init__(self, lookupd: "Lookupd") -> None:
        super().__init__()
        self.lookupd = lookupd

    def respond(self, method: str, target: str, body: bytes) -> tuple[int, str | None, bytes]:
        path, _, query = target.partition("?")
        params = urllib.parse.parse_qs(query, keep_blank_values=True)
        allowed = "GET" if path in self._GET else "POST" if path in self._POST else None
        if method == "HEAD":
            method = "GET"
        try:
            if allowed is None:
                raise HttpError(404, "NOT_FOUND")
            if method != allowed:
                raise HttpError(405, "METHOD_NOT_ALLOWED")
            result = self._route(path, params)
        except HttpError as exc:
            return exc.status, JSON, orjson.dumps({"message": exc.message})
        if result is None:
            return 200, None, b""
        if isinstance(result, bytes):
            return 200, TEXT, result
        return 200, JSON, orjson.dumps(result)

    def _route(self, path: str, params: dict):
        db = self.lookupd.db
        now = self.lookupd.clock()
        get = lambda key: params[key][0] if key in params else None  # noqa: E731
        if path == "/ping":
            return b"OK"
        if path == "/info":
            return {"version": VERSION}
        if path == "/topics":
            return {"topics": sorted({k[1] for k in db.find("topic", "*", "")})}
        if path == "/channels":
            topic = get("topic")
            if topic is None:
                raise HttpError(400, "MISSING_ARG_TOPIC")
            return {"channels": sorted({k[2] for k in db.find("channel", topic, "*")})}
        if path == "/lookup":
            topic = get("topic")
            if topic is None:
                raise HttpError(400, "MISSING_ARG_TOPIC")
            if not db.find("topic", topic, ""):
                raise HttpError(404, "TOPIC_NOT_FOUND")
            channels = sorted({k[2] for k in db.find("channel", topic, "*")})
            producers = db.active(db.producers("topic", topic, ""), now, topic)
            return {"channels": channels, "producers": [p.info() for p in producers]}
        if path == "/nodes":
            nodes = []
            for peer in db.active(db.producers("client", "", ""), now):
                topics = sorted({k[1] for k in db.registrations_of(peer.id) if k[0] == "topic"})
                node = peer.info()
                node["tombstones"] = [now - peer.tombstoned_at.get(t, -1e18) < TOMBSTONE_LIFETIME for t in topics]
                node["topics"] = topics
                nodes.append(node)
            return {"producers": nodes}
        if path == "/debug":
            data = {}
            for key, registered in db.registrations.items():
                data[":".join(key)] = [{"id": p.id, "hostname": p.hostname, "broadcast_address": p.broadcast_address,
                                        "tcp_port": p.tcp_port, "http_port": p.http_port, "version": p.version,
                                        "last_update": int(p.last_update * 1e9), "tombstoned": False,
                                        "tombstoned_at": 0} for p in registered.values()]
            return data
        topic = get("topic")
        if topic is None:
            raise HttpError(400, "MISSING_ARG_TOPIC")
        if path == "/topic/create":
            if not is_valid_name(topic):
                raise HttpError(400, "INVALID_ARG_TOPIC")
            db.add_registration(("topic", topic, ""))
            return None
        if path == "/topic/delete":
            for key in db.find("channel", topic, "*") + db.find("topic", topic, ""):
                db.remove_registration(key)
            return None
        if path == "/topic/tombstone":
            node_address = get("node")
            if node_address is None:
                raise HttpError(400, "MISSING_ARG_NODE")
            for peer in db.producers("topic", topic, ""):
                if f"{peer.broadcast_address}:{peer.http_port}" == node_address:
                    peer.tombstoned_at[topic] = now
            return None
        if not is_valid_name(topic):
            raise HttpError(400, "INVALID_ARG_TOPIC")
        channel = get("channel")
        if channel is None:
            raise HttpError(400, "MISSING_ARG_CHANNEL")
        if not is_valid_name(channel):
            raise HttpError(400, "INVALID_ARG_CHANNEL")
        if path == "/channel/create":
            db.add_registration(("channel", topic, channel))
            db.add_registration(("topic", topic, ""))
            return None
        keys = db.find("channel", topic, channel)
        if not keys:
            raise HttpError(404, "CHANNEL_NOT_FOUND")
        for key in keys:
            db.remove_registration(key)
        return None


class Lookupd:
    """A running nsqlookupd: ``.tcp_port``, ``.http_port``, ``.db``."""

    def __init__(self, broadcast_address: str = "") -> None:
        self.db = RegistrationDB()
        self.hostname = socket.gethostname()
        self.broadcast_address = broadcast_address or self.hostname
        self.tcp_port = 0
        self.http_port = 0
        self.clock = clock.monotonic

    async def handle_tcp(self, stream) -> None:
        try:
            host, port = stream.socket.getpeername()[:2]
            remote = f"{host}:{port}"
        except (OSError, AttributeError):
            remote = "memory"
        connection = _V1Connection(self, remote)
        try:
            while True:
                data = await stream.receive_some(65536)
                if not data:
                    return
                out, close = connection.feed(data)
                if out:
                    with trio.fail_after(10):
                        await stream.send_all(out)
                if close:
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, trio.TooSlowError):
            pass
        except Exception:  # a bug costs one connection, never the server
            log.exception("nsqlookupd: internal error; closing %s", remote)
        finally:
            connection.closed()
            await trio.aclose_forcefully(stream)


async def _accept(listener, handler, nursery) -> None:
    while True:
        try:
            stream = await listener.accept()
        except OSError as exc:
            log.error("nsqlookupd: accept error: %s", exc)
            await trio.sleep(0.1)
            continue
        except trio.ClosedResourceError:
            return
        nursery.start_soon(handler, stream)


async def serve_lookupd(host: str | None, tcp_port: int, http_port: int, broadcast_address: str = "", *,
                        task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run an nsqlookupd; ``task_status.started(lookupd)``."""
    lookupd = Lookupd(broadcast_address)
    tcp = await trio.open_tcp_listeners(tcp_port, host=host)
    lookupd.tcp_port = tcp[0].socket.getsockname()[1]
    log.info("TCP: listening on %s", listen_label(tcp[0]))
    http = await trio.open_tcp_listeners(http_port, host=host)
    lookupd.http_port = http[0].socket.getsockname()[1]
    log.info("HTTP: listening on %s", listen_label(http[0]))
    api = LookupdHttp(lookupd)
    try:
        async with trio.open_nursery() as nursery:
            for listener in tcp:
                nursery.start_soon(_accept, listener, lookupd.handle_tcp, nursery)
            for listener in http:
                nursery.start_soon(api.accept_loop, listener, nursery)
            task_status.started(lookupd)
    finally:
        with trio.CancelScope(shield=True):
            for listener in tcp + http:
                await listener.aclose()


class LookupPeer:
    """nsqd's connection to one nsqlookupd (nsqd/lookup.go): IDENTIFY, REGISTER every topic
    and channel, then REGISTER/UNREGISTER as they come and go and PING every 15 s;
    reconnects when the connection drops."""

    def __init__(self, front, address: str) -> None:
        self.front = front
        self.address = address
        host, _, port = address.rpartition(":")
        self.host, self.port = host or "127.0.0.1", int(port)
        self._send, self._receive = trio.open_memory_channel(10000)
        self.connected = False

    def watch(self, event: str, topic: str, channel: str) -> None:
        try:
            self._send.send_nowait(f"{event} {topic} {channel}".rstrip().encode() + b"\n")
        except trio.WouldBlock:  # the peer is far behind: it gets everything again on reconnect
            pass

    async def run(self) -> None:
        while True:
            try:
                await self._session()
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, ValueError) as exc:
                if self.connected:
                    log.error("LOOKUPD(%s): connection lost: %s", self.address, exc)
            self.connected = False
            await trio.sleep(PEER_RECONNECT)

    async def _session(self) -> None:
        front = self.front
        stream = await trio.open_tcp_stream(self.host, self.port)
        async with stream:
            buffered = bytearray()

            async def call(command: bytes) -> bytes:
                with trio.fail_after(10):
                    await stream.send_all(command)
                    while True:
                        if len(buffered) >= 4:
                            (size,) = _LEN.unpack_from(buffered)
                            if size < 0 or size > MAX_IDENTIFY_BODY:
                                raise ValueError("bad response size")
                            if len(buffered) >= 4 + size:
                                data = bytes(buffered[4 : 4 + size])
                                del buffered[: 4 + size]
                                return data
                        data = await stream.receive_some(65536)
                        if not data:
                            raise trio.BrokenResourceError("lookupd closed the connection")
                        buffered.extend(data)

            identity = orjson.dumps({"version": VERSION, "tcp_port": front.tcp_port, "http_port": front.http_port,
                                     "hostname": front.hostname, "broadcast_address": front.broadcast_address})
            answer = await call(b"  V1IDENTIFY\n" + _LEN.pack(len(identity)) + identity)
            if answer.startswith(b"E_"):
                raise ValueError(answer.decode("utf-8", "replace"))
            self.connected = True
            log.info("LOOKUPD(%s): peer info %s", self.address, answer.decode("utf-8", "replace"))
            while True:  # what queued up before this session is in the full listing below
                try:
                    self._receive.receive_nowait()
                except trio.WouldBlock:
                    break
            for topic in list(front.engine.topics.values()):
                await call(f"REGISTER {topic.name}\n".encode())
                for channel in list(topic.channels):
                    await call(f"REGISTER {topic.name} {channel}\n".encode())
            while True:
                with trio.move_on_after(PEER_PING_INTERVAL):
                    command = await self._receive.receive()
                    answer = await call(command)
                    if answer != b"OK":
                        log.error("LOOKUPD(%s): %s: %s", self.address, command.strip().decode(), answer.decode())
                    continue
                await call(b"PING\n")
