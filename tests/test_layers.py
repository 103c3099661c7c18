"""The package layering (issue #12): packages import only the layers below them.

The contracts are in pyproject.toml ([tool.importlinter]); import-linter checks them here and in
.ci/run. The second test shows the check has teeth: a copy of the package where the protocol
layer imports the server must fail it. The third keeps the circle from coming back by the side
door: no relative import inside a function (the way the old layout held its cycles open).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "natserver"

pytest.importorskip("importlinter", reason="import-linter is in the test extra")


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    """Run import-linter on the package found under ``root`` with the contracts of this repo."""
    config = root / "pyproject.toml"
    if root != ROOT:
        shutil.copy(ROOT / "pyproject.toml", config)
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run(
        [sys.executable, "-c", code, "--config", str(config), "--no-cache"],
        cwd=root, capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )


def test_the_layering_contracts_are_kept():
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_an_upward_import_breaks_the_layering(tmp_path):
    shutil.copytree(PACKAGE, tmp_path / "natserver", ignore=shutil.ignore_patterns("__pycache__"))
    parser = tmp_path / "natserver" / "protocol" / "parser.py"
    parser.write_text(parser.read_text() + "\nfrom ..server import server as _upward  # noqa\n")
    result = _lint_imports(tmp_path)
    assert result.returncode != 0
    assert "Packages import only the layers below them BROKEN" in result.stdout
    assert "natserver.protocol.parser -> natserver.server.server" in result.stdout


def _function_local_relative_imports(path: Path, root: Path = ROOT, allowed: frozenset = frozenset()) -> list[str]:
    """``file:line`` of each import of natserver code inside a function, but those of the
    modules in ``allowed`` (written as in the import: ``"..auth.jwt"``, ``".monitor"``)."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and (inner.level or (inner.module or "").startswith("natserver.")):
                    if "." * inner.level + (inner.module or "") not in allowed:
                        found.append(f"{path.relative_to(root)}:{inner.lineno}")
    return found


# Imports inside functions that are there on purpose, not to dodge a cycle: the pytest plugin is
# loaded by every pytest run wherever natserver is installed, so its fixtures import the server
# only when used; the Spark package imports pyspark (an optional extra) only when asked for; the
# command (natserver/launch.py) opens its port before it imports the server (issue #17).
_LAZY_ON_PURPOSE = {
    "natserver/pytest_plugin.py", "natserver/spark/__init__.py", "natserver/spark/_client.py", "natserver/launch.py"
}
# And single modules that only some options need, kept off the plain ``natserver -p 4222`` start
# (issue #33, tests/test_startup_imports.py): none of them imports the module that imports it.
_LAZY_MODULES_ON_PURPOSE = {
    # operator mode, the HTTP monitor, the signal handlers (reload reads the config file)
    "natserver/server/server.py": frozenset({"..auth.jwt", ".monitor", ".signals"}),
    # the config file's mapping and parser, NATS Streaming's flags
    "natserver/config/flags.py": frozenset({".mapping", ".conf", ".stan"}),
    "natserver/cli.py": frozenset({".config.mapping"}),
    # the signal handlers' reload, for the system account's RELOAD request
    "natserver/system/__init__.py": frozenset({"..server.signals"}),
    # encryption at rest (cryptography's ciphers, the config mapping's cipher names), only
    # with a key or an encrypted stream: off the JetStream start (issue #34's restart)
    "natserver/jetstream/__init__.py": frozenset({".crypto"}),
}


def test_no_import_inside_a_function_dodges_a_cycle():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = str(path.relative_to(ROOT))
        if name not in _LAZY_ON_PURPOSE:
            found += _function_local_relative_imports(path, allowed=_LAZY_MODULES_ON_PURPOSE.get(name, frozenset()))
    assert found == []


def test_a_lazy_module_that_is_not_listed_is_found(tmp_path):
    # The list above is per module: another lazy import in the same file is still reported.
    source = tmp_path / "natserver" / "server" / "server.py"
    source.parent.mkdir(parents=True)
    source.write_text("def f():\n    from .monitor import serve_monitor\n    from .client import Client\n")
    allowed = _LAZY_MODULES_ON_PURPOSE["natserver/server/server.py"]
    assert _function_local_relative_imports(source, tmp_path, allowed) == ["natserver/server/server.py:3"]


def test_the_function_local_import_check_finds_one(tmp_path):
    module = tmp_path / "natserver" / "m.py"
    module.parent.mkdir()
    module.write_text("def f():\n    from .server import server\n    return server\n")
    assert _function_local_relative_imports(module, tmp_path) == ["natserver/m.py:2"]
