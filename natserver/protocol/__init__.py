"""The NATS client protocol, sans-IO: the parser (``feed`` bytes, take ops), the op types,
the ``-ERR`` table, nats-server's named defaults (``const``) and how Go prints durations
(``gotext``).

The bottom layer: it imports nothing from natserver and never imports trio.
"""
