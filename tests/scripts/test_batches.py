"""Batch APIs: invoke_many and complete_many keep the single-run rules for every item."""

from __future__ import annotations

import pytest

from flo_redis import (
    ActionInvokeOptions,
    ActionRegisterOptions,
    BadRequestError,
    ConflictError,
    FloClient,
    NotFoundError,
    RunStatus,
    ValidationError,
    ValueTooLargeError,
    WorkerAwaitOptions,
)
from flo_redis._wire.codec import pack
from flo_redis._wire.gateway import RUN_COMPLETE_MANY
from flo_redis._wire.keys import action_keys
from flo_redis._wire.status import Status
from flo_redis.actions import CompleteItem


async def test_invoke_many_creates_runs_in_order(client: FloClient) -> None:
    await client.action.register("bulk")
    results = await client.action.invoke_many("bulk", [f"{i}".encode() for i in range(2500)])
    assert len({r.run_id for r in results}) == 2500
    await client.worker.register("w", ["bulk"])
    taken = await client.worker.await_tasks("w", ["bulk"], 10, WorkerAwaitOptions(block_ms=0))
    assert [t.payload for t in taken] == [f"{i}".encode() for i in range(10)]
    assert [t.run_id for t in taken] == [r.run_id for r in results[:10]]
    status = await client.action.status(results[-1].run_id)
    assert (status.status, status.attempt) == (RunStatus.PENDING, 0)


async def test_invoke_many_refuses_bad_input_before_writing(client: FloClient, raw) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(NotFoundError, match="not registered"):
        await client.action.invoke_many("nobody", [b"x"])
    await client.action.register("small", options=ActionRegisterOptions(max_payload_bytes=4))
    with pytest.raises(ValueTooLargeError, match=r"inputs\[1\]"):
        await client.action.invoke_many("small", [b"ok", b"too long"])
    with pytest.raises(ValidationError, match="delay_ms"):
        await client.action.invoke_many("small", [b"x"], ActionInvokeOptions(delay_ms=10))
    with pytest.raises(ValidationError, match="bytes"):
        await client.action.invoke_many("small", ["text"])  # type: ignore[list-item]
    assert await raw.hlen(f"flo:a:{{{client.namespace}:small}}:runs") == 0


async def test_complete_many_answers_each_item_on_its_own(client: FloClient) -> None:
    await client.action.register("job")
    await client.worker.register("w", ["job"])
    await client.action.invoke_many("job", [b"a", b"b", b"c"])
    a, b, c = await client.worker.await_tasks("w", ["job"], 3, WorkerAwaitOptions(block_ms=0))
    items = [
        CompleteItem(a.run_id, b"A", token=a.token),
        CompleteItem(b.run_id, b"B", token=b.token + 1),  # not b's current token
        CompleteItem("job:999", b"?"),
        CompleteItem(c.run_id, b"C", outcome="special", token=c.token),
    ]
    answers = await client.worker.complete_many("w", "job", items)
    assert answers[0] is None and answers[3] is None
    assert isinstance(answers[1], ConflictError)
    assert isinstance(answers[2], NotFoundError)
    assert (await client.action.status(a.run_id)).output == b"A"
    assert (await client.action.status(b.run_id)).status == RunStatus.RUNNING
    assert (await client.action.status(c.run_id)).outcome == "special"
    # An identical resend is answered as success and applies nothing twice.
    again = await client.worker.complete_many("w", "job", [items[0], items[3]])
    assert again == [None, None]
    info = (await client.worker.list()).workers[0]
    assert (info.tasks_completed, info.current_load) == (2, 1)


async def test_group_ack_many_answers_each_entry_on_its_own(client: FloClient) -> None:
    from flo_redis import StreamGroupNackOptions, StreamGroupReadOptions

    for payload in (b"a", b"b", b"c"):
        await client.stream.append("s", payload)
    first = await client.stream.group_read("s", "g", "c1", StreamGroupReadOptions(count=3))
    a, b, c = first.records
    # b is nacked and delivered again: its first delivery's token is stale now.
    await client.stream.group_nack("s", "g", [b.id], StreamGroupNackOptions(token=1))
    again = await client.stream.group_read("s", "g", "c1", StreamGroupReadOptions(count=1))
    assert [r.id for r in again.records] == [b.id]
    answers = await client.stream.group_ack_many(
        "s", "g", [(a.id, a.delivery_count), (b.id, b.delivery_count), (c.id, None)]
    )
    assert answers[0] is None and answers[2] is None
    assert isinstance(answers[1], ConflictError)
    pending = await client.stream.group_pending("s", "g")
    assert [(p.id, p.delivery_count) for p in pending] == [(b.id, 2)]
    with pytest.raises(NotFoundError):
        await client.stream.group_ack_many("s", "nobody", [(a.id, None)])


