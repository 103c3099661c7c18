"""nsqd-compatible front-end: NSQ clients (pynsq, gnsq, ansq, nsqjs, go-nsq) and scripts
using nsqd's HTTP API work against natserver; optionally bridged to NATS subjects.

The core never imports this package; ``Server.run`` starts :func:`serve_nsq` when the
``nsq {}`` block (or ``--nsq_port``/``--nsq_http_port``) is given.
"""

from .config import NsqOptions, parse_nsq_options
from .errors import NsqError

# Everything in __all__ gets re-exported as part of natserver.nsq's API.
__all__ = ["NsqOptions", "NsqError", "parse_nsq_options", "serve_nsq"]


async def serve_nsq(server, nsq_options=None, *, task_status=None):
    """Run the NSQ TCP and HTTP listeners for ``server``; see natserver.nsq.tcp.serve_nsq."""
    from .tcp import serve_nsq as _serve

    kwargs = {} if task_status is None else {"task_status": task_status}
    await _serve(server, nsq_options, **kwargs)
