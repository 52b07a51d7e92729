"""The documentation's code blocks run (issue 27): every ``python`` block of the Quick
start and the adapters' guide is tagged and run by a test (`tests.support.docs_snippets`
says which); the framework-free ones run here, the others under their framework's test
client (``tests/<framework>/test_<framework>_docs.py``) and under real servers
(``tests/realserver/test_quickstart.py``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from sentinel_core import load_config
from sentinel_core.adapter import RouteTable
from tests.support.docs_snippets import EXECUTED, snippet, snippets, untagged_python_blocks

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("page", sorted(EXECUTED))
def test_every_python_block_is_tagged_and_every_tag_is_run_by_a_test(page: str) -> None:
    assert untagged_python_blocks(page) == []
    assert set(snippets(page)) == set(EXECUTED[page])
    for tag, test_file in EXECUTED[page].items():
        assert (ROOT / test_file).read_text(encoding="utf-8").count(f'"{tag}"') >= 1, tag


def run(code: str, **names: Any) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "docs_snippet", **names}
    exec(compile(code, "<docs snippet>", "exec"), namespace)
    return namespace


def test_the_quickstarts_core_snippet() -> None:
    namespace = run(snippet("quickstart.md", "core"))
    assert namespace["decision"].allowed


def test_the_adapters_lifecycle_snippet() -> None:
    namespace = run(snippet("adapters.md", "lifecycle"))
    assert [status for status, _ in namespace["answers"]] == [200, 200, 429]


def test_the_default_route_and_count_snippets_load() -> None:
    policy = {"algorithm": "token_bucket", "rate": "5/minute", "fail_mode": "closed"}
    routes = run(snippet("adapters.md", "default-route"))["routes"]
    policies = run(snippet("adapters.md", "count"))["policies"]
    config = load_config(
        {
            "redis_url": "memory://",
            "policies": {**policies, "api.default": policy},
            "routes": routes,
        }
    )
    table = RouteTable(config.routes)
    assert table.charged("GET", ["/anything"]) == ("api.default",)
    assert table.charged("POST", ["/v1/login"]) == ("auth.login",)
    assert config.policies["auth.login"].count == frozenset({401})


def test_install_commands_name_the_distribution_pyproject_builds() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    name = re.search(r'^name = "([^"]+)"', pyproject, re.MULTILINE)
    assert name is not None
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    named = [
        (page.name, match.group(1))
        for page in pages
        for match in re.finditer(r'pip install "([\w.-]+)\[', page.read_text(encoding="utf-8"))
    ]
    assert named
    assert {distribution for _, distribution in named} == {name.group(1)}, named


def test_no_page_points_to_documents_outside_the_repository() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    pages += sorted((ROOT / "docs" / "operations").glob("*"))
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert "SPEC §" not in text, page
        assert "STYLE.md" not in text, page
