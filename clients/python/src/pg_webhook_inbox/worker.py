"""The inbox's worker loop on psycopg 3: lease a batch with
``webhook_next``, work each event in a savepoint, finish the batch with one
``webhook_complete_batch`` in the same transaction as its work, so each
event's work commits exactly once.

- A failing event is recorded with ``webhook_fail`` (retried after the
  backoff) and undoes only its own work.
- A lease that ran out and was taken over refuses the batch (55006): its
  work rolls back, and the events are finished one transaction each so the
  others still commit.
- ``stop()`` (SIGTERM, SIGINT with ``handle_signals``): the event in hand
  is finished, the rest of the batch handed back at once.
- Anything else that goes wrong in an iteration (the database away, any
  database error, a bug): logged (logger ``pg_webhook_inbox``), counted
  (``errors``, ``consecutive_errors``, ``last_error``), passed to
  ``on_error``, and the loop goes on after a wait of 0.5 s doubling to 30 s,
  each drawn from its upper half so that workers one restart dropped do not
  all return at once. It never ends on its own: only ``stop()`` ends it.
  What a lost connection held rolled back with it; its leases run out and
  are taken again.
- Idle: LISTEN webhook_inbox wakes it as soon as something is queued
  (needs a direct or session-pooled connection; ``listen=False`` polls).
- Connections: from a conninfo string (opened without prepared
  statements), a function that returns a connection, or the application's
  ``ConnectionPool``. The package's statements are never prepared, so
  behind a transaction pooler (PgBouncer in transaction mode, Supavisor's
  or Neon's pooled endpoint) it works with ``listen=False``.
"""
from __future__ import annotations

import contextlib
import logging
import random
import signal
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, List, Optional, Union

import psycopg
import psycopg.errors
from psycopg_pool import ConnectionPool

from . import errors, statements

log = logging.getLogger("pg_webhook_inbox")

# Where the worker's connections come from.
Source = Union[str, Callable[[], psycopg.Connection], ConnectionPool]

RECONNECT_FIRST, RECONNECT_LAST = 0.5, 30.0


@dataclass(frozen=True)
class Event:
    """One leased inbox event (a row of ``webhook_next``). ``id`` is the lease."""

    id: uuid.UUID
    provider: str
    event_id: str
    event_type: Optional[str]
    payload: Any
    attempts: int
    consumer: str
    traceparent: Optional[str]
    origin: str

    @classmethod
    def from_row(cls, row) -> "Event":
        return cls(*row)


class Backoff:
    """Reconnect waits: doubling from 0.5 s to 30 s, each drawn from the
    upper half of its step, back to the first once a connection works."""

    def __init__(self, first: float = RECONNECT_FIRST, last: float = RECONNECT_LAST):
        self.first, self.last, self.step = first, last, first

    def connected(self) -> None:
        self.step = self.first

    def next(self) -> float:
        wait = random.uniform(self.step / 2, self.step)
        self.step = min(self.step * 2, self.last)
        return wait


