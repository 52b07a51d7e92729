"""The code blocks of the documentation, read from the Markdown, so that the tests run
what the pages show and the pages cannot drift from the code.

A block the tests run is tagged on the line before its fence:

    <!-- snippet: fastapi-app -->
    ```python
    ...
    ```

The comment is invisible on the site. `EXECUTED` lists, per page, every tagged block
and the test that runs it; `tests/test_docs_snippets.py` checks that every ``python``
block of these pages is tagged, that every tag is listed there, and that each listed
test exists (so a block nobody runs fails the suite).
"""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
_TAGGED = re.compile(r"<!-- snippet: ([\w-]+) -->\n```(\w+)\n(.*?)\n```", re.DOTALL)
_FENCE = re.compile(r"^```(\w*)$", re.MULTILINE)

QUICKSTART_REDIS_URL = "redis://127.0.0.1:6379/0"
"""The URL the Quick start's apps name; tests swap in their own server's (they never
touch a Redis on 6379)."""

EXECUTED: dict[str, dict[str, str]] = {
    "quickstart.md": {
        "redis-server": "tests/realserver/test_quickstart.py",
        "secrets": "tests/realserver/test_quickstart.py",
        "fastapi-app": "tests/fastapi/test_fastapi_docs.py",
        "fastapi-run": "tests/realserver/test_quickstart.py",
        "flask-app": "tests/flask/test_flask_docs.py",
        "flask-run": "tests/realserver/test_quickstart.py",
        "django-startproject": "tests/django/test_django_docs.py",
        "django-settings": "tests/django/test_django_docs.py",
        "django-urls": "tests/django/test_django_docs.py",
        "django-run": "tests/realserver/test_quickstart.py",
        "token": "tests/realserver/test_quickstart.py",
        "curl-loop": "tests/realserver/test_quickstart.py",
        "curl-429": "tests/realserver/test_quickstart.py",
        "core": "tests/test_docs_snippets.py",
    },
    "adapters.md": {
        "lifecycle": "tests/test_docs_snippets.py",
        "default-route": "tests/test_docs_snippets.py",
        "fastapi-dependency": "tests/fastapi/test_fastapi_docs.py",
        "fastapi-exempt": "tests/fastapi/test_fastapi_docs.py",
        "flask-exempt": "tests/flask/test_flask_docs.py",
        "drf-throttle": "tests/django/test_django_docs.py",
        "django-exempt": "tests/django/test_django_docs.py",
        "count": "tests/test_docs_snippets.py",
    },
}


def snippets(page: str) -> dict[str, tuple[str, str]]:
    """Every tagged block of ``docs/<page>``: tag -> (language, code)."""
    text = (DOCS / page).read_text(encoding="utf-8")
    return {tag: (language, code) for tag, language, code in _TAGGED.findall(text)}


def snippet(page: str, tag: str) -> str:
    """The code of the block tagged ``tag`` on ``docs/<page>``."""
    return snippets(page)[tag][1]


def untagged_python_blocks(page: str) -> list[int]:
    """The line numbers of the ``python`` fences of ``docs/<page>`` that carry no tag."""
    lines = (DOCS / page).read_text(encoding="utf-8").splitlines()
    untagged: list[int] = []
    inside = False
    for number, line in enumerate(lines, 1):
        match = _FENCE.match(line)
        if match is None:
            continue
        if inside:
            inside = match.group(1) != ""
            continue
        inside = True
        if match.group(1) == "python" and not lines[number - 2].startswith("<!-- snippet: "):
            untagged.append(number)
    return untagged


def quickstart_app(tag: str, redis_url: str) -> str:
    """A Quick start app's code, on the test's Redis instead of 127.0.0.1:6379, with a
    wide Redis budget: on a loaded test machine the default 20 ms can run out while the
    first request checks the server and loads the scripts, and a 503 then is no outage."""
    code = snippet("quickstart.md", tag)
    setting = f'"redis_url": "{QUICKSTART_REDIS_URL}",'
    assert setting in code
    return code.replace(setting, f'"redis_url": "{redis_url}", "socket_timeout_ms": 2000,')
