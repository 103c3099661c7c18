"""JetStream account limits from account JWTs (operator mode, issue #13) and from
``accounts {}``: an account JWT whose limits have ``mem_storage`` or ``disk_storage`` (or a
``tiered_limits`` tier) has JetStream, with those limits (streams, consumer, max_bytes_required,
disk/mem_max_stream_bytes, max_ack_pending) enforced with nats-server 2.15.1's errors; an
account without them is told 10039. Each scenario runs against natserver and, when installed,
nats-server with the same configuration; both must answer alike.
"""

from __future__ import annotations

import asyncio
import json
import sys

import nats
import pytest

from natserver.auth import nkeys as _nkeys
from natserver.auth.jwt import OperatorTree, creds, jetstream_limits
from tests import reference
from tests.auth import test_auth_helpers as helpers

HAVE_NATS_SERVER = reference.HAVE_NATS_SERVER


def running(kind: str, config: str, tmp_path):
    """test_auth_helpers.running with the reference, nats-server 2.15.1, as "nats-server"."""
    return helpers.running(kind, config, tmp_path, binary=reference.NATS_SERVER or "nats-server")

TIMEOUT = 20  # seconds, for each scenario
SERVERS = ["natserver", pytest.param("nats-server", marks=[
    pytest.mark.skipif(not HAVE_NATS_SERVER, reason="nats-server is not installed"), pytest.mark.needs_nats_server])]
MB = 1024 * 1024
JS_LIMITS = {"mem_storage": MB, "disk_storage": 10 * MB, "streams": 4, "consumer": 1,
             "max_bytes_required": True, "disk_max_stream_bytes": 5 * MB}
UNLIMITED = {"subs": -1, "conn": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": True,
             "data": -1, "leaf": -1}


@pytest.fixture(autouse=True)
def nkeys_for_nats_py(monkeypatch):
    monkeypatch.setitem(sys.modules, "nkeys", _nkeys)  # nats-py signs the nonce with the nkeys package


def operator_setup(tmp_path, js_limits: dict) -> tuple[str, dict]:
    """A configuration with accounts J (``js_limits``), N (none) and a system account, and
    a creds file per user account."""
    tree = OperatorTree()
    tree.account("J", limits={**UNLIMITED, **js_limits})
    tree.account("N")
    system = tree.account("SYS")
    files = {}
    for name in ("J", "N"):
        token, key = tree.user(name)
        path = tmp_path / f"{name}.creds"
        path.write_text(creds(token, key.seed))
        files[name] = str(path)
    config = tree.config() + f"system_account: {system.public_key.decode()}\n"
    return config + f'jetstream {{ store_dir: "{tmp_path / "store"}" }}\n', files


async def _request(nc, subject: str, body=None):
    """The error, or what matters of a success (a stream's or consumer's name, account info)."""
    data = json.dumps(body).encode() if body is not None else b""
    got = json.loads((await nc.request(subject, data, timeout=5)).data)
    if "error" in got:
        return got["error"]
    if "stream_name" in got:
        return "consumer " + got["name"]
    if "config" in got:
        return "stream " + got["config"]["name"]
    got.pop("api", None)
    got.pop("type", None)
    return got


def account_info(streams: int, consumers: int, reserved_memory: int = 0, reserved_storage: int = 0) -> dict:
    return {"memory": 0, "storage": 0, "reserved_memory": reserved_memory, "reserved_storage": reserved_storage,
            "streams": streams, "consumers": consumers, "limits": {
        "max_memory": MB, "max_storage": 10 * MB, "max_streams": 4, "max_consumers": 1, "max_ack_pending": -1,
        "memory_max_stream_bytes": -1, "storage_max_stream_bytes": 5 * MB, "max_bytes_required": True}}


