"""The optional compiled parts (everything else is in pyproject.toml).

natserver/protocol/_cscan.c is the compiled twin of the parser's per-message PUB loop, and
natserver/server/_croute.c of the delivery loop's common case; natserver/server/_arenas.c gives
the memory of CPython's empty small-object pools back after a storm (reclaim.py). All are optional: without a
compiler (or with NATSERVER_NO_EXTENSIONS=1 set at install time) the build goes on without them
and natserver runs in Python alone, with the same results.
"""

import os

from setuptools import Extension, setup

extensions = []
if not os.environ.get("NATSERVER_NO_EXTENSIONS"):
    extensions.append(Extension("natserver.protocol._cscan", ["natserver/protocol/_cscan.c"], optional=True))
    extensions.append(Extension("natserver.server._croute", ["natserver/server/_croute.c"], optional=True))
    extensions.append(Extension("natserver.server._arenas", ["natserver/server/_arenas.c"], optional=True))

setup(ext_modules=extensions)
