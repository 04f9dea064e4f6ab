"""An approved silence is found again after a crash (#28): `write/silence_alert` puts the
approval's id at the end of the silence's comment, and a restart that finds the approval
without an outcome asks the real Alertmanager for a silence carrying that id. Made: it is
reported as made (and never posted again); not made: not executed."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from bot.approvals import copy as approval_copy
from bot.toolsets.observe.http import Endpoint, ObserveHttp
from bot.toolsets.observe.instances import Instances
from bot.toolsets.observe.silence import SilenceReadback, SilenceWrite
from bot.toolsets.observe.tools import Observe, ObserveSettings
from bot.toolsets.spec import Reach, ToolContext
from bot.values import Landed
from tests.bot_processes import Launcher, Start
from tests.peers.alertmanager import AlertmanagerServer
from tests.peers.holding_proxy import HoldingProxy
from tests.postgres import free_port
from tests.test_approval_crashes import card_settled
from tests.test_approvals import approval_id, card_text, click, wait_card, wait_said
from tests.world import ALICE, CAROL, OPS_CHANNEL, World

SILENCES = r"^/api/v2/silences$"


@pytest.fixture(scope="module")
def alertmanager() -> Iterator[AlertmanagerServer]:
    server = AlertmanagerServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
async def proxy(alertmanager: AlertmanagerServer) -> AsyncIterator[HoldingProxy]:
    server = HoldingProxy(alertmanager.url)
    await server.start()
    yield server
    await server.stop()


def commented(alertmanager: AlertmanagerServer, word: str) -> list[dict[str, Any]]:
    return [s for s in alertmanager.silences() if word in s["comment"]]


ARGS = {
    "namespace": "shop",
    "matchers": {"alertname": "KubePodCrashLooping"},
    "duration": "1h",
    "comment": "readback-direct",
}


async def test_the_readback_finds_the_silence_of_its_approval_only(
    alertmanager: AlertmanagerServer,
):
    http = ObserveHttp()
    endpoint = Endpoint("alertmanager", "am", alertmanager.url, None, timeout_s=10)
    observe = Observe(http, Instances((endpoint,)), ObserveSettings(), clock=time.time)
    write, readback = SilenceWrite(observe), SilenceReadback(observe)
    try:
        asked = ToolContext("prod", "shop", reach=Reach(("shop",)), requester="U0ALICE")
        plan = await write.prepare(ARGS, asked)
        assert await readback.applied(plan, "approval-1") == Landed.NOT_APPLIED  # not made yet
        await write.execute(plan, ToolContext("prod", "shop", approval_id="approval-1"))
        assert await readback.applied(plan, "approval-1") == Landed.APPLIED
        # The same body, not its own.
        assert await readback.applied(plan, "approval-2") == Landed.NOT_APPLIED
        # An Alertmanager that does not answer tells nothing: never "not made".
        down = Endpoint("alertmanager", "am", f"http://127.0.0.1:{free_port()}", None, 2)
        blind = Observe(http, Instances((down,)), ObserveSettings(), clock=time.time)
        assert await SilenceReadback(blind).applied(plan, "approval-1") == Landed.UNKNOWN
    finally:
        await http.close()
    [silence] = commented(alertmanager, "readback-direct")
    assert silence["comment"] == (
        "readback-direct (asked by U0ALICE through kelpie) [kelpie approval approval-1]"
    )


@pytest.fixture
def crashable(launch: Launcher, proxy: HoldingProxy) -> Start:
    """`kelpie run` whose Alertmanager is the real one behind the proxy; short leases."""
    return launch(
        {
            "database": {"lease_s": 3},
            "observability": {"alertmanager": [{"name": "am", "url": proxy.url}]},
            "roles": {
                "silencer": {
                    "tools": ["present/*", "read/*", "write/silence_alert"],
                    "namespaces": ["shop"],
                    "approval": {"approvers": {"users": [CAROL]}, "allow_requester": False},
                }
            },
            "channels": [{"match": {"id": OPS_CHANNEL}, "role": "silencer", "namespace": "shop"}],
        }
    )


async def propose(world: World, word: str) -> tuple[Any, Any]:
    arguments = {"matchers": ARGS["matchers"], "duration": "2h", "comment": word}
    world.model.reply_tool_calls([("silence_alert", arguments | {"reason": "rollout"})])
    mention = await world.mention(OPS_CHANNEL, ALICE, "silence the crashloop alert")
    return mention, await wait_card(world, mention["ts"], timeout=120)


async def test_a_silence_made_right_before_a_crash_is_reported_made(
    world: World, proxy: HoldingProxy, alertmanager: AlertmanagerServer, crashable: Start
):
    bot = await crashable()
    mention, card = await propose(world, "crash-made")  # a fresh process imports LiteLLM
    identifier = approval_id(card)
    assert "this approval's id" in card_text(card)
    # Alertmanager makes the silence; kelpie never hears so: it is killed first.
    answered = proxy.hold_answer("POST", SILENCES)
    await click(world, CAROL, card)
    await world.slack.wait_for(lambda s: commented(alertmanager, "crash-made") != [], timeout=60)
    bot.kill()
    answered.set()
    await crashable()
    said = await wait_said(world, mention["ts"], "confirmed by reading the target", timeout=120)
    assert said.text.endswith(f": {approval_copy.RECONCILED_EXECUTED}.")
    final = await card_settled(world, card)
    assert "not executed" not in card_text(final)
    # Made once, found by its approval's id; never posted again.
    [silence] = commented(alertmanager, "crash-made")
    assert silence["comment"].endswith(f"[kelpie approval {identifier}]")
    assert proxy.forwarded.count(("POST", "/api/v2/silences")) == 1
