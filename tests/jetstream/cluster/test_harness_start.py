"""A JetStream cluster started the way client test suites start nats-server (issue #32: "real
clients' own cluster tests ... against natserver clusters"): nats.js's test helpers
(test_helpers/launcher.ts ``NatsServer.jetstreamCluster(3)``) write a configuration file per
server (``host``, ``port: -1``, ``http: "127.0.0.1:-1"``, ``leafnodes``, ``websocket`` on random
ports, ``server_tags``, ``ports_file_dir``) and start ``<binary> -c <file>``; they read every
port from the ports file, start a cluster without JetStream, kill it (SIGKILL), write the
route ports into the files with ``jetstream {}`` and a ``server_name`` added, start the three
again and wait until every server's ``/jsz`` names the same meta leader. Then an R3 KV bucket
and a stream's updates, a stream placed by a server's tag, an R3 object store (nats.js "kv -
replicas", "jsm - stream update properties", "streams - mirrors", "os - objm creates right
number of replicas").

The same steps run against natserver (``python -m natserver``) and, when tests.reference finds
nats-server 2.15.1, against it: the test is the comparison. Processes, real time, a hard
timeout."""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import nats
import nats.js.api
import pytest

from tests.reference import NATS_SERVER

TEST_TIMEOUT = 120.0  # seconds of real time for the whole test (the hard timeout)
START_TIMEOUT = 15.0  # seconds for a server's ports file (a loaded machine's Python start)
CONSENSUS_TIMEOUT = 30.0  # seconds for every /jsz to name one meta leader
POLL = 0.05  # seconds between two looks (not a timing assertion)
REQUEST_TIMEOUT = 5.0
_T = "io.nats.jetstream.api.v1."

BINARIES = [pytest.param([sys.executable, "-m", "natserver"], id="natserver")]
if NATS_SERVER:
    BINARIES.append(pytest.param([NATS_SERVER], id="nats-server-2.15.1"))


def to_conf(value: dict | list, indent: str | None = None) -> str:
    """launcher.ts toConf: the harness's own writer of the configuration format (strings
    starting with a digit or ``$`` quoted, maps and arrays one member a line)."""
    pad = indent + "  " if indent is not None else ""
    lines = []
    items = enumerate(value) if isinstance(value, list) else value.items()
    for key, item in items:
        if isinstance(item, list):
            lines += [f"{pad}{key} [", to_conf(item, pad), f"{pad} ]"]
        elif isinstance(item, dict):
            lines += [f"{pad}{'' if isinstance(value, list) else key} {{", to_conf(item, pad), f"{pad} }}"]
        else:
            text = ("true" if item else "false") if isinstance(item, bool) else str(item)
            if isinstance(value, list):
                lines.append(pad + (f'"{text}"' if " " in text or text.startswith("$") else text))
            elif isinstance(item, str) and (text.startswith("$") or text[:1].isdigit()):
                lines.append(f'{pad}{key}: "{text}"')
            else:
                lines.append(f"{pad}{key}: {text}")
    return "\n".join(lines)


def nuid() -> str:
    return secrets.token_hex(11).upper()


@dataclass
class Server:
    config: dict
    process: subprocess.Popen
    port: int
    cluster_port: int
    http_port: int


