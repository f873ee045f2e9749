"""A worker process for the failover chaos tests: an ActionWorker and a StreamWorker whose
every side effect is written to a ledger outside Redis.

    python chaos_worker.py URL NAMESPACE ACTION STREAM LEDGER [DURABILITY]

Each ledger line is one ``write`` on a file opened for appending, ``time.time()`` last:

- ``run <run id> <token> <t>``: an action handler began (it returns ``<pid> <token>``,
  its hand-out ``<run id>/<token>`` as the outcome);
- ``record <partition>-<record id> <delivery> <t>``: a stream handler began;
- ``completed <run id>/<token> <t>`` / ``acked <t>``: the store accepted a complete (of
  that hand-out: its outcome) / an ack;
- ``refused <report> <t>``: the store refused a report (its lease moved on).

``DURABILITY`` ``replicated``: the client's writes wait for one replica
(``Durability.replicated(replicas=1, timeout_ms=1000)``). SIGTERM stops both workers,
every report sent, and the process exits.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from typing import Any

from chaos import GROUP, HANDLER_S, OPTIONS
from polling import connected

from flo_redis import ActionContext, ActionResult, FloClient, StreamContext
from flo_redis.worker.observe import WorkerObserver


class Ledger(WorkerObserver):
    """Writes what the store accepted and refused, beside what the handlers did."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, *words: object) -> None:
        os.write(self.fd, (" ".join(map(str, (*words, time.time()))) + "\n").encode())

    def run_completed(self, action: str, outcome: str) -> None:
        self.write("completed", outcome)

    def record_settled(self, stream: str, group: str, acked: bool) -> None:
        if acked:
            self.write("acked")

    def report_refused(self, report: str) -> None:
        self.write("refused", report)


def client_options(durability: str) -> dict[str, Any]:
    """``primary``, or ``replicated[:REPLICAS]`` (1 by default), each write waiting 1 s."""
    if durability == "primary":
        return {}
    from flo_redis import Durability  # the durability levels

    level, _, replicas = durability.partition(":")
    assert level == "replicated", durability
    return {"durability": Durability.replicated(replicas=int(replicas or 1), timeout_ms=1000)}


async def main(
    url: str, namespace: str, action: str, stream: str, path: str, durability: str
) -> None:
    ledger = Ledger(path)

    async def run(ctx: ActionContext) -> ActionResult:
        ledger.write("run", ctx.task_id, ctx.token)
        await asyncio.sleep(HANDLER_S)
        return ctx.result(f"{ctx.task_id}/{ctx.token}", f"{os.getpid()} {ctx.token}".encode())

    async def record(ctx: StreamContext) -> None:
        ledger.write("record", f"{ctx.record.partition}-{ctx.stream_id.to_redis()}",
                     ctx.record.delivery_count)  # fmt: skip
        await asyncio.sleep(HANDLER_S)

    client = await connected(FloClient(url, namespace=namespace, **client_options(durability)))
    async with client:
        actions = client.new_action_worker(
            worker_id=f"chaos-{os.getpid()}", concurrency=50, block_ms=1000
        )
        actions.register_action(action, run, OPTIONS)
        records = client.new_stream_worker(
            stream=stream, group=GROUP, handler=record, concurrency=50, batch_size=50, block_ms=1000
        )
        actions.observer = records.observer = ledger

        def stop() -> None:
            actions.stop()
            records.stop()

        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop)
        await asyncio.gather(actions.start(), records.start())


if __name__ == "__main__":
    url, namespace, action, stream, path = sys.argv[1:6]
    durability = sys.argv[6] if len(sys.argv) > 6 else "primary"
    asyncio.run(main(url, namespace, action, stream, path, durability))
