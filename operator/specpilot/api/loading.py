"""Read SpeculativeDeployment documents from files a person (or a script) hands the CLI, never raising on bad input.

Everything a careless or hostile file can do to a YAML reader ends here as one `LoadError` line naming the file and
the problem: a missing or unreadable path, bytes that are not UTF-8, YAML syntax errors, undefined aliases, tags
other than YAML's JSON-compatible types (Python tags, !!binary, !!set, !!omap, !!pairs), duplicate keys (the API
server refuses them too), nesting deeper than any real object needs (PyYAML would recurse until Python's stack runs
out) and alias amplification ("billion laughs": anchors that expand to millions of nodes once code walks the shared
references). `kind: List` exports (`kubectl get -o yaml`) are unwrapped so their items count like top-level
documents.
"""

from __future__ import annotations

import sys
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

# Generous for any Kubernetes object (a Deployment is ~12 levels deep), far below Python's recursion limit.
MAX_DEPTH = 64
# Nodes a document may expand to once aliases are followed; a large CR has a few hundred.
MAX_EXPANDED_NODES = 100_000
# Bytes read from one input; a SpeculativeDeployment is a few KiB and etcd refuses objects over 1.5 MiB.
MAX_BYTES = 4 * 1024 * 1024
LIST_KINDS = frozenset({"List", "SpeculativeDeploymentList"})
STDIN = "-"


class LoadError(ValueError):
    """An input that cannot be read as YAML documents; str() is one line naming the source and the problem."""

    def __init__(self, source: str, problem: str) -> None:
        super().__init__(f"{source}: {problem}")
        self.source = source
        self.problem = problem


def printable(text: str) -> str:
    """`text` safe to print on a terminal: control and format characters (ESC of a terminal escape sequence, CR,
    newline, bidirectional overrides, ...) are shown as Python escapes (\\x1b, \\u202e) instead of acting."""
    return "".join(_escaped(c) if unicodedata.category(c) in ("Cc", "Cf") else c for c in text)


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


@dataclass(frozen=True)
class Document:
    """One object from an input: where it came from and its decoded body."""

    source: str
    index: int  # position among the source's objects, items of a List counted one by one
    body: dict[str, Any]

    @property
    def kind(self) -> object:
        return self.body.get("kind")

    @property
    def name(self) -> str:
        meta = self.body.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        return name if isinstance(name, str) and name else f"<document {self.index + 1}>"


@dataclass
class _Budget:
    seen: dict[int, int] = field(default_factory=dict)
    open: set[int] = field(default_factory=set)


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys and bounds nesting depth while composing."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise yaml.YAMLError(f"nesting deeper than {MAX_DEPTH} levels at line {mark.line + 1}")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            if isinstance(key_node, ScalarNode):
                key = self.construct_scalar(key_node)
                if key in seen and key_node.tag != "tag:yaml.org,2002:merge":
                    raise yaml.YAMLError(
                        f"duplicate key {key!r} at line {key_node.start_mark.line + 1} "
                        f"(first at line {seen[key] + 1}); the API server refuses duplicate keys too"
                    )
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def _timestamp_as_text(loader: yaml.SafeLoader, node: ScalarNode) -> str:
    """Dates stay strings, as they do for the API server (JSON has no date type)."""
    return str(loader.construct_scalar(node))


_StrictLoader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp_as_text)

# SafeLoader types JSON cannot carry: the API server would refuse or reinterpret them, and in a free-form field (a
# label, an annotation) they would otherwise slip past the schema. Refused where they stand, with the tag named.
_NOT_JSON_TAGS = {
    "tag:yaml.org,2002:binary": "!!binary (bytes)",
    "tag:yaml.org,2002:set": "!!set",
    "tag:yaml.org,2002:omap": "!!omap",
    "tag:yaml.org,2002:pairs": "!!pairs",
}


def _refuse_non_json(loader: yaml.SafeLoader, node: Node) -> None:
    raise yaml.constructor.ConstructorError(
        None,
        None,
        f"{_NOT_JSON_TAGS[node.tag]} has no JSON form; Kubernetes objects hold only strings, numbers, booleans, "
        "null, lists and maps",
        node.start_mark,
    )


for _tag in _NOT_JSON_TAGS:
    _StrictLoader.add_constructor(_tag, _refuse_non_json)


