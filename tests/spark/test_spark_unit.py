"""natserver.spark without Spark: options, offsets, partition splitting, the wire helpers,
and the small NATS client against a real JetStream server (a subprocess: natserver by
default, ``NATS_SPARK_SERVER=nats-server`` for the Go server).

The Spark end-to-end tests are in test_spark.py (marked ``spark``).
"""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone

import pytest

from natserver.spark import _client as client
from natserver.spark._client import (
    Auth,
    Connection,
    Publisher,
    encode_headers,
    fetch_range,
    js_request,
    parse_headers,
    parse_servers,
    rfc3339_to_micros,
    stream_bounds,
    stream_info,
    stream_names,
    subject_matches,
)
from natserver.spark._errors import (
    ConnectError,
    DataLossError,
    JetStreamNotEnabled,
    NatsSparkError,
    OptionError,
    PublishError,
    StreamNotFound,
)
from natserver.spark._io import RowPlan, arrow_batches, publish_rows, read_messages, rows
from natserver.spark._offsets import (
    check_start,
    make_offset,
    next_end,
    offset_seq,
    resolve_end,
    resolve_start,
    split_range,
)
from natserver.spark._options import (
    check_subject,
    parse_offset_spec,
    parse_read_options,
    parse_write_options,
    subjects_overlap,
)
from natserver.spark._server import JetStreamServer

# -- options ------------------------------------------------------------------------------------


def test_read_options_defaults_follow_kafka():
    stream = parse_read_options({"stream": "S"}, streaming=True)
    batch = parse_read_options({"stream": "S"}, streaming=False)
    assert (stream.starting, stream.ending) == ("latest", None)
    assert (batch.starting, batch.ending) == ("earliest", "latest")
    assert stream.conn.urls == "nats://127.0.0.1:4222"
    assert (stream.min_partitions, stream.include_headers, stream.fail_on_data_loss) == (1, False, True)
    assert stream.max_per_trigger is None


def test_read_options_are_case_insensitive_and_parsed():
    o = parse_read_options(
        {
            "SERVERS": "nats://a:1, tls://u:p@b:2", "stream": "ORDERS", "Subject": "orders.*.eu",
            "startingoffsets": "5", "endingOffsets": '{"stream": "ORDERS", "seq": 9}',
            "maxMessagesPerTrigger": "100", "minPartitions": "4", "includeHeaders": "TRUE",
            "failOnDataLoss": "false", "timeout": "2.5", "checkpointLocation": "/tmp/x",
        },
        streaming=True,
    )
    assert [s.url for s in o.conn.servers] == ["nats://a:1", "tls://b:2"]
    assert (o.conn.servers[1].user, o.conn.servers[1].password) == ("u", "p")
    assert (o.stream, o.subject, o.starting, o.ending) == ("ORDERS", "orders.*.eu", 5, 9)
    assert (o.max_per_trigger, o.min_partitions, o.include_headers, o.fail_on_data_loss) == (100, 4, True, False)
    assert o.conn.timeout == 2.5


@pytest.mark.parametrize(
    "options, message",
    [
        ({}, "option 'stream' is required"),
        ({"stream": "A.B"}, "not a valid stream name"),
        ({"stream": "S", "subject": "a..b"}, "not a valid NATS subject"),
        ({"stream": "S", "subject": "a.>.b"}, "misplaced wildcard"),
        ({"stream": "S", "startingOffsets": "first"}, "option 'startingOffsets' must be earliest, latest"),
        ({"stream": "S", "startingOffsets": "0"}, "option 'startingOffsets'"),
        ({"stream": "S", "endingOffsets": "earliest"}, "option 'endingOffsets' must be latest"),
        ({"stream": "S", "startingOffsets": "10", "endingOffsets": "5"}, "is before 'startingOffsets'"),
        ({"stream": "S", "maxMessagesPerTrigger": "0"}, "'maxMessagesPerTrigger' must be >= 1"),
        ({"stream": "S", "maxMessagesPerTrigger": "many"}, "must be an integer"),
        ({"stream": "S", "includeHeaders": "yes please"}, "must be true or false"),
        ({"stream": "S", "startingOffset": "earliest"}, "did you mean 'startingOffsets'"),
        ({"stream": "S", "servers": "http://h:1"}, "nats:// or tls://"),
        ({"stream": "S", "servers": " , "}, "option 'servers' is empty"),
        ({"stream": "S", "credentials": "/nonexistent.creds"}, "no such file"),
        ({"stream": "S", "password": "p"}, "needs option 'user'"),
        ({"stream": "S", "timeout": "-1"}, "'timeout' must be > 0"),
    ],
)
def test_bad_read_options_name_the_problem_in_one_line(options, message):
    with pytest.raises(OptionError) as info:
        parse_read_options(options, streaming=True)
    text = str(info.value)
    assert message in text
    assert text.startswith("nats: ") and "\n" not in text


