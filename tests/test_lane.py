"""Script calls on the client's lane (``_scripts``, module docstring): the same answers,
refusals and recoveries as through the connection pool."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from flo_redis import FloClient, InternalServerError, NotFoundError, RunStatus, _scripts
from flo_redis._scripts import SCRIPTS
from flo_redis.keys import action_keys


async def test_an_invoke_after_script_flush_loads_the_script_again(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await client.action.register("job")
    first = await client.action.invoke("job", b"a")
    await raw.script_flush()
    second = await client.action.invoke("job", b"b")
    assert first.run_id != second.run_id
    assert (await raw.script_exists(SCRIPTS["action_invoke"].sha)) == [True]
    assert (await client.action.status(second.run_id)).status == RunStatus.PENDING


async def test_a_connection_the_server_closed_is_made_again(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await client.action.register("job")
    await client.action.invoke("job", b"a")
    lane = _scripts._SETTINGS[client.redis].lane
    assert lane is not None and lane._conn is not None and lane._conn._writer is not None
    host, port = lane._conn._writer.get_extra_info("sockname")[:2]
    await raw.client_kill(f"{host}:{port}")
    await asyncio.sleep(0.05)
    run = await client.action.invoke("job", b"b")  # no error: made again first
    assert (await client.action.status(run.run_id)).status == RunStatus.PENDING


async def test_a_cancelled_call_leaves_no_reply_behind(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await client.action.register("a")
    await client.action.register("b")
    await client.action.invoke("a", b"warm")  # the lane's connection is made
    # Every client's commands wait 300 ms (a script's TIME cannot time a busy loop: Valkey
    # answers the same TIME all through a script).
    await raw.execute_command("CLIENT", "PAUSE", 300, "ALL")
    waiting = asyncio.create_task(client.action.invoke("a", b"cancelled"))
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    # The reply of the cancelled call (a run of "a", if it ran) is never read as this one's.
    run = await client.action.invoke("b", b"next")
    assert run.run_id.startswith("b:")
    assert (await client.action.status(run.run_id)).status == RunStatus.PENDING


async def test_an_error_reply_is_typed_and_the_lane_stays_in_step(
    client: FloClient, raw: aioredis.Redis
) -> None:
    keys = action_keys(client.namespace, "job")
    await raw.set(keys.definition, b"not a hash")
    with pytest.raises(InternalServerError, match="WRONGTYPE"):
        await client.action.invoke("job", b"x")
    await raw.delete(keys.definition)
    with pytest.raises(NotFoundError):
        await client.action.invoke("job", b"x")
    await client.action.register("job")
    run = await client.action.invoke("job", b"x")
    assert run.run_id.startswith("job:")


async def test_a_led_call_refused_by_redis_leaves_the_lane_in_step(
    client: FloClient, raw: aioredis.Redis
) -> None:
    # A call after a hand-off is led by a TIME (module docstring): its answer is read
    # past, and a refusal of the call itself (NOSCRIPT here) is answered as ever.
    await client.action.register("job")
    keys = action_keys(client.namespace, "job")
    await raw.script_flush()
    client.action._handing.add(keys.tag)  # as after an invoke that was handed
    first = await client.action.invoke("job", b"a")
    client.action._handing.add(keys.tag)
    second = await client.action.invoke("job", b"b")
    third = await client.action.invoke("job", b"c")
    assert len({first.run_id, second.run_id, third.run_id}) == 3
    for run in (first, second, third):
        assert (await client.action.status(run.run_id)).status == RunStatus.PENDING