def _expanded_size(node: Node, budget: _Budget) -> int:
    """Nodes `node` stands for with every alias followed, stopping once the budget is exceeded."""
    known = budget.seen.get(id(node))
    if known is not None:
        return known
    if id(node) in budget.open:
        raise yaml.YAMLError(f"recursive alias at line {node.start_mark.line + 1}: a document must be a tree")
    budget.open.add(id(node))
    size = 1
    if isinstance(node, SequenceNode):
        for child in node.value:
            size += _expanded_size(child, budget)
    elif isinstance(node, MappingNode):
        for key, value in node.value:
            size += _expanded_size(key, budget) + _expanded_size(value, budget)
    budget.open.discard(id(node))
    budget.seen[id(node)] = size
    if size > MAX_EXPANDED_NODES:
        raise yaml.YAMLError(
            f"the document expands to more than {MAX_EXPANDED_NODES} nodes through aliases (alias amplification)"
        )
    return size


def _parse(text: str) -> Iterator[Any]:
    loader = _StrictLoader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            _expanded_size(node, _Budget())
            yield loader.construct_document(node)
    finally:
        loader.dispose()


def _describe_yaml_error(err: yaml.YAMLError) -> str:
    if isinstance(err, yaml.MarkedYAMLError):
        where = err.problem_mark or err.context_mark
        parts = [p for p in (err.context, err.problem) if p]
        text = ", ".join(parts) or "malformed YAML"
        at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
        return f"YAML error: {text}{at}"
    return f"YAML error: {err}"


def read_text(source: str) -> str:
    """The decoded text of a path, or of stdin for "-"; LoadError for anything that is not readable UTF-8."""
    try:
        if source == STDIN:
            data = sys.stdin.buffer.read(MAX_BYTES + 1)
        else:
            path = Path(source)
            if path.is_dir():
                raise LoadError(source, "is a directory, not a file")
            with path.open("rb") as handle:
                data = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise LoadError(source, "no such file") from None
    except PermissionError:
        raise LoadError(source, "permission denied") from None
    except OSError as err:
        raise LoadError(source, f"cannot read: {err.strerror or err}") from None
    if len(data) > MAX_BYTES:
        raise LoadError(source, f"larger than {MAX_BYTES // (1024 * 1024)} MiB; not a SpeculativeDeployment file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise LoadError(
            source, f"not UTF-8 text (invalid byte 0x{data[err.start]:02x} at offset {err.start})"
        ) from None


def parse_documents(source: str, text: str) -> list[Document]:
    """Every mapping document of `text` (List items unwrapped); LoadError naming `source` on bad YAML."""
    try:
        raw = list(_parse(text))
    except yaml.YAMLError as err:
        raise LoadError(source, _describe_yaml_error(err)) from None
    except RecursionError:  # a flow collection nested beyond the composer's own recursion (before compose_node)
        raise LoadError(source, f"YAML error: nesting deeper than {MAX_DEPTH} levels") from None
    bodies: list[dict[str, Any]] = []
    for body in raw:
        if not isinstance(body, dict):
            continue
        items = body.get("items")
        if body.get("kind") in LIST_KINDS and isinstance(items, list):
            bodies.extend(item for item in items if isinstance(item, dict))
        else:
            bodies.append(body)
    return [Document(source, index, body) for index, body in enumerate(bodies)]


def load_documents(source: str) -> list[Document]:
    """Read and parse one input ("-" is stdin); raise LoadError with one line naming the source and the problem."""
    return parse_documents(source, read_text(source))


def speculative_deployments(documents: list[Document], kind: str) -> list[Document]:
    return [d for d in documents if d.kind == kind]


def _identity(document: Document) -> tuple[str, str] | None:
    """(namespace, name) as the API server keys the object; "" for a namespace left to the client's context."""
    meta = document.body.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        return None
    namespace = meta.get("namespace")
    return (namespace if isinstance(namespace, str) else "", meta["name"])


def duplicate_problems(documents: list[Document]) -> dict[int, str]:
    """For each document (by position in `documents`) that names the same object as an earlier one, why: applying
    both keeps only the last, so one of them never runs. Documents of one kind are compared; positions are 1-based."""
    first: dict[tuple[str, str], Document] = {}
    problems: dict[int, str] = {}
    for position, document in enumerate(documents):
        identity = _identity(document)
        if identity is None:
            continue
        earlier = first.setdefault(identity, document)
        if earlier is document:
            continue
        namespace = f" in namespace {identity[0]}" if identity[0] else ""
        where = "" if earlier.source == document.source else f" of {earlier.source}"
        problems[position] = (
            f"metadata.name: document {document.index + 1} names the same object ({identity[1]}{namespace}) as "
            f"document {earlier.index + 1}{where}; applying both keeps only the last"
        )
    return problems
