"""Mirrors and sources in another account or JetStream domain (``external: {api, deliver}``).

The origin is not this engine's, so it is reached as nats-server reaches every origin: by
messages through the core. For each link the engine, as an internal client of its account,

* subscribes to a delivery subject under the ``deliver`` prefix (``<deliver>.M.<random>`` for a
  mirror, ``.S.`` for a source) and to a reply subject ``$JSC.R.<random>``;
* publishes a CONSUMER.CREATE request to ``<api>.CONSUMER.CREATE.<origin>`` (or the named form
  with a filter) for a direct, ack-none push consumer with flow control and 1 s heartbeats,
  starting after what the stream already has;
* stores what arrives on the delivery subject, taking the origin's sequence, delivery
  sequence, timestamp and pending count from the ``$JS.ACK`` reply subject; answers flow
  control requests; and sets the consumer up again (at most every 2 s, as nats-server) when the
  heartbeats say it missed something, when nothing arrives for 3 s, or when the create
  request goes unanswered for 5 s.

So account B mirrors account A's stream when it imports A's ``$JS.API.>`` (under a prefix),
A's delivery subjects and A's ``$JS.FC.>``; and a stream of another domain (``$JS.<domain>.API``)
is mirrored over a leaf node. What the stream then holds, and its ``Nats-Stream-Source``
headers (``<origin>:<hash of api> <sequence>``), are nats-server 2.9.10's.

Layer (README "Layers"): below ``stream``, which takes its configuration checks from here;
what a link needs of the stream it copies into is ``LinkedStream`` (``stream.Stream``).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import random
from typing import Any, Protocol

from .. import clock as server_clock
from ..routing.transform import validate_mapping
from . import errors
from .errors import ApiError
from .store import Store, StoreError
from .util import (
    compile_filter,
    dumps,
    gen_header,
    get_header,
    is_valid_subject,
    loads,
    remove_header,
    rfc3339nano,
    subjects_collide,
)

log = logging.getLogger("natserver")

SOURCE_HEADER = b"Nats-Stream-Source"  # nats-server's JSStreamSource
# jetstream_api.go JSStreamIdentity (2.15): a direct consumer's create answer names the stream's
# incarnation (stream_identity); a source's next create asks for the same one.
STREAM_IDENTITY = b"Nats-Stream-Identity"
IDENTITY_MISMATCH = 10225  # JSConsumerStreamIdentityMismatchF: that incarnation is gone
# Deliveries kept while a consumer's create awaits its answer (a flow-controlled consumer sends
# a window's worth at most before it waits for us).
EARLY_MAX = 1024
RETRY_INTERVAL = 2.0  # seconds: nats-server's sourceConsumerRetryThreshold
CREATE_TIMEOUT = 5.0  # seconds nats-server waits for a consumer create response
HEARTBEAT_NS = 1_000_000_000  # sourceHealthCheckInterval: the consumer's idle heartbeat
STALLED_NS = 3 * HEARTBEAT_NS  # nothing for this long: set the consumer up again
ACK_WAIT_NS = 22 * 3600 * 1_000_000_000  # nats-server's ack_wait for these consumers (22h)
API_PREFIX = "$JS.API"  # JSApiPrefix, replaced by the external api prefix
_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_HASH_LEN = 8  # sysHashLen
_SUFFIX_LEN = 8  # replySuffixLen
_CONTROL = b"NATS/1.0 100 "
_LAST_CONSUMER = b"Nats-Last-Consumer"
_STALLED = b"Nats-Consumer-Stalled"
_ACK_TOKENS = 9  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>


class Waker(Protocol):
    """sourcing.Sourcing as a link uses it: copy what is new."""

    def wake(self) -> None: ...


class LinkEngine(Protocol):
    """What a link needs of its stream's engine (the package's ``JetStream``)."""

    @property
    def sourcing(self) -> Waker: ...
    def send(self, subject: bytes, payload: bytes, headers: bytes | None = None,
             reply: bytes | None = None) -> None: ...
    def subscribe(self, subject: str, callback) -> Any: ...
    def unsubscribe(self, sub) -> None: ...


class LinkedStream(Protocol):
    """What a link needs of the stream it copies into (``stream.Stream``)."""

    @property
    def name(self) -> str: ...
    @property
    def store(self) -> Store: ...
    @property
    def engine(self) -> LinkEngine: ...
    def store_sourced(self, subject: bytes, hdr: bytes, msg: bytes, ts: int) -> int: ...
    # A replicated stream's leader proposes instead (None: not replicated, stored here).
    def propose_sourced(self, subject: bytes, hdr: bytes, msg: bytes, ts: int, mirror_seq: int = 0) -> bool | None: ...
    @property
    def runs_links(self) -> bool: ...  # this server runs the links (not a replicated stream's follower)


def get_hash(name: str) -> str:
    """nats-server's getHash: the first 8 bytes of SHA-256, each as one of 62 digits."""
    digest = hashlib.sha256(name.encode()).digest()
    return "".join(_DIGITS[b % len(_DIGITS)] for b in digest[:_HASH_LEN])


