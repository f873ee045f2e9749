"""The Lua sources: header contracts, call sites, the loader, NOSCRIPT, hash slots."""

from __future__ import annotations

import contextlib
import dataclasses
import re
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot
from redis.exceptions import ResponseError
from script_state import (
    by_sha,
    calls_functions,
    forget_scripts,
    library_functions,
    library_loaded,
)

from flo_redis import ActionRegisterOptions, FloClient, RunStatus, WorkerAwaitOptions
from flo_redis._wire.gateway import ACTION_CLAIM, ACTION_DELETE, ALL, RUN_TOUCH, Script
from flo_redis._wire.keys import ActionKeys, HandoffChannel, action_keys, namespace_keys
from flo_redis._wire.lua import _HEADER, LuaSourceError, flatten, library, load_all
from flo_redis._wire.runner import LIBRARY, SCRIPTS
from flo_redis._wire.status import Status

ROOT = Path(__file__).resolve().parents[2]
LUA = ROOT / "lua"


def body_of(name: str) -> str:
    text = (LUA / f"{name}.lua").read_text()
    match = _HEADER.match(text)
    assert match is not None
    return text[match.end() :]


def named_slots(body: str, kind: str) -> dict[int, str]:
    """``local x = KEYS[i]``, ``{x = KEYS[i], ...}`` and ``local x = f(ARGV[i])`` names."""
    found: dict[int, str] = {}
    for match in re.finditer(rf"(\w+)\s*=\s*(?:[\w.]+\()?{kind}\[(\d+)\]", body):
        index = int(match.group(2))
        assert index not in found, f"{kind}[{index}] is named twice"
        found[index] = match.group(1)
    return found


# --- header contracts -------------------------------------------------------------


def test_every_script_is_loaded() -> None:
    on_disk = {p.stem for p in LUA.glob("*.lua")}
    assert set(SCRIPTS) == on_disk
    assert on_disk >= {"action_claim", "action_invoke", "run_complete", "worker_poll"}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_header_names_every_key_and_arg_as_the_script_does(name: str) -> None:
    script = SCRIPTS[name]
    assert script.returns.startswith("Returns {status"), script.returns
    body = body_of(name)
    for kind, header in (("KEYS", script.keys), ("ARGV", script.argv)):
        if kind == "ARGV" and script.variadic_argv:
            header = header[:-1]  # the tail ARGV[i..n] is read in a loop
        named = named_slots(body, kind)
        in_code = {i: (n.removesuffix("_key") if kind == "KEYS" else n) for i, n in named.items()}
        assert in_code == dict(enumerate(header, 1)), f"{name}: {kind} header vs code"
        # Named once at the top, never indexed again deeper in the body.
        refs = [int(r) for r in re.findall(rf"{kind}\[(\d+)\]", body)]
        if kind == "KEYS" and script.variadic_keys:
            refs = [r for r in refs if r <= len(header)]  # the tail is the script's own
        assert sorted(refs) == list(range(1, len(header) + 1)), name


def test_status_codes_match_python() -> None:
    text = (LUA / "lib" / "status.lua").read_text()
    lua = {m.group(1): int(m.group(2)) for m in re.finditer(r"local ST_(\w+) = (\d+)", text)}
    assert lua == {s.name: s.value for s in Status}


@pytest.mark.parametrize("path", sorted((LUA / "lib").glob("*.lua")), ids=lambda p: p.name)
def test_helpers_define_only_locals(path: Path) -> None:
    for line in path.read_text().splitlines():
        if re.match(r"^(function\b|[A-Za-z_]\w*\s*=[^=])", line):
            pytest.fail(f"{path.name}: global definition: {line!r}")
    code = re.sub(r"--.*", "", re.sub(r"--\[\[.*?\]\]", "", path.read_text(), flags=re.DOTALL))
    assert not re.search(r"KEYS|ARGV", code), f"{path.name} reads KEYS/ARGV itself"


