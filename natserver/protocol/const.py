"""Every default natserver uses, named, with where nats-server defines it.

Line numbers refer to nats-server's server/const.go (and friends) as described in
../shared/docs/nats-reference.md; values were checked against the v2.9.10 binary, and the
defaults again against v2.15.1, the reference since issue #27.
"""

# The version we announce in INFO. Clients feature-detect on it (nats.py, nats.go), so we
# claim the release whose wire behaviour we reproduce: nats-server 2.15.1, the reference the
# conformance suite compares with (issue #27). JetStream settings of later releases that
# natserver does not act on yet are refused by name (jetstream/unsupported.py), and JS_API_LEVEL
# below tells level-aware clients which JetStream features are there.
SERVER_VERSION = "2.15.1"
# INFO "git_commit" (server.go Info.GitCommit, set at build time in nats-server): natserver is
# not built from nats-server's tree, so it names its own release there.
GIT_COMMIT_FIELD = "natserver"
# INFO "api_lvl" (server/jetstream_versioning.go JSApiLevel, 5 in nats-server 2.15.1): the
# JetStream API level whose features natserver implements in full. Level 1 is 2.11's (per-message
# TTLs and subject delete markers, consumer pause, priority groups: all here), level 2 is
# 2.12's (counters, atomic batches, schedules, async persist: not all here yet). Clients switch
# features on by it (nats-py's limit_marker_ttl, the Nats-Required-Api-Level header a request
# may carry), so it names only what is there; 0 would be omitted from INFO (Go's omitempty).
JS_API_LEVEL = 1
# INFO "proto": 1 means the server supports dynamic cluster INFO updates (client protocol v1).
PROTO_VERSION = 1
# INFO "go": nats-server reports its Go toolchain; we report our runtime instead.
GO_VERSION_FIELD = "python"

DEFAULT_HOST = "0.0.0.0"  # const.go:86
DEFAULT_PORT = 4222  # const.go:78
DEFAULT_ROUTE_POOL_SIZE = 3  # const.go: route connections to each peer unless cluster { pool_size }
RANDOM_PORT = -1  # const.go:83: -1 asks the OS for a free port

MAX_CONTROL_LINE_SIZE = 4096  # const.go:90 MAX_CONTROL_LINE_SIZE
MAX_PAYLOAD_SIZE = 1024 * 1024  # const.go:94 MAX_PAYLOAD_SIZE (1 MiB)
MAX_PAYLOAD_MAX_SIZE = 8 * 1024 * 1024  # const.go:99: above this nats-server warns at startup
MAX_PENDING_SIZE = 64 * 1024 * 1024  # const.go:102 MAX_PENDING_SIZE (64 MiB)
DEFAULT_MAX_CONNECTIONS = 64 * 1024  # const.go:105 DEFAULT_MAX_CONNECTIONS
DEFAULT_MAX_SUBSCRIPTIONS = 0  # server.go:3259: 0 means unlimited
DEFAULT_AUTH_TIMEOUT = 2.0  # const.go:117 AUTH_TIMEOUT (seconds)
# leafnode.go DEFAULT_LEAF_NODE_RECONNECT: seconds between a leaf's attempts to reach its hub.
DEFAULT_LEAF_NODE_RECONNECT = 1.0
DEFAULT_TLS_TIMEOUT = 2.0  # const.go:108 TLS_TIMEOUT
DEFAULT_PING_INTERVAL = 120.0  # const.go:120 DEFAULT_PING_INTERVAL (2 min)
DEFAULT_PING_MAX_OUT = 2  # const.go:123 DEFAULT_PING_MAX_OUT
# server.go:60 firstClientPingInterval: the first PING after CONNECT comes early so that a
# dead peer is noticed quickly, with up to 20 % jitter so that reconnect storms spread out.
FIRST_PING_INTERVAL = 2.0
FIRST_PING_JITTER = 0.2
DEFAULT_WRITE_DEADLINE = 10.0  # const.go:132 DEFAULT_FLUSH_DEADLINE (10 s since v2.2.0)
DEFAULT_LAME_DUCK_DURATION = 120.0  # const.go:196
DEFAULT_LAME_DUCK_GRACE_PERIOD = 10.0  # const.go:200
DEFAULT_HTTP_PORT = 8222  # const.go:135 DEFAULT_HTTP_PORT
DEFAULT_MAX_CLOSED_CLIENTS = 10000  # const.go:192

# Sublist result cache (sublist.go:48-56): keep at most this many subjects; when over, sweep
# down to the low-water mark. Bounds memory when publishers use many distinct subjects.
SUBLIST_CACHE_MAX = 1024
SUBLIST_CACHE_SWEEP_TO = 256

# The natserver binary's cyclic-GC generation-0 threshold (CPython's default is 700). Message
# handling makes almost no reference cycles, so reference counting frees its garbage; what the
# collector sees is the match cache's churn of results, which at 700 gets promoted into the
# old generation and triggers full collections over every subscription. Measured with 10k
# wildcard subscriptions and a new subject per message: 30% of the server's time at 700, none
# at 10k. Only the binary sets it (natserver.config.flags); an embedding process keeps its own.
GC_GEN0_THRESHOLD = 10_000

# Busy polling (natserver's own option, busy_poll; the idea of Linux's net.core.busy_poll): after
# client messages, the binary keeps polling its sockets (epoll_wait with no timeout, only while
# nothing else is runnable) this long before it sleeps. Go's scheduler spins the same way before
# it parks, and a sleeping process is slow to wake: nats.go request/reply p50 on the 2-vCPU
# benchmark machine, 242 us sleeping, 190-200 us at 100 us of polling (nats-server 2.15.1: 215 us),
# for about 40 % more CPU a round trip. Only the binary polls by default (cli.run_server), as it
# owns its process; an in-process server shares its thread with its clients, where polling
# gains nothing. Never on one CPU, nor while other processes keep the other CPUs busy
# (busypoll.CpuRoom): the poller would hold a CPU another process needs.
DEFAULT_BUSY_POLL = 100e-6  # seconds
# Longer would be a process that spins, not one that polls a moment before it sleeps.
MAX_BUSY_POLL = 0.01

# How much one receive asks for. trio's default is 64 KiB; a whole chunk is parsed per loop,
# so bigger reads mean fewer checkpoints per message under load.
READ_SIZE = 64 * 1024
# nats-server writes at most 1024 iovecs per writev (client.go); the writer joins everything
# pending into one send instead (bounded by max_pending).
# Fast-producer stall gate (nats-server v2.9.10 client.go:2062, stallDuration l.3070): once a
# subscriber's pending bytes pass half of max_pending, a producer that delivers to it waits for
# it to drain below half, at most 100 ms, growing 100 ms per further 5 % of max_pending, up to
# 1 s when it is full. Only the producer waits; everyone else goes on.
STALL_FRACTION = 0.5
STALL_MIN_WAIT = 0.100  # stallClientMinDuration
STALL_MAX_WAIT = 1.0  # stallClientMaxDuration
# const.go DEFAULT_RTT_MEASUREMENT_INTERVAL: how often the ping timer re-measures the RTT even
# when the client is busy (a busy client is otherwise not pinged).
DEFAULT_RTT_MEASUREMENT_INTERVAL = 3600.0
