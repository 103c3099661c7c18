"""A consumer's acks through the one-shot subject shortcuts (routing/sublist.py
ONESHOT_PREFIXES, issue 33) deliver exactly what the general path delivers: the same bytes to
every other subscriber that matches an ack (a user's ``$JS.ACK.>``, a ``>`` monitor, a
wildcard with a literal past the consumer's name, one ack's own subject, a user whose
subscribe permission denies part of them), the same consumer state, the same permission
errors to a publisher denied some acks; and the match cache is left with one ack at most."""

from __future__ import annotations

import json
import re

import trio

import natserver
from natserver.auth.users import Permissions, User
from natserver.routing import sublist as sublist_mod

TIMEOUT = 30  # seconds for the whole exchange (a hard limit on the I/O)
N = 60  # messages stored and acked
MSG = re.compile(rb"MSG \S+ \S+ (\$JS\.ACK\.\S+) (\d+)\r\n")
WATCHERS = [  # (user, SUB subjects) of the connections that watch the acks
    ("mon", [b">"]),
    ("mon", [b"$JS.ACK.>", b"$JS.ACK.S.*.*.*.7.>", b"$JS.ACK.S.D.1.9.9.*.*"]),
    ("limited", [b"$JS.ACK.S.D.>"]),  # denied $JS.ACK.S.D.*.*.3.> by permission
]


async def _exchange(store_dir: str) -> tuple[dict, dict, int]:
    users = [
        User("app", "app"),
        User("mon", "mon"),
        User("limited", "limited", Permissions({"subscribe": {"allow": [">"], "deny": ["$JS.ACK.S.D.*.*.3.>"]}})),
        User("acker", "acker", Permissions({"publish": {"allow": [">"], "deny": ["$JS.ACK.*.*.*.*.6.>"]}})),
    ]
    options = natserver.Options(host="127.0.0.1", port=-1, quiet=True, jetstream=True, store_dir=store_dir, users=users)
    got: dict = {}
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, options)

            async def connect(user: str) -> trio.SocketStream:
                conn = await trio.open_tcp_stream("127.0.0.1", server.port)
                await conn.send_all(b'CONNECT {"verbose":false,"user":"%s","pass":"%s"}\r\n' % (user.encode(), user.encode()))
                return conn

            async def read_until(conn, buf: bytes, token: bytes, count: int = 1) -> bytes:
                while buf.count(token) < count:
                    buf += await conn.receive_some(1 << 16)
                return buf

            app = await connect("app")
            watchers = []
            for i, (user, subjects) in enumerate(WATCHERS):
                conn = await connect(user)
                await conn.send_all(b"".join(b"SUB %s %d\r\n" % (s, k) for k, s in enumerate(subjects)) + b"PING\r\n")
                got[i] = await read_until(conn, b"", b"PONG\r\n")
                watchers.append(conn)
            acker = await connect("acker")
            await app.send_all(b"SUB _R.> 1\r\nPUB $JS.API.STREAM.CREATE.S _R.c 31\r\n"
                               b'{"name":"S","subjects":["s.>"]}\r\n')
            buf = await read_until(app, b"", b"}\r\n")
            await app.send_all(b"".join(b"PUB s.%d _R.p 1\r\nx\r\n" % (i % 4) for i in range(N)) + b"PING\r\n")
            buf = await read_until(app, b"", b"PONG\r\n")
            while buf.count(b'"seq":') < N:
                buf += await app.receive_some(1 << 16)
            config = b'{"stream_name":"S","config":{"durable_name":"D","ack_policy":"explicit"}}'
            await app.send_all(b"PUB $JS.API.CONSUMER.CREATE.S.D _R.d %d\r\n%s\r\n" % (len(config), config))
            buf = await read_until(app, b"", b"}\r\n")
            pull = b'{"batch":%d}' % N
            await app.send_all(b"PUB $JS.API.CONSUMER.MSG.NEXT.S.D _R.n %d\r\n%s\r\n" % (len(pull), pull))
            replies: list[bytes] = []
            buf = b""
            while len(replies) < N:
                buf += await app.receive_some(1 << 16)
                replies = MSG.findall(buf)
            acks = [reply for reply, _ in replies]
            # Acks from two publishers, interleaved with the app's other traffic; acker may not
            # publish stream sequence 6's ack ($JS.ACK.*.*.*.*.6.>): an error, 6 stays pending.
            mine = b"".join(b"PUB %s 0\r\n\r\nPUB s.9 _R.p 1\r\ny\r\n" % a for a in acks[::2])
            await app.send_all(mine + b"PING\r\n")
            await acker.send_all(b"".join(b"PUB %s 4\r\n+ACK\r\n" % a for a in acks[1::2]) + b"PING\r\n")
            got["app"] = await read_until(app, b"", b"PONG\r\n")
            got["acker"] = await read_until(acker, b"", b"PONG\r\n")
            for i, conn in enumerate(watchers):
                await conn.send_all(b"PING\r\n")
                got[i] = await read_until(conn, got[i], b"PONG\r\n", 2)
            info = b'PUB $JS.API.CONSUMER.INFO.S.D _R.i 0\r\n\r\n'
            await app.send_all(info)
            state = await read_until(app, b"", b"MSG _R.i ")
            state = await read_until(app, state, b"}\r\n")
            state = state[state.index(b"MSG _R.i "):]
            consumer = json.loads(state[state.index(b"{"):state.index(b"}\r\n") + 1])
            cache = server.accounts.by_name["$G"].sublist.cache
            in_cache = sum(key.startswith(b"$JS.ACK.") for key in cache)
            nursery.cancel_scope.cancel()
    for key in list(got):  # what each connection got of the acks (their timestamps vary)
        got[key] = [re.sub(rb"^((?:[^.]+\.){7})\d+", rb"\1T", m) for m in _ack_msgs(got[key])]
    keep = ("num_ack_pending", "num_pending", "ack_floor", "delivered", "num_redelivered")
    state = {k: consumer.get(k, {}) for k in keep}
    for k in ("ack_floor", "delivered"):
        state[k].pop("last_active", None)
    return got, state, in_cache


