"""flo's ``flo.worker`` path: ``ActionWorker`` and ``StreamWorker``."""

from flo_redis.worker.action_worker import (
    ActionContext,
    ActionResult,
    ActionWorker,
    ActionWorkerOptions,
    BlockTooLongError,
)
from flo_redis.worker.stream_worker import (
    StreamContext,
    StreamHandler,
    StreamRecordHandler,
    StreamWorker,
    StreamWorkerOptions,
)

__all__ = [
    "ActionContext",
    "ActionResult",
    "ActionWorker",
    "ActionWorkerOptions",
    "BlockTooLongError",
    "StreamContext",
    "StreamHandler",
    "StreamRecordHandler",
    "StreamWorker",
    "StreamWorkerOptions",
]