def sync_subject(prefix: str) -> str:
    """nats-server's syncSubject: ``prefix`` and 8 random digits."""
    n = random.getrandbits(63)
    out = []
    for _ in range(_SUFFIX_LEN):
        out.append(_DIGITS[n % len(_DIGITS)])
        n //= len(_DIGITS)
    return f"{prefix}.{''.join(out)}"


def index_name(spec: dict) -> str:
    """nats-server's iname: the origin's name, and for an external one a hash of its api."""
    ext = spec.get("external")
    return f"{spec['name']}:{get_hash(ext.get('api', ''))}" if ext is not None else spec["name"]


def check_external(cfg, streams: dict) -> None:
    """nats-server's checks of external prefixes (checkStreamCfg): the deliver prefix must be a
    subject without wildcards that does not collide under it with the subjects of the stream's
    origins in this account; the
    api prefix must be such a subject too, and not overlap ``$JS.API``."""
    deliver_prefixes, api_prefixes, origin_subjects = [], [], []
    for spec in ([cfg.mirror] if cfg.mirror else []) + list(cfg.sources or ()):
        ext = spec.get("external")
        if ext is None:
            # (2.10+: the subjects of the origins of this account, not of a same-named stream
            # where the origin is external)
            origin = streams.get(spec["name"])
            if origin is not None:
                origin_subjects += origin.cfg.subjects
            continue
        if ext.get("deliver"):
            deliver_prefixes.append(ext["deliver"])
        if ext.get("api"):
            api_prefixes.append(ext["api"])
    for prefix in deliver_prefixes:
        if not _valid_publish_subject(prefix):
            raise errors.stream_external_deliver_wildcards(prefix)
        for subject in origin_subjects:
            if subjects_collide(subject, f"{prefix}.{subject}"):
                raise errors.stream_external_deliver_overlap(prefix, subject)
    for prefix in api_prefixes:
        if not _valid_publish_subject(prefix):
            raise errors.stream_invalid_config(
                f'stream external api prefix "{prefix}" must be a valid subject without wildcards')
        if subjects_collide(prefix, API_PREFIX):
            raise errors.stream_external_api_overlap(prefix, API_PREFIX)


def _valid_publish_subject(subject: str) -> bool:
    return is_valid_subject(subject) and not any(t in ("*", ">") for t in subject.split("."))


def source_info_json(link, lag: int, now: int, external: dict | None = None) -> dict:
    """A link's StreamSourceInfo in 2.15.1's order: name, external, lag, seq (a source's
    origin sequence last taken, omitted while none), active (ns since the last contact, -1: never),
    error, filter_subject, subject_transforms."""
    out: dict = {"name": link.origin}
    if external is not None:
        out["external"] = external
    out["lag"] = lag
    if link.sseq and not link.mirror:  # (2.15.1 reports it for sources only)
        out["seq"] = link.sseq
    out["active"] = now - link.active if link.active else -1
    if link.error is not None:
        out["error"] = link.error.to_json()
    spec = link.spec
    if spec.get("filter_subject"):
        out["filter_subject"] = spec["filter_subject"]
    if spec.get("subject_transforms"):
        out["subject_transforms"] = spec["subject_transforms"]
    return out


def source_key(spec: dict) -> str:
    """stream.go composeIName: a source's index name with its filters and their destinations
    (``>`` for none, several joined by form feeds), what tells apart sources of one origin
    (2.10+): a stream refuses two with the same (10140), keeps each apart, and finds where each
    was from its messages' ``Nats-Stream-Source`` (which carries these three)."""
    return "%s %s %s" % (index_name(spec), *_filters_and_destinations(spec))


