"""stan.py (PyPI ``asyncio-nats-streaming`` 0.4.0, the Python STAN client) on nats-py, for
the streaming tests.

stan.py dates from 2019: it passes ``loop=`` to asyncio functions that Python 3.10 removed and
was written for asyncio-nats-client 0.x (``nc.unsubscribe(sid)``, ``nc.publish_request``,
``nc._loop``). Its own dependency ``asyncio-nats-client`` installs a ``nats`` package over
nats-py's, so stan.py is installed without dependencies (``pip install --no-deps
asyncio-nats-streaming==0.4.0``) and borrows a nats-py connection (``nats=nc``) through the
small shim below; its generated ``protocol_pb2`` needs ``protobuf==3.20.3`` (the ``test``
extra). When stan.py is missing, it is installed that way into a cache directory once.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import subprocess
import sys
import tempfile
import warnings

import nats

STAN_PY = "asyncio-nats-streaming==0.4.0"
_CACHE = os.path.join(tempfile.gettempdir(), "natserver-test-asyncio-nats-streaming-0.4.0")


def _import_stan():
    try:
        with warnings.catch_warnings():  # protocol_pb2 (2018) uses protobuf's deprecated descriptor API
            warnings.simplefilter("ignore", DeprecationWarning)
            return importlib.import_module("stan.aio.client")
    except ImportError:
        pass
    if not os.path.isdir(os.path.join(_CACHE, "stan")):
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", _CACHE, STAN_PY],
                       check=True, timeout=180)
    sys.path.append(_CACHE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return importlib.import_module("stan.aio.client")


class _NoLoopAsyncio:
    """asyncio as stan.py sees it: ``loop=`` arguments dropped."""

    def __getattr__(self, name):
        return getattr(asyncio, name)

    @staticmethod
    def Queue(maxsize=0, loop=None):  # noqa: N802 (asyncio's name)
        return asyncio.Queue(maxsize)

    @staticmethod
    def Future(loop=None):  # noqa: N802
        return asyncio.get_running_loop().create_future()

    @staticmethod
    def wait_for(aw, timeout, loop=None):
        return asyncio.wait_for(aw, timeout)


stan_client = _import_stan()
stan_client.asyncio = _NoLoopAsyncio()
_errors = importlib.import_module("stan.aio.errors")
StanError = _errors.StanError
ConnectTimeout = _errors.ErrConnectReqTimeout
protocol = importlib.import_module("stan.pb.protocol_pb2")


def borrowable(nc):
    """Give a nats-py connection the asyncio-nats-client 0.x methods stan.py calls."""

    async def unsubscribe(sub):
        await sub.unsubscribe()

    async def publish_request(subject, reply, payload):
        await nc.publish(subject, payload, reply=reply)

    nc._loop = asyncio.get_running_loop()
    nc.unsubscribe = unsubscribe
    nc.publish_request = publish_request
    return nc


async def connect_nats(url: str, **kwargs):
    kwargs.setdefault("allow_reconnect", False)
    kwargs.setdefault("connect_timeout", 5)

    async def quiet(error):
        pass

    kwargs.setdefault("error_cb", quiet)
    return borrowable(await nats.connect(url, **kwargs))


async def connect(url: str, client_id: str, cluster_id: str = "test-cluster", nc=None, **kwargs):
    """A stan.py client on its own nats-py connection (returned as ``sc._nc``)."""
    if nc is None:
        nc = await connect_nats(url)
    sc = stan_client.Client()
    kwargs.setdefault("connect_timeout", 5)
    await sc.connect(cluster_id, client_id, nats=nc, **kwargs)
    return sc


async def close(sc) -> None:
    nc = sc._nc
    try:
        await sc.close()
    finally:
        await nc.close()
