"""Sans-IO parser for the NATS client protocol, in the shape of h11.

``feed(data)`` hands over received bytes; ``next_op()`` returns the next complete op
(:mod:`natserver.protocol.ops`) or ``NEED_DATA``, and raises :class:`ProtocolError` carrying
nats-server's answer for bad input. No I/O and no trio here.

How it stays fast in Python (nats-server's parser is a per-byte state machine, which would be
far too slow here):

* whole receive chunks are scanned with ``bytes.find(b"\\n")``, one C call per control line;
* the upper-case ``PUB `` every client library sends is recognised with one slice compare;
  anything else goes through a small verb table, case-insensitively;
* after a PUB/HPUB control line the parser jumps over the payload (it knows its size) and
  only checks the two bytes after it, exactly like nats-server's jump-ahead;
* large payloads are memoryview slices of the chunk (no copy); a payload that straddles chunks
  is joined once when all of it has arrived, never re-copied per chunk.

Quirks kept from nats-server (server/parser.go, client.go), because clients and tests see them:

* verbs are case-insensitive; PUB/SUB/UNSUB/HPUB/-ERR need a space or tab after the verb,
  CONNECT/INFO do not; after PING, PONG and +OK everything up to the newline is ignored;
* CR before LF is optional; once a CR is seen in the arguments the last byte is dropped;
* PUB/HPUB arguments split on spaces and tabs only, SUB/UNSUB also on CR;
* sizes are at most 9 ASCII digits (``parseSize``), anything else closes silently;
* max_payload is checked at the control line, before the payload arrives;
* the two bytes after a payload must be CR LF;
* a client's INFO and +OK are ignored, its -ERR closes the connection silently, MSG is unknown.
"""

from __future__ import annotations

import collections
import importlib
import json
import os
import re
import sys
from typing import Literal, overload

import orjson

from . import errors
from .const import MAX_CONTROL_LINE_SIZE, MAX_PAYLOAD_SIZE
from .errors import ProtocolError
from .ops import NEED_DATA, PING, PONG, Connect, NeedData, Op, PingRun, Pub, PubRun, Sub, Unsub

# Everything in __all__ gets re-exported as part of natserver's public API.
__all__ = ["Parser"]

# Payloads at least this long are handed out as memoryview slices of the received chunk.
# Below it, copying the bytes is cheaper than building a view (measured: a 16 B bytes slice
# costs about half of a memoryview slice), and a small copy does not pin a 64 KiB chunk.
ZERO_COPY_MIN = 512

# parser.go parseSize: at most 9 digits ("999M"); longer sizes count as bad sizes.
MAX_SIZE_DIGITS = 9

# Lines of ignored verbs (PING foo...) are not bounded by nats-server, which discards their
# bytes as they come; we keep only this much of a long one while waiting for its newline.
_IGNORED_LINE_KEEP = 16

_new = tuple.__new__


def compiled(name: str, environ=os.environ, module: str = "natserver.protocol._cscan"):
    """A function of a compiled module (this one's _cscan.c by default; the server's
    _croute.c too), or None: not built, or NATSERVER_NO_EXTENSIONS set. Imported by name:
    import-linter sees no .py file for an extension and would misread a relative import."""
    if environ.get("NATSERVER_NO_EXTENSIONS"):
        return None
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):  # no compiler at install time (or an older build)
        return None


# The compiled twins of the per-message PUB loops (_cscan.c, built by setup.py when a compiler
# is at hand): scan_pubs reads plain PUBs whose subject changes, scan_run the rest of an open
# run; each stops before anything it is not sure of, so this module's Python path stays complete
# and decides everything else (callgrind: see README.md, "Compiled or pure Python").
# NATSERVER_NO_EXTENSIONS=1 runs the pure-Python path (as CI does on one Python).
_scan_pubs = compiled("scan_pubs")
_scan_hpubs = compiled("scan_hpubs")  # Parser._hpubs's loop, compiled
_scan_run = compiled("scan_run")
# restride(run.data, run.count, len(run.prefix), head): a uniform run without replies rewritten
# by stride, for the router (see _cscan.c); None: data.replace does it.
restride = compiled("restride")

# Which parser a process runs, for the startup log.
PARSER_IMPLEMENTATION = "python" if _scan_pubs is None else "compiled"

# A run of PUBs with one subject and one size this long is skipped to its end with a regex
# (Parser._uniform_run_end): long enough that compiling the pattern is paid back.
_UNIFORM_RUN_SKIP = 32
# ... and this long when the pattern for its subject and size is already compiled (the run goes
# on from the last chunk): 1 KiB messages come about 60 to a 64 KiB chunk, and parsing 32 of them
# one by one was most of their parse cost (callgrind, 1 -> 1 1 KiB: see benchmarks/README.md).
_UNIFORM_RUN_SKIP_CACHED = 3
# "*+": possessive (3.11+), no backtracking state kept per message; plain "*" matches the same.
_POSSESSIVE = b"*+" if sys.version_info >= (3, 11) else b"*"

