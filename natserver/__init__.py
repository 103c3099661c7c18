"""natserver: a NATS-compatible message server in pure Python on trio.

Public API::

    server = await nursery.start(natserver.serve, natserver.Options(port=-1))
    server.port, server.url
    await server.shutdown()

The sans-IO protocol layer (``Parser`` and the op types) and the subject trie (``Sublist``)
are public too, for tools and tests that speak NATS.
"""

# Each private module is one concern (nats-server's layout); these are the public names.
from ._errors import ProtocolError as ProtocolError
from ._ops import NEED_DATA as NEED_DATA
from ._ops import Connect as Connect
from ._ops import Ping as Ping
from ._ops import Pong as Pong
from ._ops import Pub as Pub
from ._ops import Sub as Sub
from ._ops import Unsub as Unsub
from ._options import Options as Options
from ._parser import Parser as Parser
from ._server import Server as Server
from ._server import serve as serve
from ._sublist import Sublist as Sublist
from ._sublist import is_valid_literal_subject as is_valid_literal_subject
from ._sublist import is_valid_subject as is_valid_subject
from ._version import __version__ as __version__

__all__ = [
    "NEED_DATA",
    "Connect",
    "Options",
    "Parser",
    "Ping",
    "Pong",
    "ProtocolError",
    "Pub",
    "Server",
    "Sub",
    "Sublist",
    "Unsub",
    "__version__",
    "is_valid_literal_subject",
    "is_valid_subject",
    "serve",
]
