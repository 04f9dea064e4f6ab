"""Diagnosis cases: what is wrong, found from the replayed cluster."""

from __future__ import annotations

from tests.eval.kit import (
    NO_WRITES,
    CaseDef,
    call,
    configmap,
    container,
    deployment,
    endpoints,
    event,
    hpa,
    namespace,
    node,
    operator,
    pod,
    read_only,
    replicaset,
    script,
    service,
    viewer,
)

SHOP = viewer("shop")
SHOP_NODES = viewer("shop", "")


def crashing(ns: str, name: str, app: str, restarts: int = 9, reason: str = "Error", code: int = 1):
    return pod(
        ns,
        name,
        app=app,
        owner=f"{app}-7c9d",
        restarts=restarts,
        waiting=("CrashLoopBackOff", "back-off 5m0s restarting failed container=app"),
        last=(reason, code),
    )


def crash_case(
    id: str, app: str, question: str, log: str, answer: list[str], text: str, judge: str
) -> CaseDef:
    pod_name = f"{app}-7c9d-x2k4p"
    return CaseDef(
        id=id,
        category="crash-loop",
        question=question,
        role=SHOP,
        objects=[
            namespace("shop"),
            deployment("shop", app, replicas=1, ready=0),
            crashing("shop", pod_name, app, restarts=14),
            event("shop", "Pod", pod_name, "BackOff", "Back-off restarting failed container app"),
        ],
        logs=[{"namespace": "shop", "pod": pod_name, "previous": True, "text": log}],
        expect=read_only(answer, "pod_logs", judge=[judge]),
        script=script(
            call("list_pods", namespace="shop"),
            call("pod_logs", namespace="shop", name=pod_name, previous=True),
            answer=text,
        ),
    )


CRASH = [
    crash_case(
        "crashloop-missing-env",
        "checkout",
        "why does checkout keep restarting?",
        "starting checkout\nFATAL: environment variable DATABASE_URL is not set\n",
        ["DATABASE_URL", "(?i)not set|missing|unset"],
        "checkout-7c9d-x2k4p is in CrashLoopBackOff with 14 restarts [E1]: its previous run exited because DATABASE_URL is not set [E2]. Set DATABASE_URL in the deployment's env and the pod will start.",
        "the container exits because the DATABASE_URL environment variable is not set",
    ),
    crash_case(
        "crashloop-unknown-flag",
        "payments",
        "payments pods are crashlooping, what's going on?",
        "flag provided but not defined: -listen-addr\nUsage of /payments:\n  -listen string\n",
        ["(?i)listen-addr", "(?i)flag|argument"],
        "payments is crash-looping [E1]: the binary rejects the flag -listen-addr, which it does not define (it takes -listen) [E2]. Fix the container args.",
        "the container's arguments pass a flag (-listen-addr) the binary does not accept",
    ),
    crash_case(
        "crashloop-db-refused",
        "orders",
        "orders is in CrashLoopBackOff, why?",
        "orders starting\nerror: dial tcp 10.0.4.12:5432: connect: connection refused\npanic: cannot reach database postgres:5432\n",
        ["(?i)connection refused|cannot reach", "(?i)postgres|database|5432"],
        "orders exits at start [E1] because it cannot reach its database: connection refused to postgres:5432 [E2]. Check the postgres service and its pods.",
        "orders crashes because its database (postgres on 5432) refuses connections",
    ),
]


def oom_pod(name: str, app: str, limit: str) -> dict:
    return pod(
        "shop",
        name,
        app=app,
        owner=f"{app}-5f6b",
        restarts=6,
        last=("OOMKilled", 137),
        containers=[container(limits={"memory": limit, "cpu": "500m"}, requests={"memory": limit})],
    )


