"""The ``nats`` PySpark data source: rows per second read and written through Spark.

Workloads on one local[2] SparkSession, 100 000 messages of 100 bytes by default:

* ``read``    batch read of the whole stream (``spark.read.format("nats")``, 2 partitions),
              materialised with the ``noop`` sink (no collect to the driver);
* ``write``   a generated DataFrame (subject, data, msg_id) written with ``df.write.format("nats")``:
              every message acknowledged by JetStream, ids checked against the duplicate window;
* ``stream``  streaming copy: readStream (availableNow) -> writeStream into another stream,
              source to sink, with the checkpoint;

against natserver (``python -m natserver -js``) and, if on PATH, nats-server -js. The first
round of each workload warms Spark up (Python workers, JIT) and is reported apart; the
median of the other rounds is the result.

Usage (from the repository root; needs ``pip install -e '.[spark]'`` and Java 17+)::

    python benchmarks/bench_spark.py                       # 100k messages, 3 rounds, both servers
    python benchmarks/bench_spark.py --messages 20000 --rounds 2 --servers natserver

Prints a table and writes JSON to benchmarks/results/ (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from natserver.spark._client import Connection, Publisher, js_request, stream_info  # noqa: E402
from natserver.spark._server import JetStreamServer  # noqa: E402

STREAM_CFG = {"storage": "file", "allow_direct": True, "duplicate_window": 120_000_000_000}


def create(conn, name: str) -> None:
    js_request(conn, f"STREAM.CREATE.{name}", {"name": name, "subjects": [f"{name.lower()}.>"], **STREAM_CFG})


def fill(conn, name: str, n: int, size: int) -> float:
    """Publish n messages of ``size`` bytes, acknowledged; returns messages per second."""
    payload = os.urandom(size // 2).hex().encode()[:size]
    pub = Publisher(conn, window=1024)
    t = time.perf_counter()
    for i in range(n):
        pub.publish(f"{name.lower()}.{i % 16}", payload, msg_id=f"m{i}")
    pub.finish()
    return n / (time.perf_counter() - t)


def count(conn, name: str) -> int:
    return int(stream_info(conn, name)["state"]["messages"])


def bench_read(spark, url: str, stream: str, n: int) -> float:
    t = time.perf_counter()
    (spark.read.format("nats").option("servers", url).option("stream", stream).option("minPartitions", 2)
     .load().write.format("noop").mode("overwrite").save())
    return n / (time.perf_counter() - t)


def bench_write(spark, conn, url: str, n: int, round_: int) -> float:
    name = f"BW{round_}"
    create(conn, name)
    df = spark.range(n, numPartitions=2).selectExpr(
        f"concat('{name.lower()}.', cast(id % 16 as string)) AS subject",
        "concat('payload-', lpad(cast(id as string), 92, '0')) AS data",
        "cast(id as string) AS msg_id",
    )
    df.cache().count()  # generate outside the timing
    t = time.perf_counter()
    df.write.format("nats").option("servers", url).option("stream", name).mode("append").save()
    rate = n / (time.perf_counter() - t)
    df.unpersist()
    got = count(conn, name)
    assert got == n, f"write: {got} messages stored, expected {n}"
    return rate


def bench_stream(spark, conn, url: str, src: str, n: int, round_: int) -> float:
    dst = f"BS{round_}"
    create(conn, dst)
    ckpt = tempfile.mkdtemp(prefix="bench-spark-ckpt-")
    try:
        df = (spark.readStream.format("nats").option("servers", url).option("stream", src)
              .option("startingOffsets", "earliest").option("minPartitions", 2).load())
        out = df.selectExpr(f"concat('{dst.lower()}.x') AS subject", "data", "stream", "seq")
        t = time.perf_counter()
        q = (out.writeStream.format("nats").option("servers", url).option("stream", dst)
             .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
        if not q.awaitTermination(600):
            q.stop()
            raise TimeoutError("streaming copy did not finish in 600 s")
        rate = n / (time.perf_counter() - t)
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)
    got = count(conn, dst)
    assert got == n, f"stream: {got} messages stored, expected {n}"
    return rate


def run_server(kind: str, spark, n: int, size: int, rounds: int) -> dict:
    with JetStreamServer(kind) as server, Connection(server.url, timeout=30) as conn:
        create(conn, "BENCH")
        pub_rate = fill(conn, "BENCH", n, size)
        res: dict = {"publish_msgs_per_s": round(pub_rate)}
        for name, fn in (
            ("read", lambda r: bench_read(spark, server.url, "BENCH", n)),
            ("write", lambda r: bench_write(spark, conn, server.url, n, r)),
            ("stream", lambda r: bench_stream(spark, conn, server.url, "BENCH", n, r)),
        ):
            rates = []
            for r in range(rounds):
                rates.append(fn(r))
                print(f"  {kind:12} {name:7} round {r + 1}: {rates[-1]:10.0f} rows/s", flush=True)
            res[name] = {
                "first_round_rows_per_s": round(rates[0]),
                "rows_per_s": round(statistics.median(rates[1:] if len(rates) > 1 else rates)),
                "rounds": [round(x) for x in rates],
            }
        return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=100, help="payload bytes (default 100)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--servers", default=None, help="comma-separated: natserver,nats-server (default: both if nats-server is on PATH)")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    args = ap.parse_args(argv)
    kinds = args.servers.split(",") if args.servers else ["natserver"] + (["nats-server"] if shutil.which("nats-server") else [])

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import warnings

    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    from pyspark.sql import SparkSession

    from natserver.spark import register

    spark = (
        SparkSession.builder.master("local[2]").appName("bench-spark")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2").getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    results = {"messages": args.messages, "size": args.size, "rounds": args.rounds, "cpus": os.cpu_count(),
               "spark": spark.version, "servers": {}}
    try:
        for kind in kinds:
            print(f"{kind}: {args.messages} messages of {args.size} B, {args.rounds} rounds", flush=True)
            results["servers"][kind] = run_server(kind, spark, args.messages, args.size, args.rounds)
    finally:
        spark.stop()

    print()
    print(f"{'server':12} {'publish':>10} {'read':>10} {'write':>10} {'stream':>10}   (rows/s, median; first round in brackets)")
    for kind, r in results["servers"].items():
        cells = [f"{r['publish_msgs_per_s']:10d}"] + [
            f"{r[w]['rows_per_s']:10d} [{r[w]['first_round_rows_per_s']}]" for w in ("read", "write", "stream")
        ]
        print(f"{kind:12} " + " ".join(cells))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"spark-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(results, indent=2))
    print(f"\nwritten {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
