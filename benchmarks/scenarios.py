"""Benchmark scenarios (a)-(o); (m)-(o) look like traffic and are the headline.

Each scenario's ``run(spec, opts)`` starts a fresh server from ``spec``,
starts the load workers (separate processes, see Workers), measures, checks
correctness, stops everything and returns a RoundResult.  The runner calls it
alternately for natserver and nats-server.
"""

from __future__ import annotations

import gc
import json
import multiprocessing as mp
import os
import queue
import random
import resource
import signal
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

from benchmarks import natsgo, natspy_reqrep, wire
from benchmarks.servers import RunningServer, ServerSpec
from benchmarks.wire import FlowGroup, SubConn, now

KiB = 1024
MiB = 1024 * KiB


@dataclass
class Options:
    duration: float = 2.0  # seconds of publishing per round
    window_bytes: int = 256 * KiB  # PUB bytes per sendall (each window ends in PING)
    # How far (in MSG bytes) a subscriber may trail the publishers before they
    # pause.  Far below the servers' 64 MiB slow-consumer limit, even with
    # four publishers each one window ahead.
    lag_bytes: int = 8 * MiB
    ready_timeout: float = 60.0  # connect + subscribe (10 000 SUBs on a slow server)
    drain_timeout: float = 10.0  # after publishing, wait this long for deliveries
    connect_timeout: float = 30.0  # idle-connection scenarios
    # Handshakes in flight per connector process: parallel enough to keep the
    # server busy, far below the listen backlog (a dropped SYN costs a 1 s
    # retransmit and would wreck connects/s).
    connect_inflight: int = 128


# --------------------------------------------------------------------------
# Result types


@dataclass
class Target:
    kind: str  # "ratio" (natserver / nats-server) or "abs" (natserver's own value)
    op: str  # ">=" or "<="
    value: float

    def met(self, x: float | None) -> bool | None:
        if x is None:
            return None
        return x >= self.value if self.op == ">=" else x <= self.value

    def text(self, unit: str = "") -> str:
        sym = "≥" if self.op == ">=" else "≤"
        if self.kind == "ratio":
            return f"{sym}{self.value:g}×"
        return f"{sym}{self.value:g} {unit}".strip()


@dataclass
class Metric:
    key: str
    label: str
    unit: str
    higher_is_better: bool = True
    target: Target | None = None
    chart: bool = True  # include its ratio in the PNG


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""


@dataclass
class RoundResult:
    server: str
    metrics: dict[str, float] = field(default_factory=dict)
    load_cpu_pct: float | None = None  # all load worker processes, % of one core
    server_cpu_pct: float | None = None  # server process tree, % of one core
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    raw: dict = field(default_factory=dict)

    @property
    def correct(self) -> bool:
        return self.error is None and all(c.ok for c in self.checks)


@dataclass
class Scenario:
    id: str
    title: str
    metrics: list[Metric]
    run: Callable[[ServerSpec, Options], RoundResult]
    # Why the scenario cannot run on this machine (a missing tool), or None: checked once,
    # before its first round; the runner then skips it with that message.
    requires: Callable[[], str | None] | None = None


# --------------------------------------------------------------------------
# Worker processes


class WorkerError(RuntimeError):
    pass


class Shared:
    """State shared with the workers through fork: shared memory, no pickling."""

    def __init__(self, ctx, n_pub: int, n_slots: int):
        self.go = ctx.Event()  # publishers / requester / connectors start
        self.check = ctx.Event()  # idle connections: PING them all now
        self.close = ctx.Event()  # idle connections: close now
        self.stop = ctx.RawValue("b", 0)  # subscribers / responder: finish now
        self.abort = ctx.RawValue("b", 0)  # somebody failed: everybody wind down
        self.sent = ctx.RawArray("q", max(1, n_pub))  # messages sent, per publisher
        self.recv = ctx.RawArray("q", max(1, n_slots))  # messages received, per sub connection


class _Ctl:
    def __init__(self, wid: int, q):
        self.wid, self.q = wid, q

    def ready(self) -> None:
        self.q.put(("ready", self.wid, None))

    def report(self, data: dict) -> None:
        self.q.put(("report", self.wid, data))


