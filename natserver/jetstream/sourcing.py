"""Mirrors and sources: streams kept in sync with other streams of the same server.

nats-server runs an internal consumer on the origin stream for each mirror or source; here the
engine reads the origin's store directly (the same process), so nothing goes over the wire,
but what a client sees is nats-server's:

* a **mirror** holds the origin's messages with the same sequences, subjects, headers and
  timestamps (gaps where the origin has none, or where ``filter_subject`` leaves them out);
  it resumes after its own last sequence, so a restart leaves no gap and copies nothing twice.
* a **source** appends the origin's messages with new sequences and the header
  ``Nats-Stream-Source: <origin> <origin sequence> <filters> <destinations> <origin subject>``
  (nats-server 2.10+'s form, ``external.source_header``); at start the
  position of each source is found again from the last such header in the stream, as
  nats-server does, so it is exactly as durable as the messages themselves.
* an origin that does not exist (yet) is retried: the link reports ``active: -1`` and the
  error ``stream not found``, and starts copying once the stream is created.
* an origin in another account or domain (``external``) is another engine's or server's:
  ``external.ExternalLink`` reaches it by messages, with an internal consumer, as nats-server.
* a replicated stream's links run on its group's leader only (``lead_changed``), which
  proposes what they bring (``Stream.propose_sourced``); a new leader resumes them from its store.

A pump task copies whatever is new whenever a followed stream stores a message, at most
``BATCH`` messages per link before it lets other tasks run, and refreshes ``active`` every
``HEARTBEAT`` seconds as nats-server's idle heartbeats do.

Layer (README "Layers"): the top of the state tier, beside ``delivery``; what it needs of the
engine (the package's ``JetStream``) is ``SourcingHost``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

import trio

from .. import clock
from . import errors
from .consumer import parse_time
from .external import (
    SOURCE_HEADER,
    ExternalLink,
    OriginLink,
    index_name,
    source_info_json,
    source_key,
    source_transforms,
    stream_identity,
    takes_nothing,
)
from .util import get_header

if TYPE_CHECKING:
    from .stream import Stream

log = logging.getLogger("natserver")

BATCH = 1024  # messages copied per link in one go (then the other tasks get a turn)
HEARTBEAT = 1.0  # seconds: nats-server's source consumers send idle heartbeats every second


class SourceLink(OriginLink):
    """One mirror or source of a stream: where it is in the origin, and how it is doing."""

    __slots__ = ("stream", "spec", "origin", "filter", "next", "active", "error", "mirror", "_iname",
                 "_blocked", "from_new", "transforms", "_filters", "sseq")

    stream: Stream  # a same-server link reads its origin through its stream's engine

    def __init__(self, stream: "Stream", spec: dict, mirror: bool) -> None:
        self.stream = stream
        self.spec = spec
        self.origin = spec["name"]
        self.filter = spec.get("filter_subject", "").encode()
        self.mirror = mirror
        self.next = 0  # the next origin sequence to look at (0: not started yet)
        self.sseq = 0  # the origin sequence last taken (the info's "seq"; 0: none yet)
        self.active = 0  # clock.now_ns() of the last contact with the origin (0: none)
        self.error = None  # ApiError while the origin can not be read
        self._iname = self.origin.encode()  # nats-server's index name (no external prefix)
        self._blocked = ""  # the store's last refusal (logged once)
        self.from_new = False  # start after the origin's last message (a purged stream's restart)
        self.transforms = source_transforms(spec)  # 2.10+: several filters, each with a transform
        # The filters read from the origin: the transforms' sources, or the one filter_subject.
        self._filters = [src.encode() for src, _, _ in self.transforms] or [self.filter]

    def info_json(self, now: int) -> dict:
        """StreamSourceInfo: name, lag, active (ns since the last contact, -1: never), error."""
        origin = self.stream.engine.streams.get(self.origin)
        lag = 0
        if origin is not None and self.next:
            lag = max(origin.store.last_seq - (self.next - 1), 0)
        return source_info_json(self, lag, now)

    def identity(self) -> bytes:
        origin = self.stream.engine.streams.get(self.origin)
        return stream_identity(origin.created) if origin is not None else b""

    def start_seq(self, origin: "Stream") -> int:
        """Where a new link starts in the origin: opt_start_seq, else the first message at or
        after opt_start_time, else the origin's first message."""
        store = origin.store
        if self.spec.get("opt_start_seq"):
            return self.spec["opt_start_seq"]
        when = self.spec.get("opt_start_time")
        if when:
            try:
                at = parse_time(when)
            except ValueError:
                at = 0
            seq = store.next_seq(b"", store.first_seq)
            while seq:
                msg = store.load_msg(seq)
                if msg is not None and msg.ts >= at:
                    return seq
                seq = store.next_seq(b"", seq + 1)
            return store.last_seq + 1
        return max(store.first_seq, 1)

    def pump(self, now: int) -> bool:
        """Copy up to BATCH new messages; True when there may be more."""
        engine = self.stream.engine
        origin = engine.streams.get(self.origin)
        if origin is None:
            self.error = errors.stream_not_found()
            self.active = 0
            return False
        if takes_nothing(self.spec, self.mirror):
            return False  # (as nats-server's link, whose consumer is refused: see takes_nothing)
        self.error = None
        self.active = now
        target = self.stream
        tstore = target.store
        if tstore.closed or origin.store.closed:
            return False
        ostore = origin.store
        if not self.next:
            self.next = ostore.last_seq + 1 if self.from_new else self.start_seq(origin)
            if self.mirror and tstore.last_seq:
                self.next = max(self.next, tstore.last_seq + 1)
                self.sseq = tstore.last_seq
        if self.next < ostore.first_seq:
            self.next = ostore.first_seq
        copied = 0
        filters = self._filters
        # Each filter's next match (several: the earliest is taken, and only its filter looked
        # up again; the transforms' sources do not overlap).
        nexts = [ostore.next_seq(f, self.next) for f in filters] if len(filters) > 1 else None
        while copied < BATCH:
            if nexts is None:
                seq = ostore.next_seq(filters[0], self.next)
            else:
                for i, candidate in enumerate(nexts):
                    if candidate and candidate < self.next:
                        nexts[i] = ostore.next_seq(filters[i], self.next)
                seq = min((c for c in nexts if c), default=0)
            if not seq:
                self.next = max(self.next, ostore.last_seq + 1)
                return False
            msg = ostore.load_msg(seq)
            if msg is None:
                self.next = seq + 1
                continue
            if self.mirror and seq <= tstore.last_seq:  # already there (the origin was recreated)
                self.next = seq + 1
                continue
            if not self.store_from_origin(seq, msg.subject, msg.hdr, msg.data, msg.ts):
                return False  # refused by the stream's limits (discard new): again later
            self.next = seq + 1
            self.sseq = seq
            copied += 1
        return True


