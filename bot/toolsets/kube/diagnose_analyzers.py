"""The deterministic analyzers: pure functions from the objects read to findings.

No model and no I/O: each takes wire objects (camelCase dicts, as the API server sends them)
and answers the findings they show, each resting on one field (diagnose_findings.py).
The toolset (diagnose.py) reads the objects and calls these.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from bot.toolsets.kube.diagnose_findings import Evidence, Finding, ObjectRef, Severity, clip
from bot.toolsets.kube.render import Obj, age, dig, event_time, sorted_events
from bot.values import plural

# Previous log lines of one container, keyed by (pod name, container name).
Logs = Mapping[tuple[str, str], Sequence[str]]

_MESSAGE_CHARS = 240
_IMAGE_PULL = ("ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull")
_CONFIG_ERRORS = ("CreateContainerConfigError", "CreateContainerError", "RunContainerError")
_PRESSURE = ("MemoryPressure", "DiskPressure", "PIDPressure")

# The next step each problem suggests: the one place these sentences live.
NEXT = {
    "CrashLoopBackOff": "Read why it exits in the previous logs; a restart will not fix it.",
    "CrashLoopNoLogs": "Read its previous logs (pod_logs previous=true) for why it exits.",
    "Restarted": "If the restarts are recent, read its previous logs (pod_logs previous=true).",
    "OOMKilled": "Raise the memory limit (set_container_resources) or find what grows.",
    "OOMKilledNoLimit": "The node ran out of memory: set a memory limit and check the node.",
    "ImagePull": "Check the image name and tag, and the registry's credentials and reach.",
    "ContainerConfig": "Fix what the message names (a missing ConfigMap, Secret or key).",
    "InitContainerFailing": "Read the init container's previous logs; the pod waits on it.",
    "Insufficient": "Lower the pod's requests, free capacity, or add nodes.",
    "Taints": "Add a toleration for the taint, or run it on untainted nodes.",
    "Affinity": "Compare its nodeSelector/affinity with the nodes' labels.",
    "UnboundClaim": "Check the claim's storage class and its events.",
    "Unschedulable": "Read the scheduler's message and the nodes' capacity (list_nodes).",
    "NotScheduled": "Check that a scheduler runs and sees this pod (list_events).",
    "Liveness": "The kubelet restarts it: check the probe's endpoint, port and timeouts.",
    "Readiness": "It is out of its Services' endpoints: check the probe and what it needs.",
    "Startup": "Check the startup probe's endpoint and how long the app needs to start.",
    "PodFailed": "Read the reason; a controller should replace it (delete_pod if not).",
    "ProgressDeadlineExceeded": "Diagnose the new pods; roll back (rollback_deployment) "
    "if the new version is bad.",
    "UnavailableReplicas": "Diagnose its pods (the findings on them say why).",
    "JobFailed": "Read the failed pods' logs; fix the cause before re-running the job.",
    "JobPodsFailing": "Read the failed pods' previous logs before it hits its backoff limit.",
    "HPAAtMaximum": "Raise maxReplicas if the load is real, or find why usage is high.",
    "SelectorMatchesNoPod": "Compare the selector with the pods' labels (list_pods).",
    "NoReadyEndpoints": "Its pods are not ready: diagnose them.",
    "TargetPortNamed": "Name a port its pods declare, or add that name to the containers.",
    "TargetPortNumber": "Point targetPort at the port the app listens on.",
    "NodeNotReady": "Check the kubelet and the node's network; its pods may be evicted.",
    "NetworkUnavailable": "Check the node's network plugin (CNI).",
    "MemoryPressure": "The kubelet evicts pods: find what uses memory, or add capacity.",
    "DiskPressure": "The kubelet evicts pods and images: free disk on the node.",
    "PIDPressure": "Find the process leaking threads or processes on the node.",
    "CordonedWithPods": "Drain it if maintenance is meant, else uncordon_node.",
}


def ref_of(obj: Obj, kind: str) -> ObjectRef:
    meta = obj.get("metadata") or {}
    return ObjectRef(kind, str(meta.get("namespace") or ""), str(meta.get("name") or "?"))


def _event_ref(event: Obj) -> ObjectRef:
    return ref_of(event, "Event")


def _message(event: Obj) -> str:
    return str(event.get("message") or event.get("note") or "")


def _count(event: Obj) -> int:
    count = event.get("count") or dig(event, "series", "count") or 1
    return int(count) if isinstance(count, int) else 1


def condition(obj: Obj, kind: str) -> Obj | None:
    for found in dig(obj, "status", "conditions") or []:
        if isinstance(found, dict) and found.get("type") == kind:
            return found
    return None


def _statuses(pod: Obj, key: str) -> list[Obj]:
    found = dig(pod, "status", key)
    return [s for s in found if isinstance(s, dict)] if isinstance(found, list) else []


def _spec_container(pod: Obj, key: str, name: str) -> Obj:
    for container in dig(pod, "spec", key) or []:
        if isinstance(container, dict) and container.get("name") == name:
            return container
    return {}


# --- pods ---------------------------------------------------------------------------------


def crashing_containers(pod: Obj) -> list[str]:
    """The containers (init ones first) whose previous logs explain a crash loop."""
    names = []
    for key in ("initContainerStatuses", "containerStatuses"):
        for status in _statuses(pod, key):
            if dig(status, "state", "waiting", "reason") == "CrashLoopBackOff":
                names.append(str(status.get("name")))
    return names


def analyze_pod(pod: Obj, events: Sequence[Obj], logs: Logs | None = None) -> list[Finding]:
    """Every pod analyzer over one pod and the events about it."""
    ref = ref_of(pod, "Pod")
    mine = [e for e in events if _about(e, "Pod", ref.name)]
    found = _init_containers(pod, ref, logs or {})
    for status in _statuses(pod, "containerStatuses"):
        found += _container(pod, ref, status, mine, logs or {})
    found += _scheduling(pod, ref, mine)
    found += _probes(ref, mine)
    found += _failed(pod, ref)
    return found


def _about(event: Obj, kind: str, name: str) -> bool:
    involved = event.get("involvedObject") or event.get("regarding") or {}
    return bool(involved.get("kind") == kind and involved.get("name") == name)


def _path(key: str, name: str, *rest: str) -> str:
    return ".".join([f"status.{key}[{name}]", *rest])


def _container(
    pod: Obj, ref: ObjectRef, status: Obj, events: Sequence[Obj], logs: Logs
) -> list[Finding]:
    name = str(status.get("name"))
    key = "containerStatuses"
    waiting = dig(status, "state", "waiting") or {}
    reason = waiting.get("reason")
    found: list[Finding] = []
    if reason == "CrashLoopBackOff":
        found.append(_crash_loop(ref, status, key, "CrashLoopBackOff", logs))
    elif reason in _IMAGE_PULL:
        found.append(_image_pull(pod, ref, status, events))
    elif reason in _CONFIG_ERRORS:
        message = clip(waiting.get("message") or reason, _MESSAGE_CHARS)
        text = f"container {name} cannot start ({reason}): {message}"
        evidence = Evidence(ref, _path(key, name, "state.waiting.reason"), str(reason))
        found.append(
            Finding(Severity.CRITICAL, reason, ref, evidence, text, NEXT["ContainerConfig"])
        )
    oom = _oom(pod, ref, status)
    if oom is None and not found:
        found += _restarted(ref, status)
    return found + ([oom] if oom else [])


def _restarted(ref: ObjectRef, status: Obj) -> list[Finding]:
    """A container running again after restarts: nothing is down now, but it flaps."""
    restarts = int(status.get("restartCount") or 0)
    if not restarts or dig(status, "state", "running") is None:
        return []
    name = str(status.get("name"))
    text = f"container {name} restarted {plural(restarts, 'time')}; {_last_exit(status)}"
    evidence = Evidence(ref, _path("containerStatuses", name, "restartCount"), str(restarts))
    return [Finding(Severity.INFO, "Restarted", ref, evidence, text, NEXT["Restarted"])]


def _last_exit(status: Obj) -> str:
    last = dig(status, "lastState", "terminated") or dig(status, "state", "terminated") or {}
    if not last:
        return "no previous exit recorded"
    return f"last exit code {last.get('exitCode')} ({last.get('reason') or 'no reason'})"


def _crash_loop(ref: ObjectRef, status: Obj, key: str, code: str, logs: Logs) -> Finding:
    name = str(status.get("name"))
    restarts = plural(int(status.get("restartCount") or 0), "restart")
    init = "init " if key == "initContainerStatuses" else ""
    text = f"{init}container {name} keeps crashing: {_last_exit(status)}, {restarts}"
    if init:
        text += "; the pod's containers cannot start until it succeeds"
    lines = logs.get((ref.name, name))
    detail: tuple[str, ...] = ()
    if lines:
        detail = (f"previous logs of {name} (last {len(lines)} lines, masked):",)
        detail += tuple(f"| {line}" for line in lines)
        step = NEXT["InitContainerFailing" if init else "CrashLoopBackOff"]
    else:
        step = NEXT["CrashLoopNoLogs"]
    evidence = Evidence(ref, _path(key, name, "state.waiting.reason"), "CrashLoopBackOff")
    return Finding(Severity.CRITICAL, code, ref, evidence, text, step, detail)


def _oom(pod: Obj, ref: ObjectRef, status: Obj) -> Finding | None:
    name = str(status.get("name"))
    for state in ("lastState", "state"):
        if dig(status, state, "terminated", "reason") != "OOMKilled":
            continue
        code = dig(status, state, "terminated", "exitCode")
        limit = dig(_spec_container(pod, "containers", name), "resources", "limits", "memory")
        if limit:
            text = f"container {name} was OOMKilled (exit code {code}) at its memory limit {limit}"
            step = NEXT["OOMKilled"]
        else:
            text = f"container {name} was OOMKilled (exit code {code}) with no memory limit set"
            step = NEXT["OOMKilledNoLimit"]
        field = _path("containerStatuses", name, state, "terminated.reason")
        evidence = Evidence(ref, field, "OOMKilled")
        return Finding(Severity.CRITICAL, "OOMKilled", ref, evidence, text, step)
    return None


def _image_pull(pod: Obj, ref: ObjectRef, status: Obj, events: Sequence[Obj]) -> Finding:
    name = str(status.get("name"))
    waiting = dig(status, "state", "waiting") or {}
    reason = str(waiting.get("reason"))
    image = status.get("image") or _spec_container(pod, "containers", name).get("image")
    pulls = [
        e
        for e in sorted_events(list(events))
        # Not "Error: ImagePullBackOff": the one with the registry's answer.
        if e.get("reason") == "Failed" and _message(e).startswith("Failed to pull image")
    ]
    if pulls:
        # The kubelet's event carries the registry's own answer (not found, unauthorized).
        message = _message(pulls[0])
        evidence = Evidence(_event_ref(pulls[0]), "message", message)
    else:
        message = str(waiting.get("message") or reason)
        evidence = Evidence(ref, _path("containerStatuses", name, "state.waiting.reason"), reason)
    text = f"container {name} cannot pull image {image} ({reason}): {clip(message, _MESSAGE_CHARS)}"
    return Finding(Severity.CRITICAL, reason, ref, evidence, text, NEXT["ImagePull"])


def _init_containers(pod: Obj, ref: ObjectRef, logs: Logs) -> list[Finding]:
    key = "initContainerStatuses"
    found = []
    for status in _statuses(pod, key):
        name = str(status.get("name"))
        waiting = dig(status, "state", "waiting", "reason")
        if waiting == "CrashLoopBackOff":
            found.append(_crash_loop(ref, status, key, "InitContainerFailing", logs))
            continue
        for state in ("state", "lastState"):
            done = dig(status, state, "terminated") or {}
            if done and int(done.get("exitCode") or 0) != 0:
                text = f"init container {name} failed: {_last_exit(status)}, " + (
                    plural(int(status.get("restartCount") or 0), "restart")
                )
                field = _path(key, name, state, "terminated.exitCode")
                evidence = Evidence(ref, field, str(done.get("exitCode")))
                step = NEXT["InitContainerFailing"]
                found.append(
                    Finding(Severity.CRITICAL, "InitContainerFailing", ref, evidence, text, step)
                )
                break
    return found


def _scheduling(pod: Obj, ref: ObjectRef, events: Sequence[Obj]) -> list[Finding]:
    if dig(pod, "status", "phase") != "Pending" or dig(pod, "spec", "nodeName"):
        return []
    scheduled = condition(pod, "PodScheduled")
    failed = [e for e in sorted_events(list(events)) if e.get("reason") == "FailedScheduling"]
    if scheduled is not None and scheduled.get("status") == "False" and scheduled.get("message"):
        message = str(scheduled["message"])
        evidence = Evidence(ref, "status.conditions[PodScheduled].message", message)
    elif failed:
        message = _message(failed[0])
        evidence = Evidence(_event_ref(failed[0]), "message", message)
    else:
        text = "Pending: no scheduler has placed it on a node yet"
        evidence = Evidence(ref, "status.phase", "Pending")
        return [
            Finding(Severity.WARNING, "NotScheduled", ref, evidence, text, NEXT["NotScheduled"])
        ]
    why, step = _unschedulable_because(message)
    text = f"Pending, unschedulable: {why} ({clip(message, _MESSAGE_CHARS)})"
    return [Finding(Severity.CRITICAL, "Unschedulable", ref, evidence, text, NEXT[step])]


def _unschedulable_because(message: str) -> tuple[str, str]:
    """The scheduler's reason in a few words, and which next step fits it."""
    insufficient = sorted(set(re.findall(r"Insufficient ([\w./-]*[\w/-])", message)))
    if insufficient:
        return f"insufficient {' and '.join(insufficient)} on the nodes", "Insufficient"
    lowered = message.lower()
    if "persistentvolumeclaim" in lowered:
        return "its PersistentVolumeClaim is not bound", "UnboundClaim"
    if "taint" in lowered:
        return "the nodes have taints it does not tolerate", "Taints"
    if "affinity" in lowered or "selector" in lowered:
        return "no node matches its node selector or affinity", "Affinity"
    return "the scheduler found no node", "Unschedulable"


