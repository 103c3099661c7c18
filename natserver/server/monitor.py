"""The monitoring HTTP server (nats-server's ``-m``/``http_port``): /varz, /connz, /subsz, /healthz...

HTTP/1.1 is spoken with h11 (sans-IO) over trio streams: keep-alive, HEAD, bounded requests.
The JSON documents reproduce nats-server v2.9.10's (server/monitor.go): the same keys in the
same order, Go's formatting of times (RFC 3339 with up to nanoseconds), durations ("2m0s",
"437µs") and uptimes ("1d2h3m4s"), its query parameters and its error messages, so tools that
scrape a nats-server's monitoring port can scrape ours.

Use it the trio way::

    monitor = await nursery.start(serve_monitor, server)
    print(monitor.url)
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import os
import re
import sys
import time
import urllib.parse
from typing import TYPE_CHECKING

import orjson
import trio

from .. import clock
from ..protocol import const
from ..protocol.gotext import go_time
from ..routing.sublist import is_valid_literal_subject
from .client import ClosedRecord, connection_record, unpack_subs
from .cpus import own_cpu_seconds, usable_cpus
from .listen import listen_error, open_listeners

# h11 (and email.utils) only serve HTTP: imported by the methods that speak it, so that the
# system account, which builds the same documents for $SYS requests on every plain start,
# does not load them (tests/test_startup_imports.py).
if TYPE_CHECKING:
    import h11

# Everything in __all__ gets re-exported as part of natserver's public API.
__all__ = ["Monitor", "serve_monitor"]

log = logging.getLogger("natserver")

# Requests are tiny (a GET and a query string). Go's http.Server allows 1 MiB of headers;
# we bound what one connection can make us buffer much lower, and discard bodies up to a cap.
MAX_REQUEST_HEAD = 64 * 1024
MAX_REQUEST_BODY = 1024 * 1024
READ_SIZE = 16 * 1024
# Go's server has no timeouts here; a dead peer must not hold a task forever, so an idle
# keep-alive connection (or one trickling a request) is closed after this long.
IDLE_TIMEOUT = 300.0
# Responses are written within this long or the connection is dropped.
WRITE_TIMEOUT = 30.0
# Endpoints whose pages grow with the connections and subscriptions (/connz?subs=detail over
# 20 000 subscriptions, /subsz?subs=1): built in a worker thread so that the clients' traffic
# goes on meanwhile; built on the loop, such pages held every client up (bench_hostile monitor:
# a healthy request/reply p99 of 534 ms; nats-server 113). They read shared state through
# atomic list() copies. At most OFFLOADED_AT_ONCE are built at once; more wait for a turn.
# Not under a test clock (natserver.clock's time base is per thread): there, on the loop.
OFFLOADED_ROUTES = frozenset({"/connz", "/subsz", "/subscriptionsz"})
OFFLOADED_AT_ONCE = 2
# The switch interval while a page is built in a thread (sys.setswitchinterval; default 5 ms):
# every system call of the event loop releases the GIL, and at 5 ms the builder kept it that
# long each time, so a request/reply's half-dozen calls took 30 ms (p50).
OFFLOADED_SWITCH_INTERVAL = 0.0002

DEFAULT_CONN_LIST_SIZE = 1024  # monitor.go DefaultConnListSize
DEFAULT_SUB_LIST_SIZE = 1024  # monitor.go DefaultSubListSize
GLOBAL_ACCOUNT = "$G"

# feature_flags.go: the switches nats-server 2.15.1 reports as "feature_flags" in /varz and in
# every system event's server block. Each is set to what natserver does (2.15.1's default after
# the #), so a tool reading them learns how this server behaves.
FEATURE_FLAGS = {
    # $JS.ACK reply subjects in the v2 form (with domain and account hash): natserver sends and
    # parses the v1 form only.  # false
    "js_ack_fc_v2": False,
    # the JetStream API's v2 reply form: natserver answers in the form nats-server uses with the
    # flag off.  # false
    "js_api_reply_v2": False,
    # proposing a run of deletes as one Raft entry: natserver's JetStream is single-server, it
    # proposes no Raft entries at all.  # true
    "js_raft_delete_range": False,
    # the sourcing state inside replicated stream snapshots: no replication, no such snapshots.  # false
    "js_snapshot_sources": False,
}
# events.go ServerCapability bits (ServerInfo "flags"): JetStreamEnabled is the one natserver has;
# BinaryStreamSnapshot and AccountNRG are clustered JetStream's (Raft), which natserver lacks.
CAPABILITY_JETSTREAM = 1

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"
HTML = "text/html; charset=utf-8"


# -- Go formatting -------------------------------------------------------------------------------


def _frac(value: int, unit: int, width: int) -> str:
    whole, rest = divmod(value, unit)
    if not rest:
        return str(whole)
    return f"{whole}." + f"{rest:0{width}d}".rstrip("0")


def go_duration(ns: int) -> str:
    """Go's time.Duration.String(): "0s", "437µs", "1.5ms", "2m0s", "1h2m3.5s"."""
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    u = abs(int(ns))
    if u < 1_000_000_000:
        if u < 1_000:
            return f"{sign}{u}ns"
        if u < 1_000_000:
            return f"{sign}{_frac(u, 1_000, 3)}µs"
        return f"{sign}{_frac(u, 1_000_000, 6)}ms"
    secs, rest = divmod(u, 1_000_000_000)
    hours, secs = divmod(secs, 3600)
    minutes, secs = divmod(secs, 60)
    out = sign
    if hours:
        out += f"{hours}h"
    if hours or minutes:
        out += f"{minutes}m"
    out += _frac(secs * 1_000_000_000 + rest, 1_000_000_000, 9) + "s"
    return out


