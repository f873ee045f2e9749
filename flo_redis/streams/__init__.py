"""flo's ``flo.streams`` path: ``client.stream`` and its consumer groups."""

from flo_redis.streams.operations import (
    DeadLetter,
    StreamDeadLetterOptions,
    StreamGroupSettings,
    StreamOperations,
    reap_target,
)

__all__ = [
    "DeadLetter",
    "StreamDeadLetterOptions",
    "StreamGroupSettings",
    "StreamOperations",
    "reap_target",
]
