"""What the stores say to Redis: a decision's one EVALSHA, and the start-up check.

A decision is one call: `run_script` (blocking) and `arun_script` (asyncio) send the
EVALSHA straight to redis-py, and only a NOSCRIPT reply (the exception path) loads the
script and retries once. The start-up check is a conversation, a generator free of I/O
that yields Redis commands and receives their replies (or has the `RedisError` thrown
into it); `drive` runs it with blocking calls and `adrive` with awaits, so what the
check requires is written once, here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from redis.exceptions import NoScriptError, RedisError

from sentinel_core.errors import ScriptMissingError, StartupError
from sentinel_core.store._scripts import ScriptCall, all_scripts

T = TypeVar("T")
Command = tuple[Any, ...]
Conversation = Generator[Command, Any, T]

MINIMUM_REDIS_VERSION = (6, 2)


def run_script(call: ScriptCall, execute: Callable[..., Any]) -> Any:
    """One EVALSHA with a blocking ``execute(*command)``: the whole of a decision's
    traffic. Only on NOSCRIPT (the exception path) is the script loaded, once, and the
    call retried; still missing, it is a `ScriptMissingError`."""
    command = ("EVALSHA", call.script.sha, len(call.keys), *call.keys, *call.args)
    try:
        return execute(*command)
    except NoScriptError:
        execute("SCRIPT LOAD", call.script.source)
    try:
        return execute(*command)
    except NoScriptError as exc:
        raise _still_missing(call) from exc


async def arun_script(call: ScriptCall, execute: Callable[..., Awaitable[Any]]) -> Any:
    """`run_script` with an awaitable ``execute(*command)``."""
    command = ("EVALSHA", call.script.sha, len(call.keys), *call.keys, *call.args)
    try:
        return await execute(*command)
    except NoScriptError:
        await execute("SCRIPT LOAD", call.script.source)
    try:
        return await execute(*command)
    except NoScriptError as exc:
        raise _still_missing(call) from exc


def _still_missing(call: ScriptCall) -> ScriptMissingError:
    return ScriptMissingError(f"script {call.script.name} still missing after a reload")


@dataclass(frozen=True, slots=True)
class Check:
    """One line of the startup check: what was checked, whether it passed, and why."""

    name: str
    ok: bool
    detail: str


@dataclass(frozen=True, slots=True)
class ServerReport:
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    def raise_for_problems(self) -> None:
        problems = [f"{check.name}: {check.detail}" for check in self.checks if not check.ok]
        if problems:
            raise StartupError("Redis is not fit for Sentinel: " + "; ".join(problems))


def check_server(require_noeviction: bool) -> Conversation[ServerReport]:
    """The startup check (SPEC §8): version, eviction policy, maxmemory, script load."""
    server = yield ("INFO", "server")
    memory = yield ("INFO", "memory")
    checks = [_version_check(str(server.get("redis_version", "0")))]
    policy = str(memory.get("maxmemory_policy", "unknown"))
    maxmemory = int(memory.get("maxmemory", 0))
    if require_noeviction:
        checks.append(
            Check(
                "eviction policy",
                policy == "noeviction",
                f"maxmemory-policy is {policy}"
                + (
                    ""
                    if policy == "noeviction"
                    else "; set `maxmemory-policy noeviction` (an evicted bucket is a reset limit)"
                ),
            )
        )
        checks.append(
            Check(
                "maxmemory",
                maxmemory > 0,
                f"maxmemory is {maxmemory} bytes"
                + ("" if maxmemory > 0 else "; set a bounded `maxmemory` (e.g. `maxmemory 256mb`)"),
            )
        )
    for script in all_scripts():
        sha = yield ("SCRIPT LOAD", script.source)
        sha = sha.decode() if isinstance(sha, bytes) else str(sha)
        checks.append(
            Check(
                f"script {script.name}",
                sha == script.sha,
                f"loaded as {sha}"
                if sha == script.sha
                else f"loaded as {sha}, expected {script.sha}",
            )
        )
    return ServerReport(tuple(checks))


def _version_check(version: str) -> Check:
    try:
        numbers = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        numbers = (0, 0)
    wanted = ".".join(map(str, MINIMUM_REDIS_VERSION))
    ok = numbers >= MINIMUM_REDIS_VERSION
    return Check(
        "redis version", ok, f"{version}" + ("" if ok else f"; Sentinel needs {wanted} or newer")
    )


def drive(conversation: Conversation[T], execute: Callable[..., Any]) -> T:
    """Run ``conversation`` with a blocking ``execute(*command)``."""
    try:
        command = next(conversation)
        while True:
            try:
                reply = execute(*command)
            except RedisError as exc:
                command = conversation.throw(exc)
            else:
                command = conversation.send(reply)
    except StopIteration as stop:
        result: T = stop.value
        return result


async def adrive(conversation: Conversation[T], execute: Callable[..., Awaitable[Any]]) -> T:
    """Run ``conversation`` with an awaitable ``execute(*command)``."""
    try:
        command = next(conversation)
        while True:
            try:
                reply = await execute(*command)
            except RedisError as exc:
                command = conversation.throw(exc)
            else:
                command = conversation.send(reply)
    except StopIteration as stop:
        result: T = stop.value
        return result
