"""``python -m tests.jetstream.cluster.preview_node -c <conf>``: natserver's own command line
(``natserver.cli.main``, as ``python -m natserver``) with JetStream in a cluster switched on.

Users are still refused JetStream in a cluster (issue #32 in progress: ``Options.validate``);
the in-process tests set ``Options.jetstream_cluster_preview``, which a configuration file can
not. The durability tests need real processes to ``kill -9``: this is the same server, the
same configuration file, with that one option set. ``$NATSERVER_TEST_COMPACT_ENTRIES``: a
replicated stream snapshots (and compacts its log) after that many entries instead of
replica.COMPACT_ENTRIES' 65536, so that a test's few thousand messages cross snapshots.
"""

from __future__ import annotations

import os
import sys

from natserver import cli
from natserver.jetstream import replica

_build_options = cli.build_options


def _with_preview(*args, **kwargs):
    return _build_options(*args, **kwargs).copy(jetstream_cluster_preview=True)


cli.build_options = _with_preview
if os.environ.get("NATSERVER_TEST_COMPACT_ENTRIES"):
    replica.COMPACT_ENTRIES = int(os.environ["NATSERVER_TEST_COMPACT_ENTRIES"])

if __name__ == "__main__":
    sys.exit(cli.main())