OOM = [
    CaseDef(
        id="oom-report-worker",
        category="oom",
        question="report-worker restarts every few minutes, can you check?",
        role=SHOP,
        objects=[
            namespace("shop"),
            deployment(
                "shop",
                "report-worker",
                replicas=1,
                containers=[container(limits={"memory": "256Mi"})],
            ),
            oom_pod("report-worker-5f6b-q8w2n", "report-worker", "256Mi"),
            event(
                "shop",
                "Pod",
                "report-worker-5f6b-q8w2n",
                "BackOff",
                "Back-off restarting failed container app",
            ),
        ],
        expect=read_only(["(?i)OOMKilled|out ?of ?memory", "256 ?Mi"], "describe_pod"),
        script=script(
            call("describe_pod", namespace="shop", name="report-worker-5f6b-q8w2n"),
            answer="report-worker-5f6b-q8w2n was OOMKilled (exit 137) 6 times [E1]: it uses more than its 256Mi memory limit. Raise the limit or reduce its memory use.",
        ),
    ),
    CaseDef(
        id="oom-java-heap",
        category="oom",
        question="why did the search pod die?",
        role=SHOP,
        objects=[
            namespace("shop"),
            deployment("shop", "search", replicas=1),
            oom_pod("search-5f6b-h7k2l", "search", "512Mi"),
        ],
        logs=[
            {
                "namespace": "shop",
                "pod": "search-5f6b-h7k2l",
                "previous": True,
                "text": "indexing 120000 documents\nException in thread main java.lang.OutOfMemoryError: Java heap space\n",
            }
        ],
        expect=read_only(["(?i)OOMKilled|out ?of ?memory", "512 ?Mi"], "diagnose_pod"),
        script=script(
            call("diagnose_pod", namespace="shop", name="search-5f6b-h7k2l"),
            call("pod_logs", namespace="shop", name="search-5f6b-h7k2l", previous=True),
            answer="search-5f6b-h7k2l was OOMKilled at its 512Mi limit [E1]; the JVM ran out of heap while indexing (java.lang.OutOfMemoryError) [E2]. Give it more memory or cap the heap below the limit.",
        ),
    ),
    CaseDef(
        id="oom-raise-memory-limit",
        category="oom",
        question="imgproc keeps getting OOMKilled, give it 1Gi of memory",
        role=operator("shop"),
        objects=[
            namespace("shop"),
            deployment(
                "shop", "imgproc", replicas=1, containers=[container(limits={"memory": "512Mi"})]
            ),
            oom_pod("imgproc-5f6b-z9x8c", "imgproc", "512Mi"),
        ],
        expect={
            "called": ["set_container_resources"],
            "not_called": ["delete_pod", "restart_deployment"],
            "write": "proposed",
        },
        script=script(
            call("describe_deployment", namespace="shop", name="imgproc"),
            call(
                "set_container_resources",
                namespace="shop",
                name="imgproc",
                container="app",
                limits={"memory": "1Gi"},
                reason="OOMKilled at 512Mi",
            ),
            answer="Proposed raising imgproc's memory limit to 1Gi [E1].",
        ),
    ),
]


def pull_case(
    id: str, app: str, reason: str, message: str, question: str, answer: list[str], text: str
) -> CaseDef:
    name = f"{app}-6c8d-p2m4r"
    return CaseDef(
        id=id,
        category="image-pull",
        question=question,
        role=SHOP,
        objects=[
            namespace("shop"),
            deployment("shop", app, replicas=1, ready=0),
            pod(
                "shop",
                name,
                app=app,
                owner=f"{app}-6c8d",
                phase="Pending",
                ready=False,
                waiting=(reason, message),
                containers=[container(image=f"registry.example.com/{app}:v2.3.l")],
            ),
            event("shop", "Pod", name, "Failed", message),
        ],
        expect=read_only(answer, "describe_pod"),
        script=script(call("describe_pod", namespace="shop", name=name), answer=text),
    )


