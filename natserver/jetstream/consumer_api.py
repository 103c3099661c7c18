"""The ``$JS.API.CONSUMER.*`` handlers: CREATE (ephemeral, named, with a filter token),
DURABLE.CREATE, INFO, DELETE, NAMES and LIST, answered with nats-server v2.9.10's JSON
and error codes, and PAUSE (2.11, as nats-server 2.15.1 answers it). Consumers live in
``stream.consumers`` (name -> Consumer).

Layer (README "Layers"): below ``api``, which routes requests here; what this module needs of
it is ``ApiRouter`` (its responses) and of the engine ``ConsumerHost``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from .. import clock
from . import advisories, consumer_store, errors, gotime, unsupported
from .advisories import AdvisoryHost
from .apijson import decode_request
from .consumer import (
    GROUP_NAME,
    Consumer,
    ConsumerConfig,
    check_config,
    check_pedantic,
    check_pedantic_limits,
    check_update,
    check_workqueue,
    check_workqueue_update,
    ephemeral_name,
    set_defaults,
)
from .consumer import (
    REQUEST_SHAPE as CONSUMER_REQUEST_SHAPE,
)
from .errors import ApiError
from .external import STREAM_IDENTITY, stream_identity
from .gojson import (
    INT64,
    GoDecodeError,
    check_known_fields,
    decode_int,
    decode_object,
    decode_pedantic,
    decode_str,
    decode_struct,
    go_decode_request,
    go_type_error,
    go_unmarshal,
)
from .util import dumps, gen_header, get_header, is_empty_request, is_json_object_or_array
from .versioning import copy_metadata, set_static_consumer_metadata

if TYPE_CHECKING:
    from .delivery import Delivery
    from .stream import Stream

_T = "io.nats.jetstream.api.v1."
NAMES_LIMIT = 1024  # JSApiNamesLimit
LIST_LIMIT = 256  # JSApiListLimit
# natserver's bound on the messages a consumer's deletion looks at (one thread serves every
# client; consumer.go cleanupNoInterestMessages's bailThresh is 100000, its periodic check then).
CLEANUP_LIMIT = 10_000
_HDR_DELETED = b"NATS/1.0 409 Consumer Deleted\r\n\r\n"
def _action(value):
    """consumer.go ConsumerAction (2.10+): "create" (fails on a different existing consumer),
    "update" (fails on a missing one), "" (either)."""
    if value not in ("create", "update", ""):
        raise GoDecodeError(f"unknown consumer action: {dumps(value).decode()}")
    return value


_CREATE_REQUEST = {"stream_name": decode_str, "config": decode_object, "action": _action}
_CREATE_GO_TYPE = "server.CreateConsumerRequest"  # (Go's name for it in its json errors)
_PAGE_REQUEST = {"offset": lambda v: decode_int(v, INT64)}
# jetstream_api.go JSApiConsumerPauseRequest; decoded strictly (unknown fields refused), as
# nats-server 2.15.1 decodes API requests.
_PAUSE_REQUEST = {"pause_until": gotime.decoder("JSApiConsumerPauseRequest.pause_until")}
_PAUSE_GO_TYPE = "server.JSApiConsumerPauseRequest"
_ZERO_NS = gotime.nanos(gotime.ZERO)


class ConsumerHost(AdvisoryHost, Protocol):
    """What the consumer API needs of the engine (``JetStream``)."""

    @property
    def streams(self) -> dict[str, Stream]: ...
    @property
    def cluster_block(self) -> dict | None: ...  # infos' "cluster" in a cluster (name, leader)
    @property
    def limits(self) -> dict: ...  # the account's JetStream limits
    @property
    def delivery(self) -> Delivery: ...
    def stream_path(self, stream: Stream) -> str: ...
    def _store_dirty(self, store) -> None: ...  # written out by the flusher


class ApiRouter(Protocol):
    """What the consumer API needs of the API (``api.Api``) that routes requests to it."""

    @property
    def js(self) -> ConsumerHost: ...
    @property
    def request_headers(self) -> bytes | None: ...  # the headers of the request being answered
    def _send(self, reply, response: dict, *, error: bool = False, track: bool = True,
              headers: bytes | None = None) -> None: ...
    def _fail(self, reply, rtype: str, exc: ApiError, **extra: Any) -> None: ...


def decode_page_request(payload: bytes) -> int:
    """A CONSUMER.NAMES or CONSUMER.LIST request's offset (0 for a body that is no JSON
    object or array, or ``{}``), decoded as 2.15.1 decodes it, a standalone server and a
    cluster's meta leader alike (ApiError 10025 with Go's text)."""
    if not is_json_object_or_array(payload) or payload == b"{}":
        return 0
    return decode_request(payload, _PAGE_REQUEST, "server.JSApiConsumersRequest").get("offset", 0)


class ConsumerApi:
    def __init__(self, api: ApiRouter) -> None:
        self.api = api
        self.js = api.js
        # Told of every consumer removed (a cluster proposes the removal of one gone inactive).
        self.on_removed: Callable[[Consumer], None] | None = None

    def handle(self, tokens: list, reply, payload: bytes) -> None:
        n = len(tokens)
        op = tokens[3] if n > 3 else b""
        text = [t.decode("utf-8", "replace") for t in tokens]
        if op == b"DURABLE" and n == 7 and tokens[4] == b"CREATE":
            self.create(text[5], reply, payload, name=text[6], durable=True)
        elif op == b"CREATE" and n == 5:
            self.create(text[4], reply, payload)
        elif op == b"CREATE" and n >= 6:
            self.create(text[4], reply, payload, name=text[5], filter=".".join(text[6:]))
        elif op == b"INFO" and n == 6:
            self.info(text[4], text[5], reply, payload)
        elif op == b"DELETE" and n == 6:
            self.delete(text[4], text[5], reply, payload)
        elif op == b"MSG" and n == 7 and tokens[4] == b"NEXT":
            stream = self.js.streams.get(text[5])
            consumer = stream.consumers.get(text[6]) if stream is not None else None
            if consumer is not None:  # nats-server answers nothing for an unknown consumer
                self.js.delivery.pull(consumer, reply, payload)
        elif op in (b"NAMES", b"LIST") and n == 5:
            self.names(text[4], reply, payload, full=op == b"LIST")
        elif op == b"PAUSE" and n == 6:
            self.pause(text[4], text[5], reply, payload)
        elif op == b"UNPIN" and n == 6:
            self.unpin(text[4], text[5], reply, payload)

    def _stream(self, name: str):
        stream = self.js.streams.get(name)
        if stream is None:
            raise errors.stream_not_found()
        return stream

    @staticmethod
    def decode_create(stream_name: str, payload: bytes, *, name: str = "", durable: bool = False,
                      filter: str = "") -> tuple[ConsumerConfig, str]:
        """A create request's configuration and action, with the checks made before the
        stream's (ApiError otherwise)."""
        try:
            request = go_decode_request(payload, _CREATE_GO_TYPE) or {}
            req = decode_struct(request, _CREATE_REQUEST, {})
        except GoDecodeError as exc:
            raise errors.invalid_json(str(exc)) from None
        except ValueError as exc:
            raise errors.invalid_json() from exc
        try:  # (2.15.1 decodes strictly: an unknown field anywhere is refused)
            check_known_fields(request, CONSUMER_REQUEST_SHAPE)
            pedantic = decode_pedantic(request, "CreateConsumerRequest")
            sourcing = (request.get("config") or {}).get("sourcing")  # (2.15's, taken, not kept)
            if sourcing is not None and not isinstance(sourcing, bool):
                raise go_type_error(sourcing, "CreateConsumerRequest.config.sourcing", "bool")
        except GoDecodeError as exc:
            raise errors.invalid_json(str(exc)) from None
        if req.get("stream_name", "") != stream_name:
            raise errors.stream_mismatch()
        try:
            cfg = ConsumerConfig.from_json(req.get("config"))
        except GoDecodeError as exc:  # (pause_until: Go's time errors)
            raise errors.invalid_json(str(exc)) from None
        except ValueError:
            raise errors.invalid_json() from None
        unsupported.refuse_consumer(req.get("config"))
        set_static_consumer_metadata(cfg)
        if durable:
            if not cfg.durable_name:
                raise errors.consumer_durable_required()
            if cfg.durable_name != name:
                raise errors.consumer_name_mismatch()
            cfg.name = name  # (2.10+: a durable's name is honoured as its name)
        elif not name and cfg.durable_name:
            raise errors.consumer_ephemeral_with_durable()
        elif name:
            if cfg.name and cfg.name != name or cfg.durable_name and cfg.durable_name != name:
                raise errors.consumer_name_mismatch()
            # jetstream_api.go jsConsumerCreateRequest (2.10+): the subject's filter token
            # goes with filter_subject only.
            if filter and cfg.filter_subjects:
                raise errors.consumer_multiple_filters_not_allowed()
            if filter and cfg.filter_subject != filter:
                raise errors.consumer_create_filter_mismatch()
            cfg.name = name  # (2.10+: the subject's name is the consumer's)
        if pedantic:
            check_pedantic(cfg)
        return cfg, req.get("action", "")

    def create(self, stream_name: str, reply, payload: bytes, *, name: str = "", durable: bool = False,
               filter: str = "") -> None:
        rtype = _T + "consumer_create_response"
        try:
            cfg, action = self.decode_create(stream_name, payload, name=name, durable=durable, filter=filter)
            if cfg.num_replicas > 1:  # natserver's JetStream is a single server's (jsConsumerCreateRequest)
                raise errors.replicas_not_supported()
            stream = self._stream(stream_name)
            ack_limit = self.js.limits.get("max_ack_pending", -1)
            if decode_pedantic(go_decode_request(payload, _CREATE_GO_TYPE), "CreateConsumerRequest"):  # (decoded: valid)
                check_pedantic_limits(cfg, stream.cfg.consumer_limits)
            existing = stream.consumers.get(name or cfg.durable_name or cfg.name)
            existing_durable = bool(existing.cfg.durable_name) if existing is not None else None
            set_defaults(cfg, ack_limit, stream.cfg.consumer_limits, existing_durable)
            # (the deliver subject's cycle check looks at the stream's own subjects only, as
            # nats-server's deliveryFormsCycle: not those of the streams it mirrors or sources)
            check_config(cfg, stream.cfg.subjects or [], stream.cfg.retention, ack_limit, stream.cfg.consumer_limits)
            identity = b""
            if cfg.direct:  # (a mirror's or a source's: jsConsumerCreateRequest, 2.15)
                identity = stream_identity(stream.created)
                asked = get_header(STREAM_IDENTITY, self.api.request_headers)
                if asked and asked != identity:
                    raise errors.consumer_stream_identity_mismatch(identity.decode())
            consumer = self.add(stream, cfg, name or cfg.durable_name or cfg.name, action)
        except ApiError as exc:
            self.api._fail(reply, rtype, exc)
            return
        self.created(consumer, reply, identity)

    def created(self, consumer: Consumer, reply, identity: bytes = b"") -> None:
        """The answer to a consumer's create (``reply`` None: no answer; ``identity``: the
        stream's, a direct consumer's answer carries it in Nats-Stream-Identity), then its
        pause advisory and its push delivery's start."""
        stream = consumer.stream
        now = clock.now_ns()
        if reply:
            headers = gen_header(None, STREAM_IDENTITY, identity) if identity else None
            self.api._send(reply, {"type": _T + "consumer_create_response", **self._info(consumer)}, headers=headers)
        if consumer.paused(now):  # (jsConsumerCreateRequest: after every create of a paused consumer)
            advisories.consumer_pause(self.js, stream.name, consumer.name, True, consumer.cfg.pause_until)
        if consumer.cfg.deliver_subject:
            # Only after the response, as nats-server's delivery loop starts: a mirror or source
            # consumer's owner ignores what comes before it knows the consumer's name.
            self.js.delivery.push(consumer, now)

    def add(self, stream, cfg: ConsumerConfig, name: str, action: str = "") -> Consumer:
        consumers = stream.consumers
        existing = consumers.get(name) if name else None
        if existing is not None:
            # jsConsumerCreateRequest: an existing consumer's pause_until is only changed by
            # the pause API; what the request says is replaced by it (and it is kept in UTC
            # from then on, as updateConfig stores it).
            cfg.pause_until = existing.cfg.pause_until
            metadata = cfg.metadata
            copy_metadata(cfg, existing.cfg)  # (compared with the existing one's required level)
            if existing.cfg == cfg:
                if _pause_in_utc(existing):
                    self._save(existing)
                return existing
            if action == "create":
                raise errors.consumer_already_exists()
            if stream.cfg.retention == "workqueue":
                check_workqueue_update(cfg, name, consumers)
            cfg.metadata = metadata  # (an update stores its own)
            check_update(existing.cfg, cfg)
            existing.reconfigure(cfg)
            _pause_in_utc(existing)
            self._save(existing)
            return existing
        if action == "update":
            raise errors.consumer_does_not_exist()
        # nats-server: the stream's max_consumers, or the account's when that is lower, bounds
        # this stream's consumers (the account's limit is per stream, not a total).
        max_consumers = stream.cfg.max_consumers
        account_max = self.js.limits.get("max_consumers", -1)  # the account's jetstream limits
        if max_consumers <= 0 or 0 < account_max < max_consumers:
            max_consumers = account_max
        if max_consumers > 0 and stream.public_consumers() >= max_consumers:
            raise errors.max_consumers_reached()
        if stream.cfg.retention == "workqueue" and not cfg.direct:
            check_workqueue(cfg, consumers.values())
        if not name:
            name = ephemeral_name()
            while name in consumers:
                name = ephemeral_name()
        consumer = Consumer(stream, name, cfg, clock.now_ns())
        consumer.arm_pause(consumer.created)
        consumer.num_pending()  # the first count, as nats-server's setLeader makes it
        consumers[name] = consumer
        self._save(consumer)
        advisories.consumer_action(self.js, stream.name, name, advisories.CREATE)
        self.js.delivery.poke()  # the timer task learns of its deadlines (inactive_threshold)
        return consumer

    def info(self, stream_name: str, name: str, reply, payload: bytes = b"") -> None:
        rtype = _T + "consumer_info_response"
        try:
            if not is_empty_request(payload):  # (jsConsumerInfoRequest: before anything else)
                raise errors.not_empty_request()
            consumer = self._stream(stream_name).consumers.get(name)
            if consumer is None:
                raise errors.consumer_not_found()
        except ApiError as exc:
            self.api._fail(reply, rtype, exc)
            return
        self.api._send(reply, {"type": rtype, **self._info(consumer)})

    def info_of(self, consumer: Consumer) -> dict:
        """The consumer's info, as a create or CONSUMER.INFO answers it."""
        return self._info(consumer)

    def _info(self, consumer: Consumer, dynamic: bool = True) -> dict:
        """consumer.go info: a pull consumer's waiting requests are looked over first, so
        num_waiting counts only those still waiting; a push consumer says whether someone
        listens on its deliver subject (push_bound). ``dynamic``: see Consumer.info_json."""
        now = clock.now_ns()
        cluster = self.js.cluster_block
        if consumer.cfg.is_push:
            return consumer.info_json(self.js.client.has_interest(consumer.cfg.deliver_subject.encode()), now, dynamic,
                                      cluster=cluster)
        self.js.delivery.process_waiting(consumer, now, False)
        return consumer.info_json(now=now, dynamic=dynamic, cluster=cluster)

    def delete(self, stream_name: str, name: str, reply, payload: bytes = b"") -> None:
        rtype = _T + "consumer_delete_response"
        try:
            if not is_empty_request(payload):  # (jsConsumerDeleteRequest: before the lookups)
                raise errors.not_empty_request()
            stream = self._stream(stream_name)
            consumer = stream.consumers.get(name)
            if consumer is None:
                raise errors.consumer_not_found()
            self.remove(consumer)
        except ApiError as exc:
            self.api._fail(reply, rtype, exc)
            return
        self.api._send(reply, {"type": rtype, "success": True})

    def pause(self, stream_name: str, name: str, reply, payload: bytes) -> None:
        """jsConsumerPauseRequest: pause until ``pause_until`` (a time in the past or none:
        resume). The consumer's configuration keeps it (in UTC), on disk too; a changed
        deadline is announced ($JS.EVENT.ADVISORY.CONSUMER.PAUSE.<stream>.<consumer>) before
        the answer. A resumed consumer delivers at once (nats-server 2.15.1 only goes on when
        something else wakes it: a new message, a new pull request)."""
        rtype = _T + "consumer_pause_response"
        try:
            until = _pause_request(payload)
            consumer = self._stream(stream_name).consumers.get(name)
            if consumer is None:
                raise errors.consumer_not_found()
            now = clock.now_ns()
            # (Go: a zero time is no pause_until; any other time is kept, in UTC)
            if until is not None:
                until = gotime.utc(until) if gotime.nanos(until) != _ZERO_NS else None
            was_paused = consumer.paused(now)
            changed = consumer.set_pause(until, now)
            self._save(consumer)
        except ApiError as exc:
            self.api._fail(reply, rtype, exc, paused=False, pause_until=gotime.ZERO)
            return
        if changed:
            advisories.consumer_pause(self.js, stream_name, name, consumer.paused(now), until)
            self.js.delivery.poke()  # the timer task learns of the new deadline
        response: dict = {"type": rtype, "paused": consumer.paused(now), "pause_until": until or gotime.ZERO}
        if consumer.pause_ns is not None and now < consumer.pause_ns:
            response["pause_remaining"] = consumer.pause_ns - now
        self.api._send(reply, response)
        if was_paused and not consumer.paused(now):
            self.js.delivery.resumed(consumer, now)

    def pause_applied(self, consumer: Consumer, until: str | None) -> None:
        """A pause the meta group applied (jsConsumerPauseRequest in a cluster: the meta leader
        proposed it in the consumer's assignment and answered): as ``pause``, unanswered."""
        now = clock.now_ns()
        was_paused = consumer.paused(now)
        if consumer.set_pause(until, now):
            self._save(consumer)
            advisories.consumer_pause(self.js, consumer.stream.name, consumer.name, consumer.paused(now), until)
            self.js.delivery.poke()
        if was_paused and not consumer.paused(now):
            self.js.delivery.resumed(consumer, now)

    def unpin(self, stream_name: str, name: str, reply, payload: bytes) -> None:
        """jsConsumerUnpinRequest (2.11): ``{"group": "<group>"}`` takes the pin from the
        group's pinned client (any policy: the advisory says so all the same); the next pull
        request without an id gets a new one."""
        rtype = _T + "consumer_unpin_response"
        try:
            group = _unpin_request(payload)
            if not group:
                raise errors.invalid_json("consumer group not specified")
            if not GROUP_NAME.fullmatch(group):
                raise errors.consumer_invalid_group_name()
            consumer = self._stream(stream_name).consumers.get(name)
            if consumer is None:
                raise errors.consumer_not_found()
            if group not in (consumer.cfg.priority_groups or ()):
                raise errors.consumer_invalid_priority_group()
        except ApiError as exc:
            self.api._fail(reply, rtype, exc)
            return
        consumer.unassign_pin()
        advisories.consumer_unpinned(self.js, stream_name, name, group, advisories.UNPINNED_ADMIN)
        self.api._send(reply, {"type": rtype})
        if consumer.waiting:
            self.js.delivery.serve(consumer, clock.now_ns())

    def _cleanup_no_interest(self, gone: Consumer) -> None:
        """consumer.go cleanupNoInterestMessages on a consumer's deletion: with no consumer
        left, the stream purged; else the messages from its ack floor on that no other
        consumer needs removed (at most CLEANUP_LIMIT of them: 2.15.1 hands a longer range
        to its periodic interest check)."""
        stream = gone.stream
        store = stream.store
        if not stream.consumers:
            if store.msgs:
                store.purge()
                self.js._store_dirty(store)
            return
        start = max(gone.ack_floor_sseq, store.first_seq)
        if store.last_seq - start > CLEANUP_LIMIT:
            return
        removed = False
        for seq in range(start, store.last_seq + 1):
            msg = store.load_msg(seq)
            if msg is not None and all(c.is_done_with(seq, msg.subject) for c in stream.consumers.values()):
                removed = store.remove_msg(seq) or removed
        if removed:
            self.js._store_dirty(store)

    def _save(self, consumer: Consumer) -> None:
        """A durable's configuration is on disk before the API answers."""
        if consumer.cfg.durable_name and consumer.stream.file_backed:
            try:
                consumer_store.save(consumer, self.js.stream_path(consumer.stream))
            except OSError as exc:
                raise errors.consumer_create(str(exc)) from None

    def remove(self, consumer: Consumer) -> None:
        """Delete a consumer: waiting pull requests are told (409 Consumer Deleted); on an
        interest stream, what no other consumer needs goes (consumer.go cleanupNoInterestMessages)."""
        if consumer.stream.consumers.pop(consumer.name, None) is not None:
            advisories.consumer_action(self.js, consumer.stream.name, consumer.name, advisories.DELETE)
            if self.on_removed is not None:
                self.on_removed(consumer)
            if consumer.stream.cfg.retention == "interest" and not consumer.stream.replicated:
                self._cleanup_no_interest(consumer)
        if consumer_store.kept_on_disk(consumer, self.js.cluster_block is not None):
            consumer_store.remove(self.js.stream_path(consumer.stream), consumer.name)
        for req in consumer.waiting:
            self.js.send(req.reply, b"", _HDR_DELETED)
        consumer.waiting.clear()

    def names(self, stream_name: str, reply, payload: bytes, *, full: bool) -> None:
        rtype = _T + ("consumer_list_response" if full else "consumer_names_response")
        offset = 0
        try:
            offset = decode_page_request(payload)
            stream = self._stream(stream_name)
        except ApiError as exc:
            self.api._fail(reply, rtype, exc, total=0, offset=0, limit=0, consumers=[])
            return
        names = sorted(name for name, c in stream.consumers.items() if not c.cfg.direct)
        offset = min(max(offset, 0), len(names))
        limit = LIST_LIMIT if full else NAMES_LIMIT
        page = names[offset : offset + limit]
        if full:
            listed: list = [self._info(stream.consumers[n], dynamic=False) for n in page]
        else:
            listed = page
        self.api._send(reply, {"type": rtype, "total": len(names), "offset": offset, "limit": limit,
                               "consumers": listed})


