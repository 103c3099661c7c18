"""Greeting clients before the server runs: the INFO on the wire while trio and the server
are still being imported (issue #33: exec -> INFO received <= 100 ms; Python and trio alone
take ~250 ms of the 335 ms it was).

natserver.launch binds the client port before the imports (as socket activation does). With
that alone a client's connection waits in the kernel's accept queue until the server runs.
An :class:`EarlyGreeter` thread takes those connections as they come and sends each its INFO,
built from the same fields the server will build it from (:func:`info_base`,
:func:`client_info`), so a harness that waits for the INFO, and the client itself, can go on:
what the client sends meanwhile (CONNECT, PING) waits in the socket until the server adopts
the connection (``Server.run``: ``EarlyGreeter.handover``) and serves it as if it had
accepted it itself, client id included. A server whose options turn out to build a different
INFO (the command line said more than the greeting knew) closes those connections instead;
clients reconnect to the real one.

Standard library and the nkeys helpers only: this runs before trio is imported, and orjson
(its import pulls in uuid, zoneinfo, datetime...: ~13 ms) waits until after the greeting: the
greeter writes its INFO with the standard json module (the same bytes for these fields), the
server passes orjson's ``dumps`` (~10x faster, for every connection).
"""

from __future__ import annotations

import json
import os
import select
import socket
import sys
import threading
from collections.abc import Callable

from ..auth.nkeys import PREFIX_SERVER, create_curve_keys, encode_public_key
from ..protocol import const
from .binding import peer_ip

__all__ = ["EarlyGreeter", "Identity", "client_info", "info_base", "make_identity"]

# Connections greeted before the server runs, at most: beyond them the kernel's accept queue
# holds the rest until the server accepts them itself (as it would without a greeter).
MAX_GREETED = 1024
# A greeting is ~450 bytes, always taken whole by a fresh socket's send buffer; a peer that
# somehow does not take it within this long is dropped (it reconnects).
GREETING_SEND_TIMEOUT = 1.0


class Identity:
    """What makes a server's INFO its own: the server id (an nkey server public key) and the
    x25519 key pair announced as ``xkey`` (nats-server 2.10+, server.go NewServer)."""

    __slots__ = ("server_id", "xkey", "xkey_private")

    def __init__(self, server_id: str, xkey: str, xkey_private: bytes) -> None:
        self.server_id = server_id
        self.xkey = xkey
        self.xkey_private = xkey_private


def make_identity() -> Identity:
    server_id = encode_public_key(PREFIX_SERVER, os.urandom(32)).decode()
    xkey, private = create_curve_keys()
    return Identity(server_id, xkey, private)


def info_base(server_id: str, server_name: str, host: str, port: int, headers: bool, max_payload: int,
              jetstream: bool, *, auth_required: bool = False, tls_required: bool = False,
              tls_verify: bool = False, tls_available: bool = False) -> dict:
    """INFO's fields common to every client, in nats-server's Info struct order (server.go):
    clients do not care, but byte-level comparisons with nats-server do."""
    info = {
        "server_id": server_id,
        "server_name": server_name,
        "version": const.SERVER_VERSION,
        "proto": const.PROTO_VERSION,
        "git_commit": const.GIT_COMMIT_FIELD,
        "go": f"{const.GO_VERSION_FIELD}{sys.version.split()[0]}",
        "host": host,
        "port": port,
        "headers": headers,
    }
    if auth_required:
        info["auth_required"] = True
    if tls_required:
        info["tls_required"] = True
    if tls_verify:
        info["tls_verify"] = True
    if tls_available:
        info["tls_available"] = True
    info["max_payload"] = max_payload
    if jetstream:
        info["jetstream"] = True
    return info


def json_dumps(value: dict) -> bytes:
    """orjson.dumps' bytes for INFO's fields (compact, UTF-8 unescaped), from the standard
    json module."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def client_info(base: dict, cid: int, ip: str, xkey: str, *, nonce: str | None = None,
                domain: str | None = None, ldm: bool = False, connect: dict | None = None,
                dumps: Callable[[dict], bytes] = json_dumps) -> bytes:
    """The INFO line one client gets: ``base`` then the client's own fields, in Go's order
    (client_id, client_ip, nonce, domain, ldm, connect_info and the account fields of the
    INFO after the first PONG, api_lvl, xkey)."""
    info = dict(base)
    info["client_id"] = cid
    info["client_ip"] = ip
    if nonce:
        info["nonce"] = nonce
    if domain:
        info["domain"] = domain
    if ldm:
        info["ldm"] = True
    if connect:
        info.update(connect)
    if const.JS_API_LEVEL:  # Go's omitempty: level 0 is not sent
        info["api_lvl"] = const.JS_API_LEVEL
    info["xkey"] = xkey
    return b"INFO " + dumps(info) + b" \r\n"


class EarlyGreeter:
    """A thread that accepts clients on the early sockets and sends each its INFO until the
    server takes over (:meth:`handover`). Client ids count from 1, as the server's do."""

    def __init__(self, sockets: list[socket.socket], identity: Identity, base: dict) -> None:
        self.identity = identity
        self.base = base
        self._sockets = sockets
        # (socket, client id, ip, port) of every connection greeted, in order.
        self._greeted: list[tuple[socket.socket, int, str, int]] = []
        self._wake_read, self._wake_write = socket.socketpair()
        self._thread = threading.Thread(target=self._run, name="natserver-early-greeter", daemon=True)
        self._stopped = False

    def start(self) -> EarlyGreeter:
        self._thread.start()
        return self

    def _run(self) -> None:
        listening = [sock for sock in self._sockets if sock.fileno() >= 0]
        try:
            while len(self._greeted) < MAX_GREETED:
                readable, _, _ = select.select([*listening, self._wake_read], [], [])
                if self._wake_read in readable:
                    return
                for sock in readable:
                    self._accept_all(sock)
        except (OSError, ValueError):
            return  # a socket closed under us: the server (or the exit) is taking over

    def _accept_all(self, listener: socket.socket) -> None:
        # Non-blocking from here on, and left so: the server accepts on this very descriptor
        # (blocking is the descriptor's, shared), and its accept loop takes every waiting
        # connection until EAGAIN. Put back to blocking, a greeting racing the handover left
        # the server's loop blocked in accept() until the next client came: no INFO for
        # seconds, a connect storm at a fraction of its rate (issue #33).
        listener.setblocking(False)
        while len(self._greeted) < MAX_GREETED:
            try:
                conn, peer = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # the peer gave up before we took it; the next select tells
            cid = len(self._greeted) + 1
            ip = peer_ip(peer[0])
            try:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn.settimeout(GREETING_SEND_TIMEOUT)
                conn.sendall(client_info(self.base, cid, ip, self.identity.xkey))
            except OSError:
                conn.close()
                continue
            self._greeted.append((conn, cid, ip, peer[1]))

    def handover(self) -> list[tuple[socket.socket, int, str, int]]:
        """Stop greeting; the connections greeted so far (non-blocking sockets), for the
        server to serve. Idempotent: a second call returns nothing."""
        if self._stopped:
            return []
        self._stopped = True
        try:
            self._wake_write.send(b"x")
        except OSError:
            pass
        if self._thread.is_alive() or self._thread.ident is not None:
            self._thread.join()
        self._wake_read.close()
        self._wake_write.close()
        greeted, self._greeted = self._greeted, []
        for conn, *_ in greeted:
            conn.setblocking(False)
        return greeted

    def close(self) -> None:
        """Stop greeting and drop whatever was greeted (the server did not start)."""
        for conn, *_ in self.handover():
            conn.close()
