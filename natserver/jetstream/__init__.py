"""JetStream-shaped persisted streams: a subset of nats-server's JetStream (v2.9.10), enough
for nats-py's JetStream manager and publish calls to work unchanged.

``enable_jetstream(server)`` is started by ``Server.run`` (with ``-js``, as a subsystem that
natserver.app lists) before clients are accepted: it recovers the streams under the store
directory, subscribes to ``$JS.API.>`` in every account with JetStream, and runs until cancelled
(flushing writes, expiring by max_age, syncing), closing every file on exit.

Layout: ``store.py`` and ``msgindex.py`` (memory and file stores, the on-disk format and the
per-message index), ``crypto.py`` (encryption at rest), ``stream.py`` (stream configuration and
the publish path), ``sourcing.py`` and ``external.py`` (mirrors and sources, in this server or
through another account or domain), ``api.py`` (the stream JSON API) and ``consumer_api.py``
(the consumer API), ``consumer.py`` (consumer configuration and state, sans-IO),
``delivery.py`` (pull requests, acks, redelivery), ``consumer_store.py`` (durable consumers
on disk), ``monitor.py`` (/jsz, /varz), ``not_enabled.py`` (accounts without JetStream),
``unsupported.py`` (the 2.10+ settings natserver refuses rather than ignore), ``advisories.py``
($JS.EVENT.ADVISORY), ``gojson.py`` and ``gotime.py`` (Go's JSON decoding rules, its
RFC 3339 times), ``errors.py`` (the error
table), ``util.py`` (JSON, times, headers, subjects).

Storage lives in ``<store_dir>/jetstream/<account>/streams/<stream>/`` (nats-server's layout,
``$G`` without accounts; the files inside are natserver's own format). Without a store_dir:
``<tmp>/nats/jetstream``.

Sync policy (``jetstream { sync_interval: ... }`` in the config file, nats-server 2.10's
name, or ``JetStream.set_sync`` when embedding):

* a duration (default ``2m``, nats-server's): writes reach the operating system before their
  acks are sent (so ``kill -9`` loses no acknowledged message); files are fsynced every
  interval and on shutdown. A power loss can lose what the interval has not synced yet.
* ``always``: every write is fsynced before its ack is sent. Concurrent publishes share one
  fsync (group commit): the acks of everything written during one fsync wait for the next.
* ``0`` / ``never`` / ``none``: never fsync (the operating system writes back on its own).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from functools import partial

import trio

from .. import clock
from ..nrg import run_nrg
from ..protocol.gotext import parse_duration
from ..routing.accounts import GLOBAL_ACCOUNT, SYSTEM_ACCOUNT
from . import consumer_store, errors, monitor, not_enabled
from .api import Api
from .cluster import REPLY_PREFIX, JetStreamCluster
from .consumer_api import CLEANUP_LIMIT
from .delivery import Delivery
from .errors import ApiError
from .replication.placement import consumer_replicas
from .snapshot import Snapshots
from .sourcing import Sourcing
from .store import ADDED_BYTES, WRITE_FAILING, FileStore, MemoryStore, Store, flush_for_sync, sync_many, write_atomic
from .stream import PERSIST_ASYNC, Stream, StreamConfig, check_stream_config, check_update
from .util import DEFAULT_SYNC_INTERVAL, KEY_FILE, EncryptionKeyError, dumps, loads, subjects_collide
from .versioning import copy_metadata

__all__ = ["JetStream", "enable_jetstream"]

log = logging.getLogger("natserver")

META_FILE = "meta.json"
# After expiring a stream's messages failed (logged), try it again this much later (max_age,
# when the stream has one, otherwise this; natserver's own choice).
EXPIRE_RETRY_NS = 1_000_000_000
# over_limit re-sums the streams' bytes at least this often (natserver's own choice): what the
# bound between sums does not see, a stream's store replaced or loaded under the same count of
# streams, counts within this long. nats-server's own usage figures are updated as stores write.
USAGE_RESUM = 1.0
# The stores recovered from their index files' summaries read their arrays this long after the
# start (natserver's own choice), so that the start itself and its first requests, which the
# summaries answer, do not wait for them; a request that needs an index sooner reads it then.
INDEX_LOAD_DELAY = 0.1


def parse_sync(value) -> tuple[bool, float]:
    """(sync always, interval seconds; 0 = never) from a sync_interval setting."""
    if value is None:
        return False, DEFAULT_SYNC_INTERVAL
    if isinstance(value, str) and value.strip().lower() == "always":
        return True, 0.0
    if isinstance(value, str) and value.strip().lower() in ("never", "none", "off"):
        return False, 0.0
    seconds = parse_duration(value)
    if seconds < 0:
        raise ValueError(f"invalid sync_interval {value!r}")
    return False, float(seconds)


def _jetstream_extra(options) -> dict:
    for key, value in (options.extra or {}).items():
        if key.lower() == "jetstream" and isinstance(value, dict):
            return value
    return {}


def jetstream_accounts(server) -> list:
    """The accounts natserver serves JetStream to, as nats-server 2.9.10 decides: ``$G``
    without ``accounts {}``; with accounts, those with ``jetstream: enabled`` (or limits);
    in operator mode, those whose account JWT has JetStream limits (auth/jwt.py); none of
    them when none has it (``$G`` included)."""
    options = server.options
    if options.operator_mode:
        configs = server.accounts.configs.values() if server.accounts is not None else ()
        return [config.name for config in configs if config.jetstream]
    if not options.accounts:
        return [GLOBAL_ACCOUNT]
    return [config.name for config in options.accounts if config.jetstream]


def _check_consumer_limits(stream: Stream, old: StreamConfig, cfg: StreamConfig) -> None:
    """stream.go updateWithAdvisory: consumer_limits (2.10+) that change may not be below
    what the stream's consumers already have (10069, naming them)."""
    new_limits, old_limits = cfg.consumer_limits or {}, old.consumer_limits or {}
    threshold, ack_pending = new_limits.get("inactive_threshold", 0), new_limits.get("max_ack_pending", 0)
    if not ((threshold > 0 and threshold != old_limits.get("inactive_threshold", 0))
            or (ack_pending > 0 and ack_pending != old_limits.get("max_ack_pending", 0))):
        return
    violating = [c.name for c in stream.consumers.values()
                 if (threshold > 0 and c.cfg.inactive_threshold > threshold)
                 or (ack_pending > 0 and c.cfg.max_ack_pending > ack_pending)]
    if violating:
        raise errors.stream_update(f"change to limits violates consumers: {', '.join(violating)}")


