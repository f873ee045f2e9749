"""``client.worker``'s operations, importable from here as before: the worker registry
and polling live in :mod:`flo_redis.worker_ops`, reporting runs in
:mod:`flo_redis.run_reports`."""

from ._replies import Claimed, ClaimReply
from .run_reports import COMPLETE_BATCH, MAX_TOUCH_EXTEND_MS, CompleteItem
from .worker_ops import LABEL_SCAN, MAX_CURSOR_BYTES, WorkerOperations

__all__ = [
    "COMPLETE_BATCH",
    "LABEL_SCAN",
    "MAX_CURSOR_BYTES",
    "MAX_TOUCH_EXTEND_MS",
    "ClaimReply",
    "Claimed",
    "CompleteItem",
    "WorkerOperations",
]
