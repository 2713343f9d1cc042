"""The test run itself has no network: pytest-socket (configured in pyproject.toml) blocks every host but loopback.

This pins the promise that no test downloads a model or talks to a real server; the Ollama tests use a
loopback replay of its wire format instead.
"""

from __future__ import annotations

import socket

import pytest
from pytest_socket import SocketConnectBlockedError


def test_a_connection_outside_loopback_is_refused_by_the_test_run() -> None:
    with pytest.raises(SocketConnectBlockedError):
        socket.create_connection(("192.0.2.1", 80), timeout=1)  # TEST-NET-1: never a real host


def test_loopback_stays_open_for_the_replay_server() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            pass
