"""NsqOptions: the NSQ front-end's settings, with nsqd's defaults (nsqd/options.go NewOptions).

Parsed from the ``nsq {}`` config block (a dict) and the ``--nsq_port``/``--nsq_http_port``
flags. Durations in the block are milliseconds (ints) or Go duration strings ("60s").
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass

# Everything in __all__ gets re-exported as part of natserver.nsq's API.
__all__ = ["NsqOptions", "parse_nsq_options"]

VERSION = "1.3.0"  # the nsqd release whose wire behaviour we reproduce (reported in IDENTIFY, /info)
DEFAULT_TCP_PORT = 4150  # nsqd --tcp-address 0.0.0.0:4150
DEFAULT_HTTP_PORT = 4151  # nsqd --http-address 0.0.0.0:4151
RANDOM_PORT = -1  # as natserver's other listeners: -1 picks a free port
MAX_MSG_SIZE = 1024 * 1024  # nsqd --max-msg-size
MAX_BODY_SIZE = 5 * 1024 * 1024  # nsqd --max-body-size (MPUB, IDENTIFY, AUTH bodies)
MAX_RDY_COUNT = 2500  # nsqd --max-rdy-count
MSG_TIMEOUT = 60.0  # seconds; nsqd --msg-timeout
MAX_MSG_TIMEOUT = 15 * 60.0  # seconds; nsqd --max-msg-timeout
MAX_REQ_TIMEOUT = 3600.0  # seconds; nsqd --max-req-timeout (REQ is clamped to it, DPUB refused beyond)
CLIENT_TIMEOUT = 60.0  # seconds; nsqd --client-timeout (default heartbeat = half of it)
MAX_HEARTBEAT_INTERVAL = 60.0  # seconds; nsqd --max-heartbeat-interval
MEM_QUEUE_SIZE = 10000  # nsqd --mem-queue-size: messages kept in memory per topic/channel
MAX_OUTPUT_BUFFER_SIZE = 64 * 1024  # nsqd --max-output-buffer-size
OUTPUT_BUFFER_SIZE = 16 * 1024  # nsqd's default per-client write buffer (client_v2.go)
MIN_OUTPUT_BUFFER_TIMEOUT = 0.025  # seconds; nsqd --min-output-buffer-timeout
MAX_OUTPUT_BUFFER_TIMEOUT = 30.0  # seconds; nsqd --max-output-buffer-timeout
OUTPUT_BUFFER_TIMEOUT = 0.250  # seconds; nsqd --output-buffer-timeout
MAX_DEFLATE_LEVEL = 6  # nsqd --max-deflate-level
QUEUE_SCAN_INTERVAL = 0.100  # seconds; nsqd --queue-scan-interval (in-flight/deferred timeouts)
MAX_BYTES_PER_FILE = 100 * 1024 * 1024  # nsqd --max-bytes-per-file (disk queue segment size)
MAX_CLIENTS = 10000  # natserver: NSQ connections accepted at once (nsqd has no limit; bounded here)
BRIDGE_PREFIX = "nsq"  # natserver: NSQ topic T is NATS subject "nsq.T" when the bridge is on


@dataclass
class NsqOptions:
    """One NSQ front-end's settings (times in seconds)."""

    host: str = ""  # empty: the server's host
    port: int = DEFAULT_TCP_PORT
    http_port: int = DEFAULT_HTTP_PORT
    broadcast_address: str = ""  # what /info and lookupd report; empty: the hostname
    max_msg_size: int = MAX_MSG_SIZE
    max_body_size: int = MAX_BODY_SIZE
    max_rdy_count: int = MAX_RDY_COUNT
    msg_timeout: float = MSG_TIMEOUT
    max_msg_timeout: float = MAX_MSG_TIMEOUT
    max_req_timeout: float = MAX_REQ_TIMEOUT
    client_timeout: float = CLIENT_TIMEOUT
    max_heartbeat_interval: float = MAX_HEARTBEAT_INTERVAL
    mem_queue_size: int = MEM_QUEUE_SIZE
    data_path: str = ""  # nsqd --data-path; empty: the working directory, as nsqd (locked while served)
    max_output_buffer_size: int = MAX_OUTPUT_BUFFER_SIZE
    min_output_buffer_timeout: float = MIN_OUTPUT_BUFFER_TIMEOUT
    max_output_buffer_timeout: float = MAX_OUTPUT_BUFFER_TIMEOUT
    output_buffer_timeout: float = OUTPUT_BUFFER_TIMEOUT
    deflate: bool = True  # nsqd --deflate
    max_deflate_level: int = MAX_DEFLATE_LEVEL
    snappy: bool = True  # nsqd --snappy
    tls_cert: str = ""  # nsqd --tls-cert / --tls-key: offer tls_v1 in IDENTIFY
    tls_key: str = ""
    queue_scan_interval: float = QUEUE_SCAN_INTERVAL
    max_bytes_per_file: int = MAX_BYTES_PER_FILE
    max_clients: int = MAX_CLIENTS
    bridge: bool = False  # publish NSQ messages on NATS and take NATS messages into NSQ
    bridge_prefix: str = BRIDGE_PREFIX
    https_port: int | None = None  # nsqd --https-address: the HTTP API over TLS (needs tls_cert)
    lookupd_tcp_addresses: list = dataclasses.field(default_factory=list)  # nsqd --lookupd-tcp-address
    auth_http_addresses: list = dataclasses.field(default_factory=list)  # nsqd --auth-http-address: AUTH on
    node_id: int | None = None  # nsqd --node-id (message id generator); default from the pid

    def copy(self, **changes) -> "NsqOptions":
        return dataclasses.replace(self, **changes)

    @property
    def data_dir(self) -> str:
        return self.data_path or os.getcwd()


