"""The rule that no state outlives a script call, held by the loader (:mod:`flo_redis._wire.lua`).

Redis runs a script sent by SHA as a fresh function on every call, but a Functions
library's top level once, when it is loaded: what a ``lib/`` helper keeps at its file
level lives as long as the library, shared by every later call. So ``lib/`` keeps only
constants there, and :func:`check_stateless` refuses, with :class:`StateError` naming
the file, the line and the name (the loader raises it as its ``LuaSourceError``):

- at the file level of a ``lib/`` file, anything but ``local function NAME(...) ... end``
  and ``local NAME[, NAME ...] = VALUE[, VALUE ...]``, where each value is a constant: a
  number, a string, ``true``, ``false``, ``nil``, a file-level name of ``lib/`` (an alias),
  operators and parentheses over those, or a table constructor of such values. No call,
  no closure, no global, no ``local NAME`` without a value;
- anywhere in ``lib/`` or a script, a write to a file-level name of ``lib/``: assigning
  it (``NAME = ...``, in a multiple assignment too), writing into it (``NAME[...] =``,
  ``NAME.x =``, ``NAME.x[y].z =``, ``function NAME.f()``), or handing it to what writes
  a table in place (``table.insert``, ``table.remove``, ``table.sort``, ``rawset``,
  ``setmetatable``). The check goes by name, not by scope: a local or parameter
  elsewhere named like a file-level name of ``lib/`` must not be written either (name it
  otherwise).

A cache a script wants for its call (``lib/ended.lua``) is a table the script makes and
passes down. A script's own top level is a function body in both modes, so its locals
are the call's. The check reads tokens, not a full Lua grammar: what it refuses is
refused for certain; code written to slip past it (a file-level table handed to a
helper that writes its argument) is for review to catch.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

# One token per match, after the spaces and comments before it (the last match, none).
_TOKEN = re.compile(
    r"(?:\s+|--\[(?P<c>=*)\[.*?\](?P=c)\]|--[^\n]*)*"
    r"(?:(?P<string>\[(?P<s>=*)\[.*?\](?P=s)\]|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*')"
    r"|(?P<number>0[xX][0-9a-fA-F]+|\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)"
    r"|(?P<name>[A-Za-z_]\w*)"
    r"|(?P<op>\.\.\.|\.\.|==|~=|<=|>=|::|\S)"
    r"|\Z)",  # what follows the last token: no token
    re.DOTALL,
)
_OPENS = {"function", "if", "do", "repeat", "(", "[", "{"}  # while/for open with their `do`
_CLOSES = {"end", "until", ")", "]", "}"}
_CONSTANT_WORDS = {"true", "false", "nil", "and", "or", "not"}
_OPERATORS = {"+", "-", "*", "/", "%", "^", "..", "#", "==", "~=", "<", ">", "<=", ">="}
_PUNCTUATION = {"(", ")", "[", "]", ",", ";", "=", "."}
_IN_PLACE = {("table", "insert"), ("table", "remove"), ("table", "sort")}
_IN_PLACE_CALLS = {"rawset", "setmetatable"}


class StateError(Exception):
    """A ``lib/`` file keeps state at its file level, or code writes to it."""


def _is_name(token: str) -> bool:
    return token[0].isalpha() or token[0] == "_"


def _is_literal(token: str) -> bool:
    """A number or a string."""
    first = token[0]
    return (
        first in "\"'0123456789"
        or token[:2] in ("[[", "[=")
        or (first == "." and token[1:2].isdigit())
    )


class _Scan(NamedTuple):
    """A Lua text's tokens (comments and spaces left out, each token's text: a name, a
    number, a string with its quotes, or an operator) and, for each, how deep in blocks
    and brackets it sits and the innermost open one there ('' at file level)."""

    text: str
    tokens: tuple[str, ...]
    depths: tuple[tuple[int, str], ...]

    def where(self, n: int) -> int:
        """The line of token ``n`` (read again: only an error needs it)."""
        for i, match in enumerate(_TOKEN.finditer(self.text)):
            if i == n:
                return self.text.count("\n", 0, match.start(match.lastgroup or 0)) + 1
        return self.text.count("\n") + 1


@functools.lru_cache(maxsize=256)
def _scan(text: str) -> _Scan:
    found = (s or n or w or o for _, s, _, n, w, o in _TOKEN.findall(text))
    tokens = tuple(token for token in found if token)
    stack: list[str] = []
    depths: list[tuple[int, str]] = []
    for token in tokens:
        if stack and token in _CLOSES:
            stack.pop()
        depths.append((len(stack), stack[-1] if stack else ""))
        if token in _OPENS:
            stack.append(token)
    return _Scan(text, tokens, tuple(depths))


def _statements(scan: _Scan) -> list[tuple[int, int]]:
    """(start, end) token ranges of a file's top-level statements, each starting at a
    file-level ``local`` (anything else found at file level starts one of its own)."""
    tokens, depths = scan.tokens, scan.depths
    starts = [
        n
        for n, token in enumerate(tokens)
        if depths[n][0] == 0
        and token in ("local", "function", "return", "if", "do", "for", "while", "repeat")
        and not (token == "function" and n > 0 and tokens[n - 1] == "local")
    ]
    if tokens and (not starts or starts[0] != 0):
        starts.insert(0, 0)  # what comes before the first: a statement of its own
    return list(zip(starts, [*starts[1:], len(tokens)], strict=True))


def _declared(tokens: Sequence[str], start: int, end: int) -> tuple[list[str], int]:
    """The names ``local`` at ``start`` declares, and the index after them."""
    at = start + 1
    if at < end and tokens[at] == "function":
        return ([tokens[at + 1]] if at + 1 < end else []), end
    names: list[str] = []
    while at < end and _is_name(tokens[at]):
        names.append(tokens[at])
        at += 1
        if at < end and tokens[at] == ",":
            at += 1
        else:
            break
    return names, at


def file_level_names(text: str) -> set[str]:
    """The names a ``lib/`` file declares at its file level."""
    scan = _scan(text)
    names: set[str] = set()
    for start, end in _statements(scan):
        if scan.tokens[start] == "local":
            names.update(_declared(scan.tokens, start, end)[0])
    return names


def _check_file_level(path: str, scan: _Scan, known: frozenset[str]) -> None:
    """Refuse a file-level statement of a ``lib/`` file that is not a constant or a
    local function (module docstring)."""
    tokens = scan.tokens
    for start, end in _statements(scan):
        first = tokens[start]
        if first != "local":
            raise StateError(
                f"lib/{path}:{scan.where(start)}: {first!r} at file level; a lib/ file holds "
                "only local constants and local functions there (a Functions library runs "
                "it once and keeps it)"
            )
        if start + 1 < end and tokens[start + 1] == "function":
            continue
        names, at = _declared(tokens, start, end)
        if at >= end or tokens[at] != "=":
            raise StateError(
                f"lib/{path}:{scan.where(start)}: local {', '.join(names) or '?'} has no "
                "constant value; a file-level local of lib/ is a constant (a Functions "
                "library would keep what is assigned to it later, for every call)"
            )
        _check_constant(path, scan, at + 1, end, known)


def _check_constant(path: str, scan: _Scan, start: int, end: int, known: frozenset[str]) -> None:
    """Refuse tokens ``start`` to ``end`` of a file-level ``local`` unless they are a
    constant (module docstring)."""
    tokens = scan.tokens
    braces = 0
    for n in range(start, end):
        token = tokens[n]
        previous = tokens[n - 1] if n > start else ""
        after_value = bool(previous) and (
            (_is_name(previous) and previous not in _CONSTANT_WORDS)
            or previous[0] in "\"'"
            or previous[:2] in ("[[", "[=")
            or previous in (")", "]", "}")
        )
        if after_value and (token in ("(", "{") or (_is_literal(token) and not token[0].isdigit())):
            raise StateError(
                f"lib/{path}:{scan.where(n)}: a call at file level (of {previous!r}); a lib/ "
                "file computes nothing there: write the constant out, or make it a local of "
                "the function that needs it"
            )
        if token == "{":
            braces += 1
        elif token == "}":
            braces -= 1
        elif token == "function":
            raise StateError(
                f"lib/{path}:{scan.where(n)}: a function value at file level; write it as "
                "`local function NAME(...)`"
            )
        elif _is_name(token):
            field_name = braces > 0 and n + 1 < end and tokens[n + 1] == "="
            if not (field_name or previous == "." or token in _CONSTANT_WORDS or token in known):
                raise StateError(
                    f"lib/{path}:{scan.where(n)}: {token!r} at file level is neither a "
                    "constant nor a file-level name of lib/ (a Functions library runs this "
                    "once, when it is loaded, without Redis's Lua libraries)"
                )
        elif not (_is_literal(token) or token in _OPERATORS or token in _PUNCTUATION):
            raise StateError(f"lib/{path}:{scan.where(n)}: {token!r} in a file-level constant")


def _target_root(tokens: Sequence[str], at: int) -> tuple[str | None, int]:
    """The name an assignment target ending at token ``at`` (inclusive) starts with
    (None: not a name; '': a call's result), and the index of the token before it."""
    j = at
    while j >= 0:
        token = tokens[j]
        if token in ("]", ")"):
            opening = "[" if token == "]" else "("
            depth = 0
            while j >= 0:
                if tokens[j] == token:
                    depth += 1
                elif tokens[j] == opening:
                    depth -= 1
                    if depth == 0:
                        break
                j -= 1
            j -= 1
            continue
        if not _is_name(token):
            return None, j
        if j > 0 and tokens[j - 1] in (".", ":"):
            j -= 2
            continue
        after = tokens[j + 1] if j + 1 < len(tokens) else ""
        called = after in ("(", "{") or (bool(after) and _is_literal(after))
        return ("" if called else token), j - 1
    return None, j


def _writes(scan: _Scan, protected: frozenset[str]) -> Iterable[tuple[int, str]]:
    """Each write to a ``protected`` name: (the index of the name's token, how)."""
    tokens, depths = scan.tokens, scan.depths
    for n, token in enumerate(tokens):
        if token == "=" and depths[n][1] != "{":
            targets: list[tuple[int, str]] = []
            j = n - 1
            while j >= 0:
                last = j
                root, j = _target_root(tokens, j)
                if root is None:
                    break
                if root in protected:
                    targets.append((j + 1, "assigned" if last == j + 1 else "written into"))
                if j >= 0 and tokens[j] == ",":
                    j -= 1
                    continue
                break
            if not (j >= 0 and tokens[j] in ("local", "for")):  # else new locals
                yield from targets
        elif token == "function" and n + 2 < len(tokens):
            is_local = n > 0 and tokens[n - 1] == "local"
            if tokens[n + 1] in protected and not is_local and tokens[n + 2] in (".", ":", "("):
                yield n + 1, "defined into"
        elif token == "(" and n > 0 and n + 1 < len(tokens) and tokens[n + 1] in protected:
            callee = tokens[n - 1]
            dotted = (tokens[n - 3], callee) if n >= 3 and tokens[n - 2] == "." else None
            if dotted in _IN_PLACE or (dotted is None and callee in _IN_PLACE_CALLS):
                yield n + 1, f"passed to {'.'.join(dotted) if dotted else callee}"


@functools.lru_cache(maxsize=256)
def _checked(path: str, text: str, protected: frozenset[str], lib: bool) -> None:
    scan = _scan(text)
    if lib:
        _check_file_level(path, scan, protected)
    for n, how in _writes(scan, protected):
        shown = f"lib/{path}" if lib else path
        raise StateError(
            f"{shown}:{scan.where(n)}: {scan.tokens[n]!r} is a file-level name of lib/ and "
            f"is {how} here; in a Functions library it lives as long as the library, so what "
            "is written there would outlive the call. Keep per-call state in a local the "
            "script makes and passes down (rename a local that only shares the name)"
        )


def check_stateless(lib: dict[str, str], scripts: dict[str, str]) -> None:
    """Refuse state kept at the file level of ``lib`` (file name -> text, under
    ``lib/``) or a write to it from ``lib`` or ``scripts`` (file name -> text): see the
    module docstring. Raises :class:`StateError` naming the file and line."""
    names: set[str] = set()
    for text in lib.values():
        names |= file_level_names(text)
    protected = frozenset(names)
    for path, text in sorted(lib.items()):
        _checked(path, text, protected, True)
    for path, text in sorted(scripts.items()):
        _checked(path, text, protected, False)
