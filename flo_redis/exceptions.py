"""flo's ``flo.exceptions`` path: the error tree of :mod:`flo_redis.errors` (its
``__all__``), so that ``from flo.exceptions import NotFoundError`` migrates by renaming the
package."""

from flo_redis import errors
from flo_redis.errors import *  # noqa: F403

__all__: list[str] = []
__all__ += errors.__all__
