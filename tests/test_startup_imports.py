"""What the plain ``natserver -p PORT`` start imports before its first client has the INFO
(issue #33: exec to INFO within 100 ms; the early greeting sends it before trio is imported)
and before the server answers it. Operator mode, the HTTP monitor, the config file
mapping and the subsystems that options turn on are imported where they are used
(``cryptography`` too: the server's xkey is derived by natserver.auth.x25519); these tests fail if one of them creeps back into the plain start path. They read
``sys.modules``, never the clock: ``benchmarks/bench_startup.py --cli`` measures the time."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from natserver.auth import nkeys

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 60.0  # the whole child process, on a loaded 2-core machine

# Run in a child: the command's own entry point (natserver.launch.main) on the given command
# line, a thread that connects, reads the INFO, writes sys.modules as they are then and stops
# the server with SIGTERM, as a user's first client would see it.
_CHILD = textwrap.dedent(
    """
    import os, signal, socket, sys, threading, time

    # The first import of trio waits (up to 10 s) for the client to have its INFO, and says
    # whether it had: True only if something sent the INFO before trio was imported.
    got_info = threading.Event()

    class TrioGate:
        def find_spec(self, name, path=None, target=None):
            if name == "trio":
                sys.meta_path.remove(self)
                # (a config file: no greeting to wait for)
                print("@info_before_trio", got_info.wait(10 if sys.argv[1] == "-" else 0), flush=True)
            return None

    sys.meta_path.insert(0, TrioGate())
    from natserver.launch import main

    def free_port():
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    port = free_port()
    argv = [arg.replace("PORT", str(port)) for arg in sys.argv[2:]]
    if sys.argv[1] != "-":
        with open(sys.argv[1], "w") as f:
            f.write(f"port: {port}\\n")

    def first_client():
        deadline = time.monotonic() + 30
        while True:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=10)
                break
            except OSError:
                if time.monotonic() > deadline:
                    os._exit(3)
                time.sleep(0.01)
        data = b""
        while b"\\r\\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                os._exit(4)
            data += chunk
        if not data.startswith(b"INFO "):
            os._exit(5)
        got_info.set()
        # Then everything imported once the server itself answers.
        sock.sendall(b"CONNECT {}\\r\\nPING\\r\\n")
        while b"PONG\\r\\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                os._exit(6)
            data += chunk
        print("\\n".join(sorted(sys.modules)), flush=True)
        # Work that is not an import: glibc's malloc_trim looked up (ldconfig runs) or not.
        reclaim = sys.modules.get("natserver.server.reclaim")
        if reclaim is not None:
            print("@malloc_trim_lookups", reclaim.load_malloc_trim.cache_info().misses, flush=True)
        # launch.py stops the collector for the imports; the running server collects again.
        import gc
        print("@gc_enabled", gc.isenabled(), flush=True)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=first_client, daemon=True).start()
    sys.exit(main(argv))
    """
)

# Modules the plain start must not load; each is imported when an option asks for it.
NOT_ON_PLAIN_START = (
    "natserver.auth.jwt",  # operator mode (operator = ... in a config file)
    "natserver.config.mapping",  # a config file (-c)
    "natserver.config.conf",  # a config file (-c), a size flag (--max_payload 1MB)
    "natserver.config.stan",  # NATS Streaming flags (--stan, -cid ...)
    "natserver.jetstream",  # -js
    "natserver.stan",
    "natserver.nsq",
    "natserver.websocket",
    "natserver.cluster",  # -routes, --cluster, leaf nodes
    "h11",  # the HTTP monitor (-m)
    "email.utils",  # the HTTP monitor's Date header
    "bcrypt",  # bcrypt passwords
    "fractions",  # Go duration strings (-ping_interval 2m, config files)
    "cryptography",  # signatures, TLS keys, encryption: the xkey is natserver.auth.x25519's (~22 ms)
)


def modules_at_first_info(*argv: str, config: Path | None = None) -> set[str]:
    """sys.modules of ``natserver *argv`` (PORT: a free port) when a client has had its INFO
    and its first PONG, with ``@name value`` lines for the other things the child reports
    (``@info_before_trio``: whether the INFO came before trio was imported)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(config) if config else "-", *argv],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=REPO,
        env=env,
    )
    # SIGTERM: nats-server's exit code 1; anything else is a failed start.
    assert result.returncode == 1, result.stderr
    assert "Server is ready" in result.stderr
    return set(result.stdout.splitlines())


def test_plain_start_imports_only_the_core():
    loaded = modules_at_first_info("-a", "127.0.0.1", "-p", "PORT")
    # The first client's INFO came before trio was imported (the greeting, server/early.py).
    assert "@info_before_trio True" in loaded
    # It ran: the server, its client code and the system account (on by default) are there.
    assert {"natserver.server.server", "natserver.server.client", "natserver.system", "trio"} <= loaded
    crept_in = sorted(name for name in NOT_ON_PLAIN_START if name in loaded)
    assert crept_in == []
    # ctypes.util.find_library("c") runs ldconfig: done when the first reclaim needs it.
    assert "@malloc_trim_lookups 0" in loaded
    assert "@gc_enabled True" in loaded


def test_a_config_file_still_imports_what_it_needs(tmp_path):
    # The control: the same probe sees the lazy imports happen once the options ask for them.
    loaded = modules_at_first_info("-c", str(tmp_path / "server.conf"), "-a", "127.0.0.1", config=tmp_path / "server.conf")
    assert {"natserver.config.mapping", "natserver.config.conf"} <= loaded
    assert "@info_before_trio False" in loaded  # no greeting: the file may say anything


def test_create_curve_keys():
    public, private = nkeys.create_curve_keys()
    prefix, raw = nkeys.decode_public_key(public)
    assert public.startswith("X") and len(public) == 56
    assert prefix == nkeys.PREFIX_CURVE
    assert raw == X25519PrivateKey.from_private_bytes(private).public_key().public_bytes_raw()


# What a JetStream start (-js) must not load before it serves: encryption at rest (only with a
# key or an encrypted stream: cryptography's ciphers and the config file's mapping, ~20 ms),
# issue #34's restart in <= 0.5 s.
NOT_ON_JETSTREAM_START = (
    "natserver.jetstream.crypto",
    "cryptography.hazmat.primitives.ciphers.aead",
    "cryptography.hazmat.primitives.kdf.hkdf",
    "natserver.config.mapping",
    "natserver.auth.jwt",
)


def test_a_jetstream_start_imports_no_encryption(tmp_path):
    loaded = modules_at_first_info("-js", "-sd", str(tmp_path), "-a", "127.0.0.1", "-p", "PORT")
    assert {"natserver.jetstream", "natserver.jetstream.store"} <= loaded
    assert sorted(name for name in NOT_ON_JETSTREAM_START if name in loaded) == []