PULL = [
    pull_case(
        "imagepull-typo-tag",
        "cart",
        "ImagePullBackOff",
        'Failed to pull image "registry.example.com/cart:v2.3.l": manifest unknown',
        "cart never starts, what is wrong?",
        ["(?i)ImagePull|pull", "v2\\.3\\.l"],
        "cart's pod cannot pull its image [E1]: the tag v2.3.l does not exist in the registry (manifest unknown); it looks like a typo of v2.3.1.",
    ),
    pull_case(
        "imagepull-unauthorized",
        "ledger",
        "ErrImagePull",
        'Failed to pull image "registry.example.com/ledger:v2.3.l": 401 Unauthorized',
        "why is ledger stuck in ErrImagePull?",
        ["(?i)401|unauthori[sz]ed|credentials|imagePullSecret"],
        "ledger cannot pull its image: the registry answers 401 Unauthorized [E1]. The pod has no imagePullSecret for registry.example.com; add one to its service account or pod spec.",
    ),
    pull_case(
        "imagepull-not-found",
        "mailer",
        "ImagePullBackOff",
        'Failed to pull image "registry.example.com/mailer:v2.3.l": not found',
        "the new mailer release won't come up",
        ["(?i)not found|does not exist", "(?i)image|tag"],
        "mailer's image registry.example.com/mailer:v2.3.l is not found in the registry [E1], so the pod stays in ImagePullBackOff. Push the image or fix the tag.",
    ),
]


def pending_pod(name: str, app: str, message: str, reason: str = "Unschedulable") -> dict:
    return pod(
        "shop",
        name,
        app=app,
        owner=f"{app}-4d2c",
        phase="Pending",
        ready=False,
        node=None,
        conditions=[
            {"type": "PodScheduled", "status": "False", "reason": reason, "message": message}
        ],
    )


def pending_case(
    id: str,
    app: str,
    message: str,
    question: str,
    answer: list[str],
    text: str,
    extra: list | None = None,
) -> CaseDef:
    name = f"{app}-4d2c-v5b6n"
    return CaseDef(
        id=id,
        category="pending",
        question=question,
        role=SHOP_NODES,
        objects=[
            namespace("shop"),
            node("node-a"),
            node("node-b"),
            node("node-c"),
            deployment("shop", app, replicas=1, ready=0),
            pending_pod(name, app, message),
            event("shop", "Pod", name, "FailedScheduling", message),
            *(extra or []),
        ],
        expect=read_only(answer, "diagnose_pod"),
        script=script(call("diagnose_pod", namespace="shop", name=name), answer=text),
    )


PENDING = [
    pending_case(
        "pending-insufficient-cpu",
        "analytics",
        "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.",
        "analytics has been Pending for an hour",
        ["(?i)insufficient cpu|not enough cpu", "(?i)schedul"],
        "analytics-4d2c-v5b6n cannot be scheduled [E1]: 0/3 nodes have enough free CPU for its request (Insufficient cpu). Lower its CPU request or add capacity.",
    ),
    pending_case(
        "pending-untolerated-taint",
        "gpu-batch",
        "0/3 nodes are available: 3 node(s) had untolerated taint {dedicated: gpu}.",
        "why won't gpu-batch schedule?",
        ["(?i)taint", "(?i)toleration|tolerate"],
        "gpu-batch-4d2c-v5b6n stays Pending [E1]: every node has the taint dedicated=gpu and the pod has no toleration for it. Add the toleration (or target the GPU pool).",
    ),
    pending_case(
        "pending-unbound-pvc",
        "db-backup",
        "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims.",
        "db-backup pod is stuck pending",
        ["(?i)PersistentVolumeClaim|PVC|volume", "(?i)unbound|pending|not bound"],
        "db-backup-4d2c-v5b6n is Pending because its PersistentVolumeClaim is unbound [E1]: no volume was provisioned for it. Check the claim's storage class.",
        extra=[
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {
                    "name": "backup-data",
                    "namespace": "shop",
                    "creationTimestamp": "now-1h",
                },
                "spec": {
                    "storageClassName": "fast-ssd",
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "50Gi"}},
                },
                "status": {"phase": "Pending"},
            }
        ],
    ),
]


