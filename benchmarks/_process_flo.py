"""The flo-redis worker process of the ``process`` workload (benchmarks/process.py).

``python -m benchmarks._process_flo --url URL --namespace NS --name NAME
--handler noop|cpu_1ms --executor thread|process [--concurrency 2] [--processes N]``

One ``ActionWorker`` at ``--concurrency`` running a plain ``def`` handler of
benchmarks/_process_handlers.py: in its default thread executor, or in
``ProcessExecutor(size=N)`` (``--processes``; default: as many child processes as the
concurrency, a concurrency above it holds runs ready for the children). The handler counts
its calls in Redis (``FLO_BENCH_COUNTER`` in the environment). Prints
``{"event": "ready"}`` before the worker starts, and stops the worker on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time

from flo_redis import ActionWorker, FloClient, ProcessExecutor

from ._flo_worker import emit
from ._process_handlers import HANDLERS


async def main(args: argparse.Namespace) -> None:
    async with FloClient(args.url, namespace=args.namespace) as client:
        executor = ProcessExecutor(size=args.processes) if args.executor == "process" else None
        worker = ActionWorker(client, concurrency=args.concurrency, executor=executor)
        worker.register_action(args.name, HANDLERS[args.handler])
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
        emit(event="ready", t=time.time())
        await worker.start()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--handler", choices=sorted(HANDLERS), required=True)
    parser.add_argument("--executor", choices=("thread", "process"), required=True)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--processes", type=int, default=None)
    asyncio.run(main(parser.parse_args()))
