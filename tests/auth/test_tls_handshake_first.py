"""TLS ``handshake_first`` (nats-server 2.10+): the TLS handshake before the INFO.

``handshake_first: true`` sends nothing until the client's handshake, then the INFO over TLS;
``auto`` (or a duration) waits that long for a handshake and otherwise sends the INFO in plain
text, as without the option. What a client sees is compared with a live nats-server 2.15.1 when
it is installed; nats-py's own ``tls_handshake_first`` connects through it.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import sys
import time

import nats
import pytest

from natserver.auth.tls import DEFAULT_TLS_HANDSHAKE_FIRST_FALLBACK_DELAY, TLSConfigError, parse_tls_block
from tests import reference
from tests.auth.test_tls import _free_port, _start, certs, sub_pub_roundtrip  # noqa: F401  (certs: the fixture)

TIMEOUT = 20


def _info(data: bytes) -> dict:
    assert data.startswith(b"INFO {") and data.endswith(b"\r\n"), data
    return json.loads(data[5:-3])


def _read_line(read) -> bytes:
    data = b""
    while not data.endswith(b"\r\n"):
        chunk = read(4096)
        if not chunk:
            break
        data += chunk
    return data


def _transcript(port: int, certs) -> dict:  # noqa: F811
    """A silent client for 0.3 s, a client that starts TLS at once, one that upgrades after a
    plain INFO (if one comes): what each is sent."""
    out: dict = {}
    with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
        sock.settimeout(0.3)
        try:
            first = _read_line(sock.recv)
        except TimeoutError:
            first = b""
        out["silent"] = sorted(k for k in _info(first) if k != "api_lvl") if first else "nothing"
        out["silent_tls"] = _info(first).get("tls_required") if first else None
        if first:  # the fallback's plain INFO: the client upgrades as without handshake_first
            sock.settimeout(3)
            with certs.client_context().wrap_socket(sock, server_hostname="localhost") as tls:
                tls.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
                out["after_fallback"] = _read_line(tls.recv)
    with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
        with certs.client_context().wrap_socket(sock, server_hostname="localhost") as tls:
            info = _info(_read_line(tls.recv))
            out["first_info"] = [k for k in info if k != "api_lvl"]
            out["first_info_tls"] = {k: v for k, v in info.items() if k.startswith("tls")}
            out["first_roundtrip"] = sub_pub_roundtrip(tls)
    return out


def _config(tmp_path, certs, value: str, extra: str = "") -> str:  # noqa: F811
    conf = tmp_path / f"hf-{abs(hash(value + extra))}.conf"
    conf.write_text(f'tls {{\n  cert_file: "{certs.server}"\n  key_file: "{certs.server_key}"\n'
                    f"  handshake_first: {value}\n}}\n{extra}")
    return str(conf)


def _run(argv: list[str], conf: str, certs) -> dict:  # noqa: F811
    port = _free_port()
    proc = _start([*argv, "-a", "127.0.0.1", "-p", str(port), "-c", conf], port)
    try:
        return _transcript(port, certs)
    finally:
        proc.kill()
        proc.wait(5)


NATSERVER = [sys.executable, "-m", "natserver"]
MODES = [("true", ""), ("auto", ""), ('"100ms"', ""), ("true", "allow_non_tls: true\n")]


@pytest.mark.parametrize("value, extra", MODES)
def test_natserver_handshake_first(tmp_path, certs, value, extra):  # noqa: F811
    got = _run(NATSERVER, _config(tmp_path, certs, value, extra), certs)
    assert got["first_roundtrip"] == b"MSG a 1 1\r\nx\r\nPONG\r\n"
    assert got["first_info_tls"]["tls_required"] is True
    assert got["first_info"][-1] == "xkey"
    if value == "true":
        assert got["silent"] == "nothing"  # no INFO before the client's handshake
    else:
        assert got["silent_tls"] is True and got["after_fallback"] == b"PONG\r\n"


@reference.needs_nats_server
@pytest.mark.parametrize("value, extra", MODES)
def test_same_answers_as_nats_server(tmp_path, certs, value, extra):  # noqa: F811
    conf = _config(tmp_path, certs, value, extra)
    assert _run(NATSERVER, conf, certs) == _run([reference.NATS_SERVER], conf, certs)


def test_nats_py_connects_with_tls_handshake_first(threaded_server, certs):  # noqa: F811
    config, _ = parse_tls_block({"cert_file": str(certs.server), "key_file": str(certs.server_key),
                                 "handshake_first": True})
    handle = threaded_server(tls=config)

    async def main():
        context = ssl.create_default_context(cafile=str(certs.ca))
        nc = await nats.connect(f"tls://localhost:{handle.port}", tls=context, tls_handshake_first=True,
                                allow_reconnect=False, connect_timeout=5)
        try:
            sub = await nc.subscribe("hello")
            await nc.publish("hello", b"world")
            assert (await sub.next_msg(timeout=5)).data == b"world"
        finally:
            await nc.close()

    asyncio.run(asyncio.wait_for(main(), TIMEOUT))


@pytest.mark.parametrize("value, expected", [
    (True, (True, 0.0)), ("on", (True, 0.0)), ("false", (False, 0.0)),
    ("auto", (True, DEFAULT_TLS_HANDSHAKE_FIRST_FALLBACK_DELAY)), ("auto_fallback", (True, 0.05)),
    ("250ms", (True, 0.25)),
])
def test_handshake_first_values(value, expected):
    for key in ("handshake_first", "first", "immediate"):
        config, _ = parse_tls_block({key: value})
        assert (config.handshake_first, config.fallback_delay) == expected


def test_handshake_first_bad_values():
    # opts.go parseTLS's words
    with pytest.raises(TLSConfigError, match='field "handshake_first"\'s value "soon" is invalid'):
        parse_tls_block({"handshake_first": "soon"})
    with pytest.raises(TLSConfigError, match='field "first" should be a boolean or a string, got int64'):
        parse_tls_block({"first": 3})


def test_fallback_delay_is_waited_for(tmp_path, certs):  # noqa: F811
    """A silent client gets the INFO after the fallback delay, not before."""
    port = _free_port()
    proc = _start([*NATSERVER, "-a", "127.0.0.1", "-p", str(port), "-c",
                   _config(tmp_path, certs, '"400ms"')], port)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
            start = time.monotonic()
            assert _info(_read_line(sock.recv))["tls_required"] is True
            assert time.monotonic() - start >= 0.35
    finally:
        proc.kill()
        proc.wait(5)
