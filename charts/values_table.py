"""Write the values table of charts/redlease/README.md from values.yaml (helm-docs style).

Each key's description is its ``# --`` comment in values.yaml (continued by the ``#`` lines
that follow); the default is the value itself. ``python charts/values_table.py`` rewrites the
table between the README's markers; ``--check`` exits 1 when the README is out of date (a test
runs it, so the table cannot drift).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parent / "redlease"
BEGIN, END = "<!-- values-table:begin -->", "<!-- values-table:end -->"
_KEY = re.compile(r"^(\s*)([A-Za-z0-9_]+):")
_DOC = re.compile(r"^\s*# -- ?(.*)$")
_MORE = re.compile(r"^\s*# ?(.*)$")


def descriptions(text: str) -> dict[str, str]:
    """Dotted key -> its ``# --`` description."""
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    pending: list[str] | None = None
    for line in text.splitlines():
        doc = _DOC.match(line)
        if doc:
            pending = [doc.group(1)]
            continue
        more = _MORE.match(line)
        if more:
            if pending is not None:
                pending.append(more.group(1))
            continue
        key = _KEY.match(line)
        if key is None:
            pending = None
            continue
        indent = len(key.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key.group(2)))
        if pending:
            out[".".join(k for _, k in stack)] = " ".join(pending).strip()
        pending = None
    return out


def leaves(values: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(values, dict) and values:
        return [row for k, v in values.items() for row in leaves(v, f"{prefix}{k}.")]
    return [(prefix.rstrip("."), values)]


def table(text: str) -> str:
    docs = descriptions(text)
    rows = ["| Key | Default | Description |", "|---|---|---|"]
    for key, value in leaves(yaml.safe_load(text)):
        about, scope = docs.get(key, ""), key
        while not about and "." in scope:  # a leaf of a documented block: the block's text
            scope = scope.rpartition(".")[0]
            about = docs.get(scope, "")
        shown = json.dumps(value).replace("|", "\\|")
        about = about.replace("|", "\\|")
        rows.append(f"| `{key}` | `{shown}` | {about} |")
    return "\n".join(rows)


def render(readme: str, values: str) -> str:
    head, _, rest = readme.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{table(values)}\n{END}{tail}"


def main(argv: list[str]) -> int:
    path = CHART / "README.md"
    readme = path.read_text()
    fresh = render(readme, (CHART / "values.yaml").read_text())
    if "--check" in argv:
        if fresh != readme:
            sys.stderr.write(f"{path} is out of date: run python charts/values_table.py\n")
            return 1
        return 0
    path.write_text(fresh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
