"""natserver: a NATS-compatible message server in pure Python on trio.

Public API::

    server = await nursery.start(natserver.serve, natserver.Options(port=-1))
    server.port, server.url
    await server.shutdown()

The sans-IO protocol layer (``Parser`` and the op types) and the subject trie (``Sublist``)
are public too, for tools and tests that speak NATS; ``NatsServer`` (natserver.testing) is
the in-process test double.
"""

from typing import TYPE_CHECKING

from ._version import __version__ as __version__

# Public names, imported on first use (PEP 562): pytest imports natserver.pytest_plugin in every
# run wherever natserver is installed, and that must not import trio and the server (~150 ms).
_PUBLIC = {
    "ProtocolError": "_errors",
    "NEED_DATA": "_ops",
    "Connect": "_ops",
    "Ping": "_ops",
    "Pong": "_ops",
    "Pub": "_ops",
    "PubRun": "_ops",
    "Sub": "_ops",
    "Unsub": "_ops",
    "Options": "_options",
    "Parser": "_parser",
    "Server": "_server",
    "serve": "_server",
    "Sublist": "_sublist",
    "is_valid_literal_subject": "_sublist",
    "is_valid_subject": "_sublist",
    "NatsServer": "testing",
}
__all__ = sorted([*_PUBLIC, "__version__"])

if TYPE_CHECKING:
    from ._errors import ProtocolError as ProtocolError
    from ._ops import NEED_DATA as NEED_DATA
    from ._ops import Connect as Connect
    from ._ops import Ping as Ping
    from ._ops import Pong as Pong
    from ._ops import Pub as Pub
    from ._ops import PubRun as PubRun
    from ._ops import Sub as Sub
    from ._ops import Unsub as Unsub
    from ._options import Options as Options
    from ._parser import Parser as Parser
    from ._server import Server as Server
    from ._server import serve as serve
    from ._sublist import Sublist as Sublist
    from ._sublist import is_valid_literal_subject as is_valid_literal_subject
    from ._sublist import is_valid_subject as is_valid_subject
    from .testing import NatsServer as NatsServer


def __getattr__(name: str):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'natserver' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
