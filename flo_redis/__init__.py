"""flo-redis: Flo-style action and stream workers and queues on an existing Redis.

Change ``from flo import FloClient`` to ``from flo_redis import FloClient`` and point the
endpoint at your Redis (``redis://localhost:6379``); the worker API is flo-python 0.1.2's.
"""

from flo_redis import errors, types
from flo_redis.actions.finding import FoundRun, FoundRuns, RunDetails
from flo_redis.actions.inspect import ActionCounts, BulkResult, RunPage, RunState
from flo_redis.actions.operations import ActionOperations
from flo_redis.actions.results import JsonSerializer, ResultEncodingError, ResultSerializer
from flo_redis.actions.workers import WorkerOperations
from flo_redis.client import FloClient
from flo_redis.durability import Durability
from flo_redis.errors import *  # noqa: F403  (the error tree: errors.__all__)
from flo_redis.quarantine import (
    ActionQuarantine,
    GroupQuarantine,
    QuarantinedRecord,
    QuarantineOperations,
    QuarantinePage,
    QueueQuarantine,
    WorkerQuarantine,
)
from flo_redis.queue.operations import QueueOperations
from flo_redis.retry import DEFAULT_RETRY_POLICY, RetryPolicy
from flo_redis.streams import (
    DeadLetter,
    StreamDeadLetterOptions,
    StreamGroupSettings,
    StreamOperations,
)
from flo_redis.types import *  # noqa: F403  (the API's types: types.__all__)
from flo_redis.worker.action_options import ActionWorkerOptions, ProcessExecutor
from flo_redis.worker.action_worker import ActionWorker
from flo_redis.worker.child import HandlerInterrupted
from flo_redis.worker.child_link import HandlerProcessError, HandlerProcessLost
from flo_redis.worker.context import ActionContext, ActionResult, RateLimited
from flo_redis.worker.stream_context import StreamContext, StreamRecordHandler
from flo_redis.worker.stream_worker import StreamWorker, StreamWorkerOptions

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_RETRY_POLICY",
    "ActionContext",
    "ActionCounts",
    "ActionOperations",
    "ActionQuarantine",
    "ActionResult",
    "ActionWorker",
    "ActionWorkerOptions",
    "BulkResult",
    "DeadLetter",
    "Durability",
    "FloClient",
    "FoundRun",
    "FoundRuns",
    "GroupQuarantine",
    "HandlerInterrupted",
    "HandlerProcessError",
    "HandlerProcessLost",
    "JsonSerializer",
    "ProcessExecutor",
    "QuarantineOperations",
    "QuarantinePage",
    "QuarantinedRecord",
    "QueueOperations",
    "QueueQuarantine",
    "RateLimited",
    "ResultEncodingError",
    "ResultSerializer",
    "RetryPolicy",
    "RunDetails",
    "RunPage",
    "RunState",
    "StreamContext",
    "StreamDeadLetterOptions",
    "StreamGroupSettings",
    "StreamOperations",
    "StreamRecordHandler",
    "StreamWorker",
    "StreamWorkerOptions",
    "WorkerOperations",
    "WorkerQuarantine",
]
__all__ += errors.__all__
__all__ += types.__all__
