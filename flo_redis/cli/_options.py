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


def env_option(flag: str, about: str, **settings: Any) -> Callable[[F], F]:
    """``flag`` (``--some-thing``), read from ``FLO_REDIS_SOME_THING`` when not given, which
    ends its help line ``about``; its default is shown unless ``show_default=False``."""
    env = "FLO_REDIS_" + flag.removeprefix("--").replace("-", "_").upper()
    settings.setdefault("show_default", True)
    return click.option(flag, envvar=env, help=f"{about} (env {env}).", **settings)


def namespace_option(what: str) -> Callable[[F], F]:
    """``--namespace``; env ``FLO_REDIS_NAMESPACE``. ``what`` ends its help line."""
    return env_option("--namespace", f"Namespace {what}", default="default")
