"""Differential conformance: natserver's bytes on the wire must equal nats-server v2.15.1's.

Each case of ``cases.py`` is replayed against natserver and against nats-server (live, side by
side) or compared with the transcript recorded from nats-server in ``expected/``.  All selected
cases run once, concurrently, in a session fixture (``runner.run_many``); each parametrised test
then reports its own case.
"""

from __future__ import annotations

import warnings

import pytest
import trio

from . import harness, runner
from .cases import CASES


class StaleRecordingWarning(UserWarning):
    pass


@pytest.fixture(scope="session")
def conformance_outcomes(request, conformance_target, conformance_reference, conformance_pool):
    selected = []
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and getattr(item, "originalname", None) == "test_conformance":
            selected.append(callspec.params["case"])
    return trio.run(
        lambda: runner.run_many(
            selected, target=conformance_target, reference=conformance_reference, pool=conformance_pool
        )
    )


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_conformance(case, conformance_outcomes, conformance_target):
    out = conformance_outcomes[case.name]
    if out.skip:
        pytest.skip(out.skip)
    if out.error:
        pytest.fail(f"{case.name}: {out.error}", pytrace=False)
    if out.reference_runs and out.recorded is not None:
        if harness.diff_transcripts(out.recorded, out.reference_runs[0].transcript):
            warnings.warn(
                StaleRecordingWarning(f"{case.name}: live nats-server differs from expected/{case.name}.json; re-record"),
                stacklevel=1,
            )
    diff = harness.diff_transcripts(out.expected, out.got.transcript, labels=("nats-server", conformance_target))
    if diff:
        notes = "".join(f"\n  note: {n}" for n in out.got.notes)
        doc = f"\n  ({case.doc})" if case.doc else ""
        pytest.fail(
            f"{case.name}: {conformance_target} differs from nats-server v{harness.REFERENCE_VERSION}{doc}\n"
            f"{harness.short_summary(out.expected, out.got.transcript)}\n{diff}{notes}",
            pytrace=False,
        )


@pytest.mark.needs_nats_server
def test_reference_version():
    """The recordings were made with nats-server v2.15.1; a different binary is not a reference."""
    binary = harness.find_nats_server()
    assert harness.nats_server_version(binary) == harness.REFERENCE_VERSION


def test_recordings_complete():
    """Every case has a recording, and every recording matches its case definition."""
    missing = [c.name for c in CASES if not harness.expected_path(c).exists()]
    stale = [
        c.name
        for c in CASES
        if harness.expected_path(c).exists() and harness.load_expected(c)[1].get("digest") != c.digest()
    ]
    names = {c.name for c in CASES}
    orphans = sorted(p.stem for p in harness.EXPECTED_DIR.glob("*.json") if p.stem not in names)
    assert not missing and not stale and not orphans, (
        f"run `python -m conformance record`: missing={missing} stale={stale} orphans={orphans}"
    )


def test_case_names_unique():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))


def test_masking_keeps_key_order_and_types():
    unit = b'INFO {"server_id":"N1","proto":1,"port":4222,"headers":true,"client_id":5} \r\n'
    assert harness.mask_info(unit) == (
        b'INFO {"server_id":"<str>","proto":1,"port":"<int>","headers":true,"client_id":"<int>"} \r\n'
    )
    assert harness.mask_info(b'INFO {"proto": 1} \r\n').startswith(b"INFO <non-compact json>")


def test_split_units():
    data = b"INFO {} \r\nMSG a 1 4\r\nx\r\ny\r\nHMSG b 2 12 12\r\nNATS/1.0\r\n\r\n\r\n+OK\r\npartial"
    assert harness.split_units(data) == [
        b"INFO {} \r\n",
        b"MSG a 1 4\r\nx\r\ny\r\n",
        b"HMSG b 2 12 12\r\nNATS/1.0\r\n\r\n\r\n",
        b"+OK\r\n",
        b"partial",
    ]
