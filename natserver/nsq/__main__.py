"""``python -m natserver.nsq [nsqd|nsqlookupd] [flags]``: see natserver.nsq.cli."""

import sys

from .cli import main

sys.exit(main())
