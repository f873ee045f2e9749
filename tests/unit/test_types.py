"""Behaviour of flo_redis.types, flo_redis.errors and flo_redis.retry."""

from __future__ import annotations

import asyncio
import copy
import pickle
import random

import pytest
import redis.exceptions

import flo_redis.retry as retry_module
from flo_redis._wire.checks import validate_block_ms
from flo_redis.errors import (
    BadRequestError,
    BlockTooLongError,
    ConflictError,
    ConnectionFailedError,
    FloError,
    GenericServerError,
    InternalServerError,
    NotConnectedError,
    NotFoundError,
    OverloadedError,
    RateLimitedError,
    RedisVersionError,
    RequestTimeoutError,
    ServerError,
    TableMismatchError,
    UnauthorizedError,
    UnavailableError,
    UnexpectedEofError,
    ValidationError,
    is_connection_error,
    server_error,
)
from flo_redis.retry import (
    DEFAULT_RETRY_POLICY,
    Backoff,
    EmptyPollBackoff,
    RetryPolicy,
    backoff_delays,
    is_refused_unrun,
    retry_refused,
    sleep_unless_stopped,
    worker_backoff,
)
from flo_redis.types import (
    MAX_BLOCK_MS,
    ActionInvokeOptions,
    ActionRegisterOptions,
    PendingEntry,
    Ran,
    Reason,
    StatusCode,
    StreamClaimResult,
    StreamGroupJoinOptions,
    StreamID,
    StreamInfo,
    StreamRecord,
)

# -----------------------------------------------------------------------------
# ActionRegisterOptions / ActionInvokeOptions
# -----------------------------------------------------------------------------


def test_register_options_defaults_are_flos() -> None:
    o = ActionRegisterOptions()
    assert (o.namespace, o.timeout_ms, o.max_retries, o.owner) == (None, 30000, 3, None)
    assert (o.retry_backoff_ms, o.retry_backoff_max_ms, o.max_concurrency) == (0, 60_000, 0)
    assert (o.max_payload_bytes, o.retention_ms, o.retention_count, o.description) == (
        None,
        None,
        None,
        None,
    )


def test_register_options_positional_shape_is_flos() -> None:
    o = ActionRegisterOptions("ns", 5, 2, "me")
    assert (o.namespace, o.timeout_ms, o.max_retries, o.owner) == ("ns", 5, 2, "me")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"timeout_ms": -1},
        {"timeout_ms": 2**32},
        {"max_retries": -1},
        {"max_retries": 2**32},
        {"retry_backoff_ms": -1},
        {"retry_backoff_max_ms": -5},
        {"retry_backoff_ms": 2_000, "retry_backoff_max_ms": 1_000},
        {"max_concurrency": -1},
        {"max_payload_bytes": 0},
        {"retention_ms": 0},
        {"retention_count": 0},
        {"timeout_ms": 1.5},
        {"max_retries": True},
    ],
)
def test_register_options_out_of_range_raise_value_error(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        ActionRegisterOptions(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"timeout_ms": 0},
        {"timeout_ms": 2**32 - 1},
        {"max_retries": 0},
        {"max_retries": 2**32 - 1},
        {"retry_backoff_ms": 500, "retry_backoff_max_ms": 500},
        {"max_concurrency": 4},
        {"max_payload_bytes": 1},
        {"retention_ms": 1, "retention_count": 1},
    ],
)
def test_register_options_edges_are_accepted(kwargs: dict[str, object]) -> None:
    ActionRegisterOptions(**kwargs)  # type: ignore[arg-type]


def test_invoke_options_checks() -> None:
    assert ActionInvokeOptions().delay_ms == 0
    ActionInvokeOptions(delay_ms=10)
    ActionInvokeOptions(run_at_ms=1_700_000_000_000, idempotency_key="k")
    for kwargs in (
        {"delay_ms": -1},
        {"run_at_ms": -1},
        {"delay_ms": 5, "run_at_ms": 10},
        {"idempotency_key": ""},
    ):
        with pytest.raises(ValueError):
            ActionInvokeOptions(**kwargs)  # type: ignore[arg-type]


def test_group_join_options_checks() -> None:
    StreamGroupJoinOptions(ack_timeout_ms=0, max_deliver=1)
    with pytest.raises(ValueError):
        StreamGroupJoinOptions(ack_timeout_ms=-1)
    with pytest.raises(ValueError):
        StreamGroupJoinOptions(max_deliver=0)


# -----------------------------------------------------------------------------
# StreamID
# -----------------------------------------------------------------------------

_IDS = [
    StreamID(),
    StreamID(0, 1),
    StreamID(1, 0),
    StreamID(1_700_000_000_123, 7),
    StreamID(2**64 - 1, 2**64 - 1),
]


