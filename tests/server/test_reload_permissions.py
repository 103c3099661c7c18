"""A requester that loses its subscribe permission on the reply subject while waiting for
several responses (issue 30 item 14): a config reload that takes the permission away removes
the subscription and tells the client which (client.go processSubsOnConfigReload), so nats-py
reports the error and gets no further responses. Run against natserver and the reference
nats-server 2.15.1 (skipped when its binary is missing)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time

import nats
import pytest

TIMEOUT = 20
REFERENCE = "/opt/nats-server-2.15.1/nats-server"  # the reference nats-server (the brief's 2.15.1)
QUIET = 0.5  # seconds in which a response that must not come does not
ALLOWED = """
listen: 127.0.0.1:-1
authorization { users [
  {user: req, password: req, permissions: {publish: {allow: ["svc"]}, subscribe: {allow: ["_INBOX.>"]}}}
  {user: rsp, password: rsp}
]}
"""
REVOKED = ALLOWED.replace('subscribe: {allow: ["_INBOX.>"]}', 'subscribe: {allow: ["other"]}')


@pytest.fixture(params=["natserver", pytest.param("nats-server", marks=pytest.mark.needs_nats_server)])
def server(request, tmp_path):
    """(process, port, config path) of a server started on ALLOWED."""
    if request.param == "nats-server" and not os.path.exists(REFERENCE):
        pytest.skip("nats-server 2.15.1 not installed")
    config = tmp_path / "perms.conf"
    config.write_text(ALLOWED)
    argv = [REFERENCE] if request.param == "nats-server" else [sys.executable, "-m", "natserver"]
    proc = subprocess.Popen([*argv, "-c", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + TIMEOUT
        port = None
        while port is None:
            assert time.monotonic() < deadline and proc.poll() is None, "the server did not start"
            found = re.search(r"client connections on 127\.0\.0\.1:(\d+)", proc.stderr.readline())
            port = int(found.group(1)) if found else None
        yield proc, port, config
    finally:
        proc.kill()
        proc.wait(TIMEOUT)
        proc.stderr.close()


def test_a_requester_that_loses_its_reply_subscription_is_told(server):
    proc, port, config = server

    async def main():
        errors: list[str] = []

        async def error_cb(exc):
            errors.append(str(exc))

        requester = await nats.connect(f"nats://127.0.0.1:{port}", user="req", password="req", error_cb=error_cb,
                                       allow_reconnect=False)
        responder = await nats.connect(f"nats://127.0.0.1:{port}", user="rsp", password="rsp")
        try:
            requests = await responder.subscribe("svc")
            await responder.flush()
            inbox = requester.new_inbox()
            responses = await requester.subscribe(inbox)
            await requester.flush()
            await requester.flush()
            await requester.publish("svc", b"how many?", reply=inbox)
            request = await requests.next_msg(timeout=TIMEOUT)
            await responder.publish(request.reply, b"first")
            assert (await responses.next_msg(timeout=TIMEOUT)).data == b"first"

            config.write_text(REVOKED)
            proc.send_signal(signal.SIGHUP)
            expected = f'nats: permissions violation for subscription to "{inbox}" (sid "{responses._id}")'
            deadline = time.monotonic() + TIMEOUT
            while not errors:
                assert time.monotonic() < deadline, "no error for the removed subscription"
                await asyncio.sleep(0.02)
            assert [e.lower() for e in errors] == [expected.lower()]
            await responder.publish(request.reply, b"second")
            await responder.flush()
            with pytest.raises(nats.errors.TimeoutError):
                await responses.next_msg(timeout=QUIET)
            assert requester.is_connected  # the connection stays
            await requester.flush(timeout=TIMEOUT)
        finally:
            await requester.close()
            await responder.close()

    asyncio.run(asyncio.wait_for(main(), TIMEOUT * 2))
