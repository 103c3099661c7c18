"""A whole natserver: the core server (natserver.server) with the subsystems built on top of it
(JetStream, NATS Streaming, the NSQ front-end, WebSocket, the system account, clustering and
leaf nodes: ``SUBSYSTEMS``), and the one core setting a subsystem's options decide (no client
listener when the streaming engine serves through another NATS server, ``-ns``).

The core never imports what is built on it: it runs the ``Subsystem`` objects it is given.
This module, at the top of the package, is where they are listed. Each one's code is imported
only when a server's options ask for it, so a plain core server starts without loading it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

import trio

from .config.options import Options
from .server import server as core

__all__ = ["Server", "serve", "build_server", "check_options", "SUBSYSTEMS"]


@dataclass(frozen=True)
class LazySubsystem:
    """A subsystem named by module and entry point: ``entry(server, task_status=...)`` is
    started by the core server when ``wanted(options)``; its module is imported then."""

    name: str
    wanted: Callable[[Options], bool]
    module: str
    entry: str
    check: str = ""  # the module's ``check(options)``: ValueError for options it cannot use

    def check_options(self, options: Options) -> None:
        if self.check and self.wanted(options):
            getattr(importlib.import_module(self.module), self.check)(options)

    async def start(self, server, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        entry = getattr(importlib.import_module(self.module), self.entry)
        await entry(server, task_status=task_status)


SUBSYSTEMS: tuple[LazySubsystem, ...] = (
    LazySubsystem("jetstream", lambda options: bool(options.jetstream), "natserver.jetstream", "enable_jetstream"),
    # After JetStream: NATS Streaming channels may be JetStream streams.
    LazySubsystem("stan", lambda options: options.stan is not None, "natserver.stan", "enable_stan"),
    LazySubsystem("nsq", lambda options: options.nsq is not None, "natserver.nsq", "enable_nsq", "check_options"),
    LazySubsystem("websocket", lambda options: options.websocket is not None and options.websocket.port != 0, "natserver.websocket", "enable_websocket"),
    # The system account ($SYS events and requests): on unless no_system_account.
    LazySubsystem("system", lambda options: not options.no_system_account, "natserver.system", "enable_system", "check_options"),
    LazySubsystem("cluster", lambda options: options.clustered or bool(options.leafnode_remotes or options.leafnode_port), "natserver.cluster", "enable_cluster"),
)


def check_options(options: Options, subsystems: tuple = SUBSYSTEMS) -> None:
    """Every wanted subsystem's checks of its own options (ValueError), before anything starts."""
    for subsystem in subsystems:
        if isinstance(subsystem, LazySubsystem):
            subsystem.check_options(options)


class Server(core.Server):
    """natserver's server: the core with every subsystem its options enable."""

    def __init__(self, options: Options | None = None, *, subsystems: tuple = SUBSYSTEMS, **changes) -> None:
        super().__init__(options, subsystems=subsystems, **changes)
        check_options(self.options, subsystems)
        stan = self.options.stan
        if stan is not None and stan.nats_server_url:
            # nats-streaming-server -ns embeds no NATS server: the engine is a client of that
            # one, and only monitoring (and the other front-ends asked for) listens here
            self.client_listener = False


def build_server(options: Options | None = None, **changes) -> Server:
    return Server(options, **changes)


async def serve(options: Options | None = None, *, task_status=trio.TASK_STATUS_IGNORED, **changes) -> None:
    """Run a server; use as ``server = await nursery.start(serve, options)``."""
    server = Server(options, **changes)
    await server.run(task_status=task_status)
