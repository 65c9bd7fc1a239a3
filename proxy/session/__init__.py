"""Per-session state: the protocol, and the in-memory and Redis stores behind it."""

from proxy.session.base import SessionDelta, SessionState, SessionStore, StoreUnavailable

__all__ = ["SessionDelta", "SessionState", "SessionStore", "StoreUnavailable"]
