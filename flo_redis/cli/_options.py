"""Options every subcommand that talks to Redis shares, with their environment fallbacks."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import click

from flo_redis.durability import Durability, as_durability
from flo_redis.errors import ValidationError

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


class Seconds(click.types.FloatParamType):
    """A finite number of seconds from ``low`` to ``high`` (no upper bound for None),
    refused as the arguments are parsed, so a bad one is a usage error (exit 2) before
    anything is sent. Unlike click's ``FloatRange``, which lets ``nan`` through (it
    compares false) and ``inf`` when there is no upper bound."""

    name = "seconds"

    def __init__(self, low: float, high: float | None = None) -> None:
        self.low = low
        self.high = high

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        seconds = super().convert(value, param, ctx)
        high = math.inf if self.high is None else self.high
        if math.isfinite(seconds) and self.low <= seconds <= high:
            return seconds
        taken = f"{self.low:g} or more" if self.high is None else f"{self.low:g} to {high:g}"
        self.fail(f"expected a finite number of seconds, {taken}; got {value!r}", param, ctx)


class DurabilityParam(click.ParamType[Durability, Any]):
    """A durability level (:mod:`flo_redis.durability`): ``primary``, or ``replicated`` or
    ``fsynced`` with optional ``:REPLICAS`` and ``:TIMEOUT_MS`` (``replicated:2:500``);
    a bad one is a usage error (exit 2) before anything is sent."""

    name = "level"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> Durability:
        if isinstance(value, Durability):
            return value
        level, *numbers = str(value).split(":")
        try:
            if level not in ("replicated", "fsynced") or len(numbers) > 2:
                return as_durability(value)
            made = Durability.replicated if level == "replicated" else Durability.fsynced
            return made(*(int(n) for n in numbers))
        except (ValueError, ValidationError) as exc:
            self.fail(f"{exc}; e.g. primary, replicated, replicated:1:1000, fsynced:0", param, ctx)
