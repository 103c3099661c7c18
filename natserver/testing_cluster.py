"""A NATS cluster in one process, for tests: natservers joined by routes, a leaf node.

::

    from natserver.testing_cluster import NatsCluster

    with NatsCluster(size=3) as cluster:           # ready when every route is up
        nc = await nats.connect(servers=cluster.urls)
        cluster.stop(0)                            # the client fails over to another node
        cluster.restart(0)                         # same ports; the routes form again
        cluster.partition(1, 2)                    # the route between 1 and 2 is cut...
        cluster.heal(1, 2)                         # ...and comes back
        cluster.lame_duck(2)                       # clients move away, the node stops
        leaf = cluster.add_leaf()                  # a natserver leaf node of node 0

Each node is a :class:`natserver.testing.NatsServer` (``cluster.servers[i]``) with all it
offers: recorded messages, faults, ``advance()``. Every node listens on 127.0.0.1 on random
ports (client, route and leaf node ports) that it keeps across ``restart``. Every node dials
node 0, which tells the others of it (gossip: they dial the newcomer), as a nats-server
cluster started with one seed forms; only one side of each pair dials, so no duplicate routes
slow the start. A restarted node dials every other node itself, and ``heal`` dials the cut
route again.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from typing import Any

from .testing import NatsServer

__all__ = ["NatsCluster", "attach_leaf"]

DEFAULT_CLUSTER_SIZE = 3
DEFAULT_CLUSTER_NAME = "natserver-test"
# How long start(), restart() and heal() wait for the routes to form: nats-server's route
# reconnect delay (route.go DEFAULT_ROUTE_RECONNECT, 1 s) plus room for a loaded machine.
DEFAULT_FORM_TIMEOUT = 10.0
# Between two looks at the nodes' routes while waiting for them (not a timing assertion).
POLL_INTERVAL = 0.001


class NatsCluster:
    """``size`` in-process natservers joined by routes (a full mesh), on 127.0.0.1.

    Keyword arguments are server options for every node (``max_payload=``, ``user=`` ...),
    plus NatsServer's ``record=`` and ``clock=``. ``jetstream=True``: JetStream in the cluster
    (nats-server's meta group, replicated streams and consumers: natserver/jetstream/README.md
    "In a cluster"), each node with its own store directory, kept across ``restart`` and removed by
    ``stop_all``.
    """

    def __init__(self, size: int = DEFAULT_CLUSTER_SIZE, *, jetstream: bool = False,
                 name: str = DEFAULT_CLUSTER_NAME, **options: Any) -> None:
        if size < 1:
            raise ValueError("a cluster has at least one node")
        self.name = name
        self._stores: list[str] = []
        if jetstream:
            options = {**options, "jetstream": True}
        self.servers: list[NatsServer] = []
        for i in range(size):
            node_options = {"server_name": f"{name}-{i}", **options}
            if jetstream and not node_options.get("store_dir"):
                self._stores.append(tempfile.mkdtemp(prefix=f"natserver-cluster-{i}-"))
                node_options["store_dir"] = self._stores[-1]
            self.servers.append(NatsServer(**node_options, cluster_name=name, cluster_host="127.0.0.1",
                                           cluster_port=-1, leafnode_host="127.0.0.1", leafnode_port=-1))
        self.leaves: list[NatsServer] = []
        self._partitions: dict[int, set[int]] = {}  # node -> the nodes it is cut off from

    # -- life cycle ---------------------------------------------------------------------------

    def start(self, timeout: float = DEFAULT_FORM_TIMEOUT) -> NatsCluster:
        """Start every node (each dials node 0); returns once the mesh is complete."""
        try:
            first, *others = self.servers
            first.start(timeout)
            self._pin_ports(first)
            for node in others:
                node.options = node.options.copy(routes=[self.route_url(0)])
            _each_in_a_thread([lambda node=node: node.start(timeout) for node in others])
            for node in others:
                self._pin_ports(node)
            self.wait_for_routes(timeout)
        except BaseException:
            self.stop_all()
            raise
        return self

    def stop_all(self) -> None:
        """Stop the leaf nodes and every node."""
        nodes = [*self.leaves, *self.servers]
        for node in nodes:  # all begin to stop at once; then each is waited for
            if node.running:
                try:
                    node._call(_running(node).stop)
                except RuntimeError:
                    pass  # it stopped by itself meanwhile (lame duck)
        errors = []
        for node in nodes:
            try:
                node.stop()
            except Exception as exc:  # noqa: BLE001 - every node is stopped, the first error raised
                errors.append(exc)
        for path in self._stores:
            shutil.rmtree(path, ignore_errors=True)
        self._stores = []
        if errors:
            raise errors[0]

    def stop(self, i: int) -> None:
        """Stop node ``i`` (its clients are closed with "Server Shutdown" and fail over)."""
        self.servers[i].stop()

    def restart(self, i: int, down_for: float = 0.0, timeout: float = DEFAULT_FORM_TIMEOUT) -> None:
        """Start node ``i`` again (stopping it first if it runs) on the same ports; returns
        once its routes to the running nodes are back."""
        node = self.servers[i]
        if node.running:
            node.stop()
        if down_for > 0:
            time.sleep(down_for)
        others = [j for j in range(len(self.servers)) if j != i]
        node.options = node.options.copy(routes=[self.route_url(j) for j in others])
        node.start(timeout)
        self._pin_ports(node)
        for other in sorted(self._partitions.get(i, ())):  # a partition outlives a restart
            if self.servers[other].running:
                self._set_partition(i, other, True)
        self.wait_for_routes(timeout)

    def __enter__(self) -> NatsCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop_all()

    def __repr__(self) -> str:
        up = sum(node.running for node in self.servers)
        return f"<NatsCluster {self.name!r} {up}/{len(self.servers)} running>"

    @staticmethod
    def _pin_ports(node: NatsServer) -> None:
        """Keep the ports the node got (restart() comes back on them)."""
        cluster = _running(node).cluster
        node.options = node.options.copy(port=node.port, cluster_port=cluster.port, leafnode_port=cluster.leaf_port)

    # -- addresses ----------------------------------------------------------------------------

    @property
    def urls(self) -> list[str]:
        """Every node's client URL (``nats://127.0.0.1:<port>``), stopped nodes included:
        give them all to the client, as to a real cluster."""
        return [f"nats://{node.host}:{node.options.port}" for node in self.servers]

    def route_url(self, i: int) -> str:
        return f"nats://127.0.0.1:{self.servers[i].options.cluster_port}"

    def leaf_url(self, i: int) -> str:
        return f"nats://127.0.0.1:{self.servers[i].options.leafnode_port}"

    # -- routes ---------------------------------------------------------------------------------

    def routes(self, i: int) -> list[str]:
        """The server names node ``i`` has a route to now."""
        node = self.servers[i]
        if not node.running:
            return []
        # Read from this thread without waking the node's loop (waiting for routes polls
        # this): a dict the server changes meanwhile is read again.
        while True:
            try:
                return sorted(route.remote_name for route in tuple(_running(node).cluster.routes.values()))
            except RuntimeError:
                continue

    def _expected_routes(self, i: int) -> list[str]:
        names = self._node_names()
        cut = self._partitions.get(i, set())
        return sorted(names[j] for j, other in enumerate(self.servers)
                      if j != i and other.running and j not in cut)

    def _node_names(self) -> list[str]:
        return [node.options.server_name for node in self.servers]

    def wait_for_routes(self, timeout: float = DEFAULT_FORM_TIMEOUT) -> None:
        """Block until every running node has a route to every other running node it is not
        partitioned from (and none to those)."""
        deadline = time.monotonic() + timeout
        while True:
            wrong = [(i, self.routes(i), self._expected_routes(i)) for i, node in enumerate(self.servers)
                     if node.running and self.routes(i) != self._expected_routes(i)]
            if not wrong:
                return
            if time.monotonic() >= deadline:
                i, have, want = wrong[0]
                raise TimeoutError(f"node {i}'s routes did not form within {timeout}s: {have}, expected {want}")
            time.sleep(POLL_INTERVAL)

    def partition(self, a: int, b: int, timeout: float = DEFAULT_FORM_TIMEOUT) -> None:
        """Cut the route between nodes ``a`` and ``b`` and keep it cut (each refuses the
        other's route at its INFO) until ``heal(a, b)``; both stay in the cluster through
        the third nodes. Returns once the route is gone."""
        self._set_partition(a, b, True)
        self.wait_for_routes(timeout)

    def heal(self, a: int, b: int, timeout: float = DEFAULT_FORM_TIMEOUT) -> None:
        """End ``partition(a, b)``; returns once the route is back (the node that dials it
        retries every second, as nats-server does)."""
        self._set_partition(a, b, False)
        self.wait_for_routes(timeout)

    def _set_partition(self, a: int, b: int, cut: bool) -> None:
        if a == b:
            raise ValueError("a partition is between two different nodes")
        ids = [self.servers[i]._call(lambda i=i: _running(self.servers[i]).server_id) for i in (a, b)]
        for me, other, other_id in ((a, b, ids[1]), (b, a, ids[0])):
            cuts = self._partitions.setdefault(me, set())
            if cut:
                cuts.add(other)
            else:
                cuts.discard(other)
            node = self.servers[me]
            node._call(self._refuse, node, other_id, cut)
        if not cut:  # a gossiped route is not redialled once dropped (route.go): dial it
            self.servers[a]._call(_running(self.servers[a]).cluster.dial, self.route_url(b), False)

    @staticmethod
    def _refuse(node: NatsServer, peer_id: str, cut: bool) -> None:
        cluster = _running(node).cluster
        if not cut:
            cluster.refused_peers.discard(peer_id)
            return
        cluster.refused_peers.add(peer_id)
        cluster.close_peer(peer_id, "Partitioned")

    # -- lame duck, leaf nodes, the clock -----------------------------------------------------

    def lame_duck(self, i: int, duration: float = 1.0, grace_period: float = 0.1) -> None:
        """Node ``i`` enters lame duck mode (``NatsServer.lame_duck``): its peers and clients
        are told, its clients are closed over ``duration``, then it stops."""
        self.servers[i].lame_duck(duration, grace_period)

    def add_leaf(self, node: int = 0, timeout: float = DEFAULT_FORM_TIMEOUT, **options: Any) -> NatsServer:
        """Start a natserver leaf node of node ``node`` (``options``: its own); returns once
        the leaf connection is up. Stopped with the cluster."""
        leaf = attach_leaf(self.servers[node], timeout, **options)
        self.leaves.append(leaf)
        return leaf

    def advance(self, seconds: float) -> None:
        """``advance(seconds)`` on every running node (and leaf node), one after the other."""
        for node in [*self.servers, *self.leaves]:
            if node.running:
                node.advance(seconds)


def _running(node: NatsServer) -> Any:
    """The node's running natserver.Server (typed loosely: its cluster is a subsystem's)."""
    server = node.server
    if server is None:
        raise RuntimeError("the node has not been started")
    return server


def _each_in_a_thread(jobs: list) -> None:
    """Run the blocking ``jobs`` side by side (starting nodes: each waits for its thread)."""
    import threading

    failures: list[BaseException] = []

    def run(job) -> None:
        try:
            job()
        except BaseException as exc:  # noqa: BLE001 - raised in the calling thread
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(job,), daemon=True) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def attach_leaf(hub: NatsServer, timeout: float = DEFAULT_FORM_TIMEOUT, **options: Any) -> NatsServer:
    """Start a natserver that is a leaf node of ``hub`` (a running NatsServer listening for
    leaf nodes: ``NatsServer(leafnode_port=-1)``, every NatsCluster node); returns it once
    the leaf connection is up. Stop it yourself (``leaf.stop()``)."""
    if not hub.running:
        raise RuntimeError("the hub is not running")
    port = hub._call(lambda: _running(hub).cluster.leaf_port if _running(hub).cluster is not None else 0)
    if not port:
        raise ValueError("the hub does not listen for leaf nodes: start it with leafnode_port=-1")
    remote = {"urls": [f"nats://127.0.0.1:{port}"], "account": ""}
    leaf = NatsServer(**options, leafnode_remotes=[remote])
    leaf.start(timeout)
    deadline = time.monotonic() + timeout
    while not (leaf._call(lambda: bool(_running(leaf).cluster.leafs))
               and hub._call(lambda: len(_running(hub).cluster.leafs)) > 0):
        if time.monotonic() >= deadline:
            leaf.stop()
            raise TimeoutError(f"the leaf node did not connect within {timeout}s")
        time.sleep(POLL_INTERVAL)
    return leaf