def _worker_main(wid, q, shared, fn, args):
    # Ctrl-C goes to the whole terminal process group; the parent cleans up.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The hot loops create no reference cycles; a collection pause would only
    # add noise (e.g. a latency spike).
    gc.disable()
    try:
        res = fn(shared, _Ctl(wid, q), *args)
        q.put(("result", wid, res))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        shared.abort.value = 1
        q.put(("error", wid, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}"))


class Workers:
    """Load worker processes of one round, plus their shared state.

    fork (not spawn): start-up costs milliseconds instead of an interpreter
    start, and pre-encoded buffers and closures are inherited, never pickled.
    """

    def __init__(self, n_pub: int = 0, n_slots: int = 0):
        self.ctx = mp.get_context("fork")
        self.q = self.ctx.Queue()
        self.shared = Shared(self.ctx, n_pub, n_slots)
        self.procs: dict[int, mp.Process] = {}
        self.names: dict[int, str] = {}
        self.ready: set[int] = set()
        self.reports: dict[int, list[dict]] = {}
        self.results: dict[int, dict] = {}

    def spawn(self, name: str, fn, *args) -> int:
        wid = len(self.procs)
        p = self.ctx.Process(target=_worker_main, args=(wid, self.q, self.shared, fn, args),
                             name=f"bench-{name}-{wid}", daemon=True)
        p.start()
        self.procs[wid] = p
        self.names[wid] = f"{name}#{wid}"
        return wid

    def _pump(self, timeout: float, dead_check: bool = True) -> None:
        try:
            kind, wid, data = self.q.get(timeout=timeout)
        except queue.Empty:
            if not dead_check:
                return
            for wid, p in self.procs.items():
                if p.exitcode is not None and wid not in self.results:
                    # A worker that just exited may have its result still in
                    # the pipe: read for a moment before declaring it dead.
                    end = time.monotonic() + 1.0
                    while wid not in self.results and time.monotonic() < end:
                        self._pump(0.1, dead_check=False)
                    if wid not in self.results:
                        raise WorkerError(f"worker {self.names[wid]} died (exit code {p.exitcode})") from None
            return
        if kind == "ready":
            self.ready.add(wid)
        elif kind == "report":
            self.reports.setdefault(wid, []).append(data)
        elif kind == "result":
            self.results[wid] = data
        else:
            raise WorkerError(f"worker {self.names[wid]} failed: {data}")

    def wait(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerError(f"timed out after {timeout:.0f}s waiting for {what}")
            self._pump(min(left, 0.2))

    def wait_ready(self, wids: list[int], timeout: float) -> None:
        self.wait(lambda: all(w in self.ready for w in wids), timeout, "workers to connect")

    def wait_results(self, wids: list[int], timeout: float, what: str = "results") -> list[dict]:
        self.wait(lambda: all(w in self.results for w in wids), timeout, what)
        return [self.results[w] for w in wids]

    def wait_reports(self, wids: list[int], n: int, timeout: float, what: str) -> list[dict]:
        self.wait(lambda: all(len(self.reports.get(w, ())) >= n for w in wids), timeout, what)
        return [self.reports[w][n - 1] for w in wids]

    def close(self) -> None:
        sh = self.shared
        sh.abort.value = 1
        sh.stop.value = 1
        for ev in (sh.go, sh.check, sh.close):
            ev.set()
        deadline = time.monotonic() + 5
        for p in self.procs.values():
            p.join(max(0.05, deadline - time.monotonic()))
        for p in self.procs.values():
            if p.is_alive():
                p.kill()  # our own child, by pid
                p.join(1)
        self.q.close()
        self.q.join_thread()

    def __enter__(self) -> "Workers":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --------------------------------------------------------------------------
# Shared round bookkeeping


def _server_checks(res: RoundResult, srv: RunningServer) -> None:
    res.checks.append(Check("server alive", srv.alive(),
                            "" if srv.alive() else f"exit code {srv.proc.returncode}: {srv.log_tail(5)}"))
    slow = [ln for ln in srv.log_text().splitlines() if "slow consumer" in ln.lower()]
    res.checks.append(Check("no slow consumer", not slow, slow[0].strip() if slow else ""))


def _pct(cpu: float, wall: float) -> float | None:
    return 100.0 * cpu / wall if wall > 0 else None


# --------------------------------------------------------------------------
# Publish / subscribe


@dataclass
class PubSubPlan:
    publishers: list[list[wire.Window]]  # one list of windows per publisher process
    sub_procs: list[list[SubConn]]  # subscriber connections, grouped per process
    groups: list[FlowGroup]  # what each set of subscribers must receive
    group_names: list[str]
    fanout_desc: str = ""
    # Traffic-like scenarios: MSG bytes each group must receive per batch (the publisher
    # only stops after whole batches), checked exactly on top of the message counts.
    batch: int = 0
    group_bytes: list[int] | None = None


def run_pubsub(spec: ServerSpec, opts: Options, plan: PubSubPlan) -> RoundResult:
    res = RoundResult(spec.label)
    n_slots = sum(len(c) for c in plan.sub_procs)
    with spec.start() as srv, Workers(len(plan.publishers), n_slots) as w:
        subs = [w.spawn("sub", wire.subscriber_worker, srv.port, conns) for conns in plan.sub_procs]
        # Subscribers first: their PONG guarantees the SUBs are registered
        # before any publisher is even told to start.
        w.wait_ready(subs, opts.ready_timeout)
        pubs = [w.spawn("pub", wire.publisher_worker, i, srv.port, wins, opts.duration, plan.groups)
                for i, wins in enumerate(plan.publishers)]
        w.wait_ready(pubs, opts.ready_timeout)

        cpu0 = srv.cpu_seconds()
        t_go = now()
        w.shared.go.set()
        pub_res = w.wait_results(pubs, opts.duration + wire.STALL_TIMEOUT + 30, "publishers")
        published = sum(r["sent"] for r in pub_res)

        # Wait until every group has everything (or give up: "cut short").
        recv = w.shared.recv
        deadline = now() + opts.drain_timeout
        complete = False
        while now() < deadline and not w.shared.abort.value:
            if all(sum(recv[s] for s in g.slots) >= g.expected(published) for g in plan.groups):
                complete = True
                break
            time.sleep(0.002)
        t_done = now()
        cpu1 = srv.cpu_seconds()
        w.shared.stop.value = 1
        sub_res = w.wait_results(subs, 20, "subscribers to drain")
        _server_checks(res, srv)

    conns = {c["slot"]: c for r in sub_res for c in r["conns"]}
    t_pub0 = min(r["t_start"] for r in pub_res)
    t_pub1 = max(r["t_end"] for r in pub_res)
    delivered = sum(c["count"] for c in conns.values())
    res.metrics["pub_rate"] = published / (t_pub1 - t_pub0)
    if conns:
        t_last = max(c["t_last"] for c in conns.values()) or t_done
        res.metrics["deliv_rate"] = delivered / (t_last - t_pub0)
    wall = t_done - t_go
    load_cpu = sum(r["cpu"] for r in pub_res) + sum(r["cpu"] for r in sub_res)
    res.load_cpu_pct = _pct(load_cpu, wall)
    res.server_cpu_pct = _pct(cpu1 - cpu0, wall)

    # ---- correctness
    for r in pub_res:
        if r["error"]:
            res.checks.append(Check("publisher ok", False, r["error"]))
    stalled = any(r["stalled"] for r in pub_res)
    if stalled or (plan.groups and not complete):
        res.notes.append("cut short")
        res.checks.append(Check("not cut short", False,
                                f"publisher waited {wire.STALL_TIMEOUT:g} s for subscribers that made no progress"
                                if stalled else
                                f"deliveries incomplete {opts.drain_timeout:g} s after publishing ended"))
    for gi, g in enumerate(plan.groups):
        exp = g.expected(published)
        got = [conns[s]["count"] for s in g.slots]
        name = plan.group_names[gi]
        if len(g.slots) == 1:
            res.checks.append(Check(name, got[0] == exp, f"{got[0]}/{exp}"))
        else:
            res.checks.append(Check(name, sum(got) == exp,
                                    f"sum {sum(got)}/{exp} (members {'/'.join(map(str, got))})"))
    if plan.group_bytes is not None:
        batches, partial = divmod(published, plan.batch)
        for gi, g in enumerate(plan.groups):
            # The server's keep-alive PINGs are the only other bytes a subscriber gets.
            got = sum(conns[s]["bytes"] - len(wire.PING) * conns[s]["server_pings"] for s in g.slots)
            exp = batches * plan.group_bytes[gi]
            res.checks.append(Check(f"{plan.group_names[gi]}: MSG bytes", not partial and got == exp,
                                    f"{got}/{exp} bytes" + (f", {partial} messages past a batch" if partial else "")))
    bad_frames = [s for s, c in conns.items() if not c["frames_ok"]]
    if bad_frames:
        res.checks.append(Check("frame sizes", False, f"byte count mismatch on slots {bad_frames}"))
    for s, c in conns.items():
        if c["disconnected"] or c["error"]:
            res.checks.append(Check(f"subscriber {s} connected", False, c["error"] or "disconnected by server"))
    flow_wait = max(r["flow_wait"] for r in pub_res)
    res.raw = dict(published=published, delivered=delivered, wall=wall,
                   publisher_flow_wait_s=flow_wait,
                   publishers=pub_res, subscribers=sorted(conns.values(), key=lambda c: c["slot"]),
                   subscriber_cpu=[r["cpu"] for r in sub_res])
    if flow_wait > 0.25 * (t_pub1 - t_pub0):
        # Not an error: the server delivers slower than it accepts, so the
        # publisher is held back to protect the subscribers.
        res.notes.append(f"paced {100 * flow_wait / (t_pub1 - t_pub0):.0f}%")
    return res


def _single_subject_plan(opts: Options, size: int, n_pub: int, n_sub: int, queue_group: bool) -> PubSubPlan:
    subject = "bench.s"
    frame = wire.pub_frame(subject, wire.payload(size))
    windows = wire.repeat_windows(frame, opts.window_bytes)
    fsize = wire.msg_frame_size(subject, 1, size)
    sub = f"SUB {subject} grp 1\r\n" if queue_group else f"SUB {subject} 1\r\n"
    # One process per subscriber connection: each can use a core's worth of
    # recv+count without competing for a GIL.
    sub_procs = [[SubConn(i, sub.encode(), fsize)] for i in range(n_sub)]
    lag = max(1, opts.lag_bytes // fsize)
    if queue_group:
        groups = [FlowGroup(list(range(n_sub)), 1, 1, lag)]
        names = [f"queue group of {n_sub}: each message once"]
    else:
        groups = [FlowGroup([i], 1, 1, lag) for i in range(n_sub)]
        names = [f"subscriber {i} got all" for i in range(n_sub)]
    return PubSubPlan([windows] * n_pub, sub_procs, groups, names)


def _pubsub_scenario(size: int, n_pub: int, n_sub: int, queue_group: bool = False):
    def run(spec: ServerSpec, opts: Options) -> RoundResult:
        res = run_pubsub(spec, opts, _single_subject_plan(opts, size, n_pub, n_sub, queue_group))
        if size >= KiB and "deliv_rate" in res.metrics:
            res.metrics["payload_mib_s"] = res.metrics["deliv_rate"] * size / MiB
        return res

    return run


def _mixed_sizes_plan(opts: Options) -> PubSubPlan:
    """1 -> 1 on one subject, payload sizes 8..64 B changing every message: the publish path
    without the uniform-run shortcut (same subject and size: one regex for the whole run),
    which (a)-(f) take since every message there is alike."""
    subject = "bench.s"
    sizes = [8 + (i * 7) % 57 for i in range(4096)]
    frames = [wire.pub_frame(subject, wire.payload(size)) for size in sizes]
    windows = wire.make_windows(frames, opts.window_bytes)
    sub_procs = [[SubConn(0, f"SUB {subject} 1\r\n".encode(), None)]]
    lag = max(1, opts.lag_bytes // 48)  # ~48 B per MSG frame here
    return PubSubPlan([windows], sub_procs, [FlowGroup([0], 1, 1, lag)], ["subscriber got all"])


# ---- traffic-like: the size (and subject) drawn for every message, seeded

TRAFFIC_SEED = 17  # same messages for both servers and every round
TRAFFIC_BATCH = 8192  # messages per batch (a batch is always published whole)


def _traffic_plan(opts: Options, sizes: tuple[int, int], n_subjects: int, subs: list[str],
                  queue_group: bool = False) -> PubSubPlan:
    """One publisher; every message gets a size drawn uniformly from ``sizes`` and a subject
    drawn from ``n_subjects`` ("traffic.<k>", or "traffic.s" for one), so no two neighbours
    are alike and the servers' shortcuts for runs of alike messages do not apply. Each entry
    of ``subs`` is one subscriber connection's subject; all of them match every message.
    Fan-out: each subscriber must get every message, exactly its MSG bytes. Queue group: the
    members together get each message once, and the MSG bytes of all of them."""
    rng = random.Random(TRAFFIC_SEED)
    lo, hi = sizes
    picks = []
    for _ in range(TRAFFIC_BATCH):
        subject = "traffic.s" if n_subjects == 1 else f"traffic.{rng.randrange(n_subjects)}"
        picks.append((subject, rng.randint(lo, hi)))
    frames = [wire.pub_frame(subject, wire.payload(size)) for subject, size in picks]
    windows = wire.make_windows(frames, opts.window_bytes)
    sid = 1
    msg_bytes = sum(wire.msg_frame_size(subject, sid, size) for subject, size in picks)
    lines = [(f"SUB {subj} grp {sid}\r\n" if queue_group else f"SUB {subj} {sid}\r\n").encode() for subj in subs]
    sub_procs = [[SubConn(i, line, None)] for i, line in enumerate(lines)]
    lag = max(1, opts.lag_bytes // (msg_bytes // TRAFFIC_BATCH))
    if queue_group:
        groups = [FlowGroup(list(range(len(subs))), 1, 1, lag)]
        names = [f"queue group of {len(subs)}: each message once"]
        group_bytes = [msg_bytes]
    else:
        groups = [FlowGroup([i], 1, 1, lag) for i in range(len(subs))]
        names = [f"subscriber {i} ({subj}) got all" for i, subj in enumerate(subs)]
        group_bytes = [msg_bytes] * len(subs)
    return PubSubPlan([windows], sub_procs, groups, names, batch=TRAFFIC_BATCH, group_bytes=group_bytes)


def _traffic_scenario(sizes: tuple[int, int], n_subjects: int, subs: list[str], queue_group: bool = False):
    def run(spec: ServerSpec, opts: Options) -> RoundResult:
        return run_pubsub(spec, opts, _traffic_plan(opts, sizes, n_subjects, subs, queue_group))

    return run


# ---- wildcard subscriptions

N_WILDCARD_SUBS = 10_000
WILDCARD_CONNS = 10
WILDCARD_PROCS = 2


def _wildcard_sub(i: int) -> str:
    # Even i: "bench.<i%100>.*.<i>"   odd i: "bench.<i%100>.<i>.>"
    return f"bench.{i % 100}.*.{i}" if i % 2 == 0 else f"bench.{i % 100}.{i}.>"


def _wildcard_subject(rng: random.Random) -> tuple[str, int]:
    """A subject "bench.<n%100>.<k>.<n>" with k ≡ n (mod 100), and the id of
    the one subscription it matches.

    n even: only "bench.<n%100>.*.<n>" (sub n) matches.  n odd: k is odd too
    (k ≡ n mod 100), so only "bench.<k%100>.<k>.>" (sub k) matches.  Exactly
    one delivery per publish, to a random subscription: expected counts per
    connection are exact without running a matcher in Python.
    """
    n = rng.randrange(N_WILDCARD_SUBS)
    k = n % 100 + 100 * rng.randrange(N_WILDCARD_SUBS // 100)
    return f"bench.{n % 100}.{k}.{n}", (n if n % 2 == 0 else k)


def _wildcard_plan(opts: Options, hot: int | None) -> PubSubPlan:
    rng = random.Random(42)  # same subjects for both servers and every round
    size = 16
    body = wire.payload(size)
    if hot is None:
        # 65 536 random subjects per batch (issue #17's "64k"): far more than
        # nats-server's 1024-entry match cache and natserver's.
        picks = [_wildcard_subject(rng) for _ in range(65_536)]
    else:
        hot_set = [_wildcard_subject(rng) for _ in range(hot)]
        picks = [hot_set[j % hot] for j in range(32 * hot)]
    frames = [wire.pub_frame(subj, body) for subj, _ in picks]
    windows = wire.make_windows(frames, opts.window_bytes)
    batch = len(picks)

    per_conn = [0] * WILDCARD_CONNS
    for _, sub_id in picks:
        per_conn[sub_id % WILDCARD_CONNS] += 1
    conns = []
    for c in range(WILDCARD_CONNS):
        lines = "".join(f"SUB {_wildcard_sub(i)} {i}\r\n" for i in range(c, N_WILDCARD_SUBS, WILDCARD_CONNS))
        conns.append(SubConn(c, lines.encode(), None))
    sub_procs = [conns[p::WILDCARD_PROCS] for p in range(WILDCARD_PROCS)]
    lag = max(1, opts.lag_bytes // 48)  # ~48 B per MSG frame here
    groups = [FlowGroup([c], per_conn[c], batch, lag) for c in range(WILDCARD_CONNS)]
    names = [f"connection {c} got all its matches" for c in range(WILDCARD_CONNS)]
    return PubSubPlan([windows], sub_procs, groups, names)


def _wildcard_scenario(hot: int | None):
    def run(spec: ServerSpec, opts: Options) -> RoundResult:
        return run_pubsub(spec, opts, _wildcard_plan(opts, hot))

    return run


# --------------------------------------------------------------------------
# Request / reply


def run_reqrep(spec: ServerSpec, opts: Options) -> RoundResult:
    res = RoundResult(spec.label)
    body = wire.payload(16)
    request_pub = wire.pub_frame("bench.req", body, reply="_INBOX.bench")
    request_msg = f"MSG bench.req 1 _INBOX.bench {len(body)}\r\n".encode() + body + b"\r\n"
    reply_pub = wire.pub_frame("_INBOX.bench", body)
    reply_msg = f"MSG _INBOX.bench 1 {len(body)}\r\n".encode() + body + b"\r\n"
    warmup = 200
    with spec.start() as srv, Workers() as w:
        rsp = w.spawn("responder", wire.responder_worker, srv.port, request_msg, reply_pub)
        w.wait_ready([rsp], opts.ready_timeout)
        req = w.spawn("requester", wire.requester_worker, srv.port, request_pub, reply_msg,
                      opts.duration, 1_000_000, warmup)
        w.wait_ready([req], opts.ready_timeout)
        cpu0 = srv.cpu_seconds()
        t_go = now()
        w.shared.go.set()
        (rq,) = w.wait_results([req], opts.duration + 30, "requester")
        t_done = now()
        cpu1 = srv.cpu_seconds()
        w.shared.stop.value = 1
        (rs,) = w.wait_results([rsp], 10, "responder")
        _server_checks(res, srv)
    lat = sorted(rq["latencies_ns"])
    if lat:
        q = statistics.quantiles(lat, n=100, method="inclusive")
        res.metrics.update(p50_us=q[49] / 1e3, p90_us=q[89] / 1e3, p99_us=q[98] / 1e3,
                           rtt_rate=len(lat) / (rq["t_end"] - rq["t_start"]))
    wall = t_done - t_go
    res.load_cpu_pct = _pct(rq["cpu"] + rs["cpu"], wall)
    res.server_cpu_pct = _pct(cpu1 - cpu0, wall)
    n_req = len(lat) + warmup
    res.checks.append(Check("every request answered once", rq["error"] is None and rs["answered"] == n_req,
                            rq["error"] or f"{rs['answered']}/{n_req}"))
    res.checks.append(Check("replies intact", rq["bad"] == 0 and rs["bad"] == 0,
                            f"{rq['bad']} bad replies, {rs['bad']} bad requests"))
    res.raw = dict(requests=len(lat), warmup=warmup, responder=rs,
                   requester={k: v for k, v in rq.items() if k != "latencies_ns"})
    return res


# --------------------------------------------------------------------------
# nats.go (benchmarks/go/natsgo_bench.go): a client nobody on the project wrote

NATSGO_WARMUP = 200  # requests per requester before measuring, as in (g)


def run_natsgo_reqrep(spec: ServerSpec, opts: Options, requesters: int = 1) -> RoundResult:
    """nats.go's Request() against a Subscribe callback calling m.Respond(), 16 B."""
    res = RoundResult(spec.label)
    with spec.start() as srv:
        cpu0, t0 = srv.cpu_seconds(), now()
        out, load_cpu = natsgo.run(srv.port, ["-mode", "reqrep", "-requesters", str(requesters), "-size", "16",
                                              "-warmup", str(NATSGO_WARMUP), "-duration", f"{opts.duration}s"],
                                   timeout=opts.duration + 60)
        cpu1, t1 = srv.cpu_seconds(), now()
        _server_checks(res, srv)
    if out["requests"]:
        res.metrics.update(p50_us=out["p50_us"], p90_us=out["p90_us"], p99_us=out["p99_us"], rtt_rate=out["rate"])
    res.load_cpu_pct = _pct(load_cpu, t1 - t0)  # (includes connecting and the warm-up)
    res.server_cpu_pct = _pct(cpu1 - cpu0, t1 - t0)
    total = out["requests"] + out["warmup"]
    res.checks.append(Check("every request answered once", not out["errors"] and out["answered"] == total,
                            "; ".join(out["errors"] or []) or f"{out['answered']}/{total}"))
    res.raw = out
    return res


def run_natsgo_pubsub(spec: ServerSpec, opts: Options, subs: int, subjects: int, sizes: tuple[int, int]) -> RoundResult:
    """nats.go Publish() to Subscribe callbacks on ``bench.>``, subject and size drawn every message."""
    res = RoundResult(spec.label)
    with spec.start() as srv:
        cpu0, t0 = srv.cpu_seconds(), now()
        out, load_cpu = natsgo.run(srv.port, ["-mode", "pubsub", "-subs", str(subs), "-subjects", str(subjects),
                                              "-min", str(sizes[0]), "-max", str(sizes[1]),
                                              "-duration", f"{opts.duration}s"],
                                   timeout=opts.duration + 60)
        cpu1, t1 = srv.cpu_seconds(), now()
        _server_checks(res, srv)
    res.metrics["deliv_rate"] = out["deliv_rate"]
    res.load_cpu_pct = _pct(load_cpu, t1 - t0)
    res.server_cpu_pct = _pct(cpu1 - cpu0, t1 - t0)
    res.checks.append(Check("every subscriber got every message", out["complete"],
                            f"published {out['published']}, received {out['received']}"))
    res.raw = out
    return res


# --------------------------------------------------------------------------
# nats-py (benchmarks/natspy_reqrep.py): the Python client nobody on the project wrote

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_natspy_reqrep(spec: ServerSpec, opts: Options) -> RoundResult:
    """nats-py's request() against a subscription callback calling msg.respond(), 16 B (the
    requester and the responder in their own processes)."""
    res = RoundResult(spec.label)
    with spec.start() as srv:
        cpu0, t0 = srv.cpu_seconds(), now()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run([sys.executable, "-m", "benchmarks.natspy_reqrep", "--url", f"nats://127.0.0.1:{srv.port}",
                               "--size", "16", "--warmup", str(NATSGO_WARMUP), "--duration", str(opts.duration)],
                              capture_output=True, text=True, timeout=opts.duration + 60, cwd=_REPO)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu1, t1 = srv.cpu_seconds(), now()
        _server_checks(res, srv)
    if proc.returncode != 0:
        raise RuntimeError(f"natspy_reqrep exited with {proc.returncode}: {proc.stderr.strip()[-500:]}")
    out = json.loads(proc.stdout)
    if out["requests"]:
        res.metrics.update(p50_us=out["p50_us"], p90_us=out["p90_us"], p99_us=out["p99_us"], rtt_rate=out["rate"])
    load_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    res.load_cpu_pct = _pct(load_cpu, t1 - t0)  # (includes the interpreters' start and the warm-up)
    res.server_cpu_pct = _pct(cpu1 - cpu0, t1 - t0)
    total = out["requests"] + out["warmup"]
    res.checks.append(Check("every request answered once", not out["errors"] and out["answered"] == total,
                            "; ".join(out["errors"]) or f"{out['answered']}/{total}"))
    res.checks.append(Check("replies intact", out["bad"] == 0, f"{out['bad']} bad"))
    res.raw = out
    return res


def _natsgo_reqrep_metrics(target: Target | None) -> list[Metric]:
    return [
        Metric("p50_us", "p50 latency", "µs", higher_is_better=False, target=target),
        Metric("p90_us", "p90 latency", "µs", higher_is_better=False, chart=False),
        Metric("p99_us", "p99 latency", "µs", higher_is_better=False, chart=False),
        Metric("rtt_rate", "round trips/s", "1/s", chart=False),
    ]


# --------------------------------------------------------------------------
# Idle connections


def _idle_round(spec: ServerSpec, opts: Options, count: int) -> dict:
    # Two connector processes for large counts: Python-side handshake work is
    # split over both cores.
    nproc = 2 if count >= 2000 else 1
    shares = [count // nproc + (1 if i < count % nproc else 0) for i in range(nproc)]
    out: dict = dict(count=count)
    with spec.start() as srv, Workers() as w:
        ids = [w.spawn("idle", wire.idle_worker, srv.port, n, opts.connect_inflight,
                         opts.connect_timeout) for n in shares]
        w.wait_ready(ids, opts.ready_timeout)
        rss0 = srv.rss_kib()
        cpu0 = srv.cpu_seconds()
        t_go = now()
        w.shared.go.set()
        conn = w.wait_reports(ids, 1, opts.connect_timeout + 15, "connections")
        t_done = now()
        cpu1 = srv.cpu_seconds()
        rss1 = srv.rss_kib()
        w.shared.check.set()
        chk = w.wait_reports(ids, 2, opts.connect_timeout + 15, "PING check")
        alive = srv.alive()
        slow_log = srv.log_tail(5)
        w.shared.close.set()
    est = sum(r["established"] for r in conn)
    failures: dict[str, int] = {}
    for r in conn:
        for k, v in r["failures"].items():
            failures[k] = failures.get(k, 0) + v
    t0 = min(r["t_start"] for r in conn)
    t1 = max(r["t_end"] for r in conn)
    out.update(established=est, answered=sum(r["answered"] for r in chk), dead=sum(r["dead"] for r in chk),
               failures=failures, rss_before_kib=rss0, rss_after_kib=rss1,
               rss_per_conn_kib=(rss1 - rss0) / est if est else None,
               connects_rate=est / (t1 - t0) if t1 > t0 else None,
               load_cpu=sum(r["cpu"] for r in conn), server_cpu=cpu1 - cpu0, wall=t_done - t_go,
               server_alive=alive, log_tail=None if alive else slow_log)
    return out


def _idle_checks(res: RoundResult, r: dict) -> None:
    n = r["count"]
    res.checks.append(Check(f"{n} connected", r["established"] == n,
                            f"{r['established']}/{n}" + (f" failures {r['failures']}" if r["failures"] else "")))
    res.checks.append(Check(f"{n} answer PING while held", r["answered"] == r["established"] and r["established"] > 0,
                            f"{r['answered']}/{r['established']}"))
    if not r["server_alive"]:
        res.checks.append(Check("server alive", False, r["log_tail"] or ""))


def run_idle_levels(spec: ServerSpec, opts: Options, levels=(1000, 5000)) -> RoundResult:
    res = RoundResult(spec.label)
    cpu, scpu, wall = 0.0, 0.0, 0.0
    for n in levels:
        r = _idle_round(spec, opts, n)  # a fresh server per level
        res.raw[str(n)] = r
        if r["rss_per_conn_kib"] is not None:
            res.metrics[f"rss_per_conn_{n}"] = r["rss_per_conn_kib"]
        if r["connects_rate"] is not None:
            res.metrics[f"connects_rate_{n}"] = r["connects_rate"]
        _idle_checks(res, r)
        cpu, scpu, wall = cpu + r["load_cpu"], scpu + r["server_cpu"], wall + r["wall"]
    res.load_cpu_pct = _pct(cpu, wall)
    res.server_cpu_pct = _pct(scpu, wall)
    return res


def run_10k(spec: ServerSpec, opts: Options) -> RoundResult:
    res = RoundResult(spec.label)
    r = _idle_round(spec, opts, 10_000)
    res.raw = r
    res.metrics["held"] = r["answered"]
    if r["connects_rate"] is not None:
        res.metrics["connects_rate"] = r["connects_rate"]
    if r["rss_per_conn_kib"] is not None:
        res.metrics["rss_per_conn"] = r["rss_per_conn_kib"]
    res.load_cpu_pct = _pct(r["load_cpu"], r["wall"])
    res.server_cpu_pct = _pct(r["server_cpu"], r["wall"])
    _idle_checks(res, r)
    return res


# --------------------------------------------------------------------------
# Registry

_DELIV = "deliveries/s"


def _deliv(target: Target | None = None) -> Metric:
    return Metric("deliv_rate", _DELIV, "msg/s", target=target)


def _pubs(chart: bool = False) -> Metric:
    return Metric("pub_rate", "publishes/s", "msg/s", chart=chart)


RSS_TARGET = Target("abs", "<=", 20)

TRAFFIC_WILDCARDS = ["traffic.*", "traffic.>", "traffic.*", "traffic.>"]

# The traffic-like scenarios (m, n, o) come first: they are the headline (issue #17). The
# targets are the issue's; (a)-(f) are runs of identical messages and say what those cost.
SCENARIOS: dict[str, Scenario] = {s.id: s for s in [
    # Request/reply as a user's service does it (issue #33): the number the README reports.
    Scenario("q", "request/reply with nats.go Request() and m.Respond(), 1 requester, 16 B",
             _natsgo_reqrep_metrics(Target("ratio", "<=", 1.1)), run_natsgo_reqrep, requires=natsgo.missing),
    Scenario("r", "request/reply with nats.go, 4 requesters (own connections), 16 B",
             _natsgo_reqrep_metrics(None), lambda spec, opts: run_natsgo_reqrep(spec, opts, requesters=4),
             requires=natsgo.missing),
    Scenario("t", "request/reply with nats-py request() and msg.respond(), 1 requester, 16 B",
             _natsgo_reqrep_metrics(Target("ratio", "<=", 1.1)), run_natspy_reqrep, requires=natspy_reqrep.missing),
    Scenario("p", "nats.go 1 publisher -> 1 subscriber, 64 subjects, 16-512 B drawn every message",
             [_deliv(Target("ratio", ">=", 0.8))],
             lambda spec, opts: run_natsgo_pubsub(spec, opts, 1, 64, (16, 512)), requires=natsgo.missing),
    Scenario("s", "nats.go 1 publisher -> 1 subscriber, 1 KiB",
             [_deliv(Target("ratio", ">=", 0.9))],
             lambda spec, opts: run_natsgo_pubsub(spec, opts, 1, 1, (1024, 1024)), requires=natsgo.missing),
    Scenario("m", "1 publisher -> 1 subscriber, 16-512 B drawn every message",
             [_deliv(Target("ratio", ">=", 0.8)), _pubs()], _traffic_scenario((16, 512), 1, ["traffic.s"])),
    Scenario("n", "1 publisher -> 4 wildcard subscribers, 64 subjects, 32-256 B, drawn every message",
             [_deliv(Target("ratio", ">=", 0.6)), _pubs()], _traffic_scenario((32, 256), 64, TRAFFIC_WILDCARDS)),
    Scenario("o", "1 publisher -> wildcard queue group of 4, 64 subjects, 32-256 B, drawn every message",
             [_deliv(), _pubs()], _traffic_scenario((32, 256), 64, TRAFFIC_WILDCARDS, queue_group=True)),
    Scenario("a", "publish only, 16 B", [_pubs(chart=True)], _pubsub_scenario(16, 1, 0)),
    Scenario("b", "1 publisher -> 1 subscriber, 16 B",
             [_deliv(Target("ratio", ">=", 0.30)), _pubs()], _pubsub_scenario(16, 1, 1)),
    Scenario("c", "1 publisher -> 1 subscriber, 1 KiB",
             [_deliv(Target("ratio", ">=", 0.8)), Metric("payload_mib_s", "payload MiB/s", "MiB/s", chart=False), _pubs()],
             _pubsub_scenario(1024, 1, 1)),
    Scenario("d", "1 publisher -> 4 subscribers (fan-out), 128 B",
             [_deliv(Target("ratio", ">=", 0.50)), _pubs()], _pubsub_scenario(128, 1, 4)),
    Scenario("e", "1 publisher -> queue group of 4, 128 B",
             [_deliv(Target("ratio", ">=", 0.35)), _pubs()], _pubsub_scenario(128, 1, 4, queue_group=True)),
    Scenario("f", "4 publishers -> 4 subscribers, 128 B",
             [_deliv(Target("ratio", ">=", 0.50)), _pubs()], _pubsub_scenario(128, 4, 4)),
    Scenario("g", "request/reply, own wire driver, 1 requester, 1 responder, sequential, 16 B", [
        Metric("p50_us", "p50 latency", "µs", higher_is_better=False, target=Target("ratio", "<=", 1.2)),
        Metric("p90_us", "p90 latency", "µs", higher_is_better=False, chart=False),
        Metric("p99_us", "p99 latency", "µs", higher_is_better=False, chart=False),
        Metric("rtt_rate", "round trips/s", "1/s", chart=False),
    ], run_reqrep),
    Scenario("h", "1000 and 5000 idle connections", [
        Metric("rss_per_conn_1000", "RSS/conn @1000", "KiB", higher_is_better=False, target=RSS_TARGET),
        # Issue #17's target is on 1000 clients, the count it measured (0.63 then); 5000 is
        # reported beside it without one (trio's cost per task and nursery: see the README).
        Metric("connects_rate_1000", "connects/s @1000", "conn/s", target=Target("ratio", ">=", 0.8)),
        Metric("rss_per_conn_5000", "RSS/conn @5000", "KiB", higher_is_better=False, target=RSS_TARGET),
        Metric("connects_rate_5000", "connects/s @5000", "conn/s"),
    ], run_idle_levels),
    Scenario("i", f"{N_WILDCARD_SUBS} wildcard subs on {WILDCARD_CONNS} conns, random subjects, 16 B",
             [_deliv(Target("ratio", ">=", 0.6)), _pubs()], _wildcard_scenario(None)),
    Scenario("j", f"{N_WILDCARD_SUBS} wildcard subs, 256 hot subjects, 16 B",
             [_deliv(Target("ratio", ">=", 0.5)), _pubs()], _wildcard_scenario(256)),
    Scenario("k", "10 000 simultaneous connections held", [
        Metric("held", "connections held", "conns", target=Target("abs", ">=", 10_000), chart=False),
        Metric("connects_rate", "connects/s @10000", "conn/s", chart=False),
        Metric("rss_per_conn", "RSS/conn @10000", "KiB", higher_is_better=False, chart=False),
    ], run_10k),
    Scenario("l", "1 publisher -> 1 subscriber, 8-64 B, size changing every message",
             [_deliv(), _pubs()], lambda spec, opts: run_pubsub(spec, opts, _mixed_sizes_plan(opts))),
]}
