"""Issue 18 items 1 and 2: JetStream encryption at rest (``jetstream { cipher, key }``) and
the JetStream ``domain``.

Encryption: nothing readable on disk (subjects, headers, payloads, the stream configuration),
a restart with the right key recovers everything, a wrong key / no key / a plain store under a
key stops the server with one clear line, the store's own recovery rules (torn tails, erase)
hold on encrypted segments. Domain: nats-py's ``nc.jetstream(domain=...)`` end to end, and
the raw answers (INFO, PubAck, $JS.<domain>.API.INFO, /varz) against nats-server 2.9.10."""

from __future__ import annotations

import asyncio
import glob
import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.request

import nats
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule

from natserver import Options
from natserver.config.mapping import ConfigFileError, options_from_file
from natserver.jetstream.crypto import AES, CHACHA, EncryptionKeyError, ServerKey, cipher_name
from natserver.jetstream.store import FileStore
from natserver.jetstream.stream import StreamConfig, check_stream_config
from natserver.protocol.const import JS_API_LEVEL
from natserver.testing import NatsServer
from tests.jetstream.test_jetstream_store import MemoryStore, Model, StoreMachine, config
from tests.reference import NATS_SERVER

TIMEOUT = 10.0
SECRETS = (b"secret.subject", b"TOPSECRETPAYLOAD", b"Hdr-Secret", b"HEADERVALUE", b"secret.>")


def run(coro, timeout: float = TIMEOUT):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def disk_bytes(root) -> bytes:
    out = b""
    for path in glob.glob(os.path.join(str(root), "**"), recursive=True):
        if os.path.isfile(path):
            with open(path, "rb") as f:
                out += f.read()
    return out


# -- the store with a cipher ------------------------------------------------------------------


@pytest.mark.parametrize("cipher", [CHACHA, AES])
def test_encrypted_file_store_round_trip_and_recovery(tmp_path, cipher):
    key = ServerKey(cipher, "store key")
    key_file, stream_cipher = key.key_file_bytes()
    cfg = check_stream_config(StreamConfig(name="S"), {})
    store = FileStore(str(tmp_path), cfg, segment_size=512, cipher=stream_cipher)
    for i in range(40):
        store.store_msg(b"secret.subject", b"NATS/1.0\r\nHdr-Secret: HEADERVALUE\r\n\r\n",
                        b"TOPSECRETPAYLOAD %d" % i, i + 1)
    store.remove_msg(5)
    store.remove_msg(6, erase=True)
    store.flush()
    store.stop()
    raw = disk_bytes(tmp_path)
    assert len(raw) > 40 * 16 and not any(s in raw for s in SECRETS)
    # Reopen with the key from the key file: everything is back.
    again = key.open_key_file(key_file, "stream 'S'")
    store = FileStore(str(tmp_path), cfg, segment_size=512, cipher=again)
    assert (store.msgs, store.first_seq, store.last_seq, store.lost) == (38, 1, 40, 0)
    msg = store.load_msg(40)
    assert (msg.subject, msg.data) == (b"secret.subject", b"TOPSECRETPAYLOAD 39")
    assert store.load_msg(6) is None and store.load_msg(7).data == b"TOPSECRETPAYLOAD 6"
    assert store.store_msg(b"secret.subject", b"", b"TOPSECRETPAYLOAD 40", 41) == 41  # appended after reopening
    store.stop()
    # A torn tail (the last message, half written) is cut off as in a plain store.
    last = sorted(glob.glob(str(tmp_path / "msgs" / "*.seg")), key=lambda p: int(os.path.basename(p)[:-4]))[-1]
    os.truncate(last, os.path.getsize(last) - 3)
    store = FileStore(str(tmp_path), cfg, segment_size=512, cipher=again)
    assert (store.msgs, store.last_seq, store.lost) == (38, 40, 1)
    assert store.load_msg(40).data == b"TOPSECRETPAYLOAD 39"
    # The cut-off bytes' keystream is not used again: writing goes on in a new segment.
    assert store.active == int(os.path.basename(last)[:-4]) + 1
    assert store.store_msg(b"secret.subject", b"", b"after the cut", 42) == 41
    store.stop()
    store = FileStore(str(tmp_path), cfg, segment_size=512, cipher=again)
    assert (store.msgs, store.last_seq, store.load_msg(41).data) == (39, 41, b"after the cut")
    store.stop()


