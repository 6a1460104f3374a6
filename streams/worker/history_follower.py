"""How a worker follows a history topic (aliases, erasures): read to its end as the worker
starts, before the arbiter decides anything, then read again every `policy_poll_s`; each time it
grows, what it now says goes to the processor between batches (`turn`: the arbiter's), so no
batch is decided half under the old history and half under the new."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any

from mode import Service

from streams.core.records.policy import Review
from streams.pipeline.processor import Processor
from streams.settings import Settings
from streams.wire.history_topic import HistoryTopic

log = logging.getLogger(__name__)


class HistoryFollower(Service):
    """Follows `history`; a subclass says what the processor adopts from it (`adopt`) and may
    act on it after each read (`after_read`)."""

    def __init__(
        self,
        settings: Settings,
        processor: Processor,
        turn: asyncio.Lock,
        history: HistoryTopic,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.settings = settings
        self.processor = processor
        self.history = history
        self.turn = turn

    def adopt(self) -> None:
        """Hand the processor what the topic now says."""
        raise NotImplementedError

    async def after_read(self) -> None:
        """What to do once the topic is read to its end, grown or not, and adopted (a failure
        is its own to log: it is tried again after the next read)."""

    def review_at(self, at: datetime) -> Review:
        """The review the policy in force at `at` asks of a steward's change (its defaults')."""
        return self.processor.policies.in_force(at).defaults.review

    async def on_start(self) -> None:
        await self.history.start()
        await self.history.read()
        self.adopt()
        await self.after_read()

    async def on_stop(self) -> None:
        await self.history.stop()

    @Service.task
    async def _follow(self) -> None:
        while not self.should_stop:
            await self.sleep(self.settings.policy_poll_s)
            try:
                grew = await self.history.read()
            except Exception as exc:  # a broker hiccup: read on next time
                log.warning("%s: reading failed (%s); reading again", self.history.topic, exc)
                continue
            if grew:
                async with self.turn:
                    self.adopt()
            await self.after_read()