def analyze_claims(pod: Obj, claims: Sequence[Obj]) -> list[Finding]:
    """A Pending pod's PersistentVolumeClaims that are missing or not Bound."""
    if dig(pod, "status", "phase") != "Pending":
        return []
    ref = ref_of(pod, "Pod")
    by_name = {dig(c, "metadata", "name"): c for c in claims}
    found = []
    for volume in dig(pod, "spec", "volumes") or []:
        name = dig(volume, "persistentVolumeClaim", "claimName")
        if not name:
            continue
        claim = by_name.get(name)
        if claim is None:
            text = f"its volume {volume.get('name')} uses PersistentVolumeClaim {name}, "
            text += "which does not exist"
            evidence = Evidence(
                ref, f"spec.volumes[{volume.get('name')}].persistentVolumeClaim.claimName", name
            )
        elif dig(claim, "status", "phase") != "Bound":
            phase = str(dig(claim, "status", "phase") or "unknown")
            storage = dig(claim, "spec", "storageClassName") or "the default storage class"
            text = f"its PersistentVolumeClaim {name} is {phase}, not Bound ({storage})"
            evidence = Evidence(ref_of(claim, "PersistentVolumeClaim"), "status.phase", phase)
        else:
            continue
        found.append(
            Finding(Severity.CRITICAL, "UnboundClaim", ref, evidence, text, NEXT["UnboundClaim"])
        )
    return found


