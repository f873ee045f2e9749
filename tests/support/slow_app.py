"""An app that takes a minute to import, and says so first on stderr: while it loads,
``flo-redis worker slow_app:build`` is still starting."""

from __future__ import annotations

import sys
import time

print("slow_app: loading", file=sys.stderr, flush=True)
time.sleep(60)
