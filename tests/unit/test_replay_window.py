"""What a worker sends again after a break in its hold on Redis: the reports answered in
the window before the break, each key's in one batch, and nothing older or refused."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from flo_redis.errors import ConflictError, NotDurableError, ServerError
from flo_redis.worker.replay import MOST, WINDOW_S, Replay


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _replay(clock: Clock) -> tuple[Replay[str], list[tuple[str, list[str]]]]:
    sent: list[tuple[str, list[str]]] = []

    async def resend(key: str, items: Sequence[str]) -> int:
        sent.append((key, list(items)))
        return len(items)

    return Replay("completes", resend, clock), sent


def test_reports_answered_in_the_window_before_a_break_are_sent_again() -> None:
    clock = Clock()
    replay, sent = _replay(clock)
    replay.answered("a", ["old"], [None])
    clock.now += WINDOW_S + 0.5
    replay.answered("a", ["a1", "a2"], [None, None])
    replay.answered("b", ["b1", "refused"], [None, ConflictError("stale")])
    clock.now += 0.1
    replay.outage_began()
    clock.now += 5  # the outage's length does not matter
    asyncio.run(replay.outage_ended())
    assert sorted(sent) == [("a", ["a1", "a2"]), ("b", ["b1"])]


def test_nothing_is_sent_twice_and_nothing_without_a_break() -> None:
    clock = Clock()
    replay, sent = _replay(clock)
    replay.answered("a", ["a1"], [None])
    asyncio.run(replay.outage_ended())  # no break began: nothing is due
    assert sent == []
    replay.outage_began()
    replay.outage_began()  # told twice: still once
    asyncio.run(replay.outage_ended())
    asyncio.run(replay.outage_ended())
    assert sent == [("a", ["a1"])]


def test_only_the_newest_reports_are_kept() -> None:
    clock = Clock()
    replay, sent = _replay(clock)
    items = [str(n) for n in range(MOST + 5)]
    answers: list[ServerError | None] = [None] * len(items)
    replay.answered("a", items, answers)
    replay.outage_began()
    asyncio.run(replay.outage_ended())
    assert sent == [("a", items[5:])]


def test_a_failed_resend_of_one_key_does_not_stop_the_others() -> None:
    clock = Clock()
    sent: list[str] = []

    async def resend(key: str, items: Sequence[str]) -> int:
        if key == "a":
            raise ConnectionError("lost again")
        sent.append(key)
        return 0

    replay: Replay[str] = Replay("acks", resend, clock)
    replay.answered("a", ["a1"], [None])
    replay.answered("b", ["b1"], [None])
    replay.outage_began()
    asyncio.run(replay.outage_ended())
    assert sent == ["b"]


def test_a_resend_applied_but_not_yet_replicated_is_sent_again_after_another_outage() -> None:
    """After a failover the new primary may have fewer replicas than the level waits for:
    the resend is applied there, and kept, so that a second outage soon after sends it
    once more rather than losing it with a primary that had not passed it on."""
    clock = Clock()
    sent: list[list[str]] = []

    async def resend(key: str, items: Sequence[str]) -> int:
        sent.append(list(items))
        if len(sent) == 1:
            raise NotDurableError(
                "complete reached 1 of 2", operation="complete", wanted=2, reached=1, timeout_ms=1
            )
        return 0

    replay: Replay[str] = Replay("completes", resend, clock)
    replay.answered("a", ["a1"], [None])
    replay.outage_began()
    asyncio.run(replay.outage_ended())
    clock.now += WINDOW_S - 1
    replay.outage_began()
    asyncio.run(replay.outage_ended())
    clock.now += WINDOW_S + 1  # answered long before this one: not sent again
    replay.outage_began()
    asyncio.run(replay.outage_ended())
    assert sent == [["a1"], ["a1"]]