def test_every_script_has_one_gateway_object() -> None:
    assert set(ALL) == set(SCRIPTS)
    for name, script in ALL.items():
        assert script.lua is SCRIPTS[name]


def test_every_header_key_is_a_field_of_the_scripts_key_classes() -> None:
    # The gateway matches header names to key-class fields when it is declared; a
    # header naming a key none of its classes has is refused there.
    with pytest.raises(LuaSourceError, match="no field of ActionKeys"):
        Script("group_read", ActionKeys, lambda raw, _: raw)
    keys = action_keys("shop", "resize")
    assert ACTION_CLAIM.keys((keys, HandoffChannel.of(keys.tag, "o1")))[15] == (
        HandoffChannel.of(keys.tag, "o1").handoff
    )


def test_a_variadic_tail_is_declared_in_the_header() -> None:
    assert SCRIPTS["action_reclaim"].keys_tail == "channels"
    assert SCRIPTS["group_reclaim"].keys_tail == "channels"
    assert SCRIPTS["action_delete"].keys_tail == "data_keys"
    assert SCRIPTS["run_touch"].keys_tail is None
    with pytest.raises(LuaSourceError, match="KEYS tail"):
        Script("action_reclaim", ActionKeys, lambda raw, _: raw)


async def test_wrong_arity_is_refused_before_sending(client: FloClient) -> None:
    keys = action_keys(client.namespace, "resize")
    with pytest.raises(TypeError):
        await RUN_TOUCH(client.session, keys, ["1", "", "w"])
    with pytest.raises(TypeError):
        await RUN_TOUCH(client.session, keys, ["1"])
    with pytest.raises(TypeError):
        await RUN_TOUCH(client.session, keys, ["1", "", "w", 1], tail=["x"])
    assert ACTION_DELETE.keys(keys, tail=["a", "b"]) == [keys.meta, "a", "b"]


# --- the loader -------------------------------------------------------------------


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def header(name: str) -> str:
    return f"--[[ {name}\n  KEYS[1] a  HASH\n  ARGV[1] x\n  Returns {{status}}\n]]\n"


def test_loader_refuses_an_include_cycle(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "main.lua": header("main") + "--@include lib/a.lua\nreturn 1\n",
            "lib/a.lua": "--@include lib/b.lua\nlocal function a() end\n",
            "lib/b.lua": "--@include lib/a.lua\nlocal function b() end\n",
        },
    )
    with pytest.raises(LuaSourceError, match="cycle"):
        load_all(tmp_path)


def test_loader_refuses_a_self_include(tmp_path: Path) -> None:
    write(tmp_path, {"main.lua": header("main") + "--@include main.lua\n"})
    with pytest.raises(LuaSourceError, match="cycle"):
        load_all(tmp_path)


def test_loader_refuses_a_missing_include(tmp_path: Path) -> None:
    write(tmp_path, {"main.lua": header("main") + "--@include lib/nope.lua\nreturn 1\n"})
    with pytest.raises(LuaSourceError, match=r"lib/nope\.lua"):
        load_all(tmp_path)


def test_loader_inlines_each_include_once_in_dependency_order(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "main.lua": header("main")
            + "--@include lib/b.lua\n--@include lib/a.lua\n--@include lib/b.lua\nreturn 1\n",
            "lib/a.lua": "local A = 1\n",
            "lib/b.lua": "--@include lib/a.lua\nlocal B = A + 1\n",
        },
    )
    source = load_all(tmp_path)["main"].source
    assert source.count("local A = 1") == 1
    assert source.count("local B = A + 1") == 1
    assert source.index("local A = 1") < source.index("local B = A + 1")
    assert "--@include" not in source
    assert flatten(tmp_path, "main.lua") == source


