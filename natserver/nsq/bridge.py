"""The NSQ <-> NATS bridge: NSQ topic ``T`` is NATS subject ``<prefix>.T``.

Every message published to an NSQ topic (TCP PUB/MPUB/DPUB or HTTP /pub, /mpub) is also
published on ``<prefix>.T``; every NATS message on ``<prefix>.>`` enters topic ``T``. No
loops: a message that came from NATS is not published back to NATS, and the bridge ignores
the NATS copies of its own publications (the core delivers them to internal subscriptions
synchronously, while ``_publishing`` is set). NATS headers and reply subjects are not
carried (NSQ messages have neither); empty NATS payloads are dropped (NSQ refuses empty
bodies), as are subjects that are not valid topic names. A DPUB's delay applies on the NSQ
side only: NATS subscribers get the message at once.

The bridge subscribes in a queue group (BRIDGE_QUEUE): in a NATS cluster where several natservers
bridge (each its own nsqd, as nsqd instances are), a NATS message enters one of them only, the
local one first (a queue group's local member is preferred, as in nats-server), and a bridge's
own NSQ -> NATS copy is taken by its own member (ignored) instead of entering the others' topics.
"""

from __future__ import annotations

import logging

import trio

from .protocol import is_valid_name

# Everything in __all__ gets re-exported as part of natserver.nsq's API.
__all__ = ["Bridge"]

log = logging.getLogger("natserver")

# natserver's: the queue group of every bridge's subscription (one bridge takes each message)
BRIDGE_QUEUE = "_nsq_bridge"


class Bridge:
    def __init__(self, front, server, prefix: str) -> None:
        self.front = front
        self.server = server
        self.prefix = prefix.rstrip(".")
        self._prefix_len = len(self.prefix) + 1
        self._publishing = False
        self._subscription = None
        self.to_nats_count = 0
        self.from_nats_count = 0
        self.dropped = 0

    def start(self) -> None:
        self._subscription = self.server.subscribe_internal(f"{self.prefix}.>", self._from_nats, queue=BRIDGE_QUEUE)
        log.info("NSQ: bridging topics to NATS subjects %s.<topic>", self.prefix)

    def stop(self) -> None:
        if self._subscription is not None:
            try:
                self.server.unsubscribe_internal(self._subscription)
            except Exception:  # the core may already be gone at shutdown
                pass
            self._subscription = None

    def _from_nats(self, subject: bytes, reply, headers, payload: bytes) -> None:
        if self._publishing:
            return  # our own copy of an NSQ message
        topic = subject[self._prefix_len :]
        if not payload or not is_valid_name(topic):
            self.dropped += 1
            return
        self.from_nats_count += 1
        self.front.publish(topic.decode(), [bytes(payload)], trio.current_time(), from_bridge=True)

    def to_nats(self, topic: str, bodies: list) -> None:
        subject = f"{self.prefix}.{topic}".encode()
        publish = self.server.publish
        self._publishing = True
        try:
            for body in bodies:
                publish(subject, body, flush=False)
        finally:
            self._publishing = False
        self.to_nats_count += len(bodies)

    def flush(self) -> None:
        self.server.flush_touched()
