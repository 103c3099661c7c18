"""A full disk (ENOSPC) or a failing disk (EIO) under the JetStream file store: no
acknowledged message is lost, nothing half-written is served, publishing works again once
space is freed.

* Every write, fsync and file creation the store makes is failed in turn (the k-th call of a
  clean run), once (a transient EIO) or from then on (a full disk), with sync "always" and
  without; after each, the store is dropped as ``kill -9`` would (no flush), reopened, and
  every acknowledged message must be there, whole.
* A server (in a thread, nats-py publishing) over a disk whose quota runs out: the publishes
  that can not be written get no answer, as from nats-server 2.15.1; no traceback is logged;
  after a purge publishing works; after a restart every acknowledged message is there.
* The same on a real 1 MiB tmpfs with natserver and nats-server 2.15.1 in subprocesses
  (skipped where mounting is not permitted).
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import socket
import subprocess
import sys
import time

import nats
import pytest

from natserver.jetstream.store import WRITE_FAILING, FileStore, StoreError, StoreWriteError
from natserver.jetstream.stream import StreamConfig, check_stream_config

TIMEOUT = 30  # hard limit for each asyncio test body (seconds)
NATS_SERVER_2_15 = "/opt/nats-server-2.15.1/nats-server"


def config(**changes) -> StreamConfig:
    changes.setdefault("name", "S")
    return check_stream_config(StreamConfig(**changes), {})


def body(i: int) -> bytes:
    """Publish attempt i's data: its number, then bytes that depend on it."""
    return b"%06d:" % i + bytes((i + k) % 251 for k in range(i % 40))


def attempt_of(data: bytes) -> int:
    """The attempt a stored message came from; fails unless the data is exactly body(i)."""
    i = int(data[:6])
    assert data == body(i), f"message {i} is not whole: {data!r}"
    return i


class Faults:
    """Wraps os.pwrite, os.fsync and os.open (creating) so that the ``fail_at``-th call of
    any of them raises; ``persist`` keeps every later call failing (a full disk) until
    ``clear()``."""

    def __init__(self, monkeypatch, code: int = errno.ENOSPC) -> None:
        self.calls = 0
        self.fail_at = 0  # 0: never
        self.persist = False
        self.failing = False
        self.code = code
        real_pwrite, real_fsync, real_open = os.pwrite, os.fsync, os.open

        def pwrite(fd, data, offset):
            self._point()
            return real_pwrite(fd, data, offset)

        def fsync(fd):
            self._point()
            return real_fsync(fd)

        def open_(path, flags, mode=0o777, **kwargs):
            if flags & os.O_CREAT:
                self._point()
            return real_open(path, flags, mode, **kwargs)

        monkeypatch.setattr(os, "pwrite", pwrite)
        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "open", open_)

    def _point(self) -> None:
        self.calls += 1
        if self.failing or self.calls == self.fail_at:
            self.failing = self.persist
            raise OSError(self.code, os.strerror(self.code))

    def clear(self) -> None:
        self.failing = False
        self.fail_at = 0


def crash(store: FileStore) -> None:
    """What kill -9 leaves: what reached the OS, nothing of the store's buffer."""
    store.closed = True
    for fd in store.fds.values():
        os.close(fd)
    store.fds.clear()


def run_workload(store: FileStore, sync_always: bool, attempts: int = 60):
    """Publish ``attempts`` messages, writing (and fsyncing) every third one as the engine's
    flusher does and acknowledging them only then; delete one now and then. Returns
    ({seq: attempt} acknowledged, deleted sequences confirmed)."""
    acked: dict[int, int] = {}
    deleted: set[int] = set()
    pending: dict[int, int] = {}
    for i in range(attempts):
        try:
            seq = store.store_msg(b"s.%d" % (i % 3), b"", body(i), 1_000 + i)
        except StoreWriteError:
            continue  # no answer: the publisher retries
        pending[seq] = i
        if i % 3 == 2:
            try:
                store.flush()
                if sync_always:
                    store.sync_now()
            except OSError:
                pending.clear()  # acks dropped, as the engine drops them
                continue
            if store.werr is None:
                acked.update(pending)
            pending.clear()
        if i % 11 == 10 and acked:
            victim = min(acked)
            acked.pop(victim)  # (a delete that fails to be written may still happen later)
            try:
                store.remove_msg(victim)
                store.flush()  # the API persists before it answers
                if sync_always:
                    store.sync_now()
            except (StoreError, OSError):
                continue
            deleted.add(victim)
    return acked, deleted


