"""``/streaming/serverz``, ``/storez``, ``/clientsz``, ``/channelsz`` (and ``/streaming``) on
the monitoring port, with nats-streaming-server's (v0.25.6, server/monitor.go) fields, field
order, sorting, paging (``offset``, ``limit``: default 1024) and 404 texts.

``natserver.server.monitor`` hands every ``/streaming...`` path to :func:`respond`.
"""

from __future__ import annotations

import logging
import os
import sys

from .. import clock
from ..server.monitor import HTML, JSON, TEXT, go_json, go_time, my_uptime

log = logging.getLogger("natserver")

DEFAULT_LIST_LIMIT = 1024  # monitor.go defaultMonitorListLimit
VERSION = "0.25.6"  # the nats-streaming-server release natserver's STAN layer follows

_ROOT = """<html lang="en">
   <head>
    <link rel="shortcut icon" href="https://nats.io/img/favicon.ico">
    <style type="text/css">
      body { font-family: "Century Gothic", CenturyGothic, AppleGothic, sans-serif; font-size: 22; }
      a { margin-left: 32px; }
    </style>
  </head>
  <body>
    <img src="https://nats.io/img/logo.png" alt="NATS Streaming">
    <br/>
	<a href=./streaming/serverz>server</a><br/>
	<a href=./streaming/storez>store</a><br/>
	<a href=./streaming/clientsz>clients</a><br/>
	<a href=./streaming/channelsz>channels</a><br/>
    <br/>
    <a href=https://docs.nats.io/legacy/stan/intro/monitoring/>help</a>
  </body>
</html>"""


def _atoi(text: str) -> int:
    """strconv.Atoi with the error ignored, as monitor.go does (0 on error)."""
    try:
        return int(text) if text.lstrip("+-").isdigit() else 0
    except ValueError:
        return 0


def respond(monitor, path: str, query) -> tuple[int, str, bytes]:
    engine = monitor.server.stan
    if engine is None:
        return 404, TEXT, b"404 page not found\n"
    monitor._count(path)
    path = path.rstrip("/") or path
    if path == "/streaming":
        return 200, HTML, _ROOT.encode()
    handler = {"/streaming/serverz": serverz, "/streaming/storez": storez, "/streaming/clientsz": clientsz,
               "/streaming/channelsz": channelsz}.get(path)
    if handler is None:
        return 404, TEXT, b"404 page not found\n"
    try:
        result = handler(engine, query)
    except Exception:
        log.exception("monitoring: error handling %s", path)
        return 500, TEXT, b"500 Internal Server Error"
    if isinstance(result, tuple):
        return result
    body = go_json(result)
    callback = query.get("callback")
    if callback:
        return 200, "application/javascript", callback.encode() + b"(" + body + b")"
    return 200, JSON, body


def _totals(engine) -> tuple[int, int]:
    msgs = total = 0
    for channel in engine.channels.values():
        msgs += channel.store.msgs.msgs
        total += channel.store.msgs.bytes
    return msgs, total


def _fds() -> tuple[int, int]:
    try:
        count = len(os.listdir("/proc/self/fd"))
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        return count, soft if soft != resource.RLIM_INFINITY else 0
    except (OSError, ImportError, ValueError):
        return 0, 0


def serverz(engine, query) -> dict:
    now = clock.now()
    msgs, total = _totals(engine)
    subs = sum(len(c.subs) for c in engine.clients.values())
    out = {
        "cluster_id": engine.options.cluster_id,
        "server_id": engine.server_id,
        "version": VERSION,
        "go": "python" + sys.version.split()[0],
        "state": "STANDALONE",
        "now": go_time(now, local=True),
        "start_time": go_time(engine.start_time, local=True),
        "uptime": my_uptime(now - engine.start_time),
        "clients": len(engine.clients),
        "subscriptions": subs,
        "channels": len(engine.channels),
        "total_msgs": msgs,
        "total_bytes": total,
        "in_msgs": engine.in_msgs,
        "in_bytes": engine.in_bytes,
        "out_msgs": engine.out_msgs,
        "out_bytes": engine.out_bytes,
    }
    fds, max_fds = _fds()
    if fds:
        out["open_fds"] = fds
    if max_fds:
        out["max_fds"] = max_fds
    return out


