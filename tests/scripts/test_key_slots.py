"""Every script is single-slot by construction: its KEYS, built by the gateway from
``flo_redis._wire.keys``, hash to one slot, so ``CROSSSLOT`` cannot happen on Redis Cluster.

The keys of each script are built as the gateway builds them for a call — by header
name (``KEYS[i] name``) from the key objects — for every ``lua/*.lua``; a script whose
keys this test does not know how to build fails it, so a new script cannot slip by
unchecked.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.crc import key_slot

from flo_redis._wire.gateway import ALL
from flo_redis._wire.keys import (
    HandoffChannel,
    OwnerChannel,
    action_keys,
    batch_keys,
    dashboard_keys,
    namespace_keys,
    notice_channel,
    owner_channel,
    queue_keys,
    stream_keys,
)
from flo_redis._wire.runner import SCRIPTS

LUA = Path(__file__).resolve().parents[2] / "lua"
OWNERS = ("host-1-abc", "host-2-def")

NAMES = [("shop", "resize"), ("t-1", "a:b:c"), ("ünï", "名前"), ("n" * 255, "x" * 255)]


def script_keys(script: str, namespace: str, name: str, partition: int = 0) -> list[str]:
    """The KEYS the script is called with: built by the gateway, by header name, from
    the key objects of the script's family (and its declared variadic tail)."""
    gateway = ALL[script]
    family = script.split("_", 1)[0]
    source: object
    if family in ("action", "run", "slot", "schedule", "graph"):
        keys = action_keys(namespace, name)
        tag = keys.tag
        source = keys
        if script == "slot_reclaim":
            source = (keys, OwnerChannel.of(tag, OWNERS[0]))
        elif script == "action_claim":
            source = (keys, HandoffChannel.of(tag, OWNERS[0]))
        tails = {
            "data_keys": list(keys.all_data_keys()),
            "notice": [notice_channel(tag, OWNERS[0])],
        }
    elif family in ("stream", "group"):
        sk = stream_keys(namespace, name, partition)
        tag = sk.tag
        source = sk if family == "stream" else (sk, sk.group("billing"))
        tails = {}
    elif family == "queue":
        qk = queue_keys(namespace, name)
        tag, source, tails = qk.tag, qk, {}
    elif family == "dashboard":
        source = dashboard_keys(namespace, "2001:db8::/64", "ab" * 32)
        tag, tails = "", {}
    elif family == "worker" or script == "batch_due":
        source = namespace_keys(namespace)
        tag, tails = source.tag, {}
    elif family == "batch":
        source = batch_keys(namespace, name)
        tag, tails = source.tag, {}
    elif family == "quarantine":  # any quarantine: here a group's, the others' below
        sk = stream_keys(namespace, name, partition)
        tag, source, tails = sk.tag, sk.group("billing"), {}
    else:
        pytest.fail(f"{script}: no key family for prefix {family!r}; teach this test")
    tails["channels"] = [owner_channel(tag, o) for o in OWNERS]
    tail_name = SCRIPTS[script].keys_tail
    if tail_name is not None and tail_name not in tails:
        pytest.fail(f"{script}: variadic KEYS tail {tail_name!r} this test cannot build")
    return gateway.keys(source, tails[tail_name] if tail_name else ())


def test_the_scripts_are_the_lua_files() -> None:
    assert set(SCRIPTS) == {p.stem for p in LUA.glob("*.lua")}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
@pytest.mark.parametrize(("namespace", "name"), NAMES)
def test_every_scripts_keys_hash_to_one_slot(script: str, namespace: str, name: str) -> None:
    partitions = (0, 1, 7) if script.startswith(("stream_", "group_", "quarantine_")) else (0,)
    for partition in partitions:
        keys = script_keys(script, namespace, name, partition)
        assert keys, script
        assert len(set(keys)) == len(keys), f"{script}: a key is passed twice"
        slots = {key_slot(k.encode()) for k in keys}
        assert len(slots) == 1, f"{script} (partition {partition}) spans slots {slots}"


@pytest.mark.parametrize(("namespace", "name"), NAMES)
def test_every_quarantine_lives_in_the_slot_of_what_it_serves(namespace: str, name: str) -> None:
    pairs = [
        (action_keys(namespace, name).quarantine, action_keys(namespace, name).runs),
        (queue_keys(namespace, name).quarantine, queue_keys(namespace, name).msgs),
        (namespace_keys(namespace).quarantine, namespace_keys(namespace).workers),
        *(
            (
                stream_keys(namespace, name, p).group("g").quarantine,
                stream_keys(namespace, name, p).log,
            )
            for p in (0, 3)
        ),
    ]
    for quarantine, served in pairs:
        assert quarantine.endswith(":quarantine")
        assert key_slot(quarantine.encode()) == key_slot(served.encode()), quarantine


def test_the_partitions_of_a_stream_have_their_own_slots() -> None:
    tags = {stream_keys("shop", "orders", p).tag for p in range(16)}
    assert len(tags) == 16
    slots = {key_slot(stream_keys("shop", "orders", p).log.encode()) for p in range(16)}
    assert len(slots) > 8  # spread over the key space, so over a cluster's nodes
    group_keys = stream_keys("shop", "orders", 3).group("g")
    assert key_slot(group_keys.due.encode()) == key_slot(
        stream_keys("shop", "orders", 3).log.encode()
    )
    names = {stream_keys("shop", "orders", p).log for p in range(16)}
    names |= {stream_keys("shop", f"orders/{p}").log for p in range(1, 16)}
    assert len(names) == 31  # no partition shares key names with another stream
