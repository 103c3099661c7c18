"""The system account (issue #18 item 7, issue #27 item 7): $SYS advisories and requests as
nats-server 2.15.1 sends them. The same probe (a system user subscribed to $SYS.>, a client of
account A coming and going, then every request subject) runs against natserver, and its field
sets must be the ones recorded from nats-server in data/nats_server_2_15_1.json (``python -m
tests.system.test_system`` records them again; a live nats-server 2.15.1, when installed, must
still give them)."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path

import nats
import trio

from natserver.routing.accounts import AccountConfig
from tests.auth.test_auth_helpers import HAVE_NATS_SERVER, NATS_SERVER, needs_nats_server, running, start_error
from tests.cluster.helpers import connect, route_url, start_node, wait_routes
from tests.conftest import make_options

TIMEOUT = 30
RECORDED = Path(__file__).with_name("data") / "nats_server_2_15_1.json"
CONFIG = """
server_name: ref
accounts {
  SYS { users [{user: sys, password: sys}] }
  A { users [{user: a, password: a}] }
}
system_account: SYS
"""
# Request subjects, in the order the probe sends them. Those nats-server does not answer (an
# unknown kind, an account's CONNS and STATZ) are asked too: no answer.
REQUESTS = [
    "$SYS.REQ.SERVER.PING", "$SYS.REQ.SERVER.PING.STATSZ", "$SYS.REQ.SERVER.PING.VARZ", "$SYS.REQ.SERVER.PING.CONNZ",
    "$SYS.REQ.SERVER.PING.SUBSZ", "$SYS.REQ.SERVER.PING.ROUTEZ", "$SYS.REQ.SERVER.PING.GATEWAYZ",
    "$SYS.REQ.SERVER.PING.LEAFZ", "$SYS.REQ.SERVER.PING.ACCOUNTZ", "$SYS.REQ.SERVER.PING.JSZ",
    "$SYS.REQ.SERVER.PING.HEALTHZ", "$SYS.REQ.SERVER.PING.IDZ", "$SYS.REQ.SERVER.PING.NOPE",
    "$SYS.REQ.ACCOUNT.A.CONNZ", "$SYS.REQ.ACCOUNT.A.SUBSZ", "$SYS.REQ.ACCOUNT.A.INFO", "$SYS.REQ.ACCOUNT.A.CONNS",
    "$SYS.REQ.ACCOUNT.A.STATZ", "$SYS.REQ.ACCOUNT.A.LEAFZ", "$SYS.REQ.ACCOUNT.A.JSZ", "$SYS.REQ.ACCOUNT.PING.STATZ",
    "$SYS.REQ.ACCOUNT.PING.CONNZ", "$SYS.REQ.USER.INFO",
]
# Where natserver's answers knowingly differ from nats-server's (see the README): the internal
# service imports nats-server adds to every account (listed in A's INFO, subscribed in its SUBSZ).
KNOWN_DIFFERENCES = {"$SYS.REQ.ACCOUNT.A.SUBSZ", "$SYS.REQ.ACCOUNT.A.INFO"}


def shape(value):
    """A JSON document's field names and value kinds (values differ from run to run)."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(item) for item in value[:1]]
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return "null" if value is None else "string"


class _Conn:
    def __init__(self, port: int, user: str, extra: bytes = b"") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.buf = b""
        self.read_until(b"\r\n")
        connect = {"verbose": False, "user": user, "pass": user, "name": f"n-{user}", "lang": "python3", "version": "1.0"}
        self.sock.sendall(b"CONNECT " + json.dumps(connect).encode() + b"\r\n" + extra + b"PING\r\n")
        self.read_until(b"PONG\r\n")

    def read_until(self, marker: bytes) -> bytes:
        deadline = time.monotonic() + TIMEOUT
        while marker not in self.buf:
            assert time.monotonic() < deadline, self.buf[-300:]
            chunk = self.sock.recv(1 << 20)
            assert chunk, "closed"
            self.buf += chunk
        data, _, self.buf = self.buf.partition(marker)
        return data + marker

    def messages_until_pong(self) -> list[tuple[str, bytes]]:
        """Every MSG before the PONG that answers a PING sent now."""
        self.sock.sendall(b"PING\r\n")
        data = self.read_until(b"PONG\r\n")
        out = []
        while data:
            line, _, data = data.partition(b"\r\n")
            if line.startswith(b"MSG "):
                size = int(line.split()[-1])
                out.append((line.split()[1].decode(), data[:size]))
                data = data[size + 2 :]
        return out


