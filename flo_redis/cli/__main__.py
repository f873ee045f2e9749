"""``python -m flo_redis.cli`` is the ``flo-redis`` command."""

from flo_redis.cli import main

main()
