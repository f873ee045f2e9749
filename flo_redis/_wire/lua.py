"""Reading the Lua sources: includes flattened, header contracts parsed.

Each script under ``lua/`` opens with a header contract::

    --[[ run_touch
      What it does.
      KEYS[1] runs    HASH  run_id -> msgpack record
      ARGV[1] run_id
      Returns {status, ...}
    ]]

and may pull shared helpers in with ``--@include lib/name.lua`` lines. Includes are
flattened depth first, each file at most once; a cycle or a missing file is refused with
:class:`LuaSourceError` at load time, never at call time. A helper function the
flattened script never names again (``local function f(`` at the start of a line, its
body ending at the next line that is exactly ``end``) is left out: Redis runs a script's
whole text on every call, so each helper defined costs every call a closure.

:func:`library` puts every script in one Redis Functions library instead: the helpers of
``lib/`` once, at the top, and each script's own text as a function of it. Redis runs
a library's top level once, when it is loaded, so a call pays for its script's own code
alone (lua/README.md, "Functions").
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from flo_redis._wire.lua_state import StateError, check_stateless

if sys.version_info >= (3, 11):
    from importlib.resources.abc import Traversable
else:  # Python 3.10
    from importlib.abc import Traversable

_INCLUDE = re.compile(r"^--@include\s+(\S+)\s*$", re.MULTILINE)
_HEADER = re.compile(r"\A--\[\[\s*(\S+)\s*\n(.*?)\]\]", re.DOTALL)
_VARIADIC_ARGV = re.compile(r"^\s*ARGV\[\d+\.\.\w+\]", re.MULTILINE)
_SLOT = re.compile(r"^\s*(KEYS|ARGV)\[(\d+)(?:\.\.\w+)?\]\s+(\S+)", re.MULTILINE)
_FUNCTION = re.compile(r"^local function (\w+)\(", re.MULTILINE)
_END = re.compile(r"^end[ \t]*(?:\n|\Z)", re.MULTILINE)
_NAME = re.compile(r"\w+")
# What is not code: comments (long, then line) and string literals (long, quoted), so
# that a helper named in a comment or a string is not kept for it.
_NOT_CODE = re.compile(
    r"--\[(=*)\[.*?\]\1\]"
    r"|--[^\n]*"
    r"|\[(=*)\[.*?\]\2\]"
    r"|\"(?:\\.|[^\"\\\n])*\""
    r"|'(?:\\.|[^'\\\n])*'",
    re.DOTALL,
)


class LuaSourceError(Exception):
    """A Lua source is malformed: bad header, missing or cyclic include."""


@dataclass(frozen=True, slots=True)
class LuaScript:
    """One flattened script with its parsed header contract."""

    name: str
    source: str
    sha: str
    keys: tuple[str, ...]  # the fixed KEYS, by header name
    argv: tuple[str, ...]
    keys_tail: str | None  # the name of a "KEYS[i..n] name" tail, if the script has one
    returns: str
    variadic_argv: bool = False  # the last ARGV entry is "ARGV[i..n]": i and beyond
    function: str = ""  # its name as a Redis Function of :func:`library` (``FCALL``)

    @property
    def variadic_keys(self) -> bool:
        return self.keys_tail is not None


def lua_root() -> Traversable:
    """The folder holding the Lua sources: shipped in the wheel as ``flo_redis.lua``."""
    try:
        root = resources.files("flo_redis.lua")
        if root.joinpath("action_claim.lua").is_file():
            return root
    except ModuleNotFoundError:
        pass
    return Path(__file__).resolve().parents[2] / "lua"


def _read(root: Traversable, rel: str) -> str:
    node = root
    for part in rel.split("/"):
        node = node.joinpath(part)
    if not node.is_file():
        raise LuaSourceError(f"missing Lua include {rel!r}")
    return node.read_text(encoding="utf-8")


def flatten(root: Traversable, rel: str, texts: dict[str, str] | None = None) -> str:
    """The source of ``rel`` with every include inlined once, in dependency order, and
    without the helper functions it never uses (module docstring). ``texts``: files
    read before, by name (those read now are added)."""
    pieces = _pieces(root, [rel], {} if texts is None else texts)
    return _without_unused([_Piece.of(text) for text in pieces])


def _pieces(root: Traversable, names: list[str], texts: dict[str, str]) -> list[str]:
    """``names`` and all they include, each file once, in dependency order: each file's
    text between its includes (``texts``: as :func:`flatten`'s)."""
    seen: set[str] = set()
    pieces: list[str] = []

    def expand(name: str, stack: tuple[str, ...]) -> None:
        if name in stack:
            cycle = " -> ".join((*stack, name))
            raise LuaSourceError(f"include cycle: {cycle}")
        if name in seen:
            return
        seen.add(name)
        text = texts.get(name)
        if text is None:
            text = texts[name] = _read(root, name)
        between, included = _split(text)
        for piece, inner in zip(between[:-1], included, strict=True):
            pieces.append(piece)
            expand(inner, (*stack, name))
        pieces.append(between[-1])

    for name in names:
        expand(name, ())
    return pieces


@functools.lru_cache(maxsize=1024)
def _split(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``text`` between its includes (one more stretch than includes), and the files it
    includes, in order (helpers recur in many scripts: each is split once)."""
    matches = list(_INCLUDE.finditer(text))
    ends = [0, *(m.end() for m in matches)]
    starts = [*(m.start() for m in matches), len(text)]
    between = tuple(text[a:b] for a, b in zip(ends, starts, strict=True))
    return between, tuple(m.group(1) for m in matches)


@dataclass(frozen=True, slots=True)
class _Piece:
    """A stretch of Lua text: how often it names each name, and its top-level local
    functions as (name, start, end, how often the function's text names each name)."""

    text: str
    names: Counter[str]
    functions: tuple[tuple[str, int, int, Counter[str]], ...]

    @staticmethod
    @functools.lru_cache(maxsize=1024)
    def of(text: str) -> _Piece:  # helpers recur in many scripts: read each once
        functions = []
        for found in _FUNCTION.finditer(text):
            end = _END.search(text, found.end())
            if end is None:
                continue
            body = text[found.start() : end.end()]
            if "\nlocal function " not in body:
                functions.append((found.group(1), found.start(), end.end(), _names(body)))
        return _Piece(text, _names(text), tuple(functions))


def _names(text: str) -> Counter[str]:
    """How often the code of ``text`` names each name (comments and strings aside)."""
    return Counter(_NAME.findall(_NOT_CODE.sub(" ", text)))


def _without_unused(pieces: list[_Piece]) -> str:
    """The pieces' text without the top-level local functions nothing else names; a
    function named only by such functions goes too."""
    functions = [(n, f) for n, piece in enumerate(pieces) for f in piece.functions]
    defined = {name for _, (name, *_) in functions}
    uses = dict.fromkeys(defined, 0)
    for piece in pieces:
        for name in defined & piece.names.keys():
            uses[name] += piece.names[name]
    dropped: set[tuple[int, int]] = set()  # (piece, start)
    changed = True
    while changed:
        changed = False
        for n, (name, start, _, names) in functions:
            if (n, start) not in dropped and uses[name] <= names[name]:
                for other in defined & names.keys():
                    uses[other] -= names[other]
                dropped.add((n, start))
                changed = True
    out: list[str] = []
    for n, piece in enumerate(pieces):
        at = 0
        for _, start, end, _ in piece.functions:
            if (n, start) in dropped:
                out.append(piece.text[at:start])
                at = end
        out.append(piece.text[at:])
    return "".join(out)


def parse_header(name: str, text: str) -> tuple[tuple[str, ...], tuple[str, ...], str | None, str]:
    """(fixed KEYS names, ARGV names, KEYS tail name or None, returns line) from a
    script's header. A tail is declared ``KEYS[i..n] name``: keys i and beyond."""
    match = _HEADER.match(text)
    if match is None:
        raise LuaSourceError(f"{name}.lua has no header contract (--[[ {name} ... ]])")
    if match.group(1) != name:
        raise LuaSourceError(f"{name}.lua header names {match.group(1)!r}")
    body = match.group(2)
    keys: list[str] = []
    argv: list[str] = []
    tail: str | None = None
    for kind, index, label in _SLOT.findall(body):
        target = keys if kind == "KEYS" else argv
        if tail is not None and kind == "KEYS":
            raise LuaSourceError(f"{name}.lua header: KEYS[{index}] follows the KEYS tail")
        if int(index) != len(target) + 1:
            raise LuaSourceError(f"{name}.lua header: {kind}[{index}] is out of order")
        if kind == "KEYS" and re.search(rf"KEYS\[{index}\.\.", body):
            tail = label
        else:
            target.append(label)
    returns = next((line.strip() for line in body.splitlines() if "Returns" in line), "")
    if not returns:
        raise LuaSourceError(f"{name}.lua header does not say what it returns")
    return tuple(keys), tuple(argv), tail, returns


def _lib_texts(base: Traversable) -> dict[str, str]:
    """Every helper under ``lib/``: file name -> text."""
    lib = base.joinpath("lib")
    if not lib.is_dir():
        return {}
    return {e.name: e.read_text(encoding="utf-8") for e in lib.iterdir() if e.name.endswith(".lua")}


def check_state(lib: dict[str, str], scripts: dict[str, str]) -> None:
    """:class:`LuaSourceError` naming the file and line where a ``lib/`` helper keeps
    state at its file level, or code writes to it (:mod:`flo_redis._wire.lua_state`): a
    Functions library would keep it from one call to the next."""
    try:
        check_stateless(lib, scripts)
    except StateError as exc:
        raise LuaSourceError(str(exc)) from None


def load_all(root: Traversable | None = None) -> dict[str, LuaScript]:
    """Every top-level script under ``lua/``, flattened and with its header parsed; a
    helper that keeps state between calls is refused (:func:`check_state`)."""
    base = root if root is not None else lua_root()
    scripts: dict[str, LuaScript] = {}
    texts: dict[str, str] = {}
    read: dict[str, str] = {}  # each file (a helper: by many scripts) read once
    for entry in sorted(base.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".lua"):
            continue
        name = entry.name[: -len(".lua")]
        text = texts[entry.name] = read[entry.name] = entry.read_text(encoding="utf-8")
        keys, argv, tail, returns = parse_header(name, text)
        source = flatten(base, entry.name, read)
        sha = hashlib.sha1(source.encode()).hexdigest()
        scripts[name] = LuaScript(
            name, source, sha, keys, argv, tail, returns, bool(_VARIADIC_ARGV.search(text))
        )
    check_state(_lib_texts(base), texts)
    return scripts


@dataclass(frozen=True, slots=True)
class LuaLibrary:
    """Every script as a Redis Function of one library (:func:`library`)."""

    name: str  # the library's name: flo_<id>, the id naming this set of scripts
    source: str  # what ``FUNCTION LOAD`` is sent
    functions: dict[str, str]  # the function's name -> the script's name


# Lua 5.1 refuses a function with more than 200 locals active at once, and a library's
# top level is one function: helpers only one family of scripts uses are defined inside
# a ``do ... end`` block of that family's, which ends their locals with it.
_MAX_LOCALS = 200
# A script's family is its name's first word, but for these, which share their helpers:
# a group is a stream's, and runs and schedules are an action queue's.
_FAMILY_OF = {"group": "stream", "run": "action", "schedule": "action"}
_LOCALS = re.compile(r"^local\s+(?:function\s+\w+|([\w\s,]+?)\s*=)", re.MULTILINE)


def _family(script: str) -> str:
    word = script.split("_", 1)[0]
    return _FAMILY_OF.get(word, word)


def _files(includes: Callable[[str], list[str]], names: list[str]) -> list[str]:
    """``names`` and every file they include, each once, includes first (``includes``:
    the files a file includes, by its name)."""
    seen: set[str] = set()
    ordered: list[str] = []

    def expand(name: str) -> None:
        if name not in seen:
            seen.add(name)
            for included in includes(name):
                expand(included)
            ordered.append(name)

    for name in names:
        expand(name)
    return ordered


def _local_count(text: str) -> int:
    """The top-level locals ``text`` declares (``local function f``: one; ``local a, b =``:
    two)."""
    return sum(
        1 if m.group(1) is None else len(m.group(1).split(",")) for m in _LOCALS.finditer(text)
    )


def library(
    scripts: dict[str, LuaScript], root: Traversable | None = None
) -> tuple[LuaLibrary, dict[str, LuaScript]]:
    """The library of ``scripts`` (as :func:`load_all` made them from ``root``), and the
    scripts with their function names. Its id is the hash of the helpers and the
    scripts' SHAs, so each version of the scripts is a library of its own; each
    function's name holds the library's id and its script's SHA (Function names are
    unique across libraries).

    Helpers the scripts of more than one family use are defined at the top; those of
    one family only, inside that family's ``do ... end`` block with its functions
    (lua/README.md, "Functions"), so no point of the library holds more than
    :data:`_MAX_LOCALS` locals; past that the build is refused (:class:`LuaSourceError`)
    rather than the load."""
    base = root if root is not None else lua_root()
    # Each file read and scanned for its includes once, though many scripts include it.
    texts: dict[str, str] = {}
    included: dict[str, list[str]] = {}

    def read(name: str) -> str:
        if name not in texts:
            texts[name] = _read(base, name)
        return texts[name]

    def includes(name: str) -> list[str]:
        if name not in included:
            included[name] = [m.group(1) for m in _INCLUDE.finditer(read(name))]
        return included[name]

    names = sorted(e.name for e in base.joinpath("lib").iterdir() if e.name.endswith(".lua"))
    helpers = _files(includes, [f"lib/{n}" for n in names])
    users: dict[str, set[str]] = {name: set() for name in helpers}
    for script_name in scripts:
        for name in _files(includes, [f"{script_name}.lua"]):
            if name in users:
                users[name].add(_family(script_name))
    own = {name: _INCLUDE.sub("", read(name)) for name in helpers}
    families = {_family(name) for name in scripts}
    shared = [name for name in helpers if users[name] in (families, set())]
    digest = hashlib.sha1("".join(own[n] for n in helpers).encode())  # with unused ones
    for name in sorted(scripts):
        digest.update(f"{name} {scripts[name].sha}\n".encode())
    lib_name = f"flo_{digest.hexdigest()[:12]}"
    parts = [f"#!lua name={lib_name}\n", *(own[n] for n in shared)]
    top_locals = sum(_local_count(own[n]) for n in shared)
    named: dict[str, LuaScript] = {}
    functions: dict[str, str] = {}
    for family in sorted(families):
        mine = [n for n in helpers if family in users[n] and n not in shared]
        peak = top_locals + sum(_local_count(own[n]) for n in mine)
        if peak > _MAX_LOCALS:
            raise LuaSourceError(
                f"the Functions library would hold {peak} locals at once in the "
                f"{family!r} scripts' block (Lua allows {_MAX_LOCALS}): move helpers "
                "only those scripts use out of the helpers every family includes, or "
                "fold small constants into their functions"
            )
        parts.append(f"\ndo -- the {family} scripts\n")
        parts += [own[n] for n in mine]
        for name, script in sorted(scripts.items()):
            if _family(name) != family:
                continue
            function = f"{lib_name}_{script.sha}"
            body = _INCLUDE.sub("", read(f"{name}.lua"))
            parts.append(
                f"\nredis.register_function('{function}', function(KEYS, ARGV)\n{body}\nend)\n"
            )
            functions[function] = name
            named[name] = dataclasses.replace(script, function=function)
        parts.append(f"end -- the {family} scripts\n")
    return LuaLibrary(lib_name, "".join(parts), functions), named
