"""natserver.nsq.engine with time passed in: fan-out, RDY, in-flight timeouts, REQ,
TOUCH, deferred messages, pause, ephemeral cleanup, disk overflow and restart."""

from __future__ import annotations

import itertools

from natserver.nsq.config import NsqOptions
from natserver.nsq.engine import Consumer, Engine


class FakeConsumer(Consumer):
    _ids = itertools.count(1)

    def __init__(self, msg_timeout=60.0, rdy=0):
        super().__init__(next(self._ids), msg_timeout=msg_timeout)
        self.rdy = rdy
        self.got = []
        self.closed = False

    def deliver(self, message):
        self.got.append((message.id, message.body, message.attempts))

    def close_by_server(self):
        self.closed = True


def engine(tmp_path, **changes) -> Engine:
    clock = itertools.count(1_700_000_000_000_000_000, 1_000_000)
    return Engine(NsqOptions(data_path=str(tmp_path / "data"), **changes), clock_ns=lambda: next(clock), node_id=1)


def subscribe(eng, topic, channel, consumer, now=0.0):
    ch = eng.get_topic(topic).get_channel(channel, now)
    ch.add_client(consumer, now)
    return ch


def test_topic_without_channel_buffers_for_the_first_channel(tmp_path):
    eng = engine(tmp_path)
    eng.publish("t", [b"a", b"b"], 0.0)
    assert eng.topics["t"].depth == 2
    consumer = FakeConsumer(rdy=10)
    subscribe(eng, "t", "first", consumer)
    assert [body for _, body, _ in consumer.got] == [b"a", b"b"]
    assert eng.topics["t"].depth == 0
    late = FakeConsumer(rdy=10)
    subscribe(eng, "t", "second", late)
    assert late.got == []  # only the first channel gets what the topic kept


def test_fan_out_copies_to_every_channel_with_the_same_id(tmp_path):
    eng = engine(tmp_path)
    a, b = FakeConsumer(rdy=5), FakeConsumer(rdy=5)
    subscribe(eng, "t", "a", a)
    subscribe(eng, "t", "b", b)
    eng.publish("t", [b"x"], 0.0)
    assert a.got[0][:2] == b.got[0][:2]
    assert a.got[0][2] == b.got[0][2] == 1


def test_rdy_limits_in_flight_and_fin_releases(tmp_path):
    eng = engine(tmp_path)
    c = FakeConsumer(rdy=0)
    ch = subscribe(eng, "t", "c", c)
    eng.publish("t", [b"1", b"2", b"3"], 0.0)
    assert c.got == []
    c.set_rdy(2, 0.0)
    assert len(c.got) == 2 and ch.depth == 1
    assert ch.finish(c, c.got[0][0], 0.0) is None
    assert len(c.got) == 3
    assert ch.finish(c, c.got[0][0], 0.0) == "ID not in flight"


def test_one_message_to_one_client_of_a_channel(tmp_path):
    eng = engine(tmp_path)
    c1, c2 = FakeConsumer(rdy=100), FakeConsumer(rdy=100)
    ch = subscribe(eng, "t", "c", c1)
    ch.add_client(c2, 0.0)
    eng.publish("t", [b"%d" % i for i in range(10)], 0.0)
    bodies = [b for _, b, _ in c1.got + c2.got]
    assert sorted(bodies) == sorted(b"%d" % i for i in range(10))
    assert c1.got and c2.got  # both took turns


def test_fin_by_another_client_is_refused(tmp_path):
    eng = engine(tmp_path)
    c1, c2 = FakeConsumer(rdy=1), FakeConsumer(rdy=0)
    ch = subscribe(eng, "t", "c", c1)
    ch.add_client(c2, 0.0)
    eng.publish("t", [b"x"], 0.0)
    assert ch.finish(c2, c1.got[0][0], 0.0) == "client does not own message"


def test_timeout_requeues_with_attempts(tmp_path):
    eng = engine(tmp_path)
    c = FakeConsumer(msg_timeout=1.0, rdy=1)
    ch = subscribe(eng, "t", "c", c)
    eng.publish("t", [b"x"], 0.0)
    eng.process(0.5)
    assert len(c.got) == 1
    eng.process(1.0)
    assert [attempts for _, _, attempts in c.got] == [1, 2]
    assert ch.timeout_count == 1
    assert c.in_flight == 1