def check_recovered(path, acked: dict[int, int], deleted: set[int]) -> FileStore:
    store = FileStore(str(path), config(), segment_size=400)
    for seq, i in acked.items():
        msg = store.load_msg(seq)
        assert msg is not None, f"acknowledged message {seq} lost"
        assert attempt_of(msg.data) == i
    for seq in deleted:
        assert store.load_msg(seq) is None, f"deleted message {seq} came back"
    for seq in range(store.first_seq, store.last_seq + 1):
        msg = store.load_msg(seq)
        if msg is not None:
            attempt_of(msg.data)  # unacknowledged ones may be there, but whole
    return store


def count_points(tmp_path, monkeypatch, sync_always: bool) -> int:
    faults = Faults(monkeypatch)
    store = FileStore(str(tmp_path / "count"), config(), segment_size=400, sync_always=sync_always)
    run_workload(store, sync_always)
    crash(store)
    return faults.calls


@pytest.mark.parametrize("sync_always", [False, True], ids=["sync-interval", "sync-always"])
@pytest.mark.parametrize("persist", [True, False], ids=["disk-full", "transient-eio"])
def test_failure_at_every_write_point_loses_no_acked_message(tmp_path, monkeypatch, sync_always, persist):
    points = count_points(tmp_path, monkeypatch, sync_always)
    assert points > 30  # writes, fsyncs and segment creations (several segment rolls)
    for k in range(1, points + 1):
        faults = Faults(monkeypatch, errno.ENOSPC if persist else errno.EIO)
        faults.fail_at, faults.persist = k, persist
        path = tmp_path / f"k{k}"
        store = FileStore(str(path), config(), segment_size=400, sync_always=sync_always)
        acked, deleted = run_workload(store, sync_always)
        assert faults.calls >= k
        # Space is freed: the store writes again (what it still held included).
        faults.clear()
        seq = store.store_msg(b"after", b"", body(999), 5_000)
        store.flush()
        if sync_always:
            store.sync_now()
        assert store.werr is None
        acked[seq] = 999
        crash(store)
        check_recovered(path, acked, deleted).stop()


def test_full_disk_then_crash_before_space_is_freed(tmp_path, monkeypatch):
    """kill -9 while the disk is still full: every acknowledged message is recovered (and a
    restart on the still full disk serves them)."""
    faults = Faults(monkeypatch)
    for k in (5, 12, 20):
        path = tmp_path / f"k{k}"
        faults.calls, faults.fail_at, faults.persist, faults.failing = 0, k, True, False
        store = FileStore(str(path), config(), segment_size=400)
        acked, deleted = run_workload(store, False)
        assert acked and store.werr is not None
        crash(store)
        reopened = check_recovered(path, acked, deleted)  # the disk is still full
        with pytest.raises((StoreWriteError, OSError)):
            reopened.store_msg(b"s", b"", body(1000), 9_000)
            reopened.flush()
        faults.clear()
        seq = reopened.store_msg(b"s", b"", body(1000), 9_000)
        reopened.flush()
        assert reopened.werr is None and reopened.load_msg(seq).data == body(1000)
        reopened.stop()
        faults.calls = 0


def test_purge_frees_a_full_disk(tmp_path, monkeypatch):
    """A purge on a full disk: the old segments go first, then the new STATE record is
    written; publishing works again and the sequence goes on."""
    faults = Faults(monkeypatch)
    store = FileStore(str(tmp_path / "p"), config(), segment_size=400)
    for i in range(30):
        store.store_msg(b"s", b"", body(i), 1_000 + i)
    store.flush()
    last = store.last_seq
    faults.fail_at, faults.persist = faults.calls + 1, True
    with pytest.raises(StoreWriteError):
        store.store_msg(b"s", b"", b"x" * 500, 2_000)  # a roll that can not write
    assert store.werr is not None
    assert store in WRITE_FAILING  # (the flusher looks at each ack's store while any is failing)

    # The disk frees up only when the segments are deleted.
    real_unlink = os.unlink

    def unlink(path, *args, **kwargs):
        faults.clear()
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    assert store.purge() == 30
    assert store.werr is None and store not in WRITE_FAILING
    assert store.store_msg(b"s", b"", body(50), 3_000) == last + 1
    store.flush()
    crash(store)
    again = FileStore(str(tmp_path / "p"), config(), segment_size=400)
    assert (again.msgs, again.first_seq, again.last_seq) == (1, last + 1, last + 1)
    again.stop()


