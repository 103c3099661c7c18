"""``python -m tests.jetstream.cluster.preview_node -c <conf>``: natserver's own command line
(``natserver.cli.main``, as ``python -m natserver``) with JetStream in a cluster switched on.

Users are still refused JetStream in a cluster (issue #32 in progress: ``Options.validate``);
the in-process tests set ``Options.jetstream_cluster_preview``, which a configuration file can
not. The durability tests need real processes to ``kill -9``: this is the same server, the
same configuration file, with that one option set.
"""

from __future__ import annotations

import sys

from natserver import cli

_build_options = cli.build_options


def _with_preview(*args, **kwargs):
    return _build_options(*args, **kwargs).copy(jetstream_cluster_preview=True)


cli.build_options = _with_preview

if __name__ == "__main__":
    sys.exit(cli.main())
