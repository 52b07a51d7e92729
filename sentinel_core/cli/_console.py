"""What the commands of the ``sentinel`` CLI share: exit codes, lines, URLs, and the
configuration a command was given (a CONFIG path, or the mapping an app handed over:
``args.config``, named in messages by ``args.source``, under ``args.prog``)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from urllib.parse import urlsplit

from sentinel_core.errors import ConfigError
from sentinel_core.store._url import resolve

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
_PASSWORD_PARAMETER = re.compile(r"([?&]password=)[^&#]*")


def say(line: str) -> None:
    print(line, flush=True)


def shown(text: str) -> str:
    """A user's argument (a tenant id) as it may be printed: unchanged when printable,
    else with each unprintable character escaped (``\\x1b``, ``\\n``, ``\\u202e``), so an
    argument can never move the cursor, recolour or rewrite what the terminal shows."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", metavar="CONFIG", help="path to the TOML configuration")


def prog(args: argparse.Namespace) -> str:
    """The command as the user typed it: ``sentinel``, ``flask sentinel``, ..."""
    return str(getattr(args, "prog", "sentinel"))


def source(args: argparse.Namespace) -> str:
    """How messages name the configuration: the CONFIG path, or the app's setting."""
    return str(getattr(args, "source", None) or args.config)


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def redis_url(text: str) -> str:
    """``--redis URL``: refused by argparse (a message, exit 2) unless it parses completely."""
    try:
        resolve(text, "--redis")
    except ConfigError as error:
        raise argparse.ArgumentTypeError(error.problem) from None
    return text


def bounded_int(maximum: int) -> Callable[[str], int]:
    """An argparse type: a whole number from 1 to ``maximum``."""

    def parse(text: str) -> int:
        digits = text.strip()
        if (
            not (digits.isascii() and digits.isdigit())  # isdigit alone takes '²'
            or len(digits) > len(str(maximum))
            or not 1 <= int(digits) <= maximum
        ):
            raise argparse.ArgumentTypeError(f"expected a whole number from 1 to {maximum}")
        return int(digits)

    return parse


def redact_url(url: str) -> str:
    """``url`` with its password (userinfo or ``?password=``) masked, for printing."""
    netloc = urlsplit(url).netloc
    userinfo, at, host = netloc.rpartition("@")
    if at and ":" in userinfo:
        url = url.replace(netloc, f"{userinfo.split(':', 1)[0]}:***@{host}", 1)
    return _PASSWORD_PARAMETER.sub(r"\1***", url)