def _probes(ref: ObjectRef, events: Sequence[Obj]) -> list[Finding]:
    latest: dict[str, Obj] = {}
    for event in sorted_events([e for e in events if e.get("reason") == "Unhealthy"]):
        probe = _message(event).split(" ", 1)[0]  # "Liveness probe failed: …"
        if probe in ("Liveness", "Readiness", "Startup"):
            latest.setdefault(probe, event)
    found = []
    for probe, event in latest.items():
        severity = Severity.CRITICAL if probe == "Liveness" else Severity.WARNING
        times = _count(event)
        text = (
            f"{probe.lower()} probe failing ({times}x, last {age(event_time(event))} ago): "
            + clip(_message(event), _MESSAGE_CHARS)
        )
        evidence = Evidence(_event_ref(event), "message", _message(event))
        found.append(Finding(severity, f"{probe}ProbeFailing", ref, evidence, text, NEXT[probe]))
    return found


def _failed(pod: Obj, ref: ObjectRef) -> list[Finding]:
    if dig(pod, "status", "phase") != "Failed":
        return []
    owners = [o.get("kind") for o in dig(pod, "metadata", "ownerReferences") or []]
    if "Job" in owners:
        return []  # a job's failed pods are the job's finding
    reason = str(dig(pod, "status", "reason") or "Failed")
    message = clip(dig(pod, "status", "message") or "no message", _MESSAGE_CHARS)
    evidence = Evidence(
        ref, "status.reason" if dig(pod, "status", "reason") else "status.phase", reason
    )
    text = f"pod failed ({reason}): {message}"
    return [Finding(Severity.WARNING, "PodFailed", ref, evidence, text, NEXT["PodFailed"])]


