"""A completed run's input, kept with ``keep_inputs=True`` for as long as the run is
kept, and deleted with it: by retention (as runs complete and by the reaper), by a purge
and by the action's delete. Without the setting, an input is deleted as its run
completes. Whatever the history, the inputs hash holds exactly the runs that need one."""

from __future__ import annotations

import random

import pytest
import redis.asyncio as aioredis
from polling import eventually

from flo_redis import (
    ActionRegisterOptions,
    FloClient,
    RunStatus,
    TaskAssignment,
    WorkerAwaitOptions,
    WorkerFailOptions,
)
from flo_redis._wire.codec import pack
from flo_redis._wire.gateway import ACTION_REGISTER
from flo_redis._wire.keys import ActionKeys, action_keys
from flo_redis.actions import CompleteItem
from flo_redis.actions.finding import NONE_STORED, NOT_KEPT, NOT_KEPT_THEN
from flo_redis.errors import BadRequestError, FloError, ValidationError
from flo_redis.quarantine import ActionQuarantine

NOW = WorkerAwaitOptions(block_ms=0)
KEEP = ActionRegisterOptions(keep_inputs=True, max_retries=2)


async def keys_of(raw: aioredis.Redis, key: str) -> set[str]:
    return {k.decode() for k in await raw.hkeys(key)}


async def members(raw: aioredis.Redis, *sets: str) -> set[str]:
    found: set[str] = set()
    for key in sets:
        found |= {m.decode() for m in await raw.zrange(key, 0, -1)}
    return found


async def needing_input(raw: aioredis.Redis, keys: ActionKeys, completed: bool) -> set[str]:
    """The runs that must have an input: waiting, running or failed, and the completed
    ones when ``completed``."""
    sets = [keys.pending, keys.delayed, keys.leases, keys.failed]
    return await members(raw, *sets, *([keys.done] if completed else []))


async def complete_next(client: FloClient, n: int = 1, action: str = "job") -> list[str]:
    """Claim and complete ``n`` runs, one call each; their ids."""
    done = []
    for claimed in await client.worker.await_tasks("w", [action], n, NOW):
        await client.worker.complete("w", action, claimed.run_id, b"out " + claimed.payload)
        done.append(claimed.run_id)
    return done


async def job(client: FloClient, opts: ActionRegisterOptions | None = None) -> ActionKeys:
    """Action 'job' registered with ``opts``, served by worker 'w'; its keys."""
    await client.action.register("job", options=opts)
    await client.worker.register("w", ["job"])
    return action_keys(client.namespace, "job")


@pytest.fixture
async def kept(client: FloClient) -> FloClient:
    await job(client, KEEP)
    return client


async def test_without_the_setting_an_input_goes_when_its_run_completes(
    client: FloClient, raw: aioredis.Redis
) -> None:
    keys = await job(client)
    assert await raw.hexists(keys.definition, "keep_inputs") == 0  # nothing more stored
    run = await client.action.invoke("job", b"in")
    [run_id] = await complete_next(client)
    assert run_id == run.run_id
    assert await raw.hlen(keys.inputs) == 0
    details = await client.action.details(run_id)
    assert (details.status.status, details.input) == (RunStatus.COMPLETED, None)
    assert details.input_missing == NOT_KEPT
    assert "keep_inputs=True (ActionRegisterOptions)" in NOT_KEPT


async def test_with_the_setting_a_completed_run_keeps_its_input(
    kept: FloClient, raw: aioredis.Redis
) -> None:
    keys = action_keys(kept.namespace, "job")
    assert await raw.hget(keys.definition, "keep_inputs") == b"1"
    single = await kept.action.invoke("job", b'{"user": "ann"}')
    await complete_next(kept)
    # The batched path (run_complete_many) keeps them too.
    batch = [r.run_id for r in await kept.action.invoke_many("job", [b"a", b"b", b"c"])]
    claimed = await kept.worker.await_tasks("w", ["job"], 3, NOW)
    answers = await kept.worker.complete_many(
        "w", "job", [CompleteItem(c.run_id, b"done", token=c.token) for c in claimed]
    )
    assert answers == [None, None, None]

    details = await kept.action.details(single.run_id)
    assert details.status.status == RunStatus.COMPLETED
    assert (details.input, details.input_missing) == (b'{"user": "ann"}', None)
    assert details.status.output == b'out {"user": "ann"}'
    assert [(await kept.action.details(r)).input for r in batch] == [b"a", b"b", b"c"]
    assert await keys_of(raw, keys.inputs) == {single.run_id, *batch}


