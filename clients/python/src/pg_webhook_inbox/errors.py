"""Telling a database that is away from a delivery that went wrong."""
from __future__ import annotations

from typing import Optional


class UnknownProvider(Exception):
    """``webhook_receive`` knows no provider of this name (SQLSTATE 42704):
    the URL names a provider nobody registered. Answered 404."""

    def __init__(self, provider: str):
        super().__init__(f"no provider {provider!r} is registered")
        self.provider = provider


class PayloadTooLarge(Exception):
    """The body is larger than the handler takes (``MAX_BODY``), or than
    the database's ``webhook.max_payload_size`` (SQLSTATE 54000).
    Answered 413: every provider gives up on it, as it should."""


# SQLSTATEs of a database that is away, besides class 08 (connection
# exception): an administrator's shutdown, a crash's, the server still
# starting (57P01-57P03), and too many connections (53300).
OUTAGE_STATES = ("57P01", "57P02", "57P03", "53300")


def connection_lost(exc: BaseException) -> bool:
    """Whether an error a driver raised means the database is away, so
    that the whole delivery may be tried again: SQLSTATE class 08, 57P01-03
    or 53300, or no SQLSTATE at all (a connection lost, closed or never
    made, a pool with none to give). Anything else the server answered (a
    statement or lock timeout, out of memory, a payload too large) is no
    outage: sent again, it would be answered the same."""
    code = sqlstate(exc)
    return code is None or code.startswith("08") or code in OUTAGE_STATES


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