NOT_ENABLED = {"code": 503, "err_code": 10039, "description": "JetStream not enabled for account"}
BYTES_REQUIRED = {"code": 400, "err_code": 10113, "description": "account requires a stream config to have max bytes set"}
STREAM_BYTES = {"code": 400, "err_code": 10122, "description": "stream max bytes exceeds account limit max stream bytes"}
# (request, body, answer): nats-server 2.15.1's, recorded.
SCENARIO = [
    ("J", "$JS.API.INFO", None, account_info(0, 0)),
    ("N", "$JS.API.INFO", None, NOT_ENABLED),
    ("N", "$JS.API.STREAM.CREATE.X", {"name": "X"}, NOT_ENABLED),
    ("J", "$JS.API.STREAM.CREATE.A", {"name": "A"}, BYTES_REQUIRED),
    ("J", "$JS.API.STREAM.CREATE.A", {"name": "A", "max_bytes": 6000000}, STREAM_BYTES),
    ("J", "$JS.API.STREAM.CREATE.A", {"name": "A", "max_bytes": 4000000}, "stream A"),
    ("J", "$JS.API.STREAM.UPDATE.A", {"name": "A", "max_bytes": 6000000}, STREAM_BYTES),
    ("J", "$JS.API.STREAM.UPDATE.A", {"name": "A", "max_bytes": -1}, BYTES_REQUIRED),
    ("J", "$JS.API.STREAM.CREATE.B", {"name": "B", "max_bytes": 4000000}, "stream B"),
    ("J", "$JS.API.STREAM.CREATE.M", {"name": "M", "storage": "memory", "max_bytes": 2000000},
     {"code": 500, "err_code": 10028, "description": "insufficient memory resources available"}),
    ("J", "$JS.API.STREAM.CREATE.M", {"name": "M", "storage": "memory", "max_bytes": 1000000}, "stream M"),
    # 4 + 4 + 3 MB of reservations over the 10 MB of disk_storage.
    ("J", "$JS.API.STREAM.CREATE.C", {"name": "C", "max_bytes": 3000000},
     {"code": 500, "err_code": 10047, "description": "insufficient storage resources available"}),
    ("J", "$JS.API.STREAM.CREATE.D", {"name": "D", "max_bytes": 1000}, "stream D"),
    ("J", "$JS.API.STREAM.CREATE.E", {"name": "E", "max_bytes": 1000},
     {"code": 400, "err_code": 10027, "description": "maximum number of streams reached"}),
    ("J", "$JS.API.CONSUMER.DURABLE.CREATE.A.d1", {"stream_name": "A", "config": {"durable_name": "d1"}}, "consumer d1"),
    ("J", "$JS.API.CONSUMER.DURABLE.CREATE.A.d2", {"stream_name": "A", "config": {"durable_name": "d2"}},
     {"code": 400, "err_code": 10026, "description": "maximum consumers limit reached"}),
    # The account's consumer limit is per stream.
    ("J", "$JS.API.CONSUMER.DURABLE.CREATE.B.d3", {"stream_name": "B", "config": {"durable_name": "d3"}}, "consumer d3"),
    ("J", "$JS.API.INFO", None, account_info(4, 2, 1000000, 8001000)),  # (the max_bytes reserved)
]


async def _play(port: int, files: dict, steps: list) -> list:
    conns = {name: await nats.connect(f"nats://127.0.0.1:{port}", user_credentials=path)
             for name, path in files.items()}
    try:
        return [await _request(conns[who], subject, body) for who, subject, body, _ in steps]
    finally:
        for nc in conns.values():
            await nc.close()


@pytest.mark.parametrize("kind", SERVERS)
def test_account_jwt_jetstream_limits_are_enforced(kind, tmp_path):
    config, files = operator_setup(tmp_path, JS_LIMITS)
    with running(kind, config, tmp_path) as port:
        got = asyncio.run(asyncio.wait_for(_play(port, files, SCENARIO), TIMEOUT))
    assert got == [answer for *_, answer in SCENARIO]
    if kind == "natserver":  # streams live under the account's public key, as nats-server's
        assert len(list((tmp_path / "store" / "jetstream").glob("A*/streams/A"))) == 1


MAX_ACK_PENDING = [
    # With tiered limits only, the tier is chosen by num_replicas, unset counting as 1 (2.10+).
    ("J", "$JS.API.STREAM.CREATE.S", {"name": "S"}, "stream S"),
    ("J", "$JS.API.STREAM.CREATE.S", {"name": "S", "num_replicas": 3},
     {"code": 400, "err_code": 10120, "description": "no JetStream default or applicable tiered limit present"}),
    # Unset: the account's limit, when lower than the default 1000.
    ("J", "$JS.API.CONSUMER.DURABLE.CREATE.S.d1", {"stream_name": "S", "config": {"durable_name": "d1", "ack_policy": "explicit"}}, "consumer d1"),
    ("J", "$JS.API.CONSUMER.DURABLE.CREATE.S.d2",
     {"stream_name": "S", "config": {"durable_name": "d2", "ack_policy": "explicit", "max_ack_pending": 20}},
     {"code": 400, "err_code": 10121, "description": "consumer max ack pending exceeds system limit of 10"}),
]


