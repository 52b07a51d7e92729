"""The ``sentinel`` command (SPEC §8), run in process through ``main(argv)``, against real
redis-server processes, plus one real subprocess for ``python -m sentinel_core``."""

from __future__ import annotations

import io
import logging
import re
import runpy
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import sentinel_core
from sentinel_core.cli._main import main, redact_url
from tests.support.redis_server import RedisServer, free_port

CONFIG = """
[sentinel]
redis_url = "{url}"
{extra}

[sentinel.policies."pdftalk.ingest"]
algorithm = "sliding_window"
rate = "10/minute"
fail_mode = "closed"

[sentinel.routes]
"POST /v1/ingest" = "pdftalk.ingest"
"""
SERVER_CHECKS = (
    "redis version",
    "eviction policy",
    "maxmemory",
    "script token_bucket",
    "script sliding_window",
    "script concurrency",
    "script quota",
    "script settle",
)


WriteConfig = Callable[..., str]


@pytest.fixture
def write_config(tmp_path: Path) -> WriteConfig:
    def write(url: str, extra: str = "") -> str:
        path = tmp_path / "sentinel.toml"
        path.write_text(CONFIG.format(url=url, extra=extra), encoding="utf-8")
        return str(path)

    return write


def dead_url() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def status_lines(output: str) -> dict[str, str]:
    """check name -> "PASS"/"FAIL" for every check line of the output."""
    lines = {}
    for line in output.splitlines():
        verdict, _, rest = line.strip().partition("  ")
        if verdict in ("PASS", "FAIL"):
            lines[rest.strip().split("  ")[0]] = verdict
    return lines


# --------------------------------------------------------------------- check


def test_check_passes_against_a_fit_server(
    capsys: pytest.CaptureFixture[str], write_config: WriteConfig, redis_url: str
) -> None:
    code, out = run(capsys, "check", write_config(redis_url))
    assert code == 0
    assert status_lines(out) == dict.fromkeys(("config", "plugins", *SERVER_CHECKS), "PASS")
    assert "1 policy, 1 route" in out
    assert out.rstrip().endswith("result: PASS")


def test_check_fails_on_an_evicting_server_and_says_what_to_change(
    capsys: pytest.CaptureFixture[str], write_config: WriteConfig, lru_redis_server: RedisServer
) -> None:
    code, out = run(capsys, "check", write_config(lru_redis_server.url))
    assert code == 1
    lines = status_lines(out)
    assert lines["eviction policy"] == "FAIL"
    assert lines["maxmemory"] == "PASS"
    assert "maxmemory-policy is allkeys-lru" in out
    assert "set `maxmemory-policy noeviction`" in out
    assert "result: FAIL" in out


def test_check_fails_on_an_unbounded_server_and_says_what_to_change(
    capsys: pytest.CaptureFixture[str],
    write_config: WriteConfig,
    unbounded_redis_server: RedisServer,
) -> None:
    code, out = run(capsys, "check", write_config(unbounded_redis_server.url))
    assert code == 1
    lines = status_lines(out)
    assert lines["maxmemory"] == "FAIL"
    assert lines["eviction policy"] == "PASS"
    assert "set a bounded `maxmemory`" in out


def test_check_reports_every_failed_check_not_only_the_first(
    capsys: pytest.CaptureFixture[str], write_config: WriteConfig, lru_redis_server: RedisServer
) -> None:
    code, out = run(capsys, "check", write_config(lru_redis_server.url))
    assert code == 1
    assert set(status_lines(out)) == {"config", "plugins", *SERVER_CHECKS}


def test_check_without_require_noeviction_skips_the_eviction_checks(
    capsys: pytest.CaptureFixture[str], write_config: WriteConfig, lru_redis_server: RedisServer
) -> None:
    config = write_config(lru_redis_server.url, "require_noeviction = false")
    code, out = run(capsys, "check", config)
    assert code == 0
    assert "eviction policy" not in status_lines(out)
    assert "skip" in out
    assert "require_noeviction is false" in out