# Size digits -> int for the sizes most messages have. A dict lookup costs about a third of
# isdigit()+int(), and only canonical digit strings are keys, so b"05" still takes the exact
# parseSize path. Up to 1 KiB: beyond that the payload copy dwarfs the int parse.
_SIZE_OF = {str(n).encode(): n for n in range(1025)}
# Bigger sizes take the fast paths too, up to this many canonical digits (99 999 B; _big_size):
# with 512 B-2 KiB drawn every message the general path took every message over 1 KiB (server
# CPU 5.4 us a message against 1.3 us for 1 KiB alone, own raw driver).
_FAST_SIZE_DIGITS = 5
_SIZE_WINDOW = _FAST_SIZE_DIGITS + 2  # the longest fast size's digits and CR LF
# How far the fast path looks for a PUB line's end with one partition (longer lines: find).
_LINE_WINDOW = 128

# How a verb's arguments start: nats-server's OP_<VERB>/OP_<VERB>_SPC states.
_NEEDS_SPACE = 0  # PUB foo: one or more spaces/tabs are required
_SPACE_OPTIONAL = 1  # CONNECT{...}: spaces are skipped, none required
_IGNORES_REST = 2  # PING anything: the rest of the line is ignored

_VERBS = (
    (b"PUB", _NEEDS_SPACE),
    (b"PING", _IGNORES_REST),
    (b"PONG", _IGNORES_REST),
    (b"SUB", _NEEDS_SPACE),
    (b"UNSUB", _NEEDS_SPACE),
    (b"HPUB", _NEEDS_SPACE),
    (b"CONNECT", _SPACE_OPTIONAL),
    (b"INFO", _SPACE_OPTIONAL),
    (b"+OK", _IGNORES_REST),
    (b"-ERR", _NEEDS_SPACE),
)
_LONGEST_VERB = max(len(v) for v, _ in _VERBS)

_SPACE_TAB = re.compile(rb"[ \t]+")
_SPACE_TAB_CR_LF = re.compile(rb"[ \t\r\n]+")
# The canonical PING line, and blocks of them by which _ping_run_end measures a run (see
# PingRun) with a few memcmps; other spellings go one by one.
_PING_LINE = b"PING\r\n"
_PING_BLOCKS = (_PING_LINE * 1024, _PING_LINE * 32, _PING_LINE)


def _ping_run_end(buf: bytes, pos: int) -> int:
    """Where the PING lines from ``pos`` end (64 KiB of them: 2.4 ms with a regex, 0.03 here)."""
    for block in _PING_BLOCKS:
        size = len(block)
        while buf.startswith(block, pos):
            pos += size
    return pos


@overload
def _match_verb(line: bytes, complete: Literal[True]) -> tuple[bytes, int]: ...
@overload
def _match_verb(line: bytes, complete: bool) -> tuple[bytes, int] | None: ...
def _match_verb(line: bytes, complete: bool) -> tuple[bytes, int] | None:
    """Find the verb at the start of ``line`` and where its arguments begin.

    ``line`` has no LF (it may end in CR). Returns ``None`` when an incomplete ``line`` is
    still a valid beginning of some op; raises ``UNKNOWN_OP`` when it cannot be one.
    """
    head = line[:_LONGEST_VERB].upper()
    n_line = len(line)
    for verb, rule in _VERBS:
        n = len(verb)
        if head[:n] != verb:
            continue
        if rule == _IGNORES_REST:
            return verb, n
        i = n
        if rule == _NEEDS_SPACE:
            if i == n_line:
                if complete:
                    break
                return None
            if line[i] not in (32, 9):
                break
        while i < n_line and line[i] in (32, 9):
            i += 1
        return verb, i
    else:
        if not complete and any(verb.startswith(head) for verb, _ in _VERBS):
            return None
    raise ProtocolError(errors.UNKNOWN_OP, f"unknown op {line[:16]!r}")


# encoding/json's maxNestingDepth: Go refuses deeper JSON (orjson stops at 1024).
GO_JSON_MAX_DEPTH = 10000
_BRACKETS_OR_QUOTED = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _nesting_depth(arg: bytes) -> int:
    """The deepest [ / { nesting in ``arg``, skipping strings, without recursion."""
    depth = deepest = 0
    for match in _BRACKETS_OR_QUOTED.finditer(arg):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        elif token in (b"]", b"}"):
            depth -= 1
    return deepest


