"""A write that checks its own effect (#28 item 7): after an approved write ran, kelpie
follows the target and says once, in the thread, "Recovered:" or "Not recovered:" with what
it read; when not, a rollback card follows (a normal approval). End to end through the
Slack and Kubernetes peers; the fake's `stall_rollouts` plays a rollout that never becomes
available. Nothing here waits for time: a rollout that settled or gave up ends the watch at
its first reading."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bot.approvals.verify import (
    NOT_RECOVERED,
    RECOVERED,
    ROLLBACK_OFFERED,
    WatchTime,
    rollback_id,
)
from bot.store.db import Database
from bot.store.tables import ApprovalRow, VerifyWatchRow
from bot.store.turns import Replica
from bot.store.verify import VerifyWatchRepository
from tests.bot_processes import Launcher, Start
from tests.peers.prometheus import PrometheusServer, Sample
from tests.test_approval_crashes import wait_db
from tests.test_approvals import (
    approval_id,
    card_text,
    click,
    propose_scale,
    real_writes,
    replicas,
    wait_card,
    wait_said,
)
from tests.world import ALICE, CAROL, OPS_CHANNEL, World

DEPLOYMENT_PATH = "/apis/apps/v1/namespaces/shop/deployments/checkout-api"


def said(world: World, thread_ts: str, start: str) -> list[Any]:
    return [
        m
        for m in world.slack.thread(OPS_CHANNEL, thread_ts)
        if m.is_bot and (m.text or "").startswith(start)
    ]


async def wait_rollback_card(world: World, thread_ts: str) -> Any:
    def find(server: Any) -> Any:
        for message in server.thread(OPS_CHANNEL, thread_ts):
            blocks = message.blocks or []
            if message.is_bot and any(
                b.get("block_id", "").startswith("approval:") for b in blocks
            ):
                if "Proposed by kelpie" in card_text(message):
                    return message
        return None

    return await world.slack.wait_for(find, timeout=20)


async def propose_restart(world: World) -> tuple[Any, Any]:
    world.model.reply_tool_calls(
        [("restart_deployment", {"namespace": "shop", "name": "checkout-api"})]
    )
    world.model.reply_text("Restarting.")
    mention = await world.mention(OPS_CHANNEL, ALICE, "restart checkout-api")
    return mention, await wait_card(world, mention["ts"])


def revision(world: World) -> int:
    deployment = world.kube.get("Deployment", "shop", "checkout-api")
    assert deployment is not None
    return int(deployment["metadata"]["annotations"]["deployment.kubernetes.io/revision"])


def template_writes(world: World) -> list[Any]:
    return [w for w in real_writes(world) if w.path == DEPLOYMENT_PATH]


async def test_an_approved_scale_is_followed_until_it_recovered(any_db_world: World):
    world = any_db_world  # on SQLite and on the real PostgreSQL
    bot = await world.start_bot()
    mention, card = await propose_scale(world, then="Scaled.")
    identifier = approval_id(card)
    await click(world, CAROL, card)
    verdict = await wait_said(world, mention["ts"], "Recovered:")
    assert verdict.text.startswith("Recovered: Scale deployment shop/checkout-api from 3 to 5")
    assert "5/5 replicas available at revision 2" in verdict.text
    await world.drain()
    assert len(said(world, mention["ts"], "Recovered:")) == 1
    assert said(world, mention["ts"], "Not recovered:") == []
    # The watch is on record, ended, with the verdict it said.
    watches = VerifyWatchRepository(bot.db, Replica.this_process(15))
    state = await watches.state(identifier)
    assert state is not None and state[0] == "done" and state[1] == verdict.text


async def test_a_restart_that_never_becomes_available_offers_a_rollback(world: World):
    world.kube.stall_rollouts = True  # the new pods never become available
    await world.start_bot()
    before = revision(world)
    mention, card = await propose_restart(world)
    await click(world, CAROL, card)
    verdict = await wait_said(world, mention["ts"], "Not recovered:")
    assert f"0/3 replicas available at revision {before + 1}" in verdict.text
    assert "ProgressDeadlineExceeded" in verdict.text
    assert "A rollback is proposed on the card below" in verdict.text

    rollback = await wait_rollback_card(world, mention["ts"])
    text = card_text(rollback)
    assert f"from revision {before + 1} to revision {before}" in text
    assert rollback.ts > verdict.ts  # the verdict first, its card below
    assert len(template_writes(world)) == 1  # the restart only: nothing runs unapproved

    # Four eyes hold: the requester of the restart may not approve its undoing.
    await click(world, ALICE, rollback)
    assert len(template_writes(world)) == 1
    world.kube.stall_rollouts = False
    world.model.reply_text("Rolled back.")
    await click(world, CAROL, rollback)
    await click(world, CAROL, rollback)  # a double click runs it once
    again = await world.slack.wait_for(
        lambda s: len(said(world, mention["ts"], "Recovered:")) == 1, timeout=20
    )
    assert again
    await world.drain()
    assert len(template_writes(world)) == 2  # the restart and the rollback, once
    (recovered,) = said(world, mention["ts"], "Recovered:")
    assert recovered.text.startswith("Recovered: Roll back deployment shop/checkout-api")
    assert len(said(world, mention["ts"], "Not recovered:")) == 1


async def test_a_scale_that_stalls_offers_the_previous_replica_count(world: World):
    world.kube.stall_rollouts = True
    await world.start_bot()
    mention, card = await propose_scale(world)
    await click(world, CAROL, card)
    verdict = await wait_said(world, mention["ts"], "Not recovered:")
    assert "2/5 replicas available" in verdict.text
    rollback = await wait_rollback_card(world, mention["ts"])
    assert "spec.replicas 5 → 3" in card_text(rollback)
    assert replicas(world) == 5  # proposed, not run


async def test_verify_s_0_follows_nothing(world: World):
    bot = await world.start_bot({"agent": {"verify_s": 0}})
    mention, card = await propose_scale(world, then="Scaled.")
    identifier = approval_id(card)
    await click(world, CAROL, card)
    await wait_said(world, mention["ts"], "Scaled.")
    await world.drain()
    watches = VerifyWatchRepository(bot.db, Replica.this_process(15))
    assert await watches.state(identifier) is None
    assert said(world, mention["ts"], "Recovered:") == []
    assert said(world, mention["ts"], "Not recovered:") == []


@pytest.fixture
def short_leases(launch: Launcher) -> Start:
    """`kelpie run` whose leases lapse within seconds of a kill."""
    return launch({"database": {"lease_s": 3}})


async def test_killed_during_the_watch_a_restart_finishes_it_once(
    world: World, short_leases: Callable[[], Any]
):
    world.kube.stall_rollouts = True
    world.kube.stall_deadline = False  # still progressing: the watch keeps following
    bot = await short_leases()
    mention, card = await propose_restart(world)
    identifier = approval_id(card)
    await click(world, CAROL, card)
    await wait_db(
        world.tmp / "k.db",
        f"SELECT state FROM verify_watches WHERE approval_id = '{identifier}'",
        lambda rows: rows == [("watching",)],
    )
    bot.kill()
    world.kube.finish_rollout("shop", "checkout-api")
    await short_leases()
    verdict = await wait_said(world, mention["ts"], "Recovered:", timeout=120)
    assert "3/3 replicas available" in verdict.text
    assert "The kelpie process following this change stopped" in verdict.text
    await wait_db(
        world.tmp / "k.db",
        f"SELECT state FROM verify_watches WHERE approval_id = '{identifier}'",
        lambda rows: rows == [("done",)],
    )
    assert len(said(world, mention["ts"], "Recovered:")) == 1
    assert said(world, mention["ts"], "Not recovered:") == []


# --- the role's SLI, read from a real Prometheus at the end ------------------------------


@pytest.fixture(scope="module")
def prometheus() -> Iterator[PrometheusServer]:
    """Known series: shop is healthy (error ratio 0.002) and slow (latency 2 s); payments,
    outside the operator role, is failing (0.5): only a query scoped to shop reads 0.002."""
    server = PrometheusServer()
    samples = []
    # The bot reads the SLI at the real time (Prometheus looks back 5 minutes from the query's
    # time): the series end a minute before this module's first SLI test, not before the
    # test session started.
    last = time.time() - 60
    for minute in range(10):
        at = last - (9 - minute) * 60
        for namespace, ratio in (("shop", 0.002), ("payments", 0.5)):
            labels = {"namespace": namespace}
            samples.append(Sample("http_error_ratio", labels, ratio, at))
            samples.append(Sample("http_latency_seconds", labels, 2.0, at))
    server.load(samples, types={"http_error_ratio": "gauge", "http_latency_seconds": "gauge"})
    server.start()
    yield server
    server.stop()


def with_sli(prometheus: PrometheusServer, query: str, below: float) -> dict[str, Any]:
    return {
        "observability": {"prometheus": [{"name": "main", "url": prometheus.url}]},
        "roles": {"operator": {"verify": {"sli": {"query": query, "healthy_below": below}}}},
    }


async def test_a_settled_scale_is_recovered_only_with_its_sli_below_the_limit(
    world: World, prometheus: PrometheusServer
):
    await world.start_bot(with_sli(prometheus, "max(http_error_ratio)", 0.01))
    mention, card = await propose_scale(world)
    await click(world, CAROL, card)
    verdict = await wait_said(world, mention["ts"], "Recovered:")
    assert "5/5 replicas available" in verdict.text
    assert "max(http_error_ratio) = 0.002 (below 0.01)" in verdict.text
    # The query Prometheus ran was limited to the role's namespaces (shop, team-*), minus
    # the firewall's deny zone.
    scoped = 'http_error_ratio{namespace=~"shop|team\\\\-.*",namespace!~"kube\\\\-system"}'
    assert prometheus.queries()[-1] == f"max({scoped})"


async def test_an_sli_above_its_limit_is_not_recovered_and_offers_a_rollback(
    world: World, prometheus: PrometheusServer
):
    await world.start_bot(with_sli(prometheus, "max(http_latency_seconds)", 1))
    mention, card = await propose_scale(world)
    await click(world, CAROL, card)
    verdict = await wait_said(world, mention["ts"], "Not recovered:")
    assert "5/5 replicas available" in verdict.text
    assert "max(http_latency_seconds) = 2, not below 1" in verdict.text
    rollback = await wait_rollback_card(world, mention["ts"])
    assert "spec.replicas 5 → 3" in card_text(rollback)


# --- time moved on by hand: a watch that keeps waiting ------------------------------------


class HandTime:
    """The watches' clock and waits: a wait ends only when the test wakes it."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)
        self._asleep: asyncio.Queue[tuple[float, asyncio.Future[None]]] = asyncio.Queue()

    @property
    def time(self) -> WatchTime:
        return WatchTime(clock=lambda: self.now, sleep=self._sleep)

    async def _sleep(self, seconds: float) -> None:
        woken = asyncio.get_running_loop().create_future()
        self._asleep.put_nowait((seconds, woken))
        await woken

    async def asleep(self) -> float:
        """Once the watch waits: how long it asked to."""
        seconds, woken = await asyncio.wait_for(self._asleep.get(), 20)
        self._woken = (seconds, woken)
        return seconds

    def wake(self, *, later: timedelta | None = None) -> None:
        """End that wait, `later` on (default: as long as it asked)."""
        seconds, woken = self._woken
        self.now += later or timedelta(seconds=seconds)
        woken.set_result(None)


