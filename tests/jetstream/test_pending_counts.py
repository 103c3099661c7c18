"""The pending count in every ack reply subject (its last token) and in consumer info, counted
as nats-server 2.15.1 counts them (consumer.go numPending/checkNumPending/streamNumPending,
decStreamPending, processStreamSignal, purge): interior deletes before and after a consumer
starts, messages arriving while it is behind, limits dropping old ones, purges (filtered, by
sequence, roll-ups), ``last_per_subject``, filters; and the delivered stream sequence consumer
info reports (the stored state's: a filtered consumer that found nothing more past its last
delivery still says that delivery). nats-py clients, KV watchers included, read it
(``num_pending == 0``: caught up), so it must match.

One nats-py script runs against natserver and must give what was recorded from nats-server
2.15.1 in data/pending_counts_nats_server_2.15.1.json; a live 2.15.1, when installed, must still
give the recording (``python -m tests.jetstream.test_pending_counts`` records it again). The
filtered purges run in a memory stream, as recorded (the file store's count after one was
2.9.10's bug)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import nats
import pytest
from nats.js.api import ConsumerConfig as JsConsumerConfig
from nats.js.api import DeliverPolicy, StorageType

from natserver.jetstream.consumer import Consumer, ConsumerConfig, set_defaults
from natserver.jetstream.store import MemoryStore
from natserver.jetstream.stream import StreamConfig, check_stream_config
from tests.jetstream.recording import assert_nats_server_matches, assert_natserver_matches, record
from tests.reference import needs_nats_server

TIMEOUT = 30
RECORDED = Path(__file__).with_name("data") / "pending_counts_nats_server_2.15.1.json"
JS_CONFIG = 'jetstream { store_dir: "%s" }\n'


def _tokens(msgs) -> list[str]:
    """stream sequence / pending, from each message's ack reply subject."""
    return [f"{m.reply.split('.')[5]}/{m.reply.split('.')[-1]}" for m in msgs]


async def _info(js, stream: str, name: str) -> list[int]:
    info = await js.consumer_info(stream, name)
    return [info.num_pending, info.num_ack_pending, info.delivered.stream_seq, info.ack_floor.stream_seq]


async def _script(url: str) -> dict:
    nc = await nats.connect(url)
    js = nc.jetstream()
    out: dict = {}
    try:
        # Interior deletes before the consumers start: an unfiltered and a filtered one.
        await js.add_stream(name="A", subjects=["a.>"])
        for i in range(12):
            await js.publish(f"a.{i % 3}", b"x")
        await js.delete_msg("A", 5)
        await js.delete_msg("A", 9)
        for name, subject in (("all", "a.>"), ("one", "a.1")):
            sub = await js.pull_subscribe(subject, durable=name, stream="A")
            msgs = await sub.fetch(20, timeout=1)
            out[f"deleted before, {name}"] = _tokens(msgs)
            await msgs[3].ack_sync() if len(msgs) > 3 else await msgs[0].ack_sync()
            out[f"deleted before, {name}, info"] = await _info(js, "A", name)

        # Deletes after the consumer counted (not yet delivered ones stay counted), new
        # messages while it is behind, and the count again after consumer info.
        await js.add_stream(name="B", subjects=["b.>"])
        for i in range(6):
            await js.publish(f"b.{i % 2}", b"x")
        sub = await js.pull_subscribe("b.>", durable="late", stream="B")
        out["late, first"] = _tokens(await sub.fetch(2, timeout=1))
        await js.delete_msg("B", 4)
        await js.delete_msg("B", 6)
        for i in range(3):
            await js.publish(f"b.{i % 2}", b"y")
        out["late, after deletes and new"] = _tokens(await sub.fetch(2, timeout=1))
        out["late, info"] = await _info(js, "B", "late")
        out["late, after info"] = _tokens(await sub.fetch(20, timeout=1))

        # Limits dropping old messages while the consumer is behind.
        await js.add_stream(name="C", subjects=["c.>"], max_msgs=5)
        for i in range(4):
            await js.publish(f"c.{i}", b"x")
        sub = await js.pull_subscribe("c.>", durable="behind", stream="C")
        out["limits, first"] = _tokens(await sub.fetch(1, timeout=1))
        for i in range(6):
            await js.publish(f"c.{i}", b"z")
        out["limits, rest"] = _tokens(await sub.fetch(20, timeout=1))
        out["limits, info"] = await _info(js, "C", "behind")

        # A purge while the consumer is behind, then new messages.
        await js.add_stream(name="D", subjects=["d.>"])
        for i in range(5):
            await js.publish(f"d.{i}", b"x")
        sub = await js.pull_subscribe("d.>", durable="purged", stream="D")
        out["purge, first"] = _tokens(await sub.fetch(2, timeout=1))
        await js.purge_stream("D")
        # nats-server moves its consumers past a purge after answering it (consumer.go purge
        # runs on the consumer's own goroutine): give it that moment, or the live check sees
        # the new messages counted before the purge now and then.
        await asyncio.sleep(0.1)
        for i in range(3):
            await js.publish(f"d.{i}", b"w")
        out["purge, after"] = _tokens(await sub.fetch(20, timeout=1))
        out["purge, info"] = await _info(js, "D", "purged")

        # Purges with a request: a filtered one (a consumer within its subject skips ahead, a
        # wider one only drops what went), one by sequence (every consumer) and a subject
        # roll-up (KV's purge of a key).
        await js.add_stream(name="F", subjects=["f.>"], allow_rollup_hdrs=True, storage=StorageType.MEMORY)
        for i in range(8):
            await js.publish(f"f.{i % 2}", b"x")
        subs = {}
        for name, subject in (("f_all", "f.>"), ("f_0", "f.0"), ("f_1", "f.1")):
            subs[name] = await js.pull_subscribe(subject, durable=name, stream="F")
            out[f"purges {name}, first"] = _tokens(await subs[name].fetch(2, timeout=1))
        await js.purge_stream("F", subject="f.0", keep=1)
        for name in subs:
            out[f"purges {name}, after filtered purge"] = await _info(js, "F", name)
        await js.purge_stream("F", seq=6)
        for name in subs:
            out[f"purges {name}, after purge to 6"] = await _info(js, "F", name)
        await js.publish("f.1", b"rollup", headers={"Nats-Rollup": "sub"})
        for name in subs:
            out[f"purges {name}, after roll-up"] = await _info(js, "F", name)
            out[f"purges {name}, rest"] = _tokens(await subs[name].fetch(20, timeout=1))

        # A roll-up and a purge that each take one message (a KV key's history of 1): reported
        # as that message's removal, not counted again (one ahead of the consumer, one
        # delivered and pending).
        await js.add_stream(name="G", subjects=["g.>"], allow_rollup_hdrs=True)
        for subject in ("g.0", "g.1", "g.2", "g.1"):
            await js.publish(subject, b"x")
        sub = await js.pull_subscribe("g.>", durable="g_all", stream="G")
        out["one purged, first"] = _tokens(await sub.fetch(2, timeout=1))
        await js.publish("g.2", b"rollup", headers={"Nats-Rollup": "sub"})
        out["one purged, after roll-up"] = await _info(js, "G", "g_all")
        await js.purge_stream("G", subject="g.1", keep=1)
        out["one purged, after purge"] = await _info(js, "G", "g_all")
        out["one purged, rest"] = _tokens(await sub.fetch(20, timeout=1))

        # last_per_subject: the subjects whose last message is ahead.
        await js.add_stream(name="E", subjects=["e.>"])
        for i in range(9):
            await js.publish(f"e.{i % 3}", b"x")
        await js.publish("e.other", b"x")
        for name, subject in (("lps", "e.>"), ("lps1", "e.1")):
            config = JsConsumerConfig(deliver_policy=DeliverPolicy.LAST_PER_SUBJECT)
            sub = await js.pull_subscribe(subject, durable=name, stream="E", config=config)
            out[f"last per subject {name}, info before"] = await _info(js, "E", name)
            out[f"last per subject {name}"] = _tokens(await sub.fetch(20, timeout=1))
            await js.publish("e.1", b"again")
            out[f"last per subject {name}, new"] = _tokens(await sub.fetch(20, timeout=1))
    finally:
        await nc.close()
    return out


