"""How long after a SIGKILL the health surfaces show a worker gone.

    python benchmarks/health_gone.py [--url redis://...] [--trials 7]

Each trial starts ``flo-redis worker --processes 2 benchmarks.health_gone:build`` (run
from the repository's root), waits until both children are registered and alive, then
SIGKILLs both children and measures from the kill:

- ``list``: until ``client.worker.list`` reads both killed workers ``alive=False``
  (polled every 5 ms);
- ``check``: until ``flo-redis check --worker ID`` of a killed worker, started at the
  kill (and again while one still answers ok), prints that it is gone: the command's
  start-up, a read, the liveness grace it waits out (1 s) and the read again.

And, for scale, how long ``check`` takes for a live worker (start-up and one read).
Prints the median, min and max of each over the trials. Without ``--url`` a private
``redis-server`` is started on a free port.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from flo_redis import ActionContext, ActionWorker, FloClient
from flo_redis.testing import RedisServer

ROOT = Path(__file__).resolve().parent.parent


def build(client: FloClient) -> ActionWorker:
    """The worker each child runs: one action that answers at once."""
    worker = client.new_action_worker(concurrency=1, block_ms=1000)

    @worker.action("greet")
    async def greet(ctx: ActionContext) -> bytes:
        return b"hi"

    return worker


def _children(parent: int) -> list[int]:
    """The process ids whose parent is ``parent`` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            found.append(int(entry))
    return found


def _check(url: str, namespace: str, worker_id: str) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "flo_redis.cli", "check", "--url", url,
         "--namespace", namespace, "--worker", worker_id],
        capture_output=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    return done.returncode, done.stdout.decode().strip()


async def trial(url: str) -> tuple[float, float, float]:
    """(list, check, live check) seconds of one trial."""
    namespace = f"health-{uuid.uuid4().hex[:8]}"
    sup = subprocess.Popen(  # noqa: ASYNC220 - starting it does not block
        [sys.executable, "-m", "flo_redis.cli", "worker", "--url", url, "--namespace",
         namespace, "--processes", "2", "--log-level", "warning",
         "benchmarks.health_gone:build"],
        cwd=ROOT,
    )  # fmt: skip
    try:
        async with FloClient(url, namespace=namespace) as client:
            while True:
                workers = (await client.worker.list()).workers
                if len(workers) == 2 and all(w.alive for w in workers):
                    break
                await asyncio.sleep(0.05)
            ids = [w.worker_id for w in workers]
            started = time.monotonic()
            code, line = await asyncio.to_thread(_check, url, namespace, ids[0])
            live_check = time.monotonic() - started
            assert code == 0, line
            children = _children(sup.pid)
            assert len(children) == 2, children

            async def checked() -> float:
                while True:
                    code, line = await asyncio.to_thread(_check, url, namespace, ids[0])
                    if code == 1 and "is gone" in line:
                        return time.monotonic() - killed_at

            async def listed() -> float:
                while True:
                    page = (await client.worker.list()).workers
                    if all(w.alive is False for w in page if w.worker_id in ids):
                        return time.monotonic() - killed_at
                    await asyncio.sleep(0.005)

            killed_at = time.monotonic()
            for pid in children:
                os.kill(pid, signal.SIGKILL)
            check_s, list_s = await asyncio.gather(checked(), listed())
            return list_s, check_s, live_check
    finally:
        sup.send_signal(signal.SIGTERM)
        sup.wait(60)


def _line(name: str, values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return (
        f"{name:<12} median {statistics.median(ms):7.0f} ms   min {min(ms):7.0f} ms   "
        f"max {max(ms):7.0f} ms"
    )


async def main(url: str | None, trials: int) -> None:
    server = None
    if url is None:
        server = RedisServer().start()
        url = server.url
    try:
        results = [await trial(url) for _ in range(trials)]
    finally:
        if server is not None:
            server.stop()
    print(f"SIGKILL of both children of --processes 2, {trials} trials")
    print(_line("list gone", [r[0] for r in results]))
    print(_line("check gone", [r[1] for r in results]))
    print(_line("check (live)", [r[2] for r in results]))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None)
    parser.add_argument("--trials", type=int, default=7)
    args = parser.parse_args()
    asyncio.run(main(args.url, args.trials))
