"""Subject mappings (issue #18 item 7): ``mappings {}`` at the top level and in accounts,
weighted and cluster-scoped destinations and the mapping functions, applied as nats-server
2.9.10 applies them to what clients publish. Random mappings and subjects go to natserver and
to nats-server (when installed) and each must deliver the same subjects in the same order."""

from __future__ import annotations

import asyncio
import random
import socket
import tempfile
import time
from collections import Counter

import nats
import pytest
import trio

import natserver
from natserver.config.flags import build_options
from natserver.config.mapping import ConfigFileError, options_from_file
from natserver.routing.transform import MapDest, SubjectTransform
from natserver.server import signals
from tests.auth.test_auth_helpers import connect_line, needs_nats_server, running, start_error
from tests.conftest import make_options

TIMEOUT = 20


def options_from_text(text: str):
    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/test.conf"
        with open(path, "w") as f:
            f.write(text + "\n")
        return options_from_file(path)


def _messages(data: bytes) -> list[bytes]:
    """The subjects of the MSGs in ``data``, in order."""
    return [line.split(b" ")[1] for line in data.split(b"\r\n") if line.startswith(b"MSG ")]


async def test_top_level_mapping_moves_published_messages(start_server, raw_connect):
    with trio.fail_after(TIMEOUT):
        server = await start_server(mappings=[("orders.*.*", [MapDest("shipping.$2.$1")]), ("old", [MapDest("new")])])
        sub = await raw_connect(server)
        await sub.read_info()
        await sub.send(b"CONNECT {}\r\nSUB shipping.> 1\r\nSUB new 2\r\nSUB old 3\r\nSUB orders.> 4\r\n")
        await sub.ping()
        pub = await raw_connect(server)
        await pub.read_info()
        await pub.send(b"CONNECT {}\r\nPUB orders.eu.42 2\r\nhi\r\nPUB old r 1\r\nx\r\nPUB other 0\r\n\r\n")
        await pub.ping()
        await sub.expect(b"MSG shipping.42.eu 1 2\r\nhi\r\nMSG new 2 r 1\r\nx\r\n")
        assert await sub.nothing_within(0.05) == b""


async def test_runs_of_one_subject_are_mapped_one_by_one(start_server, raw_connect):
    """A run of same-subject PUBs (the parser's PubRun fast path) is mapped like single ones."""
    with trio.fail_after(TIMEOUT):
        server = await start_server(mappings=[("in", [MapDest("out")])])
        sub = await raw_connect(server)
        await sub.read_info()
        await sub.send(b"CONNECT {}\r\nSUB > 1\r\n")
        await sub.ping()
        pub = await raw_connect(server)
        await pub.read_info()
        await pub.send(b"CONNECT {}\r\n" + b"PUB in 3\r\nabc\r\n" * 500)
        await pub.ping()
        data = await sub.read_until(b"MSG out 1 3\r\nabc\r\n" * 500)
        assert _messages(data) == [b"out"] * 500


async def test_weighted_mapping_splits_and_may_drop(start_server, raw_connect):
    with trio.fail_after(TIMEOUT):
        server = await start_server(mappings=[("job", [MapDest("a", 50), MapDest("job", 20)])])
        sub = await raw_connect(server)
        await sub.read_info()
        await sub.send(b"CONNECT {}\r\nSUB > 1\r\n")
        await sub.ping()
        pub = await raw_connect(server)
        await pub.read_info()
        await pub.send(b"CONNECT {}\r\n" + b"PUB job 1\r\nx\r\n" * 2000 + b"PUB end 0\r\n\r\n")
        await pub.ping()
        data = await sub.read_until(b"MSG end 1 0\r\n")
        counts = Counter(_messages(data))
        # 50% to a, 20% stay on job, 30% are dropped (job was listed itself).
        assert 800 < counts[b"a"] < 1200 and 250 < counts[b"job"] < 550, counts
        assert set(counts) == {b"a", b"job", b"end"}


async def test_permissions_apply_to_the_mapped_subject(start_server, raw_connect):
    options = options_from_text(
        'authorization { users: [{user: u, password: p, permissions: {publish: "allowed.>"}}] }\n'
        "mappings { x: allowed.x, y: denied }"
    )
    with trio.fail_after(TIMEOUT):
        server = await start_server(users=options.users, mappings=options.mappings)
        client = await raw_connect(server)
        await client.read_info()
        await client.send(connect_line(user="u", **{"pass": "p"}) + b"SUB > 1\r\nPUB x 1\r\n1\r\nPUB y 1\r\n2\r\n")
        await client.expect(b"MSG allowed.x 1 1\r\n1\r\n")
        await client.expect(b"-ERR 'Permissions Violation for Publish to \"denied\"'\r\n")