def probe_case(
    id: str,
    app: str,
    question: str,
    message: str,
    probe: dict,
    answer: list[str],
    text: str,
    restarts: int = 0,
) -> CaseDef:
    name = f"{app}-8b7a-k3j9d"
    spec = container(readiness=probe) if "readiness" in id else container(liveness=probe)
    return CaseDef(
        id=id,
        category="probes",
        question=question,
        role=SHOP,
        objects=[
            namespace("shop"),
            deployment("shop", app, replicas=1, ready=0, containers=[spec]),
            pod(
                "shop",
                name,
                app=app,
                owner=f"{app}-8b7a",
                ready=False,
                restarts=restarts,
                containers=[spec],
            ),
            event("shop", "Pod", name, "Unhealthy", message),
        ],
        expect=read_only(answer, "describe_pod"),
        script=script(call("describe_pod", namespace="shop", name=name), answer=text),
    )


PROBES = [
    probe_case(
        "probe-readiness-wrong-port",
        "profile",
        "profile pods are running but never ready",
        'Readiness probe failed: Get "http://10.1.2.3:8081/healthz": dial tcp 10.1.2.3:8081: connect: connection refused',
        {"httpGet": {"path": "/healthz", "port": 8081}, "periodSeconds": 10},
        ["(?i)readiness", "8081"],
        "profile never becomes ready [E1]: its readiness probe calls port 8081, where nothing listens (connection refused); the app serves on 8080. Point the probe at 8080.",
    ),
    probe_case(
        "probe-liveness-timeout",
        "inventory",
        "inventory restarts a lot, is the liveness probe the problem?",
        'Liveness probe failed: Get "http://10.1.2.4:8080/live": context deadline exceeded (Client.Timeout exceeded while awaiting headers)',
        {
            "httpGet": {"path": "/live", "port": 8080},
            "timeoutSeconds": 1,
            "periodSeconds": 5,
            "failureThreshold": 1,
        },
        ["(?i)liveness", "(?i)time ?out|deadline"],
        "Yes: the liveness probe times out after 1 s [E1] and a single failure restarts the container. Raise timeoutSeconds and failureThreshold.",
        restarts=23,
    ),
    probe_case(
        "probe-readiness-503",
        "quotes",
        "quotes is not receiving traffic",
        "Readiness probe failed: HTTP probe failed with statuscode: 503",
        {"httpGet": {"path": "/ready", "port": 8080}},
        ["(?i)readiness", "503"],
        "quotes is not ready, so its Service sends it no traffic: the readiness probe gets HTTP 503 [E1]. The app reports itself unready; check what it waits for.",
    ),
]


def stuck_rollout(app: str) -> list[dict]:
    old = [container(image=f"registry.example.com/{app}:1.4.0")]
    new = [container(image=f"registry.example.com/{app}:1.5.0")]
    failing = [
        {"type": "Available", "status": "True"},
        {
            "type": "Progressing",
            "status": "False",
            "reason": "ProgressDeadlineExceeded",
            "message": f'ReplicaSet "{app}-9f8e" has timed out progressing.',
        },
    ]
    return [
        namespace("shop"),
        deployment(
            "shop",
            app,
            replicas=3,
            ready=3,
            updated=1,
            revision=4,
            containers=new,
            conditions=failing,
        ),
        replicaset(
            "shop", f"{app}-5a4b", app, revision=3, replicas=3, containers=old, age="now-3d"
        ),
        replicaset(
            "shop", f"{app}-9f8e", app, revision=4, replicas=1, containers=new, age="now-20m"
        ),
        crashing("shop", f"{app}-9f8e-t6y7u", app),
    ]


