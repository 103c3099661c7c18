"""nsqd-compatible front-end: NSQ clients (pynsq, gnsq, ansq, nsqjs, go-nsq) and scripts
using nsqd's HTTP API work against natserver; optionally bridged to NATS subjects.

A subsystem on top of the core (natserver.app lists it): the core never imports this
package; ``enable_nsq`` is started when the options carry an ``nsq {}`` block (or
``--nsq_port``/``--nsq_http_port``).
"""

import trio

from .config import NsqOptions, parse_nsq_options
from .errors import NsqError
from .tcp import serve_nsq as _serve

# Everything in __all__ gets re-exported as part of natserver.nsq's API.
__all__ = ["NsqOptions", "NsqError", "parse_nsq_options", "serve_nsq", "enable_nsq", "check_options"]


def check_options(options) -> None:
    """ValueError when the server's ``nsq {}`` block cannot be used (natserver.app calls it)."""
    parse_nsq_options(options.nsq)


async def serve_nsq(server, nsq_options=None, *, task_status=trio.TASK_STATUS_IGNORED):
    """Run the NSQ TCP and HTTP listeners for ``server``; see natserver.nsq.tcp.serve_nsq."""
    await _serve(server, nsq_options, task_status=task_status)


async def enable_nsq(server, *, task_status=trio.TASK_STATUS_IGNORED):
    """The subsystem's entry point: the front-end for ``server.options.nsq``."""
    await serve_nsq(server, server.options.nsq, task_status=task_status)