async def test_group_ack_many_of_a_consumer_checks_each_entry(client: FloClient) -> None:
    """A consumer's batch ack finds its own entries in one read of its pending list;
    another consumer's entry, one already acked and ids spread wider than that read
    are each still answered under group_ack's rules."""
    from flo_redis import StreamGroupReadOptions

    for i in range(300):
        await client.stream.append("s", f"{i}".encode())
    mine = await client.stream.group_read("s", "g", "c1", StreamGroupReadOptions(count=299))
    theirs = await client.stream.group_read("s", "g", "c2", StreamGroupReadOptions(count=1))
    first, second, last = mine.records[0], mine.records[1], mine.records[-1]
    other = theirs.records[0]
    await client.stream.group_ack_many("s", "g", [(second.id, 1)], consumer="c1")
    # Out of id order, 299 of c1's entries in the range: more than one read looks at.
    answers = await client.stream.group_ack_many(
        "s", "g", [(last.id, 1), (other.id, 1), (second.id, 1), (first.id, 1)], consumer="c1"
    )
    assert answers[0] is None and answers[2] is None and answers[3] is None
    assert isinstance(answers[1], ConflictError)
    pending = await client.stream.group_pending("s", "g")
    left = {p.id.to_redis() for p in pending}
    assert len(left) == 300 - 3
    assert other.id.to_redis() in left
    assert not {first.id.to_redis(), second.id.to_redis(), last.id.to_redis()} & left


async def test_group_ack_many_forgets_each_delivery_whoever_acks(
    client: FloClient,
    raw,
    redis_url: str,  # type: ignore[no-untyped-def]
) -> None:
    """An ack forgets the deliveries' owner index entries whether the acking process
    is the one that read them or another one, and with an entry named twice."""
    from flo_redis import StreamGroupNackOptions, StreamGroupReadOptions
    from flo_redis._wire.keys import stream_keys

    for i in range(6):
        await client.stream.append("s", b"%d" % i)
    first = await client.stream.group_read("s", "g", "c1", StreamGroupReadOptions(count=6))
    # Read past the cursor, the six are one batch: nothing recorded per entry.
    gk = stream_keys(client.namespace, "s").group("g")
    assert await raw.zcard(gk.owned) == 0 and await raw.zcard(gk.batches) == 1
    nack = StreamGroupNackOptions(consumer="c1", token=1)
    await client.stream.group_nack("s", "g", [r.id for r in first.records], nack)
    # Handed out again, each is recorded on its own, under its owner.
    read = await client.stream.group_read("s", "g", "c1", StreamGroupReadOptions(count=6))
    a, b, c, d, e, f = read.records
    assert {r.delivery_count for r in read.records} == {2}
    assert await raw.zcard(gk.owned) == 6
    # The reader acks two, one of them named twice.
    assert await client.stream.group_ack_many(
        "s", "g", [(a.id, 2), (b.id, 2), (a.id, 2)], consumer="c1"
    ) == [None, None, None]
    assert await raw.zcard(gk.owned) == 4
    # Another process (its own owner id) acks three, with the reader's consumer name.
    async with FloClient(redis_url, namespace=client.namespace) as other:
        answers = await other.stream.group_ack_many(
            "s", "g", [(c.id, 2), (d.id, None), (e.id, 2)], consumer="c1"
        )
    assert answers == [None, None, None]
    assert await raw.zcard(gk.owned) == 1
    assert await raw.hlen(gk.deliveries) == 1 and await raw.zcard(gk.due) == 1
    pending = await client.stream.group_pending("s", "g")
    assert [p.id.to_redis() for p in pending] == [f.id.to_redis()]


async def test_complete_many_refuses_a_result_over_the_actions_limit_alone(
    client: FloClient,
) -> None:
    from flo_redis import BadRequestError

    await client.action.register("tiny", options=ActionRegisterOptions(max_payload_bytes=4))
    await client.worker.register("w", ["tiny"])
    await client.action.invoke_many("tiny", [b"a", b"b"])
    a, b = await client.worker.await_tasks("w", ["tiny"], 2, WorkerAwaitOptions(block_ms=0))
    answers = await client.worker.complete_many(
        "w",
        "tiny",
        [
            CompleteItem(a.run_id, b"ok", token=a.token),
            CompleteItem(b.run_id, b"too long", token=b.token),
        ],
    )
    assert answers[0] is None
    assert isinstance(answers[1], BadRequestError)
    assert (await client.action.status(b.run_id)).status == RunStatus.RUNNING