def test_check_redis_option_overrides_the_configured_url(
    capsys: pytest.CaptureFixture[str], write_config: WriteConfig, redis_url: str
) -> None:
    code, out = run(capsys, "check", write_config(dead_url()), "--redis", redis_url)
    assert code == 0
    assert f"--redis {redis_url}" in out


def test_check_says_clearly_when_redis_is_unreachable(
    capsys: pytest.CaptureFixture[str], write_config: WriteConfig
) -> None:
    url = dead_url()
    code, out = run(capsys, "check", write_config(url))
    assert code == 1
    assert status_lines(out)["redis"] == "FAIL"
    assert f"cannot reach {url}" in out
    assert "result: FAIL (Redis unreachable)" in out


def test_check_says_limiting_is_off_and_leaves_redis_alone(
    capsys: pytest.CaptureFixture[str], write_config: WriteConfig
) -> None:
    code, out = run(capsys, "check", write_config(dead_url(), "enabled = false"))

    assert code == 0
    assert "off   limiting" in out
    assert "every guard passes requests through" in out
    assert "redis" not in status_lines(out)
    assert out.rstrip().endswith("result: PASS (limiting is off; Redis not contacted)")


def test_check_with_limiting_off_still_checks_the_redis_it_is_given(
    capsys: pytest.CaptureFixture[str], write_config: WriteConfig, redis_url: str
) -> None:
    config = write_config(dead_url(), "enabled = false")

    code, out = run(capsys, "check", config, "--redis", redis_url)

    assert code == 0
    assert "off   limiting" in out
    assert status_lines(out)["script quota"] == "PASS"
    assert out.rstrip().endswith("result: PASS")


def test_check_never_prints_a_redis_password(
    capsys: pytest.CaptureFixture[str], write_config: WriteConfig
) -> None:
    url = f"redis://:hunter2-secret@127.0.0.1:{free_port()}/0"
    code, out = run(capsys, "check", write_config(url))
    assert code == 1
    assert "hunter2" not in out
    assert "redis://:***@127.0.0.1" in out


def test_check_reports_a_config_error_with_its_key_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "broken.toml"
    path.write_text(
        CONFIG.format(url="memory://", extra="").replace("rate =", "burts = 3\nrate ="),
        encoding="utf-8",
    )
    code, out = run(capsys, "check", str(path))
    assert code == 2
    assert status_lines(out) == {"config": "FAIL"}
    assert "policies.pdftalk.ingest.burts: unknown key" in out
    assert "configuration error at policies.pdftalk.ingest.burts" in out


def test_check_reports_a_missing_file_as_a_config_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out = run(capsys, "check", str(tmp_path / "absent.toml"))
    assert code == 2
    assert "cannot read" in out


@pytest.mark.parametrize("command", ["check", "demo"])
def test_an_unsupported_redis_url_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], write_config: WriteConfig, command: str
) -> None:
    args = [command, write_config("memory://")] if command == "check" else [command]
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--redis", "http://example"])
    assert exit_info.value.code == 2
    assert (
        "error: argument --redis: unsupported scheme in 'http://example'; expected one of "
        "redis://, rediss://, unix://, redis+cluster://, redis+sentinel://, memory://"
    ) in capsys.readouterr().err


@pytest.mark.parametrize("value", ["\u00b2", "\u0661\u0660", "0", "x"])
def test_a_timeout_that_is_not_a_whole_number_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], write_config: WriteConfig, value: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["check", write_config("memory://"), "--timeout-ms", value])
    assert exit_info.value.code == 2
    assert "expected a whole number from 1 to" in capsys.readouterr().err


def test_check_on_the_memory_store_passes(
    capsys: pytest.CaptureFixture[str], write_config: WriteConfig
) -> None:
    code, out = run(capsys, "check", write_config("memory://"))
    assert code == 0
    assert status_lines(out)["store"] == "PASS"


def install_plugin_distribution(
    monkeypatch: pytest.MonkeyPatch, root: Path, entry_points: str, modules: dict[str, str]
) -> None:
    """A real (unpacked) distribution on sys.path advertising ``sentinel`` entry points."""
    info = root / "demo_plugins-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-plugins\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[sentinel]\n{entry_points}\n")
    for name, source in modules.items():
        (root / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(root))


