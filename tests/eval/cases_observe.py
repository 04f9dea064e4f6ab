"""Cases that need metrics (Prometheus) or logs (Loki, pod logs), and multi-step ones."""

from __future__ import annotations

from tests.eval.kit import (
    CaseDef,
    call,
    container,
    deployment,
    endpoints,
    namespace,
    pod,
    read_only,
    replicaset,
    script,
    service,
    viewer,
)

SHOP = viewer("shop")


def ramp(
    before: float, after: float, change_at: int = -1200, span: int = 3600, step: int = 60
) -> list[list[float]]:
    """Samples every `step` s over the last `span` s: `before`, then `after` from `change_at`."""
    return [[t, after if t >= change_at else before] for t in range(-span, 1, step)]


def base_shop(app: str) -> list[dict]:
    return [
        namespace("shop"),
        deployment("shop", app, replicas=3),
        pod("shop", f"{app}-4e5f-r1s2t", app=app, owner=f"{app}-4e5f"),
    ]


METRICS = [
    CaseDef(
        id="metrics-latency-spike",
        category="metrics",
        question="checkout p99 latency went up, since when and how much?",
        role=SHOP,
        objects=base_shop("checkout"),
        prometheus=[
            {
                "labels": {
                    "__name__": "http_request_duration_seconds:p99",
                    "namespace": "shop",
                    "service": "checkout",
                },
                "samples": ramp(0.25, 2.4),
            },
            {
                "labels": {
                    "__name__": "http_request_duration_seconds:p99",
                    "namespace": "shop",
                    "service": "cart",
                },
                "samples": ramp(0.2, 0.21),
            },
        ],
        expect=read_only(
            ["checkout", "(?i)2\\.4 ?s|2\\.4 seconds|2400 ?ms"],
            "prometheus_range",
            judge=["the latency rose about 20 minutes ago", "cart's latency did not change"],
        ),
        script=script(
            call("prometheus_series", match='{__name__=~"http_request_duration.*"}', start="1h"),
            call(
                "prometheus_range",
                query='http_request_duration_seconds:p99{service="checkout"}',
                start="1h",
            ),
            answer="checkout's p99 latency rose from about 0.25 s to 2.4 s about 20 minutes ago [E2]; cart stayed flat [E1].",
        ),
    ),
    CaseDef(
        id="metrics-error-rate",
        category="metrics",
        question="are payments returning errors? how many?",
        role=SHOP,
        objects=base_shop("payments"),
        prometheus=[
            {
                "labels": {
                    "__name__": "http_requests:error_ratio",
                    "namespace": "shop",
                    "service": "payments",
                },
                "samples": ramp(0.002, 0.18),
            },
        ],
        expect=read_only(["(?i)18 ?%|0\\.18"], "prometheus_range"),
        script=script(
            call(
                "prometheus_range",
                query='http_requests:error_ratio{service="payments"}',
                start="1h",
            ),
            answer="Yes: payments' error ratio jumped from 0.2% to 18% about 20 minutes ago [E1].",
        ),
    ),
    CaseDef(
        id="metrics-cpu-throttling",
        category="metrics",
        question="is the api being CPU throttled?",
        role=SHOP,
        objects=base_shop("api"),
        prometheus=[
            {
                "labels": {
                    "__name__": "container_cpu_cfs_throttled:ratio",
                    "namespace": "shop",
                    "pod": "api-4e5f-r1s2t",
                    "container": "app",
                },
                "samples": ramp(0.65, 0.65),
            },
        ],
        expect=read_only(["(?i)throttl", "(?i)65 ?%|0\\.65"], "prometheus_query"),
        script=script(
            call("prometheus_query", query='container_cpu_cfs_throttled:ratio{pod=~"api-.*"}'),
            answer="Yes: api-4e5f-r1s2t is throttled in 65% of CPU periods [E1]; its CPU limit is too low for its load.",
        ),
    ),
]


def stream(app: str, lines: list[tuple[int, str]]) -> dict:
    return {"labels": {"namespace": "shop", "app": app}, "lines": [[t, line] for t, line in lines]}


LOGS = [
    CaseDef(
        id="logs-loki-upstream-timeouts",
        category="logs",
        question="what errors does cart log in the last hour?",
        role=SHOP,
        objects=base_shop("cart"),
        loki=[
            stream(
                "cart",
                [
                    (
                        -3000 + 60 * i,
                        f'level=error msg="upstream timeout" upstream=inventory:8080 after=5s req={i}',
                    )
                    for i in range(40)
                ]
                + [(-3500, 'level=info msg="started"')],
            ),
            stream("inventory", [(-1000, 'level=info msg="gc pause 4.2s"')]),
        ],
        expect=read_only(["(?i)timeout", "(?i)inventory"], "loki_query"),
        script=script(
            call("loki_query", query='{app="cart"} |= "error"', start="1h"),
            answer="cart logs repeated upstream timeouts calling inventory:8080 after 5 s [E1].",
        ),
    ),
    CaseDef(
        id="logs-loki-tls-expired",
        category="logs",
        question="gateway can't reach the payment provider, anything in the logs?",
        role=SHOP,
        objects=base_shop("gateway"),
        loki=[
            stream(
                "gateway",
                [
                    (
                        -600 + 30 * i,
                        "error: x509: certificate has expired or is not yet valid: current time 2026-12-05 is after 2026-12-01",
                    )
                    for i in range(15)
                ],
            ),
        ],
        expect=read_only(["(?i)certificate", "(?i)expired"], "loki_query"),
        script=script(
            call("loki_query", query='{app="gateway"} |= "error"', start="1h"),
            answer="gateway's TLS handshakes fail: the provider's certificate expired on 2026-12-01 [E1].",
        ),
    ),
    CaseDef(
        id="logs-pod-panic",
        category="logs",
        question="what is in the notifier logs? it returns 500s",
        role=SHOP,
        objects=base_shop("notifier"),
        logs=[
            {
                "namespace": "shop",
                "pod": "notifier-4e5f-r1s2t",
                "text": "GET /send 200\npanic: runtime error: invalid memory address or nil pointer dereference\n[signal SIGSEGV]\ngoroutine 17 [running]:\nmain.(*Sender).Send(0x0)\n\t/src/sender.go:88\nhttp: panic serving 10.1.0.9: runtime error\n",
            }
        ],
        expect=read_only(["(?i)nil pointer|panic", "sender\\.go"], "pod_logs"),
        script=script(
            call("pod_logs", namespace="shop", name="notifier-4e5f-r1s2t"),
            answer="notifier panics with a nil pointer dereference in Sender.Send (sender.go:88) [E1]; each panic answers a 500.",
        ),
    ),
]