@pytest.mark.parametrize("sid", _IDS, ids=lambda s: s.to_redis())
def test_stream_id_round_trips(sid: StreamID) -> None:
    raw = sid.to_bytes()
    assert len(raw) == 16
    assert StreamID.from_bytes(raw) == sid
    assert StreamID.from_bytes(raw + b"extra") == sid
    text = sid.to_redis()
    assert text == f"{sid.timestamp_ms}-{sid.sequence}"
    assert StreamID.from_redis(text) == sid
    assert StreamID.from_redis(text.encode()) == sid


@pytest.mark.parametrize("sid", _IDS, ids=lambda s: s.to_redis())
def test_stream_id_repr_is_the_dataclass_text(sid: StreamID) -> None:
    text = f"StreamID(timestamp_ms={sid.timestamp_ms}, sequence={sid.sequence})"
    assert repr(sid) == str(sid) == text


@pytest.mark.parametrize("sid", _IDS, ids=lambda s: s.to_redis())
def test_a_reply_id_reads_as_the_id_redis_wrote(sid: StreamID) -> None:
    from flo_redis._wire.stream_codec import sid as reply_id

    text = sid.to_redis()
    assert reply_id(text.encode()) == reply_id(text) == sid


@pytest.mark.parametrize("raw", [b"5", "5", b"-", "+"])
def test_a_reply_id_of_another_form_is_parsed_in_full(raw: bytes | str) -> None:
    from flo_redis._wire.stream_codec import sid as reply_id

    assert reply_id(raw) == StreamID.from_redis(raw)


@pytest.mark.parametrize("raw", [b"1-x", "1-x", b" 1-2", "1_0-2"])
def test_a_malformed_reply_id_is_refused(raw: bytes | str) -> None:
    from flo_redis._wire.stream_codec import sid as reply_id

    with pytest.raises(ValueError):
        reply_id(raw)


def test_stream_id_bytes_are_big_endian() -> None:
    assert StreamID(1, 2).to_bytes() == bytes(7) + b"\x01" + bytes(7) + b"\x02"


def test_stream_id_ordering_matches_bytes_and_tuples() -> None:
    rng = random.Random(7)
    ids = [StreamID(rng.randrange(0, 5), rng.randrange(0, 5)) for _ in range(50)] + _IDS
    by_value = sorted(ids)
    assert by_value == sorted(ids, key=lambda s: s.to_bytes())
    assert by_value == sorted(ids, key=lambda s: (s.timestamp_ms, s.sequence))
    assert StreamID(1, 9) < StreamID(2, 0) <= StreamID(2, 0) < StreamID(2, 1)
    assert StreamID(0, 0) == StreamID.MIN
    assert StreamID(2**64 - 1, 2**64 - 1) == StreamID.MAX
    assert all(StreamID.MIN <= s <= StreamID.MAX for s in ids)


def test_stream_id_redis_forms_and_errors() -> None:
    assert StreamID.from_redis("5") == StreamID(5, 0)
    assert StreamID.from_redis("-") == StreamID.MIN
    assert StreamID.from_redis(b"+") == StreamID.MAX
    for bad in ("", "a-1", "1-", "-1", "1-2-3", "1.5-0", str(2**64) + "-0"):
        with pytest.raises(ValueError):
            StreamID.from_redis(bad)
    with pytest.raises(ValueError):
        StreamID.from_bytes(b"\x00" * 15)
    with pytest.raises(ValueError):
        StreamID(-1, 0)


def test_stream_results_never_hold_a_none_id() -> None:
    assert StreamRecord().id == StreamID()
    assert PendingEntry().id == StreamID()
    assert PendingEntry().idle_ms == 0
    assert StreamClaimResult([]).next_cursor == StreamID()
    info = StreamInfo(0, 0)
    assert (info.first_id, info.last_id, info.partition_count) == (StreamID(), StreamID(), 1)


# -----------------------------------------------------------------------------
# StatusCode
# -----------------------------------------------------------------------------


def test_status_code_pseudo_members() -> None:
    code = StatusCode(200)
    assert isinstance(code, StatusCode)
    assert int(code) == 200
    assert code.name == "UNKNOWN_200"
    assert code.message() == "Unknown status 200"
    assert code == StatusCode(200)
    assert pickle.loads(pickle.dumps(code)) == 200
    assert copy.deepcopy(code) == code
    assert StatusCode(0) is StatusCode.OK
    assert StatusCode(12) is StatusCode.UNAVAILABLE
    for bad in (-1, 256, "3"):
        with pytest.raises(ValueError):
            StatusCode(bad)


