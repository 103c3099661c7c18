"""gnsq 1.0.2's own test suite (shipped in its PyPI sdist), run against natserver: two
shell scripts named ``nsqd`` and ``nsqlookupd`` on PATH start natserver.nsq's nsqd- and
nsqlookupd-compatible command lines, which gnsq's integration server drives (random ports
parsed from ``TCP: listening on``, ``--version``, TLS certificates, ``--https-address``,
``--lookupd-tcp-address``). A suite nobody on this project wrote: every test must pass.

The sdist is fetched with pip into a temporary directory (skipped only when pip cannot reach
the package index)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile

import pytest

pytest.importorskip("gnsq")
pytest.importorskip("gevent")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GNSQ_VERSION = "1.0.2"


def test_gnsq_sdist_suite(tmp_path):
    download = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                               "-d", str(tmp_path), f"gnsq=={GNSQ_VERSION}"], capture_output=True, text=True,
                              timeout=300)
    if download.returncode != 0:
        pytest.skip(f"pip could not fetch the gnsq sdist: {download.stderr[-300:]}")
    with tarfile.open(tmp_path / f"gnsq-{GNSQ_VERSION}.tar.gz") as archive:
        try:
            archive.extractall(tmp_path, filter="data")
        except TypeError:  # Python without extraction filters (< 3.10.12 / 3.11.4)
            archive.extractall(tmp_path)
    shims = tmp_path / "bin"
    shims.mkdir()
    for name in ("nsqd", "nsqlookupd"):
        shim = shims / name
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m natserver.nsq {name} "$@"\n')
        shim.chmod(0o755)
    env = dict(os.environ, PATH=f"{shims}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONPATH=REPO)
    suite = tmp_path / f"gnsq-{GNSQ_VERSION}"
    # "python -m pytest" puts the sdist root first on sys.path: the suite tests its own gnsq
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:trio",
                             "-p", "no:natserver", "-p", "no:randomly", "--rootdir", str(suite), "tests"],
                            cwd=suite, env=env, capture_output=True, text=True, timeout=600)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else result.stderr[-2000:]
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert " passed" in summary and "failed" not in summary and "error" not in summary, summary
