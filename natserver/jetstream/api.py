"""The JetStream API on ``$JS.API.>``: request routing, JSON requests and responses shaped
as nats-server v2.9.10's (field order included), and DIRECT.GET.

Supported: INFO; STREAM.CREATE, UPDATE, INFO, DELETE, NAMES, LIST, PURGE, MSG.GET,
MSG.DELETE; DIRECT.GET (direct.py); STREAM.SNAPSHOT, RESTORE (snapshot.py). CONSUMER requests go to consumer_api.py. Anything else
gets no response, as nats-server gives none to unknown API subjects.

Layer (README "Layers"): the top of the package's layers, under the engine (the package's
``JetStream``), which it reaches through ``ApiHost``.
"""

from __future__ import annotations

import base64
import logging
from typing import TYPE_CHECKING, Any, Protocol

from ..protocol.const import JS_API_LEVEL
from . import advisories, errors, not_enabled, unsupported
from .advisories import CREATE, DELETE, MODIFY
from .apijson import decode_request
from .consumer_api import ConsumerApi, ConsumerHost
from .direct import DirectGets, DirectHost
from .errors import ApiError
from .gojson import (
    INT64,
    UINT64,
    GoDecodeError,
    check_known_fields,
    decode_bool,
    decode_int,
    decode_pedantic,
    decode_str,
    go_decode_request,
    with_literals,
)
from .store import StoreError
from .stream import REQUEST_SHAPE as STREAM_REQUEST_SHAPE
from .stream import StreamConfig, check_pedantic, check_stream_config
from .util import (
    dumps,
    is_empty_request,
    is_json_object_or_array,
    level_supported,
    rfc3339nano,
    subjects_collide,
)
from .versioning import set_static_stream_metadata

if TYPE_CHECKING:
    from .snapshot import Snapshots
    from .stream import Stream

log = logging.getLogger("natserver")

_T = "io.nats.jetstream.api.v1."
NAMES_LIMIT = 1024  # JSApiNamesLimit
LIST_LIMIT = 256  # JSApiListLimit
MAX_SUBJECT_DETAILS = 100_000  # JSMaxSubjectDetails

_uint = lambda v: decode_int(v, UINT64)  # noqa: E731
_goint = lambda v: decode_int(v, INT64)  # noqa: E731

_INFO_REQUEST = {"offset": _goint, "deleted_details": decode_bool, "subjects_filter": decode_str}
_NAMES_REQUEST = {"offset": _goint, "subject": decode_str}
_PURGE_REQUEST = {"seq": _uint, "filter": decode_str, "keep": _uint}
_MSG_DELETE_REQUEST = {"seq": _uint, "no_erase": decode_bool}
_MSG_GET_REQUEST = {"seq": _uint, "last_by_subj": decode_str, "next_by_subj": decode_str}


_DIRECT_GET = b"$JS.API.DIRECT.GET."  # the direct gets' prefix (handle's fast path)
REQUIRED_API_LEVEL_STATUS = b"NATS/1.0 412 Required Api Level\r\n\r\n"


# JSApiMsgGetRequest's fields natserver's message get does not read (direct gets do): a request
# naming them is decoded, not refused as having an unknown field.
_MSG_GET_OTHER_FIELDS = ("batch", "max_bytes", "start_time", "multi_last", "up_to_seq", "up_to_time", "no_hdr")


STREAM_NAMES_GO_TYPE = "server.JSApiStreamNamesRequest"
STREAM_LIST_GO_TYPE = "server.JSApiStreamListRequest"


def decode_names_request(payload: bytes, go_type: str) -> tuple[int, str]:
    """A STREAM.NAMES or STREAM.LIST request's offset and subject filter (0, "" for a body
    that is no JSON object or array, or empty), decoded as 2.15.1 decodes it, a standalone
    server and a cluster's meta leader alike (ApiError 10025 with Go's text)."""
    if not is_json_object_or_array(payload) or is_empty_request(payload):
        return 0, ""
    request = decode_request(payload, _NAMES_REQUEST, go_type)
    return request.get("offset", 0), request.get("subject", "")


