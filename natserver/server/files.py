"""The pid file and the ports file, as nats-server writes them (``server.go`` logPid,
logPorts): written at start by the command line, moved by a reload."""

from __future__ import annotations

import json
import logging
import os
import sys

from ..config.options import Options
from .listen import listener_urls

__all__ = ["write_pid_file", "ports_file_path", "write_ports_file", "remove_ports_file"]

log = logging.getLogger("natserver")

# -- pid and ports files -----------------------------------------------------------------------


def write_pid_file(path: str) -> None:
    # server.go logPid: the pid without a new line, mode 0660; the file is left behind at exit.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o660)
    with os.fdopen(fd, "w") as f:
        f.write(str(os.getpid()))


def ports_file_path(directory: str) -> str:
    """server.go portFile: ``<dir>/<basename of argv[0]>_<pid>.ports``."""
    exe = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if exe in ("", "__main__.py", "-c", "-m"):
        exe = "natserver"  # python -m natserver
    return os.path.join(directory, f"{exe}_{os.getpid()}.ports")


def _url_host(host: str) -> str:
    if host in ("", "0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def write_ports_file(options: Options, server, monitor) -> str:
    """Write ``{"nats": [...], "monitoring": [...], "cluster": [...], "websocket": [...]}`` as
    nats-server does (server.go logPorts, PortsInfo: a listener on every interface is listed at
    every interface's address); atomically, so that a wrapper polling for the file never reads
    half of it."""
    path = ports_file_path(options.ports_file_dir)
    ports = {}
    if server.port:  # 0: no client listener (-ns)
        tls_required = options.tls is not None and not options.allow_non_tls
        ports["nats"] = listener_urls("tls" if tls_required else "nats", server.host, server.port)
    if monitor is not None:
        ports["monitoring"] = listener_urls("http", options.http_host or server.host, monitor.port)
    cluster = getattr(server, "cluster", None)
    if cluster is not None and cluster.port:  # natserver.cluster's route listener (0: none)
        ports["cluster"] = listener_urls("tls" if options.cluster_tls is not None else "nats", options.cluster_host,
                                         cluster.port)
    websocket = getattr(server, "websocket", None)
    if websocket is not None:  # natserver.websocket's listener
        ports["websocket"] = listener_urls("wss" if websocket.tls else "ws", websocket.host, websocket.port)
    if getattr(server, "nsq", None) is not None:  # natserver.nsq's listeners (a subsystem)
        ports["nsq"] = [f"tcp://{_url_host(server.host)}:{server.nsq.tcp_port}"]
        ports["nsq_http"] = [f"http://{_url_host(server.host)}:{server.nsq.http_port}"]
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(ports, f, separators=(",", ":"))
    os.replace(tmp, path)
    return path


def remove_ports_file(path: str) -> None:
    try:
        os.unlink(path)
    except OSError as exc:
        log.error("Error cleaning up ports file %s: %s", path, exc)
