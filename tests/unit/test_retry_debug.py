"""``FloClient(retry=RetryPolicy(...))`` resends what Redis refused without running it, and
only that; ``debug=True`` logs connections and requests."""

from __future__ import annotations

import logging

import pytest
import redis.asyncio as aioredis
from proxy import Proxy

from flo_redis import (
    FloClient,
    NotConnectedError,
    Ran,
    RetryPolicy,
    StatusCode,
    UnavailableError,
    ValidationError,
)
from flo_redis._wire.keys import action_keys
from flo_redis._wire.runner import SCRIPTS

FAST = RetryPolicy(max_attempts=4, initial_backoff_ms=1, max_backoff_ms=5)
INVOKE = SCRIPTS["action_invoke"].sha.encode()


async def pending_runs(raw: aioredis.Redis, namespace: str, action: str) -> int:
    return int(await raw.zcard(action_keys(namespace, action).pending))


async def test_a_loading_refusal_is_resent_per_the_policy(
    proxy: Proxy, raw: aioredis.Redis, namespace: str
) -> None:
    async with FloClient(proxy.url, namespace=namespace, retry=FAST) as client:
        await client.action.register("job")
        await raw.script_load(SCRIPTS["action_invoke"].source)
        proxy.answer_loading(INVOKE, times=3)
        run_id = (await client.action.invoke("job", b"x")).run_id
    assert proxy.loading_answers == 3
    assert proxy.forwarded_count(INVOKE) == 1
    assert await pending_runs(raw, namespace, "job") == 1
    assert run_id.startswith("job:")


async def test_the_last_refusal_is_raised_once_the_policy_is_used_up(
    proxy: Proxy, raw: aioredis.Redis, namespace: str
) -> None:
    async with FloClient(proxy.url, namespace=namespace, retry=FAST) as client:
        await client.action.register("job")
        proxy.answer_loading(INVOKE, times=10)
        with pytest.raises(UnavailableError) as info:
            await client.action.invoke("job", b"x")
    assert (info.value.status_code, info.value.ran) == (StatusCode.UNAVAILABLE, Ran.NO)
    assert proxy.loading_answers == FAST.max_attempts
    assert await pending_runs(raw, namespace, "job") == 0


async def test_max_attempts_one_turns_resending_off(
    proxy: Proxy, raw: aioredis.Redis, namespace: str
) -> None:
    async with FloClient(
        proxy.url, namespace=namespace, retry=RetryPolicy(max_attempts=1)
    ) as client:
        await client.action.register("job")
        proxy.answer_loading(INVOKE, times=1)
        with pytest.raises(UnavailableError):
            await client.action.invoke("job", b"x")
        assert proxy.loading_answers == 1
        await client.action.invoke("job", b"y")  # Redis answers again: no refusal left
    assert await pending_runs(raw, namespace, "job") == 1


async def test_a_request_that_ran_is_never_resent(
    proxy: Proxy, raw: aioredis.Redis, namespace: str
) -> None:
    async with FloClient(proxy.url, namespace=namespace, retry=FAST) as client:
        await client.action.register("job")
        await raw.script_load(SCRIPTS["action_invoke"].source)
        proxy.drop_reply_after(INVOKE)
        with pytest.raises(NotConnectedError):
            await client.action.invoke("job", b"x")
    assert proxy.dropped_replies == 1
    assert proxy.forwarded_count(INVOKE) == 1
    assert await pending_runs(raw, namespace, "job") == 1  # it ran once, and only once


async def test_retry_must_be_a_policy(redis_url: str) -> None:
    with pytest.raises(ValidationError):
        FloClient(redis_url, retry=3)  # type: ignore[arg-type]


async def test_debug_logs_connections_and_requests(
    redis_url: str, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="flo_redis")
    async with FloClient(redis_url, namespace=namespace, debug=True) as client:
        await client.action.register("job")
        await client.action.invoke("job", b"x")
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("flo_redis")]
    assert any(line.startswith("Connected to redis://") for line in lines), lines
    assert any(line.startswith("-> action_invoke ") for line in lines), lines
    assert any(line.startswith("<- action_invoke status 0") for line in lines), lines
    assert any(line.startswith("Disconnected from ") for line in lines), lines


async def test_without_debug_requests_are_not_logged(
    redis_url: str, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="flo_redis")
    async with FloClient(redis_url, namespace=namespace) as client:
        await client.action.register("job")
    assert not [r for r in caplog.records if r.name == "flo_redis.requests"]
