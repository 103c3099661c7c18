"""An end-to-end data pipeline: NATS JetStream -> Spark Structured Streaming -> NATS JetStream.

    pip install -e '.[spark]'            # natserver + pyspark; Java 17+ on PATH
    python examples/pipeline/pipeline.py

What it does, on a laptop (Spark local[2]) against a natserver it starts (``python -m
natserver -js`` on a random port, a temporary store; ``--servers`` to use a running server):

1. creates two streams: ``ORDERS`` (``orders.<region>``, the events) and ``ORDER_STATS``
   (``order_stats.<region>.<yyyyMMddHHmm>``, the window's start minute; one message kept per
   subject: the latest result);
2. publishes the first wave of synthetic order events (JSON, each with ``Nats-Msg-Id``);
3. runs the Spark job with ``trigger(availableNow=True)``: read ``ORDERS`` by sequence
   (``maxMessagesPerTrigger`` at a time), parse the JSON, drop cancelled orders, aggregate
   per region and one-minute event-time window (orders, revenue, average and largest order),
   write every result to ``ORDER_STATS`` with a message id made of its content;
4. publishes a second wave and runs the same job again: it restarts from its checkpoint,
   reads only the new events, and updates the windows they fall into;
5. reads ``ORDER_STATS`` back (a Spark batch read) and checks it against totals computed
   while publishing: every event counted exactly once. Exit status 0 when they match.

The output mode is ``complete``: each micro-batch writes every window. The id of a result
(region, window, orders, revenue) does not change while the window does not, so the stream's
duplicate window drops the repeats, and a batch that Spark replays after a crash writes
nothing twice.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone

REGIONS = ("eu", "us", "apac", "latam")
ORDERS_SCHEMA = "order_id string, region string, customer string, amount double, status string, ts timestamp"


# -- the NATS side: streams, events, expected totals ----------------------------------------------


def create_streams(conn, orders: str = "ORDERS", stats: str = "ORDER_STATS") -> None:
    from natserver.spark import js_request

    common = {"storage": "file", "retention": "limits", "duplicate_window": 120_000_000_000, "allow_direct": True}
    js_request(conn, f"STREAM.CREATE.{orders}", {"name": orders, "subjects": [f"{orders.lower()}.>"], **common})
    js_request(conn, f"STREAM.CREATE.{stats}",
               {"name": stats, "subjects": [f"{stats.lower()}.>"], "max_msgs_per_subject": 1, **common})


def make_events(n: int, *, seed: int, first_id: int = 0, start: datetime | None = None, minutes: int = 5):
    """``n`` order events over ``minutes`` of event time; about 5% are cancelled."""
    rng = random.Random(seed)
    start = start or datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    for i in range(n):
        ts = start + timedelta(seconds=rng.uniform(0, minutes * 60))
        yield {
            "order_id": f"o-{first_id + i:07d}",
            "region": rng.choice(REGIONS),
            "customer": f"c-{rng.randrange(500):03d}",
            "amount": round(rng.uniform(1, 250), 2),
            "status": "cancelled" if rng.random() < 0.05 else "paid",
            "ts": ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        }


def publish_events(conn, events, orders: str, expected: dict) -> int:
    """Publish events to ``<orders>.<region>`` (acknowledged, Nats-Msg-Id = order id) and
    add the paid ones to ``expected[(region, minute)] = [orders, revenue_cents]``."""
    from natserver.spark import Publisher

    pub = Publisher(conn, window=512)
    count = 0
    for e in events:
        pub.publish(f"{orders.lower()}.{e['region']}", json.dumps(e).encode(), msg_id=e["order_id"])
        count += 1
        if e["status"] == "paid":
            minute = e["ts"][:16]  # 2026-01-01T12:03
            slot = expected.setdefault((e["region"], minute), [0, 0])
            slot[0] += 1
            slot[1] += round(e["amount"] * 100)
    pub.finish()
    return count


# -- the Spark job ----------------------------------------------------------------------------------


def stats_query(spark, servers: str, orders: str, stats: str, max_per_trigger: int = 5000):
    """The streaming DataFrame of results: subject, data (JSON), msg_id."""
    from pyspark.sql import functions as F

    events = (
        spark.readStream.format("nats")
        .option("servers", servers)
        .option("stream", orders)
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", max_per_trigger)
        .load()
    )
    orders_df = (
        events.select(F.from_json(F.col("data").cast("string"), ORDERS_SCHEMA).alias("o"), "seq")
        .select("o.*", "seq")
        .where((F.col("status") == "paid") & F.col("region").isNotNull() & (F.col("amount") > 0))
        .withColumn("amount_cents", F.round(F.col("amount") * 100).cast("long"))
    )
    per_window = orders_df.groupBy("region", F.window("ts", "1 minute").alias("w")).agg(
        F.count("*").alias("orders"),
        F.sum("amount_cents").alias("revenue_cents"),
        F.max("amount_cents").alias("max_cents"),
    )
    minute = F.date_format(F.col("w.start"), "yyyy-MM-dd'T'HH:mm")
    return per_window.select(
        F.concat_ws(".", F.lit(stats.lower()), "region", F.date_format(F.col("w.start"), "yyyyMMddHHmm")).alias("subject"),
        F.to_json(
            F.struct(
                "region",
                minute.alias("minute"),
                "orders",
                (F.col("revenue_cents") / 100).alias("revenue"),
                F.round(F.col("revenue_cents") / F.col("orders") / 100, 2).alias("avg_order"),
                (F.col("max_cents") / 100).alias("max_order"),
            )
        ).alias("data"),
        # Same window, same numbers -> same id: repeats and replays are dropped by the stream.
        F.concat_ws(":", "region", minute, "orders", "revenue_cents").alias("msg_id"),
    )


def run_job(spark, servers: str, orders: str, stats: str, checkpoint: str, max_per_trigger: int = 5000,
            timeout: float = 300) -> list[tuple[int, int]]:
    """One run of the job until the events published so far are processed; returns the
    (batch id, input rows) of its micro-batches."""
    query = (
        stats_query(spark, servers, orders, stats, max_per_trigger)
        .writeStream.format("nats")
        .option("servers", servers)
        .option("stream", stats)
        .option("checkpointLocation", checkpoint)
        .outputMode("complete")
        .trigger(availableNow=True)
        .start()
    )
    try:
        if not query.awaitTermination(timeout):
            raise TimeoutError(f"the streaming query did not finish within {timeout:g} s")
    finally:
        query.stop()
    return [(p["batchId"], p["numInputRows"]) for p in query.recentProgress]


def read_results(spark, servers: str, stats: str) -> dict:
    """ORDER_STATS as {(region, minute): [orders, revenue_cents]} (a Spark batch read)."""
    from pyspark.sql import functions as F

    rows = (
        spark.read.format("nats").option("servers", servers).option("stream", stats).load()
        .select(F.from_json(F.col("data").cast("string"),
                            "region string, minute string, orders long, revenue double").alias("r"))
        .select("r.*").collect()
    )
    return {(r.region, r.minute): [r.orders, round(r.revenue * 100)] for r in rows}


def compare(expected: dict, got: dict) -> list[str]:
    problems = []
    for key in sorted(set(expected) | set(got)):
        if expected.get(key) != got.get(key):
            problems.append(f"{key}: expected {expected.get(key)}, got {got.get(key)}")
    return problems


def print_summary(got: dict) -> None:
    per_region: dict = defaultdict(lambda: [0, 0])
    for (region, _minute), (n, cents) in got.items():
        per_region[region][0] += n
        per_region[region][1] += cents
    print(f"{'region':8} {'orders':>7} {'revenue':>12}")
    for region, (n, cents) in sorted(per_region.items()):
        print(f"{region:8} {n:7d} {cents / 100:12.2f}")


def new_spark(app: str = "nats-pipeline"):
    import os
    import warnings

    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's workers: this Python
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run_pipeline(spark, servers: str, *, events: int, waves: int = 2, orders: str = "ORDERS",
                 stats: str = "ORDER_STATS", checkpoint: str | None = None, max_per_trigger: int = 5000,
                 seed: int = 8, log=print) -> tuple[dict, dict]:
    """Steps 1-5 against ``servers``; returns (expected, got)."""
    from natserver.spark import Connection, register

    register(spark)
    spark.conf.set("spark.sql.session.timeZone", "UTC")  # minutes and windows in UTC, as the events
    own_checkpoint = checkpoint is None
    checkpoint = checkpoint or tempfile.mkdtemp(prefix="nats-pipeline-ckpt-")
    expected: dict = {}
    try:
        with Connection(servers) as conn:
            create_streams(conn, orders, stats)
            per_wave = events // waves
            for wave in range(waves):
                n = per_wave if wave < waves - 1 else events - per_wave * (waves - 1)
                t = time.monotonic()
                published = publish_events(conn, make_events(n, seed=seed + wave, first_id=wave * per_wave),
                                           orders, expected)
                log(f"wave {wave + 1}: published {published} events to {orders} in {time.monotonic() - t:.1f} s")
                t = time.monotonic()
                batches = run_job(spark, servers, orders, stats, checkpoint, max_per_trigger)
                log(f"wave {wave + 1}: Spark job ran micro-batches {batches} in {time.monotonic() - t:.1f} s")
        return expected, read_results(spark, servers, stats)
    finally:
        if own_checkpoint:
            shutil.rmtree(checkpoint, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=20_000, help="order events to publish (default 20000)")
    ap.add_argument("--waves", type=int, default=2, help="publish and run the job this many times (default 2)")
    ap.add_argument("--servers", help="a running JetStream server (default: start natserver -js)")
    ap.add_argument("--server", default="natserver", help="what to start: natserver (default), nats-server, or a command")
    ap.add_argument("--max-per-trigger", type=int, default=5000)
    args = ap.parse_args(argv)

    from natserver.spark._server import JetStreamServer

    server = None
    servers = args.servers
    if servers is None:
        server = JetStreamServer(args.server).start()
        servers = server.url
        print(f"started {args.server} -js on {servers} (store {server.store_dir})")
    spark = new_spark()
    try:
        t = time.monotonic()
        expected, got = run_pipeline(spark, servers, events=args.events, waves=args.waves,
                                     max_per_trigger=args.max_per_trigger)
        print_summary(got)
        problems = compare(expected, got)
        paid = sum(n for n, _ in expected.values())
        if problems:
            print(f"MISMATCH in {len(problems)} windows:", *problems[:10], sep="\n  ")
            return 1
        print(f"OK: {len(got)} windows, {paid} paid orders counted exactly once ({time.monotonic() - t:.1f} s)")
        return 0
    finally:
        spark.stop()
        if server is not None:
            server.close()


if __name__ == "__main__":
    sys.exit(main())