def test_write_options():
    o = parse_write_options({"stream": "OUT", "subject": "out.x", "msgIdPrefix": "job1:", "maxInFlight": "10"})
    assert (o.stream, o.subject, o.msg_id_prefix, o.acks, o.max_in_flight) == ("OUT", "out.x", "job1:", True, 10)
    with pytest.raises(OptionError, match="cannot publish to 'out.\\*'"):
        parse_write_options({"subject": "out.*"})
    with pytest.raises(OptionError, match="needs acks"):
        parse_write_options({"stream": "OUT", "acks": "false"})
    with pytest.raises(OptionError, match="did you mean 'msgIdPrefix'"):
        parse_write_options({"msgIdPrefx": "x"})


def test_offset_specs():
    assert parse_offset_spec(None, "x", "latest") == "latest"
    assert parse_offset_spec(" Earliest ", "x", None) == "earliest"
    assert parse_offset_spec("42", "x", None) == 42
    assert parse_offset_spec('{"seq": 7}', "x", None) == 7
    with pytest.raises(OptionError):
        parse_offset_spec('{"seq": true}', "x", None)


def test_subjects():
    assert check_subject("a.*.>", "subject", wildcards=True) == "a.*.>"
    for bad in ("", "a b", "a.", ".a", "a.b*", "a.>.c"):
        with pytest.raises(OptionError):
            check_subject(bad, "subject", wildcards=True)
    assert subject_matches("a.b.c", "a.>") and subject_matches("a.b", "a.*") and subject_matches("a.b", "a.b")
    assert not subject_matches("a", "a.>") and not subject_matches("a.b.c", "a.*") and not subject_matches("b.c", "a.*")
    assert subjects_overlap("orders.*", "orders.eu") and subjects_overlap("orders.>", "*.eu.x")
    assert subjects_overlap(">", "a") and not subjects_overlap("a.>", "a")
    assert not subjects_overlap("orders.*", "payments.>") and not subjects_overlap("a.*", "a.b.c")


# -- offsets and partitions -------------------------------------------------------------------


def test_resolve_offsets():
    # an empty new stream is (1, 0); a purged one (11, 10)
    assert resolve_start("earliest", 1, 0) == 1 and resolve_start("latest", 1, 0) == 1
    assert resolve_start("earliest", 11, 10) == 11 and resolve_start("latest", 3, 10) == 11
    assert resolve_start(5, 3, 10) == 5
    assert resolve_end(None, 10) is None and resolve_end("latest", 10) == 11 and resolve_end(4, 10) == 4


def test_next_end_caps():
    assert next_end(1, 100) == 101
    assert next_end(1, 100, max_messages=30) == 31
    assert next_end(91, 100, max_messages=30) == 101
    assert next_end(1, 100, ending=50) == 50
    assert next_end(1, 100, target=20, max_messages=30) == 20
    assert next_end(60, 100, ending=50) == 60  # never before start
    assert next_end(5, 0) == 5  # empty stream: no batch


def test_offsets_roundtrip_and_mismatch():
    off = make_offset("S", 12)
    assert json.loads(json.dumps(off)) == {"stream": "S", "seq": 12}
    assert offset_seq(off, "S") == 12
    with pytest.raises(OptionError, match="checkpoint holds offsets of stream 'T'"):
        offset_seq(make_offset("T", 3), "S")
    with pytest.raises(OptionError):
        offset_seq({"seq": 0}, "S")


