"""The reference of the JetStream differential tests that still compare with nats-server 2.9.10.

nats-server 2.15.1 is the reference everywhere else (tests/reference.py). JetStream's JSON grew
with 2.10 and 2.11 (stream and consumer config fields, info fields, API errors); until
natserver has those features (issue #27 items 2-6) these tests keep comparing with the
distribution's 2.9.10, through the same names test_auth_helpers gives for the reference, so that
moving a file to 2.15.1 is changing its import back.
"""

from __future__ import annotations

from tests import reference
from tests.auth import test_auth_helpers as helpers

NATS_SERVER = reference.NATS_SERVER_2_9 or "nats-server"
HAVE_NATS_SERVER = reference.NATS_SERVER_2_9 is not None
needs_nats_server = reference.needs_nats_server_2_9
free_port = helpers.free_port


def running(kind: str, config: str, tmp_path, args: tuple = (), binary: str = NATS_SERVER):
    """test_auth_helpers.running with nats-server 2.9.10 as "nats-server"."""
    return helpers.running(kind, config, tmp_path, args, binary)


def as_2_9_account_info(doc: dict) -> dict:
    """natserver's ``$JS.API.INFO`` answer as nats-server 2.9.10 shapes it: without the
    ``api.level`` that 2.11 added (natserver reports its JS_API_LEVEL there)."""
    api = doc.get("api")
    if isinstance(api, dict):
        doc["api"] = {key: value for key, value in api.items() if key != "level"}
    return doc
