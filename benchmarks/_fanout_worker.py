"""A worker process of the fan-out benchmark (benchmarks/fanout.py).

``python -m benchmarks._fanout_worker --url URL --namespace NS [--concurrency 50]``

Serves the actions ``root``, ``leaf`` and ``join`` with handlers that do nothing (the
figure is the queue's cost, not the handlers'). Prints ``{"event": "ready"}`` before the
worker starts, and runs until it is killed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from flo_redis import FloClient

ACTIONS = ("root", "leaf", "join")


async def main(args: argparse.Namespace) -> None:
    async with FloClient(args.url, namespace=args.namespace) as client:
        worker = client.new_action_worker(concurrency=args.concurrency)

        async def handler(ctx: Any) -> bytes:
            return b""

        for name in ACTIONS:
            worker.register_action(name, handler)
        sys.stdout.write(json.dumps({"event": "ready", "t": time.time()}) + "\n")
        sys.stdout.flush()
        await worker.start()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--concurrency", type=int, default=50)
    asyncio.run(main(parser.parse_args()))
