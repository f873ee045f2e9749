"""flo's ``flo.actions`` path: ``client.action`` and ``client.worker``."""

from flo_redis.actions.operations import (
    ActionOperations,
    Claimed,
    CompleteItem,
    WorkerOperations,
)

__all__ = [
    "ActionOperations",
    "Claimed",
    "CompleteItem",
    "WorkerOperations",
]
