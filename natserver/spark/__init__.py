"""natserver.spark: a PySpark data source for NATS JetStream streams.

It needs the ``spark`` extra, PySpark >= 4.2 (and Java 17+ for Spark itself). natserver is not
on PyPI: in a checkout of natserver, ``pip install -e '.[spark]'``; or, natserver being
installed already, ``pip install 'pyspark[sql]>=4.2'``.

::

    from natserver.spark import register
    register(spark)                       # format("nats") in this SparkSession

    events = (spark.readStream.format("nats")
              .option("servers", "nats://127.0.0.1:4222")
              .option("stream", "EVENTS")
              .option("startingOffsets", "earliest")
              .load())                    # subject, reply, data, stream, seq, timestamp
    (events.selectExpr("'results.copy' AS subject", "data", "stream", "seq")
           .writeStream.format("nats").option("stream", "RESULTS")
           .option("checkpointLocation", "/tmp/ckpt").trigger(availableNow=True).start())

Reading (batch ``spark.read`` and streaming ``spark.readStream``): a stream is read by
sequence. A streaming offset is ``{"stream": name, "seq": next}`` in Spark's checkpoint; a
micro-batch reads the sequences [start, end) it planned, so a restarted query, or a batch
Spark replays from its offset log, reads exactly the same messages. Columns: ``subject``,
``reply`` (always null: JetStream does not store reply subjects), ``data`` (binary),
``headers`` (map<string, array<string>>, with includeHeaders), ``stream``, ``seq`` (long),
``timestamp`` (the server's time of the message).

Read options (names case-insensitive):

=========================  ==================================================================
servers                    ``nats://host:port`` list, comma-separated (default nats://127.0.0.1:4222);
                           ``tls://`` for TLS; ``nats://user:pass@host`` or ``nats://token@host``
credentials                path of a NATS ``.creds`` file (JWT + nkey); or ``user`` + ``password``,
                           ``token``, ``nkeySeed``; ``tlsCaFile`` for a private CA
stream                     the stream (required unless ``subject`` is in exactly one stream)
subject                    only messages on this subject (wildcards ``*``, ``>`` allowed)
startingOffsets            ``earliest``, ``latest`` or a sequence (first one read); default
                           ``latest`` for streaming (only new messages), ``earliest`` for batch.
                           A restarted query goes on from its checkpoint instead.
endingOffsets              ``latest`` or a sequence (exclusive: the first one *not* read); default
                           ``latest`` for batch, none (unbounded) for streaming
maxMessagesPerTrigger      at most this many sequences per micro-batch (with a subject filter a
                           micro-batch may hold fewer rows)
minPartitions              split each range into at least this many Spark partitions (default 1)
maxMessagesPerPartition    and more partitions when one would exceed this (default 100000)
includeHeaders             add the ``headers`` column (default false)
failOnDataLoss             fail when messages the query must read are gone (limits, purge, a
                           deleted and re-created stream); default true; false skips them
timeout                    seconds to wait for the server (default 10)
fetchBatchSize             messages per request / requests in flight (default 1024)
=========================  ==================================================================

Trigger.AvailableNow is supported: the query reads up to the stream's last message when it
starts, in micro-batches of maxMessagesPerTrigger, then stops.

Writing (``df.write`` and ``df.writeStream``): one NATS message per row, published with a
reply subject and acknowledged by JetStream (a refused or unacknowledged publish fails the
task). Columns: ``subject`` (string; or the ``subject`` option for all rows), ``data``
(binary or string), optional ``headers`` (map<string,string> or map<string,array<string>>),
optional ``msg_id``. The message id is sent as ``Nats-Msg-Id``: the stream drops a message
whose id it has seen in its ``duplicate_window`` (default 2 minutes), so a batch Spark replays
after a failure is not written twice. Without a ``msg_id`` column, rows that carry the
``stream`` and ``seq`` columns of a nats source get the id ``<stream>:<seq>`` (one output
per input message; give ``msg_id`` yourself when a row derives from several inputs, e.g.
an aggregate: the window and the key). Without either there is no id, and a replay publishes
again (a warning says so).

Write options: ``servers`` and the credentials as above; ``stream`` (checked before the
query starts; every publish carries ``Nats-Expected-Stream``); ``subject``; ``msgIdPrefix``
(prepended to every id, to keep the ids of different jobs apart); ``acks`` (default true;
false publishes plain core NATS messages, at most once); ``maxInFlight`` (unacknowledged
publishes per task, default 256); ``timeout``. A task publishes its partition's rows in
order; partitions are written side by side, so their rows interleave in the stream
(``coalesce(1)`` for one order).

The small blocking client the data source uses on the driver and in Spark's workers is
public too, for scripts around a pipeline: ``Connection(servers)`` (``.request``, ``.close``),
``Publisher(conn)`` (``.publish(subject, data, headers, msg_id)`` then ``.finish()``: every
publish acknowledged) and ``js_request(conn, "STREAM.CREATE.NAME", {...})`` for the JetStream
API.

Errors are :class:`NatsSparkError` subclasses with one-line messages starting ``nats:``;
bad options, an unreachable server and a missing stream are raised on the driver when the
DataFrame is defined (``load()``) or the write is planned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._client import Connection, Publisher, js_request
from ._errors import (
    ConnectError,
    DataLossError,
    JetStreamError,
    JetStreamNotEnabled,
    NatsSparkError,
    NatsTimeout,
    OptionError,
    PublishError,
    StreamNotFound,
)

if TYPE_CHECKING:
    from .datasource import NatsDataSource

__all__ = [
    "Connection",
    "ConnectError",
    "DataLossError",
    "JetStreamError",
    "JetStreamNotEnabled",
    "NatsDataSource",
    "NatsSparkError",
    "NatsTimeout",
    "OptionError",
    "PublishError",
    "Publisher",
    "StreamNotFound",
    "error_line",
    "js_request",
    "read_schema",
    "register",
]


def error_line(exc: BaseException) -> str | None:
    """The one-line ``nats: ...`` message of our error inside whatever Spark raised (Spark
    wraps a data source's exception in its own, with the Python traceback), or None."""
    import re

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, NatsSparkError):
            return str(current)
        m = re.search(r"(?m)^natserver\.spark\._errors\.\w+: (nats: .*?)\s*$", str(current))
        if m:
            return m.group(1)
        current = current.__cause__ or current.__context__
    return None


# What to do when PySpark is missing: the extra's name and the commands that work (natserver is
# not on PyPI, so ``pip install natserver[spark]`` does not).
PYSPARK_MISSING = (
    "natserver.spark needs PySpark >= 4.2, natserver's 'spark' extra: in a checkout of natserver run "
    "pip install -e '.[spark]' (natserver is not on PyPI), or pip install 'pyspark[sql]>=4.2'; "
    "Spark also needs Java 17+"
)


def _datasource():
    """natserver.spark.datasource, or an ImportError that says how to install PySpark."""
    try:
        from . import datasource
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] not in ("pyspark", "pyarrow", "pandas"):
            raise
        raise ModuleNotFoundError(f"{PYSPARK_MISSING} (no module named {exc.name!r})", name=exc.name) from exc
    return datasource


def register(spark) -> None:
    """Register the ``nats`` data source in ``spark`` (a SparkSession)."""
    _datasource().register(spark)


def __getattr__(name: str):
    # pyspark is imported only when the data source itself is wanted: the pure parts
    # (client, options, offsets) work without it.
    if name in ("NatsDataSource", "read_schema"):
        return getattr(_datasource(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
