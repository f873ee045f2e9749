"""Script calls on the client's lane (``flo_redis._wire.lane``): the same answers,
refusals and recoveries as through the connection pool."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from polling import eventually
from script_state import by_sha, calls_functions, forget_scripts, library_loaded

from flo_redis import FloClient, InternalServerError, NotFoundError, RunStatus
from flo_redis._wire.keys import action_keys
from flo_redis._wire.lane import closed_by_server
from flo_redis._wire.runner import SCRIPTS


@pytest.mark.parametrize("sha", [False, True], ids=["function", "by-sha"])
async def test_an_invoke_after_the_server_forgot_the_scripts_loads_them_again(
    client: FloClient, raw: aioredis.Redis, sha: bool
) -> None:
    if sha:
        by_sha(client)
    await client.action.register("job")
    first = await client.action.invoke("job", b"a")
    await forget_scripts(raw)
    second = await client.action.invoke("job", b"b")
    assert first.run_id != second.run_id
    if calls_functions(client):
        assert await library_loaded(raw)
    else:
        assert (await raw.script_exists(SCRIPTS["action_invoke"].sha)) == [True]
    assert (await client.action.status(second.run_id)).status == RunStatus.PENDING


async def test_a_connection_the_server_closed_is_made_again(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await client.action.register("job")
    await client.action.invoke("job", b"a")
    lane = client.session.runner.lane
    assert lane is not None and lane._conn is not None and lane._conn._writer is not None
    host, port = lane._conn._writer.get_extra_info("sockname")[:2]
    await raw.client_kill(f"{host}:{port}")
    conn = lane._conn
    await eventually(lambda: closed_by_server(conn), what="the kill seen by the lane")
    run = await client.action.invoke("job", b"b")  # no error: made again first
    assert (await client.action.status(run.run_id)).status == RunStatus.PENDING


@pytest.mark.slow
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
    await asyncio.sleep(0.05)  # within the pause: the call is sent, its reply held back
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
    # past, and a refusal of the call itself (function not found here) is answered as
    # ever.
    await client.action.register("job")
    keys = action_keys(client.namespace, "job")
    await forget_scripts(raw)
    # As after an invoke that was handed:
    client.session.runner.leading.add(("action_invoke", keys.tag))
    first = await client.action.invoke("job", b"a")
    client.session.runner.leading.add(("action_invoke", keys.tag))
    second = await client.action.invoke("job", b"b")
    third = await client.action.invoke("job", b"c")
    assert len({first.run_id, second.run_id, third.run_id}) == 3
    for run in (first, second, third):
        assert (await client.action.status(run.run_id)).status == RunStatus.PENDING


@pytest.mark.slow
async def test_calls_made_while_the_lane_is_busy_take_the_spare_lane(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await client.action.register("job")
    await client.action.invoke("job", b"warm")  # the lane's connection is made
    settings = client.session.runner
    assert settings.lane is not None and settings.spare is not None
    assert settings.spare._conn is None  # no call overlapped yet
    # Every client's commands wait a moment, so the three invokes are in flight at once:
    # the first on the lane, the second on the spare lane, the third through the pool.
    await raw.execute_command("CLIENT", "PAUSE", 200, "ALL")
    runs = await asyncio.gather(*(client.action.invoke("job", b"%d" % i) for i in range(3)))
    assert settings.spare._conn is not None
    assert len({run.run_id for run in runs}) == 3
    for run in runs:
        assert (await client.action.status(run.run_id)).status == RunStatus.PENDING
    # The spare lane's connection closed by the server is made again on its next call.
    assert settings.spare._conn._writer is not None
    host, port = settings.spare._conn._writer.get_extra_info("sockname")[:2]
    await raw.client_kill(f"{host}:{port}")
    spare = settings.spare._conn
    await eventually(lambda: closed_by_server(spare), what="the kill seen by the spare lane")
    await raw.execute_command("CLIENT", "PAUSE", 200, "ALL")
    again = await asyncio.gather(*(client.action.invoke("job", b"x") for _ in range(2)))
    for run in again:
        assert (await client.action.status(run.run_id)).status == RunStatus.PENDING


@pytest.mark.slow
async def test_calls_after_a_restart_cut_every_idle_connection_all_succeed(
    client: FloClient, raw: aioredis.Redis
) -> None:
    """What a restart does to a client (its idle connections closed by the server, its
    scripts forgotten): the next calls go through, none fails as "connection closed".
    A script the server forgot is sent whole through the pool, on a pooled connection
    that sat idle through the cut."""
    await client.action.register("job")
    await client.queue.enqueue("q", b"m")
    delivered = (await client.queue.dequeue("q", 1)).messages
    # Calls in flight at once leave connections idle in the pool beside the lanes.
    await raw.execute_command("CLIENT", "PAUSE", 100, "ALL")
    await asyncio.gather(*(client.action.invoke("job", b"%d" % i) for i in range(6)))
    await raw.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    await forget_scripts(raw)
    await asyncio.sleep(0.05)
    await client.queue.ack("q", [delivered[0].seq])
    run = await client.action.invoke("job", b"after")
    await client.queue.enqueue("q", b"after")
    assert (await client.action.status(run.run_id)).status == RunStatus.PENDING
    assert [m.payload for m in (await client.queue.peek("q", 10)).messages] == [b"after"]


@pytest.mark.parametrize(
    ("max_connections", "lane", "spare"), [(1, False, False), (3, True, False), (4, True, True)]
)
async def test_a_pool_keeps_two_connections_beside_its_lanes(
    redis_url: str, namespace: str, max_connections: int, lane: bool, spare: bool
) -> None:
    async with FloClient(redis_url, namespace=namespace, max_connections=max_connections) as c:
        settings = c.session.runner
        assert (settings.lane is not None, settings.spare is not None) == (lane, spare)
        await c.action.register("job")
        runs = await asyncio.gather(*(c.action.invoke("job", b"x") for _ in range(20)))
        assert len({run.run_id for run in runs}) == 20
