"""Operating the queue: Prometheus metrics and the queue exporter, OpenTelemetry tracing,
discovery of workers and their health, and the Redis ACL roles.

Some of these need an extra; :func:`needs_extra` is the one guard of their imports.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from flo_redis.errors import MissingExtraError


@contextlib.contextmanager
def needs_extra(extra: str, what: str) -> Iterator[None]:
    """Imports inside the block come from the ``extra`` of flo-redis: when one is not
    installed, ``what`` raises :class:`~flo_redis.errors.MissingExtraError` (an
    ImportError) naming the extra to install."""
    try:
        yield
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise MissingExtraError(
            f"{what} needs the {extra!r} extra: pip install 'flo-redis[{extra}]'"
        ) from exc