def _go_json_loads(arg: bytes):
    """Decode JSON that orjson refuses but Go's encoding/json accepts: invalid UTF-8 and lone
    surrogate escapes (Go turns both into U+FFFD), and nesting deeper than orjson's 1024."""
    depth = _nesting_depth(arg)
    if depth > GO_JSON_MAX_DEPTH:
        raise ProtocolError(errors.SILENT_CLOSE, "JSON nested too deeply")
    limit = sys.getrecursionlimit()
    try:
        if depth + 200 > limit:  # json's C scanner counts nesting against the recursion limit
            sys.setrecursionlimit(depth + 200)
        value = json.loads(arg.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        raise ProtocolError(errors.SILENT_CLOSE, "bad JSON") from None
    finally:
        sys.setrecursionlimit(limit)
    return _replace_surrogates(value)


def _replace_surrogates(value):
    """Lone surrogates to U+FFFD in the top-level keys and strings: only those are read (a
    CONNECT's options), and walking deeper would recurse as deep as the JSON nests."""
    if isinstance(value, dict):
        fix = lambda v: _LONE_SURROGATE.sub("\ufffd", v) if isinstance(v, str) else v  # noqa: E731
        return {fix(k): fix(v) for k, v in value.items()}
    return value


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _run_prefix(arg: bytes, subject: bytes, reply: bytes | None, size_digits: bytes) -> bytes | None:
    """The bytes a PUB whose arguments are ``arg`` starts with, up to what follows the subject,
    b"PUB <subject><blanks>", when that rest is exactly "[reply ]size" (one space, no tab); else
    None. Messages with one such prefix form a run, which the router rewrites by replacing the
    prefix with "MSG <subject> <sid> ". The blanks may be anything: nats-py writes two spaces
    when there is no reply ("PUB foo  5"), and nats-server's MSG has one either way."""
    rest = size_digits if reply is None else reply + b" " + size_digits
    blanks = arg[len(subject) : len(arg) - len(rest)]
    if not (blanks and arg.startswith(subject) and arg.endswith(rest)) or blanks.strip(b" \t"):
        return None
    return b"PUB " + arg[: len(arg) - len(rest)]


def _big_size(digits: bytes) -> int | None:
    """A size above _SIZE_OF's for the fast paths: canonical digits (no sign, no leading zero)
    of at most _FAST_SIZE_DIGITS, else None (the exact general path decides)."""
    if 3 < len(digits) <= _FAST_SIZE_DIGITS and digits.isdigit() and digits[0] != 48:  # b"0"
        return int(digits)
    return None


def _parse_size(digits: bytes) -> int:
    """nats-server's parseSize: ASCII digits only, at most 9 of them, else -1."""
    if not digits.isdigit() or len(digits) > MAX_SIZE_DIGITS:
        return -1
    return int(digits)


class Parser:
    """Incremental parser for one client connection.

    Attributes the connection may change between ops (they take effect for the next op):
    ``max_payload``, ``max_control_line``, ``headers`` (HPUB allowed: server and client both
    support headers) and ``auth_pending`` (the next op must be CONNECT, as when nats-server
    requires authentication).
    """

    __slots__ = (
        "max_control_line",
        "max_payload",
        "headers",
        "auth_pending",
        "_buf",
        "_view",
        "_pos",
        "_extra",
        "_extra_len",
        "_extra_skip",
        "_need",
        "_op_size",
        "_exact",
        "_ready",
        "_error",
        "coalesce",
        "_uniform",
    )

    def __init__(
        self,
        *,
        max_control_line: int = MAX_CONTROL_LINE_SIZE,
        max_payload: int = MAX_PAYLOAD_SIZE,
        headers: bool = True,
        auth_pending: bool = False,
    ) -> None:
        self.max_control_line = max_control_line
        self.max_payload = max_payload
        self.headers = headers
        self.auth_pending = auth_pending
        self._buf = b""  # the bytes being parsed; _pos is where the next op starts
        self._view = memoryview(b"")
        self._pos = 0
        # Chunks that arrived while an op was incomplete. They are joined only once the op can
        # complete (_need bytes from _pos), so a 1 MiB payload in 64 KiB reads costs one copy.
        self._extra: list[bytes] = []
        self._extra_len = 0
        # Bytes at the start of _extra[0] already parsed: an op that straddled two chunks is
        # joined alone (at most twice: its control line, then its payload), then parsing goes
        # on in the next chunk itself, not in a copy of it (callgrind, 1 -> 1 1 KiB: the copy
        # of a 64 KiB chunk for each one).
        self._extra_skip = 0
        self._need = 0
        self._op_size = 0  # the incomplete op's whole size from _pos, when known (a PUB's payload)
        # True: every op takes the exact general path (the fast paths' tests compare the two).
        self._exact = False
        self._ready: collections.deque = collections.deque()  # parsed, not yet taken by next_op()
        # parse() may return PubRun ops for consecutive same-subject PUBs (the server asks for
        # this; next_op() users and the default see one Pub per message).
        self.coalesce = False
        self._error: ProtocolError | None = None  # raised once the ops before it are taken
        self._uniform: tuple | None = None  # ((prefix, size), compiled pattern): see _uniform_run_end

    def feed(self, data: bytes) -> None:
        """Add received bytes. ``data`` must not be mutated afterwards (it may be sliced)."""
        if not data:
            return
        if not self._extra and self._pos >= len(self._buf):
            self._set_buffer(data)
        else:
            self._extra.append(data)
            self._extra_len += len(data)

    def _set_buffer(self, data: bytes) -> None:
        self._buf = data
        self._view = memoryview(data)
        self._pos = 0

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as ops."""
        return len(self._buf) - self._pos + self._extra_len - self._extra_skip

    def next_op(self) -> Op | NeedData:
        """Return the next op, or ``NEED_DATA``. Raises ``ProtocolError``."""
        ready = self._ready
        if not ready:
            ready.extend(self.parse())
            if not ready:
                return NEED_DATA
        return ready.popleft()

    def _end_run(
        self, append, buf: bytes, first, prefix: bytes | None, start: int, end: int, count: int, size: int, flags: tuple
    ) -> None:
        """Emit the gathered run buf[start:end] of ``count`` (at least two) PUBs that start
        with ``prefix``, the first being the Pub ``first``, as a PubRun. Whether the prefix
        also occurs inside a payload is the router's to check (see PubRun): it finds out from
        its own ``replace`` for free, where counting here cost a scan of the run (a tenth of
        the time with 1 KiB messages). A run of ZERO_COPY_MIN bytes or more is a memoryview of
        the read, as a big payload is: the router's restride copies it once into the MSGs, and
        a slice was one more copy of every byte (callgrind, 1 -> 1 1 KiB: see benchmarks/README.md)."""
        data = buf[start:end] if end - start < ZERO_COPY_MIN else self._view[start:end]
        append(_new(PubRun, (first.subject, count, size, *flags, data, prefix)))


    def _uniform_run_end(self, buf: bytes, pos: int, prefix: bytes, size: int) -> int:
        """Where the messages from ``pos`` on stop being exactly ``<prefix><size>\\r\\n``,
        ``size`` bytes, ``\\r\\n``: the rest of a run of one subject and one payload size.

        The run fast path costs about 0.5 us a message in bytecode (five C calls); sre checks
        each message's control line and trailer and jumps over its payload at 0.02 us (a
        benchmark's 16 B run: 25x). The pattern is compiled once per subject and size (43 us,
        hence only for runs already _UNIFORM_RUN_SKIP long) and kept for the next chunk.
        """
        key = (prefix, size)
        cached = self._uniform
        if cached is None or cached[0] != key:
            header = re.escape(prefix + str(size).encode() + b"\r\n")
            cached = self._uniform = (key, re.compile(b"(?:%s.{%d}\r\n)%s" % (header, size, _POSSESSIVE), re.DOTALL))
        return cached[1].match(buf, pos).end()

    def expand(self, data) -> list:
        """The Pub ops of well-formed PUB wire bytes (a PubRun's ``data``)."""
        parser = Parser(max_control_line=1 << 30, max_payload=1 << 30)
        parser.feed(bytes(data))
        return parser.parse()

    def failed_at(self) -> tuple[bytes, int]:
        """After a ProtocolError: the buffer and where the op that failed starts in it (for the
        server's parser ERROR log line)."""
        return self._buf, self._pos

    def unread(self, ops) -> None:
        """Give back ops taken from parse() but not handled yet: they come first next time."""
        self._ready.extendleft(reversed(list(ops)))

    def parse(self) -> list[Op]:
        """Every complete op fed so far, as a list (empty: need more data).

        This is the server's entry point: one call per received chunk, with the loop's state in
        local variables (a method call per op would double the cost of a small PUB). The batch
        ends after a CONNECT, since it may change how the following bytes parse (headers,
        auth). An error after some ops is raised by the next call, so the ops before it are
        handled first, as nats-server does.
        """
        if self._ready:  # ops next_op() has not handed out yet come first
            ops = list(self._ready)
            self._ready.clear()
            return ops
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if self._pos >= len(self._buf) and not self._extra:
            return []  # all taken: the server's call after each chunk's ops (1 us saved a chunk)
        ops = []
        append = ops.append
        coalesce = self.coalesce
        try:
            while True:
                if self._extra and self._pos >= len(self._buf):
                    # The op that straddled two chunks is done: on in the next chunk itself, by
                    # the fast path below (the general path took one more op a chunk).
                    self._join_extra()
                # Fast path for what nearly every message is: an upper-case "PUB subject
                # [reply] size" with CRLF, a size of at most five digits and the whole payload at hand.
                # Anything else, or any doubt, goes to the exact general path below.
                buf = self._buf
                pos = self._pos
                if not (self._exact or self.auth_pending or self._extra):
                    find = buf.find
                    max_payload = self.max_payload
                    max_control_line = self.max_control_line
                    # Runs (coalesce): a PUB is appended as a Pub at once; when the next one has
                    # the same subject, that Pub is taken back and a run opens at its start. So
                    # subjects that change every message cost one comparison here, no more.
                    last = None  # the Pub just appended, while it may still open a run
                    last_arg = b""
                    last_start = 0
                    run_count = 0  # messages in the open run (0: none open)
                    run_subject = run_prefix = run_first = None
                    run_start = run_bytes = run_size = 0
                    run_uniform = run_replies = True
                    # Slices compared, not startswith(x, pos): startswith with a start index
                    # parses its arguments the slow way (callgrind: 1.4k instructions a call,
                    # a 4-byte slice and compare 1.1k). Each payload's CR LF is compared
                    # together with the next "PUB ", which is why in_pub is kept up to date.
                    in_pub = buf[pos : pos + 4] == b"PUB "
                    while in_pub:
                        if run_prefix is not None:
                            # The next messages of a run are almost always exactly
                            # "<prefix><digits>\r\n": the prefix is known, the digits are looked
                            # up (only canonical digits, at most 4, are keys), nothing is split.
                            # The digits come from partitioning the next few bytes at CR LF, not
                            # from find(b"\n", pos): find parses its arguments the slow way
                            # (callgrind, micro 1 -> 1 16-512 B: see benchmarks/README.md). A
                            # payload's CR LF is compared together with the next message's prefix,
                            # one slice for both. Anything else goes to the general path below.
                            run_from = pos
                            skip = len(run_prefix)
                            next_start = b"\r\n" + run_prefix
                            span = skip + 2
                            if _scan_run is not None:  # the loop below, compiled (_cscan.c)
                                pos, more, more_bytes, same_size, with_reply = _scan_run(
                                    buf, pos, run_prefix, run_size, max_payload, max_control_line
                                )
                                run_count += more
                                run_bytes += more_bytes
                                run_uniform = run_uniform and same_size
                                run_replies = run_replies or with_reply
                                in_run = False
                            else:
                                in_run = buf[pos : pos + skip] == run_prefix
                            while in_run:
                                digits, crlf, _ = buf[pos + skip : pos + skip + _SIZE_WINDOW].partition(b"\r\n")
                                size = _SIZE_OF.get(digits)
                                if size is None:
                                    size = _big_size(digits)
                                reply = None
                                if size is None:
                                    # "<reply> <size>": a run of requests (a JetStream publisher's
                                    # PUBs all have a reply). Were these left to the general path
                                    # below, each would cost 2 us of bytecode (a 16 B acked
                                    # publish: 9.4 -> 7.x us of server CPU, benchmarks/README.md).
                                    digits, crlf, _ = buf[pos + skip : pos + skip + _LINE_WINDOW].partition(b"\r\n")
                                    reply, _, size_digits = digits.rpartition(b" ")
                                    if not crlf or reply.split() != [reply]:  # (one token, no blank)
                                        break
                                    size = _SIZE_OF.get(size_digits)
                                    if size is None:
                                        size = _big_size(size_digits)
                                if size is None or size > max_payload or not crlf:
                                    break
                                nl = pos + skip + len(digits) + 1
                                if nl - pos - 5 > max_control_line:  # the arguments' length
                                    break
                                stop = nl + 1 + size
                                in_run = buf[stop : stop + span] == next_start
                                if not in_run and buf[stop : stop + 2] != b"\r\n":
                                    break
                                run_count += 1
                                run_bytes += size
                                if reply is not None:
                                    run_replies = True
                                if size != run_size:
                                    run_uniform = False
                                elif reply is None and (run_count == _UNIFORM_RUN_SKIP or (
                                    run_count == _UNIFORM_RUN_SKIP_CACHED
                                    and self._uniform is not None
                                    and self._uniform[0] == (run_prefix, size)
                                )):
                                    # A long run of one subject and size: skip the rest of it
                                    # in one regex match (see _uniform_run_end).
                                    stride = stop + 2 - pos
                                    end = self._uniform_run_end(buf, stop + 2, run_prefix, size)
                                    more = (end - stop - 2) // stride
                                    run_count += more
                                    run_bytes += more * size
                                    pos = end
                                    in_run = buf[pos : pos + skip] == run_prefix
                                    continue
                                pos = stop + 2
                            if pos != run_from:
                                in_pub = buf[pos : pos + 4] == b"PUB "  # it may not even be a PUB
                                continue
                        if _scan_pubs is not None and not run_count:
                            # Plain PUBs whose subject changes, read in C (see _scan_pubs above);
                            # it stops before the next one it leaves to the code below.
                            pos, scanned_last = _scan_pubs(
                                buf, pos, self._view, ops, Pub, max_payload, max_control_line,
                                last[0] if last is not None else None, coalesce,
                            )
                            if scanned_last >= 0:
                                if coalesce:
                                    last = ops[-1]
                                    last_start = scanned_last
                                    last_arg = buf[scanned_last + 4 : buf.find(b"\r\n", scanned_last)]
                                if buf[pos : pos + 4] != b"PUB ":
                                    break
                        # The arguments: what comes before the first CR LF of the next few
                        # bytes (partition: one fast call where find(b"\n", pos), the CR check
                        # and the slice took three; callgrind: -1.2k instructions a message);
                        # a longer line is found with find.
                        arg, crlf, _ = buf[pos + 4 : pos + _LINE_WINDOW].partition(b"\r\n")
                        if crlf:
                            nl = pos + 5 + len(arg)
                        else:
                            nl = find(b"\n", pos)
                            if nl < 0 or buf[nl - 1] != 13:
                                break
                            arg = buf[pos + 4 : nl - 1]
                        args = arg.split()
                        n_args = len(args)
                        if n_args == 2:
                            subject, size_digits = args
                            reply = None
                        elif n_args == 3:
                            subject, reply, size_digits = args
                        else:
                            break
                        size = _SIZE_OF.get(size_digits)
                        if size is None:
                            size = _big_size(size_digits)
                        # (13 in arg: int membership is a memchr, 7x cheaper than b"\r" in arg.) A
                        # CR or LF inside the arguments goes to the exact path, and so does a
                        # vertical tab or form feed: split() takes those for blanks, nats-server
                        # does not. Checked here, on the line, not once per read on all of it:
                        # payloads may hold them (binary ones mostly do), and a read holding
                        # one went to the exact path whole (a 120 KiB read of 1 KiB binary
                        # payloads: 6.4 us a message against 0.09).
                        if size is None or size > max_payload or len(arg) > max_control_line or 13 in arg or 10 in arg \
                                or 11 in arg or 12 in arg:
                            break
                        start = nl + 1
                        stop = start + size
                        in_pub = buf[stop : stop + 6] == b"\r\nPUB "
                        if not in_pub and buf[stop : stop + 2] != b"\r\n":
                            break
                        if run_count:
                            if subject == run_subject and _run_prefix(arg, subject, reply, size_digits) == run_prefix:
                                run_count += 1
                                run_bytes += size
                                if size != run_size:
                                    run_uniform = False
                                if reply is not None:
                                    run_replies = True
                                pos = stop + 2
                                continue
                            flags = (run_uniform, run_replies)
                            self._end_run(append, buf, run_first, run_prefix, run_start, pos, run_count, run_bytes, flags)
                            run_count = 0
                            run_prefix = None
                        elif (
                            last is not None
                            and subject == last[0]
                            and (prefix := _run_prefix(arg, subject, reply, size_digits)) is not None
                            and prefix == _run_prefix(last_arg, subject, last[1], last[3])
                        ):
                            # The second message on one subject: open a run with the last Pub.
                            ops.pop()
                            run_first = last
                            run_subject = subject
                            run_prefix = prefix
                            run_start = last_start
                            run_count = 2
                            run_size = len(last[4])
                            run_bytes = run_size + size
                            run_uniform = size == run_size
                            run_replies = reply is not None or last[1] is not None
                            last = None
                            pos = stop + 2
                            continue
                        payload = buf[start:stop] if size < ZERO_COPY_MIN else self._view[start:stop]
                        op = _new(Pub, (subject, reply, -1, size_digits, payload))
                        append(op)
                        if coalesce:
                            last = op
                            last_arg = arg
                            last_start = pos
                        pos = stop + 2
                    if run_count:
                        flags = (run_uniform, run_replies)
                        self._end_run(append, buf, run_first, run_prefix, run_start, pos, run_count, run_bytes, flags)
                    if buf[pos : pos + 5] == b"HPUB " and self.headers:
                        end = self._hpubs(buf, pos, ops)
                        if end != pos:
                            self._pos = pos = end
                            if buf[pos : pos + 4] == b"PUB ":
                                continue  # back to the PUB loop above
                    self._pos = pos
                    if pos >= len(buf) and not self._extra:
                        return ops  # the chunk ended with a message (no need to ask _next_op)
                op = self._next_op()
                if op is NEED_DATA:
                    return ops
                append(op)
                if op.__class__ is Connect:
                    return ops
        except ProtocolError as exc:
            if not ops:
                raise
            self._error = exc
            return ops

    def _hpubs(self, buf: bytes, pos: int, ops: list) -> int:
        """The fast path's HPUBs (JetStream clients' messages with headers: counters, message
        ids, ...): upper-case "HPUB subject [reply] hdr_size size" lines whose sizes are
        canonical digits (five at most), each with its payload at hand, appended as the Pub
        ops _pub makes; returns where the first one it is not sure of starts, for the exact
        general path (which raises every error). One call for a series of them, not five per
        message (callgrind, acked counter increments: see benchmarks/instructions.py)."""
        max_payload = self.max_payload
        max_control_line = self.max_control_line
        view = self._view
        if _scan_hpubs is not None:  # the loop below in C; what it leaves, the loop takes
            pos = _scan_hpubs(buf, pos, view, ops, Pub, max_payload, max_control_line)
        append = ops.append
        while buf[pos : pos + 5] == b"HPUB ":
            arg, crlf, _ = buf[pos + 5 : pos + _LINE_WINDOW].partition(b"\r\n")
            if not crlf:
                break
            args = arg.split()
            n_args = len(args)
            if n_args == 3:
                subject, header_digits, size_digits = args
                reply = None
            elif n_args == 4:
                subject, reply, header_digits, size_digits = args
            else:
                break
            header_size = _SIZE_OF.get(header_digits)
            if header_size is None:
                header_size = _big_size(header_digits)
            size = _SIZE_OF.get(size_digits)
            if size is None:
                size = _big_size(size_digits)
            if header_size is None or size is None or header_size > size or size > max_payload \
                    or len(arg) > max_control_line or 13 in arg or 10 in arg or 11 in arg or 12 in arg:
                break
            start = pos + 7 + len(arg)  # after "HPUB " + arg + CR LF
            stop = start + size
            if buf[stop : stop + 2] != b"\r\n":
                break
            if header_size > 0:  # (with no header bytes nats-server delivers a plain MSG)
                size_digits = header_digits + b" " + size_digits
            payload = buf[start:stop] if size < ZERO_COPY_MIN else view[start:stop]
            append(_new(Pub, (subject, reply, header_size, size_digits, payload)))
            pos = stop + 2
        return pos

    def _next_op(self):
        while True:
            if self._extra and not self._join_extra():
                return NEED_DATA
            op = self._op_in_buffer()
            if op is not NEED_DATA or not self._extra:
                return op

    def _join_extra(self) -> bool:
        """Bring later chunks into the buffer for the incomplete op, once it can complete;
        False while it cannot."""
        extra = self._extra
        skip = self._extra_skip
        left = len(self._buf) - self._pos
        if not left:  # the straddling op is done: on in the next chunk, where it ended
            first = extra.pop(0)
            self._extra_len -= len(first)
            self._extra_skip = 0
            self._set_buffer(first)
            self._pos = skip
        elif left + self._extra_len - skip < self._need:
            return False
        else:
            # Join what the op still needs from the next chunk, up to its end if known (a
            # PUB waiting for its payload), else to the end of its control line.
            first = extra[0]
            if self._op_size:
                take = self._op_size - left
            else:
                take = first.find(b"\n", skip) + 1 - skip
            if 0 < take < len(first) - skip:
                self._set_buffer(b"".join((self._view[self._pos :], memoryview(first)[skip : skip + take])))
                self._extra_skip = skip + take
            else:
                self._set_buffer(b"".join([self._view[self._pos :], memoryview(first)[skip:], *extra[1:]]))
                extra.clear()
                self._extra_len = 0
                self._extra_skip = 0
        return True

    def _op_in_buffer(self):
        while True:
            buf = self._buf
            pos = self._pos
            nl = buf.find(b"\n", pos)
            if nl < 0:
                if pos < len(buf):
                    self._partial_line(buf, pos)
                return NEED_DATA

            if self.auth_pending and buf[pos] not in (67, 99):  # nats-server: first op must be C/c
                raise ProtocolError(errors.AUTH_VIOLATION, "expected CONNECT")

            if buf.startswith(b"PUB ", pos):
                verb = b"PUB"
                arg_start = pos + 4
            elif buf.startswith(b"CONNECT {", pos):  # (every client's first line, as clients spell it)
                verb = b"CONNECT"
                arg_start = pos + 8
            elif self.coalesce and buf.startswith(_PING_LINE, pos):
                # PINGs in a row (a flood) as one PingRun, matched in C: see PingRun.
                end = _ping_run_end(buf, pos)
                self._pos = end
                count = (end - pos) // len(_PING_LINE)
                return PING if count == 1 else _new(PingRun, (count,))
            else:
                verb, arg_start = _match_verb(buf[pos:nl], True)
                arg_start += pos
                if verb == b"PING":
                    self._pos = nl + 1
                    return PING
                if verb == b"PONG":
                    self._pos = nl + 1
                    return PONG
                if verb == b"+OK":
                    self._pos = nl + 1
                    continue

            # The arguments: up to the LF, minus a CR before it. nats-server drops the last byte
            # once it has seen any CR, and keeps inner CRs: the slow path below reproduces that.
            end = nl - 1 if buf[nl - 1] == 13 else nl
            arg = buf[arg_start:end]
            # A vertical tab or form feed: bytes.split() takes them for blanks, nats-server does
            # not (nor a CR inside the arguments), so such lines are split exactly.
            exact = self._exact or 11 in arg or 12 in arg
            if 13 in arg:
                arg = buf[arg_start : nl - 1]
                exact = True
            if len(arg) > self.max_control_line:
                raise ProtocolError(errors.MAX_CONTROL_LINE, f"control line of {len(arg)} bytes")

            if verb == b"PUB" or verb == b"HPUB":
                if exact:
                    args = [a for a in _SPACE_TAB.split(arg) if a]
                else:
                    args = arg.split()
                return self._pub(verb, args, nl + 1, pos)

            self._pos = nl + 1
            if verb == b"SUB" or verb == b"UNSUB":
                args = [a for a in _SPACE_TAB_CR_LF.split(arg) if a] if exact else arg.split()
                if verb == b"SUB":
                    if len(args) == 2:
                        return _new(Sub, (args[0], None, args[1]))
                    if len(args) == 3:
                        return _new(Sub, (args[0], args[1], args[2]))
                    raise ProtocolError(errors.SILENT_CLOSE, "SUB needs 2 or 3 arguments")
                if len(args) == 1:
                    return _new(Unsub, (args[0], -1))
                if len(args) == 2:
                    return _new(Unsub, (args[0], _parse_size(args[1])))
                raise ProtocolError(errors.SILENT_CLOSE, "UNSUB needs 1 or 2 arguments")
            if verb == b"CONNECT":
                return Connect(self._json_object(arg))
            if verb == b"INFO":
                self._json_object(arg)  # nats-server decodes a client's INFO, then ignores it
                continue
            # -ERR from a client: nats-server logs it and closes without answering.
            raise ProtocolError(errors.CLIENT_ERROR, f"client sent -ERR {arg[:64]!r}")

    def _pub(self, verb: bytes, args: list, start: int, pos: int):
        """The payload part of PUB/HPUB; ``start`` is the index just after the control line."""
        n_args = len(args)
        if verb == b"PUB":
            if n_args == 2:
                subject, size_digits = args
                reply = None
            elif n_args == 3:
                subject, reply, size_digits = args
            else:
                raise ProtocolError(errors.SILENT_CLOSE, "PUB needs 2 or 3 arguments")
            header_size = -1
            size = _parse_size(size_digits)
            if size < 0:
                raise ProtocolError(errors.SILENT_CLOSE, "PUB has a bad size")
        else:
            if not self.headers:
                raise ProtocolError(errors.SILENT_CLOSE, "HPUB without header support")
            if n_args == 3:
                subject, header_digits, size_digits = args
                reply = None
            elif n_args == 4:
                subject, reply, header_digits, size_digits = args
            else:
                raise ProtocolError(errors.SILENT_CLOSE, "HPUB needs 3 or 4 arguments")
            header_size = _parse_size(header_digits)
            size = _parse_size(size_digits)
            if header_size < 0 or size < 0 or header_size > size:
                raise ProtocolError(errors.SILENT_CLOSE, "HPUB has bad sizes")
            if header_size > 0:  # with no header bytes nats-server delivers a plain MSG
                size_digits = header_digits + b" " + size_digits
        if size > self.max_payload:
            raise ProtocolError(errors.MAX_PAYLOAD, f"payload of {size} bytes")

        buf = self._buf
        end = start + size
        if end + 2 > len(buf):
            if len(buf) > end and buf[end] != 13:  # fail as soon as the terminator is wrong
                raise ProtocolError(errors.UNKNOWN_OP, "payload not followed by CRLF")
            # Wake up for the first byte after the payload, so a wrong one fails at once.
            self._need = end + 2 - pos if len(buf) > end else end + 1 - pos
            self._op_size = end + 2 - pos
            return NEED_DATA
        if buf[end] != 13 or buf[end + 1] != 10:
            raise ProtocolError(errors.UNKNOWN_OP, "payload not followed by CRLF")
        self._pos = end + 2
        payload = buf[start:end] if size < ZERO_COPY_MIN else self._view[start:end]
        return _new(Pub, (subject, reply, header_size, size_digits, payload))

    def _partial_line(self, buf: bytes, pos: int) -> None:
        """Check an incomplete control line now, as nats-server does at the end of a read."""
        line = buf[pos:]
        if self.auth_pending and line[0] not in (67, 99):
            raise ProtocolError(errors.AUTH_VIOLATION, "expected CONNECT")
        matched = _match_verb(line, False)
        if matched is not None:
            verb, arg_start = matched
            if verb in (b"PING", b"PONG", b"+OK"):
                # The rest of this line will be ignored: do not buffer it.
                if len(line) > _IGNORED_LINE_KEEP:
                    self._set_buffer(line[: len(verb)])
                    line = self._buf
            # nats-server measures buf[as:i-drop]: a CR seen in the argument is not counted.
            elif len(line) - arg_start - (13 in line[arg_start:]) > self.max_control_line:
                raise ProtocolError(errors.MAX_CONTROL_LINE, "partial control line too long")
        self._need = len(line) + 1
        self._op_size = 0

    @staticmethod
    def _json_object(arg: bytes) -> dict:
        """CONNECT/INFO JSON; nats-server closes silently when it does not decode."""
        try:
            value = orjson.loads(arg)
        except orjson.JSONDecodeError:
            value = _go_json_loads(arg)
        if value is None:  # Go's json.Unmarshal accepts null and changes nothing
            return {}
        if not isinstance(value, dict):
            raise ProtocolError(errors.SILENT_CLOSE, "JSON is not an object")
        return value
