"""The garbage collector's young generation while ActionWorkers run (``tune_gc``).

CPython starts a young-generation pass once the objects it tracks (containers: coroutines,
futures, contexts, most class instances) that were made since the last pass outnumber
those freed by its first threshold, 700 by default, and each pass moves what is still
alive into the older generations, whose passes walk more and more of the process. A
worker makes those objects in bursts: a batch of claimed runs starts its handlers in one
turn of the event loop, each keeping alive its context, frames and whatever its handler's
client makes until it returns, so at concurrency 100 several thousand live objects come
at once. With the default threshold that means a pass every few runs, each of which
finds nearly everything alive and moves it on, and every few thousand runs a full pass.

So while an :class:`~flo_redis.ActionWorker` with ``tune_gc`` (the default) runs, the
first threshold is at least ``concurrency * 100`` (at most 100,000): what the runs in
flight keep alive fits in the young generation, most of it is freed before a pass comes,
and garbage with cycles is still collected, a little later. The threshold is never
lowered, a collector switched off (threshold 0) is left so, and the value found before
the first such worker started is put back when the last one stops, unless something
else changed it meanwhile (then that change stays). Several workers in one process
share this: the largest threshold any of them wants is set.
"""

from __future__ import annotations

import gc
import threading

# Live tracked objects a run in flight is allowed for (its context, frames, report and
# what a handler's Redis client makes), and the most the threshold is raised to.
OBJECTS_PER_RUN = 100
MAX_YOUNG_THRESHOLD = 100_000

_lock = threading.Lock()
_wanted: list[int] = []  # the threshold each running worker asked for
_found: tuple[int, int, int] | None = None  # the thresholds before the first of them
_set = 0  # the first threshold as last set here


def young_threshold(concurrency: int) -> int:
    """The first threshold a worker running ``concurrency`` handlers asks for."""
    return min(MAX_YOUNG_THRESHOLD, max(1, concurrency) * OBJECTS_PER_RUN)


class YoungGeneration:
    """One worker's hold on the young generation's size: :meth:`hold` when it starts,
    :meth:`release` when it stops (once each)."""

    __slots__ = ("_held", "_want")

    def __init__(self, concurrency: int) -> None:
        self._want = young_threshold(concurrency)
        self._held = False

    def hold(self) -> None:
        global _found
        with _lock:
            if self._held:
                return
            self._held = True
            current = gc.get_threshold()
            if not _wanted or current[0] != _set:
                _found = current  # first holder, or changed since: the value to restore
            _wanted.append(self._want)
            _apply()

    def release(self) -> None:
        global _found
        with _lock:
            if not self._held:
                return
            self._held = False
            _wanted.remove(self._want)
            current = gc.get_threshold()
            if _found is None or current[0] != _set:
                # Changed by someone else meanwhile: theirs stays.
                _found = current if _wanted else None
                return
            if _wanted:
                _apply()
            else:
                gc.set_threshold(_found[0], *current[1:])
                _found = None


def _apply() -> None:
    global _set
    assert _found is not None
    found = _found[0]
    want = found if found == 0 else max(found, *_wanted)
    current = gc.get_threshold()
    if current[0] != want:
        gc.set_threshold(want, *current[1:])
    _set = want


__all__ = ["MAX_YOUNG_THRESHOLD", "OBJECTS_PER_RUN", "YoungGeneration", "young_threshold"]
