"""LoopWarden: an OpenAI-compatible guarding reverse proxy for LLM agents."""

from proxy.edge.app import create_app
from proxy.errors import ProxyError
from proxy.settings import Settings
from proxy.upstream.client import UpstreamClient

__all__ = ["ProxyError", "Settings", "UpstreamClient", "__version__", "create_app"]

__version__ = "0.1.0"
