"""System account requests as a real client's suite sends them (issue 30 item 17), each run
against natserver and against the reference nats-server 2.15.1 (skipped when its binary is
missing): a filter naming another server gets no answer, CONNZ with ``auth`` names each
connection's account, SUBSZ counts every account's subscriptions, and the endpoint's own
refusal (an invalid ``test`` subject, a bad sort) is a 500, where a body that is not JSON is a
400."""

from __future__ import annotations

import asyncio
import json
import os

import nats
import pytest

from tests.auth.test_auth_helpers import running

TIMEOUT = 30
REFERENCE = "/opt/nats-server-2.15.1/nats-server"  # the reference nats-server (the brief's 2.15.1)
SILENCE = 0.5  # seconds a request that nobody answers is waited for
CONFIG = """
server_name: srv1
accounts {
  SYS { users [{user: sys, password: sys}] }
  A { users [{user: a, password: a}] }
}
system_account: SYS
"""


@pytest.fixture(params=["natserver", pytest.param("nats-server", marks=pytest.mark.needs_nats_server)])
def port(request, tmp_path):
    if request.param == "nats-server" and not os.path.exists(REFERENCE):
        pytest.skip("nats-server 2.15.1 not installed")
    with running(request.param, CONFIG, tmp_path, binary=REFERENCE) as port:
        yield port


async def _answers(nc, subject: str, body: bytes) -> list[dict]:
    """The answer to one request, or none within SILENCE (a server filtered out sends none)."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(subject, body, reply=inbox)
    out = []
    try:
        while not out:  # one server: one answer at most
            out.append(json.loads((await sub.next_msg(timeout=SILENCE)).data))
    except nats.errors.TimeoutError:
        pass
    await sub.unsubscribe()
    return out


def _run(port: int, check) -> None:
    async def main():
        system = await nats.connect(f"nats://127.0.0.1:{port}", user="sys", password="sys")
        member = await nats.connect(f"nats://127.0.0.1:{port}", user="a", password="a", name="member")
        try:
            await member.subscribe("foo")
            await member.flush()
            await check(system)
        finally:
            await member.close()
            await system.close()

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


def test_a_filter_naming_another_server_gets_no_answer(port):
    async def check(nc):
        for subject in ("$SYS.REQ.SERVER.PING.VARZ", "$SYS.REQ.SERVER.PING.CONNZ", "$SYS.REQ.SERVER.PING",
                        "$SYS.REQ.SERVER.PING.STATSZ", "$SYS.REQ.ACCOUNT.A.CONNZ"):
            assert await _answers(nc, subject, b'{"server_name":"other"}') == [], subject
            assert await _answers(nc, subject, b'{"server_name":"srv1","exact_match":true,"cluster":"x"}') == [], subject
            # A part of the name is a match unless exact_match says otherwise.
            assert len(await _answers(nc, subject, b'{"server_name":"srv"}')) == 1, subject
            assert await _answers(nc, subject, b'{"server_name":"srv","exact_match":true}') == [], subject
        varz = await _answers(nc, "$SYS.REQ.SERVER.PING.VARZ", b'{"server_name":"srv1","exact_match":true}')
        assert varz[0]["data"]["server_name"] == "srv1"

    _run(port, check)


def test_connz_with_auth_names_each_connections_account(port):
    async def check(nc):
        [plain] = await _answers(nc, "$SYS.REQ.SERVER.PING.CONNZ", b"")
        assert all("account" not in row and "authorized_user" not in row for row in plain["data"]["connections"])
        [connz] = await _answers(nc, "$SYS.REQ.SERVER.PING.CONNZ", b'{"auth":true}')
        rows = {row["authorized_user"]: row["account"] for row in connz["data"]["connections"]}
        assert rows == {"sys": "SYS", "a": "A"}
        # One account's connections (the account request names it in the subject).
        [mine] = await _answers(nc, "$SYS.REQ.ACCOUNT.A.CONNZ", b'{"auth":true}')
        assert [row.get("name") for row in mine["data"]["connections"]] == ["member"]
        assert mine["data"]["total"] == 1

    _run(port, check)


def test_subsz_counts_every_accounts_subscriptions(port):
    async def check(nc):
        [subsz] = await _answers(nc, "$SYS.REQ.SERVER.PING.SUBSZ", b"")
        # nats-server's own internal subscriptions differ from natserver's; both count, besides
        # the clients' (foo in A), the system account's request subscriptions.
        assert subsz["data"]["num_subscriptions"] > 10
        [listed] = await _answers(nc, "$SYS.REQ.SERVER.PING.SUBSZ", b'{"subscriptions":true,"test":"foo"}')
        assert [(d["account"], d["subject"]) for d in listed["data"]["subscriptions_list"]] == [("A", "foo")]

    _run(port, check)


def test_an_endpoints_refusal_is_a_500_and_bad_json_a_400(port):
    async def check(nc):
        [bad_test] = await _answers(nc, "$SYS.REQ.SERVER.PING.SUBSZ", b'{"test":"foo.>.bar"}')
        assert bad_test["data"] is None
        assert bad_test["error"] == {"code": 500, "description": "invalid test subject, must be valid publish subject: foo.>.bar"}
        [bad_sort] = await _answers(nc, "$SYS.REQ.SERVER.PING.CONNZ", b'{"sort":"nope"}')
        assert bad_sort["error"] == {"code": 500, "description": "invalid sorting option: nope"}
        [bad_json] = await _answers(nc, "$SYS.REQ.SERVER.PING.CONNZ", b"nope")
        assert bad_json["error"]["code"] == 400
        for subject in ("$SYS.REQ.SERVER.PING", "$SYS.REQ.SERVER.PING.STATSZ"):  # no statsz then
            [bad_statsz] = await _answers(nc, subject, b"nope")
            assert sorted(bad_statsz) == ["error", "server"] and bad_statsz["error"]["code"] == 400

    _run(port, check)
