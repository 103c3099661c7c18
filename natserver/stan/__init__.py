"""NATS Streaming (STAN) on natserver: the streaming protocol served by an engine that is a
client of natserver's own router, with channels kept as streams of natserver's JetStream store.

``serve_stan(server, stan_options)`` is started by ``Server.run`` when ``Options.stan`` is set
(``--stan`` or a ``streaming {}`` block). Layout: ``pb.py`` (the protocol messages),
``errors.py`` (nats-streaming-server's error texts), ``config.py`` (``StanOptions`` and its
defaults), ``store.py`` (channels as streams, the subscription state), ``engine.py`` (the
protocol), ``monitor.py`` (``/streaming/...`` endpoints).
"""

from .config import ChannelLimits, StanConfigError, StanOptions
from .engine import StanEngine, serve_stan
from .store import stream_name

__all__ = ["ChannelLimits", "StanConfigError", "StanEngine", "StanOptions", "serve_stan", "stream_name"]