# -- a server over a disk that fills up ------------------------------------------------------


class Quota:
    """os.pwrite fails with ENOSPC once the store has written ``limit`` bytes (a disk that
    fills up); deleting a file lifts it (a purge deletes the segments)."""

    def __init__(self, monkeypatch, limit: int) -> None:
        self.written = 0
        self.limit = limit
        real_pwrite, real_unlink = os.pwrite, os.unlink

        def pwrite(fd, data, offset):
            if self.written + len(data) > self.limit:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.written += len(data)
            return real_pwrite(fd, data, offset)

        def unlink(path, *args, **kwargs):
            self.limit = 1 << 62
            return real_unlink(path, *args, **kwargs)

        monkeypatch.setattr(os, "pwrite", pwrite)
        monkeypatch.setattr(os, "unlink", unlink)


def test_server_over_a_filling_disk(threaded_server, tmp_path, monkeypatch, caplog):
    quota = Quota(monkeypatch, 40_000)
    caplog.set_level(logging.INFO, logger="natserver")
    store_dir = tmp_path / "js"

    async def publish_until_full(url: str) -> tuple[dict[int, int], int]:
        nc = await nats.connect(url, allow_reconnect=False)
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["s.>"], storage="file")
        acked: dict[int, int] = {}
        silent = 0
        for i in range(400):
            try:
                reply = await nc.request("s.%d" % (i % 5), body(i) + b"x" * 200, timeout=0.5)
            except nats.errors.TimeoutError:
                silent += 1  # no answer, as nats-server 2.15.1
                if silent >= 3:
                    break
                continue
            ack = json.loads(reply.data)
            assert "error" not in ack, ack  # a write failure is never answered with an ack or error
            acked[ack["seq"]] = i
        # Reads still work on the full disk.
        first = await js.get_msg("S", min(acked))
        assert first.data == body(acked[min(acked)]) + b"x" * 200
        await nc.close()
        return acked, silent

    handle = threaded_server(jetstream=True, store_dir=str(store_dir))
    acked, silent = asyncio.run(asyncio.wait_for(publish_until_full(handle.url), TIMEOUT))
    assert silent == 3 and 100 < len(acked) < 400
    handle.stop()  # its final flush fails too: the store is closed all the same
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert any("critical write error" in r.getMessage() for r in caplog.records)

    async def check_and_purge(url: str) -> None:
        nc = await nats.connect(url, allow_reconnect=False)
        js = nc.jetstream()
        for seq, i in acked.items():
            msg = await js.get_msg("S", seq)
            assert msg.data == body(i) + b"x" * 200
        # Still full: no answer; a purge frees the space and publishing works again.
        with pytest.raises(nats.errors.TimeoutError):
            await nc.request("s.x", b"y" * 200, timeout=0.5)
        assert await js.purge_stream("S")
        ack = await js.publish("s.x", body(7))
        assert ack.seq > max(acked)
        await nc.close()

    quota.limit = 0  # restart on the still full disk
    handle = threaded_server(jetstream=True, store_dir=str(store_dir))
    asyncio.run(asyncio.wait_for(check_and_purge(handle.url), TIMEOUT))
    handle.stop()
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


# -- a real tiny file system -----------------------------------------------------------------


