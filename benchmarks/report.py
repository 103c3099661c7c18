"""Reporting: per-round lines, the summary table, JSON with every raw number,
and a PNG bar chart of the natserver/nats-server ratios."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

from benchmarks.scenarios import RoundResult, Scenario

A = "natserver"
B = "nats-server"


def fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit in ("msg/s", "conn/s", "1/s"):
        for div, suf in ((1e6, "M"), (1e3, "k")):
            if abs(v) >= div:
                return f"{v / div:.2f}{suf}/s"
        return f"{v:.0f}/s"
    if unit == "µs":
        return f"{v:.1f} µs"
    if unit == "KiB":
        return f"{v:.1f} KiB"
    if unit == "MiB/s":
        return f"{v:.0f} MiB/s"
    if unit == "conns":
        return f"{v:.0f}"
    return f"{v:.3g} {unit}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}%"


def round_line(sc: Scenario, rnd: int, res: RoundResult) -> str:
    head = f"  round {rnd + 1} {res.server:<11}"
    if res.error:
        return f"{head} ERROR: {res.error.strip().splitlines()[0] if res.error.strip() else res.error}"
    vals = "  ".join(f"{m.label} {fmt(res.metrics.get(m.key), m.unit)}" for m in sc.metrics
                     if m.key in res.metrics)
    bad = [c for c in res.checks if not c.ok]
    ok = "correct" if not bad else "INCORRECT: " + "; ".join(f"{c.name} ({c.detail})" for c in bad)
    notes = f" [{', '.join(res.notes)}]" if res.notes else ""
    return (f"{head} {vals} | load CPU {_pct(res.load_cpu_pct)} server CPU {_pct(res.server_cpu_pct)}"
            f" | {ok}{notes}")


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def summarize(sc: Scenario, rounds: dict[str, list[RoundResult]], have_b: bool) -> dict:
    """Medians per server, the median of the per-round ratios, target status.

    Ratios are taken per round (natserver round r vs nats-server round r,
    run back to back) before the median, so that load from other users of the
    machine, which drifts over time, cancels as far as possible.
    """
    ra, rb = rounds.get(A, []), rounds.get(B, [])
    metrics = {}
    for m in sc.metrics:
        va = [r.metrics.get(m.key) for r in ra]
        vb = [r.metrics.get(m.key) for r in rb]
        ratios = [x / y for x, y in zip(va, vb) if x is not None and y]
        med_a = _median([x for x in va if x is not None])
        med_b = _median([x for x in vb if x is not None])
        ratio = _median(ratios)
        status = "-"
        if m.target:
            if m.target.kind == "ratio":
                met = m.target.met(ratio) if have_b else None
            else:
                met = m.target.met(med_a)
            status = "n/a" if met is None else ("PASS" if met else "FAIL")
        metrics[m.key] = dict(label=m.label, unit=m.unit, higher_is_better=m.higher_is_better,
                              target=m.target.text(m.unit) if m.target else None,
                              target_kind=m.target.kind if m.target else None,
                              target_value=m.target.value if m.target else None, chart=m.chart,
                              natserver_rounds=va, nats_server_rounds=vb, ratio_rounds=ratios,
                              natserver_median=med_a, nats_server_median=med_b, ratio_median=ratio,
                              status=status)
    problems = []
    for r_list in (ra, rb):
        for i, r in enumerate(r_list):
            if r.error:
                problems.append(f"{r.server} r{i + 1}: error")
            elif not r.correct:
                problems.append(f"{r.server} r{i + 1}: " + ", ".join(c.name for c in r.checks if not c.ok))
    return dict(id=sc.id, title=sc.title, metrics=metrics, correct=not problems, problems=problems,
                load_cpu_pct={A: _median([r.load_cpu_pct for r in ra if r.load_cpu_pct is not None]),
                              B: _median([r.load_cpu_pct for r in rb if r.load_cpu_pct is not None])},
                server_cpu_pct={A: _median([r.server_cpu_pct for r in ra if r.server_cpu_pct is not None]),
                                B: _median([r.server_cpu_pct for r in rb if r.server_cpu_pct is not None])})


HEADER = ("scn", "metric", A, B, "ratio", "ratio range", "target", "pass", "load CPU A/B", "server CPU A/B", "correct")


def table_rows(summary: dict) -> list[tuple]:
    rows = []
    for i, (key, m) in enumerate(summary["metrics"].items()):
        ratio = m["ratio_median"]
        first = i == 0
        rows.append((
            summary["id"] if first else "",
            m["label"] + ("" if m["higher_is_better"] else " (lower=better)"),
            fmt(m["natserver_median"], m["unit"]),
            fmt(m["nats_server_median"], m["unit"]),
            "-" if ratio is None else f"{ratio:.2f}",
            # spread of the per-round ratios: how much to trust the median
            f"{min(m['ratio_rounds']):.2f}-{max(m['ratio_rounds']):.2f}" if m["ratio_rounds"] else "-",
            m["target"] or "-",
            m["status"],
            (f"{_pct(summary['load_cpu_pct'][A])}/{_pct(summary['load_cpu_pct'][B])}" if first else ""),
            (f"{_pct(summary['server_cpu_pct'][A])}/{_pct(summary['server_cpu_pct'][B])}" if first else ""),
            ("yes" if summary["correct"] else "NO") if first else "",
        ))
    return rows


def format_table(summaries: list[dict]) -> str:
    rows = [HEADER] + [r for s in summaries for r in table_rows(s)]
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(HEADER))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    out = [line(rows[0]), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in rows[1:]]
    problems = [f"  {s['id']}: {p}" for s in summaries for p in s["problems"]]
    if problems:
        out += ["", "correctness problems / errors:"] + problems
    return "\n".join(out)


def _jsonable(obj):
    if dataclasses.is_dataclass(obj):
        return _jsonable(dataclasses.asdict(obj))
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


def write_json(path: Path, meta: dict, scenarios: list[Scenario], rounds: dict[str, dict[str, list[RoundResult]]],
               summaries: dict[str, dict]) -> None:
    data = dict(meta=meta, scenarios={
        sc.id: dict(title=sc.title, summary=summaries[sc.id],
                    rounds={srv: [_jsonable(r) for r in lst] for srv, lst in rounds[sc.id].items()})
        for sc in scenarios if sc.id in summaries
    })
    path.write_text(json.dumps(data, indent=1, default=str))


def write_png(path: Path, summaries: list[dict], title: str) -> str | None:
    """Bar chart of the median ratios; returns a message if skipped."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib not installed (pip install matplotlib): PNG skipped"
    bars = []
    for s in summaries:
        for m in s["metrics"].values():
            if m["chart"] and m["ratio_median"] is not None:
                bars.append((s["id"], m))
    if not bars:
        return "no ratios to plot (nats-server side skipped?): PNG skipped"
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(bars) + 2), 5))
    colors = {"PASS": "#3a9a4a", "FAIL": "#c8453c"}
    top = max(max([m["ratio_median"], *m["ratio_rounds"],
                   m["target_value"] if m["target_kind"] == "ratio" else 0]) for _, m in bars)
    for x, (sid, m) in enumerate(bars):
        ax.bar(x, m["ratio_median"], color=colors.get(m["status"], "#8a8f98"), width=0.65)
        # per-round ratios as dots: shows the spread behind the median
        ax.plot([x] * len(m["ratio_rounds"]), m["ratio_rounds"], "k.", ms=4, alpha=0.6)
        if m["target_kind"] == "ratio":
            tv = m["target_value"]
            ax.hlines(tv, x - 0.4, x + 0.4, colors="black", linewidths=2)
            ax.annotate(m["target"], (x + 0.4, tv), textcoords="offset points", xytext=(2, -3),
                        ha="left", fontsize=7)
        ax.annotate(f"{m['ratio_median']:.2f}", (x, m["ratio_median"]), textcoords="offset points",
                    xytext=(0, 3), ha="center", fontsize=8)
    ax.axhline(1.0, color="#444", linestyle="--", linewidth=0.8)
    ax.set_xticks(range(len(bars)))
    ax.set_xticklabels([f"{sid}\n{m['label']}" + ("\n(lower=better)" if not m["higher_is_better"] else "")
                        + (f"\ntarget {m['target']} abs." if m["target_kind"] == "abs" else "")
                        for sid, m in bars], fontsize=7)
    ax.set_ylim(0, top * 1.15)
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=colors["PASS"], label="target met"),
                       Patch(color=colors["FAIL"], label="target missed"),
                       Patch(color="#8a8f98", label="no target")],
              fontsize=7, loc="upper right", framealpha=0.8)
    ax.set_ylabel("natserver / nats-server (median of rounds)")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
