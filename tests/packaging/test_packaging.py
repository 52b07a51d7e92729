"""The distribution is proven, not assumed: build it, read it, install it, run it.

Run by tox's ``packaging`` environment (it builds and installs, so it takes a while).
"""

from __future__ import annotations

import shutil
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
    "sentinel_core/store/lua/window_state.lua",
    "sentinel_core/store/lua/quota_state.lua",
    "sentinel_core/store/lua/settle.lua",
    "sentinel_core/store/lua/token_bucket.lua",
    "sentinel_core/store/lua/sliding_window.lua",
    "sentinel_core/store/lua/concurrency.lua",
    "sentinel_core/store/lua/quota.lua",
    "sentinel_core/store/lua/fleet.lua",
)
USER_SUITE = Path(__file__).parent / "user_suite"
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


@pytest.fixture(scope="module")
def fresh_venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtualenv with the wheel and its ``all`` extra, plus what a user's test suite
    adds: pytest and httpx2 (Starlette's TestClient). Nothing of this checkout."""
    env = tmp_path_factory.mktemp("fresh") / "venv"
    venv.EnvBuilder(with_pip=True).create(env)
    subprocess.run(
        [
            str(env / "bin" / "python"),
            *("-m", "pip", "install", "--quiet", f"{_wheel(dist)}[all]", "pytest", "httpx2"),
        ],
        check=True,
        capture_output=True,
    )
    return env


def test_wheel_installs_into_a_fresh_venv_and_runs(fresh_venv: Path, tmp_path: Path) -> None:
    python = fresh_venv / "bin" / "python"
    imports = "; ".join(f"import {package}" for package in PACKAGES)
    subprocess.run([str(python), "-c", imports], check=True, cwd=tmp_path)
    help_text = subprocess.run(
        [str(fresh_venv / "bin" / "sentinel"), "--help"], check=True, capture_output=True, text=True
    ).stdout
    assert "check" in help_text
    assert "demo" in help_text


def test_a_users_test_suite_exhausts_advances_and_refills_in_each_framework(
    fresh_venv: Path, tmp_path: Path
) -> None:
    """SPEC §9 as a user meets it: the ``sentinel`` pytest plugin comes with the package
    (its ``pytest11`` entry point), and each framework's test client sees a limit
    exhausted, the clock advanced and the limit refilled, warnings as errors."""
    suite = tmp_path / "suite"
    shutil.copytree(USER_SUITE, suite)

    result = subprocess.run(
        [
            str(fresh_venv / "bin" / "python"),
            "-m",
            "pytest",
            "-W",
            "error",
            "-p",
            "no:cacheprovider",
        ],
        cwd=suite,
        capture_output=True,
        text=True,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    plugins = next(line for line in result.stdout.splitlines() if line.startswith("plugins:"))
    assert "sentinel-ratelimit" in plugins
    assert "6 passed" in result.stdout
