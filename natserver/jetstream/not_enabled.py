"""What an account without JetStream gets from ``$JS.API.>``: nats-server 2.9.10 answers each
API with its own response type and ``503 JetStream not enabled for account`` (10039), plus the
empty paging fields some responses carry; other requests (MSG.NEXT, DIRECT.GET, unknown ones)
get no answer, and no no-responders status either (the subscription is there)."""

from __future__ import annotations

from . import errors
from .util import dumps

__all__ = ["NOT_ENABLED", "answer"]

NOT_ENABLED = errors._fixed(503, 10039, "JetStream not enabled for account")
_T = "io.nats.jetstream.api.v1."
# API (the tokens after $JS.API) -> (response type, fields after "error"), as nats-server sends.
_PAGE = {"total": 0, "offset": 0, "limit": 0}
_ANSWERS: dict[tuple[bytes, ...], tuple[str, dict]] = {
    (b"INFO",): ("account_info_response", {}),
    (b"STREAM", b"CREATE"): ("stream_create_response", {}),
    (b"STREAM", b"UPDATE"): ("stream_update_response", {}),
    (b"STREAM", b"INFO"): ("stream_info_response", _PAGE),
    (b"STREAM", b"DELETE"): ("stream_delete_response", {}),
    (b"STREAM", b"NAMES"): ("stream_names_response", {**_PAGE, "streams": None}),
    (b"STREAM", b"LIST"): ("stream_list_response", {**_PAGE, "streams": []}),
    (b"STREAM", b"PURGE"): ("stream_purge_response", {"purged": 0}),
    (b"STREAM", b"MSG", b"GET"): ("stream_msg_get_response", {}),
    (b"STREAM", b"MSG", b"DELETE"): ("stream_msg_delete_response", {}),
    (b"CONSUMER", b"CREATE"): ("consumer_create_response", {}),
    (b"CONSUMER", b"DURABLE", b"CREATE"): ("consumer_create_response", {}),
    (b"CONSUMER", b"INFO"): ("consumer_info_response", {}),
    (b"CONSUMER", b"DELETE"): ("consumer_delete_response", {}),
    (b"CONSUMER", b"NAMES"): ("consumer_names_response", {**_PAGE, "consumers": []}),
    (b"CONSUMER", b"LIST"): ("consumer_list_response", {**_PAGE, "consumers": []}),
    # 2.11 (as nats-server 2.15.1 answers it)
    (b"CONSUMER", b"PAUSE"): ("consumer_pause_response", {"paused": False, "pause_until": "0001-01-01T00:00:00Z"}),
    # (nats-server 2.15.1 checks the request's JSON and group first; not reproduced here)
    (b"CONSUMER", b"UNPIN"): ("consumer_unpin_response", {}),
}


# APIs that answer a too-high Nats-Required-Api-Level (and no more) in nats-server 2.15.1: the
# API error then comes before anything natserver does not have.
_LEVEL_ANSWERS: dict[tuple[bytes, ...], tuple[str, dict]] = {
    **_ANSWERS,
    (b"STREAM", b"SNAPSHOT"): ("stream_snapshot_response", {}),
    (b"STREAM", b"RESTORE"): ("stream_restore_response", {"deliver_subject": ""}),
}


def answer(subject: bytes, error: errors.ApiError | None = None) -> bytes | None:
    """The response to a ``$JS.API.`` request ``subject`` from an account without JetStream
    (or, given ``error``, the same response type with that error: REQUIRED_API_LEVEL)."""
    tokens = tuple(subject.split(b".")[2:])
    table = _ANSWERS if error is None else _LEVEL_ANSWERS
    for length in (3, 2, 1):
        found = table.get(tokens[:length])
        if found is not None:
            rtype, rest = found
            return dumps({"type": _T + rtype, "error": (error or NOT_ENABLED()).to_json(), **rest})
    return None
