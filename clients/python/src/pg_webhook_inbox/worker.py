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
- The database away: reconnect, waiting 0.5 s doubling to 30 s, each wait
  drawn from its upper half so that workers one restart dropped do not all
  return at once. What the lost connection held rolled back with it; its
  leases run out and are taken again.
- Idle: LISTEN webhook_inbox wakes it as soon as something is queued
  (needs a direct or session-pooled connection; ``listen=False`` polls).
"""
from __future__ import annotations

import random
import signal
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Callable, List, Optional

import psycopg
import psycopg.errors

from . import statements

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
    """``Worker(conninfo, work).run()``: ``work(conn, event)`` for every
    event of ``consumer`` (optionally one ``provider``'s), until ``stop()``.
    ``work`` raising records a failure; its writes on ``conn`` commit with
    the event's completion."""

    def __init__(self, conninfo: str, work: Callable[[psycopg.Connection, Event], None], *,
                 consumer: str = "default", provider: Optional[str] = None, batch: int = 10,
                 lease: str = "1 minute", poll_seconds: float = 1.0, listen: bool = True,
                 on_error: Callable[[BaseException], None] = lambda exc: None):
        self.conninfo, self.work = conninfo, work
        self.consumer, self.provider, self.batch, self.lease = consumer, provider, batch, lease
        self.poll_seconds, self.listen, self.on_error = poll_seconds, listen, on_error
        self._stopping = threading.Event()
        self.backoff = Backoff()

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
        while not self.stopping:
            try:
                self._run_connected()
            except psycopg.OperationalError as exc:
                self.on_error(exc)
                self._stopping.wait(self.backoff.next())

    def _run_connected(self) -> None:
        with psycopg.connect(self.conninfo) as conn:
            listener = psycopg.connect(self.conninfo, autocommit=True) if self.listen else None
            try:
                if listener is not None:
                    listener.execute(statements.LISTEN)
                self.backoff.connected()
                while not self.stopping:
                    if self.run_once(conn) == 0:
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
            rows = conn.execute(statements.NEXT, (self.batch, self.consumer, self.provider, self.lease)).fetchall()
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
                    conn.execute(statements.HAND_BACK, (event.id,))
                    continue
                try:
                    with conn.transaction():  # a savepoint: a failure undoes this event's work only
                        self.work(conn, event)
                    done.append(event.id)
                except (psycopg.OperationalError, psycopg.InterfaceError):
                    raise
                except Exception as exc:  # noqa: BLE001 - recorded, retried after the backoff
                    self.on_error(exc)
                    conn.execute(statements.FAIL, (event.id, str(exc) or type(exc).__name__))
            if done:
                conn.execute(statements.COMPLETE_BATCH, (done,))


def outbound_key(conn: psycopg.Connection, lease: uuid.UUID, operation: str) -> str:
    """The Idempotency-Key to send with a side effect of this event: the
    same on every attempt, whichever lease runs it."""
    return conn.execute(statements.OUTBOUND_KEY, (lease, operation)).fetchone()[0]