async def test_a_batch_of_completes_reads_the_setting_once(
    kept: FloClient, raw: aioredis.Redis
) -> None:
    await kept.action.invoke_many("job", [b"x"] * 51)
    claimed = await kept.worker.await_tasks("w", ["job"], 51, NOW)

    async def hgets_of_batch(batch: list[TaskAssignment]) -> int:
        """The HGETs Redis ran while ``batch`` was completed in one call."""

        async def calls() -> int:
            stats = await raw.info("commandstats")
            return int(stats.get("cmdstat_hget", {}).get("calls", 0))

        before = await calls()
        answers = await kept.worker.complete_many(
            "w", "job", [CompleteItem(c.run_id, b"", token=c.token) for c in batch]
        )
        assert answers == [None] * len(batch)
        return await calls() - before

    # The setting is one HGET per batch script call, whatever the batch holds.
    assert await hgets_of_batch(claimed[:50]) == await hgets_of_batch(claimed[50:])
    assert await raw.hlen(action_keys(kept.namespace, "job").inputs) == 51


async def test_a_failed_run_keeps_its_input_either_way(client: FloClient) -> None:
    for name, opts in (("plain", ActionRegisterOptions()), ("keeping", KEEP)):
        await client.action.register(name, options=opts)
        await client.worker.register("w", [name])
        run = await client.action.invoke(name, b"bad input")
        await client.worker.await_tasks("w", [name], 1, NOW)
        await client.worker.fail("w", name, run.run_id, "no", WorkerFailOptions(retry=False))
        details = await client.action.details(run.run_id)
        assert (details.status.status, details.input) == (RunStatus.FAILED, b"bad input")


async def test_retention_by_count_takes_kept_inputs_with_their_runs(
    client: FloClient, raw: aioredis.Redis
) -> None:
    opts = ActionRegisterOptions(keep_inputs=True, retention_count=3)
    keys = await job(client, opts)
    await client.action.invoke_many("job", [f"in {i}".encode() for i in range(10)])
    done = await complete_next(client, 10)
    # Each complete trims what is past the count: the last three runs are left, each with
    # its input.
    assert await members(raw, keys.done) == set(done[-3:])
    assert await keys_of(raw, keys.inputs) == set(done[-3:])
    assert await keys_of(raw, keys.runs) == set(done[-3:])
    assert (await client.action.details(done[-1])).input == b"in 9"


async def test_retention_by_age_in_the_reaper_takes_kept_inputs(
    client: FloClient, raw: aioredis.Redis
) -> None:
    opts = ActionRegisterOptions(keep_inputs=True, retention_ms=50)
    keys = await job(client, opts)
    await client.action.invoke_many("job", [b"a", b"b"])
    done = await complete_next(client, 2)
    assert await keys_of(raw, keys.inputs) == set(done)
    waiting = await client.action.invoke("job", b"waits")

    async def reaped() -> set[str]:
        await client.action.reap("job")
        return await keys_of(raw, keys.inputs)

    # Their age passes 50 ms (a wait on the clock: retention is by age); the reaper's
    # trim takes the runs and their inputs, and leaves the waiting run's.
    await eventually(reaped, lambda left: left == {waiting.run_id}, what="inputs trimmed")
    assert await members(raw, keys.done) == set()


async def test_a_purge_of_completed_runs_takes_their_inputs(
    kept: FloClient, raw: aioredis.Redis
) -> None:
    keys = action_keys(kept.namespace, "job")
    await kept.action.invoke_many("job", [b"a", b"b", b"c"])
    await complete_next(kept, 3)
    waiting = await kept.action.invoke("job", b"waits")
    purged = await kept.action.purge("job", "completed")
    assert purged.count == 3
    assert await keys_of(raw, keys.inputs) == {waiting.run_id}


async def test_deleting_the_action_takes_every_input(kept: FloClient, raw: aioredis.Redis) -> None:
    keys = action_keys(kept.namespace, "job")
    await kept.action.invoke_many("job", [b"a", b"b"])
    await complete_next(kept, 1)
    assert await raw.hlen(keys.inputs) == 2
    await kept.action.delete("job")
    assert await raw.exists(keys.inputs, keys.runs, keys.done) == 0


async def test_a_run_completed_before_the_setting_says_so(
    client: FloClient, raw: aioredis.Redis
) -> None:
    await client.action.register("job")
    await client.worker.register("w", ["job"])
    await client.action.invoke("job", b"early")
    [early] = await complete_next(client)
    await client.action.register("job", options=KEEP)
    await client.action.invoke("job", b"late")
    [late] = await complete_next(client)
    details = await client.action.details(early)
    assert (details.input, details.input_missing) == (None, NOT_KEPT_THEN)
    assert (await client.action.details(late)).input == b"late"
    # Registered again without it: runs that complete from then on are not kept; the
    # kept one stays until retention takes its run.
    await client.action.register("job")
    assert await raw.hexists(action_keys(client.namespace, "job").definition, "keep_inputs") == 0
    await client.action.invoke("job", b"later")
    [later] = await complete_next(client)
    assert (await client.action.details(later)).input_missing == NOT_KEPT
    assert (await client.action.details(late)).input == b"late"


async def test_a_run_without_its_input_that_is_not_completed_says_none_is_stored(
    kept: FloClient, raw: aioredis.Redis
) -> None:
    run = await kept.action.invoke("job", b"x")
    await raw.hdel(action_keys(kept.namespace, "job").inputs, run.run_id)
    assert (await kept.action.details(run.run_id)).input_missing == NONE_STORED


