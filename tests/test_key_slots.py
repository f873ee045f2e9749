"""Every script is single-slot by construction: its KEYS, built by ``flo_redis.keys``,
hash to one slot, so ``CROSSSLOT`` cannot happen on Redis Cluster.

The keys of each script are derived from its header contract (``KEYS[i] name``) and the
key-schema module, for every ``lua/*.lua``; a script whose keys this test does not know
how to build fails it, so a new script cannot slip by unchecked.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from redis.crc import key_slot

from flo_redis._scripts import SCRIPTS
from flo_redis.keys import (
    ActionKeys,
    StreamKeys,
    action_keys,
    namespace_keys,
    owner_channel,
    stream_keys,
)

LUA = Path(__file__).resolve().parent.parent / "lua"
_VARIADIC = re.compile(r"^\s*KEYS\[(\d+)\.\.\w+\]", re.MULTILINE)

# Header names that differ from the key-schema field names.
ALIASES = {"def": "definition", "idem": "idempotency", "ids": "worker_ids"}
OWNERS = ("host-1-abc", "host-2-def")

# Variadic KEYS tails: how each script's extra keys are built.
VARIADIC: dict[str, Callable[[ActionKeys], list[str]]] = {
    "action_delete": lambda k: list(k.all_data_keys()),
    "action_reclaim": lambda k: [owner_channel(k.tag, o) for o in OWNERS],
}

STREAM_VARIADIC: dict[str, Callable[[StreamKeys], list[str]]] = {
    "group_reclaim": lambda k: [owner_channel(k.tag, o) for o in OWNERS],
}

NAMES = [("shop", "resize"), ("t-1", "a:b:c"), ("ünï", "名前"), ("n" * 255, "x" * 255)]


def _field(obj: object, script: str, name: str) -> str:
    attr = ALIASES.get(name, name)
    if not hasattr(obj, attr):
        pytest.fail(f"{script}: don't know how to build KEYS entry {name!r}; teach this test")
    value = getattr(obj, attr)
    assert isinstance(value, str), (script, name)
    return value


def script_keys(script: str, namespace: str, name: str, partition: int = 0) -> list[str]:
    """The KEYS the script is called with, built from the key-schema module."""
    header = SCRIPTS[script]
    text = (LUA / f"{script}.lua").read_text()
    variadic = _VARIADIC.search(text)
    fixed = header.keys[: int(variadic.group(1)) - 1] if variadic else header.keys
    family = script.split("_", 1)[0]
    if family in ("action", "run", "slot"):
        keys = action_keys(namespace, name)
        out = [
            owner_channel(keys.tag, OWNERS[0]) if n == "channel" else _field(keys, script, n)
            for n in fixed
        ]
        if variadic:
            if script not in VARIADIC:
                pytest.fail(f"{script}: variadic KEYS this test cannot build; teach it")
            out += VARIADIC[script](keys)
        return out
    if family in ("stream", "group"):
        sk = stream_keys(namespace, name, partition)
        gk = sk.group("billing")
        out = [_field(sk if hasattr(sk, ALIASES.get(n, n)) else gk, script, n) for n in fixed]
        if variadic:
            if script not in STREAM_VARIADIC:
                pytest.fail(f"{script}: variadic KEYS this test cannot build; teach it")
            out += STREAM_VARIADIC[script](sk)
        return out
    if variadic:
        pytest.fail(f"{script}: variadic KEYS this test cannot build; teach it")
    if family == "worker":
        ns = namespace_keys(namespace)
        return [_field(ns, script, n) for n in fixed]
    pytest.fail(f"{script}: no key family for prefix {family!r}; teach this test")


def test_the_scripts_are_the_lua_files() -> None:
    assert set(SCRIPTS) == {p.stem for p in LUA.glob("*.lua")}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
@pytest.mark.parametrize(("namespace", "name"), NAMES)
def test_every_scripts_keys_hash_to_one_slot(script: str, namespace: str, name: str) -> None:
    partitions = (0, 1, 7) if script.startswith(("stream_", "group_")) else (0,)
    for partition in partitions:
        keys = script_keys(script, namespace, name, partition)
        assert keys, script
        assert len(set(keys)) == len(keys), f"{script}: a key is passed twice"
        slots = {key_slot(k.encode()) for k in keys}
        assert len(slots) == 1, f"{script} (partition {partition}) spans slots {slots}"


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
