"""Enums, limits, option and result classes of the action, worker, stream and queue API.

Every class here has the public shape of its namesake in flo-python 0.1.2: the
same field names, order, types and defaults, and the same mutability (all plain,
mutable dataclasses). flo_redis adds a few fields of its own; each is a trailing
keyword field with a default, so code written against flo builds these classes
the same way and gets flo's behaviour.

All option classes take ``namespace: str | None = None``; None means the
client's namespace.
"""

from flo_redis.types import actions, base, graph, streams
from flo_redis.types import queue as _queue_types
from flo_redis.types.actions import *  # noqa: F403
from flo_redis.types.base import *  # noqa: F403
from flo_redis.types.graph import *  # noqa: F403
from flo_redis.types.queue import *  # noqa: F403
from flo_redis.types.streams import *  # noqa: F403

# flo defines all of these in one module, flo.types; here they live by area.
__all__ = [
    *base.__all__,
    *streams.__all__,
    *actions.__all__,
    *_queue_types.__all__,
    *graph.__all__,
]
