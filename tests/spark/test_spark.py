"""The ``nats`` PySpark data source end to end: one local[2] SparkSession for the module, a
real JetStream server over TCP (a subprocess: natserver by default; ``NATS_SPARK_SERVER=
nats-server`` for the Go server).

Skipped (with the reason) when pyspark or Java is missing; CI installs both::

    apt-get install -y openjdk-17-jre-headless
    pip install -e '.[test,spark]'
    python -m pytest -m spark

Each test makes its own streams, so they share the server. Every streaming query runs with
``trigger(availableNow=True)`` and a timeout; a watchdog cancels Spark jobs that outlive
HARD_TIMEOUT.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")]

HARD_TIMEOUT = 150  # seconds for one test, Spark start included
QUERY_TIMEOUT = 120


def _skip_reason() -> str | None:
    try:
        import pyspark
    except ImportError:
        return "pyspark is not installed: pip install -e '.[spark]' (natserver is not on PyPI)"
    version = tuple(int(x) for x in re.findall(r"\d+", pyspark.__version__)[:2])
    if version < (4, 2):
        return f"pyspark {pyspark.__version__} is too old: Python streaming data sources need >= 4.2"
    java_home = os.environ.get("JAVA_HOME")
    if not shutil.which("java") and not (java_home and Path(java_home, "bin", "java").exists()):
        return "Java is not installed (Spark needs Java 17+): apt-get install -y openjdk-17-jre-headless"
    return None


_REASON = _skip_reason()
if _REASON:
    pytest.skip(_REASON, allow_module_level=True)

from natserver.spark import error_line, register  # noqa: E402
from natserver.spark._client import Connection, Publisher, js_request, stream_bounds, stream_info  # noqa: E402
from natserver.spark._server import JetStreamServer  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def js():
    with JetStreamServer() as server:
        yield server


@pytest.fixture(scope="session")
def spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("natserver-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def watchdog(request):
    """Hard timeout: cancel every Spark job and stop every query of a test that hangs."""
    if "spark" not in request.fixturenames:
        yield
        return
    session = request.getfixturevalue("spark")
    fired = []

    def fire():
        fired.append(True)
        for q in session.streams.active:
            try:
                q.stop()
            except Exception:
                pass
        session.sparkContext.cancelAllJobs()

    timer = threading.Timer(HARD_TIMEOUT, fire)
    timer.start()
    yield
    timer.cancel()
    assert not fired, f"test cancelled after {HARD_TIMEOUT} s"


@pytest.fixture
def conn(js):
    with Connection(js.url, timeout=10) as c:
        yield c


def create_stream(conn, name: str, subjects: list[str], **cfg) -> None:
    body = {"name": name, "subjects": subjects, "storage": "file", "duplicate_window": 120_000_000_000, **cfg}
    js_request(conn, f"STREAM.CREATE.{name}", body)


def publish(conn, n: int, subject_of, *, first: int = 0, headers_of=lambda i: None) -> None:
    pub = Publisher(conn)
    for i in range(first, first + n):
        pub.publish(subject_of(i), b"msg-%d" % i, headers_of(i))
    pub.finish()


def read(spark, js, **options):
    return spark.read.format("nats").option("servers", js.url).options(**{k: str(v) for k, v in options.items()}).load()


def copy_stream(spark, js, src: str, dst: str, checkpoint, **options):
    """readStream src -> writeStream dst (subjects src.x -> dst.x, ids from stream:seq),
    availableNow; returns [(batchId, numInputRows)] of the run."""
    from pyspark.sql import functions as F

    df = (
        spark.readStream.format("nats").option("servers", js.url).option("stream", src)
        .option("startingOffsets", "earliest")
        .options(**{k: str(v) for k, v in options.items()}).load()
    )
    out = df.select(
        F.regexp_replace("subject", "^" + src.lower(), dst.lower()).alias("subject"), "data", "stream", "seq"
    )
    query = (
        out.writeStream.format("nats").option("servers", js.url).option("stream", dst)
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    )
    try:
        assert query.awaitTermination(QUERY_TIMEOUT), "streaming query did not finish"
        assert query.exception() is None
    finally:
        query.stop()
    return [(p["batchId"], p["numInputRows"]) for p in query.recentProgress if p["numInputRows"]]


def stored(conn, stream: str) -> list[tuple[str, bytes, str | None]]:
    """(subject, data, Nats-Msg-Id) of every message of a stream, in order."""
    from natserver.spark._client import fetch_range

    first, last = stream_bounds(stream_info(conn, stream))
    return [
        (m.subject, m.data, (m.headers or {}).get("Nats-Msg-Id", [None])[0])
        for m in fetch_range(conn, stream, first, last + 1)
    ]


# -- batch reads -----------------------------------------------------------------------------------


def test_read_all(spark, js, conn):
    create_stream(conn, "RALL", ["rall.>"], allow_direct=True)
    before = datetime.now(timezone.utc) - timedelta(seconds=5)
    publish(conn, 90, lambda i: f"rall.{i % 3}", headers_of=lambda i: {"n": str(i)} if i % 2 == 0 else None)
    js_request(conn, "STREAM.MSG.DELETE.RALL", {"seq": 7})

    df = read(spark, js, stream="RALL", includeHeaders=True, minPartitions=3)
    assert df.columns == ["subject", "reply", "data", "headers", "stream", "seq", "timestamp"]
    assert df.rdd.getNumPartitions() == 3
    rows = df.orderBy("seq").collect()
    assert [r.seq for r in rows] == [s for s in range(1, 91) if s != 7]
    first = rows[0]
    assert (first.subject, first.reply, bytes(first.data), first.stream) == ("rall.0", None, b"msg-0", "RALL")
    assert first.headers == {"n": ["0"]} and rows[1].headers is None
    stamps = [r.timestamp.replace(tzinfo=timezone.utc) for r in rows]
    assert stamps == sorted(stamps) and before < stamps[0] < datetime.now(timezone.utc) + timedelta(seconds=5)

    ranged = read(spark, js, stream="RALL", startingOffsets=5, endingOffsets=12).collect()
    assert sorted(r.seq for r in ranged) == [5, 6, 8, 9, 10, 11]
    assert "headers" not in read(spark, js, stream="RALL").columns


def test_read_subject_filter(spark, js, conn):
    # a stream without allow_direct: read with STREAM.MSG.GET
    create_stream(conn, "RFILT", ["rfilt.>"])
    publish(conn, 60, lambda i: f"rfilt.{'a' if i % 4 else 'b'}.{i % 2}")
    rows = read(spark, js, stream="RFILT", subject="rfilt.b.*", minPartitions=2).collect()
    assert sorted(r.seq for r in rows) == list(range(1, 61, 4))
    assert {r.subject for r in rows} == {"rfilt.b.0"}
    # the stream found from the subject alone
    assert read(spark, js, subject="rfilt.a.1").count() == 30


def test_batch_write_headers_ids_and_rewrite(spark, js, conn):
    create_stream(conn, "WOUT", ["wout.>"], allow_direct=True)
    df = spark.createDataFrame(
        [(f"k{i}", f"value {i}", {"source": "test", "n": str(i)}) for i in range(40)],
        "msg_id string, data string, headers map<string,string>",
    )
    for _ in range(2):  # the second write is a replay: every id is known, nothing is stored again
        df.write.format("nats").option("servers", js.url).option("stream", "WOUT").option("subject", "wout.all") \
            .option("msgIdPrefix", "job:").mode("append").save()
    out = read(spark, js, stream="WOUT", includeHeaders=True).orderBy("seq").collect()
    assert len(out) == 40 and {r.subject for r in out} == {"wout.all"}
    assert sorted(bytes(r.data).decode() for r in out) == sorted(f"value {i}" for i in range(40))
    h = out[0].headers
    assert h["source"] == ["test"] and h["Nats-Msg-Id"][0].startswith("job:k")


# -- streaming: max per trigger, restart, replay ------------------------------------------------------


def test_stream_max_per_trigger_and_restart_from_checkpoint(spark, js, conn, tmp_path):
    create_stream(conn, "SIN", ["sin.>"], allow_direct=True)
    create_stream(conn, "SOUT", ["sout.>"], allow_direct=True)
    publish(conn, 100, lambda i: f"sin.{i % 4}")
    ckpt = tmp_path / "ckpt"

    assert copy_stream(spark, js, "SIN", "SOUT", ckpt, maxMessagesPerTrigger=40) == [(0, 40), (1, 40), (2, 20)]
    out = stored(conn, "SOUT")
    assert [(s, d) for s, d, _ in out] == [(f"sout.{i % 4}", b"msg-%d" % i) for i in range(100)]
    assert [mid for _, _, mid in out] == [f"SIN:{s}" for s in range(1, 101)]

    # restart: only the new messages are read
    publish(conn, 30, lambda i: f"sin.{i % 4}", first=100)
    assert copy_stream(spark, js, "SIN", "SOUT", ckpt, maxMessagesPerTrigger=40) == [(3, 30)]
    out = stored(conn, "SOUT")
    assert [d for _, d, _ in out] == [b"msg-%d" % i for i in range(130)]


def test_forced_replay_gives_n_outputs_for_n_inputs(spark, js, conn, tmp_path):
    create_stream(conn, "RIN", ["rin.>"], allow_direct=True)
    create_stream(conn, "ROUT", ["rout.>"], allow_direct=True)
    publish(conn, 60, lambda i: "rin.x")
    ckpt = tmp_path / "ckpt"
    assert copy_stream(spark, js, "RIN", "ROUT", ckpt, maxMessagesPerTrigger=25) == [(0, 25), (1, 25), (2, 10)]
    assert len(stored(conn, "ROUT")) == 60

    # Forget that batch 2 was committed: Spark runs it again from its offset log. More
    # messages arrived meanwhile; the replay must read exactly the 10 of batch 2, and the
    # sink's second publish of them is dropped by the stream (same Nats-Msg-Id).
    for marker in ("2", ".2.crc"):
        (ckpt / "commits" / marker).unlink(missing_ok=True)
    publish(conn, 5, lambda i: "rin.x", first=60)
    assert copy_stream(spark, js, "RIN", "ROUT", ckpt, maxMessagesPerTrigger=25) == [(2, 10), (3, 5)]

    out = stored(conn, "ROUT")
    assert [d for _, d, _ in out] == [b"msg-%d" % i for i in range(65)]  # N outputs for N inputs
    assert stream_bounds(stream_info(conn, "ROUT")) == (1, 65)  # nothing stored twice


# -- errors ----------------------------------------------------------------------------------------


def test_errors_name_the_problem_in_one_line(spark, js, conn):
    create_stream(conn, "ERRS", ["errs.>"])
    cases = [
        (lambda: read(spark, js, servers="nats://127.0.0.1:1", stream="ERRS"),
         "nats: cannot connect to NATS server nats://127.0.0.1:1: "),
        (lambda: read(spark, js, stream="NOPE"), f"nats: stream 'NOPE' not found on {js.url}"),
        (lambda: read(spark, js, stream="ERRS", startingOffsets="beginning"),
         "nats: option 'startingOffsets' must be earliest, latest, a stream sequence >= 1"),
        (lambda: spark.readStream.format("nats").option("servers", js.url).option("stream", "ERRS")
         .option("maxMessagePerTrigger", "5").load(),
         "nats: unknown read option 'maxmessagepertrigger': did you mean 'maxMessagesPerTrigger'?"),
        (lambda: read(spark, js, stream="ERRS", subject="other.>"),
         "nats: subject 'other.>' is not in stream 'ERRS' (its subjects: errs.>)"),
        (lambda: spark.createDataFrame([("errs.x",)], "subject string").write.format("nats")
         .option("servers", js.url).mode("append").save(),
         "nats: the DataFrame has no column 'data' (binary or string) to publish (its columns: subject)"),
        (lambda: spark.createDataFrame([("errs.x", b"")], "subject string, data binary").write.format("nats")
         .option("servers", js.url).option("stream", "NOPE").mode("append").save(),
         f"nats: stream 'NOPE' not found on {js.url}"),
    ]
    for action, expected in cases:
        with pytest.raises(Exception) as info:
            action()
        line = error_line(info.value)
        assert line is not None and line.startswith(expected), (expected, str(info.value)[:2000])


# -- the example pipeline ------------------------------------------------------------------------


def test_example_pipeline(spark, js):
    path = REPO / "examples" / "pipeline" / "pipeline.py"
    spec = importlib.util.spec_from_file_location("nats_pipeline_example", path)
    pipeline = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pipeline)
    expected, got = pipeline.run_pipeline(
        spark, js.url, events=600, waves=2, orders="PORDERS", stats="PSTATS", max_per_trigger=200, log=lambda *a: None
    )
    assert pipeline.compare(expected, got) == []
    assert sum(n for n, _ in got.values()) > 500


def _readme_spark_blocks() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## PySpark data source (natserver.spark)", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_readme_write_read_and_streaming_examples_run_as_written(spark, js, conn, tmp_path, capsys):
    """Issue 30 item 22: the README's Spark examples, run as they are written (only the server
    URL and the checkpoint directory are this test's), print what the README says."""
    write_read, streaming = _readme_spark_blocks()
    expected = re.search(r"^# (\[.*\])$", write_read, re.M).group(1)
    exec(write_read.replace("nats://127.0.0.1:4222", js.url), {"spark": spark})  # noqa: S102
    assert capsys.readouterr().out.strip() == expected
    create_stream(conn, "COPY", ["copy.>"])
    exec(streaming.replace("/tmp/ckpt", str(tmp_path / "ckpt")), {"spark": spark, "url": js.url})  # noqa: S102
    for query in spark.streams.active:
        assert query.awaitTermination(QUERY_TIMEOUT)
    assert stream_info(conn, "COPY")["state"]["messages"] == 2
