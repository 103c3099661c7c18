"""The system account, as nats-server 2.15.1 has it: ``$SYS`` events and requests.

Every server has a system account (``$SYS``, or ``system_account``, or the operator JWT's)
unless ``no_system_account`` is set. Users of that account (``accounts { SYS { users [...] } }``
with ``system_account: SYS``) see, in its subject space:

* **advisories**: ``$SYS.ACCOUNT.<acc>.CONNECT`` / ``.DISCONNECT`` when a client of an account
  other than ``$G`` comes and goes, ``$SYS.ACCOUNT.<acc>.SERVER.CONNS`` (and the older
  ``$SYS.SERVER.ACCOUNT.<acc>.CONNS``) with the account's connection counts, and
  ``$SYS.SERVER.<id>.STATSZ`` every few seconds (250 ms at first, doubling up to 30 s) while
  someone listens;
* **requests** (the reply is JSON ``{"server": {...}, "data": {...}}``, as monitoring):
  ``$SYS.REQ.SERVER.PING`` and ``$SYS.REQ.SERVER.PING.<KIND>`` (every server answers: what
  ``nats server list`` sends), ``$SYS.REQ.SERVER.<id>.<KIND>`` for ``STATSZ``, ``VARZ``,
  ``CONNZ``, ``SUBSZ``, ``ROUTEZ``, ``GATEWAYZ``, ``LEAFZ``, ``ACCOUNTZ``, ``JSZ``, ``HEALTHZ``,
  2.15.1's ``RAFTZ``, ``IPQUEUESZ``, ``EXPVARZ``, ``PROFILEZ`` (what natserver has of Go's
  runtime: no Raft groups, no goroutine queues, the command line, no profiles) and ``IDZ``
  (the server's name, host and id, unwrapped); ``$SYS.REQ.SERVER.<id>.KICK``, ``.LDM`` and
  ``.RELOAD`` (disconnect a client, tell one the server goes away, reload the configuration);
  ``$SYS.REQ.ACCOUNT.<acc>.<KIND>`` for ``CONNZ``, ``SUBSZ``, ``LEAFZ``, ``JSZ``, ``INFO``,
  ``STATZ``, and ``$SYS.REQ.ACCOUNT.PING.STATZ``; ``$SYS.REQ.USER.INFO`` (the requesting
  system user, its account and permissions). The request's JSON body holds the endpoint's
  options (``{"subscriptions": true}`` for CONNZ...), as in nats-server. Every server block
  carries 2.15.1's ``feature_flags`` and capability ``flags``.

The data comes from the core's monitoring code (natserver.server.monitor), run without its
HTTP listener. The core only knows this package as a subsystem (natserver.app) and as an
object in ``server.connection_observers``.
"""

from __future__ import annotations

import logging
import secrets
import sys
import urllib.parse

import orjson
import trio

from .. import clock
from ..protocol import const
from ..routing.accounts import GLOBAL_ACCOUNT, SYSTEM_ACCOUNT, system_account_name
from ..server.monitor import (
    CAPABILITY_JETSTREAM,
    FEATURE_FLAGS,
    BadRequest,
    Monitor,
    Query,
    account_name_tag,
    go_time,
    slow_consumer_stats,
    stale_connection_stats,
)

__all__ = ["SystemAccount", "enable_system", "check_options"]

log = logging.getLogger("natserver")

# events.go lameDuckEventSubj: a server entering lame duck mode says so.
LAME_DUCK_EVENT = "$SYS.SERVER.{id}.LAMEDUCK"
# events.go: the first STATSZ heartbeat comes soon, then the interval doubles up to 30 s.
STATSZ_FIRST_INTERVAL = 0.25
STATSZ_INTERVAL = 30.0
# natserver: how long after a new route registers its STATSZ goes out (the remote's interest in
# it arrives right after the route's own registration).
ROUTE_ANNOUNCE_DELAY = 0.05
ACCOUNT_TRAFFIC_INTERVAL = 1.0  # seconds an account's summed message counts are reused
CONNECT_TYPE = "io.nats.server.advisory.v1.client_connect"
DISCONNECT_TYPE = "io.nats.server.advisory.v1.client_disconnect"
ACCOUNT_CONNS_TYPE = "io.nats.server.advisory.v1.account_connections"
SERVER_KINDS = ("STATSZ", "VARZ", "CONNZ", "SUBSZ", "ROUTEZ", "GATEWAYZ", "LEAFZ", "ACCOUNTZ", "JSZ", "HEALTHZ",
                "PROFILEZ", "EXPVARZ", "IPQUEUESZ", "RAFTZ")
