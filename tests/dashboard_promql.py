"""What a dashboard expression selects: its series selectors and label names (test helper, no PromQL library on PyPI).

A small lexer for the PromQL the dashboard uses: vector selectors `name{label op "value"}`, function and aggregation
calls, `by`/`without`/`on`/`ignoring`/`group_left`/`group_right` label lists, range brackets, strings and numbers.
Grafana's variables are substituted first (`$__rate_interval` -> 1m, `$var` -> .*), and Grafana's `label_values(sel,
label)` is unwrapped. Prometheus itself parses every expression in tests/prometheus/test_dashboard_queries.py; this
only tells which names and labels an expression refers to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right"}
AGGREGATIONS = {
    "sum",
    "avg",
    "min",
    "max",
    "count",
    "group",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
    "limitk",
    "limit_ratio",
}
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
TOKEN = re.compile(
    r"""\s*(?:(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')|(?P<range>\[[^\]]*\])|(?P<number>\d+(?:\.\d+)?(?:e[+-]?\d+)?)"""
    r"""|(?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)|(?P<op>=~|!~|!=|==|>=|<=|[-+*/%^<>=(){},]))"""
)


@dataclass
class Selector:
    name: str
    labels: set[str] = field(default_factory=set)


@dataclass
class Refs:
    selectors: list[Selector] = field(default_factory=list)
    grouping: set[str] = field(default_factory=set)


def grafana_to_promql(expr: str) -> str:
    expr = re.sub(r"\$__(rate_interval|interval|range)", "1m", expr)
    expr = re.sub(r"\$\{?[a-zA-Z_]+\}?", ".*", expr)
    match = re.fullmatch(r"\s*label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*", expr)
    return match.group(1) if match else expr


def tokens(expr: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    expr = expr.rstrip()
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"cannot lex {expr[pos : pos + 30]!r} in {expr!r}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def references(expr: str) -> Refs:
    """The selectors (name + matcher labels) and grouping labels of one expression."""
    toks = tokens(grafana_to_promql(expr))
    refs = Refs()
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        nxt = toks[i + 1][1] if i + 1 < len(toks) else ""
        if kind == "ident" and text in GROUPING:
            i += 1
            if i < len(toks) and toks[i][1] == "(":
                i += 1
                while toks[i][1] != ")":
                    if toks[i][0] == "ident":
                        refs.grouping.add(toks[i][1])
                    i += 1
            i += 1
            continue
        if kind == "ident" and text not in KEYWORDS and text not in AGGREGATIONS and nxt != "(":
            selector = Selector(text)
            i += 1
            if i < len(toks) and toks[i][1] == "{":
                i += 1
                while toks[i][1] != "}":
                    if toks[i][0] == "ident":
                        selector.labels.add(toks[i][1])
                    i += 1
                i += 1
            refs.selectors.append(selector)
            continue
        i += 1
    return refs


def dashboard_expressions(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, expression) for every panel target, annotation and query variable."""
    out = [(f"panel {p['title']!r} {t['refId']}", t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]
    out += [(f"annotation {a['name']!r}", a["expr"]) for a in dashboard.get("annotations", {}).get("list", [])]
    out += [
        (f"variable {v['name']!r}", v["query"]) for v in dashboard["templating"]["list"] if v.get("type") == "query"
    ]
    return out
