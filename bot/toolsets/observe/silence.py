"""`write/silence_alert`: an Alertmanager silence as a write (preview, card, approval, audit).

`prepare` checks the matchers, the duration and the comment against the channel's reach
and the configured cap, and builds a plan whose preview is the silence body exactly as it
will be posted (its start and end are set when it runs); the comment names who asked.
`execute` posts it once, to the instance the plan names, with what `prepare` checked, its
comment ending with the approval's id (`[kelpie approval …]`): after a crash between the
post and the recorded outcome, `SilenceReadback` finds the silence by that id in the
Alertmanager, so a silence that was made is reported as made (and never posted twice).
"""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import Field

from bot.toolsets.declare import (
    ObjectNamespace,
    ToolArgs,
    limited_text,
    parse_args,
    resolve_namespace,
)
from bot.toolsets.observe.alertmanager import (
    Alertmanager,
    SilenceMatcher,
    SilenceRequest,
    iso,
    silence_body,
)
from bot.toolsets.observe.http import ObserveError
from bot.toolsets.observe.tools import Observe
from bot.toolsets.observe.window import DURATION, parse_duration
from bot.toolsets.spec import ToolArgumentError, ToolContext, ToolFailure, ToolResult
from bot.values import FieldChange, Landed, PreviewSource, WritePlan, WriteTarget

log = logging.getLogger(__name__)

SILENCE_TOOL = "silence_alert"
NO_REQUESTER = "someone in Slack"
_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MATCHERS_NEEDED = "matchers must name at least one label besides the namespace."
BAD_LABEL = "matchers: {name!r} is not a label name."
NAMESPACE_IN_MATCHERS = "give the namespace as namespace, not among the matchers."
TIMES_NOTE = "The silence starts when it is approved and lasts {duration}."
APPROVAL_MARK = " [kelpie approval {id}]"
MARK_NOTE = "Its comment ends with this approval's id, to find the silence again."
SILENCED = "Silenced {target} in {namespace} until {until} (silence {id}, alertmanager {name})."


class SilenceArgs(ToolArgs):
    namespace: Annotated[
        ObjectNamespace, Field(description="Namespace of the alerts. Defaults to the channel's.")
    ] = None
    matchers: Annotated[
        dict[str, str],
        Field(
            max_length=10,
            description='Labels the alerts have, e.g. {"alertname": "KubePodCrashLooping"}.',
        ),
    ]
    duration: Annotated[str, DURATION, Field(description='How long, e.g. "2h" (capped).')]
    comment: Annotated[
        str, limited_text(500, required=True), Field(description="Why, for Alertmanager.")
    ]


class SilenceWrite:
    args_model = SilenceArgs

    def __init__(self, observe: Observe) -> None:
        self._observe = observe

    async def prepare(self, args: dict[str, Any], context: ToolContext) -> WritePlan:
        parsed = parse_args(SilenceArgs, args)
        namespace = resolve_namespace(parsed.namespace, context, allow_all=False)
        assert namespace is not None  # allow_all=False
        try:
            client, scope = self._observe.alertmanager(context)
            request = _request(parsed, namespace, scope.label, context.requester)
            client.check_silence(request, scope)
        except ObserveError as error:
            raise ToolFailure(str(error)) from error
        body = silence_body(request)
        labels = ", ".join(f"{m.name}={m.value}" for m in request.matchers)
        return WritePlan(
            tool=SILENCE_TOOL,
            description=f"Silence alerts with {labels} for {parsed.duration}",
            cluster=context.cluster,
            target=WriteTarget("Silence", namespace, _target_name(request), "", ""),
            changes=(FieldChange("silence", "(none)", json.dumps(body, sort_keys=True)),),
            args={
                "instance": client.endpoint.name,
                "body": body,
                "duration_s": request.duration.total_seconds(),
            },
            notes=(TIMES_NOTE.format(duration=parsed.duration), MARK_NOTE),
            preview=PreviewSource.EXACT_CALL,
        )

    async def execute(self, plan: WritePlan, context: ToolContext) -> ToolResult:
        observe = self._observe
        now = datetime.fromtimestamp(observe.clock(), UTC)
        duration = timedelta(seconds=float(plan.args["duration_s"]))
        try:
            endpoint = observe.instances.named("alertmanager", str(plan.args["instance"]))
            client = Alertmanager(observe.http, endpoint, observe.settings.max_silence_h)
            body = marked(dict(plan.args["body"]), context.approval_id)
            silence_id = await client.post_silence(body, now, duration)
        except ObserveError as error:
            raise ToolFailure(str(error)) from error
        text = SILENCED.format(
            target=plan.target.name,
            namespace=plan.target.namespace,
            until=iso(now + duration),
            id=silence_id,
            name=endpoint.name,
        )
        return ToolResult(text, f"silence {silence_id}")


def marked(body: dict[str, Any], approval_id: str | None) -> dict[str, Any]:
    """The body with the approval's id at the end of its comment."""
    if approval_id is None:
        return body
    return body | {"comment": str(body.get("comment", "")) + APPROVAL_MARK.format(id=approval_id)}


class SilenceReadback:
    """Whether an approved silence was made: its Alertmanager holds a silence (in any
    state: it may have ended since) whose comment carries the approval's id."""

    def __init__(self, observe: Observe) -> None:
        self._observe = observe

    async def applied(self, plan: WritePlan, approval_id: str) -> Landed:
        observe = self._observe
        mark = APPROVAL_MARK.format(id=approval_id)
        label = next(iter(plan.args["body"]["matchers"]), None)
        try:
            endpoint = observe.instances.named("alertmanager", str(plan.args["instance"]))
            client = Alertmanager(observe.http, endpoint, observe.settings.max_silence_h)
            if label is None:
                return Landed.UNKNOWN
            found = await client.silences(SilenceMatcher(label["name"], label["value"]))
        except (ObserveError, KeyError, TypeError):
            log.warning("could not read the silences of approval %s back", approval_id)
            return Landed.UNKNOWN
        return Landed.seen(any(str(s.get("comment", "")).endswith(mark) for s in found))


def _request(
    args: SilenceArgs, namespace: str, label: str, requester: str | None
) -> SilenceRequest:
    if not args.matchers:
        raise ToolArgumentError(MATCHERS_NEEDED)
    for name in args.matchers:
        if name == label:
            raise ToolArgumentError(NAMESPACE_IN_MATCHERS)
        if not _LABEL.fullmatch(name):
            raise ToolArgumentError(BAD_LABEL.format(name=name))
    duration = parse_duration(args.duration)
    assert duration is not None  # validated by DURATION
    who = requester or NO_REQUESTER
    own = tuple(SilenceMatcher(name, value) for name, value in sorted(args.matchers.items()))
    comment = f"{args.comment} (asked by {who} through kelpie)"
    return SilenceRequest(
        (SilenceMatcher(label, namespace), *own), duration, comment, f"kelpie for {who}"
    )


def _target_name(request: SilenceRequest) -> str:
    """What the silence quiets, for the card and the write reservation."""
    named = {m.name: m.value for m in request.matchers}
    return named.get("alertname") or ",".join(f"{m.name}={m.value}" for m in request.matchers[1:])
