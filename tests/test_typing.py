"""The public API is type-clean (issue #18 item 15): mypy checks the modules that define it, and
code a user writes against it (tests/typing/public_api_usage.py). The package ships py.typed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("mypy", reason="mypy is in the test extra")

# The modules whose every line must type-check; the others are checked where the public API
# reaches them (follow_imports = silent: their signatures, not their bodies).
CLEAN = [
    "natserver/__init__.py",
    "natserver/app.py",
    "natserver/pytest_plugin.py",
    "natserver/protocol",
    "natserver/config/options.py",
    "tests/typing/public_api_usage.py",
]


def _mypy(*paths: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--follow-imports=silent", "--no-error-summary", "--cache-dir=/dev/null", *paths],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )


def test_public_api_type_checks():
    result = _mypy(*CLEAN)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_type_error_against_the_public_api_is_found(tmp_path):
    bad = tmp_path / "bad_usage.py"
    bad.write_text("from natserver import Options, Parser\nport: str = Options().port\nParser().feed('text')\n")
    result = _mypy(str(bad))
    assert result.returncode == 1
    assert 'Incompatible types in assignment (expression has type "int", variable has type "str")' in result.stdout
    assert 'Argument 1 to "feed" of "Parser" has incompatible type "str"; expected "bytes"' in result.stdout