@pytest.mark.parametrize("stored", ["yes", "2", "-1", "nan", "0.5", ""])
async def test_a_stored_setting_that_does_not_parse_deletes_as_the_default(
    kept: FloClient, raw: aioredis.Redis, stored: str
) -> None:
    keys = action_keys(kept.namespace, "job")
    await raw.hset(keys.definition, "keep_inputs", stored)
    await kept.action.invoke("job", b"x")
    [run_id] = await complete_next(kept)
    assert await raw.hlen(keys.inputs) == 0
    assert (await kept.action.details(run_id)).input_missing == NOT_KEPT


@pytest.mark.parametrize("value", [2, -1, "yes", 0.5])
async def test_the_register_script_refuses_a_setting_out_of_range(
    client: FloClient, raw: aioredis.Redis, value: object
) -> None:
    keys = action_keys(client.namespace, "job")
    settings = {"timeout_ms": 1000, "max_retries": 1, "keep_inputs": value}
    with pytest.raises(BadRequestError, match="settings"):
        await ACTION_REGISTER(client.session, keys, [pack(settings)])
    assert await raw.exists(keys.definition) == 0
    for fine in (0, 1, "1"):
        settings["keep_inputs"] = fine
        await ACTION_REGISTER(client.session, keys, [pack(settings)])


async def test_the_option_must_be_a_bool(client: FloClient, raw: aioredis.Redis) -> None:
    assert ActionRegisterOptions().keep_inputs is False
    with pytest.raises(ValueError, match=r"ActionRegisterOptions\.keep_inputs must be a bool"):
        ActionRegisterOptions(keep_inputs=1)  # type: ignore[arg-type]
    opts = ActionRegisterOptions()
    opts.keep_inputs = "yes"  # type: ignore[assignment]
    with pytest.raises(ValidationError, match=r"keep_inputs must be a bool"):
        await client.action.register("job", options=opts)
    assert await raw.exists(action_keys(client.namespace, "job").definition) == 0


@pytest.mark.parametrize("keep", [True, False])
async def test_a_completed_run_put_back_from_the_quarantine_gets_only_a_kept_input(
    client: FloClient, raw: aioredis.Redis, keep: bool
) -> None:
    keys = await job(client, ActionRegisterOptions(keep_inputs=keep))
    run = await client.action.invoke("job", b"in")
    [claimed] = await client.worker.await_tasks("w", ["job"], 1, NOW)
    await client.worker.complete("w", "job", run.run_id, b"out")
    good = await raw.hget(keys.runs, run.run_id)
    await raw.hset(keys.runs, run.run_id, b"\xc1 not msgpack")
    # A resend of the complete finds the record that does not decode: it is set aside.
    [answer] = await client.worker.complete_many(
        "w", "job", [CompleteItem(run.run_id, b"out", token=claimed.token)]
    )
    assert isinstance(answer, FloError)
    [aside] = (await client.quarantine.list(ActionQuarantine("job"))).records
    assert aside.payload == (b"in" if keep else b"")
    await client.quarantine.replay(ActionQuarantine("job"), aside.id, good)
    details = await client.action.details(run.run_id)
    assert (details.status.status, details.status.output) == (RunStatus.COMPLETED, b"out")
    assert details.input == (b"in" if keep else None)
    assert await keys_of(raw, keys.inputs) == ({run.run_id} if keep else set())


@pytest.mark.parametrize("keep", [True, False])
async def test_inputs_hold_exactly_the_runs_that_need_one_after_a_long_history(
    client: FloClient, raw: aioredis.Redis, keep: bool
) -> None:
    opts = ActionRegisterOptions(keep_inputs=keep, max_retries=2, retention_count=40)
    keys = await job(client, opts)
    rng = random.Random(7)
    completed = 0
    for step in range(150):
        choice = rng.random()
        if choice < 0.4:
            await client.action.invoke_many("job", [f"{step}.{i}".encode() for i in range(5)])
        elif choice < 0.65:
            claimed = await client.worker.await_tasks("w", ["job"], 6, NOW)
            await client.worker.complete_many(
                "w", "job", [CompleteItem(c.run_id, b"r", token=c.token) for c in claimed]
            )
            completed += len(claimed)
        elif choice < 0.8:
            for c in await client.worker.await_tasks("w", ["job"], 2, NOW):
                await client.worker.complete("w", "job", c.run_id, b"r")
                completed += 1
        elif choice < 0.9:
            for c in await client.worker.await_tasks("w", ["job"], 2, NOW):
                retry = rng.random() < 0.5
                await client.worker.fail("w", "job", c.run_id, "e", WorkerFailOptions(retry=retry))
        elif choice < 0.95:
            await client.action.requeue_failed("job")
        else:
            await client.action.purge("job", "completed")
        assert await keys_of(raw, keys.inputs) == await needing_input(raw, keys, keep)
    # Retention trimmed along the way: far more runs completed than are kept.
    assert completed > 100 and await raw.zcard(keys.done) <= 40
    assert await keys_of(raw, keys.runs) == await needing_input(raw, keys, True)