class ApiHost(ConsumerHost, DirectHost, Protocol):
    """What the API needs of the engine (``JetStream``): its streams and their lifecycle,
    and the API counters it keeps."""

    api_total: int
    api_errors: int
    snapshots: Snapshots

    def check_reservation(self, storage: str, add: int, base: int, exclude: str | None) -> None: ...
    def add_stream(self, config: StreamConfig) -> Stream: ...
    def update_stream(self, stream: Stream, new: StreamConfig) -> None: ...
    def delete_stream(self, stream: Stream) -> None: ...
    def persist(self, stream: Stream) -> None: ...
    def stream_alternates(self, name: str) -> list[dict]: ...  # STREAM.INFO's (a cluster's)


class Api:
    """Handles one request at a time, synchronously, from the ``$JS.API.>`` subscription."""

    def __init__(self, js: ApiHost) -> None:
        self.js = js
        self.server = js.server
        self._stream_ops = {
            b"CREATE": self.stream_create,
            b"UPDATE": self.stream_update,
            b"INFO": self.stream_info,
            b"DELETE": self.stream_delete,
            b"PURGE": self.stream_purge,
        }
        self.consumers = ConsumerApi(self)
        self.direct = DirectGets(js)
        self._request: tuple[bytes, bytes] = (b"", b"")  # the request being answered: subject, payload (the audit's)
        self.request_headers: bytes | None = None  # that request's headers

    # -- plumbing -----------------------------------------------------------------------------

    def _send(self, reply, response: dict, *, error: bool = False, track: bool = True,
              headers: bytes | None = None) -> None:
        js = self.js
        if track:
            js.api_total += 1
            if error:
                js.api_errors += 1
        encoded = dumps(response)
        if reply:
            self.js.send(reply, encoded, headers)
        advisories.api_audit(self.js, *self._request, encoded)

    def _fail(self, reply, rtype: str, exc: ApiError, **extra) -> None:
        self._send(reply, {"type": rtype, "error": exc.to_json(), **extra}, error=True)

    def handle(self, subject: bytes, reply, hdr, payload: bytes) -> bool:
        """Answer one request; False when nats-server would have had no subscriber for it (a
        direct get no stream answers), so that the requester gets the 503 no-responders
        status, as from nats-server, instead of waiting out its timeout."""
        if subject.startswith(_DIRECT_GET) and not payload and not hdr and reply:
            # A key's last value (a KV get): straight to the store when the stream answers
            # direct gets itself and the subject is plain ASCII; anything else, below.
            stream_name, _, key = subject[len(_DIRECT_GET):].partition(b".")
            if key and key.isascii():
                stream = self.js.streams.get(stream_name.decode("utf-8", "replace"))
                if stream is not None and stream.cfg.allow_direct:
                    self._request = (subject, payload)
                    try:
                        self.direct.last(stream, key, reply)
                    except Exception:  # (as below)
                        log.exception("JetStream API request on %r failed", subject)
                    return True
        tokens = subject.split(b".")
        n = len(tokens)
        if n < 3 or tokens[0] != b"$JS" or tokens[1] != b"API":
            return True
        kind = tokens[2]
        self._request = (subject, payload)
        self.request_headers = hdr
        if hdr and not level_supported(hdr):
            refused = self._refuse_level(subject, tokens, reply)
            if refused is not None:
                return refused
        try:
            if kind == b"INFO" and n == 3:
                self.account_info(reply)
            elif kind == b"STREAM":
                op = tokens[3] if n > 3 else b""
                if n == 4 and op == b"NAMES":
                    self.stream_names(reply, payload)
                elif n == 4 and op == b"LIST":
                    self.stream_list(reply, payload)
                elif n == 5 and op == b"SNAPSHOT":
                    self.js.snapshots.snapshot_request(tokens[4].decode("utf-8", "replace"), reply, payload)
                elif n == 5 and op == b"RESTORE":
                    self.js.snapshots.restore_request(tokens[4].decode("utf-8", "replace"), reply, payload)
                elif n == 5:
                    handler = self._stream_ops.get(op)
                    if handler is not None:
                        handler(tokens[4].decode("utf-8", "replace"), reply, payload)
                elif n == 6 and tokens[3:5] in ([b"LEADER", b"STEPDOWN"], [b"PEER", b"REMOVE"]):
                    rtype = "stream_leader_stepdown_response" if op == b"LEADER" else "stream_remove_peer_response"
                    self._fail(reply, _T + rtype, errors.cluster_required())
                elif n == 6 and op == b"MSG":
                    name = tokens[5].decode("utf-8", "replace")
                    if tokens[4] == b"GET":
                        self.msg_get(name, reply, payload)
                    elif tokens[4] == b"DELETE":
                        self.msg_delete(name, reply, payload)
            elif kind == b"DIRECT" and n >= 5 and tokens[3] == b"GET":
                return self.direct_get(tokens[4].decode("utf-8", "replace"), tokens[5:], reply, payload)
            elif kind == b"CONSUMER" and n == 7 and tokens[3:5] == [b"LEADER", b"STEPDOWN"]:
                self._fail(reply, _T + "consumer_leader_stepdown_response", errors.cluster_required())
            elif kind == b"CONSUMER":
                self.consumer(tokens, reply, payload)
        except Exception:  # a bug must not take the publisher's connection down
            log.exception("JetStream API request on %r failed", subject)
        return True

    def _refuse_level(self, subject: bytes, tokens: list, reply) -> bool | None:
        """A request that needs a higher API level than natserver's: each API's own response
        type with 412 10185, a pull request and a direct get a ``412 Required Api Level``
        status instead (nats-server 2.15.1; a direct get only where a stream answers). None:
        an API that answers something else first (the step-downs: clustering required)."""
        if tokens[2] == b"DIRECT" or (tokens[2] == b"CONSUMER" and len(tokens) > 4 and tokens[3:5] == [b"MSG", b"NEXT"]):
            if tokens[2] == b"DIRECT":
                name = tokens[4].decode("utf-8", "replace") if len(tokens) > 4 else ""
                stream = self.js.streams.get(name)
                if stream is None or not stream.cfg.allow_direct:
                    return False
            if reply:
                self.js.send(reply, b"", REQUIRED_API_LEVEL_STATUS)
            return True
        body = not_enabled.answer(subject, errors.required_api_level())
        if body is None:
            return None
        js = self.js
        js.api_total += 1
        js.api_errors += 1
        if reply:
            js.send(reply, body)
        advisories.api_audit(js, subject, self._request[1], body)
        return True

    # -- account ------------------------------------------------------------------------------

    def account_info(self, reply, *, streams: int | None = None, consumers: int | None = None,
                     remote: tuple[int, int, int, int] = (0, 0, 0, 0),
                     reservations: tuple[int, int] | None = None) -> None:
        """``streams``/``consumers``: the counts to report instead of this server's (a cluster's
        meta leader reports the assignments'); ``remote``: the other servers' memory, storage,
        API requests and errors for the account, added to this server's; ``reservations``: the
        memory and storage the streams' max_bytes reserve (the cluster's assignments')."""
        js = self.js
        memory, storage, api_total, api_errors = remote
        reserved_memory = reserved_storage = 0
        for stream in js.streams.values():
            reserved = max(stream.cfg.max_bytes, 0)  # (2.10+: the streams' max_bytes, reservedStorage)
            if stream.store.kind == "memory":
                memory += stream.store.bytes
                reserved_memory += reserved
            else:
                storage += stream.store.bytes
                reserved_storage += reserved
        if reservations is not None:
            reserved_memory, reserved_storage = reservations
        usage: dict[str, Any] = {
            "memory": memory,
            "storage": storage,
            "reserved_memory": reserved_memory,
            "reserved_storage": reserved_storage,
            "streams": len(js.streams) if streams is None else streams,
            "consumers": sum(s.public_consumers() for s in js.streams.values()) if consumers is None else consumers,
            "limits": {
                "max_memory": js.limits.get("max_memory", -1),
                "max_storage": js.limits.get("max_storage", -1),
                "max_streams": js.limits.get("max_streams", -1),
                "max_consumers": js.limits.get("max_consumers", -1),
                "max_ack_pending": js.limits.get("max_ack_pending", -1),
                "memory_max_stream_bytes": js.limits.get("memory_max_stream_bytes", -1),
                "storage_max_stream_bytes": js.limits.get("storage_max_stream_bytes", -1),
                "max_bytes_required": js.limits.get("max_bytes_required", False),
            },
        }
        tier = js.limits.get("tier")
        if tier:  # tiered limits (a JWT's): the account-wide ones are Go's zero values
            response = {"type": _T + "account_info_response", **usage,
                        "limits": {key: type(value)() for key, value in usage["limits"].items()}}
        else:
            response = {"type": _T + "account_info_response", **usage}
        if js.domain:
            response["domain"] = js.domain
        # (2.11+ adds the level: nats-py reads it before using limit markers)
        response["api"] = {"level": JS_API_LEVEL, "total": js.api_total + api_total, "errors": js.api_errors + api_errors}
        if tier:
            response["tiers"] = {tier: usage}
        self._send(reply, response)

    # -- streams ------------------------------------------------------------------------------

    @staticmethod
    def decode_stream_create(name: str, payload: bytes) -> StreamConfig:
        """A create request's configuration, with the checks made before the engine's."""
        cfg = Api.decode_stream_request(payload)
        if cfg.name != name:
            raise errors.stream_mismatch()
        if "/" in name or "\\" in name:
            raise errors.name_contains_path_separators()
        if cfg.sealed:
            raise errors.stream_invalid_config("stream configuration for create can not be sealed")
        if cfg.mirror_direct and cfg.mirror is None:
            raise errors.stream_invalid_config("stream has no mirror but does have mirror direct")
        return cfg

    @staticmethod
    def decode_stream_update(payload: bytes) -> StreamConfig:
        """An update request's configuration (decoded, the refusals of unsupported.py)."""
        return Api.decode_stream_request(payload)

    @staticmethod
    def decode_stream_request(payload: bytes) -> StreamConfig:
        """A create's or update's StreamConfigRequest, decoded as 2.15.1's unmarshalRequest does
        (strict: an unknown field refused; no payload at all is an empty configuration), with the
        refusals of unsupported.py."""
        try:
            request = go_decode_request(payload, "server.StreamConfigRequest",
                                        lambda value: check_known_fields(value, STREAM_REQUEST_SHAPE)) or {}
            cfg = StreamConfig.from_json(request)
            pedantic = decode_pedantic(request, "StreamConfigRequest")
        except GoDecodeError as exc:  # (Go's Unmarshal error, after "invalid JSON: ")
            raise errors.invalid_json(str(with_literals(StreamConfig.from_json, payload, exc))) from None
        except ValueError:
            raise errors.invalid_json() from None
        if pedantic:
            check_pedantic(cfg)
        unsupported.refuse_stream(request)
        set_static_stream_metadata(cfg)
        return cfg

    def stream_create(self, name: str, reply, payload: bytes) -> None:
        rtype = _T + "stream_create_response"
        try:
            cfg = self.decode_stream_create(name, payload)
            self.js.check_reservation(cfg.storage, cfg.max_bytes, 0, exclude=None)
            created = name not in self.js.streams
            stream = self.js.add_stream(cfg)
        except ApiError as exc:
            self._fail(reply, rtype, exc)
            return
        if created:
            advisories.stream_action(self.js, name, CREATE)
        self._send(reply, {"type": rtype, **stream.info_json(domain=False, created=True), "did_create": True})

    def stream_update(self, name: str, reply, payload: bytes) -> None:
        rtype = _T + "stream_update_response"
        try:
            ncfg = self.decode_stream_update(payload)
            cfg = check_stream_config(ncfg, self.js.streams, self.js.limits)
            if cfg.name != name:
                raise errors.stream_mismatch()
            stream = self.js.streams.get(name)
            if stream is None:
                raise errors.stream_not_found()
            self.js.update_stream(stream, cfg)
        except ApiError as exc:
            self._fail(reply, rtype, exc)
            return
        advisories.stream_action(self.js, name, MODIFY)  # (sent by the update, before the answer)
        self._send(reply, {"type": rtype, **stream.info_json()})

    def stream_info(self, name: str, reply, payload: bytes) -> None:
        rtype = _T + "stream_info_response"
        paged = {"total": 0, "offset": 0, "limit": 0}
        details, filter, offset = False, "", 0
        try:
            if is_json_object_or_array(payload) and not is_empty_request(payload):
                req = decode_request(payload, _INFO_REQUEST, "server.JSApiStreamInfoRequest")
                details = req.get("deleted_details", False)
                filter = req.get("subjects_filter", "")
                offset = req.get("offset", 0)
            stream = self.js.streams.get(name)
            if stream is None:
                raise errors.stream_not_found()
        except ApiError as exc:
            self._fail(reply, rtype, exc, **paged)
            return
        subjects = None
        if filter:
            counts = stream.store.subjects_state(filter.encode())
            if counts:
                names = sorted(s.decode("utf-8", "replace") for s in counts)
                start = min(max(offset, 0), len(names))
                page = names[start : start + MAX_SUBJECT_DETAILS]
                if page:
                    subjects = {s: counts[s.encode()] for s in page}
                # (2.10+ answers the offset asked for, past the end too)
                paged = {"total": len(counts), "offset": offset, "limit": MAX_SUBJECT_DETAILS}
        info = stream.info_json(cluster=True, details=details, subjects=subjects)
        alternates = self.js.stream_alternates(name)
        if alternates:  # (jsStreamInfoRequest: after mirror / sources, before ts)
            ts = info.pop("ts")
            info = {**info, "alternates": alternates, "ts": ts}
        self._send(reply, {"type": rtype, **paged, **info})

    def stream_delete(self, name: str, reply, payload: bytes) -> None:
        rtype = _T + "stream_delete_response"
        try:
            if not is_empty_request(payload):
                raise errors.not_empty_request()
            stream = self.js.streams.get(name)
            if stream is None:
                raise errors.stream_not_found()
            # Its consumers go first, as nats-server's stop: their waiting pull requests are
            # told (409 Consumer Deleted) and each has its advisory.
            for consumer in list(stream.consumers.values()):
                self.consumers.remove(consumer)
            try:
                self.js.delete_stream(stream)
            except OSError as exc:
                raise errors.stream_delete(str(exc)) from None
        except ApiError as exc:
            self._fail(reply, rtype, exc)
            return
        advisories.stream_action(self.js, name, DELETE)
        self._send(reply, {"type": rtype, "success": True})

    def _matching_names(self, payload: bytes, rtype: str, reply, go_type: str,
                        no_streams: list | None) -> tuple[list, int] | None:
        try:
            offset, filter = decode_names_request(payload, go_type)
        except ApiError as exc:
            self._fail(reply, rtype, exc, total=0, offset=0, limit=0, streams=no_streams)
            return None
        names = []
        for name, stream in self.js.streams.items():
            if not filter or any(subjects_collide(filter, s) for s in stream.cfg.subjects or ()):
                names.append(name)
        names.sort()
        return names, min(max(offset, 0), len(names))

    def stream_names(self, reply, payload: bytes) -> None:
        rtype = _T + "stream_names_response"
        found = self._matching_names(payload, rtype, reply, STREAM_NAMES_GO_TYPE, None)
        if found is None:
            return
        names, offset = found
        page = names[offset : offset + NAMES_LIMIT]
        self._send(reply, {"type": rtype, "total": len(names), "offset": offset, "limit": NAMES_LIMIT,
                           "streams": page or None})

    def stream_list(self, reply, payload: bytes) -> None:
        rtype = _T + "stream_list_response"
        found = self._matching_names(payload, rtype, reply, STREAM_LIST_GO_TYPE, [])
        if found is None:
            return
        names, offset = found
        infos = [self.js.streams[name].info_json(dynamic=False) for name in names[offset : offset + LIST_LIMIT]]
        self._send(reply, {"type": rtype, "total": len(names), "offset": offset, "limit": LIST_LIMIT,
                           "streams": infos})

    def stream_purge(self, name: str, reply, payload: bytes) -> None:
        rtype = _T + "stream_purge_response"
        req = None
        try:
            if is_json_object_or_array(payload) and not is_empty_request(payload):  # (else: purge all)
                req = decode_request(payload, _PURGE_REQUEST, "server.JSApiStreamPurgeRequest")
                if req.get("seq", 0) > 0 and req.get("keep", 0) > 0:
                    raise errors.bad_request()
            stream = self.js.streams.get(name)
            if stream is None:
                raise errors.stream_not_found()
            if stream.cfg.sealed:
                raise errors.stream_sealed()
            if stream.cfg.deny_purge:
                raise errors.stream_purge_failed("stream purge not permitted")
        except ApiError as exc:
            self._fail(reply, rtype, exc, purged=0)
            return
        if stream.replica is not None:  # proposed to the group, answered once applied
            stream.replica.purge(req, reply)
            return
        store = stream.store
        try:
            if req is None:
                purged = store.purge()
                stream.purge_consumers(None, purged)
            else:
                purged = store.purge_ex(req.get("filter", "").encode(), req.get("seq", 0), req.get("keep", 0))
                stream.purge_consumers(req.get("filter", "").encode(), purged)
            self.js.persist(stream)
        except (StoreError, OSError) as exc:
            self._send(reply, {"type": rtype, "error": errors.stream_general(str(exc)).to_json(), "purged": 0})
            return
        self._send(reply, {"type": rtype, "success": True, "purged": purged})

    # -- messages -----------------------------------------------------------------------------

    def msg_delete(self, name: str, reply, payload: bytes) -> None:
        rtype = _T + "stream_msg_delete_response"
        try:
            if is_empty_request(payload):
                raise errors.bad_request()
            req = decode_request(payload, _MSG_DELETE_REQUEST, "server.JSApiMsgDeleteRequest")
            stream = self.js.streams.get(name)
            if stream is None:
                raise errors.stream_not_found()
            if stream.cfg.sealed:
                raise errors.stream_sealed()
            if stream.cfg.deny_delete:
                raise errors.stream_msg_delete_failed("message delete not permitted")
        except ApiError as exc:
            self._fail(reply, rtype, exc)
            return
        seq = req.get("seq", 0)
        if stream.replica is not None:  # proposed to the group, answered once applied
            stream.replica.delete_msg(seq, req.get("no_erase", False), reply)
            return
        try:
            removed = stream.store.remove_msg(seq, erase=not req.get("no_erase", False))
            self.js.persist(stream)
        except (StoreError, OSError) as exc:
            self._send(reply, {"type": rtype, "error": errors.stream_msg_delete_failed(str(exc)).to_json()})
            return
        if removed:
            self._send(reply, {"type": rtype, "success": True})
        else:
            self._send(reply, {"type": rtype, "error": errors.sequence_not_found(seq).to_json()})

    def msg_get(self, name: str, reply, payload: bytes) -> None:
        rtype = _T + "stream_msg_get_response"
        try:
            if is_empty_request(payload):
                raise errors.bad_request()
            req = decode_request(payload, _MSG_GET_REQUEST, "server.JSApiMsgGetRequest", _MSG_GET_OTHER_FIELDS)
            seq = req.get("seq", 0)
            last_for = req.get("last_by_subj", "")
            next_for = req.get("next_by_subj", "")
            if (seq > 0 and last_for) or (seq == 0 and not last_for and not next_for) or (last_for and next_for):
                raise errors.bad_request()
            stream = self.js.streams.get(name)
            if stream is None:
                raise errors.stream_not_found()
            store = stream.store
            if seq > 0 and not next_for:
                sm = store.load_msg(seq)
            elif next_for:
                sm = store.load_next_msg(next_for.encode(), seq)
            else:
                sm = store.load_last_msg(last_for.encode())
            if sm is None:
                raise errors.no_message_found()
        except ApiError as exc:
            self._fail(reply, rtype, exc)
            return
        message: dict = {"subject": sm.subject.decode("utf-8", "replace"), "seq": sm.seq}
        if sm.hdr:
            message["hdrs"] = base64.b64encode(sm.hdr).decode()
        if sm.data:
            message["data"] = base64.b64encode(sm.data).decode()
        message["time"] = rfc3339nano(sm.ts)
        # nats-server answers this one outside the API accounting.
        self._send(reply, {"type": rtype, "message": message}, track=False)

    # -- direct get ---------------------------------------------------------------------------

    def direct_get(self, name: str, key_tokens: list, reply, payload: bytes) -> bool:
        """``$JS.API.DIRECT.GET.<stream>`` (JSON request) and ``...GET.<stream>.<subject>``
        (last message on the subject): direct.py. Only streams with allow_direct answer
        (nats-server subscribes for those only), else a mirror of ``name`` with mirror_direct
        (nats-server's mirrors join the origin's queue group: on one server either may
        answer; here the origin does when it allows direct gets); errors are status headers."""
        stream = self.js.streams.get(name)
        if stream is None or not stream.cfg.allow_direct:
            stream = next((s for s in self.js.streams.values() if s.cfg.mirror_direct and s.cfg.mirror is not None
                           and s.cfg.mirror["name"] == name), None)
            if stream is None:
                return False  # (nobody subscribed: no responders)
        self.direct.request(stream, b".".join(key_tokens) if key_tokens else None, reply, payload)
        return True

    # -- consumers (consumer_api.py) ---------------------------------------------------------

    def consumer(self, tokens: list, reply, payload: bytes) -> None:
        self.consumers.handle(tokens, reply, payload)