class EncryptedStoreMachine(StoreMachine):
    """test_jetstream_store's state machine (a memory store, a file store reopened at random
    and a model, side by side) with an encrypted file store, alternating the ciphers."""

    @initialize(max_msgs=st.sampled_from([0, 5, 12]), per=st.sampled_from([0, 2]),
                discard=st.sampled_from(["old", "new"]), cipher=st.sampled_from([CHACHA, AES]))
    def setup(self, max_msgs, per, discard, cipher):
        self.cfg = config(max_msgs=max_msgs, max_msgs_per_subject=per, discard=discard)
        self.model = Model(self.cfg)
        self.mem = MemoryStore(self.cfg)
        self.key_file, stream_cipher = ServerKey(cipher, "machine").key_file_bytes()
        self.cipher = cipher
        self.file = FileStore(self.dir, self.cfg, segment_size=200, cipher=stream_cipher)
        self.ts = 0

    @rule()
    def reopen(self):
        self.file.stop()
        stream_cipher = ServerKey(self.cipher, "machine").open_key_file(self.key_file, "stream 'S'")
        self.file = FileStore(self.dir, self.cfg, segment_size=200, cipher=stream_cipher)


TestEncryptedStoreMachine = EncryptedStoreMachine.TestCase
TestEncryptedStoreMachine.settings = settings(max_examples=30, stateful_step_count=30, deadline=None,
                                              suppress_health_check=[HealthCheck.too_slow])


def test_wrong_key_does_not_open_a_key_file():
    key_file, _ = ServerKey(AES, "right").key_file_bytes()
    with pytest.raises(EncryptionKeyError, match="stream 'S': can not decrypt .* wrong key"):
        ServerKey(AES, "wrong").open_key_file(key_file, "stream 'S'")
    # The cipher a stream was created with is in its key file: a cipher change keeps it readable.
    assert ServerKey(CHACHA, "right").open_key_file(key_file, "stream 'S'").cipher == AES


# -- the configuration ----------------------------------------------------------------------------


def test_config_keys(tmp_path):
    path = tmp_path / "js.conf"
    path.write_text('jetstream { store_dir: "%s", cipher: AES, key: "s3cr3t", domain: hub }\n' % tmp_path)
    options = options_from_file(str(path))
    assert (options.jetstream_cipher, options.jetstream_key, options.jetstream_domain) == (AES, "s3cr3t", "hub")
    assert "jetstream" not in options.extra  # acted on, not "accepted and ignored"
    path.write_text("jetstream { ek: k, cipher: chachapoly }\n")
    options = options_from_file(str(path))
    assert (options.jetstream_cipher, options.jetstream_key) == (CHACHA, "k")
    path.write_text("jetstream { cipher: foo, key: x }\n")
    with pytest.raises(ConfigFileError, match=r'js.conf:1:12: Unknown cipher type: "foo"'):
        options_from_file(str(path))
    assert cipher_name("ChaCha") == CHACHA


# -- end to end ------------------------------------------------------------------------------------


async def _fill(url: str) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="VAULT", subjects=["secret.>"])
        for i in range(5):
            await js.publish("secret.subject", b"TOPSECRETPAYLOAD %d" % i, headers={"Hdr-Secret": "HEADERVALUE"})
        await js.delete_msg("VAULT", 2)
        await nc.jsm().update_stream(name="VAULT", subjects=["secret.>"], max_msgs=100)
    finally:
        await nc.close()


async def _read(url: str) -> tuple:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        info = await js.stream_info("VAULT")
        msg = await js.get_msg("VAULT", 5)
        return (info.state.messages, info.state.last_seq, info.config.max_msgs, msg.subject, msg.data,
                msg.headers)
    finally:
        await nc.close()


@pytest.mark.parametrize("cipher", ["", "aes"])
def test_encrypted_server_restart_and_wrong_key(tmp_path, cipher, caplog):
    caplog.set_level(logging.INFO, logger="natserver")
    store = str(tmp_path / "store")
    options = dict(jetstream=True, store_dir=store, jetstream_key="right key", jetstream_cipher=cipher)
    with NatsServer(**options) as server:
        run(_fill(server.url))
    label = "AES-GCM" if cipher == "aes" else "ChaCha20-Poly1305"
    assert f"  Encryption:      {label}" in [r.getMessage() for r in caplog.records]
    raw = disk_bytes(store)
    assert not any(s in raw for s in SECRETS) and b"VAULT" not in raw.replace(b"/VAULT", b"")
    with NatsServer(**options) as server:  # the right key: everything is back
        assert run(_read(server.url)) == (4, 5, 100, "secret.subject", b"TOPSECRETPAYLOAD 4",
                                          {"Hdr-Secret": "HEADERVALUE"})
    for changes, message in (
        ({"jetstream_key": "wrong key"}, "stream 'VAULT': can not decrypt the stream's key with the configured "
                                         f"jetstream key ({label}): wrong key"),
        ({"jetstream_key": ""}, "stream 'VAULT' is encrypted but no jetstream key is configured"),
    ):
        with pytest.raises(BaseException) as info:
            NatsServer(**{**options, **changes}).start()
        assert message in _flatten(info.value)
    with NatsServer(**options) as server:  # nothing was harmed by the refused starts
        assert run(_read(server.url))[:2] == (4, 5)


