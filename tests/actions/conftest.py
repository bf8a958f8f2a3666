"""Fixtures of the actions tests: the loopback hook server, a closed loopback port, and one
local storage namespace per repository."""

from __future__ import annotations

import socket

import pytest
from actions_helpers import running_hook_server

from lakefuse.block.local import LocalBlockAdapter


@pytest.fixture
def hook_server():
    with running_hook_server() as server:
        yield server


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


@pytest.fixture
def namespaces(tmp_path):
    """``block_for_repo``: one LocalBlockAdapter per repository under tmp_path."""
    blocks: dict[str, LocalBlockAdapter] = {}

    def block_for_repo(repository_id: str) -> LocalBlockAdapter:
        if repository_id not in blocks:
            blocks[repository_id] = LocalBlockAdapter(tmp_path / "ns" / repository_id)
        return blocks[repository_id]

    return block_for_repo