async def test_a_rollout_still_progressing_at_the_deadline_is_not_recovered(world: World):
    world.kube.stall_rollouts = True
    world.kube.stall_deadline = False  # progressing, never available, never given up
    hand = HandTime()
    await world.start_bot(watch_time=hand.time)
    before = revision(world)
    mention, card = await propose_restart(world)
    await click(world, CAROL, card)
    assert await hand.asleep() == 5  # it reads again every 5 s (a third of the 15 s lease)
    hand.wake()
    await hand.asleep()
    assert said(world, mention["ts"], "Recovered:") == []
    hand.wake(later=timedelta(seconds=300))
    verdict = await wait_said(world, mention["ts"], "Not recovered:")
    assert f"0/3 replicas available at revision {before + 1}; 3/3 updated" in verdict.text
    assert "(still so after 300 s)" in verdict.text
    rollback = await wait_rollback_card(world, mention["ts"])
    assert f"from revision {before + 1} to revision {before}" in card_text(rollback)


async def test_a_deleted_pod_recovers_once_its_replacement_runs(world: World):
    hand = HandTime()
    await world.start_bot(watch_time=hand.time)
    rs = next(
        r
        for r in world.kube.objects("ReplicaSet")
        if r["metadata"]["name"].startswith("checkout-api-") and r["spec"]["replicas"] == 3
    )
    crashing = f"{rs['metadata']['name']}-m4n8p"
    world.model.reply_tool_calls([("delete_pod", {"namespace": "shop", "name": crashing})])
    world.model.reply_text("Deleting it.")
    mention = await world.mention(OPS_CHANNEL, ALICE, f"delete {crashing}")
    card = await wait_card(world, mention["ts"])
    await click(world, CAROL, card)
    await hand.asleep()  # gone, and the replacement is not there yet: 2/3
    assert said(world, mention["ts"], "Recovered:") == []
    labels = rs["spec"]["selector"]["matchLabels"]
    world.kube.add_pod("shop", f"{rs['metadata']['name']}-r3pl4", labels=labels, owner=rs)
    hand.wake()
    verdict = await wait_said(world, mention["ts"], "Recovered:")
    name = rs["metadata"]["name"]
    assert f"pod shop/{crashing} is gone; ReplicaSet {name} has 3/3 pods" in verdict.text
    assert said(world, mention["ts"], "Not recovered:") == []


