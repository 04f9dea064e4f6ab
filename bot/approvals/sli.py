"""The role's SLI after a change settled (`verify.sli: {query, healthy_below}` on a role):
read once, at the end of the verification watch, from the Prometheus of the write's
cluster, with the role's namespaces enforced inside the query (`scope_promql`), as for any
query kelpie sends. The worst series counts. A query that cannot be run or returns nothing
is reported beside the verdict, never taken for a recovery failure: a Prometheus outage is
no reason to roll a healthy change back."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

from bot.approvals.verify import SliReading
from bot.config import RoleConfig
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
        sli = role.verify.sli if role is not None else None
        if role is None or sli is None:
            return None
        unread = SliReading(sli.query, None, sli.healthy_below)
        prometheus = self._prometheus_for(approval.plan.cluster)
        if prometheus is None:
            return _failed(unread, NO_PROMETHEUS.format(cluster=approval.plan.cluster))
        scope = NamespaceScope(
            patterns=tuple(role.namespaces),
            cluster_metrics=role.observability.cluster_metrics,
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


def _failed(reading: SliReading, why: str) -> SliReading:
    return SliReading(reading.query, None, reading.limit, why)
