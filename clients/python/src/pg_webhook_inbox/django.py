"""Django: a view for ``path("webhooks/<str:provider>", webhook_view(work))``.

The claim is made in Django's own transaction on the ``using`` database
(``transaction.atomic``), so ``work(delivery)`` writes with the ORM and
those writes commit with the event's completion, or roll back with it.
Works on Django's PostgreSQL backend with psycopg 3 or psycopg2.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, connections, transaction
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from . import flow
from .delivery import Answer, Delivery
from .errors import PayloadTooLarge

OUTAGE: flow.Errors = (OperationalError, InterfaceError)


def response(answer: Answer) -> HttpResponse:
    return HttpResponse(answer.body, status=answer.status, content_type=answer.content_type,
                        headers=dict(answer.headers))


def webhook_view(work: Callable[[Delivery], Any], *, using: str = DEFAULT_DB_ALIAS,
                 public_url: Optional[str] = None, retry_seconds: float = flow.RETRY_SECONDS,
                 inbox: Optional[bool] = None, max_body: int = flow.MAX_BODY):
    """``work(delivery)`` runs in a savepoint of the delivery's transaction;
    what it returns (JSON-able, optional) is stored for duplicates. The
    body is read up to ``max_body`` (10 MiB), a larger one answered 413.
    Connections are Django's: give the database a ``connect_timeout``
    under ``retry_seconds`` so that an outage is answered 503 in time."""

    @csrf_exempt
    @require_POST
    def view(request: HttpRequest, provider: str) -> HttpResponse:
        try:
            body = flow.read_body(request.META.get("CONTENT_LENGTH") or None, request.read, max_body)
        except PayloadTooLarge:
            return response(Answer.too_large())
        call = flow.receive_call(provider, request.headers, body,
                                 url=flow.public_url(public_url, request.get_full_path()),
                                     inbox=inbox, complete_on_commit=True, lease=None)

        def once() -> Answer:
            with transaction.atomic(using=using), connections[using].cursor() as cursor:
                def execute(sql, args):
                    cursor.execute(sql, args)
                    return cursor.fetchone()
                return flow.deliver(execute, lambda: transaction.atomic(using=using), call, work, OUTAGE)

        def drop_connection(_exc):
            # A connection the database cut is closed, so the next attempt opens a new one.
            connections[using].close()

        return response(flow.retrying(once, OUTAGE, retry_seconds, on_outage=drop_connection))

    return view
