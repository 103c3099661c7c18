"""The server: listeners, the client registry, INFO, counters, authentication and shutdown.

Use it the trio way::

    async with trio.open_nursery() as nursery:
        server = await nursery.start(natserver.serve, natserver.Options(port=-1))
        print(server.port)
        ...
        await server.shutdown()
"""

from __future__ import annotations

import errno
import logging
import os
import socket
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import orjson
import trio

from .. import clock
from ..auth import tls as tls_module
from ..auth.nkeys import PREFIX_SERVER, create_curve_keys, encode_public_key
from ..auth.tls import TLSConfig, server_context
from ..auth.users import AccountLimitError, Authenticator, new_nonce, plaintext_password_warning
from ..config.options import Options
from ..protocol import const, errors
from ..protocol.gotext import go_duration
from ..protocol.parser import PARSER_IMPLEMENTATION
from ..routing.accounts import GLOBAL_ACCOUNT, Accounts
from ..routing.sublist import Sublist
from . import busypoll
from .binding import peer_ip
from .client import DELIVERY_IMPLEMENTATION, Client, ClosedRecord, ClosedRing, connection_record
from .early import EarlyGreeter, client_info, info_base
from .keepalive import PingTimers
from .listen import ListenError, listen_error, open_listeners
from .log import configure_library_logging
from .reclaim import Reclaimer, shrink_dict, shrink_set
from .trace import log_prefix

# Imported where they are used, not here: the plain ``natserver -p 4222`` start needs none of
# them before its first INFO, and together they are a third of the server's import time
# (tests/test_startup_imports.py): operator mode (auth.jwt), the HTTP monitor (h11), and the
# signal handlers (which read config files: config.flags and config.mapping).
if TYPE_CHECKING:
    from ..auth.jwt import OperatorMode

# Everything in __all__ gets re-exported as part of natserver's public API.
__all__ = ["ListenError", "Server", "Subsystem"]

log = logging.getLogger("natserver")

# trio's serve_listeners and nats-server (ACCEPT_MIN_SLEEP/ACCEPT_MAX_SLEEP, const.go:141/144)
# both back off when accept fails for lack of resources instead of spinning.
_ACCEPT_RESOURCE_ERRORS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
ACCEPT_MIN_SLEEP = 0.010
ACCEPT_MAX_SLEEP = 1.0
# Errors of the one connection being accepted (it went away, or a firewall denied it), not of
# the listener: skipped, as trio's SocketListener skips them (_ignorable_accept_errno_names).
_ACCEPT_TRANSIENT_ERRORS = {
    getattr(errno, name) for name in (
        "EPERM", "ECONNABORTED", "EPROTO", "ENETDOWN", "ENOPROTOOPT", "EHOSTDOWN", "ENONET",
        "EHOSTUNREACH", "EOPNOTSUPP", "ENETUNREACH", "ENOSR", "ESOCKTNOSUPPORT",
        "EPROTONOSUPPORT", "ETIMEDOUT", "ECONNRESET",
    ) if hasattr(errno, name)
}
# Connections accepted in one wake-up of the accept loop before others get a turn.
ACCEPT_BATCH = 64


def make_server_id() -> str:
    """A server id shaped like nats-server's: an nkey server public key (56 chars, "N...")."""
    return encode_public_key(PREFIX_SERVER, os.urandom(32)).decode()


class Subsystem(Protocol):
    """A part built on the core that the server starts when its options ask for it."""

    name: str  # the Server attribute that holds what start() returned ("jetstream")

    def wanted(self, options: Options) -> bool: ...

    async def start(self, server: Server, *, task_status=trio.TASK_STATUS_IGNORED) -> None: ...