def my_uptime(seconds: float) -> str:
    """monitor.go myUptime: whole seconds as "5s", "1m2s", "1h2m3s", "1d2h3m4s", "1y2d3h4m5s"."""
    tsecs = max(0, int(seconds))
    tmins, thrs, tdays = tsecs // 60, tsecs // 3600, tsecs // 86400
    tyrs = tdays // 365
    if tyrs:
        return f"{tyrs}y{tdays % 365}d{thrs % 24}h{tmins % 60}m{tsecs % 60}s"
    if tdays:
        return f"{tdays}d{thrs % 24}h{tmins % 60}m{tsecs % 60}s"
    if thrs:
        return f"{thrs}h{tmins % 60}m{tsecs % 60}s"
    if tmins:
        return f"{tmins}m{tsecs % 60}s"
    return f"{tsecs}s"


def go_rtt(rtt: float | None) -> str:
    """client.getRTT().String(): 0 when never measured; µs precision under a millisecond."""
    if not rtt:
        return "0s"
    ns = round(rtt * 1_000_000_000)
    if 1_000 < ns < 1_000_000:
        ns -= ns % 1_000
    return go_duration(ns)


def _seconds_ns(seconds: float) -> int:
    return round(seconds * 1_000_000_000)


def _go_float(value: float):
    """encoding/json writes an integral float64 without ".0" (auth_timeout: 2, cpu: 0)."""
    if value == int(value) and abs(value) < 1e21:
        return int(value)
    return value


def _go_quote(text: str) -> str:
    return orjson.dumps(text).decode()


_HTML_ESCAPES = ((b"<", b"\\u003c"), (b">", b"\\u003e"), (b"&", b"\\u0026"),
                 ("\u2028".encode(), b"\\u2028"), ("\u2029".encode(), b"\\u2029"))


def go_json(value, indent: bool = True) -> bytes:
    """json.MarshalIndent(v, "", "  ") (or json.Marshal): Go escapes <, > and & inside strings;
    those bytes cannot occur in JSON outside strings, so replacing them is safe."""
    data = orjson.dumps(value, option=orjson.OPT_INDENT_2 if indent else 0)
    for raw, escaped in _HTML_ESCAPES:
        if raw in data:
            data = data.replace(raw, escaped)
    return data


# -- query decoding (monitor.go decodeBool/decodeInt/...) --------------------------------------


class BadRequest(Exception):
    """A 400 with nats-server's message as the body."""


_INT_RE = re.compile(r"[+-]?[0-9]+\Z")
_UINT_RE = re.compile(r"[0-9]+\Z")
_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


class Query:
    """r.URL.Query().Get(): the first value of a parameter, "" when absent."""

    def __init__(self, query: str) -> None:
        try:
            self._values = urllib.parse.parse_qs(query, keep_blank_values=True)
        except ValueError:
            self._values = {}

    def get(self, name: str) -> str:
        values = self._values.get(name)
        return values[0] if values else ""

    def bool(self, name: str) -> bool:
        text = self.get(name)
        if text == "" or text in _FALSE:
            return False
        if text in _TRUE:
            return True
        raise BadRequest(f"Error decoding boolean for '{name}': strconv.ParseBool: parsing {_go_quote(text)}: invalid syntax")

    def int(self, name: str) -> int:
        text = self.get(name)
        if text == "":
            return 0
        if not _INT_RE.match(text):
            raise BadRequest(f"Error decoding int for '{name}': strconv.Atoi: parsing {_go_quote(text)}: invalid syntax")
        value = int(text)
        if not -(1 << 63) <= value < (1 << 63):
            raise BadRequest(f"Error decoding int for '{name}': strconv.Atoi: parsing {_go_quote(text)}: value out of range")
        return value

    # (in this class, int and bool are the methods above: the annotations below name the types)
    def uint64(self, name: str) -> builtins.int:
        text = self.get(name)
        if text == "":
            return 0
        if not _UINT_RE.match(text):
            raise BadRequest(f"Error decoding uint64 for '{name}': strconv.ParseUint: parsing {_go_quote(text)}: invalid syntax")
        value = int(text)
        if value >= 1 << 64:
            raise BadRequest(f"Error decoding uint64 for '{name}': strconv.ParseUint: parsing {_go_quote(text)}: value out of range")
        return value

    def subs(self) -> tuple[builtins.bool, builtins.bool]:
        """decodeSubs: (subscriptions, subscriptions_detail)."""
        if self.get("subs").lower() == "detail":
            return False, True
        return self.bool("subs"), False

    def state(self) -> str:
        text = self.get("state")
        if text == "":
            return "open"
        lowered = text.lower()
        if lowered in ("open", "closed"):
            return lowered
        if lowered in ("any", "all"):
            return "all"
        raise BadRequest(f"Error decoding state for {text}")


# -- process statistics ------------------------------------------------------------------------


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        try:
            import resource

            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        except Exception:  # pragma: no cover - no /proc and no resource
            return 0


def message_counts(server) -> dict:
    """Varz in/out msgs/bytes, in all and from/to clients (server.go inMsgs, inClientMsgs,
    outMsgs, outClientMsgs). server.in_msgs counts what client connections published;
    server.out_msgs what was delivered to them and to the server's own subscriptions
    (JetStream's, the system account's), which nats-server does not count and which carry no
    bytes; natserver.cluster counts what routes and leaf nodes brought in and took out."""
    cluster = server.cluster
    to_clients = server.out_msgs - server.internal_out_msgs
    return {
        "in_msgs": server.in_msgs + (cluster.in_msgs if cluster is not None else 0),
        "in_bytes": server.in_bytes + (cluster.in_bytes if cluster is not None else 0),
        "in_client_msgs": server.in_msgs,
        "in_client_bytes": server.in_bytes,
        "out_msgs": to_clients + (cluster.out_msgs if cluster is not None else 0),
        "out_bytes": server.out_bytes + (cluster.out_bytes if cluster is not None else 0),
        "out_client_msgs": to_clients,
        "out_client_bytes": server.out_bytes,
    }


def slow_consumer_stats(server) -> dict:
    """monitor.go SlowConsumersStats: natserver cuts off slow client connections only (a
    route or leaf node is never dropped as a slow consumer; there are no gateways)."""
    return {"clients": server.slow_consumers, "routes": 0, "gateways": 0, "leafs": 0}