class Worker:
    """``Worker(source, work).run()``: ``work(conn, event)`` for every
    event of ``consumer`` (optionally one ``provider``'s), until ``stop()``.
    ``work`` raising records a failure; its writes on ``conn`` commit with
    the event's completion.

    ``source``: a conninfo string, a function returning a new connection,
    or a ``ConnectionPool``. ``listen`` (LISTEN on a connection of its
    own) is on for a conninfo or a function, off for a pool."""

    def __init__(self, source: Source, work: Callable[[psycopg.Connection, Event], None], *,
                 consumer: str = "default", provider: Optional[str] = None, batch: int = 10,
                 lease: str = "1 minute", poll_seconds: float = 1.0, listen: Optional[bool] = None,
                 on_error: Callable[[BaseException], None] = lambda exc: None):
        self.source, self.work = source, work
        self.consumer, self.provider, self.batch, self.lease = consumer, provider, batch, lease
        self.poll_seconds, self.on_error = poll_seconds, on_error
        self.listen = not isinstance(source, ConnectionPool) if listen is None else listen
        if self.listen and isinstance(source, ConnectionPool):
            raise ValueError("listen=True needs a conninfo or a connection function, not a pool")
        self._stopping = threading.Event()
        self.backoff = Backoff()
        # For the application's metrics: a worker that keeps failing shows
        # here (and in the log), not as a process that is gone.
        self.errors = 0
        self.consecutive_errors = 0
        self.last_error: Optional[BaseException] = None

    @property
    def conninfo(self) -> Optional[str]:
        return self.source if isinstance(self.source, str) else None

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self, *_signal) -> None:
        self._stopping.set()

    def handle_signals(self) -> "Worker":
        """Stop on SIGTERM and SIGINT (main thread only)."""
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        return self

    def run(self) -> None:
        """Work until ``stop()``; nothing else ends it."""
        while not self.stopping:
            try:
                self._run_connected()
            except Exception as exc:  # noqa: BLE001 - logged, counted, waited out
                self._failed(exc)
                self._stopping.wait(self.backoff.next())

    def _failed(self, exc: Exception) -> None:
        self.errors += 1
        self.consecutive_errors += 1
        self.last_error = exc
        if errors.connection_lost(exc):
            log.warning("inbox worker: the database is away (%s); trying again", exc)
        else:
            log.error("inbox worker: an iteration failed (%s error %d in a row); trying again",
                      type(exc).__name__, self.consecutive_errors, exc_info=exc)
        try:
            self.on_error(exc)
        except Exception:  # noqa: BLE001 - the application's callback must not end the loop
            log.exception("inbox worker: on_error raised")

    def _connection(self) -> ContextManager[psycopg.Connection]:
        source = self.source
        if isinstance(source, ConnectionPool):
            return source.connection()
        if isinstance(source, str):
            return psycopg.connect(source, prepare_threshold=None)
        return contextlib.closing(source())

    def _listener(self) -> Optional[psycopg.Connection]:
        if not self.listen:
            return None
        conn = (psycopg.connect(self.source, autocommit=True) if isinstance(self.source, str)
                else self.source())
        conn.autocommit = True
        return conn

    def _run_connected(self) -> None:
        with self._connection() as conn:
            listener = self._listener()
            try:
                if listener is not None:
                    listener.execute(statements.LISTEN)
                while not self.stopping:
                    leased = self.run_once(conn)
                    self.backoff.connected()
                    self.consecutive_errors = 0
                    if leased == 0:
                        self._idle(listener)
            finally:
                if listener is not None:
                    listener.close()

    def _idle(self, listener: Optional[psycopg.Connection]) -> None:
        if listener is None:
            self._stopping.wait(self.poll_seconds)
            return
        for _ in listener.notifies(timeout=self.poll_seconds, stop_after=1):
            pass

    def run_once(self, conn: psycopg.Connection) -> int:
        """One batch on ``conn``; returns how many events were leased.
        The lease commits on its own, so operators see the events leased."""
        with conn.transaction():
            rows = conn.execute(statements.NEXT, (self.batch, self.consumer, self.provider, self.lease),
                                prepare=False).fetchall()
        events = [Event.from_row(row) for row in rows]
        try:
            self._finish(conn, events)
        except psycopg.errors.ObjectInUse:
            for event in events:
                try:
                    self._finish(conn, [event])
                except psycopg.errors.ObjectInUse:
                    continue  # taken over: its work rolled back, the new holder finishes it
        return len(events)

    def _finish(self, conn: psycopg.Connection, events: List[Event]) -> None:
        with conn.transaction():
            done = []
            for event in events:
                if self.stopping:
                    conn.execute(statements.HAND_BACK, (event.id,), prepare=False)
                    continue
                try:
                    with conn.transaction():  # a savepoint: a failure undoes this event's work only
                        self.work(conn, event)
                    done.append(event.id)
                except (psycopg.OperationalError, psycopg.InterfaceError):
                    raise
                except Exception as exc:  # noqa: BLE001 - recorded, retried after the backoff
                    self.on_error(exc)
                    conn.execute(statements.FAIL, (event.id, str(exc) or type(exc).__name__), prepare=False)
            if done:
                conn.execute(statements.COMPLETE_BATCH, (done,), prepare=False)


def outbound_key(conn: psycopg.Connection, lease: uuid.UUID, operation: str) -> str:
    """The Idempotency-Key to send with a side effect of this event: the
    same on every attempt, whichever lease runs it."""
    return conn.execute(statements.OUTBOUND_KEY, (lease, operation), prepare=False).fetchone()[0]