def test_loader_leaves_out_helpers_named_only_in_comments_or_strings(tmp_path: Path) -> None:
    lib = (
        "local function in_comment()\n  return 1\nend\n\n"
        "local function in_string()\n  return 2\nend\n\n"
        "local function called()\n  return 3\nend\n"
    )
    main = (
        header("main")
        + "--@include lib/a.lua\n"
        + "-- in_comment() would do here too\n--[[ so would\n  in_comment ]]\n"
        + "local s = 'in_string' .. \"in_string -- \" .. [[in_comment]]\n"
        + "return called() -- not in_string()\n"
    )
    source = load_all(write(tmp_path, {"main.lua": main, "lib/a.lua": lib}))["main"].source
    assert "local function called(" in source
    assert "local function in_comment(" not in source
    assert "local function in_string(" not in source


def test_loader_leaves_out_helpers_the_script_never_uses(tmp_path: Path) -> None:
    lib = (
        "local function used(x)\n  return x + 1\nend\n\n"
        "local function called_by_unused()\n  return 2\nend\n\n"
        "local function unused()\n  return called_by_unused()\nend\n\n"
        "local function recursive_unused(n)\n  if n > 0 then return recursive_unused(n - 1) end\n"
        "  return 0\nend\n\n"
        "local function passed_as_value()\n  return 3\nend\n"
    )
    main = header("main") + "--@include lib/a.lua\nlocal f = passed_as_value\nreturn used(f())\n"
    source = load_all(write(tmp_path, {"main.lua": main, "lib/a.lua": lib}))["main"].source
    assert "local function used(" in source
    assert "local function passed_as_value(" in source
    for gone in ("unused", "called_by_unused", "recursive_unused"):
        assert f"local function {gone}(" not in source
    assert source.rstrip().endswith("return used(f())")


_DEFINED = re.compile(r"^local function (\w+)\((.*?)^end[ \t]*$", re.MULTILINE | re.DOTALL)


def _code_of(source: str) -> str:
    """``source`` without its comments."""
    return re.sub(r"--[^\n]*", "", re.sub(r"--\[\[.*?\]\]", "", source, flags=re.DOTALL))


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_helper_a_script_keeps_is_one_it_calls(name: str) -> None:
    """Each helper defined costs every call of the script a closure: a script keeps only
    the helpers its code reaches."""
    code = _code_of(SCRIPTS[name].source)
    bodies = {m.group(1): m.group(2) for m in _DEFINED.finditer(code)}
    reached: set[str] = set()
    todo = [_DEFINED.sub("", code)]
    while todo:
        for helper in set(re.findall(r"\w+", todo.pop())) & bodies.keys() - reached:
            reached.add(helper)
            todo.append(bodies[helper])
    assert sorted(bodies.keys() - reached) == []


_LIB_NAMES = {
    name
    for path in (LUA / "lib").glob("*.lua")
    for name in re.findall(r"^local (?:function )?(\w+)", path.read_text(), re.MULTILINE)
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_helper_a_script_names_is_in_its_own_text(name: str) -> None:
    """Sent by SHA (on a cluster, or when FCALL is refused) a script carries only what
    its includes define, while as a function it sees every helper of the library: a
    helper or constant of lib/ it names but does not include works in one mode only."""
    code = _code_of(SCRIPTS[name].source)
    defined = set(re.findall(r"^local (?:function )?(\w+)", code, re.MULTILINE))
    defined |= {n.strip() for line in re.findall(r"^local ([\w, ]+)=", code, re.MULTILINE)
                for n in line.split(",")}  # fmt: skip
    assert sorted((set(re.findall(r"\w+", code)) & _LIB_NAMES) - defined) == []


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("return 1\n", "no header"),
        ("--[[ other\n  Returns {status}\n]]\n", "names 'other'"),
        ("--[[ main\n  KEYS[2] a\n  Returns {status}\n]]\n", "out of order"),
        ("--[[ main\n  KEYS[1] a\n]]\n", "returns"),
    ],
)
def test_loader_refuses_a_bad_header(tmp_path: Path, text: str, error: str) -> None:
    write(tmp_path, {"main.lua": text})
    with pytest.raises(LuaSourceError, match=error):
        load_all(tmp_path)


