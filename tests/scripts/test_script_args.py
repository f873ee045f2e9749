"""Every script refuses a malformed argument with a typed refusal, never a Lua error.

A workload through the public API calls every script once; each call (its KEYS and
ARGV) is recorded on its way to Redis. Each recorded call is then sent again raw, by
``FCALL`` (the Functions library) and by ``EVALSHA``, with one argument at a time
replaced by a malformed value (``nan``, ``inf``, ``abc``, ``-1``, ``1e300``, empty,
msgpack of the wrong shape ...). Whatever the value, the script answers a status of
``lua/lib/status.lua``, never an error. An argument the script reads as a number, a flag,
a choice, a stream id or msgpack (anything but free text, :data:`TEXT`) answers
``{BAD_ARG, i}`` for every value that is not what its header takes, and the keyspace of
the namespace is what it was: refused before anything was written.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import msgpack
import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError
from redis_server import own_server_url

from flo_redis import (
    ActionInvokeOptions,
    ActionQuarantine,
    ActionRegisterOptions,
    BatchOptions,
    Callback,
    DequeueOptions,
    FloClient,
    FloError,
    RunState,
    StreamGroupReadOptions,
    WorkerAwaitOptions,
)
from flo_redis._session.reclaim import reclaim_owners
from flo_redis._wire.gateway import (
    ACTION_QUARANTINE_REPLAY,
    ALL,
    DASHBOARD_LOGIN,
    DASHBOARD_SESSION_CLOSE,
    DASHBOARD_SESSION_TOUCH,
    GROUP_QUARANTINE,
    GROUP_QUARANTINE_REPLAY,
    QUEUE_QUARANTINE_REPLAY,
    SCHEDULE_FIRE,
    SCHEDULE_QUARANTINE,
    WORKER_QUARANTINE_REPLAY,
)
from flo_redis._wire.keys import (
    action_keys,
    dashboard_keys,
    namespace_keys,
    queue_keys,
    run_id_prefix,
    stream_keys,
)
from flo_redis._wire.runner import LIBRARY, SCRIPTS, ScriptRunner
from flo_redis._wire.status import Status
from flo_redis.actions.batches import forward_due_batches
from flo_redis.actions.graph import deps_request, suspend
from flo_redis.actions.held import held_runs
from flo_redis.worker.progress import report_progress

pytestmark = pytest.mark.slow  # every script, argument and bad value: minutes

# Arguments any text is: names, ids, payloads, messages. A malformed value here must still
# be answered by a status (a name that does not exist is NOT_FOUND), never an error.
TEXT = {
    "worker_id", "run_id", "poll_id", "received", "id_prefix", "input", "payload",
    "idem_key", "trace", "message", "traceback", "result", "outcome", "value", "expected",
    "consumer", "name", "after_id", "expected_owner", "inputs", "owner",
    "worker_list.after",  # a worker id, where stream_trim's `after` is a stream id
    "attempt_id",
    "flow_key",  # a tenant, a customer: any text but NUL (refused BAD_ARG, with a length)
    "record", "why",  # a record set aside (opaque bytes), and why it was
    "text",  # the piece of an error message a search looks for
    "batch", "parent",  # a batch's id (any text but NUL, refused BAD_ARG with a length)
    "graph_list.after",  # a page's cursor: the end of the last entry, any text
}  # fmt: skip
# An argument may be left out: '' is its "not given" (the header says so).
MAY_BE_EMPTY = {
    "labels", "token", "upto", "after_score", "ack_timeout_ms", "max_deliver", "ids",
    "after", "headers", "heartbeat_timeout_ms", "remove_after_ms", "deps",
}  # fmt: skip

# Not what any numeric, flag, choice, stream-id or msgpack argument takes.
MALFORMED: list[str | bytes] = [
    "nan", "inf", "-inf", "abc", "1e300", "1.5", "0.5", "99999999999999999999999",
    "1-2-3", " ", b"\xff\xfe", msgpack.packb(float("nan")), msgpack.packb([[1], {"a": 2}]),
]  # fmt: skip
# Malformed for some arguments only: '' (left out), a negative (a delta), a huge int.
MAYBE: list[str | bytes] = ["", "-1", str(2**53 + 2), msgpack.packb({"x": [1]})]
# Arguments that are stream ids: digits alone are one ('<ms>', sequence 0).
STREAM_IDS = {"start", "stop", "after", "bound", "entry_id"}


@dataclass(frozen=True)
class Call:
    script: str
    keys: list[str]
    args: list[Any]


# Every key of the namespace and its DUMP, in one round trip (the sweep takes one look
# after each of its thousands of calls).
_KEYSPACE = """
local out, cursor = {}, '0'
repeat
  local page = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
  cursor = page[1]
  for _, key in ipairs(page[2]) do
    out[#out + 1] = key
    out[#out + 1] = redis.call('DUMP', key)
  end
until cursor == '0'
return out
"""


async def keyspace(raw: aioredis.Redis, namespace: str) -> dict[bytes, Any]:
    flat = await raw.eval(_KEYSPACE, 0, f"*{namespace}*")
    return dict(sorted(zip(flat[::2], flat[1::2], strict=True)))


redis_url = own_server_url()  # the sweep scans the keyspace after each of its calls


@pytest.fixture
async def recorded(
    client: FloClient, raw: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[dict[str, Call]]:
    """The first call of every script, made by a workload through the public API."""
    calls: dict[str, Call] = {}
    run = ScriptRunner.run

    async def recording(runner: Any, lua: Any, keys: Any, args: Any, *rest: Any) -> Any:
        calls.setdefault(lua.name, Call(lua.name, list(keys), list(args)))
        return await run(runner, lua, keys, args, *rest)

    monkeypatch.setattr(ScriptRunner, "run", recording)
    await _workload(client)
    monkeypatch.undo()
    yield calls


async def _workload(c: FloClient) -> None:
    act = c.action
    await act.register("job", options=ActionRegisterOptions(max_concurrency=5))
    await c.worker.register("w1", ["job"])
    await act.invoke("job", b"x", ActionInvokeOptions(labels={"a": 1}))
    await act.invoke_many("job", [b"a", b"b", b"c"])
    await c.worker.heartbeat("w1", 0)
    runs = await c.worker.await_tasks("w1", ["job"], 4, WorkerAwaitOptions(block_ms=0))
    first, second, third, *_ = runs
    await c.worker.touch("w1", "job", first.run_id)
    await report_progress(c.session, "w1", "job", first.run_id, first.token, b"1")
    await c.worker.complete("w1", "job", first.run_id, b"r")
    await c.worker.fail("w1", "job", second.run_id, "boom")
    await c.worker.release("w1", "job", third.run_id, third.token)
    from flo_redis.actions import CompleteItem

    await c.worker.complete_many("w1", "job", [CompleteItem("job:999", b"r", token=5)])
    await c.worker.accept("w1", "job", [(first.run_id, first.token)])
    await c.worker.tally("w1", 1, 0, 0)
    await act.runs("job", RunState.PENDING)
    await act.counts("job")
    await act.find("job", "boom")
    await held_runs(c.session, (await c.worker.list()).workers)
    await act.history("job", since="5m")
    await act.flow_keys("job")
    await act.reap("job")
    await reclaim_owners(c.session, "job", ["someone"])
    await act.requeue_failed("job")
    await act.cancel((await act.invoke("job", b"x")).run_id)
    done = await act.runs("job", RunState.FAILED)
    await quiet(act.requeue(done.runs[0].run_id))
    await act.purge("job", RunState.FAILED)
    schedule = await act.schedule("job", timedelta(hours=1), name="hourly")
    await act.schedules("job")
    await act.get_schedule("job", "hourly")
    await act.pause_schedule("job", "hourly")
    await act.resume_schedule("job", "hourly")
    await act.trigger_schedule("job", "hourly")
    keys = action_keys(c.namespace, "job")
    due = schedule.next_due_ms
    await SCHEDULE_FIRE(c.session, keys, [run_id_prefix("job"), "hourly", due, due + 1])
    await act.unschedule("job", "hourly")
    slot = await c.slots.acquire("job")
    assert slot is not None
    await quiet(c.slots.reclaim("job", slot.index, c.session.owner_id, grace_ms=0))
    await c.slots.reclaim_gone("job")
    await c.slots.release(slot)
    await c.worker.list()
    await c.worker.drain("w1")
    await c.worker.deregister("w1")
    await c.worker.configure(heartbeat_timeout_ms=1000, remove_after_ms=2000)
    # streams
    await c.stream.create("s")
    await c.stream.append("s", b"p", _headers())
    await c.stream.append("s", b"q")
    await c.stream.read("s")
    await c.stream.info("s")
    await c.stream.group_join("s", "g", "c1")
    read = await c.stream.group_read("s", "g", "c1", StreamGroupReadOptions(count=1))
    await c.stream.group_pending("s", "g")
    await c.stream.group_ack("s", "g", [read.records[0].id])
    await c.stream.group_ack_many("s", "g", [(read.records[0].id, None)])
    await c.stream.group_read("s", "g", "c1", StreamGroupReadOptions(count=1))
    await c.stream.group_nack("s", "g", [(await c.stream.read("s")).records[1].id])
    await c.stream.group_claim("s", "g", "c1", 0, (await c.stream.read("s")).records[0].id, 5)
    await c.stream.reclaim_gone_owners("s", "g")
    await c.stream.replay_dead_letters("s", "g")
    await c.stream.group_leave("s", "g", "c1")
    await c.stream.trim("s", _trim())
    # queues
    await c.queue.enqueue("q", b"m")
    await c.queue.enqueue("q", b"n")
    got = await c.queue.dequeue("q", 2, DequeueOptions(block_ms=0))
    await c.queue.peek("q", 1)
    await c.queue.ack("q", [got.messages[0].seq])
    await c.queue.nack("q", [got.messages[1].seq])
    await c.queue.dlq_list("q")
    await quiet(c.queue.dlq_requeue("q", [got.messages[1].seq]))
    await c.queue.reclaim_gone_owners("q")
    await act.register("gone")
    await act.delete("gone")
    await _graph_workload(c)
    # the quarantines (flo_redis/quarantine.py): a record set aside, put back, deleted
    await SCHEDULE_QUARANTINE(c.session, keys, ["hourly", b"x", "why"])
    raw = c.redis
    await raw.hset(keys.runs, "job:1000", b"\x80\x01")
    await raw.zadd(keys.pending, {"job:1000": 0})
    await c.worker.register("w2", ["job"])
    await c.worker.await_tasks("w2", ["job"], 1, WorkerAwaitOptions(block_ms=0))
    [aside] = (await c.quarantine.list(ActionQuarantine("job"))).records
    await quiet(c.quarantine.replay(ActionQuarantine("job"), aside.id))
    await ACTION_QUARANTINE_REPLAY(c.session, keys, [aside.id, b"\x80", 0])
    await QUEUE_QUARANTINE_REPLAY(c.session, queue_keys(c.namespace, "q"), ["1-0", b"\x80"])
    await WORKER_QUARANTINE_REPLAY(c.session, namespace_keys(c.namespace), ["1-0", b"\x80"])
    part = stream_keys(c.namespace, "s")
    pair = (part, part.group("g"))
    await GROUP_QUARANTINE(c.session, pair, ["g", msgpack.packb(["1-0", 1, "why"])])
    await GROUP_QUARANTINE_REPLAY(c.session, pair, ["1-0", ""])
    await c.quarantine.delete(ActionQuarantine("job"), [aside.id])
    # the dashboard's sessions (flo_redis/dashboard/guard.py)
    dash = dashboard_keys(c.namespace, "127.0.0.1", "ab" * 32)
    await DASHBOARD_LOGIN(
        c.session, dash, ["1", "a1", "900000", "10", "100", "1800000", "28800000"]
    )
    await DASHBOARD_SESSION_TOUCH(c.session, dash, ["1800000", "28800000"])
    await DASHBOARD_SESSION_CLOSE(c.session, dash)


async def _graph_workload(c: FloClient) -> None:
    """Dependencies, a continuation and a batch: every graph and batch script once."""
    act = c.action
    await act.register("step")
    await c.worker.register("w3", ["step"])
    parent = (await act.invoke("step", b"p")).run_id
    task = (await c.worker.await_task("w3", ["step"], WorkerAwaitOptions(block_ms=0))).task
    assert task is not None
    await c.worker.complete("w3", "step", task.task_id, b"done")
    child = (await act.invoke("step", b"c", ActionInvokeOptions(depends_on=[parent]))).run_id
    await act.invoke_many("step", [b"m"], ActionInvokeOptions(depends_on=[parent, child]))
    await act.dependencies(child)
    held = (await c.worker.await_task("w3", ["step"], WorkerAwaitOptions(block_ms=0))).task
    assert held is not None
    await suspend(c.session, action_keys(c.namespace, "step"), held.task_id, held.token,
                  "w3", deps_request(["step:99999"], None))  # fmt: skip
    batch = await act.open_batch(BatchOptions(on_complete=Callback("step")))
    await act.open_batch(BatchOptions(parent=batch))  # its parent told: batch_take, _done
    await act.invoke("step", b"b", ActionInvokeOptions(batch=batch))
    await act.seal_batch(batch)
    await forward_due_batches(c.session, c.namespace)


async def quiet(call: Any) -> None:
    """Make ``call``; a refusal is fine: the script was called, which is what counts."""
    with contextlib.suppress(FloError):
        await call


def _headers() -> Any:
    from flo_redis import StreamAppendOptions

    return StreamAppendOptions(headers={"h": "1"})


def _trim() -> Any:
    from flo_redis import StreamTrimOptions

    return StreamTrimOptions(max_len=1)


async def test_the_workload_calls_every_script(recorded: dict[str, Call]) -> None:
    assert set(recorded) == set(ALL)


@pytest.mark.timeout(600)  # every script, argument and bad value: 1.5 min here, more loaded
@pytest.mark.parametrize("mode", ["FCALL", "EVALSHA"])
async def test_a_malformed_argument_is_refused_typed_and_writes_nothing(
    recorded: dict[str, Call], raw: aioredis.Redis, namespace: str, mode: str
) -> None:
    problems: list[str] = []
    if mode == "FCALL":  # loaded by the workload, unless its client calls by SHA
        with contextlib.suppress(ResponseError):  # loaded already
            await raw.function_load(LIBRARY.source)
    before = await keyspace(raw, namespace)
    for name in sorted(recorded):
        call = recorded[name]
        script = SCRIPTS[name]
        if mode == "EVALSHA":
            await raw.script_load(script.source)
        for index, arg_name in enumerate(script.argv, 1):
            checked = arg_name not in TEXT and f"{name}.{arg_name}" not in TEXT
            values = MALFORMED + MAYBE
            for value in values:
                args = list(call.args)
                if index > len(args):
                    continue  # a variadic tail left empty
                args[index - 1] = value
                try:
                    reply = await _send(raw, mode, name, call.keys, args)
                except ResponseError as exc:
                    problems.append(f"{name} ARGV[{index}] {arg_name}={value!r}: {exc}")
                    before = await keyspace(raw, namespace)
                    continue
                status = reply[0] if isinstance(reply, list) and reply else None
                if status not in {s.value for s in Status}:
                    problems.append(f"{name} ARGV[{index}] {arg_name}={value!r}: {reply!r}")
                    continue
                after = await keyspace(raw, namespace)
                if status == Status.BAD_ARG:
                    if reply[1] != index:
                        problems.append(f"{name} ARGV[{index}]={value!r} refused as {reply}")
                    if after != before:
                        problems.append(f"{name} ARGV[{index}]={value!r}: refused after writing")
                elif checked and (value in MALFORMED or value not in _may_take(arg_name)):
                    problems.append(
                        f"{name} ARGV[{index}] {arg_name}={value!r} taken: {Status(status).name}"
                    )
                before = after
    assert not problems, "\n".join(problems)


def _may_take(arg_name: str) -> Sequence[str | bytes]:
    """The values of MAYBE an argument (not free text) may take: '' where it may be left
    out, a negative where it is a delta."""
    taken: list[str | bytes] = []
    if arg_name in MAY_BE_EMPTY:
        taken.append("")
    if arg_name.endswith("_delta"):
        taken.append("-1")
    if arg_name in STREAM_IDS:
        taken.append(str(2**53 + 2))
    if arg_name in {"labels", "headers", "settings", "rec", "record"}:
        taken.append(msgpack.packb({"x": [1]}))  # a map of their kind, not refused
    return taken


async def _send(raw: aioredis.Redis, mode: str, name: str, keys: list[str], args: list[Any]) -> Any:
    script = SCRIPTS[name]
    if mode == "FCALL":
        return await raw.fcall(script.function, len(keys), *keys, *args)
    return await raw.evalsha(script.sha, len(keys), *keys, *args)
