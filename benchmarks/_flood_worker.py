"""A worker process of the flood benchmark (benchmarks/flood.py): one JSON line out.

``python -m benchmarks._flood_worker --url URL --namespace NS --name NAME --ledger KEY
[--fair] [--concurrency 50]``

Its handler is one Redis round trip: it appends ``<payload>|<start time>`` to the
ledger list (the payload is ``<flow key>|<index>|<invoke time>``, times ``time.time()``),
so the benchmark reads when each run started against when it was invoked. Prints
``{"event": "ready"}`` before the worker starts, and runs until it is killed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from flo_redis import ActionRegisterOptions, FloClient, FlowControl

from ._handler import redis_client


async def main(args: argparse.Namespace) -> None:
    ledger = redis_client(args.url)
    async with FloClient(args.url, namespace=args.namespace) as client:
        worker = client.new_action_worker(concurrency=args.concurrency)

        async def handler(ctx: Any) -> bytes:
            started = time.time()
            await ledger.rpush(args.ledger, b"%s|%.6f" % (bytes(ctx.payload), started))
            return b""

        options = ActionRegisterOptions(flow=FlowControl(fair=args.fair))
        worker.register_action(args.name, handler, options)
        sys.stdout.write(json.dumps({"event": "ready", "t": time.time()}) + "\n")
        sys.stdout.flush()
        await worker.start()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--fair", action="store_true")
    parser.add_argument("--concurrency", type=int, default=50)
    asyncio.run(main(parser.parse_args()))
