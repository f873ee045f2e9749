"""The hand-off as a parked poller meets it: its channel (subscribed, messages decoded),
the action ``job`` it polls, and the check that a stale hand-out's reports are refused."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgpack
import pytest
import redis.asyncio as aioredis

from flo_redis import (
    ActionRegisterOptions,
    ConflictError,
    FloClient,
    WorkerCompleteOptions,
    WorkerFailOptions,
    WorkerTouchOptions,
)
from flo_redis._wire.keys import ActionKeys, action_keys, handoff_channel
from flo_redis.worker.progress import report_progress

PARK_MS = 10_000


class Channel:
    """The poller's side of its hand-off channel: subscribed, messages decoded."""

    def __init__(self, pubsub: Any) -> None:
        self.pubsub = pubsub

    async def next(self, timeout: float = 2.0) -> list[Any] | None:
        data = await self.next_data(timeout)
        if data is None:
            return None
        # Lua strings are msgpack str; the input is bytes whatever its encoding.
        fields = list(msgpack.unpackb(data, raw=True))
        return [f.decode() if i < 2 else f for i, f in enumerate(fields)]

    async def next_data(self, timeout: float = 2.0) -> bytes | None:
        """The next message as it was published."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while loop.time() < end:
            message = await self.pubsub.get_message(timeout=0.1)
            if message is not None and message["type"] == "smessage":
                return bytes(message["data"])
        return None


@pytest.fixture
async def channel(raw: aioredis.Redis, client: FloClient) -> AsyncIterator[Channel]:
    keys = action_keys(client.namespace, "job")
    pubsub = raw.pubsub()
    await pubsub.ssubscribe(handoff_channel(keys.tag, client.owner_id))
    await pubsub.get_message(timeout=1.0)  # the confirmation
    yield Channel(pubsub)
    await pubsub.aclose()  # type: ignore[no-untyped-call]


async def register(client: FloClient, **options: Any) -> ActionKeys:
    await client.action.register("job", options=ActionRegisterOptions(**options))
    return action_keys(client.namespace, "job")


async def late_reports_refused(client: FloClient, run_id: str, token: int) -> None:
    """Every report of the hand-out ``token`` is refused and changes nothing."""
    before = await client.action.status(run_id)
    worker = client.worker
    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: worker.complete("w1", "job", run_id, b"late", WorkerCompleteOptions(token=token)),
        lambda: worker.fail("w1", "job", run_id, "late", WorkerFailOptions(token=token)),
        lambda: worker.touch("w1", "job", run_id, WorkerTouchOptions(token=token)),
        lambda: report_progress(client.session, "w1", "job", run_id, token, b"50"),
    ]
    for call in calls:
        with pytest.raises(ConflictError):
            await call()
    (refused,) = await worker.accept("w1", "job", [(run_id, token)])
    assert isinstance(refused, ConflictError)
    after = await client.action.status(run_id)
    assert (after.status, after.attempt, after.token) == (
        before.status,
        before.attempt,
        before.token,
    )
