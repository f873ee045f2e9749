"""An id flo-redis never handed out, of any shape, is answered as flo answers an unknown
id: ``NotFoundError`` (status NOT_FOUND, nothing run). Only what flo itself checks on the
client stays a ``ValidationError``: a run id that is not a str, or one over 64 KiB."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from flo_redis import (
    FloClient,
    KeyTooLargeError,
    NotFoundError,
    Ran,
    Reason,
    StatusCode,
    ValidationError,
)

UNKNOWN_RUN_IDS = [
    "act-0-0",  # flo's own shape
    "job:999",  # well formed, never created
    "never-registered:1",
    "no-colon",
    "job:abc",
    "job:-1",
    "job:1.5",
    "job:",
    ":5",
    "",
    "bad{tag}:1",
    "ctl\x01:1",
    "x" * 300 + ":1",  # longer than any action name
]

Lookup = Callable[[FloClient, str], Awaitable[object]]

LOOKUPS: dict[str, Lookup] = {
    "status": lambda c, run_id: c.action.status(run_id),
    "requeue": lambda c, run_id: c.action.requeue(run_id),
    "touch": lambda c, run_id: c.worker.touch("w1", "job", run_id),
    "complete": lambda c, run_id: c.worker.complete("w1", "job", run_id, b"out"),
    "fail": lambda c, run_id: c.worker.fail("w1", "job", run_id, "boom"),
}


@pytest.fixture
async def ready(client: FloClient) -> FloClient:
    await client.action.register("job")
    await client.worker.register("w1", ["job"])
    await client.action.invoke("job", b"x")  # a run of job exists; the ids above never did
    return client


@pytest.mark.parametrize("lookup", list(LOOKUPS), ids=list(LOOKUPS))
@pytest.mark.parametrize("run_id", UNKNOWN_RUN_IDS, ids=[repr(r)[:20] for r in UNKNOWN_RUN_IDS])
async def test_an_unknown_run_id_of_any_shape_is_not_found(
    ready: FloClient, lookup: str, run_id: str
) -> None:
    with pytest.raises(NotFoundError) as info:
        await LOOKUPS[lookup](ready, run_id)
    error = info.value
    assert (error.status_code, error.reason, error.ran) == (
        StatusCode.NOT_FOUND,
        Reason.NOT_FOUND,
        Ran.NO,
    )
    assert "not found" in str(error) or "not registered" in str(error)


async def test_a_run_of_another_action_is_not_found_for_this_one(ready: FloClient) -> None:
    await ready.action.register("other")
    other = (await ready.action.invoke("other", b"x")).run_id
    with pytest.raises(NotFoundError):
        await ready.worker.complete("w1", "job", other, b"out")


@pytest.mark.parametrize("lookup", list(LOOKUPS), ids=list(LOOKUPS))
async def test_what_flo_checks_itself_stays_a_validation_error(
    ready: FloClient, lookup: str
) -> None:
    with pytest.raises(ValidationError):
        await LOOKUPS[lookup](ready, 17)  # type: ignore[arg-type]
    with pytest.raises(KeyTooLargeError):
        await LOOKUPS[lookup](ready, "job:" + "1" * 70_000)