_DURATION_KEYS = {"msg_timeout", "max_msg_timeout", "max_req_timeout", "client_timeout",
                  "max_heartbeat_interval", "min_output_buffer_timeout", "max_output_buffer_timeout",
                  "output_buffer_timeout", "queue_scan_interval"}
_FIELDS = {f.name: f for f in dataclasses.fields(NsqOptions)}
_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(key: str, value) -> float:
    """Milliseconds (a number, as nsqd's config file takes them) or a Go duration string."""
    if isinstance(value, bool):
        raise ValueError(f"nsq: {key}: expected a duration, got {value!r}")
    if isinstance(value, (int, float)):
        return value / 1000.0
    if isinstance(value, str):
        text = value.strip()
        pos, total = 0, 0.0
        for match in _GO_DURATION.finditer(text):
            if match.start() != pos:
                break
            total += float(match.group(1)) * _UNITS[match.group(2)]
            pos = match.end()
        if pos == len(text) and text:
            return total
    raise ValueError(f"nsq: {key}: invalid duration {value!r}")


def parse_nsq_options(block: "dict | NsqOptions | None") -> NsqOptions:
    """NsqOptions from an ``nsq {}`` block. Unknown keys stop the server (a misspelt limit
    would silently not apply). ``bridge`` may be true/false or a subject prefix string."""
    if isinstance(block, NsqOptions):
        return block
    changes: dict = {}
    for key, value in (block or {}).items():
        name = key.lower().replace("-", "_")
        if name in ("listen", "tcp_address"):
            host, _, port = str(value).rpartition(":")
            changes["host"], changes["port"] = host, int(port)
            continue
        if name == "http_address":
            _, _, port = str(value).rpartition(":")
            changes["http_port"] = int(port)
            continue
        if name == "bridge" and isinstance(value, str):
            changes["bridge"], changes["bridge_prefix"] = True, value
            continue
        field = _FIELDS.get(name)
        if field is None:
            raise ValueError(f'nsq: unknown field "{key}"')
        if name in _DURATION_KEYS:
            changes[name] = duration_seconds(key, value)
        elif field.type == "bool":
            if not isinstance(value, bool):
                raise ValueError(f"nsq: {key}: expected a boolean, got {value!r}")
            changes[name] = value
        elif name in ("lookupd_tcp_addresses", "auth_http_addresses"):
            values = [value] if isinstance(value, str) else value
            if not isinstance(values, list) or not all(isinstance(v, str) and ":" in v for v in values):
                raise ValueError(f"nsq: {key}: expected host:port addresses, got {value!r}")
            changes[name] = list(values)
        elif name in ("https_port", "node_id"):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"nsq: {key}: expected an integer, got {value!r}")
            changes[name] = value
        elif field.type == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"nsq: {key}: expected an integer, got {value!r}")
            changes[name] = value
        else:
            changes[name] = str(value)
    options = NsqOptions(**changes)
    for name in ("port", "http_port"):
        if not -1 <= getattr(options, name) <= 65535:
            raise ValueError(f"nsq: invalid {name} {getattr(options, name)}")
    if options.max_msg_size <= 0 or options.max_body_size < options.max_msg_size:
        raise ValueError("nsq: max_msg_size must be positive and at most max_body_size")
    if options.mem_queue_size < 0 or options.max_rdy_count < 0:
        raise ValueError("nsq: mem_queue_size and max_rdy_count cannot be negative")
    if bool(options.tls_cert) != bool(options.tls_key):
        raise ValueError("nsq: tls_cert and tls_key go together")
    if options.https_port is not None and not options.tls_cert:
        raise ValueError("nsq: https_port needs tls_cert and tls_key")
    return options
