"""``flo-redis worker --metrics-port PORT``: Prometheus metrics of each worker process.

Every worker of the process counts into one :class:`flo_redis.ops.metrics.PrometheusObserver`,
served at ``http://HOST:PORT/metrics`` (127.0.0.1 unless ``--metrics-host`` says
otherwise). Under ``--processes N`` process *i* serves on PORT + *i*, so each process
is a scrape target of its own. Needs the ``metrics`` extra.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from typing import Any

import click

from flo_redis.cli.worker import WorkerProcess, add_sidecar

log = logging.getLogger("flo_redis.cli")

MAX_PORT = 65535


def _needs_metrics_extra(
    ctx: click.Context, param: click.Parameter, port: int | None
) -> int | None:
    if port is not None and importlib.util.find_spec("prometheus_client") is None:
        raise click.BadParameter("needs the 'metrics' extra: pip install 'flo-redis[metrics]'")
    return port


def _ports_fit(params: dict[str, Any]) -> None:
    """Under ``--processes N`` process i serves on PORT + i: each must be a port."""
    port = params.get("metrics_port")
    last = None if not port else port + params["processes"] - 1
    if last is not None and last > MAX_PORT:
        raise click.BadParameter(
            f"{params['processes']} processes would serve on ports {port} to {last}, past "
            f"{MAX_PORT}; use a port of at most {MAX_PORT - params['processes'] + 1}, or 0",
            param_hint="'--metrics-port'",
        )


async def serve_worker_metrics(process: WorkerProcess) -> None:
    """Observe the process's workers and serve their metrics until cancelled. Runs
    before the workers' first step, so they start observed."""
    port = process.params.get("metrics_port")
    if port is None:
        return
    from flo_redis.ops.metrics import PrometheusObserver, serve_metrics

    observer = PrometheusObserver()
    for worker in process.workers:
        worker.observer = observer
    host = process.params["metrics_host"]
    server = serve_metrics(port + process.index if port else 0, host)
    log.info("metrics at %s", server.url)
    try:
        await asyncio.Event().wait()
    finally:
        await asyncio.to_thread(server.close)


def register(group: click.Group) -> None:
    """Adds the metrics options to the ``worker`` command (no command of its own)."""
    add_sidecar(
        serve_worker_metrics,
        click.Option(
            ["--metrics-port"],
            envvar="FLO_REDIS_METRICS_PORT",
            type=click.IntRange(0, MAX_PORT),
            default=None,
            callback=_needs_metrics_extra,
            help="Serve Prometheus metrics at http://HOST:PORT/metrics; process i of "
            "--processes serves on PORT+i; 0 picks a free port (env FLO_REDIS_METRICS_PORT).",
        ),
        click.Option(
            ["--metrics-host"],
            envvar="FLO_REDIS_METRICS_HOST",
            default="127.0.0.1",
            show_default=True,
            help="Address the metrics endpoint listens on (env FLO_REDIS_METRICS_HOST).",
        ),
        check=_ports_fit,
    )