async def test_a_cordoned_node_is_recovered_when_it_stays_cordoned(world: World):
    await world.start_bot({"roles": {"operator": {"namespaces": ["*"]}}})
    world.model.reply_tool_calls([("cordon_node", {"name": "node-a"})])
    world.model.reply_text("Cordoning.")
    mention = await world.mention(OPS_CHANNEL, ALICE, "cordon node-a")
    card = await wait_card(world, mention["ts"])
    await click(world, CAROL, card)
    verdict = await wait_said(world, mention["ts"], "Recovered:")
    assert "node node-a is cordoned (unschedulable)" in verdict.text


async def test_a_watch_left_by_a_stopped_replica_is_finished_by_the_next_once(
    any_db_world: World,
):
    world = any_db_world  # the watch's row and its hand-over, on SQLite and PostgreSQL
    world.kube.stall_rollouts = True
    world.kube.stall_deadline = False
    hand = HandTime()
    first = await world.start_bot(watch_time=hand.time)
    mention, card = await propose_restart(world)
    await click(world, CAROL, card)
    await hand.asleep()  # following it: still rolling out
    await world.stop_bot(first)  # hands the watch back (its row stays, its lease ends)
    world.kube.finish_rollout("shop", "checkout-api")
    await world.start_bot()
    verdict = await wait_said(world, mention["ts"], "Recovered:")
    assert "3/3 replicas available" in verdict.text
    assert "The kelpie process following this change stopped" in verdict.text
    await world.drain()
    assert len(said(world, mention["ts"], "Recovered:")) == 1
    assert said(world, mention["ts"], "Not recovered:") == []


