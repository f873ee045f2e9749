"""Settings and options are refused where they are given, naming the setting.

StreamWorker settings, queue option types, register and invoke option bounds, invoke's
idempotency key and labels, wait's ``on_progress``: each bad value gets a typed error
from the call (or the option class) that takes it, and a refused call writes nothing.
The option classes raise ValueError, as flo's do (``__post_init__``); the calls raise
ValidationError.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
from cli_command import Command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis_server import own_server_url

from flo_redis import (
    AckOptions,
    ActionContext,
    ActionInvokeOptions,
    ActionRegisterOptions,
    ActionStatusOptions,
    DequeueOptions,
    DlqListOptions,
    DlqRequeueOptions,
    EnqueueOptions,
    FloClient,
    NackOptions,
    NotFoundError,
    PeekOptions,
    StreamContext,
    StreamGroupAckOptions,
    StreamGroupJoinOptions,
    StreamID,
    StreamReadOptions,
    StreamTrimOptions,
    ValidationError,
    WaitTimeoutError,
    WorkerAwaitOptions,
    WorkerFailOptions,
)
from flo_redis.sync import SyncFloClient
from flo_redis.types.base import MAX_TIME_MS
from flo_redis.worker.stream_worker import StreamWorkerOptions

redis_url = own_server_url()  # each call is followed by a scan of the keyspace


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


# --- options changed after they were made: checked where they are used ---------------

U32_MAX = 2**32 - 1
# (option class, field, low, high, optional): the ranges a call takes.
MUTABLE: list[tuple[type, str, int, int, bool]] = [
    (ActionRegisterOptions, "timeout_ms", 0, U32_MAX, False),
    (ActionRegisterOptions, "max_retries", 0, U32_MAX, False),
    (ActionRegisterOptions, "max_concurrency", 0, U32_MAX, False),
    (ActionRegisterOptions, "retry_backoff_max_ms", 0, U32_MAX, False),
    (ActionRegisterOptions, "retention_ms", 1, 2**53 - 1, True),
    (ActionRegisterOptions, "max_payload_bytes", 1, 16 * 1024 * 1024, True),
    (ActionInvokeOptions, "delay_ms", 0, MAX_TIME_MS, False),
    (ActionInvokeOptions, "run_at_ms", 0, MAX_TIME_MS, True),
    (StreamGroupJoinOptions, "ack_timeout_ms", 0, U32_MAX, True),
    (StreamGroupJoinOptions, "max_deliver", 1, U32_MAX, True),
]
VALUES = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-2, max_value=2**32 + 2),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([float("nan"), float("inf"), 10**20, "abc", "5", True, None, b"1", [1]]),
)


async def _use(client: FloClient, opts: object) -> None:
    """Make the call that takes ``opts``."""
    if isinstance(opts, ActionRegisterOptions):
        await client.action.register("job", options=opts)
    elif isinstance(opts, ActionInvokeOptions):
        await client.action.register("job")
        await client.action.invoke("job", b"x", opts)
    else:
        assert isinstance(opts, StreamGroupJoinOptions)
        await client.stream.group_join("s", "g", "c", opts)


def _taken(value: object, low: int, high: int, optional: bool) -> bool:
    if value is None:
        return optional
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(MUTABLE), value=VALUES)
@pytest.mark.slow
def test_an_option_changed_after_it_was_made_is_checked_where_used(
    redis_url: str, case: tuple[type, str, int, int, bool], value: object
) -> None:
    cls, field, low, high, optional = case

    async def check() -> None:
        namespace = f"t-{uuid.uuid4().hex[:12]}"
        async with FloClient(redis_url, namespace=namespace) as client:
            opts = cls()
            setattr(opts, field, value)  # after construction: __post_init__ saw the default
            raw = client.redis
            before = await keyspace(raw, namespace)  # type: ignore[arg-type]
            if _taken(value, low, high, optional):
                await _use(client, opts)
                return
            with pytest.raises(ValidationError) as caught:
                await _use(client, opts)
            assert f"{cls.__name__}.{field} must be an int" in str(caught.value)
            assert f"[{low}, {high}]" in str(caught.value)
            if cls is not ActionInvokeOptions:  # its register ran before
                assert await keyspace(raw, namespace) == before  # type: ignore[arg-type]

    asyncio.run(check())


async def test_the_examples_of_the_report_are_refused(client: FloClient) -> None:
    opts = ActionInvokeOptions()
    opts.delay_ms = float("nan")  # type: ignore[assignment]
    await client.action.register("job")
    with pytest.raises(ValidationError, match=r"ActionInvokeOptions\.delay_ms must be an int"):
        await client.action.invoke("job", b"x", opts)
    register = ActionRegisterOptions()
    register.timeout_ms = "abc"  # type: ignore[assignment]
    with pytest.raises(ValidationError, match=r"ActionRegisterOptions\.timeout_ms"):
        await client.action.register("other", options=register)
    register = ActionRegisterOptions()
    register.max_retries = 10**20
    with pytest.raises(ValidationError, match=r"max_retries must be an int in \[0, 4294967295\]"):
        await client.action.register("other", options=register)
    with pytest.raises(NotFoundError):  # nothing was stored
        await client.action.invoke("other", b"x")


async def test_a_backoff_below_its_base_after_construction_is_refused(client: FloClient) -> None:
    opts = ActionRegisterOptions(retry_backoff_ms=100, retry_backoff_max_ms=200)
    opts.retry_backoff_ms = 500
    with pytest.raises(ValidationError, match="must not be below retry_backoff_ms"):
        await client.action.register("job", options=opts)


async def test_both_times_set_after_construction_are_refused(client: FloClient) -> None:
    await client.action.register("job")
    opts = ActionInvokeOptions(delay_ms=10)
    opts.run_at_ms = 5
    with pytest.raises(ValidationError, match="delay_ms or run_at_ms, not both"):
        await client.action.invoke("job", b"x", opts)


@pytest.mark.parametrize(
    ("opts", "field"),
    [
        (WorkerFailOptions(retry="no"), "WorkerFailOptions.retry"),  # type: ignore[arg-type]
        (StreamReadOptions(tail=1), "StreamReadOptions.tail"),  # type: ignore[arg-type]
        (StreamTrimOptions(max_len=1, dry_run="yes"), "StreamTrimOptions.dry_run"),  # type: ignore[arg-type]
        (ActionStatusOptions(namespace="a{b"), "ActionStatusOptions.namespace"),
    ],
)
async def test_flags_and_namespaces_are_checked_where_used(
    client: FloClient, opts: Any, field: str
) -> None:
    await client.action.register("job")
    await client.worker.register("w", ["job"])
    run = await client.action.invoke("job", b"x")
    await client.stream.append("s", b"x")
    call = {
        WorkerFailOptions: lambda: client.worker.fail("w", "job", run.run_id, "e", opts),
        StreamReadOptions: lambda: client.stream.read("s", opts),
        StreamTrimOptions: lambda: client.stream.trim("s", opts),
        ActionStatusOptions: lambda: client.action.status(run.run_id, opts),
    }[type(opts)]
    with pytest.raises(ValidationError, match=field.replace(".", r"\.")):
        await call()


def test_the_blocking_client_checks_options_where_used(redis_url: str, namespace: str) -> None:
    with SyncFloClient(redis_url, namespace=namespace) as flo:
        opts = ActionInvokeOptions()
        opts.delay_ms = -1
        with pytest.raises(ValidationError, match=r"ActionInvokeOptions\.delay_ms"):
            flo.action.invoke("job", b"x", opts)
        with pytest.raises(ValidationError, match="options must be a ActionInvokeOptions"):
            flo.action.invoke("job", b"x", {"delay_ms": 1})  # type: ignore[arg-type]


# --- worker settings changed after construction ------------------------------------


async def test_an_action_worker_checks_its_settings_again_at_start(client: FloClient) -> None:
    worker = client.new_action_worker()

    @worker.action("job")
    async def job(ctx: ActionContext) -> None:
        return None

    worker.config.concurrency = 0
    with pytest.raises(ValidationError, match="concurrency must be an int >= 1, got 0"):
        await worker.start()
    worker.config.concurrency = 2
    worker.config.action_timeout = float("nan")
    with pytest.raises(ValidationError, match="action_timeout"):
        await worker.start()


async def test_a_worker_checks_its_actions_options_when_given_and_at_start(
    client: FloClient, raw: aioredis.Redis, namespace: str
) -> None:
    worker = client.new_action_worker()
    bad = ActionRegisterOptions()
    bad.timeout_ms = -5
    with pytest.raises(ValidationError, match=r"ActionRegisterOptions\.timeout_ms"):
        worker.register_action("early", lambda ctx: None, bad)
    opts = ActionRegisterOptions()

    @worker.action("job", opts)
    async def job(ctx: ActionContext) -> None:
        return None

    opts.max_retries = 2**40  # changed after it was given
    before = await keyspace(raw, namespace)
    with pytest.raises(ValidationError, match=r"ActionRegisterOptions\.max_retries"):
        await asyncio.wait_for(worker.start(), 30)
    assert await keyspace(raw, namespace) == before


async def test_a_stream_worker_checks_its_settings_again_at_start(client: FloClient) -> None:
    worker = client.new_stream_worker(stream="s", group="g", handler=handle)
    worker.config.batch_size = 5000
    with pytest.raises(ValidationError, match="batch_size must be an int in"):
        await worker.start()
    worker.config.batch_size = 10
    worker.config.message_timeout = float("inf")
    with pytest.raises(ValidationError, match="message_timeout"):
        await worker.start()


# --- the command --------------------------------------------------------------------


@pytest.mark.slow
def test_the_worker_command_refuses_options_changed_after_they_were_given(
    command: Callable[..., Command], redis_url: str, namespace: str
) -> None:
    cmd = command("worker", "--url", redis_url, "--namespace", namespace, "option_app:worker")
    assert cmd.exits(1)
    assert "ActionRegisterOptions.timeout_ms must be an int in [0, 4294967295], got nan" in (
        cmd.output()
    )

    async def written() -> dict[bytes, bytes | None]:
        async with aioredis.Redis.from_url(redis_url) as raw:
            return await keyspace(raw, namespace)

    assert asyncio.run(written()) == {}
