"""Listening sockets as nats-server's Go listeners open them: on every interface one
dual-stack socket (Go's net.Listen("tcp", "0.0.0.0:p")), so a client that dials localhost and
gets ::1 first connects as well as one that gets 127.0.0.1; and the peers they accept named as
Go names them. For the client listener, the monitor, the WebSocket, route and leafnode
listeners alike.

Standard library only, and light: natserver.launch binds the client port with
``bind_sockets`` before the server's modules (and trio) are imported."""

from __future__ import annotations

import errno
import socket

__all__ = ["WILDCARD_HOSTS", "LISTEN_BACKLOG", "bind_sockets", "peer_ip"]

# Hosts that mean every interface: Go's net.Listen("tcp", "0.0.0.0:p") (and "[::]:p") opens one
# dual-stack socket (IPv6 with IPV6_V6ONLY off).
WILDCARD_HOSTS = ("", "0.0.0.0", "::")
# trio.open_tcp_listeners' default backlog (the kernel caps it at somaxconn).
LISTEN_BACKLOG = 0xFFFF
# An IPv4 peer of a dual-stack socket is seen as ::ffff:a.b.c.d; Go prints it a.b.c.d.
_V4_MAPPED_PREFIX = "::ffff:"


def peer_ip(ip: str) -> str:
    """An accepted peer's address as nats-server reports it (IPv4-mapped IPv6 as IPv4)."""
    if ip.startswith(_V4_MAPPED_PREFIX) and "." in ip:
        return ip[len(_V4_MAPPED_PREFIX):]
    return ip


def _dual_stack_socket(port: int, backlog: int) -> socket.socket | None:
    """One IPv6 socket on every address that takes IPv4 too, or None where IPv6 is missing or
    disabled (then IPv4 alone, as Go falls back)."""
    if not socket.has_ipv6:
        return None
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    except OSError:
        return None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("::", port))
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            raise  # the port, not IPv6, is the problem: reported as for IPv4
        return None
    sock.listen(backlog)
    return sock


def bind_sockets(host: str | None, port: int, backlog: int = LISTEN_BACKLOG) -> list[socket.socket]:
    """Listening stdlib sockets for ``host`` (None or a WILDCARD_HOSTS entry: every address,
    dual-stack) and ``port`` (0: a random one), as Go's net.Listen opens them: one socket; for
    a name, on one of its addresses (IPv4 first). Raises OSError."""
    if host is None or host in WILDCARD_HOSTS:
        sock = _dual_stack_socket(port, backlog)
        if sock is not None:
            return [sock]
        host = "0.0.0.0"
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, sockaddr = min(infos, key=lambda info: info[0] != socket.AF_INET)
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(sockaddr)
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return [sock]
