"""Streaming settings: StanOptions defaults, the ``streaming {}`` block and the command line
flags of nats-streaming-server (natserver/_cli.py, natserver/_config.py hooks)."""

from __future__ import annotations

import pytest

from natserver.config.flags import UsageError, build_options, parse_args
from natserver.config.mapping import ConfigFileError, options_from_file
from natserver.config.stan import StanConfigError
from natserver.stan import ChannelLimits, StanOptions


def test_defaults_are_nats_streaming_servers():
    o = StanOptions()
    assert (o.cluster_id, o.store, o.max_channels) == ("test-cluster", "memory", 100)
    assert o.limits == ChannelLimits(max_msgs=1_000_000, max_bytes=1_024_000_000, max_age=0.0, max_subs=1000,
                                     max_inactivity=0.0)
    assert (o.hb_interval, o.hb_timeout, o.hb_fail_count) == (30.0, 10.0, 10)


def test_flags():
    given = parse_args(["-p", "-1", "-cid", "prod", "--store", "FILE", "--dir", "/tmp/x", "-mc", "5", "-msu", "7",
                        "-mm", "1000", "-mb", "1MB", "-ma", "1h", "--hb_i", "5s", "--hb_t", "2s", "--hb_f", "3",
                        "-SDV"])
    options = build_options(given)
    stan = options.stan
    assert (stan.cluster_id, stan.store, stan.dir, stan.max_channels) == ("prod", "file", "/tmp/x", 5)
    assert (stan.limits.max_subs, stan.limits.max_msgs, stan.limits.max_bytes, stan.limits.max_age) == (
        7, 1000, 1024 * 1024, 3600.0)
    assert (stan.hb_interval, stan.hb_timeout, stan.hb_fail_count, stan.debug, stan.trace) == (5.0, 2.0, 3, True, True)


def test_stan_flag_alone_and_off():
    assert build_options(parse_args(["--stan"])).stan == StanOptions()
    assert build_options(parse_args([])).stan is None
    assert build_options(parse_args(["--stan=false"])).stan is None


def test_file_store_needs_dir():
    with pytest.raises(UsageError, match="directory must be specified"):
        build_options(parse_args(["--stan", "--store", "file"]))
    with pytest.raises(UsageError, match="unsupported store type 'sql'"):
        build_options(parse_args(["--stan", "--store", "sql"]))


def test_streaming_block(tmp_path):
    conf = tmp_path / "s.conf"
    conf.write_text("""
port: -1
streaming {
  cluster_id: "my-cluster"
  store: "file"
  dir: "%s"
  hb_interval: "10s"
  sd: true
  store_limits {
    max_channels: 10
    max_msgs: 500
    max_bytes: 10MB
    max_age: "2h"
    channels {
      "orders.>": {max_msgs: 0}
      "audit": {max_msgs: 50, max_age: "1m"}
    }
  }
}
""" % (tmp_path / "data"))
    options = options_from_file(str(conf))
    stan = options.stan
    assert (stan.cluster_id, stan.store, stan.hb_interval, stan.debug, stan.max_channels) == (
        "my-cluster", "file", 10.0, True, 10)
    assert (stan.limits.max_msgs, stan.limits.max_bytes, stan.limits.max_age) == (500, 10 * 1024 * 1024, 7200.0)
    audit = stan.limits_for("audit")
    assert (audit.max_msgs, audit.max_age, audit.max_bytes) == (50, 60.0, 10 * 1024 * 1024)
    assert stan.limits_for("other") is stan.limits
    orders = stan.limits_for("orders.eu")  # the wildcard entry: zeros inherit
    assert (orders.max_msgs, orders.max_age) == (500, 7200.0)
    # flags override the block
    given = parse_args(["-c", str(conf), "-cid", "flagged"])
    assert build_options(given).stan.cluster_id == "flagged"


def test_wildcard_channel_limits():
    o = StanOptions(channels={"a.>": ChannelLimits(10, 0, 0.0, 0, 0.0), "a.*.c": ChannelLimits(20, 0, 5.0, 0, 0.0),
                              "a.b.c": ChannelLimits(0, 7, 0.0, 0, 0.0)})
    assert (o.limits_for("a.x").max_msgs, o.limits_for("a.x").max_bytes) == (10, o.limits.max_bytes)
    abc = o.limits_for("a.b.c")
    assert (abc.max_msgs, abc.max_bytes, abc.max_age) == (20, 7, 5.0)
    assert o.limits_for("a") is o.limits
    assert o.limits_for("b.c") is o.limits


def test_streaming_block_errors(tmp_path):
    conf = tmp_path / "bad.conf"
    conf.write_text('streaming { cluster_id: "x", bogus: 1 }\n')
    with pytest.raises(ConfigFileError, match='streaming: unknown field "bogus"'):
        options_from_file(str(conf))
    conf.write_text('streaming { ft_group: "g" }\n')
    with pytest.raises(ConfigFileError, match="not supported by natserver"):
        options_from_file(str(conf))


def test_validation():
    with pytest.raises(StanConfigError, match="invalid cluster name"):
        StanOptions(cluster_id="a b").validate()
    with pytest.raises(StanConfigError, match="max_msgs can't be negative"):
        StanOptions(limits=ChannelLimits(max_msgs=-1)).validate()
    options = StanOptions.from_config({"file_options": {"buffer_size": 1}})
    assert options.warnings == ['Streaming option "file_options" is not supported by natserver and is ignored']


def test_reload_refuses_a_changed_streaming_block(tmp_path):
    import types

    from natserver.server.signals import ReloadError, reload_options

    conf = tmp_path / "r.conf"
    conf.write_text('port: 4999\nstreaming { cluster_id: "one" }\n')
    server = types.SimpleNamespace(options=build_options(parse_args(["-c", str(conf)])), command_line=None, port=4999)
    assert reload_options(server).stan.cluster_id == "one"  # unchanged: fine
    conf.write_text('port: 4999\nstreaming { cluster_id: "two" }\n')
    with pytest.raises(ReloadError, match="config reload not supported for Streaming: old=one/memory, new=two/memory"):
        reload_options(server)


def test_stan_config_file_and_max_inactivity_flag(tmp_path):
    sc = tmp_path / "stan.conf"
    sc.write_text('id: "from-file"\nstore_limits { max_msgs: 7 }\n')
    stan = build_options(parse_args(["-sc", str(sc), "-mi", "10m"])).stan
    assert (stan.cluster_id, stan.limits.max_msgs, stan.limits.max_inactivity) == ("from-file", 7, 600.0)
    sc.write_text('streaming { cluster_id: "block" }\n')
    assert build_options(parse_args(["-sc", str(sc)])).stan.cluster_id == "block"
    with pytest.raises(UsageError, match="streaming configuration file"):
        build_options(parse_args(["-sc", str(tmp_path / "missing.conf")]))