async def test_no_rollback_card_where_the_role_may_not_roll_back(world: World):
    world.kube.stall_rollouts = True
    tools = ["present/*", "read/*", "write/restart_deployment"]
    await world.start_bot({"roles": {"operator": {"tools": tools}}})
    mention, card = await propose_restart(world)
    await click(world, CAROL, card)
    verdict = await wait_said(world, mention["ts"], "Not recovered:")
    assert "No rollback card: role operator may not use rollback_deployment." in verdict.text
    await world.drain()
    thread = world.slack.thread(OPS_CHANNEL, mention["ts"])
    assert not any("Proposed by kelpie" in card_text(m) for m in thread)


# --- a replica that died between storing its verdict and saying it ------------------------


class DeadReplica:
    """A replica that concluded a watch and was killed: its lease ran out an hour ago."""

    def __init__(self, url: str) -> None:
        self.db = Database(url)
        then = datetime.now(UTC) - timedelta(hours=1)
        self.watches = VerifyWatchRepository(
            self.db, Replica("dead:1:abcdef", timedelta(seconds=15), clock=lambda: then)
        )

    async def conclude(self, identifier: str, verdict: str, said_ts: str | None) -> None:
        assert await self.watches.claim(identifier)
        assert await self.watches.conclude(identifier, verdict)
        if said_ts is not None:
            await self.watches.said(identifier, said_ts)

    async def state(self, identifier: str, want: str) -> tuple[str, str | None]:
        for _ in range(400):
            state = await self.watches.state(identifier)
            if state is not None and state[0] == want:
                return state
            await asyncio.sleep(0.05)
        raise AssertionError(f"the watch of {identifier} never became {want}")


async def following_restart(world: World) -> tuple[Any, str]:
    """A restart approved and followed (still rolling out), then the bot stopped: the
    watch's row stays, handed back. (The mention, its approval id.)"""
    world.kube.stall_rollouts = True
    world.kube.stall_deadline = False
    hand = HandTime()
    first = await world.start_bot(watch_time=hand.time)
    mention, card = await propose_restart(world)
    identifier = approval_id(card)
    await click(world, CAROL, card)
    await hand.asleep()
    await world.stop_bot(first)
    return mention, identifier


