"""Every error text nats-streaming-server (v0.25.6) sends to clients, by its Go name.

server/server.go's ``Err*`` variables, stores/store.go's store errors (they reach clients
inside responses, e.g. a subscription refused for too many subscriptions) and the PING
error. Clients compare some of them as strings (stan.go's ErrConnectReqTimeout handling,
users' code matching "clientID already registered"), so they are kept verbatim.
"""

INVALID_SUBJECT = "stan: invalid subject"  # ErrInvalidSubject
INVALID_START = "stan: invalid start position"  # ErrInvalidStart
INVALID_SUB = "stan: invalid subscription"  # ErrInvalidSub
INVALID_CLIENT = "stan: clientID already registered"  # ErrInvalidClient
MISSING_CLIENT = "stan: clientID missing"  # ErrMissingClient
INVALID_CLIENT_ID = "stan: invalid clientID: only alphanumeric and `-` or `_` characters allowed"  # ErrInvalidClientID
INVALID_ACK_WAIT = "stan: invalid ack wait time, should be >= 1s"  # ErrInvalidAckWait
INVALID_MAX_INFLIGHT = "stan: invalid MaxInflight, should be >= 1"  # ErrInvalidMaxInflight
INVALID_CONN_REQ = "stan: invalid connection request"  # ErrInvalidConnReq
INVALID_PUB_REQ = "stan: invalid publish request"  # ErrInvalidPubReq
INVALID_SUB_REQ = "stan: invalid subscription request"  # ErrInvalidSubReq
INVALID_UNSUB_REQ = "stan: invalid unsubscribe request"  # ErrInvalidUnsubReq
INVALID_CLOSE_REQ = "stan: invalid close request"  # ErrInvalidCloseReq
DUP_DURABLE = "stan: duplicate durable registration"  # ErrDupDurable
INVALID_DUR_NAME = "stan: durable name of a durable queue subscriber can't contain the character ':'"  # ErrInvalidDurName
UNKNOWN_CLIENT = "stan: unknown clientID"  # ErrUnknownClient
UNKNOWN_CHANNEL = "stan: unknown channel"  # ErrUnknownChannel
NO_CHANNEL = "stan: no configured channel"  # ErrNoChannel
CLUSTERED_RESTART = "stan: cannot restart server in clustered mode if it was not previously clustered"  # ErrClusteredRestart
CHAN_DEL_IN_PROGRESS = "stan: channel is being deleted"  # ErrChanDelInProgress

# stores/store.go
TOO_MANY_CHANNELS = "too many channels"  # ErrTooManyChannels
TOO_MANY_SUBS = "too many subscriptions per channel"  # ErrTooManySubs

# processClientPings: the PingResponse error for an unknown connection id
PING_CLIENT_REPLACED = "client has been replaced or is no longer registered"

# natserver's own: the bound on registered clients (StanOptions.max_clients) has no
# nats-streaming-server counterpart, so no text to copy
MAX_CLIENTS = "stan: maximum clients exceeded"
