"""flo's ``flo.queue`` path: ``client.queue``."""

from flo_redis.queue.operations import (
    QueueOperations,
)

__all__ = [
    "QueueOperations",
]
