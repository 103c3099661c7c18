"""What the monitoring endpoints report about JetStream, in nats-server 2.9.10's JSON: the
``jetstream`` object of /varz and the body of /jsz (``monitor.go`` Jsz, JSInfo, AccountDetail,
StreamDetail). The core's monitor calls these through the engine (``JetStream.jsz``,
``JetStream.varz``), so it never imports this package."""

from __future__ import annotations

import os

from .. import clock
from ..protocol.const import JS_API_LEVEL
from ..server.monitor import account_name_tag
from .stream import stored_bytes
from .util import DEFAULT_SYNC_INTERVAL, rfc3339nano

__all__ = ["default_max_memory", "default_max_store", "friendly_bytes", "varz_jetstream", "jsz", "health"]

# nats-server (jetstream.go): unset limits are 75 % of the machine's memory and 75 % of the
# store directory's free disk, the disk capped at JetStreamMaxStoreDefault (1 TB) first.
_DEFAULT_SHARE_PERCENT = 75
_MAX_STORE_CAP = 1 << 40
# An account's reservations when it has no limits of its own: Go's uint64(-1), as 2.9.10 prints.
_UNLIMITED_RESERVATION = (1 << 64) - 1
GLOBAL_ACCOUNT = "$G"


def default_max_memory() -> int:
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return total * _DEFAULT_SHARE_PERCENT // 100


def default_max_store(store_dir: str) -> int:
    fs = os.statvfs(store_dir)
    return min(fs.f_bavail * fs.f_frsize, _MAX_STORE_CAP) * _DEFAULT_SHARE_PERCENT // 100


def friendly_bytes(n: int) -> str:
    """nats-server's friendlyBytes: "512 B", "17.66 GB" (powers of 1024, two decimals)."""
    if n < 1024:
        return f"{n} B"
    exp = 0
    value = float(n)
    while value >= 1024 and exp < 6:
        value /= 1024
        exp += 1
    return f"{value:.2f} {'KMGTPE'[exp - 1]}B"


def _usage(js) -> tuple[int, int]:
    return stored_bytes(js.streams.values())


def _config(js) -> dict:
    """jetstream.go JetStreamConfig: with 2.10+'s sync settings ("always" keeps the default
    interval, as opts.go does; "never" has none). Not ``strict`` (2.11): natserver's API
    does not refuse unknown fields."""
    config = {"max_memory": js.max_memory, "max_storage": js.max_store, "store_dir": js.store_dir}
    interval = DEFAULT_SYNC_INTERVAL if js.sync_always else js.sync_interval
    if interval:
        config["sync_interval"] = round(interval * 1e9)
    if js.sync_always:
        config["sync_always"] = True
    if js.domain:
        config["domain"] = js.domain
    config["strict"] = True  # 2.11+'s strict JSON decoding of API requests (natserver's only way)
    return config


def _stats(js) -> dict:
    """Every engine's (JetStream account's) usage together."""
    memory = storage = total = errors = reserved_memory = reserved_storage = 0
    for engine in js.engines:
        m, s = _usage(engine)
        memory, storage = memory + m, storage + s
        total, errors = total + engine.api_total, errors + engine.api_errors
        for stream in engine.streams.values():  # (what max_bytes reserves, reservedStorage)
            if stream.cfg.max_bytes > 0:
                if stream.store.kind == "memory":
                    reserved_memory += stream.cfg.max_bytes
                else:
                    reserved_storage += stream.cfg.max_bytes
    return {
        "memory": memory, "storage": storage, "reserved_memory": reserved_memory,
        "reserved_storage": reserved_storage,
        "accounts": sum(1 for engine in js.engines if engine.account_name is not None), "ha_assets": 0,
        "api": {"level": JS_API_LEVEL, "total": total, "errors": errors},
    }


def varz_jetstream(js) -> dict:
    """/varz "jetstream": {config, stats} (an empty object when JetStream is off)."""
    return {"config": _config(js), "stats": _stats(js)}


def _consumer_count(stream) -> int:
    return int(stream.state_json().get("consumer_count", 0))


def _stream_detail(js, stream, *, config: bool, consumers: bool) -> dict:
    detail: dict = {"name": stream.name, "created": rfc3339nano(stream.created),
                    "cluster": js.cluster_block or {"leader": js.server.server_id}}
    if config:
        detail["config"] = stream.cfg.to_json()
    detail["state"] = stream.state_json()
    public = [c for c in stream.consumers.values() if not c.cfg.direct]  # (as nats-server's getPublicConsumers)
    if consumers and public:
        detail["consumer_detail"] = [_consumer_detail(c, config) for c in public]
    detail.update(stream.sourcing_json())  # "mirror" / "sources", after the consumers
    return detail


def _consumer_detail(consumer, config: bool) -> dict:
    """monitor.go's consumer detail: the consumer info, its configuration only with ``config``."""
    info = consumer.info_json(now=clock.now_ns(), dynamic=False)  # (no _nats.ver / _nats.level here)
    if not config:
        del info["config"]
    return info


