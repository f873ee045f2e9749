"""redis-py's errors as flo's: one translation for every command flo-redis sends, in
scripts or not (:func:`redis_errors`, :func:`translated`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import redis.exceptions as rex

from flo_redis._wire.denied import denied, is_denied
from flo_redis._wire.library import LIBRARY, SCRIPTS
from flo_redis.errors import (
    InternalServerError,
    NotConnectedError,
    ProtocolError,
    RequestTimeoutError,
    ServerError,
    UnavailableError,
    ValidationError,
    server_error,
)
from flo_redis.types import Ran, Reason, StatusCode


def _unavailable(message: str) -> ServerError:
    """An UnavailableError for a command that did not run: safe to send again."""
    return server_error(StatusCode.UNAVAILABLE, Reason.UNCLASSIFIED, message, Ran.NO)


@contextlib.contextmanager
def redis_errors(what: str) -> Iterator[None]:
    """Translate redis-py errors into flo's error tree, naming what was being done;
    ``NOSCRIPT`` passes through (the runner answers it by sending the source)."""
    try:
        yield
    except rex.NoScriptError:
        raise
    except rex.RedisError as exc:
        raise translated(what, exc) from exc


def translated(what: str, exc: rex.RedisError) -> Exception:
    """The flo error for redis-py's ``exc`` raised while doing ``what``. A refusal that
    says the command did not run (loading, a replica, a slot moving) is raised with
    ``ran`` NO, so the retry policy may send it again; an ACL refusal names the command
    and the right the user lacks (:mod:`flo_redis._wire.denied`)."""
    if isinstance(exc, rex.TimeoutError):
        return RequestTimeoutError(f"{what}: Redis did not answer in time ({exc})")
    if isinstance(exc, rex.BusyLoadingError):
        return _unavailable(f"{what}: Redis is loading its data set; retry shortly")
    if isinstance(exc, rex.ReadOnlyError):
        # Refused at the script's first write: nothing ran (flo_redis._wire.runner).
        return _unavailable(
            f"{what}: Redis answered as a read-only replica (a failover made the server "
            "at this address a replica); connecting again to reach the primary"
        )
    if isinstance(exc, rex.MaxConnectionsError):
        # Every connection to a cluster node is busy (redis-py's cluster pool does not
        # wait for one to come free): nothing was sent, so it may be sent again.
        return server_error(
            StatusCode.OVERLOADED,
            Reason.UNCLASSIFIED,
            f"{what}: every connection to the Redis Cluster node is busy; sent again "
            "shortly (or raise the client's max_connections)",
            Ran.NO,
        )
    if isinstance(exc, rex.ConnectionError):
        return NotConnectedError(f"{what}: connection to Redis lost ({exc})")
    # Redirections redis-py gave up following (a slot in mid-migration, a cluster without
    # a primary for the slot), or followed until it gave up ("TTL exhausted.": MOVED, ASK
    # and TRYAGAIN answers, which a slot mid-migration gives a script whose keys are not
    # all on one side yet): the command did not run.
    redirected = rex.TryAgainError | rex.ClusterDownError | rex.MovedError | rex.AskError
    if isinstance(exc, redirected) or (
        isinstance(exc, rex.ClusterError) and str(exc) == "TTL exhausted."
    ):
        return _unavailable(f"{what}: the Redis Cluster is moving this slot ({exc}); retry")
    if isinstance(exc, rex.ClusterError):
        return UnavailableError(f"{what}: the Redis Cluster did not serve it ({exc})")
    if isinstance(exc, rex.DataError):
        # A value redis-py cannot send: refused before anything reached Redis.
        return ValidationError(f"{what}: {exc}")
    if isinstance(exc, rex.ResponseError):
        if is_denied(exc):
            return denied(what, exc, SCRIPTS, LIBRARY)
        return InternalServerError(f"{what}: Redis refused the command: {exc}")
    # What answered is not speaking Redis's protocol (an HTTP server at the URL, a TLS
    # port spoken to in plain text ...), or redis-py refused a value.
    return ProtocolError(f"{what}: unexpected answer from the server ({exc})")