def test_check_lists_the_entry_point_plugins_it_loaded(
    capsys: pytest.CaptureFixture[str],
    write_config: WriteConfig,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    plugin = (
        "from sentinel_core import hookimpl\n\n"
        "@hookimpl\ndef sentinel_decision(decision):\n    pass\n"
    )
    install_plugin_distribution(
        monkeypatch, tmp_path / "site", "audit = cli_audit_plugin", {"cli_audit_plugin": plugin}
    )
    code, out = run(capsys, "check", write_config("memory://"), "--timeout-ms", "500")
    assert code == 0
    assert "1 from entry points: audit" in out


def test_check_reports_a_plugin_that_fails_to_load(
    capsys: pytest.CaptureFixture[str],
    write_config: WriteConfig,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    install_plugin_distribution(monkeypatch, tmp_path / "site", "broken = no_such_module_xyz", {})
    code, out = run(capsys, "check", write_config("memory://"))
    assert code == 1
    assert status_lines(out)["plugins"] == "FAIL"
    assert "no_such_module_xyz" in out


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("memory://", "memory://"),
        ("redis://127.0.0.1:6380/0", "redis://127.0.0.1:6380/0"),
        ("redis://:pw@host:1/0", "redis://:***@host:1/0"),
        ("rediss://bob:p%40ss@host:1/0", "rediss://bob:***@host:1/0"),
        ("redis://bob@host/0", "redis://bob@host/0"),
        ("unix:///tmp/r.sock?db=0&password=pw", "unix:///tmp/r.sock?db=0&password=***"),
    ],
)
def test_redact_url_masks_passwords_only(url: str, shown: str) -> None:
    assert redact_url(url) == shown


# ---------------------------------------------------------------------- demo


def demo_rows(output: str) -> list[list[str]]:
    """[tenant, endpoint, status, reason, remaining, retry-after] per table row."""
    return [
        line.split() for line in output.splitlines() if line.startswith(("  acme ", "  globex "))
    ]


def by_endpoint(rows: list[list[str]], endpoint: str, tenant: str = "acme") -> list[list[str]]:
    return [row[2:] for row in rows if row[0] == tenant and row[1] == endpoint]


def test_demo_shows_bursts_limited_and_both_failure_modes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out = run(capsys, "demo")
    assert code == 0
    assert "store: memory://" in out
    rows = demo_rows(out)
    for tenant in ("acme", "globex"):  # each tenant has its own bucket
        bucket = by_endpoint(rows, "resumint.tailor", tenant)
        assert [row[:2] for row in bucket] == [["200", "allowed"]] * 3 + [
            ["429", "rate_limited"]
        ] * 2
        assert all(row[3] == "-" for row in bucket[:3])
        assert all(int(row[3]) >= 1 for row in bucket[3:])  # Retry-After on every 429
    window = by_endpoint(rows, "pdftalk.ingest")
    assert [row[1] for row in window] == ["allowed"] * 4 + ["rate_limited"] * 2
    assert all(int(row[3]) >= 1 for row in window[4:])
    assert [row[1] for row in by_endpoint(rows, "pdftalk.ingest", "globex")] == ["allowed"] * 2

    closed = by_endpoint(rows, "billing.charge")
    assert [row[:2] for row in closed] == [["503", "fail_closed"]] * 2 + [
        ["503", "circuit_open"]
    ] * 2
    assert all(row[3] == "30" for row in closed[2:])  # the breaker's quarantine
    opened = by_endpoint(rows, "search.query")
    assert opened[0][:2] == ["200", "redis_connection_error"]
    assert ["200", "circuit_open"] in [row[:2] for row in opened]
    limited = [row for row in opened if row[1] == "emergency_local_limit"]
    assert limited
    assert all(row[0] == "429" and int(row[3]) >= 1 for row in limited)
    # 13 denials over 6 (endpoint, identity, reason) keys: one record per key and second
    logged = re.search(r"logs: (\d+) WARNING records", out)
    assert logged is not None
    assert 6 <= int(logged.group(1)) <= 13
    assert 'decision_reason="fail_closed",allowed="false"} 2' in out


