"""LoopWarden: an OpenAI-compatible guarding reverse proxy for LLM agents."""

from proxy.edge.app import create_app
from proxy.errors import ProxyError
from proxy.settings import Settings
from proxy.upstream.client import UpstreamClient
from proxy.version import VERSION

__all__ = ["ProxyError", "Settings", "UpstreamClient", "__version__", "create_app"]

__version__ = VERSION
