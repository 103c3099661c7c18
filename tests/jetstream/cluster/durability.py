"""Real server processes for the durability tests (test_durability.py): three cluster nodes,
each a natserver process (``python -m natserver``, or ``tests.jetstream.cluster.compacting_node``:
the same command with earlier snapshots) or a nats-server 2.15.1 process, started from a
configuration file, killed with SIGKILL, restarted on their store; a publisher recording every
acknowledged message; each natserver replica's store read from its files.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nats

from natserver.jetstream.store import FileStore
from natserver.jetstream.stream import StreamConfig
from tests.raft.nrg_cluster import free_port

REPO = Path(__file__).resolve().parents[3]
STEP = 45.0  # seconds for one step (a start, an election: 2.15.1's take 4-9 s, a loaded machine)
POLL = 0.05  # seconds between two looks at another process (not a timing assertion)
REQUEST_TIMEOUT = 2.0  # a publish or API request not answered by then counts as failed
PASSWORD = "pw"

CONFIG = """
server_name: %(name)s
listen: 127.0.0.1:%(port)d
accounts {
  SYS { users [{user: sys, password: %(pw)s}] }
  APP { jetstream: enabled, users [{user: app, password: %(pw)s}] }
}
system_account: SYS
%(extra)s
jetstream { store_dir: "%(store)s" }
cluster {
  name: DUR
  listen: 127.0.0.1:%(cport)d
  routes [%(routes)s]
}
"""


@dataclass
class Proc:
    name: str
    kind: str  # "py" (natserver) or "go" (nats-server 2.15.1)
    port: int
    cluster_port: int
    folder: Path
    process: subprocess.Popen | None = None

    @property
    def store(self) -> Path:
        return self.folder / "store"

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class Procs:
    """Three cluster nodes as processes (``kinds``: "py" or "go" each)."""

    folder: Path
    kinds: tuple[str, ...]
    binary: str = ""  # nats-server 2.15.1, for the "go" nodes
    compact_entries: int = 0  # the natservers' replica.COMPACT_ENTRIES (0: theirs)
    extra: str = ""  # more configuration lines for every node
    nodes: list[Proc] = field(default_factory=list)

    def __post_init__(self) -> None:
        for i, kind in enumerate(self.kinds):
            name = f"n{i + 1}"
            self.nodes.append(Proc(name, kind, free_port(), free_port(), self.folder / name))

    def by_name(self, name: str) -> Proc:
        return next(n for n in self.nodes if n.name == name)

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    def start(self, node: Proc) -> None:
        """Start ``node`` (its configuration file, its store); returns once it listens."""
        node.folder.mkdir(parents=True, exist_ok=True)
        routes = [f"nats-route://127.0.0.1:{n.cluster_port}" for n in self.nodes if n is not node]
        conf = node.folder / "server.conf"
        conf.write_text(CONFIG % {"name": node.name, "port": node.port, "pw": PASSWORD, "store": node.store,
                                  "cport": node.cluster_port, "routes": ", ".join(routes),
                                  "extra": self.extra})
        if node.kind == "py":  # (the real command, or it with earlier snapshots)
            module = "tests.jetstream.cluster.compacting_node" if self.compact_entries else "natserver"
            argv = [sys.executable, "-m", module, "-c", str(conf)]
        else:
            argv = [self.binary, "-c", str(conf)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        if self.compact_entries:
            env["NATSERVER_TEST_COMPACT_ENTRIES"] = str(self.compact_entries)
        with open(node.folder / "server.log", "ab") as log:
            node.process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + STEP
        while True:
            if node.process.poll() is not None:
                raise RuntimeError(f"{node.name} exited: {self.log(node)[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", node.port), timeout=1):
                    return
            except OSError:
                if time.monotonic() >= deadline:
                    raise RuntimeError(f"{node.name} not listening within {STEP} s") from None
                time.sleep(POLL)

    def kill9(self, node: Proc) -> None:
        assert node.process is not None and node.process.poll() is None, f"{node.name} is not running"
        node.process.send_signal(signal.SIGKILL)
        node.process.wait(STEP)

    def stop(self, node: Proc) -> None:
        """A clean stop (SIGTERM), SIGKILL if it does not end within STEP."""
        if node.process is None or node.process.poll() is not None:
            return
        node.process.send_signal(signal.SIGTERM)
        try:
            node.process.wait(STEP)
        except subprocess.TimeoutExpired:
            node.process.send_signal(signal.SIGKILL)
            node.process.wait(STEP)
            raise AssertionError(f"{node.name} did not stop on SIGTERM") from None

    def stop_all(self) -> None:
        for node in self.nodes:
            if node.running:
                assert node.process is not None
                node.process.send_signal(signal.SIGKILL)
                node.process.wait(STEP)

    def log(self, node: Proc) -> str:
        path = node.folder / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""


def stored(node: Proc, stream: str, account: str = "APP") -> list[tuple[int, str, bytes]]:
    """A stopped natserver node's replica of ``stream``: (sequence, subject, payload) of every
    message, read from its store's files (its segments recovered as the server recovers them)."""
    path = node.store / "jetstream" / account / "streams" / stream
    meta = json.loads((path / "meta.json").read_text())
    store = FileStore(str(path), StreamConfig.from_json(meta["config"]))
    try:
        while store.load_step():
            pass
        out = []
        for seq in range(store.first_seq, store.last_seq + 1):
            sm = store.load_msg(seq)
            if sm is not None:
                out.append((seq, bytes(sm.subject).decode(), bytes(sm.data)))
        return out
    finally:
        store.stop()


