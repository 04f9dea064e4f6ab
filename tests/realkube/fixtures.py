"""The `realkube` session fixture and the `backend` fixture (`fake` | `real`), registered for
the whole test suite by tests/conftest.py (`pytest_plugins`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from tests.peers.kube_server import KubeServer
from tests.realkube.backends import Backend, FakeBackend, RealBackend
from tests.realkube.cluster import Admin, RealKube, start, stop


@pytest.fixture(scope="session")
def realkube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RealKube, Admin]]:
    """One real control plane per session, in its own run dir. Failing to start is an
    error of every test that needs it, never a skip."""
    cluster = start(tmp_path_factory.mktemp("realkube-run"))
    try:
        admin = Admin(cluster)
        admin.apply_rbac()
        yield cluster, admin
    finally:
        stop(cluster)


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.realkube)])
async def backend(request: pytest.FixtureRequest, tmp_path) -> AsyncIterator[Backend]:
    """The same tool-level test against the fake and against the real API server."""
    if request.param == "real":
        cluster, admin = request.getfixturevalue("realkube")
        real = RealBackend(cluster, admin)
        yield real
        real.close()
        return
    kube = KubeServer()
    await kube.start()
    fake = FakeBackend(kube, tmp_path)
    yield fake
    fake.close()
    await kube.stop()
