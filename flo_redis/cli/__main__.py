"""``python -m flo_redis.cli`` is the ``flo-redis`` command."""

from . import main

main()
