"""The distribution is proven, not assumed: build it, read it, install it, run it.

Run by tox's ``packaging`` environment (it builds and installs, so it takes a while).
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("sentinel_core", "sentinel_fastapi", "sentinel_flask", "sentinel_django")
LUA_SCRIPTS = (
    "sentinel_core/store/lua/integers.lua",
    "sentinel_core/store/lua/token_bucket.lua",
    "sentinel_core/store/lua/sliding_window.lua",
    "sentinel_core/store/lua/concurrency.lua",
    "sentinel_core/store/lua/quota.lua",
)
NEVER_SHIPPED = ("tests/", "benchmarks/", "examples/", "docs/", ".ci/")


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
    )
    return out


def _wheel(dist: Path) -> Path:
    (wheel,) = dist.glob("sentinel_ratelimit-*.whl")
    return wheel


def _wheel_names(dist: Path) -> list[str]:
    with zipfile.ZipFile(_wheel(dist)) as wheel:
        return wheel.namelist()


def missing_from_wheel(names: list[str]) -> list[str]:
    """What a wheel listing lacks: every Lua script, every py.typed, every package."""
    required = [*LUA_SCRIPTS, *(f"{package}/py.typed" for package in PACKAGES)]
    required += [f"{package}/__init__.py" for package in PACKAGES]
    return [name for name in required if name not in names]


def test_wheel_ships_scripts_markers_and_all_packages(dist: Path) -> None:
    names = _wheel_names(dist)
    assert missing_from_wheel(names) == []
    assert not [n for n in names if n.startswith(NEVER_SHIPPED)]


def test_the_content_check_notices_a_missing_lua_script(dist: Path) -> None:
    names = [name for name in _wheel_names(dist) if not name.endswith(".lua")]
    assert missing_from_wheel(names) == list(LUA_SCRIPTS)


def test_sdist_has_sources_but_no_tests_or_benchmarks(dist: Path) -> None:
    (sdist,) = dist.glob("sentinel_ratelimit-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = [name.split("/", 1)[1] for name in archive.getnames() if "/" in name]
    assert all(script in names for script in LUA_SCRIPTS)
    assert "pyproject.toml" in names
    assert not [n for n in names if n.startswith(NEVER_SHIPPED)]


def test_twine_accepts_the_metadata(dist: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, dist.iterdir())],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_wheel_installs_into_a_fresh_venv_and_runs(dist: Path, tmp_path: Path) -> None:
    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env)
    python = env / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", f"{_wheel(dist)}[all]"],
        check=True,
        capture_output=True,
    )
    imports = "; ".join(f"import {package}" for package in PACKAGES)
    subprocess.run([str(python), "-c", imports], check=True, cwd=tmp_path)
    help_text = subprocess.run(
        [str(env / "bin" / "sentinel"), "--help"], check=True, capture_output=True, text=True
    ).stdout
    assert "check" in help_text
    assert "demo" in help_text
