"""The ``flo-redis`` command: run workers, probe their health, see and steer the queue.

Needs the ``cli`` extra (``pip install 'flo-redis[cli]'``). Each subcommand lives in its
own module of this package and is added to the one ``main`` group below.
"""

from __future__ import annotations

import importlib

try:
    import click
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise SystemExit(
        "the flo-redis command needs the 'cli' extra: pip install 'flo-redis[cli]'"
    ) from exc

from flo_redis.cli._render import SafeGroup, interrupted

# Modules that each define ``register(group)``; listed once so the command's shape is
# readable here, and each subcommand family stays in its own room.
_COMMAND_MODULES: tuple[str, ...] = (
    "worker",
    "worker_metrics",
    "check",
    "dashboard",
    "status",
    "stats",
    "runs",
    "batches",
    "keys",
    "workers",
    "streams",
    "invoke",
    "exporter",
    "scripts",
    "acl",
    "quarantine",
    "schedules",
)


@click.group(cls=SafeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="flo-redis", prog_name="flo-redis")
def main() -> None:
    """Run flo-redis workers and operate their queues."""


try:
    for _name in _COMMAND_MODULES:
        importlib.import_module(f"{__name__}.{_name}").register(main)
except KeyboardInterrupt:  # Ctrl-C while the command is still loading
    interrupted()