class JetStream:
    """The engine: streams by name, the API, deferred acks and the background tasks."""

    def __init__(self, server, account_name: str | None = GLOBAL_ACCOUNT, *, engines: list | None = None) -> None:
        self.server = server
        options = server.options
        # Every engine of the server (one per JetStream account); the first one logs, reports
        # for all (monitor.py) and answers the accounts without JetStream.
        self.engines = engines if engines is not None else [self]
        base = options.store_dir or os.path.join(tempfile.gettempdir(), "nats")
        self.store_dir = os.path.join(base, "jetstream")
        # The account whose subject space the streams and the API live in (None: no account
        # has JetStream); every other account is told it is not enabled (not_enabled.py).
        self.account_name = account_name
        account = server.accounts.get(account_name) if account_name else None
        # The account's jetstream {} limits, or its JWT's (-1: none): max_memory, max_storage,
        # max_streams, max_consumers, max_ack_pending, memory_max_stream_bytes,
        # storage_max_stream_bytes, max_bytes_required (a bool).
        config = account.config if account is not None else None
        self.limits = dict(getattr(config, "jetstream_limits", None) or {})
        self.account = account if account is not None and account.name != GLOBAL_ACCOUNT else None
        self.client = self.account.internal if self.account is not None else server.internal_client
        self.streams_dir = os.path.join(self.store_dir, self.account_name or GLOBAL_ACCOUNT, "streams")
        self.max_memory = options.max_memory_store
        self.max_store = options.max_file_store
        # over_limit's last sum, by kind: (the ADDED_BYTES up to which the usage is within the
        # limit, that limit, when to sum again); dropped whenever self.streams changes
        self._usage_summed: dict[str, tuple[int, int, float]] = {}
        extra = _jetstream_extra(options)
        sync = None
        for key, value in extra.items():
            if key.lower() in ("sync_interval", "sync"):
                sync = value
        self.sync_always, self.sync_interval = parse_sync(sync)
        self.domain = check_domain(options.jetstream_domain)
        # Encryption at rest (crypto.py): nats-server encrypts only when a key is given; the
        # cipher alone does nothing (warned about in run()).
        self.key = None
        if options.jetstream_key:
            from .crypto import DEFAULT_CIPHER, ServerKey  # (only with a key: cryptography's ciphers)

            self.key = ServerKey(options.jetstream_cipher or DEFAULT_CIPHER, options.jetstream_key)
        self.segment_size = None  # None: the store's default (tests make it small)
        self.streams: dict[str, Stream] = {}
        # Atomic batches in flight (batch.py): the first engine's count is the server's.
        self.atomic_batches_inflight = [0]
        self.api = Api(self)
        self.delivery = Delivery(self)  # consumers' pull requests, acks and timers
        self.sourcing = Sourcing(self)  # mirrors and sources
        self.snapshots = Snapshots(self)  # backups going out, restores coming in
        # The meta group's side (cluster.py) when JetStream runs in a cluster, else None.
        self.cluster: JetStreamCluster | None = None
        self.api_total = 0
        self.api_errors = 0
        # Acks waiting for their messages to be written (and synced): (stream, reply, payload).
        self._acks: list = []
        self._dirty: set = set()
        self._wake = trio.Event()
        self._expiry_scope: trio.CancelScope | None = None
        self._fire_scope: trio.CancelScope | None = None
        self._sync_scope: trio.CancelScope | None = None
        self._api_sub = None
        self._domain_sub = None
        self._other_subs: list = []  # (account, subscription): not_enabled answers

    # -- subscriptions ------------------------------------------------------------------------

    def subscribe(self, subject: str, callback, queue: str | None = None):
        """An internal subscription in the JetStream account (in ``queue``'s group): a request
        whose only subscriber is one of these is delivered (the core sends no no-responders
        status for it)."""
        if self.account is not None:
            return self.account.subscribe(subject, callback, queue)
        return self.server.subscribe_internal(subject, callback, queue)

    def unsubscribe(self, sub) -> None:
        if self.account is not None:
            self.account.unsubscribe(sub)
        else:
            self.server.unsubscribe_internal(sub)

    # -- configuration ------------------------------------------------------------------------

    def set_sync(self, value) -> None:
        """Change the sync policy ("always", a duration, "never")."""
        self.sync_always, self.sync_interval = parse_sync(value)
        for stream in self.streams.values():
            if isinstance(stream.store, FileStore):
                stream.store.sync_always = self.sync_always and not stream.ack_at_once
        if self._sync_scope is not None:
            self._sync_scope.cancel()

    # -- monitoring (called by the core's monitor, which never imports this package) -------------

    def varz(self) -> dict:
        return monitor.varz_jetstream(self)

    def jsz(self, **flags) -> dict:
        return monitor.jsz(self, **flags)

    def health(self, account: str, stream: str, consumer: str, details: bool, fail) -> int:
        return monitor.health(self, account, stream, consumer, details, fail)

    # -- life cycle ---------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        os.makedirs(self.streams_dir, exist_ok=True)
        # Unset limits take nats-server's defaults, so that what /jsz reports is what applies.
        if self.max_memory < 0:
            self.max_memory = monitor.default_max_memory()
        if self.max_store < 0:
            self.max_store = monitor.default_max_store(self.store_dir)
        primary = self.engines[0] is self
        if not primary:
            log.info("  Serving JetStream to account %s", self.account_name)
        else:
            self._banner()
        try:
            os.makedirs(self.streams_dir, exist_ok=True)
            if self.account_name is not None:  # (None: nobody has JetStream, as in nats-server)
                self._recover()
                if self.cluster is not None:
                    self._cluster_subscribe()
                else:
                    self._api_sub = self.subscribe("$JS.API.>", self._handle_api)
                if self.domain:
                    self._domain_sub = self.subscribe(f"$JS.{self.domain}.API.>", self._domain_api)
            if primary:
                self._tell_other_accounts()
            self.delivery.start()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.delivery.run)
                nursery.start_soon(self.sourcing.run)
                nursery.start_soon(self.api.direct.run)
                nursery.start_soon(self.snapshots.run)
                nursery.start_soon(self._flusher)
                nursery.start_soon(self._expirer)
                nursery.start_soon(self._schedules)
                nursery.start_soon(self._syncer)
                nursery.start_soon(self._load_indexes)
                task_status.started(self)
                await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                self.close()

    def _banner(self) -> None:
        log.info("Starting JetStream")
        log.info("  Max Memory:      %s", monitor.friendly_bytes(self.max_memory))
        log.info("  Max Storage:     %s", monitor.friendly_bytes(self.max_store))
        log.info('  Store Directory: "%s"', self.store_dir)
        log.info("  Sync:            %s", "always" if self.sync_always else
                 (f"every {self.sync_interval:g}s" if self.sync_interval else "never"))
        if self.domain:
            log.info("  Domain:          %s", self.domain)
        if self.key is not None:
            log.info("  Encryption:      %s", self.key.label)
        elif self.server.options.jetstream_cipher:
            from .crypto import cipher_label

            log.warning("JetStream cipher %s is set without a key: streams are NOT encrypted",
                        cipher_label(self.server.options.jetstream_cipher))

    def _tell_other_accounts(self) -> None:
        """Every other account's ``$JS.API.>`` answers that JetStream is not enabled for it."""
        accounts = self.server.accounts
        if accounts is None or not (self.server.options.accounts or self.server.options.operator_mode):
            return
        operator = getattr(self.server, "operator", None)  # its JWT may name the system account
        system = (self.server.options.system_account or getattr(operator, "system_account", "")
                  or SYSTEM_ACCOUNT)
        served = {engine.account_name for engine in self.engines}
        for account in list(accounts.by_name.values()):
            if account.name in served or account.name == system:
                continue

            def respond(subject, reply, hdr, payload, account=account) -> None:
                body = not_enabled.answer(subject)
                if reply and body is not None:
                    account.publish(reply, None, None, body)

            if self.cluster is not None:
                respond.route_interest = False  # type: ignore[attr-defined]  # (each server answers its own clients)

            self._other_subs.append((account, account.subscribe("$JS.API.>", respond)))

    def _handle_api(self, subject: bytes, reply, hdr, payload: bytes) -> bool:
        """A request on ``$JS.API.>``: the API's, or in a cluster the cluster's (cluster.py)."""
        if self.cluster is not None:
            return self.cluster.from_account(self, subject, reply, hdr, payload)
        return self.api.handle(subject, reply, hdr, payload)

    def _cluster_subscribe(self) -> None:
        """In a cluster, as nats-server's accounts import the API from the system account:
        ``$JS.API.>`` here is local (its interest not told to routes) and goes on into the
        system account (cluster.py); pulls stay in the account, where the servers running the
        streams listen for them across the routes (direct gets: direct_subs.py)."""
        cluster = self.cluster
        assert cluster is not None

        def local(subject, reply, hdr, payload) -> bool:
            return self._handle_api(subject, reply, hdr, payload)

        local.route_interest = False  # type: ignore[attr-defined]
        self._api_sub = self.subscribe("$JS.API.>", local)
        self._other_subs.append((self.account, self.subscribe("$JS.API.CONSUMER.MSG.NEXT.>",
                                                              partial(cluster.in_account, self))))

    def _domain_api(self, subject: bytes, reply, hdr, payload: bytes) -> bool:
        """``$JS.<domain>.API.X`` is ``$JS.API.X`` (nats-server maps the one to the other)."""
        return self._handle_api(b"$JS.API." + subject.split(b".", 3)[3], reply, hdr, payload)

    def close(self) -> None:
        """Flush, sync and close every store (pending acks are dropped: clients retry)."""
        for account, sub in self._other_subs:
            if account is None:
                self.unsubscribe(sub)
            else:
                account.unsubscribe(sub)
        self._other_subs = []
        if self._domain_sub is not None:
            try:
                self.unsubscribe(self._domain_sub)
            except Exception:  # the server may be half torn down already
                pass
            self._domain_sub = None
        if self._api_sub is not None:
            try:
                self.unsubscribe(self._api_sub)
            except Exception:  # the server may be half torn down already
                pass
            self._api_sub = None
        self.snapshots.close()  # (a restore not finished leaves nothing behind)
        self.delivery.stop()
        self.delivery.save_durables(clock.now_ns(), force=True)
        for stream in list(self.streams.values()):
            stream.unsubscribe()
            stream.batches.clear()  # staged in memory only: an uncommitted batch is gone
            stream.store.stop()
        self.streams.clear()
        self._usage_summed.clear()
        self._acks = []
        self._dirty = set()

    def _recover(self) -> None:
        now = clock.now_ns()
        for name in sorted(os.listdir(self.streams_dir)):
            path = os.path.join(self.streams_dir, name)
            if name.startswith(".deleted-"):
                shutil.rmtree(path, ignore_errors=True)
                continue
            if not os.path.isdir(path):
                continue
            meta_path = os.path.join(path, META_FILE)
            try:
                cipher = self._stream_cipher(path, name)
                with open(meta_path, "rb") as f:
                    raw = f.read()
                meta = loads(cipher.open_meta(raw) if cipher is not None else raw)
                # No origin checks here: a mirror loaded before or after its origin is the same stream.
                cfg = check_stream_config(StreamConfig.from_json(meta["config"]), {})
                created = int(meta.get("created", 0))
            except FileNotFoundError:
                log.warning("JetStream: %s has no %s (not a natserver stream, or a crash during its "
                            "creation); skipped", path, META_FILE)
                continue
            except EncryptionKeyError as exc:
                log.error("JetStream: can not load the stream in %s: %s", path, exc)
                raise
            except (ValueError, KeyError, TypeError, ApiError) as exc:
                log.error("JetStream: can not load the stream in %s: %s", path, exc)
                continue
            if cfg.storage != "file":
                continue
            try:
                store = self._file_store(path, cfg, now, cipher)
            except OSError as exc:
                log.error("JetStream: can not open the stream in %s: %s", path, exc)
                continue
            store.update_config(cfg)
            if cfg.subject_delete_marker_ttl <= 0:
                store.expire(now)  # (with markers: by the expirer, once the stream is there to store them)
            store.start_at(cfg.first_seq)
            try:
                store.flush()
            except OSError:  # a full disk: logged by the store; its messages are still served
                pass
            stream = Stream(self, cfg, store, created)
            stream.replicated = self.cluster is not None and cfg.num_replicas > 1
            self.streams[cfg.name] = stream
            self._usage_summed.clear()  # (over_limit sums again)
            stream.subscribe()
            consumers = consumer_store.load_all(stream, path)
            if stream.replicated:
                # A replicated consumer's state is its group's (consumer_group_runner): a copy
                # from disk must not answer pulls or push before the meta group's assignment
                # (it would deliver again what was acked since it was saved). R1 ones run here,
                # an ephemeral that asked for no replicas among them (placement.consumer_replicas).
                stream_json = cfg.to_json()
                consumers = [c for c in consumers if consumer_replicas(c.cfg.to_json(), stream_json) == 1]
            stream.consumers.update((c.name, c) for c in consumers)
            lost = f" ({store.lost} corrupt records dropped)" if store.lost else ""
            log.info("  Restored %d messages for stream '%s > %s'%s", store.msgs, self.account_name, cfg.name, lost)
        for stream in self.streams.values():
            if stream.cfg.mirror is not None or stream.cfg.sources:
                self.sourcing.attach(stream, recovering=True)

    def _stream_cipher(self, path: str, name: str):
        """The stream's keys (None: a plain stream); EncryptionKeyError when the stream and
        the configuration do not fit (wrong key, no key, a plain stream under a key)."""
        key_path = os.path.join(path, KEY_FILE)
        where = f"stream '{name}'"
        if not os.path.exists(key_path):
            if self.key is not None and os.path.exists(os.path.join(path, META_FILE)):
                raise EncryptionKeyError(
                    f"{where} is stored unencrypted but jetstream encryption is configured: natserver does "
                    f"not convert stores (remove the key, or move the stream away)")
            return None
        if self.key is None:
            raise EncryptionKeyError(f"{where} is encrypted but no jetstream key is configured")
        with open(key_path, "rb") as f:
            cipher = self.key.open_key_file(f.read(), where)
        if cipher.cipher != self.key.cipher:
            from .crypto import cipher_label

            log.warning("JetStream: %s stays encrypted with %s (new streams use %s)", where,
                        cipher_label(cipher.cipher), self.key.label)
        return cipher

    def _meta_bytes(self, cipher, cfg: StreamConfig, created: int) -> bytes:
        meta = self._meta(cfg, created)
        return cipher.seal_meta(meta) if cipher is not None else meta

    def stream_path(self, stream: Stream) -> str:
        return os.path.join(self.streams_dir, stream.name)

    def _file_store(self, path: str, cfg: StreamConfig, now: int, cipher=None) -> FileStore:
        kwargs: dict[str, int] = {}
        if self.segment_size:
            kwargs["segment_size"] = self.segment_size
        # persist_mode async: never fsynced before an ack (stream.go: "sync always would also
        # be disabled if it was configured"); the sync interval still applies.
        sync_always = self.sync_always and cfg.persist_mode != PERSIST_ASYNC
        store = FileStore(path, cfg, sync_always=sync_always, dedup_window=cfg.duplicate_window,
                          now=now, cipher=cipher, **kwargs)
        store.notify = self._store_dirty
        return store

    # -- streams ------------------------------------------------------------------------------

    def check_reservation(self, storage: str, add: int, base: int, exclude: str | None) -> None:
        """nats-server's server-level check of the bytes streams reserve (max_bytes) against
        max_memory_store / max_file_store."""
        if storage == "memory":
            limit, error = self.max_memory, errors.memory_resources_exceeded
        elif storage in ("file", ""):
            if storage == "":
                return  # nats-server checks the raw request, where an unset storage matches neither
            limit, error = self.max_store, errors.storage_resources_exceeded
        else:
            return
        account_limit = self.limits.get("max_memory" if storage == "memory" else "max_storage", -1)
        if account_limit >= 0 and (limit < 0 or account_limit < limit):
            limit = account_limit  # the account's jetstream limit is the tighter one
        if limit < 0:
            return
        if add < 0:
            add = 1
        reserved = sum(s.cfg.max_bytes for s in self.streams.values()
                       if s.cfg.storage == storage and s.cfg.max_bytes > 0 and s.name != exclude)
        if reserved + base + add > limit:
            raise error()

    @property
    def origins_by_messages(self) -> bool:
        """Mirrors and sources reach their origins by messages in a cluster (sourcing.new_link)."""
        return self.cluster is not None

    def stream_alternates(self, name: str) -> list[dict]:
        """STREAM.INFO's ``alternates``: in a cluster the stream and its mirrors, when it has
        any (cluster.stream_alternates); none on a single server (2.15.1's too)."""
        if self.cluster is None:
            return []
        return self.cluster.stream_alternates(self.account_name or "", name, self.domain)

    @property
    def cluster_block(self) -> dict | None:
        """Stream and consumer infos' ``cluster`` in a JetStream cluster (its name, this server
        as the leader: an R1 asset's); None on a single server."""
        if self.cluster is None:
            return None
        return {"name": self.server.options.cluster_name, "leader": self.server.server_name}

    def add_stream(self, config: StreamConfig, created: int | None = None) -> Stream:
        """A new stream (``created``: its creation time, a cluster's assignment's)."""
        tier = self.limits.get("tier")
        if tier and tier != f"R{max(config.num_replicas, 1)}":
            # nats-server 2.10+ picks the tier by num_replicas, unset counting as 1 (2.9: "R0").
            raise errors.no_limits()
        cfg = check_stream_config(config, self.streams, self.limits)
        if cfg.num_replicas > 1 and self.cluster is None:
            raise errors.replicas_not_supported()
        existing = self.streams.get(cfg.name)
        if existing is not None:
            copy_metadata(cfg, existing.cfg)  # (the required level is the existing stream's)
            if existing.cfg == cfg:
                return existing
            raise errors.stream_name_exist()
        max_streams = self.limits.get("max_streams", -1)
        if max_streams > 0 and len(self.streams) >= max_streams:  # (0: no limit, as nats-server)
            raise errors.max_streams_reached()
        self.check_reservation(cfg.storage, cfg.max_bytes, 0, exclude=cfg.name)
        for stream in self.streams.values():
            for mine in cfg.subjects or ():
                for theirs in stream.cfg.subjects or ():
                    if subjects_collide(mine, theirs):
                        raise errors.stream_subject_overlap()
        created = clock.now_ns() if created is None else created
        try:
            if cfg.storage == "file":
                path = os.path.join(self.streams_dir, cfg.name)
                if os.path.exists(path):
                    if os.path.exists(os.path.join(path, "meta.inf")):
                        # nats-server's own stream directory: never ours to overwrite.
                        raise errors.stream_create("a nats-server stream of this name is in the store directory")
                    shutil.rmtree(path)  # leftovers of a stream that could not be loaded
                os.makedirs(path)
                cipher = None
                if self.key is not None:
                    key_file, cipher = self.key.key_file_bytes()
                    write_atomic(os.path.join(path, KEY_FILE), key_file)
                write_atomic(os.path.join(path, META_FILE), self._meta_bytes(cipher, cfg, created))
                store: Store = self._file_store(path, cfg, created, cipher)
            else:
                store = MemoryStore(cfg)
            store.start_at(cfg.first_seq)
        except (OSError, ValueError) as exc:  # ValueError: a name the file system refuses (NUL)
            log.warning("Stream create failed for '$G > %s': %s", cfg.name, exc)
            raise errors.stream_create("error creating store for stream") from None
        stream = Stream(self, cfg, store, created)
        stream.replicated = cfg.num_replicas > 1  # (in a cluster: its group's leader subscribes)
        self.streams[cfg.name] = stream
        self._usage_summed.clear()  # (over_limit sums again)
        stream.subscribe()
        self.sourcing.attach(stream)
        return stream

    @staticmethod
    def _meta(cfg: StreamConfig, created: int) -> bytes:
        return dumps({"config": cfg.to_json(), "created": created})

    def update_stream(self, stream: Stream, new: StreamConfig) -> None:
        old = stream.cfg
        cfg = check_update(old, new, self.streams, self.limits)
        _check_consumer_limits(stream, old, cfg)
        for other in self.streams.values():
            if other is stream:
                continue
            for mine in cfg.subjects or ():
                for theirs in other.cfg.subjects or ():
                    if subjects_collide(mine, theirs):
                        raise errors.stream_subject_overlap()
        if cfg.max_bytes != old.max_bytes:
            grow = max(cfg.max_bytes - old.max_bytes, 0)
            self.check_reservation(cfg.storage, grow, max(old.max_bytes, 0), exclude=stream.name)
        if isinstance(stream.store, FileStore):
            try:
                write_atomic(os.path.join(stream.store.path, META_FILE),
                             self._meta_bytes(stream.store.cipher, cfg, stream.created))
            except OSError as exc:
                raise errors.stream_update(str(exc)) from None
        stream.cfg = cfg
        if not cfg.allow_batched:
            stream.fast_batches.clear()  # (stream.go update: batches in flight are dropped)
        if cfg.subjects != old.subjects:
            stream.unsubscribe()
            stream.subscribe()
        stream.set_transforms()
        stream.set_markers()
        stream.set_scheduler()
        if cfg.sources != old.sources or cfg.mirror != old.mirror:
            self.sourcing.attach(stream)  # (a promoted mirror stops following its origin)
        stream.store.update_config(cfg)
        if not cfg.allow_atomic:
            stream.batches.clear()  # (stream.go update: deleteAtomicBatches)
        if cfg.max_age > 0 or cfg.allow_msg_ttl:
            nxt = stream.store.expire(clock.now_ns())
            if nxt is not None:
                self.schedule_expiry(nxt)
        if cfg.retention == "interest" and old.retention != "interest" and not stream.replicated:
            self._acked_away(stream)
        self.persist(stream)

    def _acked_away(self, stream: Stream) -> None:
        """A stream switched to interest retention (stream.go update: each consumer's
        checkStateForInterestStream): what every consumer is done with, up to the highest ack
        floor, goes (at most CLEANUP_LIMIT messages from the first: nats-server leaves a
        longer range to its periodic interest check). Without consumers nothing goes: the
        messages were stored while the stream kept them by its limits."""
        consumers = list(stream.consumers.values())
        store = stream.store
        if not consumers or not store.msgs:
            return
        first = store.first_seq
        last = min(store.last_seq, max(c.ack_floor_sseq for c in consumers), first + CLEANUP_LIMIT - 1)
        removed = False
        for seq in range(first, last + 1):
            msg = store.load_msg(seq)
            if msg is not None and all(c.is_done_with(seq, msg.subject) for c in consumers):
                removed = store.remove_msg(seq) or removed
        if removed:
            self._store_dirty(store)

    def delete_stream(self, stream: Stream) -> None:
        stream.unsubscribe()
        stream.batches.clear()
        self.streams.pop(stream.name, None)
        self._usage_summed.clear()
        self.sourcing.detach(stream)
        self._dirty.discard(stream.store)
        stream.store.delete()

    def persist(self, stream: Stream) -> None:
        """After an API change (purge, delete, update): write it out now, fsynced with sync
        always, so that the response never runs ahead of the disk."""
        store = stream.store
        if isinstance(store, FileStore):
            store.flush()
            if store.sync_always:
                store.sync_now()

    def over_limit(self, kind: str) -> bool:
        """nats-server's limitsExceeded: usage already above max_memory/max_file_store.

        The streams' bytes are summed only when the usage might be near the limit: the sum
        last taken plus everything any store has added since (store.ADDED_BYTES; removals only
        lower the usage) is an upper bound until a stream is added or removed (which drops the
        sum), re-summed at least every USAGE_RESUM seconds all the same."""
        limit = self.max_memory if kind == "memory" else self.max_store
        summed = self._usage_summed.get(kind)
        # (the last sum plus what the stores added since is within the limit while ADDED_BYTES
        # stays at most the sum's ceiling: limit - used + ADDED_BYTES then)
        if summed is not None and ADDED_BYTES[kind] <= summed[0] and summed[1] == limit \
                and clock.monotonic() < summed[2]:
            return False
        if limit < 0:
            return False
        added = ADDED_BYTES[kind]
        used = 0
        for stream in self.streams.values():  # (a loop: no generator frame per message)
            store = stream.store
            if store.kind == kind:
                used += store.bytes
        self._usage_summed[kind] = (limit - used + added, limit, clock.monotonic() + USAGE_RESUM)
        return used > limit

    def room(self, kind: str, nbytes: int) -> bool:
        """Whether ``nbytes`` more of ``kind`` keep the usage within the account's limit for
        sure (over_limit's bound), so that over_limit would say no before each message of a
        run that adds at most that (Stream.inbound_run); False: ask it message by message."""
        limit = self.max_memory if kind == "memory" else self.max_store
        if limit < 0:
            return True
        for _ in range(2):  # (no bound yet, or an old one: over_limit sums again, once)
            summed = self._usage_summed.get(kind)
            if summed is not None and ADDED_BYTES[kind] + nbytes <= summed[0] and summed[1] == limit \
                    and clock.monotonic() < summed[2]:
                return True
            if self.over_limit(kind):
                return False
        return False

    def ack_queue(self, stream: Stream) -> list | None:
        """The list respond would add ``stream``'s acks to now (a file stream's, sent by the
        flusher after the write; call acks_queued after adding), or None: answered at once,
        through respond."""
        if stream.ack_at_once and not self._acks:
            return None
        return self._acks

    def acks_queued(self) -> None:
        if self._acks and not self._wake.is_set():
            self._wake.set()

    # -- acks and writes ----------------------------------------------------------------------

    def send(self, subject: bytes, payload: bytes, headers: bytes | None = None, reply: bytes | None = None) -> None:
        """Publish from the server without flushing: called from a subscription callback,
        the publisher's read loop flushes once after its whole chunk (one write for many
        responses); other callers call ``server.flush_touched()`` after a batch."""
        if self.cluster is not None and subject.startswith(REPLY_PREFIX):
            # an answer to a request that came through the system account (cluster.py)
            self.cluster.system.publish(subject, reply, headers, payload)
        elif self.account is not None:
            self.account.publish(subject, reply, headers, payload)
        else:
            self.server.publish(subject, payload, reply=reply, headers=headers, flush=False)

    def respond(self, reply: bytes, payload: bytes, stream: Stream) -> None:
        """Send a publish response: at once for memory streams and persist_mode async, after
        the write (and fsync) for file streams; in order either way."""
        acks = self._acks
        if not stream.ack_at_once or acks:
            acks.append((reply, payload, None, stream))  # (deliver_replies: no headers)
            # (acks waiting: the flusher was woken by the first, and takes them all at once)
            if len(acks) == 1 and not self._wake.is_set():
                self._wake.set()
        elif self.cluster is None:  # (as the flusher sends them: see _flush_round)
            self.client.deliver_replies([(reply, payload, None, stream)], self.send)
        else:
            self.send(reply, payload)

    def _store_dirty(self, store) -> None:
        self._dirty.add(store)
        if not self._wake.is_set():
            self._wake.set()

    async def _flusher(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            try:
                await self._flush_round()
            except Exception:  # keep the server up; the publishers time out and retry
                log.exception("JetStream: flushing failed")

    async def _flush_round(self) -> None:
        dirty, self._dirty = self._dirty, set()
        acks, self._acks = self._acks, []
        failed: set = set()
        for store in dirty:
            if store.closed:
                continue
            try:
                store.flush()
            except OSError:  # logged by the store, once; it stays unwritable until a write works
                failed.add(store)
        if self.sync_always and dirty:
            synced = [store for store in dirty if getattr(store, "sync_always", False) and not store.closed and store not in failed]
            if synced:
                targets = [store.sync_targets() for store in synced]
                with trio.CancelScope(shield=True):
                    results = await trio.to_thread.run_sync(sync_many, targets)
                for store, ok in zip(synced, results):
                    if not ok:
                        store.sync_failed()
                        failed.add(store)
        # Not written: no ack (the publisher times out and retries). Looked at once a store,
        # when a store failed (this round or before).
        if failed or WRITE_FAILING:
            unwritten = [store for store in {stream.store for _, _, _, stream in acks}
                         if store in failed or store.werr is not None]
            if unwritten:
                acks = [ack for ack in acks if ack[3].store not in unwritten]
        send = self.send
        try:
            if self.cluster is None:
                # Most acks go to their publisher's inbox, its one subscriber: written there
                # directly (Client.deliver_replies), the others published.
                self.client.deliver_replies(acks, send)
            else:  # (a cluster's: its system account's replies)
                for reply, payload, _, _ in acks:
                    send(reply, payload)
        finally:
            self.server.flush_touched()

    async def flush_now(self) -> None:
        """Write (and with sync always, fsync) everything pending and send its acks."""
        await self._flush_round()

    def schedule_expiry(self, deadline_ns: int) -> None:
        scope = self._expiry_scope
        if scope is not None:
            at = trio.current_time() + max(0.0, (deadline_ns - clock.now_ns()) / 1e9)
            if at < scope.deadline:
                scope.deadline = at

    async def _expirer(self) -> None:
        """Expire by max_age and per-message TTLs, and abandon idle atomic batches: each
        stream's store says when it next has something to remove; a store that stopped at
        its batch limit (EXPIRE_BATCH) is come back to after the other tasks had a turn."""
        while True:
            now = clock.now_ns()
            deadline = None
            batches = False
            for stream in list(self.streams.values()):
                store = stream.store
                if stream.batches.atomic:  # atomic batches abandoned after BATCH_TIMEOUT_NS (batch.py)
                    batches = True
                    nxt = stream.batches.expire(now)
                    if nxt is not None and (deadline is None or nxt < deadline):
                        deadline = nxt
                if store.closed or not (stream.cfg.max_age > 0 or (stream.cfg.allow_msg_ttl and store.ttls.heap)):
                    continue
                try:
                    nxt = store.expire(now)
                except Exception:
                    log.exception("JetStream: expiring messages of '%s' failed", stream.name)
                    nxt = now + (stream.cfg.max_age or EXPIRE_RETRY_NS)
                if nxt is not None and (deadline is None or nxt < deadline):
                    deadline = nxt
            if batches:
                self.server.flush_touched()  # (the abandoned batches' advisories)
            if deadline is not None and deadline <= now:
                await trio.lowlevel.checkpoint()  # more to do: after everyone else's turn
                continue
            with trio.CancelScope() as scope:
                self._expiry_scope = scope
                if deadline is not None:
                    scope.deadline = trio.current_time() + max(0.0, (deadline - clock.now_ns()) / 1e9) + 0.001
                await trio.sleep_forever()
            self._expiry_scope = None

    def schedule_fire(self, deadline_ns: int) -> None:
        """A message schedule comes due at ``deadline_ns`` (schedule.py): wake the firing task
        then, if it sleeps longer."""
        scope = self._fire_scope
        if scope is not None:
            at = trio.current_time() + max(0.0, (deadline_ns - clock.now_ns()) / 1e9)
            if at < scope.deadline:
                scope.deadline = at

    async def _schedules(self) -> None:
        """Fire message schedules (schedule.py) when they come due, on the server's clock:
        each stream with schedules fires at most FIRE_BATCH per turn; with more due this
        comes back after the other tasks had a turn."""
        while True:
            now = clock.now_ns()
            deadline = None
            for stream in list(self.streams.values()):
                if stream.scheduler is None or not stream.scheduler.heap:
                    continue
                try:
                    nxt = stream.fire_schedules(now)
                except Exception:
                    log.exception("JetStream: firing the schedules of '%s' failed", stream.name)
                    nxt = now + EXPIRE_RETRY_NS
                if nxt is not None and (deadline is None or nxt < deadline):
                    deadline = nxt
            if deadline is not None and deadline <= now:
                await trio.lowlevel.checkpoint()  # more to do: after everyone else's turn
                continue
            with trio.CancelScope() as scope:
                self._fire_scope = scope
                if deadline is not None:
                    scope.deadline = trio.current_time() + max(0.0, (deadline - clock.now_ns()) / 1e9)
                await trio.sleep_forever()
            self._fire_scope = None

    async def _load_indexes(self) -> None:
        """The arrays of the stores recovered from their index files' summaries (served from
        the start: FileStore.load_step), one segment a step between the other work; a request
        that needs a store's index sooner reads the rest of it then."""
        if not any(isinstance(stream.store, FileStore) and stream.store.loading for stream in self.streams.values()):
            return
        await trio.sleep(INDEX_LOAD_DELAY)
        for stream in list(self.streams.values()):
            store = stream.store
            while isinstance(store, FileStore) and store.load_step():
                await trio.sleep(0)

    async def _syncer(self) -> None:
        while True:
            with trio.CancelScope() as scope:
                self._sync_scope = scope
                if self.sync_always or not self.sync_interval:
                    await trio.sleep_forever()
                await trio.sleep(self.sync_interval)
            self._sync_scope = None
            if self.sync_always or not self.sync_interval:
                continue
            stores = [s.store for s in list(self.streams.values()) if isinstance(s.store, FileStore)]
            targets = flush_for_sync(stores, "JetStream")
            if targets:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(sync_many, targets)


class DomainError(ValueError):
    fatal_startup = True  # the CLI prints it as one line (natserver: ...) and exits 1


def check_domain(domain: str) -> str:
    """nats-server's checks of jetstream.domain (validateJetStreamOptions), its messages."""
    if not domain:
        return ""
    if any(c in domain for c in ".*>"):
        raise DomainError("invalid domain name: may not contain ., * or >")
    if any(c in domain for c in " \t\r\n\f"):
        raise DomainError(f'invalid domain name: derived "$JS.{domain}.API.>" is not a valid subject')
    return domain


async def enable_jetstream(server, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Set JetStream up on ``server``: one engine per JetStream account (or one serving
    nobody, to answer 10039), ``task_status.started(first engine)``, run until cancelled. In a
    cluster (cluster.py), the meta group's node starts once the engines run."""
    engines: list = []
    for name in jetstream_accounts(server) or [None]:
        engines.append(JetStream(server, name, engines=engines))
    async with trio.open_nursery() as nursery:
        cluster = None
        if server.options.clustered:
            # (the RAFT logs follow the server's sync policy, as its streams do)
            nrg = await nursery.start(partial(run_nrg, server, sync_always=engines[0].sync_always,
                                              sync_interval=engines[0].sync_interval))
            cluster = JetStreamCluster(server, engines, nrg)
            for engine in engines:
                engine.cluster = cluster
            # server.go lameDuckMode: the RAFT groups' leaders move away first.
            server.lame_duck_hooks.append(nrg.transfer_leaders)
        for engine in engines:
            await nursery.start(engine.run)
        if cluster is not None:
            await nursery.start(cluster.run)
        task_status.started(engines[0])
