"""Start a JetStream server as a subprocess: natserver (``python -m natserver -js``) or the
nats-server binary. For the tests, the benchmark and the example pipeline.

``NATS_SPARK_SERVER`` chooses: ``natserver`` (default), ``nats-server``, or a command line
(``"/opt/nats-server"``); the store directory, ``-a 127.0.0.1 -p -1`` and ``-js -sd DIR`` are
appended.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time

_LISTEN = re.compile(rb"Listening for client connections on [^\s]*?:(\d+)")


def server_command(kind: str | None = None) -> list[str]:
    kind = kind or os.environ.get("NATS_SPARK_SERVER") or "natserver"
    if kind == "natserver":
        return [sys.executable, "-m", "natserver"]
    if kind == "nats-server":
        path = shutil.which("nats-server")
        if not path:
            raise FileNotFoundError("nats-server is not on PATH")
        return [path]
    return shlex.split(kind)


class JetStreamServer:
    """``with JetStreamServer() as s: s.url`` -- a fresh server on a fresh store directory,
    killed (and the directory removed) at the end."""

    def __init__(self, kind: str | None = None, *, store_dir: str | None = None, start_timeout: float = 30.0,
                 extra_args: list[str] | None = None, jetstream: bool = True) -> None:
        self.kind = kind or os.environ.get("NATS_SPARK_SERVER") or "natserver"
        self.cmd = server_command(self.kind)
        self._own_dir = store_dir is None
        self.store_dir = store_dir or tempfile.mkdtemp(prefix="nats-spark-")
        self.extra_args = extra_args or []
        self.jetstream = jetstream
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.output = bytearray()

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> "JetStreamServer":
        js = ["-js", "-sd", self.store_dir] if self.jetstream else []
        cmd = [*self.cmd, *js, "-a", "127.0.0.1", "-p", str(self.port or -1), *self.extra_args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        found = threading.Event()
        port: list[int] = []

        def pump() -> None:  # keep reading so the server never blocks on a full pipe
            assert self.proc is not None and self.proc.stdout is not None
            for line in iter(self.proc.stdout.readline, b""):
                if len(self.output) < 1 << 20:
                    self.output += line
                m = _LISTEN.search(line)
                if m and not port:
                    port.append(int(m.group(1)))
                if b"Server is ready" in line:
                    found.set()
            found.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + self.start_timeout
        while not found.wait(0.05):
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{' '.join(cmd)}: not ready within {self.start_timeout:g} s")
        if not port or self.proc.poll() is not None:
            out = bytes(self.output[-2000:]).decode("utf-8", "replace")
            self.stop()
            raise RuntimeError(f"{' '.join(cmd)} did not start:\n{out}")
        self.port = port[0]
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def restart(self) -> None:
        """Stop and start again on the same port and store."""
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.store_dir, ignore_errors=True)

    def __enter__(self) -> "JetStreamServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
