"""The security suite's shared fixtures: the scripted Responses upstream (``fake``), reset
around each test, for the tests that attack the Responses API."""

from tests.support.responses_fixtures import fake, responses_server

__all__ = ["fake", "responses_server"]
