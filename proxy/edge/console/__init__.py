"""The operator console: sessions, one session's ending and timeline, the fleet's counts.

Served under ``/console`` on the metrics listener (never the API port), read-only,
server-rendered from the package's templates (no build step, no external assets).
"""

from proxy.edge.console.app import Console
from proxy.edge.console.views import ConsoleSources

__all__ = ["Console", "ConsoleSources"]
