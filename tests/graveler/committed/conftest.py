"""Fixtures of the committed-layer tests; the helpers they use live in committed_helpers."""

from __future__ import annotations

import pytest

from committed_helpers import SMALL_RANGES, CountingMemoryBlock  # noqa: F401
from lakefuse.graveler.committed import CommittedManager


@pytest.fixture
def block() -> CountingMemoryBlock:
    return CountingMemoryBlock()


@pytest.fixture
def manager(block):
    m = CommittedManager(block, None, None, SMALL_RANGES)
    yield m
    m.close()


