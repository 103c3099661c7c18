"""nsqjs 0.13.0 (node) against natserver.nsq: Writer and Reader, plain, deflate, snappy and TLS,
REQ raising attempts. nsqjs is installed with npm into a temporary directory once per
session; skipped only when node/npm are not on this machine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tests.nsq.helpers import ThreadedServer, self_signed_cert

NSQJS_VERSION = "0.13.0"
SCENARIO = os.path.join(os.path.dirname(__file__), "nsqjs", "scenario.js")


@pytest.fixture(scope="session")
def nsqjs_modules(tmp_path_factory):
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed")
    directory = tmp_path_factory.mktemp("nsqjs")
    result = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent", f"nsqjs@{NSQJS_VERSION}"],
                            cwd=directory, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        pytest.skip(f"npm could not install nsqjs: {result.stderr[-300:]}")
    return str(directory / "node_modules")


@pytest.fixture
def server(tmp_path):
    cert, key = self_signed_cert(tmp_path)
    srv = ThreadedServer(tmp_path, tls_cert=cert, tls_key=key).start()
    yield srv
    srv.stop()


@pytest.mark.parametrize("mode", ["plain", "deflate", "snappy", "tls"])
def test_nsqjs(server, nsqjs_modules, mode):
    env = dict(os.environ, NODE_PATH=nsqjs_modules)
    result = subprocess.run(["node", SCENARIO, str(server.tcp_port), mode], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])["seen"]
    assert sorted(map(tuple, seen)) == [("one", 1), ("two", 1), ("two", 2)]
    upgrades = server.call(lambda: dict(server.server.nsq.upgrades))
    assert upgrades == {kind: 2 if kind == mode else 0 for kind in ("tls", "deflate", "snappy")}