# --- workloads ----------------------------------------------------------------------------


def analyze_workload(workload: Obj, kind: str) -> list[Finding]:
    """The workload's own status: rollout deadline, replicas available, a job's failures."""
    ref = ref_of(workload, kind)
    if kind == "Job":
        return _job(workload, ref)
    found = _progress_deadline(workload, ref) if kind == "Deployment" else []
    unavailable = _unavailable(workload, kind, ref)
    return found + ([unavailable] if unavailable else [])


def _progress_deadline(deployment: Obj, ref: ObjectRef) -> list[Finding]:
    progressing = condition(deployment, "Progressing")
    if not progressing or progressing.get("reason") != "ProgressDeadlineExceeded":
        return []
    deadline = dig(deployment, "spec", "progressDeadlineSeconds") or 600
    message = clip(progressing.get("message") or "", _MESSAGE_CHARS)
    text = f"rollout is past its progress deadline ({deadline}s): {message}"
    evidence = Evidence(ref, "status.conditions[Progressing].reason", "ProgressDeadlineExceeded")
    step = NEXT["ProgressDeadlineExceeded"]
    return [Finding(Severity.CRITICAL, "ProgressDeadlineExceeded", ref, evidence, text, step)]


# kind: (desired field path, available field path) in the workload's wire object.
_REPLICAS = {
    "Deployment": (("spec", "replicas"), ("status", "availableReplicas")),
    "StatefulSet": (("spec", "replicas"), ("status", "readyReplicas")),
    "DaemonSet": (("status", "desiredNumberScheduled"), ("status", "numberAvailable")),
}