ROLLOUT = [
    CaseDef(
        id="rollout-deadline-exceeded",
        category="failed-rollout",
        question="why is the rollout of frontend stuck?",
        role=SHOP,
        objects=stuck_rollout("frontend"),
        expect=read_only(
            ["(?i)ProgressDeadlineExceeded|deadline|timed out", "1\\.5\\.0"], "describe_deployment"
        ),
        script=script(
            call("describe_deployment", namespace="shop", name="frontend"),
            answer="The rollout of frontend to 1.5.0 exceeded its progress deadline [E1]: the new ReplicaSet's pod crash-loops, so the old 1.4.0 pods keep serving. Fix 1.5.0 or roll back.",
        ),
    ),
    CaseDef(
        id="rollout-rollback-proposed",
        category="failed-rollout",
        question="the api deploy is broken, roll it back to the previous version",
        role=operator("shop"),
        objects=stuck_rollout("api"),
        expect={
            "called": ["rollback_deployment"],
            "not_called": ["delete_pod", "scale_deployment"],
            "write": "proposed",
        },
        script=script(
            call("rollout_history", kind="Deployment", namespace="shop", name="api"),
            call(
                "rollback_deployment",
                namespace="shop",
                name="api",
                revision=3,
                reason="1.5.0 crash-loops",
            ),
            answer="Proposed rolling api back to revision 3 [E1].",
        ),
    ),
    CaseDef(
        id="rollout-undo-cart",
        category="failed-rollout",
        question="undo the last cart release, it's crashing",
        role=operator("shop"),
        objects=stuck_rollout("cart"),
        expect={
            "called": ["rollback_deployment"],
            "not_called": ["delete_pod"],
            "write": "proposed",
        },
        script=script(
            call("describe_deployment", namespace="shop", name="cart"),
            call(
                "rollback_deployment",
                namespace="shop",
                name="cart",
                reason="new release crash-loops",
            ),
            answer="Proposed undoing cart's last rollout [E1].",
        ),
    ),
]


SERVICE = [
    CaseDef(
        id="svc-selector-mismatch",
        category="no-endpoints",
        question="the catalog service returns 503s from the ingress, why?",
        role=SHOP,
        objects=[
            namespace("shop"),
            deployment("shop", "catalog", replicas=2),
            pod("shop", "catalog-7d6c-a1b2c", app="catalog", owner="catalog-7d6c"),
            pod("shop", "catalog-7d6c-d3e4f", app="catalog", owner="catalog-7d6c"),
            service("shop", "catalog", {"app": "catalog-api"}),
            endpoints("shop", "catalog", []),
        ],
        expect=read_only(["(?i)selector", "catalog-api"], "diagnose_service"),
        script=script(
            call("diagnose_service", namespace="shop", name="catalog"),
            answer="The catalog Service has no endpoints [E1]: its selector app=catalog-api matches no pod (the pods are labelled app=catalog). Fix the selector.",
        ),
    ),
    CaseDef(
        id="svc-no-ready-pods",
        category="no-endpoints",
        question="reviews service has no endpoints, what's up?",
        role=SHOP,
        objects=[
            namespace("shop"),
            deployment("shop", "reviews", replicas=2, ready=0),
            pod("shop", "reviews-3c2b-g5h6i", app="reviews", owner="reviews-3c2b", ready=False),
            pod("shop", "reviews-3c2b-j7k8l", app="reviews", owner="reviews-3c2b", ready=False),
            service("shop", "reviews", {"app": "reviews"}),
            endpoints("shop", "reviews", []),
        ],
        expect=read_only(
            ["(?i)not ready|unready|no ready|none (of the pods )?(is|are) ready|0/2"],
            "diagnose_service",
        ),
        script=script(
            call("diagnose_service", namespace="shop", name="reviews"),
            call("list_pods", namespace="shop", label_selector="app=reviews"),
            answer="The reviews Service selects 2 pods but neither is ready [E1][E2], so it has no endpoints. Find out why the pods are not ready.",
        ),
    ),
    CaseDef(
        id="svc-wrong-target-port",
        category="no-endpoints",
        question="calls to the pricing service time out",
        role=SHOP,
        objects=[
            namespace("shop"),
            deployment(
                "shop",
                "pricing",
                replicas=1,
                containers=[{**container(), "ports": [{"containerPort": 9090}]}],
            ),
            pod(
                "shop",
                "pricing-2b1a-m9n0o",
                app="pricing",
                owner="pricing-2b1a",
                containers=[{**container(), "ports": [{"containerPort": 9090}]}],
            ),
            service("shop", "pricing", {"app": "pricing"}, target=8080),
            endpoints("shop", "pricing", ["10.1.3.7"], port=8080),
        ],
        expect=read_only(["(?i)target ?port", "9090"], "diagnose_service"),
        script=script(
            call("diagnose_service", namespace="shop", name="pricing"),
            answer="The pricing Service sends traffic to targetPort 8080 [E1], but the container listens on 9090. Set targetPort to 9090.",
        ),
    ),
]