@pytest.mark.parametrize(
    "start, end, min_parts, max_per, expected",
    [
        (1, 1, 4, None, []),
        (1, 11, 1, None, [(1, 11)]),
        (1, 11, 3, None, [(1, 5), (5, 8), (8, 11)]),
        (1, 3, 8, None, [(1, 2), (2, 3)]),  # never an empty partition
        (1, 101, 1, 30, [(1, 26), (26, 51), (51, 76), (76, 101)]),
        (10, 20, 2, 3, [(10, 13), (13, 16), (16, 18), (18, 20)]),
    ],
)
def test_split_range(start, end, min_parts, max_per, expected):
    parts = split_range(start, end, min_parts, max_per)
    assert parts == expected
    # contiguous, covering, deterministic
    if parts:
        assert parts[0][0] == start and parts[-1][1] == end
        assert all(a[1] == b[0] for a, b in zip(parts, parts[1:]))
    assert split_range(start, end, min_parts, max_per) == parts


def test_split_range_is_balanced():
    parts = split_range(1, 100_001, 7, 10_000)
    sizes = [b - a for a, b in parts]
    assert len(parts) == 10 and max(sizes) - min(sizes) <= 1 and sum(sizes) == 100_000


def test_data_loss_on_the_driver():
    assert check_start(5, 1, 10, "S", fail_on_data_loss=True) == 5
    assert check_start(11, 1, 10, "S", fail_on_data_loss=True) == 11  # caught up
    with pytest.raises(DataLossError, match="lost sequences 2..4"):
        check_start(2, 5, 10, "S", fail_on_data_loss=True)
    assert check_start(2, 5, 10, "S", fail_on_data_loss=False) == 5
    with pytest.raises(DataLossError, match="deleted and created again"):
        check_start(50, 1, 10, "S", fail_on_data_loss=True)
    assert check_start(50, 1, 10, "S", fail_on_data_loss=False) == 50


# -- wire helpers ---------------------------------------------------------------------------------


def test_servers_and_credentials(tmp_path):
    a, b, c = parse_servers("127.0.0.1:4000, nats://tok@h, tls://[::1]:5")
    assert (a.url, b.token, b.port, c.url) == ("nats://127.0.0.1:4000", "tok", 4222, "tls://[::1]:5")
    creds = tmp_path / "u.creds"
    creds.write_text(
        "-----BEGIN NATS USER JWT-----\neyJhbGc.eyJqdGki.sig\n------END NATS USER JWT------\n\n"
        "-----BEGIN USER NKEY SEED-----\nSUAXXX\n------END USER NKEY SEED------\n"
    )
    assert client.read_credentials(str(creds)) == ("eyJhbGc.eyJqdGki.sig", "SUAXXX")
    (tmp_path / "bad.creds").write_text("nothing")
    with pytest.raises(OptionError, match="not a NATS credentials file"):
        client.read_credentials(str(tmp_path / "bad.creds"))


def test_headers_roundtrip():
    block = encode_headers({"a": "1", "b": ["x", "y"]})
    assert block == b"NATS/1.0\r\na: 1\r\nb: x\r\nb: y\r\n\r\n"
    assert parse_headers(block) == (0, "", {"a": ["1"], "b": ["x", "y"]})
    assert parse_headers(b"NATS/1.0 404 Message Not Found\r\n\r\n")[:2] == (404, "Message Not Found")
    with pytest.raises(PublishError):
        encode_headers({"bad key": "v"})
    with pytest.raises(PublishError):
        encode_headers({"k": "line\r\nbreak"})


def test_rfc3339():
    us = rfc3339_to_micros("2026-11-21T13:16:35.312677776Z")
    assert client.micros_to_datetime(us) == datetime(2026, 11, 21, 13, 16, 35, 312677, tzinfo=timezone.utc)
    assert rfc3339_to_micros("1970-01-01T00:00:01Z") == 1_000_000
    assert rfc3339_to_micros("1970-01-01T01:00:00.5+01:00") == 500_000
    with pytest.raises(NatsSparkError):
        rfc3339_to_micros("yesterday")


