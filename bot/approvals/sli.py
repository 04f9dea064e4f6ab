"""The role's SLI after a change settled (`verify.sli: {query, healthy_below}` on a role):
read once, at the end of the verification watch, from the Prometheus of the write's
cluster, with the role's namespaces enforced inside the query (`scope_promql`), as for any
query kelpie sends. A namespace may name its own (`verify.namespaces: {shop: {sli: …}}`,
names or globs, an exact name first): after a write there it replaces the role's and is
enforced to that one namespace, so `sum(rate(errors[5m]))` reads shop's errors only.
The worst series counts. A query that cannot be run or returns nothing is reported beside
the verdict, never taken for a recovery failure: a Prometheus outage is no reason to roll
a healthy change back."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from fnmatch import fnmatchcase

from bot.approvals.verify import SliReading
from bot.config import RoleConfig, SliConfig
from bot.toolsets.observe.http import ObserveError, ObserveHttp
from bot.toolsets.observe.prometheus import Prometheus
from bot.toolsets.observe.scope import NamespaceScope, QueryRefused, scope_promql
from bot.values import Approval

NO_PROMETHEUS = "no Prometheus is configured for cluster {cluster}"
NO_SERIES = "the query returned no series"


class PrometheusSlis:
    """Implements the verification watch's `Slis` port."""

    def __init__(
        self,
        roles: Mapping[str, RoleConfig],
        prometheus_for: Callable[[str], Prometheus | None],
        *,
        denied: tuple[str, ...] = (),
        clock: Callable[[], float] = time.time,
        http: ObserveHttp | None = None,
    ) -> None:
        self._http = http  # closed with the watches (shared by the clients it serves)
        self._roles = roles
        self._prometheus_for = prometheus_for
        self._denied = denied
        self._clock = clock

    async def check(self, approval: Approval) -> SliReading | None:
        role = self._roles.get(approval.role)
        chosen = chosen_sli(role, approval.plan.target.namespace) if role is not None else None
        if chosen is None:
            return None
        sli, (patterns, cluster_metrics) = chosen
        unread = SliReading(sli.query, None, sli.healthy_below)
        prometheus = self._prometheus_for(approval.plan.cluster)
        if prometheus is None:
            return _failed(unread, NO_PROMETHEUS.format(cluster=approval.plan.cluster))
        scope = NamespaceScope(
            patterns=patterns,
            cluster_metrics=cluster_metrics,
            label=prometheus.endpoint.namespace_label,
            denied=self._denied,
        )
        try:
            result = await prometheus.instant(scope_promql(sli.query, scope), self._clock())
        except (QueryRefused, ObserveError) as error:
            return _failed(unread, str(error).rstrip("."))
        values = [s.value for s in result.samples if not math.isnan(s.value)]
        if not values:
            return _failed(unread, NO_SERIES)
        return SliReading(sli.query, max(values), sli.healthy_below)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()


def chosen_sli(
    role: RoleConfig, namespace: str
) -> tuple[SliConfig, tuple[tuple[str, ...], bool]] | None:
    """The SLI after a write in `namespace` ("" for a node) and where it is read: the
    namespace's own (that namespace only), else the role's (its namespaces)."""
    own = role.verify.namespaces
    key = namespace if namespace in own else None
    if namespace and key is None:
        key = next((pattern for pattern in own if fnmatchcase(namespace, pattern)), None)
    if key is not None:
        return own[key].sli, ((namespace,), False)
    if role.verify.sli is None:
        return None
    return role.verify.sli, (tuple(role.namespaces), role.observability.cluster_metrics)


def _failed(reading: SliReading, why: str) -> SliReading:
    return SliReading(reading.query, None, reading.limit, why)
