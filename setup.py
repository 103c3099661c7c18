"""The optional compiled parts (everything else is in pyproject.toml).

natserver/protocol/_cscan.c is the compiled twin of the parser's per-message PUB loop. It is
optional: without a compiler (or with NATSERVER_NO_EXTENSIONS=1 set at install time) the build
goes on without it and the parser runs in Python alone, with the same results.
"""

import os

from setuptools import Extension, setup

extensions = []
if not os.environ.get("NATSERVER_NO_EXTENSIONS"):
    extensions.append(Extension("natserver.protocol._cscan", ["natserver/protocol/_cscan.c"], optional=True))

setup(ext_modules=extensions)
