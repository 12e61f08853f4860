"""psycopg 3, blocking and asyncio: ``receive`` in the caller's
transaction, and ``Handler`` / ``AsyncHandler``, which own the transaction
and the outage rule for a framework's route.

The package's statements are never prepared (``prepare=False``), whatever
the pool's ``prepare_threshold``: behind a transaction pooler (PgBouncer in
transaction mode, Supavisor's or Neon's pooled endpoint) a statement
prepared on one server connection is not there on the next. The work's own
statements are the application's: behind such a pooler, make the pool with
``kwargs={"prepare_threshold": None}``."""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Mapping, Optional

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from . import flow
from .delivery import Answer, Delivery

# Where a connection that broke or could not be had is told: the database
# is away when the error also says so (errors.connection_lost).
OUTAGE: flow.Errors = (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout)


def receive(conn: psycopg.Connection, provider: str, headers: Mapping[str, str], body: bytes, *,
            url: Optional[str] = None, inbox: Optional[bool] = None, complete_on_commit: bool = False,
            lease: Optional[str] = None) -> Delivery:
    """``webhook_receive`` in ``conn``'s current transaction. The caller
    commits, then answers ``delivery.answer()``."""
    sql, params = flow.receive_call(provider, headers, body, url=url, inbox=inbox,
                                    complete_on_commit=complete_on_commit, lease=lease)
    try:
        return Delivery.from_row(conn.execute(sql, params, prepare=False).fetchone())
    except psycopg.Error as exc:
        raise flow.refused(provider, exc) from exc


async def areceive(conn: psycopg.AsyncConnection, provider: str, headers: Mapping[str, str], body: bytes, *,
                   url: Optional[str] = None, inbox: Optional[bool] = None, complete_on_commit: bool = False,
                   lease: Optional[str] = None) -> Delivery:
    """``receive`` for an ``AsyncConnection``."""
    sql, params = flow.receive_call(provider, headers, body, url=url, inbox=inbox,
                                    complete_on_commit=complete_on_commit, lease=lease)
    try:
        return Delivery.from_row(await (await conn.execute(sql, params, prepare=False)).fetchone())
    except psycopg.Error as exc:
        raise flow.refused(provider, exc) from exc


def retrying(attempt: Callable[[], Answer], retry_seconds: float = flow.RETRY_SECONDS) -> Answer:
    """Run ``attempt`` (anything that opens its own connection and returns
    an ``Answer``: a two-phase delivery, an endpoint of the application's
    own) again while the database is away, under the same rule as every
    delivery: 503 with Retry-After once ``retry_seconds`` have passed."""
    return flow.retrying(attempt, OUTAGE, retry_seconds)


class Handler:
    """Handles deliveries on a pool: each in its own transaction, the work
    (``work(conn, delivery)``, returning an optional JSON result that
    duplicates are answered with) in a savepoint of it.

    The pool should check connections as they leave it
    (``check=ConnectionPool.check_connection``), so that one a restart
    broke is replaced instead of costing an attempt. A connection is
    waited for no longer than the delivery's ``retry_seconds`` allow,
    whatever the pool's own timeout.
    """

    def __init__(self, pool: ConnectionPool, *, public_url: Optional[str] = None,
                 retry_seconds: float = flow.RETRY_SECONDS, inbox: Optional[bool] = None,
                 max_body: int = flow.MAX_BODY):
        self.pool, self.public_url, self.retry_seconds, self.inbox = pool, public_url, retry_seconds, inbox
        self.max_body = max_body

    def __call__(self, provider: str, headers: Mapping[str, str], body: bytes,
                 work: Callable[[psycopg.Connection, Delivery], Any], *, path: str = "") -> Answer:
        if len(body) > self.max_body:
            return Answer.too_large()
        call = flow.receive_call(provider, headers, body, url=flow.public_url(self.public_url, path),
                                 inbox=self.inbox, complete_on_commit=True, lease=None)
        deadline = flow.Deadline(self.retry_seconds)
        return flow.retrying(lambda: self._once(call, work, deadline), OUTAGE, deadline=deadline)

    def _once(self, call: tuple, work, deadline: flow.Deadline) -> Answer:
        with self.pool.connection(timeout=deadline.left()) as conn, conn.transaction():
            return flow.deliver(lambda sql, p: conn.execute(sql, p, prepare=False).fetchone(), conn.transaction, call,
                                lambda delivery: work(conn, delivery), OUTAGE)


class AsyncHandler:
    """``Handler`` on an ``AsyncConnectionPool``; ``work`` is a coroutine
    function ``work(conn, delivery)``. A pool made with ``open=False`` (as
    an async pool must be outside a running loop) and not opened by the
    application is opened by the first delivery."""

    def __init__(self, pool: AsyncConnectionPool, *, public_url: Optional[str] = None,
                 retry_seconds: float = flow.RETRY_SECONDS, inbox: Optional[bool] = None,
                 max_body: int = flow.MAX_BODY):
        self.pool, self.public_url, self.retry_seconds, self.inbox = pool, public_url, retry_seconds, inbox
        self.max_body = max_body
        self._opening = asyncio.Lock()
        self._opened = False

    async def _open(self) -> None:
        async with self._opening:
            if not self._opened:
                if self.pool.closed:
                    await self.pool.open()
                self._opened = True

    async def __call__(self, provider: str, headers: Mapping[str, str], body: bytes,
                       work: Callable[[psycopg.AsyncConnection, Delivery], Awaitable[Any]], *,
                       path: str = "") -> Answer:
        if len(body) > self.max_body:
            return Answer.too_large()
        call = flow.receive_call(provider, headers, body, url=flow.public_url(self.public_url, path),
                                 inbox=self.inbox, complete_on_commit=True, lease=None)
        deadline = flow.Deadline(self.retry_seconds)
        return await flow.retrying_async(lambda: self._once(call, work, deadline), OUTAGE, deadline=deadline)

    async def _once(self, call: tuple, work, deadline: flow.Deadline) -> Answer:
        if not self._opened:
            await self._open()
        async with self.pool.connection(timeout=deadline.left()) as conn, conn.transaction():
            async def execute(sql, p):
                return await (await conn.execute(sql, p, prepare=False)).fetchone()
            return await flow.deliver_async(execute, conn.transaction, call,
                                            lambda delivery: work(conn, delivery), OUTAGE)
