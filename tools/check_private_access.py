"""Fail on access to other libraries' private names (STYLE §15), where ruff's SLF001 is blind.

SLF001 sees ``obj._name`` only. This check also sees the spellings it misses:

- ``getattr(obj, "_name")`` (and ``hasattr``/``setattr``/``delattr``) on any object but
  ``self``/``cls``;
- imports of private modules or names of another distribution: ``import redis._parsers``,
  ``from redis._parsers import X``, ``from pluggy import _hooks``;
- ``obj._name`` on any object but ``self``/``cls`` (what SLF001 checks, repeated here so
  this script alone answers "does this code touch a private name?").

Sentinel's own packages may use each other's private modules. A name that a library
documents as public despite its underscore is listed in `ALLOWED` with the reason; the
same names are given to ruff as ``flake8-self.extend-ignore-names`` (a test keeps the two
lists equal). Usage: ``python tools/check_private_access.py [PATH ...]``; exit 1 on a
finding. Standard library only: the lint environment installs nothing but ruff.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

OWN_PACKAGES = frozenset({"sentinel_core", "sentinel_fastapi", "sentinel_flask", "sentinel_django"})
DEFAULT_PATHS = tuple(sorted(OWN_PACKAGES))

ALLOWED: dict[str, str] = {
    "_get_current_object": "Flask/Werkzeug document LocalProxy._get_current_object() as the "
    "way to reach the proxied object (flask.palletsprojects.com, 'Notes On Proxies')",
    "_request": "Django REST framework's Request wraps the HttpRequest as `_request`; DRF "
    "gives no public accessor. Used in sentinel_django only; to be replaced by a view of "
    "the DRF Request itself",
}
"""Underscore names accepted on foreign objects, each with why it is safe to use."""

_ATTRIBUTE_FUNCTIONS = frozenset({"getattr", "hasattr", "setattr", "delattr"})
_OWNERS = frozenset({"self", "cls"})


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _foreign(module: str) -> bool:
    return module.split(".", 1)[0] not in OWN_PACKAGES


def _owner(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in _OWNERS


def findings(source: str, filename: str = "<string>") -> Iterator[tuple[int, str]]:
    """(line, message) for every private access to another library in ``source``."""
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if _foreign(alias.name) and any(_private(part) for part in parts[1:]):
                    yield node.lineno, f"import of a private module: import {alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if not _foreign(node.module):
                continue
            if any(_private(part) for part in node.module.split(".")[1:]):
                yield node.lineno, f"import from a private module: from {node.module} import ..."
            for alias in node.names:
                if _private(alias.name) and alias.name not in ALLOWED:
                    name = f"{node.module} import {alias.name}"
                    yield node.lineno, f"import of a private name: from {name}"
        elif isinstance(node, ast.Call):
            function, args = node.func, node.args
            if (
                isinstance(function, ast.Name)
                and function.id in _ATTRIBUTE_FUNCTIONS
                and len(args) >= 2
                and not _owner(args[0])
                and isinstance(args[1], ast.Constant)
                and isinstance(args[1].value, str)
                and _private(args[1].value)
                and args[1].value not in ALLOWED
            ):
                call = f"{function.id}(..., {args[1].value!r})"
                yield node.lineno, f"private attribute by name: {call}"
        elif (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and node.attr not in ALLOWED
            and not _owner(node.value)
            and not _own_module_attribute(node.value)
        ):
            yield node.lineno, f"private attribute of another object: .{node.attr}"


def _own_module_attribute(node: ast.expr) -> bool:
    """``sentinel_core.store._redis`` and the like: our own modules, spelt as attributes."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id in OWN_PACKAGES


def check_paths(paths: list[Path]) -> list[str]:
    """Every finding under ``paths`` (files or folders of ``.py`` files) as ``file:line: msg``."""
    reports = []
    for root in paths:
        files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
        for path in files:
            for line, message in findings(path.read_text(encoding="utf-8"), str(path)):
                reports.append(f"{path}:{line}: {message}")
    return reports


def main(argv: list[str]) -> int:
    reports = check_paths([Path(arg) for arg in argv or DEFAULT_PATHS])
    for report in reports:
        print(report)
    if reports:
        print(f"{len(reports)} private access(es) to other libraries (see {__file__})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
