"""Command line for the conformance suite.

    python -m conformance record [-k SUBSTR] [--repeat N]
        Run every case against nats-server and write expected/<case>.json.  With --repeat N
        (default 2) each case is run N times and a case whose transcripts differ between runs
        is reported as non-deterministic (and not written).

    python -m conformance run [--target natserver|nats-server] [--against recorded|live] [-k SUBSTR]
        Run the cases against the target and print every difference (a quick alternative to
        pytest that shows the whole list at once).

    python -m conformance list
        Print the case names.
"""

from __future__ import annotations

import argparse
import sys
import time

import trio

from . import harness, runner
from .cases import CASES


def _select(pattern: str | None):
    if not pattern:
        return list(CASES)
    return [c for c in CASES if pattern in c.name]


def cmd_record(args) -> int:
    binary = harness.find_nats_server()
    if binary is None:
        print("nats-server not found (set NATS_SERVER_REFERENCE)", file=sys.stderr)
        return 2
    version = harness.nats_server_version(binary) or "?"
    if version != harness.REFERENCE_VERSION:
        print(f"warning: recording with nats-server {version}, expected {harness.REFERENCE_VERSION}", file=sys.stderr)
    cases = _select(args.k)
    pool = harness.ServerPool()
    unstable = []
    t0 = time.monotonic()
    try:
        outcomes = trio.run(
            lambda: runner.run_many(cases, target=None, reference="live", pool=pool, jobs=args.jobs, repeat=args.repeat)
        )
    finally:
        pool.close()
    for case in cases:
        out = outcomes[case.name]
        if out.error:
            unstable.append(case.name)
            print(f"ERROR {case.name}: {out.error}")
            continue
        first = out.reference_runs[0]
        for other in out.reference_runs[1:]:
            d = harness.diff_transcripts(first.transcript, other.transcript, labels=("run 1", "run N"))
            if d:
                unstable.append(case.name)
                print(f"NON-DETERMINISTIC {case.name}\n{d}")
                break
        else:
            harness.save_expected(case, first, version)
            if args.verbose:
                print(f"== {case.name}")
                for name, t in first.transcript.items():
                    print(f"  [{name}] " + " ".join(t.lines()))
        for note in (n for r in out.reference_runs for n in r.notes):
            print(f"  note {case.name}: {note}")
    # Remove recordings of cases that no longer exist.
    if not args.k:
        names = {c.name for c in CASES}
        for path in harness.EXPECTED_DIR.glob("*.json"):
            if path.stem not in names:
                path.unlink()
                print(f"removed stale {path.name}")
    print(f"recorded {len(cases) - len(unstable)} of {len(cases)} cases in {time.monotonic() - t0:.1f}s")
    return 1 if unstable else 0


def cmd_run(args) -> int:
    cases = _select(args.k)
    pool = harness.ServerPool()
    t0 = time.monotonic()
    try:
        outcomes = trio.run(
            lambda: runner.run_many(cases, target=args.target, reference=args.against, pool=pool, jobs=args.jobs)
        )
    finally:
        pool.close()
    failed: list[tuple[str, str]] = []
    skipped: list[tuple[str, str]] = []
    for case in cases:
        out = outcomes[case.name]
        if out.skip:
            skipped.append((case.name, out.skip.splitlines()[0]))
        elif out.error:
            failed.append((case.name, out.error.splitlines()[0]))
        elif out.diff:
            failed.append((case.name, harness.short_summary(out.expected, out.got.transcript)))
            if not args.quiet:
                d = harness.diff_transcripts(out.expected, out.got.transcript, labels=("nats-server", args.target))
                print(f"FAIL {case.name}\n{d}\n")
    for name, why in skipped:
        print(f"SKIP {name}: {why}")
    print(f"\n{len(cases) - len(failed) - len(skipped)} passed, {len(failed)} failed, {len(skipped)} skipped "
          f"in {time.monotonic() - t0:.1f}s")
    for name, summary in failed:
        print(f"  {name}: {summary}")
    return 1 if failed else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance")
    sub = parser.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="record expectations from nats-server")
    rec.add_argument("-k", help="only cases whose name contains this")
    rec.add_argument("--repeat", type=int, default=2)
    rec.add_argument("-v", "--verbose", action="store_true")
    rec.add_argument("-j", "--jobs", type=int, default=runner.DEFAULT_JOBS)
    run = sub.add_parser("run", help="compare a server with the expectations")
    run.add_argument("-k", help="only cases whose name contains this")
    run.add_argument("--target", default="natserver", choices=["natserver", "nats-server"])
    run.add_argument("--against", default="recorded", choices=["recorded", "live"])
    run.add_argument("-q", "--quiet", action="store_true", help="summary only")
    run.add_argument("-j", "--jobs", type=int, default=runner.DEFAULT_JOBS)
    sub.add_parser("list", help="list case names")
    args = parser.parse_args(argv)
    if args.cmd == "record":
        return cmd_record(args)
    if args.cmd == "run":
        return cmd_run(args)
    for c in CASES:
        print(c.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
