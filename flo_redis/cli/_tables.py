"""Tables for people, readable in an 80-column terminal.

A table never cuts an id (a run id, a dead-letter id to replay, a worker id to drain):
the columns holding them are drawn whole, and a header is never folded into pieces.
When the terminal is too narrow for every column, the columns the table names as the
least needed are left out, one by one, until it fits, and a line under it says which;
``--wide`` draws every column at its full width (for a wide terminal, a pager or a file).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import click
from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from flo_redis.cli import _render

F = TypeVar("F", bound=Callable[..., Any])

_WIDE = "flo_redis.wide"  # the key of --wide in click's context meta
_UNBOUNDED = 100_000  # the width of the console --wide draws on: no table is as wide


def _set_wide(ctx: click.Context, param: click.Parameter, wide: bool) -> None:
    if wide:
        ctx.meta[_WIDE] = True


def wide_option(command: F) -> F:
    """``--wide``: every column at its full width. Read by :func:`console` and
    :func:`table` from the command's context, so a command passes nothing on."""
    return click.option(
        "--wide",
        is_flag=True,
        expose_value=False,
        callback=_set_wide,
        help="Every column at its full width, however wide the terminal.",
    )(command)


def _wide() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get(_WIDE))


def console() -> Console:
    """Where tables are drawn (:func:`._render.console`): as wide as the terminal, or
    unbounded with ``--wide``."""
    return _render.console(width=_UNBOUNDED if _wide() else None)


def _drawn(
    title: str, columns: Sequence[str], rows: list[list[str]], wrap: Sequence[str], shown: list[int]
) -> Table:
    out = Table(title=title, title_justify="left", expand=False)
    for i in shown:
        numeric = bool(rows) and all(r[i].lstrip("-").isdigit() for r in rows if r[i])
        whole = columns[i] not in wrap
        # rich measures a cell by its longest word even where it may not wrap: a whole
        # column's minimum is its widest cell, said outright.
        widest = max((cell_len(r[i]) for r in rows), default=0) if whole else 0
        out.add_column(
            columns[i],
            justify="right" if numeric else "left",
            overflow="fold",
            no_wrap=whole,
            min_width=max(widest, cell_len(columns[i])),
        )
    for row in rows:
        out.add_row(*(row[i] for i in shown))
    return out


def table(
    title: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[object]],
    wrap: Sequence[str] = (),
    drop: Sequence[str] = (),
) -> RenderableType:
    """A table; numbers right-aligned. Only the columns named in ``wrap`` (free text:
    an error, a list of actions) wrap where the terminal is too narrow; every other
    cell (an id to copy, a count, a state) is drawn whole. Where the table is still too
    wide, the columns named in ``drop`` are left out, in that order, until it fits, and
    a line under it names them (none are with ``--wide``)."""
    materialized = [[("" if v is None else str(v)) for v in row] for row in rows]
    shown = list(range(len(columns)))
    if _wide():
        return _drawn(title, columns, materialized, wrap, shown)
    draw = console()
    unbounded = draw.options.update_width(_UNBOUNDED)  # a measure is cut at its max width

    def fits(columns_shown: list[int]) -> bool:
        drawn = _drawn(title, columns, materialized, wrap, columns_shown)
        return Measurement.get(draw, unbounded, drawn).minimum <= draw.width

    # Leave out in the order given until it fits, then take back each left out (the last
    # first) that still fits: a narrow column named early need not stay out.
    left_out = []
    for name in drop:
        if fits(shown):
            break
        shown.remove(columns.index(name))
        left_out.append(columns.index(name))
    for i in reversed(left_out[:]):
        if fits(sorted([*shown, i])):
            shown = sorted([*shown, i])
            left_out.remove(i)
    out = _drawn(title, columns, materialized, wrap, shown)
    if not left_out:
        return out
    note = f"--wide also shows: {', '.join(columns[i] for i in sorted(left_out))}"
    return Group(out, Text(note))
