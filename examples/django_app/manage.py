#!/usr/bin/env python
"""Django's command-line utility for the example, plus ``token TENANT``, which prints a
development bearer token signed with the example's JWT key (valid for one hour)."""

from __future__ import annotations

import os
import sys
import time


def dev_token(tenant: str) -> str:
    import jwt
    from settings import SENTINEL

    payload = {"sub": tenant, "exp": int(time.time()) + 3600}
    return jwt.encode(payload, SENTINEL["jwt"]["key"], algorithm="HS256")


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
    if sys.argv[1:2] == ["token"] and len(sys.argv) == 3:
        print(dev_token(sys.argv[2]))
        return
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