def test_status_code_messages() -> None:
    assert StatusCode.NOT_FOUND.message() == "Not found"
    assert StatusCode.OVERLOADED.message() == "Server overloaded"
    assert all(code.message() for code in StatusCode)


# -----------------------------------------------------------------------------
# Errors
# -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (StatusCode.NOT_FOUND, NotFoundError),
        (StatusCode.BAD_REQUEST, BadRequestError),
        (StatusCode.CONFLICT, ConflictError),
        (StatusCode.UNAUTHORIZED, UnauthorizedError),
        (StatusCode.OVERLOADED, OverloadedError),
        (StatusCode.RATE_LIMITED, RateLimitedError),
        (StatusCode.UNAVAILABLE, UnavailableError),
        (StatusCode.INTERNAL_ERROR, InternalServerError),
        (StatusCode.ERROR_GENERIC, GenericServerError),
        (StatusCode.GROUP_LOCKED, GenericServerError),
        (StatusCode(99), GenericServerError),
    ],
)
def test_server_error_picks_the_subclass(status: StatusCode, cls: type[ServerError]) -> None:
    err = server_error(status, Reason.STALE_REPORT, "run moved on", Ran.YES)
    assert type(err) is cls
    assert err.status_code == status
    assert (err.reason, err.ran) == (Reason.STALE_REPORT, Ran.YES)
    assert str(err) == "run moved on"


def test_server_error_defaults() -> None:
    err = server_error(StatusCode.NOT_FOUND, Reason.NOT_FOUND, "")
    assert err.ran is Ran.NO
    assert str(err) == "Not found"
    plain = NotFoundError()
    assert (plain.reason, plain.ran) == (Reason.UNCLASSIFIED, Ran.UNKNOWN)
    assert GenericServerError().status_code is StatusCode.ERROR_GENERIC


def test_error_tree() -> None:
    assert issubclass(RequestTimeoutError, asyncio.TimeoutError)
    assert issubclass(BlockTooLongError, ValidationError)
    assert issubclass(RedisVersionError, ConnectionFailedError)
    assert issubclass(RedisVersionError, FloError)
    assert "6.2.1" in str(RedisVersionError("6.2.1"))
    err = TableMismatchError(3, 0xABC)
    assert (err.server_version, err.server_table) == (3, 0xABC)


def test_is_connection_error() -> None:
    for exc in (
        UnexpectedEofError(),
        NotConnectedError(),
        RequestTimeoutError(),
        ConnectionResetError(),
        OSError(),
        redis.exceptions.ConnectionError(),
        redis.exceptions.TimeoutError(),
        redis.exceptions.BusyLoadingError(),
    ):
        assert is_connection_error(exc), exc
    for exc in (
        FloError(),
        NotFoundError(),
        ValueError(),
        redis.exceptions.ResponseError(),
        redis.exceptions.AuthenticationError(),
    ):
        assert not is_connection_error(exc), exc


def test_validate_block_ms() -> None:
    validate_block_ms(0)
    validate_block_ms(MAX_BLOCK_MS)
    with pytest.raises(BlockTooLongError):
        validate_block_ms(MAX_BLOCK_MS + 1)
    for bad in (-1, True, 1.0, "5", None):
        with pytest.raises(ValidationError):
            validate_block_ms(bad)


# -----------------------------------------------------------------------------
# Retry
# -----------------------------------------------------------------------------


def test_retry_policy_defaults_and_normalising() -> None:
    assert RetryPolicy(4, 50, 1000) == DEFAULT_RETRY_POLICY
    with pytest.raises(AttributeError):
        DEFAULT_RETRY_POLICY.max_attempts = 9  # type: ignore[misc]
    p = RetryPolicy(max_attempts=float("inf"), initial_backoff_ms=-5, max_backoff_ms=float("nan"))  # type: ignore[arg-type]
    assert (p.max_attempts, p.initial_backoff_ms, p.max_backoff_ms) == (1, 0.0, 0.0)
    p = RetryPolicy(initial_backoff_ms=100, max_backoff_ms=10)
    assert p.max_backoff_ms == 100


