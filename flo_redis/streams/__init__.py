"""flo's ``flo.streams`` path: ``client.stream`` and its consumer groups."""

from flo_redis.streams.dead_letters import DeadLetter, StreamDeadLetterOptions
from flo_redis.streams.groups import StreamGroupSettings
from flo_redis.streams.operations import StreamOperations, reap_target

__all__ = [
    "DeadLetter",
    "StreamDeadLetterOptions",
    "StreamGroupSettings",
    "StreamOperations",
    "reap_target",
]
