"""``compression`` of routes and leaf nodes: parsing and checking as nats-server 2.15.1
(opts.go parseCompression, server.go validateAndNormalizeCompressionOption), and the choices
of the negotiation (selectCompressionMode, selectS2AutoModeBasedOnRTT). The texts were taken
from 2.15.1 (``nats-server -t`` and a start), which is asked again when it is installed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from natserver.config import compression
from natserver.config.compression import CompressionOpts
from natserver.protocol.gotext import parse_duration
from tests import reference

MS = 0.001
DEFAULT = compression.DEFAULT_RTT_THRESHOLDS


# leafnode_test.go TestLeafNodeCompressionOptions (its "on" is s2_auto; -10ms is taken as 0)
@pytest.mark.parametrize("value, mode, rtts", [
    (True, "s2_auto", DEFAULT), ("enabled", "s2_auto", DEFAULT), ("EnaBled", "s2_auto", DEFAULT),
    ("ON", "s2_auto", DEFAULT), ("Fast", "s2_fast", ()), ("s2_Fast", "s2_fast", ()), (False, "off", ()),
    ("DisableD", "off", ()), ("OFF", "off", ()), ("Better", "s2_better", ()), ("S2_BETTER", "s2_better", ()),
    ("BEST", "s2_best", ()), ("auto", "s2_auto", DEFAULT), ("accept", "accept", ()),
    ("not_supported", "not supported", ()),
    ({"mode": "auto", "rtt_thresholds": ["1ms"]}, "s2_auto", (1 * MS,)),
    ({"Mode": "Auto", "thresholds": ["1ms", "2ms"]}, "s2_auto", (1 * MS, 2 * MS)),
    ({"mode": "s2_AUTO", "thresholds": ["1ms", "2ms", "3ms", "4ms"]}, "s2_auto", (1 * MS, 2 * MS, 3 * MS, 4 * MS)),
    ({"mode": "s2_auto", "thresholds": ["-10ms", "5ms", "10ms"]}, "s2_auto", (0, 5 * MS, 10 * MS)),
    ({"mode": "s2_auto", "thresholds": ["5ms", "10ms", "0s", "20ms"]}, "s2_auto", (5 * MS, 10 * MS, 0, 20 * MS)),
    ({"mode": "s2_auto", "thresholds": ["0s", "0s", "0s", "20ms"]}, "s2_auto", (0, 0, 0, 20 * MS)),
    ({"mode": "s2_auto", "rtt_thresholds": ["0s", "10ms", "0s", "0s"]}, "s2_auto", (0, 10 * MS)),
])  # fmt: skip
def test_leaf_modes_normalized_as_nats_server(value, mode, rtts):
    got = compression.normalize(compression.parse(value, compression.LEAF_ON, parse_duration), compression.LEAF_ON)
    assert got == CompressionOpts(mode, rtts)


def test_s2_uncompressed_is_not_a_mode_one_configures():
    """Only s2_auto picks it (validateAndNormalizeCompressionOption does not know it)."""
    from natserver.config.options import Options

    with pytest.raises(ValueError, match='^unsupported compression mode "s2_uncompressed"$'):
        Options(cluster_compression=CompressionOpts("s2_uncompressed")).validate()


def test_on_means_s2_fast_for_routes():
    assert compression.normalize(CompressionOpts("on"), compression.ROUTE_ON) == CompressionOpts("s2_fast")
    assert compression.normalize(compression.parse(True, compression.ROUTE_ON, parse_duration),
                                 compression.ROUTE_ON) == CompressionOpts("s2_fast")


# server.go selectCompressionMode: (ours, theirs) -> what we write with.
@pytest.mark.parametrize("ours, theirs, expected", [
    ("s2_fast", None, "not supported"), ("s2_fast", "", "not supported"), ("accept", "not supported", "not supported"),
    ("s2_best", "off", "off"), ("accept", "accept", "off"), ("s2_better", "accept", "s2_better"),
    ("accept", "s2_auto", "s2_fast"), ("accept", "s2_best", "s2_best"), ("accept", "s2_uncompressed", "s2_uncompressed"),
    ("s2_fast", "s2_best", "s2_fast"), ("s2_auto", "s2_fast", "s2_auto"),
])  # fmt: skip
def test_select_mode(ours, theirs, expected):
    assert compression.select_mode(ours, theirs) == expected


def test_select_mode_refuses_an_unknown_peer_mode():
    with pytest.raises(ValueError) as caught:
        compression.select_mode("accept", "s2_weird")
    assert str(caught.value) == 'unsupported route compression mode "s2_weird"'


# server.go selectS2AutoModeBasedOnRTT (its comment's examples)
@pytest.mark.parametrize("rtt, thresholds, level", [
    (0.0, DEFAULT, "s2_uncompressed"), (10 * MS, DEFAULT, "s2_uncompressed"), (10.5 * MS, DEFAULT, "s2_fast"),
    (50 * MS, DEFAULT, "s2_fast"), (70 * MS, DEFAULT, "s2_better"), (101 * MS, DEFAULT, "s2_best"),
    (5 * MS, (5 * MS, 10 * MS, 15 * MS, 20 * MS), "s2_uncompressed"), (7 * MS, (5 * MS, 10 * MS, 15 * MS, 20 * MS), "s2_fast"),
    (25 * MS, (5 * MS, 10 * MS, 15 * MS, 20 * MS), "s2_best"),
    (10 * MS, (0, 0, 20 * MS), "s2_better"), (25 * MS, (0, 0, 20 * MS), "s2_best"),
    (25 * MS, (10 * MS,), "s2_uncompressed"), (25 * MS, (10 * MS, 20 * MS), "s2_fast"),
])  # fmt: skip
def test_s2_auto_level_from_the_rtt(rtt, thresholds, level):
    assert compression.select_auto_by_rtt(rtt, thresholds) == level


def test_mode_for_info_says_s2_auto():
    assert compression.mode_for_info(CompressionOpts("s2_auto", DEFAULT), "s2_uncompressed") == "s2_auto"
    assert compression.mode_for_info(CompressionOpts("accept"), "s2_best") == "s2_best"


def test_defaults():
    from natserver.config.options import Options

    options = Options()
    assert options.cluster_compression == CompressionOpts("accept")
    assert options.leafnode_compression == CompressionOpts("s2_auto", DEFAULT)


# (config, what `-t` says: nats-server's text, "" when the file is valid; what a start says)
CASES = [
    ("cluster {\n  port: -1\n  compression: {\n    mode: s2_auto\n    rtt_thresholds: 123\n  }\n}",
     "{path}:6:5: interface conversion: interface {{}} is int64, not []interface {{}}", None),
    ("cluster {\n  port: -1\n  compression: {\n    mode: s2_auto\n    rtt_thresholds: [abc]\n  }\n}",
     '{path}:6:5: time: invalid duration "abc"', None),
    ("leafnodes {\n  port: -1\n  compression: {\n    mode: s2_auto\n    foo: 1\n  }\n}",
     '{path}:6:5: unknown field "foo"', None),
    ("leafnodes {\n  port: -1\n  compression: 3\n}",
     '{path}:4:3: field "compression" should be a boolean or a structure, got int64', None),
    ("cluster {\n  port: -1\n  compression: bogus\n}", "", 'unsupported compression mode "bogus"'),
    ('leafnodes {\n  remotes [ { url: "nats://127.0.0.1:1", compression: { mode: auto, rtt: [2ms, 1ms] } } ]\n}', "",
     "RTT threshold values [2ms 1ms] should be in ascending order"),
]


@pytest.mark.parametrize("server", ["natserver", "nats-server"])
@pytest.mark.parametrize("conf, check_error, start_error", CASES)
def test_errors_as_nats_server(tmp_path, server, conf, check_error, start_error):
    if server == "nats-server":
        if reference.NATS_SERVER is None:
            pytest.skip("nats-server 2.15.1 not installed")
        command = [reference.NATS_SERVER]
    else:
        command = [sys.executable, "-m", "natserver"]
    path = tmp_path / "c.conf"
    path.write_text(f"port: -1\n{conf}\n")
    check = subprocess.run([*command, "-t", "-c", str(path)], capture_output=True, text=True, timeout=30)
    if check_error:
        assert check.returncode != 0
        assert check.stderr.splitlines()[0].split(": ", 1)[1] == check_error.format(path=path)
        return
    assert check.returncode == 0, check.stderr
    start = subprocess.run([*command, "-c", str(path)], capture_output=True, text=True, timeout=30)
    assert start.returncode != 0
    assert start.stderr.strip().splitlines()[-1].split(": ", 1)[1] == start_error