def _filters_and_destinations(spec: dict) -> tuple[str, str]:
    transforms = spec.get("subject_transforms")
    if transforms:
        return "\f".join(tr.get("src") or ">" for tr in transforms), "\f".join(tr.get("dest") or ">" for tr in transforms)
    return spec.get("filter_subject") or ">", ">"


def source_header(iname: bytes, seq: int, spec: dict, subject: bytes, ident: bytes = b"") -> bytes:
    """A sourced message's ``Nats-Stream-Source`` in 2.10+'s form (genSourceHeader): the
    origin's index name, its sequence, the filters and destinations of the source's index name
    (composeIName: ``>`` for none, several joined by form feeds), the origin subject and, when
    known, the origin's identity (2.12+: a hash of its creation time, ``stream_identity``)."""
    filters, dests = _filters_and_destinations(spec)
    out = b"%s %d %s %s %s" % (iname, seq, filters.encode(), dests.encode(), subject)
    return out + b" " + ident if ident else out


@functools.lru_cache(maxsize=64)
def stream_identity(created_ns: int) -> bytes:
    """stream.go identity(): the hash of a stream's creation time (RFC 3339 with nanoseconds),
    which tells a recreated origin from the one a source followed."""
    return get_hash(rfc3339nano(created_ns)).encode()


def source_transforms(spec: dict) -> list:
    """A mirror's or source's subject_transforms (2.10+, checked already) as
    ``[(source filter, predicate or None for everything, transform or None)]``: a message
    matching a source is taken, under its transform's subject (none: as it is)."""
    out = []
    for tr in spec.get("subject_transforms") or ():
        transform = validate_mapping(tr["src"], tr["dest"])
        out.append((tr["src"], compile_filter(tr["src"].encode()), transform))
    return out


def takes_nothing(spec: dict, mirror: bool) -> bool:
    """nats-server 2.15.1 asks the origin for a consumer whose filter_subjects are the
    transforms' sources (a mirror with one: its filter_subject); an empty one makes that
    request fail (10139, "consumer filter in FilterSubjects cannot be empty"), again and again,
    so such a link copies nothing."""
    transforms = spec.get("subject_transforms") or ()
    if mirror and len(transforms) == 1:
        return False
    return any(not tr["src"] for tr in transforms)


class OriginLink:
    """What a mirror or source link (``sourcing.SourceLink``, ``ExternalLink``) does with each
    message its origin gives it. Subclasses set ``stream``, ``origin``, ``mirror``, ``_iname``
    and ``_blocked``."""

    __slots__ = ()

    # What the subclasses hold (in their own slots)
    stream: LinkedStream
    origin: str  # the origin stream's name
    mirror: bool
    _iname: bytes  # the index name a source's Nats-Stream-Source header carries
    spec: dict  # the mirror's or source's configuration (StreamSource)
    sseq: int  # the origin sequence last taken (0: none yet)
    _blocked: str  # the store's last refusal (logged once)
    transforms: list  # source_transforms(spec)

    def transformed(self, subject: bytes) -> bytes | None:
        """The subject to store an origin message under: its transform's (stream.go: the
        first transform whose source matches), as it is when that one has no destination or
        there are none; None when transforms are set and none takes it."""
        if not self.transforms:
            return subject
        for _src, match, transform in self.transforms:
            if match is None or match(subject):
                if transform is None:
                    return subject
                return transform.apply_bytes(subject) or subject
        return None

    def identity(self) -> bytes:
        """The origin's identity for the source header (b"": not known)."""
        return b""

    def store_from_origin(self, seq: int, subject: bytes, hdr: bytes | None, data: bytes, ts: int) -> bool:
        """Store origin message ``seq``: in a mirror with its sequence and time (a gap before
        it skipped, nothing when it is there already), in a source with a new sequence and the
        ``Nats-Stream-Source`` header naming this hop (a daisy chain's replaced, as
        nats-server's). A replicated stream's leader proposes it instead (Stream.propose_sourced),
        its followers store it once committed. False when the stream's limits refuse it
        (logged once per reason), or a replicated stream's lead went: the caller asks for it
        again later, as nats-server does."""
        target = self.stream
        taken = self.transformed(subject)
        if taken is None:
            return True  # not one of the transforms' (an origin that ignored filter_subjects)
        origin_subject, subject = subject, taken
        if self.mirror:
            stored_hdr = hdr or b""
            proposed = target.propose_sourced(subject, stored_hdr, data, ts, seq)
        else:
            stored_hdr = gen_header(remove_header(hdr, SOURCE_HEADER) if hdr else None, SOURCE_HEADER,
                                    source_header(self._iname, seq, self.spec, origin_subject, self.identity()))
            proposed = target.propose_sourced(subject, stored_hdr, data, server_clock.now_ns())
        if proposed is not None:
            return proposed
        try:
            if self.mirror:
                store = target.store
                if seq > store.last_seq + 1:  # the origin has none in between
                    store.skip_to(seq - 1, ts)
                if seq > store.last_seq:
                    target.store_sourced(subject, stored_hdr, data, ts)
            else:
                target.store_sourced(subject, stored_hdr, data, server_clock.now_ns())
        except StoreError as exc:
            if self._blocked != str(exc):
                self._blocked = str(exc)  # type: ignore[misc]  # (a subclass's slot)
                log.warning("JetStream: stream '%s' can not take message %d of '%s': %s",
                            target.name, seq, self.origin, exc)
            return False
        self._blocked = ""  # type: ignore[misc]  # (a subclass's slot)
        return True


