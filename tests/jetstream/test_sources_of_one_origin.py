"""Two sources of one origin stream with different filters (``sources: [{name: O,
filter_subject: a.>}, {name: O, filter_subject: b.>}]``), as nats-server 2.15.1 takes them: the
stream is created (2.10+ tells sources apart by origin, filters and transforms: composeIName),
each source copies its filter's messages once, the origin's other messages are not copied, the
same source twice is refused (10140), and after a restart each source goes on from where it
was (its messages' Nats-Stream-Source carries its filter). The same scenario against natserver
gives the outcome written below, and against a live 2.15.1 (NATS_SERVER_REFERENCE) the same."""

from __future__ import annotations

import json
import time

from tests import reference
from tests.auth.test_auth_helpers import running
from tests.jetstream.test_consumer_rules import RawClient

JS_CONFIG = 'jetstream { store_dir: "%s" }\n'
SETTLE_POLLS, SETTLE_INTERVAL = 100, 0.05  # up to 5 s for the sources to catch up
TWO_SOURCES = {"name": "T", "sources": [{"name": "O", "filter_subject": "a.>"},
                                        {"name": "O", "filter_subject": "b.>"}]}


def _request(client: RawClient, subject: str, body) -> dict:
    (answer,) = client.request(subject, body)
    return json.loads(answer)


def _settled(client: RawClient, want: int) -> int:
    """T's message count once it reached ``want`` (or what it has after SETTLE_POLLS)."""
    for _ in range(SETTLE_POLLS):
        count = _request(client, "$JS.API.STREAM.INFO.T", b"")["state"]["messages"]
        if count >= want:
            return count
        time.sleep(SETTLE_INTERVAL)
    return count


def _subjects(client: RawClient, count: int) -> list[str]:
    """T's messages' subjects, sorted (the two sources copy side by side: in no fixed order)."""
    got = [_request(client, "$JS.API.STREAM.MSG.GET.T", {"seq": seq})["message"]["subject"]
           for seq in range(1, count + 1)]
    return sorted(got)


def _publish(client: RawClient, *subjects: str) -> None:
    for subject in subjects:
        client.request(subject, b"x")


