"""Issue 18 item 13: packaging metadata (PEP 639 license, classifiers), install instructions
that work as written (natserver is not on PyPI: from a checkout, or pip's git form with the
URL of wherever it was cloned from), README links that resolve in any copy of the repository.
(The project has no public home yet, so no [project.urls] and no absolute links: none is
invented.)"""

from __future__ import annotations

import email
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: pip's vendored copy of the same parser
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DOCS = [ROOT / "README.md", ROOT / "docs" / "testing.md", ROOT / "examples" / "greeter" / "README.md",
        ROOT / "natserver" / "jetstream" / "README.md", ROOT / "benchmarks" / "README.md"]


def test_pyproject_metadata():
    project = PROJECT["project"]
    assert project["license"] == "Apache-2.0"  # an SPDX expression, not the deprecated table
    assert project["license-files"] == ["LICENSE"] and (ROOT / "LICENSE").is_file()
    requires = PROJECT["build-system"]["requires"]
    assert any(re.fullmatch(r"setuptools>=(\d+)", r) and int(r.split(">=")[1]) >= 77 for r in requires)
    classifiers = set(project["classifiers"])
    for needed in ("Framework :: Pytest", "Typing :: Typed", *(f"Programming Language :: Python :: 3.{m}"
                                                               for m in range(10, 14))):
        assert needed in classifiers, needed
    assert project["requires-python"] == ">=3.10"


def test_install_instructions_do_not_assume_pypi():
    """Every `pip install` that names natserver installs it from a checkout or a git URL."""
    for path in DOCS + [ROOT / "examples" / "greeter" / "test_greeter.py"]:
        text = path.read_text()
        for args in re.findall(r"pip install ([^&|;`\n]*)", text):
            for arg in shlex.split(args, comments=True):
                if re.match(r"natserver\b", arg):  # a requirement naming natserver
                    assert "@ git+" in arg, f"{path.name}: pip install {args.strip()}"


def test_readme_links_resolve():
    """Links into the repository are relative and name files that exist; others are absolute."""
    for path in DOCS:
        for link in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
            if link.startswith(("https://", "http://", "#", "mailto:")):
                continue
            target = (path.parent / link.split("#")[0]).resolve()
            assert target.exists(), f"{path.name}: {link}"


def test_a_wheel_built_from_the_checkout(tmp_path):
    # From a copy: setuptools builds in the source tree (build/, *.egg-info).
    tree = tmp_path / "tree"
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", ".hypothesis",
                                                              "__pycache__", "results"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(tree)],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"))
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("natserver-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = email.message_from_bytes(zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))))
    assert meta["License-Expression"] == "Apache-2.0"
    assert "Framework :: Pytest" in meta.get_all("Classifier")
    for needed in ("natserver/py.typed", "natserver/jetstream/crypto.py", "natserver/pytest_plugin.py"):
        assert needed in names, needed


def test_documented_git_requirements_parse_and_a_git_url_installs(tmp_path):
    """The documented form, `pip install "natserver @ git+<repository URL>"`, installs
    natserver: with this checkout's URL (when it is a git checkout)."""
    from pip._vendor.packaging.requirements import Requirement

    assert any('"natserver @ git+<repository URL>"' in path.read_text() for path in DOCS)
    requirement = Requirement(f"natserver @ git+file://localhost{ROOT}")
    assert requirement.name == "natserver"
    source = f"natserver @ git+file://localhost{ROOT}" if (ROOT / ".git").exists() else str(ROOT)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                           str(tmp_path / "site"), source], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "natserver" / "py.typed").is_file()
