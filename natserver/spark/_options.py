"""Options of the ``nats`` data source: parsing and validation, without Spark.

Option names are case-insensitive (Spark passes them so); values are strings. Every problem
raises :class:`OptionError` with one line naming the option and what is wrong. An unknown
option close to a known one (a typo: ``startingOffset``) is an error too; other unknown
options are ignored, as Spark passes some of its own (``path``, ``checkpointLocation``).
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass, field
from typing import overload

from ._client import Auth, ServerAddr, parse_servers
from ._errors import OptionError

DEFAULT_SERVERS = "nats://127.0.0.1:4222"
DEFAULT_MAX_PER_PARTITION = 100_000
DEFAULT_FETCH_BATCH = 1024
DEFAULT_MAX_IN_FLIGHT = 256

_COMMON = ("servers", "credentials", "user", "password", "token", "nkeySeed", "tlsCaFile", "timeout")
READ_OPTIONS = _COMMON + (
    "stream", "subject", "startingOffsets", "endingOffsets", "maxMessagesPerTrigger",
    "minPartitions", "maxMessagesPerPartition", "includeHeaders", "failOnDataLoss",
    "fetchBatchSize",
)
WRITE_OPTIONS = _COMMON + ("stream", "subject", "msgIdPrefix", "acks", "maxInFlight")


def _lower(options) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in dict(options or {}).items():
        out[str(key).lower()] = value
    return out


def _check_unknown(opts: dict[str, str], known: tuple[str, ...], kind: str) -> None:
    lowered = {k.lower(): k for k in known}
    for key in opts:
        if key in lowered:
            continue
        close = difflib.get_close_matches(key, list(lowered), n=1, cutoff=0.8)
        if close:
            raise OptionError(f"unknown {kind} option {key!r}: did you mean {lowered[close[0]]!r}?")


@overload
def _str(opts, name: str, default: str) -> str: ...
@overload
def _str(opts, name: str, default: None = None) -> str | None: ...
def _str(opts, name: str, default: str | None = None) -> str | None:
    value = opts.get(name.lower())
    if value is None:
        return default
    value = str(value).strip()
    return value if value else default


@overload
def _int(opts, name: str, default: int, *, minimum: int = 1, maximum: int | None = None) -> int: ...
@overload
def _int(opts, name: str, default: None = None, *, minimum: int = 1, maximum: int | None = None) -> int | None: ...
def _int(opts, name: str, default: int | None = None, *, minimum: int = 1, maximum: int | None = None) -> int | None:
    raw = _str(opts, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option {name!r} must be an integer, got {raw!r}") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise OptionError(f"option {name!r} must be {bound}, got {value}")
    return value


def _float(opts, name: str, default: float) -> float:
    raw = _str(opts, name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise OptionError(f"option {name!r} must be a number of seconds, got {raw!r}") from None
    if not value > 0:
        raise OptionError(f"option {name!r} must be > 0, got {raw!r}")
    return value


def _bool(opts, name: str, default: bool) -> bool:
    raw = _str(opts, name)
    if raw is None:
        return default
    low = raw.lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name!r} must be true or false, got {raw!r}")


def check_subject(subject: str, name: str, *, wildcards: bool) -> str:
    """A NATS subject: dot-separated non-empty tokens without spaces; ``*`` and a last ``>``
    only where ``wildcards``."""
    if not subject or any(c in subject for c in " \t\r\n"):
        raise OptionError(f"option {name!r}: {subject!r} is not a valid NATS subject")
    tokens = subject.split(".")
    for i, tok in enumerate(tokens):
        if not tok:
            raise OptionError(f"option {name!r}: {subject!r} is not a valid NATS subject (empty token)")
        if tok in ("*", ">") or ("*" in tok or ">" in tok):
            if not wildcards:
                raise OptionError(f"option {name!r}: cannot publish to {subject!r}, a subject with wildcards")
            if tok not in ("*", ">") or (tok == ">" and i != len(tokens) - 1):
                raise OptionError(f"option {name!r}: {subject!r} is not a valid NATS subject (misplaced wildcard)")
    return subject


def check_stream_name(stream: str, name: str = "stream") -> str:
    if not stream or any(c in stream for c in " \t\r\n.*>/\\"):
        raise OptionError(f"option {name!r}: {stream!r} is not a valid stream name (no spaces, '.', '*', '>', '/', '\\')")
    return stream


# Offsets specs: "earliest", "latest" or a sequence number.
EARLIEST = "earliest"
LATEST = "latest"


def parse_offset_spec(raw: str | None, name: str, default, *, allow_earliest: bool = True):
    """``earliest`` | ``latest`` | a sequence (``42``) | JSON ``{"seq": 42}`` (optionally with
    ``"stream"``, as the offsets of a checkpoint are written) -> "earliest", "latest", int."""
    if raw is None:
        return default
    text = str(raw).strip()
    low = text.lower()
    if low == EARLIEST and allow_earliest:
        return EARLIEST
    if low == LATEST:
        return LATEST
    value = None
    if text.startswith("{"):
        try:
            obj = json.loads(text)
            value = obj.get("seq") if isinstance(obj, dict) else None
        except ValueError:
            value = None
    else:
        try:
            value = int(text)
        except ValueError:
            value = None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        choices = "earliest, latest" if allow_earliest else "latest"
        raise OptionError(f"option {name!r} must be {choices}, a stream sequence >= 1, or {{\"seq\": N}}; got {text!r}")
    return value


@dataclass(frozen=True)
class ConnOptions:
    servers: tuple[ServerAddr, ...]
    auth: Auth
    tls_ca_file: str | None
    timeout: float

    @property
    def urls(self) -> str:
        return ", ".join(s.url for s in self.servers)


def _conn_options(opts: dict) -> ConnOptions:
    servers = tuple(parse_servers(_str(opts, "servers", DEFAULT_SERVERS)))
    creds = _str(opts, "credentials")
    if creds is not None and not os.path.isfile(creds):
        raise OptionError(f"option 'credentials': no such file {creds!r} (the path of a NATS .creds file)")
    user, password, token = _str(opts, "user"), opts.get("password"), _str(opts, "token")
    if password is not None and user is None:
        raise OptionError("option 'password' needs option 'user'")
    if token is not None and user is not None:
        raise OptionError("options 'token' and 'user' exclude each other")
    if creds is not None and (user is not None or token is not None):
        raise OptionError("option 'credentials' excludes 'user', 'password' and 'token'")
    ca = _str(opts, "tlsCaFile")
    if ca is not None and not os.path.isfile(ca):
        raise OptionError(f"option 'tlsCaFile': no such file {ca!r}")
    return ConnOptions(
        servers=servers,
        auth=Auth(user=user, password=password, token=token, credentials=creds, nkey_seed=_str(opts, "nkeySeed")),
        tls_ca_file=ca,
        timeout=_float(opts, "timeout", 10.0),
    )


@dataclass(frozen=True)
class ReadOptions:
    conn: ConnOptions
    stream: str | None
    subject: str | None
    starting: object  # "earliest" | "latest" | int
    ending: object  # "latest" | int | None (unbounded, streaming)
    max_per_trigger: int | None
    min_partitions: int
    max_per_partition: int
    include_headers: bool
    fail_on_data_loss: bool
    fetch_batch: int
    extra: dict = field(default_factory=dict, compare=False)


def _stream_and_subject(opts: dict, *, wildcards: bool) -> tuple[str | None, str | None]:
    """The 'stream' and 'subject' options, each checked when given."""
    stream = _str(opts, "stream")
    if stream is not None:
        check_stream_name(stream)
    subject = _str(opts, "subject")
    if subject is not None:
        check_subject(subject, "subject", wildcards=wildcards)
    return stream, subject


def parse_read_options(options, *, streaming: bool) -> ReadOptions:
    """Options of ``spark.read`` / ``spark.readStream``. Kafka's defaults: a stream starts
    at ``latest``, a batch at ``earliest``; a batch ends at ``latest``."""
    opts = _lower(options)
    _check_unknown(opts, READ_OPTIONS, "read")
    conn = _conn_options(opts)
    stream, subject = _stream_and_subject(opts, wildcards=True)
    if stream is None and subject is None:
        raise OptionError("option 'stream' is required (or 'subject', to read the one stream that captures it)")
    starting = parse_offset_spec(_str(opts, "startingOffsets"), "startingOffsets", LATEST if streaming else EARLIEST)
    ending = parse_offset_spec(_str(opts, "endingOffsets"), "endingOffsets", None if streaming else LATEST,
                               allow_earliest=False)
    if isinstance(starting, int) and isinstance(ending, int) and ending < starting:
        raise OptionError(f"option 'endingOffsets' ({ending}) is before 'startingOffsets' ({starting})")
    return ReadOptions(
        conn=conn,
        stream=stream,
        subject=subject,
        starting=starting,
        ending=ending,
        max_per_trigger=_int(opts, "maxMessagesPerTrigger"),
        min_partitions=_int(opts, "minPartitions", 1, maximum=10_000),
        max_per_partition=_int(opts, "maxMessagesPerPartition", DEFAULT_MAX_PER_PARTITION),
        include_headers=_bool(opts, "includeHeaders", False),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        fetch_batch=_int(opts, "fetchBatchSize", DEFAULT_FETCH_BATCH, maximum=100_000),
    )


@dataclass(frozen=True)
class WriteOptions:
    conn: ConnOptions
    stream: str | None
    subject: str | None
    msg_id_prefix: str
    acks: bool
    max_in_flight: int


def parse_write_options(options) -> WriteOptions:
    opts = _lower(options)
    _check_unknown(opts, WRITE_OPTIONS, "write")
    conn = _conn_options(opts)
    stream, subject = _stream_and_subject(opts, wildcards=False)
    acks = _bool(opts, "acks", True)
    if stream is not None and not acks:
        raise OptionError("option 'stream' needs acks (it is checked on every JetStream ack): drop 'acks=false'")
    prefix = opts.get("msgidprefix") or ""
    if any(c in str(prefix) for c in "\r\n"):
        raise OptionError("option 'msgIdPrefix' must not contain line breaks")
    return WriteOptions(
        conn=conn,
        stream=stream,
        subject=subject,
        msg_id_prefix=str(prefix),
        acks=acks,
        max_in_flight=_int(opts, "maxInFlight", DEFAULT_MAX_IN_FLIGHT, maximum=100_000),
    )


def subjects_overlap(a: str, b: str) -> bool:
    """Whether some subject matches both ``a`` and ``b`` (each may have ``*`` and ``>``)."""
    ta, tb = a.split("."), b.split(".")
    for i in range(max(len(ta), len(tb))):
        x = ta[i] if i < len(ta) else None
        y = tb[i] if i < len(tb) else None
        if x == ">" or y == ">":
            # ">" needs at least one token from the other side here
            return (x is not None) and (y is not None)
        if x is None or y is None:
            return False
        if x != y and x != "*" and y != "*":
            return False
    return True