def _unavailable(workload: Obj, kind: str, ref: ObjectRef) -> Finding | None:
    desired_at, available_at = _REPLICAS[kind]
    desired = dig(workload, *desired_at)
    desired = 1 if desired is None and kind != "DaemonSet" else int(desired or 0)
    available = int(dig(workload, *available_at) or 0)
    if available >= desired:
        return None
    severity = Severity.CRITICAL if available == 0 else Severity.WARNING
    noun = "available" if kind != "StatefulSet" else "ready"
    text = f"{available}/{desired} replicas {noun}"
    if desired_at[0] == "status":
        text = f"{available}/{desired} scheduled pods {noun}"
    evidence = Evidence(ref, ".".join(available_at), str(available))
    step = NEXT["UnavailableReplicas"]
    return Finding(severity, "UnavailableReplicas", ref, evidence, text, step)


def _job(job: Obj, ref: ObjectRef) -> list[Finding]:
    failed = condition(job, "Failed")
    if failed and failed.get("status") == "True":
        reason = str(failed.get("reason") or "Failed")
        text = f"job failed ({reason}): {clip(failed.get('message') or '', _MESSAGE_CHARS)}"
        evidence = Evidence(ref, "status.conditions[Failed].reason", reason)
        return [Finding(Severity.CRITICAL, "JobFailed", ref, evidence, text, NEXT["JobFailed"])]
    count = int(dig(job, "status", "failed") or 0)
    if count and not (condition(job, "Complete") or {}).get("status") == "True":
        limit = dig(job, "spec", "backoffLimit")
        limit = 6 if limit is None else limit
        text = f"{count} of its pods failed so far (backoffLimit {limit})"
        evidence = Evidence(ref, "status.failed", str(count))
        step = NEXT["JobPodsFailing"]
        return [Finding(Severity.WARNING, "JobPodsFailing", ref, evidence, text, step)]
    return []


def hpa_targets(hpa: Obj, kind: str, name: str) -> bool:
    target = dig(hpa, "spec", "scaleTargetRef") or {}
    return bool(target.get("kind") == kind and target.get("name") == name)