# Requests only to this server, by id ($SYS.REQ.SERVER.<id>.<KIND>): disconnect a client,
# tell one that the server is going away, reload the configuration file.
CONTROL_KINDS = ("KICK", "LDM", "RELOAD")
ACCOUNT_KINDS = ("CONNZ", "SUBSZ", "LEAFZ", "JSZ", "INFO")
# Request JSON option names -> the monitoring endpoints' query parameters (monitor.go *Options).
_OPTION_NAMES = {"subscriptions": "subs", "account": "acc", "consumer": "consumers", "include_unused": "unused"}
_NUID_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def check_options(options) -> None:
    """server.go: a system_account that names no account stops the server."""
    name = options.system_account
    if name and name != SYSTEM_ACCOUNT and not options.operator_mode:
        if all(config.name != name for config in options.accounts):
            raise ValueError("error resolving system account: account missing")


def _event_id() -> str:
    """A 22-character id like nats-server's NUIDs (random here: ids only need to differ)."""
    return "".join(secrets.choice(_NUID_ALPHABET) for _ in range(22))


def _data_stats(msgs: int, size: int) -> dict:
    return {"msgs": msgs, "bytes": size}


class _SystemMonitor(Monitor):
    """The monitoring code, without its HTTP listener: requests here are not HTTP requests,
    so they are not counted, and /varz's counts are the HTTP monitor's."""

    def _count(self, path: str) -> None:
        pass


