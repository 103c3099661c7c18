"""``natserver -ns URL`` (issue 30 item 5): the streaming engine as a client of another NATS
server, as ``nats-streaming-server -ns``: a STAN client connected to that server (a live
nats-server 2.15.1, or another natserver) is served by natserver, which listens for no NATS
client itself (monitoring only). Credentials come from the URL or from --user/--pass."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.stan import stan_client as S

DEADLINE = 20.0
REFERENCE = "/opt/nats-server-2.15.1/nats-server"
REPO = str(Path(__file__).resolve().parents[2])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_ports_file(directory: Path, proc: subprocess.Popen, log_path: Path) -> dict:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        for path in directory.glob("*.ports"):
            try:
                if path.stat().st_size:
                    return json.loads(path.read_text())
            except (FileNotFoundError, ValueError):
                pass
        if proc.poll() is not None:
            raise RuntimeError("server exited: " + log_path.read_text(errors="replace"))
        time.sleep(0.02)
    raise RuntimeError("no ports file: " + log_path.read_text(errors="replace"))


class Proc:
    """A server started from its command line, stopped (SIGKILL if need be) by ``stop()``."""

    def __init__(self, tmp_path: Path, name: str, argv: list[str]) -> None:
        self.ports_dir = tmp_path / f"{name}-ports"
        self.ports_dir.mkdir()
        self.log_path = tmp_path / f"{name}.log"
        self.log = open(self.log_path, "ab")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p))
        self.proc = subprocess.Popen(argv + ["--ports_file_dir", str(self.ports_dir)], stdout=subprocess.DEVNULL,
                                     stderr=self.log, env=env, cwd=tmp_path)
        try:
            self.ports = _wait_ports_file(self.ports_dir, self.proc, self.log_path)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


def natserver_ns(tmp_path: Path, url: str, *extra: str) -> Proc:
    return Proc(tmp_path, "natserver-ns", [sys.executable, "-m", "natserver", "-a", "127.0.0.1", "-m", "-1",
                                           "-ns", url, "-cid", "ns-cluster", *extra])


async def _round_trip(url: str) -> None:
    """Publish, subscribe from the first message, ack, and see the channel counted."""
    sc = await S.connect(url, "ns-client", cluster_id="ns-cluster")
    try:
        for i in range(3):
            await sc.publish("orders", b"m%d" % i)
        got: asyncio.Queue = asyncio.Queue()

        async def cb(msg):
            await got.put((msg.seq, msg.data))
            await sc.ack(msg)

        await sc.subscribe("orders", cb=cb, deliver_all_available=True, durable_name="d", manual_acks=True)
        seen = [await asyncio.wait_for(got.get(), DEADLINE) for _ in range(3)]
        assert seen == [(1, b"m0"), (2, b"m1"), (3, b"m2")]
        await sc.publish("orders", b"live")
        assert await asyncio.wait_for(got.get(), DEADLINE) == (4, b"live")
    finally:
        await S.close(sc)


def _check_served_by(proc: Proc) -> None:
    assert "nats" not in proc.ports  # no NATS listener of its own: monitoring only
    with urllib.request.urlopen(proc.ports["monitoring"][0] + "/streaming/channelsz?channel=orders&subs=1",
                                timeout=5) as resp:
        channel = json.loads(resp.read())
    assert channel["msgs"] == 4 and channel["last_seq"] == 4
    assert [s["durable_name"] for s in channel["subscriptions"]] == ["d"]


@pytest.mark.skipif(not os.path.exists(REFERENCE), reason="needs nats-server 2.15.1")
def test_stan_through_nats_server_2_15_1(tmp_path):
    port = _free_port()
    nats = subprocess.Popen([REFERENCE, "-a", "127.0.0.1", "-p", str(port), "--user", "stan", "--pass", "s3cret"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        # credentials on the command line, as nats-streaming-server's -user/-pass
        proc = natserver_ns(tmp_path, f"nats://127.0.0.1:{port}", "--user", "stan", "--pass", "s3cret")
        try:
            asyncio.run(asyncio.wait_for(_round_trip(f"nats://stan:s3cret@127.0.0.1:{port}"), DEADLINE))
            _check_served_by(proc)
            log = proc.log_path.read_text()
            assert "STREAM: Connected to NATS server at nats://127.0.0.1:%d" % port in log
            assert "Listening for client connections" not in log
        finally:
            proc.stop()
    finally:
        nats.terminate()
        nats.wait(10)


def test_stan_through_another_natserver(tmp_path, threaded_server):
    backing = threaded_server(username="stan", password="s3cret")
    # credentials in the URL, as nats-streaming-server takes them
    proc = natserver_ns(tmp_path, f"nats://stan:s3cret@127.0.0.1:{backing.port}")
    try:
        asyncio.run(asyncio.wait_for(_round_trip(f"nats://stan:s3cret@127.0.0.1:{backing.port}"), DEADLINE))
        _check_served_by(proc)
        # the engine's connection is a client of the backing server, named as nats-streaming-server's
        names = [c.name for c in list(backing.server.clients.values())]
        assert "_NSS-ns-cluster-general" in names
    finally:
        proc.stop()


def test_refused_credentials_stop_the_server(tmp_path, threaded_server):
    backing = threaded_server(username="stan", password="s3cret")
    argv = [sys.executable, "-m", "natserver", "-a", "127.0.0.1", "-ns", f"nats://stan:wrong@127.0.0.1:{backing.port}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=DEADLINE, env=env, cwd=tmp_path)
    assert done.returncode != 0
    assert "Authorization Violation" in done.stderr


def test_ns_flag_and_config_keys():
    from natserver.config.flags import build_options, parse_args
    from natserver.config.stan import StanOptions

    options = build_options(parse_args(["-ns", "nats://h:4222", "--tls_client_cacert", "ca.pem", "--secure"]))
    assert options.stan.nats_server_url == "nats://h:4222"
    assert options.stan.tls_client_ca == "ca.pem" and options.stan.secure
    stan = StanOptions.from_config({"nats_server_url": "nats://a:1,nats://b:2", "credentials": "x.creds",
                                    "tls": {"client_cert": "c.pem", "client_key": "k.pem", "server_hostname": "s"}})
    assert (stan.nats_server_url, stan.credentials, stan.tls_client_cert, stan.tls_server_name) == \
        ("nats://a:1,nats://b:2", "x.creds", "c.pem", "s")
    assert stan.warnings == []


def test_stan_over_tls_with_a_client_certificate(tmp_path, threaded_server):
    """-ns tls://... with nats-streaming-server's -tls_client_cacert/-tls_client_cert/-tls_client_key
    and --auth: the backing server verifies the engine's certificate and wants the token."""
    from tests.auth.test_tls import Certs

    certs = Certs(tmp_path)
    backing = threaded_server(tls=certs.tls(ca_file=certs.ca, verify=True), authorization="t0ken")
    proc = natserver_ns(tmp_path, f"tls://127.0.0.1:{backing.port}", "--auth", "t0ken", "--tls_client_cacert", certs.ca,
                        "--tls_client_cert", certs.client, "--tls_client_key", certs.client_key)
    try:
        async def main():
            nc = await S.connect_nats(f"tls://127.0.0.1:{backing.port}", token="t0ken",
                                      tls=certs.client_context(certs.client, certs.client_key))
            sc = await S.connect("", "tls-client", cluster_id="ns-cluster", nc=nc)
            got: asyncio.Queue = asyncio.Queue()

            async def cb(msg):
                await got.put(msg.data)

            await sc.subscribe("secure", cb=cb)
            await sc.publish("secure", b"over tls")
            assert await asyncio.wait_for(got.get(), DEADLINE) == b"over tls"
            await S.close(sc)

        asyncio.run(asyncio.wait_for(main(), DEADLINE))
    finally:
        proc.stop()