def test_rows_and_arrow_batches():
    msgs = [client.StoredMsg("a.b", 3, {"k": ["v"]}, b"x", 1_000_001), client.StoredMsg("a.c", 4, None, b"", 2)]
    got = list(rows(msgs, "S", True))
    assert got[0][:5] == ("a.b", None, b"x", {"k": ["v"]}, "S") and got[0][5] == 3
    assert got[0][6] == datetime(1970, 1, 1, 0, 0, 1, 1, tzinfo=timezone.utc)
    assert list(rows(msgs, "S", False))[1][:5] == ("a.c", None, b"", "S", 4)
    pa = pytest.importorskip("pyarrow")
    schema = pa.schema([
        ("subject", pa.string()), ("reply", pa.string()), ("data", pa.binary()),
        ("headers", pa.map_(pa.string(), pa.list_(pa.string()))), ("stream", pa.string()),
        ("seq", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")),
    ])
    (batch,) = list(arrow_batches(msgs, "S", True, schema))
    assert batch.schema.equals(schema)
    assert batch.column("seq").to_pylist() == [3, 4]
    assert batch.column("headers").to_pylist() == [[("k", ["v"])], None]
    assert len(list(arrow_batches(iter(msgs * 5), "S", True, schema, rows_per_batch=4))) == 3


def test_publish_rows_ids_and_subjects():
    sent = []

    class FakePub:
        def publish(self, subject, data, headers, msg_id):
            sent.append((subject, data, headers, msg_id))

    plan = RowPlan(subject_option=None, has_subject=True, data_is_string=False, has_headers=True,
                   id_mode="stream_seq", msg_id_prefix="p:")
    publish_rows(FakePub(), plan, {
        "subject": ["o.1", "o.2"], "data": [b"a", "text"], "headers": [[("h", ["1", "2"])], None],
        "stream": ["IN", "IN"], "seq": [7, 8],
    })
    assert sent == [("o.1", b"a", [("h", "1"), ("h", "2")], "p:IN:7"), ("o.2", b"text", None, "p:IN:8")]
    for bad in (None, "o.*", "o..x", "has space"):
        with pytest.raises(PublishError):
            publish_rows(FakePub(), plan, {"subject": [bad], "data": [b""], "headers": [None], "stream": ["IN"], "seq": [1]})


# -- the client against a real JetStream server -----------------------------------------------------


@pytest.fixture(scope="module")
def js_server():
    with JetStreamServer() as server:
        yield server


@pytest.fixture
def conn(js_server):
    with Connection(js_server.url, timeout=5) as c:
        yield c


def _create(conn, name, subjects, **cfg):
    body = {"name": name, "subjects": subjects, "storage": "file", "duplicate_window": 120_000_000_000, **cfg}
    return js_request(conn, f"STREAM.CREATE.{name}", body)


def _publish(conn, n, subject_of, headers_of=lambda i: None, id_of=lambda i: None):
    pub = Publisher(conn, window=64)
    for i in range(n):
        pub.publish(subject_of(i), b"m%d" % i, headers_of(i), id_of(i))
    pub.finish()
    return pub


def test_connect_errors_are_one_line():
    with pytest.raises(ConnectError) as info:
        Connection("nats://127.0.0.1:1, 127.0.0.1:2", timeout=2)
    text = str(info.value)
    assert "\n" not in text
    assert "cannot connect to NATS server nats://127.0.0.1:1, nats://127.0.0.1:2" in text
    assert "refused" in text.lower()


def test_a_closed_connection_raises_connect_error(js_server):
    # Was an AttributeError ('NoneType' object has no attribute 'sendall') out of the client.
    c = Connection(js_server.url, timeout=5)
    c.close()
    for use in (lambda: c.request("$JS.API.INFO"), c.next_msg):
        with pytest.raises(ConnectError, match="the connection is closed"):
            use()


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "msg-get"])
def test_fetch_range_all_filtered_and_gaps(conn, direct):
    name = "FETCH_D" if direct else "FETCH_M"
    prefix = name.lower()
    _create(conn, name, [prefix + ".>"], allow_direct=direct)
    _publish(conn, 300, lambda i: f"{prefix}.{i % 3}", lambda i: {"n": str(i)} if i % 2 else None)
    js_request(conn, f"STREAM.MSG.DELETE.{name}", {"seq": 10})
    first, last = stream_bounds(stream_info(conn, name))
    assert (first, last) == (1, 300)

    got = list(fetch_range(conn, name, 1, 301, direct=direct, window=32))
    assert [m.seq for m in got] == [s for s in range(1, 301) if s != 10]
    assert got[0].subject == f"{prefix}.0" and got[0].data == b"m0" and got[0].headers is None
    assert got[1].headers == {"n": ["1"]}
    assert all(0 < m.time_us for m in got) and [m.time_us for m in got] == sorted(m.time_us for m in got)

    part = list(fetch_range(conn, name, 5, 15, direct=direct, window=4))
    assert [m.seq for m in part] == [5, 6, 7, 8, 9, 11, 12, 13, 14]

    # a sparse filter, a dense one, a wildcard; starting on a deleted sequence
    one = list(fetch_range(conn, name, 10, 301, subject=f"{prefix}.1", direct=direct, window=16))
    assert [m.seq for m in one] == list(range(11, 301, 3))
    star = list(fetch_range(conn, name, 1, 101, subject=f"{prefix}.*", direct=direct, window=16))
    assert [m.seq for m in star] == [s for s in range(1, 101) if s != 10]
    assert list(fetch_range(conn, name, 301, 400, direct=direct)) == []
    assert list(fetch_range(conn, name, 5, 5, direct=direct)) == []


