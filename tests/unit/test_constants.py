"""Every constant mirrored between lua/ and flo_redis/ holds one value on both sides.

The Lua values are parsed from the sources (each top-level ``local NAME = <number or
'string'>`` of a script or a lib/ helper); the Python values are imported. Each Lua
constant is either paired here with its Python mirror or listed as the scripts' own,
with the reason, so a new constant cannot go unplaced and a changed one cannot drift.
"""

from __future__ import annotations

import re
from enum import IntEnum
from pathlib import Path

import pytest

from flo_redis import (
    ActionRegisterOptions,
    FloClient,
    RunStatus,
    ValidationError,
    WorkerStatus,
    quarantine,
)
from flo_redis._session import liveness_stats, reclaim
from flo_redis._wire import checks, keys, stream_codec
from flo_redis._wire.status import Status
from flo_redis.actions import action_settings, concurrency, graph, history, inspect, reports
from flo_redis.actions import operations as actions
from flo_redis.queue import operations as queue
from flo_redis.streams import groups
from flo_redis.types.base import LUA_INT, MAX_TIME_MS, U32, U64
from flo_redis.worker import progress

LUA = Path(__file__).resolve().parents[2] / "lua"
_CONSTANT = re.compile(r"^local ([A-Z][A-Z0-9_]*) = (-?\d+|'[^']*')", re.MULTILINE)
# A table of constants (``local FLOW = {STEP = 1000, ...}``): its fields read as FLOW_STEP.
_TABLE = re.compile(r"^local ([A-Z][A-Z0-9_]*) = \{([^}]*)\}", re.MULTILINE)
_FIELD = re.compile(r"\b([A-Z][A-Z0-9_]*) = (-?\d+|'[^']*')")


def lua_constants() -> dict[tuple[str, str], int | str]:
    """(file relative to lua/, NAME) -> value."""
    found: dict[tuple[str, str], int | str] = {}
    for path in sorted(LUA.rglob("*.lua")):
        text = path.read_text()
        pairs = _CONSTANT.findall(text) + [
            (f"{table}_{name}", raw)
            for table, fields in _TABLE.findall(text)
            for name, raw in _FIELD.findall(fields)
        ]
        for name, raw in pairs:
            value: int | str = raw[1:-1] if raw.startswith("'") else int(raw)
            found[(str(path.relative_to(LUA)), name)] = value
    return found


LUA_CONSTANTS = lua_constants()

