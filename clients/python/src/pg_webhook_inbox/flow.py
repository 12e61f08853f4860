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
Only a database that is away is tried again (``errors.connection_lost``):
anything else it answers would be answered the same.

A body is read up to ``MAX_BODY`` (10 MiB; ``Content-Length`` checked
first), and a larger one answered 413, as is one larger than the
database's ``webhook.max_payload_size``. A database error never reaches
the response: it is logged (logger ``pg_webhook_inbox``) and answered 500.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, AsyncIterable, Awaitable, Callable, Mapping, Optional, Tuple, Type

from . import statements
from .delivery import Answer, Delivery
from .errors import PayloadTooLarge, UnknownProvider, connection_lost, sqlstate

RETRY_SECONDS = 8.0
MAX_BODY = 10 * 1024 * 1024
log = logging.getLogger("pg_webhook_inbox")
_FIRST_WAIT, _LAST_WAIT = 0.1, 1.0

Errors = Tuple[Type[BaseException], ...]


def headers_json(headers: Any) -> str:
    """The request's headers as the JSON object webhook_receive reads. A
    header sent more than once is passed once, its values joined with ", "
    (as HTTP combines them, and as Node, Rack, Werkzeug and Django pass
    them), so that the extension decides what it means, whatever the
    framework."""
    if hasattr(headers, "getlist"):  # Starlette and Werkzeug keep each copy
        return json.dumps({str(k): ", ".join(str(v) for v in headers.getlist(k)) for k in headers.keys()})
    return json.dumps({str(k): str(v) for k, v in headers.items()})


def _declared_too_large(content_length: Optional[str], limit: int) -> None:
    try:
        declared = int(content_length) if content_length is not None else None
    except ValueError:
        declared = None
    if declared is not None and declared > limit:
        raise PayloadTooLarge(f"Content-Length {declared} is over {limit} bytes")


def read_body(content_length: Optional[str], read: Callable[[int], bytes], limit: int = MAX_BODY) -> bytes:
    """A request's body, read with ``read(n)`` up to ``limit`` bytes:
    PayloadTooLarge for a ``Content-Length`` over it, before anything is
    read, or for a stream that goes past it."""
    _declared_too_large(content_length, limit)
    chunks, size = [], 0
    while True:
        chunk = read(min(65536, limit + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"the body is over {limit} bytes")


async def read_body_async(content_length: Optional[str], stream: AsyncIterable[bytes],
                          limit: int = MAX_BODY) -> bytes:
    """``read_body`` from an ASGI body stream."""
    _declared_too_large(content_length, limit)
    chunks, size = [], 0
    async for chunk in stream:
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"the body is over {limit} bytes")
    return b"".join(chunks)


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
    """The error to raise for a failed webhook_receive: an unknown provider
    and an oversize body as this package's own, anything else as the
    driver raised it."""
    code = sqlstate(exc)
    if code == statements.UNKNOWN_PROVIDER:
        return UnknownProvider(provider)
    if code == statements.PAYLOAD_TOO_LARGE:
        return PayloadTooLarge(str(exc))
    return exc


def _outage(exc: BaseException, outage: Errors) -> bool:
    return isinstance(exc, outage) and connection_lost(exc)


def deliver(execute: Callable[[str, tuple], Any], savepoint: Callable[[], AbstractContextManager],
            call: Tuple[str, tuple], work: Callable[[Delivery], Any], outage: Errors) -> Answer:
    """Receive and work one delivery inside the caller's open transaction.
    ``execute(sql, params)`` returns the statement's first row."""
    try:
        delivery = Delivery.from_row(execute(*call))
    except Exception as exc:  # noqa: BLE001
        if _outage(exc, outage):
            raise
        raise refused(call[1][0], exc) from exc
    if not delivery.owns_event:
        return delivery.answer()
    try:
        with savepoint():
            result = work(delivery)
            if result is not None:
                execute(statements.COMPLETE, (delivery.id, json.dumps(result)))
    except Exception as exc:  # noqa: BLE001 - recorded; the next delivery retries it
        if _outage(exc, outage):
            raise
        execute(statements.FAIL, (delivery.id, str(exc) or type(exc).__name__))
        return Answer.failed()
    return delivery.answer()


async def deliver_async(execute: Callable[[str, tuple], Awaitable[Any]],
                        savepoint: Callable[[], AbstractAsyncContextManager], call: Tuple[str, tuple],
                        work: Callable[[Delivery], Awaitable[Any]], outage: Errors) -> Answer:
    """``deliver`` for asyncio: the same steps, awaited."""
    try:
        delivery = Delivery.from_row(await execute(*call))
    except Exception as exc:  # noqa: BLE001
        if _outage(exc, outage):
            raise
        raise refused(call[1][0], exc) from exc
    if not delivery.owns_event:
        return delivery.answer()
    try:
        async with savepoint():
            result = await work(delivery)
            if result is not None:
                await execute(statements.COMPLETE, (delivery.id, json.dumps(result)))
    except Exception as exc:  # noqa: BLE001
        if _outage(exc, outage):
            raise
        await execute(statements.FAIL, (delivery.id, str(exc) or type(exc).__name__))
        return Answer.failed()
    return delivery.answer()


def _settled(exc: BaseException) -> Answer:
    """The answer to an attempt that raised something other than an
    outage: 404, 413, or a 500 that says nothing of the database (which
    is logged)."""
    if isinstance(exc, UnknownProvider):
        return Answer.unknown_provider(exc.provider)
    if isinstance(exc, PayloadTooLarge):
        return Answer.too_large()
    log.error("webhook delivery failed: %s", exc, exc_info=exc)
    return Answer.error()


class Deadline:
    """When the outage rule answers 503: ``retry_seconds`` from the
    delivery's start. A pool is asked for a connection for no longer than
    what is left, whatever its own timeout, so that the 503 comes in time."""

    def __init__(self, retry_seconds: float):
        self.at = time.monotonic() + retry_seconds

    def left(self) -> float:
        return max(self.at - time.monotonic(), 0.05)


def retrying(attempt: Callable[[], Answer], outage: Errors, retry_seconds: float = RETRY_SECONDS,
             on_outage: Callable[[BaseException], None] = lambda exc: None,
             deadline: Optional[Deadline] = None) -> Answer:
    """Run ``attempt`` (a whole delivery, its own transaction) again while
    the database is away; 503 once ``retry_seconds`` have passed."""
    deadline = deadline or Deadline(retry_seconds)
    wait = _FIRST_WAIT
    while True:
        try:
            return attempt()
        except Exception as exc:  # noqa: BLE001 - answered, never sent on
            if not _outage(exc, outage):
                return _settled(exc)
            on_outage(exc)
            if time.monotonic() + wait >= deadline.at:
                return Answer.unavailable()
            time.sleep(wait)
            wait = min(wait * 2, _LAST_WAIT)


async def retrying_async(attempt: Callable[[], Awaitable[Answer]], outage: Errors,
                         retry_seconds: float = RETRY_SECONDS, deadline: Optional[Deadline] = None) -> Answer:
    """``retrying`` for asyncio."""
    deadline = deadline or Deadline(retry_seconds)
    wait = _FIRST_WAIT
    while True:
        try:
            return await attempt()
        except Exception as exc:  # noqa: BLE001
            if not _outage(exc, outage):
                return _settled(exc)
            if time.monotonic() + wait >= deadline.at:
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
