"""NATS Streaming (STAN) on natserver: the streaming protocol served by an engine that is a
client of a NATS server (natserver's own router, or with ``-ns`` another server over a client
connection), with channels kept as streams of natserver's JetStream store.

``enable_stan(server)`` is started by the core server (natserver.app lists it as a subsystem,
after JetStream: channels may be its streams) when ``Options.stan`` is set (``--stan``, ``-ns``
or a ``streaming {}`` block); it also adds the ``/streaming`` monitoring endpoints. Layout:
``pb.py`` (the protocol messages), ``errors.py`` (nats-streaming-server's error texts),
``natserver.config.stan`` (``StanOptions`` and its defaults: the config layer reads them),
``store.py`` (channels as streams, the subscription state), ``transport.py`` (how the engine
reaches NATS), ``engine.py`` (the protocol), ``monitor.py`` (``/streaming/...`` endpoints), and
``client.py``, a STAN client for asyncio on nats-py (for users; the server never imports it).
"""

import trio

from ..config.stan import ChannelLimits, StanConfigError, StanOptions
from .engine import StanEngine, serve_stan
from .monitor import respond as _monitor_respond
from .store import stream_name

__all__ = ["ChannelLimits", "StanConfigError", "StanEngine", "StanOptions", "enable_stan", "serve_stan", "stream_name"]


async def enable_stan(server, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """The subsystem entry: serve ``server.options.stan`` and its monitoring endpoints."""
    server.monitor_routes["/streaming"] = _monitor_respond
    try:
        await serve_stan(server, server.options.stan, task_status=task_status)
    finally:
        server.monitor_routes.pop("/streaming", None)