def new_link(stream: "Stream", spec: dict, mirror: bool):
    """A link to an origin of this engine (read directly), or to an external one (by messages);
    in a JetStream cluster every link goes by messages (the origin may run on another server,
    or move), as nats-server's do: a direct consumer made by the origin's server."""
    if "external" in spec or stream.engine.origins_by_messages:
        return ExternalLink(stream, spec, mirror)
    return SourceLink(stream, spec, mirror)


def recover_source_positions(stream: "Stream", links: list) -> None:
    """Each source's next origin sequence from the last ``Nats-Stream-Source`` header in the
    stream (scanning backwards until every source is found)."""
    wanted = {source_key(link.spec).encode(): link for link in links if not link.mirror and not link.next}
    by_origin: dict = {}  # (a header without filters, as before 2.10: its origin's one source)
    for link in wanted.values():
        by_origin.setdefault(link._iname, []).append(link)
    store = stream.store
    if not store.msgs and store.last_seq and store.last_ts:
        # (a stream that never stored anything, its first_seq aside, has no last time: as
        # nats-server's check of LastTime, its sources start from the beginning)
        # Emptied (purged, expired): nothing tells where the sources were. nats-server then
        # takes only what the origins get from now on, rather than everything again.
        for link in wanted.values():
            link.from_new = True
        return
    seq = store.last_seq
    while wanted and seq >= store.first_seq and seq > 0:
        msg = store.load_msg(seq)
        seq -= 1
        if msg is None or not msg.hdr:
            continue
        value = get_header(SOURCE_HEADER, msg.hdr)
        if not value:
            continue
        parts = value.split()
        if len(parts) < 2 or not parts[1].isdigit():
            continue
        if len(parts) >= 4:
            link = wanted.pop(b"%s %s %s" % (parts[0], parts[2], parts[3]), None)
        else:
            candidates = by_origin.get(parts[0], ())
            link = wanted.pop(source_key(candidates[0].spec).encode(), None) if len(candidates) == 1 else None
        if link is not None:
            link.sseq = int(parts[1])
            link.next = link.sseq + 1