# (Lua file, Lua name) -> [(Python value, where it lives)]: one setting on both sides.
EQUAL: dict[tuple[str, str], list[tuple[object, str]]] = {
    ("lib/history.lua", "HISTORY_MINUTES"): [(history.MINUTES, "history.MINUTES")],
    ("lib/history.lua", "HISTORY_SLOT"): [(history.SLOT_BYTES, "history.SLOT_BYTES")],
    ("action_history.lua", "COUNTS_WIDTH"): [(history.COUNT_BYTES, "history.COUNT_BYTES")],
    ("lib/history.lua", "HISTORY_COMPLETED"): [(history.COMPLETED, "history.COMPLETED")],
    ("lib/history.lua", "HISTORY_FAILED"): [(history.FAILED, "history.FAILED")],
    ("lib/history.lua", "HISTORY_RETRIED"): [(history.RETRIED, "history.RETRIED")],
    ("lib/history.lua", "HISTORY_PICKUP"): [(history.PICKUP, "history.PICKUP")],
    ("lib/history.lua", "HISTORY_DURATION"): [(history.DURATION, "history.DURATION")],
    ("lib/flow.lua", "FLOW_DEDUP"): [(action_settings.FLOW_DEDUP, "action_settings.FLOW_DEDUP")],
    ("lib/flow.lua", "FLOW_THROTTLE"): [
        (action_settings.FLOW_THROTTLE, "action_settings.FLOW_THROTTLE"),
    ],
    ("lib/flow.lua", "FLOW_DEBOUNCE"): [
        (action_settings.FLOW_DEBOUNCE, "action_settings.FLOW_DEBOUNCE"),
    ],
    ("lib/flow.lua", "FLOW_STEP"): [
        (action_settings.MAX_FLOW_WEIGHT, "action_settings.MAX_FLOW_WEIGHT"),
    ],
    ("lib/stream.lua", "GROUP_ACK_TIMEOUT_MS"): [
        (groups.DEFAULT_ACK_TIMEOUT_MS, "stream_groups.DEFAULT_ACK_TIMEOUT_MS"),
    ],
    ("lib/stream.lua", "GROUP_MAX_DELIVER"): [
        (groups.DEFAULT_MAX_DELIVER, "stream_groups.DEFAULT_MAX_DELIVER"),
    ],
    ("lib/owners.lua", "RECLAIM_MAX_OWNERS"): [
        (reclaim.MAX_OWNERS_PER_CALL, "reclaim.MAX_OWNERS_PER_CALL"),
    ],
    ("action_invoke_many.lua", "MAX_RUNS"): [(actions.INVOKE_BATCH, "actions.INVOKE_BATCH")],
    ("run_complete_many.lua", "MAX_ITEMS"): [(reports.COMPLETE_BATCH, "reports.COMPLETE_BATCH")],
    ("run_accept.lua", "MAX_ITEMS"): [
        (reports.ACCEPT_BATCH, "run_reports.ACCEPT_BATCH"),
    ],
    ("group_ack_many.lua", "MAX_ITEMS"): [(stream_codec.MAX_COUNT, "_stream_codec.MAX_COUNT")],
    ("lib/stream.lua", "BATCH_MAX"): [(stream_codec.MAX_COUNT, "_stream_codec.MAX_COUNT")],
    ("run_touch.lua", "MAX_EXTEND_MS"): [
        (reports.MAX_TOUCH_EXTEND_MS, "reports.MAX_TOUCH_EXTEND_MS"),
    ],
    ("run_progress.lua", "MAX_PROGRESS_BYTES"): [
        (progress.MAX_PROGRESS_BYTES, "progress.MAX_PROGRESS_BYTES"),
    ],
    ("action_purge.lua", "MAX_BATCH"): [(inspect.MAX_BATCH, "action_ops.MAX_BATCH")],
    ("action_requeue_failed.lua", "MAX_BATCH"): [(inspect.MAX_BATCH, "action_ops.MAX_BATCH")],
    ("slot_acquire.lua", "MAX_SLOTS"): [(concurrency.MAX_SLOTS, "slots.MAX_SLOTS")],
    ("slot_acquire.lua", "MAX_LEASE_MS"): [
        (concurrency.MAX_SLOT_LEASE_MS, "slots.MAX_SLOT_LEASE_MS")
    ],
    ("lib/message.lua", "MSG_MAX_COUNT"): [(queue.MAX_COUNT, "queue.MAX_COUNT")],
    ("lib/message.lua", "MSG_MAX_VISIBILITY_MS"): [
        (queue.MAX_VISIBILITY_MS, "queue.MAX_VISIBILITY_MS"),
    ],
    ("lib/message.lua", "MSG_MAX_DELIVERIES"): [(queue.MAX_DELIVERIES, "queue.MAX_DELIVERIES")],
    ("lib/priority.lua", "PRIORITY_MAX"): [(checks.MAX_PRIORITY, "_checks.MAX_PRIORITY")],
    ("lib/checked.lua", "INT_MAX"): [(LUA_INT, "_type_base.LUA_INT")],
    ("lib/checked.lua", "U32_MAX"): [(U32 - 1, "_type_base.U32 - 1")],
    ("lib/checked.lua", "U64_MAX_TEXT"): [(str(U64 - 1), "str(_type_base.U64 - 1)")],
    ("lib/action.lua", "ACTION_TIMEOUT_MS"): [
        (ActionRegisterOptions().timeout_ms, "ActionRegisterOptions().timeout_ms"),
    ],
    ("lib/action.lua", "ACTION_MAX_RETRIES"): [
        (ActionRegisterOptions().max_retries, "ActionRegisterOptions().max_retries"),
    ],
    ("action_invoke.lua", "MAX_TIME_MS"): [(MAX_TIME_MS, "_type_base.MAX_TIME_MS")],
    ("lib/channels.lua", "LIVE_CHANNEL"): [(keys.LIVE_CHANNEL, "keys.LIVE_CHANNEL")],
    ("lib/channels.lua", "NOTICE_CHANNEL"): [(keys.NOTICE_CHANNEL, "keys.NOTICE_CHANNEL")],
    ("lib/channels.lua", "HANDOFF_CHANNEL"): [(keys.HANDOFF_CHANNEL, "keys.HANDOFF_CHANNEL")],
    # A page of workers names at most this many owners, all asked about in one call.
    ("worker_presence.lua", "MAX_CHANNELS"): [
        (checks.MAX_LIST_LIMIT, "_checks.MAX_LIST_LIMIT"),
    ],
    ("quarantine_delete.lua", "MAX_IDS"): [(quarantine.MAX_DELETE, "quarantine.MAX_DELETE")],
    ("graph_done.lua", "GROUP_TELL_MS"): [(graph.GROUP_TELL_MS, "graph.GROUP_TELL_MS")],
    ("group_quarantine.lua", "MAX_ENTRIES"): [
        (stream_codec.MAX_COUNT, "_stream_codec.MAX_COUNT"),
    ],
}

