"""flo-redis: Flo-style action and stream workers and queues on an existing Redis.

Change ``from flo import FloClient`` to ``from flo_redis import FloClient`` and point the
endpoint at your Redis (``redis://localhost:6379``); the worker API is flo-python 0.1.2's.
"""

from . import errors, types
from .action_ops import ActionCounts, BulkResult, RunPage, RunState
from .actions import ActionOperations
from .client import FloClient
from .errors import *  # noqa: F403  (the error tree: errors.__all__)
from .quarantine import (
    ActionQuarantine,
    GroupQuarantine,
    QuarantinedRecord,
    QuarantineOperations,
    QuarantinePage,
    QueueQuarantine,
    WorkerQuarantine,
)
from .queue import QueueOperations
from .results import JsonSerializer, ResultEncodingError, ResultSerializer
from .retry import DEFAULT_RETRY_POLICY, RetryPolicy
from .streams import DeadLetter, StreamDeadLetterOptions, StreamGroupSettings, StreamOperations
from .types import *  # noqa: F403  (the API's types: types.__all__)
from .worker import (
    ActionContext,
    ActionResult,
    ActionWorker,
    ActionWorkerOptions,
    StreamContext,
    StreamRecordHandler,
    StreamWorker,
    StreamWorkerOptions,
)
from .worker_ops import WorkerOperations

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
    "FloClient",
    "GroupQuarantine",
    "JsonSerializer",
    "QuarantineOperations",
    "QuarantinePage",
    "QuarantinedRecord",
    "QueueOperations",
    "QueueQuarantine",
    "ResultEncodingError",
    "ResultSerializer",
    "RetryPolicy",
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
