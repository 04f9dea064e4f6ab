"""Test-wide setup: LiteLLM must not fetch its price map over the network at import."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from collections.abc import AsyncIterator, Iterator

import pytest

from tests.bot_processes import Launcher
from tests.peers.kube_server import Demo, KubeServer
from tests.postgres import PostgresServer
from tests.world import World, running_world

pytest_plugins = ["tests.realkube.fixtures"]


@pytest.fixture
async def world(tmp_path) -> AsyncIterator[World]:
    """The Slack, model and Kubernetes peers; each test starts kelpie as it needs."""
    async with running_world(tmp_path) as world:
        yield world


@pytest.fixture
def launch(world: World, tmp_path) -> Iterator[Launcher]:
    """Starts `kelpie run` processes on the world's config (`tests/bot_processes.py`);
    whatever is still running when the test ends is killed."""
    launcher = Launcher(world, tmp_path)
    yield launcher
    launcher.kill_all()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> pytest.TestReport:
    """A failed test that ran `kelpie run` processes shows what they logged: a failure
    under load is seldom repeated alone."""
    report: pytest.TestReport = yield
    launcher = getattr(item, "funcargs", {}).get("launch")
    if report.failed and isinstance(launcher, Launcher):
        report.sections.append(("kelpie run log", launcher.log_tail()))
    return report


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One real PostgreSQL server for the test session (started on first use)."""
    server = PostgresServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
async def database_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """The same test on SQLite and on a fresh database in the real PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/k.db"
    server: PostgresServer = request.getfixturevalue("postgres")
    return await server.new_database()


@pytest.fixture
async def any_db_world(tmp_path, database_url: str) -> AsyncIterator[World]:
    """The test world on SQLite and on PostgreSQL (for the tests that matter on both)."""
    async with running_world(tmp_path, database_url=database_url) as world:
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
