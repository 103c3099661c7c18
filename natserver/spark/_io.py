"""What a Spark task does: read a range of sequences, publish rows. No Spark imports here
(pyarrow is used when given an Arrow schema), so it can be tested and benchmarked alone.
"""

from __future__ import annotations

from typing import Iterable, Iterator

from ._client import Connection, Publisher, fetch_range, micros_to_datetime, stream_bounds, stream_info
from ._errors import DataLossError, PublishError
from ._options import ConnOptions

ARROW_BATCH_ROWS = 8192


def connect(conn: ConnOptions, name: str = "natserver.spark") -> Connection:
    return Connection(list(conn.servers), conn.auth, timeout=conn.timeout, name=name, tls_ca_file=conn.tls_ca_file)


# -- reading --------------------------------------------------------------------------------------


def check_range_still_there(c: Connection, stream: str, start: int, end: int) -> None:
    """Raise DataLossError if part of [start, end) can no longer be read: the stream's first
    sequence moved past ``start`` (limits, purge) or it now ends before ``end`` (re-created)."""
    first, last = stream_bounds(stream_info(c, stream))
    if start < first:
        raise DataLossError(
            f"stream {stream!r} lost sequences {start}..{min(end, first) - 1} before they were read "
            f"(limits, purge or deletes; set failOnDataLoss=false to skip them)"
        )
    if end - 1 > last:
        raise DataLossError(
            f"stream {stream!r} ends at sequence {last} but sequences up to {end - 1} were planned: "
            f"it was deleted and created again (set failOnDataLoss=false to go on)"
        )


def read_messages(conn: ConnOptions, stream: str, start: int, end: int, *, subject: str | None,
                  direct: bool, fail_on_data_loss: bool, fetch_batch: int) -> Iterator:
    """The stored messages in [start, end), in order (a generator that owns its connection)."""
    if start >= end:
        return
    c = connect(conn, name=f"natserver.spark reader {stream}[{start},{end})")
    try:
        if fail_on_data_loss:
            check_range_still_there(c, stream, start, end)
        yield from fetch_range(c, stream, start, end, subject=subject, direct=direct, window=fetch_batch)
    finally:
        c.close()


def rows(msgs: Iterable, stream: str, include_headers: bool) -> Iterator[tuple]:
    """Messages -> tuples in the column order of the schema."""
    for m in msgs:
        ts = micros_to_datetime(m.time_us)
        if include_headers:
            yield (m.subject, None, m.data, m.headers, stream, m.seq, ts)
        else:
            yield (m.subject, None, m.data, stream, m.seq, ts)


def arrow_batches(msgs: Iterable, stream: str, include_headers: bool, schema, rows_per_batch: int = ARROW_BATCH_ROWS) -> Iterator:
    """Messages -> pyarrow RecordBatches of exactly ``schema`` (Spark's Arrow schema)."""
    import pyarrow as pa

    types = [f.type for f in schema]
    subjects: list = []
    datas: list = []
    headers: list = []
    seqs: list = []
    times: list = []

    def batch():
        n = len(seqs)
        cols = [
            pa.array(subjects, types[0]),
            pa.nulls(n, types[1]),
            pa.array(datas, types[2]),
        ]
        if include_headers:
            cols.append(pa.array([list(h.items()) if h else None for h in headers], types[3]))
        k = len(cols)
        cols.append(pa.array([stream] * n, types[k]))
        cols.append(pa.array(seqs, types[k + 1]))
        cols.append(pa.array(times, types[k + 2]))
        return pa.RecordBatch.from_arrays(cols, schema=schema)

    for m in msgs:
        subjects.append(m.subject)
        datas.append(m.data)
        if include_headers:
            headers.append(m.headers)
        seqs.append(m.seq)
        times.append(m.time_us)
        if len(seqs) >= rows_per_batch:
            yield batch()
            subjects, datas, headers, seqs, times = [], [], [], [], []
    if seqs:
        yield batch()


# -- writing --------------------------------------------------------------------------------------


