"""The command line: every flag of nats-server's that natserver lists in its usage, Go flag
syntax, flags over the config file, one-line errors with exit code 1, ``-v``, ``-h`` and
``-sl`` (against a real process found through its pid file).

Mostly in-process (``natserver.cli`` and ``natserver.config.flags``); a few tests run ``python -m natserver``.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from natserver import Options
from natserver.cli import main, send_signal
from natserver.config.flags import USAGE, UsageError, build_options, parse_args
from natserver.config.mapping import unsupported_warnings
from natserver.protocol import const
from natserver.server.files import ports_file_path
from tests import reference

REPO = Path(__file__).resolve().parent.parent
NATS_SERVER = reference.NATS_SERVER  # nats-server 2.15.1 (tests/reference.py)
TIMEOUT = 15.0


def options(*argv: str) -> Options:
    return build_options(parse_args(list(argv)))


# -- each flag ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["-a", "127.0.0.1"], {"host": "127.0.0.1"}),
        (["--addr", "127.0.0.2"], {"host": "127.0.0.2"}),
        (["--net=127.0.0.3"], {"host": "127.0.0.3"}),
        (["-p", "4333"], {"port": 4333}),
        (["-port", "4334"], {"port": 4334}),
        (["--port=4335"], {"port": 4335}),
        (["-p=-1"], {"port": -1}),
        (["-p", "-1"], {"port": -1}),
        (["-p", "0"], {"port": const.DEFAULT_PORT}),
        (["-p", "0x10E1"], {"port": 4321}),  # Go's strconv.ParseInt(s, 0, 64)
        (["-n", "alpha"], {"server_name": "alpha"}),
        (["--name", "beta"], {"server_name": "beta"}),
        (["--server_name", "gamma"], {"server_name": "gamma"}),
        (["-P", "/tmp/a.pid"], {"pid_file": "/tmp/a.pid"}),
        (["--pid", "/tmp/b.pid"], {"pid_file": "/tmp/b.pid"}),
        (["-m", "8333"], {"http_port": 8333, "http_host": const.DEFAULT_HOST}),
        (["-a", "127.0.0.1", "--http_port", "-1"], {"http_port": -1, "http_host": "127.0.0.1"}),
        (["--ports_file_dir", "/tmp"], {"ports_file_dir": "/tmp"}),
        (["-l", "/tmp/n.log"], {"log_file": "/tmp/n.log"}),
        (["--log", "/tmp/m.log"], {"log_file": "/tmp/m.log"}),
        (["-T=false"], {"logtime": False}),
        (["--logtime=0"], {"logtime": False}),
        (["-T"], {"logtime": True}),
        (["-D"], {"debug": True, "trace": False}),
        (["--debug"], {"debug": True}),
        (["-V"], {"trace": True, "debug": False}),
        (["--trace"], {"trace": True}),
        (["-VV"], {"trace": True, "debug": False}),
        (["-DV"], {"debug": True, "trace": True}),
        (["-DVV"], {"debug": True, "trace": True}),
        (["--user", "u", "--pass", "p"], {"username": "u", "password": "p"}),
        (["--auth", "tok"], {"authorization": "tok"}),
        (["--max_payload", "64KB"], {"max_payload": 65536}),
        (["--max_pending", "2MB"], {"max_pending": 2 * 1024 * 1024}),
        (["--max_connections", "7"], {"max_connections": 7}),
        (["--max_control_line", "1k"], {"max_control_line": 1000}),
        (["--lame_duck_duration", "1s", "--lame_duck_grace_period", "200ms"],
         {"lame_duck_duration": 1.0, "lame_duck_grace_period": 0.2}),
        (["--busy_poll", "50us"], {"busy_poll": 50e-6}),
        (["--busy_poll", "0"], {"busy_poll": 0.0}),
        ([], {"busy_poll": None}),  # the binary's default (run_server), off in-process
        ([], {"host": const.DEFAULT_HOST, "port": const.DEFAULT_PORT, "logtime": True, "http_port": 0}),
    ],
)  # fmt: skip
def test_flag_sets_option(argv, expected):
    result = options(*argv)
    for field, value in expected.items():
        assert getattr(result, field) == value, field


def test_go_flag_syntax_forms_are_equivalent():
    forms = [["-p", "5000"], ["-p=5000"], ["--p", "5000"], ["--p=5000"], ["-port", "5000"], ["--port=5000"]]
    assert {options(*form).port for form in forms} == {5000}


def test_last_flag_wins():
    assert options("-p", "1", "-p", "2").port == 2


def test_flags_that_do_not_become_options():
    assert parse_args(["-c", "x.conf", "-t"]) == {"config_file": "x.conf", "check_config": True}
    assert parse_args(["-sl", "reload=1"]) == {"signal": "reload=1"}
    assert parse_args(["--signal=ldm"]) == {"signal": "ldm"}
    assert parse_args(["-h"]) == {"help": True}
    assert parse_args(["--version"]) == {"version": True}
    assert parse_args(["version"]) == {"version": True}  # nats-server's commands
    assert parse_args(["-D", "help"]) == {"debug": True, "help": True}
    assert parse_args(["-D", "--", "version"]) == {"debug": True, "version": True}


def test_unsupported_nats_server_flags_are_accepted_and_reported():
    # (the TLS flags are supported since the security work: tests/auth/test_tls.py; the cluster
    # flags since issue 16: tests/cluster/test_routes.py)
    result = options("--no_advertise", "-js", "--cluster_advertise", "127.0.0.1:6222", "-p", "1")
    assert result.port == 1
    assert result.jetstream is True  # -js is supported
    assert result.cluster_no_advertise is True
    assert result.extra["cli"] == {"cluster_advertise": "127.0.0.1:6222"}
    assert "Command line flag -cluster_advertise is not supported by natserver and is ignored" in unsupported_warnings(
        result
    )


@pytest.mark.parametrize("flag, value", [("--https_port", "8443"), ("-ms", "8443")])
def test_flags_for_listeners_natserver_lacks_are_refused(flag, value, capsys):
    assert main([flag, value, "-p", "-1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"natserver: flag -{flag.lstrip('-')} (") and err.endswith("refusing to run without it\n")


def test_every_flag_in_the_usage_is_parsed():
    names = set()
    for line in USAGE.splitlines():
        for name in re.findall(r"(?:^|[\s,])-{1,2}([A-Za-z_]+)", line):
            names.add(name)
    names -= {"v", "h"}  # handled before everything else
    for name in sorted(names):
        try:
            parse_args([f"-{name}=1"])
        except UsageError as exc:
            assert "not defined" not in str(exc), name


# -- flags override the config file -------------------------------------------------------------


def test_flags_override_the_config_file(tmp_path):
    conf = tmp_path / "nats.conf"
    conf.write_text(
        "listen: 127.0.0.1:4333\nmax_payload: 2KB\ndebug: true\nlogtime: false\n"
        "authorization { user: cfg, password: cfgpw }\nhttp: 8333\n"
    )
    result = options("-c", str(conf), "-p", "4444", "-D=false", "--user", "flag", "--max_payload", "1KB")
    assert result.config_file == str(conf)
    assert (result.host, result.port) == ("127.0.0.1", 4444)  # host from the file, port from the flag
    assert result.max_payload == 1024
    assert result.debug is False
    assert result.logtime is False  # not given on the command line: the file's value
    assert (result.username, result.password) == ("flag", "cfgpw")
    assert (result.http_host, result.http_port) == ("127.0.0.1", 8333)
    # Order does not matter: the file is read first, whatever the flag position.
    assert options("-p", "4444", "-c", str(conf)).port == 4444


def test_config_host_applies_to_monitor_unless_set(tmp_path):
    conf = tmp_path / "nats.conf"
    conf.write_text('host: 127.0.0.1\nhttp: "0.0.0.0:8333"\n')
    assert options("-c", str(conf)).http_host == "0.0.0.0"
    conf.write_text("host: 127.0.0.1\nhttp_port: 8333\n")
    assert options("-c", str(conf), "-a", "127.0.0.9").http_host == "127.0.0.9"


# -- errors: one line, exit 1 ------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--nope"], "flag provided but not defined: -nope"),
        (["-x", "1"], "flag provided but not defined: -x"),
        (["-p", "abc"], 'invalid value "abc" for flag -p: parse error'),
        (["-p=4222x"], 'invalid value "4222x" for flag -p: parse error'),
        (["-p", "99999999999999999999"], 'invalid value "99999999999999999999" for flag -p: value out of range'),
        (["-m", ""], 'invalid value "" for flag -m: parse error'),
        (["-D=maybe"], 'invalid boolean value "maybe" for -D: parse error'),
        (["-p"], "flag needs an argument: -p"),
        (["---p", "1"], "bad flag syntax: ---p"),
        (["-=1"], "bad flag syntax: -=1"),
        (["serve"], 'unrecognized command: "serve"'),
        (["-p", "1", "extra"], 'unrecognized command: "extra"'),
        (["--max_payload", "lots"], 'invalid value "lots" for flag -max_payload: parse error'),
        (["--lame_duck_duration", "10"], 'invalid value "10" for flag -lame_duck_duration: parse error'),
        (["-p", "70000"], "invalid port 70000"),
        (["--busy_poll", "11ms"], "invalid busy_poll of 11ms: from 0s to 10ms"),
        (["--busy_poll", "-1us"], "invalid busy_poll of -1µs: from 0s to 10ms"),
        (["--busy_poll", "100"], 'invalid value "100" for flag -busy_poll: parse error'),
        (["--max_payload", "2MB", "--max_pending", "1MB"],
         "max_payload (2097152) cannot be higher than max_pending (1048576)"),
        (["--lame_duck_duration", "1s", "--lame_duck_grace_period", "2s"],
         "lame duck grace period (2s) should be strictly lower than lame duck duration (1s)"),
        (["-c", "/nonexistent/nats.conf"], "open /nonexistent/nats.conf: no such file or directory\n"),
        (["-sl", "bogus=1"], 'unknown signal "bogus"'),
        (["-sl", "reload=1=2"], "invalid signal parameters: [2]"),
        (["-sl", "reload=notapid"], "invalid pid: notapid"),
    ],
)  # fmt: skip
def test_bad_command_line_is_one_line_exit_1(argv, message, capsys):
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"natserver: {message}\n"


def test_bad_flag_in_a_real_process_has_no_traceback():
    done = subprocess.run(
        [sys.executable, "-m", "natserver", "--bogus-flag"], cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == "natserver: flag provided but not defined: -bogus-flag\n"


def _fatal_lines(cmd: list[str]) -> tuple[int, list[str]]:
    """Exit code and the log lines from [FTL] on, with the pid and time masked."""
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT)
    assert "Traceback" not in done.stderr
    lines = [re.sub(r"^\[\d+\] \S+ \S+ ", "", line) for line in done.stderr.splitlines()]
    first = next((i for i, line in enumerate(lines) if line.startswith("[FTL]")), len(lines))
    return done.returncode, lines[first:]


@pytest.fixture
def taken_port():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


# nats-server 2.9.10's answers (recorded; compared live below when it is installed).
_PORT_IN_USE = '[FTL] Error listening on port: 127.0.0.1:{port}, "listen tcp 127.0.0.1:{port}: bind: address already in use"'
_MONITOR_IN_USE = ("[FTL] Can't start monitoring: can't listen to the monitor port: listen tcp 127.0.0.1:{port}: bind: "
                   "address already in use")


def test_port_in_use_is_nats_servers_fatal_line_once(taken_port):
    code, lines = _fatal_lines([sys.executable, "-m", "natserver", "-a", "127.0.0.1", "-p", str(taken_port)])
    assert code == 1
    assert lines == [_PORT_IN_USE.format(port=taken_port)]


def test_monitor_port_in_use_is_nats_servers_fatal_line(taken_port):
    code, lines = _fatal_lines([sys.executable, "-m", "natserver", "-a", "127.0.0.1", "-p", "-1", "-m", str(taken_port)])
    assert code == 1
    assert lines[0] == _MONITOR_IN_USE.format(port=taken_port)
    assert not any("Errno" in line or "FTL" in line for line in lines[1:])


@pytest.mark.needs_nats_server
@pytest.mark.skipif(NATS_SERVER is None, reason="nats-server is not installed")
@pytest.mark.parametrize("flag", ["-p", "-m"])
def test_port_in_use_matches_nats_server(taken_port, flag):
    args = ["-a", "127.0.0.1", "-p", str(taken_port)] if flag == "-p" else ["-a", "127.0.0.1", "-p", "-1", "-m", str(taken_port)]
    theirs = _fatal_lines([NATS_SERVER, *args])
    ours = _fatal_lines([sys.executable, "-m", "natserver", *args])
    assert ours[0] == theirs[0] == 1
    assert ours[1][0] == theirs[1][0]


# -- -v, -h ------------------------------------------------------------------------------------


def test_version(capsys):
    assert main(["-v"]) == 0
    out = capsys.readouterr().out
    assert re.fullmatch(r"natserver: v\d+\.\d+\.\d+\S* \(nats-server v2\.15\.1 compatible\)\n", out)
    assert main(["--version"]) == 0 and capsys.readouterr().out == out
    assert main(["version"]) == 0 and capsys.readouterr().out == out


def test_help(capsys):
    assert main(["-h"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Usage: natserver [options]")
    for flag in ("--addr", "--port", "--http_port", "--config", "--signal", "--ports_file_dir", "--log", "--user"):
        assert flag in out
    # issue 30 item 21 and item 5: the NSQ front-end's ports and -ns are listed too
    for flag in ("--nsq_port", "--nsq_http_port", "-ns,  --nats_server", "--tls_client_cacert"):
        assert flag in out


# -- a real server, configured by flags ---------------------------------------------------------


def _wait_for(path: Path, pattern: str, proc: subprocess.Popen) -> re.Match:
    deadline = time.monotonic() + TIMEOUT
    while True:
        text = path.read_text() if path.exists() else ""
        found = re.search(pattern, text)
        if found:
            return found
        assert proc.poll() is None, f"natserver exited ({proc.returncode}):\n{text}"
        assert time.monotonic() < deadline, f"no {pattern!r} in:\n{text}"
        time.sleep(0.02)


@pytest.fixture
def spawn(tmp_path):
    procs: list[subprocess.Popen] = []

    def start(*argv: str) -> tuple[subprocess.Popen, Path]:
        log = tmp_path / f"stderr-{len(procs)}.log"
        with open(log, "wb") as stderr:
            proc = subprocess.Popen(
                [sys.executable, "-m", "natserver", *argv], cwd=REPO, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=stderr,
            )  # fmt: skip
        procs.append(proc)
        return proc, log

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(TIMEOUT)


def test_server_runs_with_flags(tmp_path, spawn):
    pid_file = tmp_path / "natserver.pid"
    proc, log = spawn(
        "-a", "127.0.0.1", "-p", "-1", "-n", "flagged", "--auth", "s3cret", "--max_payload", "2KB",
        "-DV", "-T=false", "-P", str(pid_file), "--ports_file_dir", str(tmp_path),
    )  # fmt: skip
    port = int(_wait_for(log, r"\[INF\] Listening for client connections on 127\.0\.0\.1:(\d+)", proc).group(1))
    _wait_for(log, r"\[INF\] Server is ready", proc)
    assert pid_file.read_text() == str(proc.pid)  # as nats-server: no new line
    ports_file = tmp_path / f"natserver_{proc.pid}.ports"
    assert json.loads(ports_file.read_text()) == {"nats": [f"nats://127.0.0.1:{port}"]}
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.settimeout(5)
        reader = sock.makefile("rb")
        info = json.loads(reader.readline()[5:-3])
        assert (info["server_name"], info["max_payload"], info["auth_required"]) == ("flagged", 2048, True)
        sock.sendall(b'CONNECT {"verbose":false,"auth_token":"s3cret"}\r\nPING\r\n')
        assert reader.readline() == b"PONG\r\n"
    _wait_for(log, r"\[TRC\] |\[DBG\] ", proc)
    # The binary tunes its collector (GC_GEN0_THRESHOLD; measured in benchmarks scenario i).
    assert re.search(r"\[DBG\] Garbage collection: generation 0 threshold 10000, [1-9]\d* objects frozen", log.read_text())
    # -T=false: "[pid] [INF] text", no time stamp.
    assert re.search(rf"^\[{proc.pid}\] \[INF\] Server is ready$", log.read_text(), re.M)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(TIMEOUT) == 0
    assert not ports_file.exists()  # nats-server removes the ports file at shutdown...
    assert pid_file.exists()  # ...but leaves the pid file


def test_config_warnings_are_printed_and_the_server_starts(tmp_path, spawn):
    conf = tmp_path / "nats.conf"
    conf.write_text("listen: 127.0.0.1:-1\nping_interval: 60\nsyslog: true\n")
    proc, log = spawn("-c", str(conf))
    _wait_for(log, r"Server is ready", proc)
    text = log.read_text()
    assert text.startswith(f'{conf}:2:1: invalid use of field "ping_interval": ping_interval should be converted to a duration\n')
    assert '[WRN] Config option "syslog" is not supported by natserver and is ignored' in text
    proc.send_signal(signal.SIGINT)
    assert proc.wait(TIMEOUT) == 0


# -- -sl -----------------------------------------------------------------------------------------


def test_signal_flag_with_pid_file(tmp_path, spawn):
    conf = tmp_path / "nats.conf"
    conf.write_text("listen: 127.0.0.1:-1\n")
    pid_file = tmp_path / "natserver.pid"
    log_file = tmp_path / "natserver.log"
    proc, _ = spawn("-c", str(conf), "-P", str(pid_file), "-l", str(log_file))
    _wait_for(log_file, r"Server is ready", proc)
    _wait_for(pid_file, r"\d+", proc)

    # A separate natserver process sends the signal, as an operator would.
    done = subprocess.run(
        [sys.executable, "-m", "natserver", "-sl", f"reopen={pid_file}"],
        cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    _wait_for(log_file, r"\[INF\] File log re-opened", proc)

    send_signal(f"reload={pid_file}")
    _wait_for(log_file, r"\[INF\] Reloaded server configuration", proc)

    send_signal(f"reload={proc.pid}")  # a pid works as well as a pid file
    _wait_for(log_file, r"(?s)Reloaded server configuration.*Reloaded server configuration", proc)

    assert main(["-sl", f"quit={pid_file}"]) == 0
    assert proc.wait(TIMEOUT) == 0
    assert "Server Exiting.." in log_file.read_text()


@pytest.mark.parametrize(
    "command, signum, code",
    [("stop", signal.SIGKILL, -signal.SIGKILL), ("term", signal.SIGTERM, 1), ("ldm", signal.SIGUSR2, 0)],
)
def test_signal_commands(tmp_path, spawn, command, signum, code):
    pid_file = tmp_path / "natserver.pid"
    proc, log = spawn("-a", "127.0.0.1", "-p", "-1", "-P", str(pid_file))
    _wait_for(log, r"Server is ready", proc)
    send_signal(f"{command}={pid_file}")
    assert proc.wait(TIMEOUT) == code


def test_signal_without_pid_looks_for_natserver_processes(monkeypatch, capsys):
    import natserver.cli as cli

    monkeypatch.setattr(cli, "resolve_pids", lambda: [])
    assert main(["-sl", "reload"]) == 1
    assert capsys.readouterr().err == "natserver: no natserver processes running\n"
    monkeypatch.setattr(cli, "resolve_pids", lambda: [11, 12])
    assert main(["-sl", "reload"]) == 1
    assert capsys.readouterr().err == "natserver: multiple natserver processes running:\n11\n12\n"


def test_resolve_pids_recognises_natserver_command_lines():
    from natserver.cli import _is_natserver

    assert _is_natserver(["/usr/bin/python3", "-m", "natserver", "-p", "4222"])
    assert _is_natserver(["/usr/local/bin/natserver", "-p", "4222"])
    assert _is_natserver(["python3", "/usr/local/bin/natserver"])
    assert not _is_natserver(["python3", "-m", "pytest", "natserver"])
    assert not _is_natserver(["nats-server", "-p", "4222"])


def test_ports_file_is_named_after_the_executable(monkeypatch, tmp_path):
    import os

    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/nats-server"])
    assert ports_file_path(str(tmp_path)) == str(tmp_path / f"nats-server_{os.getpid()}.ports")
    monkeypatch.setattr(sys, "argv", ["/work/natserver/__main__.py"])
    assert ports_file_path(str(tmp_path)) == str(tmp_path / f"natserver_{os.getpid()}.ports")
