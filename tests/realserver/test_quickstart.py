"""The Quick start (docs/quickstart.md) as a user runs it, under real servers (issue 27).

Every step is the page's own text, read from the Markdown: the Redis server started
with the page's command line, the secrets exported by its shell lines, the app files
(the Django project made by ``django-admin startproject``), the page's run command,
then the token one-liner, the ``curl`` loop and the ``curl -i`` in a shell, reaching the
429 with its headers over real HTTP. Only the ports change (Redis's 6379 and the app's
8000 become free ones; nothing here touches a server on the usual ports), and the
page's packages are this checkout's (``PYTHONPATH``). Flask and Django run under
gunicorn too, as they are deployed.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from tests.realserver.servers import end_process_group
from tests.support.docs_snippets import snippet
from tests.support.redis_server import free_port

pytestmark = [pytest.mark.slow, pytest.mark.realserver]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Shell:
    """The environment of a user's terminal: this Python's scripts on ``PATH``, the
    checkout's packages importable, and whatever was exported."""

    directory: Path
    environment: dict[str, str]

    def run(self, script: str) -> str:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=self.directory,
            env=self.environment,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, f"{script}\n{done.stdout}\n{done.stderr}"
        return done.stdout


@pytest.fixture
def redis_port(tmp_path: Path) -> Iterator[int]:
    """Redis started with the page's command line, on a free port."""
    argv = shlex.split(snippet("quickstart.md", "redis-server"))
    assert argv[:3] == ["redis-server", "--port", "6379"]
    port = free_port()
    argv[2] = str(port)
    argv += ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = redis.Redis(port=port, socket_timeout=1)
        wait_until(lambda: bool(client.ping()))
        client.close()
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def shell(tmp_path: Path) -> Shell:
    """A fresh directory, and the secrets exported by the page's lines."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("SENTINEL_", "DJANGO_", "PYTHONDEVMODE", "FLASK_"))
    }
    environment["PATH"] = f"{BIN}{os.pathsep}{environment['PATH']}"
    environment["PYTHONPATH"] = str(ROOT)
    directory = tmp_path / "project"
    directory.mkdir()
    start = Shell(directory, environment)
    exported = start.run(
        snippet("quickstart.md", "secrets")
        + '\necho "$SENTINEL_JWT_KEY"; echo "$SENTINEL_COOKIE_SECRET"'
    ).split()
    assert all(len(secret) >= 32 for secret in exported)
    environment.update(SENTINEL_JWT_KEY=exported[0], SENTINEL_COOKIE_SECRET=exported[1])
    return start


def wait_until(ready: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, redis.RedisError):
            if ready():  # type: ignore[operator]
                return
        assert time.monotonic() < deadline, "not ready in time"
        time.sleep(0.1)


@contextlib.contextmanager
def serving(shell: Shell, command: str, port: int) -> Iterator[None]:
    """``command`` running in its own process group until the port answers; the whole
    group is ended afterwards (a reloader's child included)."""
    log = shell.directory / f"server-{port}.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            shlex.split(command),
            cwd=shell.directory,
            env=shell.environment,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def answers() -> bool:
            assert process.poll() is None, log.read_text(errors="replace")
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True

        wait_until(answers)
        yield
    finally:
        end_process_group(process)


def on_port(text: str, port: int) -> str:
    assert "8000" in text
    return text.replace("8000", str(port))


def reach_the_429(shell: Shell, port: int) -> None:
    """The page's token, ``curl`` loop and ``curl -i``: ten 200s, then the 429 as shown."""
    script = "\n".join(
        [
            snippet("quickstart.md", "token"),
            on_port(snippet("quickstart.md", "curl-loop"), port),
            'echo "--- 429"',
            on_port(snippet("quickstart.md", "curl-429"), port),
        ]
    )
    loop, _, refused = shell.run(script).partition("--- 429\n")
    assert loop.split() == ["200"] * 10 + ["429"]
    head, _, body = refused.replace("\r\n", "\n").partition("\n\n")
    assert re.match(r"HTTP/1\.[01] 429", head), refused
    fields = {
        name.lower(): value.strip()
        for name, _, value in (line.partition(":") for line in head.splitlines()[1:])
    }
    assert int(fields["retry-after"]) >= 1
    assert fields["ratelimit-policy"].startswith('"pdftalk.ingest";q=10;w=60;pk=:')
    assert fields["ratelimit"].startswith('"pdftalk.ingest";r=0;')
    assert fields["content-type"] == "application/problem+json"
    assert '"detail": "rate limit exceeded"' in body


def write_app(shell: Shell, tag: str, redis_port: int) -> None:
    code = snippet("quickstart.md", tag).replace(
        "redis://127.0.0.1:6379/0", f"redis://127.0.0.1:{redis_port}/0"
    )
    (shell.directory / "app.py").write_text(code, encoding="utf-8")


def test_fastapi_under_uvicorn(shell: Shell, redis_port: int) -> None:
    write_app(shell, "fastapi-app", redis_port)
    port = free_port()
    with serving(shell, on_port(snippet("quickstart.md", "fastapi-run"), port), port):
        reach_the_429(shell, port)


@pytest.mark.parametrize("server", ["flask run", "gunicorn"])
def test_flask(shell: Shell, redis_port: int, server: str) -> None:
    write_app(shell, "flask-app", redis_port)
    port = free_port()
    command = (
        on_port(snippet("quickstart.md", "flask-run"), port)
        if server == "flask run"
        else f"gunicorn app:app --bind 127.0.0.1:{port} --workers 2"
    )
    with serving(shell, command, port):
        reach_the_429(shell, port)
    shell.run("flask --app app sentinel check")  # the same server passes the check


@pytest.mark.parametrize("server", ["runserver", "gunicorn"])
def test_django(shell: Shell, redis_port: int, server: str) -> None:
    shell.run(snippet("quickstart.md", "django-startproject"))
    settings = shell.directory / "mysite" / "settings.py"
    appended = snippet("quickstart.md", "django-settings").replace(
        "redis://127.0.0.1:6379/0", f"redis://127.0.0.1:{redis_port}/0"
    )
    settings.write_text(settings.read_text(encoding="utf-8") + "\n" + appended, encoding="utf-8")
    (shell.directory / "mysite" / "urls.py").write_text(snippet("quickstart.md", "django-urls"))
    port = free_port()
    command = (
        on_port(snippet("quickstart.md", "django-run"), port)
        if server == "runserver"
        else f"gunicorn mysite.wsgi --bind 127.0.0.1:{port} --workers 2"
    )
    with serving(shell, command, port):
        reach_the_429(shell, port)
    assert "result: PASS" in shell.run("python manage.py sentinel check")
