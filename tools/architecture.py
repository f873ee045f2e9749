"""Draw the house: the wings of ``flo_redis`` and the imports between them.

Reads ``flo_redis/`` with :mod:`ast` (nothing is imported or run) and writes the package
diagram into ``docs/architecture.md``, between the generated markers, as a Mermaid graph.
A wing is a package of ``flo_redis`` (``_wire``, ``worker``, ...) or one of its top-level
modules (``client``, ``errors``, ...); ``flo_redis`` itself is the package's
``__init__``. Every import counts, also one inside a function ("deferred") and one under
``if TYPE_CHECKING:`` ("typing"); the drawing tells them apart. The layers the wings may
import are read from the page (the list between the layer markers), so the page is the
rule and the drawing marks in red every import that breaks it.

    python -m tools.architecture            write the diagram into the page
    python -m tools.architecture --check    exit 1 when the page is not what the code draws
    python -m tools.architecture --modules  list every module: its lines and its imports
    python -m tools.architecture --rules    list the imports that break a house rule
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "flo_redis"
PAGE = ROOT / "docs" / "architecture.md"

BEGIN = "<!-- drawing: begin (written by `python -m tools.architecture`; do not edit) -->"
END = "<!-- drawing: end -->"
LAYERS_BEGIN = "<!-- layers: begin -->"
LAYERS_END = "<!-- layers: end -->"

LOAD, DEFERRED, TYPING = "load", "deferred", "typing"

# flo's module paths: they stay where flo has them, whatever the house rules say.
FLO_PATHS = ("client", "actions", "streams", "queue", "worker", "types", "exceptions", "retry")
MAX_TOP_LEVEL = 15
MAX_LINES = 400


@dataclass(frozen=True)
class Import:
    """One import of a module of the package: the module it names, where, and how."""

    target: str
    line: int
    kind: str  # LOAD (runs when the module loads), DEFERRED (in a function) or TYPING


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    lines: int
    imports: tuple[Import, ...]

    @property
    def wing(self) -> str:
        return wing_of(self.name)


def wing_of(module: str) -> str:
    """``flo_redis._wire.keys`` -> ``_wire``; ``flo_redis.client`` -> ``client``;
    ``flo_redis`` -> ``flo_redis``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def module_names(package_dir: Path) -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its ``__init__``)."""
    names: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if "__pycache__" in parts:
            continue
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _import_nodes(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement of a module with its kind."""

    def walk(node: ast.AST, kind: str) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, kind
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from walk(child, TYPING)
            for child in node.orelse:
                yield from walk(child, kind)
            return
        inner = kind
        if kind == LOAD and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inner = DEFERRED
        for nested in ast.iter_child_nodes(node):
            yield from walk(nested, inner)

    yield from walk(tree, LOAD)


