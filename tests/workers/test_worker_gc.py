"""An ActionWorker's hold on the garbage collector's young generation (``tune_gc``):
raised while it runs, put back when it stops, left alone when switched off or changed
by someone else."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from polling import eventually, registered, running

from flo_redis import ActionContext, ActionWorker, FloClient, RunStatus
from flo_redis.worker.gc import MAX_YOUNG_THRESHOLD, young_threshold


@pytest.fixture(autouse=True)
def _thresholds() -> Iterator[None]:
    """Each test starts from Python's defaults and leaves the process as it found it."""
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def new_worker(client: FloClient, concurrency: int = 10, **kwargs: bool) -> ActionWorker:
    worker = client.new_action_worker(block_ms=500, concurrency=concurrency, **kwargs)

    @worker.action("noop")
    async def noop(ctx: ActionContext) -> bytes:
        return b""

    return worker


async def serving(worker: ActionWorker) -> None:
    """Serving once registered and a first run was completed."""
    client: FloClient = worker._parent  # type: ignore[assignment]
    await registered(worker)
    run = await client.action.invoke("noop", b"")
    await eventually(
        lambda: client.action.status(run.run_id), lambda s: s.status == RunStatus.COMPLETED
    )


def test_the_threshold_asked_for_grows_with_concurrency_up_to_a_bound() -> None:
    assert young_threshold(1) == 100
    assert young_threshold(100) == 10_000
    assert young_threshold(10**6) == MAX_YOUNG_THRESHOLD


async def test_a_running_worker_raises_the_young_threshold_and_puts_it_back(
    client: FloClient,
) -> None:
    async with running(new_worker(client, concurrency=50), ready=serving):
        assert gc.get_threshold() == (5000, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


async def test_tune_gc_false_leaves_the_collector_alone(client: FloClient) -> None:
    worker = new_worker(client, concurrency=50, tune_gc=False)
    assert worker.config.tune_gc is False
    async with running(worker, ready=serving):
        assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


async def test_a_higher_threshold_is_never_lowered(client: FloClient) -> None:
    gc.set_threshold(50_000, 10, 10)
    async with running(new_worker(client, concurrency=50), ready=serving):
        assert gc.get_threshold() == (50_000, 10, 10)
    assert gc.get_threshold() == (50_000, 10, 10)


async def test_a_collector_switched_off_stays_off(client: FloClient) -> None:
    gc.set_threshold(0, 10, 10)
    async with running(new_worker(client, concurrency=50), ready=serving):
        assert gc.get_threshold()[0] == 0
    assert gc.get_threshold()[0] == 0


async def test_workers_in_one_process_share_the_largest_and_the_last_puts_it_back(
    client: FloClient,
) -> None:
    small, large = new_worker(client, concurrency=20), new_worker(client, concurrency=60)
    async with running(small, ready=serving):
        assert gc.get_threshold()[0] == 2000
        async with running(large, ready=serving):
            assert gc.get_threshold()[0] == 6000
        assert gc.get_threshold()[0] == 2000
    assert gc.get_threshold() == (700, 10, 10)


async def test_a_change_made_while_a_worker_runs_is_kept(client: FloClient) -> None:
    async with running(new_worker(client, concurrency=50), ready=serving):
        gc.set_threshold(1234, 10, 10)
    assert gc.get_threshold() == (1234, 10, 10)
