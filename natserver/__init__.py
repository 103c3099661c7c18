"""natserver: a NATS-compatible message server in Python on trio (two optional C extensions:
the parser's PUB loop and the delivery loop's common case; pure Python without them).

Public API::

    server = await nursery.start(natserver.serve, natserver.Options(port=-1))
    server.port, server.url
    await server.shutdown()

The sans-IO protocol layer (``Parser`` and the op types) and the subject trie (``Sublist``)
are public too, for tools and tests that speak NATS; ``NatsServer`` (natserver.testing) is
the in-process test double.
"""

from ._version import __version__ as __version__

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing: ~20 ms before the first INFO)

# Public names, imported on first use (PEP 562): pytest imports natserver.pytest_plugin in every
# run wherever natserver is installed, and that must not import trio and the server (~150 ms).
_PUBLIC = {
    "ProtocolError": "protocol.errors",
    "NEED_DATA": "protocol.ops",
    "Connect": "protocol.ops",
    "Ping": "protocol.ops",
    "Pong": "protocol.ops",
    "Pub": "protocol.ops",
    "PubRun": "protocol.ops",
    "Sub": "protocol.ops",
    "Unsub": "protocol.ops",
    "Options": "config.options",
    "Parser": "protocol.parser",
    "Server": "app",
    "serve": "app",
    "Sublist": "routing.sublist",
    "is_valid_literal_subject": "routing.sublist",
    "is_valid_subject": "routing.sublist",
    "NatsServer": "testing",
}
__all__ = sorted([*_PUBLIC, "__version__"])

if TYPE_CHECKING:
    from .app import Server as Server
    from .app import serve as serve
    from .config.options import Options as Options
    from .protocol.errors import ProtocolError as ProtocolError
    from .protocol.ops import NEED_DATA as NEED_DATA
    from .protocol.ops import Connect as Connect
    from .protocol.ops import Ping as Ping
    from .protocol.ops import Pong as Pong
    from .protocol.ops import Pub as Pub
    from .protocol.ops import PubRun as PubRun
    from .protocol.ops import Sub as Sub
    from .protocol.ops import Unsub as Unsub
    from .protocol.parser import Parser as Parser
    from .routing.sublist import Sublist as Sublist
    from .routing.sublist import is_valid_literal_subject as is_valid_literal_subject
    from .routing.sublist import is_valid_subject as is_valid_subject
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
