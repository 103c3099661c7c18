"""``python -m tests.jetstream.cluster.compacting_node -c <conf>``: natserver's own command line
(``natserver.cli.main``, as ``python -m natserver``) with replicated streams snapshotting (and
compacting their logs) after ``$NATSERVER_TEST_COMPACT_ENTRIES`` entries instead of
replica.COMPACT_ENTRIES' 65536, so that a durability test's few thousand messages cross
snapshots. Without that variable the tests run ``python -m natserver`` itself.
"""

from __future__ import annotations

import os
import sys

from natserver import cli
from natserver.jetstream import replica

if os.environ.get("NATSERVER_TEST_COMPACT_ENTRIES"):
    replica.COMPACT_ENTRIES = int(os.environ["NATSERVER_TEST_COMPACT_ENTRIES"])

if __name__ == "__main__":
    sys.exit(cli.main())
