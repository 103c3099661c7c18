"""Where messages go: the subject trie with queue groups and its match cache (``sublist``),
subject validation and relations between wildcard subjects (``subjects``), and accounts'
separate subject spaces with their imports and exports (``accounts``).

May import: natserver.protocol. Never the server: an account reaches its server only through
the object it was given (``server.make_internal_client``).
"""
