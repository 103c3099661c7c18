"""Issue 18 item 11: the in-process API only logs (no handler on the "natserver" logger, its
propagation left on), so an application's logging and pytest's caplog see its records; the
CLI keeps configuring logging as nats-server prints it."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import trio

import natserver
from natserver.protocol.parser import PARSER_IMPLEMENTATION
from natserver.server.client import DELIVERY_IMPLEMENTATION
from natserver.testing import NatsServer
from tests.conftest import make_options


def _natserver_handlers() -> list:
    return [h for h in logging.getLogger("natserver").handlers if getattr(h, "_natserver", False)]


async def test_in_process_server_logs_through_propagation(nursery, caplog):
    caplog.set_level(logging.INFO, logger="natserver")
    with trio.fail_after(10):
        server = await nursery.start(natserver.serve, make_options())
        await server.shutdown()
    logger = logging.getLogger("natserver")
    assert logger.propagate is True
    assert _natserver_handlers() == []
    messages = [r.getMessage() for r in caplog.records if r.name == "natserver"]
    assert "Server is ready" in messages
    assert any(m.startswith("Listening for client connections on 127.0.0.1:") for m in messages)


def test_testing_double_logs_to_caplog_and_debug_makes_debug_records(caplog):
    caplog.set_level(logging.INFO, logger="natserver")
    with NatsServer(debug=True):
        pass
    assert logging.getLogger("natserver").propagate is True
    assert _natserver_handlers() == []
    assert any(r.getMessage() == "Server is ready" for r in caplog.records)


def test_in_process_log_file_is_the_one_handler_it_adds(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="natserver")
    path = tmp_path / "natserver.log"
    try:
        with NatsServer(log_file=str(path)):
            pass
        assert logging.getLogger("natserver").propagate is True
        assert "[INF] Server is ready" in path.read_text()
        assert any(r.getMessage() == "Server is ready" for r in caplog.records)
    finally:
        for handler in _natserver_handlers():
            logging.getLogger("natserver").removeHandler(handler)
            handler.close()


def _cli_startup_lines(**env_extra: str) -> list[str]:
    """What ``natserver -a 127.0.0.1 -p -1`` writes to stderr up to "Server is ready"."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), **env_extra)
    proc = subprocess.Popen([sys.executable, "-m", "natserver", "-a", "127.0.0.1", "-p", "-1"],
                            stderr=subprocess.PIPE, env=env)
    try:
        lines = []
        for raw in proc.stderr:
            lines.append(raw.decode())
            if "Server is ready" in lines[-1]:
                break
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stderr.close()
    return lines


def test_cli_still_prints_nats_server_lines():
    lines = _cli_startup_lines()
    assert any(" [INF] Starting natserver" in line for line in lines)
    assert lines[-1].rstrip().endswith("[INF] Server is ready")
    # Which parser the process runs: the compiled PUB loop, unless it is not built or turned off.
    assert any(line.rstrip().endswith(f"[INF]   Parser:   {PARSER_IMPLEMENTATION}") for line in lines)
    assert any(line.rstrip().endswith(f"[INF]   Delivery: {DELIVERY_IMPLEMENTATION}") for line in lines)


def test_cli_says_when_it_runs_the_pure_python_parser():
    lines = _cli_startup_lines(NATSERVER_NO_EXTENSIONS="1")
    assert any(line.rstrip().endswith("[INF]   Parser:   python") for line in lines)
    assert any(line.rstrip().endswith("[INF]   Delivery: python") for line in lines)
