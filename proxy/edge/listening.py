"""Binding the proxy's two ports, and saying how to fix it when that fails.

The API socket and the metrics listener are both bound before the proxy says it is serving,
so a port another process holds is reported once, as one line naming the address, what holds
it back and the flag (and variable) that changes it, and the process exits 2: never uvicorn's
raw ``[Errno 98]`` line after a ``serving`` line that was not true.
"""

from __future__ import annotations

import errno
import socket

__all__ = ["API", "BACKLOG", "METRICS", "ListenError", "Listener", "cannot_listen", "listening_socket"]

BACKLOG = 2048
"""Connections the kernel queues before the proxy accepts them (uvicorn's default)."""


class ListenError(OSError):
    """A port of the proxy cannot be bound; ``strerror`` is the whole message, fix included."""


class Listener:
    """Which listener a port belongs to, and the settings that move it."""

    def __init__(self, what: str, host_setting: str, port_setting: str) -> None:
        self.what = what
        self.host_setting = host_setting
        self.port_setting = port_setting

    def _setting(self, name: str) -> str:
        return f"--{name.replace('_', '-')} (LOOPWARDEN_{name.upper()})"

    @property
    def host_flag(self) -> str:
        return self._setting(self.host_setting)

    @property
    def port_flag(self) -> str:
        return self._setting(self.port_setting)


API = Listener("the API", "host", "port")
METRICS = Listener("the metrics listener", "metrics_host", "metrics_port")


def cannot_listen(error: OSError, host: str, port: int, listener: Listener) -> ListenError:
    """The error that says why ``listener`` could not bind ``host:port`` and what to change."""
    where = f"{host}:{port}"
    code = error.errno
    if code == errno.EADDRINUSE:
        why = (
            f"port {port} is already in use (another loopwarden, or another program, listens there); "
            f"stop it, or give {listener.what} another port with {listener.port_flag}"
        )
    elif code == errno.EACCES:
        why = (
            f"no permission to listen on port {port} (ports below 1024 need privileges); "
            f"give {listener.what} another port with {listener.port_flag}"
        )
    elif code == errno.EADDRNOTAVAIL or isinstance(error, socket.gaierror):
        why = f"this machine has no address {host!r}; give {listener.what} another with {listener.host_flag}"
    else:
        why = f"{error.strerror or error}; check {listener.host_flag} and {listener.port_flag}"
    return ListenError(code or 0, f"{listener.what} cannot listen on {where}: {why}")


def listening_socket(host: str, port: int, listener: Listener = API, *, reuse_port: bool = False) -> socket.socket:
    """A TCP socket bound to ``host:port`` as uvicorn binds one (IPv6 for an address with a
    colon, ``SO_REUSEADDR``), with ``reuse_port`` also ``SO_REUSEPORT`` (other processes may
    bind the same port); else a :class:`ListenError` saying how to fix it."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)  # from the "serving" line on, connections queue until the loop accepts them
    except OSError as exc:
        sock.close()
        raise cannot_listen(exc, host, port, listener) from None
    return sock
