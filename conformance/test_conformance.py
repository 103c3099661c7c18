"""Differential conformance: natserver's bytes on the wire must equal nats-server v2.9.10's.

Each case of ``cases.py`` is replayed against natserver and against nats-server (live, run
concurrently) or compared with the transcript recorded from nats-server in ``expected/``.
"""

from __future__ import annotations

import warnings

import pytest
import trio

from . import harness
from .cases import CASES


class StaleRecordingWarning(UserWarning):
    pass


def _server(pool: harness.ServerPool, kind: str, case: harness.Case) -> harness.ServerProcess:
    try:
        return pool.get(kind, case.config)
    except harness.ServerStartError as exc:
        if kind == "natserver" and case.config and exc.exited:
            pytest.skip(
                f"natserver refused to start with a config file (-c); this case needs:\n"
                f"{harness.render_config(case.config)}{exc}"
            )
        raise


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_conformance(case, conformance_target, conformance_reference, conformance_pool):
    target = _server(conformance_pool, conformance_target, case)
    recorded = None
    if harness.expected_path(case).exists():
        recorded, meta = harness.load_expected(case)
        if meta.get("digest") != case.digest():
            if conformance_reference == "recorded":
                pytest.fail(f"recording for {case.name} is stale (case changed): run `python -m conformance record -k {case.name}`")
            recorded = None

    if conformance_reference == "live":
        reference = _server(conformance_pool, "nats-server", case)
        results = {}

        async def run(key, server):
            results[key] = await harness.run_case(case, server.host, server.port)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, "ref", reference)
            nursery.start_soon(run, "got", target)
        expected = results["ref"].transcript
        got = results["got"]
        if recorded is not None and harness.diff_transcripts(recorded, expected):
            warnings.warn(
                StaleRecordingWarning(f"{case.name}: live nats-server differs from expected/{case.name}.json; re-record"),
                stacklevel=1,
            )
    else:
        if recorded is None:
            pytest.skip(f"no recording for {case.name}: run `python -m conformance record` where nats-server is installed")
        expected = recorded
        got = await harness.run_case(case, target.host, target.port)

    diff = harness.diff_transcripts(expected, got.transcript, labels=("nats-server", conformance_target))
    if diff:
        notes = "".join(f"\n  note: {n}" for n in got.notes)
        doc = f"\n  ({case.doc})" if case.doc else ""
        pytest.fail(
            f"{case.name}: {conformance_target} differs from nats-server v{harness.REFERENCE_VERSION}{doc}\n"
            f"{harness.short_summary(expected, got.transcript)}\n{diff}{notes}",
            pytrace=False,
        )


@pytest.mark.needs_nats_server
def test_reference_version():
    """The recordings were made with nats-server v2.9.10; a different binary is not a reference."""
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
