"""JetStream per account (issue #13): with ``accounts {}`` configured, nats-server (2.15.1) serves
JetStream only to accounts with ``jetstream: enabled``; every other account, ``$G`` included,
gets ``503 JetStream not enabled for account`` (10039) in each API's own response type. natserver
serves JetStream to one account: the one enabling it (or ``$G`` without accounts); two
accounts enabling it stop the server with a clear message. The answers for a non-JetStream
account are recorded from nats-server in data/account_jetstream_nats_server_2.15.1.json and
checked live when it is installed (``python -m tests.jetstream.test_account_jetstream``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats

from tests.auth import test_auth_helpers as helpers
from tests.jetstream.test_consumer_rules import RawClient
from tests.reference import HAVE_NATS_SERVER, NATS_SERVER, needs_nats_server

TIMEOUT = 20
RECORDED = Path(__file__).with_name("data") / "account_jetstream_nats_server_2.15.1.json"


def running(kind: str, config: str, tmp_path):
    """test_auth_helpers.running with the reference, nats-server 2.15.1, as "nats-server"."""
    return helpers.running(kind, config, tmp_path, binary=NATS_SERVER or "nats-server")
CONFIG = """
jetstream { store_dir: "%s" }
accounts {
  A { users [{user: a, password: a}] }
  B { users [{user: b, password: b}], jetstream: enabled }
}
authorization { users [{user: g, password: g}] }
"""
REQUESTS = [
    ("$JS.API.INFO", b""),
    ("$JS.API.STREAM.CREATE.X", b'{"name":"X","subjects":["x"]}'),
    ("$JS.API.STREAM.UPDATE.X", b'{"name":"X","subjects":["x"]}'),
    ("$JS.API.STREAM.INFO.X", b""),
    ("$JS.API.STREAM.DELETE.X", b""),
    ("$JS.API.STREAM.NAMES", b""),
    ("$JS.API.STREAM.LIST", b""),
    ("$JS.API.STREAM.PURGE.X", b""),
    ("$JS.API.STREAM.MSG.GET.X", b'{"seq":1}'),
    ("$JS.API.STREAM.MSG.DELETE.X", b'{"seq":1}'),
    ("$JS.API.CONSUMER.CREATE.X", b'{"stream_name":"X","config":{}}'),
    ("$JS.API.CONSUMER.DURABLE.CREATE.X.D", b'{"stream_name":"X","config":{"durable_name":"D"}}'),
    ("$JS.API.CONSUMER.INFO.X.D", b""),
    ("$JS.API.CONSUMER.DELETE.X.D", b""),
    ("$JS.API.CONSUMER.NAMES.X", b""),
    ("$JS.API.CONSUMER.LIST.X", b""),
    ("$JS.API.NOPE", b""),
    # (not MSG.NEXT and DIRECT.GET: nats-server 2.15.1 has no subscription for them in such an
    # account, so a client asking for no-responders gets a 503 status; natserver's not_enabled
    # subscription takes them and stays silent, as 2.9.10 did)
]


def probe(port: int, user: str) -> dict:
    client = RawClient(port, no_responders=True, user=user, **{"pass": user})
    answers = {subject: client.request(subject, body) for subject, body in REQUESTS}
    client.sock.close()
    return answers


def test_accounts_without_jetstream_are_told_so(tmp_path):
    with running("natserver", CONFIG % (tmp_path / "store"), tmp_path) as port:
        for user in ("a", "g"):  # an account without it, and $G
            assert probe(port, user) == json.loads(RECORDED.read_text()), user


def test_the_account_enabling_jetstream_has_it(tmp_path):
    with running("natserver", CONFIG % (tmp_path / "store"), tmp_path) as port:
        async def main():
            b = await nats.connect(f"nats://127.0.0.1:{port}", user="b", password="b")
            a = await nats.connect(f"nats://127.0.0.1:{port}", user="a", password="a")
            try:
                js = b.jetstream()
                await js.add_stream(name="S", subjects=["s"])
                ack = await js.publish("s", b"in B")
                assert (ack.stream, ack.seq) == ("S", 1)
                sub = await js.subscribe("s", durable="c")
                assert (await sub.next_msg(timeout=5)).data == b"in B"
                # The same subject in account A is another subject space: nothing stored.
                await a.publish("s", b"in A")
                await a.flush()
                assert (await js.stream_info("S")).state.messages == 1
            finally:
                await a.close()
                await b.close()

        asyncio.run(asyncio.wait_for(main(), TIMEOUT))
    # The streams are stored under the account's name, as nats-server's.
    assert (tmp_path / "store" / "jetstream" / "B" / "streams" / "S").is_dir()


TWO_ACCOUNTS = """
jetstream { store_dir: "%s" }
accounts {
  A { users [{user: a, password: a}], jetstream: { max_streams: 1, max_consumers: 1 } }
  B { users [{user: b, password: b}], jetstream: enabled }
}
"""


def _two_accounts(port: int) -> dict:
    async def main():
        a = await nats.connect(f"nats://127.0.0.1:{port}", user="a", password="a")
        b = await nats.connect(f"nats://127.0.0.1:{port}", user="b", password="b")
        out = {}
        try:
            for name, nc in (("a", a), ("b", b)):
                js = nc.jetstream()
                await js.add_stream(name="S", subjects=["s"])  # the same name in each account
                await js.publish("s", name.encode())
                out[name] = (await js.get_msg("S", 1)).data.decode()
            info = await a.jetstream().account_info()
            out["a limits"] = (info.limits.max_streams, info.limits.max_consumers, info.streams)
            try:
                await a.jetstream().add_stream(name="T", subjects=["t"])
            except nats.js.errors.APIError as exc:
                out["a second stream"] = (exc.code, exc.err_code, exc.description)
            await a.jetstream().pull_subscribe("s", durable="one")
            try:
                await a.jetstream().pull_subscribe("s", durable="two")
            except nats.js.errors.APIError as exc:
                out["a second consumer"] = (exc.code, exc.err_code, exc.description)
        finally:
            await a.close()
            await b.close()
        return out

    return asyncio.run(asyncio.wait_for(main(), TIMEOUT))


def test_each_account_has_its_own_jetstream_and_limits(tmp_path):
    with running("natserver", TWO_ACCOUNTS % (tmp_path / "store"), tmp_path) as port:
        ours = _two_accounts(port)
    assert ours == {
        "a": "a", "b": "b", "a limits": (1, 1, 1),
        "a second stream": (400, 10027, "maximum number of streams reached"),
        "a second consumer": (400, 10026, "maximum consumers limit reached"),
    }
    for account in ("A", "B"):
        assert (tmp_path / "store" / "jetstream" / account / "streams" / "S").is_dir()
    if HAVE_NATS_SERVER:
        with running("nats-server", TWO_ACCOUNTS % (tmp_path / "theirs"), tmp_path) as port:
            assert _two_accounts(port) == ours


@needs_nats_server
def test_the_recording_is_what_nats_server_answers(tmp_path):
    with running("nats-server", CONFIG % (tmp_path / "store"), tmp_path) as port:
        assert probe(port, "a") == json.loads(RECORDED.read_text())


if __name__ == "__main__":
    import tempfile

    assert HAVE_NATS_SERVER, f"{NATS_SERVER} is not installed"
    with tempfile.TemporaryDirectory() as folder, running("nats-server", CONFIG % folder, Path(folder)) as port:
        RECORDED.write_text(json.dumps(probe(port, "a"), indent=1) + "\n")
    print(f"wrote {RECORDED}")