def test_a_plain_store_under_a_key_is_refused(tmp_path):
    with NatsServer(jetstream=True, store_dir=str(tmp_path)) as server:
        run(_fill(server.url))
    with pytest.raises(BaseException) as info:
        NatsServer(jetstream=True, store_dir=str(tmp_path), jetstream_key="k").start()
    assert "stream 'VAULT' is stored unencrypted but jetstream encryption is configured" in _flatten(info.value)


try:
    BaseExceptionGroup  # noqa: B018 (3.11+)
except NameError:  # Python 3.10: trio's backport
    from exceptiongroup import BaseExceptionGroup


def _flatten(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return " | ".join(_flatten(e) for e in exc.exceptions)
    return str(exc)


def _natserver_cli(conf, *args, **kwargs) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.Popen([sys.executable, "-m", "natserver", "-c", str(conf), *args], env=env,
                            stderr=subprocess.PIPE, **kwargs)


def test_cli_wrong_key_is_one_line_and_exit_1(tmp_path):
    conf = tmp_path / "js.conf"
    conf.write_text('listen: 127.0.0.1:-1\njetstream { store_dir: "%s", key: "right" }\n' % tmp_path)
    with NatsServer(options=Options(host="127.0.0.1", port=-1, jetstream=True, store_dir=str(tmp_path),
                                    jetstream_key="right")) as server:
        run(_fill(server.url))
    conf.write_text('listen: 127.0.0.1:-1\njetstream { store_dir: "%s", key: "wrong" }\n' % tmp_path)
    proc = _natserver_cli(conf)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 1
    lines = err.decode().splitlines()
    assert "  Encryption:      ChaCha20-Poly1305" in "\n".join(lines)
    assert lines[-1] == ("natserver: stream 'VAULT': can not decrypt the stream's key with the configured "
                         "jetstream key (ChaCha20-Poly1305): wrong key")
    assert "Traceback" not in err.decode()


# -- domain ---------------------------------------------------------------------------------------


def test_nats_py_with_a_domain(tmp_path):
    async def main(url):
        nc = await nats.connect(url)
        try:
            js = nc.jetstream(domain="hub")
            await js.add_stream(name="ORDERS", subjects=["orders.*"])
            ack = await js.publish("orders.new", b"one")
            assert (ack.stream, ack.seq, ack.domain) == ("ORDERS", 1, "hub")
            assert (await js.stream_info("ORDERS")).state.messages == 1
            assert (await js.account_info()).domain == "hub"
            assert (await nc.jetstream().account_info()).domain == "hub"  # $JS.API too
            other = nc.jetstream(domain="elsewhere", timeout=0.5)
            with pytest.raises(nats.js.errors.ServiceUnavailableError):
                await other.account_info()
            assert nc._server_info["domain"] == "hub"
        finally:
            await nc.close()

    with NatsServer(jetstream=True, jetstream_domain="hub") as server:
        run(main(server.url))


@pytest.mark.parametrize("domain, message", [
    ("a.b", "invalid domain name: may not contain ., * or >"),
    ("a*", "invalid domain name: may not contain ., * or >"),
    ("a b", 'invalid domain name: derived "$JS.a b.API.>" is not a valid subject'),
])
def test_invalid_domains_are_refused_as_by_nats_server(domain, message):
    with pytest.raises(BaseException) as info:
        NatsServer(jetstream=True, jetstream_domain=domain).start()
    assert _flatten(info.value) == message


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _raw_domain_session(command: list, conf_text: str, conf_path, port: int, http_port: int) -> dict:
    conf_path.write_text(conf_text)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.Popen(command + ["-c", str(conf_path)], env=env, stderr=subprocess.PIPE)
    log_lines: list[str] = []
    try:
        for raw in proc.stderr:
            log_lines.append(raw.decode())
            if "Server is ready" in log_lines[-1]:
                break
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            info = json.loads(sock.recv(65536).split(b"\r\n")[0][5:])
            body = b'{"name":"S","subjects":["x"]}'
            reader = _MsgReader(sock)
            sock.sendall(b'CONNECT {"headers":true,"verbose":false}\r\nSUB _r 1\r\n'
                         b"PUB $JS.hub.API.STREAM.CREATE.S _r %d\r\n%s\r\n" % (len(body), body))
            reader.next_body()
            sock.sendall(b"PUB x _r 2\r\nhi\r\n")
            ack = reader.next_body()
            sock.sendall(b"PUB $JS.hub.API.INFO _r 0\r\n\r\n")
            account = reader.next_body()
        varz = json.load(urllib.request.urlopen(f"http://127.0.0.1:{http_port}/varz", timeout=5))
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stderr.close()
    return {"info_keys": list(info), "info_domain": info.get("domain"), "ack": ack,
            "account": json.loads(account), "varz_domain": varz["jetstream"]["config"]["domain"],
            "log": [line.split("] ", 2)[-1].rstrip() for line in log_lines]}


class _MsgReader:
    """The bodies of MSGs, in order, from a raw connection (PINGs answered, PONGs skipped)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def next_body(self) -> bytes:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            while b"\r\n" in self.buf:
                line, rest = self.buf.split(b"\r\n", 1)
                if line.startswith(b"MSG "):
                    size = int(line.split()[-1])
                    if len(rest) < size + 2:
                        break
                    self.buf = rest[size + 2 :]
                    return rest[:size]
                if line == b"PING":
                    self.sock.sendall(b"PONG\r\n")
                self.buf = rest
            self.buf += self.sock.recv(65536)
        raise TimeoutError("no MSG")


def _conf(tmp_path, name: str) -> tuple[str, int, int]:
    port, http_port = _free_port(), _free_port()
    return ('listen: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\njetstream { store_dir: "%s", domain: hub }\n'
            % (port, http_port, tmp_path / name), port, http_port)


def test_domain_raw_answers(tmp_path):
    text, port, http_port = _conf(tmp_path, "ours")
    ours = _raw_domain_session([sys.executable, "-m", "natserver"], text, tmp_path / "ours.conf", port, http_port)
    # server.go Info (2.10+): the domain after client_ip, then the server's xkey last.
    assert [k for k in ours["info_keys"] if k != "api_lvl"][-4:] == ["client_id", "client_ip", "domain", "xkey"]
    assert ours["info_domain"] == "hub"
    assert ours["ack"] == b'{"stream":"S","domain":"hub","seq":1}'  # nats-server 2.15.1's bytes
    assert ours["account"]["domain"] == "hub" and list(ours["account"])[-2:] == ["domain", "api"]
    assert ours["varz_domain"] == "hub"
    assert "  Domain:          hub" in ours["log"]


@pytest.mark.needs_nats_server
def test_domain_raw_answers_match_nats_server(tmp_path):
    if NATS_SERVER is None:
        pytest.skip("nats-server not installed")
    text, port, http_port = _conf(tmp_path, "ref")
    ref = _raw_domain_session([NATS_SERVER], text, tmp_path / "ref.conf", port, http_port)
    text, port, http_port = _conf(tmp_path, "ours")
    ours = _raw_domain_session([sys.executable, "-m", "natserver"], text, tmp_path / "ours.conf", port, http_port)
    for key in ("info_domain", "ack", "varz_domain"):
        assert ours[key] == ref[key], key
    assert [k for k in ours["info_keys"] if k != "git_commit"][-5:] == [k for k in ref["info_keys"] if k != "git_commit"][-5:]
    ref["account"].pop("storage"), ours["account"].pop("storage")  # natserver counts its own format
    ref["account"]["api"]["level"] = JS_API_LEVEL  # (the level each claims: 2.15.1 says 5)
    assert ours["account"] == ref["account"]
    assert list(ours["account"]) == list(ref["account"])
    assert "  Domain:          hub" in ref["log"] and "  Domain:          hub" in ours["log"]


def _startup_log(command: list, conf_path) -> list[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.Popen(command + ["-c", str(conf_path)], env=env, stderr=subprocess.PIPE)
    lines: list[str] = []
    try:
        for raw in proc.stderr:
            lines.append(raw.decode().split("] ", 2)[-1].rstrip())
            if "Server is ready" in lines[-1]:
                break
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stderr.close()
    return lines


@pytest.mark.needs_nats_server
@pytest.mark.parametrize("cipher_line", ["", "cipher: aes", "cipher: ChaChaPoly"])
def test_encryption_log_line_matches_nats_server(tmp_path, cipher_line):
    if NATS_SERVER is None:
        pytest.skip("nats-server not installed")
    found = []
    for name, command in (("ref", [NATS_SERVER]), ("ours", [sys.executable, "-m", "natserver"])):
        conf = tmp_path / f"{name}.conf"
        conf.write_text('listen: 127.0.0.1:%d\njetstream { store_dir: "%s", key: "k", %s }\n'
                        % (_free_port(), tmp_path / name, cipher_line))
        found.append([line for line in _startup_log(command, conf) if "Encryption:" in line])
    assert found[0] == found[1] and len(found[0]) == 1
