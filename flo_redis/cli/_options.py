"""Options every subcommand that talks to Redis shares, with their environment fallbacks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

DEFAULT_URL = "redis://localhost:6379"

F = TypeVar("F", bound=Callable[..., Any])


def url_option(fn: F) -> F:
    """``--url``: the Redis URL; env ``FLO_REDIS_URL``, then ``REDIS_URL``."""
    return click.option(
        "--url",
        envvar=["FLO_REDIS_URL", "REDIS_URL"],
        default=DEFAULT_URL,
        show_default=True,
        help="Redis URL (env FLO_REDIS_URL, then REDIS_URL).",
    )(fn)


def namespace_option(what: str) -> Callable[[F], F]:
    """``--namespace``; env ``FLO_REDIS_NAMESPACE``. ``what`` ends its help line."""
    return click.option(
        "--namespace",
        envvar="FLO_REDIS_NAMESPACE",
        default="default",
        show_default=True,
        help=f"Namespace {what} (env FLO_REDIS_NAMESPACE).",
    )
