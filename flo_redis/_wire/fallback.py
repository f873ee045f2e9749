"""How one script call is sent, and what it falls back to: the one copy of the
``FCALL`` → load → ``EVALSHA`` → ``EVAL`` decision, free of I/O, driven by both script
runners (:class:`flo_redis._wire.runner.ScriptRunner` and its blocking flavour).

:func:`ways` is a generator: it yields the way to send the call first; the runner sends
it that way and, when redis-py raises, sends the error back in; the generator then
yields the next way to try, or raises the error (the call's answer). It never sees a
reply, so a call answered is simply never resumed.

- ``FCALL`` first, while the client calls by function (:class:`Functions`, ``on``).
  "Function not found" (the library went missing since it was checked) forgets what was
  checked and tries once more, the library checked and loaded again; a second "not
  found", an ACL user without ``+fcall`` or a server without the command turn the client
  to calling by SHA for good; out of memory sends this one call by SHA (a function that
  may write is refused before it starts, a script only at its first write); the library
  refused (:class:`LibraryRefused`, nothing written) goes by SHA too. Any other refusal
  is the call's answer.
- ``EVALSHA`` next; ``NOSCRIPT`` (a restart, ``SCRIPT FLUSH``, a new cluster node) sends
  the source, ``EVAL``, which also caches it there. Anything else is the answer.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Literal, TypeAlias

import redis.exceptions as rex

from flo_redis._wire.functions import BY_SHA, MISSING, Functions, LibraryRefused, refusal

Way: TypeAlias = Literal["FCALL", "EVALSHA", "EVAL"]
FCALL: Way = "FCALL"
EVALSHA: Way = "EVALSHA"
EVAL: Way = "EVAL"

Ways: TypeAlias = Generator[Way, rex.RedisError, None]


def ways(functions: Functions | None) -> Ways:
    """The ways to send one call, in turn, each after the last one's error was sent in
    (module docstring); raises the error that answers the call. ``functions``: the
    client's function state, None where scripts always go by SHA (a cluster)."""
    if functions is not None and functions.on:
        for attempt in (1, 2):
            exc = yield FCALL
            if isinstance(exc, LibraryRefused):
                break  # nothing was written: by SHA
            if not isinstance(exc, rex.ResponseError):
                raise exc
            step = refusal(exc, attempt)
            if step is None:
                raise exc
            if step == BY_SHA:
                functions.off(f"FCALL was refused ({exc})")
            if step != MISSING:
                break
            functions.forget()  # gone since it was checked: checked (loaded) again
    exc = yield EVALSHA
    if not isinstance(exc, rex.NoScriptError):
        raise exc
    exc = yield EVAL
    raise exc
