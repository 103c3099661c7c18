"""The nats.go load generator (benchmarks/go/natsgo_bench.go): built on demand, run per round.

nats.go is a client nobody on this project wrote; driving request/reply with its ``Request()``
(muxed ``_INBOX.<id>.*`` subscription, PUB with a reply, ``m.Respond()`` in a Subscribe callback)
measures what a user's service sees, where the raw wire driver (wire.py) measures the server
alone. The driver is our code and lives in the repository; nats.go itself is never committed:
it comes from Debian's ``golang-github-nats-io-go-nats-dev`` (GOPATH ``/usr/share/gocode``) and
the binary is built, offline, into a cache directory keyed by the driver's source.

    apt-get install -y golang-go golang-github-nats-io-go-nats-dev
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "go" / "natsgo_bench.go"
# Where Debian's golang-*-dev packages put Go sources (GOPATH layout); NATSGO_GOPATH overrides.
DEBIAN_GOPATH = "/usr/share/gocode"
NATSGO_PACKAGE = "src/github.com/nats-io/nats.go"
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "natserver-bench" / "go"
BUILD_TIMEOUT = 300.0  # seconds: a cold build compiles nats.go, nkeys and x/crypto

_built: tuple[Path | None, str] | None = None  # (binary, reason it is missing): built once per run


def driver() -> tuple[Path | None, str]:
    """The driver binary, building it the first time; or (None, why it cannot be had)."""
    global _built
    if _built is None:
        _built = _build()
    return _built


def missing() -> str | None:
    """Why the nats.go scenarios cannot run (a message for the user), or None."""
    return driver()[1] or None


def _build() -> tuple[Path | None, str]:
    go = shutil.which("go")
    gopath = os.environ.get("NATSGO_GOPATH", DEBIAN_GOPATH)
    hint = "apt-get install -y golang-go golang-github-nats-io-go-nats-dev"
    if go is None:
        return None, f"no Go toolchain on PATH ({hint})"
    if not (Path(gopath) / NATSGO_PACKAGE).is_dir():
        return None, f"nats.go not found under {gopath}/{NATSGO_PACKAGE} ({hint}, or set NATSGO_GOPATH)"
    digest = hashlib.sha256(SOURCE.read_bytes() + gopath.encode()).hexdigest()[:16]
    binary = CACHE_DIR / digest / "natsgo_bench"
    if binary.exists():
        return binary, ""
    binary.parent.mkdir(parents=True, exist_ok=True)
    # GOPATH mode, offline: the module proxy is neither needed nor reachable.
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": gopath, "GOPROXY": "off", "GOFLAGS": ""}
    try:
        proc = subprocess.run([go, "build", "-o", str(binary), SOURCE.name], cwd=SOURCE.parent, env=env,
                              capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        return None, f"building {SOURCE.name} took over {BUILD_TIMEOUT:g} s"
    if proc.returncode != 0:
        return None, f"building {SOURCE.name} failed: {proc.stderr.strip()[:500]}"
    return binary, ""


def run(port: int, args: list[str], timeout: float) -> tuple[dict, float]:
    """Run the driver against 127.0.0.1:port; returns its JSON report and its CPU seconds."""
    binary, why = driver()
    if binary is None:
        raise RuntimeError(why)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([str(binary), "-url", f"nats://127.0.0.1:{port}", *args],
                          capture_output=True, text=True, timeout=timeout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise RuntimeError(f"natsgo_bench exited with {proc.returncode}: {proc.stderr.strip()[:500]}")
    return json.loads(proc.stdout), cpu


def run_marked(port: int, args: list[str], timeout: float, on_mark) -> dict:
    """Run the driver as ``run`` does, calling ``on_mark()`` when it prints "MARK" (its timed
    part starts: the JetStream modes set up streams and store messages first); its report."""
    binary, why = driver()
    if binary is None:
        raise RuntimeError(why)
    with subprocess.Popen([str(binary), "-url", f"nats://127.0.0.1:{port}", *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        report = ""
        for line in proc.stdout:
            if line.strip() == "MARK":
                on_mark()
            else:
                report += line
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        if proc.returncode != 0:
            raise RuntimeError(f"natsgo_bench exited with {proc.returncode}: {proc.stderr.read().strip()[:500]}")
    return json.loads(report)