async def test_a_verdict_stored_by_a_replica_killed_before_saying_it_is_said_once(
    any_db_world: World,
):
    world = any_db_world
    mention, identifier = await following_restart(world)
    dead = DeadReplica(world.config.database.url)
    stored = NOT_RECOVERED.format(
        what="Restart deployment shop/checkout-api", evidence="read before the crash"
    )
    try:
        await dead.conclude(identifier, stored + ROLLBACK_OFFERED, said_ts=None)
        await world.start_bot()
        verdict = await wait_said(world, mention["ts"], "Not recovered:")
        # The stored verdict, as concluded: not a new reading, not a second verdict.
        assert verdict.text == stored + ROLLBACK_OFFERED
        rollback = await wait_rollback_card(world, mention["ts"])
        assert "read before the crash" in card_text(rollback)
        assert rollback.ts > verdict.ts
        state = await dead.state(identifier, "done")
        assert state[1] == stored + ROLLBACK_OFFERED
        await world.drain()
    finally:
        await dead.db.close()
    assert len(said(world, mention["ts"], "Not recovered:")) == 1
    assert said(world, mention["ts"], "Recovered:") == []
    thread = world.slack.thread(OPS_CHANNEL, mention["ts"])
    assert len([m for m in thread if "Proposed by kelpie" in card_text(m)]) == 1


async def test_a_verdict_said_before_the_crash_is_not_said_again(world: World):
    mention, identifier = await following_restart(world)
    dead = DeadReplica(world.config.database.url)
    stored = RECOVERED.format(what="Restart deployment shop/checkout-api", evidence="all ready")
    try:
        # Said (its ts stored), then killed before the watch was done.
        await dead.conclude(identifier, stored, said_ts="1.000001")
        await world.start_bot()
        assert await dead.state(identifier, "done") == ("done", stored)
        await world.drain()
    finally:
        await dead.db.close()
    # Its ts shows it was said: the watch ends without a second message.
    assert said(world, mention["ts"], "Recovered:") == []
    assert said(world, mention["ts"], "Not recovered:") == []


def posts_in(world: World, thread_ts: str) -> list[Any]:
    """Every chat.postMessage kelpie sent into the thread, answered or refused."""
    return [
        c
        for c in world.slack.calls_to("chat.postMessage")
        if c.params.get("channel") == OPS_CHANNEL and c.params.get("thread_ts") == thread_ts
    ]


async def test_a_verdict_the_archived_channel_refuses_ends_undeliverable_and_is_not_retried(
    world: World,
):
    mention, identifier = await following_restart(world)
    dead = DeadReplica(world.config.database.url)
    stored = NOT_RECOVERED.format(
        what="Restart deployment shop/checkout-api", evidence="read before the crash"
    )
    world.slack.archive_channel(OPS_CHANNEL)
    tried_before = len(posts_in(world, mention["ts"]))
    try:
        await dead.conclude(identifier, stored + ROLLBACK_OFFERED, said_ts=None)
        await world.start_bot()
        assert await dead.state(identifier, "undeliverable") == (
            "undeliverable",
            stored + ROLLBACK_OFFERED,
        )
        async with dead.db.sessions() as session:
            watch = await session.get(VerifyWatchRow, identifier)
            assert watch is not None and watch.verdict_error == "is_archived"
        await world.drain()
        # A later start does not try again: the refusal is for good.
        await world.start_bot()
        await world.drain()
        assert await dead.watches.state(identifier) == ("undeliverable", stored + ROLLBACK_OFFERED)
        # No rollback card went where nothing can be posted (its id derives from the
        # approval's).
        async with dead.db.sessions() as session:
            assert await session.get(ApprovalRow, rollback_id(identifier)) is None
    finally:
        await dead.db.close()
    refused = posts_in(world, mention["ts"])[tried_before:]
    assert [c.response.get("error") for c in refused] == ["is_archived"]


