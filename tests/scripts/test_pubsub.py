"""The sharded pub/sub base (flo_redis._session.pubsub) as its users rely on it: a one-off wait
for a message, channels released or kept, a lost connection, and liveness kept apart
from wake-ups. Cluster routing is covered in test_cluster.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis
from polling import eventually
from proxy import Proxy
from redis.asyncio.client import PubSub

from flo_redis import FloClient, NotConnectedError
from flo_redis._session.listener import Listener
from flo_redis._session.liveness import connection_name
from flo_redis._wire.keys import action_keys, owner_channel


async def subscribers(raw: aioredis.Redis, channel: str) -> int:
    reply = await raw.execute_command("PUBSUB", "SHARDNUMSUB", channel)
    return int(reply[1])


def run_channel(namespace: str, run: str) -> str:
    return f"{{{namespace}}}:test:done:{run}"


async def test_a_listener_hears_a_message_published_after_it_armed(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    channel = run_channel(namespace, "r1")
    async with client.waker.listening([channel], release=True) as listener:
        await listener.arm()
        assert await subscribers(raw, channel) == 1  # confirmed before arm returns
        assert not await listener.wait(0.01)
        await raw.execute_command("SPUBLISH", channel, b"finished")
        assert await listener.wait(15)
        assert listener.message == b"finished"
        await listener.arm()  # forgets what was heard
        assert listener.message is None


async def test_listeners_are_told_in_the_order_they_came_and_every_message_reaches_them(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    # A poller's hand-off inbox listens before each poll's watch: the run a message
    # hands over is started before the poll is woken.
    channel = run_channel(namespace, "order")
    heard: list[tuple[str, bytes | None]] = []

    class Recording(Listener):
        def __init__(self, name: str) -> None:
            super().__init__(client.waker.ensure, [channel])
            self.name = name

        def fire(self, message: bytes | None = None) -> None:
            heard.append((self.name, message))
            super().fire(message)

    first, second = Recording("first"), Recording("second")
    async with client.waker.attached(first), client.waker.attached(second):
        await second.arm()
        big = b"x" * 200_000
        for payload in (b"1", big, b"3"):
            await raw.execute_command("SPUBLISH", channel, payload)
        await eventually(lambda: asyncio.sleep(0, len(heard)), lambda n: n == 6)
    assert heard == [(n, p) for p in (b"1", big, b"3") for n in ("first", "second")]


async def test_a_released_channel_is_unsubscribed_when_its_last_listener_leaves(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    channel = run_channel(namespace, "r2")
    async with client.waker.listening([channel], release=True) as first:
        await first.arm()
        async with client.waker.listening([channel], release=True) as second:
            await second.arm()
        assert await subscribers(raw, channel) == 1  # the first still listens
        await raw.execute_command("SPUBLISH", channel, b"1")
        assert await first.wait(15)
    await eventually(lambda: subscribers(raw, channel), lambda n: n == 0)
    # Listening again right away subscribes again and hears again.
    for payload in (b"2", b"3"):
        async with client.waker.listening([channel], release=True) as again:
            await again.arm()
            await raw.execute_command("SPUBLISH", channel, payload)
            assert await again.wait(15)
            assert again.message == payload
    await eventually(lambda: subscribers(raw, channel), lambda n: n == 0)


async def test_a_wake_channel_stays_subscribed_between_polls(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    wake = action_keys(namespace, "kept").wake
    async with client.waker.watching([wake]) as watch:
        await watch.arm()
    assert await subscribers(raw, wake) == 1
    await client.close()
    await eventually(lambda: subscribers(raw, wake), lambda n: n == 0)


async def test_a_lost_connection_wakes_listeners_and_arm_subscribes_again(
    redis_url: str, raw: aioredis.Redis, namespace: str
) -> None:
    proxy = await Proxy.to(redis_url)
    channel = run_channel(namespace, "r3")
    try:
        async with (
            FloClient(proxy.url, namespace=namespace) as client,
            client.waker.listening([channel], release=True) as listener,
        ):
            await listener.arm()
            proxy.cut_all()
            assert await listener.wait(15)  # woken by the loss, not by a message
            assert listener.message is None
            await listener.arm()
            assert await subscribers(raw, channel) == 1
            await raw.execute_command("SPUBLISH", channel, b"after")
            assert await listener.wait(15)
            assert listener.message == b"after"
    finally:
        await proxy.stop()


async def test_a_connection_closed_under_a_subscribe_is_a_lost_connection(
    client: FloClient, raw: aioredis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While Redis restarts, redis-py can find the connection closed between its connect
    and its write, and raises AttributeError ('NoneType' ... 'writelines'). That is a lost
    connection (NotConnectedError, which a worker retries), not a fault that ends it; the
    next arm subscribes on a fresh connection."""
    send = PubSub.ssubscribe
    closed_under_it = [AttributeError("'NoneType' object has no attribute 'writelines'")]

    async def ssubscribe(self: PubSub, *args: Any, **kwargs: Any) -> Any:
        if closed_under_it:
            raise closed_under_it.pop()
        return await send(self, *args, **kwargs)

    monkeypatch.setattr(PubSub, "ssubscribe", ssubscribe)
    channel = run_channel(namespace, "r4")
    async with client.waker.listening([channel], release=True) as listener:
        with pytest.raises(NotConnectedError, match="subscription failed"):
            await listener.arm()
        await listener.arm()
        assert await subscribers(raw, channel) == 1
        await raw.execute_command("SPUBLISH", channel, b"after")
        assert await listener.wait(15)
        assert listener.message == b"after"


async def test_liveness_never_listens_and_never_shares_the_wake_connection(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    keys = action_keys(namespace, "apart")
    await client.liveness.hold(keys.tag)
    async with client.waker.watching([keys.wake]) as watch:
        await watch.arm()
        live = [c for c in await raw.client_list() if c["name"] == connection_name(client.owner_id)]
        assert [int(c["ssub"]) for c in live] == [1]  # its owner channel, nothing else
        assert await subscribers(raw, owner_channel(keys.tag, client.owner_id)) == 1
