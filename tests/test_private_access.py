"""The lint gate against other libraries' private names: it fails on a planted access, in
every spelling, and passes on the four packages as they are."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised by the Python 3.10 tox environment
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def _load_checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_private_access", ROOT / "tools" / "check_private_access.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


checker = _load_checker()

PLANTED = {
    "from redis._parsers import AsyncCommandsParser": "from redis._parsers import ...",
    "import redis._parsers.helpers": "import redis._parsers.helpers",
    "from pluggy import _hooks": "from pluggy import _hooks",
    "x = getattr(manager, '_inner_hookexec', None)": "getattr(..., '_inner_hookexec')",
    "hasattr(reader, '_eof')": "hasattr(..., '_eof')",
    "setattr(metrics, '_use_created', False)": "setattr(..., '_use_created')",
    "sock = connection._sock": "._sock",
    "manager._inner_hookexec(1)": "._inner_hookexec",
}


@pytest.mark.parametrize("snippet", PLANTED)
def test_a_planted_private_access_is_found(snippet: str) -> None:
    [(line, message)] = list(checker.findings(snippet))
    assert line == 1
    assert PLANTED[snippet] in message


@pytest.mark.parametrize(
    "snippet",
    [
        "self._lock = 1",
        "value = getattr(self, '_cache', None)",
        "from sentinel_core.store._redis import RedisStore",
        "import sentinel_core.store._redis",
        "from . import _translate",
        "from ._guard import guard_request",
        "x = sentinel_core.store._redis",
        "native = request._get_current_object()",
        "value.__class__.__name__",
        "getattr(obj, name)",
    ],
)
def test_own_modules_dunders_and_allowed_names_pass(snippet: str) -> None:
    assert list(checker.findings(snippet)) == []


def test_the_command_fails_on_a_planted_file_and_names_it(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text("import redis\n\nsock = redis.Redis().connection._sock\n")
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "check_private_access.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert f"{planted}:3: private attribute of another object: ._sock" in result.stdout


def test_ruff_slf001_fails_on_a_planted_file_in_a_package(tmp_path: Path) -> None:
    package = tmp_path / "sentinel_core"
    package.mkdir()
    (package / "planted.py").write_text("def f(c: object) -> object:\n    return c._sock\n")
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "SLF001", str(package)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert "SLF001" in result.stdout


def test_the_four_packages_are_clean() -> None:
    assert checker.check_paths([ROOT / name for name in checker.DEFAULT_PATHS]) == []


def test_ruff_allows_exactly_the_names_the_checker_allows_with_reasons() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    ignored = pyproject["tool"]["ruff"]["lint"]["flake8-self"]["extend-ignore-names"]
    assert sorted(ignored) == sorted(checker.ALLOWED)
    assert all(reason.strip() for reason in checker.ALLOWED.values())
