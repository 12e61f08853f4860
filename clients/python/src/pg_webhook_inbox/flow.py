"""The one guarantee every adapter runs, written once for blocking code
and once for asyncio.

In the caller's transaction: ``webhook_receive`` verifies, deduplicates and
claims (``complete_on_commit``: the commit that saves the work completes
the event, a rollback undoes both). The work runs in a savepoint, so a
failure undoes the work, not the claim, and is recorded with
``webhook_fail``: the next delivery is a ``retry``. The answer is handed
back for sending only once the transaction has committed.

While the database is away (a restart, a failover, a pool with no
connection to give) the whole delivery is tried again for up to
``retry_seconds`` (8: GitHub gives up after 10 s and never redelivers),
then answered 503 with Retry-After. Trying again is safe: what the broken
attempt wrote was rolled back with it, and one that did commit is answered
as a duplicate the second time. Never a 500 for a delivery not stored.
"""
from __future__ import annotations

import asyncio
import json
import time
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, Awaitable, Callable, Mapping, Optional, Tuple, Type

from . import statements
from .delivery import Answer, Delivery
from .errors import UnknownProvider, sqlstate

RETRY_SECONDS = 8.0
_FIRST_WAIT, _LAST_WAIT = 0.1, 1.0

Errors = Tuple[Type[BaseException], ...]


def headers_json(headers: Mapping[str, str]) -> str:
    """The request's headers as the JSON object webhook_receive reads."""
    return json.dumps({str(k): str(v) for k, v in headers.items()})


def receive_call(provider: str, headers: Mapping[str, str], body: bytes, *, url: Optional[str],
                 inbox: Optional[bool], complete_on_commit: bool, lease: Optional[str]) -> Tuple[str, tuple]:
    """webhook_receive's statement and arguments: only the optional
    arguments that are set."""
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise TypeError("body must be the raw request bytes, read before any parsing: "
                        "signatures cover exactly those")
    params = [provider, headers_json(headers), bytes(body)]
    params += [value for value in (lease, inbox, url) if value is not None]
    params.append(complete_on_commit)
    sql = statements.receive(lease=lease is not None, inbox=inbox is not None, url=url is not None)
    return sql, tuple(params)


def refused(provider: str, exc: BaseException) -> BaseException:
    """The error to raise for a failed webhook_receive."""
    return UnknownProvider(provider) if sqlstate(exc) == statements.UNKNOWN_PROVIDER else exc


def deliver(execute: Callable[[str, tuple], Any], savepoint: Callable[[], AbstractContextManager],
            call: Tuple[str, tuple], work: Callable[[Delivery], Any], outage: Errors) -> Answer:
    """Receive and work one delivery inside the caller's open transaction.
    ``execute(sql, params)`` returns the statement's first row."""
    try:
        delivery = Delivery.from_row(execute(*call))
    except outage:
        raise
    except Exception as exc:  # noqa: BLE001
        raise refused(call[1][0], exc) from exc
    if not delivery.owns_event:
        return delivery.answer()
    try:
        with savepoint():
            result = work(delivery)
            if result is not None:
                execute(statements.COMPLETE, (delivery.id, json.dumps(result)))
    except outage:
        raise
    except Exception as exc:  # noqa: BLE001 - recorded; the next delivery retries it
        execute(statements.FAIL, (delivery.id, str(exc) or type(exc).__name__))
        return Answer.failed()
    return delivery.answer()


async def deliver_async(execute: Callable[[str, tuple], Awaitable[Any]],
                        savepoint: Callable[[], AbstractAsyncContextManager], call: Tuple[str, tuple],
                        work: Callable[[Delivery], Awaitable[Any]], outage: Errors) -> Answer:
    """``deliver`` for asyncio: the same steps, awaited."""
    try:
        delivery = Delivery.from_row(await execute(*call))
    except outage:
        raise
    except Exception as exc:  # noqa: BLE001
        raise refused(call[1][0], exc) from exc
    if not delivery.owns_event:
        return delivery.answer()
    try:
        async with savepoint():
            result = await work(delivery)
            if result is not None:
                await execute(statements.COMPLETE, (delivery.id, json.dumps(result)))
    except outage:
        raise
    except Exception as exc:  # noqa: BLE001
        await execute(statements.FAIL, (delivery.id, str(exc) or type(exc).__name__))
        return Answer.failed()
    return delivery.answer()


def retrying(attempt: Callable[[], Answer], outage: Errors, retry_seconds: float = RETRY_SECONDS,
             on_outage: Callable[[BaseException], None] = lambda exc: None) -> Answer:
    """Run ``attempt`` (a whole delivery, its own transaction) again while
    the database is away; 503 once ``retry_seconds`` have passed."""
    deadline = time.monotonic() + retry_seconds
    wait = _FIRST_WAIT
    while True:
        try:
            return attempt()
        except UnknownProvider as exc:
            return Answer.unknown_provider(exc.provider)
        except outage as exc:
            on_outage(exc)
            if time.monotonic() + wait >= deadline:
                return Answer.unavailable()
            time.sleep(wait)
            wait = min(wait * 2, _LAST_WAIT)


async def retrying_async(attempt: Callable[[], Awaitable[Answer]], outage: Errors,
                         retry_seconds: float = RETRY_SECONDS) -> Answer:
    """``retrying`` for asyncio."""
    deadline = time.monotonic() + retry_seconds
    wait = _FIRST_WAIT
    while True:
        try:
            return await attempt()
        except UnknownProvider as exc:
            return Answer.unknown_provider(exc.provider)
        except outage:
            if time.monotonic() + wait >= deadline:
                return Answer.unavailable()
            await asyncio.sleep(wait)
            wait = min(wait * 2, _LAST_WAIT)


def public_url(base: Optional[str], path_and_query: str) -> Optional[str]:
    """The URL the provider called: the configured public base, then the
    request's path and query. None without a base: the schemes that sign
    the URL (Twilio, Square, HubSpot) then refuse the delivery
    (``missing_url``); the URL is never built from the Host header, which
    whoever sends the request chooses."""
    if not base:
        return None
    return base.rstrip("/") + path_and_query
