"""What both commands of the ``sentinel`` CLI print with: exit codes, lines, URLs."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
_PASSWORD_PARAMETER = re.compile(r"([?&]password=)[^&#]*")


def say(line: str) -> None:
    print(line, flush=True)


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def redact_url(url: str) -> str:
    """``url`` with its password (userinfo or ``?password=``) masked, for printing."""
    netloc = urlsplit(url).netloc
    userinfo, at, host = netloc.rpartition("@")
    if at and ":" in userinfo:
        url = url.replace(netloc, f"{userinfo.split(':', 1)[0]}:***@{host}", 1)
    return _PASSWORD_PARAMETER.sub(r"\1***", url)