class SystemAccount:
    """The running system account (``server.system``): publishes events, answers requests."""

    def __init__(self, server, name: str) -> None:
        self.server = server
        self.name = name
        self.account = server.accounts.by_name.get(name)
        if self.account is None:  # $SYS with no configured users: it exists all the same
            self.account = server.accounts.add_empty(name)
        self.monitor = _SystemMonitor(server, "")
        if server.monitor is not None:
            self.monitor.http_req_stats = server.monitor.http_req_stats
        self.seq = 0
        self.nursery: trio.Nursery | None = None  # (enable_system's) where deferred answers run
        self._subs: list = []
        self._global_clients: set = set()  # the global account's announced clients
        self._traffic: dict = {}  # account name -> (when, sent, received): account_stat's sums
        # account name -> (sublist, genid, whether its CONNS subjects are listened to): every
        # connect and close asks, and the answer changes only with the subscriptions
        self._conns_listened: dict = {}

    # -- publishing ---------------------------------------------------------------------------

    def server_info(self) -> dict:
        """events.go ServerInfo, with the next sequence number."""
        server = self.server
        self.seq += 1
        info = {"name": server.server_name, "host": server.options.host, "id": server.server_id}
        options = server.options
        if options.cluster_name and server.cluster is not None:
            info["cluster"] = options.cluster_name
        elif options.leafnode_remotes and not options.cluster_port:
            # server.go NewServer (leafNoCluster): a leaf node without a cluster is named after
            # the server.
            info["cluster"] = server.server_name
        if server.options.jetstream and server.options.jetstream_domain:
            info["domain"] = server.options.jetstream_domain
        # (in lame duck mode nats-server has shut its JetStream down: not placed on any more)
        jetstream = server.jetstream is not None and not server.lame_duck
        info["ver"] = const.SERVER_VERSION
        if options.server_tags:  # (placement's tags: the meta leader reads them here)
            info["tags"] = [str(tag).lower() for tag in options.server_tags]
        info.update({"feature_flags": dict(FEATURE_FLAGS), "jetstream": jetstream,
                     "flags": CAPABILITY_JETSTREAM if jetstream else 0, "seq": self.seq, "time": go_time(clock.now())})
        return info

    def server_id(self) -> dict:
        """events.go ServerID: what $SYS.REQ.SERVER.PING.IDZ answers."""
        return {"name": self.server.server_name, "host": self.server.options.host, "id": self.server.server_id}

    def _listened(self, subject: str) -> bool:
        result = self.account.sublist.match(subject.encode())
        return bool(result.psubs or result.qsubs)

    def send(self, subject: str, message: dict, reply: bytes | None = None) -> None:
        self.account.publish(subject.encode(), reply, None, orjson.dumps(message))
        self.server.flush_touched()

    def lame_duck_event(self) -> None:
        """events.go sendLDMShutdownEventLocked (a Server.lame_duck_hooks entry): the server's
        ServerInfo on ``$SYS.SERVER.<id>.LAMEDUCK``; a JetStream meta leader stops placing
        assets on it (remoteServerShutdown marks it offline)."""
        self.send(LAME_DUCK_EVENT.format(id=self.server.server_id), self.server_info())

    # -- connection events (server.connection_observers) ---------------------------------------

    def _client_info(self, client, closing: bool) -> dict:
        account = client.account.name if client.account is not None else GLOBAL_ACCOUNT
        info: dict = {"start": go_time(client.start), "host": client.ip, "id": client.cid, "acc": account}
        for key, value in (("user", client.user), ("name", client.name), ("lang", client.lang), ("ver", client.version)):
            if value:
                info[key] = value
        if closing and client.rtt:
            info["rtt"] = int(client.rtt * 1e9)
        if closing and client.stop:
            info["stop"] = go_time(client.stop)
        info["name_tag"] = account_name_tag(client.account or self.server.accounts.global_account)
        info["kind"] = "Client"
        info["client_type"] = "nats"
        return info

    def client_connected(self, client) -> None:
        account = client.account or self.server.accounts.global_account
        if account.name == GLOBAL_ACCOUNT:
            self._global_clients.add(client)
        self._account_conns(account)
        if account.name == GLOBAL_ACCOUNT:
            return  # events.go: the global account's clients get connection counts only
        subject = f"$SYS.ACCOUNT.{account.name}.CONNECT"
        if self._listened(subject):
            self.send(subject, {"type": CONNECT_TYPE, "id": _event_id(), "timestamp": go_time(clock.now()),
                                "server": self.server_info(), "client": self._client_info(client, False)})

    def client_closed(self, client) -> None:
        if not client.announced:
            return
        account = client.account or self.server.accounts.global_account
        self._global_clients.discard(client)
        self._account_conns(account)
        if account.name == GLOBAL_ACCOUNT:
            return
        subject = f"$SYS.ACCOUNT.{account.name}.DISCONNECT"
        if self._listened(subject):
            self.send(subject, {
                "type": DISCONNECT_TYPE, "id": _event_id(), "timestamp": go_time(client.stop or clock.now()),
                "server": self.server_info(), "client": self._client_info(client, True),
                "sent": _data_stats(client.in_msgs, client.in_bytes),
                "received": _data_stats(client.out_msgs, client.out_bytes),
                "reason": client.close_reason,
            })

    def account_stat(self, account) -> dict:
        """events.go AccountStat for one account: its clients and what they moved. The message
        counts are summed over the account's clients at most once a second (a burst of
        connections must not cost a pass over every client each)."""
        if account is self.server.accounts.global_account:  # (clients without a user are in no set)
            clients = self._global_clients
        else:
            clients = account.clients
        conns = len(clients)  # (a closing client has left the set before the observers hear of it)
        now = clock.monotonic()
        cached = self._traffic.get(account.name)
        if cached is None or now - cached[0] >= ACCOUNT_TRAFFIC_INTERVAL:
            live = [c for c in clients if not c.closed]
            cached = (now, _data_stats(sum(c.out_msgs for c in live), sum(c.out_bytes for c in live)),
                      _data_stats(sum(c.in_msgs for c in live), sum(c.in_bytes for c in live)))
            self._traffic[account.name] = cached
        sent, received = dict(cached[1]), dict(cached[2])
        cluster = self.server.cluster
        traffic = cluster.account_traffic.get(account.name.encode()) if cluster is not None else None
        # Per kind: no gateways in natserver; routes and leaf nodes as natserver.cluster counted
        # them, part of the totals too (as accounts.go stats count them).
        for stats, routes, leafs in ((sent, "routes_out", "leafs_out"), (received, "routes_in", "leafs_in")):
            by_route, by_leaf = (getattr(traffic, routes), getattr(traffic, leafs)) if traffic else ([0, 0], [0, 0])
            stats["msgs"] += by_route[0] + by_leaf[0]
            stats["bytes"] += by_route[1] + by_leaf[1]
            stats["gateways"] = _data_stats(0, 0)
            stats["routes"] = _data_stats(*by_route)
            stats["leafs"] = _data_stats(*by_leaf)
        return {"acc": account.name, "name": account_name_tag(account), "conns": conns, "leafnodes": 0,
                "total_conns": conns, "num_subscriptions": account.sublist.count, "sent": sent, "received": received,
                "slow_consumers": 0}

    def _account_conns(self, account) -> None:
        sublist = self.account.sublist
        known = self._conns_listened.get(account.name)
        if known is not None and known[0] is sublist and known[1] == sublist.genid and not known[2]:
            return
        new, old = f"$SYS.ACCOUNT.{account.name}.SERVER.CONNS", f"$SYS.SERVER.ACCOUNT.{account.name}.CONNS"
        listened = self._listened(new) or self._listened(old)
        self._conns_listened[account.name] = (sublist, sublist.genid, listened)
        if not listened:
            return
        event = {"type": ACCOUNT_CONNS_TYPE, "id": _event_id(), "timestamp": go_time(clock.now())}
        stat = self.account_stat(account)
        for subject in (old, new):  # nats-server sends the older subject first
            self.send(subject, {**event, "server": self.server_info(), **stat})

    # -- statsz ---------------------------------------------------------------------------------

    def statsz(self) -> dict:
        """events.go ServerStats."""
        server = self.server
        varz = self.monitor.varz()
        accounts = server.accounts.by_name.values() if server.accounts is not None else ()
        stats = {
            "start": go_time(server.start_time), "mem": varz["mem"], "cores": varz["cores"], "cpu": _number(varz["cpu"]),
            "connections": len(server.clients), "total_connections": server.total_connections,
            "active_accounts": sum(1 for account in accounts if account.clients),
            "subscriptions": server.subscriptions,
            "sent": _data_stats(varz["out_msgs"], varz["out_bytes"]),
            "sent_to_clients": _data_stats(varz["out_client_msgs"], varz["out_client_bytes"]),
            "received": _data_stats(varz["in_msgs"], varz["in_bytes"]),
            "received_from_clients": _data_stats(varz["in_client_msgs"], varz["in_client_bytes"]),
            "slow_consumers": server.slow_consumers,
        }
        # events.go: these four only when not zero
        if server.slow_consumers:
            stats["slow_consumer_stats"] = slow_consumer_stats(server)
        if server.stale_connections:
            stats["stale_connections"] = server.stale_connections
            stats["stale_connection_stats"] = stale_connection_stats(server)
        if server.stalled_clients:
            stats["stalled_clients"] = server.stalled_clients
        if server.cluster is not None and server.cluster.routes:  # (omitempty)
            stats["routes"] = [route.statsz() for route in server.cluster.route_conns]
        stats["active_servers"] = 1 + (len(server.cluster.routes) if server.cluster is not None else 0)
        if server.jetstream is not None:
            stats["jetstream"] = varz["jetstream"]
        stats["gomaxprocs"] = varz["gomaxprocs"]
        return stats

    def statsz_message(self) -> dict:
        return {"server": self.server_info(), "statsz": self.statsz()}

    async def heartbeat(self) -> None:
        interval = STATSZ_FIRST_INTERVAL
        subject = f"$SYS.SERVER.{self.server.server_id}.STATSZ"
        while True:
            await trio.sleep(interval)
            interval = min(interval * 2, STATSZ_INTERVAL)
            if self._listened(subject):
                self.send(subject, self.statsz_message())

    def route_up(self) -> None:
        """A route to a server not connected before: this server's STATSZ goes to it a moment
        later (ROUTE_ANNOUNCE_DELAY: once the route has brought the other side's interest), not
        at the next heartbeat, so that a new server is known to the others, and they to it,
        within milliseconds of its start (a meta leader places streams only on servers whose
        STATSZ it has)."""
        nursery = self.nursery
        if nursery is None:
            return

        async def soon() -> None:
            await trio.sleep(ROUTE_ANNOUNCE_DELAY)
            self.announce()

        nursery.start_soon(soon)

    def announce(self) -> None:
        """events.go processNewServer: a server heard of for the first time gets this server's
        STATSZ at once ("Announce ourselves"), not at the next heartbeat (up to 30 s away):
        a JetStream meta leader places streams only on servers whose STATSZ it has."""
        subject = f"$SYS.SERVER.{self.server.server_id}.STATSZ"
        if self._listened(subject):
            self.send(subject, self.statsz_message())

    # -- requests -------------------------------------------------------------------------------

    def subscribe(self) -> None:
        server_id = self.server.server_id
        self._subs.append(self.account.subscribe("$SYS.REQ.SERVER.PING", self._ping))
        for kind in SERVER_KINDS:
            for subject in (f"$SYS.REQ.SERVER.PING.{kind}", f"$SYS.REQ.SERVER.{server_id}.{kind}"):
                self._subs.append(self.account.subscribe(subject, self._server_request(kind)))
        for kind in ACCOUNT_KINDS:
            self._subs.append(self.account.subscribe(f"$SYS.REQ.ACCOUNT.*.{kind}", self._account_request(kind)))
        # $SYS.REQ.ACCOUNT.PING.STATZ (every account in use) and $SYS.REQ.ACCOUNT.<acc>.STATZ
        self._subs.append(self.account.subscribe("$SYS.REQ.ACCOUNT.*.STATZ", self._account_statz))
        for subject in ("$SYS.REQ.SERVER.PING.IDZ", f"$SYS.REQ.SERVER.{server_id}.IDZ"):
            self._subs.append(self.account.subscribe(subject, self._idz))
        for kind in CONTROL_KINDS:
            self._subs.append(self.account.subscribe(f"$SYS.REQ.SERVER.{server_id}.{kind}", self._control(kind)))
        self._subs.append(self.account.subscribe("$SYS.REQ.USER.INFO", self._user_info))

    def _idz(self, subject, reply, headers, body) -> None:
        """events.go idzReq: the server's name, host and id alone, for any request."""
        if reply:
            self.send(reply.decode(), self.server_id())

    def _user_info(self, subject, reply, headers, body) -> None:
        """events.go userInfoReq: who the requesting connection is, its account and permissions.
        (nats-server imports this service into every account; natserver answers the system
        account's users, whose requests reach it.)"""
        client = self.server.callback_publisher
        if not reply or client is None or client.cid == 0:
            return  # (from a route or the server itself: no requesting connection known here)
        account = client.account or self.server.accounts.global_account
        data: dict = {"user": client.user, "account": account.name, "account_name": account_name_tag(account)}
        perms = client.perms
        if perms is not None:
            data["permissions"] = getattr(perms, "base", perms).public()
        if client.auth_expires is not None:  # client.go claimExpiration: whole seconds left, in ns
            data["expires"] = max(0, int(client.auth_expires - clock.now())) * 1_000_000_000
        self.send(reply.decode(), {"server": self.server_info(), "data": data})

    def _ping(self, subject, reply, headers, body) -> None:
        if reply and not self.filtered_out(body) and not self._refused_statsz(reply, body):
            self._statsz_soon(reply.decode())

    def _refused_statsz(self, reply: bytes, body: bytes) -> bool:
        """events.go statszReq: a body that is not the options' JSON is answered with a 400
        and no statsz."""
        try:
            _query(body, None)
        except ValueError as exc:
            error = {"code": 400, "description": f"invalid request: {exc}"}
            self.send(reply.decode(), {"server": self.server_info(), "error": error})
            return True
        return False

    def _statsz_soon(self, reply: str) -> None:
        """events.go noInlineCallbackStatsz: the statsz is made after the request is counted."""
        async def answer() -> None:
            self.send(reply, self.statsz_message())

        self._soon(answer)

    def _server_request(self, kind: str):
        def handle(subject, reply, headers, body) -> None:
            if not reply or self.filtered_out(body):
                return
            if kind == "STATSZ":
                if not self._refused_statsz(reply, body):
                    self._statsz_soon(reply.decode())
                return
            self._answer(reply, kind, body, None)
        return handle

    def _control(self, kind: str):
        """events.go kickClient, ldmClient, reloadConfig: done only when asked with a reply
        subject; answered with the server block alone, or an error object."""
        def handle(subject, reply, headers, body) -> None:
            cid: object = 0
            if kind != "RELOAD":
                try:
                    request = orjson.loads(body)
                    cid = request.get("cid", 0) if isinstance(request, dict) else None
                except orjson.JSONDecodeError:
                    cid = None
                if not isinstance(cid, int) or isinstance(cid, bool) or cid < 0:
                    log.error("Error unmarshalling %s client request: %r", "kick", bytes(body))
                    return  # (nats-server's message for both requests)
            if not reply or self.filtered_out(body):
                return
            message: dict = {"server": self.server_info()}
            assert isinstance(cid, int)
            error = self._kick(cid) if kind == "KICK" else self._ldm(cid) if kind == "LDM" else self._reload()
            if error:
                message["error"] = {"code": 500, "description": error}
            self.send(reply.decode(), message)
        return handle

    def _kick(self, cid: int) -> str:
        """server.go DisconnectClientByID: a client or a leaf node connection, closed."""
        client = self.server.clients.get(cid)
        if client is not None and not client.closed:
            client.close("Kicked", flush=False)
            return ""
        cluster = self.server.cluster
        leaf = cluster.leafs.get(cid) if cluster is not None else None
        if leaf is not None:
            leaf.close("Kicked")
            return ""
        return "no such client or leafnode id"

    def _ldm(self, cid: int) -> str:
        """server.go LDMClientByID: the client gets an INFO saying the server is in lame duck
        mode (and goes to another server), if it takes INFOs and has had its first PONG."""
        client = self.server.clients.get(cid)
        if client is None or client.closed:
            return "no such client id"
        if client.protocol < 1 or not client._first_pong_sent:
            return "client does not support Lame Duck Mode or is not ready to receive the notification"
        client.queue(self.server.info_for(client, lame_duck=True))
        self.server.flush_touched()
        return ""

    def _reload(self) -> str:
        """server.go Reload, as on SIGHUP (server/signals.py, imported when asked: it reads
        configuration files)."""
        from ..server.signals import ReloadError, reload

        try:
            reload(self.server)
        except ReloadError as exc:
            return str(exc)
        return ""

    def _account_request(self, kind: str):
        def handle(subject, reply, headers, body) -> None:
            # (a system user's $SYS.REQ.ACCOUNT.PING.<KIND> names an account "PING" here, as
            # in nats-server, where other accounts' requests are service imports)
            name = subject.decode().split(".")[3]
            if reply and not self.filtered_out(body):
                self._answer(reply, kind, body, name)
        return handle

    def filtered_out(self, body: bytes) -> bool:
        """events.go filterRequest: True when the request's filter (``server_name``,
        ``cluster``, ``host``: substrings, or equal with ``exact_match``; ``tags``; ``domain``)
        does not name this server, which then stays silent, as every server not named does.
        A body that is not a JSON object is not a filter (the request's answer reports it)."""
        try:
            options = orjson.loads(body) if body.strip() else None
        except orjson.JSONDecodeError:
            return False
        if not isinstance(options, dict):
            return False
        server = self.server
        mine = {"server_name": server.server_name, "host": server.options.host,
                "cluster": getattr(server.cluster, "name", "") if server.cluster is not None else ""}
        exact = options.get("exact_match") is True
        for key, value in mine.items():
            wanted = options.get(key)
            if isinstance(wanted, str) and wanted and (wanted != value if exact else wanted not in value):
                return True
        tags = options.get("tags")
        if tags:  # events.go filterRequest: every tag asked for must be one of ours
            ours = {str(tag).lower() for tag in server.options.server_tags}
            if not isinstance(tags, list) or any(str(tag).lower() not in ours for tag in tags):
                return True
        domain = options.get("domain")
        return isinstance(domain, str) and bool(domain) and domain != (server.options.jetstream_domain or "")

    def account_statz(self, names=None, unused: bool = False) -> list:
        """monitor.go AccountStatz: the stats of the accounts (all, or those ``names`` names)
        with a connection here, or of every one with ``unused``."""
        known = self.server.accounts.by_name if self.server.accounts is not None else {}
        accounts = known.values() if names is None else [known[name] for name in names if name in known]
        stats = [self.account_stat(account) for account in accounts]
        return [stat for stat in stats if unused or stat["conns"] or stat["leafnodes"]]

    def _account_statz(self, subject, reply, headers, body) -> None:
        """$SYS.REQ.ACCOUNT.PING.STATZ and $SYS.REQ.ACCOUNT.<acc>.STATZ (events.go): answered
        after the requester's read pass is counted (noInlineCallback); a server with none of
        the accounts in use stays silent unless include_unused is asked for."""
        if not reply or self.filtered_out(body):
            return
        try:
            options = orjson.loads(body) if body.strip() else {}
        except orjson.JSONDecodeError:
            options = {}
        if not isinstance(options, dict):
            options = {}
        name = subject.decode().split(".")[3]
        names = [name] if name != "PING" else options.get("accounts") or None
        if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            names = None
        unused = options.get("include_unused") is True

        async def answer() -> None:
            stats = self.account_statz(names, unused)
            if not stats and not unused:
                return
            data = {"server_id": self.server.server_id, "now": go_time(clock.now()), "account_statz": stats}
            self.send(reply.decode(), {"server": self.server_info(), "data": data})

        self._soon(answer)

    def _soon(self, answer) -> None:
        """Run ``answer`` (an async function that never waits) once the requester's read pass
        has been counted, as nats-server answers from its send queue; at once without a
        nursery (a SystemAccount not started by enable_system)."""
        if self.nursery is not None:
            self.nursery.start_soon(answer)
            return
        coroutine = answer()
        try:
            coroutine.send(None)
        except StopIteration:
            pass
        else:  # pragma: no cover - answer() never waits
            coroutine.close()

    def _answer(self, reply: bytes, kind: str, body: bytes, account: str | None) -> None:
        """The monitoring endpoint's answer as ``data``, or nats-server's ``error`` object."""
        message: dict = {"server": self.server_info()}
        # events.go zReq: a body that is not the options' JSON is a 400; the endpoint's own
        # refusal (a bad sort, an invalid test subject) a 500, where HTTP monitoring says 400.
        try:
            query = _query(body, account)
        except ValueError as exc:
            message["data"] = None
            message["error"] = {"code": 400, "description": f"invalid request: {exc}"}
            self.send(reply.decode(), message)
            return
        try:
            message["data"] = _number(self._endpoint(kind, query, account))
        except BadRequest as exc:
            message["data"] = None
            message["error"] = {"code": 500, "description": str(exc)}
        except _Failed as exc:
            message["data"] = None
            message["error"] = {"code": exc.code, "description": exc.description}
        self.send(reply.decode(), message)

    def _endpoint(self, kind: str, query: Query, account: str | None = None):
        monitor = self.monitor
        if account is not None:
            if kind == "INFO":
                return monitor.account_info(account)
            if kind == "JSZ" and self.server.jetstream is None:
                raise _Failed(500, "jetstream not enabled")
            if kind == "CONNZ":
                data = orjson.loads(monitor.handle_connz(query))
                if data.get("server_id"):  # (an unknown account's answer keeps its null list)
                    data["connections"] = data.get("connections") or []
                return data
        if kind == "VARZ":
            return monitor.varz()
        if kind == "SUBSZ":
            return monitor.subsz(subs=query.bool("subs"), offset=query.int("offset"), limit=query.int("limit"),
                                 test=query.get("test"), acc=query.get("acc"))
        if kind == "HEALTHZ":  # (with its status_code, which the HTTP endpoint leaves out)
            return monitor.healthz(js_enabled_only=query.bool("js-enabled-only") | query.bool("js-enabled"),
                                   js_server_only=query.bool("js-server-only"), details=query.bool("details"),
                                   # (_OPTION_NAMES renamed account and consumer as /jsz names them)
                                   account=query.get("acc"), stream=query.get("stream"),
                                   consumer=query.get("consumers"))
        if kind == "ACCOUNTZ":
            return monitor.accountz(query.get("acc"))
        if kind in ("RAFTZ", "IPQUEUESZ"):
            # monitor.go Raftz, Ipqueuesz: natserver has no Raft groups (one server) and no
            # internal queues between goroutines (one thread): nothing to list, as a
            # standalone nats-server without JetStream clustering lists none.
            return {}
        if kind == "EXPVARZ":
            # monitor.go expvarz: Go's expvar variables; of them only the command line has a
            # meaning here (Go's runtime memstats have no Python counterpart).
            return {"cmdline": list(sys.orig_argv)}
        if kind == "PROFILEZ":
            # monitor.go profilez: Go's pprof profiles, which a Python server has none of.
            name = query.get("name")
            error = f"Profile {orjson.dumps(name).decode()} not found" if name else "Profile name not specified"
            return {"profile": None, "error": error}
        handler = getattr(monitor, f"handle_{kind.lower()}")
        answer = handler(query)
        return orjson.loads(answer[2] if isinstance(answer, tuple) else answer)