# Python batch sizes of a script that accepts up to a maximum: (Lua max) -> Python values.
WITHIN: dict[tuple[str, str], list[tuple[int, str]]] = {
    ("lib/owners.lua", "RECLAIM_MAX_BATCH"): [
        (reclaim.RECLAIM_BATCH, "reclaim.RECLAIM_BATCH"),
    ],
}

# Lua constant prefixes mirrored member by member by a Python IntEnum.
ENUMS: dict[tuple[str, str], type[IntEnum]] = {
    ("lib/status.lua", "ST_"): Status,
    ("lib/run.lua", "RUN_"): RunStatus,
    ("lib/workers.lua", "WORKER_"): WorkerStatus,
}

# Values the scripts apply when a setting was never stored; Python's own fallback is
# checked by behaviour (test_worker_health_defaults_match_the_scripts).
BEHAVIOUR = {
    ("lib/workers.lua", "DEFAULT_HEARTBEAT_TIMEOUT_MS"),
    ("lib/workers.lua", "DEFAULT_REMOVE_AFTER_MS"),
}

# The scripts' own: no Python mirror, and why.
LUA_ONLY: dict[tuple[str, str], str] = {
    ("action_claim.lua", "BATCH"): "expired leases and due runs handled per claim",
    ("action_invoke_many.lua", "FIRST_INPUT"): "ARGV index of the first input",
    ("action_held.lua", "SCAN_MAX"): "owner-index entries one call reads, said in its header",
    ("action_reclaim.lua", "GC_BATCH"): "owner-index entries checked per reclaim",
    ("action_reclaim.lua", "GONE"): "error text recorded on the run; Python shows it as is",
    ("run_complete.lua", "RETAIN_BATCH"): "finished runs dropped per call",
    ("run_complete_many.lua", "RETAIN_BATCH"): "finished runs dropped per call",
    ("lib/owners.lua", "OWNED_SEP"): "separator inside the owner index",
    ("lib/handoff.lua", "PARK_MAX_MS"): "a park's longest life; the poller claims again anyway",
    ("lib/handoff.lua", "HANDOFF_SCAN"): "parked pollers one hand-off looks at",
    ("lib/flow.lua", "FLOW_SWEEP"): "idle keys' virtual times one sweep forgets",
    ("lib/flow.lua", "FLOW_HELD_SCAN"): "held runs one release or walk looks at",
    ("lib/flow.lua", "FLOW_ONCE_RECHECK_MS"): "how soon the reaper looks again at a live dedup",
    ("lib/handoff.lua", "HANDOFF_INPUT_MAX"): "larger inputs are fetched by the claim",
    ("lib/handoff.lua", "HANDOFF_BATCH"): "runs one script hands from the queue's head",
    ("lib/handoff.lua", "PARK_FORGET_BATCH"): "expired parks dropped per claim",
    ("lib/handoff.lua", "PARK_SCAN_MAX"): "parks one unpark (a drain) looks at",
    ("lib/offer.lua", "OFFER_FREE_RETURNS"): "offers of a run that may run out in a row unspent",
    ("lib/handoff.lua", "HANDOFF_MARK"): "the msgpack bytes of a hand-off memo's h = 1",
    ("lib/queue.lua", "RECORD_IK"): "the msgpack bytes of a record's key ik",
    ("lib/queue.lua", "RECORD_TIMED_OUT"): "the msgpack bytes of a record's s = TIMED_OUT",
    ("lib/polls.lua", "POLL_MEMORY_MS"): "Python only documents it ('two minutes')",
    ("lib/polls.lua", "POLL_FORGET_BATCH"): "old poll memos dropped per claim",
    ("lib/run.lua", "NEVER_MS"): "the lease deadline of runs without a timeout",
    ("lib/stream.lua", "GROUP_DEAD_MAX_LEN"): "the dead-letter stream's approximate cap",
    ("lib/stream.lua", "BATCH_SEP"): "separator inside a batch's member",
    ("lib/stream.lua", "BATCH_KEEP_MS"): "how long a batch stays one with the ack timeout off",
    ("lib/stream.lua", "BATCHED_TO"): "a config field only the group scripts read",
    ("lib/workers.lua", "WORKER_REMOVED"): "a removed worker is never listed",
    ("lib/history.lua", "HISTORY_HEAD"): "bytes before the ring's first slot",
    ("lib/history.lua", "HISTORY_KEEP_MS"): "the ring's life after its newest minute",
    ("lib/tally.lua", "TALLY_TIMED_OUT"): "a meta field action_counts reads itself",
    ("queue_dequeue.lua", "EXPIRE_BATCH"): "expired deliveries taken back per dequeue",
    ("lib/priority.lua", "PRIORITY_SEQ_SPAN"): "queue orders per priority (a counter, never an id)",
    ("lib/ids.lua", "IDS_PER_MS"): "ids and tokens a counter takes per ms of server time",
    ("lib/ids.lua", "IDS_TRAIL"): "how far a counter may trail the server clock",
    ("graph_resolve.lua", "SWEEP_MEMBERS"): "a group's members one call takes a change to",
}


