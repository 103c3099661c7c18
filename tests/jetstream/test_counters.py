"""Counters (nats-server 2.12's ``allow_msg_counter``, natserver/jetstream/counter.py) as
nats-server 2.15.1 answers them: the configuration rules (discard new, TTLs, retention, a
mirror, updates), increments (``Nats-Incr``: signed, big, and what is not an integer), the
refusals and their order against the other headers, the pub ack's ``val``, the stored
``{"val":"<total>"}`` read back by STREAM.MSG.GET and DIRECT.GET, a purge and a delete under
a counter, and sourced counters (``Nats-Counter-Sources``; a mirror and a plain stream store
the origin's messages as they are). One script runs against natserver and must give what was
recorded from nats-server 2.15.1 in data/counters_nats_server_2.15.1.json
(``python -m tests.jetstream.test_counters`` records it again); a live 2.15.1, when installed,
must still give it. Also: totals survive a restart, and nats-py's ``PubAck.val``."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path

import nats
from hypothesis import given, settings
from hypothesis import strategies as st

from natserver.jetstream import counter, errors
from natserver.jetstream.errors import ApiError
from natserver.jetstream.store import MemoryStore
from natserver.jetstream.stream import StreamConfig, check_stream_config
from tests import reference
from tests.jetstream.recording import assert_nats_server_matches, assert_natserver_matches, record
from tests.jetstream.test_filter_subjects import _Client

RECORDED = Path(__file__).with_name("data") / "counters_nats_server_2.15.1.json"
JS_CONFIG = 'jetstream { store_dir: "%s" }\n'
TIMEOUT = 30
SETTLE = 10  # seconds at most for sources and mirrors to copy what is there (nats-server's
# source consumers can take a second to start on a loaded machine)
BIG = "123456789012345678901234567890123456789"


def _stream(name: str, **config) -> tuple[str, dict]:
    return f"$JS.API.STREAM.CREATE.{name}", {"name": name, **config}


def _update(name: str, **config) -> tuple[str, dict]:
    return f"$JS.API.STREAM.UPDATE.{name}", {"name": name, **config}


def _incr(value: str, *more: bytes, body: bytes = b"") -> tuple[bytes, bytes]:
    return b"Nats-Incr: " + value.encode() + b"\r\n" + b"".join(h + b"\r\n" for h in more), body


def _last(stream: str, subject: str) -> tuple[str, dict]:
    return f"$JS.API.STREAM.MSG.GET.{stream}", {"last_by_subj": subject}


def _info(stream: str) -> tuple[str, dict]:
    return f"$JS.API.STREAM.INFO.{stream}", {}


COUNTER = {"subjects": ["c.>"], "allow_msg_counter": True, "allow_direct": True}
SCRIPT: list[tuple[str, str, object]] = [
    # Configuration (checkStreamCfg, configUpdateCheck).
    ("counter stream C", *_stream("C", **COUNTER)),
    ("counter with discard new", *_stream("X1", subjects=["x1"], allow_msg_counter=True, discard="new")),
    ("counter with TTLs", *_stream("X2", subjects=["x2"], allow_msg_counter=True, allow_msg_ttl=True)),
    ("counter with interest retention", *_stream("X3", subjects=["x3"], allow_msg_counter=True,
                                                 retention="interest")),
    ("counter with workqueue retention", *_stream("X4", subjects=["x4"], allow_msg_counter=True,
                                                  retention="workqueue")),
    ("counter mirror", *_stream("X5", mirror={"name": "C"}, allow_msg_counter=True)),
    ("counter with roll-ups", *_stream("X6", subjects=["x6"], allow_msg_counter=True, allow_rollup_hdrs=True)),
    ("counter with one message per subject", *_stream("X7", subjects=["x7.>"], allow_msg_counter=True,
                                                      max_msgs_per_subject=1)),
    ("counter with delete markers", *_stream("X8", subjects=["x8"], allow_msg_counter=True,
                                             subject_delete_marker_ttl=1_000_000_000)),
    ("counter with sources", *_stream("X9", subjects=["x9"], allow_msg_counter=True, sources=[{"name": "X6"}])),
    ("plain stream S", *_stream("S", subjects=["s.>"])),
    ("update: counters on", *_update("S", subjects=["s.>"], allow_msg_counter=True)),
    ("update: counters off", *_update("C", subjects=["c.>"], allow_direct=True)),
    ("update: counter kept", *_update("C", **COUNTER, description="counts")),
    # Increments.
    ("incr 5", "c.a", _incr("5")),
    ("incr -2", "c.a", _incr("-2")),
    ("incr +10", "c.a", _incr("+10")),
    ("incr 0", "c.a", _incr("0")),
    ("incr 007", "c.a", _incr("007")),
    ("incr big", "c.b", _incr(BIG)),
    ("incr big again", "c.b", _incr(BIG)),
    ("incr minus big", "c.b", _incr("-" + BIG + "0")),
    ("incr with leading spaces", "c.a", _incr("   1")),
    ("incr abc", "c.a", _incr("abc")),
    ("incr 1_000", "c.a", _incr("1_000")),
    ("incr 0x10", "c.a", _incr("0x10")),
    ("incr 1.5", "c.a", _incr("1.5")),
    ("incr 1e3", "c.a", _incr("1e3")),
    ("incr +", "c.a", _incr("+")),
    ("incr with a trailing space", "c.a", _incr("2 ")),
    ("incr empty", "c.a", _incr("")),
    ("no header", "c.a", b""),
    ("no header, a payload", "c.a", b"x"),
    ("a header but no increment", "c.a", (b"X-Other: 1\r\n", b"")),
    ("incr with a payload", "c.a", _incr("1", body=b"x")),
    ("incr with a roll-up", "c.a", _incr("1", b"Nats-Rollup: sub")),
    ("incr with expected stream", "c.a", _incr("1", b"Nats-Expected-Stream: C")),
    ("incr with expected last sequence", "c.a", _incr("1", b"Nats-Expected-Last-Sequence: 5")),
    ("incr with expected last subject sequence", "c.a", _incr("1", b"Nats-Expected-Last-Subject-Sequence: 1")),
    ("incr with expected last subject", "c.a", _incr("1", b"Nats-Expected-Last-Subject-Sequence-Subject: c.a")),
    ("incr with expected last msg id", "c.a", _incr("1", b"Nats-Expected-Last-Msg-Id: x")),
    ("incr with a TTL", "c.a", _incr("1", b"Nats-TTL: 5s")),
    ("incr with a msg id", "c.a", _incr("1", b"Nats-Msg-Id: m1")),
    ("incr with the msg id again", "c.a", _incr("1", b"Nats-Msg-Id: m1")),
    ("no incr with the msg id again", "c.a", (b"Nats-Msg-Id: m1\r\n", b"")),
    ("no incr, another stream expected", "c.a", (b"Nats-Expected-Stream: X\r\n", b"")),
    ("no incr, a TTL", "c.a", (b"Nats-TTL: 5s\r\n", b"")),
    ("no incr, a roll-up", "c.a", (b"Nats-Rollup: sub\r\n", b"")),
    ("no incr, expected last sequence 1", "c.a", (b"Nats-Expected-Last-Sequence: 1\r\n", b"")),
    ("incr with other headers", "c.a", _incr("3", b"X-A: 1", b"X-B: 2")),
    ("incr on a plain stream", "s.a", _incr("1")),
    ("an invalid incr on a plain stream", "s.a", _incr("x")),
    ("incr on a plain stream with a payload", "s.a", _incr("1", body=b"x")),
    ("a plain message", "s.a", b"plain"),
    ("incr on counter X6 (roll-ups allowed)", "x6", _incr("4")),
    ("incr on X7", "x7.a", _incr("4")),
    ("incr on X7 again", "x7.a", _incr("4")),
    ("info X7", *_info("X7")),
    # A message refused after its total was worked out (max_msg_size) counts for nothing.
    ("counter X10 with a small max_msg_size", *_stream("X10", subjects=["x10.>"], allow_msg_counter=True,
                                                       max_msg_size=64)),
    ("X10: incr x10.a", "x10.a", _incr("1")),
    ("X10: incr x10.a too large", "x10.a", _incr("1", b"X-Pad: " + b"p" * 40)),
    ("X10: incr x10.b", "x10.b", _incr("1")),
    ("X10: incr x10.a again", "x10.a", _incr("1")),
    # Reading back.
    ("get last c.a", *_last("C", "c.a")),
    ("get last c.b", *_last("C", "c.b")),
    ("direct get last c.a", "$JS.API.DIRECT.GET.C.c.a", b""),
    ("direct get last c.b", "$JS.API.DIRECT.GET.C", {"last_by_subj": "c.b"}),
    ("info C", *_info("C")),
    # A delete or a purge under a counter.
    ("incr c.d 10", "c.d", _incr("10")),
    ("incr c.d 5", "c.d", _incr("5")),
    ("delete the last c.d", "$JS.API.STREAM.MSG.DELETE.C", {"seq": 13}),
    ("incr c.d 1 after the delete", "c.d", _incr("1")),
    ("purge c.d", "$JS.API.STREAM.PURGE.C", {"filter": "c.d"}),
    ("incr c.d 1 after the purge", "c.d", _incr("1")),
    # A client's own Nats-Counter-Sources is stored as it is, and read by the next increment.
    ("incr c.z with a client's counter sources", "c.z", _incr("1", b"Nats-Counter-Sources: nonsense")),
    ("incr c.z after it (broken)", "c.z", _incr("1")),
    ("incr c.y with valid counter sources", "c.y", _incr("1", b'Nats-Counter-Sources: {"Q": {"c.y": "5"}}')),
    ("incr c.y after it", "c.y", _incr("2")),
    ("get last c.y", *_last("C", "c.y")),
    ("purge c.z", "$JS.API.STREAM.PURGE.C", {"filter": "c.z"}),
    ("incr c.z after the purge", "c.z", _incr("1")),
    # A publish that claims to be sourced.
    ("incr with a stream source header", "c.x", _incr("1", b"Nats-Stream-Source: Q 1")),
    ("info C after those", *_info("C")),
    # Sourced counters.
    ("counter stream D", *_stream("D", subjects=["d.>"], allow_msg_counter=True)),
    ("incr d.a 7", "d.a", _incr("7")),
    ("incr d.a 2", "d.a", _incr("2")),
    ("counter stream A sourcing C and D", *_stream("A", subjects=["a.>"], allow_msg_counter=True,
                                                   sources=[{"name": "C", "filter_subject": "c.a"}, {"name": "D"}])),
    ("plain stream P sourcing C", *_stream("P", sources=[{"name": "C", "filter_subject": "c.a"}])),
    ("mirror M of C", *_stream("M", mirror={"name": "C"})),
    ("plain stream N", *_stream("N", subjects=["n.>"])),
    ("a plain message to N", "n.a", b"1"),
    ("counter stream B sourcing N", *_stream("B", subjects=["b.>"], allow_msg_counter=True,
                                             sources=[{"name": "N"}])),
    ("settle", "", {"A": 10, "P": 8, "M": 15}),
    ("A: last c.a", *_last("A", "c.a")),
    ("A: last d.a", *_last("A", "d.a")),
    ("incr d.a 100", "d.a", _incr("100")),
    ("incr c.a -50", "c.a", _incr("-50")),
    ("settle again", "", {"A": 12, "P": 9, "M": 16}),
    ("A: last c.a after more", *_last("A", "c.a")),
    ("A: last d.a after more", *_last("A", "d.a")),
    ("A: its own subject", "a.x", _incr("1")),
    ("A: info", *_info("A")),
    ("P: last c.a", *_last("P", "c.a")),
    ("M: last c.a", *_last("M", "c.a")),
    ("B: info (nothing counted)", *_info("B")),
]

# Headers whose values differ for reasons outside counters: the time of a message, and the
# Nats-Stream-Source form (natserver writes 2.9.10's "<origin> <sequence>").
_VARYING_HEADERS = ("Nats-Time-Stamp", "Nats-Stream-Source")


def _headers(block: str) -> list:
    lines = [line for line in block.split("\r\n")[1:] if line]
    return [line for line in lines if not line.startswith(_VARYING_HEADERS)]


def _normal(answer: str):
    """A pub ack as its fields in order (whitespace is a 2.9-vs-2.15 difference); an error as
    it is; a stored message by subject, sequence, headers and body; a stream by the parts
    counters concern (its configuration's, its message count); a direct get's message by
    its headers (but the time) and body."""
    if answer.startswith("NATS/1.0"):
        block, _, body = answer.partition("\r\n\r\n")
        return {"headers": _headers(block + "\r\n"), "body": body}
    try:
        pairs = json.loads(answer, object_pairs_hook=list)
    except ValueError:
        return answer
    document = dict(pairs)
    if "error" in document:
        return {"error": dict(document["error"])}
    if "seq" in document:
        return [list(pair) for pair in pairs]
    if "message" in document:
        message = dict(document["message"])
        hdrs = base64.b64decode(message.get("hdrs", "")).decode()
        return {"subject": message["subject"], "seq": message["seq"], "headers": _headers(hdrs),
                "data": base64.b64decode(message.get("data", "")).decode()}
    if "config" in document and "state" in document:
        config, state = dict(document["config"]), dict(document["state"])
        keep = ("name", "retention", "discard", "max_msgs_per_subject", "allow_msg_ttl", "allow_rollup_hdrs",
                "allow_msg_counter", "description")
        shown = {k: config.get(k) for k in keep}
        shown["allow_msg_ttl"] = bool(shown["allow_msg_ttl"])  # (natserver's 2.9-shaped JSON omits false)
        return {"config": shown, "messages": state["messages"],
                "last_seq": state["last_seq"]}
    return sorted(document)


def _settle(client, last_seqs: dict) -> None:
    """Wait until each stream named has its last sequence (what its sources or mirror bring)."""
    deadline = time.monotonic() + SETTLE
    for stream, last_seq in last_seqs.items():
        while True:
            info = json.loads(client.request(f"$JS.API.STREAM.INFO.{stream}", {})[0])
            if info["state"]["last_seq"] >= last_seq:
                break
            assert time.monotonic() < deadline, f"{stream} never got to {last_seq}: {info['state']}"
            time.sleep(0.05)


def run_script(port: int) -> dict:
    client = _Client(port)
    out = {}
    for name, subject, body in SCRIPT:
        if not subject:
            _settle(client, body)
            continue
        out[name] = [_normal(a) for a in client.request(subject, body)]
        if name.startswith("A: last"):  # A copies from C and D at once: in either order
            out[name] = [{k: v for k, v in answer.items() if k != "seq"} for answer in out[name]]
    return out


def test_natserver_answers_as_nats_server(tmp_path):
    assert_natserver_matches(run_script, JS_CONFIG, RECORDED, tmp_path)


@reference.needs_nats_server
def test_the_recording_is_what_nats_server_answers(tmp_path):
    assert_nats_server_matches(run_script, JS_CONFIG, RECORDED, tmp_path, binary=reference.NATS_SERVER)


def test_totals_survive_a_restart(threaded_server, tmp_path):
    """A file stream's totals are its messages: after a restart the next increment goes on
    from them, a sourced counter's per-origin totals too (nothing is counted twice)."""
    store = str(tmp_path / "js")

    async def before(url: str):
        nc = await nats.connect(url, allow_reconnect=False)
        try:
            js = nc.jetstream()
            await js.add_stream(name="C", subjects=["c.>"], allow_msg_counter=True)
            for value in ("5", "-2", BIG):
                await js.publish("c.a", b"", headers={"Nats-Incr": value})
            await js.add_stream(name="A", subjects=["a.>"], allow_msg_counter=True,
                                sources=[nats.js.api.StreamSource(name="C")])
            await _until(js, "A", 3)
        finally:
            await nc.close()

    async def after(url: str):
        nc = await nats.connect(url, allow_reconnect=False)
        try:
            js = nc.jetstream()
            ack = await js.publish("c.a", b"", headers={"Nats-Incr": "1"})
            assert (ack.seq, ack.val) == (4, str(int(BIG) + 4))
            await _until(js, "A", 4)
            last = await js.get_last_msg("A", "c.a")
            assert json.loads(last.data) == {"val": str(int(BIG) + 4)}
            assert last.headers["Nats-Incr"] == "1"  # the difference from the origin's last total
            assert json.loads(last.headers[counter.COUNTER_SOURCES.decode()]) == {"C": {"c.a": str(int(BIG) + 4)}}
        finally:
            await nc.close()

    handle = threaded_server(jetstream=True, store_dir=store)
    asyncio.run(asyncio.wait_for(before(handle.url), TIMEOUT))
    handle.stop()
    handle = threaded_server(jetstream=True, store_dir=store)
    asyncio.run(asyncio.wait_for(after(handle.url), TIMEOUT))


async def _until(js, stream: str, messages: int) -> None:
    for _ in range(200):
        if (await js.stream_info(stream)).state.messages >= messages:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{stream} never had {messages} messages")


def test_nats_py_counter(threaded_server, tmp_path):
    """nats-py 2.16: ``allow_msg_counter`` in StreamConfig, the total in ``PubAck.val``, the
    refusals as APIError with nats-server's codes."""
    handle = threaded_server(jetstream=True, store_dir=str(tmp_path / "js"))

    async def main():
        nc = await nats.connect(handle.url, allow_reconnect=False)
        try:
            js = nc.jetstream()
            info = await js.add_stream(name="HITS", subjects=["hits.*"], allow_msg_counter=True)
            assert info.config.allow_msg_counter is True
            acks = [await js.publish("hits.home", b"", headers={"Nats-Incr": v}) for v in ("1", "1", "40")]
            assert [a.val for a in acks] == ["1", "2", "42"]
            msg = await js.get_last_msg("HITS", "hits.home")
            assert json.loads(msg.data) == {"val": "42"}
            for headers, payload, code in [(None, b"", 10169), ({"Nats-Incr": "1"}, b"x", 10170),
                                           ({"Nats-Incr": "one"}, b"", 10171)]:
                try:
                    await js.publish("hits.home", payload, headers=headers)
                except nats.js.errors.APIError as exc:
                    assert exc.err_code == code
                else:
                    raise AssertionError(f"no error for {headers} {payload!r}")
            assert (await js.stream_info("HITS")).state.messages == 3
        finally:
            await nc.close()

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


def test_increments_of_any_length_in_linear_time():
    """Go's big.Int takes any number of digits; Python's int() refuses over 4300 and is
    quadratic: long numbers are added as decimal digits (a 1 MB increment, which nats-server
    would also take, costs milliseconds, not a minute)."""
    digits = "9" * 1_000_000
    hdr = b"NATS/1.0\r\nNats-Incr: " + digits.encode() + b"\r\n\r\n"
    incr = counter.parse_incr(hdr)
    assert incr is not None
    assert counter._text(counter._add(incr, 1)) == "1" + "0" * 1_000_000
    assert counter._text(counter._add(counter.parse_value("-" + digits), incr)) == "0"
    assert counter._text(counter._add(counter.parse_value("-" + "0" * 5000), 0)) == "0"
    assert counter._text(counter._add(counter.parse_value("-1" + "0" * 5000), 7)) == "-" + "9" * 4999 + "3"
    assert counter._text(counter._add(10 ** 3999 * 9, 10 ** 3999 * 9)) == "18" + "0" * 3999  # past the int range


if __name__ == "__main__":
    record(run_script, JS_CONFIG, RECORDED, binary=reference.NATS_SERVER)


# -- the usual increment's one-step path (counter.simple_increment) --------------------------

_INCREMENT_HEADERS = st.sampled_from([
    b"NATS/1.0\r\nNats-Incr: 1\r\n\r\n", b"NATS/1.0\r\nNats-Incr: 25\r\n\r\n", b"NATS/1.0\r\nNats-Incr:7\r\n\r\n",
    b"NATS/1.0\r\nNats-Incr: -3\r\n\r\n", b"NATS/1.0\r\nNats-Incr: +2\r\n\r\n", b"NATS/1.0\r\nNats-Incr: 0\r\n\r\n",
    b"NATS/1.0\r\nNats-Incr: " + b"9" * 4001 + b"\r\n\r\n", b"NATS/1.0\r\nNats-Incr: 1\r\nA: b\r\n\r\n",
    b"NATS/1.0\r\nNats-Incr: 1 \r\n\r\n", b"NATS/1.0\r\nNats-Incr: 1",
])


def _increments(steps, one_step: bool):
    """Store each (subject, header, payload) in a counter stream's store as process_msg does:
    through simple_increment first when ``one_step``, else check_publish and apply alone.
    Returns the answers (totals or error codes), the stored messages and how many the one
    step took."""
    cfg = check_stream_config(StreamConfig(name="C", subjects=["c.>"], allow_msg_counter=True), {})
    store, totals, answers, taken = MemoryStore(cfg), counter.Totals(), [], 0
    for subject, hdr, msg in steps:
        counted = counter.simple_increment(store, totals, subject, hdr, msg) if one_step else None
        if counted is not None:
            body, digits = counted
            taken += 1
        else:
            try:
                incr = counter.check_publish(True, hdr, msg)
                if incr is None:
                    raise errors.message_incr_missing()
                hdr, body, digits = counter.apply(store, totals, subject, hdr, msg, incr, 1 << 20)
            except ApiError as exc:
                answers.append(exc.err_code)
                continue
        store.store_msg(subject, hdr, body, 1)
        answers.append(digits)
    stored = [(m.subject, m.hdr, m.data) for m in (store.load_msg(s) for s in range(1, store.last_seq + 1))]
    return answers, stored, taken


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(st.tuples(st.sampled_from([b"c.a", b"c.b", b"c.*"]), _INCREMENT_HEADERS,
                                st.sampled_from([b"", b"", b"x"])), min_size=1, max_size=30))
def test_the_one_step_increment_stores_what_apply_stores(steps):
    """simple_increment, where it says yes, stores and answers exactly what check_publish and
    apply do: the two stores end alike."""
    answers, stored, _ = _increments(steps, True)
    assert (answers, stored) == _increments(steps, False)[:2]


def test_the_usual_increments_take_the_one_step():
    usual = b"NATS/1.0\r\nNats-Incr: 1\r\n\r\n"
    steps = [(b"c.a", usual, b""), (b"c.b", usual, b"")] * 5
    answers, _, taken = _increments(steps, True)
    assert taken == 8  # all but each subject's first (its total is not known yet)
    assert answers == [b"%d" % (i // 2 + 1) for i in range(10)]
