"""The differential tests' recordings: a script run against natserver must give what was
recorded from nats-server (2.9.10, or the 2.15.1 reference where a test says so; kept under
data/, so the suite needs no nats-server), and a live nats-server, when installed, must still
give the recording."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from tests.jetstream.legacy_reference import HAVE_NATS_SERVER, NATS_SERVER, running


def assert_natserver_matches(run_script, config: str, recorded: Path, tmp_path: Path) -> None:
    """``run_script(port)`` against natserver with ``config`` (``%s``: a store directory)
    gives the recording, entry by entry (the first that differs is named)."""
    with running("natserver", config % (tmp_path / "store"), tmp_path) as port:
        assert_recorded(run_script(port), recorded)


def assert_nats_server_matches(run_script, config: str, recorded: Path, tmp_path: Path,
                               binary: str = NATS_SERVER) -> None:
    """The live nats-server (``binary``: 2.9.10 unless a test names the 2.15.1 reference,
    tests/reference.py) still gives the recording."""
    with running("nats-server", config % (tmp_path / "store"), tmp_path, binary=binary) as port:
        assert_recorded(run_script(port), recorded)


def assert_recorded(got: dict, recorded: Path) -> None:
    """``got`` is the recording, entry by entry (the first that differs is named): for a
    script that runs the server itself (test_message_ttl.py moves an in-process server's
    clock)."""
    expected = json.loads(recorded.read_text())
    assert list(got) == list(expected)
    for name in expected:
        assert got[name] == expected[name], name


def record(run_script, config: str, recorded: Path, binary: str | None = NATS_SERVER) -> None:
    """Write the recording again from the installed nats-server (``python -m tests...``)."""
    assert binary and (HAVE_NATS_SERVER or binary != NATS_SERVER), f"{binary or 'nats-server'} is not installed"
    with tempfile.TemporaryDirectory() as folder, \
            running("nats-server", config % folder, Path(folder), binary=binary) as port:
        recorded.write_text(json.dumps(run_script(port), indent=1) + "\n")
    print(f"wrote {recorded}")