def test_touch_extends_up_to_max_msg_timeout(tmp_path):
    eng = engine(tmp_path, max_msg_timeout=2.5)
    c = FakeConsumer(msg_timeout=1.0, rdy=1)
    ch = subscribe(eng, "t", "c", c)
    eng.publish("t", [b"x"], 0.0)
    msg_id = c.got[0][0]
    for now in (0.9, 1.8):
        assert ch.touch(c, msg_id, now) is None
        eng.process(now + 0.5)
        assert len(c.got) == 1
    eng.process(2.5)  # capped: delivered at 0, max_msg_timeout 2.5
    assert len(c.got) == 2


def test_req_immediate_and_deferred(tmp_path):
    eng = engine(tmp_path)
    c = FakeConsumer(rdy=1)
    ch = subscribe(eng, "t", "c", c)
    eng.publish("t", [b"x"], 0.0)
    assert ch.requeue(c, c.got[-1][0], 0.0, 0.0) is None
    assert [a for _, _, a in c.got] == [1, 2]
    assert ch.requeue(c, c.got[-1][0], 5.0, 1.0) is None
    assert len(ch.deferred) == 1 and len(c.got) == 2
    eng.process(5.9)
    assert len(c.got) == 2
    eng.process(6.0)
    assert [a for _, _, a in c.got] == [1, 2, 3]
    assert ch.requeue_count == 2


def test_dpub_is_deferred(tmp_path):
    eng = engine(tmp_path)
    c = FakeConsumer(rdy=5)
    ch = subscribe(eng, "t", "c", c)
    eng.publish("t", [b"later"], 10.0, defer=2.0)
    assert c.got == [] and len(ch.deferred) == 1
    eng.process(12.0)
    assert [b for _, b, _ in c.got] == [b"later"]


def test_dpub_is_deferred_on_every_channel(tmp_path):
    eng = engine(tmp_path)
    a, b = FakeConsumer(rdy=5), FakeConsumer(rdy=5)
    subscribe(eng, "t", "a", a)
    subscribe(eng, "t", "b", b)
    eng.publish("t", [b"later"], 0.0, defer=1.0)
    assert a.got == b.got == []
    eng.process(1.0)
    assert [m[1] for m in a.got] == [m[1] for m in b.got] == [b"later"]


def test_pause_and_unpause(tmp_path):
    eng = engine(tmp_path)
    c = FakeConsumer(rdy=5)
    ch = subscribe(eng, "t", "c", c)
    ch.pause()
    eng.publish("t", [b"x"], 0.0)
    assert c.got == [] and ch.depth == 1
    ch.unpause(0.0)
    assert len(c.got) == 1
    topic = eng.topics["t"]
    topic.pause()
    eng.publish("t", [b"y"], 0.0)
    assert topic.depth == 1 and len(c.got) == 1  # kept by the topic
    ch.queue.put(eng.new_message(b"z"))
    ch.pump(0.0)
    assert len(c.got) == 2  # a paused topic's channels still deliver what they hold
    topic.unpause(0.0)
    assert [b for _, b, _ in c.got] == [b"x", b"z", b"y"]


def test_ephemeral_channel_and_topic_go_with_their_last_client(tmp_path):
    eng = engine(tmp_path)
    c = FakeConsumer(rdy=1)
    ch = subscribe(eng, "t#ephemeral", "c#ephemeral", c)
    ch.remove_client(c)
    assert "t#ephemeral" not in eng.topics


def test_sample_rate_drops_messages(tmp_path):
    values = iter([0.10, 0.90, 0.20, 0.95])
    eng = engine(tmp_path)
    eng.rng = lambda: next(values)
    c = FakeConsumer(rdy=10)
    c.sample_rate = 50
    subscribe(eng, "t", "c", c)
    eng.publish("t", [b"1", b"2", b"3", b"4"], 0.0)
    assert [b for _, b, _ in c.got] == [b"1", b"3"]


def test_delete_channel_closes_its_clients(tmp_path):
    eng = engine(tmp_path)
    c = FakeConsumer(rdy=1)
    subscribe(eng, "t", "c", c)
    assert eng.topics["t"].delete_channel("c")
    assert c.closed