def run_script(port: int) -> dict:
    return asyncio.run(asyncio.wait_for(_script(f"nats://127.0.0.1:{port}"), TIMEOUT))


class _Stream:
    """What a consumer sees of its stream: a memory store."""

    def __init__(self) -> None:
        self.name = "S"
        self.cfg = check_stream_config(StreamConfig(name="S", subjects=["s.>"]), {})
        self.store = MemoryStore(self.cfg)


def _recount(c: Consumer) -> int:
    """The messages left, by brute force: matching live ones past the read position."""
    store = c.stream.store
    return sum(1 for seq in range(c.delivered_sseq + 1, store.last_seq + 1)
               if (m := store.load_msg(seq)) is not None and c.match is not None and c.match(m.subject))


@pytest.mark.parametrize("seed", range(3))
def test_the_count_is_kept_without_counting_again(monkeypatch, seed):
    """Random new messages, deletes (ahead of the consumer and behind it), deliveries, taken
    back deliveries and looks past the end, for a filtered consumer: after each, the running
    count (the ack reply's, and consumer info's) is what counting afresh gives, and the store
    is never asked to count (bounded work per message: only a start, update, restore or
    purge counts from the store)."""
    rng = random.Random(seed)
    stream = _Stream()
    store = stream.store
    for i in range(300):
        store.store_msg(b"s.%d" % rng.randrange(3), b"", b"x", i + 1)
    cfg = ConsumerConfig(durable_name="d", ack_policy="explicit", filter_subject="s.1")
    set_defaults(cfg)
    c = Consumer(stream, "d", cfg, 1)
    assert c.num_pending() == _recount(c)

    def no_counting(*args):
        raise AssertionError("counted from the store")
    monkeypatch.setattr(store, "filtered_state", no_counting)
    for step in range(2000):
        roll = rng.random()
        if roll < 0.3:
            subject = b"s.%d" % rng.randrange(3)
            c.stream_stored(store.store_msg(subject, b"", b"x", step + 1000), subject)
        elif roll < 0.5 and store.msgs:
            seq = rng.randrange(store.first_seq, store.last_seq + 1)
            m = store.load_msg(seq)
            if m is not None and store.remove_msg(seq):
                c.stream_removed(seq, m.subject)
                c.pending.pop(seq, None)
        elif roll < 0.55:
            got = c.next_msg(step)
            if got is not None:
                c.undo(got[0].seq, got[1])
        else:
            got = c.next_msg(step)
            if got is not None and rng.random() < 0.8:
                c.ack(got[0].seq, 0, step)
        assert c.cached_num_pending() == _recount(c), step
        assert c.checked_num_pending() == _recount(c), step


def test_natserver_counts_pending_as_nats_server(tmp_path):
    assert_natserver_matches(run_script, JS_CONFIG, RECORDED, tmp_path)


@needs_nats_server
def test_the_recording_is_what_nats_server_counts(tmp_path):
    assert_nats_server_matches(run_script, JS_CONFIG, RECORDED, tmp_path)


if __name__ == "__main__":
    record(run_script, JS_CONFIG, RECORDED)
