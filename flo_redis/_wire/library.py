"""The scripts this version ships, read, flattened and checked once at import:
:data:`SCRIPTS` by name and :data:`LIBRARY`, the Functions library holding them all
(:mod:`flo_redis._wire.lua`). A source that does not load fails the import."""

from __future__ import annotations

from flo_redis._wire.lua import LuaLibrary, LuaScript, library, load_all

LIBRARY: LuaLibrary
SCRIPTS: dict[str, LuaScript]
LIBRARY, SCRIPTS = library(load_all())
