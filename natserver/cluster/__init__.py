"""Clustering: natserver in a nats-server cluster (routes, ``cluster {}``) and leaf nodes (both
sides, ``leafnodes {}``), in ``routes.py``; ``protocol.py`` parses the route and leaf protocols.
Started by natserver.app as a Subsystem when the options configure a cluster, a leaf node
listener or leaf remotes; the core never imports it."""

from .routes import Cluster, enable_cluster

__all__ = ["Cluster", "enable_cluster"]