def analyze_hpa(hpa: Obj) -> list[Finding]:
    """An autoscaling/v2 HPA running at its maximum: the load wants more than it may give."""
    ref = ref_of(hpa, "HorizontalPodAutoscaler")
    current = int(dig(hpa, "status", "currentReplicas") or 0)
    maximum = int(dig(hpa, "spec", "maxReplicas") or 0)
    if not maximum or current < maximum:
        return []
    target = dig(hpa, "spec", "scaleTargetRef") or {}
    metrics = _hpa_metrics(hpa)
    text = f"at its maximum of {maximum} replicas for {target.get('kind')} {target.get('name')}"
    text += f" ({metrics})" if metrics else ""
    evidence = Evidence(ref, "status.currentReplicas", str(current))
    return [Finding(Severity.WARNING, "HPAAtMaximum", ref, evidence, text, NEXT["HPAAtMaximum"])]


def _hpa_metrics(hpa: Obj) -> str:
    """ "cpu 95% of target 70%", one per metric the HPA reports."""
    targets = {
        _metric_name(m): _metric_value(m, "target") for m in dig(hpa, "spec", "metrics") or []
    }
    parts = []
    for metric in dig(hpa, "status", "currentMetrics") or []:
        name = _metric_name(metric)
        now = _metric_value(metric, "current")
        target = targets.get(name)
        parts.append(f"{name} {now}" + (f" of target {target}" if target else ""))
    return ", ".join(parts)


def _metric_name(metric: Obj) -> str:
    kind = str(metric.get("type") or "")
    body = metric.get(kind[:1].lower() + kind[1:]) or {}
    return str(body.get("name") or dig(body, "metric", "name") or kind or "?")


def _metric_value(metric: Obj, which: str) -> str:
    kind = str(metric.get("type") or "")
    value = dig(metric, kind[:1].lower() + kind[1:], which) or {}
    if value.get("averageUtilization") is not None:
        return f"{value['averageUtilization']}%"
    return str(value.get("averageValue") or value.get("value") or "?")


# --- services -------------------------------------------------------------------------------


def selects(selector: Mapping[str, str], pod: Obj) -> bool:
    labels = dig(pod, "metadata", "labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def analyze_service(
    service: Obj, endpoints: Obj | None, pods: Sequence[Obj] | None
) -> list[Finding]:
    """A Service whose selector matches no pod, with no ready endpoints, or whose
    targetPort no selected container declares. `pods`: the namespace's pods; `endpoints`:
    its Endpoints ({} when there is none). None for either: it could not be read, so
    nothing is claimed from it."""
    ref = ref_of(service, "Service")
    selector = dig(service, "spec", "selector") or {}
    if not selector or dig(service, "spec", "type") == "ExternalName":
        return []  # endpoints managed by hand or a DNS alias: nothing to compare
    found: list[Finding] = []
    selected = ""
    if pods is not None:
        chosen = [p for p in pods if selects(selector, p) and not _finished(p)]
        if not chosen:
            return [_selects_nothing(ref, selector)]
        found = _target_ports(service, ref, chosen)
        selected = f"{plural(len(chosen), 'pod')} selected, "
    if endpoints is not None and not _ready_addresses(endpoints):
        pending = sum(len(s.get("notReadyAddresses") or []) for s in _subsets(endpoints))
        text = f"no ready endpoints: {selected}{pending} not ready"
        if endpoints:
            seen = f"0 ready, {pending} not ready"
            evidence = Evidence(ref_of(endpoints, "Endpoints"), "subsets[].addresses", seen)
        else:
            absent = ObjectRef("Endpoints", ref.namespace, ref.name)
            evidence = Evidence(absent, "subsets", "absent (no Endpoints object)")
        step = NEXT["NoReadyEndpoints"]
        found.insert(0, Finding(Severity.CRITICAL, "NoReadyEndpoints", ref, evidence, text, step))
    return found


def _finished(pod: Obj) -> bool:
    return dig(pod, "status", "phase") in ("Succeeded", "Failed")


def _subsets(endpoints: Obj) -> list[Obj]:
    return [s for s in endpoints.get("subsets") or [] if isinstance(s, dict)]


def _ready_addresses(endpoints: Obj) -> int:
    return sum(len(s.get("addresses") or []) for s in _subsets(endpoints))


