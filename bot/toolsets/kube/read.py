"""Every Kubernetes read toolset (kinds `read` and `diagnose`), in the order the model is
offered them."""

from __future__ import annotations

from bot.toolsets.kube.changes import Clock, change_tools, system_clock
from bot.toolsets.kube.client import KubeClients
from bot.toolsets.kube.diagnose import diagnose_tools
from bot.toolsets.kube.events import event_tools
from bot.toolsets.kube.generic import generic_tools
from bot.toolsets.kube.namespaces import namespace_tools
from bot.toolsets.kube.network import network_tools
from bot.toolsets.kube.nodes import node_tools
from bot.toolsets.kube.pods import pod_log_tools, pod_tools
from bot.toolsets.kube.usage import usage_tools
from bot.toolsets.kube.workloads import workload_tools
from bot.toolsets.spec import Tool


def read_tools(clients: KubeClients, *, clock: Clock = system_clock) -> list[Tool]:
    """The read and diagnose tools, bound to `clients` (each handler picks the context's cluster);
    `clock` is the time the tools that look back over a window measure from."""
    return [
        *namespace_tools(clients),
        *pod_tools(clients),
        *pod_log_tools(clients),
        *workload_tools(clients),
        *event_tools(clients),
        *node_tools(clients),
        *network_tools(clients),
        *generic_tools(clients),
        *usage_tools(clients),
        *change_tools(clients, clock=clock),
        *diagnose_tools(clients),
    ]
