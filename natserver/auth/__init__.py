"""Who may connect and what they may do: users, passwords and permissions (``users``), nkeys
(``nkeys``), operator and account JWTs (``jwt``), TLS contexts and certificate identities
(``tls``).

May import: natserver.protocol, natserver.routing.
"""
