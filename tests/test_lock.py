"""The lock files pin every dependency pyproject.toml names, inside its range, with hashes:
CI and the container install from them, so a dependency added without re-locking fails
here with the command that fixes it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent


def pins(lock: Path) -> dict[str, str]:
    text = lock.read_text()
    found = dict(re.findall(r"^([A-Za-z0-9_.\-]+)==([^\s\\;]+)", text, re.MULTILINE))
    assert text.count("--hash=sha256:") >= len(found)
    return {canonicalize_name(name): version for name, version in found.items()}


@pytest.mark.parametrize(
    ("lock", "extras"),
    [
        ("requirements.lock", []),
        ("requirements-dev.lock", ["dev"]),
        ("requirements-graphs.lock", ["graphs"]),
    ],
)
def test_lock_pins_every_dependency_within_its_range(lock, extras):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in extras:
        wanted += project["optional-dependencies"][extra]
    locked = pins(ROOT / lock)
    command = (ROOT / lock).read_text().splitlines()[1].strip("# ")
    for line in wanted:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{lock} lacks {name}: run {command}"
        assert requirement.specifier.contains(locked[name], prereleases=True), (
            f"{lock} pins {name}=={locked[name]}, outside {requirement.specifier}: run {command}"
        )


def test_the_image_installs_graphs_at_the_versions_ci_tests():
    """deploy/Dockerfile installs requirements-graphs.lock by default (show_graph draws in
    the image): requirements.lock's pins plus matplotlib's, each at the dev lock's version."""
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "ARG LOCK=requirements-graphs.lock" in dockerfile
    assert "-r ${LOCK}" in dockerfile
    graphs, main, dev = (
        pins(ROOT / name)
        for name in ("requirements-graphs.lock", "requirements.lock", "requirements-dev.lock")
    )
    assert "matplotlib" in graphs
    assert {name: graphs.get(name) for name in main} == main
    assert {name: dev.get(name) for name in graphs} == graphs
