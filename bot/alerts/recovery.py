"""A notification stored but not handled when its replica died is taken over like a Slack
delivery (the inbox's lease): this redelivery hands alerts to their threads and everything
else to Slack's."""

from __future__ import annotations

import logging
from typing import Protocol

from bot.alerts.payload import PayloadError
from bot.alerts.receiver import INBOX_KIND, stored_notification
from bot.alerts.threads import AlertThreads, Handled
from bot.values import OrphanDelivery

log = logging.getLogger(__name__)


class Redelivery(Protocol):
    async def redeliver(self, delivery: OrphanDelivery) -> None: ...


class AlertRedelivery:
    def __init__(self, threads: AlertThreads, others: Redelivery, handled: Handled) -> None:
        self._threads = threads
        self._others = others
        self._handled = handled

    async def redeliver(self, delivery: OrphanDelivery) -> None:
        if delivery.kind != INBOX_KIND:
            await self._others.redeliver(delivery)
            return
        try:
            notification = stored_notification(delivery.body_json)
        except (PayloadError, ValueError, KeyError) as error:
            log.error("alert notification %s cannot be read back: %s", delivery.key, error)
            await self._handled(delivery.key)
            return
        log.info("took over alert notification %s", delivery.key)
        await self._threads.handle(delivery.key, notification, resumed=True)
