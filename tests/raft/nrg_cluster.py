"""A 3-node nats-server 2.15.1 JetStream cluster for the RAFT tests (recording and interop), and
a raw NATS client: the RAFT frames on ``$NRG.>`` are read and sent as bytes, as they cross."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import trio

from tests.conftest import RawClient

# One step of a cluster test: servers starting, a meta leader elected (2.15.1's election
# timeout is 4-9 s, raft.go minElectionTimeoutDefault/maxElectionTimeoutDefault).
STEP_TIMEOUT = 30.0
POLL = 0.05  # seconds between looks at another process's state (not a timing assertion)
SYS_USER = "sys"
APP_USER = "app"
PASSWORD = "pw"

CONFIG = """
server_name: %(name)s
listen: 127.0.0.1:%(port)d
accounts {
  SYS { users [{user: %(sys)s, password: %(pw)s}] }
  APP { jetstream: enabled, users [{user: %(app)s, password: %(pw)s}] }
}
system_account: SYS
jetstream { store_dir: "%(store)s" }
cluster {
  name: %(cluster)s
  listen: 127.0.0.1:%(cport)d
  routes [%(routes)s]
}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Node:
    name: str
    port: int
    cluster_port: int
    folder: Path
    process: subprocess.Popen | None = None


@dataclass
class Cluster:
    binary: str
    folder: Path
    nodes: list[Node] = field(default_factory=list)
    name: str = "C"
    extra_routes: tuple[int, ...] = ()  # route ports of servers outside this list

    @classmethod
    def create(cls, binary: str, folder: Path, size: int = 3, extra_routes: tuple[int, ...] = ()) -> Cluster:
        cluster = cls(binary, folder, extra_routes=extra_routes)
        for i in range(size):
            cluster.nodes.append(Node(f"n{i + 1}", free_port(), free_port(), folder / f"n{i + 1}"))
        return cluster

    def start(self, node: Node) -> None:
        node.folder.mkdir(parents=True, exist_ok=True)
        routes = [f"nats-route://127.0.0.1:{n.cluster_port}" for n in self.nodes if n is not node]
        routes += [f"nats-route://127.0.0.1:{p}" for p in self.extra_routes]
        conf = node.folder / "server.conf"
        conf.write_text(CONFIG % {
            "name": node.name, "port": node.port, "sys": SYS_USER, "app": APP_USER, "pw": PASSWORD,
            "store": node.folder / "store", "cluster": self.name, "cport": node.cluster_port,
            "routes": ", ".join(routes)})
        log = open(node.folder / "server.log", "ab")  # noqa: SIM115 (the child writes it)
        node.process = subprocess.Popen([self.binary, "-c", str(conf)], stdout=log, stderr=log)
        log.close()

    def start_all(self) -> None:
        for node in self.nodes:
            self.start(node)

    def kill(self, node: Node) -> None:
        if node.process is not None and node.process.poll() is None:
            node.process.send_signal(signal.SIGKILL)
            node.process.wait()
        node.process = None

    def stop_all(self) -> None:
        for node in self.nodes:
            self.kill(node)

    def by_name(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)


class Client(RawClient):
    """A raw NATS client: ``request`` one reply, ``next_msg`` (subject, reply, payload)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        super().__init__(stream)
        self.sid = 0
        self.inbox_seq = 0

    @classmethod
    async def open(cls, port: int, user: str) -> Client:
        client = cls(await trio.open_tcp_stream("127.0.0.1", port))
        await client.read_line()  # INFO
        connect = {"verbose": False, "pedantic": False, "protocol": 1, "headers": True,
                   "user": user, "pass": PASSWORD, "name": f"raft-test-{user}"}
        await client.send(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n")
        while (line := await client.read_line()) != b"PONG\r\n":
            assert not line.startswith(b"-ERR"), line
        return client

    async def sub(self, subject: str) -> int:
        self.sid += 1
        await self.send(f"SUB {subject} {self.sid}\r\n".encode())
        return self.sid

    async def pub(self, subject: str, payload: bytes, reply: str = "") -> None:
        head = f"PUB {subject} {reply} {len(payload)}\r\n" if reply else f"PUB {subject} {len(payload)}\r\n"
        await self.send(head.encode() + payload + b"\r\n")

    async def flush(self) -> None:
        await self.send(b"PING\r\n")

    async def next_msg(self) -> tuple[str, str, bytes]:
        while True:
            line = await self.read_line()
            if line.startswith(b"MSG "):
                parts = line.split()
                reply = parts[3].decode() if len(parts) == 5 else ""
                payload = await self.read_exactly(int(parts[-1]) + 2)
                return parts[1].decode(), reply, payload[:-2]
            if line == b"PING\r\n":
                await self.send(b"PONG\r\n")
            elif line.startswith(b"-ERR"):
                raise AssertionError(line)

    async def request(self, subject: str, payload: bytes = b"") -> bytes:
        self.inbox_seq += 1
        inbox = f"_INBOX.raft.{self.inbox_seq}"
        sid = await self.sub(inbox)
        await self.send(f"UNSUB {sid} 1\r\n".encode())
        await self.pub(subject, payload, inbox)
        while True:
            subject_got, _, data = await self.next_msg()
            if subject_got == inbox:
                return data


async def app_request(port: int, subject: str, payload: bytes = b"") -> dict:
    """A JetStream API request in the APP account, on a fresh connection."""
    client = await Client.open(port, APP_USER)
    try:
        with trio.fail_after(STEP_TIMEOUT):
            return json.loads(await client.request(subject, payload))
    finally:
        await client.stream.aclose()


async def wait_stream_leader(nodes: list[Node], stream: str, exclude: str = "") -> str:
    """The R3 stream's leader once one (not ``exclude``) answers stream info with it."""
    with trio.fail_after(STEP_TIMEOUT):
        while True:
            for node in nodes:
                if node.process is None:
                    continue
                try:
                    with trio.move_on_after(2):
                        info = await app_request(node.port, f"$JS.API.STREAM.INFO.{stream}")
                        leader = info.get("cluster", {}).get("leader", "")
                        if leader and leader != exclude:
                            return leader
                except OSError:
                    pass
            await trio.sleep(POLL * 10)


async def wait_meta_leader(nodes: list[Node]) -> None:
    """Until $JS.API.INFO answers without error (a meta leader is known)."""
    with trio.fail_after(STEP_TIMEOUT):
        while True:
            for node in nodes:
                if node.process is None:
                    continue
                try:
                    with trio.move_on_after(2):
                        info = await app_request(node.port, "$JS.API.INFO")
                        if "error" not in info:
                            return
                except OSError:
                    pass
            await trio.sleep(POLL * 10)


def tempdir() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="raft-", dir=os.environ.get("TMPDIR"))