def test_fetch_sparse_filter(conn):
    _create(conn, "SPARSE", ["sp.>"], allow_direct=True)
    _publish(conn, 200, lambda i: "sp.hit" if i % 50 == 0 else "sp.miss")
    got = list(fetch_range(conn, "SPARSE", 1, 201, subject="sp.hit"))
    assert [m.seq for m in got] == [1, 51, 101, 151]
    got = list(fetch_range(conn, "SPARSE", 2, 151, subject="sp.hit", direct=False))
    assert [m.seq for m in got] == [51, 101]


def test_read_messages_detects_data_loss(js_server, conn):
    _create(conn, "LOSS", ["loss.>"], allow_direct=True)
    _publish(conn, 20, lambda i: "loss.x")
    js_request(conn, "STREAM.PURGE.LOSS", {"seq": 6})  # removes 1..5
    from natserver.spark._options import parse_read_options

    o = parse_read_options({"servers": js_server.url, "stream": "LOSS"}, streaming=False)
    with pytest.raises(DataLossError, match="lost sequences 1..5"):
        list(read_messages(o.conn, "LOSS", 1, 21, subject=None, direct=True, fail_on_data_loss=True, fetch_batch=8))
    got = list(read_messages(o.conn, "LOSS", 1, 21, subject=None, direct=True, fail_on_data_loss=False, fetch_batch=8))
    assert [m.seq for m in got] == list(range(6, 21))
    with pytest.raises(DataLossError, match="deleted and created again"):
        list(read_messages(o.conn, "LOSS", 6, 40, subject=None, direct=True, fail_on_data_loss=True, fetch_batch=8))


def test_publisher_acks_duplicates_and_errors(conn):
    _create(conn, "PUBS", ["pubs.>"])
    pub = _publish(conn, 50, lambda i: "pubs.a", id_of=lambda i: f"id-{i % 30}")
    assert (pub.published, pub.duplicates) == (50, 20)
    assert stream_bounds(stream_info(conn, "PUBS")) == (1, 30)

    with pytest.raises(PublishError, match="no stream captures subject 'nowhere.x'"):
        _publish(conn, 1, lambda i: "nowhere.x")
    other = Connection(conn.url, timeout=5)
    try:
        pub = Publisher(other, expected_stream="OTHER")
        pub.publish("pubs.a", b"x")
        with pytest.raises(PublishError, match="refused: expected stream does not match"):
            pub.finish()
    finally:
        other.close()
    big = Publisher(conn)
    with pytest.raises(PublishError, match="over the server's max_payload"):
        big.publish("pubs.a", b"x" * (int(conn.info["max_payload"]) + 1))


def test_jetstream_api_errors(conn):
    with pytest.raises(StreamNotFound) as info:
        stream_info(conn, "MISSING")
    assert "stream 'MISSING'" in str(info.value) and "\n" not in str(info.value)
    _create(conn, "NAMES1", ["names.one"])
    assert stream_names(conn, "names.one") == ["NAMES1"]
    assert stream_names(conn, "names.none") == []


