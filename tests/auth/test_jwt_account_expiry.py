"""An account JWT that expires while its clients are connected (issue 30 item 15), as
nats-server handles it (accounts.go checkExpiration/expiredTimeout, client.go
accountAuthExpired): each client of the account gets ``-ERR 'Account Authentication
Expired'`` and is closed ("Authentication Expired"), and the system account announces the
disconnect with that reason. Against natserver and the reference nats-server 2.15.1 with a
short expiry, and in process on a clock the test moves (an hour's expiry)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import socket
import subprocess
import sys
import time

import nats
import pytest

from natserver.auth import nkeys
from natserver.auth.jwt import OperatorTree, creds
from natserver.config.mapping import options_from_file
from natserver.testing import NatsServer

TIMEOUT = 20
REFERENCE = "/opt/nats-server-2.15.1/nats-server"  # the reference nats-server (the brief's 2.15.1)
SHORT = 5  # seconds until the account expires in the live test (whole seconds: 4-5 s from now)


def _tree(account_expires: int) -> tuple[OperatorTree, str]:
    """An operator with a system account SYS and an account A expiring at ``account_expires``;
    returns the tree and its configuration."""
    tree = OperatorTree()
    system = tree.account("SYS")
    tree.operator_fields["system_account"] = system.public_key.decode()
    tree.account("A")
    preload = {tree.accounts["SYS"][0].public_key.decode(): tree.account_jwt("SYS"),
               tree.accounts["A"][0].public_key.decode(): tree.account_jwt("A", exp=account_expires)}
    lines = [f'operator: "{tree.operator_jwt}"', "resolver: MEMORY", "resolver_preload: {"]
    lines += [f"  {key}: {token}" for key, token in preload.items()]
    return tree, "\n".join([*lines, "}", "listen: 127.0.0.1:-1"]) + "\n"


class _Raw:
    """A raw connection that authenticates with a user JWT of ``account``."""

    def __init__(self, port: int, tree: OperatorTree, account: str, name: str, extra: bytes = b"") -> None:
        token, key = tree.user(account, name)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.buf = b""
        info = json.loads(self.read_until(b"\r\n")[5:])
        sig = base64.urlsafe_b64encode(key.sign(info["nonce"].encode())).rstrip(b"=").decode()
        connect = {"verbose": False, "protocol": 1, "jwt": token, "sig": sig, "name": name}
        self.sock.sendall(b"CONNECT " + json.dumps(connect).encode() + b"\r\n" + extra + b"PING\r\n")
        self.read_until(b"PONG\r\n")

    def read_until(self, marker: bytes) -> bytes:
        while marker not in self.buf:
            chunk = self.sock.recv(65536)
            assert chunk, f"closed before {marker!r}: {self.buf[-300:]!r}"
            self.buf += chunk
        data, _, self.buf = self.buf.partition(marker)
        return data + marker

    def next_message(self) -> tuple[bytes, bytes]:
        """The next MSG (header line, payload), past INFO updates and PINGs (answered)."""
        while True:
            line = self.read_until(b"\r\n")
            if line.startswith(b"PING"):
                self.sock.sendall(b"PONG\r\n")
            elif line.startswith(b"MSG "):
                return line, self.read_until(b"\r\n")

    def read_until_closed(self) -> bytes:
        while chunk := self.sock.recv(65536):
            self.buf += chunk
        return self.buf


@pytest.mark.parametrize("kind", ["natserver", pytest.param("nats-server", marks=pytest.mark.needs_nats_server)])
def test_clients_of_an_expiring_account_are_told_and_closed(kind, tmp_path):
    if kind == "nats-server" and not os.path.exists(REFERENCE):
        pytest.skip("nats-server 2.15.1 not installed")
    expires = int(time.time()) + SHORT
    tree, config = _tree(expires)
    path = tmp_path / "op.conf"
    path.write_text(config)
    argv = [REFERENCE] if kind == "nats-server" else [sys.executable, "-m", "natserver"]
    log = tmp_path / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([*argv, "-c", str(path)], stdout=subprocess.DEVNULL, stderr=out)
    try:
        deadline = time.monotonic() + TIMEOUT
        while not (found := re.search(r"client connections on 127\.0\.0\.1:(\d+)", log.read_text())):
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
            time.sleep(0.02)
        port = int(found.group(1))
        account = tree.accounts["A"][0].public_key.decode()
        system = _Raw(port, tree, "SYS", "sys", f"SUB $SYS.ACCOUNT.{account}.DISCONNECT 1\r\n".encode())
        member = _Raw(port, tree, "A", "member")
        assert time.time() < expires, "the machine was too slow to connect before the expiry"
        rest = member.read_until_closed()
        assert time.time() >= expires - 1  # not before its time (whole seconds)
        assert rest.endswith(b"-ERR 'Account Authentication Expired'\r\n")
        header, payload = system.next_message()
        assert header.startswith(f"MSG $SYS.ACCOUNT.{account}.DISCONNECT 1 ".encode())
        event = json.loads(payload)
        assert (event["client"]["name"], event["reason"]) == ("member", "Authentication Expired")
        with pytest.raises(AssertionError, match="closed"):  # and a new client of A is refused
            _Raw(port, tree, "A", "late")
    finally:
        proc.kill()
        proc.wait(TIMEOUT)


def test_an_hour_long_account_expires_on_the_servers_clock(tmp_path, monkeypatch):
    """In process, on a clock that stands still until moved: nats-py's client of the account
    stays until the account's hour is up, then gets the error; the system user hears why."""
    monkeypatch.setitem(sys.modules, "nkeys", nkeys)  # nats-py signs with the nkeys package's API
    with NatsServer(clock="manual") as probe:
        start = int(probe.now())
    tree, config = _tree(start + 3600)
    path = tmp_path / "op.conf"
    path.write_text(config)
    options = options_from_file(path)
    account = tree.accounts["A"][0].public_key.decode()
    user = tmp_path / "a.creds"
    user.write_text(creds(*_creds(tree, "A", "member")))
    system = tmp_path / "sys.creds"
    system.write_text(creds(*_creds(tree, "SYS", "sys")))

    async def main(server: NatsServer):
        errors: list[str] = []

        async def error_cb(exc):
            errors.append(str(exc))

        watcher = await nats.connect(server.url, user_credentials=str(system))
        member = await nats.connect(server.url, user_credentials=str(user), error_cb=error_cb,
                                    allow_reconnect=False)
        try:
            events = await watcher.subscribe(f"$SYS.ACCOUNT.{account}.DISCONNECT")
            await watcher.flush()
            await server.advance_async(3500)
            assert member.is_connected and errors == []
            await member.flush(timeout=TIMEOUT)
            await server.advance_async(101)
            event = json.loads((await events.next_msg(timeout=TIMEOUT)).data)
            assert event["reason"] == "Authentication Expired"
            deadline = time.monotonic() + TIMEOUT
            while not member.is_closed:  # nats-py closes on this -ERR, keeping it as last_error
                assert time.monotonic() < deadline, (errors, member.last_error)
                await asyncio.sleep(0.02)
            assert "account authentication expired" in str(member.last_error).lower()
            [closed] = server.closed_connections()
            assert closed.close_reason == "Authentication Expired"
        finally:
            await member.close()
            await watcher.close()

    with NatsServer(clock="manual", trusted_operators=options.trusted_operators, resolver=options.resolver,
                    resolver_preload=options.resolver_preload) as server:
        asyncio.run(asyncio.wait_for(main(server), TIMEOUT * 2))


def _creds(tree: OperatorTree, account: str, name: str) -> tuple[str, bytes]:
    token, key = tree.user(account, name)
    return token, key.seed

