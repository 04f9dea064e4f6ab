"""The configured Prometheus, Loki and Alertmanager instances, secrets read once at startup,
and which one a channel's cluster uses: the instance naming that cluster, else the one
naming none, else none (the tool says so in one sentence).
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.config import ObservabilityConfig, Secrets
from bot.toolsets.observe.http import Endpoint, ObserveError

KINDS = ("prometheus", "loki", "alertmanager")
GONE = "{title} {name} is no longer configured; nothing was sent."
NOT_CONFIGURED = "No {title} is configured for cluster {cluster}."
_TITLES = {"prometheus": "Prometheus", "loki": "Loki", "alertmanager": "Alertmanager"}


@dataclass(frozen=True)
class Instances:
    endpoints: tuple[Endpoint, ...] = ()

    @classmethod
    def from_config(cls, config: ObservabilityConfig, secrets: Secrets) -> Instances:
        """Every instance with its headers; a missing variable is a ConfigError naming it."""
        endpoints = []
        for kind, listed in config.by_kind():
            for index, instance in enumerate(listed):
                endpoints.append(
                    Endpoint(
                        kind=kind,
                        name=instance.name,
                        url=instance.url,
                        cluster=instance.cluster,
                        timeout_s=instance.timeout_s,
                        headers=secrets.observability_headers(kind, index, instance),
                        namespace_label=instance.namespace_label,
                        external_url=instance.external_url,
                        ca_file=instance.tls.ca_file,
                        insecure_skip_verify=instance.tls.insecure_skip_verify,
                    )
                )
        return cls(tuple(endpoints))

    def pick(self, kind: str, cluster: str) -> Endpoint:
        """The instance of `kind` for `cluster`, or ObserveError with the sentence."""
        of_kind = [endpoint for endpoint in self.endpoints if endpoint.kind == kind]
        for wanted in (cluster, None):
            for endpoint in of_kind:
                if endpoint.cluster == wanted:
                    return endpoint
        raise ObserveError(NOT_CONFIGURED.format(title=_TITLES[kind], cluster=cluster))

    def named(self, kind: str, name: str) -> Endpoint:
        """The instance a write's plan names (it may have gone from the config since)."""
        for endpoint in self.endpoints:
            if endpoint.kind == kind and endpoint.name == name:
                return endpoint
        raise ObserveError(GONE.format(title=_TITLES[kind], name=name))
