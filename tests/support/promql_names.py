"""The metric names a PromQL expression reads, and the names a /metrics page serves: what
the monitoring tests hold the alert rules and the Grafana dashboard against.

:func:`metric_names` is a small scanner, not a parser: it skips strings, label matchers
(``{...}``), ranges (``[5m]``), numbers and durations, Grafana variables (``$action``,
``${DS}``), the label lists of ``by``/``without``/``on``/``ignoring``/``group_left``/
``group_right``, and words that are keywords or are called (a function or an aggregation,
followed by ``(`` or by its ``by``/``without``). Every other word is a metric name, and so
is the value of a ``__name__`` matcher.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from prometheus_client.parser import text_string_to_metric_families

_WORD = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_NUMBER = re.compile(r"(0x[0-9A-Fa-f]+|[0-9.]+([eE][+-]?[0-9]+)?[a-zA-Z0-9]*)")
_VARIABLE = re.compile(r"\$(\{[^}]*\}|[A-Za-z0-9_]+)")
_NAME_MATCHER = re.compile(r"""__name__\s*=\s*(["'`])([A-Za-z_:][A-Za-z0-9_:]*)\1""")
_GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan", "start", "end"}
# Grafana's templating functions, whose second argument is a label, not a metric.
_NO_WORD = re.compile("").match("")
_LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$", re.S)


def _string_end(text: str, start: int) -> int:
    """The index just past the string literal opening at ``start``."""
    quote = text[start]
    i = start + 1
    while i < len(text) and text[i] != quote:
        i += 2 if text[i] == "\\" and quote != "`" else 1
    return i + 1


def _closing(text: str, start: int, close: str) -> int:
    """The index just past the ``close`` matching the bracket at ``start``, strings
    skipped."""
    i = start + 1
    while i < len(text) and text[i] != close:
        i = _string_end(text, i) if text[i] in "\"'`" else i + 1
    return i + 1


def _next_char(text: str, i: int) -> str:
    while i < len(text) and text[i].isspace():
        i += 1
    return text[i] if i < len(text) else ""


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` (PromQL, or Grafana's ``label_values(expr, label)``)
    reads."""
    grafana = _LABEL_VALUES.match(expr)
    if grafana:
        expr = grafana.group(1)
    names: set[str] = set()
    i = 0
    while i < len(expr):
        c = expr[i]
        if c in "\"'`":
            i = _string_end(expr, i)
        elif c == "{":
            end = _closing(expr, i, "}")
            names.update(m.group(2) for m in _NAME_MATCHER.finditer(expr[i:end]))
            i = end
        elif c == "[":
            i = _closing(expr, i, "]")
        elif c == "$":
            match = _VARIABLE.match(expr, i)
            i = match.end() if match else i + 1
        elif c.isdigit() or (c == "." and expr[i + 1 : i + 2].isdigit()):
            match = _NUMBER.match(expr, i)
            i = match.end() if match else i + 1
        elif (match := _WORD.match(expr, i)) is not None:
            word, i = match.group(), match.end()
            after = _next_char(expr, i)
            if word in _GROUPING:
                if after == "(":
                    i = _closing(expr, expr.index("(", i), ")")
            elif word.lower() in _KEYWORDS or after == "(":
                pass  # a keyword, or a function or aggregation called
            elif (_WORD.match(expr[i:].lstrip()) or _NO_WORD).group() in {"by", "without"}:
                pass  # an aggregation grouped before its argument: sum by (a) (...)
            else:
                names.add(word)
        else:
            i += 1
    return names


def served_names(exposition: str) -> tuple[set[str], set[str]]:
    """What a /metrics page serves: the names of its samples, and the names its families
    declare (a family with no sample yet still has its type: a counter serves
    ``<name>_total``, a histogram ``<name>_bucket``, ``_sum`` and ``_count``)."""
    sampled: set[str] = set()
    declared: set[str] = set()
    for family in text_string_to_metric_families(exposition):
        sampled.update(s.name for s in family.samples)
        declared.update(_family_names(family.name, family.type))
    return sampled, declared


def _family_names(name: str, kind: str) -> Iterable[str]:
    if kind == "counter":
        return (f"{name}_total", f"{name}_created")
    if kind == "histogram":
        return (f"{name}_bucket", f"{name}_sum", f"{name}_count", f"{name}_created")
    if kind == "summary":
        return (name, f"{name}_sum", f"{name}_count", f"{name}_created")
    return (name,)
