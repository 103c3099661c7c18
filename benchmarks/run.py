"""Side-by-side benchmark: natserver vs the Go nats-server.

    python -m benchmarks --quick               # what CI and developers run
    python -m benchmarks --only b,g --rounds 5
    python benchmarks/run.py --quick           # same thing

See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # "python benchmarks/run.py": make the package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import report  # noqa: E402
from benchmarks.scenarios import SCENARIOS, Options, RoundResult  # noqa: E402
from benchmarks.servers import (  # noqa: E402
    ServerSpec,
    default_nats_server_cmd,
    default_natserver_cmd,
    parse_cmd,
    raise_nofile_limit,
)

DEFAULT_OUT = Path(__file__).resolve().parent / "results"


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="≈1 s of load per scenario round, 3 rounds (CI / developers)")
    ap.add_argument("--rounds", type=int, help="rounds per server (default 5, --quick 3; at least 3 advised)")
    ap.add_argument("--duration", type=float, help="seconds of load per round (default 2, --quick 1)")
    ap.add_argument("--only", help="comma-separated scenario ids, e.g. a,b,g (default: all)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"directory for JSON + PNG (default {DEFAULT_OUT})")
    ap.add_argument("--natserver-cmd", help="command starting natserver (default: python -m natserver)")
    ap.add_argument("--nats-server-cmd",
                    help="command starting the Go server (default: $NATS_SERVER_REFERENCE, else nats-server 2.15.1 "
                         "from the CI cache, else nats-server on PATH; 'none' to skip)")
    ap.add_argument("--list", action="store_true", help="list the scenarios and exit")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.list:
        for sc in SCENARIOS.values():
            print(f"{sc.id}  {sc.title}")
        return 0
    rounds = args.rounds or (3 if args.quick else 5)
    opts = Options(duration=args.duration or (1.0 if args.quick else 2.0))
    if args.only:
        ids = [x.strip() for x in args.only.split(",") if x.strip()]
        unknown = [x for x in ids if x not in SCENARIOS]
        if unknown:
            print(f"unknown scenario(s): {', '.join(unknown)}; known: {', '.join(SCENARIOS)}", file=sys.stderr)
            return 2
        scenarios = [SCENARIOS[x] for x in ids]
    else:
        scenarios = list(SCENARIOS.values())

    nofile = raise_nofile_limit()  # before any server or worker is spawned: they inherit it
    spec_a = ServerSpec(report.A, parse_cmd(args.natserver_cmd) if args.natserver_cmd else default_natserver_cmd())
    if args.nats_server_cmd and args.nats_server_cmd.lower() != "none":
        spec_b = ServerSpec(report.B, parse_cmd(args.nats_server_cmd))
    elif args.nats_server_cmd is None and default_nats_server_cmd():
        spec_b = ServerSpec(report.B, default_nats_server_cmd())
    else:
        spec_b = None
    specs = [s for s in (spec_a, spec_b) if s]

    print(f"natserver:   {spec_a.cmdline}")
    print(f"nats-server: {spec_b.cmdline if spec_b else 'not found / skipped: absolute natserver rates only'}")
    print(f"rounds {rounds}, {opts.duration:g} s per round, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}, fd limit {nofile[0]}")
    if nofile[0] < 10_100 and any(sc.id == "k" for sc in scenarios):
        # The server holds all 10 000 sockets in one process.
        print(f"note: fd limit {nofile[0]} is below 10 000 (+ spare): scenario k will fail for lack of fds")
    print("CPU figures: % of one core over the measured window; load = all load-generator processes.\n")

    meta = dict(started=time.strftime("%Y-%m-%dT%H:%M:%S%z"), host=platform.node(), cpus=os.cpu_count(),
                python=sys.version.split()[0], rounds=rounds, duration=opts.duration, quick=args.quick,
                natserver_cmd=spec_a.cmdline, nats_server_cmd=spec_b.cmdline if spec_b else None,
                fd_limit=nofile, loadavg_start=os.getloadavg())
    all_rounds: dict[str, dict[str, list[RoundResult]]] = {}
    summaries: dict[str, dict] = {}
    not_run: dict[str, str] = {}  # scenario id -> why it could not run here
    failed = False
    try:
        for sc in scenarios:
            print(f"[{sc.id}] {sc.title}")
            why = sc.requires() if sc.requires else None
            if why:
                print(f"  skipped: {why}\n")
                not_run[sc.id] = why
                continue
            per_server: dict[str, list[RoundResult]] = {s.label: [] for s in specs}
            all_rounds[sc.id] = per_server
            for r in range(rounds):
                for spec in specs:  # A B A B ...: both servers see the same machine load
                    try:
                        res = sc.run(spec, opts)
                    except Exception as e:  # noqa: BLE001 - server failed to start, worker died...: report, go on
                        res = RoundResult(spec.label, error=f"{type(e).__name__}: {e}")
                    per_server[spec.label].append(res)
                    print(report.round_line(sc, r, res), flush=True)
                    failed |= not res.correct
            summaries[sc.id] = report.summarize(sc, per_server, spec_b is not None)
            print(report.format_table([summaries[sc.id]]))
            print()
    except KeyboardInterrupt:
        print("\ninterrupted: writing what was measured so far")
        failed = True
        for sc in scenarios:
            if sc.id in all_rounds and sc.id not in summaries and any(all_rounds[sc.id].values()):
                summaries[sc.id] = report.summarize(sc, all_rounds[sc.id], spec_b is not None)

    if not summaries:  # nothing ran: an error unless every scenario was skipped (and said why)
        return 0 if not_run and not failed else 1
    meta["loadavg_end"] = os.getloadavg()
    meta["skipped"] = not_run
    print("=" * 30, "summary (medians; ratio = median of per-round natserver/nats-server)", "=" * 30)
    print(report.format_table(list(summaries.values())))
    for sid, why in not_run.items():
        print(f"[{sid}] skipped: {why}")
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    jpath = args.out / f"bench-{stamp}.json"
    report.write_json(jpath, meta, scenarios, all_rounds, summaries)
    print(f"\nJSON: {jpath}")
    ppath = args.out / f"bench-{stamp}.png"
    skipped = report.write_png(ppath, list(summaries.values()),
                               f"natserver / nats-server, {stamp}, {rounds} rounds x {opts.duration:g} s")
    print(skipped or f"PNG:  {ppath}")
    # Exit status reflects errors and correctness only; performance targets
    # are reported in the table but do not fail the run.
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
