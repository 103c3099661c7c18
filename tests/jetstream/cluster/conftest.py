"""The default cluster of this folder's tests: three in-process natservers with JetStream and
test_cluster's accounts (SYS, APP with JetStream, NOJS). A test file may define its own."""

from __future__ import annotations

import pytest

from natserver.testing_cluster import NatsCluster
from tests.jetstream.cluster.test_cluster import cluster_options


@pytest.fixture
def cluster():
    with NatsCluster(3, jetstream=True, **cluster_options()) as c:
        yield c
