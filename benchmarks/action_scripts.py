"""``python -m benchmarks.action_scripts [N] [ROUNDS]``: Redis's own time in an action's
three hot scripts, per run.

Invokes ``N`` runs (default 20,000) one at a time (``action_invoke``), then one worker
claims them 100 at a time (``action_claim`` with a worker's poll ids ``<poller>#<n>``)
and completes each batch with its tokens (``run_complete_many``), one call at a time, on
a private redis-server. Every call's server time is read from ``SLOWLOG`` (threshold 0),
so neither the client nor the network is counted (the log also holds the commands a
script runs, and logging them adds a little to each call). ``ROUNDS`` (default 3) runs
it that many times on fresh namespaces and keeps the median of each figure. Prints one
JSON line: µs of script time per run for each script, and the median µs per call.

``--callgrind`` counts instructions instead, steadier than time on a shared machine:
the redis-server runs under ``valgrind --tool=callgrind`` with its instrumentation off,
switched on (``callgrind_control``) only while one kind of call is made: first the
``N`` invokes, then every claim (no complete in between, so ``N`` runs are leased at
the end), then every complete. Prints the server's instructions per run in each phase,
which also counts reading the command and writing the reply. ``--in-scripts`` (with
``--callgrind``) counts only what runs inside ``FCALL`` and ``EVALSHA``: the event
loop's own work in the window (timers, which come more often the slower a loaded
machine makes the run) is left out, so two runs of one version agree within about
0.2 % where the whole window spreads by 1 %.
"""

from __future__ import annotations

import asyncio
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import redis.asyncio as aioredis

from flo_redis import FloClient
from flo_redis._wire.gateway import ACTION_CLAIM, ACTION_INVOKE, RUN_COMPLETE_MANY
from flo_redis._wire.keys import action_keys
from flo_redis.actions.claims import claim
from flo_redis.actions.reports import CompleteItem
from flo_redis.testing import free_port

from ._common import private_redis, script_times

BATCH = 100
SLOWLOG_LEN = 1_000_000  # the commands a script runs are logged too
SCRIPTS = (ACTION_INVOKE, ACTION_CLAIM, RUN_COMPLETE_MANY)


async def _round(url: str, n: int, ns: str) -> dict[str, Any]:
    raw = aioredis.Redis.from_url(url)
    async with FloClient(url, namespace=ns) as client:
        await client.action.register("noop")
        keys = action_keys(ns, "noop")
        await client.action.invoke("noop", b"{}")  # loads the scripts before logging
        await raw.config_set("slowlog-max-len", SLOWLOG_LEN)
        await raw.config_set("slowlog-log-slower-than", 0)
        await raw.slowlog_reset()
        for _ in range(n - 1):
            await client.action.invoke("noop", b"{}")
        done, poll = 0, 0
        while True:
            poll += 1
            reply = await claim(client.session, keys, "w1", b"", BATCH, f"p#{poll}")
            if not reply.runs:
                break
            items = [CompleteItem(r.run_id, b"ok", token=r.token) for r in reply.runs]
            await client.worker.complete_many("w1", "noop", items, tally=False)
            done += len(items)
        log_entries = await raw.slowlog_get(SLOWLOG_LEN)
        await raw.config_set("slowlog-log-slower-than", 10000)
    await raw.aclose()
    by_sha = script_times(log_entries)
    out: dict[str, Any] = {}
    for script in SCRIPTS:
        calls = by_sha.get(script.lua.sha.encode(), [])
        out[script.name] = {
            "calls": len(calls),
            "us_per_run": sum(calls) / max(done, 1),
            "median_us_per_call": statistics.median(calls) if calls else 0.0,
        }
    return out


async def measure(url: str, n: int, rounds: int) -> dict[str, Any]:
    results = [await _round(url, n, f"as{i}") for i in range(rounds)]
    out: dict[str, Any] = {"runs": n, "batch": BATCH, "rounds": rounds}
    for script in SCRIPTS:
        per = [r[script.name] for r in results]
        out[script.name] = {
            "calls": per[0]["calls"],
            "us_per_run": round(statistics.median(p["us_per_run"] for p in per), 2),
            "median_us_per_call": statistics.median(p["median_us_per_call"] for p in per),
        }
    return out