async def connect(urls: list[str], user: str = "app") -> nats.NATS:
    """A client of the whole cluster that reconnects elsewhere when its server dies."""
    return await nats.connect(servers=urls, user=user, password=PASSWORD, connect_timeout=REQUEST_TIMEOUT,
                              reconnect_time_wait=0.1, max_reconnect_attempts=-1, dont_randomize=True,
                              allow_reconnect=True)


async def api(nc: nats.NATS, subject: str, body=None, timeout: float = REQUEST_TIMEOUT) -> dict:
    msg = await nc.request(subject, b"" if body is None else json.dumps(body).encode(), timeout=timeout)
    return json.loads(msg.data)


async def until(predicate, what: str, step: float = STEP):
    """Poll an async ``predicate`` until it returns something true; its value."""
    deadline = time.monotonic() + step
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = await predicate()
        except (nats.errors.Error, asyncio.TimeoutError) as exc:
            last = exc
        else:
            if last:
                return last
        await asyncio.sleep(POLL)
    raise AssertionError(f"not {what} within {step} s (last: {last!r})")


async def created(nc: nats.NATS, subject: str, body: dict) -> dict:
    """A create retried while the cluster forms (no meta leader yet, a node not yet placeable)."""
    async def attempt():
        answer = await api(nc, subject, body, timeout=5.0)
        return None if "error" in answer else answer
    return await until(attempt, f"{subject} answered")


async def stream_leader(nc: nats.NATS, stream: str) -> str | None:
    info = await api(nc, f"$JS.API.STREAM.INFO.{stream}")
    return info.get("cluster", {}).get("leader") or None


async def consumer_leader(nc: nats.NATS, stream: str, consumer: str) -> str | None:
    info = await api(nc, f"$JS.API.CONSUMER.INFO.{stream}.{consumer}")
    return info.get("cluster", {}).get("leader") or None


async def all_current(nc: nats.NATS, stream: str) -> dict | None:
    """STREAM.INFO once its leader counts every other replica current (no lag)."""
    info = await api(nc, f"$JS.API.STREAM.INFO.{stream}")
    cluster = info.get("cluster", {})
    replicas = cluster.get("replicas", [])
    if cluster.get("leader") and len(replicas) == 2 and all(r.get("current") and not r.get("lag") for r in replicas):
        return info
    return None


@dataclass
class Publisher:
    """Publishes with acks, ``lanes`` at a time (each waits for its ack), for as long as it
    runs; records each acknowledged message (sequence, subject, payload, when sent, when
    acknowledged). A publish that timed out or failed is not counted (it may or may not be
    stored)."""

    js: object
    stream: str
    subject: str
    acked: list[tuple[int, str, bytes, float, float]] = field(default_factory=list)
    failed: int = 0
    sent: int = 0
    stopping: bool = False
    lanes: int = 8

    async def run(self) -> None:
        await asyncio.gather(*(self._lane() for _ in range(self.lanes)))

    async def _lane(self) -> None:
        while not self.stopping:
            i = self.sent
            self.sent += 1
            subject = f"{self.subject}.{i % 4}"
            payload = b"message %06d " % i + bytes((i * 7 + k) % 256 for k in range(i % 64))
            at = time.monotonic()
            try:
                ack = await self.js.publish(subject, payload, timeout=REQUEST_TIMEOUT)  # type: ignore[attr-defined]
            except (nats.errors.Error, asyncio.TimeoutError):
                self.failed += 1
                await asyncio.sleep(POLL)
                continue
            assert ack.stream == self.stream and not ack.duplicate, ack
            self.acked.append((ack.seq, subject, payload, at, time.monotonic()))

    async def more(self, n: int, what: str) -> None:
        """Until ``n`` more publishes are acknowledged."""
        target = len(self.acked) + n

        async def enough():
            return len(self.acked) >= target
        await until(enough, f"{n} more acks ({what})", STEP * 2)

    def first_ack_after(self, t: float) -> float | None:
        """Seconds from ``t`` to the first acknowledgement of a publish sent after it."""
        later = [done for _, _, _, sent, done in self.acked if sent >= t]
        return min(later) - t if later else None


