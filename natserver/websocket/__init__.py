"""NATS over WebSocket: the ``websocket {}`` listener, as nats-server 2.9.10 has it.

Browser clients (nats.ws, nats.js) and nats-py's websocket transport connect here. After the
HTTP upgrade (``handshake``, checked as nats-server checks it: method, headers, origin
rules; permessage-deflate when configured and offered) the connection is a plain NATS client
of the core server, carried in WebSocket frames (``stream``). With ``tls {}`` the TLS
handshake comes first (wss://); without it nats-server requires ``no_tls: true``.

The core server does not know this package: it is started as a subsystem (natserver.app) and
hands each upgraded connection to ``server.serve_client``.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from functools import partial

import trio

from ..auth import tls as tls_module
from ..config.options import WEBSOCKET_HANDSHAKE_TIMEOUT, WebsocketOptions
from ..server.listen import open_listeners
from .handshake import HandshakeReader, OriginPolicy, Refusal, Upgrade
from .stream import WebSocketStream

__all__ = ["enable_websocket", "WebSocketListener", "WebSocketStream"]

log = logging.getLogger("natserver")

READ_SIZE = 4096  # bytes read at a time during the HTTP upgrade


@dataclass
class WebSocketListener:
    """The running listener (``server.websocket``): where it listens."""

    host: str
    port: int
    tls: bool
    options: WebsocketOptions

    def varz(self) -> dict:
        """/varz "websocket" (monitor.go WebsocketOptsVarz, every field omitempty)."""
        o = self.options
        out = {"host": o.host, "port": self.port}
        if o.advertise:
            out["advertise"] = o.advertise
        if o.handshake_timeout:
            out["handshake_timeout"] = int(o.handshake_timeout * 1e9)
        if o.no_tls:
            out["no_tls"] = True
        if o.same_origin:
            out["same_origin"] = True
        if o.allowed_origins:
            out["allowed_origins"] = list(o.allowed_origins)
        if o.compression:
            out["compression"] = True
        return out


async def enable_websocket(server, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Listen for WebSocket clients of ``server``; ``task_status.started(listener)``."""
    options: WebsocketOptions = server.options.websocket
    port = 0 if options.port == -1 else options.port
    host = None if options.host in ("", "0.0.0.0") else options.host
    try:
        listeners = await open_listeners(host, port)  # every address: dual-stack, as nats-server
    except OSError as exc:
        log.critical('Error listening on websocket port: %s:%d, "%s"', options.host, options.port, exc.strerror or exc)
        raise
    bound = listeners[0].socket.getsockname()[1]
    scheme = "wss" if options.tls is not None else "ws"
    log.info("Listening for websocket clients on %s://%s:%d", scheme, options.host, bound)
    if options.tls is None:
        log.warning("Websocket not configured with TLS. DO NOT USE IN PRODUCTION!")
    listener = WebSocketListener(options.host, bound, options.tls is not None, options)
    origins = OriginPolicy(options.same_origin, options.allowed_origins)
    try:
        async with trio.open_nursery() as nursery:
            for each in listeners:
                nursery.start_soon(server.accept_loop, each, partial(_serve_connection, server, origins=origins))
            task_status.started(listener)
    finally:
        for each in listeners:
            with trio.CancelScope(shield=True):
                await each.aclose()


async def _serve_connection(server, sock: socket.socket, ip: str, port: int, *, origins: OriginPolicy) -> None:
    options: WebsocketOptions = server.options.websocket
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(sock))  # (Server.accept_loop hands a socket)
    transport: trio.abc.Stream = stream
    try:
        if options.tls is not None:
            tls_stream, error = await tls_module.handshake(stream, options.tls)
            if tls_stream is None:
                log.error("%s:%d - websocket TLS handshake error: %s", ip, port, error)
                await trio.aclose_forcefully(stream)
                return
            transport = tls_stream
        decision = await _upgrade(transport, origins, options)
        if isinstance(decision, Refusal):
            if decision.reason != "EOF":
                log.error("%s:%d - websocket handshake error: %s", ip, port, decision.reason)
            if decision.response:
                with trio.move_on_after(server.options.write_deadline):
                    await transport.send_all(decision.response)
            await trio.aclose_forcefully(transport)
            return
        with trio.move_on_after(server.options.write_deadline) as timer:
            await transport.send_all(decision.response)
        if timer.cancelled_caught:
            await trio.aclose_forcefully(transport)
            return
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        await trio.aclose_forcefully(transport)
        return
    await server.serve_client(WebSocketStream(transport, decision.compress), decision.client_ip or ip, port, tls=False)


async def _upgrade(transport: trio.abc.Stream, origins: OriginPolicy, options: WebsocketOptions) -> Upgrade | Refusal:
    reader = HandshakeReader(origins, options.compression, options.tls is not None)
    timeout = options.handshake_timeout or WEBSOCKET_HANDSHAKE_TIMEOUT
    with trio.move_on_after(timeout):
        while True:
            data = await transport.receive_some(READ_SIZE)
            decision = reader.feed(bytes(data))  # (the same object when it is bytes already)
            if decision is not None:
                return decision
    return Refusal(b"", "i/o timeout")
