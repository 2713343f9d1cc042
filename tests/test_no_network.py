"""The test run itself has no network: pytest-socket (configured in pyproject.toml) blocks every host but loopback.

This pins the promise that no test downloads a model or talks to a real server; the Ollama tests use a
loopback replay of its wire format instead.
"""

from __future__ import annotations

import socket

import pytest
from pytest_socket import SocketConnectBlockedError


@pytest.mark.filterwarnings("ignore:A test tried to use socket:UserWarning")  # pytest-socket says what it blocked
def test_a_connection_outside_loopback_is_refused_by_the_test_run() -> None:
    with pytest.raises(SocketConnectBlockedError):
        # 0.0.0.0 is not on the allow list; were the block ever off, this would still only reach this machine.
        socket.create_connection(("0.0.0.0", 9), timeout=1)


def test_loopback_stays_open_for_the_replay_server() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            pass