def _selects_nothing(ref: ObjectRef, selector: Mapping[str, str]) -> Finding:
    shown = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    text = f"its selector {shown} matches no running pod"
    evidence = Evidence(ref, "spec.selector", shown)
    step = NEXT["SelectorMatchesNoPod"]
    return Finding(Severity.CRITICAL, "SelectorMatchesNoPod", ref, evidence, text, step)


def _declared_ports(pods: Sequence[Obj]) -> tuple[set[str], set[int]]:
    """The port names and numbers the pods' containers declare."""
    named: set[str] = set()
    numbered: set[int] = set()
    for pod in pods:
        for container in dig(pod, "spec", "containers") or []:
            for port in container.get("ports") or []:
                named |= {str(port["name"])} if port.get("name") else set()
                numbered |= {int(port["containerPort"])} if port.get("containerPort") else set()
    return named, numbered


def _target_ports(service: Obj, ref: ObjectRef, pods: Sequence[Obj]) -> list[Finding]:
    named, numbered = _declared_ports(pods)
    found = []
    for port in dig(service, "spec", "ports") or []:
        target = port.get("targetPort", port.get("port"))
        label = port.get("name") or port.get("port")
        field = f"spec.ports[{label}].targetPort"
        if isinstance(target, str) and not target.isdigit() and target not in named:
            have = ", ".join(sorted(named)) or "none"
            text = f"targetPort {target} of port {port.get('port')} names no container port "
            text += f"of its pods (named: {have})"
            found.append(
                Finding(
                    Severity.CRITICAL,
                    "TargetPortMismatch",
                    ref,
                    Evidence(ref, field, target),
                    text,
                    NEXT["TargetPortNamed"],
                )
            )
        elif not isinstance(target, str) and numbered and int(target) not in numbered:
            # A container may listen on a port it does not declare: likely, not certain.
            have = ", ".join(str(n) for n in sorted(numbered))
            text = f"targetPort {target} of port {port.get('port')} matches no container port "
            text += f"of its pods (they declare {have})"
            found.append(
                Finding(
                    Severity.WARNING,
                    "TargetPortMismatch",
                    ref,
                    Evidence(ref, field, str(target)),
                    text,
                    NEXT["TargetPortNumber"],
                )
            )
    return found


# --- nodes ------------------------------------------------------------------------------------


def analyze_node(node: Obj, pods_on_it: int) -> list[Finding]:
    """Readiness, pressure and network conditions, and a cordon with pods still on it
    (`pods_on_it`: running pods that a drain would move, DaemonSet pods not counted)."""
    ref = ref_of(node, "Node")
    found = []
    ready = condition(node, "Ready")
    if ready is None or ready.get("status") != "True":
        status = str((ready or {}).get("status") or "missing")
        why = clip(
            (ready or {}).get("message") or (ready or {}).get("reason") or "no Ready condition",
            _MESSAGE_CHARS,
        )
        text = f"not Ready (Ready={status}): {why}"
        evidence = Evidence(ref, "status.conditions[Ready].status", status)
        found.append(
            Finding(Severity.CRITICAL, "NodeNotReady", ref, evidence, text, NEXT["NodeNotReady"])
        )
    for kind in ("NetworkUnavailable", *_PRESSURE):
        on = condition(node, kind)
        if on is None or on.get("status") != "True":
            continue
        severity = Severity.CRITICAL if kind == "NetworkUnavailable" else Severity.WARNING
        why = clip(on.get("message") or on.get("reason") or kind, _MESSAGE_CHARS)
        evidence = Evidence(ref, f"status.conditions[{kind}].status", "True")
        found.append(Finding(severity, kind, ref, evidence, f"{kind}: {why}", NEXT[kind]))
    if dig(node, "spec", "unschedulable") and pods_on_it:
        text = f"cordoned with {plural(pods_on_it, 'pod')} still running on it"
        evidence = Evidence(ref, "spec.unschedulable", "true")
        found.append(
            Finding(
                Severity.WARNING, "CordonedWithPods", ref, evidence, text, NEXT["CordonedWithPods"]
            )
        )
    return found


def counts_against_node(pod: Obj) -> bool:
    """A pod a drain would move: not finished and not a DaemonSet's."""
    owners = [o.get("kind") for o in dig(pod, "metadata", "ownerReferences") or []]
    return dig(pod, "status", "phase") not in ("Succeeded", "Failed") and "DaemonSet" not in owners
