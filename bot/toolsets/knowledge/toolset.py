"""The knowledge toolset as the composition root registers it: the runbook tools when
runbooks are configured, past_incidents when memory is on (every one to check roles)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from bot.config import KnowledgeConfig, RunbooksConfig
from bot.store.memory import IncidentMemories
from bot.toolsets.knowledge.incidents import Incidents, incident_tools
from bot.toolsets.knowledge.runbooks import Runbooks, RunbookSource, runbook_tools
from bot.toolsets.kube.client import KubeClients
from bot.toolsets.spec import Tool


@dataclass(frozen=True)
class Knowledge:
    """The sources the knowledge tools and a turn's offering share."""

    runbooks: RunbookSource | None
    incidents: Incidents | None = None


def knowledge(
    config: KnowledgeConfig,
    kube: KubeClients,
    cluster: str,
    memories: IncidentMemories,
    denied: tuple[str, ...] = (),
) -> Knowledge:
    """`denied`: the firewall's namespace globs, which no remembered incident is read from."""
    source = RunbookSource(config.runbooks, kube, cluster, time.monotonic)
    return Knowledge(
        runbooks=source if source.configured else None,
        incidents=Incidents(memories, denied) if config.memory.enabled else None,
    )


def knowledge_tools(found: Knowledge) -> list[Tool]:
    tools: list[Tool] = []
    if found.runbooks is not None:
        tools += runbook_tools(Runbooks(found.runbooks))
    if found.incidents is not None:
        tools += incident_tools(found.incidents)
    return tools


def every_knowledge_tool() -> list[Tool]:
    """Every knowledge tool this build can offer (nothing is read)."""
    source = RunbookSource(RunbooksConfig(path="."), KubeClients({}), "", time.monotonic)
    return knowledge_tools(Knowledge(runbooks=source, incidents=Incidents(None)))
