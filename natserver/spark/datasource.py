"""The ``nats`` PySpark data source (pyspark.sql.datasource API, Spark >= 4.2).

Read (batch and streaming) a JetStream stream by sequence, write rows as NATS messages with
JetStream acks and ``Nats-Msg-Id``. See natserver/spark/__init__.py for the options and the
guarantees.
"""

from __future__ import annotations

import logging
from typing import Iterator, Sequence

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from . import _io
from ._client import Connection, js_request, stream_bounds, stream_info, stream_names
from ._errors import ConnectError, NatsSparkError, OptionError, StreamNotFound
from ._offsets import check_start, make_offset, next_end, offset_seq, resolve_end, resolve_start, split_range
from ._options import (
    ConnOptions,
    ReadOptions,
    WriteOptions,
    parse_read_options,
    parse_write_options,
    subjects_overlap,
)

log = logging.getLogger("natserver.spark")

HEADERS_TYPE = MapType(StringType(), ArrayType(StringType()))


def read_schema(include_headers: bool = False) -> StructType:
    """subject, reply, data, [headers], stream, seq, timestamp."""
    fields = [
        StructField("subject", StringType()),
        StructField("reply", StringType()),
        StructField("data", BinaryType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    fields += [
        StructField("stream", StringType()),
        StructField("seq", LongType()),
        StructField("timestamp", TimestampType()),
    ]
    return StructType(fields)


def _arrow_schema(schema: StructType):
    try:
        from pyspark.sql.pandas.types import to_arrow_schema

        return to_arrow_schema(schema, timezone="UTC")
    except Exception:  # no pyarrow, or an API change: tuples work everywhere
        return None


class NatsPartition(InputPartition):
    """The sequences [start, end) of one stream."""

    def __init__(self, stream: str, start: int, end: int, index: int = 0) -> None:
        super().__init__((stream, start, end))
        self.stream = stream
        self.start = start
        self.end = end
        self.index = index

    def __repr__(self) -> str:
        return f"NatsPartition({self.stream!r}, [{self.start}, {self.end}))"


class _Target:
    """What the driver found out about the stream read: its name and how to fetch from it."""

    def __init__(self, stream: str, direct: bool) -> None:
        self.stream = stream
        self.direct = direct


def _connect(conn: ConnOptions, name: str) -> Connection:
    return _io.connect(conn, name=name)


def resolve_target(opts: ReadOptions) -> _Target:
    """On the driver: the server is reachable, JetStream answers, the stream exists (or the
    subject names exactly one), the subject filter is inside the stream's subjects."""
    with _connect(opts.conn, "natserver.spark driver") as c:
        stream = opts.stream
        if stream is None:
            names = stream_names(c, opts.subject)
            if not names:
                raise StreamNotFound(f"no stream on {c.url} captures subject {opts.subject!r}: give option 'stream'")
            if len(names) > 1:
                raise OptionError(f"subject {opts.subject!r} is in several streams ({', '.join(sorted(names))}): give option 'stream'")
            stream = names[0]
        try:
            info = stream_info(c, stream)
        except StreamNotFound:
            raise StreamNotFound(f"stream {stream!r} not found on {c.url}") from None
        cfg = info.get("config") or {}
        subjects = cfg.get("subjects") or []
        if opts.subject and subjects and not any(subjects_overlap(opts.subject, s) for s in subjects):
            raise OptionError(
                f"subject {opts.subject!r} is not in stream {stream!r} (its subjects: {', '.join(subjects)})"
            )
        return _Target(stream, bool(cfg.get("allow_direct")))


class _ReaderBase:
    def __init__(self, opts: ReadOptions, target: _Target, schema: StructType) -> None:
        self.opts = opts
        self.stream = target.stream
        self.direct = target.direct
        self.include_headers = "headers" in schema.fieldNames()
        self.schema = schema
        self._conn: Connection | None = None

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_conn"] = None
        return state

    def _bounds(self) -> tuple[int, int]:
        """(first_seq, last_seq) now, on a connection kept between calls (driver side)."""
        for attempt in (0, 1):
            if self._conn is None:
                self._conn = _connect(self.opts.conn, "natserver.spark driver")
            try:
                return stream_bounds(stream_info(self._conn, self.stream))
            except (ConnectError, OSError):
                self._close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _split(self, start: int, end: int) -> list[NatsPartition]:
        parts = split_range(start, end, self.opts.min_partitions, self.opts.max_per_partition)
        return [NatsPartition(self.stream, lo, hi, i) for i, (lo, hi) in enumerate(parts)]

    def read(self, partition: NatsPartition) -> Iterator:
        o = self.opts
        msgs = _io.read_messages(
            o.conn, partition.stream, partition.start, partition.end, subject=o.subject, direct=self.direct,
            fail_on_data_loss=o.fail_on_data_loss, fetch_batch=o.fetch_batch,
        )
        arrow = _arrow_schema(self.schema)
        if arrow is not None:
            return _io.arrow_batches(msgs, partition.stream, self.include_headers, arrow)
        return _io.rows(msgs, partition.stream, self.include_headers)


class NatsBatchReader(_ReaderBase, DataSourceReader):
    """``spark.read.format("nats")``: the sequences [startingOffsets, endingOffsets)."""

    def partitions(self) -> Sequence[InputPartition]:
        try:
            first, last = self._bounds()
        finally:
            self._close()
        start = resolve_start(self.opts.starting, first, last)
        ending = resolve_end(self.opts.ending, last)  # (a batch always has one: LATEST by default)
        end = last + 1 if ending is None else min(ending, last + 1)  # what exists now
        if end > start:
            start = check_start(start, first, last, self.stream, fail_on_data_loss=self.opts.fail_on_data_loss)
        parts = self._split(start, end)
        return parts or [NatsPartition(self.stream, start, start)]


class NatsStreamReader(_ReaderBase, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("nats")``: offsets are stream sequences."""

    def __init__(self, opts: ReadOptions, target: _Target, schema: StructType) -> None:
        super().__init__(opts, target, schema)
        self._target_end: int | None = None  # Trigger.AvailableNow
        self._ending: int | None = None  # endingOffsets, resolved once

    def _ending_seq(self, last: int) -> int | None:
        if self.opts.ending is None:
            return None
        if self._ending is None:
            self._ending = resolve_end(self.opts.ending, last)
        return self._ending

    def initialOffset(self) -> dict:
        first, last = self._bounds()
        return make_offset(self.stream, resolve_start(self.opts.starting, first, last))

    def getDefaultReadLimit(self):
        if self.opts.max_per_trigger:
            return ReadMaxRows(self.opts.max_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        _first, last = self._bounds()
        self._target_end = last + 1

    def latestOffset(self, start: dict, limit=None) -> dict:
        seq = offset_seq(start, self.stream)
        first, last = self._bounds()
        ending = self._ending_seq(last)
        if ending is not None and seq >= ending:
            return make_offset(self.stream, seq)
        go_on = check_start(seq, first, last, self.stream, fail_on_data_loss=self.opts.fail_on_data_loss)
        if go_on > last + 1:  # stream went back, failOnDataLoss=false: wait for it
            log.warning("nats: stream %r ends at %d, before the query's offset %d", self.stream, last, seq)
            return make_offset(self.stream, seq)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = next_end(go_on, last, max_messages=max_rows, ending=ending, target=self._target_end)
        return make_offset(self.stream, max(seq, end))

    def reportLatestOffset(self):
        _first, last = self._bounds()
        return make_offset(self.stream, last + 1)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return self._split(offset_seq(start, self.stream), offset_seq(end, self.stream))

    def commit(self, end: dict) -> None:
        pass  # nothing to acknowledge: the checkpoint is the only state

    def stop(self) -> None:
        self._close()


# -- writing ----------------------------------------------------------------------------------


class NatsCommitMessage(WriterCommitMessage):
    def __init__(self, published: int, duplicates: int) -> None:
        self.published = published
        self.duplicates = duplicates


def _atomic(dt) -> bool:
    return not isinstance(dt, (MapType, ArrayType, StructType))


def plan_rows(schema: StructType, opts: WriteOptions) -> _io.RowPlan:
    """Check the DataFrame's columns against what the sink needs (one line per problem)."""
    fields = {f.name: f.dataType for f in schema.fields}
    have = ", ".join(fields) or "none"
    if "data" not in fields:
        raise OptionError(f"the DataFrame has no column 'data' (binary or string) to publish (its columns: {have})")
    if not isinstance(fields["data"], (BinaryType, StringType)):
        raise OptionError(f"column 'data' must be binary or string, not {fields['data'].simpleString()}")
    if opts.subject is None:
        if "subject" not in fields:
            raise OptionError(f"the DataFrame has no column 'subject' and option 'subject' is not set (its columns: {have})")
        if not isinstance(fields["subject"], StringType):
            raise OptionError(f"column 'subject' must be a string, not {fields['subject'].simpleString()}")
    has_headers = "headers" in fields
    if has_headers:
        ht = fields["headers"]
        ok = isinstance(ht, MapType) and isinstance(ht.keyType, StringType) and (
            isinstance(ht.valueType, StringType)
            or (isinstance(ht.valueType, ArrayType) and isinstance(ht.valueType.elementType, StringType))
        )
        if not ok:
            raise OptionError(
                f"column 'headers' must be map<string,string> or map<string,array<string>>, not {ht.simpleString()}"
            )
    if "msg_id" in fields:
        if not _atomic(fields["msg_id"]):
            raise OptionError(f"column 'msg_id' must be a string (or a number), not {fields['msg_id'].simpleString()}")
        id_mode = "msg_id"
    elif "stream" in fields and "seq" in fields:
        id_mode = "stream_seq"
    else:
        id_mode = "none"
    return _io.RowPlan(
        subject_option=opts.subject, has_subject="subject" in fields,
        data_is_string=isinstance(fields["data"], StringType), has_headers=has_headers, id_mode=id_mode,
        msg_id_prefix=opts.msg_id_prefix,
    )


def check_sink(opts: WriteOptions, plan: _io.RowPlan) -> str | None:
    """On the driver, before the query starts: the server is reachable; with acks, JetStream
    answers, the ``stream`` option names a stream, and a ``subject`` option is captured by
    some stream. Returns the target stream (for ``Nats-Expected-Stream``) or None."""
    with _connect(opts.conn, "natserver.spark driver") as c:
        if not opts.acks:
            return None
        js_request(c, "INFO", what=f"JetStream on {c.url}")
        if opts.stream is not None:
            try:
                info = stream_info(c, opts.stream)
            except StreamNotFound:
                raise StreamNotFound(f"stream {opts.stream!r} not found on {c.url}") from None
            cfg = info.get("config") or {}
            window = int(cfg.get("duplicate_window") or 0)
            if plan.id_mode != "none" and window <= 0:
                log.warning("nats: stream %r has no duplicate_window: message ids will not catch replays", opts.stream)
            if opts.subject is not None:
                subjects = cfg.get("subjects") or []
                if subjects and not any(subjects_overlap(opts.subject, s) for s in subjects):
                    raise OptionError(f"subject {opts.subject!r} is not in stream {opts.stream!r} (its subjects: {', '.join(subjects)})")
        elif opts.subject is not None:
            if not stream_names(c, opts.subject):
                raise StreamNotFound(
                    f"no stream on {c.url} captures subject {opts.subject!r} (create one, or write with acks=false)"
                )
    if plan.id_mode == "none":
        log.warning(
            "nats: no 'msg_id' column (nor 'stream' and 'seq'): a replayed batch publishes its rows again"
        )
    return opts.stream


class _WriterBase:
    def __init__(self, opts: WriteOptions, plan: _io.RowPlan, expected_stream: str | None) -> None:
        self.opts = opts
        self.plan = plan
        self.expected_stream = expected_stream

    def write(self, iterator) -> NatsCommitMessage:
        o = self.opts
        published, duplicates = _io.write_arrow(
            o.conn, self.plan, iterator, acks=o.acks, expected_stream=self.expected_stream, max_in_flight=o.max_in_flight
        )
        return NatsCommitMessage(published, duplicates)

    @staticmethod
    def _summary(messages) -> tuple[int, int]:
        ok = [m for m in messages if isinstance(m, NatsCommitMessage)]
        return sum(m.published for m in ok), sum(m.duplicates for m in ok)


class NatsBatchWriter(_WriterBase, DataSourceArrowWriter):
    def commit(self, messages) -> None:
        published, dups = self._summary(messages)
        log.info("nats: published %d messages (%d duplicates ignored by the stream)", published, dups)

    def abort(self, messages) -> None:
        published, _ = self._summary(messages)
        log.warning("nats: write aborted after %d acknowledged messages; rerun it: message ids make it idempotent", published)


class NatsStreamWriter(_WriterBase, DataSourceStreamArrowWriter):
    def commit(self, messages, batchId: int) -> None:
        published, dups = self._summary(messages)
        log.info("nats: batch %d: published %d messages (%d duplicates)", batchId, published, dups)

    def abort(self, messages, batchId: int) -> None:
        log.warning("nats: batch %d aborted; Spark replays it, message ids catch the repeats", batchId)


# -- the data source ---------------------------------------------------------------------------


class NatsDataSource(DataSource):
    """``format("nats")``: see natserver.spark for the options."""

    @classmethod
    def name(cls) -> str:
        return "nats"

    def __init__(self, options) -> None:
        super().__init__(options)
        self._target: _Target | None = None

    def _read_options(self, streaming: bool) -> ReadOptions:
        return parse_read_options(self.options, streaming=streaming)

    def _resolve(self, opts: ReadOptions) -> _Target:
        if self._target is None:
            self._target = resolve_target(opts)
        return self._target

    def schema(self) -> StructType:
        # Called on the driver when the DataFrame is defined: check everything now.
        opts = self._read_options(streaming=False)
        self._resolve(opts)
        return read_schema(opts.include_headers)

    def _check_schema(self, schema: StructType, opts: ReadOptions) -> StructType:
        expected = read_schema(opts.include_headers)
        if schema is not None and [f.name for f in schema.fields] != expected.fieldNames():
            raise OptionError(
                f"the nats source has a fixed schema ({', '.join(expected.fieldNames())}); do not give .schema(...)"
            )
        return expected

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = self._read_options(streaming=False)
        return NatsBatchReader(opts, self._resolve(opts), self._check_schema(schema, opts))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = self._read_options(streaming=True)
        return NatsStreamReader(opts, self._resolve(opts), self._check_schema(schema, opts))

    def _writer_parts(self, schema: StructType):
        opts = parse_write_options(self.options)
        plan = plan_rows(schema, opts)
        return opts, plan, check_sink(opts, plan)

    def writer(self, schema: StructType, overwrite: bool) -> NatsBatchWriter:
        return NatsBatchWriter(*self._writer_parts(schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> NatsStreamWriter:
        return NatsStreamWriter(*self._writer_parts(schema))


def register(spark) -> None:
    """Make ``format("nats")`` available in this SparkSession."""
    spark.dataSource.register(NatsDataSource)


__all__ = ["NatsDataSource", "NatsPartition", "NatsSparkError", "read_schema", "register"]
