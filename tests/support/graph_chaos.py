"""A graph of runs under worker kills, and what it must come to (tests/faults/test_graph_chaos.py).

:func:`plan` draws a three-level graph: level 1 roots; each run of level 2 waits for one
run of level 1 (a fifth of them for 2-4), level 3 likewise on level 2; each dependency's
``on_failure`` is mostly ``"fail"``, some ``"ignore"`` and ``"run"``; 1% of the runs fail
every attempt. :func:`expected` says how each run must end from that alone.

The :class:`Ledger` is the handlers' side effect, kept on a server of its own (outside the
cluster under test), a HASH per run fenced by the hand-out's token: ``begin`` notes the
newest token seen for the run; ``commit`` writes (the token, the writer's pid, the parents
the handler read) only if its token is still the newest seen and above the last one
committed, and counts the commits. :func:`check` compares the runs' statuses and the
ledger with the plan.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from flo_redis.types import ActionRunStatus, RunStatus
from flo_redis.types.graph import ON_FAILURE, OnFailure

#: One action per level (each in a hash slot of its own on a cluster).
LEVELS = ("plan", "build", "ship")
#: Attempts in all: a run that fails every attempt ends FAILED after this many; a run
#: that does not fail is taken back from a killed worker (its attempt spent) and runs
#: again, so it would need this many kills under it to end FAILED. (With 4, beside two
#: other test passes, workers killed every 2 s took all four attempts of a few runs.)
MAX_RETRIES = 8
#: A run whose input is this raises in every attempt.
DOOMED = b"fail"
PLANNED_ERROR = "RuntimeError: planned failure"
GONE_ERROR = "owner gone: worker process died"
#: Parents a handler reads per ctx.parents() page: a run of 4 parents reads two pages.
PARENTS_PAGE = 3

_BEGIN = """
-- KEYS[1] the run's ledger HASH; ARGV[1] the hand-out's token.
-- Notes the newest token seen for the run and counts the hand-outs that began.
local seen = tonumber(redis.call('HGET', KEYS[1], 'seen') or '-1')
if tonumber(ARGV[1]) > seen then redis.call('HSET', KEYS[1], 'seen', ARGV[1]) end
return redis.call('HINCRBY', KEYS[1], 'starts', 1)
"""

_COMMIT = """
-- KEYS[1] the run's ledger HASH; ARGV[1] token, ARGV[2] the writer's pid, ARGV[3] the
-- parents its handler read (JSON). Writes only if the token is the newest seen for the
-- run and above the last one committed (else counts it fenced); returns the commits.
local token = tonumber(ARGV[1])
local seen = tonumber(redis.call('HGET', KEYS[1], 'seen') or '-1')
local last = tonumber(redis.call('HGET', KEYS[1], 'token') or '-1')
if token < seen or token <= last then
  redis.call('HINCRBY', KEYS[1], 'fenced', 1)
  return 0
end
local log = redis.call('HGET', KEYS[1], 'log') or ''
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'parents', ARGV[3],
  'log', log .. ARGV[1] .. ':' .. ARGV[2] .. ' ')
return redis.call('HINCRBY', KEYS[1], 'commits', 1)
"""


def ledger_key(namespace: str, run_id: str) -> str:
    return f"{namespace}:ledger:{run_id}"


class Ledger:
    """The fenced side effect of the handlers, on ``conn`` (a plain server)."""

    def __init__(self, conn: aioredis.Redis, namespace: str) -> None:
        self.conn = conn
        self.namespace = namespace
        self._begin = conn.register_script(_BEGIN)
        self._commit = conn.register_script(_COMMIT)

    async def begin(self, run_id: str, token: int) -> int:
        return int(await self._begin(keys=[ledger_key(self.namespace, run_id)], args=[token]))

    async def commit(self, run_id: str, token: int, pid: int, parents: list[Any]) -> int:
        key = ledger_key(self.namespace, run_id)
        return int(await self._commit(keys=[key], args=[token, pid, json.dumps(parents)]))

    async def read(self, run_ids: list[str]) -> dict[str, dict[str, str]]:
        """Each run's ledger entry ({} for a run no handler began)."""
        entries: dict[str, dict[str, str]] = {}
        for start in range(0, len(run_ids), 1000):
            chunk = run_ids[start : start + 1000]
            async with self.conn.pipeline(transaction=False) as pipe:
                for run_id in chunk:
                    pipe.hgetall(ledger_key(self.namespace, run_id))
                replies = await pipe.execute()
            for run_id, reply in zip(chunk, replies, strict=True):
                entries[run_id] = {k.decode(): v.decode() for k, v in reply.items()}
        return entries