def test_the_sha_is_the_flattened_source(tmp_path: Path) -> None:
    files = {"main.lua": header("main") + "--@include lib/a.lua\nreturn A\n"}
    write(tmp_path, {**files, "lib/a.lua": "local A = 1\n"})
    first = load_all(tmp_path)["main"].sha
    write(tmp_path, {"lib/a.lua": "local A = 2\n"})
    assert load_all(tmp_path)["main"].sha != first  # a helper change is a new version


def test_the_library_holds_each_helper_once_and_each_script_as_a_function(
    tmp_path: Path,
) -> None:
    files = {
        "one.lua": header("one") + "--@include lib/a.lua\nreturn A\n",
        "two.lua": header("two") + "--@include lib/a.lua\n--@include lib/b.lua\nreturn A + B\n",
        "lib/a.lua": "local A = 1\n",
        "lib/b.lua": "--@include lib/a.lua\nlocal B = A + 1\n",
    }
    write(tmp_path, files)
    lib, scripts = library(load_all(tmp_path), tmp_path)
    assert lib.source.startswith(f"#!lua name={lib.name}\n")
    assert lib.source.count("local A = 1") == 1 and lib.source.count("local B = A + 1") == 1
    assert lib.source.index("local A") < lib.source.index("local B")
    assert "--@include" not in lib.source
    for name, script in scripts.items():
        assert script.function == f"{lib.name}_{script.sha}"
        assert lib.functions[script.function] == name
        registered = f"redis.register_function('{script.function}', function(KEYS, ARGV)\n"
        assert registered + header(name) in lib.source  # the script's own text, as it is
    write(tmp_path, {"lib/b.lua": "--@include lib/a.lua\nlocal B = A + 2\n"})
    changed, again = library(load_all(tmp_path), tmp_path)
    assert changed.name != lib.name  # a new version is a library of its own
    assert again["one"].function != scripts["one"].function  # unique across libraries
    write(tmp_path, {"lib/c.lua": "local function unused()\n  return 3\nend\n"})
    added, same = library(load_all(tmp_path), tmp_path)
    assert {n: s.sha for n, s in same.items()} == {n: s.sha for n, s in again.items()}
    assert added.name != changed.name  # a helper no script uses is in the library too


def test_helpers_of_one_family_are_scoped_to_its_block_and_a_library_past_the_limit_is_refused(
    tmp_path: Path,
) -> None:
    """Lua allows 200 locals at once in a function, and the library's top level is one:
    a helper only one family's scripts use lives in that family's block, and a build
    that would still pass the limit is refused at build time, not by FUNCTION LOAD."""
    files = {
        "queue_one.lua": header("queue_one")
        + "--@include lib/q.lua\n--@include lib/a.lua\nreturn Q + A\n",
        "group_two.lua": header("group_two") + "--@include lib/a.lua\nreturn A\n",
        "lib/a.lua": "local A = 1\n",
        "lib/q.lua": "local Q = 2\n",
    }
    write(tmp_path, files)
    lib, _ = library(load_all(tmp_path), tmp_path)
    block = lib.source.index("do -- the queue scripts")
    assert lib.source.index("local A = 1") < block < lib.source.index("local Q = 2")
    many = "".join(f"local C{i} = {i}\n" for i in range(150))
    write(tmp_path, {"lib/q.lua": many, "lib/a.lua": many.replace("C", "D")})
    with pytest.raises(LuaSourceError, match="locals at once in the 'queue'"):
        library(load_all(tmp_path), tmp_path)


# --- no state outlives a call (flo_redis/_wire/lua_state.py) -----------------------------

_CONSTANTS = (
    "--[[ lib/a\n  Constants and helpers.\n]]\n"
    "local LIMIT = 100\n"
    "local NAME, NEGATIVE, BIG = 'x', -1, 2 ^ 53\n"
    "local FIELDS = {c = 'n:completed', list = {1, 2}, [3] = true}\n"
    "local function fresh(n)\n  local t = {}\n  t.n = n\n  t[LIMIT] = FIELDS.c\n"
    "  return t\nend\n"
    "local load = fresh\n"
)