async def test_account_mappings_stay_in_their_account(start_server, raw_connect):
    options = options_from_text(
        """
        mappings { "g.*": "global.$1" }
        accounts {
          A: { users: [{user: a, password: a}], mappings: { "in.*": "a.{{wildcard(1)}}" } }
          B: { users: [{user: b, password: b}] }
        }
        """
    )
    with trio.fail_after(TIMEOUT):
        server = await start_server(accounts=options.accounts, users=options.users, mappings=options.mappings)
        clients = {}
        for name in ("a", "b"):
            client = clients[name] = await raw_connect(server)
            await client.read_info()
            await client.send(connect_line(user=name, **{"pass": name}) + b"SUB > 1\r\n")
            await client.ping()
        await clients["a"].send(b"PUB in.1 0\r\n\r\nPUB g.1 0\r\n\r\n")
        await clients["b"].send(b"PUB in.2 0\r\n\r\nPUB g.2 0\r\n\r\n")
        await clients["a"].expect(b"MSG a.1 1 0\r\n\r\nMSG g.1 1 0\r\n\r\n")
        await clients["b"].expect(b"MSG in.2 1 0\r\n\r\nMSG g.2 1 0\r\n\r\n")


def test_config_errors_are_nats_servers():
    for text, error in [
        ('mappings { "foo.*": "bar" }',
         'Error adding mapping for "foo.*" to "bar" : invalid mapping destination: not using all of the token wildcard(s) in bar'),
        ('mappings { foo: {dest: a} }', 'Missing weight for mapping destination "a"'),
        ('mappings { foo: {dest: a, weight: "70%"}, bar: {dest: b, weight: 101} }', "Invalid weight 101 for mapping destination"),
        ('mappings { "foo bar": a }', 'Subject "foo bar" is not a valid subject'),
        ("mappings { foo: [{dest: a, weight: 60}, {dest: b, weight: 50}] }",
         "interface conversion: interface {} is []interface {}, not string"),
        ('accounts { A { mappings { foo: "bar.*" } } }', 'Error adding mapping for "foo" to "bar.*" : invalid subject'),
    ]:
        with pytest.raises(ConfigFileError) as caught:
            options_from_text(text)
        assert error in str(caught.value), (text, str(caught.value))
    options = options_from_text('mappings { a: b, "c.*": [{dest: "d.$1", weight: 40%}, {destination: "e.$1", weight: 60, cluster: x}] }')
    assert options.mappings == [("a", [MapDest("b", 100)]), ("c.*", [MapDest("d.$1", 40), MapDest("e.$1", 60, "x")])]


@needs_nats_server
def test_config_errors_as_nats_server(tmp_path):
    for config in (
        'mappings { "foo.*": "bar.{{nope(1)}}" }',
        'mappings { "foo.*": "bar.{{wildcard(2)}}" }',
        "mappings { foo: {dest: a, weight: 50, x: 1} }",
        "mappings { foo: 5 }",
        'mappings { "foo.>": "bar" }',
    ):
        ours = start_error("natserver", config + "\n", tmp_path).split("natserver-bad.conf:", 1)[-1]
        theirs = start_error("nats-server", config + "\n", tmp_path).split("nats-server-bad.conf:", 1)[-1]
        # The text after the position (natserver points at the key, nats-server at the value).
        assert ours.split(": ", 1)[1] == theirs.split(": ", 1)[1]


async def test_reload_changes_mappings(tmp_path, nursery, raw_connect):
    path = tmp_path / "m.conf"
    path.write_text('listen: "127.0.0.1:-1"\nmappings { a: "one" }\n')
    with trio.fail_after(TIMEOUT):
        server = await nursery.start(natserver.serve, build_options({"config_file": str(path)}).copy(quiet=True))
        client = await raw_connect(server)
        await client.read_info()
        await client.send(connect_line() + b"SUB > 1\r\nPUB a 0\r\n\r\n")
        await client.expect(b"MSG one 1 0\r\n\r\n")
        path.write_text('listen: "127.0.0.1:-1"\nmappings { a: "two" }\n')
        signals.reload(server)
        await client.send(b"PUB a 0\r\n\r\n")
        await client.expect(b"MSG two 1 0\r\n\r\n")
        path.write_text('listen: "127.0.0.1:-1"\n')
        signals.reload(server)
        await client.send(b"PUB a 0\r\n\r\n")
        await client.expect(b"MSG a 1 0\r\n\r\n")
        await server.shutdown()


