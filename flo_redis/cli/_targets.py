"""``MODULE:ATTR`` targets of ``flo-redis worker``: found, imported, made into workers."""

from __future__ import annotations

import importlib
import inspect
import os
import sys

import click

from flo_redis.client import FloClient
from flo_redis.worker.action_worker import ActionWorker
from flo_redis.worker.stream_worker import StreamWorker

Worker = ActionWorker | StreamWorker


def load(spec: str) -> object:
    """The object ``spec`` names (``package.module:attr`` or ``module:attr.sub``),
    imported the way ``python -m`` would from the current folder."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise click.BadParameter(
            f"{spec!r} is not MODULE:ATTR; name the worker like myapp.workers:worker",
            param_hint="TARGET",
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not module_name.startswith(exc.name):
            raise  # the module exists; something it imports does not: show that
        raise click.BadParameter(
            f"module {module_name!r} not found from {os.getcwd()}; run the command from "
            "the folder that holds it or add that folder to PYTHONPATH",
            param_hint="TARGET",
        ) from exc
    found: object = module
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise click.BadParameter(
                f"module {module_name!r} has no attribute {attr!r}", param_hint="TARGET"
            ) from None
    return found


async def build(spec: str, found: object, client: FloClient) -> Worker:
    """A worker from what ``spec`` named: a worker is moved onto ``client`` (the
    command's URL and namespace); a callable is called with ``client`` (and awaited if
    it returns an awaitable) and must return a worker."""
    if isinstance(found, (ActionWorker, StreamWorker)):
        found.use_client(client)
        return found
    if not callable(found):
        raise click.BadParameter(
            f"{spec} is a {type(found).__name__}; name an ActionWorker, a StreamWorker or "
            "a function that builds one from a FloClient",
            param_hint="TARGET",
        )
    made = found(client)
    if inspect.isawaitable(made):
        made = await made
    if not isinstance(made, (ActionWorker, StreamWorker)):
        raise click.BadParameter(
            f"{spec}(client) returned a {type(made).__name__}; it must return an "
            "ActionWorker or a StreamWorker",
            param_hint="TARGET",
        )
    return made
