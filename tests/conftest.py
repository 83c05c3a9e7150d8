"""Shared test setup: the network is blocked for every model (loopback stays allowed)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("NBAGENT_BLOCK_NETWORK", "1")


@pytest.fixture(autouse=True)
def _block_network() -> Iterator[None]:
    from nbagent.llms import block_network

    with block_network(True):
        yield


@pytest.fixture(autouse=True)
def _random_ids() -> Iterator[None]:
    """Each test starts with random ids; a test that seeds them does not leak the seed."""
    from nbagent import ids

    saved = ids._rng
    ids.seed_ids(None)
    yield
    ids._rng = saved
