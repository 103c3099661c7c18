"""What a running natserver does on SIGHUP, SIGUSR1 and SIGUSR2, as nats-server v2.9.10
(``server/signal.go``, ``reload.go``, ``log.go`` ``ReOpenLogFile``, ``server.go``
``lameDuckMode``). SIGINT and SIGTERM stop the server in ``natserver.cli.run_server``;
:func:`stop_work_at_once` makes the streaming engine answer nothing from the signal on.

* SIGHUP, **reload**: the config file is read again, the original command-line flags are
  applied on top, and the options nats-server can change at run time are applied; changing
  one it cannot (``port``, ``max_pending``, ...) fails the whole reload with nats-server's
  message, as does a bad file: the server then keeps running with its old options.
  ``cluster { pool_size, accounts }`` are handed to natserver.cluster (``server.cluster``,
  PoolReloader), which remakes the routes as nats-server 2.15.1's reload does.
* SIGUSR1, **reopen** the log file (log rotation: rename the file, send SIGUSR1, the next
  lines go to a new file at the old path).
* SIGUSR2, **lame duck mode**: stop accepting clients, tell the connected ones (INFO with
  ``"ldm": true``), wait the grace period, close them spread over the rest of
  ``lame_duck_duration`` (at most one second apart), then shut down.
"""

from __future__ import annotations

import logging
import random
import signal
from typing import Protocol

import trio

from ..auth.users import watch_expiry
from ..config.flags import build_options, validate
from ..config.options import ConfigError, ConfigFileError, Options
from ..protocol import errors
from ..protocol.gotext import go_duration
from .files import remove_ports_file, write_pid_file, write_ports_file
from .log import configure_library_logging, configure_logging, reopen_log_file

__all__ = ["handle_signal", "reload", "reopen_log", "lame_duck_mode", "ReloadError", "stop_work_at_once"]

log = logging.getLogger("natserver")


async def handle_signal(server, signum: int, nursery: trio.Nursery) -> None:
    """Called by ``Server.on_signal``; long work (lame duck mode) goes into ``nursery``."""
    if signum == signal.SIGHUP:
        try:
            reload(server)
        except ReloadError as exc:
            log.error("Failed to reload server configuration: %s", exc)
    elif signum == signal.SIGUSR1:
        reopen_log(server)
    elif signum == signal.SIGUSR2:
        nursery.start_soon(lame_duck_mode, server)


def stop_work_at_once(server, signums) -> None:
    """Chain a handler in front of the ones installed for ``signums`` (trio's signal receiver's)
    that tells the streaming engine to answer nothing more, before any other code runs.

    A signal's Python handler runs at the next bytecode of the main thread, ahead of whatever
    the client tasks read after it; the receiver's loop only sees the signal later, maybe after
    a request the client sent just after signalling has been answered. nats-streaming-server
    stops answering at once (its Shutdown closes its NATS connections first). A SIGTERM during
    lame duck mode changes nothing, as the receiver's loop ignores it then."""
    for signum in signums:
        then = signal.getsignal(signum)

        def handler(num, frame, then=then):
            engine = server.stan
            if engine is not None and not (num == signal.SIGTERM and server.lame_duck):
                engine.stop_taking_work()
            if callable(then):
                then(num, frame)

        signal.signal(signum, handler)


# -- SIGUSR1 -----------------------------------------------------------------------------------


def reopen_log(server) -> None:
    if not server.options.log_file:
        log.info("File log re-open ignored, not a file logger")
        return
    if reopen_log_file():
        log.info("File log re-opened")
    else:
        # Logging was configured elsewhere (in-process server): set it up as the options say.
        if getattr(server, "_logging_configured", False):
            configure_logging(server.options)
        else:
            configure_library_logging(server.options)
        log.info("File log re-opened")


# -- SIGHUP ------------------------------------------------------------------------------------


class ReloadError(Exception):
    """Why a reload was refused; the running options are unchanged."""


