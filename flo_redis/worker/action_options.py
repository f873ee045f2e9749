"""An :class:`~flo_redis.worker.ActionWorker`'s settings, checked when made and again
when the worker starts."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from flo_redis._wire.checks import check_count, check_seconds
from flo_redis.durability import Durability
from flo_redis.errors import ValidationError
from flo_redis.types import DEFAULT_WORKER_BLOCK_MS
from flo_redis.worker.lifecycle import CheckedConfig

#: How long a run handed to an idle worker waits for its accept by default, and the
#: bounds of ``offer_window_ms`` (a park lasts at most a minute).
DEFAULT_OFFER_WINDOW_MS = 1000
MIN_OFFER_WINDOW_MS = 100
MAX_OFFER_WINDOW_MS = 60_000


#: The most children one ProcessExecutor starts, and the highest memory limit (1 TiB).
MAX_CHILDREN = 1024
MAX_MEMORY_LIMIT_MB = 1 << 20


@dataclass(frozen=True)
class ProcessExecutor:
    """Run an :class:`ActionWorker`'s plain ``def`` handlers in ``size`` pre-started child
    processes (None: the worker's concurrency), one run at a time each, instead of its
    threads: a time limit, a cancel or a lost lease stops them for sure
    (:class:`~flo_redis.worker.HandlerInterrupted` raised in the handler, then the child
    killed ``grace_s`` later if it goes on), a crash fails only its own run, and their
    CPU never holds up the worker's event loop. A child is replaced after
    ``max_runs_per_child`` runs (0: never) and when it uses more than
    ``memory_limit_mb`` of resident memory (0: no limit; its run fails saying so). A
    child must answer within ``start_timeout_s`` of its start. Handlers must be
    module-level functions (a child imports them by name); ``async def`` handlers stay
    on the worker's event loop. Linux and other POSIX systems; the memory limit reads
    ``/proc``, so Linux only."""

    size: int | None = None
    max_runs_per_child: int = 0
    memory_limit_mb: int = 0
    grace_s: float = 1.0
    start_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.size is not None:
            check_count("ProcessExecutor.size", self.size, 1, MAX_CHILDREN)
        check_count("ProcessExecutor.max_runs_per_child", self.max_runs_per_child, 0)
        check_count("ProcessExecutor.memory_limit_mb", self.memory_limit_mb, 0, MAX_MEMORY_LIMIT_MB)
        check_seconds("ProcessExecutor.grace_s", self.grace_s, 3600.0)
        check_seconds("ProcessExecutor.start_timeout_s", self.start_timeout_s, 3600.0)
        if self.memory_limit_mb and not sys.platform.startswith("linux"):
            raise ValidationError(
                "ProcessExecutor.memory_limit_mb reads each child's memory from /proc, "
                f"which {sys.platform} has not; leave it 0 there"
            )


def check_executor(executor: object) -> None:
    """A worker's ``executor``: a :class:`ProcessExecutor` or None."""
    if executor is not None and not isinstance(executor, ProcessExecutor):
        raise ValidationError(f"executor must be a ProcessExecutor or None, got {executor!r}")


@dataclass
class ActionWorkerOptions(CheckedConfig):
    """An ActionWorker's settings. ``block_ms`` 0/None means 30000; above 300000 is
    refused with :class:`BlockTooLongError`. ``tune_gc``: while the worker runs, the
    garbage collector's young generation holds what its runs in flight keep alive
    (``gc.set_threshold``, first value at least ``concurrency * 100``; put back when it
    stops; :mod:`flo_redis.worker.gc`); False leaves the process's collector alone.
    ``offer_window_ms`` (100 to 60000): a run handed to the idle worker must be accepted
    within this long (the worker accepts it as its handler starts), or it goes back to
    the head of its queue unspent, for a live worker (a frozen process, a half-open
    connection; ``lua/README.md``, "Hand-off"). ``durability``: the level of the worker's
    reports (completes and fails; :mod:`flo_redis.durability`), None: its client's.
    ``executor``: a :class:`ProcessExecutor` runs the worker's plain ``def`` handlers in
    child processes; None runs them in its threads."""

    worker_id: str = ""
    concurrency: int = 10
    action_timeout: float = 300.0
    block_ms: int = DEFAULT_WORKER_BLOCK_MS
    auto_touch: bool = False
    tune_gc: bool = True
    offer_window_ms: int = DEFAULT_OFFER_WINDOW_MS
    durability: Durability | None = None
    executor: ProcessExecutor | None = None

    def check(self) -> None:
        """Refuse a bad setting (:class:`ValidationError` naming it): when made, and again
        when the worker starts, so a setting changed in between is checked where used."""
        super().check()
        check_count("concurrency", self.concurrency, 1)
        check_seconds("action_timeout", self.action_timeout)
        check_count(
            "offer_window_ms",
            self.offer_window_ms,
            MIN_OFFER_WINDOW_MS,
            MAX_OFFER_WINDOW_MS,
            fix="it needs only to outlast a round trip to Redis; 1000, the default, suits most",
        )
        check_executor(self.executor)
        for flag in ("auto_touch", "tune_gc"):
            if not isinstance(getattr(self, flag), bool):
                raise ValidationError(f"{flag} must be a bool, got {getattr(self, flag)!r}")


__all__ = ["DEFAULT_OFFER_WINDOW_MS", "ActionWorkerOptions", "ProcessExecutor", "check_executor"]
