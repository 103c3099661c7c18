"""Live, when nats-server 2.15.1 is installed: what a fresh 3-node 2.15.1 cluster's R3 stream
group replicates (sniffed on $NRG.> in the system account) decodes and encodes to the same
bytes, and applied to natserver's file store gives what 2.15.1's STREAM.INFO and
STREAM.MSG.GET answer: the recording's tests, against a run of the reference today."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import trio

from natserver.jetstream.replication.group_codec import StreamMsg, decode_stream_op
from natserver.jetstream.replication.stream_group import StreamApplier
from natserver.jetstream.store import FileStore
from natserver.jetstream.stream import StreamConfig
from natserver.jetstream.util import rfc3339nano
from natserver.raft.wire import AppendEntry, EntryType
from tests.raft.nrg_cluster import (
    APP_USER,
    SYS_USER,
    Client,
    Cluster,
    app_request,
    tempdir,
    wait_meta_leader,
    wait_stream_leader,
)
from tests.reference import NATS_SERVER, needs_nats_server

STREAM = "LIVEG"
CONFIG = {"name": STREAM, "subjects": ["lg.>"], "num_replicas": 3, "storage": "file"}
TEST_TIMEOUT = 90  # seconds for the whole test (2.15.1 elections take 4-9 s)
SETTLE = 1.5  # seconds for the last commit to reach the sniffer (a heartbeat carries it)
BIG = 9_000  # over jetstream_cluster.go's compressThreshold: proposed compressed


async def _publish(port: int, subject: str, payload: bytes, hdr: bytes = b"") -> dict:
    client = await Client.open(port, APP_USER)
    try:
        inbox = "_INBOX.live.1"
        await client.sub(inbox)
        if hdr:
            await client.send(f"HPUB {subject} {inbox} {len(hdr)} {len(hdr) + len(payload)}\r\n".encode() + hdr + payload + b"\r\n")
        else:
            await client.pub(subject, payload, inbox)
        while True:
            got, _, data = await client.next_msg()
            if got == inbox:
                return json.loads(data)
    finally:
        await client.stream.aclose()


@needs_nats_server
def test_a_live_stream_group_replays_into_natserver(tmp_path: Path) -> None:
    assert NATS_SERVER is not None
    trio.run(_run, NATS_SERVER, tmp_path)


async def _run(binary: str, tmp_path: Path) -> None:
    with tempdir() as folder, trio.fail_after(TEST_TIMEOUT):
        cluster = Cluster.create(binary, Path(folder))
        cluster.start_all()
        frames: list[tuple[str, bytes]] = []
        try:
            async with trio.open_nursery() as nursery:
                await trio.sleep(1.0)  # the servers listening
                port = cluster.nodes[0].port
                sniffer = await Client.open(port, SYS_USER)
                await sniffer.sub("$NRG.>")
                await sniffer.flush()

                async def sniff() -> None:
                    while True:
                        subject, _, data = await sniffer.next_msg()
                        frames.append((subject, data))

                nursery.start_soon(sniff)
                await wait_meta_leader(cluster.nodes)
                created = await app_request(port, f"$JS.API.STREAM.CREATE.{STREAM}", json.dumps(CONFIG).encode())
                assert "error" not in created, created
                await wait_stream_leader(cluster.nodes, STREAM)
                assert (await _publish(port, "lg.a", b"one"))["seq"] == 1
                assert (await _publish(port, "lg.b", b"two", b"NATS/1.0\r\nX-K: v\r\n\r\n"))["seq"] == 2
                assert (await _publish(port, "lg.big", b"z" * BIG))["seq"] == 3
                assert (await _publish(port, "lg.a", b"four"))["seq"] == 4
                purged = await app_request(port, f"$JS.API.STREAM.PURGE.{STREAM}", b'{"filter":"lg.a","keep":1}')
                assert purged.get("purged") == 1, purged
                await trio.sleep(SETTLE)
                info = await app_request(port, f"$JS.API.STREAM.INFO.{STREAM}")
                msgs = {seq: await app_request(port, f"$JS.API.STREAM.MSG.GET.{STREAM}", b'{"seq":%d}' % seq)
                        for seq in range(1, 5)}
                nursery.cancel_scope.cancel()
        finally:
            cluster.stop_all()

    group = next(s[len("$NRG.AE."):] for s, _ in frames if s.startswith("$NRG.AE.S-"))  # the one stream
    entries: dict[int, tuple] = {}
    commit = 0
    for subject, data in frames:
        if subject == f"$NRG.AE.{group}":
            ae = AppendEntry.decode(data)
            commit = max(commit, ae.commit)
            if ae.entries:
                entries[ae.pindex + 1] = ae.entries
    applier = StreamApplier(FileStore(str(tmp_path / STREAM), StreamConfig.from_json(CONFIG)))
    compressed = 0
    for index in sorted(entries):
        if index > commit:
            break
        for entry in entries[index]:
            if entry.type == EntryType.NORMAL:
                op = decode_stream_op(entry.data)
                if isinstance(op, StreamMsg) and op.compressed:
                    compressed += 1
                    assert decode_stream_op(op.encode()) == op
                else:
                    assert op.encode() == entry.data
            applier.apply(entry)
    assert compressed == 1
    store, state = applier.store, info["state"]
    assert (store.msgs, store.bytes, store.first_seq, store.last_seq) == (
        state["messages"], state["bytes"], state["first_seq"], state["last_seq"])
    for seq, answer in msgs.items():
        got = store.load_msg(seq)
        if "error" in answer:
            assert got is None
            continue
        msg = answer["message"]
        assert got is not None
        assert (got.subject.decode(), got.hdr, got.data, rfc3339nano(got.ts)) == (
            msg["subject"], base64.b64decode(msg.get("hdrs", "")), base64.b64decode(msg.get("data", "")), msg["time"])