async def test_a_verdict_slack_fails_to_take_once_is_said_at_the_next_reconciliation(
    world: World,
):
    mention, identifier = await following_restart(world)
    dead = DeadReplica(world.config.database.url)
    stored = RECOVERED.format(what="Restart deployment shop/checkout-api", evidence="all ready")
    tried_before = len(posts_in(world, mention["ts"]))
    try:
        await dead.conclude(identifier, stored, said_ts=None)
        world.slack.fail("chat.postMessage", "internal_error", times=1)
        await world.start_bot()
        assert await dead.state(identifier, "done") == ("done", stored)
        await world.drain()
    finally:
        await dead.db.close()
    tried = posts_in(world, mention["ts"])[tried_before:]
    assert [c.response.get("error") for c in tried] == ["internal_error", None]
    assert [m.text for m in said(world, mention["ts"], "Recovered:")] == [stored]


# --- a namespace's own SLI; rollback cards for nodes; none for a deleted pod ----------------


async def test_a_namespaces_own_sli_replaces_the_roles_and_reads_that_namespace_only(
    world: World, prometheus: PrometheusServer
):
    config = with_sli(prometheus, "max(http_latency_seconds)", 1)  # the role's would fail
    own = {
        "shop": {"sli": {"query": "max(http_error_ratio)", "healthy_below": 0.01}},
        "s*": {"sli": {"query": "max(http_latency_seconds)", "healthy_below": 1}},
    }
    config["roles"]["operator"]["verify"]["namespaces"] = own  # an exact name before a glob
    await world.start_bot(config)
    mention, card = await propose_scale(world)
    await click(world, CAROL, card)
    verdict = await wait_said(world, mention["ts"], "Recovered:")
    assert "max(http_error_ratio) = 0.002 (below 0.01)" in verdict.text
    # Read from the write's namespace only, not from every namespace of the role.
    scoped = 'http_error_ratio{namespace=~"shop",namespace!~"kube\\\\-system"}'
    assert prometheus.queries()[-1] == f"max({scoped})"


def node_a_cordoned(world: World) -> bool:
    node = world.kube.get("Node", "", "node-a")
    assert node is not None
    return bool(node["spec"].get("unschedulable"))


async def test_a_cordon_whose_sli_is_unhealthy_offers_to_uncordon(
    world: World, prometheus: PrometheusServer
):
    config = with_sli(prometheus, "max(http_latency_seconds)", 1)
    config["roles"]["operator"]["namespaces"] = ["*"]
    await world.start_bot(config)
    world.model.reply_tool_calls([("cordon_node", {"name": "node-a"})])
    world.model.reply_text("Cordoning.")
    mention = await world.mention(OPS_CHANNEL, ALICE, "cordon node-a")
    await click(world, CAROL, await wait_card(world, mention["ts"]))
    verdict = await wait_said(world, mention["ts"], "Not recovered:")
    assert "node node-a is cordoned (unschedulable)" in verdict.text
    assert "max(http_latency_seconds) = 2, not below 1" in verdict.text
    rollback = await wait_rollback_card(world, mention["ts"])
    assert "Uncordon node node-a" in card_text(rollback)
    assert node_a_cordoned(world)  # proposed, not run
    await click(world, ALICE, rollback)  # four eyes: not the requester of the cordon
    assert node_a_cordoned(world)
    world.model.reply_text("Uncordoned.")
    await click(world, CAROL, rollback)
    await wait_said(world, mention["ts"], "Uncordoned.")
    assert not node_a_cordoned(world)


async def test_a_deleted_pod_not_replaced_says_why_no_rollback_is_offered(world: World):
    hand = HandTime()
    await world.start_bot(watch_time=hand.time)
    rs = next(
        r
        for r in world.kube.objects("ReplicaSet")
        if r["metadata"]["name"].startswith("checkout-api-") and r["spec"]["replicas"] == 3
    )
    crashing = f"{rs['metadata']['name']}-m4n8p"
    world.model.reply_tool_calls([("delete_pod", {"namespace": "shop", "name": crashing})])
    world.model.reply_text("Deleting it.")
    mention = await world.mention(OPS_CHANNEL, ALICE, f"delete {crashing}")
    await click(world, CAROL, await wait_card(world, mention["ts"]))
    await hand.asleep()  # gone, and no replacement comes
    hand.wake(later=timedelta(seconds=300))
    verdict = await wait_said(world, mention["ts"], "Not recovered:")
    assert "(still so after 300 s)" in verdict.text
    assert verdict.text.endswith(
        "No rollback card: a deleted pod cannot be brought back (its controller, if any,"
        " makes a new one)."
    )
    await world.drain()
    thread = world.slack.thread(OPS_CHANNEL, mention["ts"])
    assert not any("Proposed by kelpie" in card_text(m) for m in thread)
