"""A griffe extension for the API reference: the docstrings' reStructuredText bits, as
Markdown.

flo-redis's docstrings name other objects with Sphinx roles (``:class:`FloClient```,
``:meth:`~flo_redis.worker.ActionWorker.stop```) and end a sentence with ``::`` before an
example. mkdocstrings reads docstrings as Markdown, where both would show as written: a
role becomes a code span of the name (its last part when written with ``~``), and ``::``
a colon, the indented example under it staying a code block.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?[a-z]+:`(~?)([^`]+)`")
LITERAL = re.compile(r"(?<=\S)::$", re.MULTILINE)


def as_markdown(text: str) -> str:
    """``text`` with each role made a code span and each trailing ``::`` a colon."""

    def span(match: re.Match[str]) -> str:
        name = match.group(2)
        return f"`{name.rsplit('.', 1)[-1] if match.group(1) else name}`"

    return LITERAL.sub(":", ROLE.sub(span, text))


class SphinxRoles(griffe.Extension):
    """Rewrites every docstring as :func:`as_markdown` says, as each object is loaded."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = as_markdown(obj.docstring.value)