def test_jetstream_not_enabled():
    with JetStreamServer(jetstream=False) as server, Connection(server.url, timeout=5) as c:
        with pytest.raises(JetStreamNotEnabled, match="JetStream is not enabled"):
            stream_info(c, "S")


def test_user_password_auth(tmp_path):
    server = JetStreamServer(extra_args=["--user", "alice", "--pass", "s3cret"])
    with server:
        with pytest.raises(ConnectError, match="Authorization Violation"):
            Connection(server.url, timeout=5)
        with Connection(server.url, Auth(user="alice", password="s3cret"), timeout=5) as c:
            assert js_request(c, "INFO")["type"].endswith("account_info_response")
        with Connection(server.url.replace("nats://", "nats://alice:s3cret@"), timeout=5) as c:
            assert c.info["auth_required"]


def test_msg_get_base64_payloads(conn):
    _create(conn, "BIN", ["bin.>"])
    payload = bytes(range(256))
    pub = Publisher(conn)
    pub.publish("bin.x", payload, {"a": "b"})
    pub.finish()
    (m,) = list(fetch_range(conn, "BIN", 1, 2, direct=False))
    assert m.data == payload and m.headers == {"a": ["b"]}
    raw = js_request(conn, "STREAM.MSG.GET.BIN", {"seq": 1})
    assert base64.b64decode(raw["message"]["data"]) == payload



def test_nkey_auth(tmp_path):
    from natserver.auth import nkeys as _nkeys

    user = _nkeys.create_user()
    conf = tmp_path / "nkey.conf"
    conf.write_text(f'authorization {{ users: [{{ nkey: "{user.public_key.decode()}" }}] }}\n')
    with JetStreamServer(extra_args=["-c", str(conf)]) as server:
        with pytest.raises(ConnectError, match="Authorization Violation"):
            Connection(server.url, timeout=5)
        with Connection(server.url, Auth(nkey_seed=user.seed.decode()), timeout=5) as c:
            assert js_request(c, "INFO")["type"].endswith("account_info_response")


def _tls_files(directory):
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def name(cn):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def build(subject, issuer, key, signer, ca):
        b = (x509.CertificateBuilder().subject_name(name(subject)).issuer_name(name(issuer))
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
             # Key identifiers: Python 3.13's default context (VERIFY_X509_STRICT) requires them.
             .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
             .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()),
                            critical=False))
        if ca:
            b = b.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                              content_commitment=False, key_encipherment=False,
                                              data_encipherment=False, key_agreement=False,
                                              encipher_only=False, decipher_only=False), critical=True)
        if not ca:
            b = b.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                critical=False)
        return b.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = build("Spark Test CA", "Spark Test CA", ca_key, ca_key, True)
    leaf = build("127.0.0.1", "Spark Test CA", key, ca_key, False)
    paths = {}
    for stem, data in (
        ("ca.pem", ca.public_bytes(serialization.Encoding.PEM)),
        ("server.pem", leaf.public_bytes(serialization.Encoding.PEM)),
        ("server-key.pem", key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption())),
    ):
        (directory / stem).write_bytes(data)
        paths[stem] = str(directory / stem)
    return paths


def test_tls(tmp_path):
    files = _tls_files(tmp_path)
    with JetStreamServer(extra_args=["--tlscert", files["server.pem"], "--tlskey", files["server-key.pem"]]) as server:
        with pytest.raises(ConnectError, match="TLS"):
            Connection(server.url, timeout=5)  # the system CAs do not know ours
        with Connection(server.url, timeout=5, tls_ca_file=files["ca.pem"]) as c:
            _create(c, "TLS", ["tls.>"], allow_direct=True)
            _publish(c, 5, lambda i: "tls.x")
            assert [m.seq for m in fetch_range(c, "TLS", 1, 6)] == [1, 2, 3, 4, 5]
        url = server.url.replace("nats://", "tls://")
        o = parse_read_options({"servers": url, "stream": "TLS", "tlsCaFile": files["ca.pem"]}, streaming=False)
        got = list(read_messages(o.conn, "TLS", 1, 6, subject=None, direct=True, fail_on_data_loss=True, fetch_batch=2))
        assert len(got) == 5


# -- the data source classes, without a JVM (pyspark installed, Spark not started) ----------------