def stale_connection_stats(server) -> dict:
    """monitor.go StaleConnectionStats: natserver's ping timer closes stale client connections
    only (routes and leaf nodes are not pinged out; there are no gateways)."""
    return {"clients": server.stale_connections, "routes": 0, "gateways": 0, "leafs": 0}


def account_name_tag(account) -> str:
    """accounts.go getNameTag: the name an account JWT gives its account (named by its public
    key), else its name."""
    config = getattr(account, "config", None)
    jwt_account = getattr(config, "jwt", None) if config is not None else None  # (natserver.auth.jwt.JWTAccount)
    claims = getattr(jwt_account, "claims", None)
    return getattr(claims, "name", "") or account.name


class _CpuSampler:
    """pse.ProcUsage: percent of one core used over the last sampling window (≥ 1 s), with
    one decimal. nats-server samples every second in the background; we sample on demand."""

    def __init__(self) -> None:
        self._cpu = own_cpu_seconds()
        self._wall = time.monotonic()
        self.percent = 0.0

    def sample(self) -> float:
        wall = time.monotonic()
        if wall - self._wall >= 1.0:
            cpu = own_cpu_seconds()
            self.percent = int((cpu - self._cpu) * 1000 / (wall - self._wall)) / 10.0
            self._cpu, self._wall = cpu, wall
        return self.percent


# -- the monitor --------------------------------------------------------------------------------

_ROUTES: dict[str, str] = {
    "/": "root",
    "/varz": "varz",
    "/connz": "connz",
    "/routez": "routez",
    "/gatewayz": "gatewayz",
    "/leafz": "leafz",
    "/subsz": "subsz",
    "/subscriptionsz": "subsz",  # nats-server's alias for backwards compatibility
    "/accountz": "accountz",
    "/accstatz": "accstatz",
    "/jsz": "jsz",
    "/nsqz": "nsqz",  # natserver: the NSQ front-end (natserver.nsq), when it runs
    "/healthz": "healthz",
}

_SORTS = {"cid", "start", "subs", "pending", "msgs_to", "msgs_from", "bytes_to", "bytes_from",
          "last", "idle", "uptime", "stop", "reason"}

_INDEX = """<html lang="en">
	<head>
	<title>natserver monitoring</title>
	<link rel="shortcut icon" href="https://nats.io/favicon.ico">
	<style type="text/css">
		body {{ font-family: ui-sans-serif,system-ui,-apple-system,BlinkMacSystemFont,"Segoe UI",Roboto,"Helvetica Neue",Arial,"Noto Sans",sans-serif; font-size: 18; font-weight: light-bold; margin-left: 32px }}
		a {{ display:block; margin-left: 7px; padding-bottom: 6px; color: rgb(72 72 92); text-decoration: none }}
		a:hover {{ font-weight: 600; color: rgb(59 50 202) }}
		a.help {{ display:inline; font-weight: 600; color: rgb(59 50 202); font-size: 20}}
		a.last {{ padding-bottom: 16px }}
		a.version {{ font-size: 14; font-weight: 400; width: 312px; text-align: right }}
	</style>
	</head>
	<body>
	<h1>natserver</h1>
	<a href=https://github.com/nats-io/nats-server class='version'>v{version}</a>
	<br/>
	<a href=./varz>General</a>
	<a href=./jsz>JetStream</a>
	<a href=./connz>Connections</a>
	<a href=./accountz>Accounts</a>
	<a href=./accstatz>Account Stats</a>
	<a href=./subsz>Subscriptions</a>
	<a href=./routez>Routes</a>
	<a href=./leafz>LeafNodes</a>
	<a href=./gatewayz>Gateways</a>
	<a href=./healthz class=last>Health Probe</a>
    <a href=https://docs.nats.io/running-a-nats-service/nats_admin/monitoring class="help">Help</a>
  </body>
</html>"""


