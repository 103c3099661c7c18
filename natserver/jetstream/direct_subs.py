"""Direct gets in a cluster: which servers answer ``$JS.API.DIRECT.GET.<stream>`` (issue #32).

nats-server 2.15.1 (stream.go subscribeToDirect, subscribeToMirrorDirect; jetstream_cluster.go
monitorStream) has every server running a stream with ``allow_direct`` answer its direct gets,
in one queue group (``_sys_``) per subject, so one of them answers each request: an R1 stream's
server, a replicated stream's leader, and its followers once they are current (checked every
DIRECT_ACCESS_CHECK seconds, or within DIRECT_SYNC_THRESHOLD percent of the commit index). A
follower keeps its subscriptions once made (a leader change does not take them). A mirror with
``mirror_direct`` joins its origin's group the same way. So a KV get is answered with the
leader's server down, and by the client's own server when it holds a replica (a route sends a
queue group's message to a local member first).
"""

from __future__ import annotations

from typing import Any

# stream.go dgetGroup (sysGroup): the direct-get subscriptions' queue group.
DIRECT_GET_GROUP = "_sys_"
# jetstream_api.go JSDirectMsgGetT and JSDirectGetLastBySubjectT (the subject past the name).
DIRECT_SUBJECTS = ("$JS.API.DIRECT.GET.{name}", "$JS.API.DIRECT.GET.{name}.>")
# jetstream_cluster.go monitorStream: a follower checks every 2 s whether it is current enough
# to join the direct gets' queue group (syncThreshold: 90% of the commit index applied).
DIRECT_ACCESS_CHECK = 2.0
DIRECT_SYNC_THRESHOLD = 90.0


def served_names(cfg: Any) -> tuple[str, ...]:
    """The streams whose direct gets a server running a stream of ``cfg`` answers."""
    names = []
    if cfg.allow_direct:
        names.append(cfg.name)
    if cfg.mirror_direct and cfg.mirror is not None and cfg.mirror.get("name"):
        names.append(cfg.mirror["name"])
    return tuple(names)


class DirectSubscriptions:
    """This server's direct-get subscriptions, by account and stream."""

    def __init__(self) -> None:
        # (account, stream) -> (the names subscribed for, the engine, its subscriptions)
        self._subs: dict[tuple[str, str], tuple[tuple[str, ...], Any, list]] = {}

    def serving(self, account: str, stream: str) -> tuple[str, ...]:
        """The names ``stream`` answers direct gets of here (none: not subscribed)."""
        held = self._subs.get((account, stream))
        return held[0] if held is not None else ()

    def answered(self, account: str, stream: str) -> int:
        """How many direct gets this server's subscriptions for ``stream`` took."""
        held = self._subs.get((account, stream))
        return sum(sub.delivered for sub in held[2]) if held is not None else 0

    def sync(self, engine: Any, stream: Any, serve: bool) -> None:
        """Subscribe for what ``stream``'s config asks (when ``serve``), or unsubscribe."""
        key = (engine.account_name or "", stream.name)
        names = served_names(stream.cfg) if serve else ()
        held = self._subs.get(key)
        if held is not None and held[0] == names:
            return
        self.drop(key[0], key[1])
        if not names:
            return
        def answer(subject, reply, hdr, payload, engine=engine) -> bool:
            return engine.api.handle(subject, reply, hdr, payload)

        subs = [engine.subscribe(template.format(name=name), answer, DIRECT_GET_GROUP)
                for name in names for template in DIRECT_SUBJECTS]
        self._subs[key] = (names, engine, subs)

    def drop(self, account: str, stream: str) -> None:
        held = self._subs.pop((account, stream), None)
        if held is not None:
            for sub in held[2]:
                held[1].unsubscribe(sub)

    def clear(self) -> None:
        for account, stream in list(self._subs):
            self.drop(account, stream)