def test_overflow_to_disk_and_restart(tmp_path):
    eng = engine(tmp_path, mem_queue_size=2)
    eng.publish("t", [b"%d" % i for i in range(5)], 0.0)
    topic = eng.topics["t"]
    assert topic.depth == 5 and topic.queue.backend_depth == 3
    c = FakeConsumer(rdy=1)
    ch = subscribe(eng, "t", "c", c)
    eng.publish("t", [b"5"], 0.0)  # in flight at shutdown: saved too
    eng.flush()
    eng.close()
    again = engine(tmp_path, mem_queue_size=2)
    again.load()
    assert set(again.topics) == {"t"} and set(again.topics["t"].channels) == {"c"}
    c2 = FakeConsumer(rdy=100)
    again.topics["t"].channels["c"].add_client(c2, 0.0)
    assert sorted(b for _, b, _ in c2.got) == [b"%d" % i for i in range(6)]
    assert again.topics["t"].channels["c"].depth == 0
    assert ch.message_count == 6


def test_ephemeral_overflow_is_dropped(tmp_path):
    eng = engine(tmp_path, mem_queue_size=1)
    eng.publish("t#ephemeral", [b"1", b"2"], 0.0)
    assert eng.topics["t#ephemeral"].depth == 1


def test_guids_are_unique_and_hex(tmp_path):
    eng = engine(tmp_path)
    ids = {eng.guids.new_id() for _ in range(10000)}
    assert len(ids) == 10000
    assert all(len(i) == 16 and int(i, 16) >= 0 for i in ids)


# -- state machine: no message lost or duplicated, counts consistent ------------------------

from hypothesis import settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule  # noqa: E402


class ChannelMachine(RuleBasedStateMachine):
    """Random PUB/RDY/FIN/REQ/TOUCH/time steps on one channel with three consumers,
    mem_queue_size 4 (so the disk queue is used too). Every published message is, at every
    step, in exactly one place: queued, in flight (to one consumer) or deferred, until FIN."""

    def __init__(self):
        super().__init__()
        import tempfile
        from pathlib import Path

        self.tmp = Path(tempfile.mkdtemp(prefix="nsqsm"))
        self.eng = engine(self.tmp, mem_queue_size=4)
        self.consumers = [FakeConsumer(msg_timeout=1.0) for _ in range(3)]
        self.channel = self.eng.get_topic("t").get_channel("c", 0.0)
        for c in self.consumers:
            self.channel.add_client(c, 0.0)
        self.now = 0.0
        self.published = 0
        self.finished = set()
        self.bodies = set()

    def teardown(self):
        import shutil

        self.eng.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(n=st.integers(1, 5))
    def publish(self, n):
        bodies = [b"%d" % (self.published + i) for i in range(n)]
        self.published += n
        self.bodies.update(bodies)
        self.eng.publish("t", bodies, self.now)
        self.eng.flush()

    @rule(i=st.integers(0, 2), rdy=st.integers(0, 4))
    def set_rdy(self, i, rdy):
        self.consumers[i].set_rdy(rdy, self.now)

    def _owned(self, i):
        return [m for m in self.channel.in_flight.values() if m.consumer is self.consumers[i]]

    @rule(i=st.integers(0, 2), data=st.data())
    def finish(self, i, data):
        owned = self._owned(i)
        if owned:
            message = data.draw(st.sampled_from(owned))
            assert self.channel.finish(self.consumers[i], message.id, self.now) is None
            self.finished.add(message.body)

    @rule(i=st.integers(0, 2), delay=st.sampled_from([0.0, 0.5, 2.0]), data=st.data())
    def requeue(self, i, delay, data):
        owned = self._owned(i)
        if owned:
            message = data.draw(st.sampled_from(owned))
            assert self.channel.requeue(self.consumers[i], message.id, delay, self.now) is None

    @rule(i=st.integers(0, 2), data=st.data())
    def touch(self, i, data):
        owned = self._owned(i)
        if owned:
            assert self.channel.touch(self.consumers[i], data.draw(st.sampled_from(owned)).id, self.now) is None

    @rule(step=st.sampled_from([0.1, 0.6, 1.1, 3.0]))
    def advance(self, step):
        self.now += step
        self.eng.process(self.now)
        self.eng.flush()

    @invariant()
    def every_message_is_somewhere_once(self):
        ch = self.channel
        queued = [m.body for m in ch.queue.memory]
        in_flight = [m.body for m in ch.in_flight.values()]
        deferred = [m.body for m in ch.deferred.values()]
        places = queued + in_flight + deferred
        assert len(places) == len(set(places))
        assert ch.depth + len(ch.in_flight) + len(ch.deferred) + len(self.finished) == self.published
        assert not set(places) & self.finished
        for c in self.consumers:
            assert c.in_flight == len(self._owned(self.consumers.index(c)))
            assert c.in_flight <= max(c.rdy, c.in_flight)


ChannelMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
test_channel_state_machine = ChannelMachine.TestCase