class Monitor:
    """The monitoring endpoint of one server: ``host``, ``port``, ``url`` and request counts."""

    def __init__(self, server, host: str) -> None:
        self.server = server
        self.host = host
        self.port: int | None = None
        self.listeners: list = []
        self.http_req_stats: dict[str, int] = {}
        self._offload_limiter = trio.CapacityLimiter(OFFLOADED_AT_ONCE)
        self._cpu = _CpuSampler()
        self._cancel_scope: trio.CancelScope | None = None

    @property
    def url(self) -> str:
        host = self.host
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1"
        elif ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def stop(self) -> None:
        """Stop listening and drop every monitoring connection."""
        if self._cancel_scope is not None:
            self._cancel_scope.cancel()

    def _count(self, path: str) -> None:
        self.http_req_stats[path] = self.http_req_stats.get(path, 0) + 1

    # -- HTTP -------------------------------------------------------------------------------

    async def handle_stream(self, stream: trio.abc.Stream) -> None:
        """Serve one HTTP connection: requests one after another until either side closes."""
        import h11

        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST_HEAD)
        try:
            while True:
                request, body_ok = await self._read_request(conn, stream)
                if request is None:
                    return
                if not body_ok:
                    await self._send(conn, stream, 413, TEXT, b"413 Request Entity Too Large", head=False, close=True)
                    return
                path = request.target.split(b"?", 1)[0].decode("latin-1")
                if path in OFFLOADED_ROUTES and clock.installed() is None:
                    async with self._offload_limiter:
                        with _short_switch_interval():
                            status, ctype, body = await trio.to_thread.run_sync(self.respond, request)
                else:
                    status, ctype, body = self.respond(request)
                await self._send(conn, stream, status, ctype, body, head=request.method == b"HEAD")
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except h11.RemoteProtocolError as exc:
            # Malformed or oversized request: answer like Go's server ("400 Bad Request",
            # "431 Request Header Fields Too Large") if we still can, then close.
            if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                status = exc.error_status_hint
                reason = _REASONS.get(status, "Bad Request")
                try:
                    await self._send(conn, stream, status, TEXT, f"{status} {reason}".encode(), head=False, close=True)
                except (h11.LocalProtocolError, trio.BrokenResourceError, trio.ClosedResourceError, OSError, trio.TooSlowError):
                    pass
        except (h11.LocalProtocolError, trio.BrokenResourceError, trio.ClosedResourceError, OSError, trio.TooSlowError):
            pass
        except Exception:  # a bug here must cost one HTTP connection, never the server
            log.exception("monitoring: internal error; closing this HTTP connection")
        finally:
            await trio.aclose_forcefully(stream)

    async def _read_request(self, conn: h11.Connection, stream) -> tuple[h11.Request | None, bool]:
        """The next request (its body read and discarded), or None when the peer is gone."""
        import h11

        request = None
        body_size = 0
        with trio.move_on_after(IDLE_TIMEOUT):
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    if conn.they_are_waiting_for_100_continue:
                        await self._send_all(conn, stream, h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue"))
                    data = await stream.receive_some(READ_SIZE)
                    conn.receive_data(data)
                    continue
                if isinstance(event, h11.Request):
                    request = event
                elif isinstance(event, h11.Data):
                    body_size += len(event.data)
                    if body_size > MAX_REQUEST_BODY:
                        return request, False
                elif isinstance(event, h11.EndOfMessage):
                    return request, True
                else:  # ConnectionClosed, PAUSED
                    return None, True
        return None, True

    async def _send_all(self, conn: h11.Connection, stream, *events) -> None:
        data = b"".join(conn.send(event) or b"" for event in events)
        with trio.fail_after(WRITE_TIMEOUT):
            await stream.send_all(data)

    async def _send(self, conn, stream, status: int, ctype: str, body: bytes, *, head: bool, close: bool = False) -> None:
        import email.utils

        import h11

        headers = [("Content-Type", ctype)]
        if ctype == JSON:
            headers.append(("Access-Control-Allow-Origin", "*"))
        if status == 404:
            headers.append(("X-Content-Type-Options", "nosniff"))
        headers.append(("Date", email.utils.formatdate(usegmt=True)))
        headers.append(("Content-Length", str(len(body))))
        if close:
            headers.append(("Connection", "close"))
        events: list[h11.Response | h11.Data | h11.EndOfMessage] = [
            h11.Response(status_code=status, headers=headers, reason=_REASONS.get(status, "").encode())]
        if body and not head:
            events.append(h11.Data(data=body))
        events.append(h11.EndOfMessage())
        await self._send_all(conn, stream, *events)

    def respond(self, request: h11.Request) -> tuple[int, str, bytes]:
        """(status, content type, body) for one request; never raises."""
        target = request.target.decode("latin-1")
        try:
            split = urllib.parse.urlsplit(target)
            path = urllib.parse.unquote(split.path) or "/"
            query = Query(split.query)
        except ValueError:
            return 400, TEXT, b"400 Bad Request"
        for prefix, respond in self.server.monitor_routes.items():  # a subsystem's (e.g. /streaming)
            if path == prefix or path.startswith(prefix + "/"):
                return respond(self, path, query)
        name = _ROUTES.get(path)
        if name is None:
            return 404, TEXT, b"404 page not found\n"
        try:
            result = getattr(self, "handle_" + name)(query)
        except BadRequest as exc:
            return 400, TEXT, str(exc).encode()
        except Exception:
            log.exception("monitoring: error handling %s", path)
            return 500, TEXT, b"500 Internal Server Error"
        if isinstance(result, tuple):
            return result
        callback = query.get("callback")
        if callback:
            return 200, "application/javascript", callback.encode() + b"(" + result + b")"
        return 200, JSON, result

    # -- endpoints -------------------------------------------------------------------------

    def handle_root(self, query: Query):
        self._count("/")
        return 200, HTML, _INDEX.format(version=const.SERVER_VERSION).encode()

    def _varz_jetstream(self) -> dict:
        js = getattr(self.server, "jetstream", None)
        return js.varz() if js is not None else {}

    def handle_healthz(self, query: Query):
        """monitor.go HandleHealthz: the health (below) with its status code as the HTTP status
        (and not in the body)."""
        self._count("/healthz")
        js_enabled_only = query.bool("js-enabled") | query.bool("js-enabled-only")
        health = self.healthz(js_enabled_only=js_enabled_only, js_server_only=query.bool("js-server-only"),
                              details=query.bool("details"), account=query.get("account"),
                              stream=query.get("stream"), consumer=query.get("consumer"))
        code = health.pop("status_code")
        body = go_json(health, indent=False)
        return body if code == 200 else (code, JSON, body)

    def healthz(self, *, js_enabled_only: bool = False, js_server_only: bool = False, details: bool = False,
                account: str = "", stream: str = "", consumer: str = "") -> dict:
        """monitor.go healthz (2.15.1) on a single server: ok, unless the request is malformed
        (400), the server is not accepting clients yet (500), JetStream is configured and not
        running (503), or the account, stream or consumer asked about is missing (404) or
        unhealthy (503: not recovered, a store that cannot write). ``details`` lists every
        problem as an error object instead of the first one's text."""
        health: dict = {"status": "ok"}
        errors: list = []
        code = 0

        def fail(kind: str, message: str, status: str = "unavailable", replace: bool = False, **where) -> None:
            if details:
                if replace:
                    errors.clear()
                errors.append({"type": kind, **{k: v for k, v in where.items() if v}, "error": message})
            else:
                health["status"], health["error"] = status, message

        server = self.server
        js = getattr(server, "jetstream", None)
        if not account and stream:
            code = 400
            fail("BAD_REQUEST", '"account" must not be empty when checking stream health', status="error")
        elif not stream and consumer:
            code = 400
            fail("BAD_REQUEST", '"stream" must not be empty when checking consumer health', status="error")
        elif server.port is None or server.shutting_down:
            code = 500
            fail("CONNECTION", "server not ready for connections", status="error")
        elif js_server_only or not server.options.jetstream:
            pass
        elif js is None:
            code = 503
            fail("JETSTREAM", "JetStream not enabled")
        elif not js_enabled_only:
            # (a single server: no meta group or replicas to check; its store is)
            code = js.health(account, stream, consumer, details, fail)
        if details:
            health["status"] = "error" if errors else "ok"
        if not code:
            code = 503 if health.get("error") or errors else 200
        out = {"status": health["status"], "status_code": code}
        if "error" in health:
            out["error"] = health["error"]
        if errors:
            out["errors"] = errors
        return out

    def handle_varz(self, query: Query) -> bytes:
        self._count("/varz")
        return go_json(self.varz())

    def varz(self) -> dict:
        server = self.server
        o = server.options
        now = clock.now()
        info = getattr(server, "_info_base", None) or {}
        v: dict = {
            "server_id": server.server_id,
            "server_name": server.server_name,
            "version": const.SERVER_VERSION,
            "proto": const.PROTO_VERSION,
            "git_commit": const.GIT_COMMIT_FIELD,
            "go": info.get("go", const.GO_VERSION_FIELD),
            "host": o.host,
            "port": server.port if server.port is not None else o.port,
        }
        if server.auth_required:
            v["auth_required"] = True
        if server._info_base.get("connect_urls"):  # set by natserver.cluster (before max_connections)
            v["connect_urls"] = list(server._info_base["connect_urls"])
        v["max_connections"] = o.max_connections
        if o.max_subscriptions > 0:
            v["max_subscriptions"] = o.max_subscriptions
        cpus = usable_cpus()
        v.update({
            "ping_interval": _seconds_ns(o.ping_interval),
            "ping_max": o.ping_max,
            "http_host": o.http_host or o.host,
            "http_port": o.http_port,
            "http_base_path": "",
            "https_port": 0,
            "auth_timeout": _go_float(o.auth_timeout),
            "max_control_line": o.max_control_line,
            "max_payload": o.max_payload,
            "max_pending": o.max_pending,
            # (natserver.cluster runs leaf nodes too: its cluster object only with a cluster)
            "cluster": server.cluster.varz() if server.cluster is not None and o.clustered else {},
            "gateway": {},
            "leaf": server.cluster.leaf_varz() if server.cluster is not None else {},
            "mqtt": {},
            "websocket": server.websocket.varz() if server.websocket is not None else {},
            "jetstream": self._varz_jetstream(),
            "tls_timeout": _go_float(getattr(o, "tls_timeout", const.DEFAULT_TLS_TIMEOUT)),
            "write_deadline": _seconds_ns(o.write_deadline),
            "start": go_time(server.start_time, local=True),
            "now": go_time(now),
            "uptime": my_uptime(now - server.start_time),
            "mem": _rss_bytes(),
            "cores": cpus,
            "gomaxprocs": cpus,
            "cpu": _go_float(self._cpu.sample()),
            "connections": len(server.clients),
            "total_connections": server.total_connections,
            "routes": len(server.cluster.route_conns) if server.cluster is not None else 0,
            "remotes": len(server.cluster.routes) if server.cluster is not None else 0,
            "leafnodes": len(server.cluster.leafs) if server.cluster is not None else 0,
            **message_counts(server),
            "slow_consumers": server.slow_consumers,
            "stale_connections": server.stale_connections,
            "stalled_clients": server.stalled_clients,
            "subscriptions": server.subscriptions,  # every account's (server.go numSubscriptions)
            "http_req_stats": dict(sorted(self.http_req_stats.items())),
            "config_load_time": go_time(getattr(server, "config_load_time", server.start_time), local=True),
            "config_digest": o.config_digest,
            "feature_flags": dict(FEATURE_FLAGS),
        })
        if server.system is not None:  # natserver.system's account (omitempty, after feature_flags)
            v["system_account"] = server.system.name
        v["slow_consumer_stats"] = slow_consumer_stats(server)
        v["stale_connection_stats"] = stale_connection_stats(server)
        # monitor.go DiskIOWaitStats counts waits on the file store's disk I/O semaphore;
        # natserver's store writes without one, so nothing ever waits.
        v["disk_io_wait_stats"] = {"waiters": 0, "waits": 0, "wait_time": 0, "max_wait_time": 0}
        return v

    # /connz ------------------------------------------------------------------------------

    def handle_connz(self, query: Query) -> bytes:
        sort = query.get("sort")
        auth = query.bool("auth")
        subs, subs_detail = query.subs()
        offset = query.int("offset")
        limit = query.int("limit")
        cid = query.uint64("cid")
        state = query.state()
        self._count("/connz")
        return go_json(self.connz(
            sort=sort, auth=auth, subs=subs, subs_detail=subs_detail, offset=offset, limit=limit,
            cid=cid, state=state, user=query.get("user"), acc=query.get("acc"),
            mqtt_client=query.get("mqtt_client"),
        ))

    def connz(self, *, sort: str = "", auth: bool = False, subs: bool = False, subs_detail: bool = False,
              offset: int = 0, limit: int = 0, cid: int = 0, state: str = "open", user: str = "",
              acc: str = "", mqtt_client: str = "") -> dict:
        """monitor.go Connz(), quirks included (e.g. ``total`` ignores the cid/user filters)."""
        server = self.server
        sort = sort or "cid"
        if sort not in _SORTS:
            raise BadRequest(f"invalid sorting option: {sort}")
        offset = max(offset, 0)
        if limit <= 0:
            limit = DEFAULT_CONN_LIST_SIZE
        if sort in ("stop", "reason") and state != "closed":
            raise BadRequest(f"sort by {sort} only valid on closed connections")
        if cid > 0:
            limit = 1
        now = clock.now()
        account = server.accounts.get(acc) if acc and server.accounts is not None else None
        if acc and (account is None if server.accounts is not None else acc != GLOBAL_ACCOUNT):
            # an unknown account: nats-server returns this
            return {"server_id": "", "now": go_time(now), "num_connections": 0, "total": 0,
                    "offset": offset, "limit": limit, "connections": None}

        open_clients = list(server.clients.values()) if state in ("open", "all") else []
        closed = list(server.closed_clients) if state in ("closed", "all") else []
        if acc:
            # One account's connections; closed records only remember accounts other than
            # the global one (monitor.go: cc.acc), so $G's closed ones are never listed.
            if account is not None:
                default = server.accounts.global_account
                open_clients = [c for c in open_clients if (c.account or default) is account]
            closed = [r for r in closed if acc != GLOBAL_ACCOUNT and r.get("account") == acc]
        total = len(open_clients) + len(closed)

        if cid > 0:
            if state in ("closed", "all"):  # sic: state=all looks among the closed ones only
                closed = [r for r in closed if r.get("cid") == cid][:1]
                open_clients = []
            else:
                client = server.clients.get(cid)
                open_clients = [client] if client is not None else []
        else:
            if user:
                open_clients = [c for c in open_clients if c.user == user]
            if mqtt_client:
                open_clients = []
        if cid == 0:
            if user:
                closed = [r for r in closed if r.get("user") == user]
            if mqtt_client:
                closed = []

        rows = [_open_row(c) for c in open_clients]
        rows.extend(_closed_row(r) for r in closed)
        _sort_rows(rows, sort, now)
        page = rows[min(offset, len(rows)):min(offset + limit, len(rows))]
        connections = [_conn_info(row, now, auth, subs, subs_detail) for row in page]
        if auth:  # monitor.go: name_tag, the account's (JWT) name; a closed one's outside $G only
            for row, info in zip(page, connections):
                name = row.get("account") or GLOBAL_ACCOUNT
                if "_subs" in row or name != GLOBAL_ACCOUNT:
                    known = server.accounts.get(name) if server.accounts is not None else None
                    info["name_tag"] = account_name_tag(known) if known is not None else name
        return {
            "server_id": server.server_id,
            "now": go_time(now),
            "num_connections": len(page),
            "total": total,
            "offset": offset,
            "limit": limit,
            "connections": connections,
        }

    # /subsz ------------------------------------------------------------------------------

    def handle_subsz(self, query: Query) -> bytes:
        self._count("/subsz")
        subs = query.bool("subs")
        offset = query.int("offset")
        limit = query.int("limit")
        result = self.subsz(subs=subs, offset=offset, limit=limit, test=query.get("test"), acc=query.get("acc"))
        return go_json(result)

    def subsz(self, *, subs: bool = False, offset: int = 0, limit: int = 0, test: str = "", acc: str = "") -> dict:
        offset = max(offset, 0)
        if limit <= 0:
            limit = DEFAULT_SUB_LIST_SIZE
        literal = None
        if test:
            if not is_valid_literal_subject(test.encode()):
                raise BadRequest(f"invalid test subject, must be valid publish subject: {test}")
            literal = test.encode().split(b".")
        server = self.server
        # The subject spaces counted (monitor.go Subsz): every account's, or the one ``acc``
        # names (none for an unknown name).
        if server.accounts is not None:
            accounts = [server.accounts.get(acc)] if acc else list(server.accounts.by_name.values())
            spaces = [(account.name, account.sublist, account_name_tag(account))
                      for account in accounts if account is not None]
        else:
            spaces = [(GLOBAL_ACCOUNT, server.sublist, GLOBAL_ACCOUNT)] if acc in ("", GLOBAL_ACCOUNT) else []
        out = {"server_id": server.server_id, "now": go_time(clock.now())}
        out.update(sublist_stats(*(sublist for _, sublist, _ in spaces)))
        out.update({"total": 0, "offset": offset, "limit": limit})
        if subs and spaces:
            # Only the page's details are built (nats-server builds all, then slices): with
            # 20 000 subscriptions a page of 1024 took 280 ms.
            page: list[dict] = []
            skip = offset
            for name, sublist, tag in spaces:
                for sub in sublist.subscriptions():
                    if literal is not None and not match_literal(literal, sub.subject):
                        continue
                    if skip:
                        skip -= 1
                        continue
                    if len(page) >= limit:
                        break
                    page.append(sub_detail(sub, account=name, account_tag=tag))
            out["total"] = len(page)  # sic: nats-server reports the page's length
            if page:
                out["subscriptions_list"] = page
        return out

    # stubs for what natserver does not have (no routes, gateways, leafnodes, JetStream) ----

    def _header(self) -> dict:
        return {"server_id": self.server.server_id, "now": go_time(clock.now())}

    def handle_routez(self, query: Query) -> bytes:
        subs = query.subs()
        self._count("/routez")
        # monitor.go Routez: server_name after server_id (2.10+)
        header = {"server_id": self.server.server_id, "server_name": self.server.server_name, "now": go_time(clock.now())}
        if self.server.cluster is not None:  # natserver.cluster's routes (a subsystem)
            return go_json({**header, **self.server.cluster.routez(any(subs))})
        return go_json({**header, "num_routes": 0, "routes": []})

    def handle_gatewayz(self, query: Query) -> bytes:
        self._count("/gatewayz")
        query.bool("accs")
        return go_json({**self._header(), "outbound_gateways": {}, "inbound_gateways": {}})

    def handle_leafz(self, query: Query) -> bytes:
        self._count("/leafz")
        subs = query.bool("subs")
        if self.server.cluster is not None and self.server.cluster.leafs:  # natserver.cluster's leaf nodes
            return go_json({**self._header(), **self.server.cluster.leafz(subs)})
        return go_json({**self._header(), "leafnodes": 0, "leafs": []})

    def handle_accountz(self, query: Query) -> bytes:
        self._count("/accountz")
        return go_json(self.accountz(query.get("acc")))

    def accountz(self, acc: str = "") -> dict:
        """monitor.go Accountz: the account names (the system account's named), or one
        account's details (``acc``)."""
        server = self.server
        out = self._header()
        if server.system is not None:
            out["system_account"] = server.system.name
        if acc:
            out["account_detail"] = self.account_info(acc)
        else:
            out["accounts"] = list(server.accounts.by_name) if server.accounts is not None else [GLOBAL_ACCOUNT]
        return out

    def account_info(self, name: str) -> dict:
        """monitor.go AccountInfo: one account's connections, subscriptions, imports, exports."""
        server = self.server
        account = server.accounts.get(name) if server.accounts is not None else None
        if account is None or account.name != name and name != GLOBAL_ACCOUNT:
            raise BadRequest(f"Account {name} does not exist")
        config = account.config
        info: dict = {"account_name": name, "update_time": go_time(server.start_time)}
        if server.system is not None and server.system.name == name:
            info["is_system"] = True  # (monitor.go AccountInfo, omitempty)
        info.update({
            "expired": bool(account.expired),
            "complete": True, "jetstream_enabled": getattr(server, "jetstream", None) is not None,
            "leafnode_connections": 0, "client_connections": len(account.clients),
            "subscriptions": account.sublist.count,
        })
        if config is not None and config.imports:
            info["imports"] = [{
                "subject": imp.subject, "account": imp.account,
                "to": imp.to or (f"{imp.prefix}.{imp.subject}" if imp.prefix else imp.subject),
                "type": "service" if imp.service else "stream", "invalid": False, "share": imp.share, "tracking": False,
            } for imp in config.imports]
        if config is not None and config.exports:
            info["exports"] = [{"subject": exp.subject, "type": "service" if exp.service else "stream",
                                **({"response_type": exp.response_type} if exp.service else {})}
                               for exp in config.exports]
        # monitor.go AccountInfo: name_tag (the JWT's name, else the account's) after the
        # imports and exports, before the sublist stats
        info["name_tag"] = account_name_tag(account)
        info["sublist_stats"] = sublist_stats(account.sublist)
        return info

    def handle_accstatz(self, query: Query) -> bytes:
        self._count("/accstatz")
        unused = query.bool("unused")
        # monitor.go AccountStatz: the accounts in use here (every one with unused). natserver
        # keeps its account statistics in the system account: none without one.
        system = self.server.system
        return go_json({**self._header(), "account_statz": system.account_statz(unused=unused) if system else []})

    def handle_jsz(self, query: Query) -> bytes:
        self._count("/jsz")
        flags = {name: query.bool(name) for name in ("accounts", "streams", "consumers", "config")}
        query.get("acc")  # one account ($G): an unknown name lists every account, as in 2.9.10
        js = getattr(self.server, "jetstream", None)
        body = js.jsz(**flags) if js is not None else _JSZ_DISABLED
        # monitor.go JSInfo: the embedded JetStreamStats come first, then the server's id and
        # time, the rest, and the count of JetStream accounts last.
        out = {key: body[key] for key in _JSZ_STATS_KEYS}
        out.update(self._header())
        out.update((key, value) for key, value in body.items() if key not in _JSZ_STATS_KEYS and key != "total")
        out["total"] = body.get("total", 0)
        return go_json(out)

    def handle_nsqz(self, query: Query) -> bytes:
        """The NSQ front-end's counters, topics and channels (its ``summary()``); a subsystem
        the core only knows by this attribute."""
        self._count("/nsqz")
        nsq = getattr(self.server, "nsq", None)
        if nsq is None:
            return go_json({**self._header(), "disabled": True})
        return go_json({**self._header(), **nsq.summary()})


# /jsz of a server without JetStream (monitor.go Jsz with JetStream off: API level 0).
_JSZ_DISABLED = {
    "disabled": True,
    "config": {"max_memory": 0, "max_storage": 0},
    "memory": 0, "storage": 0, "reserved_memory": 0, "reserved_storage": 0,
    "accounts": 0, "ha_assets": 0, "api": {"level": 0, "total": 0, "errors": 0},
    "streams": 0, "consumers": 0, "messages": 0, "bytes": 0, "total": 0,
}
_JSZ_STATS_KEYS = ("memory", "storage", "reserved_memory", "reserved_storage", "accounts", "ha_assets", "api")


_REASONS = {
    100: "Continue", 200: "OK", 400: "Bad Request", 404: "Not Found", 408: "Request Timeout",
    413: "Request Entity Too Large", 414: "URI Too Long", 431: "Request Header Fields Too Large",
    500: "Internal Server Error", 501: "Not Implemented", 505: "HTTP Version Not Supported",
}

def sublist_stats(*sublists) -> dict:
    """sublist.go Stats(): counters plus fan-out figures over the result cache; of several
    sublists (accounts), their sum as SublistStats.add makes it (rates from the summed counts)."""
    count = cached = inserts = removes = matches = hits = total = largest = 0
    for sublist in sublists:
        cache = getattr(sublist, "cache", None)
        if cache is None:
            cache = getattr(sublist, "_cache", None)
        if not isinstance(cache, dict):
            cache = {}
        for result in list(cache.values()):
            n = len(result.psubs) + len(result.qsubs)
            total += n
            largest = max(largest, n)
        count += sublist.count
        cached += len(cache)
        inserts += sublist.inserts
        removes += sublist.removes
        matches += sublist.matches
        hits += sublist.cache_hits
    return {
        "num_subscriptions": count,
        "num_cache": cached,
        "num_inserts": inserts,
        "num_removes": removes,
        "num_matches": matches,
        "cache_hit_rate": _go_float(hits / matches) if matches else 0,
        "max_fanout": largest,
        "avg_fanout": _go_float(total / cached) if total else 0,
    }


def match_literal(literal: list[bytes], subject: bytes) -> bool:
    """sublist.go matchLiteral: would a message on ``literal`` (tokens) reach ``subject``?"""
    tokens = subject.split(b".")
    for i, token in enumerate(tokens):
        if token == b">":
            return len(literal) > i
        if i >= len(literal):
            return False
        if token != b"*" and token != literal[i]:
            return False
    return len(tokens) == len(literal)


def sub_detail(sub, *, account: str = "", account_tag: str = "") -> dict:
    """SubDetail: /subsz lists (and closed connections) carry the account (and /subsz its name
    tag, account_tag), /connz's do not."""
    detail: dict = {"account": account} if account else {}
    if account_tag:
        detail["account_tag"] = account_tag
    detail["subject"] = sub.subject.decode("utf-8", "replace")
    if sub.queue:
        detail["qgroup"] = sub.queue.decode("utf-8", "replace")
    detail["sid"] = sub.sid.decode("utf-8", "replace")
    detail["msgs"] = getattr(sub, "delivered", 0)
    if getattr(sub, "max_msgs", 0):
        detail["max"] = sub.max_msgs
    detail["cid"] = sub.client.cid
    return detail


# -- /connz rows ----------------------------------------------------------------------------------


def _open_row(client) -> dict:
    # The same record a closed connection leaves behind, plus the live subscriptions.
    row = connection_record(client, keep_subs=False)
    row["_subs"] = list(client.subs.values())
    return row


def _closed_row(record) -> dict:
    row = record.unpacked() if isinstance(record, ClosedRecord) else dict(record)
    row.setdefault("stop", None)
    return row


def _sort_rows(rows: list, sort: str, now: float) -> None:
    """monitor_sort_opts.go: cid/start and reason ascending, uptime ascending, the rest descending."""
    if sort in ("cid", "start"):
        rows.sort(key=lambda r: r["cid"])
    elif sort == "reason":
        rows.sort(key=lambda r: r.get("reason") or "")
    elif sort == "uptime":
        rows.sort(key=lambda r: (r.get("stop") or now) - r["start"])
    else:
        key = {
            "subs": lambda r: r["subscriptions"],
            "pending": lambda r: r["pending_bytes"],
            "msgs_to": lambda r: r["out_msgs"],
            "msgs_from": lambda r: r["in_msgs"],
            "bytes_to": lambda r: r["out_bytes"],
            "bytes_from": lambda r: r["in_bytes"],
            "last": lambda r: r["last_activity"],
            # sic: nats-server's byIdle compares last_activity - start
            "idle": lambda r: r["last_activity"] - r["start"],
            "stop": lambda r: r.get("stop") or 0.0,
        }[sort]
        rows.sort(key=key, reverse=True)


def _conn_info(row: dict, now: float, auth: bool, subs: bool, subs_detail: bool) -> dict:
    """ConnInfo, fields in nats-server's order; closed ones are frozen at their stop time."""
    stop = row.get("stop")
    at = stop if stop is not None else now
    info = {
        "cid": row["cid"],
        "kind": "Client",
        "type": "nats",
        "ip": row["ip"],
        "port": row["port"],
        "start": go_time(row["start"], local=True),
        "last_activity": go_time(row["last_activity"], local=True),
    }
    if stop is not None:
        info["stop"] = go_time(stop)
        if row.get("reason"):
            info["reason"] = row["reason"]
    info.update({
        "rtt": go_rtt(row.get("rtt")),
        "uptime": my_uptime(at - row["start"]),
        "idle": my_uptime(at - row["last_activity"]),
        "pending_bytes": row["pending_bytes"],
        "in_msgs": row["in_msgs"],
        "out_msgs": row["out_msgs"],
        "in_bytes": row["in_bytes"],
        "out_bytes": row["out_bytes"],
        "subscriptions": row["subscriptions"],
    })
    for key in ("name", "lang", "version"):
        if row.get(key):
            info[key] = row[key]
    if auth and row.get("user"):
        info["authorized_user"] = row["user"]
    if auth and row.get("account"):
        info["account"] = row["account"]
    if subs or subs_detail:
        live = row.get("_subs")
        if live is not None:  # an open connection
            if live:
                if subs_detail:
                    info["subscriptions_list_detail"] = [sub_detail(s) for s in live]
                else:
                    info["subscriptions_list"] = [s.subject.decode("utf-8", "replace") for s in live]
        elif row.get("subs_packed"):  # a closed one: what connection_record kept
            details = unpack_subs(row["subs_packed"], row["cid"])
            if subs_detail:
                info["subscriptions_list_detail"] = [{"account": GLOBAL_ACCOUNT, **d} for d in details]
            else:
                info["subscriptions_list"] = [d["subject"] for d in details]
    return info


# -- serving ------------------------------------------------------------------------------------


_offloads_running = [0, 0.0]  # pages being built in threads, and the switch interval before


@contextlib.contextmanager
def _short_switch_interval():
    """OFFLOADED_SWITCH_INTERVAL while any page is built in a thread (event loop side only)."""
    if not _offloads_running[0]:
        _offloads_running[1] = sys.getswitchinterval()
        sys.setswitchinterval(OFFLOADED_SWITCH_INTERVAL)
    _offloads_running[0] += 1
    try:
        yield
    finally:
        _offloads_running[0] -= 1
        if not _offloads_running[0]:
            sys.setswitchinterval(_offloads_running[1])


def _join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def serve_monitor(server, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve the monitoring endpoints of ``server`` until cancelled or the server stops.

    ``task_status.started(monitor)`` once listening; ``monitor.port``/``monitor.url`` tell where.
    """
    options = server.options
    host = options.http_host or options.host or "0.0.0.0"
    port = 0 if options.http_port == const.RANDOM_PORT else options.http_port
    monitor = Monitor(server, host)
    try:
        listeners = await open_listeners(host, port)  # every address: dual-stack, one port
    except OSError as exc:
        error = listen_error(host, port, exc)
        log.critical("Can't start monitoring: can't listen to the monitor port: %s", error)
        raise error from exc
    monitor.listeners = listeners
    monitor.port = listeners[0].socket.getsockname()[1]
    log.info("Starting http monitor on %s", _join_host_port(host, monitor.port))
    try:
        async with trio.open_nursery() as nursery:
            monitor._cancel_scope = nursery.cancel_scope
            await nursery.start(trio.serve_listeners, monitor.handle_stream, listeners)
            stopped = getattr(server, "_stopped", None)
            if isinstance(stopped, trio.Event):
                nursery.start_soon(_stop_with_server, stopped, nursery.cancel_scope)
            task_status.started(monitor)
    finally:
        monitor._cancel_scope = None
        for listener in listeners:
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(listener)


async def _stop_with_server(stopped: trio.Event, scope: trio.CancelScope) -> None:
    await stopped.wait()
    scope.cancel()