class SourcingHost(Protocol):
    """What mirrors and sources need of the engine (``JetStream``): its streams (origins and
    targets alike) and the server (its task nursery)."""

    @property
    def streams(self) -> dict[str, Stream]: ...
    @property
    def server(self) -> Any: ...


class Sourcing:
    """Every stream's links, and the task that keeps them copying."""

    def __init__(self, engine: SourcingHost) -> None:
        self.engine = engine
        self._wake = trio.Event()

    def wake(self) -> None:
        if not self._wake.is_set():
            self._wake.set()

    def attach(self, stream: "Stream", recovering: bool = False) -> None:
        """(Re)build a stream's links from its configuration; a source that stays keeps its
        position. nats-server indexes sources by origin, filters and transforms (composeIName:
        several of one origin are kept apart); one whose filter changed goes on from where it
        was when it is its origin's only source before and after."""
        cfg = stream.cfg
        old = {link._iname: link for link in stream.links}
        links: list = []
        if cfg.mirror is not None:
            keep = stream.links[0] if stream.links and stream.links[0].mirror else None
            links.append(keep or new_link(stream, cfg.mirror, True))
        else:
            old_keys = {source_key(link.spec): link for link in stream.links}
            origins = [index_name(spec) for spec in cfg.sources or []]
            by_name: dict = {}
            for spec in cfg.sources or []:
                iname = index_name(spec).encode()
                link = old_keys.get(source_key(spec))
                if link is None and origins.count(iname.decode()) == 1 and sum(
                        1 for other in stream.links if other._iname == iname) == 1:
                    link = old.get(iname)
                if link is None or link.spec != spec:
                    fresh = new_link(stream, spec, False)
                    # A changed filter goes on from where it was; changed subject_transforms
                    # make another source for nats-server 2.10+ (its index name has them),
                    # which starts over.
                    if link is not None and link.spec.get("subject_transforms") != spec.get("subject_transforms"):
                        link = None
                    if link is not None:
                        fresh.next, fresh.active, fresh.error = link.next, link.active, link.error
                    link = fresh
                by_name[source_key(spec)] = link
            links = list(by_name.values())
        for link in stream.links:
            if link not in links and isinstance(link, ExternalLink):
                link.close()  # its consumer is dropped (and left to the origin's inactive threshold)
        stream.links = links
        for link in links:  # nats-server knows at once when a kept link's origin is missing
            # (a new link's error shows once its first try failed, as 2.15.1's once its
            # consumer's create did: not in the answer to the create or update that added it)
            if isinstance(link, SourceLink) and link in old.values() and link.origin not in self.engine.streams:
                link.error, link.active = errors.stream_not_found(), 0
        if recovering:
            recover_source_positions(stream, links)
        self.refresh_followed()
        self.wake()

    def lead_changed(self, stream: "Stream", leading: bool) -> None:
        """A replicated stream's lead came here (``leading``) or went (stream.go setLeader):
        its links' consumers are dropped; on the leader they are set up again from where the
        stream is, a mirror after its last sequence, each source after the last message its
        header names (what an earlier leader's link took is in the stream, applied)."""
        for link in stream.links:
            if isinstance(link, ExternalLink):
                link.restart()
            if leading and not link.mirror:
                link.next = link.sseq = 0
                link.from_new = False
        if leading:
            recover_source_positions(stream, stream.links)
        self.wake()

    def detach(self, stream: "Stream") -> None:
        for link in stream.links:
            if isinstance(link, ExternalLink):
                link.close()
        stream.links = []
        self.refresh_followed()

    def refresh_followed(self) -> None:
        streams = self.engine.streams
        followed = {link.origin for s in streams.values() for link in s.links if isinstance(link, SourceLink)}
        for s in streams.values():
            s.followed = s.name in followed
        if followed:
            self.wake()

    def pump_round(self) -> bool:
        now = clock.now_ns()
        more = False
        for stream in list(self.engine.streams.values()):
            for link in stream.links:
                try:
                    if link.pump(now):
                        more = True
                except Exception:  # never take the engine down; the next round retries
                    log.exception("JetStream: copying '%s' into '%s' failed", link.origin, stream.name)
        return more

    async def run(self) -> None:
        server = self.engine.server
        while True:
            with trio.move_on_after(HEARTBEAT):
                await self._wake.wait()
            self._wake = trio.Event()
            more = True
            while more:
                more = self.pump_round()
                server.flush_touched()  # republished messages
                await trio.sleep(0)
