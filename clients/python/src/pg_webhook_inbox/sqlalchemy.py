"""SQLAlchemy 2 sessions: ``receive`` in a session's transaction, and
``SessionHandler``, which opens one per delivery.

    with Session() as session, session.begin():
        delivery = receive(session, "stripe", headers, body, complete_on_commit=True)
        if delivery.owns_event:
            session.add(Order(event_id=delivery.event_id))
    # after the commit: send delivery.answer()
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session, sessionmaker

from . import flow
from .delivery import Answer, Delivery

OUTAGE: flow.Errors = (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError)


def _execute(session: Session):
    def execute(sql: str, params: tuple):
        return session.connection().exec_driver_sql(sql, params).fetchone()
    return execute


def receive(session: Session, provider: str, headers: Mapping[str, str], body: bytes, *,
            url: Optional[str] = None, inbox: Optional[bool] = None, complete_on_commit: bool = False,
            lease: Optional[str] = None) -> Delivery:
    """``webhook_receive`` in the session's transaction (the psycopg or
    psycopg2 dialect)."""
    sql, params = flow.receive_call(provider, headers, body, url=url, inbox=inbox,
                                    complete_on_commit=complete_on_commit, lease=lease)
    try:
        return Delivery.from_row(_execute(session)(sql, params))
    except sa_exc.DBAPIError as exc:
        raise flow.refused(provider, exc) from exc


class SessionHandler:
    """Handles each delivery in a session of its own from ``sessions``;
    ``work(session, delivery)`` runs in a nested transaction (a savepoint)."""

    def __init__(self, sessions: sessionmaker, *, public_url: Optional[str] = None,
                 retry_seconds: float = flow.RETRY_SECONDS, inbox: Optional[bool] = None,
                 max_body: int = flow.MAX_BODY):
        self.sessions, self.public_url, self.retry_seconds, self.inbox = sessions, public_url, retry_seconds, inbox
        self.max_body = max_body

    def __call__(self, provider: str, headers: Mapping[str, str], body: bytes,
                 work: Callable[[Session, Delivery], Any], *, path: str = "") -> Answer:
        if len(body) > self.max_body:
            return Answer.too_large()
        call = flow.receive_call(provider, headers, body, url=flow.public_url(self.public_url, path),
                                 inbox=self.inbox, complete_on_commit=True, lease=None)
        return flow.retrying(lambda: self._once(call, work), OUTAGE, self.retry_seconds)

    def _once(self, call: tuple, work) -> Answer:
        with self.sessions() as session, session.begin():
            return flow.deliver(_execute(session), session.begin_nested, call,
                                lambda delivery: work(session, delivery), OUTAGE)
