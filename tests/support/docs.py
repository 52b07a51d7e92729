"""The code of the documentation, for tests that run it: the docs cannot drift from it."""

from __future__ import annotations

from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def snippets(page: str, heading: str | None = None) -> list[str]:
    """The ```` ```python ```` blocks of ``docs/<page>``: all of them, or those under the
    heading whose text (without its ``#`` marks) is ``heading``, up to the next one."""
    blocks: list[str] = []
    current: list[str] | None = None
    under = heading is None
    for line in (DOCS / page).read_text(encoding="utf-8").splitlines():
        if current is not None:
            if line.startswith("```"):
                blocks.append("\n".join(current) + "\n")
                current = None
            else:
                current.append(line)
        elif line.startswith("#") and heading is not None:
            under = line.lstrip("#").strip() == heading
        elif under and line.startswith("```python"):
            current = []
    if not blocks:
        raise LookupError(f"no python block under {heading!r} in docs/{page}")
    return blocks