def probe(port: int, server_id_wait: float = 0.5) -> dict:
    system = _Conn(port, "sys")
    time.sleep(0.3)  # its own connect events (nats-server sends them a moment later) pass first
    system.sock.sendall(b"SUB $SYS.> 1\r\nSUB _INBOX.r 2\r\n")
    system.messages_until_pong()
    account = _Conn(port, "a")
    account.sock.sendall(b"PUB x 1\r\nx\r\n")
    account.sock.sendall(b"PING\r\n")
    account.read_until(b"PONG\r\n")
    account.sock.close()
    time.sleep(server_id_wait)  # the disconnect event follows the close
    events = [(subject, json.loads(payload)) for subject, payload in system.messages_until_pong()]
    ids = {event["server"]["id"] for _, event in events if "server" in event}
    out = {"events": {}, "requests": {}}
    for subject, event in events:
        for server_id in ids:
            subject = subject.replace(server_id, "<id>")
        if subject.endswith(".STATSZ") or ".$G." in subject:
            continue  # timing-dependent: the heartbeat, and nats-server's early $G count
        out["events"][subject] = shape(event)
    for subject in REQUESTS:
        body = b'{"subscriptions":true}' if subject.endswith("CONNZ") else b""
        system.sock.sendall(b"PUB %s _INBOX.r %d\r\n%s\r\n" % (subject.encode(), len(body), body))
        time.sleep(0.05)  # (answers from several servers would come within this)
        answers = [p for s, p in system.messages_until_pong() if s == "_INBOX.r"]
        out["requests"][subject] = [shape(json.loads(p)) for p in answers]
    system.sock.close()
    return out


def _recorded() -> dict:
    recorded = json.loads(RECORDED.read_text())
    recorded["events"] = {s: e for s, e in recorded["events"].items() if not s.endswith(".STATSZ") and ".$G." not in s}
    return recorded


def _compare(ours: dict, theirs: dict) -> None:
    assert ours["events"] == theirs["events"]
    for subject in REQUESTS:
        if subject in KNOWN_DIFFERENCES:
            assert len(ours["requests"][subject]) == 1, subject
            continue
        assert ours["requests"][subject] == theirs["requests"][subject], subject


def test_events_and_requests_have_nats_servers_fields(tmp_path):
    with running("natserver", CONFIG, tmp_path) as port:
        ours = probe(port)
    _compare(ours, _recorded())
    # The connect and disconnect advisories, in nats-server's order.
    assert list(ours["events"]) == [
        "$SYS.SERVER.ACCOUNT.A.CONNS", "$SYS.ACCOUNT.A.SERVER.CONNS", "$SYS.ACCOUNT.A.CONNECT",
        "$SYS.ACCOUNT.A.DISCONNECT",
    ]


@needs_nats_server
def test_the_recording_is_what_nats_server_sends(tmp_path):
    with running("nats-server", CONFIG, tmp_path) as port:
        theirs = probe(port)
    recorded = _recorded()
    assert theirs["events"] == recorded["events"]
    for subject in REQUESTS:
        if subject not in ("$SYS.REQ.ACCOUNT.A.SUBSZ", "$SYS.REQ.ACCOUNT.A.INFO"):  # list lengths vary
            assert [list(a) for a in theirs["requests"][subject]] == [list(a) for a in recorded["requests"][subject]], subject


def test_nats_py_system_user(threaded_server):
    accounts = [AccountConfig("SYS"), AccountConfig("A")]
    from natserver.auth.users import User

    users = [User("sys", "sys", account="SYS"), User("a", "a", account="A")]
    handle = threaded_server(accounts=accounts, users=users, system_account="SYS")
    server_id = handle.server.server_id

    async def main():
        system = await nats.connect(handle.url, user="sys", password="sys")
        other = await nats.connect(handle.url, user="a", password="a")
        try:
            seen = []

            async def collect(msg):
                seen.append(msg)

            await other.subscribe("$SYS.>", cb=collect)  # another account's subject space: nothing
            await other.flush()
            ping = json.loads((await system.request("$SYS.REQ.SERVER.PING", b"", timeout=5)).data)
            assert ping["server"]["id"] == server_id and ping["statsz"]["connections"] == 2
            connz = json.loads((await system.request(f"$SYS.REQ.SERVER.{server_id}.CONNZ",
                                                     b'{"subscriptions": true}', timeout=5)).data)
            rows = {row["name"] if "name" in row else row["cid"]: row for row in connz["data"]["connections"]}
            assert any("$SYS.>" in row.get("subscriptions_list", []) for row in rows.values())
            varz = json.loads((await system.request("$SYS.REQ.SERVER.PING.VARZ", b"", timeout=5)).data)
            assert varz["data"]["server_id"] == server_id
            bad = json.loads((await system.request("$SYS.REQ.SERVER.PING.CONNZ", b'{"sort": "nope"}', timeout=5)).data)
            assert bad["data"] is None and bad["error"] == {"code": 500, "description": "invalid sorting option: nope"}
            accountz = json.loads((await system.request("$SYS.REQ.SERVER.PING.ACCOUNTZ", b"", timeout=5)).data)
            assert accountz["data"]["system_account"] == "SYS"
            assert sorted(accountz["data"]["accounts"]) == ["$G", "A", "SYS"]
            statsz = await system.subscribe(f"$SYS.SERVER.{server_id}.STATSZ")
            beat = json.loads((await statsz.next_msg(timeout=10)).data)  # the heartbeat
            assert beat["statsz"]["active_accounts"] == 2
            await asyncio.sleep(0.1)
            assert seen == []
        finally:
            await system.close()
            await other.close()

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


