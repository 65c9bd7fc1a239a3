"""The suite over every wire format: each test runs once per format of ``wire_format``."""

from tests.support.formats import fake, proxy, wire_format
from tests.support.responses_fixtures import responses_server, socket_server

__all__ = ["fake", "proxy", "responses_server", "socket_server", "wire_format"]
