"""``flo-redis exporter``: serve the queues as Prometheus gauges (the ``metrics`` extra)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import click

from flo_redis.cli._ops import connection_options, until_stopped, with_client
from flo_redis.cli._render import say
from flo_redis.client import FloClient
from flo_redis.ops.discovery import Overview, namespaces, overview

DEFAULT_PORT = 9401


def register(group: click.Group) -> None:
    group.add_command(exporter)


@click.command("exporter")
@connection_options
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="Port to serve /metrics on (0: a free one, printed at start).")  # fmt: skip
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--all-namespaces", is_flag=True, help="Export every namespace, not only --namespace."
)
def exporter(url: str, namespace: str, port: int, host: str, all_namespaces: bool) -> None:
    """Serve every action's runs by state and every stream group's lag, pending and
    dead letters at http://HOST:PORT/metrics, read from Redis at each scrape."""
    try:
        from flo_redis.ops.exporter import FLOW_TOP, queue_registry
        from flo_redis.ops.metrics import serve_metrics
    except ImportError as exc:
        raise click.ClickException(str(exc)) from exc

    async def serve(client: FloClient) -> None:
        async def read() -> Sequence[Overview]:
            names = await namespaces(client) if all_namespaces else (namespace,)
            return await asyncio.gather(*(overview(client, n, FLOW_TOP) for n in names))

        loop = asyncio.get_running_loop()
        server = serve_metrics(port, host, queue_registry(loop, read))
        say(f"serving {server.url}")
        try:
            await until_stopped()
        finally:
            server.close()

    with contextlib.suppress(KeyboardInterrupt):
        with_client(url, namespace, serve, names=None)