class RowPlan:
    """Which input columns make a message (decided on the driver from the DataFrame's schema).

    * subject: the ``subject`` option, else the ``subject`` column;
    * data: the ``data`` column (binary, or string as UTF-8); null is an empty payload;
    * headers: the ``headers`` column if any (map of string to string or to array of strings);
    * message id (``Nats-Msg-Id``): the ``msg_id`` column; else, when the rows carry the
      ``stream`` and ``seq`` columns of a nats source, ``<stream>:<seq>``; else none. Both
      prefixed with the ``msgIdPrefix`` option.
    """

    def __init__(self, *, subject_option: str | None, has_subject: bool, data_is_string: bool,
                 has_headers: bool, id_mode: str, msg_id_prefix: str = "") -> None:
        self.subject_option = subject_option
        self.has_subject = has_subject
        self.data_is_string = data_is_string
        self.has_headers = has_headers
        self.id_mode = id_mode  # "msg_id" | "stream_seq" | "none"
        self.msg_id_prefix = msg_id_prefix

    def columns(self) -> list[str]:
        cols = ["data"]
        if self.subject_option is None:
            cols.append("subject")
        if self.has_headers:
            cols.append("headers")
        if self.id_mode == "msg_id":
            cols.append("msg_id")
        elif self.id_mode == "stream_seq":
            cols += ["stream", "seq"]
        return cols


_BAD_SUBJECT_CHARS = frozenset(" \t\r\n")


def _check_publish_subject(subject, cache: set) -> str:
    if subject in cache:
        return subject
    if subject is None:
        raise PublishError("a row has a null subject (give the subject column a value, or the 'subject' option)")
    if not isinstance(subject, str) or not subject or any(c in _BAD_SUBJECT_CHARS for c in subject):
        raise PublishError(f"a row has an invalid subject {subject!r}")
    tokens = subject.split(".")
    if any(not t for t in tokens) or any(t in ("*", ">") for t in tokens):
        raise PublishError(f"a row has an invalid subject {subject!r} (empty token or wildcard)")
    if len(cache) < 10_000:
        cache.add(subject)
    return subject


def _headers_of(value):
    """A headers cell (map<string,string> or map<string,array<string>>, as pyarrow or Row
    gives it: a list of pairs or a dict) -> list of (name, value) pairs."""
    if not value:
        return None
    items = value.items() if isinstance(value, dict) else value
    out: list[tuple] = []
    for key, v in items:
        if v is None:
            continue
        if isinstance(v, (list, tuple)):
            out.extend((key, x) for x in v if x is not None)
        else:
            out.append((key, v))
    return out


def publish_rows(pub: Publisher, plan: RowPlan, columns: dict[str, list]) -> None:
    """Publish one batch of rows given as columns (name -> list of values)."""
    data_col = columns["data"]
    n = len(data_col)
    subj_opt = plan.subject_option
    subj_col = columns["subject"] if subj_opt is None else []  # (RowPlan.columns has it then)
    hdr_col = columns.get("headers")
    prefix = plan.msg_id_prefix
    ids = None
    if plan.id_mode == "msg_id":
        ids = columns["msg_id"]
    elif plan.id_mode == "stream_seq":
        streams, seqs = columns["stream"], columns["seq"]
        ids = [None if st is None or sq is None else f"{st}:{sq}" for st, sq in zip(streams, seqs)]
    cache: set = set()
    for i in range(n):
        subject = subj_opt if subj_opt is not None else _check_publish_subject(subj_col[i], cache)
        data = data_col[i]
        if data is None:
            data = b""
        elif isinstance(data, str):
            data = data.encode("utf-8")
        elif not isinstance(data, bytes):
            data = bytes(data)
        headers = _headers_of(hdr_col[i]) if hdr_col is not None else None
        msg_id = None
        if ids is not None:
            v = ids[i]
            if v is not None:
                msg_id = prefix + str(v)
        pub.publish(subject, data, headers, msg_id)


def write_arrow(conn: ConnOptions, plan: RowPlan, batches: Iterable, *, acks: bool, expected_stream: str | None,
                max_in_flight: int) -> tuple[int, int]:
    """Publish every row of an iterator of pyarrow RecordBatches: (published, duplicates)."""
    cols = plan.columns()
    c = connect(conn, name="natserver.spark writer")
    try:
        pub = Publisher(c, window=max_in_flight, acks=acks, expected_stream=expected_stream)
        for batch in batches:
            if batch.num_rows == 0:
                continue
            publish_rows(pub, plan, {name: batch.column(name).to_pylist() for name in cols})
        pub.finish()
        return pub.published, pub.duplicates
    finally:
        c.close()
