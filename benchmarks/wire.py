"""Wire-level load clients: raw sockets speaking the NATS text protocol.

Why not nats-py: a Python client parses every message and would saturate long
before nats-server does, so we would be benchmarking the client.  These
clients instead

* pre-encode a window of ``PUB`` frames once and push it with one ``sendall``
  per window (the kernel copy is most of the cost);
* count received messages with ``bytearray.count(b"MSG ")`` on whole recv
  chunks (a C-speed scan), never parsing message by message;
* run in separate processes (see scenarios.Workers), so publishers and
  subscribers do not share a GIL.

Every function named ``*_worker`` runs inside a worker process; it gets a
``Shared`` object (shared-memory counters and events created by the parent,
see scenarios.Workers) and a ``ctl`` whose ``ready()`` it calls once it is
connected and subscribed (``ctl.report(d)`` sends an intermediate result).
Its return value is the worker's result.
"""

from __future__ import annotations

import errno
import resource
import selectors
import socket
import struct
import time
from dataclasses import dataclass

CONNECT = b'CONNECT {"verbose":false,"pedantic":false}\r\n'
PING = b"PING\r\n"
PONG = b"PONG\r\n"

# How many unanswered PINGs (= windows not yet processed by the server) a
# publisher may have in flight.  Enough to keep the pipe full, small enough
# that the server never holds more than a few windows of our input.
MAX_OUTSTANDING_WINDOWS = 4
# A publisher stops (and the round is reported "cut short") if subscribers
# make no progress for this long.
STALL_TIMEOUT = 5.0
RECV_BUF = 1 << 20


class ProtocolError(RuntimeError):
    pass


def now() -> float:
    # CLOCK_MONOTONIC is system-wide on Linux, so timestamps taken in the
    # different worker processes and in the parent are comparable.
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def cpu_now() -> float:
    # All threads of this process (a multiprocessing.Queue has a feeder thread).
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


# --------------------------------------------------------------------------
# Encoding helpers (used by the parent to pre-encode everything once)


def pub_frame(subject: str, payload: bytes, reply: str | None = None) -> bytes:
    head = f"PUB {subject} {reply} {len(payload)}\r\n" if reply else f"PUB {subject} {len(payload)}\r\n"
    return head.encode() + payload + b"\r\n"


def msg_frame_size(subject: str, sid: int, payload_len: int, reply: str | None = None) -> int:
    """Size of the MSG frame a server sends for one delivery."""
    head = f"MSG {subject} {sid} {reply} {payload_len}\r\n" if reply else f"MSG {subject} {sid} {payload_len}\r\n"
    return len(head) + payload_len + 2


def payload(size: int) -> bytes:
    # Only 'x': the payload can never contain "MSG ", "PONG" or "-ERR", which
    # is what makes counting by substring search exact.
    return b"x" * size


@dataclass
class Window:
    data: bytes  # N PUB frames followed by one PING
    msgs: int


def make_windows(frames: list[bytes], window_bytes: int) -> list[Window]:
    """Cut a list of PUB frames into windows of ~window_bytes, each ending in PING.

    The PING rides in the same sendall as the messages (no extra syscall); its
    PONG tells the publisher the server has processed the whole window.
    """
    windows, cur, size = [], [], 0
    for fr in frames:
        cur.append(fr)
        size += len(fr)
        if size >= window_bytes:
            windows.append(Window(b"".join(cur) + PING, len(cur)))
            cur, size = [], 0
    if cur:
        windows.append(Window(b"".join(cur) + PING, len(cur)))
    return windows