class _Callgrind:
    """A redis-server under callgrind, instrumented only between :meth:`on` and
    :meth:`off`; :meth:`off` answers the instructions counted since :meth:`on`."""

    def __init__(self, in_scripts: bool = False) -> None:
        self.dir = tempfile.mkdtemp(prefix="flo-callgrind-")
        self.port = free_port()
        scripts_only = (
            [
                "--collect-atstart=no",
                "--toggle-collect=fcallCommand",
                "--toggle-collect=evalShaCommand",
            ]
            if in_scripts
            else []
        )
        self.proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no", *scripts_only,
             f"--callgrind-out-file={self.dir}/cg.out", "redis-server", "--port",
             str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.url = f"redis://127.0.0.1:{self.port}"
        self.dumps = 0

    def _control(self, *args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(self.proc.pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip

    def on(self) -> None:
        self._control("--zero")
        self._control("--instr=on")

    def off(self) -> int:
        self._control("--instr=off")
        self._control("--dump")
        self.dumps += 1
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            files = glob.glob(f"{self.dir}/cg.out.{self.dumps}")
            if files:
                with open(files[0]) as f:
                    for line in f:
                        if line.startswith("totals:"):  # "summary:" is written first, as 0
                            return int(line.split()[1])
            time.sleep(0.2)
        raise RuntimeError("callgrind wrote no dump")

    async def answering(self) -> None:
        """Once the server answers (valgrind starts it slowly); raises after a minute."""
        raw = aioredis.Redis.from_url(self.url)
        deadline = time.monotonic() + 60
        try:
            while True:
                try:
                    await raw.ping()
                    return
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.5)
        finally:
            await raw.aclose()

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)


async def callgrind(n: int, in_scripts: bool = False) -> dict[str, Any]:
    cg = _Callgrind(in_scripts)
    try:
        await cg.answering()
        async with FloClient(cg.url, namespace="cg") as client:
            await client.action.register("noop")
            keys = action_keys("cg", "noop")
            first = await client.action.invoke("noop", b"{}")
            warm = await claim(client.session, keys, "w1", b"", 1, "p#0")
            await client.worker.complete_many(
                "w1", "noop", [CompleteItem(first.run_id, b"ok", token=warm.runs[0].token)]
            )
            out: dict[str, Any] = {"runs": n, "batch": BATCH, "in_scripts": in_scripts}
            cg.on()
            for _ in range(n):
                await client.action.invoke("noop", b"{}")
            out["invoke_ir_per_run"] = cg.off() // n
            claimed, poll = [], 0
            cg.on()
            while True:
                poll += 1
                reply = await claim(client.session, keys, "w1", b"", BATCH, f"p#{poll}")
                if not reply.runs:
                    break
                claimed.append(reply.runs)
            out["claim_ir_per_run"] = cg.off() // n
            cg.on()
            for runs in claimed:
                items = [CompleteItem(r.run_id, b"ok", token=r.token) for r in runs]
                await client.worker.complete_many("w1", "noop", items, tally=False)
            out["complete_ir_per_run"] = cg.off() // n
        return out
    finally:
        cg.close()


async def main(argv: list[str]) -> None:
    if "--callgrind" in argv:
        args = [int(a) for a in argv if a not in ("--callgrind", "--in-scripts")]
        out = await callgrind(args[0] if args else 5_000, "--in-scripts" in argv)
        print(json.dumps(out), flush=True)
        return
    args = [int(a) for a in argv[:2]]
    n, rounds = (args + [20_000, 3][len(args) :])[:2]
    url = os.environ.get("REDIS_URL")
    server = None if url else private_redis()
    try:
        print(json.dumps(await measure(url or server.url, n, rounds)), flush=True)  # type: ignore[union-attr]
    finally:
        if server is not None:
            server.discard()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
