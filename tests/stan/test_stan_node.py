"""node-nats-streaming 0.3.2 (the Node.js STAN client, on nats@1) against natserver --stan.

Runs when ``node`` and ``npm`` are on PATH (skipped otherwise, like the tests that need the
reference binary); the client is installed once with npm into a cache directory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from natserver.stan import StanOptions

NODE = shutil.which("node")
NPM = shutil.which("npm")
CACHE = Path(tempfile.gettempdir()) / "natserver-test-node-nats-streaming-0.3.2"
SCENARIO = Path(__file__).parent / "stan_node" / "scenario.js"

pytestmark = pytest.mark.skipif(not (NODE and NPM), reason="node-nats-streaming needs node and npm")


def _install() -> Path:
    modules = CACHE / "node_modules"
    if not (modules / "node-nats-streaming").is_dir():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([NPM, "install", "--no-audit", "--no-fund", "--prefix", str(CACHE), "node-nats-streaming@0.3.2"],
                       check=True, timeout=300, capture_output=True)
    return modules


def test_node_nats_streaming(threaded_server):
    modules = _install()
    handle = threaded_server(stan=StanOptions())
    env = dict(os.environ, NODE_PATH=str(modules))
    done = subprocess.run([NODE, str(SCENARIO), handle.url], capture_output=True, timeout=60, env=env, text=True)
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert "error" not in results, (results, done.stderr)
    assert results["all"] == [[i, f"m{i}", False] for i in range(1, 6)]
    assert results["fromSeq"] == [[4, "m4", False], [5, "m5", False]]
    assert results["last"] == [[5, "m5", False]]
    assert results["redo"] == [[1, "again", False], [1, "again", True]]
    assert results["durable"] == [[2, "d2", False]]
    assert results["duplicate"] == "stan: clientID already registered"
