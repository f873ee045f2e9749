"""``client.worker.configure`` is one script (``lua/worker_configure.lua``): it reads the
stored settings, refuses before it writes, and writes only what was given."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot

from flo_redis import BadRequestError, FloClient, ValidationError
from flo_redis._wire.gateway import WORKER_CONFIGURE
from flo_redis._wire.keys import namespace_keys


async def settings(raw: aioredis.Redis, namespace: str) -> dict[bytes, bytes]:
    return await raw.hgetall(namespace_keys(namespace).config)  # type: ignore[no-any-return]


def stored(heartbeat_timeout_ms: int, remove_after_ms: int) -> dict[bytes, bytes]:
    """The config hash holding these two settings, as Redis answers it."""
    return {
        b"heartbeat_timeout_ms": str(heartbeat_timeout_ms).encode(),
        b"remove_after_ms": str(remove_after_ms).encode(),
    }


async def test_given_settings_are_written_and_the_others_kept(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    await client.worker.configure(heartbeat_timeout_ms=1000, remove_after_ms=5000)
    await client.worker.configure(heartbeat_timeout_ms=2000)
    assert await settings(raw, namespace) == stored(2000, 5000)


async def test_a_removal_before_the_timeout_is_refused_and_nothing_written(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    await client.worker.configure(heartbeat_timeout_ms=1000, remove_after_ms=2000)
    message = (
        r"remove_after_ms \(500\) must not be shorter than heartbeat_timeout_ms \(1000\): "
        "a worker is first marked unhealthy, then removed"
    )
    with pytest.raises(ValidationError, match=message):
        await client.worker.configure(remove_after_ms=500)
    # The stored removal delay is what the new timeout is held against.
    with pytest.raises(ValidationError, match=r"remove_after_ms \(2000\).*\(3000\)"):
        await client.worker.configure(heartbeat_timeout_ms=3000)
    assert await settings(raw, namespace) == stored(1000, 2000)


async def test_a_stored_setting_that_does_not_parse_reads_as_its_default(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    await raw.hset(namespace_keys(namespace).config, "heartbeat_timeout_ms", "nan")
    with pytest.raises(ValidationError, match=r"\(1000\).*heartbeat_timeout_ms \(90000\)"):
        await client.worker.configure(remove_after_ms=1000)
    await client.worker.configure(remove_after_ms=90_000)


async def test_an_argument_the_script_does_not_take_is_refused_before_any_write(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    keys = namespace_keys(namespace)
    for args in (["nan", ""], ["99", ""], ["", "1.5"], ["", str(2**32)]):
        with pytest.raises(BadRequestError, match="ARGV"):
            await WORKER_CONFIGURE(client.session, keys, args)
    assert await settings(raw, namespace) == {}
    reply = await WORKER_CONFIGURE(client.session, keys, ["", ""])
    assert (reply.heartbeat_timeout_ms, reply.remove_after_ms) == (90_000, 300_000)
    assert await settings(raw, namespace) == {}


def test_its_keys_share_the_namespace_registries_slot() -> None:
    keys = namespace_keys("shop")
    slots = {key_slot(k.encode()) for k in WORKER_CONFIGURE.keys(keys)}
    assert slots == {key_slot(keys.workers.encode())}