def enum_members(prefix: tuple[str, str]) -> dict[str, int | str]:
    file, start = prefix
    return {
        name.removeprefix(start): value
        for (f, name), value in LUA_CONSTANTS.items()
        if f == file and name.startswith(start)
    }


def test_the_history_buckets_have_the_same_edges_on_both_sides() -> None:
    source = (LUA / "lib" / "history.lua").read_text()
    table = re.search(r"^local HISTORY_EDGES = \{([^}]*)\}", source, re.MULTILINE)
    assert table is not None
    assert tuple(int(v) for v in table[1].replace("\n", " ").split(",")) == history.EDGES_MS


def test_the_sources_have_constants_to_compare() -> None:
    assert len(LUA_CONSTANTS) >= 40
    assert LUA_CONSTANTS[("lib/status.lua", "ST_STALE")] == 3


def test_every_lua_constant_is_paired_or_said_to_be_the_scripts_own() -> None:
    placed = set(EQUAL) | set(WITHIN) | BEHAVIOUR | set(LUA_ONLY)
    placed |= {
        (f, n) for (f, n) in LUA_CONSTANTS for (ef, p) in ENUMS if f == ef and n.startswith(p)
    }
    assert set(LUA_CONSTANTS) - placed == set(), "place each new Lua constant in this file"
    assert placed - set(LUA_CONSTANTS) == set(), "constants this file names are gone from lua/"


@pytest.mark.parametrize("key", sorted(EQUAL), ids=lambda k: f"{k[0]}:{k[1]}")
def test_a_mirrored_setting_is_equal(key: tuple[str, str]) -> None:
    for python, where in EQUAL[key]:
        assert LUA_CONSTANTS[key] == python, f"{key[0]} {key[1]} != {where}"


@pytest.mark.parametrize("key", sorted(WITHIN), ids=lambda k: f"{k[0]}:{k[1]}")
def test_python_batches_stay_within_what_the_scripts_accept(key: tuple[str, str]) -> None:
    limit = LUA_CONSTANTS[key]
    assert isinstance(limit, int)
    for value, where in WITHIN[key]:
        assert 1 <= value <= limit, f"{where} = {value} exceeds {key[0]} {key[1]} = {limit}"


@pytest.mark.parametrize("prefix", sorted(ENUMS), ids=lambda p: p[0])
def test_lua_codes_match_their_python_enum(prefix: tuple[str, str]) -> None:
    lua = enum_members(prefix)
    python = {m.name: m.value for m in ENUMS[prefix]}
    only_lua = {("lib/workers.lua", "WORKER_"): {"REMOVED"}}.get(prefix, set())
    # IDLE is Python's reading of an active worker holding nothing; no script writes it.
    only_python = {("lib/workers.lua", "WORKER_"): {"IDLE"}}.get(prefix, set())
    assert {k: v for k, v in lua.items() if k not in only_lua} == {
        k: v for k, v in python.items() if k not in only_python
    }


def test_the_liveness_counters_python_reads_are_the_ones_the_scripts_write() -> None:
    written = {
        m for path in LUA.rglob("*.lua") for m in re.findall(r"'stat:(\w+)'", path.read_text())
    }
    assert written == set(liveness_stats._STAT_FIELDS)


async def test_worker_health_defaults_match_the_scripts(client: FloClient) -> None:
    """``configure`` refuses remove_after_ms < heartbeat_timeout_ms, taking the unset one
    from its own default: where the refusal starts shows that default."""
    heartbeat = LUA_CONSTANTS[("lib/workers.lua", "DEFAULT_HEARTBEAT_TIMEOUT_MS")]
    remove = LUA_CONSTANTS[("lib/workers.lua", "DEFAULT_REMOVE_AFTER_MS")]
    assert isinstance(heartbeat, int) and isinstance(remove, int)
    ns = client.namespace
    with pytest.raises(ValidationError):
        await client.worker.configure(remove_after_ms=heartbeat - 1, namespace=f"{ns}-a")
    await client.worker.configure(remove_after_ms=heartbeat, namespace=f"{ns}-a")
    with pytest.raises(ValidationError):
        await client.worker.configure(heartbeat_timeout_ms=remove + 1, namespace=f"{ns}-b")
    await client.worker.configure(heartbeat_timeout_ms=remove, namespace=f"{ns}-b")
