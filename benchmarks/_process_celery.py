"""Celery's side of the ``process`` workload (benchmarks/process.py): the app its
worker loads, and the enqueue.

``python -m celery -A benchmarks._process_celery worker -P prefork -c C ...`` runs the
worker; ``python -m benchmarks._process_celery enqueue --handler H --n N`` sends N tasks
first. Both read the broker and the queue from the environment: ``FLO_BENCH_BROKER``
(a ``redis://`` URL) and ``FLO_BENCH_QUEUE``. Imports nothing of flo-redis, so it runs
from an interpreter that has Celery and redis-py only.

The app's settings, Celery's defaults except where said: results ignored (no result
backend); prefetch at its default (4 per child process); ``acks_late`` off (acked when
the worker takes the message, its default); JSON messages; no limit on the tasks a child
runs; the ``fair`` scheduling of the prefork pool (its default since Celery 4). The
worker command (benchmarks/process.py) adds ``--without-gossip --without-mingle
--without-heartbeat``: messages between the workers of a cluster, which a lone worker
does not need and flo-redis's worker does not send.
"""

from __future__ import annotations

import argparse
import os
import sys

from celery import Celery

from ._process_handlers import HANDLERS

QUEUE = os.environ.get("FLO_BENCH_QUEUE", "bench")

app = Celery("flo_bench", broker=os.environ.get("FLO_BENCH_BROKER", "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_ignore_result=True,
    result_backend=None,
    task_default_queue=QUEUE,
    worker_prefetch_multiplier=4,
    task_acks_late=False,
    worker_max_tasks_per_child=None,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)

TASKS = {name: app.task(name=name)(fn) for name, fn in HANDLERS.items()}


def enqueue(handler: str, n: int) -> None:
    """Send ``n`` tasks of ``handler``, one message each, on one connection."""
    task = TASKS[handler]
    with app.producer_or_acquire() as producer:
        for _ in range(n):
            task.apply_async(producer=producer)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m benchmarks._process_celery")
    parser.add_argument("command", choices=("enqueue",))
    parser.add_argument("--handler", choices=sorted(HANDLERS), required=True)
    parser.add_argument("--n", type=int, required=True)
    args = parser.parse_args()
    enqueue(args.handler, args.n)
    sys.stdout.write('{"event": "enqueued"}\n')