class Server:
    """A running (or about to run) natserver. Create with options, then ``await run()``."""

    # Set by natserver.cli (a layer up) when the server runs from the command line: its
    # CommandLine, whose flags a reload applies again, and that it configured logging.
    # signals.py reads both with getattr: an in-process server has neither.
    command_line: Any
    _logging_configured: bool

    def __init__(self, options: Options | None = None, *, subsystems: tuple = (), **changes) -> None:
        options = (options or Options()).copy(**changes) if changes else (options or Options())
        options.validate()
        self.options = options
        self.server_id = make_server_id()
        # The server's x25519 key (INFO "xkey"), as nats-server 2.10+ makes one per start.
        self.xkey, self._xkey_private = create_curve_keys()
        self.server_name = options.server_name or self.server_id
        self.sublist = Sublist()
        self.clients: dict[int, Client] = {}
        self.ping_timers = PingTimers(self)  # every client's ping timer, one task
        self.reclaimer = Reclaimer(self._compact)  # gives memory back after many closes (reclaim.py)
        # Busy polling (busypoll.py), started by run(); parked: the next client messages wake it.
        self.poller: busypoll.BusyPoller | None = None
        self.poller_parked = False
        self.closed_clients = ClosedRing(options.max_closed_clients)
        # Clients given output while the current chunk was processed; flushed once after it.
        self.touched: set[Client] = set()
        # Routes and leaf connections given output meanwhile (cluster.routes.Route.flush: written
        # in place too), in the order they got it.
        self.touched_routes: list = []
        # Work deferred to the end of the current chunk, run by flush_touched before it writes
        # (JetStream delivers what a chunk of acks made room for in one batch); emptied as run.
        self.before_flush: list[Callable[[], None]] = []
        # Client sockets already listening, bound by the command before its imports (cli.py),
        # and the thread that greeted clients on them meanwhile (early.py, via adopt_early).
        self.listening_sockets: list | None = None
        self.early_greeter: EarlyGreeter | None = None
        self.start_time = clock.now()
        self.in_msgs = 0
        self.in_bytes = 0
        self.out_msgs = 0
        self.out_bytes = 0
        self.internal_out_msgs = 0  # of out_msgs, those to the server's own subscriptions
        self.slow_consumers = 0
        self.stale_connections = 0  # clients closed by the ping timer (server.go staleConnections)
        self.stalled_clients = 0  # times a publisher waited for a subscriber (server.go stalls)
        self.total_connections = 0
        self._next_cid = 0
        self.listeners: list[trio.SocketListener] = []
        self.port: int | None = None
        self.host = options.host
        self._nursery: trio.Nursery | None = None
        self._stopped = trio.Event()
        self.shutting_down = False
        self.lame_duck = False
        self._info_base: dict = {}
        # Test-double hooks (natserver.testing): None in normal operation.
        # publish_hook(client, subject, reply, header_size, payload) -> DELIVER|DROP|NO_RESPONDERS
        self._publish_hook = None
        # The forwarding hook of what links this server to others (natserver.cluster), None when
        # alone: ``forwarder.forward(client, result, subject, reply, header_size, payload)`` gets
        # every message a local client publishes (after local delivery; ``result`` is the local
        # match) and returns True when some peer took it. Messages that came from a peer are
        # delivered with Client.deliver_routed and never given to it again. See set_forwarder.
        # ``forwarder.has_interest(client, subject)`` tells whether a peer listens on ``subject``
        # in the client's account (a JetStream push consumer's deliver subject).
        self._forwarder = None
        # The one attribute the publish hot path tests: True when either hook is set.
        self.publish_slow = False
        # connection_hook(client, stage) -> True to close the connection at that stage;
        # stage is "accept" (before INFO), "info" (after INFO), "connect", or "ping" (a PING).
        self.connection_hook: Callable[[Client, str], bool] | None = None
        self._internal: Client | None = None
        self._internal_sids = 0
        self.monitor = None  # the monitoring HTTP server, when options.http_port is set
        # Called with the server once every listener is up, just before "Server is ready" (the
        # command line writes its ports file there: nats-server's Start logs the line last).
        self.before_ready: Callable[[Server], None] | None = None
        # What runs on top of the core (JetStream, ...), each a Subsystem started by run() when
        # the options ask for it and kept in the attribute it names; natserver.app lists them,
        # so the core never imports what is built on it.
        self.subsystems: tuple[Subsystem, ...] = tuple(subsystems)
        self.jetstream = None  # natserver.jetstream's engine, when options.jetstream is set
        self.stan = None  # natserver.stan's engine, when options.stan is set
        # False: no client listener at all (natserver.app: the streaming engine serving through
        # another NATS server, -ns, as nats-streaming-server runs no NATS server then)
        self.client_listener = True
        # Monitoring endpoints a subsystem adds (path prefix -> respond(monitor, path, query)),
        # so the core's monitor serves them without importing the subsystem.
        self.monitor_routes: dict = {}
        self.cluster = None  # natserver.cluster's routes, when the options configure a cluster
        self.websocket = None  # natserver.websocket's listener, when a websocket {} block sets a port
        self.system = None  # natserver.system's system account ($SYS events and requests)
        # What a subsystem watches clients come and go with: objects with client_connected(client)
        # (after a client's first accepted CONNECT) and client_closed(client).
        self.connection_observers: list = []
        # Called (no arguments) when lame duck mode starts, before the clients are told: the
        # cluster tells its routes, so their clients stop being sent here (server.go
        # sendLDMToRoutes); JetStream's RAFT groups hand their leadership over, and answer
        # True when one did (lame duck then waits a second for it, as server.go lameDuckMode).
        self.lame_duck_hooks: list = []
        # Security (see auth/users.py, routing/accounts.py, auth/jwt.py, tls.py): who may connect, the
        # accounts, operator mode and the TLS context; rebuilt by a config reload.
        self.accounts: Accounts | None = None
        self.auth: Authenticator | None = None
        self.operator: OperatorMode | None = None
        self.tls: TLSConfig | None = None
        self._import_depth = 0  # chained account imports being followed (cycle guard)
        self.callback_publisher: Client | None = None  # the client whose message an internal callback handles
        # While Client.deliver_as runs: the subject it routes by (a push consumer's deliver
        # subject) when that is not the message's own; a stream import carries it across.
        self.delivering: bytes | None = None
        self.configure_security(options)

    # -- properties used by clients ----------------------------------------------------------

    @property
    def publish_hook(self):
        return self._publish_hook

    @publish_hook.setter
    def publish_hook(self, hook) -> None:
        self._publish_hook = hook
        self.publish_slow = hook is not None or self._forwarder is not None

    @property
    def forwarder(self):
        return self._forwarder

    def set_forwarder(self, forwarder) -> None:
        """Install (or with None remove) the hook that forwards local messages to peers."""
        self._forwarder = forwarder
        self.publish_slow = forwarder is not None or self._publish_hook is not None

    @property
    def auth_required(self) -> bool:
        """Clients must authenticate (CONNECT first, within auth_timeout)."""
        return self.auth is not None and self.auth.required

    def configure_security(self, options: Options) -> list[str]:
        """Build accounts, operator mode, the authenticator and the TLS context from
        ``options`` (at start and on reload). Returns what changed, as reload log lines.
        Raises ValueError for a configuration that cannot be used."""
        changed: list[str] = []
        old = self.auth.options if self.auth is not None else None
        if options.tls is not None:
            server_context(options.tls)  # fails early on bad certificates
        if self.accounts is None:
            self.accounts = Accounts(self)
        operator = None
        if options.operator_mode:
            from ..auth.jwt import OperatorMode

            operator = OperatorMode(self, options)
        self.operator = operator
        if operator is not None:
            operator.configure_accounts()
        else:
            self.accounts.configure(list(options.accounts))
        self.accounts.configure_mappings(options.mappings, options.cluster_name)
        self.auth = Authenticator(options, self.accounts, operator)
        self.tls = options.tls
        if old is not None and plaintext_password_warning(options) and not plaintext_password_warning(old):
            log.warning("Plaintext passwords detected, use nkeys or bcrypt")
        if old is not None:
            if (old.users, old.nkeys, old.no_auth_user) != (options.users, options.nkeys, options.no_auth_user):
                changed.append("Reloaded: authorization users")
            # Top-level mappings belong to the global account in nats-server's options.
            if old.accounts != options.accounts or old.mappings != options.mappings:
                changed.append("Reloaded: accounts")
            if old.tls != options.tls:
                changed.append(f"Reloaded: tls = {'enabled' if options.tls is not None else 'disabled'}")
        return changed

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("", "0.0.0.0", "::") else self.host
        return f"nats://{host}:{self.port}"

    @property
    def subscriptions(self) -> int:
        """All accounts' subscriptions (nats-server numSubscriptions)."""
        if self.accounts is None or len(self.accounts.by_name) == 1:
            return self.sublist.count
        return sum(account.sublist.count for account in self.accounts.by_name.values())

    # -- running ------------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Listen and serve until ``shutdown()``; ``task_status.started(self)`` when ready."""
        options = self.options
        if not getattr(self, "_logging_configured", False):  # in-process: the library only logs
            configure_library_logging(options)
        log.info("Starting natserver (nats-server %s compatible)", const.SERVER_VERSION)
        log.info("  Version:  %s", const.SERVER_VERSION)
        log.info("  Name:     %s", self.server_name)
        log.info("  ID:       %s", self.server_id)
        # natserver's own line: the compiled PUB loop (natserver/protocol/_cscan.c) or Python alone.
        log.info("  Parser:   %s", PARSER_IMPLEMENTATION)
        # and the delivery loop's common case (natserver/server/_croute.c) or Python alone.
        log.info("  Delivery: %s", DELIVERY_IMPLEMENTATION)
        window = self.busy_poll_window()
        if window:
            self.poller = busypoll.BusyPoller(self, window)
        # natserver's own line too: how long it polls after client messages (busypoll.py).
        log.info("  Busy poll: %s", go_duration(window) if window else "off")
        if options.config_file:
            log.info("Using configuration file: %s %s", options.config_file,
                     f"({options.config_digest})" if options.config_digest else "")
        if plaintext_password_warning(options):
            log.warning("Plaintext passwords detected, use nkeys or bcrypt")
        port = 0 if options.port == const.RANDOM_PORT else options.port
        host = None if options.host in ("", "0.0.0.0") else options.host
        try:
            if not self.client_listener:
                self.listeners = []
            elif self.listening_sockets:  # bound before the imports (natserver.launch)
                self.listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(sock)) for sock in self.listening_sockets]
                self.listening_sockets = None
            else:
                self.listeners = await open_listeners(host, port)  # every address: dual-stack
        except OSError as exc:
            # nats-server's fatal line, once; the command line then exits 1 without repeating it.
            error = listen_error(options.host or "0.0.0.0", port, exc)
            log.critical('Error listening on port: %s:%d, "%s"', options.host, options.port, error)
            raise error from exc
        self.port = self.listeners[0].socket.getsockname()[1] if self.listeners else 0
        self._info_base = self._make_info_base()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                if options.http_port:
                    # nats-server starts monitoring before the client listener, so a wrapper
                    # that saw "Server is ready" can query it at once.
                    from .monitor import serve_monitor

                    self.monitor = await nursery.start(serve_monitor, self)
                for subsystem in self.subsystems:
                    if subsystem.wanted(options):
                        setattr(self, subsystem.name, await nursery.start(subsystem.start, self))
                nursery.start_soon(self.ping_timers.run)
                nursery.start_soon(self.reclaimer.run)
                if self.poller is not None:
                    nursery.start_soon(self.poller.run)
                if self.early_greeter is not None:
                    self._serve_greeted(nursery)
                for listener in self.listeners:
                    nursery.start_soon(self.accept_loop, listener, self.serve_client)
                if self.listeners:
                    log.info("Listening for client connections on %s:%d", options.host, self.port)
                if options.tls is not None and self.listeners:
                    log.info("TLS required for client connections")
                if self.before_ready is not None:
                    self.before_ready(self)
                log.info("Server is ready")
                task_status.started(self)
                await self._stopped.wait()
                nursery.cancel_scope.cancel()
        finally:
            self._nursery = None
            if self.early_greeter is not None:  # the server did not get as far as serving
                self.early_greeter.close()
                self.early_greeter = None
            for listener in self.listeners:
                with trio.CancelScope(shield=True):
                    await listener.aclose()
            log.info("Server Exiting..")

    def adopt_early(self, greeter: EarlyGreeter) -> None:
        """Be the server whose INFO ``greeter`` has been sending while this one was imported
        (early.py): its identity now, the connections it greeted once the server runs."""
        identity = greeter.identity
        if not self.options.server_name:
            self.server_name = identity.server_id
        self.server_id = identity.server_id
        self.xkey, self._xkey_private = identity.xkey, identity.xkey_private
        self.early_greeter = greeter

    def _serve_greeted(self, nursery: trio.Nursery) -> None:
        """Serve the connections the early greeter took, as if accept_loop had (their INFO
        went out already); close them if this server's INFO is not the one they were sent."""
        greeter, self.early_greeter = self.early_greeter, None
        assert greeter is not None
        greeted = greeter.handover()
        if greeted:
            self._next_cid = max(self._next_cid, greeted[-1][1])
        if greeter.base != self._info_base:
            log.debug("Closing %d connections greeted before the start: the options changed the INFO", len(greeted))
            for conn, *_ in greeted:
                conn.close()
            return
        if greeted:
            log.debug("Serving %d connections greeted before the start", len(greeted))
        for conn, cid, ip, port in greeted:
            nursery.start_soon(partial(self.serve_client, conn, ip, port, greeted_cid=cid))

    async def accept_loop(self, listener: trio.SocketListener, handle) -> None:
        """Accept connections until lame duck or shutdown, each served by ``handle(sock, ip,
        port)`` in a task of its own (the client listener's, and a front-end's such as
        WebSocket; the peer's address is the one accept gave). Out of
        descriptors or memory, it backs off as nats-server does instead of spinning or dying.

        One wake-up accepts every connection waiting (up to ACCEPT_BATCH), through a stdlib
        socket object on the listener's own descriptor (not a duplicate, which would keep the
        port open after lame duck closes the listener): trio's ``accept`` yields to the
        scheduler after each one, which in a storm of connects cost a scheduler pass per
        connection (5000 connects: 104 -> 82 us of CPU each). The handler gets the accepted
        stdlib socket (non-blocking, TCP_NODELAY), not a trio SocketStream: building one costs
        5 us and a system call a connection, and a plain client rarely needs it (see
        Client.stream); a handler that does wraps the socket itself."""
        fd = listener.socket.fileno()
        family = listener.socket.family
        acceptor = socket.socket(fileno=fd)  # borrowed: detached, never closed, at the end
        # The accepts below go until EAGAIN: a blocking descriptor would block the whole
        # server in accept() (as the early greeter's once did; the flag is the descriptor's).
        acceptor.setblocking(False)
        sleep = ACCEPT_MIN_SLEEP
        nursery = self._nursery
        assert nursery is not None  # run() opened it before the listeners
        try:
            while not self.lame_duck:
                if listener.socket.fileno() != fd:
                    return  # closed (its number may already be someone else's)
                try:
                    await trio.lowlevel.wait_readable(fd)
                except (trio.ClosedResourceError, OSError):
                    return  # the listener closed (shutdown)
                for _ in range(ACCEPT_BATCH):
                    if self.lame_duck:
                        return
                    try:
                        # _accept (what socket.accept calls) then a socket of known family and
                        # type: accept() converts both to enums, 1.5 us a connection.
                        conn_fd, peer = acceptor._accept()  # type: ignore[attr-defined]  # (CPython's, above)
                    except BlockingIOError:
                        break
                    except OSError as exc:
                        if exc.errno in _ACCEPT_RESOURCE_ERRORS:
                            log.error("Temporary Client Accept Error(%r), sleeping %dms", exc, sleep * 1000)
                            await trio.sleep(sleep)
                            sleep = min(sleep * 2, ACCEPT_MAX_SLEEP)
                            break
                        if self.shutting_down or self.lame_duck:
                            return
                        if exc.errno in _ACCEPT_TRANSIENT_ERRORS:
                            continue  # (the peer gave up before we took it: as trio does)
                        raise
                    sleep = ACCEPT_MIN_SLEEP
                    conn = socket.socket(family, socket.SOCK_STREAM, 0, fileno=conn_fd)
                    # What trio's SocketStream would do but its TCP_NOTSENT_LOWAT (only its
                    # send_all needs that, and building the stream sets it).
                    conn.setblocking(False)
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    nursery.start_soon(handle, conn, peer_ip(peer[0]), peer[1])
        finally:
            acceptor.detach()

    async def serve_client(self, stream: trio.abc.Stream | socket.socket, ip: str, port: int, *, tls: bool = True,
                           greeted_cid: int | None = None) -> None:
        """Serve a NATS client on an accepted ``stream`` until it closes: the client listener's
        connections (a non-blocking stdlib socket, see accept_loop), and those a front-end
        carries over another transport (WebSocket) with ``tls=False`` (that transport did its
        own TLS). Call from a task of its own. ``greeted_cid``: the connection got its INFO,
        as that client id, from the early greeter (early.py)."""
        if greeted_cid is None:
            self._next_cid += 1
            cid = self._next_cid
        else:
            cid = greeted_cid
        client = Client(self, stream, cid, ip, port)
        if self.auth is not None and self.auth.nonce_required:
            client.nonce = new_nonce()
        info = self.info_for(client) if greeted_cid is None else b""
        self.total_connections += 1
        if self.connection_hook is not None and self.connection_hook(client, "accept"):
            await client.close_transport()
            return
        if len(self.clients) >= self.options.max_connections or self.shutting_down:
            # server.go: INFO first, then the error, then close.
            log.error("%s:%d - cid:%d - Maximum Connections Exceeded", ip, port, cid)
            with trio.move_on_after(self.options.write_deadline):
                try:
                    await client.stream.send_all(info + errors.MAX_CONNECTIONS.wire)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    pass
            await client.close_transport()
            return
        self.clients[cid] = client
        log.debug("%s:%d - cid:%d - Client connection created", ip, port, cid)
        tls_config = self.tls if tls else None
        if tls_config is not None:
            # The INFO goes out in plain text, then the TLS handshake; with handshake_first
            # (2.10+) the handshake comes first and the INFO after it, over TLS.
            sent = await self._start_tls(client, client.stream, info, tls_config)
            if sent is None:
                return
            info = sent
        await client.run(info)

    async def _start_tls(self, client: Client, stream, info: bytes, tls) -> bytes | None:
        """Send INFO, then do the server side of the TLS handshake (bounded by the TLS
        timeout); on success the client reads and writes through TLS. server.go createClient.
        Returns what the client has still to be sent (the INFO, with handshake_first), or None
        when the connection is over."""
        label = f"{client.ip}:{client.port} - cid:{client.cid}"
        transport = stream
        if tls.handshake_first:
            # server.go createClient (2.10+): nothing before the client's handshake; with a
            # fallback delay, a client that says nothing by then gets INFO in plain text and
            # goes on as without handshake_first.
            handshake_now = True
            if tls.fallback_delay > 0:
                prefix = await tls_module.read_prefix(stream, tls.fallback_delay)
                if prefix:
                    transport = tls_module.PrefixedStream(stream, prefix)
                handshake_now = bool(prefix)
            if handshake_now:
                if not await self._tls_handshake(client, stream, transport, tls, label):
                    return None
                return self.info_for(client, tls_required=True)
        failed = False
        with trio.move_on_after(self.options.write_deadline):
            try:
                await stream.send_all(info)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                failed = True
        if failed:
            client.close("Write Error")
            await trio.aclose_forcefully(stream)
            return None
        if self.options.allow_non_tls:
            prefix = await tls_module.read_prefix(stream, tls.timeout if tls.timeout > 0 else tls_module.DEFAULT_TLS_TIMEOUT)
            if prefix:
                transport = tls_module.PrefixedStream(stream, prefix)
            if prefix[:1] != b"\x16":
                client.stream = transport  # plain text, as the client chose
                return b""
        if not await self._tls_handshake(client, stream, transport, tls, label):
            return None
        return b""

    async def _tls_handshake(self, client: Client, stream, transport, tls, label: str) -> bool:
        """The server side of the handshake over ``transport``; on success the client reads and
        writes through TLS, on failure it is closed (TLS Handshake Failure)."""
        log.debug("%s - Starting TLS client connection handshake", label)
        ssl_stream, error = await tls_module.handshake(transport, tls)
        if ssl_stream is None:
            if error == "i/o timeout":
                local = stream.socket.getsockname()
                error = f"read tcp {peer_ip(local[0])}:{local[1]}->{client.ip}:{client.port}: i/o timeout"
            log.error("%s - TLS handshake error: %s", label, error)
            client.close("TLS Handshake Failure")
            await trio.aclose_forcefully(stream)
            return False
        client.stream = ssl_stream
        client.tls_stream = ssl_stream
        log.debug("%s - TLS handshake complete", label)
        version = ssl_stream.version() or ""
        cipher = (ssl_stream.cipher() or ("",))[0]
        log.debug("%s - TLS version %s, cipher suite %s", label, version.replace("TLSv", ""), cipher)
        return True

    def refresh_info(self) -> None:
        """Rebuild INFO from the current options (after a config reload), with the users,
        accounts and TLS they now configure; connected clients are checked again."""
        if self.auth is not None and self.auth.options is not self.options:
            old = self.auth.options
            lines = self.configure_security(self.options)
            for line in lines:
                log.info("%s", line)
            if lines or _auth_fields(old) != _auth_fields(self.options):
                from .signals import reauthorize_clients

                reauthorize_clients(self)
        if self.port is not None:
            self._info_base = self._make_info_base()

    def _make_info_base(self) -> dict:
        options = self.options
        tls = options.tls
        return info_base(
            self.server_id, self.server_name, options.host, self.port or 0, options.headers,
            options.max_payload, bool(options.jetstream),
            auth_required=self.auth is not None and self.auth.info_auth_required,
            tls_required=tls is not None and not options.allow_non_tls,
            tls_verify=tls is not None and bool(tls.verify),
            tls_available=tls is not None and bool(options.allow_non_tls),
        )

    def info_for(self, client: Client, connect_info: bool = False, tls_required: bool = False,
                 lame_duck: bool = False) -> bytes:
        """The INFO ``client`` gets on connect, or (``connect_info``) the one nats-server 2.10+
        sends a protocol-1 client after its first PONG (client.go processPing): the same
        without the nonce, with the account the client is bound to. ``lame_duck``: the INFO
        says the server is in lame duck mode (a system request's LDM of one client)."""
        base = self._info_base
        if tls_required and not base.get("tls_required"):
            # server.go createClient: a client that did the handshake first is told TLS is
            # required even where allow_non_tls offers it (tls_available stays).
            base = _with_tls_required(base)
        connect = None
        if connect_info:
            account = client.account.name if client.account is not None else GLOBAL_ACCOUNT
            connect = {"connect_info": True, "remote_account": account}
            if self.system is not None and account == self.system.name:
                connect["acc_is_sys"] = True
        return client_info(
            base, client.cid, client.ip, self.xkey,
            nonce=client.nonce.decode() if client.nonce and not connect_info else None,
            domain=self.options.jetstream_domain if self.options.jetstream else None,
            ldm=self.lame_duck or lame_duck, connect=connect, dumps=orjson.dumps,
        )

    def make_internal_client(self, sublist) -> Client:
        """A new connection-less client of this server in ``sublist``'s subject space (an
        account's own internal client is made this way, so accounts need not know Client)."""
        return Client.internal(self, sublist)

    @property
    def internal_client(self) -> Client:
        """The server's own connection-less client: it publishes server.publish() messages
        and owns internal subscriptions."""
        if self._internal is None:
            self._internal = Client.internal(self, self.sublist)
        return self._internal

    def subscribe_internal(self, subject: str | bytes, callback, queue: str | bytes | None = None):
        """Call ``callback(subject, reply, headers, payload)`` (bytes; headers None or the
        NATS/1.0 block) for every message on ``subject``, synchronously, while the publisher's
        chunk is being handled. Returns the subscription, for ``unsubscribe_internal``."""
        as_bytes = lambda v: v.encode() if isinstance(v, str) else v  # noqa: E731
        self._internal_sids += 1
        queue = as_bytes(queue) if queue else None
        return self.internal_client.subscribe_callback(as_bytes(subject), callback, b"%d" % self._internal_sids, queue)

    def unsubscribe_internal(self, sub) -> None:
        self.internal_client.remove_subscription(sub)

    def publish(self, subject: str | bytes, payload: bytes = b"", reply: str | bytes | None = None,
                headers: bytes | None = None, flush: bool = True) -> bool:
        """Publish a message from the server itself (no echo rules apply; not counted as a
        client's). ``headers`` is a complete ``NATS/1.0`` header block. Call from trio.
        With ``flush=False`` the output waits for the next ``flush_touched()`` (a publisher's
        read loop does one after each chunk), so many responses go out in one write. Says
        whether anybody took it (a subscriber, a server callback, a route or leaf node)."""
        if subject.__class__ is not bytes:  # (JetStream's acks, the most of these: bytes already)
            subject = subject.encode() if isinstance(subject, str) else bytes(subject)
        if reply is not None and reply.__class__ is not bytes:
            reply = reply.encode() if isinstance(reply, str) else bytes(reply)
        body = headers + payload if headers else payload
        header_size = len(headers) if headers else -1
        sizes = b"%d %d" % (len(headers), len(body)) if headers else b"%d" % len(body)
        delivering, self.delivering = self.delivering, None  # a publish of its own, not a delivery
        try:
            taken = self.internal_client.publish(subject, reply, header_size, sizes, body)
        finally:
            self.delivering = delivering
        if flush:
            self.flush_touched()
        return taken

    # The busy_poll of an Options that leaves it to the process: off in-process; the binary
    # (cli.run_server) sets const.DEFAULT_BUSY_POLL.
    default_busy_poll = 0.0

    def busy_poll_window(self) -> float:
        """How long this server polls before sleeping after client messages (0: never)."""
        window = self.options.busy_poll
        if window is None:
            window = self.default_busy_poll
        if window and busypoll.usable_cpus() < 2:
            return 0.0  # the poller would hold the one CPU its clients need
        return window

    # -- hooks the clients call ---------------------------------------------------------------

    def wake_poller(self) -> None:
        """Client messages arrived while the busy poller slept: start its window."""
        poller = self.poller
        if poller is not None:
            poller.wake()

    def flush_touched(self) -> None:
        """Send the output of every client given some since the last flush (Client.flush),
        after the work deferred to it (before_flush)."""
        if self.before_flush:
            hooks, self.before_flush = self.before_flush, []
            for hook in hooks:
                hook()
        delivered_at = 0.0
        for client in self.touched:
            if client.out_msgs != client._seen_out_msgs:
                # Messages delivered are activity (client.go flushClients sets the receivers'
                # last); protocol replies (PONG, +OK) are not.
                client._seen_out_msgs = client.out_msgs
                client.last_activity = delivered_at = delivered_at or clock.now()
            client.flush()
        self.touched.clear()
        if self.touched_routes:
            routes, self.touched_routes = self.touched_routes, []
            for route in routes:
                route.flush()

    def client_closed(self, client: Client) -> None:
        if self.clients.pop(client.cid, None) is None:
            return
        self.touched.discard(client)
        self.ping_timers.forget()  # (its timer entries must not keep it alive)
        self.reclaimer.note_closed(client.parser.buffered + client.pending)
        if self.accounts is not None:
            self.accounts.unregister(client)
        self.closed_clients.append(ClosedRecord(connection_record(client)))
        for observer in self.connection_observers:
            observer.client_closed(client)
        if log.isEnabledFor(logging.DEBUG):  # (log_prefix is built before debug's own check)
            log.debug("%s - Client connection closed: %s", log_prefix(client), client.close_reason)

    def _compact(self) -> None:
        """What the clients that have gone still hold, let go (the reclaimer, after many closes):
        their ping timers' entries, and the room the client tables grew to."""
        self.ping_timers.compact()
        shrink_dict(self.clients)
        shrink_set(self.touched)

    def note_slow_consumer(self, client: Client, detail: str) -> None:
        self.slow_consumers += 1
        log.info("%s - Slow Consumer Detected: %s", log_prefix(client), detail)

    def authenticate(self, client: Client, opts: dict) -> bool:
        """Check CONNECT credentials (see _auth.Authenticator); secrets are never logged.
        A client refused because its account is full gets ``client._auth_error`` set."""
        assert self.auth is not None  # configure_security built it in __init__
        try:
            return self.auth.authenticate(client, opts)
        except AccountLimitError:
            client._auth_error = errors.MAX_ACCOUNT_CONNECTIONS
            return False

    async def on_signal(self, signum: int, nursery: trio.Nursery) -> None:
        """SIGHUP (reload), SIGUSR1 (reopen log), SIGUSR2 (lame duck): see server/signals.py."""
        from .signals import handle_signal

        await handle_signal(self, signum, nursery)

    # -- stopping -----------------------------------------------------------------------------

    async def shutdown(self) -> None:
        """Close every client ("Server Shutdown") and stop listening; returns when stopped."""
        self.stop()
        # Let client tasks observe their cancellation before we return.
        await trio.lowlevel.checkpoint()

    def stop(self) -> None:
        """Synchronous version of shutdown(): everything is cancelled, nothing awaited."""
        if self.shutting_down:
            return
        self.shutting_down = True
        for client in list(self.clients.values()):
            client.close("Server Shutdown", flush=False)
        self._stopped.set()


def _auth_fields(options: Options) -> tuple:
    return (options.username, options.password, options.authorization, options.users, options.nkeys,
            options.no_auth_user, options.accounts, options.trusted_operators, options.trusted_keys,
            options.resolver_preload)


def _with_tls_required(info: dict) -> dict:
    """``info`` with tls_required set in its place of nats-server's Info struct (after
    auth_required, before tls_verify and max_payload)."""
    out: dict = {}
    for key, value in info.items():
        if key in ("tls_verify", "tls_available", "max_payload") and "tls_required" not in out:
            out["tls_required"] = True
        out[key] = value
    return out
