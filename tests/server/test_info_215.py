"""What nats-server 2.10 to 2.15 changed in the client protocol, on the wire (issue #27).

The conformance suite (conformance/cases.py) replays the same bytes against nats-server 2.15.1
itself; these tests pin what a value-masked recording cannot show: the ``xkey`` is a real
x25519 key, ``api_lvl`` names natserver's own level, and the INFO after the first PONG is sent
once, to protocol-1 clients only, with the account the client is bound to.
"""

from __future__ import annotations

import asyncio
import json

import nats
import nats.errors
import pytest
import trio

from natserver.auth import nkeys
from natserver.config.mapping import options_from_file
from natserver.protocol import const

TIMEOUT = 10  # hard limit for each test (seconds)

P1 = b'CONNECT {"verbose":false,"pedantic":false,"protocol":1}\r\n'
P0 = b'CONNECT {"verbose":false,"pedantic":false}\r\n'

ACCOUNTS = """accounts {
  A: { users: [{user: a, password: a}], exports: [{service: "help.>"}] }
  B: { users: [{user: b, password: b}], imports: [{service: {account: A, subject: "help.me"}, to: "help"}] }
}
"""


def _accounts(tmp_path) -> dict:
    path = tmp_path / "accounts.conf"
    path.write_text(ACCOUNTS)
    options = options_from_file(path)
    return {"accounts": options.accounts, "users": options.users}


def _info(line: bytes) -> dict:
    assert line.startswith(b"INFO {") and line.endswith(b"} \r\n"), line
    return json.loads(line[5:-3])


async def test_info_has_the_2_15_fields(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await raw_connect(server)
        info = _info(await client.read_line())
        keys = list(info)
        # server.go Info: git_commit after proto, xkey last.
        assert keys[keys.index("proto") + 1] == "git_commit"
        assert keys[-1] == "xkey"
        prefix, raw = nkeys.decode_public_key(info["xkey"])
        assert prefix == nkeys.PREFIX_CURVE and len(raw) == 32
        assert info["xkey"] == server.xkey
        # natserver announces the JetStream API level it implements; 0 is left out (omitempty).
        if const.JS_API_LEVEL:
            assert info["api_lvl"] == const.JS_API_LEVEL
        else:
            assert "api_lvl" not in info


async def test_api_lvl_is_sent_when_set(server, raw_connect, monkeypatch):
    monkeypatch.setattr(const, "JS_API_LEVEL", 3)
    with trio.fail_after(TIMEOUT):
        client = await raw_connect(server)
        info = _info(await client.read_line())
        keys = list(info)
        assert info["api_lvl"] == 3
        assert keys.index("api_lvl") == keys.index("xkey") - 1


async def test_each_server_has_its_own_xkey(start_server):
    first, second = await start_server(), await start_server()
    assert first.xkey != second.xkey


async def test_protocol_1_client_gets_connect_info_after_its_first_pong(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await raw_connect(server)
        first = _info(await client.read_line())
        await client.send(P1 + b"PING\r\n")
        await client.expect(b"PONG\r\n")
        again = _info(await client.read_line())
        assert again["connect_info"] is True
        assert again["remote_account"] == "$G"
        assert "acc_is_sys" not in again
        assert "nonce" not in again
        assert again["client_id"] == first["client_id"]
        # Only after the first PONG.
        assert await client.ping() == b""
        assert await client.ping() == b""


async def test_protocol_0_client_gets_no_connect_info(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await raw_connect(server)
        await client.read_line()
        await client.send(P0)
        assert await client.ping() == b""
        assert await client.nothing_within(0.1) == b""


async def test_ping_before_connect_does_not_use_up_the_connect_info(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await raw_connect(server)
        await client.read_line()
        await client.send(b"PING\r\n")
        await client.expect(b"PONG\r\n")
        await client.send(P1 + b"PING\r\n")
        await client.expect(b"PONG\r\n")
        assert _info(await client.read_line())["connect_info"] is True


async def test_connect_info_names_the_account(start_server, raw_connect, tmp_path):
    with trio.fail_after(TIMEOUT):
        server = await start_server(**_accounts(tmp_path))
        client = await raw_connect(server)
        await client.read_line()
        await client.send(b'CONNECT {"verbose":false,"pedantic":false,"protocol":1,"user":"b","pass":"b"}\r\nPING\r\n')
        await client.expect(b"PONG\r\n")
        assert _info(await client.read_line())["remote_account"] == "B"


async def test_no_responders_status_names_the_subject(server, raw_connect):
    with trio.fail_after(TIMEOUT):
        client = await raw_connect(server)
        await client.read_line()
        await client.send(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\n'
                          b"SUB r.x 7\r\nPUB foo.bar r.x 0\r\n\r\n")
        status = b"NATS/1.0 503\r\nNats-Subject: foo.bar\r\n\r\n"
        assert await client.ping() == b"HMSG r.x 7 %d %d\r\n%s\r\n" % (len(status), len(status), status)


@pytest.mark.parametrize("responder", [False, True])
def test_service_import_without_responder_is_no_responders(threaded_server, tmp_path, responder):
    """nats-server 2.10+: a request through a service import that nobody in the exporting
    account takes gets 503, where 2.9 counted the import itself as interest (nats-py raises
    NoRespondersError at once instead of timing out)."""
    handle = threaded_server(**_accounts(tmp_path))

    async def exchange() -> bytes | str:
        exporter = await nats.connect(handle.url, user="a", password="a", allow_reconnect=False)
        requester = await nats.connect(handle.url, user="b", password="b", allow_reconnect=False)
        try:
            if responder:
                async def answer(msg):
                    await msg.respond(b"ok")
                await exporter.subscribe("help.me", cb=answer)
                await exporter.flush()
            try:
                return (await requester.request("help", b"?", timeout=5)).data
            except nats.errors.NoRespondersError:
                return "no responders"
        finally:
            await requester.close()
            await exporter.close()

    result = asyncio.run(asyncio.wait_for(exchange(), TIMEOUT))
    assert result == (b"ok" if responder else "no responders")
