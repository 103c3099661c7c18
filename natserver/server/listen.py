"""Opening listeners (natserver.server.binding's sockets, as trio listeners), the URLs a
listener is reached at (the ports file), and why one could not be opened, as nats-server says
it (``listen tcp HOST:PORT: bind: address already in use``)."""

from __future__ import annotations

import ipaddress
import socket
import struct

import trio

from ..protocol.gotext import go_listen_error
from .binding import WILDCARD_HOSTS, bind_sockets

__all__ = ["ListenError", "listen_error", "open_listeners", "interface_addresses", "listener_urls"]


class ListenError(OSError):
    """A listener could not be opened (port in use, address not available): ``str()`` is
    nats-server's text for it, already logged at [FTL] level."""

    def __str__(self) -> str:
        return self.strerror or ""


def listen_error(host: str, port: int, exc: OSError) -> ListenError:
    return ListenError(exc.errno, go_listen_error(host, port, exc))


async def open_listeners(host: str | None, port: int) -> list:
    """``bind_sockets`` as trio SocketListeners (what trio.open_tcp_listeners gives, but one
    dual-stack socket for every address, and one port)."""
    return [trio.SocketListener(trio.socket.from_stdlib_socket(sock)) for sock in bind_sockets(host, port)]


# -- the addresses a listener on every interface is reached at ----------------------------------

# linux/netlink.h and linux/rtnetlink.h
_NLMSG_DONE = 3
_NLMSG_ERROR = 2
_RTM_GETADDR = 22
_RTM_NEWADDR = 20
_NLM_F_REQUEST = 0x1
_NLM_F_DUMP = 0x300
_IFA_ADDRESS = 1
_IFA_LOCAL = 2
_NLMSG_HEADER = struct.Struct("=IHHII")
_IFADDRMSG = struct.Struct("=BBBBI")
_RTATTR = struct.Struct("=HH")


def _align(n: int) -> int:
    return (n + 3) & ~3


def interface_addresses() -> list[str]:
    """Every address of every interface, in the order Go's net.Interfaces() and Addrs() give
    them (interface index order; per interface IPv4 then IPv6, as the kernel lists them): what
    nats-server's resolveHostPorts lists for a listener on every interface. Read from the
    kernel over netlink (Linux); [] where that is not available."""
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    except (AttributeError, OSError):
        return []
    found: list[tuple[int, str]] = []
    with sock:
        sock.settimeout(1.0)
        request = _NLMSG_HEADER.pack(_NLMSG_HEADER.size + 4, _RTM_GETADDR, _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0)
        try:
            sock.sendto(request + struct.pack("=Bxxx", socket.AF_UNSPEC), (0, 0))
            done = False
            while not done:
                data = sock.recv(1 << 16)
                if not data:
                    break
                offset = 0
                while offset + _NLMSG_HEADER.size <= len(data):
                    length, kind, _, _, _ = _NLMSG_HEADER.unpack_from(data, offset)
                    if length < _NLMSG_HEADER.size or kind in (_NLMSG_DONE, _NLMSG_ERROR):
                        done = True
                        break
                    if kind == _RTM_NEWADDR:
                        entry = _parse_address(data[offset + _NLMSG_HEADER.size:offset + length])
                        if entry is not None:
                            found.append(entry)
                    offset += _align(length)
        except OSError:
            return []
    found.sort(key=lambda entry: entry[0])  # stable: each interface keeps the kernel's order
    return [address for _, address in found]


def _parse_address(body: bytes) -> tuple[int, str] | None:
    """(interface index, address) of one RTM_NEWADDR message (Go's newAddr: IFA_LOCAL when
    there is one, point-to-point, else IFA_ADDRESS)."""
    if len(body) < _IFADDRMSG.size:
        return None
    family, _, _, _, index = _IFADDRMSG.unpack_from(body)
    attributes: dict[int, bytes] = {}
    offset = _IFADDRMSG.size
    while offset + _RTATTR.size <= len(body):
        length, kind = _RTATTR.unpack_from(body, offset)
        if length < _RTATTR.size:
            break
        attributes.setdefault(kind, body[offset + _RTATTR.size:offset + length])
        offset += _align(length)
    raw = attributes.get(_IFA_LOCAL) or attributes.get(_IFA_ADDRESS)
    if family == socket.AF_INET and raw is not None and len(raw) >= 4:
        return index, str(ipaddress.IPv4Address(raw[:4]))
    if family == socket.AF_INET6 and raw is not None and len(raw) >= 16:
        return index, str(ipaddress.IPv6Address(raw[:16]))
    return None


def listener_urls(scheme: str, host: str | None, port: int) -> list[str]:
    """server.go formatURL: ``scheme://host:port`` for a listener on ``host``; on every
    interface, one URL per interface address (127.0.0.1 alone where they cannot be read)."""
    if host is None or host in WILDCARD_HOSTS:
        hosts = interface_addresses() or ["127.0.0.1"]
    else:
        hosts = [host]
    return [f"{scheme}://[{h}]:{port}" if ":" in h else f"{scheme}://{h}:{port}" for h in hosts]
