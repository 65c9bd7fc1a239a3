"""LoopWarden: an OpenAI-compatible guarding reverse proxy for LLM agents.

The app and the upstream client are imported on first use: ``loopwarden hash-key``,
``check-policies`` and ``--help`` then start without loading the whole server."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proxy.errors import ProxyError
from proxy.settings import Settings
from proxy.version import VERSION

if TYPE_CHECKING:
    from proxy.edge.app import create_app
    from proxy.upstream.client import UpstreamClient

__all__ = ["ProxyError", "Settings", "UpstreamClient", "__version__", "create_app"]

__version__ = VERSION


def __getattr__(name: str) -> Any:
    """The public names that pull in the server, imported when first asked for."""
    if name == "create_app":
        from proxy.edge.app import create_app

        return create_app
    if name == "UpstreamClient":
        from proxy.upstream.client import UpstreamClient

        return UpstreamClient
    raise AttributeError(f"module 'proxy' has no attribute {name!r}")
