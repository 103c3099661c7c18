"""The reference of the JetStream differential tests that still compare with nats-server 2.9.10.

nats-server 2.15.1 is the reference everywhere else (tests/reference.py). One file is left here,
tests/jetstream/test_pending_counts.py: natserver still counts a consumer's pending messages as
2.9.10 did, where 2.15.1 counts differently (its docstring says how); moving it is changing
that counting, not the test.
"""

from __future__ import annotations

from tests import reference

NATS_SERVER = reference.NATS_SERVER_2_9 or "nats-server"
HAVE_NATS_SERVER = reference.NATS_SERVER_2_9 is not None
needs_nats_server = reference.needs_nats_server_2_9
