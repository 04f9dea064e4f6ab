"""Whether a GitOps controller manages an object, from the marks Argo CD and Flux leave on it.

Argo CD tracks what it applied by the annotation `argocd.argoproj.io/tracking-id`
(`<app>:<group>/<kind>:<namespace>/<name>`), or by a label: `app.kubernetes.io/instance`
(its default label tracking, counted only beside an Argo CD annotation, since Helm charts
set that label too) or `argocd.argoproj.io/instance`. Flux's kustomize-controller and
helm-controller label what they apply with their object's name and namespace.

A change made by hand to such an object is reverted at the controller's next sync (Argo CD
with self-heal, Flux on every reconcile), so a write says so: refused by default, or proposed
with the sentence on its card (`kubernetes.gitops`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bot.toolsets.kube.render import dig

ARGO_TRACKING = "argocd.argoproj.io/tracking-id"
ARGO_INSTANCE = "argocd.argoproj.io/instance"
ARGO_PREFIX = "argocd.argoproj.io/"
INSTANCE = "app.kubernetes.io/instance"
FLUX = (
    ("kustomize.toolkit.fluxcd.io", "Kustomization"),
    ("helm.toolkit.fluxcd.io", "HelmRelease"),
)


@dataclass(frozen=True)
class Manager:
    """The GitOps controller that manages an object, and its object that does."""

    controller: str  # "Argo CD", "Flux"
    owner: str  # "Application checkout", "Kustomization flux-system/apps"

    def refusal(self, what: str) -> str:
        return (
            f"{what} is managed by {self.controller} ({self.owner}), which would revert this "
            f"change at its next sync; change it in Git instead (kubernetes.gitops is refuse)."
        )

    def warning(self, what: str) -> str:
        return (
            f"{what} is managed by {self.controller} ({self.owner}): it may revert this change "
            "at its next sync unless the change is also made in Git."
        )


def managed_by(obj: Any) -> Manager | None:
    """The GitOps controller whose marks `obj` carries, or None."""
    labels = dig(obj, "metadata", "labels") or {}
    annotations = dig(obj, "metadata", "annotations") or {}
    return _argo(labels, annotations) or _flux(labels)


def _argo(labels: dict[str, Any], annotations: dict[str, Any]) -> Manager | None:
    tracking = annotations.get(ARGO_TRACKING)
    if isinstance(tracking, str) and tracking:
        return Manager("Argo CD", f"Application {tracking.split(':', 1)[0]}")
    if app := labels.get(ARGO_INSTANCE):
        return Manager("Argo CD", f"Application {app}")
    argo_marked = any(str(key).startswith(ARGO_PREFIX) for key in annotations)
    if (app := labels.get(INSTANCE)) and argo_marked:
        return Manager("Argo CD", f"Application {app}")
    return None


def _flux(labels: dict[str, Any]) -> Manager | None:
    for group, kind in FLUX:
        name = labels.get(f"{group}/name")
        if name:
            namespace = labels.get(f"{group}/namespace")
            return Manager("Flux", f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}")
    return None