class Harness:
    """launcher.ts NatsServer.start / cluster / jetstreamCluster, for one binary."""

    def __init__(self, command: list[str], folder: Path) -> None:
        self.command = command
        self.folder = folder
        self.processes: list[subprocess.Popen] = []

    def start(self, config: dict) -> Server:
        config = {"host": "127.0.0.1", "port": -1, "http": "127.0.0.1:-1",
                  "leafnodes": {"listen": "127.0.0.1:-1"}, **config}
        config["server_tags"] = [f"id:{nuid()}"]
        config.setdefault("websocket", {"port": -1, "no_tls": True})
        config["ports_file_dir"] = str(self.folder)
        path = self.folder / f"{nuid()}.conf"
        path.write_text(to_conf(config))
        log = open(self.folder / f"{path.stem}.log", "w")
        process = subprocess.Popen([*self.command, "-c", str(path)], stdout=log, stderr=log, cwd=self.folder)
        self.processes.append(process)
        deadline = time.monotonic() + START_TIMEOUT
        while True:  # (the ports file is named after the executable: any name, this pid)
            found = list(self.folder.glob(f"*_{process.pid}.ports"))
            if found:
                try:
                    ports = json.loads(found[0].read_text())
                    break
                except ValueError:
                    pass  # (half written)
            assert process.poll() is None, (self.folder / f"{path.stem}.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no ports file"
            time.sleep(POLL)

        def port_of(kind: str) -> int:
            return int(ports[kind][0].rsplit(":", 1)[1]) if ports.get(kind) else 0

        return Server(config, process, port_of("nats"), port_of("cluster"), port_of("monitoring"))

    def kill(self, server: Server) -> None:
        server.process.kill()
        server.process.wait()

    def cluster(self, count: int) -> list[Server]:
        """NatsServer.cluster: the first server, then each one routed to it."""
        base = {"cluster": {"name": "C_" + nuid(), "listen": "127.0.0.1:-1"}}
        first = self.start(base)
        servers = [first]
        for _ in range(1, count):
            config = {"cluster": {"name": base["cluster"]["name"], "listen": "127.0.0.1:-1",
                                  "routes": [f"nats://127.0.0.1:{first.cluster_port}"]}}
            servers.append(self.start(config))
        return servers

    def jetstream_cluster(self, count: int = 3) -> list[Server]:
        servers = self.cluster(count)
        for server in servers:
            self.kill(server)
        routes = []
        for server in servers:
            config = server.config
            config.update(port=server.port, http=server.http_port, server_name=nuid(),
                          jetstream={"max_file_store": 1 << 30, "max_mem_store": 1 << 30,
                                     "store_dir": tempfile.mkdtemp(prefix="jetstream", dir=self.folder)})
            config["cluster"]["listen"] = f"127.0.0.1:{server.cluster_port}"
            routes.append(f"nats://{config['cluster']['listen']}")
        for server in servers:
            server.config["cluster"]["routes"] = [r for r in routes if server.config["cluster"]["listen"] not in r]
        started = [self.start(server.config) for server in servers]
        self.wait_for_consensus(started)
        return started

    def wait_for_consensus(self, servers: list[Server]) -> None:
        """dataClusterFormed: every /jsz's meta_cluster names one leader."""
        deadline = time.monotonic() + CONSENSUS_TIMEOUT
        leaders: list = []
        while time.monotonic() < deadline:
            try:
                leaders = [jsz(server)["meta_cluster"].get("leader") for server in servers]
            except OSError:
                leaders = []
            if leaders and all(leaders) and len(set(leaders)) == 1:
                return
            time.sleep(POLL * 5)
        raise AssertionError(f"no meta leader consensus: {leaders}")

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def jsz(server: Server) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/jsz", timeout=REQUEST_TIMEOUT) as answer:
        return json.loads(answer.read())


async def api(nc, subject: str, body=None) -> dict:
    payload = b"" if body is None else json.dumps(body).encode()
    return json.loads((await nc.request(subject, payload, timeout=REQUEST_TIMEOUT)).data)


async def scenarios(servers: list[Server]) -> None:
    nc = await nats.connect(f"nats://127.0.0.1:{servers[0].port}", allow_reconnect=False)
    try:
        # nats.js "kv - replicas": an R3 bucket, its stream updated to R1.
        js = nc.jetstream()
        kv = await js.create_key_value(bucket="a", replicas=3)
        await kv.put("k", b"v")
        assert (await kv.get("k")).value == b"v"
        info = await api(nc, "$JS.API.STREAM.INFO.KV_a")
        assert info["config"]["num_replicas"] == 3 and len(info["cluster"]["replicas"]) == 2, info
        config = {**info["config"], "num_replicas": 1}
        updated = await api(nc, "$JS.API.STREAM.UPDATE.KV_a", config)
        assert updated["config"]["num_replicas"] == 1, updated

        # nats.js "jsm - stream update properties": what may change, what may not.
        for name, subjects in (("a", ["x"]), ("n", ["subj"])):
            created = await api(nc, f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": subjects,
                                                                      "storage": "file"})
            assert created["type"] == _T + "stream_create_response" and "error" not in created, created
        config = (await api(nc, "$JS.API.STREAM.INFO.n"))["config"]
        # (2.10+ changes retention between limits and interest, and max_consumers: nats.js's
        # older test expects both refused)
        for change, refused in ((("storage", "memory"), True), (("retention", "workqueue"), True),
                                (("max_consumers", 5), False), (("subjects", ["subj", "a"]), False),
                                (("max_msgs", 100), False), (("num_replicas", 3), False),
                                (("num_replicas", 1), False), (("sources", [{"name": "a"}]), False),
                                (("sealed", True), False), (("sealed", False), True)):
            key, value = change
            answer = await api(nc, "$JS.API.STREAM.UPDATE.n", {**config, key: value})
            assert ("error" in answer) is refused, (change, answer)
            if not refused:
                assert answer["config"][key] == value, (change, answer)
                config = answer["config"]
        # nats.js "streams - mirrors" (its placement part): a stream placed by a server's own
        # tag (the harness gives each an "id:<nuid>" tag) lands on that server.
        target = servers[1].config
        placed = await api(nc, "$JS.API.STREAM.CREATE.src", {"name": "src", "subjects": ["src.*"], "placement": {
            "cluster": target["cluster"]["name"], "tags": target["server_tags"]}})
        assert placed["cluster"]["leader"] == target["server_name"], placed

        # nats.js "os - objm creates right number of replicas".
        store = await js.create_object_store("test", config=nats.js.api.ObjectStoreConfig(replicas=3))
        assert (await store.status()).stream_info.config.num_replicas == 3
        await store.put("hello", b"world")
        assert (await store.get("hello")).data == b"world"
    finally:
        await nc.close()


@pytest.mark.parametrize("command", BINARIES)
def test_a_jetstream_cluster_started_as_the_nats_js_test_helpers_start_it(tmp_path, command):
    harness = Harness(command, tmp_path)
    try:
        servers = harness.jetstream_cluster(3)
        asyncio.run(asyncio.wait_for(scenarios(servers), TEST_TIMEOUT))
    finally:
        harness.stop_all()
