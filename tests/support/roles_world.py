"""ACL users of each role (flo_redis.ops.roles) on a test server, a namespace populated with
one of everything (a "world"), and a snapshot of a namespace's keys, for the role tests:
what a refused call wrote is the difference of two snapshots."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from datetime import timedelta

import redis

from flo_redis import (
    ActionRegisterOptions,
    FloClient,
    StreamGroupJoinOptions,
    StreamGroupNackOptions,
    StreamGroupReadOptions,
    WorkerAwaitOptions,
    WorkerCompleteOptions,
    WorkerFailOptions,
)
from flo_redis._wire.keys import namespaces_key
from flo_redis.ops.roles import rules
from flo_redis.queue.operations import DequeueOptions, NackOptions
from flo_redis.testing import RedisServer


def role_url(server: RedisServer, role: str, namespace: str | None = None) -> str:
    """A new ACL user of ``role`` (over ``namespace`` only, when given): its URL."""
    name = f"{role}-{uuid.uuid4().hex[:8]}"
    with redis.Redis.from_url(server.url) as admin:
        admin.execute_command("ACL", "SETUSER", name, "reset", "on", ">pw", *rules(role, namespace))
    return server.url.replace("redis://", f"redis://{name}:pw@")


def user_conn(url: str) -> redis.Redis:
    """A plain redis-py client of the user ``url`` names (raw commands)."""
    return redis.Redis.from_url(url)


@dataclass(frozen=True)
class World:
    """One of everything in ``namespace``: an action ``job`` with a waiting, a failed, a
    completed and a running run, a schedule, a registered worker ``w1``, a stream
    ``orders`` with a group ``g`` holding a delivery and a dead letter, a queue ``q``
    with a message waiting, one out and one dead, and a slot held. ``owner`` holds the
    running run, the deliveries and the slot (its client is closed: it looks gone)."""

    namespace: str
    owner: str
    pending: str
    failed: str
    completed: str
    running: str
    running_token: int
    pending_entry: str
    dead_entry: str
    dead_seq: int
    out_seq: int


async def build_world(url: str, namespace: str) -> World:
    async with FloClient(url, namespace=namespace) as c:
        await c.action.register("job", options=ActionRegisterOptions(max_retries=0))
        await c.action.schedule("job", timedelta(hours=1), name="hourly")
        await c.worker.register("w1", ["job"])
        now = WorkerAwaitOptions(block_ms=0)

        async def claimed() -> tuple[str, int]:
            task = (await c.worker.await_task("w1", ["job"], now)).task
            assert task is not None and task.token is not None
            return task.task_id, task.token

        await c.action.invoke("job", b"failed")
        failed, token = await claimed()
        await c.worker.fail("w1", "job", failed, "boom", WorkerFailOptions(token=token))
        await c.action.invoke("job", b"completed")
        completed, token = await claimed()
        await c.worker.complete("w1", "job", completed, b"ok", WorkerCompleteOptions(token=token))
        await c.action.invoke("job", b"running")
        running, running_token = await claimed()
        pending = (await c.action.invoke("job", b"pending")).run_id

        for i in range(3):
            await c.stream.append("orders", b"o%d" % i)
        await c.stream.group_join("orders", "g", "c1", StreamGroupJoinOptions(max_deliver=1))
        read = await c.stream.group_read("orders", "g", "c1", StreamGroupReadOptions(count=2))
        first, second = (r.id for r in read.records)
        await c.stream.group_nack("orders", "g", [second], StreamGroupNackOptions())

        for i in range(3):
            await c.queue.enqueue("q", b"m%d" % i)
        dead = (await c.queue.dequeue("q", 1, DequeueOptions(max_deliveries=1))).messages[0]
        await c.queue.nack("q", [dead.seq], NackOptions())
        out = (await c.queue.dequeue("q", 1)).messages[0]
        slot = await c.slots.acquire("job", capacity=2)
        assert slot is not None
        return World(
            namespace,
            c.owner_id,
            pending,
            failed,
            completed,
            running,
            running_token,
            first.to_redis(),
            second.to_redis(),
            dead.seq,
            out.seq,
        )


def snapshot(server: RedisServer, namespace: str) -> dict[bytes, bytes | None]:
    """Every key of ``namespace`` with its serialized value, and the registry of
    namespaces: equal snapshots mean nothing of the namespace was written between."""
    with redis.Redis.from_url(server.url) as admin:
        names = [
            k
            for pattern in (f"flo:*{{{namespace}:*", f"flo:ns:{{{namespace}}}:*")
            for k in admin.scan_iter(match=pattern, count=1000)
        ]
        names.append(namespaces_key().encode())
        return {k: admin.dump(k) for k in sorted(set(names))}


async def settle() -> None:
    """Let messages published by a call reach their listeners."""
    await asyncio.sleep(0)
