"""Config file keys -> natserver.Options, as nats-server v2.9.10 maps them (server/opts.go).

In-process (natserver.config.mapping and natserver.cli.main) except the last tests, which compare
``-t`` output with the real nats-server binary when it is installed.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from natserver import Options
from natserver.cli import main
from natserver.config.conf import ConfigError, config_digest, parse_file
from natserver.config.mapping import (
    ConfigFileError,
    go_duration,
    options_from_dict,
    options_from_file,
    unsupported_warnings,
)
from natserver.protocol import const
from natserver.testing import NatsServer
from tests import reference

REPO = Path(__file__).resolve().parents[2]
NATS_SERVER = reference.NATS_SERVER  # nats-server 2.15.1 (tests/reference.py)


def write(tmp_path: Path, text: str, name: str = "server.conf") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def load(tmp_path: Path, text: str) -> Options:
    return options_from_file(write(tmp_path, text))


# -- each key ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("port: 4333", {"port": 4333}),
        ("port: -1", {"port": -1}),
        ("port: 0", {"port": const.DEFAULT_PORT}),  # 0 means unset (setBaselineOptions)
        ("host: 127.0.0.1", {"host": "127.0.0.1"}),
        ("net: 127.0.0.2", {"host": "127.0.0.2"}),
        ('listen: "127.0.0.1:4444"', {"host": "127.0.0.1", "port": 4444}),
        ("listen: 127.0.0.1:-1", {"host": "127.0.0.1", "port": -1}),
        ('listen: "[::1]:4555"', {"host": "::1", "port": 4555}),
        ("listen: 4666", {"host": const.DEFAULT_HOST, "port": 4666}),
        ("server_name: alpha", {"server_name": "alpha"}),
        ("max_payload: 2MB", {"max_payload": 2 * 1024 * 1024}),
        ("max_payload: 65536", {"max_payload": 65536}),
        ("max_control_line: 8k", {"max_control_line": 8000}),
        ("max_pending: 128MB", {"max_pending": 128 * 1024 * 1024}),
        ("max_connections: 10", {"max_connections": 10}),
        ("max_conn: 11", {"max_connections": 11}),
        ("max_connections: 0", {"max_connections": const.DEFAULT_MAX_CONNECTIONS}),
        ("max_subscriptions: 12", {"max_subscriptions": 12}),
        ("max_subs: 13", {"max_subscriptions": 13}),
        ('ping_interval: "30s"', {"ping_interval": 30.0}),
        ('ping_interval: "1m30s"', {"ping_interval": 90.0}),
        ("ping_max: 5", {"ping_max": 5}),
        ('write_deadline: "2.5s"', {"write_deadline": 2.5}),
        ('lame_duck_duration: "45s"', {"lame_duck_duration": 45.0}),
        ('lame_duck_grace_period: "3s"', {"lame_duck_grace_period": 3.0}),
        ("debug: true", {"debug": True}),
        ("trace: true", {"trace": True}),
        ("trace_verbose: true", {"trace": True}),
        ("logtime: false", {"logtime": False}),
        ("log_file: /tmp/x.log", {"log_file": "/tmp/x.log"}),
        ("logfile: /tmp/y.log", {"log_file": "/tmp/y.log"}),
        ("pid_file: /tmp/x.pid", {"pid_file": "/tmp/x.pid"}),
        ("pidfile: /tmp/y.pid", {"pid_file": "/tmp/y.pid"}),
        ("ports_file_dir: /tmp", {"ports_file_dir": "/tmp"}),
        ("no_header_support: true", {"headers": False}),
        ("max_closed_clients: 5", {"max_closed_clients": 5}),
        ('busy_poll: "250us"', {"busy_poll": 250e-6}),
        ('busy_poll: "0s"', {"busy_poll": 0.0}),
        ("http: 8333", {"http_port": 8333, "http_host": ""}),
        ('http: "127.0.0.1:-1"', {"http_port": -1, "http_host": "127.0.0.1"}),
        ("http_port: -1", {"http_port": -1}),
        ("monitor_port: 8444", {"http_port": 8444}),
        ("authorization { user: alice, password: s3cret }", {"username": "alice", "password": "s3cret"}),
        ("authorization { username: bob, pass: pw }", {"username": "bob", "password": "pw"}),
        ("authorization { token: t0k, timeout: 3 }", {"authorization": "t0k", "auth_timeout": 3.0}),
        ("authorization { token: t0k, timeout: 0.5 }", {"auth_timeout": 0.5}),
        # auth.go: a timeout that is not a number counts as 1 second.
        ('authorization { token: t0k, timeout: "3s" }', {"auth_timeout": 1.0}),
        ("authorization { token: t0k }", {"auth_timeout": const.DEFAULT_AUTH_TIMEOUT}),
        ("PORT: 4777\nMax_Payload: 1k", {"port": 4777, "max_payload": 1000}),  # keys ignore case
    ],
)
def test_key_maps_to_option(tmp_path, text, expected):
    options = load(tmp_path, text)
    for field, value in expected.items():
        assert getattr(options, field) == value, field
    assert options.config_file == str(tmp_path / "server.conf")


def test_defaults_when_the_file_sets_nothing(tmp_path):
    options = load(tmp_path, "# nothing\n")
    assert options.config_digest.startswith("sha256:")
    assert options.copy(config_file="", config_digest="") == Options()


def test_ping_interval_in_seconds_is_a_warning(tmp_path):
    # opts.go parseDuration: a number of seconds still works, with a warning that makes
    # -t and reloads fail but lets the server start.
    path = write(tmp_path, "port: 4333\nping_interval: 5\n")
    with pytest.raises(ConfigFileError) as info:
        options_from_file(path)
    assert info.value.errors == []
    assert info.value.warnings == [
        f'{path}:2:1: invalid use of field "ping_interval": ping_interval should be converted to a duration'
    ]
    assert info.value.options.ping_interval == 5.0
    assert info.value.options.port == 4333


def test_harmless_unsupported_keys_are_kept_with_a_warning(tmp_path):
    options = load(
        tmp_path,
        """
        port: 4333
        jetstream { store_dir: /tmp/js, unique_tag: " AZ: ", max_outstanding_catchup: 5 }
        connect_error_reports: 5
        syslog: true
        authorization { user: a, password: b, permissions { publish: "x" } }
        """,
    )
    assert options.port == 4333
    assert (options.jetstream, options.store_dir) == (True, "/tmp/js")
    assert options.jetstream_unique_tag == "az:"  # (opts.go: lower-cased and trimmed, acted on)
    # As nats-server, permissions in authorization {} are the users array's defaults: a single
    # user gets none (tests/auth/test_auth.py checks the server against nats-server); a warning says so.
    assert (options.username, options.password, options.users) == ("a", "b", [])
    warnings = unsupported_warnings(options)
    assert sorted(warnings) == sorted([
        'Config option "syslog" is not supported by natserver and is ignored',
        'JetStream option "max_outstanding_catchup" is not supported by natserver and is ignored',
        "authorization permissions apply to the users array only: the single user has no permissions",
    ])  # connect_error_reports: nats-server does not act on it on one server either


@pytest.mark.parametrize("line, key, what", [
    ("mqtt { port: 1883 }", "mqtt", "MQTT listener"),
    ("gateway { name: g }", "gateway", "gateway listener"),
    ("https: 8443", "https", "HTTPS monitoring listener"),
    ("ocsp: false", "ocsp", "OCSP stapling"),
])  # fmt: skip
def test_keys_whose_absence_would_mislead_refuse_the_file(tmp_path, line, key, what):
    path = write(tmp_path, f"port: 4333\n{line}\n")
    with pytest.raises(ConfigFileError) as info:
        options_from_file(path)
    assert f'"{key}" ({what}) is not supported by natserver: refusing to run without it' in str(info.value)
    assert str(info.value).startswith(f"{path}:2:")


def test_dash_t_names_ignored_keys_and_fails_on_refused_ones(tmp_path, capsys):
    path = write(tmp_path, "port: 4333\nsyslog: true\njetstream { limits { max_ha_assets: 1 } }\n")
    assert main(["-t", "-c", path]) == 0
    err = capsys.readouterr().err
    assert 'natserver: warning: Config option "syslog" is not supported by natserver and is ignored' in err
    assert 'natserver: warning: JetStream option "limits" is not supported by natserver and is ignored' in err
    assert re.search(f"natserver: configuration file {re.escape(str(path))} is valid \\(sha256:[0-9a-f]{{64}}\\)\n$", err)
    path = write(tmp_path, "port: 4333\nmqtt { port: 1883 }\n")
    assert main(["-t", "-c", path]) == 1
    assert capsys.readouterr().err == (
        f'natserver: {path}:2:1: "mqtt" (MQTT listener) is not supported by natserver: refusing to run '
        "without it\n\n")
    # A websocket listener without TLS passes -t, as in nats-server (starting it fails:
    # tests/websocket/test_websocket.py).
    path = write(tmp_path, "port: 4333\nwebsocket { port: 8080 }\n")
    assert main(["-t", "-c", path]) == 0


@pytest.mark.parametrize("member", ["max_buffered_msgs", "max_ack_pending"])
def test_jetstream_keys_nats_server_2_9_refuses_are_refused(tmp_path, member):
    path = write(tmp_path, f"jetstream {{ {member}: 5 }}\n")
    with pytest.raises(ConfigFileError) as info:
        options_from_file(path)
    assert info.value.errors == [f'{path}:1:12: unknown field "{member}"']  # nats-server -t's answer


# -- errors, as nats-server reports them -------------------------------------------------------


def test_unknown_field_is_an_error_with_position(tmp_path):
    path = write(tmp_path, "port: 4333\nfoo: 1\n  bar { x: 1 }\n")
    with pytest.raises(ConfigFileError) as info:
        options_from_file(path)
    assert info.value.errors == [f'{path}:2:1: unknown field "foo"', f'{path}:3:3: unknown field "bar"']
    # processConfigErr.Error(): one line per error, each ending with a new line.
    assert str(info.value) == f'{path}:2:1: unknown field "foo"\n{path}:3:3: unknown field "bar"\n'


def test_first_line_columns_count_from_zero_like_nats_server(tmp_path):
    path = write(tmp_path, "foo: 1\n")
    with pytest.raises(ConfigFileError) as info:
        options_from_file(path)
    assert info.value.errors == [f'{path}:1:0: unknown field "foo"']


def test_unknown_field_inside_authorization(tmp_path):
    path = write(tmp_path, "authorization {\n  user: a\n  password: b\n  zzz: 1\n}\n")
    with pytest.raises(ConfigFileError) as info:
        options_from_file(path)
    assert info.value.errors == [f'{path}:4:3: unknown field "zzz"']


def test_keys_used_as_variables_are_not_unknown(tmp_path):
    options = load(tmp_path, "MYPORT: 4999\nport: $MYPORT\nauthorization { PW: x, user: a, password: $PW }\n")
    assert options.port == 4999
    assert options.password == "x"


@pytest.mark.parametrize(
    "text, message",
    [
        ('port: "x"', 'error parsing port: expected int64, got string "x"'),
        ("max_payload: 3GB", "max_payload value is too big"),
        ('lame_duck_duration: "10s"', "invalid lame_duck_duration of 10s, minimum is 30 seconds"),
        ('lame_duck_grace_period: "-1s"', "invalid lame_duck_grace_period, needs to be positive"),
        ('ping_interval: "abc"', 'error parsing ping_interval: time: invalid duration "abc"'),
        ('ping_interval: "5x"', 'error parsing ping_interval: time: unknown unit "x" in duration "5x"'),
        ('listen: "nohost"', 'could not parse address string "nohost"'),
        ('http: "127.0.0.1:abc"', 'could not parse port "abc"'),
        ("authorization { user: a, token: t }", "Cannot have a user/pass and token"),
    ],
)
def test_bad_values(tmp_path, text, message):
    path = write(tmp_path, text + "\n")
    with pytest.raises(ConfigFileError) as info:
        options_from_file(path)
    assert info.value.errors == [f"{path}:1:0: {message}"]


def test_warnings_come_before_errors(tmp_path):
    path = write(tmp_path, 'port: 4999\nping_interval: "abc"\nwrite_deadline: 3\n')
    with pytest.raises(ConfigFileError) as info:
        options_from_file(path)
    assert str(info.value) == (
        f'{path}:3:1: invalid use of field "write_deadline": write_deadline should be converted to a duration\n'
        f'{path}:2:1: error parsing ping_interval: time: invalid duration "abc"\n'
    )


def test_syntax_error_has_file_line_and_column(tmp_path):
    path = write(tmp_path, "port: 4222\nauthorization {\n  user: \"unterminated\n")
    with pytest.raises(ConfigError) as info:
        options_from_file(path)
    assert (info.value.path, info.value.line) == (str(path), 3)
    assert str(info.value).startswith(f"{path}:3:")


def test_missing_file(tmp_path):
    with pytest.raises(ConfigFileError) as info:
        options_from_file(tmp_path / "nope.conf")
    assert str(info.value) == f"open {tmp_path / 'nope.conf'}: no such file or directory\n"


# -- include and variables, end to end ----------------------------------------------------------


def test_include_and_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("NATSERVER_TEST_PORT", "4999")
    (tmp_path / "conf.d").mkdir()
    # As in nats-server, an included file's values are visible after the include (but the
    # included file cannot see the including file's variables).
    write(
        tmp_path,
        """
        limits_payload: 64KB
        SECRET: "pa ss"
        """,
        "conf.d/vars.conf",
    )
    path = write(
        tmp_path,
        """
        port: $NATSERVER_TEST_PORT
        include ./conf.d/vars.conf
        max_payload: $limits_payload
        authorization {
          user: ops
          password: $SECRET
        }
        """,
    )
    options = options_from_file(path)
    assert options.port == 4999
    assert (options.username, options.password) == ("ops", "pa ss")
    assert options.max_payload == 64 * 1024


def test_unknown_field_in_included_file_names_that_file(tmp_path):
    write(tmp_path, "foo: 1\n\n bar: 2\n", "inc.conf")
    path = write(tmp_path, "port: 4999\ninclude ./inc.conf\n")
    with pytest.raises(ConfigFileError) as info:
        options_from_file(path)
    inc = tmp_path / "inc.conf"
    assert info.value.errors == [f'{inc}:1:0: unknown field "foo"', f'{inc}:3:2: unknown field "bar"']


def test_options_from_dict_on_a_base():
    base = Options(host="127.0.0.1", port=-1, quiet=True)
    options = options_from_dict({"max_payload": 1000, "debug": True}, base)
    assert (options.host, options.port, options.quiet) == ("127.0.0.1", -1, True)
    assert (options.max_payload, options.debug) == (1000, True)
    with pytest.raises(ConfigFileError) as info:
        options_from_dict({"nope": 1})
    assert info.value.errors == ['config: unknown field "nope"']


def test_go_duration_format():
    assert [go_duration(s) for s in (0, 0.25, 1.5, 10, 120, 3661, 0.000001)] == [
        "0s", "250ms", "1.5s", "10s", "2m0s", "1h1m1s", "1µs",
    ]  # fmt: skip


# -- -t ------------------------------------------------------------------------------------------


def test_check_config_valid(tmp_path, capsys):
    path = write(tmp_path, "port: 4333\nconnect_error_reports: 3\n")
    assert main(["-c", str(path), "-t"]) == 0
    # 2.10+: the digest of the parsed file (conf/parse.go configDigest), as nats-server prints it.
    digest = config_digest(parse_file(path))
    assert capsys.readouterr().err == f"natserver: configuration file {path} is valid ({digest})\n"


def test_check_config_unknown_field(tmp_path, capsys):
    path = write(tmp_path, "port: 4333\nfoo: 1\n")
    assert main(["-t", "-c", str(path)]) == 1
    assert capsys.readouterr().err == f'natserver: {path}:2:1: unknown field "foo"\n\n'


def test_check_config_fails_on_warnings(tmp_path, capsys):
    path = write(tmp_path, "ping_interval: 5\n")
    assert main(["-t", "-c", str(path)]) == 1
    err = capsys.readouterr().err
    assert err == (
        f'natserver: {path}:1:0: invalid use of field "ping_interval": ping_interval should be converted to a duration\n\n'
    )


def test_check_config_syntax_error(tmp_path, capsys):
    path = write(tmp_path, "port: 4333\nfoo: [1\n")
    assert main(["-t", "-c", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"natserver: {path}:2:") and err.count("\n") == 1


def test_check_config_needs_a_file(capsys):
    assert main(["-t"]) == 1
    assert capsys.readouterr().err == "natserver: must specify [-c, --config] option to check configuration file syntax\n"


def test_check_config_does_not_validate_like_nats_server(tmp_path, capsys):
    # nats-server validates options when it creates the server, after -t has answered.
    path = write(tmp_path, "max_payload: 100MB\nmax_pending: 1MB\n")
    assert main(["-t", "-c", str(path)]) == 0
    capsys.readouterr()
    assert main(["-c", str(path)]) == 1
    assert capsys.readouterr().err == "natserver: max_payload (104857600) cannot be higher than max_pending (1048576)\n"


# -- the same answers as the nats-server binary --------------------------------------------------

CASES = {
    "valid": "port: 4333\nmax_payload: 2MB\nauthorization { user: a, password: b }\n",
    "unknown": "port: 4333\nfoo: 1\n",
    "unknown_first_line": "  foo: 1\n",
    "unknown_nested": "authorization {\n\tuser: a\n\tzzz: 1\n}\n",
    "variable": "MYPORT: 4999\nport: $MYPORT\n",
    "warning": "port: 4333\nping_interval: 5\n",
    "lame_duck": 'lame_duck_duration: "10s"\n',
    "duration": 'port: 1\nping_interval: "5x"\n',
    "unsupported": "connect_error_reports: 3\njetstream: enabled\n",
    "token_and_user": "authorization { user: a, token: t }\n",
}


@pytest.mark.needs_nats_server
@pytest.mark.skipif(NATS_SERVER is None, reason="nats-server is not installed")
@pytest.mark.parametrize("case", sorted(CASES))
def test_check_config_matches_nats_server(tmp_path, case):
    path = write(tmp_path, CASES[case], "t.conf")

    def run(cmd):
        done = subprocess.run(cmd + ["-c", "t.conf", "-t"], cwd=tmp_path, capture_output=True, text=True, timeout=20)
        return done.returncode, done.stdout, done.stderr

    theirs = run([NATS_SERVER])
    ours = run([sys.executable, "-m", "natserver"]) if case in ("valid", "unknown") else None
    if ours is None:  # in-process: same code, no interpreter start-up
        import contextlib
        import io
        import os

        err = io.StringIO()
        cwd = os.getcwd()
        os.chdir(tmp_path)
        try:
            with contextlib.redirect_stderr(err):
                code = main(["-c", "t.conf", "-t"])
        finally:
            os.chdir(cwd)
        ours = (code, "", err.getvalue())
    assert ours[0] == theirs[0]
    assert ours[1] == theirs[1] == ""
    assert ours[2].replace("natserver:", "nats-server:", 1) == theirs[2]
    assert path.exists()


@pytest.mark.parametrize("block, member", [
    ('leafnodes { remotes [ { url: "nats://127.0.0.1:7422", ws_compression: true } ] }', "remotes.ws_compression"),
    ('leafnodes { port: 7422, users: [ {user: a, password: b} ] }', "users"),
])  # fmt: skip
def test_leaf_node_security_natserver_lacks_refuses_the_file(tmp_path, block, member):
    path = write(tmp_path, f"port: 4333\n{block}\n")
    with pytest.raises(ConfigFileError) as info:
        options_from_file(path)
    assert f'"leafnodes {member}" (leaf node security) is not supported by natserver' in str(info.value)


def test_other_leaf_node_options_warn(tmp_path):
    options = load(tmp_path, "leafnodes { port: 7422, advertise: 'x:1' }\n")
    assert options.leafnode_port == 7422
    assert 'Leaf node option "advertise" is not supported by natserver and is ignored' in unsupported_warnings(options)


@pytest.mark.parametrize("block, member", [
    ("cluster { port: 6222, permissions { import: 'a' } }", "cluster permissions"),
    ("cluster { port: 6222, authorization { users: [ {user: a, password: b} ] } }", "cluster authorization users"),
])  # fmt: skip
def test_route_security_natserver_lacks_refuses_the_file(tmp_path, block, member):
    path = write(tmp_path, f"port: 4333\n{block}\n")
    with pytest.raises(ConfigFileError) as info:
        options_from_file(path)
    assert f'"{member}" (route security) is not supported by natserver' in str(info.value)


def test_other_cluster_options_warn(tmp_path):
    options = load(tmp_path, "cluster { port: 6222, name: c, pool_size: 3, advertise: 127.0.0.1:6222 }\n")
    assert options.cluster_port == 6222 and options.cluster_pool_size == 3  # pool_size is acted on
    warnings = unsupported_warnings(options)
    assert 'Cluster option "advertise" is not supported by natserver and is ignored' in warnings
    assert not [w for w in warnings if "pool_size" in w]


def test_config_digest_is_go_json_of_the_values():
    """conf/parse.go configDigest: sha256 of Go's json.Encoder output (keys sorted, HTML
    characters escaped, floats and times in Go's form, a newline); the live -t comparison
    (test_check_config_matches_nats_server) checks the digests of whole files."""
    import hashlib
    from datetime import datetime, timezone

    values = {"b": 2.0, "a": [1e-7, 1e21, 0.5, "<x&y>", True], "t": datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc)}
    text = '{"a":[1e-7,1e+21,0.5,"\\u003cx\\u0026y\\u003e",true],"b":2,"t":"2024-01-02T03:04:05Z"}\n'
    assert config_digest(values) == "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def test_server_tags_are_this_servers_placement_tags(tmp_path):
    """opts.go server_tags: a list of tags or one tag (JetStream placement; in the STATSZ)."""
    assert load(tmp_path, 'server_tags: ["az:1", "ssd"]\n').server_tags == ["az:1", "ssd"]
    assert load(tmp_path, "server_tags: ssd\n").server_tags == ["ssd"]
    assert unsupported_warnings(load(tmp_path, "server_tags: [a]\n")) == []


def test_a_cluster_listen_address_with_port_minus_one_is_a_random_port(tmp_path):
    """opts.go parseCluster takes ``listen`` through parseListen: ``"127.0.0.1:-1"`` (as the
    nats.js test harness writes it) is a random route port."""
    options = load(tmp_path, 'cluster { name: c, listen: "127.0.0.1:-1" }\n')
    assert (options.cluster_host, options.cluster_port) == ("127.0.0.1", -1)
    with NatsServer(options.copy(port=-1)) as server:
        assert server._call(lambda: server.server.cluster.port) > 0
