"""flo's ``flo.worker`` path: ``ActionWorker`` and ``StreamWorker``."""

from flo_redis.errors import BlockTooLongError
from flo_redis.worker.action_options import ActionWorkerOptions, ProcessExecutor
from flo_redis.worker.action_worker import ActionWorker
from flo_redis.worker.child import HandlerInterrupted
from flo_redis.worker.child_link import HandlerProcessError, HandlerProcessLost
from flo_redis.worker.context import ActionContext, ActionResult
from flo_redis.worker.stream_context import StreamContext, StreamHandler, StreamRecordHandler
from flo_redis.worker.stream_worker import StreamWorker, StreamWorkerOptions

__all__ = [
    "ActionContext",
    "ActionResult",
    "ActionWorker",
    "ActionWorkerOptions",
    "BlockTooLongError",
    "HandlerInterrupted",
    "HandlerProcessError",
    "HandlerProcessLost",
    "ProcessExecutor",
    "StreamContext",
    "StreamHandler",
    "StreamRecordHandler",
    "StreamWorker",
    "StreamWorkerOptions",
]
