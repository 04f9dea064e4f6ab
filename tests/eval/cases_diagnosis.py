"""Diagnosis cases: what is wrong, found from the replayed cluster, metrics and logs."""

from __future__ import annotations

from tests.eval.kit import (
    CaseDef,
    call,
    deployment,
    event,
    namespace,
    pod,
    script,
    viewer,
)

CASES: list[CaseDef] = [
    CaseDef(
        id="crashloop-missing-env",
        category="crash-loop",
        question="why does checkout keep restarting?",
        role=viewer("shop"),
        objects=[
            namespace("shop"),
            deployment("shop", "checkout", replicas=1, ready=0),
            pod(
                "shop",
                "checkout-7c9d-x2k4p",
                app="checkout",
                owner="checkout-7c9d",
                restarts=14,
                waiting=("CrashLoopBackOff", "back-off 5m0s restarting failed container=app"),
                last=("Error", 1),
            ),
            event(
                "shop",
                "Pod",
                "checkout-7c9d-x2k4p",
                "BackOff",
                "Back-off restarting failed container app",
            ),
        ],
        logs=[
            {
                "namespace": "shop",
                "pod": "checkout-7c9d-x2k4p",
                "previous": True,
                "text": "starting checkout\nFATAL: environment variable DATABASE_URL is not set\n",
            }
        ],
        expect={
            "answer": ["DATABASE_URL", "(?i)not set|missing|unset"],
            "called": ["pod_logs"],
            "not_called": ["delete_pod", "restart_deployment"],
            "write": "none",
            "judge": [
                "the container exits because the DATABASE_URL environment variable is not set"
            ],
        },
        script=script(
            call("list_pods", namespace="shop"),
            call("pod_logs", namespace="shop", name="checkout-7c9d-x2k4p", previous=True),
            answer=(
                "checkout-7c9d-x2k4p is in CrashLoopBackOff with 14 restarts [E1]: its previous "
                "run exited because DATABASE_URL is not set [E2]. Set DATABASE_URL in the "
                "deployment's env (or its Secret) and the pod will start."
            ),
        ),
    ),
]