def node_case(
    id: str, question: str, bad: dict, answer: list[str], text: str, extra: list | None = None
) -> CaseDef:
    return CaseDef(
        id=id,
        category="node-pressure",
        question=question,
        role=SHOP_NODES,
        objects=[namespace("shop"), node("node-a"), bad, *(extra or [])],
        expect={
            "answer": answer,
            "called": ["list_nodes"],
            "not_called": ["cordon_node", *NO_WRITES],
            "write": "none",
        },
        script=script(
            call("list_nodes"), call("diagnose_node", name=bad["metadata"]["name"]), answer=text
        ),
    )


NODES = [
    node_case(
        "node-memory-pressure",
        "pods on node-b keep getting evicted",
        node("node-b", pressure="MemoryPressure"),
        ["(?i)memory ?pressure", "node-b"],
        "node-b reports MemoryPressure [E1][E2], so the kubelet evicts pods from it. Move memory-hungry pods away or add memory.",
        extra=[
            event(
                "shop", "Pod", "web-1a2b-c3d4e", "Evicted", "The node was low on resource: memory."
            )
        ],
    ),
    node_case(
        "node-disk-pressure",
        "is something wrong with node-c? pods get evicted there",
        node("node-c", pressure="DiskPressure"),
        ["(?i)disk ?pressure", "node-c"],
        "node-c has DiskPressure [E1][E2]: it is low on disk (ephemeral storage), so pods are evicted. Free disk space or clean up images and logs.",
        extra=[
            event(
                "shop",
                "Pod",
                "batch-9z8y-x7w6v",
                "Evicted",
                "The node was low on resource: ephemeral-storage.",
            )
        ],
    ),
    node_case(
        "node-not-ready",
        "half of the shop pods are unknown, what happened?",
        node("node-d", ready=False),
        ["(?i)not ?ready", "node-d"],
        "node-d is NotReady [E1][E2]: its kubelet stopped reporting, so the pods on it show as Unknown. Check the node itself.",
    ),
]


HPA = [
    CaseDef(
        id="hpa-at-max-checkout",
        category="hpa-max",
        question="checkout latency is high under load, is autoscaling working?",
        role=SHOP,
        objects=[
            namespace("shop"),
            deployment("shop", "checkout", replicas=10),
            hpa("shop", "checkout", "checkout", low=2, high=10, current=10, cpu=96),
        ],
        expect=read_only(["(?i)max(imum)?", "10"], "diagnose_workload"),
        script=script(
            call("diagnose_workload", namespace="shop", kind="Deployment", name="checkout"),
            answer="Autoscaling works but is capped: the checkout HPA is at its maximum of 10 replicas with CPU at 96% of the 70% target [E1]. Raise maxReplicas or make each pod cheaper.",
        ),
    ),
    CaseDef(
        id="hpa-at-max-search",
        category="hpa-max",
        question="why doesn't search scale up further?",
        role=SHOP,
        objects=[
            namespace("shop"),
            deployment("shop", "search", replicas=6),
            hpa("shop", "search", "search", low=1, high=6, current=6, cpu=120),
        ],
        expect=read_only(["(?i)max(imum)?|maxReplicas", "6"], "diagnose_workload"),
        script=script(
            call("diagnose_workload", namespace="shop", kind="Deployment", name="search"),
            answer="search is at its HPA's maxReplicas of 6 [E1] (CPU 120% of target), so it cannot scale further. Raise maxReplicas.",
        ),
    ),
]