def test_nats_py_request_through_a_mapping(threaded_server):
    handle = threaded_server(mappings=[("svc.v1.*", [MapDest("svc.impl.$1")])])

    async def main():
        nc = await nats.connect(handle.url)
        try:
            async def answer(msg):
                await msg.respond(msg.subject.encode())

            await nc.subscribe("svc.impl.*", cb=answer)
            await nc.flush()
            reply = await nc.request("svc.v1.hello", b"", timeout=5)
            assert reply.data == b"svc.impl.hello"
        finally:
            await nc.close()

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


# -- differential: random mappings, the same subjects from both servers ---------------------------

_FUNCTIONS = [
    "{{wildcard(%d)}}", "$%d", "{{splitFromLeft(%d,2)}}", "{{SplitFromRight(%d,3)}}",
    "{{sliceFromLeft(%d,2)}}", "{{sliceFromRight(%d,3)}}", "{{split(%d,-)}}", "{{partition(7,%d)}}",
]


def _random_mappings(rng: random.Random) -> list[tuple[str, str]]:
    """Mappings with distinct first tokens (nats-server tries them in Go's random map order)."""
    out = []
    for i in range(24):
        kind = rng.choice(("literal", "stars", "full"))
        if kind == "literal":
            out.append((f"lit{i}.x", f"to{i}.lit"))
            continue
        stars = rng.randint(1, 3)
        source = [f"m{i}"] + ["*"] * stars
        order = list(range(1, stars + 1))
        rng.shuffle(order)
        dest = [f"d{i}"] + [rng.choice(_FUNCTIONS) % n for n in order]
        if rng.random() < 0.3:  # a partition over every wildcard
            dest.append("{{partition(5,%s)}}" % ",".join(map(str, range(1, stars + 1))))
        if kind == "full":
            source.append(">")
            dest.append(">")
        out.append((".".join(source), ".".join(dest)))
    return out


def _random_subjects(rng: random.Random, mappings: list[tuple[str, str]]) -> list[str]:
    subjects = []
    alphabet = "abcdefgh-12345"
    for _ in range(400):
        source, _ = rng.choice(mappings)
        tokens = []
        for token in source.split("."):
            if token == "*":
                tokens.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 9))))
            elif token == ">":
                tokens += [rng.choice(("p", "q-r", "s1")) for _ in range(rng.randint(1, 3))]
            else:
                tokens.append(token)
        if rng.random() < 0.1:
            tokens.append("extra")  # matches no mapping (unless under >)
        subjects.append(".".join(tokens))
    return subjects


def _deliveries(port: int, subjects: list[str]) -> list[bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sub, \
            socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as pub:
        for sock in (sub, pub):
            sock.recv(4096)
        sub.sendall(connect_line() + b"SUB > 1\r\nPING\r\n")
        _read_until(sub, b"PONG\r\n")
        pub.sendall(connect_line() + b"".join(b"PUB %s 0\r\n\r\n" % s.encode() for s in subjects) + b"PUB end 0\r\n\r\n")
        data = _read_until(sub, b"MSG end 1 0\r\n")
    return _messages(data)


def _read_until(sock: socket.socket, marker: bytes) -> bytes:
    data = b""
    deadline = time.monotonic() + TIMEOUT
    while marker not in data:
        assert time.monotonic() < deadline
        chunk = sock.recv(65536)
        assert chunk, data[-200:]
        data += chunk
    return data


def _config(mappings: list[tuple[str, str]]) -> str:
    return "mappings {\n" + "".join(f'  "{s}": "{d}"\n' for s, d in mappings) + "}\n"


def test_random_mappings_deliver_what_the_transforms_say(tmp_path):
    """natserver alone: every delivered subject is the transform of what was published."""

    rng = random.Random(1)
    mappings = _random_mappings(rng)
    subjects = _random_subjects(rng, mappings)
    transforms = [SubjectTransform(s, d) for s, d in mappings]
    with running("natserver", _config(mappings), tmp_path) as port:
        got = _deliveries(port, subjects)
    expected = [next((r for t in transforms if (r := t.apply(s)) is not None), s).encode() for s in subjects]
    # A function may leave an empty token (split of "-"): nobody can subscribe to that.
    assert got == [*(e for e in expected if b".." not in e and not e.endswith(b".")), b"end"]


@needs_nats_server
@pytest.mark.parametrize("seed", [2, 3])
def test_random_mappings_as_nats_server(tmp_path, seed):
    rng = random.Random(seed)
    mappings = _random_mappings(rng)
    subjects = _random_subjects(rng, mappings)
    results = {}
    for kind in ("nats-server", "natserver"):
        with running(kind, _config(mappings), tmp_path) as port:
            results[kind] = _deliveries(port, subjects)
    assert len(results["natserver"]) > len(subjects) * 0.9
    assert results["natserver"] == results["nats-server"]


def test_make_options_accepts_mappings():
    assert make_options(mappings=[("a", [MapDest("b")])]).mappings == [("a", [MapDest("b")])]
