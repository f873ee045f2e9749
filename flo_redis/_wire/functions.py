"""Whether a client calls its scripts as Redis Functions, the check that the library it
calls is the one it ships, and what an ``FCALL`` or a ``FUNCTION LOAD`` refused says to
do next (:mod:`flo_redis._wire.runner` sends them; the library is
:func:`flo_redis._wire.lua.library`; lua/README.md, "Functions").

A function is called by its name, and the name says nothing of the code behind it: a
library of that name (or another library registering functions of those names) may hold
anything its loader wrote. So before the first ``FCALL`` on each connection the client
asks that connection's server for the library's code (``FUNCTION LIST WITHCODE
LIBRARYNAME flo_<id>``) and compares it byte for byte with the library it ships. Only
Redis answers that question: a function the library holds cannot vouch for it (a
tampered copy would answer as the original does). Missing, the library is loaded, where
the user may load it. Any other code is refused, logged at ERROR, and the client calls
by SHA from then on: ``EVALSHA`` names a script by the hash of its source, so the code
run is the code shipped.

``FLO_REDIS_SCRIPTS=evalsha`` in a process's environment makes every client it then
connects call its scripts by SHA (``EVALSHA``) and never check or load the library: for
a server that should hold no Functions library, or to run a fleet (or a test suite) the
way a cluster or a server refusing Functions runs it. ``functions`` (or unset) is the
default.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

import redis.exceptions as rex

from flo_redis._wire.denied import is_denied
from flo_redis._wire.lua import LuaLibrary
from flo_redis.errors import ValidationError

log = logging.getLogger("flo_redis.requests")

#: The environment variable that chooses how a new client calls its scripts.
SCRIPTS_ENV = "FLO_REDIS_SCRIPTS"
_MODES = {"": True, "functions": True, "evalsha": False}


def functions_wanted() -> bool:
    """Whether a client connected now may call its scripts as functions: False when
    ``FLO_REDIS_SCRIPTS=evalsha`` (module docstring). :class:`ValidationError` for a
    value that is neither ``functions`` nor ``evalsha``."""
    value = os.environ.get(SCRIPTS_ENV, "")
    wanted = _MODES.get(value.strip().lower())
    if wanted is None:
        raise ValidationError(
            f"{SCRIPTS_ENV}={value!r} is not a way to call scripts: set it to 'functions' "
            "(the default: Redis Functions where the server allows them) or 'evalsha' "
            "(always by SHA), or unset it"
        )
    return wanted


# What an FCALL refused without running asks for (:func:`refusal`).
MISSING = "missing"  # the library checked (loaded) again, then the call sent again
BY_SHA = "by sha"  # this call and every later one by SHA
ONCE_BY_SHA = "once by sha"  # this call by SHA

# What a server holds under the library's name (:func:`verdict`).
SAME = "same"  # exactly the library this version ships
ABSENT = "absent"  # no library of that name
OTHER = "other"  # a library of that name with other code


class LibraryRefused(rex.ResponseError):
    """The library cannot be used on this connection (it is not the one shipped, it
    could not be checked or loaded): the call goes by SHA. Raised before the ``FCALL``
    is written, with the connection in step."""


def verdict(reply: Any, library: LuaLibrary) -> str:
    """:data:`SAME`, :data:`ABSENT` or :data:`OTHER`: what a ``FUNCTION LIST WITHCODE
    LIBRARYNAME <name>`` reply says of ``library`` (RESP2 flat pairs or RESP3 maps)."""
    name = library.name.encode()
    for entry in reply or ():
        fields = _fields(entry)
        if fields.get(b"library_name") == name:
            code = fields.get(b"library_code")
            if isinstance(code, str):
                code = code.encode()
            return SAME if code == library.source.encode() else OTHER
    return ABSENT


def _fields(entry: Any) -> dict[bytes, Any]:
    if isinstance(entry, dict):
        return {_bytes(k): v for k, v in entry.items()}
    return {_bytes(k): v for k, v in zip(entry[::2], entry[1::2], strict=False)}


def _bytes(value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _socket(conn: Any) -> Any:
    """What changes each time a redis-py connection (asyncio or blocking) connects."""
    return getattr(conn, "_reader", None) or getattr(conn, "_sock", None)


class Functions:
    """Whether one client calls its scripts as functions (``on``), and the connections
    on which the library was checked (module docstring): ``loads`` counts the loads
    made; one check or load at a time per client."""

    __slots__ = ("_checked", "alock", "library", "loads", "lock", "on")

    def __init__(self, library: LuaLibrary, on: bool = True) -> None:
        self.library = library
        self.on = on
        self.loads = 0
        self.lock = threading.Lock()  # the blocking client's loads
        self.alock: asyncio.Lock | None = None  # the asyncio client's (made in its loop)
        # connection -> the socket it was checked on (a new socket is checked again)
        self._checked: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()

    def off(self, why: str, level: int = logging.INFO) -> None:
        """Call by SHA from now on."""
        if self.on:
            self.on = False
            log.log(level, "calling scripts by SHA: %s", why)

    def forget(self) -> None:
        """The library went missing since it was checked (``FUNCTION DELETE``, a
        flush): check every connection again before its next call."""
        self._checked.clear()

    async def verify(self, conn: Any) -> None:
        """Return once ``conn``'s server holds the library this version ships, checked
        on this socket (loaded first when missing, where the user may); else raise
        :class:`LibraryRefused` (module docstring). Failures that say nothing of
        functions (a lost connection, a replica) are raised as they come."""
        if self._checked.get(conn) is _socket(conn) and _socket(conn) is not None:
            return
        if not self.on:
            raise LibraryRefused("scripts are called by SHA")

        async def ask(*args: Any) -> Any:
            await conn.send_command(*args)
            return await conn.read_response()

        found = await self._alist(ask)
        if found == ABSENT:
            if self.alock is None:
                self.alock = asyncio.Lock()
            async with self.alock:  # one load at a time: others find it loaded
                found = await self._alist(ask)
                if found == ABSENT:
                    found = await self._aload(ask)
        self._conclude(conn, found)

    def verify_sync(self, conn: Any) -> None:
        """:meth:`verify` for a connection of redis-py's blocking client."""
        if self._checked.get(conn) is _socket(conn) and _socket(conn) is not None:
            return
        if not self.on:
            raise LibraryRefused("scripts are called by SHA")

        def ask(*args: Any) -> Any:
            conn.send_command(*args)
            return conn.read_response()

        with self.lock:
            found = self._listed(ask)
            if found == ABSENT:
                found = self._loaded(ask)
        self._conclude(conn, found)

    async def _alist(self, ask: Callable[..., Any]) -> str:
        try:
            return verdict(await ask(*self._list_command()), self.library)
        except rex.ResponseError as exc:
            raise self._list_refused(exc) from exc

    def _listed(self, ask: Callable[..., Any]) -> str:
        try:
            return verdict(ask(*self._list_command()), self.library)
        except rex.ResponseError as exc:
            raise self._list_refused(exc) from exc

    async def _aload(self, ask: Callable[..., Any]) -> str:
        try:
            await ask("FUNCTION", "LOAD", self.library.source)
        except rex.ResponseError as exc:
            if not self._load_refused(exc):
                raise
            return await self._alist(ask)  # "already exists": whose is it?
        finally:
            self.loads += 1
        return SAME  # loaded from our own source

    def _loaded(self, ask: Callable[..., Any]) -> str:
        try:
            ask("FUNCTION", "LOAD", self.library.source)
        except rex.ResponseError as exc:
            if not self._load_refused(exc):
                raise
            return self._listed(ask)
        finally:
            self.loads += 1
        return SAME

    def _list_command(self) -> tuple[str, ...]:
        return ("FUNCTION", "LIST", "WITHCODE", "LIBRARYNAME", self.library.name)

    def _list_refused(self, exc: rex.ResponseError) -> Exception:
        """What a refused ``FUNCTION LIST`` raises: by SHA for good when the user may
        not ask (or the server does not know the command), else the error itself."""
        text = str(exc).lower()
        if isinstance(exc, rex.ReadOnlyError) or not (is_denied(exc) or "unknown" in text):
            return exc
        self.off(
            f"the script library cannot be checked, FUNCTION LIST was refused ({exc}); "
            "grant +function|list to call scripts as functions"
        )
        return LibraryRefused(str(exc))

    def _load_refused(self, exc: rex.ResponseError) -> bool:
        """Take in a refused ``FUNCTION LOAD``: True when the library's name (or one of
        its functions' names) is taken, for the caller to look at what holds it; raises
        :class:`LibraryRefused` when this call goes by SHA (for good when the user may
        not load functions, the server does not know the command or would not take the
        library; once when out of memory); False for a failure that says nothing of
        functions (a replica ...), raised by the caller as it raises any."""
        if "already exists" in str(exc):
            return True
        if isinstance(exc, rex.OutOfMemoryError):
            raise LibraryRefused(str(exc)) from exc
        text = str(exc).lower()
        if not isinstance(exc, rex.ReadOnlyError) and (
            is_denied(exc) or "unknown" in text or "error registering" in text
        ):
            self.off(f"FUNCTION LOAD was refused ({exc})")
            raise LibraryRefused(str(exc)) from exc
        return False

    def _conclude(self, conn: Any, found: str) -> None:
        if found == SAME:
            self._checked[conn] = _socket(conn)
            return
        if found == OTHER:
            self.off(
                f"the Functions library {self.library.name} on the server is not the one "
                "this version of flo-redis ships (its code differs): it is not called. "
                "Load the shipped one as an admin: flo-redis scripts load --replace",
                logging.ERROR,
            )
        else:
            # A load that reported its name taken, and no library of that name: another
            # library registers functions of this library's names.
            self.off(
                f"functions of the library {self.library.name} are registered by another "
                "library on the server: they are not called. See flo-redis scripts list",
                logging.ERROR,
            )
        raise LibraryRefused(f"library {self.library.name} refused")


def refusal(exc: rex.ResponseError, attempt: int) -> str | None:
    """What an ``FCALL`` refused without running asks for: :data:`MISSING`,
    :data:`BY_SHA` (an ACL user without ``+fcall``, a server or proxy without the
    command), :data:`ONCE_BY_SHA` (out of memory: a function that may write is refused
    before it starts, a script only at its first write); None for an answer of the
    function itself. A function still not found on the second attempt, after a load,
    does not stay there: :data:`BY_SHA`."""
    text = str(exc)
    if text.startswith("Function not found"):
        return MISSING if attempt == 1 else BY_SHA
    lowered = text.lower()
    if "'fcall'" in lowered and (is_denied(exc) or "unknown command" in lowered):
        return BY_SHA
    if isinstance(exc, rex.OutOfMemoryError):
        return ONCE_BY_SHA
    return None