def lib_with(extra: str, script: str = "return fresh(LIMIT).n\n") -> dict[str, str]:
    return {
        "main.lua": header("main") + "--@include lib/a.lua\n" + script,
        "lib/a.lua": _CONSTANTS + extra,
    }


def test_loader_takes_constants_and_functions_at_a_libs_file_level(tmp_path: Path) -> None:
    fine = (
        "local function build(k)\n"
        "  local out = {k = k, LIMIT = 1}\n"  # table fields named like constants
        "  fresh(k).n = 2\n"  # a call's result is the call's own table
        "  out[LIMIT] = NAME\n"  # a constant as an index, not written to
        "  for i = 1, LIMIT do out[i] = i end\n"
        "  return out\n"
        "end\n"
    )
    assert "main" in load_all(write(tmp_path, lib_with(fine)))


@pytest.mark.parametrize(
    ("extra", "script", "where", "what"),
    [
        ("local SEEN = {}\nlocal function see(k)\n  SEEN[k] = true\nend\n", "",
         "lib/a.lua:16", "'SEEN' is a file-level name of lib/ and is written into"),
        ("local function count()\n  LIMIT = LIMIT + 1\nend\n", "",
         "lib/a.lua:15", "'LIMIT' is a file-level name of lib/ and is assigned"),
        ("local function set(v)\n  if v then FIELDS.list[1] = v end\nend\n", "",
         "lib/a.lua:15", "'FIELDS' is a file-level name of lib/ and is written into"),
        ("local function swap()\n  local x\n  x, NAME = 1, 2\nend\n", "",
         "lib/a.lua:16", "'NAME' is a file-level name of lib/ and is assigned"),
        ("local function add(v)\n  table.insert(FIELDS.list, v)\nend\n", "",
         "lib/a.lua:15", "passed to table.insert"),
        ("local function put(k)\n  rawset(FIELDS, k, 1)\nend\n", "",
         "lib/a.lua:15", "passed to rawset"),
        ("", "FIELDS.c = ARGV[1]\nreturn 1\n", "main.lua:7", "'FIELDS'"),
        ("", "function FIELDS.f() end\nreturn 1\n", "main.lua:7", "defined into"),
        ("", "load = nil\nreturn 1\n", "main.lua:7", "'load' is a file-level name"),
    ],
    ids=["table", "number", "nested", "multiple", "insert", "rawset", "script", "function",
         "alias"],
)  # fmt: skip
def test_loader_refuses_a_write_to_a_libs_file_level_name(
    tmp_path: Path, extra: str, script: str, where: str, what: str
) -> None:
    files = lib_with(extra, script or "return 1\n")
    with pytest.raises(LuaSourceError, match=re.escape(where) + ".*" + re.escape(what)):
        load_all(write(tmp_path, files))


@pytest.mark.parametrize(
    ("extra", "what"),
    [
        ("local CACHE\n", "local CACHE has no constant value"),
        ("local NOW = redis.call('TIME')\n", "'redis' at file level"),
        ("local T = fresh(1)\n", "a call at file level (of 'fresh')"),
        ("local f = function() end\n", "'function' at file level"),
        ("COUNT = 0\n", "'COUNT' at file level"),
        ("do\n  local x = 1\nend\n", "'do' at file level"),
    ],
    ids=["no-value", "redis", "call", "closure", "global", "block"],
)
def test_loader_refuses_anything_but_constants_and_functions_at_a_libs_file_level(
    tmp_path: Path, extra: str, what: str
) -> None:
    with pytest.raises(LuaSourceError, match=r"lib/a\.lua:14: .*" + re.escape(what)):
        load_all(write(tmp_path, lib_with(extra)))


