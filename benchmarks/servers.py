"""Server process management.

Starts a server (natserver or the Go nats-server) as a subprocess on a free
loopback port, waits until it greets with ``INFO`` and answers a PING, reads its CPU time and RSS
from ``/proc`` (psutil is not available), and kills it again.

Every benchmark round starts a fresh server and stops it at the end, so no
round inherits memory, caches or connections from the previous one.
"""

from __future__ import annotations

import atexit
import os
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")

# Servers still running, so that an exception or Ctrl-C in the harness never
# leaves one behind (see _kill_leftovers).
_RUNNING: set["RunningServer"] = set()


class ServerStartError(RuntimeError):
    pass


def default_natserver_cmd() -> list[str]:
    # "python -m natserver", but with the interpreter that runs the harness:
    # a pyenv shim on PATH would add a bash script to every start-up and could
    # point at another Python.
    return [sys.executable, "-m", "natserver"]


# The reference release (issue #33): where the CI setup caches nats-server 2.15.1.
REFERENCE_NATS_SERVER = Path.home() / ".cache" / "natserver-ci" / "nats-server-2.15.1" / "bin" / "nats-server"


def default_nats_server_cmd() -> list[str] | None:
    """$NATS_SERVER_REFERENCE (as the tests use it), else the cached 2.15.1, else nats-server on PATH."""
    for path in (os.environ.get("NATS_SERVER_REFERENCE"), REFERENCE_NATS_SERVER):
        if path and os.access(path, os.X_OK):
            return [str(path)]
    path = shutil.which("nats-server")
    return [path] if path else None


def parse_cmd(text: str) -> list[str]:
    argv = shlex.split(text)
    if argv and argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    return argv


def raise_nofile_limit() -> tuple[int, int]:
    """Raise the soft fd limit to the hard limit; returns (soft, hard).

    Done once in the harness before anything is spawned: servers and load
    workers inherit it, and the idle-connection scenarios need >10 000 fds on
    both sides.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def free_port() -> int:
    # Ask the kernel for an unused port.  There is a small race (someone else
    # may grab it before the server binds); ServerSpec.start retries.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------
# /proc readers


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name (field 2) may contain spaces and parentheses:
        # split after the last ')'.
        fields = stat[stat.rindex(b")") + 2 :].split()
        kids.setdefault(int(fields[1]), []).append(int(name))
    return kids


def process_tree(pid: int) -> list[int]:
    """pid and all its descendants (a wrapper script's python child counts too)."""
    kids = _children_map()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, ()))
    return out


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc/<pid>/stat."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(b")") + 2 :].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])  # reported in kB (KiB)
    except OSError:
        pass
    return 0


def _served(sock: socket.socket, data: bytes) -> None:
    """Send CONNECT + PING on a greeted connection and read until the server answers: PONG,
    an -ERR (it wants credentials), or the close that follows one."""
    sock.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n')
    while b"PONG\r\n" not in data and b"-ERR" not in data and len(data) < 1 << 16:
        chunk = sock.recv(4096)
        if not chunk:
            return
        data += chunk


# --------------------------------------------------------------------------


@dataclass
class ServerSpec:
    label: str  # "natserver" or "nats-server"
    argv: list[str]

    @property
    def cmdline(self) -> str:
        return shlex.join(self.argv)

    def start(self, timeout: float = 20.0) -> "RunningServer":
        last_err = None
        for _attempt in range(3):  # retry: the free port may have been taken
            port = free_port()
            try:
                return RunningServer(self, port, timeout)
            except ServerStartError as e:
                last_err = e
                if "in use" not in str(e).lower():
                    raise
        raise last_err  # type: ignore[misc]


class RunningServer:
    def __init__(self, spec: ServerSpec, port: int, timeout: float):
        self.spec = spec
        self.port = port
        self._logdir = tempfile.mkdtemp(prefix="natbench-")
        self.log_path = Path(self._logdir) / "server.log"
        # Output goes to a file, not a pipe: nobody reads a pipe during the
        # run and a full pipe would block the server.
        self._log = open(self.log_path, "wb")
        self._final_log: str | None = None
        argv = [*spec.argv, "-a", "127.0.0.1", "-p", str(port)]
        self.proc = subprocess.Popen(
            argv,
            cwd=REPO_ROOT,  # so that "python -m natserver" finds the package
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            # Own process group: we can signal the server and any children it
            # has without touching anything else, and the terminal's Ctrl-C
            # reaches only the harness, which then cleans up.
            start_new_session=True,
        )
        self.pid = self.proc.pid
        _RUNNING.add(self)
        try:
            self.info_line = self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float) -> bytes:
        """Connect until the server greets us with a line starting 'INFO ' and then answers
        a CONNECT + PING (PONG, or -ERR / a close when it wants credentials or TLS).

        The INFO alone does not say the server runs: natserver's early greeter
        (natserver/server/early.py) sends it while trio and the server are still being
        imported (~0.45 s, ~0.2 s of CPU and ~18 MB of RSS after the INFO). A round that
        started measuring then charged all of that to its load: the idle scenarios' RSS per
        connection at 1000 read 24.8 KiB instead of ~7, and connects/s at 1000 waited for
        the start-up. Only the server proper reads what a client sends, so its answer is
        the sign; nats-server answers at once."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise ServerStartError(
                    f"{self.spec.label} exited with {self.proc.returncode} at start-up:\n"
                    + self.log_tail()
                )
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"{self.spec.label} not ready after {timeout:.0f}s:\n" + self.log_tail()
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                    data = b""
                    while b"\r\n" not in data and len(data) < 1 << 16:
                        chunk = s.recv(4096)
                        if not chunk:
                            break
                        data += chunk
                    if not data.startswith(b"INFO "):
                        raise ServerStartError(f"{self.spec.label}: first line is not INFO: {data[:200]!r}")
                    info, data = data.split(b"\r\n", 1)
                    if b'"tls_required":true' not in info:  # (a TLS server would want a handshake)
                        _served(s, data)
                    return info
            except (ConnectionRefusedError, socket.timeout, ConnectionResetError, BrokenPipeError):
                time.sleep(0.02)

    # ---- measurements (summed over the process tree)

    def pids(self) -> list[int]:
        return process_tree(self.pid)

    def cpu_seconds(self) -> float:
        return sum(proc_cpu_seconds(p) for p in self.pids())

    def rss_kib(self) -> int:
        return sum(proc_rss_kib(p) for p in self.pids())

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_text(self) -> str:
        if self._final_log is not None:  # already stopped, log dir removed
            return self._final_log
        try:
            self._log.flush()
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n: int = 15) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    # ---- shutdown

    def stop(self) -> None:
        if self in _RUNNING:
            _RUNNING.discard(self)
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(3)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.proc.wait(3)
        # A wrapper might leave children behind in the group: kill them too.
        self._signal(signal.SIGKILL)
        if self._final_log is None:
            self._final_log = self.log_text()
            self._log.close()
            shutil.rmtree(self._logdir, ignore_errors=True)

    def _signal(self, sig: int) -> None:
        try:
            # The group id is the server's pid (start_new_session=True).
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def __enter__(self) -> "RunningServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


@atexit.register
def _kill_leftovers() -> None:
    for srv in list(_RUNNING):
        srv.stop()
