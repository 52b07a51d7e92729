"""The layering of ``sentinel_core``: which part may import which, and no import circles.

Each folder's ``__init__`` docstring states what the folder may import (a line
``May import: `sentinel_core.x`, ...``); the top-level modules' rules are in
`TOP_LEVEL` below. Every import of the package's own modules counts, those under
``TYPE_CHECKING`` and inside functions included: a reader (and a tool drawing the import
graph) sees them all. The rules form a ladder with no circle, so a part never depends,
however indirectly, on a part above it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import sentinel_core

PACKAGE = Path(sentinel_core.__file__).parent
NAME = "sentinel_core"

TOP_LEVEL: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    "_models": frozenset(),
    "_memo": frozenset(),
    "_embedded": frozenset(),
    "hookspecs": frozenset({"_models", "identity", "resilience"}),
    "_plugins": frozenset({"_models", "errors", "hookspecs", "identity", "resilience"}),
    "_fleet": frozenset({"_models", "config", "errors", "hookspecs", "resilience", "store"}),
    "_reservation": frozenset(
        {"_models", "decision", "errors", "identity", "observability", "resilience", "store"}
    ),
    "_calls_base": frozenset(
        {
            "_fleet",
            "_models",
            "_plugins",
            "_reservation",
            "config",
            "decision",
            "errors",
            "http",
            "identity",
            "resilience",
            "store",
        }
    ),
    "_calls_async": frozenset(
        {
            "_calls_base",
            "_models",
            "_reservation",
            "decision",
            "errors",
            "http",
            "identity",
            "resilience",
            "store",
        }
    ),
    "_sentinel": frozenset(
        {
            "_calls_async",
            "_calls_sync",
            "_embedded",
            "_fleet",
            "_reservation",
            "_models",
            "errors",
            "_plugins",
            "config",
            "decision",
            "http",
            "identity",
            "observability",
            "resilience",
            "store",
        }
    ),
    "adapter": frozenset({"config", "decision", "http", "store"}),
    "__main__": frozenset({"cli"}),
}
TOP_LEVEL["_calls_sync"] = TOP_LEVEL["_calls_async"]  # generated from it: the same imports
"""What each top-level module may import (``__init__`` re-exports and may import any)."""

_MAY_IMPORT = re.compile(r"^May import:(.*?)(?:\n\n|\Z)", re.MULTILINE | re.DOTALL)
_PART = re.compile(rf"`{NAME}\.(\w+)`")


def folders() -> list[str]:
    return sorted(path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file())


def declared(folder: str) -> frozenset[str]:
    """The parts a folder's ``__init__`` docstring says it may import."""
    doc = ast.get_docstring(ast.parse((PACKAGE / folder / "__init__.py").read_text())) or ""
    match = _MAY_IMPORT.search(doc)
    assert match is not None, f"{NAME}/{folder}/__init__.py: no 'May import:' line"
    return frozenset(_PART.findall(match.group(1)))


def rules() -> dict[str, frozenset[str]]:
    return {**TOP_LEVEL, **{folder: declared(folder) for folder in folders()}}


def part_of(module: str) -> str:
    """The part (top-level module or folder) a dotted module of the package is in."""
    return module.split(".")[1] if "." in module else "__init__"


def imports(path: Path, root: Path) -> Iterator[tuple[int, str]]:
    """(line, module) of every import of the package's own modules in ``path``, a file
    of the package under ``root``."""
    module = ".".join(path.relative_to(root).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from sentinel_core import x` may name a module: count what it names.
            names = [f"{base}.{alias.name}" if base == NAME else base for alias in node.names]
        else:
            continue
        for name in names:
            if name.startswith(f"{NAME}."):
                yield node.lineno, name


def violations(path: Path, root: Path) -> list[str]:
    """The imports of ``path`` that its part may not make."""
    module = ".".join(path.relative_to(root).with_suffix("").parts)
    part = part_of(module.removesuffix(".__init__"))
    if part == "__init__":
        return []  # the package's face re-exports from every part
    allowed = rules()[part] | {part}
    return [
        f"{path.name} line {line}: {name} ({part} may import only {sorted(allowed)})"
        for line, name in imports(path, root)
        if part_of(name) not in allowed
    ]


def sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_folder_says_what_it_may_import() -> None:
    for folder in folders():
        assert declared(folder) <= set(rules()), folder


def test_the_rules_are_a_ladder_without_circles() -> None:
    graph = rules()
    done: set[str] = set()

    def visit(part: str, path: tuple[str, ...]) -> None:
        assert part not in path, f"import rules form a circle: {' -> '.join((*path, part))}"
        if part in done:
            return
        for lower in sorted(graph.get(part, ())):
            visit(lower, (*path, part))
        done.add(part)

    for part in graph:
        visit(part, ())


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_imports_keep_to_the_layering(path: Path) -> None:
    assert not violations(path, PACKAGE.parent)


def test_an_import_running_back_up_is_caught(tmp_path: Path) -> None:
    """The check itself: the store importing the HTTP layer (relative or absolute) fails,
    its own folder and the ground below it pass."""
    bad = tmp_path / NAME / "store" / "_bad.py"
    bad.parent.mkdir(parents=True)
    bad.write_text(
        "from ..http import _outcome\n"
        "from sentinel_core.http._routes import RouteTable\n"
        "from . import _scripts\n"
        "import sentinel_core.errors\n"
        "from sentinel_core import _models\n"
    )
    found = violations(bad, tmp_path)
    assert [entry.split(":")[0] for entry in found] == ["_bad.py line 1", "_bad.py line 2"]
