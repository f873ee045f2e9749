"""Settings and options are refused where they are given, naming the setting.

StreamWorker settings, queue option types, register and invoke option bounds, invoke's
idempotency key and labels, wait's ``on_progress``: each bad value gets a typed error
from the call (or the option class) that takes it, and a refused call writes nothing.
The option classes raise ValueError, as flo's do (``__post_init__``); the calls raise
ValidationError.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from flo_redis import (
    AckOptions,
    ActionInvokeOptions,
    ActionRegisterOptions,
    DequeueOptions,
    DlqListOptions,
    DlqRequeueOptions,
    EnqueueOptions,
    FloClient,
    NackOptions,
    PeekOptions,
    StreamContext,
    StreamGroupAckOptions,
    StreamID,
    StreamTrimOptions,
    ValidationError,
    WaitTimeoutError,
    WorkerAwaitOptions,
)
from flo_redis._type_base import MAX_TIME_MS
from flo_redis.stream_worker import StreamWorkerOptions


async def keyspace(raw: aioredis.Redis, namespace: str) -> dict[bytes, bytes | None]:
    """Every key of the namespace with its DUMP."""
    keys = sorted([k async for k in raw.scan_iter(match=f"*{namespace}*", count=1000)])
    return {k: await raw.dump(k) for k in keys}


async def refused_unwritten(
    raw: aioredis.Redis, namespace: str, call: Awaitable[Any], match: str
) -> None:
    """``call`` raises ValidationError matching ``match`` and leaves the keyspace as it was."""
    before = await keyspace(raw, namespace)
    with pytest.raises(ValidationError, match=match):
        await call
    assert await keyspace(raw, namespace) == before


async def handle(ctx: StreamContext) -> None:
    pass


# --- StreamWorker settings ----------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("batch_size", 5000),
        ("batch_size", 1001),
        ("batch_size", 0),
        ("batch_size", 1.5),
        ("batch_size", True),
        ("claim_min_idle_ms", -5),
        ("claim_min_idle_ms", 2**32),
        ("claim_min_idle_ms", 10**30),
        ("claim_min_idle_ms", 1.5),
        ("claim_min_idle_ms", "0"),
        ("concurrency", 0),
        ("concurrency", 2.0),
        ("concurrency", 2**32),
        ("message_timeout", 0),
        ("message_timeout", float("nan")),
        ("block_ms", -1),
    ],
)
async def test_a_stream_worker_refuses_a_bad_setting_naming_it(
    client: FloClient, setting: str, value: object
) -> None:
    kwargs: dict[str, Any] = {setting: value}
    with pytest.raises(ValidationError, match=setting):
        client.new_stream_worker(stream="s", group="g", handler=handle, **kwargs)
    with pytest.raises(ValidationError, match=setting):
        StreamWorkerOptions(stream="s", group="g", **kwargs)


def test_the_batch_size_refusal_says_what_a_read_takes() -> None:
    with pytest.raises(ValidationError) as caught:
        StreamWorkerOptions(stream="s", batch_size=5000)
    assert str(caught.value) == (
        "batch_size must be an int in [1, 1000], got 5000; a group read takes at most 1000 records"
    )


async def test_a_stream_worker_takes_the_edges_of_its_ranges(client: FloClient) -> None:
    worker = client.new_stream_worker(
        stream="s", group="g", handler=handle, batch_size=1000, claim_min_idle_ms=2**32 - 1
    )
    assert (worker.config.batch_size, worker.config.claim_min_idle_ms) == (1000, 2**32 - 1)
    worker = client.new_stream_worker(
        stream="s", group="g", handler=handle, batch_size=1, claim_min_idle_ms=0
    )
    assert (worker.config.batch_size, worker.config.claim_min_idle_ms) == (1, 0)


# --- queue options of the wrong type ------------------------------------------------

QueueCall = Callable[[FloClient, object], Awaitable[Any]]

_QUEUE_CALLS: dict[str, tuple[QueueCall, type]] = {
    "enqueue": (lambda c, o: c.queue.enqueue("q", b"x", o), EnqueueOptions),  # type: ignore[arg-type]
    "dequeue": (lambda c, o: c.queue.dequeue("q", 1, o), DequeueOptions),  # type: ignore[arg-type]
    "ack": (lambda c, o: c.queue.ack("q", [1], o), AckOptions),  # type: ignore[arg-type]
    "nack": (lambda c, o: c.queue.nack("q", [1], o), NackOptions),  # type: ignore[arg-type]
    "dlq_list": (lambda c, o: c.queue.dlq_list("q", o), DlqListOptions),  # type: ignore[arg-type]
    "dlq_requeue": (lambda c, o: c.queue.dlq_requeue("q", [1], o), DlqRequeueOptions),  # type: ignore[arg-type]
    "peek": (lambda c, o: c.queue.peek("q", 1, o), PeekOptions),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("call", sorted(_QUEUE_CALLS))
@pytest.mark.parametrize("wrong", ["dict", "another options class"])
async def test_a_queue_call_refuses_options_of_another_type(
    client: FloClient, raw: aioredis.Redis, namespace: str, call: str, wrong: str
) -> None:
    await client.queue.enqueue("q", b"m")
    send, expected = _QUEUE_CALLS[call]
    options = {"priority": 1} if wrong == "dict" else ActionInvokeOptions()
    await refused_unwritten(
        raw, namespace, send(client, options), rf"options must be a {expected.__name__} or None"
    )


async def test_enqueue_refuses_dequeue_options(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    await refused_unwritten(
        raw,
        namespace,
        client.queue.enqueue("q", b"x", DequeueOptions()),  # type: ignore[arg-type]
        "options must be a EnqueueOptions or None, got DequeueOptions",
    )


# --- register: retention bounds -----------------------------------------------------


@pytest.mark.parametrize("field", ["retention_ms", "retention_count"])
@pytest.mark.parametrize("value", [10**20, 2**64, 2**53])
def test_register_options_bound_retention(field: str, value: int) -> None:
    with pytest.raises(ValueError, match=rf"ActionRegisterOptions\.{field} must be an int"):
        ActionRegisterOptions(**{field: value})  # type: ignore[arg-type]


async def test_the_largest_retention_registers(client: FloClient) -> None:
    largest = 2**53 - 1
    opts = ActionRegisterOptions(retention_ms=largest, retention_count=largest)
    await client.action.register("kept", options=opts)


def test_option_class_refusals_are_worded_as_the_call_time_ones() -> None:
    with pytest.raises(ValueError) as caught:
        ActionRegisterOptions(timeout_ms=-1)
    assert str(caught.value) == (
        "ActionRegisterOptions.timeout_ms must be an int in [0, 4294967295], got -1"
    )
    with pytest.raises(ValueError) as caught:
        ActionRegisterOptions(retention_ms=0)
    assert str(caught.value) == (
        "ActionRegisterOptions.retention_ms must be an int in [1, 9007199254740991], got 0"
    )
    with pytest.raises(ValueError) as caught:
        ActionRegisterOptions(max_retries="3")  # type: ignore[arg-type]
    assert str(caught.value) == "ActionRegisterOptions.max_retries must be an int, got '3'"


# --- invoke: times, idempotency key, labels -----------------------------------------


@pytest.mark.parametrize("field", ["delay_ms", "run_at_ms"])
@pytest.mark.parametrize("value", [10**20, 2**64, MAX_TIME_MS + 1])
def test_invoke_options_bound_the_times(field: str, value: int) -> None:
    with pytest.raises(ValueError, match=rf"ActionInvokeOptions\.{field} must be an int"):
        ActionInvokeOptions(**{field: value})  # type: ignore[arg-type]


async def test_the_latest_time_is_invoked(client: FloClient) -> None:
    await client.action.register("job")
    run = await client.action.invoke("job", b"x", ActionInvokeOptions(run_at_ms=MAX_TIME_MS))
    assert (await client.action.status(run.run_id)).due_at_ms == MAX_TIME_MS
    await client.action.invoke("job", b"x", ActionInvokeOptions(delay_ms=MAX_TIME_MS))


@pytest.mark.parametrize(
    "key",
    [5, b"k", [1], 1.5, "k" * 256, "é" * 128, "k" * 2**20],
    ids=["int", "bytes", "list", "float", "256 chars", "256 bytes", "1 MiB"],
)
async def test_invoke_refuses_a_bad_idempotency_key(
    client: FloClient, raw: aioredis.Redis, namespace: str, key: object
) -> None:
    await client.action.register("job")
    await client.action.invoke("job", b"x", ActionInvokeOptions(idempotency_key="5"))
    opts = ActionInvokeOptions(idempotency_key=key)  # type: ignore[arg-type]
    await refused_unwritten(
        raw, namespace, client.action.invoke("job", b"x", opts), "idempotency_key"
    )


async def test_an_int_key_does_not_find_the_run_of_its_text(client: FloClient) -> None:
    await client.action.register("job")
    await client.action.invoke("job", b"x", ActionInvokeOptions(idempotency_key="5"))
    with pytest.raises(ValidationError, match="idempotency_key must be a str, got int"):
        await client.action.invoke("job", b"x", ActionInvokeOptions(idempotency_key=5))  # type: ignore[arg-type]


async def test_a_key_of_255_bytes_is_taken(client: FloClient) -> None:
    await client.action.register("job")
    opts = ActionInvokeOptions(idempotency_key="k" * 255)
    first = await client.action.invoke("job", b"x", opts)
    assert await client.action.invoke("job", b"x", opts) == first


@pytest.mark.parametrize(
    "value", [object(), b"x", {1, 2}, (1,)], ids=["object", "bytes", "set", "tuple"]
)
async def test_invoke_refuses_a_label_value_no_worker_could_match(
    client: FloClient, raw: aioredis.Redis, namespace: str, value: object
) -> None:
    await client.action.register("job")
    opts = ActionInvokeOptions(labels={"gpu": True, "zone": value})
    match = r"label 'zone' is a \w+; label values must be str, int, float, bool, None"
    await refused_unwritten(raw, namespace, client.action.invoke("job", b"x", opts), match)
    await refused_unwritten(raw, namespace, client.action.invoke_many("job", [b"x"], opts), match)


async def test_json_label_values_are_taken(client: FloClient) -> None:
    await client.action.register("job")
    labels = {"s": "a", "i": 1, "f": 1.5, "b": True, "n": None, "l": [1], "d": {"a": 1}}
    await client.action.invoke("job", b"x", ActionInvokeOptions(labels=labels))


# --- wait: on_progress --------------------------------------------------------------


@pytest.mark.parametrize("callback", [5, "print", b"x"], ids=["int", "str", "bytes"])
async def test_wait_refuses_an_on_progress_that_cannot_be_called(
    client: FloClient, raw: aioredis.Redis, namespace: str, callback: object
) -> None:
    await client.action.register("job")
    run = await client.action.invoke("job", b"x")
    wait = client.action.wait(run.run_id, timeout_ms=200, on_progress=callback)  # type: ignore[arg-type]
    await refused_unwritten(raw, namespace, wait, "on_progress must be a function")


async def test_wait_takes_a_plain_function_as_on_progress(client: FloClient) -> None:
    await client.action.register("job")
    run = await client.action.invoke("job", b"x")
    with pytest.raises(WaitTimeoutError):
        await client.action.wait(run.run_id, timeout_ms=50, on_progress=lambda status: None)


# --- stream calls: numbers the scripts hold exactly ----------------------------------


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda c: c.stream.trim("s", StreamTrimOptions(max_len=10**30)), "max_len"),
        (
            lambda c: c.stream.trim("s", StreamTrimOptions(max_age_seconds=2**53)),
            "max_age_seconds",
        ),
        (
            lambda c: c.stream.group_ack(
                "s", "g", [StreamID(1, 0)], StreamGroupAckOptions(token=2**70)
            ),
            "token",
        ),
        (
            lambda c: c.stream.group_claim("s", "g", "c", 10**30, StreamID(0, 0), 10),
            "min_idle_ms",
        ),
    ],
    ids=["max_len", "max_age_seconds", "ack token", "claim min_idle_ms"],
)
async def test_stream_calls_refuse_numbers_no_script_holds_exactly(
    client: FloClient, call: Any, name: str
) -> None:
    with pytest.raises(ValidationError, match=rf"{name} must be an int in \[\d+, \d+\]"):
        await call(client)


# --- await_task: the poll id --------------------------------------------------------


@pytest.mark.parametrize(
    "poll_id", [5, "a{b", "x" * 300, ""], ids=["int", "brace", "long", "empty"]
)
async def test_await_task_refuses_a_poll_id_no_retry_could_name(
    client: FloClient, poll_id: object
) -> None:
    await client.action.register("job")
    await client.worker.register("w1", ["job"])
    opts = WorkerAwaitOptions(block_ms=0, poll_id=poll_id)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="poll id"):
        await client.worker.await_task("w1", ["job"], opts)