def test_engine_reconnects_after_the_nats_server_restarts(tmp_path):
    """nats-streaming-server reconnects for ever (every 250 ms): its clients, subscriptions and
    messages are still there once the NATS server is back."""
    from natserver.testing import NatsServer

    backing = NatsServer(clock="real").start()
    proc = natserver_ns(tmp_path, backing.url)
    try:
        async def main():
            nc = await S.connect_nats(backing.url, allow_reconnect=True, reconnect_time_wait=0.1,
                                      max_reconnect_attempts=-1)
            sc = await S.connect("", "survivor", cluster_id="ns-cluster", nc=nc)
            got: asyncio.Queue = asyncio.Queue()

            async def cb(msg):
                await got.put((msg.seq, msg.data))

            await sc.subscribe("events", cb=cb, durable_name="keep")
            await sc.publish("events", b"before")
            assert await asyncio.wait_for(got.get(), DEADLINE) == (1, b"before")
            await asyncio.get_running_loop().run_in_executor(None, backing.restart)
            deadline = time.monotonic() + DEADLINE
            while True:  # publishes sent before both connections are back time out; retry
                try:
                    await sc.publish("events", b"after", ack_wait=1)
                    break
                except Exception:
                    assert time.monotonic() < deadline, "the engine never came back"
                    await asyncio.sleep(0.1)
            assert await asyncio.wait_for(got.get(), DEADLINE) == (2, b"after")
            await S.close(sc)

        asyncio.run(asyncio.wait_for(main(), DEADLINE * 2))
        assert 'STREAM: connection "_NSS-ns-cluster-general" reconnected to NATS Server at' in proc.log_path.read_text()
    finally:
        proc.stop()
        backing.stop()