def test_demo_leaves_the_sentinel_logger_as_it_found_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logger = logging.getLogger("sentinel")
    handlers, propagate = list(logger.handlers), logger.propagate
    assert run(capsys, "demo")[0] == 0
    assert logger.handlers == handlers
    assert logger.propagate is propagate


def test_demo_runs_on_redis_with_fresh_buckets_each_time(
    capsys: pytest.CaptureFixture[str], redis_url: str
) -> None:
    for _ in range(2):  # a second run starts from full buckets: never a stale burst
        code, out = run(capsys, "demo", "--redis", redis_url)
        assert code == 0
        assert f"store: {redis_url}" in out
        bucket = by_endpoint(demo_rows(out), "resumint.tailor")
        assert [row[1] for row in bucket] == ["allowed"] * 3 + ["rate_limited"] * 2


def test_demo_refuses_an_unfit_redis(
    capsys: pytest.CaptureFixture[str], lru_redis_server: RedisServer
) -> None:
    code, out = run(capsys, "demo", "--redis", lru_redis_server.url)
    assert code == 1
    assert "not fit for Sentinel" in out
    assert demo_rows(out) == []


def test_demo_says_clearly_when_its_redis_is_unreachable(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = dead_url()
    code, out = run(capsys, "demo", "--redis", url)
    assert code == 1
    assert f"cannot reach {url}" in out
    assert demo_rows(out) == []


def test_demo_never_executes_files_of_the_current_directory(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    marker = tmp_path / "executed"
    for name in ("flask_app.py", "fastapi_app.py", "django_app.py"):
        (tmp_path / "examples").mkdir(exist_ok=True)
        (tmp_path / "examples" / name).write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    code, out = run(capsys, "demo")
    assert code == 0
    assert by_endpoint(demo_rows(out), "billing.charge")  # the core demo's endpoints
    assert not marker.exists()


def test_demo_has_no_framework_option_any_more(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--framework", "flask"])
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --framework flask" in capsys.readouterr().err


class ClosedPipe(io.StringIO):
    """A stdout whose reader has gone (``sentinel demo | head -1``)."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def fileno(self) -> int:
        return self._fd


def test_demo_stops_quietly_when_its_reader_goes_away(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with open(tmp_path / "stdout", "w") as target:
        monkeypatch.setattr(sys, "stdout", ClosedPipe(target.fileno()))
        assert main(["demo"]) == 1  # no traceback: the exit code says it did not finish


# ---------------------------------------------------------------------- help


def test_help_lists_both_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "check" in out
    assert "demo" in out


@pytest.mark.parametrize("command", ["check", "demo"])
def test_each_command_has_help(capsys: pytest.CaptureFixture[str], command: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert "--redis" in capsys.readouterr().out


def test_a_missing_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2
    assert "usage: sentinel" in capsys.readouterr().err


def test_the_package_runs_as_a_module(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["sentinel", "--help"])
    # By path: under pytest, finding the module by name may go through pytest's
    # assertion-rewriting import hook, which runpy cannot load a __main__ from.
    main_module = Path(sentinel_core.__file__).with_name("__main__.py")
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(main_module), run_name="__main__")
    assert exit_info.value.code == 0
    assert "usage: sentinel" in capsys.readouterr().out


def test_python_dash_m_sentinel_core_runs_the_cli() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sentinel_core", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "usage: sentinel" in result.stdout
    assert "check" in result.stdout


@pytest.mark.parametrize("timeout", ["0", "-5", "abc", "60001", "99999999999999999999"])
def test_check_timeout_must_be_a_sane_number(
    capsys: pytest.CaptureFixture[str], timeout: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["check", "sentinel.toml", "--timeout-ms", timeout])
    assert exit_info.value.code == 2
    assert (
        "error: argument --timeout-ms: expected a whole number from 1 to 60000"
        in capsys.readouterr().err
    )
