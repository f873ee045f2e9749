"""The house rules, read from the code (no Redis): how many wings stand at the top level,
how long a module may be, no import circle, the layers of docs/architecture.md, and a
drawing on that page that is what the code draws today."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _architecture() -> ModuleType:
    """tools/architecture.py, the script that draws the house (not an installed module)."""
    name = "tools.architecture"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / "architecture.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while it loads
        spec.loader.exec_module(module)
    return sys.modules[name]


architecture = _architecture()
MODULES = architecture.read_package()
PAGE = architecture.PAGE.read_text(encoding="utf-8")


def test_at_most_fifteen_modules_and_packages_at_the_top_level_besides_flos_paths() -> None:
    extra = architecture.top_level()
    assert len(extra) <= architecture.MAX_TOP_LEVEL, extra


def test_no_module_is_over_400_lines_except_the_type_declarations() -> None:
    long = sorted(
        f"{m.name}: {m.lines}"
        for m in MODULES.values()
        if m.lines > architecture.MAX_LINES and m.wing != "types"
    )
    assert not long, "\n".join(long)


def test_the_module_import_graph_has_no_circle() -> None:
    """Imports inside functions count; imports under TYPE_CHECKING do not."""
    circles = architecture.cycles(MODULES)
    assert not circles, "\n".join("circle among: " + ", ".join(c) for c in circles)


def test_circles_are_found_also_through_an_import_inside_a_function(tmp_path: Path) -> None:
    package = tmp_path / "flo_redis"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "inner" / "__init__.py").write_text("")
    (package / "a.py").write_text("from flo_redis.inner import b\n")
    (package / "inner" / "b.py").write_text("def late():\n    from flo_redis import a\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from flo_redis import a\n"
    )
    modules = architecture.read_package(package)
    assert architecture.cycles(modules) == [["flo_redis.a", "flo_redis.inner.b"]]
    kinds = {(m.name, i.target): i.kind for m in modules.values() for i in m.imports}
    assert kinds == {
        ("flo_redis.a", "flo_redis.inner.b"): architecture.LOAD,
        ("flo_redis.inner.b", "flo_redis.a"): architecture.DEFERRED,
        ("flo_redis.c", "flo_redis.a"): architecture.TYPING,
    }


def test_a_circle_through_a_packages_init_counts(tmp_path: Path) -> None:
    """Importing flo_redis.inner.f runs flo_redis/inner/__init__.py, which imports d,
    which imports e: e's import of f closes a circle that no import names outright."""
    package = tmp_path / "flo_redis"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("from flo_redis import e\n")
    (package / "inner" / "__init__.py").write_text("from flo_redis.inner import d\n")
    (package / "inner" / "d.py").write_text("from flo_redis import e\n")
    (package / "inner" / "f.py").write_text("from flo_redis.inner import d\n")
    (package / "e.py").write_text("def late():\n    from flo_redis.inner.f import x\n")
    modules = architecture.read_package(package)
    assert architecture.cycles(modules) == [
        ["flo_redis.e", "flo_redis.inner", "flo_redis.inner.d", "flo_redis.inner.f"]
    ]


def test_every_wing_stands_in_one_layer_of_the_architecture_page() -> None:
    layers = architecture.read_layers(PAGE)
    placed = [wing for layer in layers for wing in layer]
    wings = {m.wing for m in MODULES.values()}
    assert sorted(wings - set(placed)) == []
    assert sorted(w for w in placed if placed.count(w) > 1) == []


def test_the_wings_import_only_what_the_architecture_page_allows() -> None:
    layers = architecture.read_layers(PAGE)
    broken = architecture.broken_imports(MODULES, layers)
    assert not broken, "\n".join(broken)


def test_the_architecture_page_is_what_the_code_draws() -> None:
    assert architecture.main(["--check"]) == 0, "run: python -m tools.architecture"