# Options nats-server cannot change at run time (reload.go diffOptions "default:" case), with
# the Go field name its error message uses and how it prints the value.
def _go_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _go_duration_value(value) -> str:
    return go_duration(value)


_NOT_RELOADABLE = (
    ("server_name", "ServerName", _go_value),
    ("host", "Host", _go_value),
    ("port", "Port", _go_value),
    ("headers", "NoHeaderSupport", lambda v: _go_value(not v)),
    ("max_subscriptions", "MaxSubs", _go_value),
    ("http_host", "HTTPHost", _go_value),
    ("http_port", "HTTPPort", _go_value),
    ("max_pending", "MaxPending", _go_value),
    ("max_closed_clients", "MaxClosedClients", _go_value),
    ("lame_duck_duration", "LameDuckDuration", _go_duration_value),
    ("lame_duck_grace_period", "LameDuckGracePeriod", _go_duration_value),
    # natserver: the poller is started (or not) with the server
    ("busy_poll", "BusyPoll", lambda v: "default" if v is None else go_duration(v)),
    # nats-streaming-server has no reload at all: the streaming {} block is fixed at start
    ("stan", "Streaming", lambda v: f"{v.cluster_id}/{v.store}" if v is not None else "disabled"),
    ("nsq", "Nsq", _go_value),  # natserver: the NSQ front-end's listeners and queues need a restart
)


class PoolReloader(Protocol):
    """What a reload asks of natserver.cluster's routes (``server.cluster``) for
    ``cluster { pool_size, accounts }`` (reload.go clusterOption)."""

    def pool_change(self, options: Options) -> tuple[int, list[str], bool, list[str], list[str]]: ...

    def reload_pool(self, options: Options) -> bool: ...


def reload_options(server) -> Options:
    """The options a reload would run with: file + original flags. Raises ReloadError."""
    command_line = getattr(server, "command_line", None)
    flags = dict(command_line.flags) if command_line is not None else {}
    config_file = flags.get("config_file") or server.options.config_file
    if not config_file:
        raise ReloadError("can only reload config when a file is provided using -c or --config")
    flags["config_file"] = config_file
    try:
        # As nats-server, a file with warnings does not reload either.
        new = build_options(flags)
    except (ConfigError, ConfigFileError, ValueError, OSError) as exc:
        raise ReloadError(str(exc).rstrip("\n")) from None
    current = server.options
    new = new.copy(quiet=current.quiet)  # not a config key: an in-process server stays quiet
    # A random port stays the port the server listens on (reload.go ReloadOptions).
    if new.port == -1 and current.port != -1:
        new = new.copy(port=current.port)
    for field, go_name, show in _NOT_RELOADABLE:
        old_value, new_value = getattr(current, field), getattr(new, field)
        if old_value != new_value:
            if field == "port" and old_value == -1 and getattr(server, "port", None):
                old_value = server.port  # nats-server reports the port it listens on
            raise ReloadError(
                f"config reload not supported for {go_name}: old={show(old_value)}, new={show(new_value)}"
            )
    try:
        validate(new)
    except ValueError as exc:
        raise ReloadError(str(exc)) from None
    cluster: PoolReloader | None = getattr(server, "cluster", None)
    if cluster is not None and getattr(cluster, "pool_change", None) is not None:
        # reload.go diffOptions: an account to pin must exist, or the reload fails.
        accounts = getattr(server, "accounts", None)
        known = set(accounts.by_name) if accounts is not None else set()
        for name in cluster.pool_change(new)[3]:
            if name not in known:
                raise ReloadError(f"unable to add account {_go_quote(name)} to the list of dedicated routes: "
                                  "account missing")
    return new


