"""A direct consumer's create (what a mirror or a source asks its origin for) and the stream's
identity (jetstream_api.go JSStreamIdentity, 2.15): the answer carries
``Nats-Stream-Identity: <hash of the stream's creation time>``, and a create that names another
identity is refused with 10225, as nats-server 2.15.1 answered these bytes (checked live):

    HMSG _R.x 1 44 693 / NATS/1.0 / Nats-Stream-Identity: JBL5i1or / {"type":...consumer_create_response...}
    {"type":"io.nats.jetstream.api.v1.consumer_create_response","error":{"code":400,"err_code":10225,
     "description":"consumer's stream identity does not match: JBL5i1or"}}

A plain consumer's answer has no such header."""

from __future__ import annotations

import json

import trio

from natserver.jetstream.external import get_hash

TIMEOUT = 10  # seconds for the whole test
DIRECT = b'{"stream_name":"O","config":{"deliver_subject":"dlv.%s","ack_policy":"none","direct":true,' \
         b'"flow_control":true,"idle_heartbeat":1000000000}}'


async def _answer(client) -> tuple[bytes, dict]:
    """The next HMSG's or MSG's headers (b"" for a MSG) and JSON body."""
    line = await client.read_line()
    parts = line.split()
    if parts[0] == b"HMSG":
        hdr_len, total = int(parts[-2]), int(parts[-1])
        data = await client.read_exactly(total + 2)
        return data[:hdr_len], json.loads(data[hdr_len:total])
    body = await client.read_exactly(int(parts[-1]) + 2)
    return b"", json.loads(body[:-2])


async def test_a_direct_consumers_create_names_the_streams_identity(start_server, raw_connect, tmp_path):
    with trio.fail_after(TIMEOUT):
        server = await start_server(jetstream=True, store_dir=str(tmp_path))
        client = await raw_connect(server)
        await client.read_line()  # INFO
        await client.send(b'CONNECT {"verbose":false,"headers":true}\r\nSUB _R.> 1\r\n')
        body = b'{"name":"O","subjects":["o.>"]}'
        await client.send(b"PUB $JS.API.STREAM.CREATE.O _R.x %d\r\n%s\r\n" % (len(body), body))
        _, created = await _answer(client)
        identity = get_hash(created["created"]).encode()

        body = DIRECT % b"a"
        await client.send(b"PUB $JS.API.CONSUMER.CREATE.O _R.x %d\r\n%s\r\n" % (len(body), body))
        headers, answer = await _answer(client)
        assert headers == b"NATS/1.0\r\nNats-Stream-Identity: " + identity + b"\r\n\r\n"
        assert answer["type"] == "io.nats.jetstream.api.v1.consumer_create_response" and answer["name"]

        hdr = b"NATS/1.0\r\nNats-Stream-Identity: " + identity + b"\r\n\r\n"
        body = DIRECT % b"b"
        await client.send(b"HPUB $JS.API.CONSUMER.CREATE.O _R.x %d %d\r\n%s%s\r\n" % (
            len(hdr), len(hdr) + len(body), hdr, body))
        headers, answer = await _answer(client)
        assert headers.startswith(b"NATS/1.0\r\nNats-Stream-Identity: ") and "error" not in answer

        hdr = b"NATS/1.0\r\nNats-Stream-Identity: nope\r\n\r\n"
        body = DIRECT % b"c"
        await client.send(b"HPUB $JS.API.CONSUMER.CREATE.O _R.x %d %d\r\n%s%s\r\n" % (
            len(hdr), len(hdr) + len(body), hdr, body))
        headers, answer = await _answer(client)
        assert headers == b""
        assert answer == {"type": "io.nats.jetstream.api.v1.consumer_create_response",
                          "error": {"code": 400, "err_code": 10225,
                                    "description": "consumer's stream identity does not match: " + identity.decode()}}

        body = b'{"stream_name":"O","config":{"durable_name":"D","ack_policy":"explicit"}}'
        await client.send(b"PUB $JS.API.CONSUMER.CREATE.O.D _R.x %d\r\n%s\r\n" % (len(body), body))
        headers, answer = await _answer(client)
        assert headers == b"" and answer["name"] == "D"
