"""``python -m proxy`` is ``loopwarden``."""

import sys

from proxy.cli import main

sys.exit(main())