def _go_quote(text: str) -> str:
    """Go's %q of a plain name."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def reload(server) -> list[str]:
    """Reload the configuration file into the running server; return the "Reloaded: ..."
    lines logged. Raises ReloadError (and changes nothing) if the reload is refused."""
    old = server.options
    new = reload_options(server)
    lines: list[str] = []
    logging_changed = False
    auth_changed = False
    # reload.go applies options in the Options struct's field order.
    if new.trace != old.trace:
        lines.append(f"Reloaded: trace = {_go_value(new.trace)}")
        logging_changed = True
    if new.debug != old.debug:
        lines.append(f"Reloaded: debug = {_go_value(new.debug)}")
        logging_changed = True
    if new.logtime != old.logtime:
        lines.append(f"Reloaded: logtime = {_go_value(new.logtime)}")
        logging_changed = True
    if new.max_connections != old.max_connections:
        lines.append(f"Reloaded: max_connections = {new.max_connections}")
    if new.username != old.username:
        lines.append("Reloaded: authorization username")
        auth_changed = True
    if new.password != old.password:
        lines.append("Reloaded: authorization password")
        auth_changed = True
    if new.authorization != old.authorization:
        lines.append("Reloaded: authorization token")
        auth_changed = True
    if new.ping_interval != old.ping_interval:
        lines.append(f"Reloaded: ping_interval = {go_duration(new.ping_interval)}")
    if new.ping_max != old.ping_max:
        lines.append(f"Reloaded: ping_max = {new.ping_max}")
    if new.auth_timeout != old.auth_timeout:
        lines.append(f"Reloaded: authorization timeout = {new.auth_timeout:g}")
    if new.max_control_line != old.max_control_line:
        lines.append(f"Reloaded: max_control_line = {new.max_control_line}")
    if new.max_payload != old.max_payload:
        lines.append(f"Reloaded: max_payload = {new.max_payload}")
    cluster: PoolReloader | None = getattr(server, "cluster", None)
    repool = cluster is not None and getattr(cluster, "pool_change", None) is not None and any(
        cluster.pool_change(new)[2:])
    if repool:
        lines.append("Reloaded: cluster")
    if new.write_deadline != old.write_deadline:
        lines.append(f"Reloaded: write_deadline = {go_duration(new.write_deadline)}")
    if new.log_file != old.log_file:
        lines.append(f"Reloaded: log_file = {new.log_file}")
        logging_changed = True
    if new.pid_file != old.pid_file and new.pid_file:
        lines.append(f"Reloaded: pid_file = {new.pid_file}")
    if new.ports_file_dir != old.ports_file_dir:
        lines.append(f"Reloaded: ports_file_dir = {new.ports_file_dir}")

    server.options = new
    _apply_to_server(server, old, new)
    if logging_changed:
        if getattr(server, "_logging_configured", False):  # the CLI owns logging
            configure_logging(new)
        else:
            configure_library_logging(new)
    for line in lines:
        log.info("%s", line)
    if new.max_connections != old.max_connections:
        closed = _enforce_max_connections(server, new.max_connections)
        if closed:
            log.info("Closed %d connections to fall within max_connections", closed)
    if new.pid_file != old.pid_file and new.pid_file:
        try:
            write_pid_file(new.pid_file)
        except OSError as exc:
            log.error("Failed to write pidfile: %s", exc)
    if new.ports_file_dir != old.ports_file_dir:
        _move_ports_file(server, new)
    if auth_changed:
        reauthorize_clients(server)
    if repool and cluster is not None:
        # reload.go reloadClusterPoolAndAccounts: routes closed and made again (in the
        # background, on the cluster's tasks).
        cluster.reload_pool(new)
    server.flush_touched()
    log.info("Reloaded server configuration")
    return lines


def _apply_to_server(server, old: Options, new: Options) -> None:
    # INFO for new connections (nats-server updates s.info).
    server.refresh_info()
    # Existing clients: nats-server updates each client's mpay and mcl.
    for client in list(server.clients.values()):
        parser = getattr(client, "parser", None)
        if parser is None:
            continue
        if hasattr(parser, "max_payload"):
            parser.max_payload = new.max_payload
        if hasattr(parser, "max_control_line"):
            parser.max_control_line = new.max_control_line


def _enforce_max_connections(server, limit: int) -> int:
    """reload.go maxConnOption: close connections until within the new limit."""
    clients = list(server.clients.values())
    if limit <= 0 or len(clients) <= limit:
        return 0
    excess = sorted(clients, key=lambda c: c.cid)[limit:]
    for client in excess:
        client.queue(errors.MAX_CONNECTIONS.wire)
        client.close(errors.MAX_CONNECTIONS.close_reason, flush=True)
    return len(excess)


def reauthorize_clients(server) -> None:
    """reload.go reloadAuthorization: clients whose CONNECT no longer authenticates are
    closed with 'Authorization Violation'; the others lose the subscriptions their new
    permissions forbid (processSubsOnConfigReload). Needs the CONNECT options the client kept."""
    for client in list(server.clients.values()):
        connect = getattr(client, "connect_opts", None)
        if connect is None or not getattr(client, "connect_received", False):
            continue
        if not server.authenticate(client, connect):
            client.queue(errors.AUTH_VIOLATION.wire)
            client.close(errors.AUTH_VIOLATION.close_reason, flush=True)
        else:
            client.drop_forbidden_subscriptions()
            watch_expiry(client)  # (an updated JWT may now expire)
    server.flush_touched()


def _move_ports_file(server, new: Options) -> None:
    command_line = getattr(server, "command_line", None)
    if command_line is None:
        return
    if command_line.ports_file:
        remove_ports_file(command_line.ports_file)
        command_line.ports_file = None
    if new.ports_file_dir:
        try:
            command_line.ports_file = write_ports_file(new, server, command_line.monitor)
        except OSError as exc:
            log.error("Error writing ports file: %s", exc)


# -- SIGUSR2 -----------------------------------------------------------------------------------


# server.go lameDuckMode: after the RAFT leaders were asked to hand over, a second for them to do it.
LAME_DUCK_TRANSFER_WAIT = 1.0


async def lame_duck_mode(server) -> None:
    """server.go lameDuckMode."""
    if server.shutting_down or server.lame_duck or not server.listeners:
        return
    log.info("Entering lame duck mode, stop accepting new clients")
    server.lame_duck = True
    for listener in list(server.listeners):
        # The accept loops see the listener closed (and server.lame_duck) and return.
        await trio.aclose_forcefully(listener)
    options = server.options
    grace = abs(options.lame_duck_grace_period)
    # The routes tell their peers; JetStream's RAFT groups hand their leadership over (a
    # hook's true answer), given a moment to do it, as nats-server waits, before anything stops.
    transferring = any([hook() for hook in server.lame_duck_hooks])
    server.flush_touched()
    if transferring:
        await trio.sleep(LAME_DUCK_TRANSFER_WAIT)
    clients = [c for c in server.clients.values() if not c.closed]
    if server.shutting_down or not clients:
        _shutdown(server)
        return
    duration = options.lame_duck_duration - grace
    if duration <= 0:
        duration = 1.0
    interval = min(duration / len(clients), 1.0)
    _send_ldm_info(server, clients)
    await trio.sleep(grace)
    log.info("Closing existing clients")
    owed = 0.0  # sleeps shorter than a millisecond are batched
    for i, client in enumerate(clients):
        client.close("Server Shutdown", flush=True)
        if i == len(clients) - 1:
            break
        owed += max(random.uniform(0, interval), interval / 2)
        if owed >= 0.001:
            await trio.sleep(owed)
            owed = 0.0
    server.flush_touched()
    # Let the writers of the clients just closed send what they still hold.
    await trio.sleep(0.01)
    _shutdown(server)


def _send_ldm_info(server, clients) -> None:
    """route.go sendAsyncInfoToClients: an INFO with "ldm": true to every client that
    understands async INFO (CONNECT with protocol >= 1)."""
    for client in clients:
        if client.closed or not getattr(client, "connect_received", False) or client.protocol < 1:
            continue
        client.queue(server.info_for(client))
    server.flush_touched()


def _shutdown(server) -> None:
    if not server.shutting_down:
        log.info("Initiating Shutdown...")
    server.stop()