async def test_complete_many_refuses_a_result_over_the_clients_limit_alone(
    redis_url: str, namespace: str
) -> None:
    from flo_redis import BadRequestError, Reason

    async with FloClient(redis_url, namespace=namespace, max_payload_bytes=8) as client:
        await client.action.register("job")
        await client.worker.register("w", ["job"])
        await client.action.invoke_many("job", [b"a", b"b", b"c"])
        a, b, c = await client.worker.await_tasks("w", ["job"], 3, WorkerAwaitOptions(block_ms=0))
        answers = await client.worker.complete_many(
            "w",
            "job",
            [
                CompleteItem(a.run_id, b"ok", token=a.token),
                CompleteItem(b.run_id, b"far too long", token=b.token),
                CompleteItem(c.run_id, b"ok", token=c.token),
            ],
        )
        assert answers[0] is None and answers[2] is None
        assert isinstance(answers[1], BadRequestError)
        assert answers[1].reason == Reason.FIELD_TOO_LONG
        assert "12 bytes" in str(answers[1])
        assert (await client.action.status(b.run_id)).status == RunStatus.RUNNING
        assert (await client.action.status(c.run_id)).status == RunStatus.COMPLETED


async def test_a_claimed_batch_gets_one_token_lease_and_owner_entry_per_run(
    client: FloClient, raw
) -> None:  # type: ignore[no-untyped-def]
    from flo_redis._wire.keys import action_keys

    await client.action.register("job")
    await client.worker.register("w", ["job"])
    await client.action.invoke_many("job", [f"{i}".encode() for i in range(150)])
    first = await client.worker.await_tasks("w", ["job"], 100, WorkerAwaitOptions(block_ms=0))
    second = await client.worker.await_tasks("w", ["job"], 100, WorkerAwaitOptions(block_ms=0))
    taken = [*first, *second]
    assert [t.payload for t in taken] == [f"{i}".encode() for i in range(150)]
    tokens = [t.token for t in taken]
    assert tokens == sorted(tokens) and len(set(tokens)) == 150
    for t in (taken[0], taken[99], taken[149]):
        status = await client.action.status(t.run_id)
        assert (status.status, status.token, status.attempt) == (RunStatus.RUNNING, t.token, 1)
    keys = action_keys(client.namespace, "job")
    assert await raw.zcard(keys.leases) == 150
    assert await raw.zcard(keys.owned) == 150
    assert await raw.zcard(keys.pending) == 0
    # Completing the batch drops every lease and owner entry it made.
    answers = await client.worker.complete_many(
        "w", "job", [CompleteItem(t.run_id, b"", token=t.token) for t in taken]
    )
    assert answers == [None] * 150
    assert await raw.zcard(keys.leases) == 0
    assert await raw.zcard(keys.owned) == 0


async def test_complete_many_naming_a_run_twice_applies_it_once(client: FloClient) -> None:
    await client.action.register("job")
    await client.worker.register("w", ["job"])
    await client.action.invoke_many("job", [b"a", b"b"])
    a, b = await client.worker.await_tasks("w", ["job"], 2, WorkerAwaitOptions(block_ms=0))
    answers = await client.worker.complete_many(
        "w",
        "job",
        [
            CompleteItem(a.run_id, b"A", token=a.token),
            CompleteItem(a.run_id, b"A", token=a.token),  # an identical resend: success
            CompleteItem(b.run_id, b"B", token=b.token),
            CompleteItem(b.run_id, b"other", token=b.token),  # not what was applied
        ],
    )
    assert answers[:3] == [None, None, None]
    assert isinstance(answers[3], ConflictError)
    assert (await client.action.status(a.run_id)).output == b"A"
    assert (await client.action.status(b.run_id)).output == b"B"
    info = (await client.worker.list()).workers[0]
    assert (info.tasks_completed, info.current_load) == (2, 0)


async def test_the_complete_batch_script_refuses_a_part_of_an_item_and_changes_nothing(
    client: FloClient,
) -> None:
    await client.action.register("job")
    await client.worker.register("w", ["job"])
    await client.action.invoke("job", b"a")
    (run,) = await client.worker.await_tasks("w", ["job"], 1, WorkerAwaitOptions(block_ms=0))
    keys = action_keys(client.namespace, "job")
    # Items go flat (run id, token, result, outcome each); three values are no item.
    with pytest.raises(BadRequestError, match=r"ARGV\[2\] items"):
        await RUN_COMPLETE_MANY(client.session, keys, ["w", pack([run.run_id, run.token, b"A"])])

    assert (await client.action.status(run.run_id)).status == RunStatus.RUNNING
    whole = pack([run.run_id, run.token, b"A", "success"])
    reply = await RUN_COMPLETE_MANY(client.session, keys, ["w", whole])
    assert (reply.status, list(reply.statuses)) == (Status.OK, [Status.OK])
    assert (await client.action.status(run.run_id)).status == RunStatus.COMPLETED
