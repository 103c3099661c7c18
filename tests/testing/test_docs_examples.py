"""docs/testing.md's examples marked ``<!-- example: run as a test ... -->`` are run as they are
written: each such python block is a test module of its own, run by pytest (pytester, in this
process) with the natserver plugin, and every test in it must pass."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
MARK = "<!-- example: run as a test"
BLOCK = re.compile(r"^" + re.escape(MARK) + r"[^\n]*-->\n```python\n(.*?)^```", re.M | re.S)


def examples() -> list[str]:
    return BLOCK.findall(DOC.read_text())


def test_the_guide_has_runnable_examples():
    text = DOC.read_text()
    assert len(examples()) == text.count(MARK) >= 4


@pytest.mark.parametrize("index", range(len(examples())))
def test_example(pytester, index):
    source = examples()[index]
    pytester.makepyfile(**{f"test_example_{index}": source})
    pytester.makeini("[pytest]\ntrio_mode = true\n")
    result = pytester.runpytest_inprocess("-p", "no:randomly", "-p", "no:cacheprovider", "-q")
    tests = len(re.findall(r"^(?:async )?def test_", source, re.M))
    result.assert_outcomes(passed=tests)
