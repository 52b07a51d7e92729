"""The facade's blocking calls are generated from its asyncio calls
(``tools/unasync.py``): the committed `sentinel_core/_calls_sync.py` must be exactly
what the generator makes of `sentinel_core/_calls_async.py` now."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import sentinel_core
from sentinel_core import Sentinel
from sentinel_core._calls_async import AsyncCalls

TOOL = Path(__file__).resolve().parent.parent / "tools" / "unasync.py"


def load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unasync", TOOL)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["unasync"] = module
    spec.loader.exec_module(module)
    return module


def test_the_blocking_calls_are_what_the_generator_makes_of_the_asyncio_ones() -> None:
    tool = load_tool()
    assert Path(sentinel_core.__file__).parent / "_calls_sync.py" == tool.TARGET
    assert tool.TARGET.read_text(encoding="utf-8") == tool.generate()
    assert tool.main(["--check"]) == 0


def test_the_check_fails_when_the_generated_file_is_stale(tmp_path: Path) -> None:
    tool = load_tool()
    stale = tmp_path / "_calls_sync.py"
    stale.write_text("# edited by hand\n", encoding="utf-8")
    tool.TARGET = stale
    assert tool.main(["--check"]) == 1
    assert tool.main([]) == 0
    assert stale.read_text(encoding="utf-8") == tool.generate()


def test_every_asyncio_call_has_its_blocking_twin() -> None:
    asyncio_calls = [name for name in vars(AsyncCalls) if name[:1] in "a_"]
    for name in asyncio_calls:
        if name.startswith("__") or name == "_aload_keys":
            continue
        twin = load_tool().NAMES.get(name, name)
        assert hasattr(Sentinel, twin), f"{name} has no blocking twin {twin}"


def test_the_markers_drop_and_replace_lines() -> None:
    tool = load_tool()
    source = (
        '"""doc"""\n'
        "async def afoo(self):\n"
        "    # unasync: begin async only\n"
        "    gone()\n"
        "    # unasync: end\n"
        "    also_gone()  # unasync: async only\n"
        "    # unasync: sync: self._send_release(call)\n"
        "    await asyncio.shield(self._asend_release(call))\n"
        "    async with x:\n"
        "        async for y in z:\n"
        "            await self.async_store.arun(y)\n"
    )
    body = tool.unasync(source).split('"""\n', 2)[-1]
    assert body == (
        "\ndef afoo(self):\n"
        "    self._send_release(call)\n"
        "    with x:\n"
        "        for y in z:\n"
        "            self.store.run(y)\n"
    )