def _unpin_request(payload: bytes) -> str:
    """JSApiConsumerUnpinRequest's group, decoded as Go's json.Unmarshal does (unknown fields
    ignored; its errors for an empty body and for values of the wrong type)."""
    try:
        value = go_unmarshal(payload, "server.JSApiConsumerUnpinRequest")
    except GoDecodeError as exc:
        raise errors.invalid_json(str(exc)) from None
    if value is None:
        return ""
    group = ""
    for key, item in value.items():
        if key.lower() != "group" or item is None:
            continue
        if not isinstance(item, str):
            raise errors.invalid_json(f"json: cannot unmarshal {_json_kind(item)} into Go struct field "
                                      "JSApiConsumerUnpinRequest.group of type string")
        group = item
    return group


def _json_kind(value) -> str:
    """Go's name for a JSON value's kind in its Unmarshal errors."""
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    return "bool" if isinstance(value, bool) else "number"


def pause_request(payload: bytes) -> str | None:
    """A pause request's deadline as a consumer keeps it (UTC; None: resume). ApiError: not a
    valid request."""
    until = _pause_request(payload)
    if until is not None:
        until = gotime.utc(until) if gotime.nanos(until) != _ZERO_NS else None
    return until


def pause_response(until: str | None, now: int) -> dict:
    """JSApiConsumerPauseResponse's fields for a deadline (the meta leader's answer)."""
    pause_ns = gotime.nanos(until) if until is not None else None
    response: dict = {"type": _T + "consumer_pause_response", "paused": pause_ns is not None and now < pause_ns,
                      "pause_until": until or gotime.ZERO}
    if pause_ns is not None and now < pause_ns:
        response["pause_remaining"] = pause_ns - now
    return response