def repeat_windows(frame: bytes, window_bytes: int) -> list[Window]:
    """One window holding the same PUB frame repeated (single-subject scenarios)."""
    n = max(1, window_bytes // len(frame))
    return [Window(frame * n + PING, n)]


# --------------------------------------------------------------------------
# Stream helpers


class PatternCounter:
    """Counts a short pattern in a byte stream delivered in arbitrary chunks.

    ``bytearray.count`` runs at memory speed; the only subtlety is a pattern
    split across two chunks.  We keep the last len(pattern)-1 bytes of the
    stream and search ``tail + head-of-new-chunk``: that string is too short
    to hold a whole pattern on either side, so every hit in it straddles the
    boundary and was not counted before.  Patterns used here cannot overlap
    themselves, so non-overlapping counting is exact.
    """

    __slots__ = ("pattern", "keep", "tail", "count")

    def __init__(self, pattern: bytes):
        self.pattern = pattern
        self.keep = len(pattern) - 1
        self.tail = b""
        self.count = 0

    def feed(self, buf, n: int) -> None:
        if n <= 0:
            return
        k = self.keep
        c = buf.count(self.pattern, 0, n)
        if self.tail:
            c += (self.tail + bytes(buf[: min(k, n)])).count(self.pattern)
        self.count += c
        if n >= k:
            self.tail = bytes(buf[n - k : n])
        else:
            self.tail = (self.tail + bytes(buf[:n]))[-k:]


def connect(port: int, timeout: float = 10.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    # No Nagle: request/reply latency would otherwise include delayed-ACK waits.
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _read_until(sock: socket.socket, marker: bytes, data: bytes = b"") -> tuple[bytes, bytes]:
    """Read until marker; returns (everything up to and including marker, rest)."""
    while marker not in data:
        if b"-ERR" in data:
            raise ProtocolError(data[data.index(b"-ERR") :][:200].decode(errors="replace"))
        chunk = sock.recv(65536)
        if not chunk:
            raise ProtocolError(f"connection closed during handshake; got {data[-200:]!r}")
        data += chunk
    i = data.index(marker) + len(marker)
    if b"-ERR" in data[:i]:
        raise ProtocolError(data[data.index(b"-ERR") :][:200].decode(errors="replace"))
    return data[:i], data[i:]


def handshake(sock: socket.socket, extra: bytes = b"") -> bytes:
    """INFO -> CONNECT + extra (e.g. SUBs) + PING -> PONG.

    The PONG proves the server has processed everything sent before it, so
    after this returns, subscriptions are registered.  Returns any bytes that
    arrived after the PONG (normally none).
    """
    line, rest = _read_until(sock, b"\r\n")
    if not line.startswith(b"INFO "):
        raise ProtocolError(f"expected INFO, got {line[:100]!r}")
    sock.sendall(CONNECT + extra + PING)
    _, rest = _read_until(sock, PONG, rest)
    return rest


def _set_linger_zero(sock: socket.socket) -> None:
    # Close with RST: no TIME_WAIT entries pile up when thousands of
    # connections are opened and closed round after round.
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass


# --------------------------------------------------------------------------
# Publisher


@dataclass
class FlowGroup:
    """A set of subscriber slots that together must receive num/den of all publishes.

    Fan-out: one group per subscriber, num=den=1.  Queue group: one group of
    all members, num=den=1.  Wildcards: one group per connection, num = its
    matches per batch, den = batch size.
    """

    slots: list[int]
    num: int
    den: int
    lag_limit: int  # messages a group may trail behind before publishers wait

    def expected(self, published: int) -> int:
        return published * self.num // self.den


def _lagging(shared, groups: list[FlowGroup]) -> bool:
    published = sum(shared.sent)
    recv = shared.recv
    for g in groups:
        got = 0
        for s in g.slots:
            got += recv[s]
        if g.expected(published) - got > g.lag_limit:
            return True
    return False


def publisher_worker(shared, ctl, index: int, port: int, windows: list[Window],
                     duration: float, groups: list[FlowGroup]) -> dict:
    """Send the pre-encoded windows in a loop for `duration` seconds.

    Pacing, so that no subscriber is ever cut off as a slow consumer (servers
    allow 64 MiB pending per client):
    * at most MAX_OUTSTANDING_WINDOWS windows without their PONG;
    * after each window, wait while any subscriber group trails by more than
      its lag limit (a few MiB), using the subscribers' shared counters.
    The time check happens only after a whole cycle of windows, so a
    wildcard batch is always published completely (its expected deliveries
    per connection are known per batch).
    """
    sock = connect(port)
    handshake(sock)
    ctl.ready()
    shared.go.wait()
    sock.settimeout(10.0)
    pongs = PatternCounter(PONG)
    pings = PatternCounter(PING)  # the server's keep-alive PINGs, answered
    rbuf = bytearray(65536)
    sent_windows = 0
    sent_msgs = 0
    flow_wait = 0.0
    stalled = False
    error = None
    cpu0 = cpu_now()
    t0 = now()

    def read_pongs() -> None:
        nonlocal error
        n = sock.recv_into(rbuf)
        if n == 0:
            raise ProtocolError("server closed the publisher connection")
        pongs.feed(rbuf, n)
        before = pings.count
        pings.feed(rbuf, n)
        if pings.count != before:
            sock.sendall(PONG * (pings.count - before))
        if b"-ERR" in rbuf[:n]:
            error = bytes(rbuf[:n]).decode(errors="replace").strip()

    try:
        while True:
            for w in windows:
                sock.sendall(w.data)
                sent_windows += 1
                sent_msgs += w.msgs
                shared.sent[index] = sent_msgs
                while sent_windows - pongs.count > MAX_OUTSTANDING_WINDOWS:
                    read_pongs()
                if groups and _lagging(shared, groups):
                    tw = now()
                    while _lagging(shared, groups):
                        if shared.abort.value:
                            break
                        if now() - tw > STALL_TIMEOUT:
                            stalled = True
                            break
                        # Sleep rather than spin: the 2 cores are shared
                        # with the server and the subscribers.
                        time.sleep(0.0002)
                    flow_wait += now() - tw
                if error or stalled or shared.abort.value:
                    break
            if error or stalled or shared.abort.value or now() - t0 >= duration:
                break
        # Final flush: every window's PONG, i.e. the server processed it all.
        while pongs.count < sent_windows and not error:
            read_pongs()
    except (OSError, ProtocolError) as e:
        error = f"{type(e).__name__}: {e}"
    t1 = now()
    cpu1 = cpu_now()
    if error or stalled:
        shared.abort.value = 1
    sock.close()
    return dict(sent=sent_msgs, windows=sent_windows, t_start=t0, t_end=t1, cpu=cpu1 - cpu0,
                flow_wait=flow_wait, stalled=stalled, error=error)


# --------------------------------------------------------------------------
# Subscriber


@dataclass
class SubConn:
    slot: int  # index in shared.recv
    sub_lines: bytes  # SUB commands sent before the handshake PING
    frame_size: int | None = None  # fixed MSG frame size, when all deliveries look alike


class ScanCounter:
    """Deliveries of any size: count "MSG " (and the server's PINGs) by scanning.

    About 0.5 ms of CPU per MiB and pattern; used where frames differ in size
    (wildcard scenarios, whose byte rates are low anyway).
    """

    def __init__(self):
        self.msgs = PatternCounter(b"MSG ")
        self.ping_counter = PatternCounter(PING)
        self.nbytes = 0

    def feed(self, buf, n: int) -> int:
        """Returns the number of new server PINGs (to be answered)."""
        self.nbytes += n
        self.msgs.feed(buf, n)
        before = self.ping_counter.count
        self.ping_counter.feed(buf, n)
        return self.ping_counter.count - before

    @property
    def count(self) -> int:
        return self.msgs.count

    @property
    def pings(self) -> int:
        return self.ping_counter.count

    def frames_ok(self) -> bool:
        return True  # nothing more to check without parsing


class FixedFrameCounter:
    """Deliveries that all have the same frame size: count = bytes / size.

    No per-byte work at all in Python; this is what keeps a subscriber far
    from being the bottleneck at hundreds of MiB/s.  The only other thing the
    server sends us is its keep-alive PING (nats-server sends one ~2 s after
    connect), 6 bytes that shift the frame alignment.  To notice it cheaply,
    each chunk checks that the first frame boundary it contains starts with
    "MSG "; on a mismatch it re-synchronises on the next "MSG " and books the
    shift as inserted bytes, which must be a multiple of 6 (whole PINGs).
    These PINGs are not answered: a server disconnects only after two
    unanswered PINGs, minutes apart.
    """

    def __init__(self, frame_size: int):
        self.fs = frame_size
        self.nbytes = 0
        self.inserted = 0  # bytes that are not MSG frames (server PINGs)
        self.bad_shifts = 0

    def feed(self, buf, n: int) -> int:
        fs = self.fs
        off = (fs - (self.nbytes - self.inserted) % fs) % fs  # first frame boundary in this chunk
        if off + 4 <= n and buf[off : off + 4] != b"MSG ":
            f = buf.find(b"MSG ", 0, n)
            if f >= 0:  # (a chunk holding only a PING: the next chunk resyncs)
                shift = (f - off) % fs
                self.inserted += shift
                if shift % len(PING):
                    self.bad_shifts += 1
        self.nbytes += n
        return 0

    def _split(self) -> tuple[int, int]:
        # A PING after the last checked boundary shows up as a remainder.
        q, r = divmod(self.nbytes - self.inserted, self.fs)
        return q, r

    @property
    def count(self) -> int:
        return self._split()[0]

    @property
    def pings(self) -> int:
        return (self.inserted + self._split()[1]) // len(PING)

    def frames_ok(self) -> bool:
        r = self._split()[1]
        return self.bad_shifts == 0 and self.inserted % len(PING) == 0 and r % len(PING) == 0 and r <= 3 * len(PING)


@dataclass
class _SubState:
    conn: SubConn
    sock: socket.socket
    counter: ScanCounter | FixedFrameCounter
    t_first: float = 0.0
    t_last: float = 0.0
    disconnected: bool = False
    last_bytes: bytes = b""
    error: str | None = None

    def feed(self, buf, n: int) -> None:
        new_pings = self.counter.feed(buf, n)
        if new_pings:
            # Answer the server's keep-alive PINGs (about once per connection). The
            # socket's timeout is put back as it was: setblocking(True) would clear the
            # drain's 5 s and leave its next recv waiting for ever.
            timeout = self.sock.gettimeout()
            self.sock.settimeout(None)
            self.sock.sendall(PONG * new_pings)
            self.sock.settimeout(timeout)


def subscriber_worker(shared, ctl, port: int, conns: list[SubConn]) -> dict:
    """Hold one or more subscriber connections and count deliveries.

    Stops when the parent sets shared.stop (it has seen every group reach its
    expected count, or gave up).  Then each connection sends PING and reads up
    to the PONG: the server queues the PONG behind everything already pending
    for us, so duplicates or extra deliveries are counted too.
    """
    states = []
    for c in conns:
        sock = connect(port, timeout=60.0)
        rest = handshake(sock, c.sub_lines)
        counter = FixedFrameCounter(c.frame_size) if c.frame_size else ScanCounter()
        st = _SubState(c, sock, counter)
        if rest:
            st.feed(rest, len(rest))
        states.append(st)
    ctl.ready()
    cpu0 = cpu_now()
    sel = selectors.DefaultSelector()
    for st in states:
        st.sock.setblocking(False)
        sel.register(st.sock, selectors.EVENT_READ, st)
    buf = bytearray(RECV_BUF)
    recv = shared.recv
    live = len(states)
    while live and not shared.stop.value:
        # Short timeout only so that the stop flag is noticed.
        for key, _ in sel.select(0.05):
            st = key.data
            try:
                n = st.sock.recv_into(buf)
            except BlockingIOError:
                continue
            except OSError as e:
                n, st.error = 0, f"{type(e).__name__}: {e}"
            if n == 0:
                # Cut off (slow consumer?) or crashed server.  The server may
                # have said why in its last bytes.
                st.disconnected = True
                sel.unregister(st.sock)
                live -= 1
                shared.abort.value = 1
                continue
            t = now()
            if not st.t_first:
                st.t_first = t
            st.t_last = t
            st.feed(buf, n)
            recv[st.conn.slot] = st.counter.count
            # Tiny copy; only looked at if the connection dies.
            st.last_bytes = bytes(buf[max(0, n - 256) : n])
    sel.close()
    for st in states:
        if not st.disconnected:
            _drain_to_pong(st, buf)
        recv[st.conn.slot] = st.counter.count
    cpu1 = cpu_now()
    out = []
    for st in states:
        err = st.error
        if st.disconnected and b"-ERR" in st.last_bytes:
            err = st.last_bytes[st.last_bytes.index(b"-ERR") :].split(b"\r\n")[0].decode(errors="replace")
        c = st.counter
        out.append(dict(slot=st.conn.slot, count=c.count, bytes=c.nbytes,
                        t_first=st.t_first, t_last=st.t_last, disconnected=st.disconnected,
                        error=err, server_pings=c.pings,
                        # Bytes add up to whole frames (+ PINGs): no garbled,
                        # partial or foreign frames.
                        frames_ok=c.frames_ok()))
        st.sock.close()
    return dict(conns=out, cpu=cpu1 - cpu0)


# The drain's PONG is in the stream's last bytes: after it come at most a few server PINGs.
_DRAIN_TAIL = 4 * len(PING) + len(PONG)


def _drain_to_pong(st: _SubState, buf: bytearray) -> None:
    """PING, then count everything up to its PONG."""
    sock = st.sock
    sock.setblocking(True)
    sock.settimeout(5.0)
    end = b""
    try:
        sock.sendall(PING)
        while PONG not in end:
            n = sock.recv_into(buf)
            if n == 0:
                st.disconnected = True
                return
            before = st.counter.count
            st.feed(buf, n)
            # Only MSG frames (payload all 'x', ending in "x\r\n"), our PONG
            # and the server's keep-alive PINGs can arrive. The PONG comes
            # after every delivery, followed by nothing but such a PING: the
            # first one is due about 2 s after connect, about when a round
            # ends, so the PONG is looked for in the stream's last bytes (the
            # stream ending in PONG missed it once in ~60 rounds).
            end = (end + bytes(buf[max(0, n - _DRAIN_TAIL) : n]))[-_DRAIN_TAIL:]
            if st.counter.count != before:  # a lone PONG is not a delivery
                st.t_last = now()
        st.counter.nbytes -= len(PONG)
    except OSError as e:
        st.error = f"drain: {type(e).__name__}: {e}"


# --------------------------------------------------------------------------
# Request / reply


def responder_worker(shared, ctl, port: int, request_frame: bytes, reply_frame: bytes) -> dict:
    """Answer each request with a pre-encoded PUB to the reply subject.

    Requests are all identical, so a request is recognised by comparing
    fixed-size frames (and checked byte for byte) instead of being parsed.
    """
    sock = connect(port)
    handshake(sock, b"SUB bench.req 1\r\n")
    ctl.ready()
    cpu0 = cpu_now()
    sock.settimeout(0.05)
    size = len(request_frame)
    data = b""
    answered = 0
    bad = 0
    while not shared.stop.value:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        if not chunk:
            break
        data += chunk
        k = 0
        while True:
            if data.startswith(PING):  # the server's keep-alive, between frames
                sock.sendall(PONG)
                data = data[len(PING) :]
            elif len(data) >= size:
                if data[:size] != request_frame:
                    bad += 1
                data = data[size:]
                k += 1
            else:
                break
        if k:
            sock.sendall(reply_frame * k)
            answered += k
    cpu1 = cpu_now()
    sock.close()
    return dict(answered=answered, bad=bad, cpu=cpu1 - cpu0)


def requester_worker(shared, ctl, port: int, request_pub: bytes, expected_reply: bytes,
                     duration: float, max_requests: int, warmup: int) -> dict:
    """Sequential requests; records each round trip in nanoseconds."""
    sock = connect(port)
    handshake(sock, b"SUB _INBOX.bench 1\r\n")
    ctl.ready()
    shared.go.wait()
    sock.settimeout(5.0)
    size = len(expected_reply)
    lat: list[int] = []
    bad = 0
    error = None
    cpu0 = cpu_now()
    t0 = now()
    deadline = t0 + duration
    clock = time.perf_counter_ns
    try:
        for i in range(max_requests + warmup):
            a = clock()
            sock.sendall(request_pub)
            data = b""
            while len(data) < size:
                chunk = sock.recv(size - len(data))
                if not chunk:
                    raise ProtocolError("server closed the requester connection")
                data += chunk
                if data.startswith(PING):
                    # The server's keep-alive PING (nats-server sends one
                    # ~2 s after connect) arrives between replies: answer it.
                    sock.sendall(PONG)
                    data = data[len(PING) :]
            b = clock()
            if data != expected_reply:
                bad += 1
            if i >= warmup:
                lat.append(b - a)
                if now() >= deadline:
                    break
    except (OSError, ProtocolError) as e:
        error = f"{type(e).__name__}: {e}"
    t1 = now()
    cpu1 = cpu_now()
    sock.close()
    return dict(latencies_ns=lat, bad=bad, error=error, t_start=t0, t_end=t1, cpu=cpu1 - cpu0)


# --------------------------------------------------------------------------
# Idle connections


def idle_worker(shared, ctl, port: int, count: int, inflight: int, timeout: float) -> dict:
    """Open `count` connections (full INFO/CONNECT/PING/PONG handshake each),
    hold them, then on request check that every one still answers PING.

    Non-blocking sockets in one selector with at most `inflight` handshakes
    under way: many connects in parallel without overflowing the server's
    listen backlog (a dropped SYN costs a 1 s retransmit and ruins connects/s).
    """
    ctl.ready()
    shared.go.wait()
    cpu0 = cpu_now()
    t0 = now()
    deadline = t0 + timeout
    sel = selectors.DefaultSelector()
    addr = ("127.0.0.1", port)
    established: list[socket.socket] = []
    failures: dict[str, int] = {}
    opened = 0
    busy = 0

    def fail(sock: socket.socket | None, why: str) -> None:
        nonlocal busy
        failures[why] = failures.get(why, 0) + 1
        if sock is not None:
            try:
                sel.unregister(sock)
            except (KeyError, ValueError):
                pass
            _set_linger_zero(sock)
            sock.close()
            busy -= 1

    while len(established) + sum(failures.values()) < count and now() < deadline:
        while busy < inflight and opened < count:
            opened += 1
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            err = s.connect_ex(addr)
            if err not in (0, errno.EINPROGRESS):
                s.close()
                fail(None, errno.errorcode.get(err, str(err)))
                continue
            busy += 1
            # Wait for readability directly: INFO arrives once connected, and
            # a failed connect also wakes us (recv then raises).
            sel.register(s, selectors.EVENT_READ, [b"", False])
        for key, _ in sel.select(0.5):
            s, st = key.fileobj, key.data
            try:
                d = s.recv(65536)
            except OSError as e:
                fail(s, type(e).__name__)
                continue
            if not d:
                fail(s, "closed by server")
                continue
            st[0] += d
            if not st[1] and b"\r\n" in st[0]:
                line, st[0] = st[0].split(b"\r\n", 1)
                if not line.startswith(b"INFO "):
                    fail(s, "no INFO")
                    continue
                st[1] = True
                s.send(CONNECT + PING)  # tiny: always fits the empty send buffer
            if st[1] and PONG in st[0]:
                sel.unregister(s)
                busy -= 1
                established.append(s)
            elif b"-ERR" in st[0]:
                fail(s, st[0][st[0].index(b"-ERR") :].split(b"\r\n")[0].decode(errors="replace"))
    t1 = now()
    cpu1 = cpu_now()
    for key in list(sel.get_map().values()):
        fail(key.fileobj, "timeout")
    ctl.report(dict(established=len(established), failures=failures, t_start=t0, t_end=t1,
                cpu=cpu1 - cpu0))

    # Phase 2: after the parent measured RSS, check every connection is alive.
    shared.check.wait()
    cpu2 = cpu_now()
    for s in established:
        try:
            s.send(PING)
        except OSError:
            pass
        sel.register(s, selectors.EVENT_READ, [b""])
    answered = 0
    dead = 0
    deadline = now() + timeout
    pending = len(established)
    while pending and now() < deadline:
        for key, _ in sel.select(0.5):
            s, st = key.fileobj, key.data
            try:
                d = s.recv(4096)
            except OSError:
                d = b""
            if not d:
                dead += 1
                pending -= 1
                sel.unregister(s)
                continue
            st[0] += d
            if PONG in st[0]:
                answered += 1
                pending -= 1
                sel.unregister(s)
    cpu3 = cpu_now()
    ctl.report(dict(answered=answered, dead=dead, cpu=cpu3 - cpu2))
    # Hold until the parent is done, then close (before the server is stopped).
    shared.close.wait()
    sel.close()
    for s in established:
        _set_linger_zero(s)
        s.close()
    return {}
