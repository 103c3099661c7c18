"""From what a user writes to an ``Options`` value: the conf-file parser (``conf``), the
mapping of its keys to options with nats-server's errors and warnings (``mapping``), the
command-line flags (``flags``) and ``Options`` itself (``options``).

May import: natserver.protocol, natserver.routing, natserver.auth. It never imports the
server: reload (in natserver.server.signals) calls down into it.
"""