def test_backoff_delays_are_bounded_and_doubling() -> None:
    random.seed(1)
    policy = RetryPolicy(max_attempts=8, initial_backoff_ms=50, max_backoff_ms=300)
    ceilings = [0.05, 0.1, 0.2, 0.3, 0.3, 0.3, 0.3]
    for _ in range(200):
        delays = list(backoff_delays(policy))
        assert len(delays) == 7
        assert all(0.0 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    assert list(backoff_delays(RetryPolicy(max_attempts=1))) == []
    assert list(backoff_delays(RetryPolicy(max_attempts=0))) == []
    b = Backoff(0.1, 0.35)
    seen = []
    for _ in range(4):
        seen.append(b.ceiling)
        b.next()
    assert seen == [0.1, 0.2, 0.35, 0.35]
    b.reset()
    assert b.ceiling == 0.1


def test_is_refused_unrun() -> None:
    assert is_refused_unrun(server_error(StatusCode.OVERLOADED, Reason.SHARD_BUSY, "", Ran.NO))
    assert is_refused_unrun(server_error(StatusCode.UNAVAILABLE, Reason.LEADER_UNKNOWN, ""))
    assert not is_refused_unrun(server_error(StatusCode.OVERLOADED, Reason.SHARD_BUSY, "", Ran.YES))
    assert not is_refused_unrun(OverloadedError())  # ran unknown
    assert not is_refused_unrun(server_error(StatusCode.CONFLICT, Reason.STALE_REPORT, ""))
    assert not is_refused_unrun(ValueError())


async def test_retry_refused_resends_only_unrun_refusals() -> None:
    policy = RetryPolicy(max_attempts=3, initial_backoff_ms=1, max_backoff_ms=1)
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise server_error(StatusCode.OVERLOADED, Reason.SHARD_BUSY, "busy")
        return "ok"

    assert await retry_refused(flaky, policy) == "ok"
    assert calls == 3

    calls = 0

    async def always_busy() -> str:
        nonlocal calls
        calls += 1
        raise server_error(StatusCode.UNAVAILABLE, Reason.LEADER_UNKNOWN, "down")

    with pytest.raises(UnavailableError):
        await retry_refused(always_busy, policy)
    assert calls == 3

    calls = 0

    async def conflict() -> str:
        nonlocal calls
        calls += 1
        raise server_error(StatusCode.CONFLICT, Reason.STALE_REPORT, "stale")

    with pytest.raises(ConflictError):
        await retry_refused(conflict, policy)
    assert calls == 1


def test_worker_backoff_bounds() -> None:
    random.seed(2)
    for attempt, ceiling in [(0, 0.1), (1, 0.2), (2, 0.4), (5, 3.2), (6, 5.0), (500, 5.0)]:
        waits = [worker_backoff(attempt) for _ in range(200)]
        assert all(0.0 <= w <= ceiling for w in waits)
        assert max(waits) > ceiling / 2


def test_empty_poll_backoff_sequence() -> None:
    pacer = EmptyPollBackoff(block_ms=30_000)
    early = 0.01
    pauses = [pacer.next_pause(early) for _ in range(9)]
    assert pauses == [0.0, 0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    # A poll that waited long enough is not early, and ends the streak.
    assert pacer.next_pause(0.25) == 0.0
    assert pacer.next_pause(early) == 0.0
    assert pacer.next_pause(early) == 0.05
    # A non-empty poll ends the streak too.
    pacer.reset()
    assert pacer.next_pause(early) == 0.0
    assert pacer.next_pause(early) == 0.05
    for _ in range(10_000):  # a very long streak stays capped
        pacer.next_pause(early)
    assert pacer.next_pause(early) == 1.0


def test_empty_poll_backoff_early_threshold_follows_block_ms() -> None:
    pacer = EmptyPollBackoff(block_ms=100)  # early below min(0.25, 0.05) = 0.05 s
    assert [pacer.next_pause(0.04) for _ in range(2)] == [0.0, 0.05]
    assert pacer.next_pause(0.05) == 0.0  # not early
    assert [pacer.next_pause(0.04) for _ in range(2)] == [0.0, 0.05]


async def loop_turns(n: int) -> None:
    """Give the event loop ``n`` turns (no timer is waited for)."""
    for _ in range(n):
        await asyncio.sleep(0)


async def test_empty_poll_backoff_waits_and_stop_cuts_it_short(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[float] = []

    async def recorded(event: asyncio.Event, seconds: float) -> bool:
        asked.append(seconds)
        return await sleep_unless_stopped(event, seconds)

    monkeypatch.setattr(retry_module, "sleep_unless_stopped", recorded)
    stop = asyncio.Event()
    pacer = EmptyPollBackoff(block_ms=30_000, stop=stop)
    await pacer.empty(0.0)  # first early: no pause
    await pacer.empty(0.0)  # 50 ms
    assert asked == [0.05]
    for _ in range(5):
        pacer.next_pause(0.0)  # the next pause is 1 s
    pause = asyncio.create_task(pacer.empty(0.0))
    await loop_turns(10)
    assert asked == [0.05, 1.0] and not pause.done()
    stop.set()
    await loop_turns(10)  # woken by the event: no timer needs to fire
    assert pause.done()
    assert await sleep_unless_stopped(stop, 10.0) is True