@pytest.fixture
def tiny_fs(tmp_path):
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)],
                              capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        pytest.skip("mount is not available")
    if done.returncode:
        pytest.skip("mounting a tmpfs is not permitted here")
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, timeout=10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(binary: list[str], store_dir, log_path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    conf = log_path.with_suffix(".conf")
    # max_file_store above the disk's size, so that the disk, not the limit, runs out
    conf.write_text(f'listen: "127.0.0.1:{port}"\njetstream {{ store_dir: "{store_dir}", max_file_store: 1G }}\n')
    proc = subprocess.Popen([*binary, "-c", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=open(log_path, "ab"), start_new_session=True)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"nats://127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(log_path.read_text(errors="replace")) from None
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("server did not start")


async def fill(url: str) -> tuple[dict[int, int], list[str]]:
    """Publish 1000-byte messages until three get no answer: (acked, answers in order)."""
    nc = await nats.connect(url, allow_reconnect=False)
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s.>"], storage="file")
    acked: dict[int, int] = {}
    answers: list[str] = []
    for i in range(3000):
        try:
            reply = await nc.request("s.%d" % (i % 5), body(i).ljust(1000, b"."), timeout=1)
        except nats.errors.TimeoutError:
            answers.append("none")
            if answers.count("none") >= 3:
                break
            continue
        ack = json.loads(reply.data)
        answers.append("ack" if "error" not in ack else json.dumps(ack["error"]))
        if "error" not in ack:
            acked[ack["seq"]] = i
    await nc.close()
    return acked, answers


def collapse(answers: list[str]) -> list[str]:
    return [a for k, a in enumerate(answers) if k == 0 or answers[k - 1] != a]


@pytest.mark.parametrize("kind", ["natserver", "nats-server-2.15.1"])
def test_real_full_tmpfs(tiny_fs, tmp_path, kind):
    if kind == "natserver":
        binary = [sys.executable, "-m", "natserver"]
    else:
        if not os.path.exists(NATS_SERVER_2_15):
            pytest.skip("nats-server 2.15.1 not installed")
        binary = [NATS_SERVER_2_15]
    log_path = tmp_path / f"{kind}.log"
    proc, url = start_server(binary, tiny_fs, log_path)
    try:
        acked, answers = asyncio.run(asyncio.wait_for(fill(url), TIMEOUT))
    finally:
        proc.kill()
        proc.wait(10)
    # Both: acks until the disk is full, then no answer at all.
    assert collapse(answers) == ["ack", "none"]
    assert len(acked) > 500
    if kind != "natserver":
        return  # nats-server 2.15.1 keeps the stream unwritable until it restarts

    assert "Traceback" not in log_path.read_text(errors="replace")
    proc, url = start_server(binary, tiny_fs, log_path)  # after kill -9, on the full disk

    async def check(url: str) -> None:
        nc = await nats.connect(url, allow_reconnect=False)
        js = nc.jetstream()
        for seq, i in acked.items():
            msg = await js.get_msg("S", seq)
            assert msg.data == body(i).ljust(1000, b".")
        await js.purge_stream("S")
        ack = await js.publish("s.x", body(1))
        assert ack.seq > max(acked)
        await nc.close()

    try:
        asyncio.run(asyncio.wait_for(check(url), TIMEOUT))
    finally:
        proc.kill()
        proc.wait(10)
    assert "Traceback" not in log_path.read_text(errors="replace")


def test_sync_always_sends_no_ack_for_a_failed_fsync(threaded_server, tmp_path, monkeypatch, caplog):
    """With sync "always", an ack waits for the fsync: while fsync fails (EIO), publishes
    get no answer; once it works, they are acknowledged again and a restart has them."""
    failing = {"on": False}
    real_fsync = os.fsync

    def fsync(fd):
        if failing["on"]:
            raise OSError(errno.EIO, "Input/output error")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    store_dir = tmp_path / "js"

    async def main(url: str) -> dict[int, int]:
        nc = await nats.connect(url, allow_reconnect=False)
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["s.>"], storage="file")
        acked = {}
        for i in range(5):
            acked[(await js.publish("s.a", body(i))).seq] = i
        failing["on"] = True
        for i in range(5, 8):
            with pytest.raises(nats.errors.TimeoutError):
                await nc.request("s.a", body(i), timeout=0.5)
        failing["on"] = False
        ack = await js.publish("s.a", body(8))
        acked[ack.seq] = 8
        await nc.close()
        return acked

    handle = threaded_server(jetstream=True, store_dir=str(store_dir), extra={"jetstream": {"sync_interval": "always"}})
    acked = asyncio.run(asyncio.wait_for(main(handle.url), TIMEOUT))
    handle.stop()
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"

    async def check(url: str) -> None:
        nc = await nats.connect(url, allow_reconnect=False)
        js = nc.jetstream()
        for seq, i in acked.items():
            assert (await js.get_msg("S", seq)).data == body(i)
        await nc.close()

    handle = threaded_server(jetstream=True, store_dir=str(store_dir))
    asyncio.run(asyncio.wait_for(check(handle.url), TIMEOUT))
    handle.stop()