def test_engine_fails_over_to_a_server_the_cluster_told_it_of(tmp_path):
    """-ns names one server of a cluster; when it goes, the engine reconnects to another one
    that server's INFO listed in connect_urls (nats.go's discovered servers), and STAN clients
    there are served (node-nats-streaming's 'connection_lost when replaced' depends on it)."""
    from natserver.testing_cluster import NatsCluster

    with NatsCluster(size=2) as cluster:
        proc = natserver_ns(tmp_path, cluster.urls[0])
        try:
            cluster.stop(0)

            async def main():
                deadline = time.monotonic() + DEADLINE
                while True:  # until the engine is back, on node 1
                    try:
                        sc = await S.connect(cluster.urls[1], "after-failover", cluster_id="ns-cluster",
                                             connect_timeout=1)
                        break
                    except Exception:
                        assert time.monotonic() < deadline, "the engine never came back"
                        await asyncio.sleep(0.1)
                got: asyncio.Queue = asyncio.Queue()

                async def cb(msg):
                    await got.put(msg.data)

                await sc.subscribe("failover", cb=cb)
                await sc.publish("failover", b"served by node 1")
                assert await asyncio.wait_for(got.get(), DEADLINE) == b"served by node 1"
                await S.close(sc)

            asyncio.run(asyncio.wait_for(main(), DEADLINE * 2))
            port1 = cluster.urls[1].rsplit(":", 1)[1]
            assert f'reconnected to NATS Server at "nats://127.0.0.1:{port1}"' in proc.log_path.read_text()
        finally:
            proc.stop()


def test_transport_survives_what_a_broken_server_sends():
    """Malformed MSG lines and an oversized message end the connection (it is then made
    again), never the engine; a callback that raises loses only its message."""
    import trio

    from natserver.config.stan import StanOptions
    from natserver.stan.transport import NatsTransport

    async def main():
        transport = NatsTransport(StanOptions(nats_server_url="nats://127.0.0.1:1"), name="t")
        got = []
        transport.subscribe("a", lambda *args: got.append(args))

        def boom(*args):
            raise RuntimeError("callback failed")

        transport.subscribe("b", boom)
        for bad in (b"MSG 5\r\n", b"MSG a x 3\r\nabc\r\n", b"HMSG a 1 9 3\r\nabc\r\n",
                    b"MSG a 1 %d\r\n" % (10**12), b"INFO {not json\r\n"):
            left, right = trio.testing.memory_stream_pair()
            await left.send_all(bad)
            with pytest.raises(ValueError):
                with trio.fail_after(5):
                    await transport._reader(right, bytearray())
        left, right = trio.testing.memory_stream_pair()
        await left.send_all(b"MSG b 2 1\r\nx\r\nMSG a 1 _INBOX.r 2\r\nok\r\n")
        await left.aclose()
        with pytest.raises(trio.BrokenResourceError):
            with trio.fail_after(5):
                await transport._reader(right, bytearray())
        assert got == [(b"a", b"_INBOX.r", None, b"ok")]

    trio.run(main)