def _limits_json(limits, max_channels: int | None = None) -> dict:
    out = {}
    if max_channels is not None:
        out["max_channels"] = max_channels
    out.update({"max_msgs": limits.max_msgs, "max_bytes": limits.max_bytes, "max_age": int(limits.max_age * 1e9),
                "max_subscriptions": limits.max_subs, "max_inactivity": int(limits.max_inactivity * 1e9)})
    return out


def storez(engine, query) -> dict:
    opts = engine.options
    msgs, total = _totals(engine)
    limits = _limits_json(opts.limits, opts.max_channels)
    if opts.channels:
        limits["channels"] = {name: _limits_json(lim) for name, lim in opts.channels.items()}
    return {"cluster_id": opts.cluster_id, "server_id": engine.server_id, "now": go_time(clock.now(), local=True),
            "type": "FILE" if engine.store.file else "MEMORY", "limits": limits, "total_msgs": msgs,
            "total_bytes": total}


def _subz(sub) -> dict:
    out = {"client_id": sub.client_id or _saved_client(sub), "inbox": sub.inbox, "ack_inbox": sub.ack_inbox}
    if sub.durable_name:
        out["durable_name"] = sub.durable_name
    if sub.queue is not None:
        out["queue_name"] = sub.queue.name
    out.update({"is_durable": sub.is_durable, "is_offline": not sub.client_id, "max_inflight": sub.max_in_flight,
                "ack_wait": sub.ack_wait_secs, "last_sent": sub.last_sent, "pending_count": len(sub.pending),
                "is_stalled": len(sub.pending) >= sub.max_in_flight})
    return out


def _saved_client(sub) -> str:
    if sub.key:  # "<client>-<channel>-<durable>"
        suffix = f"-{sub.channel.name}-{sub.durable_name}"
        if sub.key.endswith(suffix):
            return sub.key[: -len(suffix)]
    return ""


def _clientz(client, subs: bool) -> dict:
    out = {"id": client.id, "hb_inbox": client.hb_inbox, "subs_count": len(client.subs)}
    if subs and client.subs:
        by_channel: dict = {}
        for sub in client.subs:
            by_channel.setdefault(sub.channel.name, []).append(_subz(sub))
        out["subscriptions"] = by_channel
    return out


def _page(query, total: int) -> tuple[int, int, int, int]:
    offset = max(_atoi(query.get("offset")), 0)
    limit = _atoi(query.get("limit"))
    if limit <= 0:
        limit = DEFAULT_LIST_LIMIT
    return offset, limit, min(offset, total), min(offset + limit, total)


def clientsz(engine, query):
    subs = _atoi(query.get("subs")) == 1
    single = query.get("client")
    if single:
        client = engine.clients.get(single)
        if client is None:
            return 404, TEXT, f"Client {single} not found\n".encode()
        return _clientz(client, subs)
    names = sorted(engine.clients)
    offset, limit, lo, hi = _page(query, len(names))
    clients = [_clientz(engine.clients[name], subs) for name in names[lo:hi]]
    return {"cluster_id": engine.options.cluster_id, "server_id": engine.server_id,
            "now": go_time(clock.now(), local=True), "offset": offset, "limit": limit, "count": len(clients),
            "total": len(names), "clients": clients}


def _channelz(engine, channel, subs: bool) -> dict:
    store = channel.store
    msgs = store.msgs
    all_subs = engine.channel_subs(channel)
    out = {"name": channel.name, "msgs": msgs.msgs, "bytes": msgs.bytes,
           "first_seq": msgs.first_seq if msgs.msgs else (msgs.last_seq + 1 if msgs.last_seq else 0),
           "last_seq": msgs.last_seq, "subs_count": len(all_subs)}
    if subs and all_subs:
        out["subscriptions"] = [_subz(sub) for sub in all_subs]
    return out


def channelsz(engine, query):
    subs = _atoi(query.get("subs")) == 1
    name = query.get("channel")
    if name:
        channel = engine.channels.get(name)
        if channel is None:
            return 404, TEXT, f"Channel {name} not found\n".encode()
        return _channelz(engine, channel, subs)
    names = sorted(engine.channels)
    offset, limit, lo, hi = _page(query, len(names))
    out = {"cluster_id": engine.options.cluster_id, "server_id": engine.server_id,
           "now": go_time(clock.now(), local=True), "offset": offset, "limit": limit, "count": hi - lo,
           "total": len(names)}
    if subs:
        channels = [_channelz(engine, engine.channels[n], True) for n in names[lo:hi]]
        if channels:
            out["channels"] = channels
    elif names[lo:hi]:
        out["names"] = names[lo:hi]
    return out