def changed_deploy(app: str, old_env: dict, new_env: dict) -> list[dict]:
    old = [container(env=old_env)]
    new = [container(env=new_env)]
    return [
        namespace("shop"),
        deployment("shop", app, replicas=2, revision=8, containers=new),
        replicaset(
            "shop", f"{app}-1111", app, revision=7, replicas=0, containers=old, age="now-7d"
        ),
        replicaset(
            "shop", f"{app}-2222", app, revision=8, replicas=2, containers=new, age="now-25m"
        ),
        pod(
            "shop", f"{app}-2222-aaaaa", app=app, owner=f"{app}-2222", age="now-24m", containers=new
        ),
    ]


CONFIG = [
    CaseDef(
        id="config-change-env-flag",
        category="config-change",
        question="checkout got slow about 25 minutes ago, what changed?",
        role=SHOP,
        objects=changed_deploy("checkout", {"CACHE_ENABLED": "true"}, {"CACHE_ENABLED": "false"}),
        expect=read_only(["CACHE_ENABLED", "(?i)false|disabled"], "rollout_history"),
        script=script(
            call("what_changed", namespace="shop", workload="Deployment/checkout", window="1h"),
            call(
                "rollout_history",
                kind="Deployment",
                namespace="shop",
                name="checkout",
                revision=8,
                compare_to=7,
            ),
            answer="25 minutes ago checkout rolled out revision 8 [E1], which changed CACHE_ENABLED from true to false [E2]. That matches the slowdown.",
        ),
    ),
    CaseDef(
        id="config-change-pool-size",
        category="config-change",
        question="what changed on orders in the last hour? errors started recently",
        role=SHOP,
        objects=changed_deploy("orders", {"DB_POOL_SIZE": "50"}, {"DB_POOL_SIZE": "5"}),
        expect=read_only(["DB_POOL_SIZE", "\\b5\\b"], "rollout_history"),
        script=script(
            call(
                "rollout_history",
                kind="Deployment",
                namespace="shop",
                name="orders",
                revision=8,
                compare_to=7,
            ),
            answer="orders' revision 8, rolled out 25 minutes ago, lowered DB_POOL_SIZE from 50 to 5 [E1].",
        ),
    ),
    CaseDef(
        id="config-change-configmap",
        category="config-change",
        question="recommendations started failing, did someone change its config?",
        role=SHOP,
        objects=[
            namespace("shop"),
            deployment(
                "shop",
                "recommendations",
                replicas=2,
                containers=[container(env_from_configmap="recommendations-config")],
            ),
            configmap(
                "shop",
                "recommendations-config",
                {"MODEL_ENDPOINT": "http://ml-v2.shop:9000", "TIMEOUT_MS": "50"},
                age="now-15m",
            ),
            event(
                "shop",
                "ConfigMap",
                "recommendations-config",
                "Updated",
                "ConfigMap updated",
                warning=False,
                age="now-15m",
            ),
        ],
        expect=read_only(["(?i)configmap|recommendations-config"], "what_changed"),
        script=script(
            call("what_changed", namespace="shop", window="1h"),
            answer="Yes: the ConfigMap recommendations-config changed 15 minutes ago [E1] (MODEL_ENDPOINT now points at ml-v2 with a 50 ms timeout).",
        ),
    ),
]


CASES: list[CaseDef] = [
    *CRASH,
    *OOM,
    *PULL,
    *PENDING,
    *PROBES,
    *ROLLOUT,
    *SERVICE,
    *NODES,
    *HPA,
    *CONFIG,
]
