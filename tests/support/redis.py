"""The real Redis server the tests use (never a fake)."""

from __future__ import annotations

import os

REDIS_URL = os.environ.get("LOOPWARDEN_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
