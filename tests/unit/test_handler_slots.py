"""Handler slots: fast handlers run one after another in one slot, a handler that waits
never holds up the items behind it, and each item runs in a context of its own."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
from polling import eventually

from flo_redis.worker.slots import INLINE, INLINE_S, HandlerSlots

_SEEN: contextvars.ContextVar[int | None] = contextvars.ContextVar("seen", default=None)


@contextlib.contextmanager
def _bound(value: int) -> Iterator[None]:
    token = _SEEN.set(value)
    try:
        yield
    finally:
        _SEEN.reset(token)


def make_slots(
    size: int,
    run: Callable[[int, asyncio.Task[Any]], Coroutine[Any, Any, None]],
    abandoned: list[int] | None = None,
) -> HandlerSlots[int]:
    return HandlerSlots(
        size,
        run,
        name="test-slot",
        track=lambda task: None,
        abandon=(abandoned.append if abandoned is not None else lambda item: None),
        log=logging.getLogger("test-slots"),
    )


def put(slots: HandlerSlots[int], items: range) -> None:
    slots.queue.extend(items)
    slots.wake()


async def test_each_item_is_told_the_task_it_runs_in() -> None:
    told: list[bool] = []
    done = asyncio.Event()

    async def run(item: int, task: asyncio.Task[Any]) -> None:
        told.append(task is asyncio.current_task())
        if item % 2:
            await asyncio.sleep(0)  # waits: the rest go on in other slots
        told.append(task is asyncio.current_task())
        if len(told) == 40:
            done.set()

    slots = HandlerSlots(
        4,
        run,
        name="test-slot",
        track=lambda task: None,
        abandon=lambda item: None,
        log=logging.getLogger("test-slots"),
    )
    put(slots, range(20))
    await asyncio.wait_for(done.wait(), 5)
    assert told == [True] * 40
    slots.close()


async def test_items_that_never_wait_run_in_order_in_one_slot() -> None:
    ran: list[int] = []
    started: list[asyncio.Task[None]] = []
    done = asyncio.Event()

    async def run(item: int, _slot: asyncio.Task[Any]) -> None:
        ran.append(item)
        if item == 199:
            done.set()

    slots = make_slots(10, run)
    slots._track = started.append
    put(slots, range(200))
    await asyncio.wait_for(done.wait(), 5)
    assert ran == list(range(200))
    assert len(started) == 1  # no slot was woken for items nobody waited on
    slots.close()
    await asyncio.gather(*slots.tasks)


async def test_what_an_item_leaves_set_in_its_context_is_gone_for_the_next() -> None:
    """An item that leaves a context variable set ends its slot, and the next item runs
    in a new one, as it was; an item that resets what it set keeps its slot."""
    leaked: list[int | None] = []
    started: list[asyncio.Task[None]] = []

    async def run(item: int, _slot: asyncio.Task[Any]) -> None:
        leaked.append(_SEEN.get())
        token = _SEEN.set(item)
        if item % 2:
            _SEEN.reset(token)  # odd items leave the context as they found it

    slots = make_slots(10, run)
    slots._track = started.append
    with _bound(-1):  # what the context held when the slots started is kept
        slots.reset()
    put(slots, range(200))
    await eventually(lambda: len(leaked) == 200, interval=0)
    assert leaked == [-1] * 200  # what one item set is gone for the next
    assert len(started) == 101  # the first slot, and one after each even item
    slots.close()
    await asyncio.gather(*slots.tasks)


async def test_items_that_wait_and_leave_their_context_changed_all_run() -> None:
    """Every slot busy, each item ending its slot: the items queued behind still run."""
    ran: list[int] = []

    async def run(item: int, _slot: asyncio.Task[Any]) -> None:
        await asyncio.sleep(0)
        _SEEN.set(item)
        ran.append(item)

    slots = make_slots(2, run)
    put(slots, range(20))
    await eventually(lambda: len(ran) == 20, interval=0)
    assert sorted(ran) == list(range(20))
    slots.close()
    await asyncio.gather(*slots.tasks)


async def test_the_loop_gets_a_turn_while_fast_items_run() -> None:
    ran: list[int] = []
    when_timer_ran: list[int] = []

    async def run(item: int, _slot: asyncio.Task[Any]) -> None:
        ran.append(item)

    slots = make_slots(4, run)
    put(slots, range(10 * INLINE))
    asyncio.get_running_loop().call_soon(lambda: when_timer_ran.append(len(ran)))
    await eventually(lambda: len(ran) == 10 * INLINE, interval=0)
    assert when_timer_ran and when_timer_ran[0] <= INLINE
    slots.close()
    await asyncio.gather(*slots.tasks)


async def test_handlers_busy_with_the_cpu_give_the_loop_a_turn_within_inline_s() -> None:
    """Handlers that never wait but each hold the CPU for INLINE_S / 2 or more: the loop
    gets a turn after two of them at most, not after INLINE."""
    ran: list[int] = []
    when_timer_ran: list[int] = []

    async def run(item: int, _slot: asyncio.Task[Any]) -> None:
        end = time.monotonic() + INLINE_S / 2  # on the loop's clock
        while time.monotonic() < end:
            pass  # busy with the CPU, the loop not given a turn
        ran.append(item)

    slots = make_slots(4, run)
    put(slots, range(12))
    asyncio.get_running_loop().call_soon(lambda: when_timer_ran.append(len(ran)))
    await eventually(lambda: len(ran) == 12, interval=0)
    assert when_timer_ran and when_timer_ran[0] <= 2
    slots.close()
    await asyncio.gather(*slots.tasks)


async def test_an_item_that_waits_never_holds_up_the_ones_behind_it() -> None:
    release = asyncio.Event()
    started: list[int] = []
    running = peak = 0
    finished: list[int] = []

    async def run(item: int, _slot: asyncio.Task[Any]) -> None:
        nonlocal running, peak
        started.append(item)
        running += 1
        peak = max(peak, running)
        if item % 2 == 0:
            await release.wait()  # the even ones wait
        running -= 1
        finished.append(item)

    slots = make_slots(5, run)
    put(slots, range(20))
    for _ in range(50):
        await asyncio.sleep(0)
    # Five slots: every odd item behind a waiting one went through; five even ones wait.
    assert sorted(i for i in started if i % 2 == 0) == [0, 2, 4, 6, 8]
    assert all(i in finished for i in range(1, 9, 2))
    assert peak == 5 and running == 5
    release.set()
    await eventually(lambda: len(finished) == 20, interval=0)
    assert peak == 5  # never more than the slots at once
    slots.close()
    await asyncio.gather(*slots.tasks)


async def test_an_item_that_waits_keeps_its_own_context_through_every_step() -> None:
    leaked: list[int | None] = []
    kept: list[bool] = []

    async def run(item: int, _slot: asyncio.Task[Any]) -> None:
        leaked.append(_SEEN.get())
        _SEEN.set(item)
        for _ in range(item % 3):  # none, one or two waits, while others run between
            await asyncio.sleep(0)
            kept.append(_SEEN.get() == item)
        _SEEN.set(-item)

    slots = make_slots(3, run)
    put(slots, range(30))
    await eventually(lambda: len(leaked) == 30 and len(kept) == 30, interval=0)
    assert kept == [True] * 30  # each step of an item saw what that item set
    assert leaked == [None] * 30  # and nothing it set reached another item
    slots.close()
    await asyncio.gather(*slots.tasks)


async def test_an_item_that_fails_is_logged_and_its_slot_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[int] = []

    async def run(item: int, _slot: asyncio.Task[Any]) -> None:
        if item == 1:
            raise ValueError("failed at once")
        if item == 3:
            await asyncio.sleep(0)
            raise ValueError("failed after a wait")
        ran.append(item)

    slots = make_slots(1, run)
    with caplog.at_level(logging.ERROR, logger="test-slots"):
        put(slots, range(6))
        await eventually(lambda: len(ran) == 4, interval=0)
    assert ran == [0, 2, 4, 5]
    failures = [r for r in caplog.records if r.message == "test-slot: an item failed"]
    assert [str(r.exc_info[1]) for r in failures if r.exc_info] == [
        "failed at once",
        "failed after a wait",
    ]
    slots.close()
    await asyncio.gather(*slots.tasks)


def gated_slots() -> tuple[HandlerSlots[int], asyncio.Event, list[int], list[int]]:
    """Two slots whose items wait for the gate; items 0 to 5 put in: the slots, the gate,
    the items run and those abandoned."""
    gate = asyncio.Event()
    ran: list[int] = []
    abandoned: list[int] = []

    async def run(item: int, _slot: asyncio.Task[Any]) -> None:
        await gate.wait()
        ran.append(item)

    slots = make_slots(2, run, abandoned)
    put(slots, range(6))
    return slots, gate, ran, abandoned


async def test_cancelled_slots_hand_back_what_is_queued_and_work_again_after_reset() -> None:
    slots, gate, ran, abandoned = gated_slots()
    for _ in range(10):
        await asyncio.sleep(0)
    for task in list(slots.tasks):
        task.cancel()
    await asyncio.gather(*slots.tasks, return_exceptions=True)
    assert ran == [] and sorted(abandoned) == [2, 3, 4, 5]

    slots.reset()
    gate.set()
    put(slots, range(10, 14))
    await eventually(lambda: len(ran) == 4, interval=0)
    assert sorted(ran) == [10, 11, 12, 13]
    slots.close()
    await asyncio.gather(*slots.tasks)


async def test_halt_hands_back_what_is_queued_and_slots_end_after_their_item() -> None:
    slots, gate, ran, abandoned = gated_slots()
    await eventually(lambda: len(slots.queue) == 4, interval=0)  # two items in their handler
    slots.halt()
    assert sorted(abandoned) == [2, 3, 4, 5] and not slots.queue
    gate.set()
    await asyncio.gather(*slots.tasks)
    assert sorted(ran) == [0, 1]  # the items under way ran to their end, no others


async def test_taken_is_told_of_each_item_as_a_slot_takes_it() -> None:
    left_when_taken: list[int] = []
    ran: list[int] = []

    async def run(item: int, _slot: asyncio.Task[Any]) -> None:
        ran.append(item)

    slots: HandlerSlots[int] = HandlerSlots(
        3,
        run,
        name="test-slot",
        track=lambda task: None,
        abandon=lambda item: None,
        log=logging.getLogger("test-slots"),
        taken=lambda: left_when_taken.append(len(slots.queue)),
    )
    put(slots, range(5))
    await eventually(lambda: len(ran) == 5, interval=0)
    assert left_when_taken == [4, 3, 2, 1, 0]
    slots.close()
    await asyncio.gather(*slots.tasks)
