"""Installing the test plugin distribution (tests/support/plugin_dist) for real.

Two ways, both ending in an entry point that `importlib.metadata` discovers exactly as
it would in production:

- `install_dist_info` lays the distribution out as an installer does (the package
  beside a ``.dist-info`` holding ``METADATA`` and ``entry_points.txt``): fast;
- `pip_install` builds the distribution from its ``pyproject.toml`` and installs it with
  pip into a target directory: slow (a build), the whole path a user's install takes.

The distribution's ``pyproject.toml`` is written at install time: a nested
``pyproject.toml`` in the repository would be swept into Sentinel's own sdist.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

PACKAGE = "sentinel_apikey_plugin"
DISTRIBUTION = "sentinel-apikey-plugin"
VERSION = "1.0.0"
ENTRY_POINT = "apikey"
SOURCE = Path(__file__).parent / "plugin_dist"

PYPROJECT = f"""\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{DISTRIBUTION}"
version = "{VERSION}"
description = "Test plugin: API-key identity and a pro tier for Sentinel"
requires-python = ">=3.10"

[project.entry-points.sentinel]
{ENTRY_POINT} = "{PACKAGE}"

[tool.setuptools]
packages = ["{PACKAGE}"]
"""


def install_dist_info(target: Path) -> None:
    """Install the plugin into ``target`` (a directory to put on ``sys.path``)."""
    shutil.copytree(SOURCE / PACKAGE, target / PACKAGE)
    info = target / f"{PACKAGE}-{VERSION}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {VERSION}\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        f"[sentinel]\n{ENTRY_POINT} = {PACKAGE}\n", encoding="utf-8"
    )
    (info / "top_level.txt").write_text(f"{PACKAGE}\n", encoding="utf-8")
    (info / "INSTALLER").write_text("sentinel-tests\n", encoding="utf-8")


def pip_install(work: Path, target: Path) -> None:
    """Build the distribution in ``work`` and pip-install it into ``target``."""
    source = work / "plugin_dist"
    shutil.copytree(SOURCE, source, ignore=shutil.ignore_patterns("__pycache__"))
    (source / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-cache-dir",
            "--target",
            str(target),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