def test_stream_reader_offsets_without_spark(monkeypatch):
    pytest.importorskip("pyspark")
    import pickle

    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    from natserver.spark.datasource import NatsStreamReader, _Target, read_schema

    bounds = {"now": (1, 100)}
    opts = parse_read_options({"stream": "S", "startingOffsets": "earliest", "maxMessagesPerTrigger": "40",
                               "minPartitions": "2"}, streaming=True)
    reader = NatsStreamReader(opts, _Target("S", True), read_schema(False))
    monkeypatch.setattr(reader, "_bounds", lambda: bounds["now"])

    assert reader.initialOffset() == {"stream": "S", "seq": 1}
    assert reader.getDefaultReadLimit() == ReadMaxRows(40)
    assert reader.latestOffset({"stream": "S", "seq": 1}, ReadMaxRows(40)) == {"stream": "S", "seq": 41}
    assert reader.latestOffset({"stream": "S", "seq": 81}, ReadMaxRows(40)) == {"stream": "S", "seq": 101}
    assert reader.latestOffset({"stream": "S", "seq": 1}, ReadAllAvailable()) == {"stream": "S", "seq": 101}
    assert reader.latestOffset({"stream": "S", "seq": 101}, ReadAllAvailable()) == {"stream": "S", "seq": 101}
    parts = reader.partitions({"stream": "S", "seq": 1}, {"stream": "S", "seq": 41})
    assert [(p.start, p.end) for p in parts] == [(1, 21), (21, 41)]
    assert reader.partitions({"stream": "S", "seq": 41}, {"stream": "S", "seq": 41}) == []
    # the same offsets always give the same partitions (a replayed batch reads the same messages)
    bounds["now"] = (1, 500)
    assert [(p.start, p.end) for p in reader.partitions({"stream": "S", "seq": 1}, {"stream": "S", "seq": 41})] == [
        (1, 21), (21, 41)]
    # Trigger.AvailableNow: nothing past the last message when it started
    reader.prepareForTriggerAvailableNow()
    bounds["now"] = (1, 900)
    assert reader.latestOffset({"stream": "S", "seq": 481}, ReadMaxRows(40)) == {"stream": "S", "seq": 501}
    assert reader.latestOffset({"stream": "S", "seq": 501}, ReadMaxRows(40)) == {"stream": "S", "seq": 501}
    assert reader.reportLatestOffset() == {"stream": "S", "seq": 901}
    # data loss seen on the driver
    bounds["now"] = (600, 900)
    with pytest.raises(DataLossError, match="lost sequences 501..599"):
        reader.latestOffset({"stream": "S", "seq": 501}, ReadAllAvailable())
    with pytest.raises(OptionError, match="checkpoint holds offsets of stream 'T'"):
        reader.latestOffset({"stream": "T", "seq": 1}, ReadAllAvailable())
    # the reader goes to executors pickled, without its driver connection
    reader._conn = object()
    clone = pickle.loads(pickle.dumps(NatsStreamReader(opts, _Target("S", True), read_schema(True))))
    assert clone.include_headers and clone._conn is None


def test_stream_reader_ending_offsets(monkeypatch):
    pytest.importorskip("pyspark")
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from natserver.spark.datasource import NatsStreamReader, _Target, read_schema

    opts = parse_read_options({"stream": "S", "startingOffsets": "10", "endingOffsets": "50"}, streaming=True)
    reader = NatsStreamReader(opts, _Target("S", False), read_schema(False))
    monkeypatch.setattr(reader, "_bounds", lambda: (1, 100))
    assert reader.initialOffset() == {"stream": "S", "seq": 10}
    assert reader.latestOffset({"stream": "S", "seq": 10}, ReadAllAvailable()) == {"stream": "S", "seq": 50}
    assert reader.latestOffset({"stream": "S", "seq": 50}, ReadAllAvailable()) == {"stream": "S", "seq": 50}