def test_stan_through_a_server_that_wants_an_nkey(tmp_path, threaded_server, monkeypatch):
    """The streaming block's nkey_seed_file (nats-streaming-server's NKeySeedFile): the engine
    signs the server's nonce with the seed, as nats.go's NkeyOptionFromSeed does."""
    from natserver.auth import nkeys
    from natserver.auth.users import NkeyUser

    monkeypatch.setitem(sys.modules, "nkeys", nkeys)  # nats-py signs the nonce with the nkeys package's API
    pair = nkeys.create_user()
    seed_file = tmp_path / "stan.nk"
    seed_file.write_bytes(pair.seed + b"\n")
    backing = threaded_server(nkeys=[NkeyUser(pair.public_key.decode())], users=[])
    conf = tmp_path / "ns.conf"
    conf.write_text(f'streaming {{ cluster_id: "ns-cluster", ns: "nats://127.0.0.1:{backing.port}", '
                    f'nkey_seed_file: "{seed_file}" }}\n')
    proc = Proc(tmp_path, "natserver-nkey", [sys.executable, "-m", "natserver", "-a", "127.0.0.1", "-m", "-1",
                                             "-c", str(conf)])
    try:
        async def main():
            nc = await S.connect_nats(backing.url, nkeys_seed_str=pair.seed.decode())
            sc = await S.connect("", "nkey-client", cluster_id="ns-cluster", nc=nc)
            await sc.publish("signed", b"ok")
            await S.close(sc)

        asyncio.run(asyncio.wait_for(main(), DEADLINE))
        names = [c.name for c in list(backing.server.clients.values())]
        assert "_NSS-ns-cluster-general" in names
    finally:
        proc.stop()


def test_stan_through_an_operator_mode_server_with_a_creds_file(tmp_path, threaded_server, monkeypatch):
    """-ns with the streaming block's credentials (a .creds file: a user JWT and its seed), as
    nats-streaming-server's NATSCredentials: the engine presents the JWT and signs the nonce."""
    from natserver.auth import nkeys
    from natserver.auth.jwt import OperatorTree, creds
    from natserver.config.mapping import options_from_file

    monkeypatch.setitem(sys.modules, "nkeys", nkeys)  # nats-py signs the nonce with the nkeys package's API
    tree = OperatorTree()
    tree.account("A")
    operator_file = tmp_path / "op.jwt"
    operator_file.write_text(tree.operator_jwt)
    server_conf = tmp_path / "op.conf"
    server_conf.write_text(tree.config(str(operator_file)))
    options = options_from_file(server_conf)
    backing = threaded_server(trusted_operators=options.trusted_operators, resolver=options.resolver,
                              resolver_preload=options.resolver_preload)
    engine_creds, client_creds = tmp_path / "stan.creds", tmp_path / "client.creds"
    engine_token, engine_key = tree.user("A", "stan")
    engine_creds.write_text(creds(engine_token, engine_key.seed))
    token, key = tree.user("A", "client")
    client_creds.write_text(creds(token, key.seed))
    conf = tmp_path / "ns.conf"
    conf.write_text(f'streaming {{ cluster_id: "ns-cluster", nats_server_url: "nats://127.0.0.1:{backing.port}", '
                    f'credentials: "{engine_creds}" }}\n')
    proc = Proc(tmp_path, "natserver-creds", [sys.executable, "-m", "natserver", "-a", "127.0.0.1", "-m", "-1",
                                              "-c", str(conf)])
    try:
        async def main():
            nc = await S.connect_nats(backing.url, user_credentials=str(client_creds))
            sc = await S.connect("", "creds-client", cluster_id="ns-cluster", nc=nc)
            await sc.publish("with.creds", b"ok")
            await S.close(sc)

        asyncio.run(asyncio.wait_for(main(), DEADLINE))
    finally:
        proc.stop()
