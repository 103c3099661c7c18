"""nats-server's RAFT inside a natserver server (issue #32): RAFT groups over the system account
and its routes, as nats-server carries ``$NRG.>``. See README.md.

Above the server (it subscribes and publishes in the system account through the server's
internal clients) and natserver.raft (the nodes); JetStream in a cluster will drive it.
"""

from __future__ import annotations

from natserver.nrg.host import MAX_BATCH, MAX_PENDING_BYTES, Apply, Group, NrgHost, run_nrg

# Everything in __all__ is the package's public API.
__all__ = ["MAX_BATCH", "MAX_PENDING_BYTES", "Apply", "Group", "NrgHost", "run_nrg"]