def _resolve(name: str, known: Mapping[str, Path]) -> str | None:
    """The module of the package that ``name`` lands in (a name inside a module: that
    module), or None for a name outside the package."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join([*package, base] if base else package)
    return [f"{base}.{alias.name}" for alias in node.names]


def read_package(package_dir: Path | None = None) -> dict[str, Module]:
    """Every module of the package with its lines and its imports of the package."""
    package_dir = package_dir or ROOT / PACKAGE
    known = module_names(package_dir)
    modules: dict[str, Module] = {}
    for name, path in known.items():
        source = path.read_text(encoding="utf-8")
        imports: dict[tuple[str, int], Import] = {}
        for node, kind in _import_nodes(ast.parse(source, str(path))):
            for dotted in _targets(node, name, path.name == "__init__.py"):
                target = _resolve(dotted, known)
                if target is not None and target != name:
                    imports.setdefault((target, node.lineno), Import(target, node.lineno, kind))
        modules[name] = Module(name, path, len(source.splitlines()), tuple(imports.values()))
    return modules


def wing_edges(modules: Mapping[str, Module]) -> dict[tuple[str, str], set[str]]:
    """The imports between wings, each with the kinds of import behind it."""
    edges: dict[tuple[str, str], set[str]] = defaultdict(set)
    for module in modules.values():
        for imp in module.imports:
            target_wing = wing_of(imp.target)
            if target_wing != module.wing:
                edges[(module.wing, target_wing)].add(imp.kind)
    return dict(edges)


def edge_kind(kinds: set[str]) -> str:
    """The strongest kind: an import that runs at load outweighs a deferred one."""
    return LOAD if LOAD in kinds else DEFERRED if DEFERRED in kinds else TYPING


def _loaded_with(target: str, importer: str, modules: Mapping[str, Module]) -> list[str]:
    """What importing ``target`` from ``importer`` runs: ``target`` and the ``__init__``
    of each package above it that is not already loading (the importer's own packages)
    nor the top package (whose ``__init__`` runs first, before any of its modules)."""
    parts = target.split(".")
    above = [".".join(parts[:n]) for n in range(2, len(parts))]
    return [
        name
        for name in [*above, target]
        if name in modules and name != importer and not importer.startswith(name + ".")
    ]


def cycles(modules: Mapping[str, Module]) -> list[list[str]]:
    """The import circles between modules (strongly connected groups of two or more),
    counting deferred imports and leaving out typing ones. Importing a module runs its
    packages' ``__init__`` too, so a circle through a package's ``__init__`` counts."""
    graph = {
        name: sorted(
            {
                loaded
                for i in m.imports
                if i.kind != TYPING
                for loaded in _loaded_with(i.target, name, modules)
            }
        )
        for name, m in modules.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for name in graph:
            if name not in index:
                visit(name)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


def read_layers(page: str) -> list[list[str]]:
    """The layers stated on the page, lowest first: one numbered line per layer between
    the layer markers, its wings in backquotes."""
    try:
        block = page.split(LAYERS_BEGIN, 1)[1].split(LAYERS_END, 1)[0]
    except IndexError:
        raise ValueError(f"{PAGE.name} has no layer list ({LAYERS_BEGIN!r})") from None
    layers = [
        re.findall(r"`([^`]+)`", line.split(":", 1)[0])
        for line in block.splitlines()
        if re.match(r"\s*\d+\.", line)
    ]
    return [layer for layer in layers if layer]


def layer_of(layers: Sequence[Sequence[str]]) -> dict[str, int]:
    return {wing: rank for rank, layer in enumerate(layers) for wing in layer}


def allowed(source: str, target: str, ranks: Mapping[str, int]) -> bool:
    """The rule: a wing may import the wings of the layers below its own, no other."""
    return source in ranks and target in ranks and ranks[target] < ranks[source]


def broken_imports(modules: Mapping[str, Module], layers: Sequence[Sequence[str]]) -> list[str]:
    """Each import (typing ones aside) of a wing the layers do not let it import."""
    ranks = layer_of(layers)
    found = []
    for module in modules.values():
        for imp in module.imports:
            target_wing = wing_of(imp.target)
            if imp.kind == TYPING or target_wing == module.wing:
                continue
            if not allowed(module.wing, target_wing, ranks):
                where = f"{module.path.relative_to(ROOT)}:{imp.line}"
                found.append(f"{where}: {module.name} -> {imp.target} ({imp.kind})")
    return found


def _node(wing: str) -> str:
    return "root" if wing == PACKAGE else "w" + wing.replace("_", "U")


def _label(wing: str, modules: Mapping[str, Module]) -> str:
    is_package = any(m.path.name == "__init__.py" and m.wing == wing for m in modules.values())
    return f"{wing}/" if is_package and wing != PACKAGE else wing


def drawing(modules: Mapping[str, Module], layers: Sequence[Sequence[str]]) -> str:
    """The Mermaid graph of the wings: one box per layer, top layer first; a solid arrow
    for an import at load, a dotted one for a deferred or typing one, red where the
    layers forbid it."""
    ranks = layer_of(layers)
    wings = sorted({m.wing for m in modules.values()})
    unplaced = [w for w in wings if w not in ranks]
    lines = ["```mermaid", "graph TD"]
    for rank in reversed(range(len(layers))):
        lines.append(f'  subgraph L{rank + 1}["layer {rank + 1}"]')
        lines.extend(f'    {_node(w)}["{_label(w, modules)}"]' for w in layers[rank] if w in wings)
        lines.append("  end")
    lines.extend(f'  {_node(w)}["{_label(w, modules)}"]' for w in unplaced)
    red = []
    edges = wing_edges(modules)
    for number, (source, target) in enumerate(sorted(edges)):
        kind = edge_kind(edges[(source, target)])
        arrow = "-->" if kind == LOAD else f"-.->|{kind}|"
        lines.append(f"  {_node(source)} {arrow} {_node(target)}")
        if kind != TYPING and not allowed(source, target, ranks):
            red.append(str(number))
    lines.append("  classDef internal stroke-dasharray: 4 3")
    internal = [_node(w) for w in wings if w.startswith("_")]
    if internal:
        lines.append(f"  class {','.join(internal)} internal")
    if red:
        lines.append(f"  linkStyle {','.join(red)} stroke:#d33,stroke-width:2px")
    lines.append("```")
    return "\n".join(lines)


def generated_block(modules: Mapping[str, Module], page: str) -> str:
    return f"{BEGIN}\n\n{drawing(modules, read_layers(page))}\n\n{END}"


def rewritten(page: str, modules: Mapping[str, Module]) -> str:
    """The page with its generated block replaced by what the code draws today."""
    if BEGIN not in page or END not in page:
        raise ValueError(f"{PAGE.name} has no generated block ({BEGIN!r} ... {END!r})")
    head, rest = page.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    return head + generated_block(modules, page) + tail


def is_current(page_path: Path = PAGE, package_dir: Path | None = None) -> bool:
    page = page_path.read_text(encoding="utf-8")
    return rewritten(page, read_package(package_dir)) == page


def module_listing(modules: Mapping[str, Module]) -> str:
    """One line per module: its lines, then each module of the package it imports
    (``~`` deferred, ``?`` typing)."""
    mark = {LOAD: "", DEFERRED: "~", TYPING: "?"}
    rows = []
    for name in sorted(modules):
        module = modules[name]
        targets = sorted(
            {mark[i.kind] + i.target.removeprefix(PACKAGE + ".") for i in module.imports}
        )
        rows.append(f"{module.lines:5d}  {name}: {', '.join(targets) or '-'}")
    return "\n".join(rows)


def top_level(package_dir: Path | None = None) -> list[str]:
    """The modules and packages at the package's top level, flo's paths left out."""
    package_dir = package_dir or ROOT / PACKAGE
    names = [p.stem for p in package_dir.glob("*.py") if p.stem not in ("__init__", "__main__")]
    names += [p.name for p in package_dir.iterdir() if (p / "__init__.py").is_file()]
    return sorted(n for n in names if n not in FLO_PATHS)


def rule_breaks(modules: Mapping[str, Module], page: str) -> list[str]:
    """Every house rule the code breaks today, one line each."""
    found = [f"layering: {b}" for b in broken_imports(modules, read_layers(page))]
    found += [f"circle among: {', '.join(group)}" for group in cycles(modules)]
    found += [
        f"size: {m.path.relative_to(ROOT)} has {m.lines} lines (at most {MAX_LINES})"
        for m in sorted(modules.values(), key=lambda m: -m.lines)
        if m.lines > MAX_LINES and m.wing != "types"
    ]
    extra = top_level()
    if len(extra) > MAX_TOP_LEVEL:
        found.append(f"top level: {len(extra)} modules and packages (at most {MAX_TOP_LEVEL})")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.architecture", description=__doc__)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 when the page is stale")
    mode.add_argument("--modules", action="store_true", help="list modules, lines, imports")
    mode.add_argument("--rules", action="store_true", help="list the house rules broken")
    args = parser.parse_args(argv)
    modules = read_package()
    if args.modules:
        print(module_listing(modules))
        return 0
    page = PAGE.read_text(encoding="utf-8")
    if args.rules:
        breaks = rule_breaks(modules, page)
        print("\n".join(breaks) or "every house rule holds")
        return 1 if breaks else 0
    fresh = rewritten(page, modules)
    if args.check:
        if fresh != page:
            print(f"{PAGE.relative_to(ROOT)} is stale: run python -m tools.architecture")
            return 1
        return 0
    if fresh != page:
        PAGE.write_text(fresh, encoding="utf-8")
        print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