async def _max_ack_pending(port: int, files: dict) -> tuple:
    got = await _play(port, files, MAX_ACK_PENDING)
    async with await nats.connect(f"nats://127.0.0.1:{port}", user_credentials=files["J"]) as nc:
        info = json.loads((await nc.request("$JS.API.CONSUMER.INFO.S.d1", b"", timeout=5)).data)
        account = json.loads((await nc.request("$JS.API.INFO", b"", timeout=5)).data)
    return got, info["config"]["max_ack_pending"], {k: account[k] for k in ("limits", "tiers")}


@pytest.mark.parametrize("kind", SERVERS)
def test_tiered_limits_and_max_ack_pending(kind, tmp_path):
    # Only tiered limits: the R1 tier is a standalone server's.
    tiered = {"mem_storage": 0, "disk_storage": 0,
              "tiered_limits": {"R1": {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1,
                                       "max_ack_pending": 10}}}
    config, files = operator_setup(tmp_path, tiered)
    with running(kind, config, tmp_path) as port:
        got, default, limits = asyncio.run(asyncio.wait_for(_max_ack_pending(port, files), TIMEOUT))
    assert got == [answer for *_, answer in MAX_ACK_PENDING]
    assert default == 10
    # Account info: Go's zero values for the account-wide limits, the R1 tier under "tiers".
    assert limits == {
        "limits": {"max_memory": 0, "max_storage": 0, "max_streams": 0, "max_consumers": 0, "max_ack_pending": 0,
                   "memory_max_stream_bytes": 0, "storage_max_stream_bytes": 0, "max_bytes_required": False},
        "tiers": {"R1": {"memory": 0, "storage": 0, "reserved_memory": 0, "reserved_storage": 0, "streams": 1,
                         "consumers": 1, "limits": {
            "max_memory": -1, "max_storage": -1, "max_streams": -1, "max_consumers": -1, "max_ack_pending": 10,
            "memory_max_stream_bytes": -1, "storage_max_stream_bytes": -1, "max_bytes_required": False}}},
    }


ACCOUNTS = """
jetstream { store_dir: "%s" }
accounts {
  J { users [{user: j, password: j}],
      jetstream { max_mem: 1MB, max_file: 10MB, max_streams: 4, max_consumers: 1,
                  max_bytes_required: true, store_max_stream_bytes: 5MB } }
  N { users [{user: n, password: n}] }
}
"""


async def _play_users(port: int, steps: list) -> list:
    conns = {name: await nats.connect(f"nats://127.0.0.1:{port}", user=name.lower(), password=name.lower())
             for name in ("J", "N")}
    try:
        return [await _request(conns[who], subject, body) for who, subject, body, _ in steps]
    finally:
        for nc in conns.values():
            await nc.close()


@pytest.mark.parametrize("kind", SERVERS)
def test_the_same_limits_in_the_accounts_block(kind, tmp_path):
    with running(kind, ACCOUNTS % (tmp_path / "store"), tmp_path) as port:
        got = asyncio.run(asyncio.wait_for(_play_users(port, SCENARIO), TIMEOUT))
    assert got == [answer for *_, answer in SCENARIO]


def test_which_jwt_limits_enable_jetstream():
    assert jetstream_limits("A", {"conn": -1}) is None
    assert jetstream_limits("A", {"mem_storage": 0, "disk_storage": 0, "streams": 5}) is None
    assert jetstream_limits("A", {"disk_storage": -1, "streams": 0, "mem_max_stream_bytes": 0}) == {
        "max_memory": 0, "max_storage": -1, "max_streams": 0, "max_consumers": 0, "max_ack_pending": -1,
        "memory_max_stream_bytes": -1, "storage_max_stream_bytes": -1, "max_bytes_required": False}
    assert jetstream_limits("A", {"tiered_limits": {"R3": {"disk_storage": 5}}})["max_storage"] == 0


async def _streams_and_limits(port: int, files: dict) -> tuple:
    async with await nats.connect(f"nats://127.0.0.1:{port}", user_credentials=files["J"]) as nc:
        names = json.loads((await nc.request("$JS.API.STREAM.NAMES", b"", timeout=5)).data)["streams"]
        info = json.loads((await nc.request("$JS.API.INFO", b"", timeout=5)).data)
    return names, info["streams"], info["limits"]["max_streams"]


@pytest.mark.parametrize("kind", SERVERS)
def test_a_jwt_accounts_streams_come_back_after_a_restart(kind, tmp_path):
    config, files = operator_setup(tmp_path, JS_LIMITS)
    with running(kind, config, tmp_path) as port:
        asyncio.run(asyncio.wait_for(_play(port, files, SCENARIO[:6]), TIMEOUT))
    with running(kind, config, tmp_path) as port:
        got = asyncio.run(asyncio.wait_for(_streams_and_limits(port, files), TIMEOUT))
    assert got == (["A"], 1, 4)
