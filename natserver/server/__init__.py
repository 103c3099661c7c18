"""The running core server: listeners and the client registry (``server``), one client
connection (``client``), the ping timers (``keepalive``), monitoring over HTTP
(``monitor``), signals and reload (``signals``), logging (``log``), the pid and ports files
(``files``).

May import: natserver.protocol, .routing, .auth, .config. Never the subsystems built on it
(natserver.jetstream, .nsq, .stan, .cluster): those are handed to ``Server`` as ``Subsystem``
objects by natserver.app.
"""