def _pause_in_utc(consumer: Consumer) -> bool:
    """consumer.go updateConfig keeps pause_until in UTC: whether that changed its text."""
    until = consumer.cfg.pause_until
    if until is None or gotime.utc(until) == until:
        return False
    consumer.cfg.pause_until = gotime.utc(until)
    return True


def _pause_request(payload: bytes) -> str | None:
    """The pause request's time (Go's text; None: none). nats-server reads a body that does not
    start with ``{`` or ``[`` as no request at all (resume); it decodes strictly (an unknown
    field is an error) and takes one JSON value after another (the last one's time wins)."""
    body = payload.lstrip(b" \t\r\n")
    if body[:1] not in (b"{", b"["):
        return None
    found: list = []

    def take(value: dict) -> None:  # (each value in turn: an error in one stops the decoding there)
        for key, item in value.items():
            if key.lower() != "pause_until":
                raise GoDecodeError(f"json: unknown field {_go_quote(key)}")
            if item is not None:
                found.append(_PAUSE_REQUEST["pause_until"](item))

    try:
        go_decode_request(body, _PAUSE_GO_TYPE, take)
    except GoDecodeError as exc:
        raise errors.invalid_json(str(exc)) from None
    return found[-1] if found else None


def _go_quote(text: str) -> str:
    """Go's %q of a printable string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