def _ack_msgs(data: bytes) -> list[bytes]:
    """The MSGs on $JS.ACK. subjects in ``data`` (subject, sid, size, payload), and every -ERR."""
    out = []
    pos = 0
    line = re.compile(rb"(MSG (\S+) (\S+) (?:\S+ )?(\d+)\r\n)|(-ERR [^\r]*\r\n)")
    while (m := line.search(data, pos)) is not None:
        if m.group(5):
            out.append(m.group(5))
            pos = m.end()
            continue
        size = int(m.group(4))
        if m.group(2).startswith(b"$JS.ACK."):
            out.append(b"%s %s %d %s" % (m.group(2), m.group(3), size, data[m.end():m.end() + size]))
        pos = m.end() + size + 2
    return out


def _run(monkeypatch, tmp_path, shortcuts: bool):
    if not shortcuts:
        monkeypatch.setattr(sublist_mod, "ONESHOT_PREFIXES", ())
    store = tmp_path / ("on" if shortcuts else "off")
    store.mkdir()
    return trio.run(_exchange, str(store))


def test_acks_deliver_as_the_general_path(monkeypatch, tmp_path):
    got, consumer, in_cache = _run(monkeypatch, tmp_path, shortcuts=True)
    with monkeypatch.context() as patch:
        want, want_consumer, general_in_cache = _run(patch, tmp_path, shortcuts=False)
    assert got == want
    assert consumer == want_consumer, consumer
    # What was observed is what the test is about: acks seen by the watchers, a denied ack.
    assert len(got[0]) == N - 1 and len(got[1]) == N + 1  # all but the denied; 7 and 9's twice
    assert len(got[2]) < N and any(m.startswith(b"-ERR") for m in got["acker"])
    assert consumer["num_ack_pending"] == 1, consumer
    assert in_cache <= 1 and general_in_cache >= N // 2