MULTI = [
    CaseDef(
        id="multi-frontend-502-backend-crash",
        category="multi-step",
        question="the storefront shows 502s, find the root cause",
        role=SHOP,
        objects=[
            namespace("shop"),
            deployment("shop", "storefront", replicas=2),
            pod("shop", "storefront-1a1a-aaaaa", app="storefront", owner="storefront-1a1a"),
            deployment("shop", "backend", replicas=2, ready=0),
            pod(
                "shop",
                "backend-2b2b-bbbbb",
                app="backend",
                owner="backend-2b2b",
                ready=False,
                restarts=12,
                waiting=("CrashLoopBackOff", "back-off restarting failed container"),
                last=("Error", 2),
            ),
            service("shop", "backend", {"app": "backend"}),
            endpoints("shop", "backend", []),
        ],
        logs=[
            {
                "namespace": "shop",
                "pod": "backend-2b2b-bbbbb",
                "previous": True,
                "text": "loading /etc/backend/config.yaml\nerror: yaml: line 7: mapping values are not allowed in this context\n",
            },
            {
                "namespace": "shop",
                "pod": "storefront-1a1a-aaaaa",
                "text": "upstream backend: no healthy upstream (502)\n",
            },
        ],
        expect=read_only(["(?i)backend", "(?i)yaml|config"], "diagnose_service", "pod_logs"),
        script=script(
            call("pod_logs", namespace="shop", name="storefront-1a1a-aaaaa"),
            call("diagnose_service", namespace="shop", name="backend"),
            call("pod_logs", namespace="shop", name="backend-2b2b-bbbbb", previous=True),
            answer="The storefront's 502s come from backend having no healthy upstream [E1]: the backend Service has no ready endpoints [E2] because backend crash-loops on an invalid config.yaml (yaml error at line 7) [E3].",
        ),
    ),
    CaseDef(
        id="multi-deploy-then-latency",
        category="multi-step",
        question="checkout latency doubled, was it the deploy? check metrics and the rollout",
        role=SHOP,
        objects=[
            namespace("shop"),
            deployment(
                "shop",
                "checkout",
                replicas=2,
                revision=5,
                containers=[container(image="registry.example.com/checkout:3.1.0")],
            ),
            replicaset(
                "shop",
                "checkout-4444",
                "checkout",
                revision=4,
                replicas=0,
                containers=[container(image="registry.example.com/checkout:3.0.2")],
                age="now-5d",
            ),
            replicaset(
                "shop",
                "checkout-5555",
                "checkout",
                revision=5,
                replicas=2,
                containers=[container(image="registry.example.com/checkout:3.1.0")],
                age="now-20m",
            ),
        ],
        prometheus=[
            {
                "labels": {
                    "__name__": "http_request_duration_seconds:p99",
                    "namespace": "shop",
                    "service": "checkout",
                },
                "samples": ramp(0.4, 0.8),
            },
        ],
        expect=read_only(
            ["3\\.1\\.0"],
            "prometheus_range",
            "rollout_history",
            judge=["latency doubled when revision 5 (checkout 3.1.0) rolled out, ~20 min ago"],
        ),
        script=script(
            call(
                "prometheus_range",
                query='http_request_duration_seconds:p99{service="checkout"}',
                start="1h",
            ),
            call("rollout_history", kind="Deployment", namespace="shop", name="checkout"),
            answer="Likely yes: p99 went from 0.4 s to 0.8 s about 20 minutes ago [E1], when revision 5 (checkout:3.1.0) rolled out [E2].",
        ),
    ),
    CaseDef(
        id="multi-namespace-health",
        category="multi-step",
        question="give me a health check of the shop namespace and dig into the worst problem",
        role=SHOP,
        objects=[
            namespace("shop"),
            deployment("shop", "web", replicas=2),
            pod("shop", "web-1c1c-ccccc", app="web", owner="web-1c1c"),
            deployment("shop", "worker", replicas=1, ready=0),
            pod(
                "shop",
                "worker-2d2d-ddddd",
                app="worker",
                owner="worker-2d2d",
                ready=False,
                restarts=30,
                waiting=("CrashLoopBackOff", "back-off restarting failed container"),
                last=("OOMKilled", 137),
                containers=[container(limits={"memory": "128Mi"})],
            ),
        ],
        expect=read_only(["worker", "(?i)OOMKilled|out of memory"], "diagnose_namespace"),
        script=script(
            call("diagnose_namespace", namespace="shop"),
            call("describe_pod", namespace="shop", name="worker-2d2d-ddddd"),
            answer="web is healthy; the worst problem is worker [E1]: it is OOMKilled at its 128Mi limit and has restarted 30 times [E2].",
        ),
    ),
]


CASES: list[CaseDef] = [*METRICS, *LOGS, *MULTI]