def check_acked(acked: list, replica: list[tuple[int, str, bytes]], where: str) -> None:
    """Every acknowledged message is in ``replica`` at its sequence, with its subject and
    payload; nothing is stored twice."""
    by_seq = {seq: (subject, data) for seq, subject, data in replica}
    assert len(by_seq) == len(replica)
    missing = [(seq, subject, data) for seq, subject, data, *_ in acked if by_seq.get(seq) != (subject, data)]
    assert not missing, f"{where}: {len(missing)} acknowledged messages missing or different, first {missing[:3]}"
    payloads = [data for _, _, data in replica]
    assert len(set(payloads)) == len(payloads), f"{where}: a message stored twice"


STEPDOWNS = 8  # step-downs asked at most until the wanted server leads


async def lead_with(nc: nats.NATS, stream: str, wanted: str) -> None:
    """Step-downs (asking for ``wanted``) until ``wanted`` leads the stream."""
    for _ in range(STEPDOWNS):
        now = await until(lambda: stream_leader(nc, stream), f"a leader of {stream}")
        if now == wanted:
            return
        try:
            await api(nc, f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", {"placement": {"preferred": wanted}}, timeout=5.0)
        except (nats.errors.Error, asyncio.TimeoutError):
            pass

        async def moved(now=now):
            leader = await stream_leader(nc, stream)
            return leader and leader != now
        await until(moved, "another leader")
    raise AssertionError(f"{wanted} does not lead {stream}")


async def each_leads_with_all(nc: nats.NATS, stream: str, names: list[str], last_seq: int) -> None:
    """The leadership stepped to each named node in turn, until it answers STREAM.INFO, from
    its own store, with ``last_seq`` reached: the leader's view of a replica (``current``) is
    its RAFT log's, not its store's, which a catch-up over $JSC.SYNC fills after (a replica
    still catching up that is elected steps down, processSnapshot)."""
    for name in names:
        async def complete(name=name):
            try:
                await lead_with(nc, stream, name)
            except AssertionError:  # (it stepped down again: still catching up)
                return False
            info = await api(nc, f"$JS.API.STREAM.INFO.{stream}")
            return info.get("cluster", {}).get("leader") == name and info["state"]["last_seq"] >= last_seq
        await until(complete, f"{name} leading with every message")


async def read_replicas(procs: Procs, stream: str, last_seq: int) -> tuple[dict[str, list], list[str]]:
    """Every node stopped cleanly, each natserver's replica of ``stream`` read from its files;
    and the names of those found behind ``last_seq``. The leader counts a replica current by
    its RAFT log, and a replica that installed the leader's snapshot fills its store over
    $JSC.SYNC after that: one found behind gets the cluster started again until it logs its
    catch-up complete (never: the test fails), and is read again."""
    for node in procs.nodes:
        procs.stop(node)
    names = [n.name for n in procs.nodes if n.kind == "py"]
    views = {name: stored(procs.by_name(name), stream) for name in names}
    behind = [name for name, view in views.items() if not view or view[-1][0] < last_seq]
    if behind:
        marks = {name: len(procs.log(procs.by_name(name))) for name in behind}
        for node in procs.nodes:
            procs.start(node)

        async def caught_up():
            done = f"catch-up for stream {stream} complete"
            return all(done in procs.log(procs.by_name(name))[marks[name]:] for name in behind)
        await until(caught_up, f"{behind} caught up")
        for node in procs.nodes:
            procs.stop(node)
        views = {name: stored(procs.by_name(name), stream) for name in names}
    return views, behind
