"""Telling a database that is away from a delivery that went wrong."""
from __future__ import annotations

from typing import Optional


class UnknownProvider(Exception):
    """``webhook_receive`` knows no provider of this name (SQLSTATE 42704):
    the URL names a provider nobody registered. Answered 404."""

    def __init__(self, provider: str):
        super().__init__(f"no provider {provider!r} is registered")
        self.provider = provider


def sqlstate(exc: BaseException) -> Optional[str]:
    """The SQLSTATE behind an error, through the wrappers of Django and
    SQLAlchemy (psycopg 3 names it ``sqlstate``, psycopg2 ``pgcode``)."""
    seen = 0
    while exc is not None and seen < 5:
        code = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
        if code:
            return code
        exc = getattr(exc, "orig", None) or exc.__cause__
        seen += 1
    return None
