"""An :class:`~flo_redis.worker.ActionWorker`'s settings, checked when made and again
when the worker starts."""

from __future__ import annotations

from dataclasses import dataclass

from flo_redis._wire.checks import check_count, check_seconds
from flo_redis.durability import Durability, worker_durability
from flo_redis.errors import ValidationError
from flo_redis.types import DEFAULT_WORKER_BLOCK_MS
from flo_redis.worker.lifecycle import worker_block_ms

#: How long a run handed to an idle worker waits for its accept by default, and the
#: bounds of ``offer_window_ms`` (a park lasts at most a minute).
DEFAULT_OFFER_WINDOW_MS = 1000
MIN_OFFER_WINDOW_MS = 100
MAX_OFFER_WINDOW_MS = 60_000


@dataclass
class ActionWorkerOptions:
    """An ActionWorker's settings. ``block_ms`` 0/None means 30000; above 300000 is
    refused with :class:`BlockTooLongError`. ``tune_gc``: while the worker runs, the
    garbage collector's young generation holds what its runs in flight keep alive
    (``gc.set_threshold``, first value at least ``concurrency * 100``; put back when it
    stops; :mod:`flo_redis.worker.gc`); False leaves the process's collector alone.
    ``offer_window_ms`` (100 to 60000): a run handed to the idle worker must be accepted
    within this long (the worker accepts it as its handler starts), or it goes back to
    the head of its queue unspent, for a live worker (a frozen process, a half-open
    connection; ``lua/README.md``, "Hand-off"). ``durability``: the level of the worker's
    reports (completes and fails; :mod:`flo_redis.durability`), None: its client's."""

    worker_id: str = ""
    concurrency: int = 10
    action_timeout: float = 300.0
    block_ms: int = DEFAULT_WORKER_BLOCK_MS
    auto_touch: bool = False
    tune_gc: bool = True
    offer_window_ms: int = DEFAULT_OFFER_WINDOW_MS
    durability: Durability | None = None

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Refuse a bad setting (:class:`ValidationError` naming it): when made, and again
        when the worker starts, so a setting changed in between is checked where used."""
        self.block_ms = worker_block_ms(self.block_ms)
        self.durability = worker_durability(self.durability)
        check_count("concurrency", self.concurrency, 1)
        check_seconds("action_timeout", self.action_timeout)
        check_count(
            "offer_window_ms",
            self.offer_window_ms,
            MIN_OFFER_WINDOW_MS,
            MAX_OFFER_WINDOW_MS,
            fix="it needs only to outlast a round trip to Redis; 1000, the default, suits most",
        )
        for flag in ("auto_touch", "tune_gc"):
            if not isinstance(getattr(self, flag), bool):
                raise ValidationError(f"{flag} must be a bool, got {getattr(self, flag)!r}")


__all__ = ["DEFAULT_OFFER_WINDOW_MS", "ActionWorkerOptions"]