def output_of(run_id: str) -> bytes:
    """What a run's handler returns (its outcome: the token of its hand-out)."""
    return f"out-{run_id}".encode()


@dataclass
class Node:
    """One run of the plan: its level (0, 1, 2), whether it fails every attempt, and the
    (index, on_failure) of each parent; ``run_id`` once invoked."""

    level: int
    doomed: bool
    deps: list[tuple[int, OnFailure]] = field(default_factory=list)
    run_id: str = ""


def plan(runs: int, seed: int) -> list[Node]:
    """A graph of ``runs`` (at least 15) runs: a fifth roots, two fifths on each further
    level; and a few more on the last, each waiting for every run of one group."""
    rng = random.Random(seed)
    sizes = (runs // 5, 2 * runs // 5, runs - runs // 5 - 2 * runs // 5)
    nodes: list[Node] = []
    previous: list[int] = []
    for level, size in enumerate(sizes):
        current = []
        for _ in range(size):
            node = Node(level, rng.random() < 0.01)
            if level:
                many = rng.random() < 0.2
                parents = (
                    rng.sample(previous, rng.randint(2, 4)) if many else [rng.choice(previous)]
                )
                node.deps = [(p, rng.choices(ON_FAILURE, (8, 1, 1))[0]) for p in parents]
            current.append(len(nodes))
            nodes.append(node)
        previous = current
    # However small the graph: a doomed root, and a child of it under each policy.
    nodes[0].doomed = True
    for i, policy in zip(range(sizes[0], sizes[0] + 3), ON_FAILURE, strict=False):
        nodes[i].deps = [(0, policy)]
    # Fan-ins on whole groups: a few runs that wait for every run of one invoke_many (the
    # runs of one parent under one policy, invoked together), so for their group as a
    # whole, each under one policy.
    together: dict[tuple[int, OnFailure], list[int]] = {}
    for i, node in enumerate(nodes):
        if node.level == 1 and len(node.deps) == 1:
            together.setdefault(node.deps[0], []).append(i)
    groups = sorted((g for g in together.values() if len(g) >= 2), key=len, reverse=True)
    for members in groups[: max(2, runs // 500)]:
        join = Node(2, rng.random() < 0.01)
        policy = rng.choices(ON_FAILURE, (8, 1, 1))[0]
        join.deps = [(m, policy) for m in members]
        nodes.append(join)
    return nodes


@dataclass
class Expected:
    """How a run must end: COMPLETED, or FAILED with one of ``errors``; the parents its
    handler must have read ((id, status name) sorted), None for a run never handed out."""

    status: RunStatus
    errors: set[str]
    parents: list[tuple[str, str]] | None


def expected(nodes: list[Node]) -> dict[str, Expected]:
    ends: list[RunStatus] = []
    out: dict[str, Expected] = {}
    for node in nodes:
        failed = [(nodes[p].run_id, pol) for p, pol in node.deps if ends[p] == RunStatus.FAILED]
        failing = {f"parent {pid} ended FAILED" for pid, pol in failed if pol == "fail"}
        seen = [
            (nodes[p].run_id, ends[p].name)
            for p, pol in node.deps
            if ends[p] == RunStatus.COMPLETED or pol == "run"
        ]
        if failing:
            exp = Expected(RunStatus.FAILED, failing, None)
        elif node.doomed:
            exp = Expected(RunStatus.FAILED, {PLANNED_ERROR, GONE_ERROR}, sorted(seen))
        else:
            exp = Expected(RunStatus.COMPLETED, set(), sorted(seen))
        ends.append(exp.status)
        out[node.run_id] = exp
    return out


@dataclass
class Findings:
    """What the graph came to: counts for the figures, and every breach of the plan."""

    ran: int = 0
    cascaded: int = 0
    doomed_failed: int = 0
    redeliveries: int = 0
    #: Runs committed more than once: each earlier commit's process was killed before
    #: its complete reached the store (the run's lease was taken back and it ran again).
    recommitted: int = 0
    fenced: int = 0
    problems: list[str] = field(default_factory=list)
    kinds: Counter[str] = field(default_factory=Counter)

    def problem(self, kind: str, text: str) -> None:
        self.kinds[kind] += 1
        if len(self.problems) < 40:
            self.problems.append(f"{kind}: {text}")


def check(
    nodes: list[Node],
    statuses: dict[str, ActionRunStatus],
    ledger: dict[str, dict[str, str]],
    killed: set[int],
) -> Findings:
    found = Findings()
    want = expected(nodes)
    for node in nodes:
        run_id = node.run_id
        exp, got, entry = want[run_id], statuses[run_id], ledger[run_id]
        starts, commits = int(entry.get("starts", 0)), int(entry.get("commits", 0))
        found.fenced += int(entry.get("fenced", 0))
        if got.status != exp.status:
            found.problem("status", f"{run_id} {got.status.name} ({got.error_message}), "
                          f"expected {exp.status.name} {sorted(exp.errors)}")  # fmt: skip
            continue
        if exp.status == RunStatus.FAILED:
            if got.error_message not in exp.errors:
                found.problem("error", f"{run_id}: {got.error_message!r} not in {exp.errors}")
            if commits:
                found.problem("failed committed", f"{run_id} committed {commits} times")
            if exp.parents is None:
                found.cascaded += 1
                if starts:
                    found.problem("failed parent ran", f"{run_id} handed out {starts} times")
            else:
                found.doomed_failed += 1
            continue
        found.ran += 1
        found.redeliveries += max(0, starts - 1)
        _check_completed(found, run_id, got, entry, exp, killed, ledger)
    return found


def _check_completed(
    found: Findings,
    run_id: str,
    got: ActionRunStatus,
    entry: dict[str, str],
    exp: Expected,
    killed: set[int],
    ledger: dict[str, dict[str, str]],
) -> None:
    commits = int(entry.get("commits", 0))
    if commits == 0:
        found.problem("no commit", f"{run_id} completed without a committed side effect")
        return
    log = [tuple(int(x) for x in item.split(":")) for item in entry["log"].split()]
    if commits > 1:
        found.recommitted += 1
        early = [pid for _, pid in log[:-1] if pid not in killed]
        if early:
            found.problem("twice", f"{run_id} committed {commits} times, by live pids {early}")
    if got.outcome != entry["token"] or got.output != output_of(run_id):
        found.problem(
            "fence",
            f"{run_id} completed by token {got.outcome} output {got.output!r}; "
            f"the ledger's commit is token {entry['token']}",
        )
    seen = json.loads(entry["parents"])
    if sorted((p[0], p[1]) for p in seen) != exp.parents:
        found.problem("parents", f"{run_id} read {seen}, expected {exp.parents}")
        return
    for parent_id, status, output, outcome in seen:
        if status != "COMPLETED":
            continue
        parent_token = ledger[parent_id].get("token")
        if output != output_of(parent_id).decode() or outcome != parent_token:
            found.problem(
                "parent result",
                f"{run_id} read {parent_id} {output!r}/{outcome}, its commit {parent_token}",
            )