def test_loader_refuses_the_listener_count_kept_across_calls(tmp_path: Path) -> None:
    """The shape that made wait miss ends under Functions: a count cached in a table
    at a helper's file level, kept by the library from one call to the next."""
    cached = (
        "local LISTENERS = {}\n"
        "local function ended(channel, run_id)\n"
        "  local n = LISTENERS[channel]\n"
        "  if n == nil then\n"
        "    n = redis.call('PUBSUB', 'SHARDNUMSUB', channel)[2]\n"
        "    LISTENERS[channel] = n\n"
        "  end\n"
        "  if n > 0 then redis.call('SPUBLISH', channel, run_id) end\n"
        "end\n"
    )
    files = {
        "main.lua": header("main") + "--@include lib/ended.lua\nended(KEYS[1], ARGV[1])\n",
        "lib/ended.lua": cached,
    }
    with pytest.raises(LuaSourceError, match=r"lib/ended\.lua:6: 'LISTENERS'"):
        load_all(write(tmp_path, files))


# --- against Redis ----------------------------------------------------------------


async def test_every_script_compiles_in_redis(raw: aioredis.Redis) -> None:
    for name, script in SCRIPTS.items():
        sha = await raw.script_load(script.source)
        assert sha == script.sha, name


async def test_every_script_is_a_function_of_the_library(raw: aioredis.Redis) -> None:
    with contextlib.suppress(ResponseError):  # loaded already
        await raw.function_load(LIBRARY.source)
    names = await library_functions(raw)
    assert names == {script.function for script in SCRIPTS.values()}
    assert {LIBRARY.functions[name] for name in names} == set(SCRIPTS)


@pytest.mark.parametrize("sha", [False, True], ids=["function", "by-sha"])
async def test_operations_survive_the_server_forgetting_the_scripts(
    client: FloClient, raw: aioredis.Redis, sha: bool
) -> None:
    if sha:
        by_sha(client)
    await client.action.register("job", options=ActionRegisterOptions(max_retries=2))
    await client.worker.register("w1", ["job"])
    run_id = (await client.action.invoke("job", b"x")).run_id
    await forget_scripts(raw)
    task = (await client.worker.await_task("w1", ["job"], WorkerAwaitOptions(block_ms=0))).task
    assert task is not None and task.task_id == run_id
    await forget_scripts(raw)
    await client.worker.touch("w1", "job", run_id)
    await forget_scripts(raw)
    await client.worker.complete("w1", "job", run_id, b"done")
    assert (await client.action.status(run_id)).status == RunStatus.COMPLETED
    if calls_functions(client):
        assert await library_loaded(raw)
    else:
        assert (await raw.script_exists(SCRIPTS["run_complete"].sha)) == [True]


@pytest.mark.parametrize(
    ("namespace", "action"),
    [("shop", "resize"), ("t-1", "a:b:c"), ("ünï", "名前"), ("n" * 255, "a" * 255)],
)
def test_all_keys_of_one_queue_share_a_slot(namespace: str, action: str) -> None:
    keys = action_keys(namespace, action)
    names = [getattr(keys, f.name) for f in dataclasses.fields(ActionKeys)]
    names = [n for n in names if n not in (keys.namespace, keys.action, keys.tag)]
    assert len(names) >= 13
    # delete removes every data key but the counters (run ids are never reused); the
    # channels hold no data
    assert set(names) - set(keys.all_data_keys()) == {keys.meta, keys.nudge, keys.wake, keys.ended}
    assert all(keys.tag in n for n in names)
    assert {key_slot(n.encode()) for n in names} == {key_slot(keys.tag[1:-1].encode())}
    ns = namespace_keys(namespace)
    ns_names = [ns.config, ns.workers, ns.worker_ids, ns.actions, ns.streams]
    assert {key_slot(n.encode()) for n in ns_names} == {key_slot(namespace.encode())}


def test_queues_of_different_actions_may_live_in_different_slots() -> None:
    slots = {key_slot(action_keys("shop", f"a{i}").runs.encode()) for i in range(50)}
    assert len(slots) > 1
