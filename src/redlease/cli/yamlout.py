"""Manifests as compact YAML: each mapping or list that fits on its line is written in flow
style (``resources: {requests: {cpu: 10m}}``), the rest in block style, multi-line strings as
literal blocks. What ``redlease inject`` prints: GitOps users review it in every diff, and the
block style of PyYAML's default spends a line on every leaf (232 lines for a 30-line
Deployment before the probes were shortened).

The choice is made per node against the column it starts at (PyYAML's indentation: two spaces
per block mapping level, sequences under a key not indented), so no line the dumper writes
goes past :data:`WIDTH` unless a single scalar does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml  # type: ignore[import-untyped]

WIDTH = 100
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"


def _flow_text(value: Any) -> str:
    return str(yaml.safe_dump(value, default_flow_style=True, width=10**9)).strip()


def _scalar(value: Any) -> yaml.Node:
    if isinstance(value, str) and "\n" in value:
        return yaml.ScalarNode("tag:yaml.org,2002:str", value, style="|")
    node: yaml.Node = yaml.SafeDumper(None).represent_data(value)
    return node


def _fits(value: Any, column: int) -> bool:
    return bool(value) and "\n" not in str(value) and column + len(_flow_text(value)) <= WIDTH


def _node(value: Any, indent: int, column: int) -> yaml.Node:
    """``value`` whose block content would sit at ``indent`` and whose flow form would start at
    ``column``."""
    if isinstance(value, dict):
        if _fits(value, column):
            return yaml.MappingNode(_MAP, [(_scalar(k), _flat(v)) for k, v in value.items()],
                                    flow_style=True)  # fmt: skip
        pairs = []
        for key, item in value.items():
            at = indent + len(str(key)) + 2
            child = indent if isinstance(item, list) else indent + 2  # lists under a key: "- "
            pairs.append((_scalar(key), _node(item, child, at)))
        return yaml.MappingNode(_MAP, pairs, flow_style=False)
    if isinstance(value, list):
        if _fits(value, column):
            return yaml.SequenceNode(_SEQ, [_flat(v) for v in value], flow_style=True)
        return yaml.SequenceNode(
            _SEQ, [_node(item, indent + 2, indent + 2) for item in value], flow_style=False
        )
    return _scalar(value)


def _flat(value: Any) -> yaml.Node:
    """``value`` inside a flow collection: flow all the way down."""
    if isinstance(value, dict):
        pairs = [(_scalar(k), _flat(v)) for k, v in value.items()]
        return yaml.MappingNode(_MAP, pairs, flow_style=True)
    if isinstance(value, list):
        return yaml.SequenceNode(_SEQ, [_flat(v) for v in value], flow_style=True)
    return _scalar(value)


def dump_all(docs: Iterable[Any]) -> str:
    """The documents as compact YAML (``---`` between them), keys in their given order."""
    nodes = [_node(doc, 0, 0) for doc in docs]
    return str(yaml.serialize_all(nodes, Dumper=yaml.SafeDumper, width=WIDTH))