def scenario(port: int) -> dict:
    """What T gets from O, and what is refused."""
    client = RawClient(port)
    out: dict = {}
    _request(client, "$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["a.>", "b.>", "c.>"]})
    _publish(client, "a.1", "b.1", "c.1", "a.2")
    twice = {"name": "D", "sources": [{"name": "O", "filter_subject": "a.>"}, {"name": "O", "filter_subject": "a.>"}]}
    out["the same source twice"] = _request(client, "$JS.API.STREAM.CREATE.D", twice).get("error")
    created = _request(client, "$JS.API.STREAM.CREATE.T", TWO_SOURCES)
    out["created"] = created.get("error") or created["config"]["sources"]
    out["first"] = _subjects(client, _settled(client, 3))
    _publish(client, "b.2", "c.2", "a.3")
    out["later"] = _subjects(client, _settled(client, 5))
    info = _request(client, "$JS.API.STREAM.INFO.T", b"")
    out["sources"] = sorted((s["name"], s.get("filter_subject", "")) for s in info.get("sources", []))
    time.sleep(SETTLE_INTERVAL * 4)  # (nothing more comes: each message once)
    out["count"] = _request(client, "$JS.API.STREAM.INFO.T", b"")["state"]["messages"]
    return out


EXPECTED = {
    "the same source twice": {"code": 400, "err_code": 10140, "description": "duplicate source configuration detected"},
    "created": [{"name": "O", "filter_subject": "a.>"}, {"name": "O", "filter_subject": "b.>"}],
    "first": ["a.1", "a.2", "b.1"],
    "later": ["a.1", "a.2", "a.3", "b.1", "b.2"],
    "sources": [["O", "a.>"], ["O", "b.>"]],
    "count": 5,
}


def _run(kind: str, tmp_path, binary: str | None = None, restart: bool = False) -> dict:
    tmp_path.mkdir(exist_ok=True)
    config = JS_CONFIG % (tmp_path / "store")
    options = {"binary": binary} if binary else {}
    if not restart:
        with running(kind, config, tmp_path, **options) as port:
            return json.loads(json.dumps(scenario(port)))
    with running(kind, config, tmp_path, **options) as port:
        first = json.loads(json.dumps(scenario(port)))
    with running(kind, config, tmp_path, **options) as port:
        client = RawClient(port)
        _publish(client, "a.4", "c.3", "b.3")
        first["after a restart"] = _subjects(client, _settled(client, 7))
        time.sleep(SETTLE_INTERVAL * 4)
        first["count"] = _request(client, "$JS.API.STREAM.INFO.T", b"")["state"]["messages"]
    return first


def test_natserver_keeps_two_sources_of_one_origin_apart(tmp_path):
    assert _run("natserver", tmp_path) == EXPECTED


def test_each_source_goes_on_from_where_it_was_after_a_restart(tmp_path):
    got = _run("natserver", tmp_path, restart=True)
    assert got == {**EXPECTED, "after a restart": ["a.1", "a.2", "a.3", "a.4", "b.1", "b.2", "b.3"], "count": 7}


@reference.needs_nats_server
def test_nats_server_does_the_same(tmp_path):
    assert _run("nats-server", tmp_path / "ref", binary=reference.NATS_SERVER) == EXPECTED


@reference.needs_nats_server
def test_nats_server_goes_on_so_too_after_a_restart(tmp_path):
    assert _run("nats-server", tmp_path / "ref", binary=reference.NATS_SERVER, restart=True) == \
        _run("natserver", tmp_path, restart=True)


# -- overlapping filters: [{O, a.>}, {O}] ---------------------------------------------------------
# Each source copies what its filter takes, so a message both take is stored twice, once with
# each source's Nats-Stream-Source (the filter in it tells them apart), before and after a
# restart: as 2.15.1 does (checked against it below).
OVERLAPPING = {"name": "T", "sources": [{"name": "O", "filter_subject": "a.>"}, {"name": "O"}]}
OVERLAPPING_EXPECTED = {
    "first": ["a.1", "a.1", "a.2", "a.2", "b.1"],
    "after a restart": ["a.1", "a.1", "a.2", "a.2", "a.3", "a.3", "b.1", "b.2"],
    "count": 8,
}


def _overlapping(kind: str, tmp_path, binary: str | None = None) -> dict:
    tmp_path.mkdir(exist_ok=True)
    config = JS_CONFIG % (tmp_path / "store")
    options = {"binary": binary} if binary else {}
    out: dict = {}
    with running(kind, config, tmp_path, **options) as port:
        client = RawClient(port)
        _request(client, "$JS.API.STREAM.CREATE.O", {"name": "O", "subjects": ["a.>", "b.>"]})
        _publish(client, "a.1", "b.1", "a.2")
        _request(client, "$JS.API.STREAM.CREATE.T", OVERLAPPING)
        out["first"] = _subjects(client, _settled(client, 5))
    with running(kind, config, tmp_path, **options) as port:
        client = RawClient(port)
        _publish(client, "a.3", "b.2")
        out["after a restart"] = _subjects(client, _settled(client, 8))
        time.sleep(SETTLE_INTERVAL * 4)  # (nothing more comes)
        out["count"] = _request(client, "$JS.API.STREAM.INFO.T", b"")["state"]["messages"]
    return out


def test_overlapping_filters_of_one_origin_copy_a_message_once_each(tmp_path):
    assert _overlapping("natserver", tmp_path) == OVERLAPPING_EXPECTED


@reference.needs_nats_server
def test_nats_server_copies_overlapping_filters_so_too(tmp_path):
    assert _overlapping("nats-server", tmp_path / "ref", binary=reference.NATS_SERVER) == OVERLAPPING_EXPECTED
