"""On a 👎: what that turn's read tools read is re-read at once (masked) and kept with the
feedback, while the incident is likely still there; `kelpie eval export` prefers it to a
later re-read. Best effort, after the click was stored and answered: a failure is logged,
and the export then re-reads at its own time (and says so)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime

from bot.config import Config
from bot.feedback.thread import read_fixture, thread_calls
from bot.store.feedback import FeedbackRepository
from bot.store.tables import FeedbackFixtureRow
from bot.toolsets.kube.client import KubeClients
from bot.values import Feedback

log = logging.getLogger(__name__)


class FixtureCapture:
    def __init__(
        self,
        store: FeedbackRepository,
        config: Config,
        kube: KubeClients,
        now: Callable[[], datetime],
    ) -> None:
        self._store = store
        self._config = config
        self._kube = kube
        self._now = now

    async def __call__(self, feedback: Feedback) -> None:
        try:
            await self._capture(feedback)
        except Exception as error:
            log.warning("could not capture what turn %s read: %s", feedback.turn_id, error)

    async def _capture(self, feedback: Feedback) -> None:
        record = await self._store.thread(feedback.channel_id, feedback.thread_ts)
        if record is None or any(f.turn_id == feedback.turn_id for f in record.fixtures):
            return
        calls = [c for c in thread_calls(record.messages) if c.turn_id == feedback.turn_id]
        fixture = await read_fixture(self._config, self._kube, record.session, calls)
        row = FeedbackFixtureRow(
            turn_id=feedback.turn_id,
            channel_id=feedback.channel_id,
            thread_ts=feedback.thread_ts,
            objects_json=json.dumps(fixture.objects),
            logs_json=json.dumps(fixture.logs),
            missing_json=json.dumps(fixture.missing),
            captured_at=self._now(),
        )
        await self._store.save_fixture(row)
        log.info("captured %d objects read by turn %s", len(fixture.objects), feedback.turn_id)