class ExternalLink(OriginLink):
    """One mirror or source whose origin is reached by messages (see the module docstring);
    the same face to ``sourcing.Sourcing`` and the stream info as ``sourcing.SourceLink``."""

    __slots__ = ("stream", "spec", "origin", "filter", "mirror", "external", "_iname", "next", "active",
                 "error", "from_new", "lag", "sseq", "dseq", "cname", "_lreq", "_sip_until",
                 "_reply_sub", "_deliver_sub", "_blocked", "transforms", "ident", "_early")

    def __init__(self, stream: LinkedStream, spec: dict, mirror: bool) -> None:
        self.stream = stream
        self.spec = spec
        self.origin = spec["name"]
        self.filter = spec.get("filter_subject", "")
        self.mirror = mirror
        self.transforms = source_transforms(spec)
        if mirror and len(self.transforms) == 1:  # (nats-server: one filter, in filter_subject)
            self.filter = self.transforms[0][0]
        # None: an origin of this account reached by messages (in a cluster: sourcing.new_link)
        self.external: dict | None = spec.get("external")
        self._iname = index_name(spec).encode()
        self.next = 0  # the next origin sequence wanted (0: from the configured start)
        self.active = 0  # server_clock.now_ns() of the last message from the consumer (0: none)
        self.error: ApiError | None = None  # the consumer create request's error
        self.from_new = False  # a purged source's restart: only what the origin gets from now on
        self.lag = 0
        self.sseq = 0  # the origin sequence last taken
        self.dseq = 0  # the consumer's delivery sequence last taken
        self.cname = ""  # the origin consumer's name ("" while none is set up)
        self._lreq = -RETRY_INTERVAL  # server_clock.monotonic() of the last create request (none yet)
        self._sip_until = 0.0  # a create request awaits its response until then (0: none)
        self._reply_sub = None  # the create request's reply subject
        self._deliver_sub = None  # the consumer's delivery subject
        self._blocked = ""  # the store's last refusal (logged once)
        self.ident = b""  # the origin's identity (STREAM_IDENTITY) its consumer's create answered
        self._early: list[tuple] = []  # deliveries that came before the create's answer (kept for it)

    def identity(self) -> bytes:
        return self.ident

    # -- reports --------------------------------------------------------------------------------

    def info_json(self, now: int) -> dict:
        """StreamSourceInfo: name, external, lag, active (-1: never heard from), error,
        subject_transforms (2.10+)."""
        return source_info_json(self, self.lag, now, dict(self.external) if self.external is not None else None)

    # -- the consumer ---------------------------------------------------------------------------

    def pump(self, now: int) -> bool:
        """Called about every second (and when anything changes): set the consumer up when
        there is none, or when it has gone quiet; never copies anything itself."""
        clock = server_clock.monotonic()
        if self._sip_until:
            if clock < self._sip_until:
                return False
            self._sip_until = 0.0  # no response: nobody answered the request
            self._cancel()
        if takes_nothing(self.spec, self.mirror):
            return False  # (its consumer could never be set up: see takes_nothing)
        if not self.stream.runs_links:
            return False  # (a replicated stream's follower: lead_changed stopped it)
        stalled = self.cname and self.active and now - self.active > STALLED_NS
        if (not self.cname or stalled) and clock - self._lreq >= RETRY_INTERVAL:
            self._setup(now, clock)
        return False

    def close(self) -> None:
        self._cancel()
        self.cname = ""

    def restart(self) -> None:
        """A replicated stream's lead came here or went: the consumer dropped, set up again at
        once by the next pump on the leader (from where its store is: ``_setup``)."""
        self.close()
        self._sip_until = 0.0
        self._lreq = -RETRY_INTERVAL
        self.dseq = self.lag = 0

    def _cancel(self) -> None:
        self._early = []
        self._unsubscribe("_reply_sub")
        self._unsubscribe("_deliver_sub")

    def _unsubscribe(self, slot: str) -> None:
        sub = getattr(self, slot)
        if sub is not None:
            setattr(self, slot, None)
            try:
                self.stream.engine.unsubscribe(sub)
            except Exception:  # noqa: BLE001 (the server may be half torn down already)
                log.debug("source subscription already gone")

    def _retry(self) -> None:
        """Drop the consumer; the next pump after RETRY_INTERVAL sets another one up."""
        self._cancel()
        self.cname = ""
        self._sip_until = 0.0
        self.stream.engine.sourcing.wake()

    def _setup(self, now: int, clock: float) -> None:
        self._cancel()
        self.cname = ""
        self._lreq = clock
        engine = self.stream.engine
        store = self.stream.store
        external = self.external or {}
        deliver_prefix = external.get("deliver", "")
        kind = "M" if self.mirror else "S"
        if deliver_prefix:
            deliver = f"{deliver_prefix}.{kind}.".replace("..", ".") + sync_subject("")[1:]
        else:
            deliver = sync_subject(f"$JS.{kind}")
        config: dict = {"deliver_subject": deliver}
        if self.mirror:
            self.sseq = store.last_seq
            start = store.last_seq + 1
            if store.last_seq == 0:  # the first time: the configured start
                start = self.spec.get("opt_start_seq", 0)
                if not start and self.spec.get("opt_start_time"):
                    config.update(deliver_policy="by_start_time", opt_start_time=self.spec["opt_start_time"])
            if start:
                config.update(deliver_policy="by_start_sequence", opt_start_seq=start)
            elif "deliver_policy" not in config:
                config["deliver_policy"] = "all"
        else:
            seq = self.next
            if seq > 1:
                config.update(deliver_policy="by_start_sequence", opt_start_seq=seq)
            elif self.spec.get("opt_start_seq"):
                config.update(deliver_policy="by_start_sequence", opt_start_seq=self.spec["opt_start_seq"])
            elif self.spec.get("opt_start_time"):
                config.update(deliver_policy="by_start_time", opt_start_time=self.spec["opt_start_time"])
            elif self.from_new:
                config["deliver_policy"] = "new"
        config.update(ack_policy="none", ack_wait=ACK_WAIT_NS, max_deliver=1, idle_heartbeat=HEARTBEAT_NS,
                      flow_control=True, direct=True)
        if self.transforms and not self.filter:
            config["filter_subjects"] = [src for src, _, _ in self.transforms]
        if self.filter:
            config["filter_subject"] = self.filter
            name = f"{'mirror' if self.mirror else 'src'}-{get_hash(sync_subject('n'))}"
            if not self.mirror:  # (nats-server names a mirror's consumer only in the subject)
                config["name"] = name
            subject = f"{API_PREFIX}.CONSUMER.CREATE.{self.origin}.{name}.{self.filter}"
        else:
            subject = f"{API_PREFIX}.CONSUMER.CREATE.{self.origin}"
        if self.external is not None:
            subject = subject.replace(API_PREFIX, external.get("api", ""), 1).replace("..", ".")
        reply = sync_subject("$JSC.R")
        # Both subscriptions first: an origin may deliver before it answers.
        self._reply_sub = engine.subscribe(reply, self._on_create)
        self._deliver_sub = engine.subscribe(deliver, self._on_msg)
        self._sip_until = clock + CREATE_TIMEOUT
        self.dseq = 0
        # A source asks for the origin it followed (stream.go trySetupSourceConsumer): a recreated
        # one answers 10225 and the source starts over (_on_create).
        headers = gen_header(None, STREAM_IDENTITY, self.ident) if self.ident and not self.mirror else None
        engine.send(subject.encode(), dumps({"stream_name": self.origin, "config": config}), headers,
                    reply=reply.encode())

    def _on_create(self, subject: bytes, reply, hdr, payload: bytes) -> None:
        self._unsubscribe("_reply_sub")
        self._sip_until = 0.0
        try:
            resp = loads(payload)
            error = resp.get("error")
            if error is None and not resp.get("name"):
                error = {"code": 500, "err_code": 10029 if self.mirror else 10045, "description": "no consumer info"}
        except ValueError:
            error = errors.invalid_json().to_json()
        if error is not None and error.get("err_code") == IDENTITY_MISMATCH and not self.mirror:
            # stream.go: the origin was recreated; the source starts over from its beginning.
            log.warning("JetStream source stream %r for stream '%s' was recreated, resetting source state",
                        self.origin, self.stream.name)
            self.ident = b""
            self.next = self.sseq = self.dseq = 0
            self._retry()
            return
        if error is not None:
            self.error = ApiError(error.get("code", 0), error.get("err_code", 0), error.get("description", ""))
            log.warning("JetStream error response for create %s consumer: %s", "mirror" if self.mirror else "source",
                        self.error.description)
            self._retry()
            return
        self.error = None
        self.ident = get_header(STREAM_IDENTITY, hdr) if hdr else b""
        self.active = server_clock.now_ns()  # nats-server counts from here when it looks for a stall
        if self.cname == resp["name"]:
            return  # delivering already (the origin delivered before it answered)
        self.cname = resp["name"]
        if self.mirror:
            delivered = int((resp.get("delivered") or {}).get("stream_seq", 0))
            store = self.stream.store
            if delivered > store.last_seq:  # the origin has no longer what we would want next
                if self.stream.propose_sourced(b"", b"", b"", 0, delivered) is None:
                    store.skip_to(delivered, server_clock.now_ns())
            self.sseq = max(delivered, store.last_seq)
        early, self._early = self._early, []
        for message in early:
            self._on_msg(*message)

    def _on_msg(self, subject: bytes, reply, hdr, payload: bytes) -> None:
        if hdr and not payload and hdr.startswith(_CONTROL):
            self._on_control(reply, hdr)
            return
        tokens = reply.split(b".") if reply else []
        if len(tokens) != _ACK_TOKENS or tokens[0] != b"$JS" or tokens[1] != b"ACK":
            return
        cname = tokens[3].decode("utf-8", "replace")
        if cname != self.cname:
            if self.cname or not self._sip_until:
                return  # an old consumer's
            # Delivering before its create's answer came back (in a cluster the answer takes the
            # system account's route, the messages the account's): kept until the answer says
            # which origin it is (its identity goes into the source header), as nats-server
            # subscribes to the deliveries only once it has the answer. Beyond EARLY_MAX, the
            # sequence check after the answer sets the consumer up again.
            if len(self._early) < EARLY_MAX:
                self._early.append((bytes(subject), bytes(reply), bytes(hdr) if hdr else None, bytes(payload)))
            return
        try:
            dc, sseq, dseq, ts, pending = (int(t) for t in tokens[4:])
        except ValueError:
            return
        if dc > 1:
            return
        self.active = server_clock.now_ns()
        if self.mirror:
            if sseq <= self.sseq:
                return  # had it already
            if sseq != self.sseq + 1 and self.dseq and dseq != self.dseq + 1:
                self._retry()  # something went missing on the way
                return
        elif dseq != self.dseq + 1 and self.dseq:
            if dseq <= self.dseq:
                return
            self._retry()
            return
        self.lag = pending - 1 if pending else 0
        if not self.store_from_origin(sseq, subject, hdr, payload, ts):
            self.next = sseq  # refused by the stream's limits: asked for again from here
            self._retry()
            return
        self.sseq, self.dseq = sseq, dseq
        self.next = sseq + 1

    def _on_control(self, reply, hdr: bytes) -> None:
        """A flow control request (answered) or an idle heartbeat (checked against what we
        have: a delivery sequence we did not see means a retry)."""
        if not self.cname and not self._sip_until:
            return
        self.active = server_clock.now_ns()
        engine = self.stream.engine
        if reply:
            engine.send(reply, b"")
            return
        last = get_header(_LAST_CONSUMER, hdr)
        if last.isdigit() and int(last) > 0 and int(last) != self.dseq:
            if not self.mirror:
                self.next = self.sseq + 1
            self._retry()
            return
        stalled = get_header(_STALLED, hdr)
        if stalled:
            engine.send(stalled, b"")