def test_sink_plan_checks_the_dataframe():
    pytest.importorskip("pyspark")
    from pyspark.sql import types as T

    from natserver.spark.datasource import plan_rows

    S, B, L, I = T.StringType(), T.BinaryType(), T.LongType(), T.IntegerType()  # noqa: E741 (Spark type letters)

    def plan(columns, **options):
        schema = T.StructType([T.StructField(name, dtype) for name, dtype in columns])
        return plan_rows(schema, parse_write_options(options))

    p = plan([("subject", S), ("data", B), ("headers", T.MapType(S, T.ArrayType(S))), ("msg_id", S)])
    assert (p.id_mode, p.has_headers, p.columns()) == ("msg_id", True, ["data", "subject", "headers", "msg_id"])
    p = plan([("data", S), ("stream", S), ("seq", L), ("other", I)], subject="out.x")
    assert (p.id_mode, p.subject_option, p.columns()) == ("stream_seq", "out.x", ["data", "stream", "seq"])
    assert plan([("subject", S), ("data", B)]).id_mode == "none"
    for columns, message in [
        ([("subject", S)], "no column 'data'"),
        ([("subject", S), ("data", I)], "column 'data' must be binary or string, not int"),
        ([("data", B)], "no column 'subject' and option 'subject' is not set"),
        ([("subject", I), ("data", B)], "column 'subject' must be a string"),
        ([("subject", S), ("data", B), ("headers", T.MapType(S, I))], "column 'headers' must be map<string,string>"),
        ([("subject", S), ("data", B), ("msg_id", T.ArrayType(S))], "column 'msg_id' must be a string"),
    ]:
        with pytest.raises(OptionError, match=message):
            plan(columns)


def test_error_line_finds_our_message_in_spark_text():
    from natserver.spark import error_line

    spark_text = (
        "[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: Traceback (most recent call last):\n"
        '  File "x.py", line 1, in schema\n'
        "natserver.spark._errors.StreamNotFound: nats: stream 'NOPE' not found on nats://127.0.0.1:4222\n"
        " SQLSTATE: 38000"
    )
    assert error_line(RuntimeError(spark_text)) == "nats: stream 'NOPE' not found on nats://127.0.0.1:4222"
    assert error_line(StreamNotFound("gone")) == "nats: gone"
    assert error_line(RuntimeError("something else")) is None


def test_credentials_file(tmp_path):
    from natserver.auth.jwt import OperatorTree, creds

    tree = OperatorTree()
    tree.account("A")
    operator_file = tmp_path / "op.jwt"
    operator_file.write_text(tree.operator_jwt)
    conf = tmp_path / "op.conf"
    conf.write_text(tree.config(str(operator_file)))
    token, key = tree.user("A", "spark")
    good = tmp_path / "spark.creds"
    good.write_text(creds(token, key.seed))
    stranger_tree = OperatorTree("OTHER")
    stranger_tree.account("X")
    stranger = tmp_path / "stranger.creds"
    s_token, s_key = stranger_tree.user("X", "who")
    stranger.write_text(creds(s_token, s_key.seed))
    # core NATS only: nats-server's JetStream would need a system account in operator mode
    with JetStreamServer(extra_args=["-c", str(conf)], jetstream=False) as server:
        with Connection(server.url, Auth(credentials=str(good)), timeout=5) as c:
            pub = Publisher(c, acks=False)
            pub.publish("any.subject", b"signed in with a .creds file")
            pub.finish()
            assert pub.published == 1
        with pytest.raises(ConnectError, match="Authorization Violation"):
            Connection(server.url, Auth(credentials=str(stranger)), timeout=5)


def test_register_without_pyspark_names_the_extra_and_a_command_that_works(monkeypatch):
    """Issue 30 item 20: no bare ModuleNotFoundError; the message names the spark extra and
    the install commands that work for a package that is not on PyPI."""
    import sys

    import natserver.spark as spark_pkg

    # importing pyspark (and any of its modules an earlier test loaded) now fails, as when it is missing
    for name in [name for name in sys.modules if name == "pyspark" or name.startswith("pyspark.")] + ["pyspark"]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "natserver.spark.datasource", raising=False)
    monkeypatch.delattr(spark_pkg, "datasource", raising=False)
    for call in (lambda: spark_pkg.register(object()), lambda: spark_pkg.NatsDataSource):
        with pytest.raises(ModuleNotFoundError) as info:
            call()
        text = str(info.value)
        assert "'spark' extra" in text and "pip install -e '.[spark]'" in text and "not on PyPI" in text
        assert "pip install 'pyspark[sql]>=4.2'" in text and "natserver[spark]" not in text
