"""Flask: a view for ``/webhooks/<provider>`` on a ``Handler`` (psycopg
pool) or a ``SessionHandler`` (SQLAlchemy, Flask-SQLAlchemy's session
factory included).

    app.add_url_rule("/webhooks/<provider>", view_func=webhook_view(Handler(pool), work),
                     methods=["POST"])
"""
from __future__ import annotations

from typing import Any, Callable

from flask import Response, request

from . import flow
from .delivery import Answer
from .errors import PayloadTooLarge


def response(answer: Answer) -> Response:
    return Response(answer.body, status=answer.status, content_type=answer.content_type,
                    headers=dict(answer.headers))


def webhook_view(handler: Callable[..., Answer], work: Callable[..., Any], endpoint: str = "webhook"):
    def view(provider: str) -> Response:
        # The raw bytes, before any form or JSON parsing, up to the
        # handler's max_body (10 MiB): a larger body is answered 413.
        try:
            body = flow.read_body(request.headers.get("Content-Length"), request.stream.read,
                                  getattr(handler, "max_body", flow.MAX_BODY))
        except PayloadTooLarge:
            return response(Answer.too_large())
        query = request.query_string.decode("latin-1")
        path = request.path + (f"?{query}" if query else "")
        return response(handler(provider, request.headers, body, work, path=path))

    view.__name__ = endpoint
    return view