def test_global_account_clients_get_connection_counts_only(threaded_server):
    """nats-server reports $G's connection counts (CONNS) but no CONNECT/DISCONNECT for it."""
    from natserver.auth.users import User

    handle = threaded_server(accounts=[AccountConfig("SYS")], users=[User("sys", "sys", account="SYS"), User("g", "g")],
                             system_account="SYS")

    async def main():
        system = await nats.connect(handle.url, user="sys", password="sys")
        # (a $G client before anyone listens: nothing sent, and the next connect, once someone
        # listens, is reported all the same)
        early = await nats.connect(handle.url, user="g", password="g")
        try:
            events = await system.subscribe("$SYS.>")
            await system.flush()
            other = await nats.connect(handle.url, user="g", password="g")
            await other.close()
            seen = []
            while len(seen) < 4:
                msg = await events.next_msg(timeout=5)
                if not msg.subject.endswith(".STATSZ"):  # (the heartbeat may come in between)
                    seen.append((msg.subject, json.loads(msg.data).get("conns")))
            assert seen == [("$SYS.SERVER.ACCOUNT.$G.CONNS", 2), ("$SYS.ACCOUNT.$G.SERVER.CONNS", 2),
                            ("$SYS.SERVER.ACCOUNT.$G.CONNS", 1), ("$SYS.ACCOUNT.$G.SERVER.CONNS", 1)]
        finally:
            await early.close()
            await system.close()

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


async def test_no_system_account(nursery):
    import natserver

    server = await nursery.start(natserver.serve, make_options(no_system_account=True))
    assert server.system is None and "$SYS" not in server.accounts.by_name
    other = await nursery.start(natserver.serve, make_options())
    assert other.system is not None and other.system.name == "$SYS"
    with trio.fail_after(5):
        assert other.monitor is None  # monitoring stays off: the system account does not need it


def test_a_missing_system_account_stops_the_server(tmp_path):
    config = "accounts { A { users [{user: a, password: a}] } }\nsystem_account: NOPE\n"
    assert start_error("natserver", config, tmp_path) == "natserver: error resolving system account: account missing"
    if HAVE_NATS_SERVER:
        assert start_error("nats-server", config, tmp_path) == "nats-server: error resolving system account: account missing"


async def test_every_node_of_a_cluster_answers_a_ping(nursery):
    """$SYS interest crosses routes as in nats-server: `nats server list` sees every node."""
    a = await start_node(nursery, no_system_account=False)
    b = await start_node(nursery, routes=[route_url(a)], no_system_account=False)
    await wait_routes([a, b], 1)
    client = await connect(a.port)
    with trio.fail_after(TIMEOUT):
        # Anonymous clients are in $G: a system user needs accounts; here the test publishes
        # into $SYS itself, as a system user's request would arrive.
        answers = []

        def collect(subject, reply, headers, body):
            answers.append(json.loads(body)["server"]["id"])

        a.system.account.subscribe("_INBOX.ping", collect)
        while (b"$SYS", b"$SYS.REQ.SERVER.PING", None) not in getattr(
                a.cluster.route_for(b.server_id, b"$SYS"), "entries", ()):  # ($SYS's dedicated route)
            await trio.sleep(0.01)
        a.system.account.publish(b"$SYS.REQ.SERVER.PING", b"_INBOX.ping", None, b"")
        a.flush_touched()
        while len(answers) < 2:
            await trio.sleep(0.01)
    assert sorted(answers) == sorted([a.server_id, b.server_id])
    await client.aclose()


if __name__ == "__main__":  # record nats-server's field sets again
    import tempfile

    assert HAVE_NATS_SERVER, f"{NATS_SERVER} is not installed"
    with tempfile.TemporaryDirectory() as folder, running("nats-server", CONFIG, Path(folder)) as port:
        data = probe(port)
    RECORDED.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {RECORDED}")
