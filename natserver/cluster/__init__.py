"""Clustering: natserver in a nats-server 2.9 cluster (routes). Started by natserver.app as a
Subsystem when the options configure a cluster; the core never imports it."""

from .routes import Cluster, enable_cluster

__all__ = ["Cluster", "enable_cluster"]
