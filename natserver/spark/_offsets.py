"""Offsets and partitions: pure functions of stream sequences, no Spark, no network.

An offset is ``{"stream": name, "seq": next}``: the sequence of the next message to read, as
Spark keeps it in the checkpoint. A micro-batch (or a batch query) reads the sequences
``[start.seq, end.seq)``, split into partitions. Everything here depends only on the offsets
and the options, so a restarted query, or a batch Spark plans again from its offset log,
reads exactly the same sequences.
"""

from __future__ import annotations

from ._errors import DataLossError, OptionError
from ._options import EARLIEST, LATEST


def make_offset(stream: str, seq: int) -> dict:
    return {"stream": stream, "seq": int(seq)}


def offset_seq(offset, stream: str) -> int:
    """The sequence of an offset Spark gives back, checked against the stream read."""
    if not isinstance(offset, dict) or not isinstance(offset.get("seq"), int) or offset["seq"] < 1:
        raise OptionError(f"bad offset {offset!r}: expected {{\"stream\": name, \"seq\": N >= 1}}")
    name = offset.get("stream")
    if name is not None and name != stream:
        raise OptionError(
            f"the checkpoint holds offsets of stream {name!r} but the query reads stream {stream!r}: use a new checkpointLocation"
        )
    return offset["seq"]


def resolve_start(spec, first_seq: int, last_seq: int) -> int:
    """The first sequence to read for ``startingOffsets``; ``first_seq``/``last_seq`` are the
    stream's bounds now (an empty new stream is 1, 0)."""
    if spec == EARLIEST:
        return first_seq
    if spec == LATEST:
        return last_seq + 1
    return int(spec)


def resolve_end(spec, last_seq: int) -> int | None:
    """The exclusive end for ``endingOffsets`` (None: unbounded)."""
    if spec is None:
        return None
    if spec == LATEST:
        return last_seq + 1
    return int(spec)


def next_end(start: int, last_seq: int, *, max_messages: int | None = None, ending: int | None = None,
             target: int | None = None) -> int:
    """The end of the next micro-batch from ``start``: everything up to the last message,
    at most ``max_messages`` sequences, never past ``ending`` (endingOffsets) or ``target``
    (Trigger.AvailableNow), never before ``start``."""
    end = last_seq + 1
    if max_messages is not None:
        end = min(end, start + max_messages)
    if ending is not None:
        end = min(end, ending)
    if target is not None:
        end = min(end, target)
    return max(start, end)


def split_range(start: int, end: int, min_partitions: int = 1, max_per_partition: int | None = None) -> list[tuple[int, int]]:
    """[start, end) in contiguous, nearly equal parts: at least ``min_partitions`` (but no
    empty one), and more when a part would exceed ``max_per_partition`` sequences."""
    n = end - start
    if n <= 0:
        return []
    parts = max(1, min_partitions)
    if max_per_partition:
        parts = max(parts, -(-n // max_per_partition))
    parts = min(parts, n)
    size, extra = divmod(n, parts)
    out = []
    lo = start
    for i in range(parts):
        hi = lo + size + (1 if i < extra else 0)
        out.append((lo, hi))
        lo = hi
    return out


def check_start(start: int, first_seq: int, last_seq: int, stream: str, *, fail_on_data_loss: bool) -> int:
    """Data loss seen from the driver when planning the batch that starts at ``start``.

    * ``start`` below the stream's first sequence: messages were removed (limits, purge,
      deletes) before the query read them.
    * ``start`` past ``last_seq + 1``: the stream's sequences went back (it was deleted and
      created again).

    Raises DataLossError if ``fail_on_data_loss``; else returns where to go on (the first
    sequence still there; for a stream that went back, ``start`` itself: the query waits
    until the new stream reaches it).
    """
    if start > last_seq + 1:
        if fail_on_data_loss:
            raise DataLossError(
                f"stream {stream!r} ends at sequence {last_seq} but the query is at {start}: startingOffsets is "
                f"past the end, or the stream was deleted and created again (set failOnDataLoss=false to wait "
                f"for it, or use a new checkpoint)"
            )
        return start
    if start < first_seq:
        if fail_on_data_loss:
            raise DataLossError(
                f"stream {stream!r} lost sequences {start}..{first_seq - 1} before the query read them "
                f"(limits, purge or deletes; set failOnDataLoss=false to skip them)"
            )
        return first_seq
    return start
