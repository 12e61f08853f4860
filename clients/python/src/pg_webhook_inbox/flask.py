"""Flask: a view for ``/webhooks/<provider>`` on a ``Handler`` (psycopg
pool) or a ``SessionHandler`` (SQLAlchemy, Flask-SQLAlchemy's session
factory included).

    app.add_url_rule("/webhooks/<provider>", view_func=webhook_view(Handler(pool), work),
                     methods=["POST"])
"""
from __future__ import annotations

from typing import Any, Callable

from flask import Response, request

from .delivery import Answer


def response(answer: Answer) -> Response:
    return Response(answer.body, status=answer.status, content_type=answer.content_type,
                    headers=dict(answer.headers))


def webhook_view(handler: Callable[..., Answer], work: Callable[..., Any], endpoint: str = "webhook"):
    def view(provider: str) -> Response:
        body = request.get_data()  # the raw bytes, before any form or JSON parsing
        query = request.query_string.decode("latin-1")
        path = request.path + (f"?{query}" if query else "")
        return response(handler(provider, request.headers, body, work, path=path))

    view.__name__ = endpoint
    return view
