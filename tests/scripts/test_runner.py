"""Each client owns its script runner (``flo_redis._wire.runner``): its retry policy,
lanes and Functions state are its own, and closing one client leaves another as it was."""

from __future__ import annotations

import redis.asyncio as aioredis

from flo_redis import FloClient, RetryPolicy, RunStatus
from flo_redis._wire.functions import functions_wanted
from flo_redis._wire.keys import action_keys
from flo_redis._wire.library import SCRIPTS
from flo_redis._wire.runner import ScriptRunner
from flo_redis.sync import SyncFloClient


async def test_two_clients_have_runners_of_their_own(redis_url: str, namespace: str) -> None:
    quick = RetryPolicy(max_attempts=1)
    async with (
        FloClient(redis_url, namespace=namespace, retry=quick) as a,
        FloClient(redis_url, namespace=namespace, debug=True) as b,
    ):
        ra, rb = a.session.runner, b.session.runner
        assert ra is not rb
        assert ra.policy == quick and rb.policy != quick
        assert ra.lane is not None and rb.lane is None  # a debug client logs, by the pool
        if functions_wanted():  # each client checks the library for itself
            assert ra.functions is not None and rb.functions is not None
            assert ra.functions is not rb.functions
        else:  # FLO_REDIS_SCRIPTS=evalsha: both go by SHA
            assert ra.functions is None and rb.functions is None
        await a.action.register("job")
        keys = action_keys(namespace, "job")
        ra.leading.add(("action_invoke", keys.tag))
        assert rb.leading == set()


async def test_closing_one_client_leaves_the_other_working(redis_url: str, namespace: str) -> None:
    async with FloClient(redis_url, namespace=namespace) as kept:
        await kept.action.register("job")
        other = FloClient(redis_url, namespace=namespace)
        await other.connect()
        await other.action.invoke("job", b"x")
        await other.close()
        runner = kept.session.runner
        assert runner.lane is not None and not runner.lane.closed
        run = await kept.action.invoke("job", b"y")
        assert (await kept.action.status(run.run_id)).status == RunStatus.PENDING


async def test_two_runners_on_one_connection_keep_their_own_settings(
    redis_url: str, namespace: str, raw: aioredis.Redis
) -> None:
    """Settings belong to the runner, not to the connection it sends on."""
    conn = aioredis.Redis.from_url(redis_url, max_connections=8)
    try:
        first = ScriptRunner(conn, retry=RetryPolicy(max_attempts=1))
        second = ScriptRunner(conn, debug=True)
        assert first.policy != second.policy
        assert first.lane is not None and second.lane is None
        first.release()
        assert first.lane.closed
        keys = action_keys(namespace, "job")
        script = SCRIPTS["action_counts"]
        reply = await second.run(script, [getattr(keys, k) for k in script.keys], [])
        assert isinstance(reply, list)
        third = ScriptRunner(conn)
        assert third.lane is not None and not third.lane.closed
        third.release()
    finally:
        await conn.aclose()


def test_each_blocking_client_owns_its_runner(redis_url: str, namespace: str) -> None:
    with (
        SyncFloClient(redis_url, namespace=namespace) as a,
        SyncFloClient(redis_url, namespace=namespace) as b,
    ):
        assert a.runner is not b.runner
        assert a.runner.conn is a.redis and b.runner.conn is b.redis
