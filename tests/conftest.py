"""Test-wide setup: LiteLLM must not fetch its price map over the network at import."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from collections.abc import AsyncIterator

import pytest

from tests.peers.kube_server import Demo, KubeServer
from tests.world import World, running_world

pytest_plugins = ["tests.realkube.fixtures"]


@pytest.fixture
async def world(tmp_path) -> AsyncIterator[World]:
    """The Slack, model and Kubernetes peers; each test starts kelpie as it needs."""
    async with running_world(tmp_path) as world:
        yield world


@pytest.fixture
async def kube() -> AsyncIterator[KubeServer]:
    """The Kubernetes-compatible peer, empty; `demo` seeds the small shop world."""
    server = KubeServer()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def demo(kube: KubeServer) -> Demo:
    return kube.seed_demo()