def jsz(js, *, accounts: bool = False, streams: bool = False, consumers: bool = False, config: bool = False) -> dict:
    """The /jsz body after server_id and now, over every JetStream account. ``streams`` /
    ``consumers`` imply ``accounts``. (2.9.10 answers an unknown ``acc=`` with every account.)"""
    stats = _stats(js)
    engines = [engine for engine in js.engines if engine.account_name is not None]
    every_stream = [s for engine in engines for s in engine.streams.values()]
    out = {"config": _config(js), **{k: v for k, v in stats.items()}}
    out["streams"] = len(every_stream)
    out["consumers"] = sum(_consumer_count(s) for s in every_stream)
    out["messages"] = sum(s.store.msgs for s in every_stream)
    out["bytes"] = sum(s.store.bytes for s in every_stream)
    if js.cluster is not None:  # (jsz.go: the meta group's view, in a cluster)
        out["meta_cluster"] = js.cluster.meta_json()
    if accounts or streams or consumers:
        out["account_details"] = [_account_detail(engine, streams, consumers, config) for engine in engines]
    out["total"] = len(engines)  # monitor.go JSInfo.Total: the JetStream-enabled accounts
    return out


def _account_detail(engine, streams: bool, consumers: bool, config: bool) -> dict:
    memory, storage = _usage(engine)
    # monitor.go accountDetail: the name an account JWT gives it as name, the account as id
    known = engine.server.accounts.by_name.get(engine.account_name) if engine.server.accounts is not None else None
    name = account_name_tag(known) if known is not None else engine.account_name
    detail: dict = {
        "name": name, "id": engine.account_name, "memory": memory, "storage": storage,
        "reserved_memory": _UNLIMITED_RESERVATION, "reserved_storage": _UNLIMITED_RESERVATION,
        # (monitor.go accountDetail leaves the API level unset: 0, where the totals say the server's)
        "accounts": 0, "ha_assets": 0, "api": {"level": 0, "total": engine.api_total, "errors": engine.api_errors},
    }
    if (streams or consumers) and engine.streams:
        detail["stream_detail"] = [
            _stream_detail(engine, s, config=config, consumers=consumers)
            for s in sorted(engine.streams.values(), key=lambda s: s.name)
        ]
    return detail


def health(js, account: str, stream: str, consumer: str, details: bool, fail) -> int:
    """monitor.go healthz's single-server check, as nats-server makes it: the store directory's
    account directories (the one ``account`` names) and their streams (the one ``stream``
    names), each one a stream that was recovered and can write; then whether what was asked
    about was found. ``fail(kind, message, replace=..., account=, stream=, consumer=)`` records
    a problem; the HTTP status is returned (0: none set)."""
    try:
        names = sorted(os.listdir(js.store_dir))  # (Go's os.ReadDir sorts by name)
    except OSError:
        names = []
    # nats-server makes an account's directory with its first stream, natserver makes it when
    # the account's JetStream starts: one that never had a stream is not there for either.
    names = [name for name in names if _stream_names(js, name)]
    server = js.server
    engines = {engine.account_name or GLOBAL_ACCOUNT: engine for engine in js.engines}
    account_found = stream_found = consumer_found = False
    for name in names:
        if account:
            if name != account:
                continue
            account_found = True
        known = server.accounts.by_name.get(name) if server.accounts is not None else None
        if known is not None and known.expired:
            if not account:
                continue
            fail("ACCOUNT", f"JetStream account '{name}' is expired", account=name)
            return 0
        engine = engines.get(name)
        if known is None or engine is None:
            fail("ACCOUNT", f"JetStream account '{name}' could not be resolved", account=name)
            if not details:
                return 0
            continue
        for stream_name in _stream_names(js, name):
            if stream:
                if stream_name != stream:
                    continue
                stream_found = True
            found = engine.streams.get(stream_name)
            if found is None:
                fail("STREAM", f"JetStream stream '{name} > {stream_name}' could not be recovered",
                     account=name, stream=stream_name)
                if not details:
                    return 0
                continue
            werr = getattr(found.store, "werr", None)
            if werr is not None:
                fail("STREAM", f"JetStream stream '{name} > {stream_name}' write error: {werr}",
                     account=name, stream=stream_name)
                if not details:
                    return 0
                continue
            if stream_found:
                if consumer and consumer in found.consumers:
                    consumer_found = True
                break
        if account_found:
            break
    if account and not account_found:
        fail("ACCOUNT", f'JetStream account "{account}" not found', replace=True, account=account)
        return 404
    if stream and not stream_found:
        fail("STREAM", f'JetStream stream "{stream}" not found on account "{account}"', replace=True,
             account=account, stream=stream)
        return 404
    if consumer and not consumer_found:
        fail("CONSUMER", f'JetStream consumer "{consumer}" not found for stream "{stream}" on account "{account}"',
             replace=True, account=account, stream=stream, consumer=consumer)
        return 404
    return 0


def _stream_names(js, account: str) -> list:
    try:
        return sorted(os.listdir(os.path.join(js.store_dir, account, "streams")))
    except OSError:
        return []