class _Failed(Exception):
    """A request nats-server answers with an error object (code, description)."""

    def __init__(self, code: int, description: str) -> None:
        super().__init__(description)
        self.code, self.description = code, description


def _number(value):
    """Floats as Go's JSON writes them: 0 for 0.0 (a whole float64 has no fraction)."""
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    if isinstance(value, dict):
        return {key: _number(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_number(item) for item in value]
    return value


def _query(body: bytes, account: str | None) -> Query:
    """A request's JSON options as the monitoring endpoint's query string."""
    options = orjson.loads(body) if body.strip() else {}
    if not isinstance(options, dict):
        raise ValueError("expected a JSON object")
    params: dict[str, str] = {}
    name: str  # (JSON object keys are strings)
    for name, value in options.items():
        key = _OPTION_NAMES.get(name, name)
        if name == "subscriptions_detail":
            key, value = "subs", "detail" if value else value
        if isinstance(value, bool):
            value = "true" if value else "false"
        params[key] = str(value)
    if account is not None:
        params["acc"] = account
    return Query(urllib.parse.urlencode(params))


async def enable_system(server, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """The subsystem's entry point: ``server.system``, run until cancelled."""
    system = SystemAccount(server, system_account_name(server.options, server))
    system.subscribe()
    server.connection_observers.append(system)
    server.lame_duck_hooks.append(system.lame_duck_event)
    try:
        async with trio.open_nursery() as nursery:
            system.nursery = nursery
            nursery.start_soon(system.heartbeat)
            task_status.started(system)
    finally:
        if system in server.connection_observers:
            server.connection_observers.remove(system)
        if system.lame_duck_event in server.lame_duck_hooks:
            server.lame_duck_hooks.remove(system.lame_duck_event)
